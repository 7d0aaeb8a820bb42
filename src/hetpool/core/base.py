"""Base classes for user-facing specs and stored records.

User input is strict (`extra="forbid"`): a typo in a YAML file is an error that names
the field. Data read back from storage goes through the same models, so a field that a
newer version stopped writing must keep a default.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
_NAME_RE = re.compile(NAME_PATTERN)

# A DNS-label-like object name: lower case, digits, '.', '_' and '-'.
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


# String limits (docs/operations-security.md, "Limits"). A command is one argument of
# exec (`sh -c COMMAND`), and Linux refuses any single argument or environment string over
# 128 KiB (MAX_ARG_STRLEN) and all of them together over ARG_MAX (2 MiB by default):
# checked here, at submit, instead of failing at run time.
MAX_COMMAND_BYTES = 64 * 1024  # UTF-8 bytes
MAX_ENV_VARS = 64
MAX_ENV_VALUE_BYTES = 16 * 1024  # UTF-8 bytes; 64 of them stay well under ARG_MAX
MAX_TEXT_CHARS = 4096  # descriptions, image references, paths
MAX_SHORT_TEXT_CHARS = 256  # display names, label keys and values, zones, features
MAX_LABELS = 64
MAX_LIST_ITEMS = 256  # features and other lists of short strings
MAX_CONFIG_VALUE_CHARS = 16 * 1024  # a Cluster's backend_config value (a bearer token, a JSON list)
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"  # what a shell, Slurm and Ray all accept
_ENV_NAME_RE = re.compile(ENV_NAME_PATTERN)


def _no_nul(value: str) -> str:
    # The API refuses NUL everywhere (server/security.py); this keeps specs read from
    # files or other callers as clean: PostgreSQL cannot store it, exec cannot pass it.
    if "\x00" in value:
        raise ValueError("NUL bytes (\\x00) are not allowed")
    return value


def _utf8_at_most(limit: int, what: str):
    def check(value: str) -> str:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise ValueError(f"{what} is {size} bytes; at most {limit} bytes ({limit // 1024} KiB) of UTF-8 are allowed")
        return _no_nul(value)

    return AfterValidator(check)


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.match(value):
        raise ValueError(f"environment variable name {value!r}: letters, digits and '_', not starting with a digit ([A-Za-z_][A-Za-z0-9_]*, <= 128)")
    return value


# Free text: bounded, and without NUL. Shown in error messages as pydantic words them
# ("String should have at most 4096 characters").
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS), AfterValidator(_no_nul)]
ShortText = Annotated[str, StringConstraints(max_length=MAX_SHORT_TEXT_CHARS), AfterValidator(_no_nul)]
ShortTexts = Annotated[list[ShortText], Field(max_length=MAX_LIST_ITEMS)]
Key = Annotated[ShortText, StringConstraints(min_length=1)]
Labels = Annotated[dict[Key, ShortText], Field(max_length=MAX_LABELS)]
ConfigValue = Annotated[str, StringConstraints(max_length=MAX_CONFIG_VALUE_CHARS), AfterValidator(_no_nul)]
ConfigMap = Annotated[dict[Key, ConfigValue], Field(max_length=MAX_LABELS)]
# A task's command and environment, passed to exec: limits in bytes, as the kernel counts.
Command = Annotated[str, _utf8_at_most(MAX_COMMAND_BYTES, "command")]
EnvVars = Annotated[
    dict[Annotated[str, AfterValidator(_env_name)], Annotated[str, _utf8_at_most(MAX_ENV_VALUE_BYTES, "the value")]],
    Field(max_length=MAX_ENV_VARS),
]


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
    description: Text = ""
    labels: Labels = {}
