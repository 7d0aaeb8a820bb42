"""Crash-safe small files: the local backend keeps all its state in them (see `backend.py`)."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Readers see either no file or the whole content, even across a crash or reboot."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def create_exclusive(path: Path, text: str) -> bool:
    """Atomically create `path` holding `text`; False when it already exists.

    A hard link fails on an existing target, so of two racing creators exactly one wins and
    nobody ever sees a half-written file (unlike O_EXCL followed by write).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_atomic(tmp, text)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None  # absent, or (written by a racing writer) not yet complete


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
