"""Read what a system prompt allows and forbids from its markdown layout.

Real system prompts (the profile's `system_prompt`) often list scope under headings such as
"Primary Role" or "Allowed Behavior" and limits under "Forbidden Behavior", as bullet points.
This module reads those bullets; "Do NOT ..." bullets count as forbidden wherever they stand.
It is a heuristic for the offline scope judge, never a parser the user has to satisfy: a prompt
written as prose simply yields nothing here, and the judge falls back on the prose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING = re.compile(r"^\s*(?:#{1,6}\s*|\*\*)(?P<title>[^*#].{0,78}?)(?:\*\*)?\s*:?\s*$")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(?P<item>.*\S)\s*$")
_ALLOWED_HEADING = re.compile(
    r"primary role|allowed|responsibilit|capabilit|what you (?:can )?do|you can|scope|purpose|"
    r"tasks|services",
    re.IGNORECASE,
)
_FORBIDDEN_HEADING = re.compile(
    r"forbidden|not allowed|prohibit|restrict|do not|don.t|never|limitation|out of scope|must not",
    re.IGNORECASE,
)
_NEGATED = re.compile(r"^(?:do not|don.t|never|must not|you must not|avoid)\b[:\s]*", re.IGNORECASE)
_MARKUP = re.compile(r"[*_`#>]+")
# Emoji and other pictographs carry no scope and only disturb the embeddings.
_SYMBOLS = re.compile(r"[^\w\s,;:.()/'\"&+-]")


@dataclass(frozen=True)
class PromptSections:
    """Bullet points of a system prompt, sorted by what their section says.

    allowed: bullets under headings that describe the role, scope or allowed behaviour.
    forbidden: bullets under headings that forbid, and every "Do NOT ..." bullet (without the
        "Do NOT").
    """

    allowed: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()


def _clean(text: str) -> str:
    text = _SYMBOLS.sub("", _MARKUP.sub("", text))
    return re.sub(r"\s+", " ", text).strip(" .;:-")


def read_sections(prompt: str) -> PromptSections:
    """The allowed and forbidden bullets of `prompt` (empty when it has no such layout)."""
    allowed: list[str] = []
    forbidden: list[str] = []
    section: str | None = None
    for line in prompt.splitlines():
        bullet = _BULLET.match(line)
        if bullet is None:
            heading = _HEADING.match(line)
            if heading is not None:
                title = heading.group("title")
                if _FORBIDDEN_HEADING.search(title):
                    section = "forbidden"
                elif _ALLOWED_HEADING.search(title):
                    section = "allowed"
                else:
                    section = None
            continue
        item = _clean(bullet.group("item"))
        if not item:
            continue
        if _NEGATED.match(item):
            forbidden.append(_NEGATED.sub("", item))
        elif section == "forbidden":
            forbidden.append(item)
        elif section == "allowed":
            allowed.append(item)
    return PromptSections(tuple(dict.fromkeys(allowed)), tuple(dict.fromkeys(forbidden)))
