"""Freeze patterns (parts, globs, regexes), parameter counts with tied weights, optimizer groups."""

from __future__ import annotations

import pytest
import torch

from multimodal.layers.lora import LoRAConfig, apply_lora
from multimodal.models import CausalLM, CausalLMConfig
from multimodal.models.parameters import (
    count_parameters,
    freeze,
    match_parameters,
    parameter_groups,
    scale_learning_rates,
    unfreeze,
)


def _model(**overrides) -> CausalLM:
    return CausalLM(
        CausalLMConfig.from_preset("tiny", vocab_size=50, num_layers=3, position="learned", **overrides)
    )


def test_pattern_forms_select_the_expected_names():
    model = _model()
    assert match_parameters(model, ["embeddings"]) == {"embedding.weight", "decoder.positions.weight"}
    assert match_parameters(model, ["head"]) == {"head.weight"}  # tied: the same tensor as embedding.weight
    first_two = match_parameters(model, ["blocks[:2]"])
    assert {name.split(".")[2] for name in first_two} == {"0", "1"}
    assert match_parameters(model, ["decoder.blocks.2.*"]) == match_parameters(model, ["blocks[2:]"])
    assert match_parameters(model, [r"re:decoder\.blocks\.\d\.ff\.up\.weight"]) == {
        f"decoder.blocks.{i}.ff.up.weight" for i in range(3)
    }
    assert "decoder.norm.weight" in match_parameters(model, ["blocks"])


def test_freezing_a_tied_head_freezes_the_embedding_too_and_counts_it_once():
    model = _model()
    total = sum(p.numel() for p in model.parameters())  # unique tensors
    freeze(model, ["head"])
    assert not model.embedding.weight.requires_grad
    counts = count_parameters(model)
    assert counts.frozen == model.embedding.weight.numel() and counts.total == total
    unfreeze(model, ["embeddings"])
    assert count_parameters(model).frozen == 0


def test_counts_by_part_and_lora():
    model = _model(tie_embeddings=False)
    freeze(model, ["*"])
    apply_lora(model, LoRAConfig(rank=2, projections=["q", "v"]))
    counts = count_parameters(model)
    assert counts.lora == counts.trainable == 3 * 2 * (2 * (32 + 32))  # 3 layers x (q, v) x r (in + out)
    assert set(counts.by_part) == {"blocks", "embeddings", "head", "lora"}
    assert "in LoRA adapters" in str(counts) and "frozen" in str(counts)


def test_groups_split_decay_and_pretrained_and_scale_once():
    model = _model()
    pretrained = {n for n in dict(model.named_parameters()) if n.startswith("decoder.")}
    groups = parameter_groups(model, pretrained, 0.1)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    optimizer = scale_learning_rates(torch.optim.AdamW(groups, lr=1e-3))
    for group in optimizer.param_groups:
        names = {n for n, p in model.named_parameters() if any(p is q for q in group["params"])}
        assert group["lr"] == pytest.approx(1e-4 if names <= pretrained else 1e-3)
        assert (group["weight_decay"] == 0.0) == all(p.dim() < 2 for p in group["params"])
