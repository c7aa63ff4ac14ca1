"""The LLM judge's parts on their own: reading logprobs, tolerant parsing, settings, the cache,
the cascade band, retry-after, and the dry-run estimate."""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from assay.judges.base import Judge, Question, Verdict
from assay.judges.cache import CallCache, cache_key
from assay.judges.cascade import CascadeJudge, band_from_env, parse_band
from assay.judges.openai.calls import Completion, TokenLogprob
from assay.judges.openai.endpoint import call_key
from assay.judges.openai.estimate import estimate_cost
from assay.judges.openai.judge import request_tag, rubric_requests
from assay.judges.openai.logprobs import answer_of, yes_probability
from assay.judges.openai.parsing import read_fields, read_single
from assay.judges.openai.probe import Capabilities, record_key
from assay.judges.openai.settings import LLMSettings, parse_overrides, settings_from_env
from assay.judges.openai.verdicts import verdict_from_reading
from assay.schema import JudgeFailure, RequestValidationError


@pytest.mark.parametrize(
    ("token", "answer"),
    [(" yes", "yes"), ("Yes", "yes"), ('"YES', "yes"), ("true", "yes"), ("\u2581No", "no")],
)
def test_answer_spellings(token: str, answer: str) -> None:
    assert answer_of(token) == answer


def test_not_answers() -> None:
    assert answer_of("yesterday") is None and answer_of("The") is None and answer_of("n") is None


def test_p_yes_sums_spellings_and_ignores_other_tokens() -> None:
    alternatives = {
        "Yes": math.log(0.3),
        " yes": math.log(0.1),
        "No": math.log(0.2),
        "The": math.log(0.4),
    }
    odds = yes_probability(alternatives)
    assert odds.probability == pytest.approx(0.4 / 0.6) and odds.mass == pytest.approx(0.6)
    assert yes_probability({"The": 0.0}).probability is None


def test_split_answer_pieces_count_only_where_an_answer_is_known_to_be() -> None:
    assert answer_of("y") is None and answer_of("y", partial=True) == "yes"
    assert answer_of(' "n', partial=True) == "no" and answer_of("fa", partial=True) == "no"
    assert answer_of("nope", partial=True) is None and answer_of("", partial=True) is None


def completion(text: str, tokens: list[tuple[str, dict[str, float]]] | None) -> Completion:
    listed = None
    if tokens is not None:
        listed = tuple(TokenLogprob(t, top.get(t, 0.0), top) for t, top in tokens)
    return Completion(text, listed, "stop", 0, 0)


def test_fields_are_read_from_the_json_object_only() -> None:
    reply = completion(
        'Sure! ```json\n{"1": "Yes", "2": false, "2_quote": "six", "3": true}```', None
    )
    readings = read_fields(reply, 3)
    assert [readings[n].answer for n in (1, 2, 3)] == ["yes", "no", "yes"]
    assert all(r.odds is None for r in readings.values())
    assert readings[2].quote == "six"
    # Prose is not JSON: nothing is read from it, whatever it looks like.
    assert read_fields(completion("1: yes\n2: no", None), 2) == {}


def test_quote_keys_are_not_answers_and_placeholder_quotes_are_dropped() -> None:
    reply = completion('{"1": "no", "1_quote": "...", "2_quote": "yes", "2": "yes"}', None)
    readings = read_fields(reply, 2)
    assert readings[1].answer == "no" and readings[1].quote == ""
    assert readings[2].answer == "yes" and readings[2].quote == "yes"


def test_single_answer_uses_the_alternatives_even_when_the_first_token_is_not_an_answer() -> None:
    top = {"The": math.log(0.3), "Yes": math.log(0.15), "No": math.log(0.45)}
    reading = read_single(completion("The", [("The", top)]))
    assert reading is not None and reading.answer is None
    assert reading.odds is not None and reading.odds.probability == pytest.approx(0.25)
    asked = question("a", "r")
    verdict = verdict_from_reading(reading, asked, "length", min_mass=0.5)
    assert isinstance(verdict, Verdict) and verdict.follow_probability == 0.25
    # The same reading with less than half the probability on yes/no is not scored.
    thin = {"The": math.log(0.5), "Yes": math.log(0.1), "No": math.log(0.3)}
    unsure = read_single(completion("The", [("The", thin)]))
    failure = verdict_from_reading(unsure, asked, "length", min_mass=0.5)
    assert isinstance(failure, JudgeFailure) and failure.kind == "low_confidence_answer"


def test_settings_from_environment_and_bad_values_name_the_variable() -> None:
    settings = settings_from_env(
        {"ASSAY_LLM_MODEL": "m", "ASSAY_LLM_VOTES": "3", "ASSAY_LLM_CACHE": "off"}
    )
    assert (settings.model, settings.votes, settings.cache) == ("m", 3, False)
    with pytest.raises(RequestValidationError) as bad:
        settings_from_env({"ASSAY_LLM_TIMEOUT": "soon"})
    assert bad.value.field == "ASSAY_LLM_TIMEOUT"
    with pytest.raises(RequestValidationError) as negative:
        settings_from_env({"ASSAY_LLM_CONCURRENCY": "0"})
    assert negative.value.field == "ASSAY_LLM_CONCURRENCY"
    assert parse_overrides(["max-attempts=2", "cache=false"]) == {"max_attempts": 2, "cache": False}
    with pytest.raises(RequestValidationError):
        parse_overrides(["colour=blue"])


@pytest.mark.parametrize(
    ("environ", "variable", "words"),
    [
        ({"ASSAY_LLM_ROW_TIMEOUT": "nan"}, "ASSAY_LLM_ROW_TIMEOUT", "finite number"),
        ({"ASSAY_LLM_VOTE_TEMPERATURE": "inf"}, "ASSAY_LLM_VOTE_TEMPERATURE", "finite number"),
        ({"ASSAY_LLM_BASE_URL": "notaurl"}, "ASSAY_LLM_BASE_URL", "http:// or https:// URL"),
        ({"ASSAY_LLM_BASE_URL": "ftp://x/v1"}, "ASSAY_LLM_BASE_URL", "http:// or https:// URL"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_any_call(
    environ: dict[str, str], variable: str, words: str
) -> None:
    with pytest.raises(RequestValidationError) as bad:
        settings_from_env(environ)
    assert bad.value.field == variable and words in bad.value.message
    with pytest.raises(RequestValidationError, match="finite"):
        LLMSettings(cache_ttl=float("nan"))


def test_cache_round_trip_expiry_and_an_unusable_file(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c" / "calls.sqlite3", ttl=60)
    key = cache_key({"model": "m", "messages": ["hi"]})
    assert key == cache_key({"messages": ["hi"], "model": "m"})  # order does not matter
    assert cache.get(key) is None
    cache.put(key, {"content": "ok"})
    assert cache.get(key) == {"content": "ok"}
    cache.close()
    with sqlite3.connect(tmp_path / "c" / "calls.sqlite3") as db:
        db.execute("UPDATE judge_calls SET created = ?", (time.time() - 120,))
    assert CallCache(tmp_path / "c" / "calls.sqlite3", ttl=60).get(key) is None
    (tmp_path / "folder").mkdir()
    broken = CallCache(tmp_path / "folder", ttl=60)  # a directory, not a database
    broken.put(key, {"content": "ok"})
    assert broken.get(key) is None


def test_band_parsing() -> None:
    assert parse_band("0.2,0.9") == (0.2, 0.9)
    assert band_from_env({"ASSAY_CASCADE_BAND": "0.4, 0.6"}) == (0.4, 0.6)
    with pytest.raises(RequestValidationError) as bad:
        band_from_env({"ASSAY_CASCADE_BAND": "0.9,0.1"})
    assert bad.value.field == "ASSAY_CASCADE_BAND"


class ConstantJudge(Judge):
    """Answers every question with P(follow) = 0.99 and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[Question] = []

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.asked.extend(questions)
        return [Verdict(0.99)] * len(questions)


class FixedJudge(Judge):
    """Answers with a fixed list: confident, unsure, failed, confident."""

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        return [Verdict(0.9), Verdict(0.5), JudgeFailure("unsupported", "x"), Verdict(0.1)]


def question(check: str, response: str) -> Question:
    return Question("output_relevance", check, f"Instruction {check}.", response, "a query")


async def test_cascade_sends_only_uncertain_and_failed_answers_up() -> None:
    second = ConstantJudge()
    cascade = CascadeJudge(FixedJudge(), second, (0.3, 0.7))
    asked = [question(c, "r") for c in ("a", "b", "c", "d")]
    answers = await cascade.answer(asked)
    assert [q.check for q in second.asked] == ["b", "c"]
    assert [a.follow_probability for a in answers] == [0.9, 0.99, 0.99, 0.1]  # type: ignore[union-attr]


def test_estimate_counts_calls_per_strategy_and_skips_cached_ones(tmp_path: Path) -> None:
    asked = [question(c, r) for r in ("one", "two") for c in ("a", "b", "c", "d")]
    fields = LLMSettings(cache=False)
    assert estimate_cost(fields, asked, None).calls == 2
    single = LLMSettings(cache=False, strategy="per_instruction")
    per_instruction = estimate_cost(single, asked, None)
    assert per_instruction.calls == 8 and per_instruction.completion_tokens == 8
    cache = CallCache(tmp_path / "calls.sqlite3", ttl=60)
    first = rubric_requests(fields, asked)[0]
    found = Capabilities("json_object", True, "served-model")
    cache.put(call_key(fields, found, first.request, first.schema, request_tag(None)), {})
    # Without a probe on record the estimate cannot know the keys: every call is to make.
    assert estimate_cost(fields, asked, cache).cached_calls == 0
    cache.put(record_key(fields), found.to_json())
    estimate = estimate_cost(fields, asked, cache)
    assert (estimate.calls, estimate.cached_calls) == (1, 1)
    assert estimate.prompt_tokens > 0 and estimate.completion_tokens == 2 + 4 * 6


def test_an_estimate_with_the_cache_off_still_reads_the_last_probe(tmp_path: Path) -> None:
    # --dry-run --no-cache said "no probe of this endpoint is on record" and counted one call
    # where the endpoint, as its probe had found, needs `votes` sampled calls.
    asked = [question(c, "one") for c in ("a", "b", "c", "d")]
    path = tmp_path / "calls.sqlite3"
    settings = LLMSettings(cache=False, cache_path=path, votes=3)
    assert estimate_cost(settings, asked, None).logprobs is None
    assert not path.exists()  # nothing on record: the file is not made by an estimate
    CallCache(path, ttl=60).put(
        record_key(settings), Capabilities("json_object", False, "served-model").to_json()
    )
    estimate = estimate_cost(settings, asked, None)
    assert (estimate.logprobs, estimate.calls, estimate.cached_calls) == (False, 3, 0)


def test_estimate_counts_votes_when_the_last_probe_found_no_logprobs(tmp_path: Path) -> None:
    asked = [question(c, r) for r in ("one", "two") for c in ("a", "b")]
    for strategy, calls_per_vote in (("fields", 2), ("per_instruction", 4)):
        settings = LLMSettings(cache=False, strategy=strategy, votes=3)
        cache = CallCache(tmp_path / f"{strategy}.sqlite3", ttl=60)
        assert estimate_cost(settings, asked, cache).logprobs is None
        found = Capabilities("json_object", False, "served-model")
        cache.put(record_key(settings), found.to_json())
        estimate = estimate_cost(settings, asked, cache)
        assert (estimate.logprobs, estimate.calls) == (False, 3 * calls_per_vote)
        # A vote the cache holds is not counted again; keys carry the vote's index.
        second_vote = rubric_requests(settings, asked, vote=1)[0]
        key = call_key(settings, found, second_vote.request, second_vote.schema, request_tag(1))
        cache.put(key, {})
        estimate = estimate_cost(settings, asked, cache)
        assert (estimate.calls, estimate.cached_calls) == (3 * calls_per_vote - 1, 1)
        assert "temperature" in second_vote.request and "logprobs" not in second_vote.request


def test_the_estimate_counts_instructions_not_lines_that_look_like_them() -> None:
    hostile = "Fine.\nInstructions:\n1. a\n2. b\n3. c\n4. d\n5. e\n6. f"
    asked = [question(c, hostile) for c in ("a", "b")]
    estimate = estimate_cost(LLMSettings(cache=False), asked, None)
    assert estimate.completion_tokens == 2 + 2 * 6  # two instructions asked, whatever it says


def test_settings_read_from_the_environment_are_trimmed_and_checked_for_what_http_carries() -> None:
    # A key read from a file kept its "\r" (every call "could not reach the LLM endpoint"); a
    # non-ASCII key read as "not valid JSON"; a bad port failed every row as an ExceptionGroup.
    trimmed = settings_from_env(
        {"ASSAY_LLM_API_KEY": "sk-123\r\n", "ASSAY_LLM_BASE_URL": "http://127.0.0.1:8000/v1\n"}
    )
    assert (trimmed.api_key, trimmed.base_url) == ("sk-123", "http://127.0.0.1:8000/v1")
    for environ, variable, words in (
        ({"ASSAY_LLM_API_KEY": "sk-abcé"}, "ASSAY_LLM_API_KEY", "U+00E9 at position 6"),
        ({"ASSAY_LLM_BASE_URL": "http://127.0.0.1:99999/v1"}, "ASSAY_LLM_BASE_URL", "port 99999"),
        ({"ASSAY_LLM_BASE_URL": "http://host/v 1"}, "ASSAY_LLM_BASE_URL", "holds a space"),
    ):
        with pytest.raises(RequestValidationError) as caught:
            settings_from_env(environ)
        assert caught.value.field == variable and words in caught.value.message
        assert "sk-abc" not in caught.value.message  # a key is never echoed


def test_a_short_ttl_reads_its_own_window_but_leaves_other_runs_entries(tmp_path: Path) -> None:
    # A run with cache_ttl=1 deleted every entry older than a second, for every other run.
    path = tmp_path / "calls.sqlite3"
    CallCache(path, ttl=3600).put("k", {"answer": 1})
    with sqlite3.connect(path) as connection:  # written a minute ago
        connection.execute("UPDATE judge_calls SET created = created - 60")

    assert CallCache(path, ttl=1).get("k") is None  # too old for this reader
    assert CallCache(path, ttl=3600).get("k") == {"answer": 1}  # still there for the others
