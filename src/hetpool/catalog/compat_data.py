"""Reading the compatibility tables' files: the built-in `data/compat/*.yaml` and an
operator's directory of table files (server setting `compat_overrides`). The rows' shapes
and validation are in core/compat_rows.py."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from hetpool.core.compat_rows import COMMON, MAX_ROWS, TABLES, CompatTables, Row, TableShape, parse_rows
from hetpool.core.errors import SpecError

__all__ = ["COMMON", "MAX_ROWS", "TABLES", "CompatTables", "Row", "TableShape", "builtin_tables", "parse_rows", "read_table_dir", "read_table_file"]


def read_table_file(text: str, origin: str) -> list[Row]:
    """The rows of one table file (`table:` and `rows:`)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{origin}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping) or "table" not in data or "rows" not in data:
        raise SpecError(f"{origin}: a compatibility table file has 'table:' and 'rows:'")
    table = str(data["table"])
    name = Path(origin).name
    if name.endswith(".yaml") and name.split(".")[0] != table:
        raise SpecError(f"{origin}: the file of table {table!r} is named {table}.yaml or {table}.<part>.yaml")
    return parse_rows(table, data["rows"], origin)


def read_table_dir(path: Path) -> list[Row]:
    """Every table file of a directory (or one file), in name order."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    if not files:
        raise SpecError(f"{path}: no *.yaml table files")
    return [row for f in files for row in read_table_file(f.read_text(encoding="utf-8"), str(f))]


@lru_cache(maxsize=1)
def builtin_tables() -> CompatTables:
    folder = resources.files("hetpool.catalog").joinpath("data/compat")
    rows: list[Row] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            rows += read_table_file(entry.read_text(encoding="utf-8"), f"data/compat/{entry.name}")
    tables: dict[str, list[Row]] = {}
    for row in rows:
        tables.setdefault(row.table, []).append(row)
    latest = max((row.checked for row in rows), default="")
    return CompatTables({name: tuple(rs) for name, rs in tables.items()}, version=latest)
