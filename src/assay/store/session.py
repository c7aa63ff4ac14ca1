"""Opening the database: engine, sessions and schema migrations.

The default is a SQLite file; any SQLAlchemy URL works (e.g.
`postgresql+psycopg://user:password@host/assay` with a PostgreSQL driver installed).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

logger = logging.getLogger(__name__)

DATABASE_URL_ENV = "ASSAY_DATABASE_URL"
DEFAULT_DATABASE_URL = "sqlite:///assay.db"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# How long a SQLite writer waits for another's lock before giving up; the server has several
# writers (request handlers and the job worker) on one file.
_SQLITE_BUSY_TIMEOUT_MS = 30_000


def database_url(url: str | None = None) -> str:
    """The URL to use: `url`, else `$ASSAY_DATABASE_URL`, else a SQLite file `assay.db`."""
    return url or os.environ.get(DATABASE_URL_ENV) or DEFAULT_DATABASE_URL


class Store:
    """A database holding Assay's tables.

    url: a SQLAlchemy URL (default: see `database_url`). Raises ValueError naming the URL
        when it cannot be parsed or its driver is not installed.
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = database_url(url)
        try:
            parsed = make_url(self.url)
            self.is_sqlite = parsed.get_backend_name() == "sqlite"
            options: dict[str, Any] = {}
            if self.is_sqlite:
                options["connect_args"] = {
                    "check_same_thread": False,
                    "timeout": _SQLITE_BUSY_TIMEOUT_MS / 1000,
                }
                if parsed.database and parsed.database != ":memory:":
                    Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(self.url, **options)
        except (ArgumentError, ImportError) as error:
            raise ValueError(f"database URL {self.url!r} is not usable: {error}") from None
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def migrate(self) -> None:
        """Bring the schema up to the newest migration (a no-op when it already is)."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        logger.info("database schema is current (%s)", self.engine.url.render_as_string())

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work is committed together on success and rolled back on error."""
        with self._sessions() as session, session.begin():
            yield session

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads only."""
        with self._sessions() as session:
            yield session

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    # WAL lets readers (dashboard) run while the worker writes; foreign keys are off by default.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()
