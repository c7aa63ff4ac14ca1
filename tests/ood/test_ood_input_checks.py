"""Bad configs, profiles and `sut:` blocks are refused before any call, naming the field and
what is wrong with it; a run config's `use_case` may be a profile file's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chatbot import BANK_PROFILE, completion_body

from assay.metrics.ood import load_run_config, parse_config, parse_run_config
from assay.metrics.ood.profile import load_profile, profile_from_mapping
from assay.metrics.ood.run_config import build_sut
from assay.runner.metric_rows import MetricScorer, read_config_text
from assay.schema import RequestValidationError
from conftest import CannedResponse, StubServer

SUT = {"kind": "openai", "url": "http://127.0.0.1:8000/v1"}


def refused(values: dict[str, Any]) -> RequestValidationError:
    with pytest.raises(RequestValidationError) as caught:
        parse_run_config({"use_case": BANK_PROFILE, **values})
    return caught.value


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        # The schema's types as they are: no string for an integer or a boolean.
        ({"num_ood_queries": "3"}, "num_ood_queries", "must be an integer between 1 and 32"),
        ({"num_ood_queries": True}, "num_ood_queries", "must be an integer between 1 and 32"),
        ({"num_ood_queries": 3.5}, "num_ood_queries", "must be an integer between 1 and 32"),
        ({"inverted": "yes"}, "inverted", "must be a boolean (got 'yes'"),
        ({"timeout_seconds": float("inf")}, "timeout_seconds", "finite number greater than 0"),
        ({"weight": float("nan")}, "weight", "must be a finite number"),
    ],
)
def test_config_values_of_the_wrong_type_are_refused_by_name(
    values: dict[str, Any], field: str, words: str
) -> None:
    error = refused(values)
    assert (error.field, words in error.message) == (field, True), error.message


def test_a_whole_number_written_as_a_float_is_an_integer() -> None:
    # JSON Schema (2019-09 on) counts 3.0 as an integer, and json.dumps writes whole floats so.
    config = parse_config({"use_case": BANK_PROFILE, "num_ood_queries": 3.0, "n_sut_retries": 2.0})
    assert (config.num_ood_queries, config.n_sut_retries) == (3, 2)
    assert isinstance(config.num_ood_queries, int)


def test_a_profile_value_that_is_not_a_string_is_named_by_its_key() -> None:
    with pytest.raises(RequestValidationError) as caught:
        parse_config({"use_case": {**BANK_PROFILE, "examples": 5}})
    assert caught.value.field == "use_case.examples"
    assert caught.value.message == "must be a string (got int 5)"


def test_a_profile_file_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_bytes(b"name: Caf\xe9 bot\n")
    with pytest.raises(RequestValidationError) as caught:
        load_profile(path)
    assert caught.value.field == str(path)
    assert caught.value.message.startswith("is not UTF-8 text (byte 0xe9 at offset 9)")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:99999/v1", "is not a valid URL: Port out of range"),
        ("http://[::1", "is not a valid URL: Invalid IPv6 URL"),
        ("localhost:8000/v1", "must start with http:// or https://"),
        ("http:///v1", "has no host"),
    ],
)
def test_a_malformed_sut_url_is_refused_up_front(url: str, words: str) -> None:
    error = refused({"sut": {**SUT, "url": url}})
    assert error.field == "sut.url" and words in error.message


@pytest.mark.parametrize(
    ("sut", "field", "message"),
    [
        ({"kind": "http", "model": "m"}, "sut.model", "applies to sut.kind openai only"),
        ({"kind": "http", "system_prompt": True}, "sut.system_prompt", "openai only"),
        ({"reply_path": "data.reply"}, "sut.reply_path", "applies to sut.kind http only"),
        ({"system_prompt": "yes"}, "sut.system_prompt", "must be true or false (got 'yes')"),
    ],
)
def test_a_sut_key_of_the_other_kind_is_refused_by_name(
    sut: dict[str, Any], field: str, message: str
) -> None:
    error = refused({"sut": {**SUT, **sut}})
    assert error.field == field and message in error.message


def test_a_run_config_reads_a_profile_path_relative_to_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "profile.yaml").write_text(yaml.safe_dump({"use_case": BANK_PROFILE}))
    config_file = folder / "cfg.yaml"
    config_file.write_text(yaml.safe_dump({"use_case": "profile.yaml", "sut": SUT}))
    monkeypatch.chdir(tmp_path)  # not the config's folder

    config, sut = load_run_config(config_file)
    assert config.use_case == BANK_PROFILE and sut is not None
    # `assay run --config` reads it the same way, and runs on the profile's text.
    scorer = MetricScorer("llm.ood_detection", read_config_text(config_file))
    assert scorer.settings[0].use_case == BANK_PROFILE
    assert "Harbour Bank" in scorer.config_text

    config_file.write_text(yaml.safe_dump({"use_case": "missing.yaml", "sut": SUT}))
    with pytest.raises(RequestValidationError, match="cannot read profile"):
        read_config_text(config_file)


def test_every_unknown_profile_key_is_named_with_the_known_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="assay.metrics.ood.profile"):
        profile_from_mapping(
            {
                "name": "Bank bot",
                "alowed_topics": "cards; balances",
                "forbidden_topics": "loans",
                "topics": "savings",
                "tone": "friendly",
            }
        )
    # Allowed by the schema, but the offline judge reads none: a near miss, or another name for
    # a known key (the README's `topics` and `forbidden_topics`), is named with the key it was
    # meant for, any other key with the known ones.
    known = (
        "Known keys: name, description, allowed_topics, examples, system_prompt, "
        "disallowed_topics, refusal_message"
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"profile key 'alowed_topics' is not read: did you mean 'allowed_topics'? {known}",
        f"profile key 'forbidden_topics' is not read: did you mean 'disallowed_topics'? {known}",
        f"profile key 'topics' is not read: did you mean 'allowed_topics'? {known}",
        f"profile key 'tone' is not read (only an LLM judge sees it, as text). {known}",
    ]


@pytest.mark.parametrize("kind", ["http", "openai"])
async def test_the_sut_key_from_the_environment_is_sent_by_both_kinds(
    kind: str, stub_server: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README says to set ASSAY_SUT_API_KEY for an endpoint that needs a key; the http
    # kind never sent it.
    monkeypatch.setenv("ASSAY_SUT_API_KEY", "sut-secret")
    answer = {"reply": "ok"} if kind == "http" else completion_body("ok", "m")
    stub_server.reply(CannedResponse(200, answer))
    url = f"{stub_server.url}/chat" if kind == "http" else f"{stub_server.url}/v1"
    sut = build_sut({"kind": kind, "url": url}, parse_config({"use_case": BANK_PROFILE}))
    try:
        assert await sut.ask("What is my balance?") == "ok"
    finally:
        await sut.aclose()
    assert stub_server.requests[-1].headers["authorization"] == "Bearer sut-secret"


def test_profile_keys_beside_use_case_are_refused_and_other_keys_are_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # They were dropped in silence: the run went ahead without its disallowed topics.
    misplaced = tmp_path / "misplaced.yaml"
    misplaced.write_text(
        yaml.safe_dump(
            {"use_case": BANK_PROFILE, "disallowed_topics": "loans", "refusal_message": "No."}
        ),
        encoding="utf-8",
    )
    with pytest.raises(RequestValidationError) as raised:
        load_profile(misplaced)
    assert raised.value.field == str(misplaced)
    assert "disallowed_topics, refusal_message: beside use_case instead of under it" in str(
        raised.value
    )
    config_keys = tmp_path / "run.yaml"
    config_keys.write_text(
        yaml.safe_dump({"use_case": BANK_PROFILE, "num_ood_queries": 2}), encoding="utf-8"
    )
    with caplog.at_level("WARNING"):
        profile = load_profile(config_keys)
    assert profile.fields["name"] == BANK_PROFILE["name"]
    assert "only use_case is read from this file as a profile (not num_ood_queries)" in (
        caplog.text
    )


def test_a_csv_cell_holding_a_json_message_list_is_a_conversation() -> None:
    from assay.metrics.ood.rows import parse_rows

    turns = '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]'
    texts = ["[see the FAQ] How do I block my card?", '["a", "b"]', "[not json"]
    rows = [
        {"input_id": str(i), "prompt": p, "sut_response": ""} for i, p in enumerate([turns, *texts])
    ]
    parsed = parse_rows(rows)
    # It was sent to the system under test as text, JSON and all.
    assert parsed[0].prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi?"},
    ]
    assert [row.prompt for row in parsed[1:]] == texts
    # A message list read from text is checked as one given as a list.
    with pytest.raises(RequestValidationError, match=r"rows\[0\]\.prompt.*no message with role"):
        parse_rows([{"input_id": "a", "prompt": '[{"role": "system", "content": "x"}]',
                     "sut_response": None}])  # fmt: skip
    # A list of objects is meant as messages, so a broken message is an error, not a question
    # about its JSON.
    with pytest.raises(RequestValidationError, match=r"rows\[0\]\.prompt\[0\]: must be a"):
        parse_rows([{"input_id": "a", "prompt": '[{"role": "user"}]', "sut_response": None}])


@pytest.mark.parametrize("content", ["", "   "])
def test_a_user_message_with_blank_content_is_refused_by_name(content: str) -> None:
    """Sent on, it would ask the system under test nothing, and score its reply."""
    from assay.metrics.ood.rows import parse_rows

    prompt = [{"role": "system", "content": ""}, {"role": "user", "content": content}]
    with pytest.raises(
        RequestValidationError, match=r"rows\[0\]\.prompt\[1\]\.content: must not be blank"
    ):
        parse_rows([{"input_id": "a", "prompt": prompt, "sut_response": None}])


@pytest.mark.parametrize(
    ("description", "why"),
    [
        (
            "Assistant client de la banque Harbour. Il aide avec : paiements par carte ; cartes "
            "perdues. Quel est le solde de mon compte courant ?",
            "function words of other languages",
        ),
        ("Помощник банка Харбор. Помогает с платежами по картам.", "outside the Latin alphabet"),
        ("Kubernetes cluster troubleshooting, Helm charts, CI pipelines", None),
        ("A La Paz tour guide: tours, hotels, de la Cruz museum and the El Alto market.", None),
    ],
)
def test_a_profile_not_in_english_is_warned_of(
    caplog: pytest.LogCaptureFixture, description: str, why: str | None
) -> None:
    # The banks and judges are English: a French profile got probes about nothing near its
    # field, silently.
    with caplog.at_level("WARNING", logger="assay.metrics.ood.profile"):
        profile_from_mapping({"description": description})
        # Read again (a run reads its profile on several paths): said once, not twice.
        profile_from_mapping({"description": description, "name": ""})
    messages = [r.getMessage() for r in caplog.records]
    if why is None:
        assert messages == []
    else:
        [message] = messages
        assert message.startswith("the profile does not read as English (") and why in message
        assert "ASSAY_LLM_BASE_URL" in message and "refusal_message" in message
