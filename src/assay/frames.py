"""Results as pandas data frames (`to_pandas()` on responses and run summaries).

pandas is an optional extra (`pip install 'assay[pandas]'`), imported only when a frame is
asked for. Every frame flattens a detector's or metric's result the same way:
`<name>.score`, `<name>.error` (the error kind when it failed) and, for detectors,
`<name>.<check>` with each instruction's follow_probability (the short ids of
`assay detectors`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from assay.detectors import DETECTORS

PANDAS_HINT = "to_pandas() needs pandas, an optional extra: pip install 'assay[pandas]'"
#: Output line keys that are not results and go into a frame as they are.
_LINE_KEYS = ("row", "id", "user_query", "context", "generated_text")


def require_pandas() -> Any:
    """The pandas module; ImportError saying how to install it when it is missing."""
    try:
        return importlib.import_module("pandas")
    except ImportError:
        raise ImportError(PANDAS_HINT) from None


@cache
def _checks(detector: str) -> dict[str, str]:
    found = DETECTORS.get(detector)
    return {i.text: i.check for i in found.instructions} if found else {}


def _is_result(value: Any) -> bool:
    return isinstance(value, Mapping) and ("score" in value or value.get("error") is True)


def result_columns(results: Mapping[str, Any]) -> dict[str, Any]:
    """A response item or output line's results as flat columns (other keys left out)."""
    columns: dict[str, Any] = {}
    for name, value in results.items():
        if not _is_result(value):
            continue
        failed = value.get("error") is True
        columns[f"{name}.score"] = None if failed else value.get("score")
        columns[f"{name}.error"] = str(value.get("kind", "error")) if failed else None
        checks = _checks(name)
        for entry in value.get("instructions_list") or []:
            text = str(entry.get("instruction", ""))
            columns[f"{name}.{checks.get(text, text)}"] = entry.get("follow_probability")
    return columns


def lines_frame(lines: Iterable[Mapping[str, Any]]) -> Any:
    """A run's output lines as a data frame: one row per line with `row`, `id`, the scored
    text, the passed-through columns, `error` (why a rejected row was not scored) and the
    flattened results."""
    pandas = require_pandas()
    records = []
    for line in lines:
        record: dict[str, Any] = {key: line.get(key) for key in _LINE_KEYS}
        error = line.get("error")
        record["error"] = (
            f"{error.get('field', 'row')}: {error.get('message', '')}"
            if isinstance(error, Mapping)
            else None
        )
        for key, value in line.items():
            if key not in record and key != "usage" and not _is_result(value):
                record[key] = value
        record.update(result_columns(line))
        records.append(record)
    return pandas.DataFrame(records)
