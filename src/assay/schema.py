"""Wire and data types shared by every part of Assay.

The request and result shapes follow AIMon's `POST /v2/detect` contract so that AIMon's SDK and
snippets work against Assay unchanged. Nothing here imports any other Assay module.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

#: Longest accepted text field, in characters. Longer texts are rejected, not truncated:
#: a silently truncated answer would be judged on text the caller never sees.
MAX_TEXT_CHARS = 100_000
#: Most context documents accepted in one item.
MAX_CONTEXT_DOCUMENTS = 200

MustCompute = Literal["all_or_none", "ignore_failures"]


class DetectorConfig(BaseModel):
    """Per-detector options inside a request item's `config`."""

    model_config = ConfigDict(extra="allow")

    detector_name: StrictStr = "default"
    explain: StrictBool = False
    judge: StrictStr | None = Field(
        default=None, description="Judge backend for this detector; the run's default when unset."
    )


class DetectRequestItem(BaseModel):
    """One element of the JSON array posted to `/v2/detect`."""

    model_config = ConfigDict(extra="forbid")

    user_query: StrictStr | None = None
    context: StrictStr | list[StrictStr] | None = None
    generated_text: StrictStr
    config: dict[str, DetectorConfig] = Field(min_length=1)
    instructions: StrictStr | list[StrictStr] | None = None
    publish: StrictBool = False
    async_mode: StrictBool = False
    application_name: StrictStr | None = None
    model_name: StrictStr | None = None
    must_compute: MustCompute = "all_or_none"

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
            raise ValueError(f"context is {total} characters; the limit is {MAX_TEXT_CHARS}")
        return value

    def context_documents(self) -> list[str]:
        """The context as a list of non-blank documents."""
        documents = [self.context] if isinstance(self.context, str) else (self.context or [])
        return [d for d in documents if d.strip()]


class InstructionResult(BaseModel):
    """One instruction's verdict, as it appears in `instructions_list`."""

    explanation: str
    follow_probability: float = Field(ge=0.0, le=1.0)
    instruction: str
    label: bool


class DetectorResult(BaseModel):
    """One detector's result for one request item."""

    instructions_list: list[InstructionResult]
    score: float = Field(ge=0.0, le=1.0)


class DetectorError(BaseModel):
    """Stands in for a result when a detector could not score an item (never a silent 0)."""

    error: Literal[True] = True
    kind: str = Field(description="timeout, judge_error, unparseable, transport, ...")
    message: str


class AssayError(Exception):
    """Base class of Assay's own errors."""


class RequestValidationError(AssayError, ValueError):
    """A request item is malformed; `field` names the offending field (e.g. `[0].config.foo`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class JudgeFailure(AssayError):
    """A judge backend failed to answer (timeout, transport, unparseable output)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class DetectorFailed(AssayError):
    """Raised under `must_compute="all_or_none"` when any detector of an item fails."""

    def __init__(self, detector: str, failure: JudgeFailure) -> None:
        super().__init__(f"detector {detector!r} failed: {failure}")
        self.detector = detector
        self.failure = failure


def round_probability(value: float) -> float:
    """Probabilities go on the wire rounded to 4 places."""
    return round(float(value), 4)
