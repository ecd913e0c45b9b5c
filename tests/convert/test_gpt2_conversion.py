"""GPT-2 conversion: logits equal Hugging Face ``transformers``' on the same input (float32, 1e-4).

The reference models are random tiny ``GPT2LMHeadModel``s saved to a temporary folder; nothing is
downloaded.
"""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import GPT2_VOCAB_SIZE, tiny_gpt2

from multimodal.convert.blocks import load_blocks, read_export
from multimodal.convert.gpt2 import convert_gpt2, gpt2_config, load_gpt2, load_gpt2_tokenizer
from multimodal.models import CausalLM

pytest.importorskip("transformers")
TEXTS = ["the world", "def there in a world\n\n", "über 中文 😀 the"]


@pytest.mark.parametrize(("weights", "tokenizer"), [("safetensors", "files"), ("bin", "json")])
def test_converted_gpt2_logits_equal_transformers(tmp_path, weights, tokenizer):
    reference = tiny_gpt2(tmp_path, weights=weights, tokenizer=tokenizer)
    model = load_gpt2(tmp_path)
    tokens = torch.randint(0, GPT2_VOCAB_SIZE, (3, 50), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = reference(tokens).logits, model(tokens)
    assert (expected - got).abs().max() < 1e-4
    assert model.config.activation == "gelu_tanh" and model.config.position == "learned"
    assert model.head.weight is model.embedding.weight  # tied, as GPT-2's


def test_untied_gpt2_keeps_its_own_head(tmp_path):
    reference = tiny_gpt2(tmp_path, tie_word_embeddings=False, n_inner=48)
    model = load_gpt2(tmp_path)
    assert model.head.weight is not model.embedding.weight and model.config.ff_dim == 48
    tokens = torch.randint(0, GPT2_VOCAB_SIZE, (2, 20))
    with torch.no_grad():
        assert (reference(tokens).logits - model(tokens)).abs().max() < 1e-4


def test_incremental_decoding_of_the_converted_model_matches_transformers(tmp_path):
    reference = tiny_gpt2(tmp_path)
    model = load_gpt2(tmp_path)
    tokens = torch.randint(0, GPT2_VOCAB_SIZE, (1, 12))
    state = model.new_state()
    with torch.no_grad():
        steps = [model(tokens[:, i : i + 1], state=state) for i in range(tokens.shape[1])]
        torch.testing.assert_close(torch.cat(steps, 1), reference(tokens).logits, atol=1e-4, rtol=0)


def test_converted_tokenizer_gives_transformers_ids(tmp_path):
    import transformers

    tiny_gpt2(tmp_path)
    reference = transformers.GPT2TokenizerFast.from_pretrained(str(tmp_path))
    tokenizer = load_gpt2_tokenizer(tmp_path)
    for text in TEXTS:
        assert tokenizer.encode(text) == reference(text)["input_ids"]
    assert tokenizer.eos_id == GPT2_VOCAB_SIZE - 1


def test_convert_writes_an_export_that_init_from_loads(tmp_path):
    reference = tiny_gpt2(tmp_path / "hf")
    out = convert_gpt2(tmp_path / "hf", tmp_path / "converted")
    assert sorted(p.name for p in out.iterdir()) == ["blocks.safetensors", "config.json", "tokenizer.json"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["model"]["num_heads"] == 4 and meta["tied"] == {"head.weight": "embedding.weight"}
    model = CausalLM(gpt2_config(json.loads((tmp_path / "hf" / "config.json").read_text()))).eval()
    report = load_blocks(model, out, ["blocks", "embeddings", "head"])
    assert len(report.loaded) == len(model.state_dict())
    tokens = torch.randint(0, GPT2_VOCAB_SIZE, (2, 30))
    with torch.no_grad():
        assert (reference(tokens).logits - model(tokens)).abs().max() < 1e-4
    assert set(read_export(out).tensors) >= {
        "stack.blocks.0.attention.to_qkv.weight",
        "stack.positions.weight",
    }


def test_unsupported_gpt2_options_are_named():
    base = {"vocab_size": 10, "n_embd": 8, "n_layer": 1, "n_head": 2, "n_positions": 16}
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        gpt2_config({**base, "scale_attn_by_inverse_layer_idx": True})
    with pytest.raises(ValueError, match="activation"):
        gpt2_config({**base, "activation_function": "swish"})


def test_a_folder_missing_a_weight_is_one_error_naming_it(tmp_path):
    from safetensors.torch import load_file, save_file

    tiny_gpt2(tmp_path, weights="safetensors")
    state = load_file(str(tmp_path / "model.safetensors"))
    dropped = next(name for name in state if name.endswith("ln_f.weight"))
    save_file({name: tensor for name, tensor in state.items() if name != dropped}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"config\.json: the weights do not fit the config: missing \['decoder\.norm\.weight'\]"):
        load_gpt2(tmp_path)
