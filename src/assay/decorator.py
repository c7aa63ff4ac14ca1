"""The `Detect` decorator and the `detect()` notebook function, built on `Client`/`AsyncClient`.

`Detect` scores what the function it decorates returns, in-process or on a server (see
`assay.client` for how the server is chosen); `detect()` scores one response in-process.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec, overload

from assay._sync import run_sync
from assay.client import API_KEY_ENV, AsyncClient, Client, DetectResponseItem, resolve_base_url
from assay.detectors import DETECTORS, detectors_for_inputs
from assay.detectors.evaluate import detect_items, parse_item
from assay.resources import AsyncJobs, Jobs
from assay.responses import short_result
from assay.schema import (
    RequestValidationError,
)
from assay.transport import url_problem

__all__ = ["RETURNABLE_FIELDS", "Detect", "DetectResult", "detect"]

#: Names a decorated function's return values may be given (`Detect(values_returned=...)`).
RETURNABLE_FIELDS = ("generated_text", "context", "user_query", "instructions")
#: The texts among them (what the detectors read).
_TEXTS = ("generated_text", "user_query", "context")
P = ParamSpec("P")


# --- the decorator ------------------------------------------------------------------------------


@dataclass(repr=False)
class DetectResult:
    """What a `Detect`-decorated function returns after its own values.

    status: 200 when detection succeeded (failures raise instead).
    detect_response: the response item for the function's output (detector name -> result).
    publish_response: always empty, as in AIMon's SDK (kept for code written for it): with
        `publish`, the server stores the results from the detect request itself; read them on
        the dashboard or from `GET /v1/applications/{name}/detections`.
    """

    status: int
    detect_response: DetectResponseItem
    publish_response: list[Any] = field(default_factory=list)

    def __repr__(self) -> str:
        # Scores only: the full response (every instruction and explanation) is tens of lines;
        # `json.dumps(result.detect_response, indent=2)` shows it.
        # An async job's response holds its own `status`, which is already shown first.
        scores = ", ".join(
            f"{name}={short_result(value)}"
            for name, value in self.detect_response.items()
            if name != "status"
        )
        published = f", publish_response={self.publish_response!r}" if self.publish_response else ""
        return f"DetectResult(status={self.status}, {scores}{published})"

    __str__ = __repr__


class Detect:
    """Decorator that scores what the decorated function returns.

    The function's return values (a tuple, or a single value) are named by `values_returned`,
    sent as one request item, and returned unchanged followed by a `DetectResult`. Sync and
    async functions are both supported (an async function gets an async wrapper).

    values_returned: names of the function's return values, in order; each one of
        "generated_text", "context", "user_query", "instructions"; must include "generated_text".
        "instructions" is accepted for AIMon compatibility, but only a None value is: the
        detectors judge their own published instructions.
    config: detector name -> options, e.g. `{"output_relevance": {"detector_name": "default"}}`.
    api_key: sent as `Authorization: Bearer <api_key>` to a server; default `$ASSAY_API_KEY`
        (as every `Client`), else `$AIMON_API_KEY` (what AIMon's snippets set); not needed
        in-process.
    async_mode: ask the server to score in the background (implies `publish`).
    publish: ask the server to store the results (needs `application_name` and `model_name`).
    application_name: the application the results are stored under when publishing.
    model_name: the model the results are stored under when publishing.
    must_compute: "all_or_none" (a failed detector fails the call) or "ignore_failures" (it is
        reported as an error object in its place).
    base_url: the server; default `$ASSAY_BASE_URL`, else `$CLIENT_BASE_URL`, else in-process.
    judge: in-process judge backend (default `$ASSAY_JUDGE`, else "embedded").
    """

    def __init__(
        self,
        values_returned: Iterable[str],
        config: Mapping[str, Mapping[str, Any]],
        api_key: str | None = None,
        async_mode: bool = False,
        publish: bool = False,
        application_name: str | None = None,
        model_name: str | None = None,
        must_compute: Literal["all_or_none", "ignore_failures"] = "all_or_none",
        base_url: str | None = None,
        judge: str | None = None,
    ) -> None:
        self.values_returned = _checked_values_returned(values_returned)
        self.config = _checked_config(config)
        if must_compute not in ("all_or_none", "ignore_failures"):
            raise ValueError(
                f"must_compute must be 'all_or_none' or 'ignore_failures', got {must_compute!r}"
            )
        self.must_compute = must_compute
        for flag, value in (("async_mode", async_mode), ("publish", publish)):
            if not isinstance(value, bool):  # bool("false") is True
                raise ValueError(f"{flag} must be True or False, got {value!r}")
        self.async_mode = async_mode
        self.publish = publish or async_mode
        self.application_name = application_name
        self.model_name = model_name
        # Everything a call's item holds is checked now, as the call would check it (options,
        # names, judges, and that values_returned names every text the detectors need; detector
        # and judge names only when judged here), not after the decorated function (an LLM
        # call) has run and its answer is lost.
        server = resolve_base_url(base_url)
        if server is not None and (problem := _url_problem(server)) is not None:
            raise ValueError(f"base_url: {problem}")
        probe = self.request_item([None] * len(self.values_returned))
        probe |= {name: "text" for name in _TEXTS if name in self.values_returned}
        try:
            parse_item(probe, registry=server is None)
        except RequestValidationError as error:
            missing = error.field.rsplit(".", 1)[-1]
            if missing in _TEXTS and missing not in self.values_returned:
                raise RequestValidationError(
                    "values_returned",
                    f"does not name {missing}, which the config's detectors need ({missing} is "
                    f"{error.message}); add it and return it from the function",
                ) from None
            raise
        # $ASSAY_API_KEY first, as every Client reads it; AIMon's variable only when it is unset.
        key = api_key
        if key is None and not os.environ.get(API_KEY_ENV, "").strip():
            key = os.environ.get("AIMON_API_KEY")
        self._client_args: dict[str, Any] = {
            "auth_header": f"Bearer {key}" if key else None,
            "base_url": base_url,
            "judge": judge,
        }
        self._client = Client(**self._client_args)
        self._async_client = AsyncClient(**self._client_args)
        # One store of in-process jobs for sync and async functions, so `jobs` finds both.
        self._async_client._jobs = self._client._jobs

    @property
    def jobs(self) -> Jobs:
        """The jobs of `async_mode` calls: `retrieve(job_id)` and `wait(job_id)` with the job id
        the call's `DetectResult` holds (on the server, or kept in this process when there is
        none)."""
        return self._client.jobs

    @property
    def async_jobs(self) -> AsyncJobs:
        """`jobs` for async code: `await decorator.async_jobs.wait(job_id)`."""
        return self._async_client.jobs

    def request_item(self, returned: Sequence[Any]) -> dict[str, Any]:
        """The request item built from a decorated function's return values."""
        if len(returned) < len(self.values_returned):
            raise ValueError(
                f"the decorated function returned {len(returned)} value(s) but values_returned "
                f"names {len(self.values_returned)}: {', '.join(self.values_returned)}"
            )
        item: dict[str, Any] = dict(zip(self.values_returned, returned, strict=False))
        item["config"] = copy.deepcopy(self.config)
        item["publish"] = self.publish
        item["async_mode"] = self.async_mode
        item["must_compute"] = self.must_compute
        if self.publish:
            item["application_name"] = self.application_name
            item["model_name"] = self.model_name
        return item

    async def _detect_async(self, item: dict[str, Any]) -> list[DetectResponseItem]:
        # One AsyncClient serves every event loop (it opens a connection pool per loop).
        return await self._async_client.inference.detect(body=[item])

    @overload
    def __call__(
        self, func: Callable[P, Awaitable[Any]]
    ) -> Callable[P, Awaitable[tuple[Any, ...]]]: ...

    @overload
    def __call__(self, func: Callable[P, Any]) -> Callable[P, tuple[Any, ...]]: ...

    def __call__(self, func: Callable[P, Any]) -> Callable[P, Any]:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> tuple[Any, ...]:
                returned = _as_tuple(await func(*args, **kwargs))
                response = await self._detect_async(self.request_item(returned))
                return (*returned, DetectResult(200, response[0]))

            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> tuple[Any, ...]:
            returned = _as_tuple(func(*args, **kwargs))
            response = self._client.inference.detect(body=[self.request_item(returned)])
            return (*returned, DetectResult(200, response[0]))

        return wrapper


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


def _url_problem(url: str) -> str | None:
    """Why `url` cannot reach a server (it does not parse, has a bad port, or is not HTTP)."""
    problem = url_problem(url)
    if problem is None and not url.lower().startswith(("http://", "https://")):
        problem = f"{url!r} must start with http:// or https://"
    return problem


def wire_context(context: Any) -> Any:
    """A context as the wire takes it: a tuple becomes a list; anything else is left for the
    request check to accept or name (a dict's keys were judged as the documents)."""
    return list(context) if isinstance(context, tuple) else context


def _checked_values_returned(values_returned: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values_returned, str):
        values_returned = (values_returned,)
    try:
        names = tuple(values_returned)
    except TypeError:
        raise ValueError("values_returned must be a list of names") from None
    if not names:
        raise ValueError("values_returned must name at least one return value")
    for name in names:
        if name not in RETURNABLE_FIELDS:
            raise ValueError(
                f"values_returned: unknown name {name!r}; use {', '.join(RETURNABLE_FIELDS)}"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"values_returned names a value twice: {', '.join(names)}")
    if "generated_text" not in names:
        raise ValueError("values_returned must include 'generated_text'")
    return names


def _checked_config(config: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A copy of `config`'s shape (its contents are checked with the probe item)."""
    if not isinstance(config, Mapping) or not config:
        raise ValueError("config must map at least one detector name to its options")
    for name, options in config.items():
        if not isinstance(options, Mapping):
            raise ValueError(f"config[{name!r}] must be a dict of options")
    return {name: dict(options) for name, options in config.items()}


# --- the notebook function ----------------------------------------------------------------------


def detect(
    generated_text: str,
    user_query: str | None = None,
    context: str | Sequence[str] | None = None,
    detectors: str | Iterable[str] | None = None,
    explain: bool = True,
    *,
    judge: str | None = None,
) -> DetectResponseItem:
    """Score one response in-process and return detector name -> result.

    generated_text: the response to judge.
    user_query: the question it answers (required by output_relevance; completeness uses it
        when given).
    context: the context document(s) it should draw on (required by completeness).
    detectors: the detector name(s) to run; default every detector whose inputs are given
        (output_relevance with a query, completeness with a context), as `assay run` does.
    explain: whether each instruction gets an explanation (by default it does, as everywhere
        else; False leaves them empty).
    judge: judge backend (default `$ASSAY_JUDGE`, else "embedded").
    Raises `RequestValidationError` naming the offending argument, and `DetectorFailed` when a
    detector cannot score the response.
    """
    if detectors is None:
        names = detectors_for_inputs(user_query, context)
        if not names:
            if isinstance(generated_text, str) and not generated_text.strip():
                # The first thing wrong, as with a query given.
                raise RequestValidationError("generated_text", "must not be empty")
            raise RequestValidationError(
                "detectors", "no detector has the inputs given; pass user_query and/or context"
            )
    else:
        names = [detectors] if isinstance(detectors, str) else list(detectors)
    unknown = [name for name in names if name not in DETECTORS]
    if not names or unknown:
        problem = f"unknown detector {unknown[0]!r}" if unknown else "names no detector"
        raise RequestValidationError(
            "detectors", f"{problem}; known detectors: {', '.join(DETECTORS)}"
        )
    raw: dict[str, Any] = {
        "generated_text": generated_text,
        "user_query": user_query,
        "context": wire_context(context),
        "config": {name: {"detector_name": "default", "explain": explain} for name in names},
    }
    item = parse_item(raw)
    results = run_sync(detect_items([item], judge=judge))
    return DetectResponseItem(results[0])
