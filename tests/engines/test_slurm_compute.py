"""The Slurm backend: script and argument generation without Slurm, then the shared contract
and Slurm-specific cases against the real cluster of deploy/slurm.sh.

The real tests need `HETPOOL_TEST_SLURM_CONF` set to that cluster's slurm.conf
(`export HETPOOL_TEST_SLURM_CONF=$(deploy/slurm.sh start)`; `make test` does it); without it
they are skipped and only the unit tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import JobHandle, JobPhase, LaunchRequest, WorkerLaunch, capabilities
from hetpool.engines.registry import make_backend
from hetpool.engines.slurm import SlurmBackend, SlurmError
from hetpool.engines.slurm.compute import _Row
from hetpool.engines.slurm.config import SlurmPlanError, parse_overrides
from hetpool.engines.slurm.gres import parse_gres
from hetpool.engines.slurm.script import (
    JobPlan,
    RankPlan,
    batch_script,
    env_script,
    gres_for,
    parse_nodes,
    plan_job,
    sbatch_args,
    worker_script,
)

SLURM_CONF = os.environ.get("HETPOOL_TEST_SLURM_CONF", "")
CATALOG = DeviceCatalog.builtin()
PREFIX = "hp-"

# `scontrol --oneliner show node` of deploy/slurm.sh's cluster, trimmed.
NODES_TEXT = """\
NodeName=cpu-1 Arch=x86_64 CPUTot=32 Gres=(null) NodeAddr=10.0.0.4 NodeHostName=vm Port=26823 RealMemory=128000 State=IDLE Partitions=cpu
NodeName=gpu-a100-1 Arch=x86_64 CPUTot=64 Gres=gpu:a100:4 NodeAddr=10.0.0.1 NodeHostName=vm RealMemory=512000 State=IDLE Partitions=gpu,cpu
NodeName=gpu-h100-1 Arch=x86_64 CPUTot=96 Gres=gpu:h100:8(S:0-1) NodeAddr=10.0.0.2 NodeHostName=vm State=MIXED Partitions=gpu,cpu
NodeName=npu-910b-1 Arch=aarch64 CPUTot=192 Gres=npu:910b3:8 NodeAddr=10.0.0.3 NodeHostName=vm State=IDLE Partitions=npu,cpu
"""
NODES = parse_nodes(NODES_TEXT)


def worker(rank: int, node: str, model: str | None = None, indices: tuple = (), env: str = "", cpu: float = 1, mem: float = 0.25) -> WorkerLaunch:
    return WorkerLaunch(rank, PREFIX + node, "pool", model, list(indices), env if indices else "", cpu, mem)


def request(command: str, workers: list[WorkerLaunch], task_id: str = "") -> LaunchRequest:
    return LaunchRequest(task_id or "t-" + uuid.uuid4().hex[:10], 1, "test", "org/team", command, workers, env={"GREETING": "hi"})


# -- unit: parsing and GRES mapping ------------------------------------------------------------


def test_parse_nodes_and_gres() -> None:
    assert sorted(NODES) == ["cpu-1", "gpu-a100-1", "gpu-h100-1", "npu-910b-1"]
    assert NODES["gpu-h100-1"].gres[0].type == "h100" and NODES["gpu-h100-1"].gres[0].count == 8
    assert NODES["cpu-1"].gres == () and NODES["cpu-1"].addr == "10.0.0.4"
    assert [(e.name, e.type, e.count) for e in parse_gres("gpu:a100:2(IDX:0-1),npu:no_consume:1,gpu,mps:400")] == [
        ("gpu", "a100", 2),
        ("npu", "", 1),
        ("gpu", "", 1),
        ("mps", "", 400),
    ]
    assert parse_overrides("gpu:a100=nvidia-a100-80g, NPU=ascend-910b3") == {"gpu:a100": "nvidia-a100-80g", "npu:": "ascend-910b3"}
    with pytest.raises(SlurmPlanError, match="not 'name:type=model'"):
        parse_overrides("gpu:a100")


def test_gres_is_the_inverse_of_the_inventory_mapping() -> None:
    npu = worker(0, "npu-910b-1", "ascend-910b3", (0, 1), "ASCEND_RT_VISIBLE_DEVICES")
    # The catalog says npu:910b; the node's own GRES type is what Slurm accepts.
    assert CATALOG.get("ascend-910b3").slurm_gres == "npu:910b"
    assert gres_for(npu, NODES["npu-910b-1"], CATALOG, {}) == "npu:910b3"
    # The node's gpu:a100 maps to the 40 GB model; the 80 GB one falls back to the catalog,
    # and a gres_models entry wins over both.
    a100_80 = worker(0, "gpu-a100-1", "nvidia-a100-80g", (0,), "CUDA_VISIBLE_DEVICES")
    assert gres_for(a100_80, NODES["gpu-a100-1"], CATALOG, {}) == "gpu:a100"
    assert gres_for(a100_80, NODES["cpu-1"], CATALOG, {"gpu:a100x": "nvidia-a100-80g"}) == "gpu:a100x"
    assert gres_for(worker(0, "cpu-1"), NODES["cpu-1"], CATALOG, {}) == ""
    # An unknown GRES type round-trips through the connector's placeholder name.
    odd = parse_nodes("NodeName=odd-1 Gres=npu:zz9:2 NodeAddr=x")
    assert gres_for(worker(0, "odd-1", "unknown-npu-zz9", (0,), "X"), odd["odd-1"], CATALOG, {}) == "npu:zz9"
    with pytest.raises(SlurmPlanError, match="gres_models"):
        gres_for(worker(0, "cpu-1", "no-such-model", (0,), "X"), NODES["cpu-1"], CATALOG, {})


# -- unit: plans and sbatch arguments ---------------------------------------------------------------


def _plan(workers: list[WorkerLaunch]) -> JobPlan:
    return plan_job(request("true", workers), NODES, CATALOG, {}, PREFIX)


def test_single_worker_arguments(tmp_path: Path) -> None:
    plan = _plan([worker(0, "gpu-a100-1", "nvidia-a100-40g", (2, 3), "CUDA_VISIBLE_DEVICES", cpu=3.5, mem=2)])
    args = sbatch_args("hetpool-t-1", tmp_path, plan, partition="gpu", account="team-a", qos="high", comment="hetpool task t attempt 1")
    assert args == [
        "--job-name=hetpool-t-1",
        "--parsable",
        f"--chdir={tmp_path}",
        f"--output={tmp_path / 'batch.log'}",
        "--open-mode=append",
        "--export=NONE",
        "--no-requeue",
        "--comment=hetpool task t attempt 1",
        "--nodes=1",
        "--ntasks=1",
        "--ntasks-per-node=1",
        "--nodelist=gpu-a100-1",
        "--cpus-per-task=4",
        "--mem=2048",
        "--gres=gpu:a100:2",
        "--partition=gpu",
        "--account=team-a",
        "--qos=high",
    ]
    assert plan.master_addr == ""  # one node: worker_environment's loopback stays


def test_gang_on_two_nodes_is_one_component() -> None:
    plan = _plan([worker(0, "cpu-1", mem=0), worker(1, "gpu-a100-1", mem=0)])
    args = sbatch_args("j", Path("/w"), plan)
    assert "--nodes=2" in args and "--ntasks=2" in args and "--ntasks-per-node=1" in args
    assert "--nodelist=cpu-1,gpu-a100-1" in args
    assert not any(a.startswith(("--mem", "--gres", "--partition", "--account", "--qos")) for a in args)  # never --mem=0: "all memory"
    assert plan.master_addr == "10.0.0.4"  # rank 0's NodeAddr
    assert [(r.rank, r.node, r.slot) for r in plan.ranks] == [(0, "cpu-1", 0), (1, "gpu-a100-1", 0)]


def test_uneven_gang_becomes_a_heterogeneous_job() -> None:
    h100 = [worker(r, "gpu-h100-1", "nvidia-h100", (r * 2, r * 2 + 1), "CUDA_VISIBLE_DEVICES") for r in range(2)]
    plan = _plan([*h100, worker(2, "gpu-a100-1", "nvidia-a100-40g", (0, 1), "CUDA_VISIBLE_DEVICES")])
    args = sbatch_args("j", Path("/w"), plan, partition="gpu")
    split = args.index(":")
    first, second = args[:split], args[split + 1 :]
    assert {"--ntasks=2", "--ntasks-per-node=2", "--nodelist=gpu-h100-1", "--gres=gpu:h100:4", "--mem=512", "--partition=gpu"} <= set(first)
    assert {"--ntasks=1", "--nodelist=gpu-a100-1", "--gres=gpu:a100:2", "--mem=256", "--partition=gpu"} <= set(second)
    assert "--job-name=j" not in second
    assert "--het-group=0-1" in batch_script("j", Path("/w"), plan)
    assert [(r.slot, r.tasks_on_node) for r in plan.ranks] == [(0, 2), (1, 2), (0, 1)]


def test_plans_refuse_what_slurm_cannot_express() -> None:
    with pytest.raises(SlurmPlanError, match="node_prefix"):
        plan_job(request("true", [WorkerLaunch(0, "cpu-1", "p", None, [], "", 1, 1)]), NODES, CATALOG, {}, PREFIX)
    with pytest.raises(SlurmPlanError, match="Slurm has no node 'gpu-9'"):
        _plan([worker(0, "gpu-9")])
    with pytest.raises(SlurmPlanError, match="different devices"):
        _plan([worker(0, "gpu-a100-1", "nvidia-a100-40g", (0,), "CUDA_VISIBLE_DEVICES"), worker(1, "gpu-a100-1", "nvidia-a100-40g", (1, 2), "X")])
    with pytest.raises(SlurmPlanError, match="duplicate worker ranks"):
        _plan([worker(0, "cpu-1"), worker(0, "gpu-a100-1")])
    with pytest.raises(SlurmPlanError, match="not valid shell names"):
        env_script({"OK": "1", "NOT-OK": "2"})
    assert env_script({"A": "it's $HOME"}) == "export A='it'\"'\"'s $HOME'\n"


def _run_worker(tmp_path: Path, plan: JobPlan, rank: RankPlan, alloc: str | None, env: dict[str, str]) -> str:
    """Runs the generated worker wrapper under /bin/sh as srun would, without Slurm."""
    job = tmp_path / "job"
    (job / f"worker-{rank.rank}").mkdir(parents=True, exist_ok=True)
    (job / "worker.sh").write_text(worker_script("j", job, plan))
    (job / f"env-{rank.rank}.sh").write_text(env_script({"HETPOOL_DEVICE_INDICES": "7,8", "HETPOOL_WORKER_RANK": str(rank.rank)}))
    command = 'echo "rank=$HETPOOL_WORKER_RANK dev=$HETPOOL_DEVICE_INDICES cuda=${CUDA_VISIBLE_DEVICES-} asc=${ASCEND_RT_VISIBLE_DEVICES-}"'
    (job / "command.sh").write_text(command)
    if alloc is not None:
        (job / "alloc").mkdir(exist_ok=True)
        (job / "alloc" / rank.node).write_text(alloc + "\n")
    base = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": rank.node, "SLURM_LOCALID": str(rank.slot), "SLURM_PROCID": "5"}
    done = subprocess.run(["/bin/sh", str(job / "worker.sh")], env={**base, **env}, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done
    assert (job / f"worker-{rank.rank}" / "exit_code").read_text() == "0\n"
    return (job / f"worker-{rank.rank}" / "output.log").read_text().strip()


def test_worker_wrapper_sets_each_workers_devices(tmp_path: Path) -> None:
    npu = [worker(r, "npu-910b-1", "ascend-910b3", (r,), "ASCEND_RT_VISIBLE_DEVICES") for r in range(2)]
    plan = _plan(npu)
    # Slurm sets nothing for npu: each worker gets its share of the allocated indices…
    assert _run_worker(tmp_path, plan, plan.ranks[1], "4,5", {"ASCEND_RT_VISIBLE_DEVICES": "from-profile"}) == "rank=1 dev=5 cuda= asc=5"
    # …or, when gres.conf has only Count= (no IDX), hetpool's own placement.
    assert _run_worker(tmp_path / "b", plan, plan.ranks[0], None, {}) == "rank=0 dev=7,8 cuda= asc=7,8"
    gpus = _plan([worker(r, "gpu-a100-1", "nvidia-a100-40g", (r * 2, r * 2 + 1), "CUDA_VISIBLE_DEVICES") for r in range(2)])
    # gres/gpu's variable for the whole node is split between the node's two workers.
    assert _run_worker(tmp_path / "c", gpus, gpus.ranks[1], "0,1,2,3", {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == "rank=1 dev=2,3 cuda=2,3 asc="
    one = _plan([worker(0, "gpu-a100-1", "nvidia-a100-40g", (2, 3), "CUDA_VISIBLE_DEVICES")])
    # One worker on the node: Slurm's value (relative under ConstrainDevices) is kept.
    assert _run_worker(tmp_path / "d", one, one.ranks[0], "1,2", {"CUDA_VISIBLE_DEVICES": "0,1"}) == "rank=0 dev=1,2 cuda=0,1 asc="


def test_batch_script_expands_allocated_indices(tmp_path: Path) -> None:
    script = batch_script("j", tmp_path, _plan([worker(0, "npu-910b-1", "ascend-910b3", (0,), "ASCEND_RT_VISIBLE_DEVICES")]))
    expand = script[script.index("expand() {") : script.index("\n}\n", script.index("expand() {")) + 3]
    done = subprocess.run(["/bin/sh", "-c", expand + 'expand "0-2,5,7-8"; expand 3'], capture_output=True, text=True, timeout=10)
    assert done.stdout.split() == ["0,1,2,5,7,8", "3"]
    assert "scontrol show job -d" in script
    assert "scontrol show job -d" not in batch_script("j", tmp_path, _plan([worker(0, "cpu-1")]))  # no devices, no lookup


def _run_batch(job: Path, fake_bin: Path, job_id: str) -> subprocess.CompletedProcess:
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "SLURM_JOB_ID": job_id}
    return subprocess.run(["/bin/sh", str(job / "job.sh")], env=env, capture_output=True, text=True, timeout=20)


def test_a_batch_script_started_again_by_slurm_runs_nothing_twice(tmp_path: Path) -> None:
    """A slurmctld killed (-9) and restarted from state saved before a job ran starts that
    job again under the same id: the second start runs no worker and answers with the
    first run's outcome; a second start while the first left no outcome refuses (125)."""
    job, fake_bin = tmp_path / "job", tmp_path / "bin"
    job.mkdir()
    fake_bin.mkdir()
    runs = tmp_path / "runs"
    (fake_bin / "srun").write_text(f'#!/bin/sh\necho "$SLURM_JOB_ID" >> {runs}\nexit 3\n')
    (fake_bin / "srun").chmod(0o755)
    (job / "job.sh").write_text(batch_script("hetpool-t-1", job, _plan([worker(0, "cpu-1")])))
    first = _run_batch(job, fake_bin, "82")
    assert first.returncode == 3 and runs.read_text().split() == ["82"]
    assert (job / "result").read_text().strip() == "exit 3"
    again = _run_batch(job, fake_bin, "82")
    assert again.returncode == 3, again.stderr  # the first run's outcome, not a second run
    assert runs.read_text().split() == ["82"]
    assert "already started once (as Slurm job 82); not run a second time" in again.stderr
    (job / "result").unlink()  # the first start still running, or killed without a trace
    assert _run_batch(job, fake_bin, "82").returncode == 125 and runs.read_text().split() == ["82"]


# -- unit: status mapping (a fake squeue) ------------------------------------------------------------


class _FakeSlurm(SlurmBackend):
    """squeue answers from `rows`; scancel calls are recorded, nothing runs."""

    def __init__(self, work_dir: Path, rows: list[_Row]) -> None:
        super().__init__({"conf": "/nonexistent"}, CATALOG, work_dir)
        self.rows = rows
        self.cancelled: list[tuple[str, str | None]] = []

    def _query(self, *, ids=None, names=None):  # type: ignore[override]
        return [r for r in self.rows if (ids and r.leader in ids) or (names and r.name in names)]

    def _scancel(self, name: str, job_id: str | None) -> None:
        self.cancelled.append((name, job_id))


def _fake_job(work: Path, name: str, job_id: str = "12", files: dict[str, str] | None = None) -> JobHandle:
    job_dir = work / "jobs" / name
    (job_dir / "worker-0").mkdir(parents=True)
    (job_dir / "request.json").write_text('{"request": {"workers": [{"rank": 0}]}}')
    (job_dir / "slurm_job_id").write_text(job_id)
    for path, text in (files or {}).items():
        (job_dir / path).write_text(text)
    return JobHandle("slurm", name)


def test_states_reasons_and_exit_codes(tmp_path: Path) -> None:
    work = tmp_path / "w"
    rows = [
        _Row("1", "1", "hetpool-a-1", "PENDING", 0, "Resources"),
        _Row("2", "2", "hetpool-b-1", "PENDING", 0, "BadConstraints"),
        _Row("3", "3", "hetpool-c-1", "TIMEOUT", 15, "TimeLimit"),
        _Row("4", "4", "hetpool-d-1", "FAILED", 768, "NonZeroExitCode"),
        _Row("5", "5", "hetpool-e-1", "COMPLETING", 0, "None"),
        _Row("6", "6", "hetpool-f-1", "SOMETHING_NEW", 0, "None"),
        _Row("7", "7", "someone-elses-job", "RUNNING", 0, "None"),  # an id reused after a reset
        _Row("8", "8", "hetpool-h-1", "CANCELLED", 0, "None"),
        _Row("9", "9", "hetpool-i-1", "PENDING", 0, "QOSMaxGRESPerJob"),
        _Row("10", "10", "hetpool-j-1", "PENDING", 0, "QOSMaxJobsPerUserLimit"),
    ]
    backend = _FakeSlurm(work, rows)
    handles = [_fake_job(work, f"hetpool-{c}-1", str(i)) for i, c in enumerate("abcdefghij", start=1)]
    status = backend.poll(handles)
    phases = {h.job_id[8]: (status[h.job_id].phase.value, status[h.job_id].exit_code) for h in handles}
    assert phases == {
        "a": ("pending", None),
        "b": ("failed", None),  # never runnable: failed at once, and cancelled in Slurm
        "c": ("failed", 143),
        "d": ("failed", 3),
        "e": ("running", None),
        "f": ("running", None),  # unknown states keep the devices accounted for
        "g": ("lost", None),
        "h": ("cancelled", None),
        "i": ("failed", None),
        "j": ("pending", None),  # a count limit: it will run later
    }
    assert "BadConstraints" in status["hetpool-b-1"].message and "TIMEOUT (TimeLimit)" in status["hetpool-c-1"].message
    assert status["hetpool-a-1"].message == "Slurm: Resources"
    assert backend.cancelled == [("hetpool-b-1", "2"), ("hetpool-i-1", "9")]
    # Terminal answers are kept: Slurm forgetting the job later changes nothing.
    backend.rows = []
    assert backend.poll(handles)["hetpool-d-1"].exit_code == 3
    assert backend.poll([JobHandle("slurm", "../etc")])["../etc"].phase is JobPhase.LOST


def test_jobs_slurm_has_forgotten_are_read_from_their_files(tmp_path: Path) -> None:
    work = tmp_path / "w"
    backend = _FakeSlurm(work, [])
    cases = {
        "hetpool-ok-1": ({"result": "exit 0\n"}, JobPhase.SUCCEEDED, 0),
        "hetpool-bad-1": ({"result": "exit 4 rank 1\n"}, JobPhase.FAILED, 4),
        "hetpool-cxl-1": ({"result": "signal TERM\n", "cancel_requested": ""}, JobPhase.CANCELLED, None),
        "hetpool-cxl2-1": ({"cancel_requested": ""}, JobPhase.CANCELLED, None),  # cancelled before it ran
        "hetpool-term-1": ({"result": "signal TERM\n"}, JobPhase.FAILED, None),
        "hetpool-gone-1": ({}, JobPhase.LOST, None),
    }
    for name, (files, _, _) in cases.items():
        _fake_job(work, name, files=files)
    status = backend.poll([JobHandle("slurm", n) for n in cases])
    assert {n: (s.phase, s.exit_code) for n, s in status.items()} == {n: (p, c) for n, (_, p, c) in cases.items()}
    assert status["hetpool-bad-1"].message == "worker rank 1 exited with code 4"
    assert "time limit, preemption" in status["hetpool-term-1"].message
    assert not (work / "jobs" / "hetpool-gone-1" / "final.json").exists()  # LOST is never cached
    # A restarted server finds a job by name in slurmctld when its id was never recorded.
    backend.rows = [_Row("77", "77", "hetpool-found-1", "RUNNING", 0, "None")]
    assert backend.find("found", 1) == JobHandle("slurm", "hetpool-found-1")
    assert (work / "jobs" / "hetpool-found-1" / "slurm_job_id").read_text() == "77"
    assert backend.find("found", 2) is None


def test_registry_and_configuration(tmp_path: Path) -> None:
    assert make_backend("local", {}, CATALOG, tmp_path / "l").kind == "local"
    backend = make_backend("slurm", {"conf": "/x", "gres_models": "gpu:a100=nvidia-a100-80g", "timeout_s": "3"}, CATALOG, tmp_path / "s")
    assert isinstance(backend, SlurmBackend) and backend.timeout_s == 3.0
    assert capabilities(SlurmBackend) == {"gang": True, "log-streaming": True, "fractional-devices": False}
    with pytest.raises(LookupError, match="unknown backend kind 'nomad'"):
        make_backend("nomad", {}, CATALOG, tmp_path / "n")
    with pytest.raises(ValueError, match="catalog does not have: nope"):
        SlurmBackend({"gres_models": "gpu:x=nope"}, CATALOG, tmp_path / "s")


# -- the real cluster -----------------------------------------------------------------------------------


def _config() -> dict[str, str]:
    return {"conf": SLURM_CONF, "node_prefix": PREFIX, "timeout_s": "20"}


def _contract_worker(rank: int, devices: int) -> WorkerLaunch:
    if devices:
        # deploy/slurm.sh's gpu:a100 maps to nvidia-a100-40g (the catalog's first gpu:a100).
        return worker(rank, "gpu-a100-1", "nvidia-a100-40g", tuple(range(devices)), "CUDA_VISIBLE_DEVICES")
    return worker(rank, ("cpu-1", "gpu-a100-1")[rank % 2])  # a gang spans two nodes


@pytest.fixture
def slurm_work(tmp_path: Path) -> Iterator[Path]:
    if not SLURM_CONF:
        pytest.skip("HETPOOL_TEST_SLURM_CONF not set (export HETPOOL_TEST_SLURM_CONF=$(deploy/slurm.sh start))")
    # Beside the cluster, not under tmp_path: jobs run as the run-as account (hetpool-task),
    # which cannot traverse pytest's private (0700) base directory.
    work = Path(SLURM_CONF).parent / "test-jobs" / uuid.uuid4().hex[:12]
    yield work
    # Leave no job behind on a cluster others may share.
    backend = SlurmBackend(_config(), CATALOG, work)
    for job_dir in (work / "jobs").iterdir() if (work / "jobs").exists() else []:
        backend.cancel(JobHandle("slurm", job_dir.name))
    shutil.rmtree(work, ignore_errors=True)


def _wait_terminal(backend: SlurmBackend, handle: JobHandle, timeout_s: float = 60) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = backend.poll([handle])[handle.job_id]
        if status.phase.terminal:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{handle.job_id} did not end in {timeout_s}s: {status}")


def test_npu_workers_get_ascend_visible_devices(slurm_work: Path) -> None:
    backend = SlurmBackend(_config(), CATALOG, slurm_work)
    workers = [worker(r, "npu-910b-1", "ascend-910b3", (r * 2, r * 2 + 1), "ASCEND_RT_VISIBLE_DEVICES") for r in range(2)]
    command = 'echo "rank=$HETPOOL_WORKER_RANK ascend=$ASCEND_RT_VISIBLE_DEVICES placed=$HETPOOL_PLACED_DEVICE_INDICES"'
    handle = backend.submit(request(command, workers))
    status = _wait_terminal(backend, handle)
    assert status.phase is JobPhase.SUCCEEDED, status
    lines = [backend.logs(handle, rank=r).text.strip() for r in range(2)]
    # gres.conf gives the NPUs by Count= only, so Slurm reports no indices: hetpool's placement is used.
    assert lines == ["rank=0 ascend=0,1 placed=0,1", "rank=1 ascend=2,3 placed=2,3"]


def test_gang_member_failure_stops_the_gang_and_sets_the_exit_code(slurm_work: Path) -> None:
    backend = SlurmBackend(_config(), CATALOG, slurm_work)
    command = 'if [ "$HETPOOL_WORKER_RANK" = 1 ]; then sleep 0.5; exit 4; fi; echo waiting; sleep 120'
    handle = backend.submit(request(command, [_contract_worker(0, 0), _contract_worker(1, 0)]))
    status = _wait_terminal(backend, handle, 30)
    assert (status.phase, status.exit_code, status.message) == (JobPhase.FAILED, 4, "worker rank 1 exited with code 4")
    assert backend.logs(handle, rank=0).complete  # rank 0 was stopped with the job


def test_uneven_gang_runs_as_a_heterogeneous_job(slurm_work: Path) -> None:
    backend = SlurmBackend(_config(), CATALOG, slurm_work)
    packed = [worker(r, "gpu-a100-1", "nvidia-a100-40g", (r,), "CUDA_VISIBLE_DEVICES") for r in range(2)]
    command = 'echo "rank=$HETPOOL_WORKER_RANK node=$HETPOOL_NODE cuda=${CUDA_VISIBLE_DEVICES-none} master=$HETPOOL_MASTER_ADDR"'
    handle = backend.submit(request(command, [*packed, worker(2, "cpu-1")]))
    status = _wait_terminal(backend, handle)  # heterogeneous jobs start in Slurm's backfill pass: seconds
    assert status.phase is JobPhase.SUCCEEDED, status
    lines = [backend.logs(handle, rank=r).text.strip() for r in range(3)]
    assert lines[0].startswith("rank=0 node=hp-gpu-a100-1 cuda=") and lines[1].startswith("rank=1 node=hp-gpu-a100-1 cuda=")
    # The node's two workers split its two GPUs; the CPU node sees none of the batch node's.
    assert {lines[0].split("cuda=")[1].split()[0], lines[1].split("cuda=")[1].split()[0]} == {"0", "1"}
    assert lines[2] == "rank=2 node=hp-cpu-1 cuda=none master=127.0.0.1"


def test_refused_submit_raises_with_slurms_reason(slurm_work: Path) -> None:
    backend = SlurmBackend(_config(), CATALOG, slurm_work)
    too_many = worker(0, "npu-910b-1", "ascend-910b3", tuple(range(9)), "ASCEND_RT_VISIBLE_DEVICES")
    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        backend.submit(request("true", [too_many]))


# -- the shared contract (tests/engines/contract.py) -------------------------------------------------
from tests.engines.contract import *  # noqa: E402, F403 (the contract cases)
from tests.engines.contract import Harness  # noqa: E402


@pytest.fixture
def harness(slurm_work: Path) -> Iterator[Harness]:
    h = Harness(kind="slurm", make_backend=lambda: SlurmBackend(_config(), CATALOG, slurm_work), make_worker=_contract_worker, timeout_s=60)
    yield h
    backend = h.make_backend()
    for handle in h.cleanup:
        backend.cancel(handle)
