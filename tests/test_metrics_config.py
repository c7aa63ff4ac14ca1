"""OODMetricConfig validation: defaults, bounds, and errors that name the field and range."""

from __future__ import annotations

import pytest

from assay.metrics.ood import OODMetricConfig, apply_scoring, parse_config
from assay.schema import RequestValidationError


def test_defaults_are_the_published_ones() -> None:
    config = parse_config(None)
    assert config == OODMetricConfig()
    assert (config.num_ood_queries, config.concurrency_limit, config.n_sut_retries) == (3, 5, 0)
    assert (config.sut_temperature, config.synthesis_temperature) == (0.2, 0.0)
    assert (config.timeout_seconds, config.metric_name, config.use_case) == (
        60.0,
        "ood_detection",
        None,
    )
    assert (config.min, config.max, config.inverted, config.weight) == (0.0, 1.0, False, 1.0)


@pytest.mark.parametrize(
    ("values", "field", "allowed"),
    [
        ({"concurrency_limit": 65}, "concurrency_limit", "an integer between 1 and 64"),
        ({"concurrency_limit": 0}, "concurrency_limit", "an integer between 1 and 64"),
        ({"num_ood_queries": 33}, "num_ood_queries", "an integer between 1 and 32"),
        ({"n_sut_retries": -1}, "n_sut_retries", "an integer between 0 and 5"),
        ({"sut_temperature": 2.5}, "sut_temperature", "a number between 0.0 and 2.0"),
        ({"synthesis_temperature": -0.1}, "synthesis_temperature", "a number between 0.0 and 2.0"),
        ({"timeout_seconds": 0}, "timeout_seconds", "a number greater than 0"),
        ({"inverted": "maybe"}, "inverted", "a boolean"),
        ({"use_case": ["bank"]}, "use_case", "string-to-string mapping"),
        ({"num_ood_queries": True}, "num_ood_queries", "an integer between 1 and 32"),
        ({"weight": False}, "weight", "a number"),
        # The schema's types as they are: YAML-style strings are not coerced.
        ({"num_ood_queries": "7"}, "num_ood_queries", "an integer between 1 and 32"),
        ({"inverted": "yes"}, "inverted", "a boolean"),
    ],
)
def test_bad_values_name_the_field_and_allowed_range(
    values: dict[str, object], field: str, allowed: str
) -> None:
    with pytest.raises(RequestValidationError) as caught:
        parse_config(values)
    assert caught.value.field == field
    assert allowed in caught.value.message
    assert repr(next(iter(values.values()))) in caught.value.message


def test_max_must_exceed_min_whether_parsed_or_built() -> None:
    for config in ({"min": 1, "max": 0}, OODMetricConfig(min=2, max=2)):
        with pytest.raises(RequestValidationError) as caught:
            parse_config(config)
        assert caught.value.field == "max" and "greater than min" in caught.value.message


def test_unknown_keys_are_rejected_with_the_allowed_list() -> None:
    with pytest.raises(RequestValidationError) as caught:
        parse_config({"num_probes": 4})
    assert caught.value.field == "num_probes"
    assert "num_ood_queries" in caught.value.message


@pytest.mark.parametrize(
    ("accuracy", "values", "expected"),
    [
        (0.75, {}, 0.75),
        (0.75, {"inverted": True}, 0.25),
        (0.75, {"min": 0, "max": 10}, 7.5),
        (0.75, {"min": 1, "max": 5, "inverted": True}, 2.0),
        (0.75, {"weight": 3.0}, 0.75),
    ],
)
def test_scoring_metadata_maps_the_accuracy(
    accuracy: float, values: dict[str, object], expected: float
) -> None:
    assert apply_scoring(accuracy, parse_config(values)) == expected
