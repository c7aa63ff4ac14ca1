"""Every probability is read where the answer is (issue 17): from the JSON value of the
instruction's own key, at the token holding its first character; never from a quote or an
explanation. Label, probability and explanation agree, and a written answer that disagrees with
its probability is recorded and counted. Logprob shapes from the loopback stub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import parse_items, questions_for
from assay.judges import Verdict
from assay.runner import run_file
from conftest import StubServer
from llm.replies import answer_token, chat_body, ok, plain, rubric_reply, token_body
from llm.stub_judge import (  # noqa: F401 - restore_openai_judge is an autouse fixture
    PROBABILITIES,
    item,
    probabilities,
    relevance,
    restore_openai_judge,
    use_judge,
    write_rows,
)

#: The model wrote "no" for instruction 1, but its answer token gives P(yes) = 0.8.
DISAGREEING = chat_body('{"1": "no", "2": "no", "3": "yes", "4": "no"}', [0.8, 0.2, 0.65, 0.4])


def explanations(result: dict[str, object]) -> list[str]:
    return [entry["explanation"] for entry in result["instructions_list"]]  # type: ignore[index,union-attr]


@pytest.mark.parametrize("explain", [False, True])
async def test_a_quote_that_looks_like_an_answer_is_never_read_as_one(
    stub_server: StubServer, explain: bool
) -> None:
    use_judge(stub_server)
    if explain:
        content = (
            '{"1": "yes", "1_quote": "Step 2: no", "2": "yes", "2_quote": "Step 1: no", '
            '"3": "no", "3_quote": "3: yes", "4": "yes", "4_quote": "soft"}'
        )
        # In order of the yes/no words: answer 1, the quote's "no", answer 2, the quote's
        # "no", answer 3, the quote's "yes", answer 4. The quotes' words are near-certain.
        reply = chat_body(content, [0.95, 0.01, 0.95, 0.01, 0.2, 0.99, 0.8])
    else:
        reply = chat_body('{"1": "yes", "2": "yes", "3": "no", "4": "yes"}', [0.95, 0.95, 0.2, 0.8])
    stub_server.reply(ok(reply))
    result = await relevance(explain)
    assert probabilities(result) == [0.95, 0.95, 0.2, 0.8]
    if explain:
        assert explanations(result)[0] == (
            'The response follows this instruction (P(yes) = 0.95). Evidence: "Step 2: no".'
        )
    else:
        assert explanations(result) == [""] * 4


async def test_an_answer_split_across_tokens_is_read_at_its_first_piece(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server)
    split = ("y", {"y": -0.3567, "n": -1.2040, "The": -9.0})  # P(y) = 0.7, P(n) = 0.3
    tokens = [plain('{"1": "'), split, plain('es", "2": "'), answer_token("no", 0.2)]
    tokens += [plain('", "3": "'), answer_token("yes", 0.65), plain('", "4": "')]
    tokens += [answer_token("no", 0.4), plain('"}')]
    stub_server.reply(ok(token_body(tokens)))
    result = await relevance()
    assert probabilities(result) == pytest.approx([0.7, 0.2, 0.65, 0.4], abs=1e-3)


async def test_an_answer_written_twice_is_ambiguous_and_asked_again(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server)
    twice = chat_body(
        '{"1": "yes", "1": "no", "2": "no", "3": "yes", "4": "no"}', [0.9, 0.1, 0.2, 0.65, 0.4]
    )
    stub_server.reply(ok(twice), rubric_reply(PROBABILITIES))
    result = await relevance()
    assert probabilities(result) == [0.9, 0.2, 0.65, 0.4]  # 1 from the re-ask, the rest kept
    assert len(stub_server.requests) == 2


@pytest.mark.parametrize("explain", [False, True])
def test_a_written_answer_against_its_probability_is_counted_in_the_run(
    stub_server: StubServer, tmp_path: Path, explain: bool
) -> None:
    use_judge(stub_server)
    stub_server.reply(ok(DISAGREEING))
    rows = write_rows(tmp_path, ["Boil the eggs for 6 minutes."])
    summary = run_file(rows, detectors=["output_relevance"], judge="openai", explain=explain)
    line = json.loads(Path(summary.output_path or "").read_text())
    first = line["output_relevance"]["instructions_list"][0]
    assert first["follow_probability"] == 0.8 and first["label"] is True
    assert summary.usage.disagreements == 1 and line["usage"]["disagreements"] == 1
    assert summary.to_dict()["llm"]["disagreements"] == 1
    if explain:
        assert first["explanation"] == (
            "The response follows this instruction (P(yes) = 0.8). "
            'The model wrote "no" against its own probability.'
        )


async def test_a_written_answer_against_its_probability_is_in_the_evidence(
    stub_server: StubServer,
) -> None:
    judge = use_judge(stub_server)
    stub_server.reply(ok(DISAGREEING))
    questions = questions_for(parse_items([item()])[0], DETECTORS["output_relevance"])
    first, second, *_ = await judge.answer(questions)
    assert isinstance(first, Verdict) and isinstance(second, Verdict)
    assert first.evidence["written_answer"] == "no"
    assert first.evidence["disagreement"] == "wrote no, P(yes) = 0.8"
    assert second.evidence["written_answer"] == "no" and "disagreement" not in second.evidence


async def test_label_and_explanation_follow_the_probability_as_it_is_sent(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server)
    # 0.49996 rounds to 0.5 on the wire: label true, so the explanation must say "follows".
    stub_server.reply(
        ok(chat_body('{"1": "no", "2": "no", "3": "yes", "4": "no"}', [0.49996, 0.2, 0.65, 0.4]))
    )
    result = await relevance(explain=True)
    first = result["instructions_list"][0]
    assert first["follow_probability"] == 0.5 and first["label"] is True
    assert first["explanation"].startswith("The response follows this instruction (P(yes) = 0.5)")


@pytest.mark.parametrize("explain", [False, True])
async def test_per_instruction_answers_are_read_at_the_first_token(
    stub_server: StubServer, explain: bool
) -> None:
    use_judge(stub_server, strategy="per_instruction")
    reply = (
        [answer_token("Yes", 0.8), plain(" - six minutes")]
        if explain
        else [answer_token("Yes", 0.8)]
    )
    stub_server.reply(ok(token_body(reply)))
    result = await relevance(explain)
    assert probabilities(result) == [0.8] * 4
    assert len(stub_server.requests) == 4
    budgets = {r.body["max_tokens"] for r in stub_server.requests}
    assert budgets == ({64} if explain else {1})
    if explain:
        assert explanations(result)[0].endswith('Evidence: "six minutes".')


async def test_a_per_instruction_reply_opening_with_a_refusal_is_low_confidence(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server, strategy="per_instruction")
    stub_server.reply(ok(token_body([answer_token("I", 0.6, mass=0.0009)])))
    result = await relevance()
    assert result["kind"] == "low_confidence_answer"
