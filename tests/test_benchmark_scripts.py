"""Benchmark scripts still run end to end: a tiny-size run of each, through its command line.

The scripts run inside the test process (``in_process.run_script``: the same arguments, exit status and
printed text) so each run does not pay a fresh interpreter's ~7 s of imports; the trainings some scripts
start are still processes of their own."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from in_process import run_script

ROOT = Path(__file__).resolve().parents[1]


def _call(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS...`` (the command as a list) run in this process, with the given environment."""
    python, script, *args = command
    assert python == sys.executable
    return run_script(Path(script), *args, env=env)


def _run(script: str, *args: str) -> str:
    done = _call([sys.executable, str(ROOT / "benchmarks" / script), *args])
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow  # 40-80 s each on 2 cores: `make test-all` runs them
def test_transfer_records_every_arm_and_seed_once_and_resumes(tmp_path):
    out = tmp_path / "transfer.jsonl"
    tiny = ["--pretrain-steps", "2", "--steps", "2", "--seq-len", "16", "--batch-size", "2", "--dim", "16",
            "--num-layers", "1", "--text-files", "3", "--arms", "scratch", "text_frozen", "--out", str(out)]  # fmt: skip
    _run("transfer.py", *tiny, "--seeds", "0", "1")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["arm"], r["seed"]) for r in rows) == [("scratch", 0), ("scratch", 1),
                                                           ("text_frozen", 0), ("text_frozen", 1)]  # fmt: skip
    assert all(math.isfinite(r["val_nll"]) and math.isfinite(r["test_nll"]) for r in rows)
    frozen = next(r for r in rows if r["arm"] == "text_frozen")
    assert frozen["trainable"] < frozen["total"] and frozen["text_val_nll"] is not None
    # A second run with the same settings trains nothing again; one more seed adds only that seed.
    table = _run("transfer.py", *tiny, "--seeds", "0", "1", "2")
    seeds = [json.loads(line)["seed"] for line in out.read_text().splitlines()]
    assert sorted(seeds) == [0, 0, 1, 1, 2, 2]
    assert "| text_frozen | " in table and "| 3 |" in table


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_text_quality_selects_on_validation_only_and_reports_test_with_a_size_matched_lstm(tmp_path):
    out = tmp_path / "text_quality.jsonl"
    tiny = ["--steps", "2", "--dim", "32", "--layers", "1", "--vocab-size", "512", "--eval-windows", "2",
            "--threads", "1", "--out", str(out)]  # fmt: skip
    _run("text_quality.py", *tiny, "--stage", "select", "--models", "transformer", "--position", "rotary",
         "--set", "activation=swiglu", "norm=rmsnorm", "--transformer-lr", "1e-3", "4e-3")  # fmt: skip
    selected = _rows(out)
    assert [(r["stage"], r["lr"]) for r in selected] == [("select", 1e-3), ("select", 4e-3)]
    assert all("test_nll" not in r and math.isfinite(r["val_nll"]) for r in selected), "select touched test"
    assert "rotary" in selected[0]["detail"] and "swiglu" in selected[0]["detail"]

    _run("text_quality.py", *tiny, "--stage", "report", "--models", "transformer", "lstm",
         "--transformer-lr", "4e-3", "--lstm-lr", "1e-2", "--seeds", "0", "1")  # fmt: skip
    reported = [r for r in _rows(out) if r["stage"] == "report"]
    assert sorted((r["model"], r["seed"]) for r in reported) == [("lstm", 0), ("lstm", 1),
                                                                 ("transformer", 0), ("transformer", 1)]  # fmt: skip
    assert all(math.isfinite(r["test_nll"]) for r in reported)
    sizes = {r["model"]: r["parameters"] for r in reported}
    assert abs(sizes["lstm"] - sizes["transformer"]) <= 0.01 * sizes["transformer"]
    table = _run("text_quality.py", "--table", "--out", str(out))
    assert "Transformer / LSTM test perplexity, per seed" in table and "over 2 seeds" in table


@pytest.mark.slow  # 40-80 s each on 2 cores: `make test-all` runs them
def test_image_generation_select_and_report_keep_their_splits_with_ema(tmp_path):
    out = tmp_path / "image_generation.jsonl"
    tiny = ["--epochs", "1", "--set", "dim=16", "num_layers=1", "ff_dim=32", "num_heads=2", "--ema", "0.9",
            "--threads", "1", "--out", str(out)]  # fmt: skip
    _run("image_generation.py", *tiny, "--stage", "select", "--models", "transformer", "pixelcnn")
    rows = _rows(out)
    baseline = next(r for r in rows if r["stage"] == "baseline")
    assert 0 < baseline["test_bpd"] < math.log2(17)  # counting beats the uniform distribution
    selected = [r for r in rows if r["stage"] == "select"]
    assert sorted(r["model"] for r in selected) == ["pixelcnn", "transformer"]
    assert all("test_bpd" not in r and "ema=0.9" in r["overrides"] for r in selected), "select touched test"

    _run("image_generation.py", *tiny, "--stage", "report", "--models", "transformer", "--seeds", "0")
    (report,) = [r for r in _rows(out) if r["stage"] == "report"]
    assert math.isfinite(report["test_bpd"]) and math.isfinite(report["val_bpd"])
    assert "ratio to per-pixel" in _run("image_generation.py", "--table", "--out", str(out))


@pytest.mark.slow  # 40-80 s each on 2 cores: `make test-all` runs them
def test_vit_quality_digits_selects_on_validation_and_reports_test_against_the_svc(tmp_path):
    out = tmp_path / "vit_digits.jsonl"
    tiny = ["--sections", "digits", "--threads", "1", "--out", str(out), "--set", "trainer.max_epochs=1",
            "model.init_args.model.dim=16", "model.init_args.model.num_layers=1", "model.init_args.model.ff_dim=32"]  # fmt: skip
    _run("vit_quality.py", *tiny, "--positions", "learned", "relative2d", "--recipes", "shipped", "erasing+ema")
    selected = _rows(out)  # --stage select is the default
    assert sorted((r["position"], r["recipe"]) for r in selected) == [
        ("learned", "erasing+ema"), ("learned", "shipped"), ("relative2d", "erasing+ema"), ("relative2d", "shipped")]
    assert all(r["stage"] == "select" and "test_acc" not in r and 0 <= r["val_acc"] <= 1 for r in selected)

    _run("vit_quality.py", *tiny, "--stage", "report", "--positions", "learned", "--seeds", "0", "1")
    rows = _rows(out)
    svc = next(r for r in rows if r["stage"] == "svc")
    assert svc["test_acc"] > 0.95  # scikit-learn's example classifier on our split
    reported = [r for r in rows if r["stage"] == "report"]
    assert [r["seed"] for r in reported] == [0, 1] and all(0 <= r["test_acc"] <= 1 for r in reported)
    assert "ViT (shipped) >= SVC" in _run("vit_quality.py", "--table", "--out", str(out))


def test_vit_fashion_table_keeps_apart_runs_of_one_recipe_with_different_overrides():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vit_quality

    row = {"recipe": "conv stem 16", "seed": 0, "budget_minutes": 30.0, "val_acc": 0.9, "epochs": 40.0,
           "train_images_per_s": 1000.0, "stage": "select"}  # fmt: skip
    rows = [row, {**row, "set": ["model.init_args.model.ff_dim=512"], "val_acc": 0.8},
            {**row, "set": ["trainer.max_epochs=3"], "val_acc": 0.7}]  # fmt: skip
    lines = [line for line in vit_quality.fashion_protocol_tables(rows).splitlines() if line.startswith("| conv")]
    assert lines == ["| conv stem 16 | 30.0 | 0.9000 | 40.00 | 1000 |", "| conv stem 16, ff_dim=512 | 30.0 | 0.8000 | 40.00 | 1000 |",
                     "| conv stem 16, trainer.max_epochs=3 | 30.0 | 0.7000 | 40.00 | 1000 |"]  # fmt: skip


def test_vit_fashion_keeps_each_runs_weights_in_a_file_of_its_own_and_never_replaces_one(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vit_quality

    folder = tmp_path / "weights"
    row = {"recipe": "conv stem 16+distill", "seed": 1, "teacher_minutes": 3.0}
    first = vit_quality.weights_path(folder, row)
    others = [vit_quality.weights_path(folder, changed) for changed in ({**row, "seed": 2}, {**row, "teacher_minutes": 5.0},
              {**row, "set": ['data.init_args.augmentation=[{"name": "RandomCrop", "padding": 1}]']})]  # fmt: skip
    assert first.parent == folder and len({first, *others}) == 4
    assert all(path.parent == folder and " " not in path.name and '"' not in path.name for path in others)
    folder.mkdir()
    first.write_bytes(b"an earlier run")
    with pytest.raises(SystemExit, match="--save-weights: .* exists"):
        vit_quality.weights_path(folder, row)
    assert first.read_bytes() == b"an earlier run"
    twice = ["--sections", "fashion", "--recipes", "shipped", "shipped", "--save-weights", str(tmp_path / "new"),
             "--out", str(tmp_path / "rows.jsonl")]  # fmt: skip
    done = _call([sys.executable, str(ROOT / "benchmarks" / "vit_quality.py"), *twice])
    assert done.returncode != 0 and "error: --save-weights: two runs" in done.stderr
    assert not (tmp_path / "rows.jsonl").exists() and not (tmp_path / "new").exists()


def test_vit_fashion_report_keeps_apart_students_of_teachers_trained_for_different_minutes():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vit_quality

    row = {"recipe": "distill", "seed": 0, "budget_minutes": 30.0, "val_acc": 0.9, "test_acc": 0.9, "epochs": 30.0,
           "train_images_per_s": 1000.0, "stage": "report", "teacher_minutes": 3.0}  # fmt: skip
    rows = [row, {**row, "seed": 1, "test_acc": 0.92}, {**row, "teacher_minutes": 5.0, "test_acc": 0.8}]
    lines = [line for line in vit_quality.fashion_protocol_tables(rows).splitlines() if line.startswith("| distill")]
    assert lines == ["| distill, 3-minute teacher | 2 | 30.00 ± 0.00 | 0.9000 ± 0.0000 | 0.9100 ± 0.0141 |",
                     "| distill, 5-minute teacher | 1 | 30.00 | 0.9000 | 0.8000 |"]  # fmt: skip


def test_vit_recipe_options_reach_the_model_the_data_and_the_trainer(tmp_path, monkeypatch):
    """Each option of benchmarks/vit_quality.py's recipes changes what the Lightning CLI builds, on top of the config."""
    from pytorch_lightning.callbacks import EMAWeightAveraging
    from torchvision.transforms import v2

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vit_quality

    from tasks.cli import MultimodalCLI
    from tasks.image_classification import ImageClassification

    monkeypatch.chdir(tmp_path)
    configs = ["image_classification.yaml"]

    def build(recipe: str) -> MultimodalCLI:
        args = ["--config", str(ROOT / "configs" / configs[0]), "--trainer.logger=false", "--trainer.callbacks=[]",
                *vit_quality.recipe_arguments(configs, recipe)]  # fmt: skip
        return MultimodalCLI(args, data_links=ImageClassification.data_links, run=False)

    def names(split) -> list[str]:
        def walk(transform):
            inner = transform.transforms if isinstance(transform, v2.Compose) else [transform]
            return [name for t in inner for name in (walk(t) if isinstance(t, v2.Compose) else [type(t).__name__])]

        return walk(split.transform)

    shipped = build("shipped")
    assert shipped.model._batch_mix is None and shipped.model.config.drop_path == 0
    assert not any(isinstance(c, EMAWeightAveraging) for c in shipped.trainer.callbacks)
    cli = build("trivialaugment+erasing+mixup+drop path+ema")
    mixers = cli.model._batch_mix.transforms
    assert sorted((type(m).__name__, m.alpha) for m in mixers) == [("CutMix", 1.0), ("MixUp", 0.8)]
    assert cli.model.config.drop_path == 0.1
    assert [c.__class__ for c in cli.trainer.callbacks if isinstance(c, EMAWeightAveraging)] == [EMAWeightAveraging]
    train = names(cli.datamodule.split("train"))
    # the config's own augmentation stays first; the recipe's follow it, before the conversion to float
    assert train.index("RandomAffine") < train.index("TrivialAugmentWide") < train.index("RandomErasing")
    assert train.index("RandomErasing") < train.index("ToDtype")
    assert "TrivialAugmentWide" not in names(cli.datamodule.split("val"))


@pytest.mark.slow  # 40-80 s each on 2 cores: `make test-all` runs them
def test_super_resolution_scores_validation_photos_in_select_and_test_photos_in_report(tmp_path):
    out = tmp_path / "super_resolution.jsonl"
    tiny = ["--epochs", "1", "--set", "dim=16", "num_layers=1", "stem_channels=4", "--threads", "1", "--out", str(out),
            "--models-dir", str(tmp_path / "models")]  # fmt: skip
    _run("super_resolution.py", *tiny, "--stage", "select", "--models", "transformer")
    (selected,) = _rows(out)
    assert "test" not in selected and [p["photo"] for p in selected["val"]] == ["chelsea", "camera", "gravel"]

    _run("super_resolution.py", *tiny, "--stage", "report", "--models", "cnn")
    report = _rows(out)[-1]
    assert report["model"] == "cnn" and report["stage"] == "report"
    assert [p["photo"] for p in report["test"]] == ["moon", "motorcycle", "page"]
    # The peer is sized to the (overridden) Transformer: within 1 % of its parameters.
    assert abs(report["parameters"] - selected["parameters"]) <= 0.01 * selected["parameters"]
    for photo in report["test"]:  # bicubic's PSNR does not depend on the model
        assert math.isfinite(photo["ours_psnr"]) and 15 < photo["bicubic_psnr"] < 50

    # The picture needs both report runs' weights: refused before the Transformer's exist, drawn after.
    picture = tmp_path / "four.png"
    refused = _call([sys.executable, str(ROOT / "benchmarks" / "super_resolution.py"), *tiny, "--stage",
                     "picture", "--picture", str(picture)])  # fmt: skip
    assert refused.returncode != 0 and "transformer" in refused.stderr and not picture.exists()
    _run("super_resolution.py", *tiny, "--stage", "report", "--models", "transformer")
    _run("super_resolution.py", *tiny, "--stage", "picture", "--picture", str(picture))
    from PIL import Image

    width, height = Image.open(picture).size
    assert width > 4 * 240 > height  # four 120-pixel-wide crops at twice the size, side by side


def test_music_quality_selects_on_validation_and_reports_test(tmp_path):
    out = tmp_path / "music_quality.jsonl"
    tiny = ["--steps", "2", "--seq-len", "32", "--batch-size", "2", "--dim", "16", "--num-layers", "1",
            "--lstm-layers", "1", "--models", "relative", "lstm", "--out", str(out)]  # fmt: skip
    _run("music_quality.py", *tiny, "--stage", "select", "--lrs", "1e-3")
    selected = _rows(out)
    assert sorted(r["model"] for r in selected) == ["lstm", "relative"]
    assert all("test_nll" not in r and math.isfinite(r["val_nll"]) for r in selected), "select touched test"
    _run("music_quality.py", *tiny, "--stage", "report", "--lr", "relative=1e-3", "lstm=1e-3", "--seeds", "0")
    reported = [r for r in _rows(out) if r["stage"] == "report"]
    assert sorted(r["model"] for r in reported) == ["lstm", "relative"]
    assert all(math.isfinite(r["test_nll"]) for r in reported)


@pytest.mark.slow  # 40-80 s each on 2 cores: `make test-all` runs them
def test_music_demo_sweep_reports_the_chosen_candidate_on_the_test_pieces(tmp_path):
    refused = _call([sys.executable, str(ROOT / "benchmarks" / "music_demo_sweep.py"), "--stage", "report",
                     "--candidates", "3x128", "2x128-lr2e-3"])  # fmt: skip
    assert refused.returncode == 2 and "the one candidate" in refused.stderr
    table = _run("music_demo_sweep.py", "--stage", "report", "--candidates", "2x128-duration-lr3e-3",
                 "--minutes", "0.05", "--out", str(tmp_path))  # fmt: skip
    (result,) = [json.loads(path.read_text()) for path in tmp_path.glob("*/result.json")]
    val, test = result, result["test"]
    # Different pieces: the validation and test splits of the chorales score differently.
    assert math.isfinite(test["nll_per_second"]) and test["nll_per_event"] != val["nll_per_event"]
    assert "| nll_per_second |" in table and "≤ 32.8" in table and "not met" in table  # a few steps learn little


SPEED_SCRIPTS = {  # script: (tiny arguments, rows its table must hold) -- the scripts run, the times are not judged
    "attention.py": (["--lengths", "32", "--implementations", "sdpa", "ours", "naive_shaw", "--modes", "train", "decode",
                      "--repeats", "1", "--taking-turns"], ["| 32 | ", "(1.00×) | — | ", "| n/a |"]),
    "command_start.py": (["--rounds", "1", "--set", "--max-new-tokens", "8", "--no-audio"],
                         ["| after | ", "generate --model music --style chorale --key G minor --max-new-tokens 8"]),
    "fused_loss.py": (["--batch-size", "2", "--seq-len", "16", "--chunks", "8", "--rounds", "1", "--threads", "1"],
                      ["| plain |", "| chunk 8 |"]),
    "gqa_decoding.py": (["--kv-heads", "8", "1", "--contexts", "32", "--batches", "1", "--steps", "2", "--rounds", "1",
                         "--threads", "1"], ["| 1 | 32 | 8 |", "| 1 | 32 | 1 |"]),
    "midi_tokenizer.py": (["--limit", "3", "--repeats", "1"], ["| encode parsed piece → ids |", "| decode ids"]),
    "text_throughput.py": (["--rounds", "1", "--steps", "1", "--batch-size", "1", "--seq-len", "16", "--threads", "1"],
                           ["| ours |", "| hf_gpt2 |", "| x_transformers |", "| minimal_sdpa |"]),
    "text_generation.py": (["--prompt-len", "4", "--new-tokens", "4", "--rounds", "1", "--contexts", "8", "16",
                            "--threads", "1"], ["| hf_gpt2 |", "| 16 |"]),
    "vit_step.py": (["--steps", "1", "--warmup", "1", "--rounds", "1", "--model", "30-minute", "--contenders",
                     "two processes", "two processes, bf16"], ["| two processes | ", "| two processes, bf16 | "]),
}  # fmt: skip


@pytest.mark.parametrize("script", sorted(SPEED_SCRIPTS))
def test_speed_benchmark_runs_at_a_tiny_size_and_prints_every_contender(script):
    args, rows = SPEED_SCRIPTS[script]
    printed = _run(script, *args)
    assert all(row in printed for row in rows), printed[-2000:]


def test_attention_benchmark_in_bf16_trains_both_kernels_at_the_asked_batch():
    printed = _run("attention.py", "--lengths", "17", "--implementations", "sdpa", "ours", "--modes", "train",
                   "--repeats", "1", "--taking-turns", "--batch", "2", "--dtype", "bfloat16")  # fmt: skip
    assert "batch 2, bfloat16" in printed and "| 17 | " in printed and "failed" not in printed, printed[-2000:]


def test_length_extrapolation_scores_every_scheme_at_every_length(tmp_path):
    out = tmp_path / "length_extrapolation.jsonl"
    _run("length_extrapolation.py", "--schemes", "rotary", "alibi", "--seeds", "0", "--steps", "2", "--batch-size", "2",
         "--train-len", "16", "--factors", "1", "2", "--eval-tokens", "256", "--out", str(out))  # fmt: skip
    rows = _rows(out)
    assert sorted(r["scheme"] for r in rows) == ["alibi", "rotary"]
    assert all(math.isfinite(r["nll@1x"]) and math.isfinite(r["nll@2x"]) for r in rows)


def small_corpus(tmp_path: Path, chorales: list[str]) -> dict[str, str]:
    """A music21 corpus folder of the named Bach chorales and three Monteverdi madrigals (real pieces, copied
    from the wheel); returns the environment that points the package at it (and at a fresh cache)."""
    from multimodal.data.music21_corpus import music21_corpus_dir

    corpus = tmp_path / "corpus"
    pieces = {"bach": chorales, "monteverdi": ["madrigal.3.1", "madrigal.3.9", "madrigal.3.17"]}
    for collection, names in pieces.items():
        (corpus / collection).mkdir(parents=True)
        for name in names:
            shutil.copy(music21_corpus_dir() / collection / f"{name}.mxl", corpus / collection)
    return {**os.environ, "MULTIMODAL_MUSIC21_CORPUS": str(corpus), "MULTIMODAL_CACHE": str(tmp_path / "cache")}


def test_music_direction_measures_keys_styles_and_quality_and_skips_a_finished_seed(tmp_path):
    """A few real chorales and madrigals (held-out pieces of both among them), a two-step model."""
    env = small_corpus(tmp_path, ["bwv269", "bwv347", "bwv104.6", "bwv174.5", "bwv175.7"])
    out = tmp_path / "direction.jsonl"
    tiny = [sys.executable, str(ROOT / "benchmarks" / "music_direction.py"), "--tiny", "--steps", "2", "--new-tokens",
            "24", "--per-key", "1", "--per-style", "2", "--pieces", "1", "--seeds", "0", "--root",
            str(tmp_path / "runs"), "--out", str(out),
            "--set", "--data.init_args.collections=[bach,monteverdi]"]  # fmt: skip
    done = _call(tiny, env)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = _rows(out)
    assert row["key_samples"] == 24 and 0 <= row["key_accuracy"] <= 1 and 0 <= row["key_baseline_accuracy"] <= 1
    assert row["styles"] == ["chorale", "renaissance"] and 0 <= row["style_accuracy"] <= 1
    assert set(row["overlaps"]) == {"bach", "monteverdi"}
    assert all(0 <= value["duration"] <= 1 for value in row["overlaps"].values())
    assert math.isfinite(row["test_nats_per_note"]) and row["test_pieces"] == 2  # bwv175.7 has six parts: left out
    again = _call(tiny, env)
    assert "seed 0: already in" in again.stdout and len(_rows(out)) == 1
    assert "| key_accuracy |" in again.stdout
    # --guidance: the trained model again, without and with classifier-free guidance
    checkpoints = tmp_path / "runs" / "lightning_logs" / "seed0" / "checkpoints"
    model = next(path for path in (checkpoints / "best.ckpt", checkpoints / "last.ckpt") if path.is_file())
    guided = _call([*tiny[:-2], "--guidance", "--model", str(model), "--scales", "1", "3", "--threads", "1",
                    "--key-emphasis", "0", "30"], env)  # fmt: skip
    assert guided.returncode == 0, guided.stderr[-3000:]
    rows = [row for row in _rows(out) if "guidance_scale" in row]
    assert sorted((row["guidance_scale"], row["key_emphasis"]) for row in rows) == [(1, 0), (1, 30), (3, 0), (3, 30)]
    assert all(0 <= row["key_accuracy"] <= 1 and 0 <= row["style_accuracy"] <= 1 for row in rows)
    assert all(row["pieces"] == 1 for row in rows)  # how many pieces per collection the overlaps pooled
    assert 0 < rows[0]["real_tonic_triad_share"] < 1
    # 30 nats on the tonic triad: every note the key samples write is in it (where they write any)
    assert all(row["tonic_triad_share"] == 1 for row in rows if row["key_emphasis"] == 30 and row["tonic_triad_share"] == row["tonic_triad_share"])
    assert "| select | " in guided.stdout
    ceiling = _call([*tiny[:-2], "--real-ceiling", "--model", str(model), "--pieces", "1"], env)
    assert ceiling.returncode == 0, ceiling.stderr[-3000:]
    assert "| bach |" in ceiling.stdout and "1 vs 1 real" in ceiling.stdout


def test_harmonizer_trains_every_kind_per_seed_scores_the_same_lower_voices_and_skips_a_finished_run(tmp_path):
    """Real chorales, tiny models from scratch for two steps: every kind scores the same test chorales' lower
    voices, finite and positive, the decoder's rules only take probability from ids that are not the real ones,
    and the table pairs each kind with the alone model; a finished run is not trained again."""
    env = small_corpus(tmp_path, ["bwv269", "bwv347", "bwv104.6", "bwv174.5"])
    out = tmp_path / "harmonizer.jsonl"
    tiny = [sys.executable, str(ROOT / "benchmarks" / "harmonizer.py"), "--tiny", "--steps", "2", "--batch-size", "2",
            "--seeds", "0", "--stage", "report", "--max-given", "64", "--out", str(out),
            "--kinds", "alone", "harmonizer", "sight", "sight+harmonizer"]  # fmt: skip
    done = _call(tiny, env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(out)
    assert [row["kind"] for row in rows] == ["alone", "harmonizer", "sight", "sight+harmonizer"]
    assert rows[0]["split"] == "test" and rows[0]["chorales"] >= 1
    assert len({row["lower_notes"] for row in rows}) == 1 and rows[0]["lower_notes"] > 0
    for row in rows:
        assert 0 < row["decoder_nats_per_note"] < row["nats_per_note"] < 50
    assert "| report (tiny) | 2 | sight+harmonizer | 1 |" in done.stdout
    again = _call(tiny, env)
    assert again.returncode == 0 and "harmonizer seed 0: already in" in again.stdout and len(_rows(out)) == 4


def test_given_notes_fine_tunes_and_scores_harmonization_and_infilling_per_seed(tmp_path):
    """A few real chorales and madrigals, a tiny model from scratch for two steps: the NLLs are finite and
    positive, the held-out chorales are counted, and a finished seed is not run again."""
    env = small_corpus(tmp_path, ["bwv269", "bwv347", "bwv104.6", "bwv174.5"])
    out = tmp_path / "given.jsonl"
    tiny = [sys.executable, str(ROOT / "benchmarks" / "given_notes.py"), "--tiny", "--steps", "2", "--seeds", "0",
            "--min-seconds", "4", "--span", "2", "--root", str(tmp_path / "runs"), "--out", str(out),
            "--set", "--data.init_args.collections=[bach,monteverdi]", "--data.init_args.collection_shares=null"]  # fmt: skip
    done = _call(tiny, env)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = _rows(out)
    assert row["chorales"] >= 1 and row["harmony_notes"] > 0 and row["spans"] >= 1 and row["span_notes"] > 0
    for key in ("harmonization_given_nats_per_note", "harmonization_alone_nats_per_note",
                "infill_both_sides_nats_per_note", "infill_left_only_nats_per_note", "plain_nats_per_note",
                "harmonization_given_decoder_nats_per_note", "harmonization_alone_decoder_nats_per_note",
                "infill_both_sides_decoder_nats_per_note", "infill_left_only_decoder_nats_per_note",
                "harmonization_at_onsets_decoder_nats_per_note", "harmonization_read_ahead_decoder_nats_per_note"):  # fmt: skip
        assert 0 < row[key] < 50, key
    # the decoder's rules only take probability away from ids that are not the real ones
    assert row["harmonization_given_decoder_nats_per_note"] < row["harmonization_given_nats_per_note"]
    assert row["infill_left_only_decoder_nats_per_note"] <= row["infill_left_only_nats_per_note"]
    # the span split at the look-ahead before its end: the notes and the nats of both parts add up to the whole
    early, late = row["span_early_notes"], row["span_late_notes"]
    assert early + late == row["span_notes"] and row["span_late_seconds"] > 0
    for side in ("both_sides", "left_only"):
        parts = (early * row[f"infill_{side}_early_decoder_nats_per_note"]
                 + late * row[f"infill_{side}_late_decoder_nats_per_note"])  # fmt: skip
        assert parts == pytest.approx(row["span_notes"] * row[f"infill_{side}_decoder_nats_per_note"], rel=1e-9)
    again = _call(tiny, env)
    assert "seed 0: already in" in again.stdout and len(_rows(out)) == 1
    assert "| harmonization: alto, tenor, bass, as the decoder writes them" in again.stdout
    # the baseline, an unconditioned model: other settings, trained in a folder of their own (not the
    # finished run measured again), and paired with the first run in the table
    unconditioned = ["--data.init_args.given_notes.given_share=0.0", "--data.init_args.given_notes.infill_share=0.0",
                     "--data.init_args.given_notes.part_drop_share=0.5"]  # fmt: skip
    other = _call([*tiny, *unconditioned], env)
    assert other.returncode == 0, other.stderr[-3000:]
    rows = _rows(out)
    assert len(rows) == 2 and rows[1]["checkpoint"] != row["checkpoint"] and (ROOT / rows[1]["checkpoint"]).is_file()
    paired = other.stdout.split("against an unconditioned model of the same size and budget")[1].splitlines()[4]
    cut = 1 - row["harmonization_at_onsets_decoder_nats_per_note"] / rows[1]["harmonization_alone_decoder_nats_per_note"]
    assert paired.split("|")[-2].strip() == f"{cut:.3f}"
    assert "| harmonization, the soprano at its onsets and read ahead in blocks" in again.stdout
    split = _call([sys.executable, str(ROOT / "benchmarks" / "given_notes.py"), "--by-kind", row["checkpoint"]], env)
    assert split.returncode == 0, split.stderr[-3000:]
    kinds = json.loads(split.stdout.strip().splitlines()[-1])
    assert kinds["lower_notes"] == row["harmony_notes"]
    for case in ("at_onsets", "ahead", "alone"):  # the two parts add up to the benchmark's own number
        assert kinds[f"{case}_shifts"] >= 0 and kinds[f"{case}_other_ids"] > 0
    total = kinds["ahead_shifts"] + kinds["ahead_other_ids"]
    assert total == pytest.approx(row["harmonization_given_decoder_nats_per_note"], abs=2e-3)
    seams = _call([sys.executable, str(ROOT / "benchmarks" / "given_notes.py"), "--after-block", row["checkpoint"]], env)
    assert seams.returncode == 0, seams.stderr[-3000:]
    bins = [value for key, value in json.loads(seams.stdout.strip().splitlines()[-1]).items() if key.startswith("ids_")]
    assert sum(b["ids"] for b in bins) > 0 and all(b["blocks"] > 0 and b["sight_reading"] > 0 for b in bins if b["ids"])
    # a model trained elsewhere (given notes from its first step): measured once as it is, no fine-tuning, and set
    # against the unconditioned model's lower voices alone
    measure = [sys.executable, str(ROOT / "benchmarks" / "given_notes.py"), "--tiny", "--checkpoint", row["checkpoint"],
               "--min-seconds", "4", "--span", "2", "--out", str(out)]  # fmt: skip
    first = _call(measure, env)
    assert first.returncode == 0, first.stderr[-3000:]
    trained = _rows(out)[-1]
    assert trained["trained"] == row["checkpoint"] and trained["steps"] == 2 and trained["seed"] == 0
    at_onsets, alone = "harmonization_at_onsets_decoder_nats_per_note", "harmonization_alone_decoder_nats_per_note"
    assert trained[at_onsets] == pytest.approx(row[at_onsets], rel=1e-6)  # the checkpoint itself, not a new run
    (sight_read,) = [line for line in first.stdout.splitlines() if line.startswith("| sight-read |")]
    assert sight_read.split("|")[-2].strip() == f"{1 - trained[at_onsets] / rows[1][alone]:.3f}"
    again = _call(measure, env)
    assert "already in" in again.stdout and len(_rows(out)) == 3
    missing = _call([*measure[:4], str(tmp_path / "none.ckpt")])
    assert missing.returncode == 2 and "none.ckpt: no such file" in missing.stderr


@pytest.mark.slow  # the Bach collection converted, the shipped model harmonizing: `make test-all` runs it
def test_harmonization_keeps_every_soprano_and_records_the_voice_leading_per_seed(tmp_path):
    out = tmp_path / "harmonization.jsonl"
    printed = _run("harmonization.py", "--pieces", "2", "--seconds", "6", "--seeds", "0", "1", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    runs = [row for row in rows if "generated" in row]
    assert [row["seed"] for row in runs] == [0, 1] and all(row["pieces"] == 2 for row in runs)
    assert all(0 <= row["generated"]["crossing_share"] <= 1 for row in runs)
    assert any("int8_harmonize_seconds" in row for row in rows) and "voice crossings" in printed


def test_infill_seams_counts_the_silence_from_the_span_end_to_each_parts_next_kept_note():
    """Four parts resume 1.0, 1.0, 0.5 and 0 s after a span ending at 4 s (the last: no later note; the third:
    its next note at 4.5); the filled notes ring 0.5 s past the end in part 0 and 0.2 s in part 2: 2.5 s of
    waiting, of which 0.5 + 1.0 + 0.3 = 1.8 s silent."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import infill_seams
    import numpy as np

    piece = np.array([[60, 0.0, 2.0, 80, 0], [62, 5.0, 6.0, 80, 0], [55, 5.0, 6.0, 80, 1], [50, 4.5, 5.0, 80, 2],
                      [48, 0.0, 1.0, 80, 3]])  # fmt: skip
    filled = np.r_[piece, [[64, 3.0, 4.5, 80, 0], [52, 3.5, 4.2, 80, 2], [57, 3.0, 3.9, 80, 1]]]
    found = infill_seams.seams(filled, piece, 3.0, 4.0)
    assert found["waited"] == pytest.approx(2.5) and found["silent"] == pytest.approx(1.8)
    assert sorted(found["notes"][:, 0].tolist()) == [52, 57, 64]
    assert infill_seams.seams(piece, piece, 3.0, 4.0)["silent"] == pytest.approx(2.5)  # nothing sounds there


@pytest.mark.slow  # the Bach collection converted, the shipped model infilling: `make test-all` runs it
def test_infill_seams_keeps_everything_outside_the_span_and_records_a_row_per_seed(tmp_path):
    out = tmp_path / "seams.jsonl"
    printed = _run("infill_seams.py", "--pieces", "2", "--seeds", "0", "1", "--label", "now", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["seed"] for row in rows] == [0, 1] and all(row["pieces"] == 2 for row in rows)
    assert all(0 <= row["generated"]["seam_silence_share"] <= 1 and row["generated"]["notes"] > 0 for row in rows)
    assert rows[0]["real"]["seam_silence_share"] < 0.05 and "| now (2 seeds) |" in printed


@pytest.mark.slow  # the shipped model and the music21 collections: `make test-all` runs it
def test_quantized_inference_at_tiny_size_records_each_measurement(tmp_path):
    out = tmp_path / "quantized.jsonl"
    _run("quantized_inference.py", "--kernels", "--quality", "--tiny", "--seeds", "0", "--threads", "1",
         "--prompts", "2", "--out", str(out))  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["kernels", "music", "music", "music", "music"]
    assert [r["variant"] for r in rows[1:]] == ["float32", "int8", "int8 + f16 cache", "float16"]
    assert all("Float16Linear" in times for times in rows[0]["linear"].values())


@pytest.mark.slow  # about a minute on 2 cores: `make test-all` runs it
def test_transcription_selects_on_validation_and_reports_test(tmp_path, monkeypatch):
    pytest.importorskip("tinysoundfont")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from melodies import melody_folder

    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "transcription.jsonl"
    tiny = ["--minutes", "0.05", "--train-soundfonts", "bundled", "--test-soundfont", "bundled", "--threads", "1",
            "--data", f"pieces={melody_folder(tmp_path / 'tunes')}", "n_mels=32", "n_fft=400", "--set", "dim=32",
            "num_layers=1", "encoder_layers=1", "num_heads=2", "ff_dim=64", "--out", str(out)]  # fmt: skip
    _run("transcription.py", *tiny, "--stage", "select")
    _run("transcription.py", *tiny, "--stage", "report")
    rows = _rows(out)
    assert [(r["stage"], r["split"]) for r in rows] == [("select", "val"), ("report", "test")]
    assert all(0 <= r["onset_f1"] <= 1 and r["audio_per_second"] > 0 and r["steps"] > 0 for r in rows)
    assert all(r["budget_minutes"] == 0.05 for r in rows)  # the table groups runs by their budget
    config = (ROOT / "configs/transcription.yaml").read_text()
    assert all(f"tempo_range: {r['tempo_range']}" in config and len(r["date"].split("-")) == 3 for r in rows)
    assert "| 0.05 | 1 |" in _run("transcription.py", "--table", "--out", str(out))
    # the peer is deterministic: a row per run, named by its date (its speed moves between days), never by tempo
    plain = {**rows[1], "overrides": [], "data_overrides": []}  # the verdicts judge runs of the config as it is
    peer = {**plain, "model": "basic-pitch", "tempo_range": None, "budget_minutes": None, "onset_f1": 0.5}
    with out.open("a") as file:
        file.write(json.dumps(plain) + "\n")
        for day, speed in (("2026-12-03", 45.0), ("2026-12-05", 36.0)):
            file.write(json.dumps({**peer, "date": day, "audio_per_second": speed}) + "\n")
    table = _run("transcription.py", "--table", "--out", str(out))
    assert "| basic-pitch (2026-12-03) | - | - | - | 1 |" in table and "| 36.0 |" in table and "| 45.0 |" in table
    assert "Onset F1 minus basic-pitch's (0.5000)" in table


@pytest.mark.slow  # about a minute on 2 cores: `make test-all` runs it
@pytest.mark.skipif(
    not (Path.home() / ".cache" / "multimodal" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte").is_file()
    or "MULTIMODAL_CACHE" in os.environ,
    reason="Fashion-MNIST not fetched (multimodal data fashion-mnist)",
)
def test_class_conditional_scores_samples_with_the_trained_classifier(tmp_path):
    out, work, grid = tmp_path / "cas.jsonl", tmp_path / "work", tmp_path / "grid.png"
    common = ["--out", str(out), "--work", str(work), "--levels", "8", "--test-images", "50"]
    tiny = ["model.init_args.model.dim=16", "model.init_args.model.num_layers=1", "model.init_args.model.ff_dim=32"]
    _run("class_conditional.py", *common, "--stage", "classifier", "--classifier-set", *tiny, "trainer.devices=1",
         "trainer.strategy=auto", "trainer.max_steps=60", "trainer.val_check_interval=30",
         "trainer.limit_val_batches=2")  # fmt: skip
    classifier = _rows(out)[0]
    assert classifier["stage"] == "classifier" and 0 <= classifier["test_acc_quantised"] <= 1
    assert classifier["test_acc"] > 0.3  # 60 steps of 64 images are far above chance (0.1)
    _run("class_conditional.py", *common, "--seeds", "0", "--minutes", "0.15", "--per-class", "2", "--grid", str(grid),
         "--guidance-scales", "1", "3", "--set", *tiny, "model.init_args.model.num_heads=2",
         "model.init_args.model.class_dropout=0.2")  # fmt: skip
    report, guided = _rows(out)[1:]
    assert (report["guidance_scale"], guided["guidance_scale"]) == (1.0, 3.0) and guided["samples"] == 20
    assert guided["test_bpd"] == report["test_bpd"] and 0 <= guided["cas"] <= 1  # one generator, two samplings
    assert report["stage"] == "report" and report["samples"] == 20 and report["steps"] > 0
    assert len(report["per_class"]) == 10 and math.isfinite(report["test_bpd"]) and 0 < report["test_bpd"] < 4
    # two samples per class: each class scores 0, 1/2 or 1, and the overall score is their mean
    assert set(report["per_class"].values()) <= {0.0, 0.5, 1.0}
    assert report["cas"] == pytest.approx(sum(report["per_class"].values()) / 10)
    from PIL import Image

    width, height = Image.open(grid).size
    assert 4.5 * width < height < 5.5 * width  # one row per class: ten rows of two samples
    assert report["split"] == "test" and report["temperature"] == 1.0
    # the selection stage: bits/dim on the validation images, one row per sampling temperature
    _run("class_conditional.py", *common, "--stage", "select", "--seeds", "100", "--minutes", "0.1", "--per-class",
         "2", "--temperatures", "1", "0.5", "--set", *tiny, "model.init_args.model.num_heads=2")  # fmt: skip
    warm, cool = _rows(out)[3:]
    assert (warm["stage"], warm["split"], cool["split"]) == ("select", "val", "val")
    assert (warm["temperature"], cool["temperature"]) == (1.0, 0.5) and warm["test_bpd"] == cool["test_bpd"]
    table = _run("class_conditional.py", "--table", "--out", str(out))
    assert "CAS >= 0.70" in table and "class_dropout=0.2, guidance 3 |" in table
    assert "temperature 0.5 (select, validation) |" in table


def test_pretrained_music_reuses_peers_only_from_a_report_on_the_same_test_pieces(monkeypatch):
    """--reuse-peers takes the last report whose peers were scored on as many test Bach pieces, and says which."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import pretrained_music

    peers_a, peers_b = [{"run": "seed0", "nats_per_second": 26.0}], [{"run": "seed0", "nats_per_second": 24.0}]
    rows = [
        {"stage": "report", "steps": 3000, "bach_test_pieces": 29, "peers": peers_a},
        {"kind": "finetune", "stage": "report", "steps": 150},
        {"stage": "report", "steps": 500, "bach_test_pieces": 12, "peers": peers_b},  # another split
        {"stage": "report", "steps": 800, "bach_test_pieces": 29, "peers": []},  # no peers scored
    ]
    peers, source = pretrained_music.recorded_peers(rows, 29, "results.jsonl")
    assert peers == peers_a and source == "the report of the 3000-step model in results.jsonl"
    assert pretrained_music.recorded_peers(rows, 30, "results.jsonl") == ([], None)


def test_pretrained_music_table_keeps_fine_tunings_from_different_weights_apart(monkeypatch):
    """Fine-tuning rows are averaged per starting point: scratch, and each shipped model's weights."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import pretrained_music

    def run(start, nats, base=None):
        row = {"kind": "finetune", "stage": "report", "collection": "trecento", "pieces": 8, "steps": 150,
               "start": start, "nats_per_note": nats, "nats_per_second": 4 * nats}
        return {**row, "base": base} if base else row

    report = {"stage": "report", "parameters": 2e6, "steps": 10, "folder_bytes": 2**20,
              "float32": {"per_collection": {}, **dict.fromkeys(("key_accuracy", "key_baseline_accuracy",
                          "style_accuracy", "style_classifier_test_accuracy"), 0.5)}, "float16": {"per_collection": {}}}
    rows = [report, run("shipped", 4.0), run("shipped", 4.2), run("scratch", 6.0),
            run("shipped", 3.0, base="84064406f9d9"), run("shipped", 3.2, base="84064406f9d9")]
    table = pretrained_music.table(rows)
    assert "| shipped (first stage) | 2 | 4.100 ± 0.141 |" in table
    assert "| shipped (84064406f9d9) | 2 | 3.100 ± 0.141 |" in table
    assert "| scratch | 1 | 6.000 |" in table


def test_pretrained_music_counts_the_steps_of_every_stage_and_names_the_shares(monkeypatch, tmp_path):
    """A stage that started from another run's checkpoint (finetune.init_from) adds its steps after that run's;
    the card's shares are the report row's, the rest of the windows by notes."""
    import torch

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import pretrained_music

    monkeypatch.setattr(pretrained_music, "ROOT", tmp_path)
    first, second, third = tmp_path / "a.ckpt", tmp_path / "b.ckpt", tmp_path / "c.ckpt"
    torch.save({"global_step": 10000, "hyper_parameters": {"finetune": None}}, first)
    torch.save({"global_step": 3000, "hyper_parameters": {"finetune": {"init_from": "a.ckpt"}}}, second)
    torch.save({"global_step": 50, "hyper_parameters": {"finetune": {"init_from": "music"}}}, third)  # a folder
    assert pretrained_music.stage_steps(first) == [10000]
    assert pretrained_music.stage_steps(second) == [10000, 3000]
    assert pretrained_music.stage_steps(third) == [50]
    assert pretrained_music.shares({"collection_shares": {"bach": 0.5, "monteverdi": 0.1}}) == (
        "Bach 0.50, Monteverdi 0.10, the other collections 0.40 by their notes")
    assert pretrained_music.shares({}) == "by their notes"


def test_pretrained_music_part_nats_is_what_naming_each_notes_part_costs(monkeypatch):
    """part_nats against a note-by-note count: -log of the joint PITCH id's probability over its pitch's
    probability summed over the parts, from the softmax of each window's logits."""
    import numpy as np
    import torch

    from multimodal.data.music import MidiCorpus, MidiPieceWindows
    from multimodal.models import CausalLM, CausalLMConfig
    from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import pretrained_music

    tokenizer = MidiDurationTokenizer(MidiDurationTokenizerConfig(num_parts=3))
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig(vocab_size=tokenizer.vocab_size, dim=32, num_layers=1, num_heads=4, ff_dim=64,
                                    max_seq_len=64)).eval()  # fmt: skip
    rng = np.random.default_rng(0)
    onsets = np.sort(rng.integers(0, 40, 60)) * 0.25
    notes = np.column_stack([rng.integers(48, 72, 60), onsets, onsets + 0.5, np.full(60, 80), rng.integers(0, 3, 60)])
    nats, count = pretrained_music.part_nats(model, tokenizer, notes.astype(float), seq_len=64)

    windows = MidiPieceWindows(MidiCorpus(["piece"], [notes.astype(float)]), tokenizer, 64)
    expected, notes_seen = 0.0, 0
    with torch.no_grad():
        for index in range(len(windows)):
            ids = windows[index]
            probs = torch.softmax(model(ids[None, :-1])[0].double(), dim=-1)
            for row, target in enumerate(ids[1:].tolist()):
                offset = target - tokenizer.pitch_offset
                if 0 <= offset < 128 * 3:
                    pitch = offset % 128
                    same = sum(probs[row, tokenizer.pitch_offset + 128 * part + pitch] for part in range(3))
                    expected += -math.log(float(probs[row, target] / same))
                    notes_seen += 1
    assert count == notes_seen > 0
    assert nats == pytest.approx(expected, rel=1e-4) and nats > 0


def test_machine_line_names_the_cpu_its_vector_isa_and_its_bf16_units():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch
    from machine import machine

    line = machine()
    assert torch.backends.cpu.get_cpu_capability() in line and f"torch {torch.__version__}" in line
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo")
    first = cpuinfo.read_text().split("\n\n")[0]
    model = re.search(r"^model name\s*:\s*(.+)$", first, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", first, re.MULTILINE).group(1).split()
    assert model is None or line.startswith(model.group(1).strip())
    assert ("AMX-BF16" in line) == ("amx_bf16" in flags)
    assert ("AVX-512-BF16" in line) == ("avx512_bf16" in flags)
    assert ("no bf16 units" in line) == ("amx_bf16" not in flags and "avx512_bf16" not in flags)
