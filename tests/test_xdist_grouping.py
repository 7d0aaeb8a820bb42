"""The tests that share the one Slurm cluster and Ray head must run on one xdist worker.

`make test` runs `pytest -n 2 --dist loadgroup`; loadgroup schedules by the `@group` suffix
xdist adds to the node id. When a pytest/xdist pairing stops adding it (pytest 9.2 with
xdist 3.8 did), the shared-engine tests spread over both workers and drain each other's
Slurm nodes. This test notices that before the engines do.
"""

from pathlib import Path

import pytest

from tests.conftest import SHARED_ENGINE_MODULES


def test_shared_engine_tests_carry_the_loadgroup_suffix(request):
    config = request.config
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        pytest.skip("only meaningful on a `--dist loadgroup` worker (make test)")
    shared = [item for item in request.session.items if Path(str(item.fspath)).name in SHARED_ENGINE_MODULES]
    assert shared, "no shared-engine tests collected"
    ungrouped = [item.nodeid for item in shared if not item.nodeid.endswith("@shared-engines")]
    assert not ungrouped, f"{len(ungrouped)} shared-engine tests lack the @shared-engines suffix, e.g. {ungrouped[:3]}"
