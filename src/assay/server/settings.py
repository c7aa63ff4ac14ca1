"""Server settings and where API keys come from."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from assay.schema import APPLICATION_NAME_PATTERN, APPLICATION_NAME_RULE, MAX_TEXT_CHARS, check_name

#: Comma-separated API keys.
API_KEYS_ENV = "ASSAY_API_KEYS"
#: A file with one API key per line, optionally followed by the applications it may use
#: (blank lines and `#` comments ignored); see `parse_keys_file`.
API_KEYS_FILE_ENV = "ASSAY_API_KEYS_FILE"
#: In a keys file, the application list that means "every application" (an admin key).
ALL_APPLICATIONS = "*"


@dataclass(frozen=True)
class ServerSettings:
    """How the server behaves.

    database_url: SQLAlchemy URL; None means `$ASSAY_DATABASE_URL`, else `sqlite:///assay.db`.
    database_pool_size: connections kept open to a database server; None means
        `$ASSAY_DATABASE_POOL_SIZE`, else 5 (SQLite has no pool).
    api_keys: keys accepted in the `Authorization` header that may use every application
        (admin keys).
    scoped_keys: keys that may publish, read and poll only the applications listed for them.
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
    body_timeout_seconds: how long a client may take to send its whole body (408 beyond), so
        that slow or stalled uploads cannot hold the server's attention.
    judge_timeout_seconds: longest judging of one request or job; past it every detector of
        its items fails with kind "timeout".
    """

    database_url: str | None = None
    database_pool_size: int | None = None
    api_keys: frozenset[str] = field(default_factory=frozenset)
    scoped_keys: Mapping[str, frozenset[str]] = field(default_factory=dict)
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
    body_timeout_seconds: float = 10.0
    judge_timeout_seconds: float = 120.0

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
            "body_timeout_seconds": self.body_timeout_seconds,
            "judge_timeout_seconds": self.judge_timeout_seconds,
        }
        for name, value in positive.items():
            if not 0 < value < math.inf:  # NaN fails too
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.max_text_chars > MAX_TEXT_CHARS:
            raise ValueError(f"max_text_chars may be at most {MAX_TEXT_CHARS}")
        both = self.api_keys & set(self.scoped_keys)
        if both:
            raise ValueError("a key is configured both for every application and for some")
        if self.auth and not (self.api_keys or self.scoped_keys):
            raise ValueError(
                f"no API keys configured: set ${API_KEYS_ENV} or ${API_KEYS_FILE_ENV} "
                "(or pass --api-keys-file), or run with --no-auth for local use"
            )


class ApiKeys(NamedTuple):
    """Configured keys: `admin` may use every application, `scoped` only those listed."""

    admin: frozenset[str]
    scoped: dict[str, frozenset[str]]


def load_api_keys(path: Path | None = None) -> ApiKeys:
    """Keys from `$ASSAY_API_KEYS` (admin keys) plus those in `path` (default
    `$ASSAY_API_KEYS_FILE`; format in `parse_keys_file`).

    Raises ValueError naming the file (and line) when it cannot be read or a line is invalid.
    """
    admin = {key.strip() for key in os.environ.get(API_KEYS_ENV, "").split(",") if key.strip()}
    scoped: dict[str, frozenset[str]] = {}
    file = path or (
        Path(os.environ[API_KEYS_FILE_ENV]) if os.environ.get(API_KEYS_FILE_ENV) else None
    )
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            raise ValueError(f"API keys file {str(file)!r} cannot be read: {reason}") from None
        from_file = parse_keys_file(text, str(file))
        if not (from_file.admin or from_file.scoped or admin):
            raise ValueError(
                f"API keys file {str(file)!r} holds no keys (only blank lines or # comments)"
            )
        admin.update(from_file.admin)
        scoped = from_file.scoped
    if admin & set(scoped):
        raise ValueError(
            f"{API_KEYS_ENV} and the keys file give a key both for every application and for some"
        )
    return ApiKeys(frozenset(admin), scoped)


def parse_keys_file(text: str, source: str = "keys file") -> ApiKeys:
    """Read a keys file: one key per line; blank lines, lines starting with `#` and anything
    after a `#` that follows whitespace (a comment at the end of a line) are ignored.

    A key alone on its line, or followed by `*`, may use every application. A key followed by
    whitespace and a comma-separated list of application names may use only those:

        admin-key-1
        team-a-key   shop, shop-eu
    """
    admin: set[str] = set()
    scoped: dict[str, frozenset[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        # A key holds no whitespace, so whitespace then "#" can only start a comment.
        stripped = re.split(r"\s#", line, maxsplit=1)[0].strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, *others = stripped.split(maxsplit=1)
        rest = others[0].strip() if others else ""
        if key in admin or key in scoped:
            raise ValueError(f"{source}, line {number}: this key is listed twice")
        if not rest or rest == ALL_APPLICATIONS:
            admin.add(key)
            continue
        names = [name.strip() for name in rest.split(",")]
        for name in names:
            try:
                check_name(name, APPLICATION_NAME_PATTERN, APPLICATION_NAME_RULE)
            except ValueError as error:
                raise ValueError(
                    f"{source}, line {number}: application {name!r} {error}; write "
                    f"'<key> <app>,<app>' or '<key> {ALL_APPLICATIONS}'"
                ) from None
        scoped[key] = frozenset(names)
    return ApiKeys(frozenset(admin), scoped)
