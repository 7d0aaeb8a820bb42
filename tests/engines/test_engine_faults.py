"""Engine faults survived: a real `hetpool up --demo` server with deploy/slurm.sh's cluster and
deploy/ray.sh's head imported; slurmctld is stopped and started again while tasks are being
dispatched, and the Ray head is killed and started again. No task fails, and each task's
job ran exactly once (Slurm: one job of the task's name in slurmctld's records; Ray: one
submission, finished).

What "ran once" means on Ray: a head without GCS fault tolerance takes its jobs with it, so a
job running when the head dies is gone (the reconciler then finds the engine does not know it
and fails the task: "the backend no longer knows this job" — never a silent second run). The
Ray test therefore kills the head between dispatches: a task that had finished stays
succeeded, and tasks submitted while the head is down wait in `admitted` with the reason and
run once it is back.

These tests stop shared engines: they are in the "shared-engines" xdist group (tests/conftest.py),
and restore the engine in a `finally`. The first part checks the error taxonomy without engines.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import EngineFault, LaunchRequest, PermanentEngineError, WorkerLaunch, classify, http_error
from hetpool.engines.ray.compute import RayBackend
from hetpool.engines.slurm.client import transient_failure
from hetpool.engines.slurm.compute import SlurmError
from tests.cli.test_cli_e2e import Server
from tests.conftest import database_url

REPO = Path(__file__).resolve().parents[2]
SLURM_CONF = os.environ.get("HETPOOL_TEST_SLURM_CONF", "")
RAY_ADDRESS = os.environ.get("HETPOOL_TEST_RAY_ADDRESS", "")
TERMINAL = {"succeeded", "failed", "cancelled"}
CATALOG = DeviceCatalog.builtin()


# -- the taxonomy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "fault"),
    [(500, EngineFault.TRANSIENT), (503, EngineFault.TRANSIENT), (429, EngineFault.TRANSIENT), (408, EngineFault.TRANSIENT)]
    + [(400, EngineFault.PERMANENT), (404, EngineFault.PERMANENT), (422, EngineFault.PERMANENT)],
)
def test_http_answers_are_classified_by_status(status: int, fault: EngineFault) -> None:
    assert classify(http_error(status, f"HTTP {status}")) == fault


def test_errors_are_classified_by_kind() -> None:
    assert classify(BackendUnavailableError("ray: cannot reach the dashboard")) == EngineFault.TRANSIENT
    assert classify(ConnectionRefusedError()) == EngineFault.TRANSIENT and classify(TimeoutError()) == EngineFault.TRANSIENT
    assert classify(SlurmError("sbatch refused x: Invalid partition name specified")) == EngineFault.PERMANENT
    assert classify(PermanentEngineError("unsupported")) == EngineFault.PERMANENT and classify(ValueError("bad")) == EngineFault.PERMANENT
    assert classify(RuntimeError("?")) == EngineFault.UNCLASSIFIED and classify(KeyError("x")) == EngineFault.UNCLASSIFIED


@pytest.mark.parametrize(
    "stderr",
    [
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
        "sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying",
        "slurm_load_jobs error: Zero Bytes were transmitted or received",
        # Seen by bench/crash_test.py: an sbatch in flight when slurmctld was killed (-9).
        "sbatch: error: Batch job submission failed: Connection reset by peer",
    ],
)
def test_slurm_controller_outages_are_transient(stderr: str) -> None:
    assert transient_failure(stderr)


@pytest.mark.parametrize(
    "stderr",
    [
        "sbatch: error: Batch job submission failed: Invalid partition name specified",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
    ],
)
def test_slurm_refusals_are_permanent(stderr: str) -> None:
    assert not transient_failure(stderr)


def _ray_head(nodes: list[dict], post_status: int = 200) -> RayBackend:
    """A Ray dashboard over a mock transport: no jobs yet, these nodes, POST answered `post_status`."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.startswith("/api/jobs/"):
            return httpx.Response(404, text="Job hetpool-t-1-1-r0 does not exist")
        if request.url.path == "/api/v0/nodes":
            return httpx.Response(200, json={"data": {"result": {"result": nodes}}})
        return httpx.Response(post_status, text="Traceback ...\nthe head's last word")

    return RayBackend({"address": "http://head:8265", "pin_nodes": "false"}, CATALOG, Path("/nonexistent"), transport=httpx.MockTransport(handler))


RAY_NODE = {"node_id": "ab" * 28, "node_name": "head", "node_ip": "10.0.0.1", "state": "ALIVE", "resources_total": {"CPU": 4.0, "memory": 8e9}}
CPU_REQUEST = LaunchRequest("t-1", 1, "t", "a/b", "true", [WorkerLaunch(0, "head", "p", None, [], "", 1.0, 0.0)])


def test_a_restarting_ray_head_is_transient_and_its_answers_are_classified() -> None:
    for nodes in ([], [{**RAY_NODE, "resources_total": {}}]):  # nothing listed yet; listed, resources not reported yet
        with pytest.raises(BackendUnavailableError, match="has not reported its nodes' resources yet"):
            _ray_head(nodes).submit(CPU_REQUEST)
    with pytest.raises(BackendUnavailableError, match="HTTP 503"):
        _ray_head([RAY_NODE], post_status=503).submit(CPU_REQUEST)
    with pytest.raises(PermanentEngineError, match="HTTP 400.*the head's last word"):
        _ray_head([RAY_NODE], post_status=400).submit(CPU_REQUEST)


# -- real engines -----------------------------------------------------------------------------

SLURM_TASK = {
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "command": 'sleep 2; echo "ran $HETPOOL_TASK_ID"',
    "per_worker": {"devices": {"class": "gpu", "count": 1}, "cpu": 0.5, "memory_gb": 0.5},
    "any_of": ["hpc-nvidia-h100"],
}
RAY_TASK = {**SLURM_TASK, "per_worker": {"devices": {"class": "npu", "count": 1}, "cpu": 0.5, "memory_gb": 0.5}, "any_of": ["ray-lab-ascend-910b3"]}


@pytest.fixture
def server(tmp_path: Path, monkeypatch) -> Iterator[Server]:
    if not (SLURM_CONF and RAY_ADDRESS):
        pytest.skip("needs HETPOOL_TEST_SLURM_CONF and HETPOOL_TEST_RAY_ADDRESS (make test starts both engines)")
    monkeypatch.setenv("HETPOOL_DEMO_SLURM_CONF", SLURM_CONF)  # inherited by the server process
    monkeypatch.setenv("HETPOOL_DEMO_RAY_ADDRESS", RAY_ADDRESS)
    srv = Server(tmp_path / "data", database_url("sqlite", tmp_path))
    srv.start()
    yield srv
    srv.stop()


def _api(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {server.token}"}, timeout=30)


def _submit(api: httpx.Client, spec: dict, name: str) -> str:
    response = api.post("/tasks", json={**spec, "name": name})
    assert response.status_code in (200, 201), response.text
    return response.json()["id"]


def _tasks(api: httpx.Client, ids: list[str]) -> dict[str, dict]:
    return {i: api.get(f"/tasks/{i}").json() for i in ids}


def _until(what: str, check: Callable[[], bool], timeout_s: float, detail: Callable[[], str] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout_s:g} s: {what}" + (f"; {detail()}" if detail else ""))
        time.sleep(0.5)


def _never_failed(task: dict) -> bool:
    return all((e.get("after") or {}).get("state") != "failed" for e in task["events"])


def _slurm_sh(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HETPOOL_SLURM_DIR": str(Path(SLURM_CONF).parent)}
    return subprocess.run([str(REPO / "deploy" / "slurm.sh"), *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def _slurm_jobs(names: list[str]) -> list[str]:
    """The names of every job slurmctld knows (any state, MinJobAge after the end) among `names`."""
    done = subprocess.run(
        ["squeue", "-h", "--states=all", "--name=" + ",".join(names), "-o", "%j"],
        env={**os.environ, "SLURM_CONF": SLURM_CONF},
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return done.stdout.split()


def test_slurm_controller_stopped_and_restarted_mid_dispatch(server: Server) -> None:
    api = _api(server)
    _until("the Slurm pool imported", lambda: api.get("/objects/pools/hpc-nvidia-h100").status_code == 200, 30)
    # Two tasks before the controller stops (their sbatch may be in flight as it dies) and
    # two after (they cannot have reached sbatch, whatever the machine's speed: with all four
    # submitted first, a fast dispatcher could send them all before the stop and leave
    # nothing to wait).
    ids = [_submit(api, SLURM_TASK, f"fault-slurm-{i}") for i in range(2)]
    try:
        assert _slurm_sh("stop-controller").returncode == 0
        ids += [_submit(api, SLURM_TASK, f"fault-slurm-{i}") for i in range(2, 4)]

        # Dispatch goes on meanwhile: what had not reached sbatch waits with the reason. The
        # dispatcher records each task's try on its own, so wait until every admitted task
        # has had one (on a busy machine the first can be recorded long before the last).
        def every_admitted_waiting() -> bool:
            admitted = [t for t in _tasks(api, ids).values() if t["state"] == "admitted"]
            return bool(admitted) and all("waiting for the slurm backend" in t["message"] for t in admitted)

        def states() -> str:
            return str({i: (t["state"], t["message"][:120]) for i, t in _tasks(api, ids).items()})

        _until("the admitted tasks waiting for Slurm", every_admitted_waiting, 120, states)  # sbatch may take its 15 s timeout per task
        waiting = [t for t in _tasks(api, ids).values() if t["state"] == "admitted"]
        assert waiting and all("transient error" in t["message"] for t in waiting), [t["message"] for t in waiting]
    finally:
        started = _slurm_sh("start-controller")
    assert started.returncode == 0, started.stderr
    _until("every task ended", lambda: all(t["state"] in TERMINAL for t in _tasks(api, ids).values()), 60)
    tasks = _tasks(api, ids)
    assert {t["state"] for t in tasks.values()} == {"succeeded"}, {i: (t["state"], t["message"]) for i, t in tasks.items()}
    assert all(_never_failed(t) for t in tasks.values())
    delayed = [e for t in tasks.values() for e in t["events"] if e["action"] == "task.dispatch_delayed"]
    assert delayed and len(delayed) <= len(ids)  # at most one per task, however many retries
    names = [f"hetpool-{i}-{t['attempt']}" for i, t in tasks.items()]
    jobs = _slurm_jobs(names)
    assert sorted(jobs) == sorted(names), jobs  # one Slurm job per task: none ran twice, none went missing
    for task_id in ids:
        assert api.get(f"/tasks/{task_id}/logs").json()["text"].count(f"ran {task_id}") == 1


def _ray_sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "deploy" / "ray.sh"), *args], capture_output=True, text=True, timeout=150, check=False)


def _ray_submissions(prefix: str) -> list[dict]:
    jobs = httpx.get(RAY_ADDRESS + "/api/jobs/", timeout=10).json()
    return [j for j in jobs if str(j.get("submission_id") or "").startswith(prefix)]


def test_ray_head_killed_and_restarted(server: Server) -> None:
    api = _api(server)
    _until("the Ray pool imported", lambda: api.get("/objects/pools/ray-lab-ascend-910b3").status_code == 200, 30)
    before = _submit(api, RAY_TASK, "fault-ray-before")
    _until("the first task ended", lambda: _tasks(api, [before])[before]["state"] in TERMINAL, 60)
    ids: list[str] = []
    try:
        assert _ray_sh("stop").returncode == 0
        ids = [_submit(api, RAY_TASK, f"fault-ray-{i}") for i in range(3)]
        _until(
            "the tasks waiting for Ray",
            lambda: all("waiting for the ray backend" in t["message"] for t in _tasks(api, ids).values()),
            30,
        )
        assert {t["state"] for t in _tasks(api, ids).values()} == {"admitted"}
    finally:
        started = _ray_sh("start")
    assert started.returncode == 0, started.stderr
    _until("every task ended", lambda: all(t["state"] in TERMINAL for t in _tasks(api, ids).values()), 90)
    tasks = _tasks(api, [before, *ids])
    assert {t["state"] for t in tasks.values()} == {"succeeded"}, {i: (t["state"], t["message"]) for i, t in tasks.items()}
    assert all(_never_failed(t) for t in tasks.values())
    for task_id in ids:
        submissions = _ray_submissions(f"hetpool-{task_id}-")
        assert len(submissions) == 1 and submissions[0]["status"] == "SUCCEEDED", submissions  # one run, on the new head
        assert api.get(f"/tasks/{task_id}/logs").json()["text"].count(f"ran {task_id}") == 1
