"""The compatibility tables' rows: their shapes, validation, and merging operators' rows.

One YAML file per table under `data/compat/` (see its README.md); every row states one
fact and carries its `source` and the date it was `checked`. Operators add or replace rows
without a release: a directory of table files (server setting `compat_overrides`) or
`kind: CompatibilityRule` documents (core/compat_rule.py). A row replaces the built-in row
with the same key (the table's key columns); any other row is added. The interpreter
(catalog/compat.py) never reads YAML; it asks this module for rows. Pure data: the files
are read by catalog/compat_data.py, and CompatibilityRule documents (core/compat_rule.py)
are validated here too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hetpool.core.errors import SpecError


@dataclass(frozen=True)
class TableShape:
    key: tuple[str, ...]
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()  # columns holding a list of versions or generations

    @property
    def columns(self) -> tuple[str, ...]:
        return self.required + self.optional


# What each table's rows hold. The interpreter's meaning of every column is in data/compat/README.md.
TABLES: dict[str, TableShape] = {
    "frameworks": TableShape(key=("framework", "runtime"), required=("framework", "runtime", "check")),
    "cuda-driver": TableShape(key=("cuda",), required=("cuda", "min_driver")),
    "cuda-minor-compat": TableShape(key=("cuda_major",), required=("cuda_major", "min_driver"), optional=("max_driver_exclusive",)),
    "cuda-arch": TableShape(key=("generation",), required=("generation", "first_cuda"), optional=("last_cuda",)),
    "pytorch": TableShape(
        key=("series",),
        required=("series", "releases"),
        optional=("cuda", "cuda_experimental", "rocm"),
        lists=("releases", "cuda", "cuda_experimental", "rocm"),
    ),
    "jax": TableShape(
        key=("series",), required=("series", "releases"), optional=("cuda", "min_cuda", "rocm", "min_generation"), lists=("releases", "cuda", "rocm")
    ),
    "vllm": TableShape(
        key=("series",),
        required=("series", "releases", "torch"),
        optional=("cuda", "min_generation", "rocm", "rocm_generations"),
        lists=("releases", "rocm", "rocm_generations"),
    ),
    "tensorflow": TableShape(key=("series",), required=("series", "releases"), optional=("cuda",), lists=("releases", "cuda")),
    "torch-npu": TableShape(key=("cann",), required=("cann", "torch_npu"), lists=("torch_npu",)),
    "mindspore": TableShape(key=("series",), required=("series", "releases", "cann"), lists=("releases", "cann")),
    "vllm-ascend": TableShape(
        key=("series",),
        required=("series", "releases", "cann", "torch", "torch_npu"),
        optional=("generations",),
        lists=("releases", "cann", "generations"),
    ),
    "paddle": TableShape(
        key=("series",),
        required=("series", "releases"),
        optional=("cuda", "rocm", "dtk", "cann", "xre", "generations"),
        lists=("releases", "cuda", "rocm", "dtk", "cann", "xre", "generations"),
    ),
    # evidence: "documented" (default: `first` is the release the vendor names as the first to support
    # the generation) or "seen" (the earliest release a source shows it working on; older ones are
    # not refused, a note says they were not checked).
    "runtime-devices": TableShape(key=("runtime", "generation"), required=("runtime", "generation", "first"), optional=("last", "evidence")),
    "torch-mlu": TableShape(key=("torch_mlu",), required=("torch_mlu", "pytorch"), optional=("cntoolkit",)),
}
COMMON = ("source", "checked", "verified", "note")
MAX_TEXT = 2000  # a source, a note or a version
MAX_ROWS = 5000  # per merged table: an operator's directory cannot make every check slow


@dataclass(frozen=True)
class Row:
    """One fact of one table, with where it comes from."""

    table: str
    values: Mapping[str, Any]
    source: str
    checked: str
    verified: bool = True
    note: str = ""
    origin: str = "built-in"  # the file or CompatibilityRule the row was read from

    @property
    def builtin(self) -> bool:
        return self.origin == "built-in" or self.origin.startswith("data/compat/")

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(str(self.values[k]) for k in TABLES[self.table].key)

    def get(self, column: str, default: Any = None) -> Any:
        return self.values.get(column, default)

    def summary(self) -> str:
        """`pytorch 2.8: releases 2.8.0; cuda 12.6, 12.8; rocm 6.4` — what the row says."""
        shape = TABLES[self.table]
        head = " ".join(str(self.values[k]) for k in shape.key)
        rest = [f"{c} {_text(self.values[c])}" for c in shape.columns if c not in shape.key and self.values.get(c) not in (None, "", [])]
        return f"{self.table} {head}" + (": " + "; ".join(rest) if rest else "")

    def cite(self) -> str:
        """The row and its source, as `compat check` and `plan` print it."""
        return self._citation

    @cached_property
    def _citation(self) -> str:  # verdicts cite rows on every check: format each row once
        flags = "" if self.verified else ", not verified"
        where = "" if self.builtin else f", from {self.origin}"
        return f"{self.summary()} [{self.source}; checked {self.checked}{flags}{where}]"

    def as_dict(self) -> dict[str, Any]:
        out = {**self.values, "source": self.source, "checked": self.checked}
        if not self.verified:
            out["verified"] = False
        if self.note:
            out["note"] = self.note
        return {**out, "table": self.table, "origin": self.origin}


def _text(value: Any) -> str:
    return ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def parse_rows(table: str, rows: Any, origin: str) -> list[Row]:
    """Validated rows of `table`; a SpecError names the row, the column and what is allowed."""
    if table not in TABLES:
        raise SpecError(f"{origin}: table: unknown table {table!r} (allowed: {', '.join(sorted(TABLES))})")
    if not isinstance(rows, list):
        raise SpecError(f"{origin}: rows must be a list of rows")
    shape = TABLES[table]
    out = []
    for i, raw in enumerate(rows):
        where = f"{origin}: rows[{i}]"
        if not isinstance(raw, Mapping):
            raise SpecError(f"{where}: a row is a mapping of columns")
        unknown = sorted(set(raw) - set(shape.columns) - set(COMMON))
        if unknown:
            raise SpecError(f"{where}: unknown column {unknown[0]!r} for table {table} (allowed: {', '.join(shape.columns + COMMON)})")
        for column in (*shape.required, "source", "checked"):
            if raw.get(column) in (None, "", []) and not (column in shape.lists and raw.get(column) == [] and column not in shape.key):
                raise SpecError(f"{where}: {column} is required for table {table}")
        values = {}
        for column in shape.columns:
            if column in raw:
                values[column] = _column(raw[column], column in shape.lists, f"{where}.{column}")
        out.append(
            Row(
                table,
                values,
                source=_string(raw["source"], f"{where}.source"),
                checked=_date(raw["checked"], f"{where}.checked"),
                verified=_flag(raw.get("verified", True), f"{where}.verified"),
                note=_string(raw.get("note", ""), f"{where}.note"),
                origin=origin,
            )
        )
    return out


def _column(value: Any, is_list: bool, where: str) -> Any:
    if is_list:
        if not isinstance(value, list):
            raise SpecError(f"{where}: expected a list of quoted versions, got {value!r}")
        return [_string(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return _string(value, where)


def _string(value: Any, where: str) -> str:
    # YAML reads an unquoted 2.10 as the float 2.1: every version must be a quoted string.
    if isinstance(value, float):
        raise SpecError(f'{where}: {value!r} is a number; quote version numbers ("2.10", not 2.10)')
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise SpecError(f"{where}: expected a string, got {value!r}")
    text = str(value)
    if len(text) > MAX_TEXT or "\x00" in text:
        raise SpecError(f"{where}: at most {MAX_TEXT} characters, no NUL")
    return text


def _date(value: Any, where: str) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    try:
        return dt.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise SpecError(f"{where}: {value!r} is not a date (YYYY-MM-DD)") from None


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{where}: true or false")
    return value


@dataclass(frozen=True)
class CompatTables:
    """Every table's rows, in file order, with operators' rows merged in."""

    tables: Mapping[str, tuple[Row, ...]] = field(default_factory=dict)
    version: str = ""

    def rows(self, table: str) -> tuple[Row, ...]:
        return self.tables.get(table, ())

    def all_rows(self) -> list[Row]:
        return [row for rows in self.tables.values() for row in rows]

    def find(self, table: str, **key: str) -> Row | None:
        for row in self.rows(table):
            if all(str(row.get(k)) == str(v) for k, v in key.items()):
                return row
        return None

    def merged(self, rows: Iterable[Row]) -> CompatTables:
        """A new set where the given rows replace every row with the same key (a table may
        hold several rows per key, one per fact and source), and rows with new keys are added."""
        incoming: dict[tuple[str, tuple[str, ...]], list[Row]] = {}
        for row in rows:
            incoming.setdefault((row.table, row.key), []).append(row)
        tables = {name: list(rs) for name, rs in self.tables.items()}
        for (table, key), new_rows in incoming.items():
            kept = [r for r in tables.get(table, []) if r.key != key]
            tables[table] = kept + new_rows
            if len(tables[table]) > MAX_ROWS:
                raise SpecError(f"{new_rows[0].origin}: table {table} would have more than {MAX_ROWS} rows")
        return CompatTables({name: tuple(rs) for name, rs in tables.items()}, self.version)
