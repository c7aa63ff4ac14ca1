"""AIMon-compatible Python API: `Client` and `AsyncClient`.

Without a base URL everything runs in this process on Assay's own detectors and judges. With one
(argument, else `$ASSAY_BASE_URL`, else `$CLIENT_BASE_URL`) the request items are posted to the
server's `POST /v2/detect` and its answer comes back in the same shape.

The sync `Client` is a facade over the async code: a remote call runs on the client's own event
loop thread (so its connection pool outlives a call), an in-process one through `run_sync`.
Retries follow the shared policy in `assay.retries`. The `APIError` family lives in
`assay.transport`, the `Detect` decorator and `detect()` in `assay.decorator`, which builds on
this module; `from assay import ...` gives them all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from functools import cached_property
from types import TracebackType
from typing import Any, TypeAlias

import httpx

from assay._sync import LoopThread, run_sync
from assay.detectors.evaluate import check_encodable, detect_items, parse_items
from assay.retries import GaveUp, RetryPolicy, retry
from assay.schema import DetectRequestItem, RequestValidationError
from assay.transport import APIError, classify, decoded_body, status_error, transport_error

__all__ = ["AsyncClient", "Client", "DetectResponseItem"]

logger = logging.getLogger(__name__)

#: Environment variables naming the server, in order of precedence.
BASE_URL_ENV_VARS = ("ASSAY_BASE_URL", "CLIENT_BASE_URL")
DETECT_PATH = "/v2/detect"

RequestItem: TypeAlias = Mapping[str, Any] | DetectRequestItem
#: A request body: one item, or an iterable of items.
DetectBody: TypeAlias = RequestItem | Iterable[RequestItem]


class DetectResponseItem(dict[str, Any]):
    """One response item: a plain dict (detector name -> result) that also allows attribute
    access, so both `item.output_relevance` and `item["output_relevance"]` work and
    `json.dumps(item)` needs nothing special."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"response item has no {name!r}; it holds: {', '.join(self) or 'nothing'}"
            ) from None

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *(key for key in self if key.isidentifier())})


# --- responses ----------------------------------------------------------------------------------


def _response_items(response: httpx.Response) -> list[DetectResponseItem]:
    body = decoded_body(response)
    entries = [body] if isinstance(body, dict) else body
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise APIError(
            "expected a JSON array of objects from the server",
            status_code=response.status_code,
            body=body,
        )
    return [DetectResponseItem(entry) for entry in entries]


# --- request bodies -----------------------------------------------------------------------------


def _body_items(body: DetectBody) -> list[Any]:
    """The body as a list of items; a single item is a list of one."""
    if isinstance(body, Mapping | DetectRequestItem):
        body = [body]
    if isinstance(body, str | bytes) or not isinstance(body, Iterable):
        raise RequestValidationError("body", "must be a JSON array of request items")
    return [dict(item) if isinstance(item, Mapping) else item for item in body]


def _wire_items(items: list[Any]) -> list[Any]:
    """The items as sent to a server. Text that cannot be encoded as UTF-8 (a lone surrogate)
    is refused here, naming its field, as the server and the in-process path would."""
    wire = [
        item.model_dump(mode="json", exclude_none=True)
        if isinstance(item, DetectRequestItem)
        else item
        for item in items
    ]
    check_encodable(wire)
    return wire


def resolve_base_url(base_url: str | None) -> str | None:
    """The server to talk to: `base_url`, else `$ASSAY_BASE_URL`, else `$CLIENT_BASE_URL`;
    None (run in-process) when none is set."""
    candidates = [base_url, *(os.environ.get(name) for name in BASE_URL_ENV_VARS)]
    for candidate in candidates:
        if candidate and candidate.strip():
            return candidate.strip().rstrip("/")
    return None


# --- clients ------------------------------------------------------------------------------------


class _ClientBase:
    """Settings and the in-process and remote paths shared by `Client` and `AsyncClient` (see
    `Client` for the arguments)."""

    def __init__(
        self,
        auth_header: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        judge: str | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries!r}")
        self.auth_header = auth_header
        self.base_url = resolve_base_url(base_url)
        self.timeout = timeout
        self.max_retries = max_retries
        self.judge = judge
        self._warned_about_publish = False
        # Created on first remote call, in the event loop that makes it.
        self._http: httpx.AsyncClient | None = None

    @property
    def in_process(self) -> bool:
        """True when there is no server and detection runs in this process."""
        return self.base_url is None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.auth_header is not None:
            headers["Authorization"] = self.auth_header
        return headers

    async def _detect_in_process(self, items: list[Any]) -> list[DetectResponseItem]:
        parsed = parse_items(items)
        if not self._warned_about_publish and any(i.publish or i.async_mode for i in parsed):
            self._warned_about_publish = True
            logger.warning(
                "publish/async_mode need an Assay server (set base_url, $ASSAY_BASE_URL or "
                "$CLIENT_BASE_URL); results are computed in-process and returned, not stored"
            )
        results = await detect_items(parsed, judge=self.judge)
        return [DetectResponseItem(result) for result in results]

    async def _detect_remote(self, items: list[Any]) -> list[DetectResponseItem]:
        assert self.base_url is not None
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout))
        http = self._http
        url, payload, headers = self.base_url + DETECT_PATH, _wire_items(items), self._headers()

        async def attempt() -> list[DetectResponseItem]:
            try:
                response = await http.post(url, json=payload, headers=headers)
            except httpx.TransportError as failure:
                raise transport_error(failure) from None
            if not response.is_success:
                raise status_error(response)
            return _response_items(response)

        policy = RetryPolicy(attempts=self.max_retries + 1)
        try:
            return await retry(attempt, policy, classify, what=f"POST {url}")
        except GaveUp as gave_up:
            raise gave_up.error from None

    async def _close_http(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


class Client(_ClientBase):
    """Synchronous client. `client.inference.detect(body=[...])` returns one
    `DetectResponseItem` per request item.

    auth_header: sent verbatim as the `Authorization` header (e.g. "Bearer <key>"); unused
        in-process.
    base_url: the server (e.g. "http://127.0.0.1:8000"); default `$ASSAY_BASE_URL`, else
        `$CLIENT_BASE_URL`; with none, detection runs in this process.
    timeout: seconds to wait for each HTTP request.
    max_retries: retries after a 429, a 5xx or a connection failure.
    judge: in-process judge backend for detectors whose config names none (default
        `$ASSAY_JUDGE`, else "embedded").
    """

    @cached_property
    def inference(self) -> Inference:
        return Inference(self)

    @cached_property
    def _loop(self) -> LoopThread:
        return LoopThread("assay-client")

    def _detect(self, body: DetectBody) -> list[DetectResponseItem]:
        items = _body_items(body)
        if self.in_process:
            return run_sync(self._detect_in_process(items))
        return self._loop.run(self._detect_remote(items))

    def close(self) -> None:
        """Close the HTTP connection pool and the client's loop thread (nothing to do
        in-process)."""
        if self._loop.started:
            self._loop.run(self._close_http())
        self._loop.close()

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

    async def _detect(self, body: DetectBody) -> list[DetectResponseItem]:
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


class Inference:
    """`client.inference`: the detection endpoint of a `Client`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def detect(self, body: DetectBody) -> list[DetectResponseItem]:
        """Score request items; returns one `DetectResponseItem` per item, in order.

        body: a list of request items (dicts with `generated_text`, `user_query`, `context`,
            `config`, ...); a single item is accepted too.
        Raises `RequestValidationError` (in-process) or `BadRequestError` (remote) for malformed
        items, `DetectorFailed` when a detector fails under `must_compute="all_or_none"`
        (in-process), and the other `APIError`s for server failures.
        """
        return self._client._detect(body)


class AsyncInference:
    """`client.inference`: the detection endpoint of an `AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def detect(self, body: DetectBody) -> list[DetectResponseItem]:
        """Score request items; see `Inference.detect` for the arguments and errors."""
        return await self._client._detect(body)
