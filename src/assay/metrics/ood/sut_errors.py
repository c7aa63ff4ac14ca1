"""How the system under test failed, and what the shape of a reply it gave says about how to
call it instead (the adapter kind, or the reply path)."""

from __future__ import annotations

from typing import Any


class SUTError(Exception):
    """The system under test could not be reached or gave no usable reply.

    kind: "timeout", "rate_limited", "transport" or "bad_output" (the LLM layer's kinds).
    retry_after: seconds the SUT asked to wait before another try, if it said.
    hint: when the reply's shape suggests the other adapter kind (or another reply path), how
        to call this system instead.
    """

    def __init__(
        self,
        message: str,
        kind: str = "transport",
        retry_after: float | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after
        self.hint = hint


def string_paths(document: Any, prefix: str = "", limit: int = 5) -> list[str]:
    """Dotted paths of the string values in a parsed JSON document (at most `limit`), for
    suggesting a `reply_path`."""
    found: list[str] = []
    items: list[tuple[str, Any]] = []
    if isinstance(document, dict):
        items = [(f"{prefix}{key}", value) for key, value in document.items()]
    elif isinstance(document, list):
        items = [(f"{prefix}{index}", value) for index, value in enumerate(document[:3])]
    for path, value in items:
        if isinstance(value, str):
            found.append(path)
        else:
            found.extend(string_paths(value, f"{path}.", limit))
        if len(found) >= limit:
            break
    return found[:limit]


def setting(key: str, value: str) -> str:
    """A system-under-test option as a hint names it: the key, and how to set it both in
    `assay ood` (a flag) and in `assay run --metric`'s config (the `sut:` block)."""
    flag = {"kind": "--sut-kind", "reply_path": "--reply-path"}[key]
    return f"{key} {value!r} ({flag} {value} for assay ood, sut.{key} in a run config)"


def http_kind_hint(document: Any) -> str:
    """What to say when an OpenAI-kind call got JSON that is not a chat completion."""
    paths = string_paths(document)
    where = f" with {setting('reply_path', paths[0])}" if paths else ""
    return (
        "the reply is not an OpenAI chat completion; for a plain JSON endpoint use "
        f"{setting('kind', 'http')}{where}"
    )


#: What to say when an openai-kind call got a body that is not JSON (an HTML page, say).
OPENAI_API_ROOT_HINT = (
    "an OpenAI-compatible API answers in JSON: check that the URL is its API root "
    "(e.g. http://host/v1)"
)

#: What to say when an http-kind call got an OpenAI chat completion.
OPENAI_KIND_HINT = (
    f"the reply is an OpenAI chat completion: use {setting('kind', 'openai')} with the API root "
    "as the URL (e.g. http://host/v1), or reply_path 'choices.0.message.content'"
)


def reply_at(document: Any, path: str) -> str:
    """The string at dotted `path` in a parsed JSON document ("choices.0.message.content").

    document: the parsed JSON.
    path: dot-separated keys; integer parts index lists.
    """
    node = document
    for part in path.split(".") if path else []:
        if (
            isinstance(node, list)
            and part.lstrip("-").isdigit()
            and -len(node) <= int(part) < len(node)
        ):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise SUTError(
                f"reply path {path!r} not found in the response (stopped at {part!r})",
                "bad_output",
            )
    if not isinstance(node, str):
        raise SUTError(
            f"reply path {path!r} holds {type(node).__name__}, not a string", "bad_output"
        )
    return node
