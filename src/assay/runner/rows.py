"""Turn dataset rows into request items and scored rows into output lines.

Rows are validated one by one (`parse_item`), so a bad row becomes an output line with an
`error` of its own while the other rows of its batch are still scored. Every output line has the
row's 1-based number, its `id` when it has one, the text it was scored on (`user_query`,
`context`, `generated_text`, so reports can show it), the columns that are not request fields
(passed through), and either one key per detector or an `error` object
`{"field", "kind", "message"}`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from assay.detectors import DETECTORS
from assay.detectors.evaluate import check_encodable, detect_items, parse_item
from assay.judges import judge_names
from assay.judges.usage import collect_usage, item_key, open_ledger
from assay.runner.columns import LINE_KEYS, check_detector_columns
from assay.runner.io import REQUEST_FIELDS, Row, UnreadableRow
from assay.schema import DetectRequestItem, MustCompute, RequestValidationError

#: Row fields sent to the detectors; every other column is passed through to the output only.
#: Request fields an output line carries, as they were scored.
TEXT_FIELDS = ("user_query", "context", "generated_text")
#: Keys of an output line that no passed-through column may take.
RESERVED_KEYS = (*LINE_KEYS, *REQUEST_FIELDS)
#: Error kinds the runner itself gives a row (judges add their own, e.g. "timeout", "transport").
INVALID_ROW = "invalid_row"
TIMEOUT = "timeout"


def _given(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return any(isinstance(doc, str) and doc.strip() for doc in value)
    return False


def _supplied(value: Any) -> bool:
    """Given, or given as something other than text (a number, an object): the detector is then
    asked for, so that validation names the field's type instead of "no detector applies"."""
    if isinstance(value, list):
        return _given(value) or not all(isinstance(v, str) for v in value)
    return _given(value) if isinstance(value, str) else value is not None


def applicable_detectors(fields: Mapping[str, Any]) -> list[str]:
    """Names of the detectors whose required inputs are all supplied in `fields` (non-blank, or
    of a type validation will refuse by name)."""
    return [
        name
        for name, detector in DETECTORS.items()
        if all(_supplied(fields.get(required)) for required in detector.required_inputs)
    ]


def check_detector_names(names: Sequence[str]) -> None:
    """Raise RequestValidationError (field "detector") for a name that is not a detector."""
    for name in names:
        if name not in DETECTORS:
            raise RequestValidationError(
                "detector", f"unknown detector {name!r}; known detectors: {', '.join(DETECTORS)}"
            )


def check_judge_name(name: str) -> None:
    """Raise RequestValidationError (field "judge") for a name that is not a registered judge."""
    if name not in judge_names():
        raise RequestValidationError(
            "judge", f"unknown judge {name!r}; known judges: {', '.join(judge_names())}"
        )


def build_request(
    fields: Mapping[str, Any],
    detectors: Sequence[str] | None = None,
    explain: bool | None = None,
    must_compute: MustCompute = "ignore_failures",
) -> dict[str, Any]:
    """The raw request item (a dict for `parse_item`) for one row's fields.

    detectors: the detectors to run; their options come from the row's `config` when it has an
        entry for them. When None, the row's own `config` is used if it has one, else every
        detector whose required inputs the row has (RequestValidationError if none has them).
    explain: True or False sets `explain` in every detector's config (over the row's own);
        None leaves each detector's config, and so the wire default, as it is.
    must_compute: what a judge failure does to the item; the runner keeps going per row.
    """
    # A JSON null is a field not given, as an empty CSV cell and a Parquet null are.
    raw: dict[str, Any] = {
        name: fields[name] for name in REQUEST_FIELDS if fields.get(name) is not None
    }
    row_config = raw.get("config")
    if detectors:
        entries = row_config if isinstance(row_config, dict) else {}
        raw["config"] = {name: entries.get(name, {}) for name in detectors}
    elif row_config is None:
        names = applicable_detectors(raw)
        if not names and _given(raw.get("generated_text")):
            missing = sorted(
                {f for d in DETECTORS.values() for f in d.required_inputs if not _given(raw.get(f))}
            )
            needs = "; ".join(
                f"{n} needs {', '.join(d.required_inputs)}" for n, d in DETECTORS.items()
            )
            raise RequestValidationError(", ".join(missing), f"no detector applies ({needs})")
        # With no generated_text at all, ask for every detector so validation names that field.
        raw["config"] = {name: {} for name in names or DETECTORS}
    if explain is not None and isinstance(raw["config"], dict):
        raw["config"] = {
            name: {**entry, "explain": explain} if isinstance(entry, dict) else entry
            for name, entry in raw["config"].items()
        }
    raw["must_compute"] = must_compute
    return raw


def apply_column_map(fields: dict[str, Any], column_map: Mapping[str, str]) -> dict[str, Any]:
    """Rename columns: `column_map` maps the name Assay expects to the name in the file."""
    if not column_map:
        return fields
    renamed = dict(fields)
    for wanted, present in column_map.items():
        if present in renamed:
            renamed[wanted] = renamed.pop(present)
    return renamed


def error_line(
    row: int, fields: Mapping[str, Any] | None, kind: str, message: str
) -> dict[str, Any]:
    """The output line of a row that has no scores, e.g. one that timed out: its id, its texts
    and the columns it carries through, as a scored row's line has them (fields: the row's, with
    the run's column map applied)."""
    line: dict[str, Any] = {"row": row}
    if fields is not None:
        if "id" in fields:
            line["id"] = fields["id"]
        reserved = {*RESERVED_KEYS, *DETECTORS}
        line.update(
            (key, value)
            for key, value in fields.items()
            if key != "id" and (key in TEXT_FIELDS or key not in reserved)
        )
    line["error"] = {"field": "row", "kind": kind, "message": message}
    return line


class RowScorer(Protocol):
    """What the engines score rows with: detectors (`DetectorScorer`) or a metric."""

    @property
    def score_names(self) -> tuple[str, ...]:
        """Output keys that hold a result with a `score`."""

    @property
    def column_map(self) -> tuple[tuple[str, str], ...]:
        """`--map` pairs (FIELD, COLUMN): the name a field is read under and its column."""

    def check(self) -> None:
        """Raise RequestValidationError for unusable settings, before anything is read."""

    def check_input(self, path: Path) -> None:
        """Raise RequestValidationError when the input cannot suit (e.g. a missing column)."""

    async def before_rows(self) -> None:
        """Raise RequestValidationError when a run that will score rows cannot (e.g. a system
        under test that does not answer); not called for a dry run or a finished output."""

    def output_columns(self, columns: Sequence[str]) -> list[str]:
        """Which of the input's `columns` output lines carry, under their names there (the
        Parquet writer gives each its own column)."""

    async def score(self, rows: Sequence[Row]) -> list[dict[str, Any]]:
        """One output line per row, in order."""

    def failure_line(
        self, row: int, fields: Mapping[str, Any] | None, kind: str, message: str
    ) -> dict[str, Any]:
        """The output line of a row the engine could not score (it timed out, its call
        raised), shaped like this scorer's other lines (fields: the row's, columns mapped)."""


@dataclass
class PendingRow:
    """One row waiting for its batch: either a validated item or the reason it was rejected."""

    row: int
    passthrough: dict[str, Any] = field(default_factory=dict)
    item: DetectRequestItem | None = None
    error: dict[str, str] | None = None


def prepare_row(
    row: int,
    fields: dict[str, Any] | Exception,
    detectors: Sequence[str] | None,
    explain: bool | None,
) -> PendingRow:
    """Validate one row into a request item, or record why it cannot be scored."""
    reserved = {*RESERVED_KEYS, *DETECTORS}
    if isinstance(fields, Exception):
        kept = fields.fields if isinstance(fields, UnreadableRow) else {}
        passthrough = {key: value for key, value in kept.items() if key not in reserved}
        return PendingRow(row, passthrough, error=_error_of(fields, row))
    passthrough = {key: value for key, value in fields.items() if key not in reserved}
    try:
        # Carried-through columns must be writable too: text that is not valid Unicode makes
        # the row bad (the writer then writes it with U+FFFD in place of the bad characters).
        check_encodable(passthrough)
        item = parse_item(build_request(fields, detectors, explain), row)
    except RequestValidationError as error:
        return PendingRow(row, passthrough, error=_error_of(error, row))
    return PendingRow(row, passthrough, item=item)


def _error_of(error: Exception, row: int) -> dict[str, str]:
    if isinstance(error, RequestValidationError):
        # The line already carries the row number; drop parse_item's "[row]." prefix.
        name = error.field.removeprefix(f"[{row}]").lstrip(".") or "row"
        return {"field": name, "kind": INVALID_ROW, "message": error.message}
    return {"field": "row", "kind": INVALID_ROW, "message": str(error)}


def scored_text(item: DetectRequestItem) -> dict[str, Any]:
    """The text an item was scored on, as output lines carry it (absent fields left out)."""
    text: dict[str, Any] = {}
    if item.user_query is not None:
        text["user_query"] = item.user_query
    if item.context is not None:
        text["context"] = item.context
    text["generated_text"] = item.generated_text
    return text


def _line(pending: PendingRow, results: Mapping[str, Any] | None) -> dict[str, Any]:
    line: dict[str, Any] = {"row": pending.row}
    if "id" in pending.passthrough:
        line["id"] = pending.passthrough["id"]
    if pending.item is not None:
        line.update(scored_text(pending.item))
    line.update(pending.passthrough)
    if pending.error is not None:
        line["error"] = pending.error
    else:
        line.update(results or {})
    return line


@dataclass(frozen=True)
class DetectorScorer:
    """Scores rows with the detectors on a judge backend.

    detectors: run these on every row; None: per row, its `config` or every detector it has
        inputs for.
    explain: True/False sets `explain` in every detector's config; None leaves it as the row's
        config (or the wire default) has it.
    judge: judge backend name (None: $ASSAY_JUDGE or "embedded").
    column_map: Assay field name -> column name in the input, for differently named columns.
    """

    detectors: tuple[str, ...] | None = None
    explain: bool | None = None
    judge: str | None = None
    column_map: tuple[tuple[str, str], ...] = ()

    @property
    def score_names(self) -> tuple[str, ...]:
        """Keys of the output lines that may hold a score."""
        return self.detectors or tuple(DETECTORS)

    def check(self) -> None:
        """Raise RequestValidationError for unknown detector or judge names."""
        if self.detectors:
            check_detector_names(self.detectors)
        if self.judge is not None:
            check_judge_name(self.judge)

    def check_input(self, path: Path) -> None:
        """Fail before any row is scored when `--map` names a field or column that does not
        exist, or when no row of the file could be scored (see `columns.check_detector_columns`);
        single rows are still checked one by one as they are read."""
        check_detector_columns(path, self.column_map, self.detectors)

    async def before_rows(self) -> None:
        """Nothing to check: the judge is checked by name in `check`."""

    def output_columns(self, columns: Sequence[str]) -> list[str]:
        """Columns of the input (`columns`, as named in the file) that output lines carry: the
        scored text, then every column that is not a request field."""
        mapped = dict(self.column_map)
        renamed = {present: wanted for wanted, present in mapped.items()}
        carried = [renamed.get(column, column) for column in columns]
        reserved = {*RESERVED_KEYS, *DETECTORS, "id"}
        return [*TEXT_FIELDS, *(c for c in dict.fromkeys(carried) if c not in reserved)]

    def failure_line(
        self, row: int, fields: Mapping[str, Any] | None, kind: str, message: str
    ) -> dict[str, Any]:
        """See `RowScorer.failure_line`. The LLM calls the row's judging made before it failed
        (on the runner's ledger, see `score`) were paid for: they go on its line."""
        line = error_line(row, fields, kind, message)
        ledger = open_ledger()
        if ledger is not None and fields is not None:
            item = prepare_row(row, dict(fields), self.detectors, self.explain).item
            usage = ledger.take(item_key(item)) if item is not None else None
            if usage is not None and not usage.is_empty():
                line["usage"] = usage.to_dict()
        return line

    def prepare(self, row: Row) -> PendingRow:
        """One read row as a validated request item (columns mapped), or why it is rejected."""
        number, fields = row
        if isinstance(fields, UnreadableRow):  # its error line keeps the mapped id and columns
            fields = UnreadableRow(
                fields.field, fields.message, apply_column_map(fields.fields, dict(self.column_map))
            )
        elif not isinstance(fields, Exception):
            fields = apply_column_map(fields, dict(self.column_map))
        return prepare_row(number, fields, self.detectors, self.explain)

    async def score(self, rows: Sequence[Row]) -> list[dict[str, Any]]:
        """One output line per row, in the order given; the judge sees all valid rows at once."""
        pending = [self.prepare(row) for row in rows]
        items = [p.item for p in pending if p.item is not None]
        # The runner's ledger when it opened one (`local._score_with_timeout`): a call that
        # runs out of time leaves its usage there, for the rows' retry or error lines.
        enclosing = open_ledger()
        with nullcontext(enclosing) if enclosing else collect_usage() as ledger:
            results = iter(await detect_items(items, self.judge) if items else [])
        lines = []
        for p in pending:
            line = _line(p, next(results) if p.item is not None else None)
            if p.item is not None:
                # LLM calls and tokens this row cost; absent for judges that make none.
                usage = ledger.take(item_key(p.item))
                if not usage.is_empty():
                    line["usage"] = usage.to_dict()
            lines.append(line)
        return lines
