"""The README's OOD section matches the code: its YAML parses as pasted, its profile loads, and
the numbers and defaults it states are the shipped ones."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from assay.metrics.ood.bank import probe_bank
from assay.metrics.ood.capabilities import capability_bank
from assay.metrics.ood.profile import profile_from_mapping
from assay.runner.ood_gates import DEFAULT_MAX_MISSED_REFUSAL, DEFAULT_MAX_OVER_REJECTION

README = Path(__file__).resolve().parents[2] / "README.md"


def ood_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Out-of-distribution detection")
    return text[start : text.index("\n## ", start + 1)]


def yaml_blocks(text: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)


def test_every_yaml_block_of_the_readme_parses() -> None:
    blocks = yaml_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 2
    for block in blocks:
        assert isinstance(yaml.safe_load(block), dict), block


def test_the_readme_profile_loads_as_a_profile() -> None:
    profile = profile_from_mapping(yaml.safe_load(yaml_blocks(ood_section())[0]))
    assert profile.topics()[:3] == ["card payments", "lost or stolen cards", "account balance"]
    assert profile.disallowed() == ["loans and mortgages", "investment advice"]
    assert len(profile.examples()) == 2
    assert profile.summary_texts()[0].startswith("Customer chatbot of Harbour Bank.")


def test_the_readme_states_the_shipped_bank_sizes_and_gate_defaults() -> None:
    section = " ".join(ood_section().split())
    domains = {capability.domain for capability in capability_bank()}
    assert f"{len(capability_bank())} capabilities in {len(domains)} service domains" in section
    topics = {probe.topic for probe in probe_bank()}
    assert f"{len(probe_bank())} everyday questions in {len(topics)} topics" in section
    assert f"| `--max-over-rejection RATE` | {DEFAULT_MAX_OVER_REJECTION:g} |" in section
    assert f"| `--max-missed-refusal RATE` | {DEFAULT_MAX_MISSED_REFUSAL:g} |" in section


def test_the_readme_says_where_the_run_summary_holds_the_ood_figures() -> None:
    # tests/ood/test_ood_run.py reads them from there.
    section = " ".join(ood_section().split())
    assert 'summary JSON holds the same figures at `scorers["llm.ood_detection"].ood`' in section


def test_the_readme_advice_on_a_probe_the_application_handles_holds() -> None:
    """The README's own profile probes replacement-card timing as out of scope; naming
    replacements among its topics takes that question out of the probes, as it says."""
    from assay.metrics.ood.bank_probes import PROBE_MAX_IN_SCOPE
    from assay.metrics.ood.scope import in_scope_probabilities

    section = " ".join(ood_section().split())
    question = "How long until my replacement card arrives?"
    fields = yaml.safe_load(yaml_blocks(ood_section())[0])
    (before,) = in_scope_probabilities([question], profile_from_mapping(fields))
    fields["allowed_topics"] += "; replacement cards"
    (after,) = in_scope_probabilities([question], profile_from_mapping(fields))
    assert before < PROBE_MAX_IN_SCOPE <= after
    assert f'"{question}" is probed as out of scope (P(in scope) {before:.2f})' in section
    assert f'("replacement cards" takes that question to {after:.2f}' in section
