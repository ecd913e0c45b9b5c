"""DeiT's distillation: a CNN teacher trained by the same task, a ViT student that follows it, the loss by hand."""

import math
import sys
from pathlib import Path

import pytest
import torch
import yaml

from multimodal.images.distillation import DistillationConfig, RememberingTeacher, distillation_loss
from multimodal.models import ViTConfig
from multimodal.models.convnet import ConvNet, ConvNetConfig
from tasks.checkpoint import load_task
from tasks.cli import MultimodalCLI, main
from tasks.commands.export import export_model_folder
from tasks.image_classification import ConvNetClassification, ImageClassification, load_teacher

ROOT = Path(__file__).resolve().parents[2]
CNN = [arg for name in ("image_classification_fashion_mnist_cnn.yaml", "image_classification_cnn_tiny.yaml")
       for arg in ("--config", str(ROOT / "configs" / name))]  # fmt: skip
VIT = [arg for name in ("image_classification.yaml", "image_classification_tiny.yaml")
       for arg in ("--config", str(ROOT / "configs" / name))]  # fmt: skip


def _naive_loss(student, teacher, label_loss, alpha, kind, temperature):
    """The loss written out sample by sample in float64: Hinton's KL times T², or cross-entropy on the teacher's top class."""
    terms = []
    for s, t in zip(student.double().tolist(), teacher.double().tolist(), strict=True):
        if kind == "hard":
            top = max(range(len(t)), key=t.__getitem__)
            terms.append(math.log(sum(math.exp(v) for v in s)) - s[top])
            continue
        p = [math.exp(v / temperature) for v in t]
        q = [math.exp(v / temperature) for v in s]
        p, q = [v / sum(p) for v in p], [v / sum(q) for v in q]
        terms.append(temperature**2 * sum(a * (math.log(a) - math.log(b)) for a, b in zip(p, q, strict=True)))
    return (1 - alpha) * label_loss + alpha * sum(terms) / len(terms)


@pytest.mark.parametrize(("kind", "temperature", "alpha"), [("soft", 1.0, 0.5), ("soft", 3.0, 0.1), ("hard", 1.0, 0.5)])
def test_distillation_loss_matches_the_formula_written_out(kind, temperature, alpha):
    generator = torch.Generator().manual_seed(0)
    student = torch.randn(6, 5, generator=generator, requires_grad=True)
    teacher = 2 * torch.randn(6, 5, generator=generator, requires_grad=True)
    config = DistillationConfig(teacher="unused", alpha=alpha, kind=kind, temperature=temperature)
    loss = distillation_loss(student, teacher, torch.tensor(1.7), config)
    assert loss.item() == pytest.approx(_naive_loss(student.detach(), teacher.detach(), 1.7, alpha, kind, temperature), rel=1e-5)
    loss.backward()
    assert teacher.grad is None and student.grad.abs().sum() > 0  # the teacher is followed, not trained


def test_distillation_config_refuses_settings_out_of_range():
    for bad in ({"alpha": 1.5}, {"kind": "medium"}, {"temperature": 0.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DistillationConfig(teacher="t.ckpt", **bad)


def test_convnet_halves_each_stage_and_refuses_images_too_small_for_its_stages():
    model = ConvNet(ConvNetConfig(image_size=(28, 20), channels=3, num_classes=7, widths=(4, 8, 16)))
    assert model(torch.rand(2, 3, 28, 20)).shape == (2, 7)
    assert model.config.feature_shape == (16, 3, 2)  # 28 -> 14 -> 7 -> 3, 20 -> 10 -> 5 -> 2
    assert all(model.get_parameter(name).dim() == 1 for name in model.no_weight_decay())
    with pytest.raises(ValueError, match="smaller than the 8 pixels"):
        ConvNetConfig(image_size=7, widths=(4, 8, 16))


class _CountingTeacher(torch.nn.Module):
    """A small fixed network that counts the images it is given."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5))
        self.seen = 0

    def forward(self, images):
        self.seen += len(images)
        return self.net(images)


def test_a_remembering_teacher_gives_each_image_its_own_logits_and_computes_it_once():
    counting = _CountingTeacher()
    remembering = RememberingTeacher(counting, max_images=100)
    images = torch.rand(8, 3, 2, 2)
    with torch.no_grad():
        direct = counting.net(images)  # the reference: the network itself, every image computed
    torch.testing.assert_close(remembering(images), direct)
    assert counting.seen == 8 and remembering.remembered == 8

    # A later batch: seen images in another order, one image twice, a new one, a seen one changed in one value.
    changed = images[2].clone()
    changed[0, 0, 0] += 1e-6
    fresh = torch.rand(3, 2, 2)
    batch = torch.stack([images[5], images[0], fresh, images[5], changed])
    with torch.no_grad():
        expected = counting.net(batch)
    torch.testing.assert_close(remembering(batch), expected)
    assert counting.seen == 8 + 2  # only the new image and the changed one reached the teacher
    assert remembering.remembered == 10

    # A full memory computes what it cannot keep, and still answers right.
    small = RememberingTeacher(_CountingTeacher(), max_images=3)
    torch.testing.assert_close(small(images), direct)
    torch.testing.assert_close(small(images), direct)
    assert small.remembered == 3 and small.teacher.seen == 8 + 5


def test_a_student_trained_on_mixed_batches_remembers_nothing(teacher):
    config = load_task(teacher).task.config
    task = ImageClassification(ViTConfig(num_classes=10, image_size=8, channels=config.channels, dim=16, num_heads=2,
                                         num_layers=1, ff_dim=16, patch_size=4),
                               mixup_alpha=0.8, distillation={"teacher": str(teacher)})  # fmt: skip
    task.setup("fit")
    assert task._teacher[0].max_images == 0
    plain = ImageClassification(task.config, distillation={"teacher": str(teacher)})
    plain.setup("fit")
    assert plain._teacher[0].max_images == ImageClassification.remembered_teacher_images


@pytest.fixture
def teacher(tmp_path, monkeypatch):
    """A CNN teacher fitted on the digits with the tiny config (a few steps), as `multimodal fit` writes it."""
    monkeypatch.chdir(tmp_path)
    main(["fit", *CNN])
    return next(tmp_path.glob("outputs/image_classification_cnn/lightning_logs/version_0/checkpoints/last.ckpt"))


def test_a_vit_follows_a_cnn_teacher_that_is_neither_trained_nor_saved(teacher, tmp_path):
    loaded = load_task(teacher).task
    assert type(loaded) is ConvNetClassification and isinstance(loaded.model, ConvNet)
    before = {name: value.clone() for name, value in loaded.model.state_dict().items()}

    argv = [*VIT, "--model.init_args.distillation.teacher", str(teacher), "--model.init_args.distillation.kind", "hard",
            "--trainer.default_root_dir", str(tmp_path / "student")]  # fmt: skip
    cli = MultimodalCLI(argv, data_links=ImageClassification.data_links, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    student = cli.model
    followed = student._teacher[0].teacher
    assert all(torch.equal(value, before[name]) for name, value in followed.state_dict().items())  # not trained
    assert not followed.training and not any(p.requires_grad for p in followed.parameters())

    # One training step's loss is the label loss and the teacher's term, computed here from the teacher's own logits.
    task = ImageClassification(student.config, label_smoothing=0.1, distillation=student.distillation)
    task.setup("fit")  # reads the teacher, as the trainer does
    images, labels = next(iter(cli.datamodule.train_dataloader()))
    with pytest.warns(UserWarning, match="self.log"):  # no trainer attached
        loss = task.training_step((images, labels), 0)
    with torch.no_grad():
        logits, teacher_logits = task.model(images), loaded.model(images)
    label_loss = torch.nn.functional.cross_entropy(logits, labels, label_smoothing=0.1)
    expected = _naive_loss(logits, teacher_logits, label_loss.item(), 0.5, "hard", 1.0)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert label_loss.item() != pytest.approx(expected, rel=1e-3)  # the teacher's term counts

    # The student's checkpoint holds the student only, and loads after the teacher is gone.
    saved = tmp_path / "student.ckpt"
    cli.trainer.save_checkpoint(saved)
    state = torch.load(saved, weights_only=True)["state_dict"]
    assert set(state) == set(student.state_dict()) and not any(name.startswith("model.features") for name in state)
    teacher.unlink()
    reloaded = load_task(saved).task
    assert reloaded.distillation.teacher == str(teacher) and reloaded._teacher == ()
    # An exported folder stands alone: its task settings do not name the teacher's file, and it does not distil when rebuilt.
    folder = export_model_folder(saved, tmp_path / "model")
    assert str(teacher) not in (folder / "config.json").read_text()
    assert load_task(folder).task.distillation is None


def test_with_a_distillation_token_the_labels_teach_the_class_head_and_the_teacher_the_other(teacher):
    teacher_model = load_task(teacher).task.model
    config = ViTConfig(num_classes=10, image_size=8, channels=teacher_model.config.channels, dim=16, num_heads=2,
                       num_layers=2, ff_dim=16, patch_size=4, distillation_token=True)  # fmt: skip
    task = ImageClassification(config, label_smoothing=0.1, distillation={"teacher": str(teacher), "temperature": 2.0})
    task.setup("fit")
    images, labels = torch.rand(6, config.channels, 8, 8), torch.arange(6)
    with pytest.warns(UserWarning, match="self.log"):  # no trainer attached
        loss = task.training_step((images, labels), 0)
    with torch.no_grad():  # each head read off the full encoder's output (no last-block shortcut)
        features = task.model.forward_features(images)
        class_logits, distilled_logits = task.model.head(features[:, 0]), task.model.head_dist(features[:, 1])
        teacher_logits = teacher_model(images)
    label_loss = torch.nn.functional.cross_entropy(class_logits, labels, label_smoothing=0.1).item()
    assert loss.item() == pytest.approx(_naive_loss(distilled_logits, teacher_logits, label_loss, 0.5, "soft", 2.0), rel=1e-5)
    mean = (class_logits + distilled_logits) / 2  # what the model classifies with, and what one head would be trained on
    torch.testing.assert_close(task.model(images).detach(), mean, atol=1e-5, rtol=0)
    one_head = _naive_loss(mean, teacher_logits, torch.nn.functional.cross_entropy(mean, labels, label_smoothing=0.1).item(),
                           0.5, "soft", 2.0)  # fmt: skip
    assert loss.item() != pytest.approx(one_head, rel=1e-3)


def test_a_teacher_that_is_missing_or_has_other_classes_ends_the_run_in_one_line(teacher, tmp_path, capsys, monkeypatch):
    with pytest.raises(ValueError, match="the teacher has 10 classes, the student 4"):
        load_teacher(str(teacher), ConvNetConfig(num_classes=4, image_size=8))
    missing = str(tmp_path / "nowhere.ckpt")
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)  # the one-line error, as a user sees it
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *VIT, "--model.init_args.distillation.teacher", missing])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "nowhere.ckpt" in err[-1]


def test_vit_quality_recipes_name_at_most_one_teacher_inside_the_budget():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vit_quality

    assert vit_quality.recipe_teacher("conv stem 16+drop path") is None
    teacher = vit_quality.recipe_teacher("conv stem 16+distill")
    assert teacher["minutes"] < 30 and (ROOT / "configs" / teacher["configs"][0]).is_file()
    assert "--model.init_args.distillation.kind=hard" in vit_quality.recipe_arguments([], "hard distill")
    with pytest.raises(SystemExit, match="more than one teacher"):
        vit_quality.recipe_teacher("distill+hard distill")


def test_the_distilled_fashion_config_is_the_recipe_the_benchmark_reported():
    """The config a user runs holds every override of the recipe docs/benchmarks.md reported on test (the
    benchmark's own list, not a copy), follows the teacher config's run folder, and keeps the teacher's
    minutes inside the 30."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vit_quality

    config = yaml.safe_load((ROOT / "configs" / "image_classification_fashion_mnist_distilled.yaml").read_text())
    recipe = "conv stem 16+drop path+dropout 0.1+distill"
    reported = vit_quality.recipe_arguments(vit_quality.FASHION_CONFIGS, recipe)
    for argument in [*reported, "--model.init_args.distillation.temperature=2.0"]:
        key, value = argument.removeprefix("--").split("=", 1)
        node = config
        for part in key.split("."):
            assert part in node, f"{key}: not set by the config"
            node = node[part]
        assert node == yaml.safe_load(value), key
    distillation = config["model"]["init_args"]["distillation"]
    assert distillation["alpha"] == DistillationConfig(teacher="unused").alpha  # the benchmark's default
    teacher = vit_quality.recipe_teacher(recipe)
    cnn = yaml.safe_load((ROOT / "configs" / teacher["configs"][0]).read_text())
    assert distillation["teacher"] == cnn["trainer"]["default_root_dir"]
    # The budgets as the benchmark passes them: the teacher's minutes and the rest of the 30.
    assert vit_quality._max_time(teacher["minutes"]) == f"--trainer.max_time={cnn['trainer']['max_time']}"
    assert vit_quality._max_time(30 - teacher["minutes"]) == f"--trainer.max_time={config['trainer']['max_time']}"
