"""Image generation and super-resolution through the `multimodal` command: fit, reload, generate."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tasks.checkpoint import load_task
from tasks.cli import MultimodalCLI, main, task_class_from_args
from tasks.image_generation import ImageGeneration
from tasks.super_resolution import AutoregressiveSuperResolution, SuperResolution

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GENERATION = [
    "--config",
    str(CONFIGS / "image_generation.yaml"),
    "--config",
    str(CONFIGS / "image_generation_tiny.yaml"),
]
SUPER_RESOLUTION = [
    "--config", str(CONFIGS / "super_resolution.yaml"), "--config", str(CONFIGS / "super_resolution_tiny.yaml"),
]  # fmt: skip


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # every output of the runs lands in tmp_path
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    yield
    torch.set_num_threads(threads)


def test_configs_name_the_tasks_and_link_image_sizes_from_the_data():
    assert task_class_from_args(["fit", *GENERATION]) is ImageGeneration
    assert task_class_from_args(["fit", *SUPER_RESOLUTION]) is SuperResolution
    cli = MultimodalCLI(GENERATION, data_links=ImageGeneration.data_links, run=False)
    config = cli.model.config
    assert (config.height, config.width, config.channels, config.num_levels, config.num_classes) == (
        8,
        8,
        1,
        17,
        10,
    )
    assert config.local_grid_width == 8 and config.dim == 16  # derived; the tiny override won
    cli = MultimodalCLI(
        [*SUPER_RESOLUTION, "--data.init_args.scale=4"], data_links=SuperResolution.data_links, run=False
    )
    assert (cli.model.config.scale, cli.model.config.crop_size) == (4, 16)


@pytest.mark.parametrize(
    "extras,task",
    [
        (["image_generation_fashion_mnist.yaml"], ImageGeneration),
        (["image_generation_fashion_mnist.yaml", "image_generation_fashion_mnist_conditional.yaml"], ImageGeneration),
        (["super_resolution_autoregressive.yaml"], AutoregressiveSuperResolution),
    ],
)
def test_shipped_override_configs_parse_and_build(extras, task):
    base = "image_generation.yaml" if task is ImageGeneration else "super_resolution.yaml"
    args = [argument for name in [base, *extras] for argument in ("--config", str(CONFIGS / name))]
    cli = MultimodalCLI(args, data_links=task.data_links, run=False)
    assert isinstance(cli.model, task) and cli.model.config.attention == "local2d"
    if "image_generation_fashion_mnist_conditional.yaml" in extras:
        config = cli.model.config
        assert config.class_conditional and (config.num_levels, config.num_classes, config.dim) == (16, 10, 64)
        assert not any("EMAWeightAveraging" in type(c).__name__ for c in cli.trainer.callbacks)


def test_image_generation_fit_reload_and_generate(tmp_path):
    main(["fit", *GENERATION])
    run = tmp_path / "outputs/image_generation/lightning_logs/version_0"
    last = run / "checkpoints/last.ckpt"
    grid = run / "samples/epoch_0.png"
    assert last.is_file() and grid.stat().st_size > 100, "no checkpoint or no validation sample grid"

    task, tokenizer, _ = load_task(last)  # torch.load(weights_only=True) inside
    assert (tokenizer.height, tokenizer.num_levels) == (8, 17)
    fresh = ImageGeneration(model=task.hparams["model"]).eval()
    fresh.load_state_dict(torch.load(last, weights_only=True)["state_dict"])
    tokens, labels = torch.randint(0, 17, (2, 64)), torch.tensor([3, 7])
    torch.testing.assert_close(
        task(task.model.inputs(tokens), labels), fresh(fresh.model.inputs(tokens), labels)
    )

    out = tmp_path / "samples"
    main(["generate", "--checkpoint", str(last), "--num-samples", "3", "--out", str(out), "--seed", "0"])
    with Image.open(out / "sample_002.png") as image:
        assert image.size == (8, 8)
    assert (out / "grid.png").is_file()


def test_super_resolution_fit_and_generate_an_odd_sized_image(tmp_path):
    main(["fit", *SUPER_RESOLUTION])
    run = tmp_path / "outputs/super_resolution/lightning_logs/version_0"
    last = run / "checkpoints/last.ckpt"
    assert last.is_file() and (run / "samples/epoch_0.png").is_file()
    task, tokenizer, _ = load_task(last)
    assert tokenizer is None and task.config.scale == 2

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (13, 19, 3), dtype=np.uint8)).save("odd.png")
    main(["generate", "--checkpoint", str(last), "--input", "odd.png", "--out", "upscaled"])
    with Image.open("upscaled/odd_x2.png") as image:
        assert image.size == (38, 26)
    with Image.open("upscaled/odd_side_by_side.png") as image:
        assert image.size[0] > 2 * 38  # bicubic | ours


@pytest.mark.slow
def test_autoregressive_super_resolution_fits_and_samples(tmp_path):
    main(["fit", *SUPER_RESOLUTION, "--config", str(CONFIGS / "super_resolution_autoregressive.yaml"),
          "--config", str(CONFIGS / "super_resolution_tiny.yaml"), "--data.init_args.crop_size=8",
          "--model.init_args.model.decoder_layers=1", "--model.init_args.num_val_samples=2"])  # fmt: skip
    last = next((tmp_path / "outputs/super_resolution/lightning_logs/version_0/checkpoints").glob("last*.ckpt"))
    task, _, _ = load_task(last)
    assert isinstance(task, AutoregressiveSuperResolution)
    assert task(torch.rand(1, 3, 4, 4)).shape == (1, 3, 8, 8)


def test_class_dropout_hides_labels_in_training_only_and_guidance_is_refused_without_it(tmp_path, capsys, monkeypatch):
    from multimodal.models.config import ImageTransformerConfig

    config = ImageTransformerConfig(dim=16, num_layers=1, num_heads=2, ff_dim=32, height=2, width=2, num_levels=4,
                                    num_classes=3, class_conditional=True, class_dropout=0.5)  # fmt: skip
    task = ImageGeneration(model=config)
    seen = []
    forward = task.model.forward
    monkeypatch.setattr(task.model, "forward", lambda tokens, labels=None, **kw: seen.append(labels) or forward(tokens, labels, **kw))
    labels = torch.arange(400) % 3
    tokens = torch.randint(0, 4, (400, 4))
    task.train()
    task.nll((tokens, labels))
    hidden = seen[-1] == 3
    assert 0.4 < hidden.float().mean() < 0.6 and torch.equal(seen[-1][~hidden], labels[~hidden])
    task.eval()
    task.nll((tokens, labels))
    assert torch.equal(seen[-1], labels)  # validation scores every image with its class

    from test_reliability import one_line_error

    main(["fit", *GENERATION])
    last = tmp_path / "outputs/image_generation/lightning_logs/version_0/checkpoints/last.ckpt"
    line = one_line_error(["generate", "--checkpoint", last, "--out", tmp_path / "g", "--guidance-scale", "2"],
                          capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --guidance-scale: this model has no 'no class' label")
