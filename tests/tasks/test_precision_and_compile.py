"""Every task trains under bf16-mixed and 16-mixed, compiles (``compile: true``) and takes a fused AdamW.

Tiny configs, a couple of steps each, on CPU: what runs here is what a GPU run would run, minus the
device. The compiled model is held to the eager one on the same batch.
"""

import functools

import pytest
import pytorch_lightning as pl
import torch

import tasks.finetuning
from tasks.cli import MultimodalCLI, task_class_from_args
from tasks.optim import fused_on_cuda

TASK_CONFIGS = {
    "music": ["configs/music_continuation.yaml", "configs/music_continuation_tiny.yaml"],
    "text": ["configs/text_lm.yaml", "configs/text_lm_tiny.yaml"],
    "vit": ["configs/vit_classification.yaml", "configs/vit_classification_tiny.yaml"],
    "image_generation": ["configs/image_generation.yaml", "configs/image_generation_tiny.yaml"],
    "super_resolution": ["configs/super_resolution.yaml", "configs/super_resolution_tiny.yaml"],
    "super_resolution_autoregressive": [
        "configs/super_resolution.yaml", "configs/super_resolution_autoregressive.yaml",
        "configs/super_resolution_tiny.yaml",
    ],
}  # fmt: skip


def _cli(name: str, root, *overrides: str) -> MultimodalCLI:
    argv = [arg for path in TASK_CONFIGS[name] for arg in ("--config", str(root / path))]
    argv += ["--trainer.logger", "false", *overrides]
    task = task_class_from_args(argv)
    return MultimodalCLI(argv, data_links=task.data_links, run=False)


def _fit(cli: MultimodalCLI, precision: str, steps: int = 2, clip: float | None = 1.0) -> pl.Trainer:
    trainer = pl.Trainer(
        accelerator="cpu", precision=precision, max_steps=steps, limit_val_batches=0, num_sanity_val_steps=0,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        gradient_clip_val=clip,
    )  # fmt: skip
    pl.seed_everything(0, verbose=False)  # the same batches for runs that are compared
    trainer.fit(cli.model, datamodule=cli.datamodule)
    return trainer


def _finite_parameters(module: torch.nn.Module) -> bool:
    return all(torch.isfinite(p).all() for p in module.parameters())


@pytest.fixture
def root(tmp_path, monkeypatch):
    from conftest import ROOT

    monkeypatch.chdir(tmp_path)  # outputs of the runs land in tmp_path
    return ROOT


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
@pytest.mark.parametrize("name", list(TASK_CONFIGS))
def test_every_task_trains_under_mixed_precision_with_clipping(name, precision, root):
    cli = _cli(name, root)
    before = [p.detach().clone() for p in cli.model.parameters()]
    trainer = _fit(cli, precision)
    assert trainer.global_step == 2
    assert _finite_parameters(cli.model)
    assert any(not torch.equal(a, b) for a, b in zip(before, cli.model.parameters(), strict=True)), "nothing trained"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TASK_CONFIGS))
def test_every_task_compiles_and_the_compiled_loss_equals_eager(name, root):
    eager, compiled = _cli(name, root), _cli(name, root, "--model.init_args.compile", "true")
    compiled.model.load_state_dict(eager.model.state_dict())
    eager.datamodule.setup("fit")
    batch = next(iter(eager.datamodule.train_dataloader()))
    eager.model.train(False), compiled.model.train(False)
    with torch.no_grad():
        torch.manual_seed(0)
        expected = eager.model.training_step(batch, 0)
        torch.manual_seed(0)
        got = compiled.model.training_step(batch, 0)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    compiled.model.train()
    trainer = _fit(compiled, "32-true", steps=1)
    assert trainer.global_step == 1 and _finite_parameters(compiled.model)


def test_compile_option_compiles_the_blocks_and_keeps_the_state_dict_keys(root):
    eager, compiled = _cli("music", root), _cli("music", root, "--model.init_args.compile", "true")
    assert compiled.model.hparams["compile"] is True
    assert list(compiled.model.state_dict()) == list(eager.model.state_dict())
    stack = compiled.model.model.decoder
    assert stack._compiled_blocks is not None and len(stack._compiled_blocks) == len(stack.blocks)


def test_fused_adamw_trains_like_the_unfused_one_with_clipping_under_mixed_precision(root, monkeypatch):
    # PyTorch has the fused Adam kernel on CPU too: fuse there, as the tasks do on CUDA.
    reference = _cli("text", root)
    fused = _cli("text", root)
    fused.model.load_state_dict(reference.model.state_dict())
    _fit(reference, "32-true", steps=3)
    monkeypatch.setattr(tasks.finetuning, "fused_on_cuda", functools.partial(fused_on_cuda, device_types=("cpu",)))
    trainer = _fit(fused, "32-true", steps=3)
    optimizer = trainer.optimizers[0]
    assert optimizer.defaults["fused"] is True and optimizer.param_groups[1]["weight_decay"] == 0.0
    for got, expected in zip(fused.model.parameters(), reference.model.parameters(), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    # Lightning refuses clipping with an optimizer that unscales inside its step; ours does not.
    again = _cli("text", root)
    assert _fit(again, "bf16-mixed", steps=2).optimizers[0].defaults["fused"] is True


def test_fused_on_cuda_leaves_cpu_optimizers_and_explicit_choices_alone():
    weight = torch.nn.Parameter(torch.randn(3, 3))
    plain = torch.optim.AdamW([weight])
    assert fused_on_cuda(plain) is plain  # CPU tensors: unchanged
    explicit = torch.optim.AdamW([weight], foreach=False)
    assert fused_on_cuda(explicit, device_types=("cpu",)) is explicit
    sgd = torch.optim.SGD([weight], lr=0.1)
    assert fused_on_cuda(sgd, device_types=("cpu",)) is sgd
