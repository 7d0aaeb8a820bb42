"""The built-in table of common open models (data/models.yaml), for goal-based sizing.

A row holds what the memory model of catalog/sizing.py needs: parameters (total and
active per token), and for transformers the shape from the model's config.json (layers,
hidden size, heads, key/value heads, head size, vocabulary). Every row names its source
and the date it was checked; the code only reads them.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from hetpool.catalog.names import close_matches
from hetpool.core.base import Name, ShortText, ShortTexts, SpecModel
from hetpool.core.errors import SpecError
from hetpool.core.limits import bounded

_SOURCE = "hetpool/catalog/data/models.yaml"
_Size = bounded(gt=0, le=10_000_000, kind=int)


class ModelCard(SpecModel):
    """One open model as goal sizing sees it."""

    kind: Literal["ModelCard"] = "ModelCard"
    name: Name
    display_name: ShortText
    family: ShortText
    architecture: Literal["decoder", "encoder", "cnn"] = "decoder"
    aliases: ShortTexts = []
    params_b: bounded(gt=0, le=100_000)
    active_params_b: bounded(gt=0, le=100_000) | None = None
    layers: _Size | None = None
    hidden_size: _Size | None = None
    intermediate_size: _Size | None = None
    heads: _Size | None = None
    kv_heads: _Size | None = None
    head_dim: _Size | None = None
    vocab_size: _Size | None = None
    max_seq_len: _Size | None = None
    experts: _Size | None = None
    experts_per_token: _Size | None = None
    kv_cache_dim_per_layer: _Size | None = Field(default=None, description="cached values per token per layer (MLA); default 2*kv_heads*head_dim")
    tied_embeddings: bool = False
    mlp: Literal["gated", "plain"] = "gated"
    param_check: bool = True
    source: ShortText
    checked: ShortText
    verified: bool = True

    @property
    def params(self) -> float:
        return self.params_b * 1e9

    @property
    def active_params(self) -> float:
        return (self.active_params_b or self.params_b) * 1e9

    @property
    def transformer(self) -> bool:
        return self.architecture != "cnn" and None not in (self.layers, self.hidden_size, self.heads)

    @property
    def head_size(self) -> int:
        return self.head_dim or (self.hidden_size or 0) // (self.heads or 1)

    @property
    def kv_values_per_token(self) -> int:
        """Values the KV cache keeps per token and layer (keys and values of every KV head)."""
        return self.kv_cache_dim_per_layer or 2 * (self.kv_heads or self.heads or 0) * self.head_size


class ModelTable:
    """Models by name and alias (case-insensitive)."""

    def __init__(self, cards: list[ModelCard]):
        self.cards = {c.name: c for c in cards}
        self._by_alias = {a.lower(): c for c in cards for a in (c.name, *c.aliases)}

    def get(self, name: str) -> ModelCard | None:
        return self._by_alias.get(name.strip().lower())

    def names(self) -> list[str]:
        return sorted(self.cards)

    def require(self, name: str, loc: str = "goal.model") -> ModelCard:
        card = self.get(name)
        if card is None:
            near = close_matches(name, list(self._by_alias))
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise SpecError(
                f"{loc}: unknown model {name!r}{hint} Known: {', '.join(self.names())}; or give goal.params (e.g. 13B)",
                details=[{"loc": loc, "msg": f"unknown model; known: {', '.join(self.names())}"}],
            )
        return card


def parse_cards(text: str, source: str = _SOURCE) -> list[ModelCard]:
    cards = []
    for index, doc in enumerate(yaml.safe_load_all(text)):
        if doc is None:
            continue
        try:
            cards.append(ModelCard.model_validate(doc))
        except ValidationError as exc:
            raise SpecError(f"{source}: document {index}: {exc.errors()[0]['msg']}") from exc
    names = [c.name for c in cards]
    if len(names) != len(set(names)):
        raise SpecError(f"{source}: a model is listed twice")
    return cards


@lru_cache(maxsize=1)
def builtin_models() -> ModelTable:
    text = resources.files("hetpool.catalog").joinpath("data/models.yaml").read_text(encoding="utf-8")
    return ModelTable(parse_cards(text))
