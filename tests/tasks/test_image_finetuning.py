"""Pretrained blocks in the image-generation and super-resolution tasks, and two-stack models."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from multimodal.convert.blocks import export_blocks, read_export
from multimodal.models.config import ConditionalSuperResolutionConfig, ImageTransformerConfig
from multimodal.models.image_transformer import ImageTransformer
from multimodal.models.super_resolution import ConditionalImageTransformer
from tasks.checkpoint import read_task_checkpoint
from tasks.image_generation import ImageGeneration
from tasks.super_resolution import AutoregressiveSuperResolution

BLOCKS = dict(dim=16, num_heads=2, ff_dim=32, dropout=0.0)
PIXELS = dict(BLOCKS, num_layers=2, height=4, width=4, channels=1, num_levels=16,
              local_query_shape=(2, 2), local_memory_shape=(1, 2))  # fmt: skip
CONDITIONAL = dict(BLOCKS, num_layers=1, scale=2, crop_size=8, num_levels=16,
                   decoder_layers=2, decoder_query_shape=(2, 6), decoder_memory_shape=(1, 3),
                   local_query_shape=(2, 2), local_memory_shape=(1, 1))  # fmt: skip


def _conditional() -> ConditionalImageTransformer:
    torch.manual_seed(0)
    return ConditionalImageTransformer(ConditionalSuperResolutionConfig(**CONDITIONAL))


def test_export_of_a_two_stack_model_needs_the_stack_and_writes_only_that_one(tmp_path):
    model = _conditional()
    with pytest.raises(ValueError, match=r"2 Transformer stacks.*--stack NAME"):
        export_blocks(model, tmp_path / "none")
    export_blocks(model, tmp_path / "decoder", stack="decoder")
    export_blocks(model, tmp_path / "encoder", stack="encoder")  # the unique prefix of encoder.encoder
    decoder, encoder = read_export(tmp_path / "decoder").tensors, read_export(tmp_path / "encoder").tensors
    torch.testing.assert_close(decoder["stack.blocks.1.ff.up.weight"], model.decoder.blocks[1].ff.up.weight)
    torch.testing.assert_close(encoder["stack.blocks.0.ff.up.weight"], model.encoder.encoder.blocks[0].ff.up.weight)
    assert not any(name.startswith(("encoder.encoder.", "decoder.")) for name in decoder)
    assert not any(name.startswith(("encoder.encoder.", "decoder.")) for name in encoder)
    assert "stack.blocks.1.ff.up.weight" not in encoder  # one encoder layer only


def test_a_two_stack_checkpoint_is_read_by_naming_the_stack(tmp_path):
    model = _conditional()
    path = tmp_path / "sr.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, path)
    with pytest.raises(ValueError, match=r"cannot tell which Transformer stack among \['decoder', 'encoder.encoder'\]"):
        read_task_checkpoint(path)
    tensors = read_task_checkpoint(path, stack="decoder").tensors
    torch.testing.assert_close(tensors["stack.blocks.0.attention.to_qkv.weight"],
                               model.decoder.blocks[0].attention.to_qkv.weight)  # fmt: skip
    assert not any(name.startswith("encoder.encoder.blocks") for name in tensors)


def test_super_resolution_decoder_starts_from_image_transformer_blocks(tmp_path):
    torch.manual_seed(1)
    source = ImageTransformer(ImageTransformerConfig(**PIXELS))
    export_blocks(source, tmp_path / "pixels")
    strict = AutoregressiveSuperResolution(CONDITIONAL, finetune={"init_from": str(tmp_path / "pixels"), "init_select": ["blocks"],
                                                   "init_stack": "decoder"})  # fmt: skip
    with pytest.raises(ValueError, match=r"missing in file: stack\.blocks\.0\.cross_attention\.to_q\.weight"):
        strict.load_pretrained()  # the pixel model has no cross-attention: strict says so
    task = AutoregressiveSuperResolution(CONDITIONAL, finetune={"init_from": str(tmp_path / "pixels"), "init_select": ["blocks"],
                                                 "init_stack": "decoder", "strict": False})  # fmt: skip
    before = {name: value.clone() for name, value in task.model.state_dict().items()}
    task.load_pretrained()
    loaded = task.model.state_dict()
    for layer in range(2):
        for name in ("attention.to_qkv.weight", "ff.up.weight", "ff.down.bias", "norm_attention.weight"):
            torch.testing.assert_close(loaded[f"decoder.blocks.{layer}.{name}"],
                                       source.state_dict()[f"decoder.blocks.{layer}.{name}"], atol=0, rtol=0)  # fmt: skip
        torch.testing.assert_close(loaded[f"decoder.blocks.{layer}.cross_attention.to_q.weight"],
                                   before[f"decoder.blocks.{layer}.cross_attention.to_q.weight"], atol=0, rtol=0)  # fmt: skip
    for name, value in before.items():
        if not name.startswith("decoder.blocks."):
            torch.testing.assert_close(loaded[name], value, atol=0, rtol=0)  # encoder, embeddings, head untouched


def test_image_generation_fine_tunes_with_frozen_pretrained_blocks(tmp_path):
    torch.manual_seed(2)
    source = ImageTransformer(ImageTransformerConfig(**PIXELS))
    export_blocks(source, tmp_path / "pixels")
    task = ImageGeneration(
        PIXELS, optimizer=lambda params: torch.optim.SGD(params, lr=0.5), warmup_steps=0, num_samples=0,
        finetune={"init_from": str(tmp_path / "pixels"), "init_select": ["blocks"], "freeze": ["blocks"]},
    )  # fmt: skip
    head_before = task.model.head.weight.detach().clone()
    tokens = torch.randint(0, 16, (8, 16), generator=torch.Generator().manual_seed(0))
    loader = DataLoader(list(zip(tokens, torch.zeros(8, dtype=torch.long), strict=True)), batch_size=4)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(task, train_dataloaders=loader)
    expected = dict(source.named_parameters())
    for name, parameter in task.model.decoder.blocks.named_parameters(prefix="decoder.blocks"):
        assert not parameter.requires_grad
        torch.testing.assert_close(parameter, expected[name], atol=0, rtol=0)
    assert not torch.equal(task.model.head.weight, head_before)  # the new head trained
