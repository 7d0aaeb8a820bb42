"""Server settings from a YAML file (`--config` / HETPOOL_CONFIG), validated at start.

Precedence, lowest first: defaults < file < environment (HETPOOL_*) < command-line flags.
The environment wins over the file so that a container or a systemd EnvironmentFile can
override one value (a password, a port) without editing the shared file. Every error
names the field and, for unknown keys, lists the allowed ones: a typo must not be
silently ignored in production.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from hetpool.server.settings import Settings

ENV_PREFIX = "HETPOOL_"
MAX_CONFIG_BYTES = 256 * 1024  # a settings file is a few lines; refuse anything that looks hostile
SECRET_MARKERS = ("password", "secret", "token", "private_key")


class ConfigError(ValueError):
    """A configuration problem; the message names the source and the field."""


def allowed_keys() -> list[str]:
    return sorted(Settings.model_fields)


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's mapping of settings, checked for unknown keys (values are checked by Settings)."""
    if not path.is_file():
        raise ConfigError(f"config file {path}: not found")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings, got {type(data).__name__}")
    allowed = set(allowed_keys())
    for key in data:
        if not isinstance(key, str) or key not in allowed:
            raise ConfigError(f"config file {path}: unknown key {key!r}; allowed keys: {', '.join(allowed_keys())}")
    return data


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load_settings(config: Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Settings from file + environment + explicit overrides (None values are ignored).

    `config` falls back to HETPOOL_CONFIG. Raises ConfigError naming the field and where its
    bad value came from.
    """
    environ = os.environ
    if config is None and environ.get(ENV_PREFIX + "CONFIG"):
        config = Path(environ[ENV_PREFIX + "CONFIG"])
    from_file = read_config_file(config) if config else {}
    # Settings(**kwargs) gives kwargs priority over the environment; drop the file's value
    # wherever the environment sets the field, so the environment wins.
    file_values = {k: v for k, v in from_file.items() if env_name(k) not in environ}
    explicit = {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        return Settings(**{**file_values, **explicit})
    except ValidationError as exc:
        raise ConfigError(_explain(exc, config, explicit, environ)) from None


def _explain(exc: ValidationError, config: Path | None, explicit: dict[str, Any], environ) -> str:
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "settings"
        if field in explicit:
            source = "command line"
        elif env_name(field) in environ:
            source = f"environment {env_name(field)}"
        else:
            source = f"config file {config}" if config else "settings"
        got = f" (got {error['input']!r})" if "input" in error and not isinstance(error["input"], dict) else ""
        lines.append(f"{source}: {field}: {error['msg']}{got}")
    return "invalid settings:\n  " + "\n  ".join(lines)


def mask_url(url: str) -> str:
    """A database URL with its password replaced by ***."""
    if not url:
        return url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 — an unparseable URL is still shown, minus anything that may be a password
        return url.split("://", 1)[0] + "://***@" + url.rsplit("@", 1)[1] if "@" in url else url


def effective_settings(settings: Settings) -> dict[str, Any]:
    """The settings as plain values with secrets masked, for `hetpool config check`."""
    out: dict[str, Any] = {}
    for name, value in settings.model_dump().items():
        if name == "database_url":
            value = mask_url(value) or f"(default) {mask_url(settings.resolved_database_url())}"
        elif any(marker in name for marker in SECRET_MARKERS) and value:
            value = "***"
        out[name] = str(value) if isinstance(value, Path) else value
    return out
