"""The namespaces of a client: `inference` (detect), `jobs` (async jobs) and `detections`
(publishing results scored elsewhere). Each sync one runs the async implementation in
`assay.client` through `Client._call`; each async one awaits it."""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

from assay.responses import DetectResponse, Job
from assay.schema import DetectRequestItem

T = TypeVar("T")

RequestItem: TypeAlias = Mapping[str, Any] | DetectRequestItem
#: A request body: one item, or an iterable of items.
DetectBody: TypeAlias = RequestItem | Iterable[RequestItem]


# What the namespaces need of their client (`Client` and `AsyncClient` in `assay.client`); as
# protocols, so that this module does not import the client that imports it.
class _Owner(Protocol):
    async def _retrieve_job(self, job_id: str) -> Job: ...

    async def _wait_job(self, job_id: str, timeout: float, poll_interval: float) -> Job: ...

    async def _publish(
        self,
        application_name: str,
        model_name: str,
        run_id: str,
        items: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]: ...


class SyncOwner(_Owner, Protocol):
    def _call(self, coro: Coroutine[Any, Any, T]) -> T: ...

    def _detect(self, body: DetectBody) -> DetectResponse: ...


class AsyncOwner(_Owner, Protocol):
    async def _detect(self, body: DetectBody) -> DetectResponse: ...


class Inference:
    """`client.inference`: the detection endpoint of a `Client`."""

    def __init__(self, client: SyncOwner) -> None:
        self._client = client

    def detect(self, body: DetectBody) -> DetectResponse:
        """Score request items; returns one `DetectResponseItem` per item, in order (a list;
        `to_pandas()` gives a data frame).

        body: a list of request items (dicts with `generated_text`, `user_query`, `context`,
            `config`, ...); a single item is accepted too.
        Raises `RequestValidationError` (in-process) or `BadRequestError` (remote) for malformed
        items, `DetectorFailed` when a detector fails under `must_compute="all_or_none"`
        (in-process), and the other `APIError`s for server failures.
        """
        return self._client._detect(body)


class AsyncInference:
    """`client.inference`: the detection endpoint of an `AsyncClient`."""

    def __init__(self, client: AsyncOwner) -> None:
        self._client = client

    async def detect(self, body: DetectBody) -> DetectResponse:
        """Score request items; see `Inference.detect` for the arguments and errors."""
        return await self._client._detect(body)


class Jobs:
    """`client.jobs`: the async jobs that `async_mode` items create."""

    def __init__(self, client: SyncOwner) -> None:
        self._client = client

    def retrieve(self, job_id: str) -> Job:
        """The job's state (queued, running, done, failed), and its result once done.

        Raises `NotFoundError` for an unknown id (or another application's job).
        """
        return self._client._call(self._client._retrieve_job(job_id))

    def wait(self, job_id: str, timeout: float = 60.0, poll_interval: float = 0.5) -> Job:
        """Poll until the job is done or failed and return it.

        timeout: seconds to wait in all; then `JobWaitTimeout` (its `job` is the last seen).
        poll_interval: seconds between polls.
        """
        return self._client._call(self._client._wait_job(job_id, timeout, poll_interval))


class AsyncJobs:
    """`client.jobs` of an `AsyncClient`; see `Jobs`."""

    def __init__(self, client: AsyncOwner) -> None:
        self._client = client

    async def retrieve(self, job_id: str) -> Job:
        """See `Jobs.retrieve`."""
        return await self._client._retrieve_job(job_id)

    async def wait(self, job_id: str, timeout: float = 60.0, poll_interval: float = 0.5) -> Job:
        """See `Jobs.wait`."""
        return await self._client._wait_job(job_id, timeout, poll_interval)


class Detections:
    """`client.detections`: store results scored elsewhere on the server."""

    def __init__(self, client: SyncOwner) -> None:
        self._client = client

    def publish(
        self,
        application_name: str,
        model_name: str,
        run_id: str,
        items: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        """Store scored items under an application and model (what `assay run --publish`
        sends); returns `{"stored", "already_stored"}`.

        run_id: the run they come from; with each item's `key` it makes the item's identity,
            so an item sent again is stored once.
        items: `{"key", "generated_text", "user_query"?, "context"?, "results": {detector:
            result or error object}}`.
        """
        return self._client._call(
            self._client._publish(application_name, model_name, run_id, items)
        )


class AsyncDetections:
    """`client.detections` of an `AsyncClient`; see `Detections`."""

    def __init__(self, client: AsyncOwner) -> None:
        self._client = client

    async def publish(
        self,
        application_name: str,
        model_name: str,
        run_id: str,
        items: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        """See `Detections.publish`."""
        return await self._client._publish(application_name, model_name, run_id, items)
