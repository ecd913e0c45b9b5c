"""Export / import of blocks: round trips, selections, strict shape checks, resized position tables."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from multimodal.convert.blocks import (
    export_blocks,
    load_blocks,
    read_export,
    resize_positions,
    resize_relative_table,
)
from multimodal.layers.lora import LoRAConfig, apply_lora, lora_parameters
from multimodal.models import CausalLM, CausalLMConfig


def _model(seed=0, **overrides) -> CausalLM:
    torch.manual_seed(seed)
    values = dict(vocab_size=60, dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=32, dropout=0.0)
    return CausalLM(CausalLMConfig(**{**values, **overrides})).eval()


def _tokens(vocab=60, length=24):
    return torch.randint(0, vocab, (2, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("position", ["learned", "relative", "sinusoidal"])
def test_export_then_import_gives_identical_outputs(tmp_path, position):
    source, target = _model(0, position=position), _model(1, position=position)
    export_blocks(source, tmp_path)
    report = load_blocks(target, tmp_path, ["blocks", "embeddings", "head"])
    assert len(report.loaded) == len(target.state_dict()) and not report.resized
    torch.testing.assert_close(target(_tokens()), source(_tokens()), atol=0, rtol=0)


def test_export_is_safetensors_and_json_without_pickle(tmp_path):
    export_blocks(_model(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocks.safetensors", "config.json"]
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["format"] == "multimodal-blocks" and meta["model"]["dim"] == 32 and meta["causal"] is True
    with safe_open(str(tmp_path / "blocks.safetensors"), "pt") as handle:
        names = set(handle.keys())
    assert "head.weight" not in names  # tied: written once, as the embedding
    assert {"stack.norm.weight", "stack.blocks.1.ff.down.weight", "embedding.weight"} <= names


def test_blocks_only_go_into_a_model_with_another_vocabulary(tmp_path):
    text, music = _model(0, vocab_size=300), _model(1, vocab_size=40)
    embedding_before = music.embedding.weight.detach().clone()
    export_blocks(text, tmp_path)
    report = load_blocks(music, tmp_path, ["blocks"])
    assert all(".blocks." in n or n.startswith("decoder.norm") for n in report.loaded)
    torch.testing.assert_close(music.decoder.blocks[1].ff.up.weight, text.decoder.blocks[1].ff.up.weight)
    torch.testing.assert_close(music.embedding.weight, embedding_before)  # new embeddings untouched
    hidden = torch.randn(2, 10, 32)
    torch.testing.assert_close(music.decoder(hidden), text.decoder(hidden), atol=0, rtol=0)


def test_first_k_blocks_selection(tmp_path):
    source, target = _model(0, num_layers=3), _model(1, num_layers=3)
    export_blocks(source, tmp_path)
    load_blocks(target, tmp_path, ["blocks[:1]"])
    torch.testing.assert_close(target.decoder.blocks[0].ff.up.weight, source.decoder.blocks[0].ff.up.weight)
    assert not torch.equal(target.decoder.blocks[1].ff.up.weight, source.decoder.blocks[1].ff.up.weight)


def test_shape_mismatch_error_lists_every_name_and_the_fix(tmp_path):
    export_blocks(_model(0, ff_dim=64, num_layers=3), tmp_path)
    with pytest.raises(ValueError) as error:
        load_blocks(_model(1, ff_dim=48), tmp_path, ["blocks"])
    message = str(error.value)
    for layer in (0, 1):
        assert f"shape mismatch: stack.blocks.{layer}.ff.up.weight: model (48, 32), file (64, 32)" in message
        assert f"stack.blocks.{layer}.ff.down.weight" in message
    assert "unexpected in file: stack.blocks.2.attention.to_qkv.weight" in message
    assert "config ff_dim: model 48, file 64" in message
    assert (
        "Fix: build the model with the file's sizes (dim=32, num_layers=3, num_heads=4, ff_dim=64" in message
    )


def test_head_count_mismatch_is_caught_although_shapes_agree(tmp_path):
    export_blocks(_model(0, num_heads=4), tmp_path)
    with pytest.raises(ValueError, match="config num_heads: model 8, file 4"):
        load_blocks(_model(1, num_heads=8), tmp_path, ["blocks"])


def test_non_strict_load_skips_mismatches(tmp_path):
    export_blocks(_model(0, ff_dim=64), tmp_path)
    target = _model(1, ff_dim=48)
    report = load_blocks(target, tmp_path, ["blocks"], strict=False)
    assert (
        "decoder.blocks.0.ff.up.weight" in report.skipped
        and "decoder.blocks.0.attention.to_qkv.weight" in report.loaded
    )


def test_learned_positions_are_cropped_or_interpolated(tmp_path):
    source = _model(0, position="learned", max_seq_len=32)
    export_blocks(source, tmp_path)
    shorter = _model(1, position="learned", max_seq_len=16)
    report = load_blocks(shorter, tmp_path, ["blocks", "embeddings", "head"])
    assert report.resized == {"decoder.positions.weight": ((32, 32), (16, 32))}
    torch.testing.assert_close(shorter(_tokens(length=16)), source(_tokens(length=16)), atol=0, rtol=0)
    longer = _model(2, position="learned", max_seq_len=63)
    load_blocks(longer, tmp_path, ["embeddings"])
    table, old = longer.decoder.positions.weight.detach(), source.decoder.positions.weight.detach()
    torch.testing.assert_close(table[::2], old)  # 63 = 2 * 32 - 1: every other entry is an old one
    torch.testing.assert_close(table[1::2], (old[:-1] + old[1:]) / 2)


def test_a_vocabulary_grown_at_its_end_keeps_the_old_rows_and_the_old_ids_logits(tmp_path):
    """New ids after the old ones (the AHEAD ids of given notes): the file's token rows are copied, the new
    rows keep the model's own initialisation, and a sequence of old ids gets the old model's logits for them."""
    source = _model(0)
    export_blocks(source, tmp_path)
    grown = _model(1, vocab_size=64)
    before = {name: tensor.detach().clone() for name, tensor in grown.state_dict().items()}
    report = load_blocks(grown, tmp_path, ["blocks", "embeddings", "head"])
    tables = {name: shapes for name, shapes in report.resized.items()}
    assert tables and all(shapes[0][0] == 60 and shapes[1][0] == 64 for shapes in tables.values())
    for name in tables:
        torch.testing.assert_close(grown.state_dict()[name][60:], before[name][60:], atol=0, rtol=0)
    torch.testing.assert_close(grown(_tokens())[..., :60], source(_tokens()), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="shape mismatch"):  # a smaller vocabulary is not a grown one
        load_blocks(_model(2, vocab_size=50), tmp_path, ["embeddings"])


def test_relative_table_for_a_longer_model_computes_the_same_clipped_attention(tmp_path):
    source = _model(0, position="relative", max_seq_len=16)  # distances clipped at 15
    export_blocks(source, tmp_path)
    target = _model(1, position="relative", max_seq_len=40)
    report = load_blocks(target, tmp_path, ["blocks", "embeddings", "head"])
    assert report.resized["decoder.blocks.0.attention.position.weight"] == ((4, 16, 8), (4, 40, 8))
    tokens = _tokens(length=40)  # distances beyond 15 occur: the padded rows repeat the clipped edge
    torch.testing.assert_close(target(tokens), source(tokens), atol=1e-5, rtol=1e-5)


def test_relative_table_resize_by_hand():
    table = torch.arange(5.0).view(1, 5, 1)  # bidirectional, k = 2: distances -2..2
    assert resize_relative_table(table, 9, causal=False).flatten().tolist() == [0, 0, 0, 1, 2, 3, 4, 4, 4]
    assert resize_relative_table(table, 3, causal=False).flatten().tolist() == [1, 2, 3]
    causal = torch.arange(3.0).view(1, 3, 1)  # k = 2: distances -2..0
    assert resize_relative_table(causal, 5, causal=True).flatten().tolist() == [0, 0, 0, 1, 2]


@pytest.mark.parametrize(("old", "new"), [((4, 4), (6, 6)), ((6, 6), (4, 4)), ((4, 6), (8, 3))])
def test_grid_positions_resize_like_timm(old, new):
    timm_layers = pytest.importorskip("timm.layers")
    table = torch.randn(1, 1 + old[0] * old[1], 16)
    expected = timm_layers.resample_abs_pos_embed(table, list(new), list(old), num_prefix_tokens=1)
    got = resize_positions(table, 1 + new[0] * new[1], old, new)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_lora_model_exports_merged_weights(tmp_path):
    model = _model(0)
    apply_lora(model, LoRAConfig(rank=2, projections=["q", "v", "out"]))
    with torch.no_grad():
        for parameter in lora_parameters(model).values():
            parameter.normal_(0, 0.1)
    export_blocks(model, tmp_path)
    assert not any("lora" in name for name in read_export(tmp_path).tensors)
    plain = _model(1)
    load_blocks(plain, tmp_path, ["blocks", "embeddings", "head"])
    torch.testing.assert_close(plain(_tokens()), model(_tokens()), atol=1e-5, rtol=1e-5)
    assert lora_parameters(model)  # the exported model keeps its adapters


def test_missing_source_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="multimodal export"):
        load_blocks(_model(), tmp_path)
    with pytest.raises(ValueError, match="unknown part 'block'"):
        export_blocks(_model(), tmp_path)
        load_blocks(_model(), tmp_path, ["block"])
