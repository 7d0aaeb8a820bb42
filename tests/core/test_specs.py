"""Reading `kind:` documents: typed specs, errors that name the field, all-or-nothing batches."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

from hetpool.core.errors import SpecError
from hetpool.core.inventory import ClusterSpec, DeviceClass, NodeSpec, PoolSpec, TaskType
from hetpool.core.specs import SPEC_KINDS, load_yaml_documents, parse_documents, parse_spec, resolve_kind
from hetpool.core.tasks import Priority, TaskSpec, TaskTemplateSpec, apply_template, parse_version_spec
from hetpool.core.tenancy import TenantSpec, tenant_ancestors, tenant_parent, validate_tenant_path


def _task(**fields) -> dict:
    return {"kind": "Task", "name": "t", "tenant": "ai-lab", **fields}


def _error(document, where: str = "") -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(document, where)
    return info.value


# ------------------------------------------------------------------ single documents


def test_valid_task_parses_with_aliases() -> None:
    spec = parse_spec(
        _task(type="inference", workers=2, priority="high", per_worker={"devices": {"class": "npu", "count": 0.5, "models": ["ascend-910b1"]}})
    )
    assert isinstance(spec, TaskSpec)
    assert spec.task_type is TaskType.INFERENCE
    assert spec.priority is Priority.HIGH
    assert spec.workers == 2
    assert spec.per_worker.devices is not None
    assert spec.per_worker.devices.device_class is DeviceClass.NPU
    assert spec.per_worker.devices.count == 0.5
    assert spec.per_worker.devices.models == ["ascend-910b1"]


def test_each_kind_maps_to_its_model() -> None:
    docs = [
        {"kind": "Cluster", "name": "c1"},
        {"kind": "Node", "name": "n1", "cluster": "c1", "cpu_cores": 8, "memory_gb": 32},
        {"kind": "Pool", "name": "p1", "cluster": "c1", "model": "nvidia-a100-80g", "nodes": ["n1"]},
        {"kind": "Tenant", "name": "ai-lab/nlp"},
    ]
    specs = [parse_spec(d) for d in docs]
    assert [type(s) for s in specs] == [ClusterSpec, NodeSpec, PoolSpec, TenantSpec]


def test_unknown_nested_field_names_the_path() -> None:
    err = _error(_task(per_worker={"devices": {"class": "gpu", "cnt": 2}}))
    assert err.details == [{"loc": "Task/t: per_worker.devices.cnt", "msg": "unknown field"}]
    assert "per_worker.devices.cnt" in err.message
    assert "unknown field" in err.message
    assert err.code == "invalid_spec"


def test_unknown_top_level_field_with_source_prefix() -> None:
    err = _error(_task(bogus=1), where="tasks.yaml[2]")
    assert err.details == [{"loc": "tasks.yaml[2]: Task/t: bogus", "msg": "unknown field"}]


def test_list_index_is_rendered_in_brackets() -> None:
    err = _error({"kind": "Node", "name": "n1", "cluster": "c1", "cpu_cores": 8, "memory_gb": 32, "devices": [{"model": "x", "count": 1, "typo": 1}]})
    assert [d["loc"] for d in err.details] == ["Node/n1: devices[0].typo"]


@pytest.mark.parametrize(
    ("fields", "loc", "allowed"),
    [
        ({"priority": "urgent"}, "priority", ["'low'", "'normal'", "'high'", "'critical'"]),
        ({"per_worker": {"devices": {"class": "tpu"}}}, "per_worker.devices.class", ["'cpu'", "'gpu'", "'npu'", "'dpu'"]),
        ({"type": "finetune"}, "type", ["'training'", "'inference'", "'batch-inference'", "'offload'"]),
        ({"env": "staging"}, "env", ["'dev'", "'test'", "'prod'"]),
    ],
)
def test_bad_enum_value_lists_the_allowed_values(fields: dict, loc: str, allowed: list[str]) -> None:
    err = _error(_task(**fields))
    assert len(err.details) == 1
    assert err.details[0]["loc"] == f"Task/t: {loc}"
    for value in allowed:
        assert value in err.details[0]["msg"]


def test_fallback_and_any_of_together_is_an_error() -> None:
    err = _error(_task(per_worker={"devices": {"class": "gpu"}}, fallback=["nvidia-h100"], any_of=["nvidia-a100-80g"]))
    assert len(err.details) == 1
    assert "either 'fallback'" in err.details[0]["msg"]
    assert "not both" in err.message
    # Each alone is fine.
    assert parse_spec(_task(per_worker={"devices": {"class": "gpu"}}, fallback=["nvidia-h100"])).ordered is True
    assert parse_spec(_task(per_worker={"devices": {"class": "gpu"}}, any_of=["nvidia-h100"])).ordered is False


def test_root_level_error_loc_has_no_dangling_separator() -> None:
    err = _error(_task(per_worker={"devices": {"class": "gpu"}}, fallback=["a"], any_of=["b"]))
    assert err.details[0]["loc"] == "Task/t"
    assert ": :" not in err.message


def test_fallback_needs_devices_and_unique_entries() -> None:
    assert "need per_worker.devices" in _error(_task(fallback=["nvidia-h100"])).message
    assert "listed twice" in _error(_task(per_worker={"devices": {"class": "gpu"}}, any_of=["a100", "a100"])).message


@pytest.mark.parametrize("count", [1.5, 2.25, 7.9])
def test_fractional_count_above_one_is_an_error(count: float) -> None:
    err = _error(_task(per_worker={"devices": {"class": "gpu", "count": count}}))
    assert err.details[0]["loc"] == "Task/t: per_worker.devices.count"
    assert "count above 1 must be a whole number" in err.details[0]["msg"]


@pytest.mark.parametrize("count", [0.25, 0.5, 1, 2, 8.0, 64])
def test_whole_counts_and_fractions_below_one_are_accepted(count: float) -> None:
    spec = parse_spec(_task(per_worker={"devices": {"class": "gpu", "count": count}}))
    assert spec.per_worker.devices.count == count


@pytest.mark.parametrize("count", [0, -1, 65])
def test_count_out_of_range_is_an_error(count: float) -> None:
    assert _error(_task(per_worker={"devices": {"class": "gpu", "count": count}})).details[0]["loc"] == "Task/t: per_worker.devices.count"


def test_invalid_duration_is_an_error() -> None:
    err = _error(_task(runtime_estimate="six hours"))
    assert err.details[0]["loc"] == "Task/t: runtime_estimate"
    assert "invalid duration" in err.details[0]["msg"]
    assert parse_spec(_task(runtime_estimate="1h30m")).runtime_estimate_s == 5400


def test_unknown_kind_lists_allowed_kinds() -> None:
    err = _error({"kind": "Widget", "name": "x"}, where="f.yaml")
    assert "'Widget'" in err.message
    assert err.details[0]["loc"] == "f.yaml: kind"
    for kind in SPEC_KINDS:
        assert kind in err.details[0]["msg"]


def test_missing_kind_is_an_error() -> None:
    assert "None" in _error({"name": "x"}).message


@pytest.mark.parametrize("document", [[1, 2], "kind: Task", 42, None])
def test_document_that_is_not_a_mapping(document) -> None:
    err = _error(document, where="f.yaml")
    assert err.message.startswith("f.yaml: expected a mapping")
    assert type(document).__name__ in err.message


# ------------------------------------------------------------------ batches


def test_parse_documents_returns_all_specs_in_order() -> None:
    specs = parse_documents([("a", {"kind": "Cluster", "name": "c1"}), ("b", {"kind": "Tenant", "name": "ai-lab"})])
    assert [s.name for s in specs] == ["c1", "ai-lab"]


def test_parse_documents_is_all_or_nothing_and_lists_every_bad_document() -> None:
    documents = [
        ("a.yaml[0]", _task(bogus=1)),
        ("a.yaml[1]", {"kind": "Cluster", "name": "good"}),
        ("b.yaml[0]", {"kind": "Pool", "name": "p"}),
        ("c.yaml[0]", {"kind": "Widget", "name": "w"}),
        ("d.yaml[0]", ["not", "a", "mapping"]),
    ]
    with pytest.raises(SpecError) as info:
        parse_documents(documents)
    err = info.value
    locs = [d["loc"] for d in err.details]
    assert "a.yaml[0]: Task/t: bogus" in locs
    assert {"b.yaml[0]: Pool/p: cluster", "b.yaml[0]: Pool/p: model", "b.yaml[0]: Pool/p: nodes"} <= set(locs)
    assert "c.yaml[0]: kind" in locs
    # A document with no details still contributes a problem, under its source name.
    assert any(d["loc"] == "d.yaml[0]" and "expected a mapping" in d["msg"] for d in err.details)
    assert not any(loc.startswith("a.yaml[1]") for loc in locs)
    assert err.message.startswith(f"{len(err.details)} problem(s) in the input; nothing was applied: a.yaml[0]: Task/t: bogus")


def test_load_yaml_documents_skips_empty_documents() -> None:
    docs = load_yaml_documents("kind: Cluster\nname: c1\n---\n---\nkind: Tenant\nname: ai-lab\n")
    assert docs == [{"kind": "Cluster", "name": "c1"}, {"kind": "Tenant", "name": "ai-lab"}]


def test_load_yaml_documents_rejects_non_mapping() -> None:
    with pytest.raises(SpecError, match=r"x\.yaml: document 2 is a list, expected a mapping"):
        load_yaml_documents("kind: Cluster\nname: c1\n---\n- a\n- b\n", "x.yaml")


def test_load_yaml_documents_rejects_invalid_yaml() -> None:
    with pytest.raises(SpecError, match=r"x\.yaml: not valid YAML"):
        load_yaml_documents("kind: [\n", "x.yaml")


# ------------------------------------------------------------------ kinds


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("pools", "Pool"),
        ("Pool", "Pool"),
        ("nodes", "Node"),
        ("templates", "TaskTemplate"),
        ("task-templates", "TaskTemplate"),
        ("devicemodels", "DeviceModel"),
        ("device_models", "DeviceModel"),
        ("models", "DeviceModel"),
        (" Tasks ", "Task"),
        ("tenants", "Tenant"),
        ("clusters", "Cluster"),
    ],
)
def test_resolve_kind_aliases(name: str, kind: str) -> None:
    assert resolve_kind(name) == kind


def test_resolve_kind_unknown_lists_allowed() -> None:
    with pytest.raises(SpecError) as info:
        resolve_kind("widgets")
    assert "unknown kind 'widgets'" in info.value.message
    kinds = (
        "DeviceModel, CompatibilityRule, Cluster, Node, Pool, Tenant, Quota, ApprovalPolicy, PriceList, Budget, ReclaimPolicy, TaskTemplate, Queue"
    )
    assert f"allowed: {kinds}, SchedulingPolicy, Task" in info.value.message


# ------------------------------------------------------------------ templates


def _template(**defaults) -> TaskTemplateSpec:
    return TaskTemplateSpec.model_validate({"kind": "TaskTemplate", "name": "llm-train", "type": "training", "defaults": defaults})


def test_apply_template_task_values_win_and_per_worker_merges() -> None:
    template = _template(
        workers=4,
        priority="high",
        image="img:template",
        per_worker={"devices": {"class": "gpu", "count": 8}, "cpu": 32, "memory_gb": 256},
        env_vars={"A": "1", "B": "template"},
        features=["bf16"],
    )
    raw = {
        "kind": "Task",
        "name": "t",
        "tenant": "ai-lab",
        "template": "llm-train",
        "workers": 2,
        "per_worker": {"cpu": 8},
        "env_vars": {"B": "task"},
    }
    merged = apply_template(raw, template)
    # The input mapping is not changed.
    assert "type" not in raw and raw["per_worker"] == {"cpu": 8}
    assert merged["type"] == "training"
    assert merged["workers"] == 2  # task wins
    assert merged["priority"] == "high"  # from the template
    assert merged["image"] == "img:template"
    assert merged["features"] == ["bf16"]
    devices = {"class": "gpu", "count": 8.0, "models": [], "min_memory_gb": 0.0, "mix_models": False}
    assert merged["per_worker"] == {"devices": devices, "cpu": 8, "memory_gb": 256.0}
    assert merged["env_vars"] == {"A": "1", "B": "task"}
    spec = TaskSpec.model_validate(merged)
    assert spec.task_type is TaskType.TRAINING
    assert spec.per_worker.devices.device_class is DeviceClass.GPU
    assert spec.per_worker.devices.count == 8
    assert spec.per_worker.cpu == 8


def test_apply_template_task_type_wins_over_template() -> None:
    merged = apply_template({"name": "t", "tenant": "a", "type": "inference"}, _template())
    assert merged["type"] == "inference"


def test_apply_template_leaves_unset_defaults_out() -> None:
    merged = apply_template({"name": "t", "tenant": "a"}, _template(workers=3))
    assert merged == {"name": "t", "tenant": "a", "type": "training", "workers": 3}


# ------------------------------------------------------------------ version specs


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("2.4", ["2.4.0", "2.4.1", "2.4.0.post2"], ["2.3.1", "2.5.0", "2.40.0"]),
        ("2", ["2.0.1", "2.9.0"], ["1.11.0", "3.0.0"]),
        ("2.4.1", ["2.4.1"], ["2.4.0", "2.4.2"]),
        (">=2.3,<2.6", ["2.3.0", "2.5.1"], ["2.2.2", "2.6.0"]),
        ("", ["0.1", "2.4.1", "99"], []),
        ("*", ["2.4.1"], []),
    ],
)
def test_parse_version_spec(text: str, inside: list[str], outside: list[str]) -> None:
    spec = parse_version_spec(text)
    assert isinstance(spec, SpecifierSet)
    for version in inside:
        assert spec.contains(version), version
    for version in outside:
        assert not spec.contains(version), version


def test_bare_version_means_wildcard() -> None:
    assert str(parse_version_spec("2.4")) == "==2.4.*"
    assert str(parse_version_spec(" 2.4.1 ")) == "==2.4.1"


@pytest.mark.parametrize("text", ["abc", ">>2.4", "2.4,,", "=>2"])
def test_invalid_version_spec_message(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_version_spec(text)
    assert f"invalid version spec {text!r}" in str(info.value)
    assert "'>=2.3,<2.6'" in str(info.value)


def test_bare_prerelease_version_is_accepted() -> None:
    assert parse_version_spec("2.4rc1").contains("2.4rc1", prereleases=True)


def test_framework_version_is_validated_in_specs() -> None:
    err = _error(_task(framework={"name": "PyTorch", "version": "abc"}))
    assert err.details[0]["loc"] == "Task/t: framework.version"
    assert "invalid version spec" in err.details[0]["msg"]
    spec = parse_spec(_task(framework={"name": "PyTorch", "version": "2.4", "extras": {"vLLM": ">=0.6"}}))
    assert spec.framework.name == "pytorch"
    assert spec.framework.extras == {"vllm": ">=0.6"}


# ------------------------------------------------------------------ tenants


@pytest.mark.parametrize("path", ["org", "ai-lab/nlp", "ai-lab/nlp/llm-sft", "a1/b_2/c-3"])
def test_valid_tenant_paths(path: str) -> None:
    assert validate_tenant_path(path) == path
    assert parse_spec({"kind": "Tenant", "name": path}).name == path
    assert parse_spec(_task(tenant=path)).tenant == path


def test_tenant_path_is_normalised() -> None:
    assert validate_tenant_path(" /ai-lab/nlp/ ") == "ai-lab/nlp"


@pytest.mark.parametrize("path", ["a/b/c/d", "AI-lab", "ai-lab/NLP", "", "/", "a//b", "-a", "a-", "a b", "a/" + "x" * 41])
def test_invalid_tenant_paths(path: str) -> None:
    with pytest.raises(ValueError, match="tenant must be a path"):
        validate_tenant_path(path)
    err = _error(_task(tenant=path))
    assert err.details[0]["loc"] == "Task/t: tenant"


def test_tenant_levels_and_ancestry() -> None:
    assert TenantSpec(name="a").level == "org"
    assert TenantSpec(name="a/b").level == "team"
    assert TenantSpec(name="a/b/c").level == "project"
    assert TenantSpec(name="a/b/c").parent == "a/b"
    assert TenantSpec(name="a").parent is None
    assert tenant_ancestors("a/b/c") == ["a", "a/b", "a/b/c"]
    assert tenant_parent("a/b") == "a"
