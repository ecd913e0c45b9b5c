"""Image classification with a Vision Transformer.

``multimodal fit --config configs/image_classification.yaml`` trains on the scikit-learn digits;
``multimodal predict --config ... --ckpt_path CKPT`` writes ``file,prediction,probability`` rows to a
CSV (:class:`PredictionCSV`, by default ``<trainer.default_root_dir>/predictions.csv``). Every
validation epoch leaves a confusion-matrix PNG next to the logs.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import BasePredictionWriter
from pytorch_lightning.cli import OptimizerCallable
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix
from torchvision.transforms import v2

from multimodal.images.distillation import DistillationConfig, RememberingTeacher, distillation_loss
from multimodal.models import ViT, ViTConfig
from multimodal.models.convnet import ConvNet, ConvNetConfig
from tasks.base import Task, task_arguments
from tasks.finetune import FineTuneConfig
from tasks.outputs import log_folder, show_image

__all__ = ["ConvNetClassification", "ImageClassification", "PredictionCSV", "batch_mixing", "vit_adamw"]


def vit_adamw(params) -> torch.optim.Optimizer:
    """Default optimizer: AdamW(lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05), DeiT's recipe."""
    return torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05)


class ImageClassification(Task):
    """Trains a :class:`~multimodal.models.ViT` with cross-entropy on ``(image, label)`` batches.

    Logs ``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``, ``val_top5`` (and ``test_*``);
    accuracies come from ``torchmetrics`` and cover every image of the epoch. After validation it
    writes ``confusion_matrix.png`` (rows: true class, columns: predicted, shares of each row) to
    the log folder; ``test`` writes ``confusion_matrix_test.png``.

    The learning rate warms up linearly for ``warmup_steps`` and then follows a cosine to
    ``min_lr_ratio`` times its peak over the run. With ``trainer.max_time`` set, the cosine runs
    on whichever ends first, steps or time, so a time-limited run still anneals.

    Args:
        model: ViT config; ``num_classes``, ``channels`` and ``image_size`` are linked from the
            data module by the CLI.
        optimizer: Called with parameter groups; weight decay skips biases, norms, the class token
            and position parameters.
        warmup_steps: Linear learning-rate warm-up.
        min_lr_ratio: Final learning rate as a fraction of the peak.
        label_smoothing: Cross-entropy label smoothing (0 turns it off). With MixUp / CutMix it
            smooths the mixed soft targets, ``(1 - e) * mixed + e / classes``: the same as timm's
            ``Mixup(label_smoothing=e)`` with ``SoftTargetCrossEntropy`` (smoothing is linear).
        mixup_alpha: MixUp (Zhang et al. 2018) on every training batch: images and one-hot labels
            mixed with a partner in the batch, ``lambda ~ Beta(alpha, alpha)``; the loss is
            cross-entropy on the soft targets. 0 (default): off. DeiT: 0.8.
        cutmix_alpha: CutMix (Yun et al. 2019): a box of the partner image pasted in, labels
            mixed by its area. 0 (default): off. DeiT: 1.0. With both on, each batch takes one of
            the two at random (timm's ``switch_prob`` 0.5). Validation and test never mix.
        class_names: Names of the classes (linked from the data), used in the CSV and the plots.
        confusion_matrix_every_n_epochs: Write the validation confusion matrix after every n-th
            validation epoch and the last one (rendering takes about 0.3 s; 0: only after the last).
        finetune: Pretrained weights, frozen parts, LoRA, learning-rate split (see :mod:`tasks.finetune`).
        compile: Compile every Transformer block with ``torch.compile`` (:func:`~multimodal.layers.compile_blocks`);
            the first steps pay for compilation.
        distillation: Also learn from a trained teacher's outputs on each training batch (DeiT's
            recipe: :mod:`multimodal.images.distillation`): the teacher's checkpoint, the weight of its
            term, soft or hard. With the ViT's ``distillation_token`` the label loss trains the class
            head and the teacher's term the distillation head (DeiT's distilled models); otherwise both terms
            train the one head. The teacher is read when training starts, runs in eval mode without
            gradients and is not saved with the student. Its logits are remembered per distinct image
            (up to ``remembered_teacher_images``), so unaugmented training images reach it once, not
            every epoch. None (default): off.
        test_time_flip: Score validation, test and prediction images by both the image and its
            left-right mirror: the mean of the two softmax outputs (test-time augmentation, at twice
            the evaluation cost; :meth:`evaluation_logits`). For models trained with a horizontal
            flip. False (default): the image alone.
    """

    config_class = ViTConfig
    remembered_teacher_images: ClassVar[int] = 250_000  # the teacher's logits are kept for this many training images
    data_links: ClassVar[dict[str, str]] = {
        "num_classes": "model.num_classes",
        "channels": "model.channels",
        "image_size": "model.image_size",
        "class_names": "class_names",
    }

    def __init__(
        self,
        model: ViTConfig | None = None,
        optimizer: OptimizerCallable = vit_adamw,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.0,
        label_smoothing: float = 0.0,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        class_names: list[str] | None = None,
        confusion_matrix_every_n_epochs: int = 1,
        finetune: FineTuneConfig | None = None,
        compile: bool = False,
        distillation: DistillationConfig | None = None,
        test_time_flip: bool = False,
    ) -> None:
        class_names = None if class_names is None else list(class_names)
        distillation = DistillationConfig.parse(distillation)
        settings = {"min_lr_ratio": min_lr_ratio, **task_arguments(locals()),  # min_lr_ratio: a saved setting here
                    "distillation": distillation and distillation.to_dict()}  # fmt: skip
        super().__init__(model, optimizer, warmup_steps, finetune, compile, min_lr_ratio, settings)
        config = self.config
        if class_names is not None and len(class_names) != config.num_classes:
            raise ValueError(f"{len(class_names)} class_names for num_classes={config.num_classes}")
        self.class_names = list(class_names) if class_names else [str(i) for i in range(config.num_classes)]
        self.confusion_every = confusion_matrix_every_n_epochs
        classes = config.num_classes
        self._batch_mix = batch_mixing(mixup_alpha, cutmix_alpha, classes)
        self.metrics = torch.nn.ModuleDict({
            f"{stage}_{name}": MulticlassAccuracy(classes, top_k=k, average="micro")
            for stage in ("val", "test") for name, k in (("acc", 1), ("top5", min(5, classes)))
        })  # fmt: skip
        # The loss over every evaluated image, weighted by image and summed over processes.
        self.mean_loss = torch.nn.ModuleDict({stage: MeanMetric() for stage in ("val", "test")})
        self.confusion = torch.nn.ModuleDict({
            stage: MulticlassConfusionMatrix(classes) for stage in ("val", "test")
        })  # fmt: skip
        self.distillation, self.test_time_flip = distillation, test_time_flip
        self._teacher: tuple[RememberingTeacher, ...] = ()  # in a tuple: not a submodule, so neither trained nor saved

    def forward(self, images: Tensor) -> Tensor:
        """Logits ``(batch, num_classes)`` of images ``(batch, channels, height, width)``."""
        return self.model(images)

    def evaluation_logits(self, images: Tensor) -> Tensor:
        """Float32 logits ``(batch, num_classes)`` that validation, test and predict score.

        With ``test_time_flip`` they are the log of the mean of the softmax outputs of each image and
        its left-right mirror (one forward of the doubled batch): log-probabilities of the two views'
        ensemble, so cross-entropy on them is its loss. Images: ``(batch, channels, height, width)``.
        """
        if not self.test_time_flip:
            return self.model(images).float()
        both = self.model(torch.cat([images, images.flip(-1)])).float().log_softmax(-1)
        return torch.logaddexp(*both.chunk(2)) - math.log(2)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        targets = labels
        if self._batch_mix is not None:  # soft targets (batch, classes); accuracy against the larger share
            images, targets = self._batch_mix(images, labels)
            labels = targets.argmax(-1)
        if self._teacher and getattr(self.config, "distillation_token", False):
            # DeiT's distillation token: the labels teach the class head, the teacher the other head.
            class_logits, distilled_logits = self.model.forward_heads(images)
            logits = (class_logits + distilled_logits) / 2
        else:
            logits = class_logits = distilled_logits = self.model(images)
        loss = F.cross_entropy(class_logits.float(), targets, label_smoothing=self.label_smoothing)
        if self._teacher:
            loss = distillation_loss(distilled_logits, self._teacher[0](images), loss, self.distillation)
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", (logits.argmax(-1) == labels).float().mean(), on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit" and self.distillation is not None and not self._teacher:
            # Mixed batches are new images every step: nothing to remember.
            remember = 0 if self._batch_mix is not None else self.remembered_teacher_images
            self._teacher = (RememberingTeacher(load_teacher(self.distillation.teacher, self.config), remember),)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self._teacher:
            self._teacher[0].to(self.device)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _evaluate(self, batch: tuple[Tensor, Tensor], stage: str) -> None:
        images, labels = batch
        logits = self.evaluation_logits(images)
        self.mean_loss[stage].update(F.cross_entropy(logits, labels), weight=len(labels))
        self.log(f"{stage}_loss", self.mean_loss[stage], prog_bar=stage == "val")
        for name in ("acc", "top5"):
            metric = self.metrics[f"{stage}_{name}"]
            metric.update(logits, labels)
            self.log(f"{stage}_{name}", metric, prog_bar=name == "acc")
        self.confusion[stage].update(logits, labels)

    def on_validation_epoch_end(self) -> None:
        epoch, max_epochs = self.current_epoch + 1, self.trainer.max_epochs
        last = max_epochs is not None and epoch >= max_epochs
        due = self.confusion_every > 0 and epoch % self.confusion_every == 0
        self._write_confusion("val", "confusion_matrix.png", write=last or due)

    def on_test_epoch_end(self) -> None:
        self._write_confusion("test", "confusion_matrix_test.png", write=True)

    def _write_confusion(self, stage: str, filename: str, write: bool) -> None:
        matrix = self.confusion[stage].compute().cpu()
        self.confusion[stage].reset()
        if not write or self.trainer.sanity_checking or not self.trainer.is_global_zero:
            return
        folder = log_folder(self.trainer)
        show_image(self.trainer, f"confusion_matrix/{stage}", save_confusion_matrix(matrix, self.class_names, folder / filename))

    def predict_step(self, batch: tuple[Tensor, list[str]] | None, batch_idx: int) -> dict[str, Any] | None:
        """``{"file", "prediction", "probability"}`` for a batch of ``(images, names)``."""
        if batch is None:  # every file of the batch was unreadable
            return None
        images, names = batch
        probability, prediction = torch.softmax(self.evaluation_logits(images), dim=-1).max(dim=-1)
        return {"file": list(names), "prediction": prediction.cpu(), "probability": probability.cpu()}

    def configure_callbacks(self) -> list[pl.Callback]:
        """Adds a :class:`PredictionCSV` writer unless the trainer already has one."""
        if any(isinstance(callback, PredictionCSV) for callback in self.trainer.callbacks):
            return []
        return [PredictionCSV()]

    def build_model(self, config: ViTConfig) -> ViT:
        return ViT(config)

    def no_weight_decay(self) -> set[str]:
        """Biases, norms, the class token and position parameters train without weight decay."""
        return self.model.no_weight_decay()


class ConvNetClassification(ImageClassification):
    """The same task with a small CNN (:class:`~multimodal.models.convnet.ConvNet`) instead of a ViT: the
    teacher of a distilled ViT and a baseline. Every other argument is :class:`ImageClassification`'s.

    Args:
        model: The CNN's sizes; ``num_classes``, ``channels`` and ``image_size`` are linked from the data.
    """

    config_class = ConvNetConfig

    def __init__(self, model: ConvNetConfig | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)

    def build_model(self, config: ConvNetConfig) -> ConvNet:
        return ConvNet(config)


def load_teacher(path: str, student: Any) -> torch.nn.Module:
    """The classifier of an image-classification checkpoint ``path`` (eval mode, frozen) for a ``student``
    config with the same ``num_classes``; ValueError naming ``path`` otherwise."""
    from tasks.checkpoint import load_task

    task = load_task(path).task
    if not isinstance(task, ImageClassification):
        raise ValueError(f"{path}: the teacher must be an image-classification checkpoint, not {type(task).__name__}")
    if task.config.num_classes != student.num_classes:
        raise ValueError(f"{path}: the teacher has {task.config.num_classes} classes, the student "
                         f"{student.num_classes}")  # fmt: skip
    return task.model.requires_grad_(False).eval()


def batch_mixing(mixup_alpha: float, cutmix_alpha: float, num_classes: int) -> v2.Transform | None:
    """``v2.MixUp``, ``v2.CutMix``, a 50/50 ``RandomChoice`` of both, or None when both alphas are 0.

    The transform takes ``(images, labels)`` (labels ``int64``) and returns ``(images, targets)``
    with ``targets`` float ``(batch, num_classes)`` rows summing to 1. It draws from torch's global
    generator, which a checkpoint saves, so resumed runs mix the same way.
    """
    for name, alpha in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
        if alpha < 0:
            raise ValueError(f"{name}={alpha} must be >= 0 (0 turns it off)")
    mixers = [mixer(alpha=alpha, num_classes=num_classes)
              for mixer, alpha in ((v2.MixUp, mixup_alpha), (v2.CutMix, cutmix_alpha)) if alpha > 0]  # fmt: skip
    if not mixers:
        return None
    return mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)


class PredictionCSV(BasePredictionWriter):
    """Writes ``file,prediction,probability`` rows (class name, its softmax probability) during ``predict``.

    An existing file is not replaced unless ``overwrite`` (or ``multimodal predict --overwrite``,
    which sets the trainer's ``overwrite_outputs``): the run ends before any prediction, naming it.

    Args:
        path: The CSV file; None: ``<trainer.default_root_dir>/predictions.csv``. Single process.
        overwrite: Replace the file when it exists.
    """

    def __init__(self, path: str | None = None, overwrite: bool = False) -> None:
        super().__init__(write_interval="batch")
        self.path = None if path is None else Path(path)
        self.overwrite = overwrite
        self.rows = 0

    def output_path(self, trainer: pl.Trainer) -> Path:
        return self.path if self.path is not None else Path(trainer.default_root_dir) / "predictions.csv"

    def on_predict_start(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        path = self.output_path(trainer)
        if path.exists() and not (self.overwrite or getattr(trainer, "overwrite_outputs", False)):
            raise FileExistsError(17, "already exists; pass --overwrite to replace it, or another "
                                      "PredictionCSV path", str(path))  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as file:
            csv.writer(file).writerow(["file", "prediction", "probability"])
        self.rows = 0

    def write_on_batch_end(
        self, trainer, task, prediction, batch_indices, batch, batch_idx, dataloader_idx
    ) -> None:
        if prediction is None:
            return
        names = getattr(task, "class_names", None)
        with self.output_path(trainer).open("a", newline="") as file:
            writer = csv.writer(file)
            for name, label, probability in zip(
                prediction["file"],
                prediction["prediction"].tolist(),
                prediction["probability"].tolist(),
                strict=True,
            ):
                writer.writerow([name, names[label] if names else label, f"{probability:.6f}"])
                self.rows += 1

    def on_predict_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        print(f"wrote {self.rows} predictions to {self.output_path(trainer)}")


def save_confusion_matrix(matrix: Tensor, class_names: list[str], path: Path) -> Path:
    """Plots a ``(classes, classes)`` count matrix as a PNG: row shares as colours, counts as text.

    Args:
        matrix: ``matrix[true, predicted]`` counts.
        class_names: Axis labels.
        path: Where to write the PNG (folders are created).
    """
    from matplotlib.figure import Figure

    counts = matrix.double()
    shares = counts / counts.sum(dim=1, keepdim=True).clamp(min=1)
    size = len(class_names)
    side = min(max(4.0, 0.45 * size + 2), 16.0)
    figure = Figure(figsize=(side, side), dpi=100)
    axes = figure.add_subplot()
    axes.imshow(shares.numpy(), cmap="Blues", vmin=0, vmax=1)
    if size <= 30:
        axes.set_xticks(range(size), class_names, rotation=90)
        axes.set_yticks(range(size), class_names)
        cells = torch.cartesian_prod(torch.arange(size), torch.arange(size)).tolist()
        for (true, predicted), count in zip(cells, counts.flatten().tolist(), strict=True):
            if count:
                color = "white" if shares[true, predicted] > 0.5 else "black"
                axes.text(predicted, true, f"{int(count)}", ha="center", va="center", fontsize=7, color=color)
    total = counts.sum().item()
    accuracy = counts.diagonal().sum().item() / max(total, 1)
    axes.set(xlabel="predicted", ylabel="true", title=f"accuracy {accuracy:.4f} on {int(total)} images")
    figure.subplots_adjust(left=0.2, bottom=0.2, right=0.97, top=0.93)  # tight_layout doubles the time
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
