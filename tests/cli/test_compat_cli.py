"""`hetpool compat check | matrix | rows` and a CompatibilityRule through the real CLI
against a real `hetpool up --demo` server."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli_e2e import REPO, Server, server  # noqa: F401 - the fixture

RULE_FILE = str(REPO / "examples" / "compat" / "site-cann-rule.yaml")


@pytest.mark.parametrize("db_kind", ["sqlite"])  # CLI behaviour; the API tests cover PostgreSQL
def test_compat_check_says_the_verdict_the_reasons_and_the_rows(server: Server) -> None:  # noqa: F811
    old = server.cli("compat", "check", "--device", "nvidia-a100-80g", "--stack", "driver=470.82.01", "--framework", "pytorch==2.8.0", check=False)
    assert old.returncode == 1, old.stderr
    assert old.stdout.startswith("incompatible — driver too old for framework") and "rows used:" in old.stdout
    assert "cuda-driver 11.4" in old.stdout and "pytorch 2.8" in old.stdout  # the driver's own row and the release's
    a100 = ("compat", "check", "--device", "nvidia-a100-80g")
    new = json.loads(server.cli(*a100, "--stack", "driver=550.54.15", "--framework", "pytorch==2.4", "-o", "json").stdout)
    assert new["status"] == "compatible" and any(r.startswith("cuda-driver 12.4") for r in new["rows"])
    unknown = server.cli("compat", "check", "--device", "ascend-910b2", "--stack", "cann=8.4.0", "--framework", "pytorch==2.7.1", check=False)
    assert unknown.returncode == 1 and unknown.stdout.startswith("unknown — runtime version not in knowledge base")
    assert "nearest known rows:" in unknown.stdout and "block the pool" in unknown.stdout
    extra = server.cli(
        "compat", "check", "--device", "ascend-910b2", "--stack", "cann=8.5.0", "--framework", "pytorch", "--extra", "vllm-ascend==0.13.0"
    )
    assert extra.stdout.startswith("compatible") and "vllm-ascend 0.13" in extra.stdout
    installed = server.cli(*a100, "--stack", "driver=550.54.15,torch=2.3.1", "--framework", "pytorch==2.4", "--installed", check=False)
    assert installed.returncode == 1 and "installed framework version does not match" in installed.stdout
    bad = server.cli("compat", "check", "--device", "nvidia-a100-80g", "--stack", "driver", "--framework", "pytorch", check=False)
    assert bad.returncode != 0 and "key=value" in bad.stderr


@pytest.mark.parametrize("db_kind", ["sqlite"])
def test_compat_matrix_by_device_and_by_framework(server: Server) -> None:  # noqa: F811
    by_device = server.cli("compat", "matrix", "--device", "ascend-910b2").stdout
    assert "CANN 8.0.0" in by_device and "pytorch 2.4.0" in by_device
    assert "no (first: ROCm 6.0.0)" in server.cli("compat", "matrix", "--device", "amd-mi300x").stdout
    answer = json.loads(server.cli("compat", "matrix", "--framework", "mindspore==2.3.1", "-o", "json").stdout)
    found = {r["device"]: r for r in answer["by_device"]}
    assert found["ascend-910b2"]["status"] == "compatible" and found["ascend-910b2"]["releases"] == ["CANN 8.0.RC2"]
    assert found["nvidia-a100-80g"]["status"] == "incompatible" and "Ascend NPUs" in found["nvidia-a100-80g"]["detail"]
    table = server.cli("compat", "matrix", "--framework", "pytorch==2.8.0", "-o", "wide").stdout
    assert "nvidia-a100-80g" in table and "CUDA 12.0" in table, table
    neither = server.cli("compat", "matrix", check=False)
    assert neither.returncode != 0 and "exactly one" in neither.stderr


@pytest.mark.parametrize("db_kind", ["sqlite"])
def test_an_applied_rule_is_shown_with_its_source_and_used(server: Server) -> None:  # noqa: F811
    args = ("compat", "check", "--device", "ascend-910b2", "--stack", "cann=8.0.RC1", "--framework", "pytorch==2.4.0")
    assert server.cli(*args, check=False).stdout.startswith("incompatible")
    server.cli("apply", "-f", RULE_FILE)
    after = server.cli(*args).stdout
    assert after.startswith("compatible") and "from CompatibilityRule site-cann-80rc1-torch24" in after and "VR-2026-117" in after
    described = server.cli("describe", "compatibilityrule", "site-cann-80rc1-torch24").stdout
    assert "site validation run VR-2026-117" in described and "in_effect:" in described
    assert "replaces:" in described and "Ascend/pytorch" in described  # the built-in row it stands in for, with its source
    rows = server.cli("compat", "rows", "--origin", "CompatibilityRule site-cann-80rc1-torch24").stdout
    assert "8.0.RC1" in rows and "2026-11-28" in rows
