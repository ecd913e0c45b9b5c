"""Every task trains under mixed precision, compiles (``compile: true``) and takes a fused AdamW.

Tiny configs, a couple of steps each, on CPU: what runs here is what a GPU run would run, minus the
device. The compiled model is held to the eager one on the same batch. On a CPU Lightning runs
``16-mixed`` as bf16, so the float16 path with its GradScaler is tested on the optimizer directly
(and through Lightning when CUDA is there).
"""

import copy
import functools
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import tasks.finetune
from tasks.cli import MultimodalCLI, task_class_from_args
from tasks.optim import fused_on_cuda

TASK_CONFIGS = {
    "music": ["configs/music_continuation.yaml", "configs/music_continuation_tiny.yaml"],
    "text": ["configs/text_lm.yaml", "configs/text_lm_tiny.yaml"],
    "vit": ["configs/image_classification.yaml", "configs/image_classification_tiny.yaml"],
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
    ROOT = Path(__file__).resolve().parents[2]

    monkeypatch.chdir(tmp_path)  # outputs of the runs land in tmp_path
    return ROOT


@pytest.mark.parametrize("name", list(TASK_CONFIGS))
def test_every_task_trains_under_mixed_precision_with_clipping(name, root):
    cli = _cli(name, root)
    before = [p.detach().clone() for p in cli.model.parameters()]
    trainer = _fit(cli, "bf16-mixed")
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
    monkeypatch.setattr(tasks.finetune, "fused_on_cuda", functools.partial(fused_on_cuda, device_types=("cpu",)))
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


def test_fused_adamw_with_a_grad_scaler_unscales_before_clipping_like_the_unfused_one():
    from tasks.optim import with_fused_kernel

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    fused_model = copy.deepcopy(reference)
    plain = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    fused = with_fused_kernel(torch.optim.AdamW(fused_model.parameters(), lr=1e-2))
    assert fused.defaults["fused"] is True
    for model, optimizer in ((reference, plain), (fused_model, fused)):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        torch.manual_seed(1)
        for _ in range(3):
            loss = model(torch.randn(32, 8)).pow(2).mean() * 100  # large gradients: clipping acts
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # what Lightning does before clipping when the optimizer allows it
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            assert norm > 0.5
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    for got, expected in zip(fused_model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="float16 mixed precision through Lightning needs CUDA")
def test_a_task_trains_under_16_mixed_on_cuda_with_clipping_and_fused_adamw(root):
    cli = _cli("text", root)
    trainer = pl.Trainer(accelerator="gpu", devices=1, precision="16-mixed", max_steps=2, limit_val_batches=0,
                         logger=False, enable_checkpointing=False, gradient_clip_val=1.0)  # fmt: skip
    trainer.fit(cli.model, datamodule=cli.datamodule)
    assert trainer.optimizers[0].defaults["fused"] is True and _finite_parameters(cli.model)
