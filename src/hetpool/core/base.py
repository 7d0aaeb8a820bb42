"""Base classes for user-facing specs and stored records.

User input is strict (`extra="forbid"`): a typo in a YAML file is an error that names
the field. Data read back from storage goes through the same models, so a field that a
newer version stopped writing must keep a default.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
_NAME_RE = re.compile(NAME_PATTERN)

# A DNS-label-like object name: lower case, digits, '.', '_' and '-'.
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


def is_valid_name(value: str) -> bool:
    return bool(_NAME_RE.match(value))


class SpecModel(BaseModel):
    """A user-written object: unknown fields are rejected, strings are stripped."""

    # allow_inf_nan=False: NaN and ±Infinity (JSON `Infinity`, `1e309`, YAML `.inf`) are
    # never a valid number of a spec; core/limits.py bounds each number from above too.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, populate_by_name=True, allow_inf_nan=False)


class ObjectSpec(SpecModel):
    """A top-level object with a `kind:` and a `name:` (what `hetpool apply` accepts)."""

    name: str
    description: str = ""
    labels: dict[str, str] = {}
