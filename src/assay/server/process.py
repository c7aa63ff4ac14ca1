"""Run `assay serve` as a child process and wait until it answers (for tests and benchmarks,
which need a real server they can also kill)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from assay._ports import free_port

__all__ = ["ServerProcess", "free_port"]


class ServerProcess:
    """`assay serve` on 127.0.0.1 in a child process.

    database_url: the server's SQLAlchemy URL.
    log_path: file receiving the server's stdout and stderr.
    api_keys: keys it accepts (passed as $ASSAY_API_KEYS); None runs it with --no-auth.
    port: TCP port (default: a free one, kept across restarts).
    extra_args: more `assay serve` options, e.g. ("--job-lease-seconds", "2").
    environment: variables set for the child on top of this process's own (e.g.
        `{"ASSAY_EMBEDDING_CACHE_MB": "0"}`).
    """

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        api_keys: Sequence[str] | None = ("test-key",),
        port: int | None = None,
        extra_args: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.log_path = log_path
        self.api_keys = api_keys
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.environment = dict(environment or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> None:
        """Start the server and return once `/healthz` answers; RuntimeError (with the end of
        its log) if it exits or does not answer within `timeout` seconds."""
        command = [sys.executable, "-m", "assay.cli", "serve", "--port", str(self.port)]
        command += ["--database-url", self.database_url, "--log-level", "warning"]
        environment = {**os.environ, **self.environment}
        if self.api_keys is None:
            command.append("--no-auth")
        else:
            environment["ASSAY_API_KEYS"] = ",".join(self.api_keys)
        command += self.extra_args
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.process.returncode}: {self.log_tail()}"
                )
            try:
                if httpx.get(self.url + "/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server did not answer within {timeout}s: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM and wait for a clean exit; SIGKILL if it takes too long."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
