"""`hetpool up` tunes the interpreter before serving (server/interpreter.py): a young
collection threshold far above CPython's 700, start-up's objects frozen out of every
collection, and a 1 ms thread switch interval."""

from __future__ import annotations

import gc
import sys

from hetpool.cli import serve
from hetpool.core import interpreter


def test_the_server_process_collects_less_often_and_switches_threads_sooner(monkeypatch) -> None:
    before, switch = gc.get_threshold(), sys.getswitchinterval()
    try:
        interpreter.tune_for_server()
        assert gc.get_threshold() == (interpreter.YOUNG_THRESHOLD, *interpreter.OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > 0
        assert sys.getswitchinterval() == interpreter.SWITCH_INTERVAL_S
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        sys.setswitchinterval(switch)


def test_serve_tunes_the_interpreter_before_uvicorn_runs(monkeypatch, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(serve.uvicorn, "run", lambda *a, **k: calls.append("run"))
    monkeypatch.setattr(serve.os, "umask", lambda mask: 0o022)  # serve's umask 077 would stay on for later tests
    monkeypatch.setattr(serve.interpreter, "tune_for_server", lambda: calls.append("tune"))
    serve.serve(demo=False, data_dir=tmp_path, host="127.0.0.1", port=0, database_url="", demo_dir=tmp_path, workers=False)
    assert calls == ["tune", "run"]


def test_a_batch_run_collects_less_often_and_leaves_the_process_as_it_was() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with interpreter.tuned_gc():
        assert gc.get_threshold() == (interpreter.YOUNG_THRESHOLD, *interpreter.OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0  # what it froze is collectable again


def test_sim_run_simulates_under_the_batch_collector_settings(monkeypatch, tmp_path) -> None:
    """`hetpool sim run` holds every task of a trace: it runs with the server's collector settings."""
    from typer.testing import CliRunner

    from hetpool.cli import sim_commands
    from hetpool.cli.main import app
    from hetpool.sim.engine import Simulator
    from hetpool.sim.trace import TraceTask, write_trace
    from tests.conftest import DEMO_DIR

    seen = []
    run = Simulator.run
    monkeypatch.setattr(Simulator, "run", lambda self, *a, **k: seen.append(gc.get_threshold()) or run(self, *a, **k))
    spec = {"kind": "Task", "name": "job", "tenant": "team-a", "per_worker": {"cpu": 1, "memory_gb": 1}, "runtime_estimate": "10m"}
    from hetpool.core.specs import parse_spec

    trace = tmp_path / "trace.jsonl"
    write_trace([TraceTask(id="t1", arrival_s=0.0, spec=parse_spec(spec), reference_s=60.0)], trace)
    before = gc.get_threshold()
    result = CliRunner().invoke(app, ["sim", "run", "--trace", str(trace), "--inventory", str(DEMO_DIR), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert seen == [(interpreter.YOUNG_THRESHOLD, *interpreter.OLDER_THRESHOLDS)]
    assert gc.get_threshold() == before
    assert sim_commands.tuned_gc is interpreter.tuned_gc
