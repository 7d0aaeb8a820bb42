"""`hetpool up` tunes the interpreter before serving (server/interpreter.py): a young
collection threshold far above CPython's 700, start-up's objects frozen out of every
collection, and a 1 ms thread switch interval."""

from __future__ import annotations

import gc
import sys

from hetpool.cli import serve
from hetpool.server import interpreter


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
