"""Reading spec files and directories for `apply`, `submit` and `plan`."""

from __future__ import annotations

import sys
from pathlib import Path

from hetpool.core.errors import SpecError
from hetpool.core.specs import load_yaml_documents


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
            text = sys.stdin.read() if file is None else file.read_text(encoding="utf-8")
            source = "<stdin>" if file is None else str(file)
            for i, doc in enumerate(load_yaml_documents(text, source)):
                documents.append(doc)
                sources.append(f"{source}#{i + 1}")
    return documents, sources


def read_single_task(path: str) -> dict:
    documents, _ = read_documents([path])
    tasks = [d for d in documents if d.get("kind", "Task") == "Task"]
    if len(tasks) != 1:
        raise SpecError(f"{path}: expected exactly one Task document, found {len(tasks)}")
    return tasks[0]
