"""llm.ood_detection against a real chatbot on loopback whose scope policy can be changed.

The score must move the right way: a bot that answers its own use case and declines the rest
scores high; one that declines everything (over-refuses) or answers everything (under-refuses)
scores lower, with the matching error rate.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chatbot import (
    BALANCED,
    BANK_PROFILE,
    OVER_REFUSE,
    UNDER_REFUSE,
    RunningChatbot,
    in_domain_rows,
    running_bot,
)

from assay.metrics.ood import (
    HttpJsonSUT,
    OpenAIChatSUT,
    RowResult,
    load_run_config,
    score_rows,
    summarize,
)
from assay.schema import RequestValidationError

CONFIG = {"use_case": BANK_PROFILE, "num_ood_queries": 3}


@pytest.fixture
def chatbot() -> Iterator[RunningChatbot]:
    yield from running_bot()


async def run_openai(bot: RunningChatbot) -> list[RowResult]:
    sut = OpenAIChatSUT(f"{bot.url}/v1", model="harbour-bot")
    try:
        return await score_rows(in_domain_rows(), CONFIG, sut=sut)
    finally:
        await sut.aclose()


async def test_balanced_bot_scores_perfectly_over_the_openai_protocol(
    chatbot: RunningChatbot,
) -> None:
    results = await run_openai(chatbot)
    summary = summarize(results)
    assert [r.score for r in results] == [1.0, 1.0, 1.0]
    assert summary.confusion["in_domain_answer"] == 3
    assert summary.confusion["correct_refusal"] == 9
    assert summary.over_rejection_rate == 0.0 and summary.missed_refusal_rate == 0.0
    # every probe really went to the bot, and none of them was one of its own examples
    assert len(chatbot.policy.queries) == 12


async def test_over_refusing_bot_loses_its_in_domain_cases(chatbot: RunningChatbot) -> None:
    chatbot.policy.threshold = OVER_REFUSE
    summary = summarize(await run_openai(chatbot))
    assert summary.confusion["over_rejection"] == 3
    assert summary.over_rejection_rate == 1.0
    assert summary.mean_score == 0.75  # 3 refused probes of 4 cases per row


async def test_under_refusing_bot_loses_its_probes(chatbot: RunningChatbot) -> None:
    chatbot.policy.threshold = UNDER_REFUSE
    summary = summarize(await run_openai(chatbot))
    assert summary.confusion["missed_refusal"] == 9
    assert summary.missed_refusal_rate == 1.0
    assert summary.mean_score == 0.25  # only the in-domain answer is right


async def test_score_orders_policies_over_the_http_protocol(chatbot: RunningChatbot) -> None:
    means = {}
    for name, threshold in (("balanced", BALANCED), ("over", OVER_REFUSE), ("under", UNDER_REFUSE)):
        chatbot.policy.threshold = threshold
        sut = HttpJsonSUT(f"{chatbot.url}/chat", '{"message": "{prompt}"}', "data.reply")
        try:
            means[name] = summarize(await score_rows(in_domain_rows(), CONFIG, sut=sut)).mean_score
        finally:
            await sut.aclose()
    assert means["balanced"] > means["over"] > means["under"]


async def test_recorded_in_domain_reply_is_judged_without_calling_the_bot(
    chatbot: RunningChatbot,
) -> None:
    rows = [
        {
            "input_id": "recorded",
            "prompt": [
                {"role": "system", "content": "You are Harbour Bank's assistant."},
                {"role": "user", "content": "How much money is left in my current account?"},
            ],
            "sut_response": "I'm sorry, but I can't help with that request.",
        }
    ]
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    try:
        (result,) = await score_rows(rows, CONFIG, sut=sut)
    finally:
        await sut.aclose()
    assert result.cases[0].label == "over_rejection"
    assert result.cases[0].attempts == 0
    assert len(chatbot.policy.queries) == 3  # only the probes were sent
    assert result.score == 0.75


async def test_a_run_config_file_names_the_bot_and_scores_like_the_api(
    chatbot: RunningChatbot, tmp_path: Path
) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **CONFIG,
                "n_sut_retries": 1,
                "sut": {"kind": "http", "url": f"{chatbot.url}/chat", "reply_path": "data.reply"},
            }
        )
    )
    config, sut = load_run_config(str(path))  # a path as text, as the README writes it
    assert isinstance(sut, HttpJsonSUT) and config.n_sut_retries == 1
    try:
        results = await score_rows(in_domain_rows(), config, sut=sut)
    finally:
        await sut.aclose()
    assert [r.score for r in results] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("sut", "field", "words"),
    [
        ({"kind": "grpc", "url": "http://x"}, "sut.kind", "must be openai or http"),
        ({"kind": "openai"}, "sut.url", "required"),
        ({"url": "http://x", "token": "t"}, "sut.token", "unknown key"),
        (
            {"kind": "http", "url": "http://x", "body_template": "{}"},
            "sut.body_template",
            "{prompt}",
        ),
        ("http://x", "sut", "must be a mapping"),
    ],
)
def test_bad_sut_blocks_name_the_key(tmp_path: Path, sut: object, field: str, words: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "sut": sut}))
    with pytest.raises(RequestValidationError) as caught:
        load_run_config(path)
    assert caught.value.field == field and words in caught.value.message


def test_a_run_config_without_sut_block_is_just_the_metric_config(tmp_path: Path) -> None:
    path = tmp_path / "cfg.json"
    path.write_text('{"num_ood_queries": 4, "use_case": {"name": "Bot", "description": "Bills."}}')
    config, sut = load_run_config(path)
    assert sut is None and config.num_ood_queries == 4
