"""What `assay serve` does: check the configuration, prepare storage and judge, run uvicorn."""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path

import uvicorn

from assay.environment import default_judge_name
from assay.judges.batching import use_batching
from assay.server.app import create_app
from assay.server.settings import ApiKeys, ServerSettings, load_api_keys
from assay.store.session import DATABASE_URL_ENV, DEFAULT_DATABASE_URL, Store, database_url

logger = logging.getLogger(__name__)

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def build_settings(
    *,
    database_url: str | None,
    api_keys_file: Path | None,
    no_auth: bool,
    max_in_flight: int,
    max_batch_items: int,
    job_lease_seconds: float,
    job_concurrency: int = 4,
    database_pool_size: int | None = None,
) -> ServerSettings:
    """Settings from command-line values; raises ValueError naming what is wrong."""
    keys = ApiKeys(frozenset(), {}) if no_auth else load_api_keys(api_keys_file)
    return ServerSettings(
        database_url=database_url,
        api_keys=keys.admin,
        scoped_keys=keys.scoped,
        auth=not no_auth,
        max_in_flight=max_in_flight,
        max_batch_items=max_batch_items,
        job_lease_seconds=job_lease_seconds,
        job_concurrency=job_concurrency,
        database_pool_size=database_pool_size,
    )


def _listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` for uvicorn; ValueError saying why when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        hint = "; another process uses it (pick another with --port)"
        why = hint if error.errno == errno.EADDRINUSE else f": {error.strerror or error}"
        raise ValueError(f"cannot listen on {host} port {port}{why}") from None
    return sock


def run_server(settings: ServerSettings, host: str, port: int, log_level: str = "info") -> None:
    """Migrate the database and load the judge (so mistakes fail here, as one clear error,
    rather than inside uvicorn's start-up), then serve until interrupted."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not settings.auth and host not in _LOOPBACK:
        logger.warning(
            "authentication is OFF and the server listens on %s: anyone can use it", host
        )
    # Bound first: a port in use is one clear error before any other work (uvicorn would log
    # "ready" and start the job worker, then fail).
    listening = _listening_socket(host, port)
    if database_url(settings.database_url) == DEFAULT_DATABASE_URL:
        # A replica started without the shared database's URL would quietly keep its own.
        logger.warning(
            "no --database-url or $%s: using %s in the current folder",
            DATABASE_URL_ENV,
            DEFAULT_DATABASE_URL,
        )
    store = Store(settings.database_url, settings.database_pool_size)
    try:
        store.migrate()
    except Exception as error:
        raise ValueError(f"database {store.shown_url!r} cannot be prepared: {error}") from None
    finally:
        store.close()
    use_batching(default_judge_name(), settings.batch_window_seconds)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level=log_level))
    shown = f"[{host}]" if ":" in host else host
    logger.info("listening on http://%s:%d (Ctrl-C to stop)", shown, port)
    server.run(sockets=[listening])
