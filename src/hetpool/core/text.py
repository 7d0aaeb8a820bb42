"""Text that no database or encoder can hold, found anywhere in a decoded document.

Two kinds of string pass Python's own decoding but break later, far from the input:
- NUL (U+0000): PostgreSQL refuses it in text and JSONB, and exec cannot pass it in a
  command or an environment value.
- a lone surrogate (U+D800..U+DFFF without its pair): JSON's "\\ud800" escape, raw UTF-8
  bytes ED A0 80 (json.loads reads bytes with 'surrogatepass') and YAML's "\\ud800" all
  decode to one, and encoding it again as UTF-8 fails: in a database driver, in an HTTP
  client, in an error message that echoes it.
The API refuses both before any route runs (server/security.py); the CLI refuses them
while reading a file (cli/files.py), so the problem is named where it was written.
"""

from __future__ import annotations

import codecs
import re

from hetpool.core.errors import SpecError

_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSHOWABLE = re.compile("[\x00\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored or sent back, or None."""
    if "\x00" in value:
        return "NUL bytes (\\x00) are not allowed in text"
    match = _SURROGATE.search(value)
    if match:
        return f"a lone surrogate (\\u{ord(match.group()):04x}) is not valid Unicode text; use UTF-8"
    return None


def shown(value: object) -> str:
    """`value` as text safe to put in a message: NUL and surrogates as \\uXXXX escapes."""
    return _UNSHOWABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", str(value))


def child_loc(prefix: str, key: object) -> str:
    """body + 0 → body[0]; body + name → body.name (`prefix` empty: just the key)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{prefix}[{key}]"
    return f"{prefix}.{shown(key)}" if prefix else shown(key)


def find_bad_text(value: object, where: str) -> tuple[str, str] | None:
    """(location, problem) of the first string or mapping key in a decoded JSON or YAML
    value that text_problem refuses, or None. Iterative: a decoded document may nest as
    deep as its decoder allowed."""
    stack = [(value, where)]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                return loc or "(root)", problem
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                problem = text_problem(key) if isinstance(key, str) else None
                if problem:
                    return child_loc(loc, key), f"a key: {problem}"
                stack.append((child, child_loc(loc, key)))
        elif isinstance(item, list):
            stack.extend((child, child_loc(loc, i)) for i, child in reversed(list(enumerate(item))))
    return None


def decode_utf8(data: bytes, source: str) -> str:
    """The text of a file read as bytes, or a SpecError naming `source` and the first byte
    that is not UTF-8 (offset, line and column), instead of a UnicodeDecodeError traceback."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise SpecError(f"{source}: UTF-16 text (it starts with a UTF-16 byte order mark); save it as UTF-8")
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0  # editors on Windows write one
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = skip + exc.start
        line = data.count(b"\n", 0, offset) + 1
        column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
        raise SpecError(
            f"{source}: not UTF-8 text: byte 0x{data[offset]:02x} at byte offset {offset} (line {line}, column {column}); save the file as UTF-8"
        ) from None
