"""The use-case profile: what the system under test is for, as a string-to-string mapping.

Recognised keys (all optional except that the profile must say something):
  name               short name of the application ("Retail-bank customer assistant")
  description        what it does, in prose; lists after "help with:" are split into topics
  allowed_topics     topics it may answer, separated by newlines, ";" or ","
  disallowed_topics  topics it must decline although they sit close to its field, same format
  examples           example in-scope user questions, one per line
  system_prompt      the application's system prompt, if it has one; bullets under headings
                     such as "Primary Role"/"Allowed" add topics, "Forbidden"/"Do NOT" bullets
                     add disallowed topics (`prompt_sections.py`)
  refusal_message    the text it uses to decline: a reply that is mostly it is a refusal, in
                     any language (the offline refusal judge otherwise reads English only)
Any other keys are kept and shown to the LLM generator/judge, but not used offline; each gets a
warning naming it (with the key it was likely meant for, when it is a near miss).
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from assay.metrics.ood.language import not_english
from assay.metrics.ood.prompt_sections import read_sections
from assay.schema import RequestValidationError, unique_keys

#: Keys whose text describes scope; used offline to build the profile's reference texts.
SCOPE_KEYS = ("name", "description", "allowed_topics", "examples", "system_prompt")
#: Every key a profile documents (a profile may hold others, with a warning).
KNOWN_KEYS = (*SCOPE_KEYS, "disallowed_topics", "refusal_message")
#: Words in other names for a known key, tried in order ("forbidden_topics", "blocked",
#: "topics"), where the spelling is too far from it for a near-miss match.
_MEANT = {
    "forbid": "disallowed_topics",
    "block": "disallowed_topics",
    "deny": "disallowed_topics",
    "exclu": "disallowed_topics",
    "out_of_scope": "disallowed_topics",
    "topic": "allowed_topics",
    "scope": "allowed_topics",
    "capabilit": "allowed_topics",
    "question": "examples",
    "sample": "examples",
    "refus": "refusal_message",
}

logger = logging.getLogger(__name__)
#: "You are X, a ... assistant that ..." opens most system prompts: the role in one sentence.
_ROLE = re.compile(r"\byou are\s+(.{10,400}?)(?:\.\s|\.$|\n)", re.IGNORECASE)
#: List items end at line breaks and semicolons. Inside an item a comma mostly separates too
#: ("cards, balances"), but may join words that share a head noun ("legal, financial or medical
#: translation"), so such an item counts both ways: as its comma-separated pieces and whole.
_ITEM_SPLIT = re.compile(r"\s*[\n;]\s*")
_COMMA_SPLIT = re.compile(r"\s*,\s*")
# A list of what the application covers, introduced by a colon after a word that says so
# ("It can help with: a; b; c." / "Answers cooking questions: x, y, z.").
_HELP_WITH = re.compile(
    r"\b(?:help|assist|answer|question|topic|support|cover|handle)\w*[^:.\n]{0,40}:"
    r"\s*([^:]+?)(?:\.\s|\.$|$)",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class UseCaseProfile:
    """A validated use-case profile.

    fields: the profile mapping as given (string keys and string values).
    """

    fields: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.fields.get("name", "the application")

    def topics(self) -> list[str]:
        """Short in-scope topic phrases: `allowed_topics`, any list after "help with:", and the
        bullets of the system prompt's role or allowed sections."""
        found = _split(self.fields.get("allowed_topics", ""))
        for key in ("description", "system_prompt"):
            for match in _HELP_WITH.finditer(self.fields.get(key, "")):
                found.extend(_split(match.group(1)))
        found.extend(read_sections(self.fields.get("system_prompt", "")).allowed)
        return _unique(found)

    def disallowed(self) -> list[str]:
        """Topics the application must decline: `disallowed_topics` and the system prompt's
        forbidden bullets."""
        found = _split(self.fields.get("disallowed_topics", ""))
        found.extend(read_sections(self.fields.get("system_prompt", "")).forbidden)
        return _unique(found)

    def examples(self) -> list[str]:
        """In-scope example questions, one per line of `examples`."""
        return [
            line.strip() for line in self.fields.get("examples", "").splitlines() if line.strip()
        ]

    def summary_texts(self) -> list[str]:
        """The profile's prose: the description without its topic list, and the role sentence
        of the system prompt ("You are ..."); the name when there is neither."""
        prose = []
        description = self.fields.get("description", "").strip()
        if description:
            prose.append(_HELP_WITH.sub("", description).strip() or description)
        role = _ROLE.search(self.fields.get("system_prompt", "").replace("*", ""))
        if role:
            prose.append(role.group(1).strip())
        return prose or self.reference_texts()[:1]

    def reference_texts(self) -> list[str]:
        """Texts that stand for the scope when embedding: the description, topics, examples."""
        texts = [
            self.fields[key].strip()
            for key in ("description", "system_prompt")
            if self.fields.get(key, "").strip()
        ]
        texts.extend(self.topics())
        texts.extend(self.examples())
        if not texts and self.fields.get("name", "").strip():
            texts.append(self.fields["name"].strip())
        return texts

    def as_prompt(self) -> str:
        """The profile as plain text for an LLM prompt or a system prompt."""
        return "\n".join(f"{key}: {value}" for key, value in self.fields.items())


def _split(text: str) -> list[str]:
    items = [item for item in _ITEM_SPLIT.split(text) if item]
    pieces = [piece for item in items for piece in _COMMA_SPLIT.split(item) if piece]
    # A list with no other separator is a plain comma list ("a, b, c"), not one phrase.
    whole = [item for item in items if "," in item] if len(items) > 1 else []
    return pieces + whole


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(item.strip(" .") for item in items if item.strip(" .")))


@functools.cache
def _warn_of_unknown_key(key: str) -> None:
    """Other keys are allowed (the published schema takes any), but the offline judge does not
    read them: a typo (`alowed_topics`) or a guess (`topics`, `forbidden_topics`) would silently
    drop that part of the profile. Say so, once, with the key a near miss was meant for."""
    if key in KNOWN_KEYS:
        return
    near = (
        difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.8)
        or [known for word, known in _MEANT.items() if word in key.lower()][:1]
    )
    meant = f": did you mean {near[0]!r}?" if near else " (only an LLM judge sees it, as text)."
    logger.warning("profile key %r is not read%s Known keys: %s", key, meant, ", ".join(KNOWN_KEYS))


def profile_from_mapping(values: Mapping[str, object], source: str = "use_case") -> UseCaseProfile:
    """Validate a profile mapping.

    values: the mapping (keys and values must be strings).
    source: what to call it in errors (a config field name or a file path).
    """
    if not isinstance(values, Mapping):
        raise RequestValidationError(source, "must be a mapping of strings to strings")
    cleaned: dict[str, str] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise RequestValidationError(
                f"{source}.{key}", f"must be a string (got {type(value).__name__})"
            )
        cleaned[key] = value
    for key in cleaned:
        _warn_of_unknown_key(key)
    profile = UseCaseProfile(cleaned)
    if not profile.reference_texts():
        raise RequestValidationError(
            source, f"says nothing about scope: give at least one of {', '.join(SCOPE_KEYS)}"
        )
    _warn_if_not_english(" ".join(profile.fields.get(key, "") for key in SCOPE_KEYS))
    return profile


@functools.cache
def _warn_if_not_english(prose: str) -> None:
    """`prose`: the profile's scope texts. Said once per profile text: a run reads its
    profile on several paths (config check, rows, scorer), and one warning is enough."""
    why = not_english(prose)
    if why:
        logger.warning(
            "the profile does not read as English (%s): the offline probe banks and judges read "
            "English, so its near-domain probes may not be about its field and replies in its "
            "language are not read as refusals. Set ASSAY_LLM_BASE_URL and ASSAY_LLM_MODEL to "
            "have an LLM write the probes and judge, or give refusal_message.",
            why,
        )


def load_profile(path: Path) -> UseCaseProfile:
    """Read a profile from a YAML or JSON file (a top-level mapping, or one under `use_case`).

    path: the file to read.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RequestValidationError(str(path), not_utf8(error)) from None
    except OSError as error:
        raise RequestValidationError(str(path), f"cannot read profile: {error.strerror}") from None
    try:
        data = parse_file_text(text, path)
    except (ValueError, yaml.YAMLError) as error:
        raise RequestValidationError(str(path), f"not valid YAML/JSON: {error}") from None
    if isinstance(data, dict) and isinstance(data.get("use_case"), dict):
        data = _under_use_case(data, path)
    if not isinstance(data, dict):
        raise RequestValidationError(str(path), "must hold a mapping of strings to strings")
    return profile_from_mapping(data, str(path))


def _under_use_case(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The profile of a file that holds it under `use_case` (a run config, say). A profile key
    beside `use_case` instead of under it is refused: it would be dropped in silence. Other
    keys (a run config's own) are not read here, and a warning says so."""
    beside = [key for key in data if key != "use_case"]
    misplaced = [str(key) for key in beside if key in KNOWN_KEYS]
    if misplaced:
        raise RequestValidationError(
            str(path),
            f"{', '.join(misplaced)}: beside use_case instead of under it, so not read; move "
            f"{'them' if len(misplaced) > 1 else 'it'} under use_case",
        )
    if beside:
        logger.warning(
            "%s: only use_case is read from this file as a profile (not %s); pass it with "
            "--config to use the rest",
            path,
            ", ".join(map(str, beside)),
        )
    profile: dict[str, Any] = data["use_case"]
    return profile


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that names a key twice (PyYAML keeps the last in
    silence: a profile with two `name:` lines lost the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears more than once", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_file_text(text: str, path: Path) -> Any:
    """A profile or config file's data: strict JSON for a `.json` file (YAML would pass a
    trailing comma), YAML otherwise; a key named twice in one mapping is refused. Raises
    json.JSONDecodeError, ValueError or yaml.YAMLError."""
    if path.suffix.lower() == ".json":
        return json.loads(text, object_pairs_hook=unique_keys)
    return load_yaml(text)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, refusing a key named twice in one mapping (yaml.YAMLError)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def not_utf8(error: UnicodeDecodeError) -> str:
    """What to say of a file that is not UTF-8 text (the decoder's own message is "utf-8")."""
    byte = error.object[error.start : error.start + 1].hex()
    return f"is not UTF-8 text (byte 0x{byte} at offset {error.start}); save it as UTF-8"
