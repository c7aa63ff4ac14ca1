"""Server settings and where API keys come from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from assay.schema import MAX_TEXT_CHARS

#: Comma-separated API keys.
API_KEYS_ENV = "ASSAY_API_KEYS"
#: A file with one API key per line (blank lines and `#` comments ignored).
API_KEYS_FILE_ENV = "ASSAY_API_KEYS_FILE"


@dataclass(frozen=True)
class ServerSettings:
    """How the server behaves.

    database_url: SQLAlchemy URL; None means `$ASSAY_DATABASE_URL`, else `sqlite:///assay.db`.
    api_keys: keys accepted in the `Authorization` header.
    auth: False serves without checking keys (local use only).
    max_in_flight: detect requests handled at once; more get 429 with `retry-after`.
    max_batch_items: most items in one detect body (413 beyond).
    max_body_bytes: largest detect body (413 beyond).
    max_text_chars: longest text field, and longest context in total (413 beyond); at most
        the core's own limit.
    max_json_depth: deepest nesting of arrays/objects accepted in a body (400 beyond).
    job_lease_seconds: how long a worker holds a job before another may take it over.
    job_max_attempts: claims after which a job is marked failed.
    job_concurrency: jobs the worker processes at once.
    job_poll_seconds: how often an idle worker looks for jobs left by another process.
    batch_window_seconds: how long the judge waits to gather concurrent requests' questions.
    """

    database_url: str | None = None
    api_keys: frozenset[str] = field(default_factory=frozenset)
    auth: bool = True
    max_in_flight: int = 64
    max_batch_items: int = 100
    max_body_bytes: int = 8 * 1024 * 1024
    max_text_chars: int = MAX_TEXT_CHARS
    max_json_depth: int = 32
    job_lease_seconds: float = 60.0
    job_max_attempts: int = 3
    job_concurrency: int = 4
    job_poll_seconds: float = 0.5
    batch_window_seconds: float = 0.005

    def __post_init__(self) -> None:
        positive = {
            "max_in_flight": self.max_in_flight,
            "max_batch_items": self.max_batch_items,
            "max_body_bytes": self.max_body_bytes,
            "max_text_chars": self.max_text_chars,
            "max_json_depth": self.max_json_depth,
            "job_lease_seconds": self.job_lease_seconds,
            "job_max_attempts": self.job_max_attempts,
            "job_concurrency": self.job_concurrency,
            "job_poll_seconds": self.job_poll_seconds,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if self.max_text_chars > MAX_TEXT_CHARS:
            raise ValueError(f"max_text_chars may be at most {MAX_TEXT_CHARS}")
        if self.auth and not self.api_keys:
            raise ValueError(
                f"no API keys configured: set ${API_KEYS_ENV} or ${API_KEYS_FILE_ENV} "
                "(or pass --api-keys-file), or run with --no-auth for local use"
            )


def load_api_keys(path: Path | None = None) -> frozenset[str]:
    """Keys from `$ASSAY_API_KEYS` plus those in `path` (default `$ASSAY_API_KEYS_FILE`).

    Raises ValueError naming the file when it cannot be read.
    """
    keys = {key.strip() for key in os.environ.get(API_KEYS_ENV, "").split(",") if key.strip()}
    file = path or (
        Path(os.environ[API_KEYS_FILE_ENV]) if os.environ.get(API_KEYS_FILE_ENV) else None
    )
    if file is not None:
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise ValueError(
                f"API keys file {str(file)!r} cannot be read: {error.strerror}"
            ) from None
        keys.update(
            line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")
        )
    return frozenset(keys)
