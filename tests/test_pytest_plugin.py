"""The pytest plugin, used the way a user would: test files run by pytest's own `pytester`.

The inner runs load the plugin through its `pytest11` entry point, as any project that
installs Assay gets it, and judge with the real embedded judge.
"""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from importlib.metadata import entry_points
from pathlib import Path

# Loaded before the inner runs: pytester takes modules an inner run imports out of sys.modules
# afterwards, and numpy's C extension cannot be loaded twice in one process (run alone, this
# file's second inner run failed with "cannot load module more than once per process").
import httpcore  # noqa: F401  (httpx imports it on first use: an inner run would drop it)
import numpy  # noqa: F401
import onnxruntime  # noqa: F401
import pytest

from assay import AsyncClient, RequestValidationError
from assay.pytest_plugin import AssayClient, assert_detect
from published_instructions import OUTPUT_RELEVANCE

pytest_plugins = ["pytester"]

QUERY = "What is the capital of France?"
ON_TOPIC = "The capital of France is Paris."
OFF_TOPIC = "Bananas are rich in potassium and grow in warm tropical climates."


@pytest.fixture(autouse=True)
def in_process(no_server_env: None) -> None:
    """Every test here starts without a server configured."""


def run(pytester: pytest.Pytester) -> pytest.RunResult:
    """Run the inner test files in this process, as a project with no pytest settings would."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester.runpytest("-p", "no:cacheprovider")


def test_the_plugin_is_registered_as_a_pytest11_entry_point() -> None:
    plugins = {e.name: e.value for e in entry_points(group="pytest11")}

    assert plugins["assay"] == "assay.pytest_plugin"


def test_assert_detect_passes_on_topic_and_fails_off_topic_with_the_breakdown(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        f"""
        from assay.pytest_plugin import assert_detect

        def test_on_topic(assay):
            result = assay.assert_detect({ON_TOPIC!r}, user_query={QUERY!r})
            assert result["output_relevance"]["score"] >= 0.7

        def test_off_topic(assay):
            assay.assert_detect({OFF_TOPIC!r}, user_query={QUERY!r})

        def test_plain_function_without_the_fixture():
            assert_detect({ON_TOPIC!r}, user_query={QUERY!r}, detectors="output_relevance")
        """
    )

    result = run(pytester)

    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: assay: output_relevance did not reach min_score",
            f"*query:    {QUERY!r}",
            f"*response: {OFF_TOPIC!r}",
            "*output_relevance: score * (below threshold 0.7)",
            f"*✗ {OUTPUT_RELEVANCE[0]} (p=0.*)",
            "*FAILED test_assert_detect_passes_on_topic_and_fails_off_topic_with_the_breakdown.py::test_off_topic*",
        ]
    )
    # The failing line of the user's test is shown, not the helper's insides.
    assert "__tracebackhide__" not in result.stdout.str()
    assert "def assert_detect(" not in result.stdout.str()


def test_per_detector_thresholds_and_the_default_detectors_from_the_inputs_given(
    pytester: pytest.Pytester,
) -> None:
    context = "Paris is the capital and largest city of France."
    pytester.makepyfile(
        f"""
        def test_both_detectors_run_when_query_and_context_are_given(assay):
            result = assay.assert_detect(
                {ON_TOPIC!r}, user_query={QUERY!r}, context=[{context!r}], min_score=0.0
            )
            assert set(result) == {{"output_relevance", "completeness"}}

        def test_a_lenient_threshold_for_one_detector(assay):
            assay.assert_detect({OFF_TOPIC!r}, user_query={QUERY!r},
                                min_score={{"output_relevance": 0.0}})

        def test_a_strict_threshold_for_the_other(assay):
            assay.assert_detect({OFF_TOPIC!r}, user_query={QUERY!r}, context={context!r},
                                min_score={{"output_relevance": 0.0, "completeness": 1.0}})
        """
    )

    result = run(pytester)

    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*assay: completeness did not reach min_score",
            "*output_relevance: score * (meets 0)",
            "*completeness: score * (below threshold 1)",
        ]
    )


def test_a_detector_that_cannot_score_fails_the_test_as_an_error_not_a_verdict(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(
        """
        from assay.judges import register_judge
        from assay.judges.base import Judge
        from assay.schema import JudgeFailure

        class Unreachable(Judge):
            async def answer(self, questions):
                return [JudgeFailure("transport", "connection refused")] * len(questions)

        register_judge("unreachable", Unreachable)
        """
    )
    pytester.makepyfile(
        f"""
        import pytest
        from assay import DetectorFailed

        def test_scored_by_a_broken_judge(assay):
            assay.assert_detect({ON_TOPIC!r}, user_query={QUERY!r})

        def test_the_outage_can_be_told_apart(assay):
            with pytest.raises(DetectorFailed) as error:
                assay.assert_detect({ON_TOPIC!r}, user_query={QUERY!r})
            assert error.value.detector == "output_relevance"
            assert error.value.failure.kind == "transport"
            assert not isinstance(error.value, AssertionError)
        """
    )
    monkeypatch.setenv("ASSAY_JUDGE", "unreachable")

    result = run(pytester)

    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*DetectorFailed: detector 'output_relevance' failed: transport: connection refused",
            "*assay: output_relevance could not be scored (no verdict)",
            "*output_relevance: error (transport): *connection refused*",
        ]
    )
    assert "did not reach min_score" not in result.stdout.str()


def test_the_fixture_talks_to_the_server_named_by_assay_base_url(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on this port (the OS just closed it), so reaching out proves the
    # fixture went remote instead of judging in-process.
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("ASSAY_BASE_URL", f"http://127.0.0.1:{port}")
    pytester.makepyfile(
        f"""
        import pytest
        from assay import APIConnectionError

        def test_remote(assay):
            assert assay.base_url == "http://127.0.0.1:{port}"
            assert not assay.in_process
            assay.max_retries = 0
            with pytest.raises(APIConnectionError):
                assay.assert_detect({ON_TOPIC!r}, user_query={QUERY!r})
        """
    )

    result = run(pytester)

    result.assert_outcomes(passed=1)


def test_bad_arguments_are_value_errors_naming_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="min_score names completeness, which is not among"):
        assert_detect(ON_TOPIC, user_query=QUERY, min_score={"completeness": 0.5})
    with pytest.raises(ValueError, match="min_score for output_relevance is 1.5"):
        assert_detect(ON_TOPIC, user_query=QUERY, min_score=1.5)
    for wrong in ("abc", None, True):
        with pytest.raises(ValueError, match="min_score for output_relevance must be a number"):
            assert_detect(ON_TOPIC, user_query=QUERY, min_score=wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no detector has the inputs given"):
        assert_detect(ON_TOPIC)
    # Named as the argument, not as the request's item "[0]".
    with pytest.raises(RequestValidationError) as empty:
        assert_detect("", user_query=QUERY)
    assert empty.value.field == "generated_text" and "[0]" not in str(empty.value)
    # assert_detect waits for its answer: an AsyncClient's detect would hand back a coroutine.
    with pytest.raises(TypeError, match="client: expected an assay.Client .* got AsyncClient"):
        assert_detect(ON_TOPIC, user_query=QUERY, client=AsyncClient())  # type: ignore[arg-type]
    # A misspelt detector is named as such (min_score's correctly spelt key was blamed).
    for detectors in ("output_relevence", ["output_relevence"]):
        with pytest.raises(ValueError, match="detectors: unknown detector 'output_relevence'"):
            assert_detect(
                ON_TOPIC,
                user_query=QUERY,
                detectors=detectors,
                min_score={"output_relevance": 0.9},
            )


def test_any_real_number_is_a_threshold() -> None:
    # numpy's scalars and fractions are numbers too (np.float32 was refused).
    for threshold in (numpy.float32(0.5), numpy.int64(0), Fraction(1, 2)):
        result = assert_detect(ON_TOPIC, user_query=QUERY, min_score=threshold)  # type: ignore[arg-type]
        assert result["output_relevance"]["score"] >= 0.5


def test_loading_the_plugin_imports_nothing_of_assays_judging() -> None:
    # The plugin loads in every pytest run of an environment with Assay; the client, the
    # detectors and their dependencies wait until a test asks for them.
    code = (
        "import sys, assay.pytest_plugin as p; "
        "print(sorted(m for m in sys.modules if m.startswith(('assay.', 'httpx', 'pydantic'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "['assay.pytest_plugin']"
    # Asked for, its names are the ones `assay.assertions` defines.
    import assay.pytest_plugin as plugin

    assert plugin.assert_detect is assert_detect and plugin.AssayClient is AssayClient


def test_assert_detect_returns_the_result_when_it_passes() -> None:
    with AssayClient() as client:
        result = client.assert_detect(ON_TOPIC, user_query=QUERY, min_score=0.5)

    relevance = result["output_relevance"]
    assert relevance["score"] >= 0.5
    assert [e["instruction"] for e in relevance["instructions_list"]] == OUTPUT_RELEVANCE
    assert all(e["explanation"] for e in relevance["instructions_list"])


def test_the_readme_shows_the_failure_message_the_plugin_gives() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("AssertionError: assay:", 1)[1].split("```", 1)[0]
    shown = ["AssertionError: assay:" + block.splitlines()[0]] + [
        line.strip() for line in block.splitlines()[1:] if line.strip() not in ("", "...")
    ]
    with pytest.raises(AssertionError) as failure:
        assert_detect(OFF_TOPIC, user_query=QUERY, detectors=["output_relevance"])
    given = [line.strip() for line in f"AssertionError: {failure.value}".splitlines()]
    given = [line for line in given if line]
    assert given[: len(shown)] == shown
