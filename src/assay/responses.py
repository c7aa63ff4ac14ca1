"""What the clients return: response items, whole responses and async jobs.

Each is a plain `dict` or `list` underneath (so `json.dumps` and equality with the wire JSON
work), with attribute access, a `repr` short enough to read in a notebook, and `to_pandas()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from assay.frames import require_pandas, result_columns
from assay.schema import AssayError

__all__ = ["DetectResponse", "DetectResponseItem", "Job", "JobWaitTimeout", "short_result"]

#: How many items a `DetectResponse` names in its repr before "… and N more".
_REPR_ITEMS = 3


def short_result(value: Any) -> str:
    """One result in a few characters: `0.75`, `error(timeout)`, or the value's repr."""
    if isinstance(value, Mapping):
        if value.get("error") is True:
            return f"error({value.get('kind', 'error')})"
        score = value.get("score")
        if isinstance(score, int | float) and not isinstance(score, bool):
            return f"{score:.4g}"
    if isinstance(value, str) and len(value) > 36:
        return repr(value[:35] + "…")  # cut inside the quotes, which stay balanced
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _AttributeDict(dict[str, Any]):
    """A dict whose keys can also be read as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            what = type(self).__name__
            raise AttributeError(
                f"{what} has no {name!r}; it holds: {', '.join(self) or 'nothing'}"
            ) from None

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *(key for key in self if key.isidentifier())})


class DetectResponseItem(_AttributeDict):
    """One response item: a plain dict (detector name -> result) that also allows attribute
    access, so both `item.output_relevance` and `item["output_relevance"]` work and
    `json.dumps(item)` needs nothing special. Its repr shows the scores only; `dict(item)` or
    `json.dumps(item, indent=2)` shows everything."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={short_result(value)}" for name, value in self.items())
        return f"DetectResponseItem({fields})"

    def to_pandas(self) -> Any:
        """A one-row `pandas.DataFrame`: each detector's score, error kind and instruction
        probabilities (see `DetectResponse.to_pandas`)."""
        return DetectResponse([self]).to_pandas()


class DetectResponse(list[DetectResponseItem]):
    """What `inference.detect` returns: one `DetectResponseItem` per request item, in order."""

    def __repr__(self) -> str:
        shown = ", ".join(repr(item) for item in self[:_REPR_ITEMS])
        more = f", … and {len(self) - _REPR_ITEMS} more" if len(self) > _REPR_ITEMS else ""
        return f"DetectResponse([{shown}{more}])"

    def to_pandas(self) -> Any:
        """A `pandas.DataFrame` with one row per item: `<detector>.score`, `<detector>.error`
        (its kind, if it failed) and `<detector>.<check>` (each instruction's
        follow_probability). Needs pandas (`pip install 'assay[pandas]'`)."""
        pandas = require_pandas()
        return pandas.DataFrame([result_columns(item) for item in self])


class Job(_AttributeDict):
    """An async job as `jobs.retrieve` returns it: `id`, `state` (queued, running, done or
    failed), `result` (a `DetectResponseItem` once done), `error`, `attempts`,
    `application_name`, `model_name`, `created_at`, `finished_at`."""

    def __init__(self, fields: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        super().__init__(fields)
        if isinstance(self.get("result"), Mapping):
            self["result"] = DetectResponseItem(self["result"])

    @property
    def finished(self) -> bool:
        """True once the job is done or failed."""
        return self.get("state") in ("done", "failed")

    def __repr__(self) -> str:
        result = self.get("result")
        shown = f", result={result!r}" if result is not None else ""
        error = f", error={self['error']!r}" if self.get("error") else ""
        return f"Job(id={self.get('id')!r}, state={self.get('state')!r}{shown}{error})"


class JobWaitTimeout(AssayError, TimeoutError):
    """`jobs.wait` gave up: the job was still queued or running when its time ran out.

    job: the job as last seen.
    """

    def __init__(self, job: Job, timeout: float) -> None:
        super().__init__(f"job {job.get('id')!r} is still {job.get('state')} after {timeout:g} s")
        self.job = job
