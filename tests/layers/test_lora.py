"""LoRA adapters: identity at start, the update a naive computation predicts, merge == unmerged."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from multimodal.layers import Decoder, MultiHeadAttention, TransformerConfig
from multimodal.layers.lora import LoRAConfig, LoRALinear, apply_lora, lora_parameters, merge_lora
from multimodal.models import CausalLM, CausalLMConfig


def _randomise_adapters(model: nn.Module, seed: int = 0) -> None:
    """B starts at zero (an identity update); give it values so the tests see a real update."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in lora_parameters(model).values():
            parameter.copy_(torch.randn(parameter.shape, generator=g) * 0.1)


def test_fresh_adapters_change_nothing():
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig.from_preset("tiny", vocab_size=50)).eval()
    tokens = torch.randint(0, 50, (2, 16))
    before = model(tokens)
    apply_lora(model, LoRAConfig(rank=4, projections=["q", "k", "v", "out"]))
    torch.testing.assert_close(model(tokens), before, atol=0, rtol=0)


@pytest.mark.parametrize("projections", [["q"], ["v"], ["q", "v"], ["k", "v"], ["q", "k", "v"]])
def test_fused_qkv_update_touches_only_the_chosen_projections(projections):
    """Naive reference: W_q, W_k, W_v as separate matrices, each chosen one + (alpha/r) B A."""
    torch.manual_seed(0)
    dim, rank, alpha = 12, 3, 6.0
    linear = nn.Linear(dim, 3 * dim)
    lora = LoRALinear.from_linear(
        linear, rank, alpha, [(i * dim, (i + 1) * dim) for i, p in enumerate("qkv") if p in projections]
    )
    _randomise_adapters(lora)
    x = torch.randn(4, 5, dim)
    weights = dict(zip("qkv", linear.weight.detach().split(dim), strict=True))
    adapters = iter(range(len(projections)))
    for name in "qkv":
        if name in projections:
            index = next(adapters)
            weights[name] = (
                weights[name] + alpha / rank * lora.lora_b[index].detach() @ lora.lora_a[index].detach()
            )
    expected = x @ torch.cat([weights[n] for n in "qkv"]).T + linear.bias.detach()
    torch.testing.assert_close(lora(x), expected, atol=1e-5, rtol=1e-5)


def test_merged_and_unmerged_outputs_are_equal():
    torch.manual_seed(0)
    config = CausalLMConfig.from_preset("tiny", vocab_size=50, position="relative", max_seq_len=32)
    model = CausalLM(config).eval()
    apply_lora(model, LoRAConfig(rank=4, alpha=8, projections=["q", "v", "out"]))
    _randomise_adapters(model)
    tokens = torch.randint(0, 50, (2, 20))
    unmerged = model(tokens)
    for module in model.modules():
        if isinstance(module, LoRALinear):
            module.merge()
    torch.testing.assert_close(model(tokens), unmerged, atol=1e-5, rtol=1e-5)
    plain = merge_lora(model)
    assert not any(isinstance(m, LoRALinear) for m in plain.modules()) and not lora_parameters(plain)
    torch.testing.assert_close(plain(tokens), unmerged, atol=1e-5, rtol=1e-5)


def test_unmerge_restores_the_pretrained_weight():
    torch.manual_seed(0)
    linear = nn.Linear(8, 8)
    original = linear.weight.detach().clone()
    lora = LoRALinear.from_linear(linear, 2, 4.0)
    _randomise_adapters(lora)
    lora.merge()
    assert not torch.allclose(lora.weight, original)
    lora.unmerge()
    torch.testing.assert_close(lora.weight.detach(), original)


def test_only_adapters_train_and_state_dict_keeps_pretrained_names():
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig.from_preset("tiny", vocab_size=50))
    names_before = set(model.state_dict())
    adapted = apply_lora(model, LoRAConfig(rank=2, projections=["q", "v"]))
    assert adapted == [f"decoder.blocks.{i}.attention.to_qkv" for i in range(2)]
    assert names_before <= set(model.state_dict())  # pretrained weights load by their usual names
    model(torch.randint(0, 50, (2, 8))).sum().backward()
    for name, parameter in model.named_parameters():
        if name.endswith(("lora_a", "lora_b")):
            assert parameter.requires_grad
        elif ".attention.to_qkv." in name:
            assert not parameter.requires_grad and parameter.grad is None
    # B is zero at start, so only B gets a gradient on the first step.
    assert all(p.grad is not None for n, p in lora_parameters(model).items() if n.endswith("lora_b"))


def test_cross_attention_maps_q_to_to_q_and_kv_to_slices():
    attention = MultiHeadAttention(16, 4, context_dim=8)
    apply_lora(attention, LoRAConfig(rank=2, projections=["q", "v"]))
    assert isinstance(attention.to_q, LoRALinear) and attention.to_kv.slices == [(16, 32)]
    assert not isinstance(attention.to_out, LoRALinear)


def test_lora_config_errors_name_the_choices():
    with pytest.raises(ValueError, match="choose among"):
        LoRAConfig(projections=["query"])
    with pytest.raises(ValueError, match="no MultiHeadAttention"):
        apply_lora(nn.Linear(3, 3), LoRAConfig())
    decoder = Decoder(TransformerConfig(dim=16, num_layers=1, num_heads=2, position="none"))
    apply_lora(decoder, LoRAConfig())
    with pytest.raises(ValueError, match="already has LoRA"):
        apply_lora(decoder, LoRAConfig())
