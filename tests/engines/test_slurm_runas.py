"""Slurm jobs never run as the control plane (issue 14, finding 1): real jobs on the cluster of
deploy/slurm.sh, through the backend and through the API.

Each job runs as the Unix account that backend_config maps its tenant to (run_as_user,
run_as_tenants; deploy/slurm-accounts.sh creates hetpool-task, hp-ai-lab and hp-infra), with
none of the server's environment; one tenant's job cannot read another's output or scripts;
and a job cannot make the server (root) read a file for it through a link. Root, system
accounts and malformed settings are refused: 422 at apply, a permanent failure at submit.
"""

from __future__ import annotations

import os
import pwd
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import JobHandle, JobPhase, LaunchRequest, WorkerLaunch
from hetpool.engines.slurm import SlurmBackend, SlurmError
from tests.server.helpers import run_to_end

SLURM_CONF = os.environ.get("HETPOOL_TEST_SLURM_CONF", "")
CATALOG = DeviceCatalog.builtin()
CANARY = "postgresql://hetpool:canary-secret-5f2a@db.internal/hetpool"
TENANTS = "ai-lab=hp-ai-lab, infra=hp-infra"


def uid_of(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


@pytest.fixture
def jobs_dir() -> Iterator[Path]:
    """Job directories the run-as accounts can reach (pytest's tmp_path is private to root)."""
    if not SLURM_CONF:
        pytest.skip("HETPOOL_TEST_SLURM_CONF not set (export HETPOOL_TEST_SLURM_CONF=$(deploy/slurm.sh start))")
    for name in ("hetpool-task", "hp-ai-lab", "hp-infra"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            pytest.fail(f"account {name} is missing: deploy/slurm.sh start (deploy/slurm-accounts.sh) creates it")
    root = Path(SLURM_CONF).parent / "test-runas" / uuid.uuid4().hex[:12]
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret in the server's own environment, as a PostgreSQL deployment has it."""
    monkeypatch.setenv("HETPOOL_DATABASE_URL", CANARY)
    monkeypatch.setenv("SLURM_HETPOOL_CANARY", CANARY)  # SLURM_* would pass even --export=NONE
    return CANARY


def backend(jobs_dir: Path, **extra: str) -> SlurmBackend:
    config = {"conf": SLURM_CONF, "node_prefix": "hp-", "timeout_s": "20", "jobs_dir": str(jobs_dir), "run_as_tenants": TENANTS, **extra}
    return SlurmBackend(config, CATALOG, jobs_dir / "unused")


def request(tenant: str, command: str, env: dict[str, str] | None = None) -> LaunchRequest:
    task_id = "t-" + uuid.uuid4().hex[:10]
    worker = WorkerLaunch(0, "hp-cpu-1", "pool", None, [], "", 1, 0.25)
    return LaunchRequest(task_id, 1, "runas", tenant, command, [worker], env=env or {})


def finish(b: SlurmBackend, handle: JobHandle, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    status = b.poll([handle])[handle.job_id]
    while not status.phase.terminal and time.monotonic() < deadline:
        time.sleep(0.2)
        status = b.poll([handle])[handle.job_id]
    assert status.phase is JobPhase.SUCCEEDED, status
    return b.logs(handle, limit=1 << 20).text


@pytest.fixture
def strict_umask() -> Iterator[None]:
    """A server that keeps its own files private (umask 077): the job must still read its scripts."""
    old = os.umask(0o077)
    yield
    os.umask(old)


def test_jobs_run_as_the_mapped_account_without_the_servers_environment(jobs_dir: Path, canary: str, strict_umask: None) -> None:
    b = backend(jobs_dir)
    command = 'echo "uid=$(id -u) gid=$(id -g)"; env; echo "greeting=$GREETING"'
    mapped = b.submit(request("ai-lab/nlp/llm-sft", command, {"GREETING": "hello"}))
    default = b.submit(request("research/x", command))
    text = finish(b, mapped)
    assert f"uid={uid_of('hp-ai-lab')} gid={pwd.getpwnam('hp-ai-lab').pw_gid}" in text, text
    assert "greeting=hello" in text  # the task's own environment does arrive
    assert canary not in text and "HETPOOL_DATABASE_URL" not in text and "SLURM_HETPOOL_CANARY" not in text
    other = finish(b, default)
    assert f"uid={uid_of('hetpool-task')} " in other and "uid=0 " not in other
    assert canary not in other


def test_one_tenant_cannot_read_another_tenants_job(jobs_dir: Path) -> None:
    b = backend(jobs_dir)
    secret = "tenant-a-secret-" + uuid.uuid4().hex[:8]
    a = b.submit(request("ai-lab/nlp", 'echo "a says $SECRET_A"', {"SECRET_A": secret}))
    assert secret in finish(b, a)
    a_dir = jobs_dir / "jobs" / a.job_id
    # B knows A's paths (the names are predictable); every way in must fail, and B's attempt to
    # write over the server's record of A must too.
    targets = [a_dir / "worker-0" / "output.log", a_dir / "out" / "worker-0" / "output.log", a_dir / "env-0.sh", a_dir / "request.json"]
    probe = "; ".join(f"cat {t} 2>&1" for t in targets) + f"; ls {jobs_dir / 'jobs'} 2>&1; echo forged >{a_dir / 'final.json'} 2>&1; true"
    text = finish(b, b.submit(request("infra/data", probe)))
    assert secret not in text, text
    assert text.count("Permission denied") >= 4, text
    assert a.job_id not in text.replace(str(a_dir), "")  # the listing of jobs/ is refused too
    assert b.poll([a])[a.job_id].phase is JobPhase.SUCCEEDED


def test_a_job_cannot_make_the_server_read_a_file_for_it(jobs_dir: Path, tmp_path: Path) -> None:
    private = jobs_dir / "server-only.txt"
    private.parent.mkdir(parents=True, exist_ok=True)
    private.write_text("server-private-" + uuid.uuid4().hex)
    private.chmod(0o600)
    b = backend(jobs_dir)
    # The worker runs in its own directory; it swaps its log for a link to the server's file.
    handle = b.submit(request("ai-lab/nlp", f"echo started; rm -f output.log; ln -s {private} output.log; true"))
    deadline = time.monotonic() + 60
    while not b.poll([handle])[handle.job_id].phase.terminal and time.monotonic() < deadline:
        time.sleep(0.2)
    with pytest.raises(ValueError, match="refusing to read worker 0's output.*symbolic link"):
        b.logs(handle)
    assert private.read_text().startswith("server-private-")


def test_root_system_accounts_and_bad_settings_are_refused(jobs_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"backend_config\.run_as_user: 'root' is refused: jobs never run as root"):
        backend(jobs_dir, run_as_user="root")
    with pytest.raises(ValueError, match=r"backend_config\.run_as_tenants: entry 'ai-lab' is not 'tenant-prefix=user\[:group\]'"):
        backend(jobs_dir, run_as_tenants="ai-lab")
    system = next(p.pw_name for p in pwd.getpwall() if 0 < p.pw_uid < 1000)
    for config, tenant, reason in (
        ({"run_as_user": system}, "research/x", f"uid {uid_of(system)} is a system account"),
        ({"run_as_tenants": "ai-lab=no-such-account-x"}, "ai-lab/nlp", "'no-such-account-x' does not exist"),
    ):
        b = backend(jobs_dir, **config)
        with pytest.raises(SlurmError, match=reason):
            b.submit(request(tenant, "true"))
    # Nothing was written for a refused job.
    assert not any((jobs_dir / "jobs").iterdir())


def test_jobs_dir_the_accounts_cannot_reach_is_a_clear_failure(tmp_path: Path) -> None:
    if not SLURM_CONF:
        pytest.skip("HETPOOL_TEST_SLURM_CONF not set")
    private = tmp_path / "private"  # under pytest's 0700 base directory
    b = SlurmBackend({"conf": SLURM_CONF, "node_prefix": "hp-", "jobs_dir": str(private)}, CATALOG, tmp_path)
    with pytest.raises(SlurmError, match=r"hetpool-task cannot reach the job directories: .* mode 700 .*set backend_config\.jobs_dir"):
        b.submit(request("research/x", "true"))


# -- through the API --------------------------------------------------------------------------------


def cluster(where: Path, **config: str) -> dict:
    backend_config = {"conf": SLURM_CONF, "gres_models": "gpu:a100=nvidia-a100-80g", "jobs_dir": str(where), **config}
    return {"kind": "Cluster", "name": "hpc", "backend": "slurm", "zone": "hpc", "backend_config": backend_config}


@pytest.mark.parametrize(
    ("config", "field", "text"),
    [
        ({"run_as_user": "root"}, "backend_config.run_as_user", "jobs never run as root"),
        ({"run_as_user": "Bad Name"}, "backend_config.run_as_user", "is not a Unix account name"),
        ({"run_as_tenants": "ai-lab=root"}, "backend_config.run_as_tenants", "jobs never run as root"),
        ({"run_as_tenants": "ai-lab"}, "backend_config.run_as_tenants", "tenant-prefix=user[:group]"),
        ({"run_as_user": "daemon"}, "backend_config.run_as_user", "system account"),
        ({"jobs_dir": "relative/jobs"}, "backend_config.jobs_dir", "absolute path"),
    ],
)
def test_bad_run_as_settings_are_a_422_naming_the_field(api: TestClient, tmp_path: Path, config: dict, field: str, text: str) -> None:
    response = api.post("/api/v1/apply", json={"documents": [cluster(tmp_path, **config)]})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "invalid_spec"
    assert any(field in d["loc"] and text in d["msg"] for d in body["details"]), body


def test_a_task_submitted_through_the_api_runs_as_its_tenants_account(demo: TestClient, ctx, jobs_dir: Path, canary: str) -> None:
    assert demo.post("/api/v1/apply", json={"documents": [cluster(jobs_dir, run_as_tenants=TENANTS, sync="on")]}).status_code == 200
    assert demo.post("/api/v1/clusters/hpc/sync").status_code == 200
    task = {
        "name": "who-am-i",
        "tenant": "ai-lab/nlp/llm-sft",
        "type": "training",
        "command": 'echo "uid=$(id -u)"; env',
        "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 0.5, "memory_gb": 0.5},
        "any_of": ["hpc-nvidia-h100"],
    }
    created = demo.post("/api/v1/tasks", json=task)
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    final = run_to_end(ctx, demo, task_id, timeout_s=90)
    assert final["state"] == "succeeded" and final["backend"] == "slurm", final
    logs = demo.get(f"/api/v1/tasks/{task_id}/logs").json()["text"]
    assert f"uid={uid_of('hp-ai-lab')}" in logs, logs
    assert canary not in logs and "HETPOOL_DATABASE_URL" not in logs
