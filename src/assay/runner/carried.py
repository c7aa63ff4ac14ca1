"""The columns Parquet output gives each carried input field, and their types.

Every output line keeps the text it was scored on and the input's other columns (see
`rows.py`); in Parquet output each of them also gets a column of its own, so the output can be
queried without parsing `record`. Types: `user_query` and `generated_text` are text and
`context` a list of texts; a column of a Parquet input keeps its type; a CSV column is text; a
JSON Lines column takes the type its first `SAMPLE_ROWS` rows agree on (true/false, integer,
number or text), and is text holding JSON when they do not agree or hold lists or objects.
A later value that does not fit its column's type is null there; `record` always has it as read.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from assay.runner.columns import SAMPLE_ROWS, sample_columns
from assay.runner.io import CSV_SUFFIXES, PARQUET_SUFFIXES, parquet_schema, read_rows
from assay.runner.rows import RowScorer

#: A carried column: its name in the output and its Arrow type.
CarriedColumn = tuple[str, Any]


def _text_types() -> dict[str, Any]:
    import pyarrow as pa  # imported here: pyarrow is slow to import

    return {
        "user_query": pa.string(),
        "generated_text": pa.string(),
        "context": pa.list_(pa.string()),
    }


def carried_columns(input_path: Path, scorer: RowScorer) -> list[CarriedColumn]:
    """The (name, Arrow type) of every input field the output carries, in output order."""
    columns = sample_columns(input_path)
    names = scorer.output_columns(columns)
    column_map = dict(scorer.column_map)
    sources = {name: column_map.get(name, name) for name in names}
    fixed = _text_types()
    inferred = _input_types(input_path, [sources[n] for n in names if n not in fixed])
    return [(name, fixed.get(name) or inferred[sources[name]]) for name in names]


def _input_types(path: Path, columns: Sequence[str]) -> dict[str, Any]:
    import pyarrow as pa

    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        schema = parquet_schema(path)
        return {c: schema.field(c).type if c in schema.names else pa.string() for c in columns}
    if suffix in CSV_SUFFIXES:
        return dict.fromkeys(columns, pa.string())
    kinds: dict[str, set[str]] = {column: set() for column in columns}
    for _, fields in islice(read_rows(path), SAMPLE_ROWS):
        if not isinstance(fields, dict):
            continue
        for column, seen in kinds.items():
            value = fields.get(column)
            if value is not None:
                seen.add(_kind(value))
    return {column: _arrow_type(seen) for column, seen in kinds.items()}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -(2**63) <= value < 2**63 else "other"
    if isinstance(value, float):
        return "float"
    return "str" if isinstance(value, str) else "other"


def _arrow_type(kinds: set[str]) -> Any:
    import pyarrow as pa

    if kinds == {"bool"}:
        return pa.bool_()
    if kinds == {"int"}:
        return pa.int64()
    if kinds and kinds <= {"int", "float"}:
        return pa.float64()
    return pa.string()


def column_array(values: Sequence[Any], arrow_type: Any, as_text: Any) -> Any:
    """One Arrow array of `values` in `arrow_type`; a value that does not fit is null.

    as_text: turns a value that is not text into the text a string column holds (JSON).
    """
    import pyarrow as pa

    if pa.types.is_string(arrow_type):
        return pa.array(
            [None if v is None else v if isinstance(v, str) else as_text(v) for v in values],
            type=arrow_type,
        )
    if pa.types.is_list(arrow_type) and pa.types.is_string(arrow_type.value_type):
        return pa.array([_texts(v, as_text) for v in values], type=arrow_type)
    if pa.types.is_integer(arrow_type):
        # Arrow cuts 2.75 to 2 without a word: a float that is not whole does not fit.
        values = [None if isinstance(v, float) and not v.is_integer() else v for v in values]
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    try:  # values read back from JSON output (dates as text) parse into their type
        return pa.array(values).cast(arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    return pa.array([_fitting(v, arrow_type) for v in values], type=arrow_type)


def _texts(value: Any, as_text: Any) -> list[str] | None:
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    return [item if isinstance(item, str) else as_text(item) for item in items]


def _fitting(value: Any, arrow_type: Any) -> Any:
    import pyarrow as pa

    try:
        pa.array([value], type=arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return value
