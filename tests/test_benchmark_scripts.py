"""Benchmark scripts still run end to end: a tiny-size run of each, through its command line."""

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


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
