"""The one set of LLM settings: where the endpoint is, how to call it, how to read its answers.

The LLM judge, the OOD judge and the OOD probe generator all read these (`ASSAY_LLM_*`). Every
setting has an environment variable (read when a judge is built, never at import) and can be
overridden in code or from the CLI (`assay.judges.openai.configure`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from assay.retries import RetryPolicy
from assay.schema import RequestValidationError
from assay.transport import header_problem, url_problem

Strategy = Literal["fields", "per_instruction"]
Structured = Literal["auto", "json_schema", "json_object", "none"]
STRUCTURED: tuple[Structured, ...] = ("auto", "json_schema", "json_object", "none")

STRATEGIES: tuple[Strategy, ...] = ("fields", "per_instruction")


def default_cache_path() -> Path:
    """`$XDG_CACHE_HOME/assay/judge-calls.sqlite3` (or `~/.cache/...`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "assay" / "judge-calls.sqlite3"


#: `LLMSettings` fields that change a verdict (`verdict_settings`).
VERDICT_SETTINGS = (
    "model",
    "strategy",
    "structured",
    "votes",
    "vote_temperature",
    "max_tokens",
    "top_logprobs",
    "min_answer_mass",
)


@dataclass(frozen=True)
class LLMSettings:
    """How Assay talks to an OpenAI-compatible LLM endpoint (the judge's and the OOD metric's).

    base_url: the OpenAI-compatible API root, e.g. `http://127.0.0.1:8080/v1`; None means the
        SDK's default (api.openai.com).
    model: the model name sent with each request.
    api_key: sent as a bearer token; local servers accept any value.
    strategy: "fields" asks one call per row and detector with one labelled answer per
        instruction; "per_instruction" asks one 1-token call per instruction over a shared prefix.
    structured: how to ask for output constrained to a JSON schema: "json_schema" (OpenAI, vLLM,
        Ollama), "json_object" (llama-cpp-python's `{"type": "json_object", "schema": ...}`),
        "none" (plain text, parsed tolerantly), or "auto": try them in that order and keep the
        first the endpoint accepts.
    votes: sampled answers per instruction when the endpoint returns no logprobs.
    vote_temperature: sampling temperature of those votes (must be > 0).
    call_timeout: seconds one HTTP call may take.
    row_timeout: seconds all calls for one row and detector may take, retries included (for the
        OOD metric: one call with its retries).
    max_attempts: attempts per call (1 = no retry); only 429, 5xx, timeouts and connection
        errors are retried.
    backoff_base / backoff_cap: ceilings in seconds of the first retry delay and the longest one
        (`assay.retries.RetryPolicy`).
    concurrency: HTTP calls in flight at once.
    max_tokens: completion budget of one "fields" call (per_instruction calls use 1, or more
        when an explanation is wanted).
    top_logprobs: alternatives requested per answer token.
    min_answer_mass: the least P(yes) + P(no) an answer token must hold, among the listed
        alternatives, for its answer to be scored (0 to 1); below it the instruction fails with
        kind "low_confidence_answer".
    cache: whether to read and write the judge-call cache.
    cache_path: the SQLite file of that cache (default: `default_cache_path()`).
    cache_ttl: seconds a cached call stays valid.
    """

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str = "not-needed"
    strategy: Strategy = "fields"
    structured: Structured = "auto"
    votes: int = 5
    vote_temperature: float = 0.7
    call_timeout: float = 60.0
    row_timeout: float = 300.0
    max_attempts: int = 4
    backoff_base: float = 0.5
    backoff_cap: float = 20.0
    concurrency: int = 4
    max_tokens: int = 512
    top_logprobs: int = 10
    min_answer_mass: float = 0.5
    cache: bool = True
    cache_path: Path | None = None
    cache_ttl: float = 30 * 24 * 3600.0

    def __post_init__(self) -> None:
        _check(self)

    def verdict_settings(self) -> dict[str, object]:
        """The settings that decide its verdicts: the model and how it is asked (not where it
        is served, its timeouts or its cache), for the fingerprint of a resumable run."""
        return {name: getattr(self, name) for name in VERDICT_SETTINGS}

    def cache_file(self) -> Path:
        """The cache's SQLite file: `cache_path`, or the per-user default."""
        return self.cache_path or default_cache_path()

    def retry_policy(self) -> RetryPolicy:
        """The shared retry policy with these attempts and backoff."""
        return RetryPolicy(self.max_attempts, self.backoff_base, self.backoff_cap)

    def with_overrides(self, **overrides: object) -> LLMSettings:
        """A copy with the given fields replaced (None values are ignored)."""
        given = {name: value for name, value in overrides.items() if value is not None}
        return replace(self, **given)  # type: ignore[arg-type]


#: Environment variable -> (field, converter).
ENVIRONMENT: dict[str, tuple[str, type]] = {
    "ASSAY_LLM_BASE_URL": ("base_url", str),
    "ASSAY_LLM_MODEL": ("model", str),
    "ASSAY_LLM_API_KEY": ("api_key", str),
    "ASSAY_LLM_STRATEGY": ("strategy", str),
    "ASSAY_LLM_STRUCTURED": ("structured", str),
    "ASSAY_LLM_VOTES": ("votes", int),
    "ASSAY_LLM_VOTE_TEMPERATURE": ("vote_temperature", float),
    "ASSAY_LLM_TIMEOUT": ("call_timeout", float),
    "ASSAY_LLM_ROW_TIMEOUT": ("row_timeout", float),
    "ASSAY_LLM_MAX_ATTEMPTS": ("max_attempts", int),
    "ASSAY_LLM_CONCURRENCY": ("concurrency", int),
    "ASSAY_LLM_MAX_TOKENS": ("max_tokens", int),
    "ASSAY_LLM_MIN_ANSWER_MASS": ("min_answer_mass", float),
    "ASSAY_LLM_CACHE": ("cache", bool),
    "ASSAY_LLM_CACHE_PATH": ("cache_path", Path),
    "ASSAY_LLM_CACHE_TTL": ("cache_ttl", float),
}


def settings_from_env(
    environ: Mapping[str, str] | None = None, overridden: Collection[str] = ()
) -> LLMSettings:
    """Settings from `environ` (default: the process environment) over the defaults.

    overridden: setting names a flag gives instead: their variables are not read, so a stale
        value there is not an error.
    Raises RequestValidationError naming the variable when a value has the wrong type.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for variable, (name, kind) in ENVIRONMENT.items():
        raw = environ.get(variable)
        if raw is None or raw == "" or name in overridden:
            continue
        values[name] = _convert(variable, raw, kind)
    try:
        return LLMSettings(**values)  # type: ignore[arg-type]
    except RequestValidationError as error:
        variable = next((v for v, (n, _) in ENVIRONMENT.items() if n == error.field), error.field)
        raise RequestValidationError(variable, error.message) from None


def configured_settings(environ: Mapping[str, str] | None = None) -> LLMSettings | None:
    """`settings_from_env(environ)` when `ASSAY_LLM_BASE_URL` and `ASSAY_LLM_MODEL` are both set,
    else None: what decides whether the OOD metric writes probes and judges with an LLM."""
    environ = os.environ if environ is None else environ
    if not environ.get("ASSAY_LLM_BASE_URL", "").strip():
        return None
    if not environ.get("ASSAY_LLM_MODEL", "").strip():
        return None
    return settings_from_env(environ)


def parse_overrides(pairs: Sequence[str], field: str = "llm") -> dict[str, object]:
    """Settings from "name=value" strings (names as in LLMSettings, `-` or `_`), typed like
    their environment variables. Raises RequestValidationError naming `field` and the name."""
    kinds = {name: kind for name, kind in ENVIRONMENT.values()}
    overrides: dict[str, object] = {}
    for pair in pairs:
        name, equals, raw = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not equals or name not in kinds:
            known = ", ".join(sorted(kinds))
            raise RequestValidationError(field, f"expected name=value with a name from: {known}")
        overrides[name] = _convert(f"{field}.{name}", raw.strip(), kinds[name])
    return overrides


def _convert(variable: str, raw: str, kind: type) -> object:
    if kind is str:  # a key or URL read from a file keeps its newline
        return raw.strip()
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise RequestValidationError(variable, f"expected true or false, got {raw!r}")
    try:
        value = kind(raw)
    except ValueError:
        raise RequestValidationError(variable, f"expected {kind.__name__}, got {raw!r}") from None
    if kind is float and not math.isfinite(value):
        raise RequestValidationError(variable, f"expected a finite number, got {raw!r}")
    return value


#: The settings that hold a float (each must be finite).
_FLOATS = (
    "vote_temperature",
    "call_timeout",
    "row_timeout",
    "backoff_base",
    "backoff_cap",
    "min_answer_mass",
    "cache_ttl",
)


def _check(settings: LLMSettings) -> None:
    """Raise RequestValidationError naming the first field with an unusable value."""
    if settings.strategy not in STRATEGIES:
        raise RequestValidationError("strategy", f"must be one of {', '.join(STRATEGIES)}")
    if settings.structured not in STRUCTURED:
        raise RequestValidationError("structured", f"must be one of {', '.join(STRUCTURED)}")
    positive = ("votes", "max_attempts", "concurrency", "max_tokens", "top_logprobs")
    for name in positive:
        if int(getattr(settings, name)) < 1:
            raise RequestValidationError(name, "must be at least 1")
    for name in _FLOATS:
        if not math.isfinite(float(getattr(settings, name))):
            raise RequestValidationError(name, "must be a finite number")
    if settings.base_url is not None:
        if not re.match(r"https?://[^/\s]+", settings.base_url):
            raise RequestValidationError(
                "base_url", f"must be an http:// or https:// URL, got {settings.base_url!r}"
            )
        # A bad port or a control character failed every row as "judge_error: ExceptionGroup".
        problem = url_problem(settings.base_url)
        if problem is None and " " in settings.base_url:
            problem = f"{settings.base_url!r} holds a space"
        if problem is not None:
            raise RequestValidationError("base_url", problem)
    if (problem := header_problem(settings.api_key)) is not None:  # it is a bearer token
        raise RequestValidationError(
            "api_key",
            f"{problem}, which an HTTP header cannot carry (the key is not shown: it is a secret)",
        )
    for name in ("call_timeout", "row_timeout", "vote_temperature", "cache_ttl"):
        if float(getattr(settings, name)) <= 0:
            raise RequestValidationError(name, "must be greater than 0")
    for name in ("backoff_base", "backoff_cap"):
        if float(getattr(settings, name)) < 0:
            raise RequestValidationError(name, "must not be negative")
    if not 0.0 <= settings.min_answer_mass <= 1.0:
        raise RequestValidationError("min_answer_mass", "must be between 0 and 1")
    if not settings.model.strip():
        raise RequestValidationError("model", "must not be empty")
