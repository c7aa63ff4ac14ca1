"""Reading a detect body: content type, size, JSON syntax, nesting and size limits.

These checks run before the core's item validation (`parse_items`) so that hostile bodies are
refused cheaply with the right status: 415 wrong content type, 413 too big, 400 not JSON.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from assay.server.errors import ServerError
from assay.server.settings import ServerSettings

_TEXT_FIELDS = ("generated_text", "user_query")


def _is_json(content_type: str | None) -> bool:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


async def read_json_body(request: Request, settings: ServerSettings) -> Any:
    """The request's JSON value, refusing wrong types, oversized and malformed bodies."""
    if not _is_json(request.headers.get("content-type")):
        got = request.headers.get("content-type") or "none"
        raise ServerError(415, f"Content-Type must be application/json, got {got}")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > settings.max_body_bytes:
        raise ServerError(413, _too_big(int(declared), settings))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > settings.max_body_bytes:  # stop reading: a lying Content-Length or chunked body
            raise ServerError(413, _too_big(size, settings))
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise ServerError(400, "body is empty; send a JSON array of request items")
    try:
        value = json.loads(raw)
    except UnicodeDecodeError:
        raise ServerError(400, "body is not valid UTF-8 JSON") from None
    except json.JSONDecodeError as error:
        raise ServerError(
            400, f"body is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise ServerError(400, _too_deep(settings)) from None
    if _depth(value) > settings.max_json_depth:
        raise ServerError(400, _too_deep(settings))
    return value


def _too_big(size: int, settings: ServerSettings) -> str:
    return f"body is {size} bytes or more; the limit is {settings.max_body_bytes} bytes"


def _too_deep(settings: ServerSettings) -> str:
    return f"body is nested too deeply; the limit is {settings.max_json_depth} levels"


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


def check_limits(body: Any, settings: ServerSettings) -> None:
    """413 when the batch has too many items or a text is too long (naming the field)."""
    items = body if isinstance(body, list) else [body]
    if len(items) > settings.max_batch_items:
        raise ServerError(
            413, f"body: {len(items)} items; the limit is {settings.max_batch_items} per request"
        )
    limit = settings.max_text_chars
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue  # the core's validation names that problem
        for name in _TEXT_FIELDS:
            text = item.get(name)
            if isinstance(text, str) and len(text) > limit:
                raise ServerError(
                    413, f"[{index}].{name}: {len(text)} characters; the limit is {limit}"
                )
        context = item.get("context")
        documents = [context] if isinstance(context, str) else context
        if isinstance(documents, list):
            total = sum(len(doc) for doc in documents if isinstance(doc, str))
            if total > limit:
                raise ServerError(
                    413, f"[{index}].context: {total} characters in total; the limit is {limit}"
                )
