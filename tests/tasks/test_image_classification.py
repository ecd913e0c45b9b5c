"""Image classification task: links from the data, CLI fit, checkpoints, predict CSV, confusion matrix."""

import csv
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image

from multimodal.data.fetch import DatasetNotFoundError, default_cache_dir
from tasks.checkpoint import load_task
from tasks.cli import MultimodalCLI, main, task_class_from_args
from tasks.commands.export import export_model_folder
from tasks.datamodules import ImageClassificationDataModule
from tasks.image_classification import ImageClassification

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
VIT = [
    "--config",
    str(CONFIGS / "image_classification.yaml"),
    "--config",
    str(CONFIGS / "image_classification_tiny.yaml"),
]
RUN = Path("outputs/image_classification/lightning_logs/version_0")  # where the config writes, relative to the working folder


@pytest.fixture
def vit_args(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # every output of the run lands in tmp_path
    return VIT


def test_config_names_the_task_and_links_sizes_from_the_data(vit_args):
    assert task_class_from_args(["fit", *vit_args]) is ImageClassification
    stale = "--model.init_args.model.num_classes=12"  # a value given anyway is replaced by the data's
    cli = MultimodalCLI([*vit_args, stale], data_links=ImageClassification.data_links, run=False)
    config = cli.model.config
    assert (config.num_classes, config.channels, config.image_size) == (10, 1, 8)  # from the digits
    assert cli.model.class_names == [str(d) for d in range(10)]
    assert config.grid_size == (4, 4) and config.dim == 32  # the tiny override won over the base config


def test_cli_fit_checkpoint_reload_predict(vit_args, tmp_path):
    cli = MultimodalCLI(["fit", *vit_args], data_links=ImageClassification.data_links)
    run = tmp_path / RUN
    last = run / "checkpoints" / "last.ckpt"
    assert last.is_file()
    assert list(run.glob("confusion_matrix.png")), "no confusion matrix after validation"
    assert (run / "confusion_matrix.png").stat().st_size > 5000

    # Reload without unpickling: load_from_checkpoint and load_task give the trained model's logits.
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["multimodal"]["task"] == "tasks.image_classification.ImageClassification"
    reloaded = ImageClassification.load_from_checkpoint(last).eval()
    task, tokenizer, _ = load_task(last)
    trained = cli.model.eval()
    images = torch.stack([cli.datamodule.split("test")[i][0] for i in range(8)])
    with torch.no_grad():
        expected = trained(images)
        torch.testing.assert_close(reloaded(images), expected)
        torch.testing.assert_close(task(images), expected)
    assert tokenizer is None and task.class_names == [str(d) for d in range(10)]

    # predict: one row per test image (2 batches of 16 in the tiny config) with the model's answer.
    main(["predict", *vit_args, f"--ckpt_path={last}"])
    with (tmp_path / "outputs/image_classification/predictions.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 32 and list(rows[0]) == ["file", "prediction", "probability"]
    test_split = cli.datamodule.split("test")
    for row in rows[:5]:
        index = int(row["file"].rsplit("/", 1)[1])
        assert row["file"] == f"digits/test/{index}"
        with torch.no_grad():
            probabilities = torch.softmax(trained(test_split[index][0][None]), -1)[0]
        assert row["prediction"] == str(int(probabilities.argmax()))
        assert float(row["probability"]) == pytest.approx(float(probabilities.max()), abs=1e-5)


def test_predict_on_a_folder_skips_a_corrupt_file_and_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "mine"
    (folder / "sub").mkdir(parents=True)
    for index in range(3):
        Image.fromarray(np.full((20, 20), 40 * index, dtype=np.uint8)).save(folder / "sub" / f"{index}.png")
    (folder / "broken.png").write_bytes(b"not a png" * 20)
    task = ImageClassification(
        {
            "image_size": 8,
            "patch_size": 2,
            "channels": 1,
            "num_classes": 10,
            "dim": 16,
            "num_layers": 1,
            "num_heads": 2,
        }
    )
    data = ImageClassificationDataModule(predict_dir=str(folder), image_size=8, channels=1)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path / "out"))
    with pytest.warns(UserWarning, match=r"broken\.png"):
        trainer.predict(task, datamodule=data)
    with (tmp_path / "out" / "predictions.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert sorted(Path(row["file"]).name for row in rows) == ["0.png", "1.png", "2.png"]


def test_data_module_reads_sizes_from_the_data_and_augments_training_only():
    data = ImageClassificationDataModule(
        "digits", image_size=16, augmentation=[{"name": "RandomHorizontalFlip", "p": 1.0}]
    )
    assert (data.num_classes, data.channels, data.image_size) == (10, 1, 16)
    plain = ImageClassificationDataModule("digits", image_size=16)
    assert torch.equal(data.split("val")[0][0], plain.split("val")[0][0])
    assert torch.equal(data.split("train")[0][0], plain.split("train")[0][0].flip(-1))


def test_missing_fashion_mnist_says_how_to_get_it(tmp_path):
    data = ImageClassificationDataModule("fashion_mnist", root=str(tmp_path))
    with pytest.raises(DatasetNotFoundError, match="multimodal data fashion-mnist"):
        _ = data.num_classes


def test_a_task_deep_copies_with_an_optimizer_factory_that_cannot_be_copied():
    """EMA's AveragedModel deep-copies the task; under DDP the CLI's optimizer factory holds a lock."""
    import copy
    import functools
    import threading

    def adamw_with_lock(lock, params, **options):
        return torch.optim.AdamW(params, **options)

    factory = functools.partial(adamw_with_lock, threading.Lock(), lr=0.01)
    with pytest.raises(TypeError, match="lock"):
        copy.deepcopy(factory)  # what the task must not try
    task = ImageClassification({"image_size": 8, "patch_size": 2, "channels": 1, "num_classes": 3, "dim": 16,
                                "num_layers": 1, "num_heads": 2}, optimizer=factory)  # fmt: skip
    twin = copy.deepcopy(task)
    assert twin.model is not task.model and torch.equal(twin.model.head.weight, task.model.head.weight)
    optimizer = twin.optimizer_factory(twin.parameters())
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["lr"] == 0.01


def test_generate_on_a_classifier_points_to_predict(vit_args, tmp_path, capsys):
    task = ImageClassification({"image_size": 8, "patch_size": 2, "channels": 1, "num_classes": 3, "dim": 16,
                                "num_layers": 1, "num_heads": 2})  # fmt: skip
    trainer = pl.Trainer(logger=False, max_epochs=0)
    trainer.strategy.connect(task)
    path = tmp_path / "classifier.ckpt"
    trainer.save_checkpoint(path)
    with pytest.raises(SystemExit):
        main(["generate", "--checkpoint", str(path)])
    assert "multimodal predict" in capsys.readouterr().err


@pytest.mark.skipif(
    not (default_cache_dir() / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte").is_file(),
    reason="Fashion-MNIST not fetched (multimodal data fashion-mnist)",
)
def test_fashion_mnist_config_builds_its_model_from_the_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [
        "--config",
        str(CONFIGS / "image_classification.yaml"),
        "--config",
        str(CONFIGS / "image_classification_fashion_mnist.yaml"),
    ]
    cli = MultimodalCLI(args, data_links=ImageClassification.data_links, run=False)
    config = cli.model.config
    assert (config.num_classes, config.channels, config.image_size, config.grid_size) == (10, 1, 28, (4, 4))
    assert config.position == "learned"
    assert (cli.trainer.num_devices, type(cli.trainer.strategy).__name__) == (2, "DDPStrategy")
    assert cli.datamodule.batch_size * cli.trainer.num_devices == 128  # per process x processes
    assert cli.model.class_names[0] == "T-shirt/top" and cli.trainer.max_epochs == 100


# ------------------------------------------------------------------------------------------------
# MixUp / CutMix
# ------------------------------------------------------------------------------------------------

_TINY_VIT = {"image_size": 8, "patch_size": 4, "channels": 1, "num_classes": 4, "dim": 16, "num_layers": 1,
             "num_heads": 2}  # fmt: skip


def test_batch_mixing_is_off_by_default_and_builds_the_chosen_mixers():
    from torchvision.transforms import v2

    from tasks.image_classification import batch_mixing

    assert ImageClassification(_TINY_VIT)._batch_mix is None
    assert batch_mixing(0.0, 0.0, 4) is None
    assert isinstance(batch_mixing(0.8, 0.0, 4), v2.MixUp)
    assert isinstance(batch_mixing(0.0, 1.0, 4), v2.CutMix)
    both = batch_mixing(0.8, 1.0, 4)
    assert isinstance(both, v2.RandomChoice) and both.p == [0.5, 0.5]
    with pytest.raises(ValueError, match="mixup_alpha"):
        batch_mixing(-1.0, 0.0, 4)


def test_label_smoothing_on_mixed_targets_matches_timm_mixup_loss():
    mixup = pytest.importorskip("timm.data.mixup")
    from timm.loss import SoftTargetCrossEntropy

    torch.manual_seed(0)
    classes, lam, smoothing = 5, 0.7, 0.1
    logits, labels = torch.randn(6, classes), torch.tensor([0, 1, 2, 3, 4, 0])
    partner = labels.flip(0)  # timm mixes each sample with the reversed batch
    one_hot = torch.nn.functional.one_hot
    mixed = lam * one_hot(labels, classes).float() + (1 - lam) * one_hot(partner, classes).float()
    ours = torch.nn.functional.cross_entropy(logits, mixed, label_smoothing=smoothing)
    reference = SoftTargetCrossEntropy()(logits, mixup.mixup_target(labels, classes, lam, smoothing))
    assert ours == pytest.approx(reference.item(), rel=1e-6)


@pytest.mark.parametrize("options", [{"mixup_alpha": 1.0}, {"cutmix_alpha": 1.0}])
def test_training_step_mixes_the_batch_and_takes_the_loss_on_soft_targets(options):
    task = ImageClassification(_TINY_VIT, label_smoothing=0.1, **options)
    with torch.no_grad():
        task.model.head.weight.mul_(100)  # confident logits, so hard and soft targets give different losses
    images, labels = torch.rand(8, 1, 8, 8), torch.arange(8) % 4
    torch.manual_seed(3)
    with pytest.warns(UserWarning, match="self.log"):  # no trainer attached
        loss = task.training_step((images, labels), 0)
    torch.manual_seed(3)
    mixed, targets = task._batch_mix(images, labels)
    assert targets.shape == (8, 4) and torch.allclose(targets.sum(-1), torch.ones(8))
    assert not torch.equal(mixed, images) and (targets.max(-1).values < 1).any()  # really mixed
    expected = torch.nn.functional.cross_entropy(task.model(mixed), targets, label_smoothing=0.1)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    hard = torch.nn.functional.cross_entropy(task.model(images), labels, label_smoothing=0.1)
    assert loss.item() != pytest.approx(hard.item(), rel=1e-4)  # what an unmixed step would give


def test_test_time_flip_scores_the_mean_softmax_of_each_image_and_its_mirror():
    torch.manual_seed(0)
    task = ImageClassification(_TINY_VIT, test_time_flip=True).eval()
    with torch.no_grad():
        for parameter in task.model.parameters():
            parameter.mul_(3)  # larger weights: answers that vary by image and by view
    images = torch.randn(64, 1, 8, 8)
    with torch.no_grad():  # the two views one at a time, each image's columns reversed by indexing
        alone = task.model(images).softmax(-1)
        mirrored = task.model(images[..., torch.arange(7, -1, -1)]).softmax(-1)
        ensemble = ((alone + mirrored) / 2).log()
        scored = task.evaluation_logits(images)
    torch.testing.assert_close(scored, ensemble, atol=1e-5, rtol=1e-5)
    labels = ensemble.argmax(-1)  # the ensemble's answers: validation must score 1.0 against them
    assert (alone.argmax(-1) != labels).any()  # where the image alone answers otherwise
    with pytest.warns(UserWarning, match="self.log"):  # no trainer attached
        task.validation_step((images, labels), 0)
    assert task.metrics["val_acc"].compute().item() == 1.0
    expected_loss = torch.nn.functional.nll_loss(ensemble, labels)  # the ensemble's own loss
    assert task.mean_loss["val"].compute().item() == pytest.approx(expected_loss.item(), rel=1e-5)
    task.test_time_flip = False  # off: the image alone, as before
    torch.testing.assert_close(task.evaluation_logits(images), task.model(images).detach())


def test_test_time_flip_is_saved_with_the_task_and_its_exported_folder(vit_args, tmp_path):
    cli = MultimodalCLI([*vit_args, "--model.init_args.test_time_flip=true", "--trainer.limit_val_batches=0"],
                        data_links=ImageClassification.data_links, run=False)  # fmt: skip
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    saved = tmp_path / "flip.ckpt"
    cli.trainer.save_checkpoint(saved)
    reloaded = load_task(saved).task.eval()
    rebuilt = load_task(export_model_folder(saved, tmp_path / "model")).task.eval()
    assert reloaded.test_time_flip is True and rebuilt.test_time_flip is True
    images = torch.stack([cli.datamodule.split("test")[i][0] for i in range(8)])
    with torch.no_grad():  # the two views of the trained weights, one at a time
        trained = cli.model.eval().model
        ensemble = ((trained(images).softmax(-1) + trained(images.flip(-1)).softmax(-1)) / 2).log()
        torch.testing.assert_close(reloaded.evaluation_logits(images), ensemble, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rebuilt.evaluation_logits(images), ensemble, atol=1e-5, rtol=1e-5)
