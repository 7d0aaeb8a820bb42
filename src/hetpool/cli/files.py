"""Reading spec files and directories for `apply`, `submit` and `plan`.

Every problem with a file is a SpecError naming it (the CLI prints it and exits 2), never
a traceback: a file that cannot be read, one over the size limit (refused before it is
read whole), bytes that are not UTF-8 (with the byte offset, line and column), and text
that could not be sent as JSON or stored (NUL bytes, lone surrogates: core/text.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from hetpool.core.errors import SpecError
from hetpool.core.specs import MAX_SPEC_BYTES, load_yaml_documents
from hetpool.core.text import decode_utf8, find_bad_text


def _read_bytes(stream: BinaryIO, source: str) -> bytes:
    data = stream.read(MAX_SPEC_BYTES + 1)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{source}: larger than {MAX_SPEC_BYTES // (1024 * 1024)} MiB")
    return data


def read_text(file: Path | None) -> tuple[str, str]:
    """(text, source name) of a file, or of standard input for None."""
    source = "<stdin>" if file is None else str(file)
    try:
        if file is None:
            data = _read_bytes(sys.stdin.buffer, source)
        else:
            with open(file, "rb") as stream:
                data = _read_bytes(stream, source)
    except OSError as exc:
        raise SpecError(f"{source}: cannot be read: {exc.strerror or exc}") from None
    return decode_utf8(data, source), source


def read_documents(paths: list[str]) -> tuple[list[dict], list[str]]:
    """All documents in the given files / directories (recursively, *.yaml|*.yml), with sources."""
    documents: list[dict] = []
    sources: list[str] = []
    for raw in paths:
        if raw == "-":
            files = [None]
        else:
            path = Path(raw)
            if path.is_dir():
                files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
                if not files:
                    raise SpecError(f"{raw}: no .yaml files in this directory")
            elif path.is_file():
                files = [path]
            else:
                raise SpecError(f"{raw}: no such file or directory")
        for file in files:
            text, source = read_text(file)
            for i, doc in enumerate(load_yaml_documents(text, source)):
                where = f"{source}#{i + 1}"
                bad = find_bad_text(doc, "")
                if bad:  # YAML escapes ("\0", "\ud800") make what no JSON client can send
                    raise SpecError(f"{where}: {bad[0]}: {bad[1]}")
                documents.append(doc)
                sources.append(where)
    return documents, sources


def read_single_task(path: str) -> dict:
    documents, _ = read_documents([path])
    tasks = [d for d in documents if d.get("kind", "Task") == "Task"]
    if len(tasks) != 1:
        raise SpecError(f"{path}: expected exactly one Task document, found {len(tasks)}")
    return tasks[0]
