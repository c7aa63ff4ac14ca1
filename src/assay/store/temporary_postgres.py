"""A throwaway PostgreSQL server for tests and benchmarks: a fresh cluster in a temporary
folder, listening only on a free loopback port, removed when stopped.

It uses the server programs of an installed PostgreSQL (Debian's `postgresql` package puts them
in /usr/lib/postgresql/<version>/bin). PostgreSQL refuses to run as root, so when we are root
the cluster belongs to, and runs as, the unprivileged `postgres` user the package creates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from assay._ports import free_port

#: The role every database belongs to; the cluster trusts local connections (loopback only).
USER = "assay"
_UNPRIVILEGED = "postgres"


class PostgresMissing(RuntimeError):
    """No PostgreSQL server programs are installed."""


def server_bin() -> Path:
    """The folder holding `initdb` and `postgres` ($ASSAY_POSTGRES_BIN, else the newest
    Debian install, else whatever `initdb` is on PATH)."""
    configured = os.environ.get("ASSAY_POSTGRES_BIN")
    if configured:
        return Path(configured)
    installed = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if installed:
        return Path(installed[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    raise PostgresMissing("PostgreSQL is not installed (Debian: apt-get install postgresql)")


class TemporaryPostgres:
    """Start with `start()` (or `with`), make databases with `create_database()`, `stop()`."""

    def __init__(self) -> None:
        self.bin = server_bin()
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="assay-pg-"))
        self.data = self.folder / "data"
        self.process: subprocess.Popen[bytes] | None = None
        self._account = pwd.getpwnam(_UNPRIVILEGED) if os.geteuid() == 0 else None

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of `database` on this server (psycopg 3 driver)."""
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def _run_as(self) -> dict[str, Any]:
        if self._account is None:
            return {}
        return {"user": self._account.pw_uid, "group": self._account.pw_gid, "extra_groups": []}

    def start(self, timeout: float = 60.0) -> None:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()  # a cluster that failed to start leaves no process and no folder
            raise

    def _start(self, timeout: float) -> None:
        if self._account is not None:
            os.chown(self.folder, self._account.pw_uid, self._account.pw_gid)
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust"]
            + ["--encoding=UTF8", "--no-locale", "--no-sync"],
            check=True,
            capture_output=True,
            **self._run_as(),
        )
        log = (self.folder / "server.log").open("ab")
        # Durability settings off: the cluster is thrown away, and tests need speed, not crash
        # safety of the database itself.
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.folder),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
        }
        command = [str(self.bin / "postgres"), "-D", str(self.data)]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        self.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            **self._run_as(),
        )
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited: {self._log_tail()}")
            try:
                psycopg.connect(self._dsn("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL did not start: {self._log_tail()}") from None
                time.sleep(0.1)

    def _dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} dbname={database}"

    def create_database(self, prefix: str = "assay") -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then remove the cluster's folder."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.folder / "server.log").read_text(errors="replace")[-2000:]
        return "(no log)"

    def __enter__(self) -> TemporaryPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
