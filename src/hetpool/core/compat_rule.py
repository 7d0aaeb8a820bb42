"""`kind: CompatibilityRule`: an operator's rows for one compatibility table, applied like
any other object (`hetpool apply -f`), so a site can say what its own validation runs
showed — a CANN build the tables do not list, a framework release that came out after
ours — without a hetpool release. Rows replace the built-in rows with the same key.

Applying one is `inventory.write` (an operator's right): a tenant that could write rules
could make an incompatible stack "compatible" for everyone.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from hetpool.core.base import Name, ObjectSpec, ShortText
from hetpool.core.compat_rows import parse_rows
from hetpool.core.errors import SpecError

MAX_RULE_ROWS = 500


class CompatibilityRuleSpec(ObjectSpec):
    kind: Literal["CompatibilityRule"] = "CompatibilityRule"
    name: Name
    table: ShortText = Field(description="the table the rows belong to: torch-npu, pytorch, cuda-driver … (docs/catalog.md)")
    source: ShortText = Field(default="", description="where the rows come from, for rows that do not say (a validation run, a vendor note)")
    checked: ShortText = Field(default="", description="when that source was read (YYYY-MM-DD), for rows that do not say")
    rows: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_RULE_ROWS, description="the table's columns, one mapping per fact")

    @model_validator(mode="after")
    def _rows_fit_the_table(self) -> CompatibilityRuleSpec:
        try:
            self.parsed_rows()
        except SpecError as exc:  # pydantic turns a ValueError into a field error naming the row and column
            raise ValueError(str(exc)) from None
        return self

    def parsed_rows(self) -> list:
        """The rows as catalog rows, with the rule's source and date filled in where a row has none."""
        defaults = {k: v for k, v in (("source", self.source), ("checked", self.checked)) if v}
        return parse_rows(self.table, [{**defaults, **row} for row in self.rows], f"CompatibilityRule {self.name}")
