"""`assert_detect`: score one response and fail the calling test unless every detector reaches
its threshold. The pytest plugin (`assay.pytest_plugin`) gives it as the `assay` fixture's method;
`from assay.pytest_plugin import assert_detect` gives it without the fixture.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from assay.client import Client, DetectResponseItem
from assay.decorator import wire_context
from assay.detectors import DETECTORS, detectors_for_inputs
from assay.runner.gates import describe_result, meets
from assay.schema import DetectorFailed, JudgeFailure, RequestValidationError

#: Score a detector must reach when no `min_score` is given (the runner's pass mark too).
DEFAULT_MIN_SCORE = 0.7
#: How much of the query and response a failure message quotes.
_QUOTE_CHARS = 160


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= _QUOTE_CHARS else flat[: _QUOTE_CHARS - 1] + "…")


def _detector_names(
    detectors: str | Iterable[str] | None, user_query: str | None, context: Any
) -> list[str]:
    """The detectors asked for, or by default every one whose required inputs are given."""
    if detectors is not None:
        names = [detectors] if isinstance(detectors, str) else list(detectors)
        if not names:
            raise ValueError("detectors: name at least one detector")
        unknown = [name for name in names if name not in DETECTORS]
        if unknown:  # before min_score is checked against these names
            raise ValueError(
                f"detectors: unknown detector {unknown[0]!r}; known detectors: "
                f"{', '.join(DETECTORS)}"
            )
        return names
    names = detectors_for_inputs(user_query, context)
    if not names:
        raise ValueError("no detector has the inputs given; pass user_query and/or context")
    return names


def _thresholds(names: Sequence[str], min_score: float | Mapping[str, float]) -> dict[str, float]:
    """Each detector's threshold, checked: numbers in [0, 1], named detectors only."""
    if isinstance(min_score, Mapping):
        extra = sorted(set(min_score) - set(names))
        if extra:
            raise ValueError(
                f"min_score names {', '.join(extra)}, which is not among the detectors run "
                f"({', '.join(names)})"
            )
        given = {name: min_score.get(name, DEFAULT_MIN_SCORE) for name in names}
    else:
        given = dict.fromkeys(names, min_score)
    for name, threshold in given.items():
        # bool is an int to Python, but True as a threshold is a mistake, not 1.0.
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
            raise ValueError(
                f"min_score for {name} must be a number from 0 to 1, got {threshold!r}"
            )
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"min_score for {name} is {threshold}; scores run from 0 to 1")
    return {name: float(threshold) for name, threshold in given.items()}


def _failure_message(
    response: DetectResponseItem,
    thresholds: Mapping[str, float],
    below: Sequence[str],
    errored: Sequence[str],
    generated_text: str,
    user_query: str | None,
) -> str:
    headings = []
    if below:
        headings.append(f"{', '.join(below)} did not reach min_score")
    if errored:
        headings.append(f"{', '.join(errored)} could not be scored (no verdict)")
    lines = [f"assay: {'; '.join(headings)}"]
    if user_query is not None:
        lines.append(f"query:    {_quote(user_query)}")
    lines.append(f"response: {_quote(generated_text)}")
    for name, threshold in thresholds.items():
        result = response.get(name)
        lines.append("")
        if not isinstance(result, Mapping):
            lines.append(f"{name}: no result came back")
        elif name in below or name in errored:
            lines.append(describe_result(name, result, threshold))
        else:
            lines.append(f"{name}: score {float(result['score']):.4g} (meets {threshold:g})")
    return "\n".join(lines)


def _errored(result: Any) -> bool:
    """True when a detector gave no score: an error object in its place, or nothing."""
    return not isinstance(result, Mapping) or result.get("error") is True


def assert_detect(
    generated_text: str,
    user_query: str | None = None,
    context: str | Sequence[str] | None = None,
    detectors: str | Iterable[str] | None = None,
    min_score: float | Mapping[str, float] = DEFAULT_MIN_SCORE,
    *,
    client: Client | None = None,
    explain: bool = True,
) -> DetectResponseItem:
    """Score a response and fail the calling test unless every detector reaches its threshold.

    generated_text: the response to judge.
    user_query: the question it answers (output_relevance needs it).
    context: the document(s) it should draw on (completeness needs them).
    detectors: detector name(s) to run; default every detector whose inputs are given.
    min_score: the score each detector must reach, or {detector: score} (detectors left out
        use DEFAULT_MIN_SCORE). A score equal to the threshold passes.
    client: the Client to use (the `assay` fixture's); default a new in-process-or-remote one.
    explain: ask for explanations, so the failure message says why an instruction failed.
    Returns the response item (detector name -> result) when the test should go on. Raises
    AssertionError with the instruction breakdown when a detector is below its threshold;
    DetectorFailed (an error, not a verdict: the judge or server could not score) when a
    detector errored, with the same breakdown as a note; ValueError or TypeError for a bad
    argument.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
    if client is not None and not isinstance(client, Client):  # an AsyncClient is none
        raise TypeError(
            f"client: expected an assay.Client (assert_detect waits for its answer), got "
            f"{type(client).__name__}"
        )
    names = _detector_names(detectors, user_query, context)
    thresholds = _thresholds(names, min_score)
    item: dict[str, Any] = {
        "generated_text": generated_text,
        "config": {name: {"detector_name": "default", "explain": explain} for name in names},
        # A detector that cannot score is reported in the message, next to the others' results.
        "must_compute": "ignore_failures",
    }
    if user_query is not None:
        item["user_query"] = user_query
    if context is not None:
        item["context"] = wire_context(context)
    owned = client is None
    active = Client() if client is None else client
    try:
        response = active.inference.detect(body=[item])[0]
    except RequestValidationError as bad:
        # Named as the argument it came from, not as the wire list's item "[0]".
        raise RequestValidationError(bad.field.removeprefix("[0]."), bad.message) from None
    finally:
        if owned:
            active.close()
    errored = [name for name in thresholds if _errored(response.get(name))]
    below = [
        name
        for name, threshold in thresholds.items()
        if name not in errored and not meets(float(response[name]["score"]), threshold)
    ]
    if not (below or errored):
        return response
    message = _failure_message(response, thresholds, below, errored, generated_text, user_query)
    if not errored:
        raise AssertionError(message)
    # A judge or server that could not score is not a failed check: CI can tell them apart.
    result = response.get(errored[0])
    failure = (
        JudgeFailure(str(result.get("kind", "judge_error")), str(result.get("message", "")))
        if isinstance(result, Mapping)
        else JudgeFailure("judge_error", "no result came back")
    )
    outage = DetectorFailed(errored[0], failure)
    outage.add_note(message)
    raise outage


class AssayClient(Client):
    """The `assay` fixture: a `Client` with `assert_detect` bound to it."""

    def assert_detect(
        self,
        generated_text: str,
        user_query: str | None = None,
        context: str | Sequence[str] | None = None,
        detectors: str | Iterable[str] | None = None,
        min_score: float | Mapping[str, float] = DEFAULT_MIN_SCORE,
        *,
        explain: bool = True,
    ) -> DetectResponseItem:
        """`assert_detect` (see there for the arguments) through this client."""
        __tracebackhide__ = True
        return assert_detect(
            generated_text,
            user_query,
            context,
            detectors,
            min_score,
            client=self,
            explain=explain,
        )
