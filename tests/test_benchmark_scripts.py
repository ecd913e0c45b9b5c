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
