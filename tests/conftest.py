"""Shared fixtures: a loopback HTTP stub for fault injection, test-only judges, and the
databases (a SQLite file, or a database on a throwaway PostgreSQL server) storage tests run on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from assay.detectors import DETECTORS
from assay.judges import Judge, Question, Verdict, register_judge
from assay.schema import JudgeFailure
from assay.store.temporary_postgres import PostgresMissing, TemporaryPostgres

# The LLM judge's call cache and probe records live under $XDG_CACHE_HOME by default: the
# tests (and the commands they start) get their own, never the user's.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="assay-tests-cache-")

#: The databases the storage, job and API tests run on.
BACKENDS = ("sqlite", "postgresql")
#: Marks a test (whose fixtures include `backend`) to run once per database.
both_backends = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TemporaryPostgres]:
    """One PostgreSQL server for the whole session, on a free loopback port, stopped at the end.

    Skipped where PostgreSQL or psycopg is missing, unless $ASSAY_REQUIRE_POSTGRES is set (as
    `make test` does), so that CI cannot pass without running the PostgreSQL tests.
    """
    try:
        import psycopg  # noqa: F401

        server = TemporaryPostgres()
    except (PostgresMissing, ImportError) as error:
        if os.environ.get("ASSAY_REQUIRE_POSTGRES"):
            raise
        pytest.skip(f"no PostgreSQL: {error}")
    with server:
        yield server


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The database kind of this test: "sqlite" unless parametrized (see `both_backends`)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def new_database(
    backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Callable[[], str]:
    """Makes empty databases of this test's backend; each call returns a new one's URL."""

    def make() -> str:
        if backend == "postgresql":
            server: TemporaryPostgres = request.getfixturevalue("postgres_server")
            return server.create_database()
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'assay.db'}"

    return make


@pytest.fixture
def database_url(new_database: Callable[[], str]) -> str:
    """An empty database of this test's backend."""
    return new_database()


@dataclass
class CannedResponse:
    """What the stub answers: a status, a body (JSON-encoded unless it is a str) and headers.

    hold: when set, the stub waits for this event before answering (to provoke client timeouts).
    """

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


#: Answers a request's JSON body with a canned response (or None: not this one).
Route = Callable[[Any], CannedResponse | None]


@dataclass
class StubServer:
    """A real HTTP server on 127.0.0.1 that replays canned responses in order (the last one
    repeats) and records every request it receives.

    probe: answers the LLM layer's capability probe (`assay.judges.openai.probe`); probes are
        recorded in `probes`, not `requests`, so tests count the calls made for rows. The
        fixture installs a probe answer showing logprobs (`llm.replies.probe_answer`).
    route: when set, answers the requests it returns a response for, before the canned list
        (to answer rows by their content when calls run concurrently).
    """

    url: str = ""
    responses: list[CannedResponse] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    probes: list[RecordedRequest] = field(default_factory=list)
    probe: Route | None = None
    route: Route | None = None

    def reply(self, *responses: CannedResponse) -> None:
        self.responses = list(responses)

    def next_response(self) -> CannedResponse:
        if not self.responses:
            return CannedResponse(500, {"detail": "stub has no canned response"})
        return self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]


def _handler_for(stub: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {name.lower(): value for name, value in self.headers.items()}
            recorded = RecordedRequest("POST", self.path, headers, body)
            canned = stub.probe(body) if stub.probe is not None else None
            if canned is not None:
                stub.probes.append(recorded)
            else:
                stub.requests.append(recorded)
                canned = stub.route(body) if stub.route is not None else None
                canned = canned or stub.next_response()
            if canned.hold is not None:
                canned.hold.wait(timeout=10)
            payload = canned.body if isinstance(canned.body, str) else json.dumps(canned.body)
            data = payload.encode("utf-8")
            self.send_response(canned.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in canned.headers.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(OSError):  # the client may have given up (timeout test)
                self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve_stub() -> Iterator[StubServer]:
    """Run a StubServer on a free loopback port until the block ends."""
    from llm.replies import probe_answer  # imports this module: not at the top

    stub = StubServer(probe=probe_answer())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(stub))
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        for canned in stub.responses:
            if canned.hold is not None:
                canned.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def stub_server() -> Iterator[StubServer]:
    """A loopback HTTP server answering with canned responses (set them with `reply`)."""
    with serve_stub() as stub:
        yield stub


@pytest.fixture
def no_server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in-process on the embedded judge, whatever the developer's environment says."""
    for name in ("ASSAY_BASE_URL", "CLIENT_BASE_URL", "ASSAY_JUDGE"):
        monkeypatch.delenv(name, raising=False)


class OverlapJudge(Judge):
    """Test-only judge: P(follow) grows with the words the response shares with the query.
    Deterministic and instant; for structure and fault checks, never for quality claims."""

    name = "overlap"

    def __init__(self) -> None:
        self.calls = 0

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.calls += 1
        verdicts: list[Verdict | JudgeFailure] = []
        for question in questions:
            query = set((question.user_query or "").lower().split())
            response = set(question.generated_text.lower().split())
            overlap = len(query & response) / max(len(query), 1)
            verdicts.append(Verdict(0.1 + 0.8 * overlap, explanation=f"overlap {overlap:.2f}"))
        return verdicts


class FailingJudge(Judge):
    """Test-only judge that times out on every question."""

    name = "failing"

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        return [JudgeFailure("timeout", "test judge always times out")] * len(questions)


@pytest.fixture
def overlap_judge() -> OverlapJudge:
    """A fresh `OverlapJudge` registered as judge "overlap"."""
    judge = OverlapJudge()
    register_judge("overlap", lambda: judge)
    return judge


@pytest.fixture
def failing_judge() -> str:
    """Registers `FailingJudge` as judge "failing" and returns that name."""
    register_judge("failing", FailingJudge)
    return "failing"


def assert_relevance_contract(result: dict[str, Any]) -> None:
    """`result` has the published output_relevance shape and obeys the label/score contract."""
    instructions = result["instructions_list"]
    expected = [instruction.text for instruction in DETECTORS["output_relevance"].instructions]
    assert [entry["instruction"] for entry in instructions] == expected
    for entry in instructions:
        assert set(entry) == {"explanation", "follow_probability", "instruction", "label"}
        assert 0.0 <= entry["follow_probability"] <= 1.0
        assert entry["follow_probability"] == round(entry["follow_probability"], 4)
        assert entry["label"] == (entry["follow_probability"] >= 0.5)
    labels = [entry["label"] for entry in instructions]
    assert result["score"] == pytest.approx(sum(labels) / len(labels))


def mean_follow_probability(result: dict[str, Any]) -> float:
    probabilities = [entry["follow_probability"] for entry in result["instructions_list"]]
    return float(sum(probabilities) / len(probabilities))


def start_interruptible(command: Sequence[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start `command` (stdout dropped, stderr kept as text) so that SIGINT reaches it: a shell
    starts background jobs with SIGINT ignored, and Ctrl-C reaches a run that has not."""
    return subprocess.Popen(
        list(command),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
