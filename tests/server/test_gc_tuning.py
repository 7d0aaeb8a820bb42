"""`hetpool up` tunes the garbage collector before serving (server/gc_tuning.py): a young
threshold far above CPython's 700, and start-up's objects frozen out of every collection."""

from __future__ import annotations

import gc

from hetpool.cli import serve
from hetpool.server import gc_tuning


def test_the_server_process_collects_less_often_and_freezes_what_start_up_made(monkeypatch) -> None:
    before = gc.get_threshold()
    try:
        gc_tuning.tune_for_server()
        assert gc.get_threshold() == (gc_tuning.YOUNG_THRESHOLD, *gc_tuning.OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_serve_tunes_the_collector_before_uvicorn_runs(monkeypatch, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(serve.gc_tuning, "tune_for_server", lambda: calls.append("tune"))
    monkeypatch.setattr(serve.uvicorn, "run", lambda *a, **k: calls.append("run"))
    serve.serve(demo=False, data_dir=tmp_path, host="127.0.0.1", port=0, database_url="", demo_dir=tmp_path, workers=False)
    assert calls == ["tune", "run"]
