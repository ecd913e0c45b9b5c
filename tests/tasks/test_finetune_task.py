"""Fine-tuning inside a task: pretrained weights in setup, frozen parameters stay put, LoRA, lr split."""

from __future__ import annotations

import logging

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from multimodal.convert.blocks import export_blocks
from multimodal.models import CausalLM, CausalLMConfig
from tasks.causal_lm import CausalLMTask
from tasks.checkpoint import load_task
from tasks.finetune import FineTuneConfig

pytestmark = pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")
CONFIG = dict(vocab_size=50, dim=32, num_layers=2, num_heads=4, ff_dim=64, max_seq_len=16, dropout=0.0)


def _loader() -> DataLoader:
    tokens = torch.randint(0, 50, (16, 17), generator=torch.Generator().manual_seed(0))
    return DataLoader(tokens, batch_size=4)


def _fit(task: CausalLMTask, steps: int = 2, **trainer_options) -> pl.Trainer:
    trainer = pl.Trainer(
        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0, **trainer_options,
    )  # fmt: skip
    trainer.fit(task, train_dataloaders=_loader())
    return trainer


def _sgd(params):
    return torch.optim.SGD(params, lr=0.5)


@pytest.fixture
def pretrained(tmp_path):
    torch.manual_seed(123)
    source = CausalLM(CausalLMConfig(**CONFIG))
    return source, export_blocks(source, tmp_path / "export")


def test_frozen_parameters_are_unchanged_after_training_steps(pretrained):
    source, folder = pretrained
    task = CausalLMTask(CONFIG, optimizer=_sgd, warmup_steps=0,
                        finetune=FineTuneConfig(init_from=str(folder), freeze=["embeddings", "blocks[:1]"]))  # fmt: skip
    frozen = {n for n, p in task.model.named_parameters() if not p.requires_grad}
    assert frozen == {
        "embedding.weight",
        *(n for n, _ in task.model.decoder.blocks[0].named_parameters(prefix="decoder.blocks.0")),
    }
    _fit(task)
    expected = dict(source.named_parameters())
    for name, parameter in task.model.named_parameters():
        if name in frozen:
            torch.testing.assert_close(
                parameter, expected[name], atol=0, rtol=0
            )  # the pretrained value, untouched
        else:
            assert not torch.equal(parameter, expected[name]), f"{name} did not train"


def test_lora_task_trains_only_adapters_and_new_parts(pretrained, tmp_path):
    source, folder = pretrained
    finetune = {"init_from": str(folder), "init_select": ["blocks"], "freeze": ["blocks"],
                "lora": {"rank": 2, "alpha": 4, "projections": ["q", "v"]}}  # fmt: skip
    task = CausalLMTask(CONFIG, optimizer=_sgd, warmup_steps=0, finetune=finetune)
    trainer = _fit(task)
    for name, parameter in task.model.decoder.named_parameters(prefix="decoder"):
        if "lora" not in name:
            torch.testing.assert_close(parameter, dict(source.named_parameters())[name], atol=0, rtol=0)
    assert not torch.equal(task.model.embedding.weight, source.embedding.weight)  # new, trained
    lora_b = task.model.decoder.blocks[0].attention.to_qkv.lora_b
    assert lora_b.abs().sum() > 0
    # The checkpoint rebuilds the adapters from the hyper-parameters and loads without unpickling.
    trainer.save_checkpoint(tmp_path / "lora.ckpt")
    reloaded, _, _ = load_task(tmp_path / "lora.ckpt")
    tokens = torch.randint(0, 50, (2, 16))
    torch.testing.assert_close(reloaded(tokens), task.eval()(tokens))


def test_pretrained_parameters_get_the_scaled_learning_rate(pretrained):
    _, folder = pretrained
    task = CausalLMTask(
        CONFIG, warmup_steps=0, optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3),
        finetune=FineTuneConfig(init_from=str(folder), init_select=["blocks"], pretrained_lr_scale=0.1),
    )  # fmt: skip
    trainer = _fit(task, steps=1)
    names = {id(p): n for n, p in task.model.named_parameters()}
    lrs = {
        names[id(p)]: group["initial_lr"]
        for group in trainer.optimizers[0].param_groups
        for p in group["params"]
    }
    assert lrs["decoder.blocks.0.attention.to_qkv.weight"] == pytest.approx(1e-4)
    assert lrs["decoder.norm.weight"] == pytest.approx(1e-4)
    assert lrs["embedding.weight"] == pytest.approx(1e-3)  # new: not in init_select
    decay = {
        names[id(p)]: group["weight_decay"]
        for group in trainer.optimizers[0].param_groups
        for p in group["params"]
    }
    assert decay["decoder.blocks.0.attention.to_qkv.bias"] == 0.0 and decay["embedding.weight"] > 0


def test_parameter_counts_are_printed_at_fit_start(pretrained, caplog):
    _, folder = pretrained
    task = CausalLMTask(CONFIG, optimizer=_sgd, finetune={"init_from": str(folder), "freeze": ["blocks"]})
    with caplog.at_level(logging.INFO, logger="pytorch_lightning"):
        _fit(task, steps=1)
    blocks = sum(p.numel() for p in task.model.decoder.blocks.parameters()) + 64
    assert f"{blocks:,} frozen" in caplog.text and "trainable" in caplog.text
    assert "loaded" in caplog.text and "init_from" in caplog.text


def test_bad_freeze_pattern_is_an_error_naming_real_names():
    with pytest.raises(ValueError, match=r"'decoder\.layers\.\*' matches no parameter.*embedding\.weight"):
        CausalLMTask(CONFIG, finetune={"freeze": ["decoder.layers.*"]})


def test_everything_frozen_is_an_error_with_the_fix():
    task = CausalLMTask(CONFIG, finetune={"freeze": ["*"]})
    with pytest.raises(ValueError, match="unfreeze some"):
        _fit(task, steps=1)


def test_vit_classification_fine_tunes_converted_blocks_with_a_new_head(tmp_path):
    from multimodal.models import ViT, ViTConfig
    from tasks.image_classification import ImageClassification

    sizes = dict(dim=32, num_layers=2, num_heads=4, ff_dim=64, image_size=16, patch_size=4, channels=3)
    torch.manual_seed(0)
    source = ViT(ViTConfig(**sizes, num_classes=1000))  # e.g. converted from timm at another size
    export_blocks(source, tmp_path / "vit")
    task = ImageClassification(
        model={**sizes, "image_size": 24, "num_classes": 5}, warmup_steps=0,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5, weight_decay=0.05),
        finetune={"init_from": str(tmp_path / "vit"), "init_select": ["blocks", "embeddings"], "freeze": ["blocks"],
                  "pretrained_lr_scale": 0.1},
    )  # fmt: skip
    images = torch.randn(8, 3, 24, 24)
    loader = DataLoader(list(zip(images, torch.randint(0, 5, (8,)), strict=True)), batch_size=4)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(task, train_dataloaders=loader)
    expected = dict(source.named_parameters())
    for name, parameter in task.model.encoder.blocks.named_parameters(prefix="encoder.blocks"):
        torch.testing.assert_close(parameter, expected[name], atol=0, rtol=0)
    assert task.model.encoder.positions.weight.shape == (1 + 36, 32)  # 4x4 grid interpolated to 6x6
    groups = trainer.optimizers[0].param_groups
    by_name = {
        n: g for g in groups for n, p in task.model.named_parameters() if any(p is q for q in g["params"])
    }
    assert by_name["cls_token"]["weight_decay"] == 0.0 and by_name["cls_token"][
        "initial_lr"
    ] == pytest.approx(0.05)
    assert (
        by_name["head.weight"]["initial_lr"] == pytest.approx(0.5)
        and by_name["head.weight"]["weight_decay"] > 0
    )
