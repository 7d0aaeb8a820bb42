"""Where the CLI finds the server and its token: flags, then env, then the config file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hetpool" / "config.json"


@dataclass
class ClientConfig:
    url: str
    token: str | None


def load_config(url: str | None = None, token: str | None = None) -> ClientConfig:
    stored: dict = {}
    path = config_path()
    if path.exists():
        try:
            stored = json.loads(path.read_text())
        except ValueError:
            stored = {}
    return ClientConfig(
        url=url or os.environ.get("HETPOOL_URL") or stored.get("url") or DEFAULT_URL,
        token=token or os.environ.get("HETPOOL_TOKEN") or stored.get("token"),
    )


def save_config(url: str, token: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a client credential: owner-only
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url, "token": token}, fh)
    os.replace(tmp, path)
    return path
