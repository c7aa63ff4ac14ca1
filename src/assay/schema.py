"""Wire and data types shared by every part of Assay.

The request and result shapes follow AIMon's `POST /v2/detect` contract so that AIMon's SDK and
snippets work against Assay unchanged. Nothing here imports any other Assay module.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationInfo,
    field_validator,
)

#: Longest accepted text field, in characters. Longer texts are rejected, not truncated:
#: a silently truncated answer would be judged on text the caller never sees.
MAX_TEXT_CHARS = 100_000
#: Most context documents accepted in one item.
MAX_CONTEXT_DOCUMENTS = 200
#: Response header in which an Assay server gives its most items per request (`--max-batch-
#: items`), so that a publishing client can split its batches before it is refused.
BATCH_LIMIT_HEADER = "X-Assay-Max-Batch-Items"

#: Longest application, model or detector name, in characters. Enforced here, not left to the
#: database: SQLite ignores column lengths, and every stored row repeats these names.
MAX_NAME_CHARS = 100
#: Application names appear in URL paths (`/v1/applications/{name}`), so no `/`, `%`, spaces.
APPLICATION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
APPLICATION_NAME_RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit"
#: Model names are never in a path, so the separators of common model ids are allowed
#: (`meta-llama/Llama-3-8B`, `ollama:llama3`, `gpt-4o@2024-08-06`).
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"
MODEL_NAME_RULE = "letters, digits and . _ - : / @ +, starting with a letter or digit"

MustCompute = Literal["all_or_none", "ignore_failures"]


def check_name(value: str, pattern: str, rule: str) -> str:
    """`value` if it is a valid name under `pattern`; ValueError saying the rule otherwise."""
    if not 1 <= len(value) <= MAX_NAME_CHARS:
        raise ValueError(f"must be 1 to {MAX_NAME_CHARS} characters, got {len(value)}")
    if not re.fullmatch(pattern, value):
        raise ValueError(f"may hold only {rule}")
    return value


def find_unencodable(
    value: Any, json_only: bool = False
) -> tuple[tuple[int | str, ...], str] | None:
    """The location and description of the first string in `value` (nested dicts and lists,
    keys included) that cannot be encoded as UTF-8, i.e. holds a lone surrogate, or that holds
    a NUL character; None if none.

    JSON can carry such text as an escape (`"\\ud800"`, `"\\u0000"`); it validates as a `str`
    but a lone surrogate breaks every encoder (tokenizer, SQLite, HTTP body) it later reaches,
    and PostgreSQL cannot store a NUL: refused everywhere, results never depend on the database.

    json_only: also report the first value JSON cannot carry (bytes, a set, NaN, a non-text
    key), for a body about to be sent over HTTP.
    """
    stack: list[tuple[tuple[int | str, ...], Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            problem = _unencodable(node)
            if problem is not None:
                return path, problem
        elif isinstance(node, dict):
            for key in node:
                if isinstance(key, str) and (problem := _unencodable(key)) is not None:
                    return path, f"a key {problem}"
                if json_only and not isinstance(key, str):
                    return path, f"has a key that is not text ({type(key).__name__} {key!r})"
            stack.extend(((*path, key), child) for key, child in reversed(list(node.items())))
        elif isinstance(node, list | tuple):
            stack.extend(((*path, i), child) for i, child in reversed(list(enumerate(node))))
        elif json_only and (problem := _not_json(node)) is not None:
            return path, problem
    return None


class RepeatedKeyError(ValueError):
    """A JSON object names one key twice."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for `json.loads` that refuses a key named twice (RepeatedKeyError):
    json.loads keeps the last of repeated keys in silence."""
    found = dict(pairs)
    if len(found) < len(pairs):
        names = [key for key, _ in pairs]
        repeated = next(key for key in names if names.count(key) > 1)
        raise RepeatedKeyError(f"the key {repeated!r} appears more than once")
    return found


def _not_json(value: Any) -> str | None:
    """Why JSON cannot carry `value` (not text, a list or an object), or None."""
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"is {value}, which JSON cannot carry"
    return (
        f"must be text, a number, true/false, null, a list or an object, got {type(value).__name__}"
    )


def _unencodable(text: str) -> str | None:
    nul = text.find("\x00")
    if nul >= 0:
        return (
            f"holds a NUL character (U+0000 at character {nul}), which storage cannot keep; "
            "remove it"
        )
    return utf8_problem(text)


def looks_wide(start: bytes) -> bool:
    """Whether text that starts with these bytes looks like UTF-16 or UTF-32 (a byte-order mark,
    or a zero byte beside ASCII), which no UTF-8 JSON or CSV has."""
    return start[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in start[:4]


def utf8_problem(text: str) -> str | None:
    """What stops `text` being encoded as UTF-8 (a lone surrogate, or bytes that were not UTF-8
    read as surrogate escapes), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        return (
            f"holds a lone surrogate (U+{code:04X} at character {error.start}), which cannot be "
            "encoded as UTF-8; send valid Unicode text"
        )
    return None


class DetectorConfig(BaseModel):
    """Per-detector options inside a request item's `config`; unknown options are refused
    (a misspelt `explian` must not be ignored silently)."""

    model_config = ConfigDict(extra="forbid")

    #: AIMon's detectors have variants (e.g. "hall_v2"); these have one, so any other name is
    #: refused rather than answered by the default in silence. A string in the schema, not a
    #: literal, so that clients' types take a plain string variable.
    detector_name: StrictStr = Field(
        default="default",
        max_length=MAX_NAME_CHARS,
        description="Only 'default': these detectors have one variant.",
    )
    #: Explanations come by default, as in the published completeness example.
    explain: StrictBool = True
    judge: StrictStr | None = Field(
        default=None,
        max_length=MAX_NAME_CHARS,
        description="Judge backend for this detector; the run's default when unset.",
    )

    @field_validator("detector_name")
    @classmethod
    def _only_default(cls, value: str) -> str:
        if value != "default":
            raise ValueError(f"must be 'default' (these detectors have no variants), got {value!r}")
        return value


class DetectRequestItem(BaseModel):
    """One element of the JSON array posted to `/v2/detect`."""

    model_config = ConfigDict(extra="forbid")

    user_query: StrictStr | None = None
    context: StrictStr | list[StrictStr] | None = None
    generated_text: StrictStr
    config: dict[str, DetectorConfig] = Field(min_length=1)
    instructions: None = Field(
        default=None,
        description="Not supported: the detectors judge their own published instructions "
        "(GET /v1/detectors). Any value but null is refused.",
    )
    tool_trace: list[Any] | None = Field(
        default=None,
        description="Accepted for AIMon SDK requests that carry it; no detector here reads it.",
    )
    publish: StrictBool = False
    async_mode: StrictBool = False
    application_name: StrictStr | None = Field(
        default=None, max_length=MAX_NAME_CHARS, pattern=APPLICATION_NAME_PATTERN
    )
    model_name: StrictStr | None = Field(
        default=None, max_length=MAX_NAME_CHARS, pattern=MODEL_NAME_PATTERN
    )
    must_compute: MustCompute = "all_or_none"

    @field_validator("instructions", mode="before")
    @classmethod
    def _no_custom_instructions(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "custom instructions are not supported: each detector judges its own published "
                "instructions (see GET /v1/detectors or `assay detectors`); remove this field"
            )
        return None

    @field_validator("application_name", "model_name", mode="before")
    @classmethod
    def _name(cls, value: Any, info: ValidationInfo) -> Any:
        # Checked before the pattern constraint so the message says the rule, not a regex.
        if isinstance(value, str):
            if info.field_name == "application_name":
                check_name(value, APPLICATION_NAME_PATTERN, APPLICATION_NAME_RULE)
            else:
                check_name(value, MODEL_NAME_PATTERN, MODEL_NAME_RULE)
        return value

    @field_validator("generated_text", "user_query")
    @classmethod
    def _bounded_text(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_TEXT_CHARS:
            raise ValueError(f"text is {len(value)} characters; the limit is {MAX_TEXT_CHARS}")
        return value

    @field_validator("generated_text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("context")
    @classmethod
    def _bounded_context(cls, value: str | list[str] | None) -> str | list[str] | None:
        documents = [value] if isinstance(value, str) else (value or [])
        if len(documents) > MAX_CONTEXT_DOCUMENTS:
            raise ValueError(f"{len(documents)} documents; the limit is {MAX_CONTEXT_DOCUMENTS}")
        total = sum(len(d) for d in documents)
        if total > MAX_TEXT_CHARS:
            raise ValueError(f"{total} characters in total; the limit is {MAX_TEXT_CHARS}")
        return value

    def context_documents(self) -> list[str]:
        """The context as a list of non-blank documents."""
        documents = [self.context] if isinstance(self.context, str) else (self.context or [])
        return [d for d in documents if d.strip()]


#: Results are read back only when published (`POST /v1/applications/{name}/detections`):
#: exactly as Assay writes them, so a "1" for a score or a misspelt key is refused by name, not
#: converted or dropped in silence.
_EXACT = ConfigDict(extra="forbid", strict=True)


class InstructionResult(BaseModel):
    """One instruction's verdict, as it appears in `instructions_list`."""

    model_config = _EXACT

    explanation: str
    follow_probability: float = Field(ge=0.0, le=1.0)
    instruction: str
    label: bool


class DetectorResult(BaseModel):
    """One detector's result for one request item."""

    model_config = _EXACT

    instructions_list: list[InstructionResult]
    score: float = Field(ge=0.0, le=1.0)


class DetectorError(BaseModel):
    """Stands in for a result when a detector could not score an item (never a silent 0)."""

    model_config = _EXACT

    error: Literal[True] = True
    kind: str = Field(
        description="timeout, rate_limited, transport, bad_output, input_too_long, "
        "content_filtered, low_confidence_answer, judge_error, ..."
    )
    message: str


class PublishedItem(BaseModel):
    """One row scored elsewhere (`assay run --publish`), as sent to
    `POST /v1/applications/{name}/detections`."""

    model_config = ConfigDict(extra="forbid")

    key: StrictStr = Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="The row's identity within its run (the runner sends its row number); the "
        "same run_id and key are stored once however often they are sent.",
    )
    user_query: StrictStr | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    context: StrictStr | list[StrictStr] | None = None
    generated_text: StrictStr = Field(max_length=MAX_TEXT_CHARS)
    results: dict[str, DetectorResult | DetectorError] = Field(
        min_length=1, description="Detector name -> its result, or its error object."
    )

    @field_validator("context")
    @classmethod
    def _bounded_context(cls, value: str | list[str] | None) -> str | list[str] | None:
        return DetectRequestItem._bounded_context(value)

    @field_validator("generated_text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return DetectRequestItem._not_blank(value)  # as /v2/detect: nothing was scored

    def context_documents(self) -> list[str]:
        """The context as a list of non-blank documents."""
        documents = [self.context] if isinstance(self.context, str) else (self.context or [])
        return [d for d in documents if d.strip()]


class PublishRequest(BaseModel):
    """The body of `POST /v1/applications/{name}/detections`: rows scored elsewhere, stored
    under the application in the path and `model_name`."""

    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr = Field(max_length=MAX_NAME_CHARS, pattern=MODEL_NAME_PATTERN)
    run_id: StrictStr = Field(
        min_length=1, max_length=MAX_NAME_CHARS, description="The run the items come from."
    )
    items: list[PublishedItem] = Field(min_length=1)

    @field_validator("model_name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> Any:
        if isinstance(value, str):
            check_name(value, MODEL_NAME_PATTERN, MODEL_NAME_RULE)
        return value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with U+FFFD in place of each lone surrogate (which UTF-8 cannot encode)."""
    return _LONE_SURROGATE.sub("\ufffd", text)


class AssayError(Exception):
    """Base class of Assay's own errors."""


class RequestValidationError(AssayError, ValueError):
    """A request item is malformed; `field` names the offending field (e.g. `[0].config.foo`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class JudgeFailure(AssayError):
    """A judge backend failed to answer; `kind` is "timeout", "rate_limited", "transport" or
    "bad_output" for an LLM call, "input_too_long" or "content_filtered" for an LLM request
    refused for its input, "low_confidence_answer" for an LLM answer with too little yes/no
    probability, "judge_error" for anything else."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


#: Failure kinds caused by the item's own input, not the judge: sent again, it fails again, so
#: the server answers a 422 naming the item (not a 503, which clients retry), and `assay
#: detect` exits 2.
INPUT_FAILURES = frozenset({"input_too_long", "content_filtered"})


class DetectorFailed(AssayError):
    """Raised under `must_compute="all_or_none"` when any detector of an item fails."""

    def __init__(self, detector: str, failure: JudgeFailure, item: int | None = None) -> None:
        """item: the item's position in its request, named in the message when given."""
        where = f"[{item}].config.{detector}: " if item is not None else ""
        super().__init__(f"{where}detector {detector!r} failed: {failure}")
        self.detector = detector
        self.failure = failure
        self.item = item


def round_probability(value: float) -> float:
    """Probabilities go on the wire rounded to 4 places."""
    return round(float(value), 4)


def followed(probability: float) -> bool:
    """The wire's label rule: an instruction is followed when its (rounded) probability is at
    least 0.5."""
    return probability >= 0.5
