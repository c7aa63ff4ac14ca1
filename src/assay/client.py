"""AIMon-compatible Python API: `Client` and `AsyncClient`.

Without a base URL everything runs in this process on Assay's own detectors and judges. With one
(argument, else `$ASSAY_BASE_URL`, else `$CLIENT_BASE_URL`) the request items are posted to the
server's `POST /v2/detect` and its answer comes back in the same shape.

The sync `Client` is a facade over the async code: a remote call runs on the client's own event
loop thread (so its connection pool outlives a call), an in-process one through `run_sync`.
Retries follow the shared policy in `assay.retries`. The `APIError` family lives in
`assay.transport`, the response types in `assay.responses`, the `Detect` decorator and
`detect()` in `assay.decorator`, which builds on this module; `from assay import ...` gives
them all.

Besides `inference.detect`, a client has `jobs.retrieve(id)` and `jobs.wait(id, timeout=...)`
for `async_mode` items (in-process too: such an item is scored at once and kept under its job
id, so code written for a server runs unchanged), and `detections.publish(...)`, which stores
results scored elsewhere (`assay run --publish`) on a server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from assay._sync import LoopThread, run_sync
from assay.detectors.evaluate import check_encodable, detect_items, parse_items
from assay.resources import (
    AsyncDetections,
    AsyncInference,
    AsyncJobs,
    DetectBody,
    Detections,
    Inference,
    Jobs,
)
from assay.responses import DetectResponse, DetectResponseItem, Job, JobWaitTimeout
from assay.retries import GaveUp, Retryable, RetryPolicy, retry
from assay.schema import DetectorFailed, DetectRequestItem, JudgeFailure, RequestValidationError
from assay.transport import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    NotFoundError,
    classify,
    decoded_body,
    header_problem,
    status_error,
    transport_error,
    url_problem,
)

__all__ = [
    "AsyncClient",
    "Client",
    "DetectResponse",
    "DetectResponseItem",
    "Job",
    "JobWaitTimeout",
]

logger = logging.getLogger(__name__)

#: Environment variables naming the server, in order of precedence.
BASE_URL_ENV_VARS = ("ASSAY_BASE_URL", "CLIENT_BASE_URL")
API_KEY_ENV = "ASSAY_API_KEY"
DETECT_PATH = "/v2/detect"
JOBS_PATH = "/v1/jobs/"
#: In-process jobs a client keeps for `jobs.retrieve`; older ones are forgotten (not found).
IN_PROCESS_JOBS = 10_000
#: The acknowledgement an async item scored in this process gets (a server's says the data was
#: sent, which here it was not).
ACCEPTED_IN_PROCESS = "Scored in this process (no server): retrieve the result with jobs.retrieve."
T = TypeVar("T")


# --- responses ----------------------------------------------------------------------------------

#: Seconds a poll of `jobs.wait` may run past the wait's end.
JOB_POLL_GRACE = 1.0


def _response_items(body: Any) -> DetectResponse:
    entries = [body] if isinstance(body, dict) else body
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise APIError("expected a JSON array of objects from the server", body=body)
    return DetectResponse(DetectResponseItem(entry) for entry in entries)


def _now() -> str:
    return datetime.now(UTC).replace(tzinfo=None).isoformat() + "Z"


# --- request bodies -----------------------------------------------------------------------------


def _body_items(body: DetectBody) -> list[Any]:
    """The body as a list of items; a single item is a list of one."""
    if isinstance(body, Mapping | DetectRequestItem):
        body = [body]
    if isinstance(body, str | bytes) or not isinstance(body, Iterable):
        raise RequestValidationError("body", "must be a JSON array of request items")
    return [dict(item) if isinstance(item, Mapping) else item for item in body]


def _wire_items(items: list[Any]) -> list[Any]:
    """The items as sent to a server (and as the in-process path reads them). Text that cannot
    be encoded as UTF-8 (a lone surrogate) is refused here, naming its field, as the server
    would; so is a value JSON cannot carry (bytes, a set, NaN), which httpx would fail on with
    a bare TypeError or ValueError."""
    wire = [
        item.model_dump(mode="json", exclude_none=True)
        if isinstance(item, DetectRequestItem)
        else item
        for item in items
    ]
    check_encodable(wire, json_only=True)
    return wire


def _detector_failed(body: Any) -> DetectorFailed | None:
    """A server's answer to an item whose detector failed under all_or_none, as the in-process
    path raises it, so code written against one path works against the other; None for any
    other error."""
    failure = body.get("failure") if isinstance(body, Mapping) else None
    if not isinstance(failure, Mapping):
        return None
    detector, kind, message = failure.get("detector"), failure.get("kind"), failure.get("message")
    if not (isinstance(detector, str) and isinstance(kind, str) and isinstance(message, str)):
        return None
    item = failure.get("item")
    place = item if type(item) is int else None
    return DetectorFailed(detector, JudgeFailure(kind, message), place)


def _worth_retrying(error: Exception) -> Retryable | None:
    """`classify`, except for an answer that a detector failed: the server retried its judge
    before giving it, and sending the item again would judge it again (a timed-out LLM judge,
    minutes more each time)."""
    if isinstance(error, APIError) and _detector_failed(error.body) is not None:
        return None
    return classify(error)


def resolve_base_url(base_url: str | None) -> str | None:
    """The server to talk to: `base_url`, else `$ASSAY_BASE_URL`, else `$CLIENT_BASE_URL`;
    None (run in-process) when none is set."""
    candidates = [base_url, *(os.environ.get(name) for name in BASE_URL_ENV_VARS)]
    for candidate in candidates:
        if candidate and candidate.strip():
            return candidate.strip().rstrip("/")
    return None


def env_auth_header() -> str | None:
    """`Bearer $ASSAY_API_KEY` when that is set (as the CLI and the TypeScript client read it)."""
    key = os.environ.get(API_KEY_ENV, "").strip()
    return f"Bearer {key}" if key else None


#: Seconds to wait for each HTTP request: past a server's default bound on judging one request
#: (`judge_timeout_seconds`, 120 s), so a slow judge answers before the client gives up and
#: sends the request again (which judges, and with `publish`, stores it again).
DEFAULT_TIMEOUT = 150.0


def checked_auth_header(header: str) -> str:
    """`header` without surrounding whitespace (a key read from a file keeps its newline);
    APIConnectionError, without echoing the secret, if it cannot go in an HTTP header."""
    header = header.strip()
    if (problem := header_problem(header)) is not None:
        raise APIConnectionError(
            f"could not send the request: auth_header {problem} (the header is not shown: it "
            "holds a secret); check auth_header or ASSAY_API_KEY"
        )
    return header


# --- clients ------------------------------------------------------------------------------------


class _ClientBase:
    """Settings and the in-process and remote paths shared by `Client` and `AsyncClient` (see
    `Client` for the arguments)."""

    def __init__(
        self,
        auth_header: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        judge: str | None = None,
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")  # NaN too
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be a whole number, 0 or more, got {max_retries!r}")
        if judge is not None:
            from assay.judges import judge_names  # registry only; no model is loaded

            if judge not in judge_names():
                known = ", ".join(judge_names())
                raise ValueError(f"unknown judge {judge!r}; known judges: {known}")
        for name, value in (("auth_header", auth_header), ("base_url", base_url)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be text, got {type(value).__name__} {value!r}")
        self.auth_header = auth_header if auth_header is not None else env_auth_header()
        self.base_url = resolve_base_url(base_url)
        self.timeout = timeout
        self.max_retries = max_retries
        self.judge = judge
        self._warned_about_publish = False
        # Created on first remote call, in the event loop that makes it.
        self._http: httpx.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._http_keeper: AsyncGenerator[None, None] | None = None
        # In-process jobs: async_mode items scored at once, kept for `jobs.retrieve` (the
        # IN_PROCESS_JOBS most recent: a long-lived client must not grow without bound).
        self._jobs: OrderedDict[str, Job] = OrderedDict()

    @property
    def in_process(self) -> bool:
        """True when there is no server and detection runs in this process."""
        return self.base_url is None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.auth_header is not None:
            headers["Authorization"] = checked_auth_header(self.auth_header)
        return headers

    async def _detect_in_process(self, items: list[Any]) -> DetectResponse:
        # Checked as for a server, so that what one path refuses (NaN, a set) the other does.
        parsed = parse_items(_wire_items(items))
        if not self._warned_about_publish and any(i.publish or i.async_mode for i in parsed):
            self._warned_about_publish = True
            logger.warning(
                "publish/async_mode need an Assay server (set base_url, $ASSAY_BASE_URL or "
                "$CLIENT_BASE_URL); results are computed in-process, not stored"
            )
        now = [item for item in parsed if not item.async_mode]
        results = iter(await detect_items(now, judge=self.judge) if now else [])
        response = DetectResponse()
        for item in parsed:
            if item.async_mode:
                response.append(DetectResponseItem(await self._job_in_process(item)))
            else:
                response.append(DetectResponseItem(next(results)))
        return response

    async def _job_in_process(self, item: DetectRequestItem) -> dict[str, Any]:
        """Score an async item now and keep the outcome under a new job id, as a server would
        once its worker got to it; returns the server's acknowledgement."""
        job_id = str(uuid.uuid4())
        created = _now()
        job: dict[str, Any] = {
            "id": job_id,
            "attempts": 1,
            "application_name": item.application_name,
            "model_name": item.model_name,
            "created_at": created,
            "result": None,
            "error": None,
        }
        try:
            [result] = await detect_items([item], judge=self.judge)
        except DetectorFailed as error:
            job.update(state="failed", error=str(error))
        else:
            job.update(state="done", result=result)
        job["finished_at"] = _now()
        self._jobs[job_id] = Job(job)
        while len(self._jobs) > IN_PROCESS_JOBS:
            self._jobs.popitem(last=False)
        return {"message": ACCEPTED_IN_PROCESS, "status": 200, "job_id": job_id}

    async def _http_client(self) -> httpx.AsyncClient:
        # Connections belong to the event loop that opened them: used from another loop (a
        # second asyncio.run, a test's own loop), the client opens a fresh pool. Each pool is
        # held by an async generator started in its loop, which the loop closes when it shuts
        # down (asyncio.run and pytest-asyncio finalise a loop's async generators before closing
        # it), so the pool is closed there, not left open with its sockets.
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout))
            self._http_loop = loop
            self._http_keeper = _closed_with_its_loop(self._http)
            await anext(self._http_keeper)
        return self._http

    async def _request(self, method: str, path: str, payload: Any = None) -> Any:
        """One call to the server, retried by the shared policy; its decoded JSON body."""
        assert self.base_url is not None
        http, url, headers = await self._http_client(), self.base_url + path, self._headers()
        if (problem := url_problem(url)) is not None:  # no retry can fix it
            raise APIConnectionError(f"could not send the request (check base_url): {problem}")

        async def attempt() -> Any:
            try:
                response = await http.request(method, url, json=payload, headers=headers)
            except httpx.TransportError as failure:
                raise transport_error(failure) from failure
            if not response.is_success:
                raise status_error(response)
            # JSON, else the text: each caller checks the shape it expects and says so.
            return decoded_body(response)

        policy = RetryPolicy(attempts=self.max_retries + 1)
        try:
            return await retry(attempt, policy, _worth_retrying, what=f"{method} {url}")
        except GaveUp as gave_up:
            # Keep the error's own cause (the httpx failure), not the retry loop's.
            raise gave_up.error from gave_up.error.__cause__

    async def _detect_remote(self, items: list[Any]) -> DetectResponse:
        # Checked here as in-process, so a malformed item is the same RequestValidationError
        # either way and costs no round trip; detector and judge names are the server's to know.
        wire = _wire_items(items)
        parse_items(wire, registry=False)
        try:
            body = await self._request("POST", DETECT_PATH, wire)
        except APIError as error:
            failed = _detector_failed(error.body)
            if failed is None:
                raise
            raise failed from error
        response = _response_items(body)
        if len(response) != len(wire):  # a caller indexing the answer would fail far from here
            raise APIError(
                f"sent {len(wire)} item(s), the server answered {len(response)}",
                body=list(response),
            )
        return response

    async def _retrieve_job(self, job_id: str) -> Job:
        if not isinstance(job_id, str) or not job_id:
            # An AssayError (and a ValueError), as the TypeScript client's is an AssayError.
            raise RequestValidationError(
                "job_id", f"must be the job_id text a detect call returned, got {job_id!r}"
            )
        if self.in_process:
            job = self._jobs.get(job_id)
            if job is None:
                raise NotFoundError(
                    f"job {job_id[:64]!r} not found in this client (it keeps its "
                    f"{IN_PROCESS_JOBS:,} most recent in-process jobs)",
                    status_code=404,
                )
            return Job(job)
        body = await self._request("GET", JOBS_PATH + quote(job_id, safe=""))
        if not isinstance(body, dict):
            raise APIError("expected a JSON object from the server", body=body)
        return Job(body)

    async def _wait_job(self, job_id: str, timeout: float, poll_interval: float) -> Job:
        for name, value in (("timeout", timeout), ("poll_interval", poll_interval)):
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and value > 0):  # NaN fails too
                raise ValueError(f"{name} must be positive seconds, got {value!r}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen: Job | None = None
        while True:
            # Each poll, retries included, ends with the wait (plus a grace, so the poll made
            # at the deadline can still see the job finish): a server that does not answer
            # cannot stretch the wait to several request timeouts.
            try:
                async with asyncio.timeout_at(max(deadline, loop.time() + JOB_POLL_GRACE)):
                    seen = await self._retrieve_job(job_id)
            except TimeoutError:
                if seen is not None:
                    raise JobWaitTimeout(seen, timeout) from None
                raise APITimeoutError(
                    f"job {job_id[:64]!r}: the server did not answer within the wait's "
                    f"{timeout:g} s"
                ) from None
            left = deadline - loop.time()
            if seen.finished:
                return seen
            if left <= 0:
                raise JobWaitTimeout(seen, timeout)
            await asyncio.sleep(min(poll_interval, left))

    async def _publish(
        self,
        application_name: str,
        model_name: str,
        run_id: str,
        items: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        if self.in_process:
            raise RequestValidationError(
                "base_url", "publishing results needs an Assay server: give base_url"
            )
        path = f"/v1/applications/{quote(application_name, safe='')}/detections"
        payload = {"model_name": model_name, "run_id": run_id, "items": list(items)}
        check_encodable(payload)
        body = await self._request("POST", path, payload)
        if not isinstance(body, dict):
            raise APIError("expected a JSON object from the server", body=body)
        return body

    async def _close_http(self) -> None:
        if self._http_keeper is not None and self._http_loop is asyncio.get_running_loop():
            await self._http_keeper.aclose()  # closes the pool
        self._http = self._http_loop = self._http_keeper = None


async def _closed_with_its_loop(http: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Holds `http` open until closed: by the client, or by its loop's shutdown."""
    try:
        yield
    finally:
        await http.aclose()


class Client(_ClientBase):
    """Synchronous client. `client.inference.detect(body=[...])` returns one
    `DetectResponseItem` per request item.

    auth_header: sent verbatim as the `Authorization` header (e.g. "Bearer <key>"); default
        `Bearer $ASSAY_API_KEY` when that is set; unused in-process.
    base_url: the server (e.g. "http://127.0.0.1:8000"); default `$ASSAY_BASE_URL`, else
        `$CLIENT_BASE_URL`; with none, detection runs in this process.
    timeout: seconds to wait for each HTTP request (default 150, above a server's 120 s bound
        on judging one request).
    max_retries: retries after a 429, a 5xx or a connection failure.
    judge: in-process judge backend for detectors whose config names none (default
        `$ASSAY_JUDGE`, else "embedded").
    """

    @cached_property
    def inference(self) -> Inference:
        return Inference(self)

    @cached_property
    def jobs(self) -> Jobs:
        return Jobs(self)

    @cached_property
    def detections(self) -> Detections:
        return Detections(self)

    @cached_property
    def _loop(self) -> LoopThread:
        return LoopThread("assay-client")

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one of the async implementations: on the client's loop thread when remote (its
        connection pool lives there), else to completion here."""
        if self.in_process:
            return run_sync(coro)
        return self._loop.run(coro)

    def _detect(self, body: DetectBody) -> DetectResponse:
        items = _body_items(body)
        if self.in_process:
            return run_sync(self._detect_in_process(items))
        return self._loop.run(self._detect_remote(items))

    def close(self) -> None:
        """Close the HTTP connection pool and the client's loop thread (nothing to do
        in-process)."""
        self._loop.close(self._close_http)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient(_ClientBase):
    """Asynchronous client with `Client`'s arguments; `await client.inference.detect(body=[...])`.

    Use it as `async with AsyncClient(...) as client:` or call `await client.aclose()` when done.
    """

    @cached_property
    def inference(self) -> AsyncInference:
        return AsyncInference(self)

    @cached_property
    def jobs(self) -> AsyncJobs:
        return AsyncJobs(self)

    @cached_property
    def detections(self) -> AsyncDetections:
        return AsyncDetections(self)

    async def _detect(self, body: DetectBody) -> DetectResponse:
        items = _body_items(body)
        if self.in_process:
            return await self._detect_in_process(items)
        return await self._detect_remote(items)

    async def aclose(self) -> None:
        """Close the HTTP connection pool (nothing to do in-process)."""
        await self._close_http()

    async def close(self) -> None:
        """Same as `aclose()` (AIMon's SDK spells it `close`)."""
        await self.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
