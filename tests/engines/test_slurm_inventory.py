"""The Slurm connector: parsers on captured `scontrol` output (fixtures/slurm/README.txt), and
the connector against a real single-host Slurm cluster.

The real tests need the cluster deploy/slurm.sh starts and `HETPOOL_TEST_SLURM_CONF` set to
its slurm.conf (`export HETPOOL_TEST_SLURM_CONF=$(deploy/slurm.sh start)`); without the
variable they are skipped. They rely on that script's nodes (gpu-a100-1 with gpu:a100:4,
gpu-h100-1 with gpu:h100:8, npu-910b-1 with npu:910b3:8, cpu-1) and partitions, and put the
cluster back as they found it: jobs cancelled, nodes resumed, the dynamic node deleted.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import ConnectorError, NodeState
from hetpool.engines.registry import connector_for
from hetpool.engines.slurm.config import parse_overrides
from hetpool.engines.slurm.gres import GresEntry, parse_gres
from hetpool.engines.slurm.inventory import SlurmConnector, build_observation, map_state, parse_kv_line, parse_node_line

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
CATALOG = DeviceCatalog.builtin()
SLURM_CONF = os.environ.get("HETPOOL_TEST_SLURM_CONF", "")


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _nodes(name: str, overrides: dict[str, str] | None = None):
    obs = build_observation(_fixture(name), _fixture("partitions.txt"), CATALOG, overrides)
    return {n.name: n for n in obs.nodes}, obs


# -- key=value lines -------------------------------------------------------------------


def test_kv_line_keeps_spaces_inside_values():
    line = _fixture("nodes_not_responding.txt").splitlines()[0]
    fields = parse_kv_line(line)
    assert fields["NodeName"] == "cpu-1"
    assert fields["OS"].startswith("Linux ") and "#1 SMP" in fields["OS"]
    assert fields["RealMemory"] == "128000"
    assert fields["State"] == "DOWN+NOT_RESPONDING"
    assert fields["Reason"].startswith("Not responding [root@")
    assert fields["Partitions"] == "cpu"


def test_kv_line_reason_runs_to_its_stamp_even_with_key_like_text():
    line = "NodeName=n1 State=IDLE+DRAIN Reason=swap GPU Slot=3 per ticket OPS-12 [admin@2026-01-02T03:04:05] Comment=(null)"
    fields = parse_kv_line(line)
    assert fields["Reason"] == "swap GPU Slot=3 per ticket OPS-12 [admin@2026-01-02T03:04:05]"
    assert fields["Comment"] == "(null)"
    assert "Slot" not in fields


# -- GRES -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:a100:4", [("gpu", "a100", 4)]),
        ("gpu:a100:4,npu:910b:8(S:0-1)", [("gpu", "a100", 4), ("npu", "910b", 8)]),
        ("gpu:a100:2(S:0,2),gpu:a100:2(S:1,3)", [("gpu", "a100", 2), ("gpu", "a100", 2)]),
        ("gpu:a100:2(IDX:0-1),npu:910b:0(IDX:N/A)", [("gpu", "a100", 2), ("npu", "910b", 0)]),
        ("gpu:a100:0(IDX:N/A),npu:0", [("gpu", "a100", 0), ("npu", "", 0)]),
        ("gpu:4", [("gpu", "", 4)]),
        ("gpu", [("gpu", "", 1)]),
        ("gpu:a100", [("gpu", "a100", 1)]),
        ("gpu:a100:no_consume:2", [("gpu", "a100", 2)]),
        ("mps:400,gpu:h100:8", [("mps", "", 400), ("gpu", "h100", 8)]),
        ("shard:2K", [("shard", "", 2048)]),
        ("(null)", []),
        ("", []),
    ],
)
def test_parse_gres(text, expected):
    assert parse_gres(text) == [GresEntry(*e) for e in expected]


# -- states -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("IDLE", NodeState.READY),
        ("MIXED", NodeState.READY),
        ("ALLOCATED", NodeState.READY),
        ("COMPLETING", NodeState.READY),
        ("IDLE+COMPLETING", NodeState.READY),
        ("MIXED+DYNAMIC_NORM", NodeState.READY),
        ("IDLE+RESERVED", NodeState.READY),
        ("IDLE+CLOUD+POWERED_DOWN", NodeState.READY),
        ("IDLE+DRAIN", NodeState.DRAINED),
        ("IDLE+DRAIN+DYNAMIC_NORM", NodeState.DRAINED),
        ("MIXED+DRAIN", NodeState.DRAINING),
        ("ALLOCATED+DRAIN", NodeState.DRAINING),
        ("IDLE+COMPLETING+DRAIN", NodeState.DRAINING),
        ("draining", NodeState.DRAINING),
        ("drained", NodeState.DRAINED),
        ("DOWN", NodeState.DOWN),
        ("DOWN*", NodeState.DOWN),
        ("IDLE*", NodeState.DOWN),
        ("idle*", NodeState.DOWN),
        ("DOWN+NOT_RESPONDING", NodeState.DOWN),
        ("IDLE+NOT_RESPONDING", NodeState.DOWN),
        ("DOWN+DRAIN", NodeState.DOWN),
        ("IDLE+DRAIN+NOT_RESPONDING", NodeState.DOWN),
        ("IDLE+FAIL", NodeState.DOWN),
        ("FUTURE", NodeState.DOWN),
        ("IDLE+INVALID_REG", NodeState.DOWN),
        ("inval", NodeState.DOWN),
        ("UNKNOWN", NodeState.UNKNOWN),
        ("", NodeState.UNKNOWN),
    ],
)
def test_map_state(state, expected):
    assert map_state(state) == expected


# -- whole nodes from captured output ---------------------------------------------------


def test_drained_draining_and_down_nodes_from_capture():
    nodes, obs = _nodes("nodes_drain_down.txt")
    assert obs.warnings == []
    a100 = nodes["gpu-a100-1"]
    assert a100.state == NodeState.DRAINING  # MIXED+DRAIN: a job still runs
    assert a100.reason == "maint test"
    assert a100.extra["reason_by"] == "root" and a100.extra["reason_at"].startswith("2026-")
    assert a100.devices == {"nvidia-a100-40g": 4} and a100.used == {"nvidia-a100-40g": 2}
    assert (nodes["cpu-1"].state, nodes["cpu-1"].reason) == (NodeState.DRAINED, "idle drain test")
    assert (nodes["gpu-h100-1"].state, nodes["gpu-h100-1"].reason) == (NodeState.DOWN, "down test")
    npu = nodes["npu-910b-1"]
    assert npu.state == NodeState.READY and npu.reason == ""
    assert npu.devices == {"ascend-910b3": 8} and npu.used == {"ascend-910b3": 3}  # no IDX suffix for file-less GRES


def test_not_responding_node_from_capture():
    nodes, _ = _nodes("nodes_not_responding.txt")
    cpu = nodes["cpu-1"]
    assert cpu.state == NodeState.DOWN and cpu.reason == "Not responding"
    assert cpu.extra["slurm_state"] == "DOWN+NOT_RESPONDING" and cpu.extra["reason_by"] == "root"
    assert nodes["gpu-a100-1"].state == NodeState.DRAINED  # the job ended; still drained


def test_busy_and_dynamic_nodes_from_capture():
    nodes, _ = _nodes("nodes_busy_dynamic.txt")
    h100 = nodes["gpu-h100-1"]
    assert h100.state == NodeState.READY and h100.extra["slurm_state"] == "ALLOCATED"
    assert h100.devices == h100.used == {"nvidia-h100": 8}
    assert nodes["gpu-a100-1"].used == {}  # gpu:a100:0(IDX:N/A)
    dyn = nodes["dyn-1"]
    assert dyn.state == NodeState.READY and dyn.extra["slurm_state"] == "MIXED+DYNAMIC_NORM"
    assert dyn.devices == {"ascend-910b1": 2} and dyn.used == {"ascend-910b1": 1}  # 910b: first catalog model
    assert dyn.partitions == ["cpu"] and dyn.features == ["dynamic"]


def test_node_facts_labels_and_partitions_from_capture():
    nodes, obs = _nodes("nodes_busy_dynamic.txt")
    h100 = nodes["gpu-h100-1"]
    assert (h100.cpu_cores, h100.memory_gb, h100.arch) == (96, 1000.0, "x86_64")
    assert h100.features == ["nvlink", "ib", "hopper"]
    assert h100.partitions == ["gpu", "cpu"]
    assert h100.labels == {
        "hetpool.io/feature.nvlink": "true",
        "hetpool.io/feature.ib": "true",
        "hetpool.io/feature.hopper": "true",
        "hetpool.io/slurm.partition": "gpu,cpu",
        "hetpool.io/slurm.partition.gpu": "true",
        "hetpool.io/slurm.partition.cpu": "true",
    }
    assert h100.extra["slurm_version"] == "22.05.8" and h100.extra["slurm_gres"] == "gpu:h100:8"
    assert nodes["cpu-1"].devices == {} and "slurm_gres" not in nodes["cpu-1"].extra
    assert obs.extra["partitions"]["cpu"]["default"] is True
    assert obs.extra["partitions"]["gpu"]["nodes"] == "gpu-a100-1,gpu-h100-1"
    assert obs.extra["partitions"]["npu"]["total_cpus"] == 192


def test_down_partition_is_a_warning():
    obs = build_observation("No nodes in the system\n", _fixture("partitions_npu_down.txt"), CATALOG)
    assert obs.nodes == []
    assert obs.extra["partitions"]["npu"]["state"] == "DOWN"
    assert any("'npu' is DOWN" in w for w in obs.warnings)


def test_overrides_choose_the_model():
    nodes, _ = _nodes("nodes_busy_dynamic.txt", parse_overrides("gpu:a100=nvidia-a100-80g, NPU:910B=ascend-910b3"))
    assert nodes["gpu-a100-1"].devices == {"nvidia-a100-80g": 4}
    assert nodes["dyn-1"].devices == {"ascend-910b3": 2}


def _line(gres: str, used: str, state: str = "IDLE") -> str:
    return (
        f"NodeName=n1 Arch=aarch64 CPUTot=8 RealMemory=65536 AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} "
        f"GresUsed={used} OS=Linux 5.10 #1 SMP State={state} Partitions=p1"
    )


def test_unknown_gres_type_is_kept_with_a_warning():
    node, warnings = parse_node_line(_line("gpu:a100:2,gpu:zz9:4", "gpu:a100:0(IDX:N/A),gpu:zz9:1(IDX:0)"), CATALOG)
    assert node.devices == {"nvidia-a100-40g": 2, "unknown-gpu-zz9": 4}
    assert node.used == {"unknown-gpu-zz9": 1}
    assert len(warnings) == 1 and "gpu:zz9" in warnings[0] and "unknown-gpu-zz9" in warnings[0]
    assert (node.arch, node.memory_gb, node.features) == ("aarch64", 64.0, [])


def test_untyped_gres_is_an_unknown_model_unless_mapped():
    node, warnings = parse_node_line(_line("gpu:4(S:0)", "gpu:3(IDX:0-2)"), CATALOG)
    assert node.devices == {"unknown-gpu": 4} and node.used == {"unknown-gpu": 3}
    assert len(warnings) == 1 and "no type" in warnings[0]
    node, warnings = parse_node_line(_line("gpu:4(S:0)", "gpu:3(IDX:0-2)"), CATALOG, parse_overrides("gpu=nvidia-t4"))
    assert node.devices == {"nvidia-t4": 4} and node.used == {"nvidia-t4": 3} and warnings == []


def test_shared_gres_are_not_devices():
    node, warnings = parse_node_line(_line("gpu:h100:8,mps:800,shard:16", "gpu:h100:1(IDX:0),mps:0,shard:0"), CATALOG)
    assert node.devices == {"nvidia-h100": 8} and node.used == {"nvidia-h100": 1}
    assert node.extra["gres_shared"] == {"mps": 800, "shard": 16} and warnings == []


def test_reasonless_bad_state_gets_the_raw_state_as_reason():
    node, warnings = parse_node_line(_line("(null)", "gpu:0", "DOWN+NOT_RESPONDING"), CATALOG)
    assert node.state == NodeState.DOWN and node.reason == "slurm state DOWN+NOT_RESPONDING"
    node, warnings = parse_node_line(_line("(null)", "gpu:0", "WEIRD"), CATALOG)
    assert node.state == NodeState.UNKNOWN and any("WEIRD" in w for w in warnings)


# -- config and command failures ---------------------------------------------------------


def test_config_errors():
    with pytest.raises(ConnectorError, match="not in|does not have"):
        SlurmConnector({"gres_models": "gpu:a100=no-such-model"}, CATALOG)
    with pytest.raises(ConnectorError, match="name:type=model"):
        SlurmConnector({"gres_models": "gpu:a100"}, CATALOG)
    with pytest.raises(ConnectorError, match="slurmrestd"):
        SlurmConnector({"restd_url": "http://127.0.0.1:6820"}, CATALOG)
    with pytest.raises(ConnectorError, match="timeout_s"):
        SlurmConnector({"timeout_s": "soon"}, CATALOG)
    assert isinstance(connector_for("slurm", {}, CATALOG), SlurmConnector)


def _fake_scontrol(tmp_path: Path, body: str) -> str:
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(tmp_path)


def test_command_failure_names_the_command_and_stderr(tmp_path):
    bin_dir = _fake_scontrol(tmp_path, 'echo "slurm_load_node error: Unable to contact slurm controller" >&2; exit 1')
    connector = SlurmConnector({"bin_dir": bin_dir, "conf": "/nowhere/slurm.conf"}, CATALOG)
    with pytest.raises(ConnectorError) as err:
        connector.fetch()
    message = str(err.value)
    assert "scontrol --all --oneliner --details show node" in message and "SLURM_CONF=/nowhere/slurm.conf" in message
    assert "Unable to contact slurm controller" in message and "exit 1" in message


def test_command_timeout_and_missing_binary(tmp_path):
    connector = SlurmConnector({"bin_dir": _fake_scontrol(tmp_path, "exec sleep 5"), "timeout_s": "0.2"}, CATALOG)
    with pytest.raises(ConnectorError, match="longer than 0.2 s"):
        connector.fetch()
    with pytest.raises(ConnectorError, match="bin_dir"):
        SlurmConnector({"bin_dir": str(tmp_path / "empty")}, CATALOG).fetch()


def test_conf_is_passed_in_the_environment(tmp_path):
    bin_dir = _fake_scontrol(tmp_path, 'case "$*" in *node*) echo "NodeName=$SLURM_CONF CPUTot=1 RealMemory=1024 State=IDLE";; esac')
    obs = SlurmConnector({"bin_dir": bin_dir, "conf": "/etc/x/slurm.conf"}, CATALOG).fetch()
    assert [n.name for n in obs.nodes] == ["/etc/x/slurm.conf"]


# -- against a real cluster (deploy/slurm.sh) ---------------------------------------------

STATIC = {
    "gpu-a100-1": ({"nvidia-a100-40g": 4}, ["gpu", "cpu"], ["nvlink", "ib"], 64),
    "gpu-h100-1": ({"nvidia-h100": 8}, ["gpu", "cpu"], ["nvlink", "ib", "hopper"], 96),
    "npu-910b-1": ({"ascend-910b3": 8}, ["npu", "cpu"], ["hccs"], 192),
    "cpu-1": ({}, ["cpu"], ["avx512"], 32),
}


@pytest.fixture(scope="module")
def slurm() -> Callable[..., str]:
    """Runs a Slurm command against the test cluster and returns its stdout."""
    if not SLURM_CONF:
        pytest.skip("HETPOOL_TEST_SLURM_CONF not set (export HETPOOL_TEST_SLURM_CONF=$(deploy/slurm.sh start))")
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}

    def run(*args: str) -> str:
        done = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=20, check=False)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    run("scontrol", "ping")
    # Start from a settled cluster: after another module's jobs the backfill scheduler keeps
    # nodes PLANNED for a while (up to ~20 s), which the state assertions here would see.
    _wait("no PLANNED nodes", lambda: "planned" not in run("sinfo", "-h", "-N", "-o", "%T"), timeout_s=90)
    return run


@pytest.fixture(scope="module")
def connector(slurm) -> SlurmConnector:
    return SlurmConnector({"conf": SLURM_CONF, "timeout_s": "10"}, CATALOG)


def _observe(connector: SlurmConnector):
    obs = connector.fetch()
    return {n.name: n for n in obs.nodes}, obs


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:  # generous: CI machines are busy
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def _observe_until(connector: SlurmConnector, name: str, state: NodeState):
    """Observations until node `name` is in `state`; the last one is returned.

    After `state=resume` slurmctld marks the node NOT_RESPONDING (IDLE+NOT_RESPONDING, sinfo's
    `idle*`, hence DOWN) until its slurmd answers a ping, up to ~1 s later here."""
    seen: list[str] = []

    def reached() -> bool:
        nodes, _ = _observe(connector)
        seen.append(nodes[name].extra["slurm_state"] if name in nodes else "absent")
        return name in nodes and nodes[name].state == state

    _wait(f"{name} {state.value} (seen {seen[-3:]})", reached, timeout_s=10)
    return _observe(connector)


def _wait_node_free(slurm, node: str) -> None:
    _wait(f"no jobs on {node}", lambda: not slurm("squeue", "-h", "-w", node, "-o", "%A").strip())


def test_real_inventory(connector):
    nodes, obs = _observe(connector)
    assert set(STATIC) <= set(nodes)
    for name, (devices, partitions, features, cpus) in STATIC.items():
        node = nodes[name]
        assert node.devices == devices, name
        assert node.partitions == partitions and node.features == features and node.cpu_cores == cpus, name
        assert node.state == NodeState.READY and node.used == {}, name
        assert node.labels[f"hetpool.io/slurm.partition.{partitions[0]}"] == "true"
        assert all(node.labels[f"hetpool.io/feature.{f}"] == "true" for f in features)
    assert nodes["gpu-h100-1"].memory_gb == 1000.0
    assert {"gpu", "npu", "cpu"} <= set(obs.extra["partitions"])
    assert obs.extra["partitions"]["cpu"]["default"] is True
    assert obs.warnings == []
    mapped = SlurmConnector({"conf": SLURM_CONF, "gres_models": "gpu:a100=nvidia-a100-80g"}, CATALOG).fetch()
    assert next(n for n in mapped.nodes if n.name == "gpu-a100-1").devices == {"nvidia-a100-80g": 4}


def test_real_job_shows_as_used_and_drain_resume(slurm, connector):
    node = "gpu-a100-1"
    job = slurm("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 30", "--gres=gpu:a100:2", "-w", node).strip().split(";")[0]
    try:
        _wait(f"job {job} running", lambda: slurm("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING")
        nodes, _ = _observe(connector)
        assert nodes[node].used == {"nvidia-a100-40g": 2}
        assert nodes[node].state == NodeState.READY and nodes[node].extra["slurm_state"] == "MIXED"

        slurm("scontrol", "update", f"nodename={node}", "state=drain", "reason=maint test")
        nodes, _ = _observe(connector)
        assert nodes[node].state == NodeState.DRAINING  # the job keeps running
        assert nodes[node].reason == "maint test" and nodes[node].used == {"nvidia-a100-40g": 2}

        slurm("scontrol", "update", f"nodename={node}", "state=resume")
        nodes, _ = _observe_until(connector, node, NodeState.READY)
        assert nodes[node].reason == "" and nodes[node].used == {"nvidia-a100-40g": 2}
    finally:
        slurm("scancel", job)
        _wait_node_free(slurm, node)
        if "DRAIN" in slurm("sinfo", "-h", "-n", node, "-o", "%T").upper():
            slurm("scontrol", "update", f"nodename={node}", "state=resume")
    nodes, _ = _observe_until(connector, node, NodeState.READY)
    assert nodes[node].used == {}


def test_real_drain_idle_node(slurm, connector):
    node = "cpu-1"
    slurm("scontrol", "update", f"nodename={node}", "state=drain", "reason=maint test")
    try:
        nodes, _ = _observe(connector)
        assert nodes[node].state == NodeState.DRAINED and nodes[node].reason == "maint test"
        assert nodes[node].extra["slurm_state"] == "IDLE+DRAIN"
    finally:
        slurm("scontrol", "update", f"nodename={node}", "state=resume")
    nodes, _ = _observe_until(connector, node, NodeState.READY)
    assert nodes[node].reason == ""


@pytest.fixture
def dynamic_node(slurm) -> Iterator[tuple[str, subprocess.Popen]]:
    """A dynamic node (`slurmd -Z`, Slurm >= 22.05) with a GRES type the catalog lacks.

    Its slurmd runs in the foreground as our child, on the cluster's SlurmdPort; the test
    deletes the node, and this fixture makes sure the process is gone and the node too.
    """
    if os.geteuid() != 0:
        pytest.skip("a dynamic node's slurmd must run as root")
    slurmd = shutil.which("slurmd") or "/usr/sbin/slurmd"
    name = "hetpool-dyn-1"
    conf = f"NodeHostname={socket.gethostname().split('.')[0]} NodeAddr=127.0.0.1 CPUs=8 RealMemory=16000 Gres=npu:zz9:2 Feature=dynamic"
    proc = subprocess.Popen(
        [slurmd, "-D", "-Z", "-N", name, "--conf", conf],
        env={**os.environ, "SLURM_CONF": SLURM_CONF},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(f"{name} idle", lambda: slurm("sinfo", "-h", "-N", "-n", name, "-o", "%T").strip().startswith("idle"))
        yield name, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if name in slurm("sinfo", "-h", "-N", "-o", "%N").split():
            slurm("scontrol", "delete", f"nodename={name}")


def test_real_removed_node_disappears(slurm, connector, dynamic_node):
    name, proc = dynamic_node
    nodes, obs = _observe(connector)
    assert nodes[name].state == NodeState.READY and nodes[name].extra["slurm_state"] == "IDLE+DYNAMIC_NORM"
    assert nodes[name].devices == {"unknown-npu-zz9": 2}  # not in the catalog: kept, with a warning
    assert any("npu:zz9" in w for w in obs.warnings)
    assert nodes[name].partitions == ["cpu"]  # PartitionName=cpu Nodes=ALL takes dynamic nodes

    proc.terminate()  # stop its slurmd first, so nothing re-registers the node
    slurm("scontrol", "delete", f"nodename={name}")
    nodes, obs = _observe(connector)
    assert name not in nodes
    assert set(STATIC) <= set(nodes)
    assert not any("zz9" in w for w in obs.warnings)
    proc.wait(timeout=10)
