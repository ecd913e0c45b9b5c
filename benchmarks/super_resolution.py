"""Super-resolution learning quality on whole held-out photos: ours vs an equal-size CNN vs bicubic.

Trains a model for ``--epochs`` epochs on random crops of the training photos (the task of
``configs/super_resolution.yaml``: L1, AdamW, warm-up and cosine), then upscales each *whole*
held-out photo with the tiled :func:`multimodal.images.upscale` and scores it against the original,
next to bicubic upsampling (PIL's, the MATLAB kernel) of the same low-resolution input. Models:

    transformer  the config's model (3x3 stem, local 2D attention encoder, pixel shuffle, + bicubic)
    cnn          an ESPCN/VDSR-style plain CNN (3x3 convolutions and ReLUs, pixel shuffle, + bicubic)
                 whose width is chosen to match the Transformer's parameter count, trained by the
                 same task, data, steps and optimizer

Splits (``benchmarks/protocol.py``): ``val`` = chelsea, camera, gravel (they chose the stem and the
recipe); ``test`` = moon, motorcycle, page (``SKIMAGE_TEST_PHOTOS``, used for no choice), scored only
with ``--stage report``. Scores per photo: PSNR on RGB in ``[0, 1]`` over the whole image
(torchmetrics) and PSNR on the luma channel with ``scale`` pixels shaved at each border, as SR
papers report (:func:`multimodal.images.metrics.psnr_y`); the table gives each split's mean gain over
bicubic, mean ± sd over seeds. Each run appends a JSON line to ``--out``; report runs keep their
weights in ``--models-dir``, from which ``--stage picture`` draws bicubic | CNN | Transformer |
original on a crop of chelsea (``--seeds``' first seed).

Usage (about 9 minutes a Transformer run and 4 a CNN run on one thread)::

    .venv/bin/python benchmarks/super_resolution.py --stage report --models transformer --seeds 0 1 2 &
    .venv/bin/python benchmarks/super_resolution.py --stage report --models cnn --seeds 0 1 2
    .venv/bin/python benchmarks/super_resolution.py --table
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytorch_lightning as pl
import torch
import yaml
from torch import Tensor, nn
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread, verdict

from multimodal.data.images import (
    SKIMAGE_HELD_OUT_PHOTOS,
    SKIMAGE_TEST_PHOTOS,
    bicubic_downsample,
    skimage_photos,
)
from multimodal.images import image_to_tensor, upscale
from multimodal.images.metrics import psnr_y
from multimodal.models.config import SuperResolutionConfig
from multimodal.models.super_resolution import bicubic_upsample
from multimodal.viz import side_by_side_png
from tasks.datamodules import SuperResolutionDataModule
from tasks.super_resolution import SuperResolution

ROOT = Path(__file__).resolve().parents[1]
SPLITS = {"val": SKIMAGE_HELD_OUT_PHOTOS, "test": SKIMAGE_TEST_PHOTOS}
CHELSEA_FACE = (slice(None), slice(60, 160), slice(150, 270))  # the crop both pictures show: the cat's eye


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", choices=["select", "report", "picture"], default="select")
    parser.add_argument("--models", nargs="+", default=["transformer"], choices=["transformer", "cnn"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/super_resolution.yaml")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--scale", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--picture", type=Path, default=None, help="bicubic | ours | original crop of chelsea")
    parser.add_argument("--set", nargs="*", default=[], help="model overrides, e.g. dim=96 num_layers=6; data.KEY=VALUE for the data, e.g. data.dihedral=true")
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "super_resolution.jsonl")
    parser.add_argument("--models-dir", type=Path, default=ROOT / "outputs" / "super_resolution_models",
                        help="report runs keep their weights here; --stage picture reads them")  # fmt: skip
    parser.add_argument("--table", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(tables(load(args.out)))
        return
    torch.set_num_threads(args.threads)
    config = yaml.safe_load(args.config.read_text())
    if args.stage == "picture":
        four_panels(args, config)
        return
    splits = ["val"] if args.stage == "select" else ["val", "test"]
    for seed in args.seeds:
        for name in args.models:
            pl.seed_everything(seed, verbose=False)
            data = data_module(config, args.scale, seed, args.set)
            task = build_task(config, data, args.set, args.lr)
            if name == "cnn":
                task.model = PlainCNN.matching(sum(p.numel() for p in task.model.parameters()), data)
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as folder:
                trainer = pl.Trainer(max_epochs=args.epochs, logger=False, callbacks=[_Progress()], gradient_clip_val=1.0,
                                     default_root_dir=folder, enable_checkpointing=False, enable_progress_bar=False,
                                     enable_model_summary=False)  # fmt: skip
                trainer.fit(task, data)
            result = {"model": name, "seed": seed, "epochs": args.epochs, "scale": args.scale, "minutes": (time.perf_counter() - started) / 60,
                      "parameters": sum(p.numel() for p in task.model.parameters()), "overrides": args.set}  # fmt: skip
            images = {}  # photo -> (bicubic, ours, original), for the picture
            for split in splits:
                result[split] = score(task.model.eval(), SPLITS[split], data.channels, args.scale, images)
                mean = {key: sum(photo[key] for photo in result[split]) / len(result[split])
                        for key in ("gain_rgb", "gain_y")}  # fmt: skip
                print(f"{name} seed {seed} {split}: gain RGB {mean['gain_rgb']:+.2f} dB, Y {mean['gain_y']:+.2f} dB",
                      flush=True)  # fmt: skip
            record(args.out, result, args.stage)
            if args.stage == "report":
                args.models_dir.mkdir(parents=True, exist_ok=True)
                torch.save(task.model.state_dict(), _weights_file(args, name, seed))
            if args.picture and seed == args.seeds[0]:
                picture(*images["chelsea"], args.picture)
    print(tables(load(args.out)))


def data_module(config: dict, scale: int, seed: int, overrides: list[str] = ()) -> SuperResolutionDataModule:
    """The config's data at ``scale``, its high-resolution crop resized so the low-resolution crop stays the config's.

    ``overrides`` of the form ``data.KEY=VALUE`` (YAML values) set the data module's arguments;
    the others are the model's (:func:`build_task`).

    The config's crops are 48 pixels at x2, 24 low-resolution pixels (12 x 12 tokens of 2 x 2): x4
    trains on 96-pixel crops, the same 24 pixels in, as SR papers keep the low-resolution patch
    fixed across scales; the model's input, windows and step cost stay those of x2.
    """
    init = config["data"]["init_args"]
    low_res = init["crop_size"] // init["scale"]
    chosen = {key.removeprefix("data."): value for key, value in map(_split_override, overrides) if key.startswith("data.")}
    return SuperResolutionDataModule(**{**init, **chosen, "scale": scale, "crop_size": low_res * scale, "seed": seed})


def _split_override(pair: str) -> tuple[str, object]:
    key, value = pair.split("=", 1)
    return key, yaml.safe_load(value)


def _weights_file(args: argparse.Namespace, name: str, seed: int) -> Path:
    overrides = "".join(f"_{pair}" for pair in args.set)
    return args.models_dir / f"{name}_x{args.scale}_e{args.epochs}_seed{seed}{overrides}.pt"


def four_panels(args: argparse.Namespace, config: dict) -> None:
    """Bicubic | CNN | Transformer | original on the chelsea crop, from the report runs' weights of ``--seeds[0]``."""
    seed = args.seeds[0]
    data = data_module(config, args.scale, seed, args.set)
    transformer = build_task(config, data, args.set, args.lr).model
    cnn = PlainCNN.matching(sum(p.numel() for p in transformer.parameters()), data)
    panels = {}
    for name, model in (("cnn", cnn), ("transformer", transformer)):
        path = _weights_file(args, name, seed)
        if not path.exists():
            raise SystemExit(f"error: {path}: no weights; run --stage report --models {name} first")
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        images: dict = {}
        score(model.eval(), ("chelsea",), data.channels, args.scale, images)
        panels["bicubic"], panels[name], panels["original"] = images["chelsea"]
    side_by_side_png([(title, panels[key][CHELSEA_FACE]) for title, key in
                      (("bicubic", "bicubic"), ("CNN", "cnn"), ("Transformer", "transformer"), ("original", "original"))],
                     args.picture or ROOT / "docs" / "images" / f"super_resolution_x{args.scale}_vs_cnn.png", pixel_scale=2)  # fmt: skip


def score(model: nn.Module, names: tuple[str, ...], channels: int, scale: int, images: dict) -> list[dict]:
    """Per photo: PSNR (RGB, whole image) and PSNR-Y (border ``scale`` shaved) of ours and bicubic, SSIM.

    ``images`` receives each photo's ``(bicubic, ours, original)`` ``(channels, h, w)``.
    """
    rows = []
    for name, photo in zip(names, skimage_photos(names), strict=True):
        original, low_res = _pair(photo, channels, scale)
        with torch.no_grad():
            ours = upscale(model, low_res)
        bicubic = bicubic_upsample(low_res[None], scale)[0]
        row = {"photo": name, "size": f"{original.shape[-1]}x{original.shape[-2]}"}
        for label, image in (("bicubic", bicubic), ("ours", ours)):
            row[f"{label}_psnr"] = peak_signal_noise_ratio(image[None], original[None], data_range=1.0).item()
            row[f"{label}_psnr_y"] = psnr_y(image, original, border=scale).item()
            row[f"{label}_ssim"] = structural_similarity_index_measure(image[None], original[None], data_range=1.0).item()
        row["gain_rgb"] = row["ours_psnr"] - row["bicubic_psnr"]
        row["gain_y"] = row["ours_psnr_y"] - row["bicubic_psnr_y"]
        rows.append(row)
        images[name] = (bicubic, ours, original)
    return rows


def _pair(photo, channels: int, scale: int) -> tuple[Tensor, Tensor]:
    original = image_to_tensor(photo.convert("RGB" if channels == 3 else "L"))
    height, width = (side // scale * scale for side in original.shape[-2:])
    original = original[:, :height, :width]
    return original, bicubic_downsample(original, scale)


def picture(bicubic: Tensor, ours: Tensor, original: Tensor, path: Path) -> None:
    """Bicubic | ours | original on a crop of the validation photo chelsea (the cat's face)."""
    side_by_side_png([("bicubic", bicubic[CHELSEA_FACE]), ("ours", ours[CHELSEA_FACE]), ("original", original[CHELSEA_FACE])],
                     path, pixel_scale=2)  # fmt: skip
    print(f"picture: {path}")


def tables(results: list[dict]) -> str:
    """Per stage and split: mean gain over bicubic (RGB and Y), mean ± sd over seeds; the Transformer-vs-CNN verdict."""
    lines = []
    for stage in ("select", "report"):
        rows = [r for r in results if r["stage"] == stage]
        if not rows:
            continue
        splits = ["val"] if stage == "select" else ["val", "test"]
        lines += [f"{stage}: mean over each split's photos of ours minus bicubic; mean ± sd over seeds", "",
                  "| scale | epochs | model | parameters | overrides | seeds | minutes | " + " | ".join(
                      f"{s} gain RGB | {s} gain Y (PSNR-Y) | {s} SSIM" for s in splits) + " |",
                  "|---|---:|---|---:|---|---:|---:|" + "---:|" * 3 * len(splits)]  # fmt: skip
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            budget = (r.get("scale", 2), r["epochs"], r["model"], " ".join(r.get("overrides", [])))
            groups.setdefault(budget, []).append(r)
        for (scale, epochs, model, overrides), group in groups.items():
            cells = []
            for split in splits:
                for key in ("gain_rgb", "gain_y", "ours_ssim"):
                    values = [sum(photo[key] for photo in r[split]) / len(r[split]) for r in group]
                    cells.append(spread(values, 2 if key != "ours_ssim" else 4))
            lines.append(f"| x{scale} | {epochs} | {model} | {group[0]['parameters']:,} | {overrides or '-'} | {len(group)} | "
                         f"{spread([r['minutes'] for r in group], 1)} | " + " | ".join(cells) + " |")  # fmt: skip
        if stage == "report":  # the seeds both models ran at the same epochs, without overrides
            by_seed = {(r["model"], r.get("scale", 2), r["epochs"], r["seed"]): r for r in rows if not r.get("overrides")}
            pairs = [(by_seed[key], by_seed["cnn", *key[1:]]) for key in by_seed
                     if key[0] == "transformer" and ("cnn", *key[1:]) in by_seed]  # fmt: skip
            for budget in sorted({(ours.get("scale", 2), ours["epochs"]) for ours, _ in pairs}):
                for key, label in (("gain_y", "PSNR-Y"), ("gain_rgb", "RGB")):
                    gaps = [_mean_gain(ours["test"], key) - _mean_gain(cnn["test"], key)
                            for ours, cnn in pairs if (ours.get("scale", 2), ours["epochs"]) == budget]  # fmt: skip
                    lines.append(f"\nx{budget[0]}, {budget[1]} epochs, Transformer minus CNN, test gain {label} per seed: "
                                 f"{spread(gaps, 3)} dB; Transformer > CNN: {verdict(gaps, 0.0, lower_is_better=False)}")  # fmt: skip
        lines.append("")
    photos = [r for r in results if r["stage"] == "report"][:1]
    for r in photos:
        lines += [f"per photo ({r['model']}, seed {r['seed']}):", "",
                  "| split | photo | size | bicubic PSNR | ours PSNR | bicubic PSNR-Y | ours PSNR-Y | ours SSIM |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for split in ("val", "test"):
            for photo in r[split]:
                lines.append(f"| {split} | {photo['photo']} | {photo['size']} | {photo['bicubic_psnr']:.2f} | "
                             f"{photo['ours_psnr']:.2f} | {photo['bicubic_psnr_y']:.2f} | {photo['ours_psnr_y']:.2f} | "
                             f"{photo['ours_ssim']:.4f} |")  # fmt: skip
    return "\n".join(lines)


def _mean_gain(photos: list[dict], key: str = "gain_rgb") -> float:
    return sum(photo[key] for photo in photos) / len(photos)


class PlainCNN(nn.Module):
    """The CNN baseline: ``depth`` 3x3 convolutions with ReLUs at low resolution, pixel shuffle, plus bicubic.

    ESPCN's sub-pixel output with VDSR's residual over bicubic upsampling; input ``(batch, channels,
    h, w)``, output ``(batch, channels, h * scale, w * scale)``. It carries what :func:`upscale`
    reads from our models: ``config`` (``scale``, ``crop_size``), ``alignment`` and ``receptive_radius``.
    """

    def __init__(self, channels: int, width: int, scale: int, crop_size: int, depth: int = 6) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for index in range(depth - 1):
            layers += [nn.Conv2d(channels if index == 0 else width, width, 3, padding=1), nn.ReLU()]
        layers += [nn.Conv2d(width, channels * scale**2, 3, padding=1), nn.PixelShuffle(scale)]
        self.body = nn.Sequential(*layers)
        self.config = SimpleNamespace(scale=scale, crop_size=crop_size, channels=channels)
        self.alignment = (1, 1)
        self.receptive_radius = depth

    def forward(self, low_res: Tensor) -> Tensor:
        """``low_res (batch, channels, h, w)`` in [0, 1] -> ``(batch, channels, h * scale, w * scale)``."""
        return bicubic_upsample(low_res, self.config.scale) + self.body(low_res)

    @classmethod
    def matching(cls, parameters: int, data: SuperResolutionDataModule) -> PlainCNN:
        """The width whose model has the parameter count closest to ``parameters``."""
        def build(width: int) -> PlainCNN:
            return cls(data.channels, width, data.scale, data.crop_size)

        width = min(range(8, 257), key=lambda w: abs(_count(build(w)) - parameters))
        return build(width)


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_task(config: dict, data: SuperResolutionDataModule, overrides: list[str], lr: float | None):
    """The task of the YAML config, with the data's sizes linked in as the CLI does."""
    init = config["model"]["init_args"]
    model = dict(init["model"])
    model.update((key, value) for key, value in map(_split_override, overrides) if not key.startswith("data."))
    model.update(scale=data.scale, channels=data.channels, crop_size=data.crop_size)
    optimizer_args = {**init["optimizer"]["init_args"], **({"lr": lr} if lr else {})}
    return SuperResolution(
        model=SuperResolutionConfig(**model),
        optimizer=lambda params: torch.optim.AdamW(params, **optimizer_args),
        warmup_steps=init["warmup_steps"],
    )


class _Progress(pl.Callback):
    """One line per validation: epoch, the monitored metrics, minutes so far."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def on_validation_epoch_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        shown = {k: f"{float(v):.4f}" for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
        minutes = (time.perf_counter() - self.started) / 60
        print(f"epoch {trainer.current_epoch}: {shown} ({minutes:.1f} min)", flush=True)


if __name__ == "__main__":
    main()
