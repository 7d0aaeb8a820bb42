"""The built-in model table (catalog/data/models.yaml): every row is well-formed, and the
shapes of each transformer row add up to the parameter count it states."""

from __future__ import annotations

import datetime
from importlib import resources

import pytest
import yaml

EXPECTED = """llama3-8b llama3-70b llama3.1-8b llama3.1-70b llama3.1-405b qwen2.5-7b qwen2.5-14b qwen2.5-32b
qwen2.5-72b deepseek-v2-lite glm-4-9b mistral-7b mixtral-8x7b bert-base bert-large resnet-50""".split()
TOLERANCE = 0.08


def _rows() -> list[dict]:
    text = resources.files("hetpool.catalog").joinpath("data/models.yaml").read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


ROWS = _rows()
TRANSFORMERS = [row for row in ROWS if row.get("architecture") in ("decoder", "encoder")]


def counted_params(row: dict, *, active: bool = False) -> float:
    """Parameters in billions from the row's shapes: attention, MLP and embeddings (norms and biases left out)."""
    hidden, heads, kv_heads = row["hidden_size"], row["heads"], row["kv_heads"]
    head_dim = row.get("head_dim", hidden // heads)
    attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden  # q, k and v, o
    mlp = (3 if row.get("mlp", "gated") == "gated" else 2) * hidden * row["intermediate_size"]
    experts = row.get("experts_per_token" if active else "experts", 1)
    embeddings = row["vocab_size"] * hidden * (1 if row.get("tied_embeddings") else 2)
    return (row["layers"] * (attention + experts * mlp) + embeddings) / 1e9


def test_the_table_holds_the_expected_models() -> None:
    assert sorted(row["name"] for row in ROWS) == sorted(EXPECTED)


def test_names_are_unique_and_lower_case() -> None:
    names = [row["name"] for row in ROWS]
    assert len(names) == len(set(names))
    assert all(name == name.lower() for name in names)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.get("name", "?"))
def test_row_is_well_formed(row: dict) -> None:
    assert row["kind"] == "ModelCard"
    assert row["name"]
    assert row["architecture"] in ("decoder", "encoder", "cnn")
    assert row["params_b"] > 0
    assert 0 < row["active_params_b"] <= row["params_b"]
    assert row["source"].startswith("https://")
    assert isinstance(row["checked"], str)  # quoted, so YAML does not turn it into a date
    datetime.date.fromisoformat(row["checked"])


@pytest.mark.parametrize("row", TRANSFORMERS, ids=lambda row: row["name"])
def test_shapes_add_up_to_the_stated_parameter_count(row: dict) -> None:
    if row.get("param_check") is False:
        # e.g. DeepSeek-V2-Lite: MLA's low-rank projections, shared experts and a dense first layer.
        pytest.skip("the row says its shapes do not fit the simple count")
    total = counted_params(row)
    assert abs(total - row["params_b"]) <= TOLERANCE * row["params_b"], f"counted {total:.2f}B, row says {row['params_b']}B"
    if "experts" in row:
        active = counted_params(row, active=True)
        assert abs(active - row["active_params_b"]) <= TOLERANCE * row["active_params_b"], (
            f"counted {active:.2f}B active, row says {row['active_params_b']}B"
        )
