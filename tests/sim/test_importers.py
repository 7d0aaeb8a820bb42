"""Importers: Gavel traces / throughputs and the control plane's own task history."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.core.specs import parse_documents
from hetpool.server.db.models import TaskRow
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.history import export_history
from hetpool.sim.importers import gavel_device_models, gavel_inventory, load_throughputs, read_gavel_trace
from hetpool.sim.importers.history import TaskRecord, history_from_records
from hetpool.sim.trace import read_trace, write_trace
from tests.server.helpers import example_task, run_to_end

DATA = Path(__file__).parent / "data"
STATIC = DATA / "static_n100_s0.head20.trace"
MULTI = DATA / "cont_multi_n200_lam600_s0.head20.trace"
THROUGHPUTS = DATA / "gavel-throughputs.sample.json"
MODELS = {"v100": "gavel-v100", "p100": "gavel-p100", "k80": "gavel-k80"}


def columns(path: Path) -> list[list[str]]:
    return [line.rstrip("\n").split("\t") for line in path.read_text().splitlines(keepends=True)]


@pytest.fixture(scope="module")
def throughputs() -> dict:
    return load_throughputs(THROUGHPUTS)


def test_throughputs_keep_alone_speeds_and_skip_unconsolidated(throughputs: dict) -> None:
    raw = json.loads(THROUGHPUTS.read_text())
    assert len(throughputs) == 17
    assert throughputs[("ResNet-18 (batch size 32)", 1)]["v100"] == raw["v100"]["('ResNet-18 (batch size 32)', 1)"]["null"]
    assert all(set(speeds) == {"v100", "p100", "k80"} for speeds in throughputs.values())


@pytest.mark.parametrize("path", [STATIC, MULTI])
def test_gavel_trace_maps_every_line(path: Path, throughputs: dict) -> None:
    tasks = read_gavel_trace(path, throughputs)
    rows = columns(path)
    assert len(tasks) == len(rows) == 20
    for i, (task, row) in enumerate(zip(tasks, rows, strict=True)):
        speeds = throughputs[(row[0], int(row[6]))]
        assert task.id == task.spec.name == f"job-{i}"
        assert task.arrival_s == float(row[9])
        assert task.spec.tenant == "gavel/jobs" and task.spec.task_type == "training"
        assert task.spec.workers == int(row[6])
        assert task.spec.per_worker.devices.device_class == "gpu" and task.spec.per_worker.devices.count == 1
        assert task.spec.any_of == list(MODELS.values())
        assert task.reference_s == pytest.approx(float(row[5]) / speeds["v100"])
        assert task.spec.runtime_estimate_s == round(task.reference_s)
        for worker, model in MODELS.items():
            perf = task.spec.relative_performance[model]
            assert perf == pytest.approx(speeds[worker] / speeds["v100"])
            assert task.work_s[model] == pytest.approx(float(row[5]) / speeds[worker])
            assert math.isclose(task.work_s[model] * perf, task.reference_s, rel_tol=1e-9)


def test_static_trace_arrives_at_zero_and_multi_trace_has_gangs(throughputs: dict) -> None:
    assert {t.arrival_s for t in read_gavel_trace(STATIC, throughputs)} == {0.0}
    multi = read_gavel_trace(MULTI, throughputs)
    assert [t.arrival_s for t in multi][:3] == [0.0, 86.0, 1214.0]
    assert {t.spec.workers for t in multi} == {1, 4}


def test_gavel_trace_round_trips_through_jsonl(throughputs: dict, tmp_path: Path) -> None:
    tasks = read_gavel_trace(MULTI, throughputs)
    path = tmp_path / "multi.jsonl"
    assert write_trace(tasks, path) == 20
    back = read_trace(path)
    assert sorted(back, key=lambda t: t.id) == sorted(tasks, key=lambda t: t.id)


def test_a_type_that_cannot_run_the_job_is_left_out_and_the_reference_falls_back(tmp_path: Path) -> None:
    table = {("Big", 2): {"v100": 0.0, "p100": 4.0, "k80": 1.0}, ("Small", 1): {"v100": 2.0, "p100": 1.0, "k80": 0.0}}
    trace = "\t".join(["Big", "cmd", "dir", "-s", "1", "400", "2", "1", "-1.0", "5"]) + "\n"
    trace += "\t".join(["Small", "cmd", "dir", "-s", "1", "100", "1", "1", "-1.0", "7"]) + "\n"
    path = tmp_path / "t.trace"
    path.write_text(trace)
    big, small = read_gavel_trace(path, table)
    assert big.spec.any_of == ["gavel-p100", "gavel-k80"]
    assert big.spec.relative_performance == {"gavel-p100": 1.0, "gavel-k80": 0.25}  # fastest usable type is the reference
    assert big.reference_s == 100.0 and big.work_s == {"gavel-p100": 100.0, "gavel-k80": 400.0}
    assert small.spec.any_of == ["gavel-v100", "gavel-p100"]
    assert small.spec.relative_performance == {"gavel-v100": 1.0, "gavel-p100": 0.5}
    assert small.reference_s == 50.0 and small.spec.runtime_estimate == "50s"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("A3C\tcmd\tdir\t-s\t1\t100\t1\t1\t-1.0", "10 tab-separated columns"),
        ("A3C\tcmd\tdir\t-s\t1\tmany\t1\t1\t-1.0\t0", "malformed"),
        ("Nonexistent\tcmd\tdir\t-s\t1\t100\t1\t1\t-1.0\t0", "unknown Gavel job"),
        ("A3C\tcmd\tdir\t-s\t1\t100\t3\t1\t-1.0\t0", "unknown Gavel job"),
    ],
)
def test_a_bad_line_is_named(line: str, problem: str, throughputs: dict, tmp_path: Path) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(STATIC.read_text().splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(SpecError) as info:
        read_gavel_trace(path, throughputs)
    assert f"{path}:2" in info.value.message and problem in info.value.message


def test_gavel_inventory_validates() -> None:
    documents = gavel_inventory(12, 12, 12)
    specs = parse_documents([(f"gavel[{i}]", d) for i, d in enumerate(documents)])
    nodes = [s for s in specs if isinstance(s, NodeSpec)]
    pools = {s.name: s for s in specs if isinstance(s, PoolSpec)}
    assert len(nodes) == 36
    assert all(len(n.devices) == 1 and n.devices[0].count == 1 and n.stack is None for n in nodes)
    assert set(pools) == set(MODELS.values()) and all(len(p.nodes) == 12 and p.price_per_hour == 0 for p in pools.values())
    assert {d["name"] for d in documents if d["kind"] == "Tenant"} == {"gavel", "gavel/jobs"}
    with_models = parse_documents([("g", d) for d in gavel_inventory(1, 0, 2, include_models=True)])
    assert sum(isinstance(s, DeviceModelSpec) for s in with_models) == 3
    assert {s.name for s in with_models if isinstance(s, PoolSpec)} == {"gavel-v100", "gavel-k80"}


def test_gavel_device_models() -> None:
    models = {m.name: m for m in gavel_device_models()}
    assert set(models) == set(MODELS.values())
    assert [models[m].memory_gb for m in ("gavel-v100", "gavel-p100", "gavel-k80")] == [16, 16, 12]
    assert all(m.runtime == "cuda" and not m.verified and m.visible_devices_env == "CUDA_VISIBLE_DEVICES" for m in models.values())


# -- history ---------------------------------------------------------------------------

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
SPEC = {"kind": "Task", "name": "x", "tenant": "a", "type": "inference", "per_worker": {"devices": {"class": "gpu"}}}


def record(name: str, created_s: float, run: tuple[float, float] | None, state: str = "succeeded", **fields) -> TaskRecord:
    started, finished = (T0 + timedelta(seconds=run[0]), T0 + timedelta(seconds=run[1])) if run else (None, None)
    return TaskRecord(
        id=name,
        state=state,
        spec={**SPEC, "name": name, **fields.pop("spec", {})},
        created_at=T0 + timedelta(seconds=created_s),
        started_at=started,
        finished_at=finished,
        **fields,
    )


def test_history_records_filters_and_scales() -> None:
    catalog = DeviceCatalog.builtin()
    h800 = catalog.get("nvidia-h800").perf_for("inference")
    records = [
        record("late", 50, (60, 160), model="nvidia-h800"),
        record("early", 10, (20, 30), model="nvidia-h800", spec={"relative_performance": {"nvidia-h800": 3.0}}),
        record("broken", 20, (25, 26), state="failed", model="nvidia-h800"),
        record("waiting", 30, None, state="queued", spec={"runtime_estimate": "5m"}),
        record("no-estimate", 40, None, state="queued"),
        record("odd-model", 45, (50, 52), model="not-a-model"),
    ]
    tasks = history_from_records(records, catalog)
    assert [t.id for t in tasks] == ["early", "odd-model", "late"]
    assert [t.arrival_s for t in tasks] == [0.0, 35.0, 40.0]
    assert tasks[0].reference_s == 30.0 and tasks[0].work_s == {"nvidia-h800": 10.0}  # the task's own hint wins
    assert tasks[1].reference_s == 2.0 and tasks[1].work_s == {"not-a-model": 2.0}
    assert tasks[2].reference_s == pytest.approx(100 * h800) and tasks[2].work_s == {"nvidia-h800": 100.0}
    everything = history_from_records(records, catalog, include_failed=True, include_unstarted=True)
    assert [t.id for t in everything] == ["early", "broken", "waiting", "odd-model", "late"]
    assert everything[2].reference_s == 300.0 and everything[2].work_s == {}
    naive_since = (T0 + timedelta(seconds=45)).replace(tzinfo=None)  # naive means UTC
    assert [(t.id, t.arrival_s) for t in history_from_records(records, catalog, since=naive_since)] == [("odd-model", 0.0), ("late", 5.0)]


def submit(api: TestClient, task: dict) -> str:
    response = api.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_export_history_from_the_database(ctx: ServiceContext, demo: TestClient, tmp_path: Path) -> None:
    prep = submit(demo, example_task("data-prep.yaml"))
    serve = submit(demo, example_task("llm-inference.yaml"))
    for task_id in (prep, serve):
        assert run_to_end(ctx, demo, task_id)["state"] == "succeeded"
    model = demo.get(f"/api/v1/tasks/{serve}").json()["placements"][0]["model"]
    times = {prep: (0, 100, 400), serve: (30, 200, 260)}  # created, started, finished (s after T0)
    with ctx.db.transaction() as session:
        for task_id, (created, started, finished) in times.items():
            at = {"created_at": created, "started_at": started, "finished_at": finished}
            session.execute(update(TaskRow).where(TaskRow.id == task_id).values(**{k: T0 + timedelta(seconds=s) for k, s in at.items()}))
    catalog = DeviceCatalog.builtin()
    with ctx.db.transaction() as session:
        tasks = export_history(session, catalog)
    written = write_trace(tasks, tmp_path / "history.jsonl")
    assert [t.id for t in tasks] == [prep, serve] and written == 2
    first, second = tasks
    assert (first.arrival_s, second.arrival_s) == (0.0, 30.0)
    assert first.spec.name == "tokenize-corpus" and first.spec.per_worker.devices is None
    assert first.reference_s == 300.0 and first.work_s == {"*": 300.0}  # device-less: perf 1.0
    assert second.spec.name == "qwen2-7b-chat" and second.work_s == {model: 60.0}
    assert second.reference_s == pytest.approx(60.0 * catalog.get(model).perf_for("inference"))
    assert read_trace(tmp_path / "history.jsonl") == tasks
    with ctx.db.transaction() as session:
        later = export_history(session, catalog, since=T0 + timedelta(seconds=10))
    assert [(t.id, t.arrival_s) for t in later] == [(serve, 0.0)]
