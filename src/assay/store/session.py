"""Opening the database: engine, sessions and schema migrations.

The default is a SQLite file; any SQLAlchemy URL works. PostgreSQL is tested
(`postgresql+psycopg://user:password@host/assay`, with `pip install 'assay[postgres]'`), and
several server processes may share one PostgreSQL database.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

logger = logging.getLogger(__name__)

DATABASE_URL_ENV = "ASSAY_DATABASE_URL"
DEFAULT_DATABASE_URL = "sqlite:///assay.db"
POOL_SIZE_ENV = "ASSAY_DATABASE_POOL_SIZE"
#: Connections a server process keeps open to a database server (SQLite has no pool to size).
DEFAULT_POOL_SIZE = 5
#: Any constant: PostgreSQL serialises the migrations of replicas starting at once on it.
_MIGRATION_LOCK = 0x61737361
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# How long a SQLite writer waits for another's lock before giving up; the server has several
# writers (request handlers and the job worker) on one file.
_SQLITE_BUSY_TIMEOUT_MS = 30_000


def shown_url(url: str) -> str:
    """`url` with its password masked (also when SQLAlchemy cannot parse it)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def database_url(url: str | None = None) -> str:
    """The URL to use: `url`, else `$ASSAY_DATABASE_URL`, else a SQLite file `assay.db`."""
    return url or os.environ.get(DATABASE_URL_ENV) or DEFAULT_DATABASE_URL


def configured_pool_size(size: int | None = None) -> int:
    """Connections per process: `size`, else `$ASSAY_DATABASE_POOL_SIZE`, else 5."""
    if size is not None:
        return size
    raw = os.environ.get(POOL_SIZE_ENV, "").strip()
    if not raw:
        return DEFAULT_POOL_SIZE
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"${POOL_SIZE_ENV} must be a whole number >= 1, got {raw!r}")
    return int(raw)


class Store:
    """A database holding Assay's tables.

    url: a SQLAlchemy URL (default: see `database_url`). Raises ValueError naming the URL
        when it cannot be parsed or its driver is not installed.
    pool_size: connections kept open to a database server (default: see
        `configured_pool_size`); up to as many again are opened under bursts.
    """

    def __init__(self, url: str | None = None, pool_size: int | None = None) -> None:
        self.url = database_url(url)
        self.sqlite_path: Path | None = None  # the file, for a SQLite database
        try:
            parsed = make_url(self.url)
            self.is_sqlite = parsed.get_backend_name() == "sqlite"
            self.is_postgresql = parsed.get_backend_name() == "postgresql"
            options: dict[str, Any] = {}
            if self.is_sqlite:
                if not parsed.database or parsed.database == ":memory:":
                    # Each connection would see its own empty database: stored rows answered
                    # 200, then "no such table" on the next connection, and nothing lasted.
                    raise ValueError(
                        f"database URL {self.url!r} is an in-memory database, which nothing "
                        "outlives; give a file, e.g. sqlite:///assay.db"
                    )
                options["connect_args"] = {
                    "check_same_thread": False,
                    "timeout": _SQLITE_BUSY_TIMEOUT_MS / 1000,
                }
                self.sqlite_path = Path(parsed.database).expanduser()
                self.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
            else:
                size = configured_pool_size(pool_size)
                # pre_ping: a connection the database server dropped (restart, failover, idle
                # timeout) is replaced instead of failing the request that draws it.
                options.update(pool_size=size, max_overflow=size, pool_pre_ping=True)
            self.engine: Engine = create_engine(self.url, **options)
        except (ArgumentError, ImportError, OSError) as error:
            raise ValueError(f"database URL {self.shown_url!r} is not usable: {error}") from None
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "connect", self._write_ahead_log)
        #: Whether the database is known to be Assay's, so that it may be switched to SQLite's
        #: write-ahead log (a file of someone else's, refused, is left as it was).
        self._ours = False
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def shown_url(self) -> str:
        """The URL for messages and logs, its password masked."""
        return shown_url(self.url)

    def migrate(self) -> None:
        """Bring the schema up to the newest migration (a no-op when it already is).

        Raises ValueError when the database holds tables Assay did not make, or was written by
        a newer Assay."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        # Replicas starting together: one migrates, the others wait and find it done.
        with self._migration_lock(), self.engine.begin() as connection:
            if self.is_postgresql:
                connection.execute(text(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})"))
            tables = set(inspect(connection).get_table_names())
            if tables and "alembic_version" not in tables:
                # Migrating would fail part-way and, on SQLite, leave some tables behind.
                raise ValueError(
                    f"it holds tables Assay did not make ({', '.join(sorted(tables))}); give "
                    "Assay a database of its own"
                )
            if self.is_sqlite and not self._ours:
                self._ours = True
                connection.exec_driver_sql("PRAGMA journal_mode=WAL")
            config.attributes["connection"] = connection
            try:
                command.upgrade(config, "head")
            except CommandError as error:
                if "Can't locate revision" not in str(error):
                    raise
                raise ValueError(
                    f"it was written by a newer Assay ({error}); upgrade Assay to use it"
                ) from None
        logger.info("database schema is current (%s)", self.shown_url)

    def _write_ahead_log(self, connection: Any, _record: Any) -> None:
        # WAL lets readers (dashboard) run while the worker writes. Set once the database is
        # known to be Assay's (by `migrate`, or a store that never migrates, which reads only).
        if self._ours:
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        """On SQLite, an exclusive lock while migrating (PostgreSQL takes an advisory lock in
        the transaction): two servers starting on a new file both created the tables, and one
        stopped with "table jobs already exists".

        The lock is on a file beside the database (`<db>.migrate-lock`), never on the database
        itself: closing any handle of a file drops every fcntl lock the process holds on it,
        SQLite's included, and another process opening and closing the database then took
        itself for its last user and deleted the write-ahead log, with the writes the server had
        answered for."""
        if not self.is_sqlite or self.sqlite_path is None:
            yield
            return
        lock = self.sqlite_path.with_name(f"{self.sqlite_path.name}.migrate-lock")
        with lock.open("a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

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
    # Foreign keys are off by default. (The write-ahead log: `Store._write_ahead_log`.)
    cursor = connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()
