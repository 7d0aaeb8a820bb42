"""The files for running hetpool itself (deploy/systemd, deploy/kubernetes) are valid: the
Kubernetes objects against the 1.33 schemas (strict: unknown fields fail), the systemd unit with
`systemd-analyze verify` where available and by its required keys always, and both agree
with the server's settings, probes and commands."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hetpool.server.config_file import env_name, load_settings
from hetpool.server.settings import Settings

kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S_VERSION = "1.33.0"
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
K8S_DIR = DEPLOY / "kubernetes"
UNIT = DEPLOY / "systemd" / "hetpool.service"


def k8s_objects() -> dict[str, dict]:
    objects = {}
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            objects[doc["kind"]] = doc
    return objects


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("HETPOOL_"):
            monkeypatch.delenv(name)


def test_every_manifest_validates_against_the_schema() -> None:
    objects = k8s_objects()
    expected = {"Namespace", "ServiceAccount", "ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "Job"}
    assert set(objects) == expected
    for kind, obj in objects.items():
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        if kind != "Namespace":
            assert obj["metadata"]["namespace"] == objects["Namespace"]["metadata"]["name"], kind
    listed = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())["resources"]
    assert all((K8S_DIR / name).is_file() for name in listed)


def test_a_broken_manifest_is_caught() -> None:
    """The validation is not vacuous: a typo'd field fails in strict mode."""
    deployment = k8s_objects()["Deployment"]
    deployment["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_deployment_probes_service_pdb_and_migration_job_agree(tmp_path: Path) -> None:
    objects = k8s_objects()
    deployment, service, pdb, job = objects["Deployment"], objects["Service"], objects["PodDisruptionBudget"], objects["Job"]
    assert deployment["spec"]["replicas"] == 2
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items() and pdb["spec"]["minAvailable"] == 1

    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["hetpool", "up"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (port,) = container["ports"]
    assert container["readinessProbe"]["httpGet"]["port"] == port["name"] == service["spec"]["ports"][0]["targetPort"]

    # The ConfigMap's file is a valid hetpool config whose port is the container's.
    config_file = tmp_path / "hetpool.yaml"
    config_file.write_text(objects["ConfigMap"]["data"]["hetpool.yaml"])
    settings = load_settings(config_file)
    assert settings.port == port["containerPort"] and settings.host == "0.0.0.0" and settings.log_format == "json"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert {"name": "HETPOOL_CONFIG", "value": f"{mount['mountPath']}/hetpool.yaml"} in container["env"]

    # The Secret only sets known settings, under their environment names.
    allowed_env = {env_name(field) for field in Settings.model_fields}
    assert set(objects["Secret"]["stringData"]) <= allowed_env

    (migrate,) = job["spec"]["template"]["spec"]["containers"]
    assert migrate["command"] == ["hetpool", "db", "upgrade"] and migrate["image"] == container["image"]
    assert migrate["envFrom"] == container["envFrom"] and migrate["env"] == container["env"]


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's format: [Section], Key=Value, repeated keys accumulate, # and ; comments."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"not a unit line: {raw!r}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_systemd_unit_has_the_required_keys(tmp_path: Path) -> None:
    unit = parse_unit(UNIT.read_text())
    assert set(unit) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    for key, value in {"Type": "simple", "User": "hetpool", "Restart": "on-failure", "NoNewPrivileges": "yes", "ProtectSystem": "strict"}.items():
        assert service[key] == [value], key
    hardening = ("ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables", "RestrictSUIDSGID", "SystemCallFilter")
    assert [key for key in hardening if key not in service] == []
    assert any(v.lstrip("-") == "/etc/hetpool/hetpool.env" for v in service["EnvironmentFile"])
    assert service["ExecStart"][0].split()[1:] == ["up"] and service["ExecStartPre"][0].split()[1:] == ["db", "upgrade"]
    assert "/var/lib/hetpool" in service["ReadWritePaths"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    config = dict(v.split("=", 1) for v in service["Environment"])["HETPOOL_CONFIG"]
    assert config == "/etc/hetpool/hetpool.yaml"
    # The sample config shipped next to the unit loads.
    assert load_settings(DEPLOY / "systemd" / "hetpool.yaml").data_dir == Path("/var/lib/hetpool")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify checks that the executables exist: point them at this checkout's hetpool.
    exe = Path(shutil.which("hetpool") or Path(__file__).resolve().parents[1] / ".venv" / "bin" / "hetpool")
    if not exe.exists():
        pytest.skip("no hetpool executable to point the unit at")
    unit = tmp_path / "hetpool.service"
    unit.write_text(UNIT.read_text().replace("/opt/hetpool/venv/bin/hetpool", str(exe)))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hetpool.service" not in result.stderr, result.stderr  # no warnings about our unit


def test_cli_commands_used_by_the_deploy_files_exist() -> None:
    from typer.testing import CliRunner

    from hetpool.cli.main import app

    for args in (["up", "--help"], ["db", "upgrade", "--help"]):
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
    assert "--config" in CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "200"}).stdout
