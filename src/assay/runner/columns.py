"""Check a dataset's columns before anything is scored, and say how to fix them.

A run whose `--map` names a column the file does not have, or is written the wrong way round
(`--map answer=generated_text`), or whose file has no column any detector could score, would
otherwise read every row and reject each one alike. These checks fail first, in one line that
lists the columns found, the fields needed and a `--map` that would work.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Sequence
from itertools import islice
from pathlib import Path

from assay.detectors import DETECTORS
from assay.runner.io import CSV_SUFFIXES, PARQUET_SUFFIXES, csv_header, parquet_schema, read_rows
from assay.schema import RequestValidationError

#: Request fields `--map` may point at a column (and `id`, which output lines carry).
MAPPABLE_FIELDS = ("user_query", "context", "generated_text", "config", "id")
#: JSON Lines rows read to learn a file's columns (rows may differ in their keys).
SAMPLE_ROWS = 1000
#: Column names people give each field, for the suggested `--map` (nearest spelling otherwise).
_USUAL_NAMES = {
    "generated_text": (
        "answer",
        "response",
        "output",
        "completion",
        "generation",
        "prediction",
        "reply",
        "model_answer",
        "model_output",
    ),
    "user_query": ("question", "query", "prompt", "input", "user_input", "instruction"),
    "context": (
        "contexts",
        "documents",
        "docs",
        "passages",
        "retrieved_contexts",
        "reference",
        "references",
        "source",
        "sources",
        "evidence",
    ),
    # `assay run --metric llm.ood_detection`'s fields.
    "input_id": ("id", "qid", "row_id", "example_id", "uid"),
    "prompt": ("question", "query", "user_query", "input", "instruction"),
    "sut_response": ("answer", "response", "reply", "output", "generated_text", "completion"),
}


def sample_columns(path: Path, rows: int | None = SAMPLE_ROWS) -> list[str]:
    """The columns of a dataset, in file order: the CSV header, the Parquet schema, or the keys
    of the first `rows` JSON Lines rows that parse (all of them for None; empty when none
    does)."""
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return list(parquet_schema(path).names)
    if suffix in CSV_SUFFIXES:
        with path.open(newline="", encoding="utf-8-sig", errors="replace") as handle:
            return csv_header(handle, path)
    seen: dict[str, None] = {}
    for _, fields in islice(read_rows(path), rows):
        if isinstance(fields, dict):
            seen.update(dict.fromkeys(fields))
    return list(seen)


#: Keys every output line may write besides its texts and results.
LINE_KEYS = ("row", "error", "usage")
#: Keys an output line writes itself: input columns of these names are not carried through.
OUTPUT_KEYS = (*LINE_KEYS, *DETECTORS)


def dropped_columns(columns: Iterable[str], column_map: Iterable[tuple[str, str]]) -> list[str]:
    """The input `columns` that output lines cannot carry, as they write keys of those names
    (columns that `--map` turns into a field are read, not dropped)."""
    read = {column for _, column in column_map}
    return [c for c in columns if c in OUTPUT_KEYS and c not in read]


def check_column_map(
    columns: Sequence[str], column_map: Iterable[tuple[str, str]], source: str
) -> None:
    """Raise RequestValidationError (field "map") for a `--map FIELD=COLUMN` that cannot work:
    an unknown FIELD (with the fix when it is written the wrong way round), a COLUMN the file
    lacks (with the nearest column), a FIELD mapped twice, or a COLUMN mapped to two fields (a
    rename moves a column, so the second field would be left without it).

    columns: the file's columns; source: the file's name, for the message.
    """
    found = set(columns)
    listed = ", ".join(columns) or "none"
    wanted_seen: set[str] = set()
    present_seen: dict[str, str] = {}
    for wanted, present in column_map:
        spec = f"{wanted}={present}"
        if wanted not in MAPPABLE_FIELDS:
            if present in MAPPABLE_FIELDS and wanted in found:
                raise RequestValidationError(
                    "map",
                    f"{spec} is the wrong way round: it is FIELD=COLUMN, so write "
                    f"--map {present}={wanted}",
                )
            raise RequestValidationError(
                "map",
                f"{spec}: {wanted!r} is not a field Assay reads; fields: "
                f"{', '.join(MAPPABLE_FIELDS)} (it is FIELD=COLUMN)",
            )
        if wanted in wanted_seen:
            raise RequestValidationError("map", f"{wanted!r} is mapped twice")
        wanted_seen.add(wanted)
        if present in present_seen:
            raise RequestValidationError(
                "map",
                f"column {present!r} is mapped twice ({present_seen[present]} and {wanted}); "
                "a column can fill one field",
            )
        present_seen[present] = wanted
        if wanted in found and wanted != present:
            raise RequestValidationError(
                "map",
                f"{spec}: {source} also has a column {wanted!r}, which the mapping would replace; "
                "rename or drop one of them",
            )
        if present not in found:
            near = difflib.get_close_matches(present, columns, n=1, cutoff=0.6)
            hint = f" (did you mean --map {wanted}={near[0]}?)" if near else ""
            raise RequestValidationError(
                "map", f"{spec}: {source} has no column {present!r}; columns found: {listed}{hint}"
            )


def mapped_columns(columns: Collection[str], column_map: Iterable[tuple[str, str]]) -> set[str]:
    """The field names rows will have once `--map` has renamed their columns."""
    renamed = {present: wanted for wanted, present in column_map}
    return {renamed.get(column, column) for column in columns}


def suggested_map(
    columns: Sequence[str],
    used: Collection[str],
    needed: Iterable[str],
    fields: Collection[str] = MAPPABLE_FIELDS,
) -> list[str]:
    """`--map FIELD=COLUMN` flags that would give the fields `needed`, from usual names and
    near spellings among the columns neither `used` by `--map` already nor named as one of the
    scorer's `fields` (a detector run's by default)."""
    free = [column for column in columns if column not in used and column not in fields]
    flags = []
    for field in needed:
        candidates = [c for c in free if c.lower() in _USUAL_NAMES.get(field, ())]
        candidates = candidates or difflib.get_close_matches(field, free, n=1, cutoff=0.5)
        if candidates:
            flags.append(f"--map {field}={candidates[0]}")
            free.remove(candidates[0])
    return flags


#: Separators a spreadsheet may have written instead of commas.
_OTHER_DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}


def _check_delimiter(path: Path, columns: Sequence[str]) -> None:
    """A CSV whose header is one column holding another separator was not written with commas:
    say so, instead of suggesting a --map that cannot work."""
    if path.suffix.lower() not in CSV_SUFFIXES or len(columns) != 1:
        return
    for delimiter, name in _OTHER_DELIMITERS.items():
        if delimiter in columns[0]:
            raise RequestValidationError(
                "FILE",
                f"{path.name} looks separated by {name}, not commas (its header reads as one "
                f"column, {columns[0]!r}); save it as comma-separated CSV",
            )


def check_detector_columns(
    path: Path, column_map: Iterable[tuple[str, str]], detectors: Sequence[str] | None
) -> None:
    """Fail before scoring when `--map` cannot work or no row could be scored.

    path: the dataset; column_map: `--map` pairs (FIELD, COLUMN); detectors: the detectors
    asked for (None: each row's own config, else whichever detectors its inputs allow).
    Raises RequestValidationError with field "map" or "FILE", naming the columns found, the
    fields needed and a `--map` that would give them. A file with no readable row passes: its
    rows are reported one by one.
    """
    pairs = list(column_map)  # read twice below
    try:
        _check_columns(path, pairs, detectors, sample_columns(path))
    except RequestValidationError:
        if path.suffix.lower() in (*PARQUET_SUFFIXES, *CSV_SUFFIXES):
            raise
        # JSON Lines rows were sampled: a column the sample lacks may come later (the first
        # 1,000 rows without an answer refused a file whose later rows have one, as a CSV
        # with the same rows was not). Checked again on every row before refusing the file.
        _check_columns(path, pairs, detectors, sample_columns(path, None))


def _check_columns(
    path: Path,
    pairs: list[tuple[str, str]],
    detectors: Sequence[str] | None,
    columns: list[str],
) -> None:
    if not columns:
        return
    _check_delimiter(path, columns)
    check_column_map(columns, pairs, path.name)
    fields = mapped_columns(columns, pairs)
    if detectors:
        wanted = {name: DETECTORS[name].required_inputs for name in detectors if name in DETECTORS}
        missing = sorted({f for inputs in wanted.values() for f in inputs if f not in fields})
        if not missing:
            return
        needs = "; ".join(f"{name} needs {', '.join(inputs)}" for name, inputs in wanted.items())
        also: list[str] = []
    else:
        if "generated_text" in fields and (
            "config" in fields
            or any(all(f in fields for f in d.required_inputs) for d in DETECTORS.values())
        ):
            return
        options: list[list[str]] = [
            [f for f in d.required_inputs if f not in fields] for d in DETECTORS.values()
        ]
        # The detector closest to scorable; generated_text first, as every detector needs it.
        fewest = min(options, key=lambda fields_missing: len(fields_missing))
        missing = sorted(fewest, key=lambda f: f != "generated_text")
        needs = "; ".join(
            f"{name} needs {', '.join(d.required_inputs)}" for name, d in DETECTORS.items()
        )
        # Also the columns the other detectors need, so that following the hint runs every
        # detector the file can feed, not just the closest one.
        every = {f for d in DETECTORS.values() for f in d.required_inputs}
        also = sorted(every - fields - set(missing))
    flags = suggested_map(columns, {present for _, present in pairs}, [*missing, *also])
    fix = f"; try {' '.join(flags)}" if flags else "; rename columns with --map FIELD=COLUMN"
    raise RequestValidationError(
        "FILE",
        f"no row of {path.name} can be scored: columns found: {', '.join(columns)}; "
        f"missing: {', '.join(missing)} ({needs}){fix}",
    )
