"""Reading a detect body: content type, size, time, JSON syntax, nesting and size limits.

These checks run before the core's item validation (`parse_items`) so that hostile bodies are
refused cheaply with the right status: 415 wrong content type, charset or content encoding
(compression), 413 too big, 408 too
slow, 400 not acceptable JSON.

What "JSON" means here is stricter than Python's `json` module: the body must be UTF-8 (the
module would also take UTF-16 and UTF-32), and `NaN`/`Infinity`, numbers beyond what every JSON
parser reads exactly (integers beyond ±(2**53 - 1), floats that overflow) and objects with a
repeated key are refused, because other parsers read them differently or not at all.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect

from assay.schema import MAX_CONTEXT_DOCUMENTS, looks_wide
from assay.server.errors import ServerError
from assay.server.settings import ServerSettings

_TEXT_FIELDS = ("generated_text", "user_query")
#: Largest integer every JSON parser reads exactly (IEEE-754 doubles).
MAX_SAFE_INTEGER = 2**53 - 1


class _UnacceptableJSON(ValueError):
    """Valid JSON syntax that the server refuses (see the module docstring)."""


def _is_json(content_type: str | None) -> bool:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _charset(content_type: str) -> str | None:
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


async def read_json_body(
    request: Request, settings: ServerSettings, expected: str = "a JSON array of request items"
) -> Any:
    """The request's JSON value, refusing wrong types, oversized, slow and malformed bodies.

    expected: what the route takes, for the message about an empty body."""
    content_type = request.headers.get("content-type")
    if not _is_json(content_type):
        got = content_type or "none"
        raise ServerError(415, f"Content-Type must be application/json, got {got}")
    charset = _charset(content_type or "")
    if charset not in (None, "utf-8", "utf8"):
        raise ServerError(415, f"Content-Type charset must be utf-8, got {charset}")
    # A compressed body would otherwise be read as (broken) text and misdiagnosed.
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ServerError(415, f"Content-Encoding {encoding} is not supported; send the body plain")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > settings.max_body_bytes:
        raise ServerError(413, _too_big(int(declared), settings))
    raw = await _read_within_time(request, settings)
    if not raw.strip():
        raise ServerError(400, f"body is empty; send {expected}")
    return parse_json(raw, settings.max_json_depth)


async def _read_within_time(request: Request, settings: ServerSettings) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(settings.body_timeout_seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > settings.max_body_bytes:  # stop reading: a lying length or chunked body
                    raise ServerError(413, _too_big(size, settings))
                chunks.append(chunk)
    except ClientDisconnect:
        # Nobody is left to answer; a quiet 400, not an unhandled error with two tracebacks
        # in the log for every client that drops its connection.
        raise ServerError(
            400, f"the client left before sending the whole body ({size} bytes arrived)"
        ) from None
    except TimeoutError:
        raise ServerError(
            408,
            f"body not received within {settings.body_timeout_seconds:g} s "
            f"({size} bytes arrived); send the whole body at once",
            {"connection": "close"},
        ) from None
    return b"".join(chunks)


def parse_json(raw: bytes, max_depth: int) -> Any:
    """Parse a body as strict UTF-8 JSON (see the module docstring); ServerError 400 if not."""
    if looks_wide(raw):
        raise ServerError(400, "body is not valid UTF-8 JSON (it looks like UTF-16 or UTF-32)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ServerError(
            400, f"body is not valid UTF-8 JSON: bad byte at offset {error.start}"
        ) from None
    try:
        value = json.loads(
            text.removeprefix("\ufeff"),
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_int=_integer,
            parse_float=_float,
        )
    except json.JSONDecodeError as error:
        raise ServerError(
            400, f"body is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except _UnacceptableJSON as error:
        raise ServerError(400, f"body: {error}") from None
    except RecursionError:
        raise ServerError(400, _too_deep(max_depth)) from None
    if _depth(value) > max_depth:
        raise ServerError(400, _too_deep(max_depth))
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            shown = key if len(key) <= 60 else key[:60] + "…"
            shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")
            raise _UnacceptableJSON(f"key {shown!r} appears twice in one object; give each once")
        seen.add(key)
    return value


def _constant(name: str) -> Any:
    raise _UnacceptableJSON(f"{name} is not a JSON number; send a number or null")


def _integer(digits: str) -> int:
    # Checked on the text first: Python refuses to convert more than 4300 digits at all.
    if len(digits.lstrip("-")) > 16 or abs(int(digits)) > MAX_SAFE_INTEGER:
        shown = digits if len(digits) <= 30 else f"{digits[:20]}… ({len(digits)} digits)"
        raise _UnacceptableJSON(
            f"integer {shown} is outside the range JSON parsers read exactly (±{MAX_SAFE_INTEGER})"
        )
    return int(digits)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 30 else f"{text[:20]}… ({len(text)} characters)"
        raise _UnacceptableJSON(f"number {shown} is too large for a 64-bit float")
    return value


def _too_big(size: int, settings: ServerSettings) -> str:
    return f"body is {size} bytes or more; the limit is {settings.max_body_bytes} bytes"


def _too_deep(max_depth: int) -> str:
    return f"body is nested too deeply; the limit is {max_depth} levels"


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, computed without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node)
    return deepest


def check_limits(body: Any, settings: ServerSettings, where: str = "body") -> None:
    """413 when the batch has too many items or a text is too long (naming the field).

    where: what holds the items, for messages ("body" for /v2/detect, "items" for publish)."""
    items = body if isinstance(body, list) else [body]
    if len(items) > settings.max_batch_items:
        raise ServerError(
            413, f"{where}: {len(items)} items; the limit is {settings.max_batch_items} per request"
        )
    prefix = "" if where == "body" else where
    limit = settings.max_text_chars
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue  # the core's validation names that problem
        for name in _TEXT_FIELDS:
            text = item.get(name)
            if isinstance(text, str) and len(text) > limit:
                raise ServerError(
                    413, f"{prefix}[{index}].{name}: {len(text)} characters; the limit is {limit}"
                )
        context = item.get("context")
        documents = [context] if isinstance(context, str) else context
        if isinstance(documents, list):
            if len(documents) > MAX_CONTEXT_DOCUMENTS:
                raise ServerError(
                    413,
                    f"{prefix}[{index}].context: {len(documents)} documents; "
                    f"the limit is {MAX_CONTEXT_DOCUMENTS}",
                )
            total = sum(len(doc) for doc in documents if isinstance(doc, str))
            if total > limit:
                raise ServerError(
                    413,
                    f"{prefix}[{index}].context: {total} characters in total; the limit is {limit}",
                )
