"""Server configuration from a YAML file plus HETPOOL_* (config_file.py) and `hetpool config check`:
the environment overrides the file, flags override both, and every mistake names the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetpool.server.config_file import ConfigError, allowed_keys, effective_settings, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own HETPOOL_* must not leak into these tests."""
    import os

    for name in list(os.environ):
        if name.startswith("HETPOOL_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hetpool.yaml"
    path.write_text(text)
    return path


def test_file_values_env_overrides_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path, f"data_dir: {tmp_path / 'data'}\nport: 9001\nhost: 0.0.0.0\nlog_format: json\nleader_lease_s: 20\n")
    settings = load_settings(config)
    assert (settings.port, settings.host, settings.log_format, settings.leader_lease_s) == (9001, "0.0.0.0", "json", 20.0)
    assert settings.data_dir == tmp_path / "data"

    monkeypatch.setenv("HETPOOL_PORT", "9002")
    assert load_settings(config).port == 9002  # environment beats the file
    assert load_settings(config, {"port": 9003, "host": None}).port == 9003  # a flag beats both; None = flag not given
    assert load_settings(config, {"port": 9003, "host": None}).host == "0.0.0.0"

    monkeypatch.setenv("HETPOOL_CONFIG", str(config))  # the file can come from the environment too
    assert load_settings().log_format == "json"


def test_unknown_key_is_named_with_the_allowed_keys(tmp_path: Path) -> None:
    config = write(tmp_path, "port: 8080\ndatabse_url: postgresql://x\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    message = str(err.value)
    assert f"config file {config}: unknown key 'databse_url'; allowed keys: " in message
    assert "database_url" in message and "leader_lease_s" in message and ", ".join(allowed_keys()) in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("port: eighty\n", "port: Input should be a valid integer"),
        ("log_format: xml\n", "log_format: Input should be 'text' or 'json'"),
        ("leader_lease_s: -1\n", "leader_lease_s: Input should be greater than 0"),
        ("run_workers: perhaps\n", "run_workers: Input should be a valid boolean"),
    ],
)
def test_wrong_types_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    config = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert f"config file {config}: {expected}" in str(err.value)


def test_a_bad_environment_value_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETPOOL_PORT", "http")
    with pytest.raises(ConfigError, match="environment HETPOOL_PORT: port: Input should be a valid integer"):
        load_settings(write(tmp_path, "port: 8080\n"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- port\n- 8080\n", "expected a mapping of settings, got list"),
        ("port: [unclosed\n", "not valid YAML"),
        ("1: 2\n", "unknown key 1"),
    ],
)
def test_malformed_files_are_rejected(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_settings(write(tmp_path, text))
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.yaml")


def test_effective_settings_mask_the_database_password(tmp_path: Path) -> None:
    config = write(tmp_path, "database_url: postgresql+psycopg://hetpool:hunter2@db:5432/hetpool\n")
    shown = effective_settings(load_settings(config))
    assert shown["database_url"] == "postgresql+psycopg://hetpool:***@db:5432/hetpool"
    assert "hunter2" not in repr(shown)


def test_config_check_command(tmp_path: Path) -> None:
    from hetpool.cli.main import app

    good = write(tmp_path, "database_url: postgresql+psycopg://hetpool:hunter2@db/hetpool\nport: 9100\n")
    result = CliRunner().invoke(app, ["config", "check", "--config", str(good)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output and "hetpool:***@db/hetpool" in result.stdout
    assert any(line.split() == ["port", "9100"] for line in result.stdout.splitlines())
    assert "configuration ok" in result.stderr

    bad = write(tmp_path, "prot: 9100\n")
    result = CliRunner().invoke(app, ["config", "check"], env={"COLUMNS": "200", "HETPOOL_CONFIG": str(bad)})
    assert result.exit_code == 2 and "unknown key 'prot'; allowed keys:" in result.stderr


def test_up_rejects_a_bad_config_before_serving(tmp_path: Path) -> None:
    from hetpool.cli.main import app

    bad = write(tmp_path, f"data_dir: {tmp_path / 'data'}\nport: high\n")
    result = CliRunner().invoke(app, ["up", "--config", str(bad)], env={"COLUMNS": "200"})
    assert result.exit_code != 0
    assert "port: Input should be a valid integer" in str(result.exception) + result.output
    assert not (tmp_path / "data").exists()  # nothing was created
