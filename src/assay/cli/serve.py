"""`assay serve`: the HTTP API, the async job worker and the dashboard."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from assay.cli.common import reported_errors
from assay.cli.options import check_llm_environment, number_option

_SERVE_OPTIONS = {"database_url": "--database-url", "api_keys_file": "--api-keys-file"}


#: A day: a longer lease overflowed the lease's date (no job ever ran), and a dead worker's job
#: would wait that long anyway.
MAX_LEASE_SECONDS = 86_400.0
_lease_seconds = number_option("a number of seconds from 0.1 to 86400", 0.1, MAX_LEASE_SECONDS)


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def serve_command(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="ASSAY_DATABASE_URL",
            help="SQLAlchemy URL (default: sqlite:///assay.db).",
        ),
    ] = None,
    api_keys_file: Annotated[
        Path | None,
        typer.Option(
            help="Keys file: one key per line, optionally followed by the applications it may "
            "use (also $ASSAY_API_KEYS_FILE). Keys may also come from $ASSAY_API_KEYS "
            "(comma-separated)."
        ),
    ] = None,
    auth: Annotated[
        bool,
        typer.Option(
            "--auth/--no-auth",
            help="Check API keys; --no-auth accepts requests without one (local use only).",
        ),
    ] = True,
    max_in_flight: Annotated[
        int, typer.Option(min=1, help="Detect requests handled at once; more get 429.")
    ] = 64,
    max_batch_items: Annotated[
        int, typer.Option(min=1, help="Most items in one detect request; more get 413.")
    ] = 100,
    job_lease_seconds: Annotated[
        float,
        typer.Option(
            callback=_lease_seconds,
            help="Seconds (0.1 to 86400) before a dead worker's job is taken over.",
        ),
    ] = 60.0,
    job_concurrency: Annotated[
        int, typer.Option(min=1, help="Async jobs this process works on at once.")
    ] = 4,
    database_pool_size: Annotated[
        int | None,
        typer.Option(
            min=1,
            envvar="ASSAY_DATABASE_POOL_SIZE",
            help="Connections kept open to a database server (default 5; not SQLite).",
        ),
    ] = None,
    log_level: Annotated[
        LogLevel, typer.Option(case_sensitive=False, help="How much the server logs.")
    ] = LogLevel.info,
) -> None:
    """Run the HTTP API, the async job worker and the dashboard."""
    from assay.server.serve import build_settings, run_server  # the server stack loads only here

    # A bad setting (no API keys, an unreadable keys file, a database that cannot be prepared)
    # is the user's to fix: one line, exit 2.
    with reported_errors(_SERVE_OPTIONS, bad_input=(ValueError,)):
        check_llm_environment()
        settings = build_settings(
            database_url=database_url,
            api_keys_file=api_keys_file,
            no_auth=not auth,
            max_in_flight=max_in_flight,
            max_batch_items=max_batch_items,
            job_lease_seconds=job_lease_seconds,
            job_concurrency=job_concurrency,
            database_pool_size=database_pool_size,
        )
        run_server(settings, host, port, log_level.value)
