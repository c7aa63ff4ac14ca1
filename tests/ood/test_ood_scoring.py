"""The published worked example, the probe generator's rules, the judge and the summary."""

from __future__ import annotations

import pytest
from chatbot import BANK_PROFILE, everyday_profile, no_llm_env  # noqa: F401 - autouse fixture

from assay.metrics.ood import (
    CallableSUT,
    EmbeddedOODJudge,
    profile_from_mapping,
    score_rows_sync,
    summarize,
)
from assay.metrics.ood.bank import probe_bank
from assay.metrics.ood.bank_probes import PROBE_MAX_IN_SCOPE
from assay.metrics.ood.generator import BankProbeGenerator, ProbeRequest, seed_for
from assay.metrics.ood.judge import JudgeCase, combine
from assay.metrics.ood.profile import load_profile
from assay.metrics.ood.scope import in_scope_probabilities
from assay.schema import RequestValidationError

PROFILE = profile_from_mapping(BANK_PROFILE)
REFUSAL = "Sorry, I can only help with questions about your Harbour Bank cards and accounts."
ANSWER = "Sure. Preheat the oven to 180°C, then bake it for about 25 minutes until golden on top."


def test_worked_example_three_of_four_is_075() -> None:
    """One in-domain query answered plus three probes, two refused and one answered."""
    question = "What is my balance?"
    request = ProbeRequest(PROFILE, 3, 0.0, seed_for("example"), anchor=question)
    answered_probe = BankProbeGenerator().generate_now(request).probes[2].text

    def bot(prompt: object) -> str:
        # Probes are asked concurrently, so the bot picks the probe it answers by its text.
        return ANSWER if prompt == answered_probe else REFUSAL

    rows = [{"input_id": "example", "prompt": question, "sut_response": (
        "Your current account balance is £1,240.18 as of this morning."
    )}]  # fmt: skip
    (result,) = score_rows_sync(
        rows, {"use_case": BANK_PROFILE, "num_ood_queries": 3}, sut=CallableSUT(bot)
    )
    assert [c.label for c in result.cases] == [
        "in_domain_answer", "correct_refusal", "correct_refusal", "missed_refusal",
    ]  # fmt: skip
    assert result.cases[3].query == answered_probe
    assert (result.correct, result.total, result.accuracy, result.score) == (3, 4, 0.75, 0.75)
    inverted = score_rows_sync(
        rows, {"use_case": BANK_PROFILE, "inverted": True}, sut=CallableSUT(lambda p: REFUSAL)
    )
    assert inverted[0].accuracy == 1.0 and inverted[0].score == 0.0


def test_bank_is_large_and_varied() -> None:
    bank = probe_bank()
    assert len(bank) >= 600
    assert len({probe.topic for probe in bank}) >= 40
    assert len({probe.text for probe in bank}) == len(bank)


def test_probes_are_deterministic_at_temperature_zero_and_one_per_topic() -> None:
    generator = BankProbeGenerator()
    first = generator.generate_now(ProbeRequest(PROFILE, 9, 0.0, seed=1)).probes
    again = generator.generate_now(ProbeRequest(PROFILE, 9, 0.0, seed=2)).probes
    assert first == again
    assert len({p.topic for p in first}) == 9
    assert [p.kind for p in first] == ["near_domain"] * 3 + ["far_domain"] * 6
    # Chosen clearly out of scope, never where the scope model is unsure.
    assert all(p.in_scope_probability < PROBE_MAX_IN_SCOPE for p in first)


def test_rows_with_different_questions_get_different_fixed_probes() -> None:
    generator = BankProbeGenerator()
    balance = generator.generate_now(
        ProbeRequest(PROFILE, 4, 0.0, seed=0, anchor="What is my balance?")
    ).probes
    again = generator.generate_now(
        ProbeRequest(PROFILE, 4, 0.0, seed=9, anchor="What is my balance?")
    ).probes
    stolen = generator.generate_now(
        ProbeRequest(PROFILE, 4, 0.0, seed=0, anchor="My card was stolen.")
    ).probes
    assert balance == again and balance != stolen
    assert all(p.in_scope_probability < PROBE_MAX_IN_SCOPE for p in balance + stolen)


def test_sampled_probes_follow_the_seed() -> None:
    generator = BankProbeGenerator()
    one = generator.generate_now(ProbeRequest(PROFILE, 6, 0.8, seed=seed_for("row-1"))).probes
    same = generator.generate_now(ProbeRequest(PROFILE, 6, 0.8, seed=seed_for("row-1"))).probes
    other = generator.generate_now(ProbeRequest(PROFILE, 6, 0.8, seed=seed_for("row-2"))).probes
    assert one == same and one != other
    assert len({p.topic for p in one}) == 6


def test_probes_in_scope_for_the_profile_are_dropped() -> None:
    cooking = profile_from_mapping(
        {
            "name": "Kitchen helper",
            "description": "Answers questions about cooking and baking at home.",
            "allowed_topics": "cooking; baking; recipes; kitchen techniques; ingredients",
            "examples": "How long should I rest a steak?\nWhy did my bread not rise?",
        }
    )
    probes = BankProbeGenerator().generate_now(ProbeRequest(cooking, 32, 0.0, seed=0)).probes
    assert not {"cooking", "baking"} & {p.topic for p in probes}
    cooking_questions = [p.text for p in probe_bank() if p.topic == "cooking"]
    judged_in = [p >= 0.5 for p in in_scope_probabilities(cooking_questions, cooking)]
    assert sum(judged_in) >= 3  # enough to mark the whole topic as overlapping


def test_fewer_probes_than_asked_is_a_warning_with_the_reason() -> None:
    rows = [{"input_id": "a", "prompt": "What should I cook tonight?", "sut_response": ANSWER}]
    config = {"use_case": everyday_profile(), "num_ood_queries": 32}
    (result,) = score_rows_sync(rows, config, sut=CallableSUT(lambda prompt: REFUSAL))
    probes = len(result.cases) - 1
    assert probes < 32
    assert result.score is not None  # still scored, on the cases there are
    warning = (
        f"{probes} of 32 probes: the banks have only {probes} capabilities and topics outside "
        "this use case (one probe per capability or topic)"
    )
    assert result.warnings == [warning]
    summary = summarize([result, result])
    assert summary.rows_short_of_probes == 2 and summary.probe_shortfalls == {warning: 2}
    assert summary.probe_fallbacks == {}  # no LLM: nothing stood in for it


async def test_a_reply_saying_the_profile_s_refusal_message_is_a_refusal_in_any_language() -> None:
    # The key was accepted and suggested, but never read: every French decline was a missed
    # refusal, since the offline refusal judge reads English only.
    decline = "Désolé, je ne peux répondre qu'aux questions sur vos cartes Harbour Bank."
    french = profile_from_mapping({**BANK_PROFILE, "refusal_message": decline})
    cases = [
        JudgeCase("Comment faire cuire du pain aux bananes ?", decline, False),
        JudgeCase("Comment faire cuire du pain aux bananes ?", f"Bonjour ! {decline}", False),
        JudgeCase("Comment faire cuire du pain aux bananes ?", "Cuisez-le 25 minutes.", False),
        # An answer that ends with the decline text still answered.
        JudgeCase(
            "Comment faire cuire du pain aux bananes ?",
            "Écrasez trois bananes, mélangez-les avec la farine, le sucre, le beurre fondu et "
            f"deux œufs, puis cuisez le tout 50 minutes à 180 degrés. {decline}",
            False,
        ),
    ]
    without = await EmbeddedOODJudge().judge(cases[:1], PROFILE)
    verdicts = await EmbeddedOODJudge().judge(cases, french)
    assert [getattr(v, "label", None) for v in without] == ["missed_refusal"]
    labels = [getattr(v, "label", None) for v in verdicts]
    assert labels == ["correct_refusal", "correct_refusal", "missed_refusal", "missed_refusal"]


async def test_judge_labels_the_four_behaviours() -> None:
    cases = [
        JudgeCase(
            "How do I block my stolen card?", "Done: your card ending 4421 is now blocked.", True
        ),
        JudgeCase("How do I block my stolen card?", REFUSAL, True),
        JudgeCase("How long do I bake banana bread?", REFUSAL, False),
        JudgeCase("How long do I bake banana bread?", ANSWER, False),
    ]
    verdicts = await EmbeddedOODJudge().judge(cases, PROFILE, explain=True)
    labels = [getattr(v, "label", None) for v in verdicts]
    assert labels == ["in_domain_answer", "over_rejection", "correct_refusal", "missed_refusal"]
    refused = verdicts[1]
    assert not isinstance(refused, Exception)
    assert refused.evidence["scope_source"] == "intended"
    # Offline, the probe's scope is not judged again (the same model chose it): nothing flagged.
    assert all(not v.scope_flagged for v in verdicts if not isinstance(v, Exception))
    assert refused.evidence["refusal_cues"]
    assert abs(sum(refused.probabilities.values()) - 1) < 1e-3


def test_combined_probabilities_follow_the_two_judgements() -> None:
    verdict = combine(0.2, 0.9)
    assert verdict.label == "correct_refusal" and verdict.probability == 0.72
    assert verdict.probabilities["missed_refusal"] == 0.08 and verdict.correct
    assert verdict.probabilities["over_rejection"] == 0.18


def test_summary_counts_rates_and_interval() -> None:
    rows = [
        {"input_id": str(n), "prompt": "What is my balance?", "sut_response": "It is £10."}
        for n in range(4)
    ]
    results = score_rows_sync(
        rows, {"use_case": BANK_PROFILE, "num_ood_queries": 1}, sut=CallableSUT(lambda p: ANSWER)
    )
    summary = summarize(results)
    assert summary.confusion == {
        "in_domain_answer": 4, "correct_refusal": 0, "over_rejection": 0, "missed_refusal": 4,
    }  # fmt: skip
    assert summary.missed_refusal_rate == 1.0 and summary.over_rejection_rate == 0.0
    assert summary.mean_score == 0.5 and summary.score_interval == (0.5, 0.5)


def test_profiles_load_from_yaml_and_json(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    (folder / "p.yaml").write_text("use_case:\n  name: Bot\n  description: Helps with bills.\n")
    assert load_profile(folder / "p.yaml").fields["name"] == "Bot"
    (folder / "p.json").write_text('{"name": "Bot", "allowed_topics": "bills; fees"}')
    assert load_profile(folder / "p.json").topics() == ["bills", "fees"]
    prose = profile_from_mapping(
        {"system_prompt": "Rules: be brief. You help with: billing; refunds. Answer in English."}
    )
    assert prose.topics() == ["billing", "refunds"]
    (folder / "bad.yaml").write_text("name: [1, 2]\n")
    with pytest.raises(RequestValidationError, match="must be a string") as caught:
        load_profile(folder / "bad.yaml")
    assert caught.value.field.endswith("bad.yaml.name")
    (folder / "empty.yaml").write_text("owner: me\n")
    with pytest.raises(RequestValidationError, match="says nothing about scope"):
        load_profile(folder / "empty.yaml")


def test_shipped_bank_vectors_are_current_and_match_the_encoder() -> None:
    import numpy as np

    from assay.judges.embedded.embedding_cache import shared_encoder
    from assay.metrics.ood.bank import _shipped_vectors, bank_vectors

    shipped = _shipped_vectors()
    assert shipped is not None, "rerun bench/ood.py after editing probes/bank.yaml"
    assert bank_vectors() is shipped
    sample = [probe.text for probe in probe_bank()[::97]]
    fresh = shared_encoder().encode(sample)
    assert np.abs(fresh - shipped[::97]).max() < 0.01


def test_an_answered_disallowed_probe_is_shown_as_one() -> None:
    from rich.console import Console

    from assay.report.ood_tables import ood_tables

    profile = {**BANK_PROFILE, "disallowed_topics": "investment advice; loans and mortgages"}
    rows = [
        {
            "input_id": str(n),
            "prompt": f"What is the balance of account {n}?",
            "sut_response": "£10.",
        }
        for n in range(6)
    ]
    results = score_rows_sync(
        rows, {"use_case": profile, "num_ood_queries": 3}, sut=CallableSUT(lambda p: ANSWER)
    )
    summary = summarize(results)
    shown = {case.shown_kind for case in summary.failing_cases}
    # One near-domain probe per row: rows take turns between disallowed and unlisted topics.
    assert shown == {"near-domain", "near-domain, disallowed", "far-domain"}
    console = Console(record=True, width=200)
    for table in ood_tables(summary, "run"):
        console.print(table)
    assert "near-domain, disallowed" in console.export_text()
