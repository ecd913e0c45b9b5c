"""Llama conversion: logits and greedy generation equal Hugging Face ``transformers``' on random tiny models.

The references are random ``LlamaForCausalLM``s built and saved here (grouped-query attention,
tied and untied heads, sharded safetensors, linear rotary scaling); nothing is downloaded.
"""

from __future__ import annotations

import json

import pytest
import torch

from multimodal.convert.blocks import load_blocks
from multimodal.convert.llama import convert_llama, llama_config, load_llama
from multimodal.generation import generate
from multimodal.models import CausalLM

transformers = pytest.importorskip("transformers")
VOCAB = 96


def tiny_llama(folder, *, heads=4, kv_heads=2, tie=False, shard=False, rope_scaling=None, seed=0, **config):
    """Saves a random ``LlamaForCausalLM`` to ``folder``; returns it (eval mode, float32)."""
    torch.manual_seed(seed)
    hf_config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=heads,
        num_key_value_heads=kv_heads, max_position_embeddings=128, tie_word_embeddings=tie, rms_norm_eps=1e-5,
        rope_scaling=rope_scaling, **config,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(hf_config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)  # norms away from 1, so they matter
    model.save_pretrained(folder, max_shard_size="20KB" if shard else "5GB")
    return model


@pytest.mark.parametrize(
    ("kv_heads", "tie", "shard"), [(2, False, False), (1, True, True), (4, False, True)], ids=["gqa", "mqa-tied-sharded", "mha"]
)
def test_converted_llama_logits_equal_transformers(tmp_path, kv_heads, tie, shard):
    reference = tiny_llama(tmp_path, kv_heads=kv_heads, tie=tie, shard=shard)
    if shard:
        assert (tmp_path / "model.safetensors.index.json").is_file()
    model = load_llama(tmp_path)
    assert model.config.num_kv_heads == kv_heads and (model.head.weight is model.embedding.weight) == tie
    tokens = torch.randint(0, VOCAB, (3, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = reference(tokens).logits, model(tokens)
    assert (expected - got).abs().max() < 1e-4


def test_greedy_generation_and_cached_decoding_equal_transformers(tmp_path):
    reference = tiny_llama(tmp_path)
    model = load_llama(tmp_path)
    prompt = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                                      do_sample=False, min_new_tokens=20, pad_token_id=0, eos_token_id=None)  # fmt: skip
    got = generate(model, prompt, 20, temperature=0)
    assert torch.equal(got, expected)
    state = model.new_state()
    with torch.no_grad():
        steps = torch.cat([model(expected[:, i : i + 1], state=state) for i in range(expected.shape[1])], 1)
        torch.testing.assert_close(steps, reference(expected).logits, atol=1e-4, rtol=0)
    assert state.layers[0].keys.shape[1] == 2  # the cache holds the key/value heads only


def test_linear_rotary_scaling_converts(tmp_path):
    reference = tiny_llama(tmp_path, rope_scaling={"rope_type": "linear", "factor": 4.0})
    model = load_llama(tmp_path)
    assert model.config.rotary_scaling == "linear" and model.config.rotary_scale == 4.0
    tokens = torch.randint(0, VOCAB, (1, 100))
    with torch.no_grad():
        assert (reference(tokens).logits - model(tokens)).abs().max() < 1e-4


def test_unsupported_variants_are_refused_by_name(tmp_path):
    tiny_llama(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    with pytest.raises(ValueError, match="'yarn'"):
        llama_config({**config, "rope_parameters": {"rope_type": "yarn", "factor": 2.0}})
    with pytest.raises(ValueError, match="activation 'gelu'"):
        llama_config({**config, "hidden_act": "gelu"})
    with pytest.raises(ValueError, match="not llama"):
        llama_config({**config, "model_type": "mistral"})


def test_convert_writes_an_export_that_init_from_loads(tmp_path):
    reference = tiny_llama(tmp_path / "hf")
    out = convert_llama(tmp_path / "hf", tmp_path / "converted")
    assert sorted(path.name for path in out.iterdir()) == ["blocks.safetensors", "config.json"]  # no tokenizer.json
    model = CausalLM(llama_config(json.loads((tmp_path / "hf" / "config.json").read_text()))).eval()
    load_blocks(model, out, ["blocks", "embeddings", "head"])
    tokens = torch.randint(0, VOCAB, (2, 30))
    with torch.no_grad():
        assert (reference(tokens).logits - model(tokens)).abs().max() < 1e-4
