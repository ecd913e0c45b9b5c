"""Class-conditional Fashion-MNIST generation judged by a classifier: the classification accuracy score.

The classification accuracy score (CAS) of a class-conditional generator is the share of the
images generated for each requested class that a classifier trained on *real* images labels as that
class. It is read next to the same classifier's accuracy on the real test images (what a perfect
generator would score) and the generator's bits/dim on the test images.

Stages (each appends JSON lines to ``--out``; ``--table`` prints them):

``classifier``
    Trains the project's Fashion-MNIST classifier — ``configs/image_classification.yaml`` +
    ``configs/image_classification_fashion_mnist.yaml`` as shipped (the ViT recipe chosen on the
    validation images, 10 minutes on the 2 cores) — keeps its best epoch by validation accuracy and
    scores it once on the 10,000 real test images, as they are and quantised to ``--levels``
    intensity levels (the generator's images have that many).
``report``
    For each of ``--seeds``: trains the class-conditional Image Transformer
    (``configs/image_generation.yaml`` + ``image_generation_fashion_mnist.yaml`` +
    ``image_generation_fashion_mnist_conditional.yaml``: 16 levels, a small model for a CPU) for
    ``--minutes`` of wall-clock time, then with its final weights: bits/dim over the test images
    (``--test-images``: the first N), ``--per-class`` samples for each of the
    10 classes (KV-cached, at each ``--guidance-scales`` x ``--temperatures``), and the classifier's
    labels for them: CAS overall and per class. ``--grid`` writes the first seed's first ten samples
    of each class at the last setting, one row per class.
``select``
    The same with bits/dim on the validation images: for choosing the sampling settings (and
    anything else) with seeds of their own, before the test images are touched by ``report``.

Usage (alone on the machine; the Fashion-MNIST files once: ``multimodal data fashion-mnist``)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/class_conditional.py --stage classifier
    flock /tmp/bench.lock .venv/bin/python benchmarks/class_conditional.py --stage report --seeds 0 1 2 \\
        --test-images 2000 --grid docs/images/fashion_mnist_class_samples.png
    .venv/bin/python benchmarks/class_conditional.py --table
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import grouped, load, record, spread, verdict

from multimodal.images import classification_accuracy_score

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
CLASSIFIER_CONFIGS = ["image_classification.yaml", "image_classification_fashion_mnist.yaml"]
GENERATOR_CONFIGS = ["image_generation.yaml", "image_generation_fashion_mnist.yaml",
                     "image_generation_fashion_mnist_conditional.yaml"]
TARGET_CAS = 0.70


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["classifier", "select", "report"], default="report")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--levels", type=int, default=16, help="intensity levels of the generator (2-256)")
    parser.add_argument("--minutes", type=float, default=12.0, help="generator training budget per seed")
    parser.add_argument("--per-class", type=int, default=100, help="samples per class")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of the generator's configs (model.init_args.model.dim=64)")
    parser.add_argument("--classifier-set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of the classifier's configs (trainer.max_time=00:00:01:00)")
    parser.add_argument("--guidance-scales", type=float, nargs="+", default=[1.0],
                        help="sample and score at each classifier-free guidance scale (not 1: a generator "
                             "trained with --set model.init_args.model.class_dropout=0.1)")  # fmt: skip
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0],
                        help="sample and score at each sampling temperature (with each guidance scale)")
    parser.add_argument("--test-images", type=int, default=None,
                        help="bits/dim over only the first N test (select: validation) images")
    parser.add_argument("--grid", type=Path, default=None, help="PNG of the first seed's samples at the last setting, one row per class")
    parser.add_argument("--work", type=Path, default=ROOT / "outputs" / "class_conditional")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "class_conditional.jsonl")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if args.table:
        print(tables(load(args.out)))
        return
    torch.set_num_threads(args.threads)
    if args.stage == "classifier":
        record(args.out, run_classifier(args), "classifier")
    else:
        for seed in args.seeds:
            for result in run_generator(args, seed):
                record(args.out, result, args.stage)
                print(result, flush=True)
    print(tables(load(args.out)))


def fit(configs: list[str], overrides: list[str], folder: Path, seed: int) -> float:
    """``multimodal fit`` of ``configs`` in a fresh process writing under ``folder``; returns its seconds."""
    command = [sys.executable, "-m", "tasks.cli", "fit", *[a for c in configs for a in ("--config", str(CONFIGS / c))],
               f"--seed_everything={seed}", f"--trainer.default_root_dir={folder}",
               "--trainer.enable_progress_bar=false", *[f"--{pair}" for pair in overrides]]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"error: training failed ({' '.join(command)}):\n{result.stderr[-3000:]}")
    return time.perf_counter() - start


def labelled_images(
    levels: int | None, limit: int | None, split: str = "test"
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Fashion-MNIST ``split`` images float ``(n, 1, 28, 28)`` in [0, 1] (quantised to ``levels``), labels ``(n,)``, class names."""
    from multimodal.data.images import image_classification_dataset
    from multimodal.tokenizers.image import pixels_to_tokens, tokens_to_pixels

    data = image_classification_dataset("fashion_mnist", None, split)
    count = len(data) if limit is None else min(limit, len(data))
    images = torch.stack([data[i][0] for i in range(count)])
    labels = torch.tensor([data[i][1] for i in range(count)])
    if levels is not None and levels < 256:
        images = tokens_to_pixels(pixels_to_tokens(images, levels), 28, 28, 1, levels).float() / 255
    return images, labels, data.class_names


def load_classifier(args: argparse.Namespace) -> torch.nn.Module:
    from tasks.checkpoint import load_task

    folder = args.work / "classifier"
    if not folder.exists():
        raise SystemExit(f"error: {folder}: no classifier yet; run --stage classifier first")
    return load_task(folder).task.model


def run_classifier(args: argparse.Namespace) -> dict:
    """Trains the shipped Fashion-MNIST ViT recipe once; its accuracy on the real test images."""
    folder = args.work / "classifier"
    if folder.exists():
        raise SystemExit(f"error: {folder}: exists; remove it to train the classifier again")
    fit_s = fit(CLASSIFIER_CONFIGS, args.classifier_set, folder, seed=0)
    classifier = load_classifier(args)
    images, labels, _ = labelled_images(None, args.test_images)
    quantised, _, _ = labelled_images(args.levels, args.test_images)
    return {"fit_s": round(fit_s), "levels": args.levels,
            "test_acc": classification_accuracy_score(classifier, images, labels, 10).overall,
            "test_acc_quantised": classification_accuracy_score(classifier, quantised, labels, 10).overall}  # fmt: skip


def run_generator(args: argparse.Namespace, seed: int) -> list[dict]:
    """Trains one class-conditional generator; its bits/dim and CAS, one result per guidance scale and temperature.

    Stage ``select`` scores bits/dim on the validation images (sampling settings are chosen there, with
    seeds of their own); ``report`` on the test images.
    """
    from multimodal.images.generation import sample_images
    from multimodal.tokenizers.image import pixels_to_tokens
    from multimodal.viz import image_grid_png
    from tasks.checkpoint import load_task

    classifier = load_classifier(args)
    folder = args.work / f"generator_levels{args.levels}_seed{seed}"
    seconds = round(args.minutes * 60)
    overrides = [f"data.init_args.num_levels={args.levels}",
                 f"trainer.max_time=00:00:{seconds // 60:02d}:{seconds % 60:02d}", "model.init_args.num_samples=0",
                 *args.set]  # fmt: skip
    fit_s = fit(GENERATOR_CONFIGS, overrides, folder, seed)
    last = sorted(folder.glob("lightning_logs/version_*/checkpoints/last.ckpt"))[-1]
    task = load_task(last).task
    model = task.model

    split = "val" if args.stage == "select" else "test"
    images, labels, class_names = labelled_images(None, args.test_images, split)
    tokens = pixels_to_tokens(images, args.levels)
    nll = sum(task.nll((tokens[i : i + 250], labels[i : i + 250]))[0].item() for i in range(0, len(tokens), 250))
    test_bpd = nll / tokens.numel() / torch.log(torch.tensor(2.0)).item()

    steps = torch.load(last, map_location="cpu", weights_only=True)["global_step"]
    requested = torch.arange(10).repeat_interleave(args.per_class)
    results = []
    settings = [(scale, temperature) for scale in args.guidance_scales for temperature in args.temperatures]
    for scale, temperature in settings:
        start = time.perf_counter()
        samples = sample_images(model, len(requested), labels=requested, temperature=temperature, batch_size=250,
                                generator=torch.Generator().manual_seed(seed), guidance_scale=scale)  # fmt: skip
        sample_s = time.perf_counter() - start
        score = classification_accuracy_score(classifier, samples.float() / 255, requested, len(class_names))
        if args.grid is not None and seed == args.seeds[0] and (scale, temperature) == settings[-1]:
            columns = min(10, args.per_class)
            rows = torch.stack([samples[requested == c][:columns] for c in range(10)]).flatten(0, 1)
            image_grid_png(rows, args.grid, nrow=columns)
        per_class = dict(zip(class_names, score.per_class.tolist(), strict=True))
        results.append({"seed": seed, "levels": args.levels, "minutes": args.minutes, "fit_s": round(fit_s),
                        "steps": steps,
                        "split": split, "test_bpd": test_bpd, "cas": score.overall, "per_class": per_class,
                        "guidance_scale": scale, "temperature": temperature,
                        "overrides": args.set, "sample_s": round(sample_s, 1), "samples": len(requested)})  # fmt: skip
    return results


def tables(results: list[dict]) -> str:
    """The classifier's test accuracy, then CAS and bits/dim per generator setting (mean ± sd over seeds)."""
    lines = ["| classifier | test accuracy, real images | real images at the generator's levels |",
             "|---|---:|---:|"]  # fmt: skip
    for r in (r for r in results if r["stage"] == "classifier"):
        lines.append(f"| ViT, shipped Fashion-MNIST recipe | {r['test_acc']:.4f} | "
                     f"{r['test_acc_quantised']:.4f} ({r['levels']} levels) |")  # fmt: skip
    report = [r for r in results if r["stage"] in ("select", "report")]
    groups = grouped([{**r, "model": f"{r['levels']} levels, {r['minutes']:g} min"
                       + "".join(f", {key.rsplit('.', 1)[-1]}={value}"
                                 for key, value in (pair.split("=", 1) for pair in r.get("overrides", [])))
                       + (f", guidance {r['guidance_scale']:g}" if r.get("guidance_scale", 1.0) != 1.0 else "")
                       + (f", temperature {r['temperature']:g}" if r.get("temperature", 1.0) != 1.0 else "")
                       + (" (select, validation)" if r["stage"] == "select" else "")}
                      for r in report])  # fmt: skip
    if groups:
        lines += ["", "| generator | seeds | steps | bits/dim (test; select: validation) | **CAS** | weakest class |",
                  "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for model, runs in groups.items():
        per_class = {name: statistics.fmean(r["per_class"][name] for r in runs) for name in runs[0]["per_class"]}
        weakest = min(per_class, key=per_class.get)
        cas = [r["cas"] for r in runs]
        lines.append(f"| Image Transformer, {model} | {len(runs)} | "
                     f"{spread([float(r['steps']) for r in runs], 0)} | {spread([r['test_bpd'] for r in runs], 3)} | "
                     f"{spread(cas, 3)} | {weakest} {per_class[weakest]:.2f} |")  # fmt: skip
        lines.append(f"\nCAS >= {TARGET_CAS:.2f}: {verdict(cas, TARGET_CAS, lower_is_better=False)}\n")
        lines.append("Per class (mean over seeds): "
                     + ", ".join(f"{name} {value:.2f}" for name, value in per_class.items()))  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
