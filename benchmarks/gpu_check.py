"""The GPU check: one command, run first whenever a machine with a GPU is at hand (``make gpu-check``).

Prints one markdown report and writes it to ``--out`` (default ``gpu_check.md``). Sections, each in
its own process under its own time limit, so one failure or overrun leaves the others standing:

    tasks       every task's shipped config (its model; ``--batch-scale`` x its batch), a few training
                steps through Lightning in ``bf16-mixed``, eager and with ``compile: true``:
                tokens or images per second over the timed steps and peak GPU memory
    lm          LM training throughput (forward, loss, backward, AdamW) in bf16 autocast against the
                minimal SDPA GPT and Hugging Face GPT-2 of the same shapes, in the same run
                (the models of ``benchmarks/text_throughput.py``), eager and block-compiled
    attention   causal relative attention, FlexAttention and the skewed kernel, against plain SDPA
                (no position term) at 1k-16k tokens: forward, and forward + backward, time and peak memory
    generation  cached generation, new tokens/s of ours against Hugging Face ``generate``

The exit status is 1 if any task fails to train or any section fails; the report says which.

Usage::

    make gpu-check                                   # on a machine with a GPU
    python benchmarks/gpu_check.py --out gpu_check.md --sections tasks attention
    python benchmarks/gpu_check.py --device cpu --quick   # a smoke run of the check itself (the tests run it)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

SECTIONS = ("tasks", "lm", "attention", "generation")
# Share of the time budget each section may use (they run one after another).
SECTION_SHARE = {"tasks": 0.45, "lm": 0.2, "attention": 0.2, "generation": 0.15}
# config, unit of throughput, extra overrides (the text tokenizer trains on 200 files: quick, same model)
TASKS = {
    "music_continuation": ("configs/music_continuation.yaml", []),
    "text_lm": ("configs/text_lm.yaml", ["--data.init_args.limit", "200"]),
    "image_classification": ("configs/image_classification.yaml", []),
    "image_generation": ("configs/image_generation.yaml", []),
    "super_resolution": ("configs/super_resolution.yaml", []),
    "super_resolution_autoregressive": (
        "configs/super_resolution.yaml",
        ["--config", "configs/super_resolution_autoregressive.yaml"],
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="gpu_check.md", help="where the report is written")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run of this script")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all sections together")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few steps (smoke run)")
    parser.add_argument("--batch-scale", type=int, default=4, help="tasks: batch size = config's x this")
    parser.add_argument("--section", help=argparse.SUPPRESS)  # a child process runs one section
    args = parser.parse_args()
    if args.section:
        print("RESULT " + json.dumps(run_section(args.section, args)), flush=True)
        return
    started = time.monotonic()
    report, failed = [header(args.device)], []
    for section in args.sections:
        remaining = args.budget - (time.monotonic() - started)
        limit = max(min(SECTION_SHARE[section] * args.budget / _share(args.sections), remaining), 10.0)
        result = _run_tasks(args, limit) if section == "tasks" else _run_child(section, args, limit)
        report.append(f"## {section}\n\n{result['markdown']}")
        failed += result["failed"]
        print(report[-1], flush=True)
        Path(args.out).write_text("\n".join(report))  # after every section: a later crash keeps the rest
    report.append(
        "## verdict\n\n" + (f"FAILED: {', '.join(failed)}" if failed else "every task and section ran")
    )
    report.append(f"\n(total {time.monotonic() - started:.0f} s)")
    Path(args.out).write_text("\n".join(report) + "\n")
    print(report[-2] + report[-1])
    sys.exit(1 if failed else 0)


def _share(sections: list[str]) -> float:
    return sum(SECTION_SHARE[name] for name in sections)


def _run_tasks(args: argparse.Namespace, limit: float) -> dict:
    """The tasks section: one process per task, each under an equal share of what is left of ``limit``."""
    start, rows, failed = time.monotonic(), [], []
    for index, name in enumerate(args.tasks):
        remaining = limit - (time.monotonic() - start)
        if remaining < 10:
            rows.append(f"| {name} | | | | skipped: out of time | | |")
            failed.append(f"{name} (not run)")
            continue
        result = _run_child("tasks", args, remaining / (len(args.tasks) - index), tasks=[name])
        if "rows" in result:
            rows += result["rows"]
        else:
            rows.append(f"| {name} | | | | FAILED: {result['markdown'].splitlines()[0]} | | |")
        failed += result["failed"]
    return {"markdown": task_table(rows, args) + f"\n({time.monotonic() - start:.0f} s)\n", "failed": failed}


def _run_child(section: str, args: argparse.Namespace, limit: float, tasks: list[str] | None = None) -> dict:
    """Runs one section in a fresh process (its own GPU memory peak, its own crash) under ``limit`` s."""
    command = [sys.executable, __file__, "--section", section, "--device", args.device,
               "--batch-scale", str(args.batch_scale), "--budget", str(limit), "--tasks", *(tasks or args.tasks)]  # fmt: skip
    command += ["--quick"] if args.quick else []
    start = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit + 30, cwd=ROOT)
    except subprocess.TimeoutExpired as error:
        tail = (error.stdout or b"")[-800:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"markdown": f"timed out after {limit + 30:.0f} s\n\n```\n{tail}\n```\n", "failed": [section]}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            result["markdown"] += f"\n({time.monotonic() - start:.0f} s)\n"
            return result
    tail = (done.stdout + done.stderr)[-1500:]
    return {"markdown": f"crashed (exit {done.returncode})\n\n```\n{tail}\n```\n", "failed": [section]}


def header(device: str) -> str:
    """Machine, GPU and versions."""
    import platform

    import torch

    name = (
        torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else platform.machine()
    )
    return (f"# GPU check\n\ndevice: {name}; torch {torch.__version__}; CUDA {torch.version.cuda}; "
            f"python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}\n")  # fmt: skip


def run_section(section: str, args: argparse.Namespace) -> dict:
    """Runs one section; returns ``{"markdown": table, "failed": [names]}``."""
    import torch

    torch.manual_seed(0)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    deadline = time.monotonic() + args.budget
    try:
        return {"tasks": task_section, "lm": lm_section, "attention": attention_section,
                "generation": generation_section}[section](args, deadline)  # fmt: skip
    except Exception:
        return {"markdown": f"```\n{traceback.format_exc()[-1500:]}\n```\n", "failed": [section]}


# ------------------------------------------------------------------------------------------- tasks
def task_section(args: argparse.Namespace, deadline: float) -> dict:
    """Each task: eager and compiled bf16-mixed training steps through Lightning; table rows."""
    rows, failed = [], []
    for name in args.tasks:
        for compile_blocks in (False, True):
            if time.monotonic() > deadline:
                rows.append(f"| {name} | {compile_blocks} | | | skipped: out of time | | |")
                failed.append(f"{name} (compile={compile_blocks}, not run)")
                continue
            try:
                row = train_task(name, compile_blocks, args)
                rows.append(f"| {name} | {compile_blocks} | {row['batch']} | {row['unit']} | "
                            f"{row['per_second']:.0f} | {row['peak_mib']:.0f} | {row['first_step_s']:.1f} |")  # fmt: skip
            except Exception as error:
                rows.append(f"| {name} | {compile_blocks} | | | FAILED: {_one_line(error)} | | |")
                failed.append(f"{name} (compile={compile_blocks})")
                traceback.print_exc()
    return {"markdown": "", "rows": rows, "failed": failed}


def task_table(rows: list[str], args: argparse.Namespace) -> str:
    """The tasks section's markdown."""
    precision = "bf16-mixed" if args.device == "cuda" else "bf16-mixed (CPU smoke run)"
    return (f"{precision}; the shipped config's model, batch x{args.batch_scale}; per second = the median "
            f"timed step's items / its time (after warm-up steps; the median keeps a recompilation for "
            f"an epoch's last, smaller batch out)\n\n"
            "| task | compile | batch | unit | per second | peak GPU MiB | first step s |\n"
            "|---|---|---:|---|---:|---:|---:|\n" + "\n".join(rows) + "\n")  # fmt: skip


def train_task(name: str, compile_blocks: bool, args: argparse.Namespace) -> dict:
    """A few training steps of one task from its config; throughput of the steps after the warm-up."""
    import pytorch_lightning as pl
    import torch
    import yaml

    from tasks.cli import task_class_from_args
    from tasks.lightning_cli import MultimodalCLI, import_tasks

    import_tasks()
    config, extra = TASKS[name]
    argv = ["fit", "--config", config, *extra]
    if args.quick:
        argv += _tiny_overrides(config, extra)
    batch_size = _batch_size(argv) * args.batch_scale
    argv += ["--data.init_args.batch_size", str(batch_size), "--model.init_args.compile", str(compile_blocks).lower(),
             "--trainer.logger", "false"]  # fmt: skip
    task_class = task_class_from_args(argv)
    cli = MultimodalCLI(argv[1:], data_links=getattr(task_class, "data_links", None), run=False)
    warmup, timed = (1, 2) if args.quick else (3, 10)
    timer = _StepTimer(warmup, args.device)
    trainer = pl.Trainer(
        accelerator="gpu" if args.device == "cuda" else "cpu", devices=1, precision="bf16-mixed",
        max_steps=warmup + timed, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[timer],
        gradient_clip_val=(yaml.safe_load(Path(config).read_text()).get("trainer") or {}).get("gradient_clip_val"),
    )  # fmt: skip
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(cli.model, datamodule=cli.datamodule)
    if timer.timed_steps < timed:
        raise RuntimeError(f"only {timer.timed_steps} of {timed} timed steps ran (an epoch too short?)")
    peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else float("nan")
    return {"batch": batch_size, "unit": timer.unit, "per_second": statistics.median(timer.rates),
            "peak_mib": peak, "first_step_s": timer.first_step_s}  # fmt: skip


def _tiny_overrides(config: str, extra: list[str]) -> list[str]:
    """The ``*_tiny.yaml`` overrides of a config (smoke runs)."""
    tiny = [config.replace(".yaml", "_tiny.yaml")] + [
        e.replace(".yaml", "_tiny.yaml") for e in extra if e.endswith(".yaml")
    ]
    return [arg for path in tiny if Path(ROOT / path).exists() for arg in ("--config", path)]


def _batch_size(argv: list[str]) -> int:
    """The data batch size the config files set (the last one wins)."""
    import yaml

    size = None
    for index, arg in enumerate(argv):
        if arg == "--config":
            data = (yaml.safe_load((ROOT / argv[index + 1]).read_text()) or {}).get("data") or {}
            size = (data.get("init_args") or {}).get("batch_size", size)
    return int(size or 8)


class _StepTimer:
    """Lightning callback: times the training steps after ``warmup``, counting tokens or images."""

    def __new__(cls, warmup: int, device: str):
        import pytorch_lightning as pl
        import torch

        class StepTimer(pl.Callback):
            def __init__(self) -> None:
                self.step, self.rates, self.timed_steps = 0, [], 0
                self.unit, self.first_step_s = "?", float("nan")

            def _sync(self) -> None:
                if device == "cuda":
                    torch.cuda.synchronize()

            def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
                self._sync()
                self.start = time.perf_counter()

            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
                self._sync()
                elapsed = time.perf_counter() - self.start
                if self.step == 0:
                    self.first_step_s = elapsed
                if self.step >= warmup:
                    count, self.unit = _count_items(batch)
                    self.rates.append(count / elapsed)
                    self.timed_steps += 1
                self.step += 1

        return StepTimer()


def _count_items(batch) -> tuple[int, str]:
    """Tokens of a ``(batch, seq + 1)`` id batch, else images (the first tensor's leading size)."""
    import torch

    first = batch
    while isinstance(first, (list, tuple, dict)):
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    if isinstance(first, torch.Tensor) and first.dim() == 2 and not first.is_floating_point():
        return first.shape[0] * (first.shape[1] - 1), "tokens"
    return first.shape[0], "images"


# ------------------------------------------------------------------------------------------ LM peers
def lm_section(args: argparse.Namespace, deadline: float) -> dict:
    """Training tokens/s of ours against the minimal SDPA GPT and HF GPT-2, eager and block-compiled."""
    import torch
    from text_throughput import BUILDERS, measure

    from multimodal.layers import compile_blocks

    def compiled_minimal(seq_len):
        model = BUILDERS["minimal_sdpa"](seq_len)
        for index, block in enumerate(model.blocks):
            model.blocks[index] = torch.compile(block)  # the same per-block compilation as ours
        return model

    extra = {
        "ours+compile": lambda seq_len: compile_blocks(BUILDERS["ours"](seq_len)),
        "minimal_sdpa+compile": compiled_minimal,
    }
    batch, seq, rounds, steps = (2, 64, 1, 1) if args.quick else (16, 1024, 3, 10)
    precision = "bf16-mixed"
    names = ["ours", "ours_logits", "ours_relative", "hf_gpt2", "minimal_sdpa", "ours+compile", "minimal_sdpa+compile"]
    results = measure(names, precision, rounds, steps, batch, seq, device=args.device, builders=extra)
    medians = {name: statistics.median(values) for name, values in results.items()}
    best_eager = max(medians[name] for name in ("hf_gpt2", "minimal_sdpa"))
    lines = [f"6 layers x dim 256, vocab 8000, batch {batch} x seq {seq}, bf16 autocast, AdamW; median of "
             f"{rounds} rounds of {steps} steps; ratio to the best eager peer", "",
             "| model | tokens/s | ratio |", "|---|---:|---:|"]  # fmt: skip
    lines += [f"| {name} | {value:.0f} | {value / best_eager:.2f} |" for name, value in medians.items()]
    return {"markdown": "\n".join(lines) + "\n", "failed": []}


# ----------------------------------------------------------------------------------------- attention
def attention_section(args: argparse.Namespace, deadline: float) -> dict:
    """Relative attention (flex, skew) vs SDPA, causal, heads 8 x head_dim 64, bf16."""
    import torch

    lengths = [256, 512] if args.quick else [1024, 4096, 16384]
    names = ["sdpa", "relative_flex", "relative_skew"]
    modes = ["forward", "train"] if args.device == "cuda" else ["forward"]
    lines = ["causal, batch 1, 8 heads x head_dim 64, bf16; relative: one embedding per distance (unclipped); "
             "best of 5 after warm-up; memory = peak GPU memory above the inputs", "",
             "| tokens | mode | " + " | ".join(f"{n} ms | {n} MiB" for n in names) + " | flex / sdpa time |",
             "|---:|---|" + "---:|---:|" * len(names) + "---:|"]  # fmt: skip
    failed = []
    for length in lengths:
        for mode in modes:
            if time.monotonic() > deadline:
                lines.append(f"| {length} | {mode} | skipped: out of time |")
                continue
            cells, times = [], {}
            for name in names:
                try:
                    ms, mib = _time_attention(name, length, mode, args.device)
                    times[name] = ms
                    cells.append(f"{ms:.2f} | {mib:.0f}")
                except Exception as error:
                    if "out of memory" in str(error).lower():
                        cells.append("OOM | -")
                    else:
                        cells.append(f"failed: {_one_line(error)[:40]} | -")
                        failed.append(f"attention {name} {length} {mode}")
                    torch.cuda.empty_cache() if args.device == "cuda" else None
            ratio = (
                f"{times['relative_flex'] / times['sdpa']:.2f}"
                if {"sdpa", "relative_flex"} <= times.keys()
                else "-"
            )
            lines.append(f"| {length} | {mode} | " + " | ".join(cells) + f" | {ratio} |")
    return {"markdown": "\n".join(lines) + "\n", "failed": failed}


def _time_attention(name: str, length: int, mode: str, device: str) -> tuple[float, float]:
    """Best milliseconds of 5 and peak MiB above the inputs, for one implementation and length."""
    import torch
    import torch.nn.functional as F

    from multimodal.layers.positions.relative import RelativePositionEmbedding, relative_attention

    heads, head_dim = 8, 64
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    grad = mode == "train"
    q, k, v = (
        torch.randn(1, heads, length, head_dim, device=device, dtype=dtype, requires_grad=grad)
        for _ in range(3)
    )
    table = RelativePositionEmbedding(heads, head_dim, length - 1, causal=True).to(device)

    def run():
        if name == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            backend = "flex" if name == "relative_flex" else "skew"
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                out = relative_attention(q, k, v, table, causal=True, backend=backend)
        if grad:
            out.float().sum().backward()
        return out

    context = torch.enable_grad() if grad else torch.no_grad()
    with context:
        run()  # warm-up (compiles flex once per shape)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if device == "cuda" else 0
        times = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else float("nan")
    return 1000 * min(times), peak


# ---------------------------------------------------------------------------------------- generation
def generation_section(args: argparse.Namespace, deadline: float) -> dict:
    """Cached generation of ours vs Hugging Face GPT-2 generate (benchmarks/text_generation.py's models)."""
    import torch
    from text_generation import VOCAB_SIZE, hf_model, our_model, speed, speed_table

    new_tokens, rounds = (16, 1) if args.quick else (512, 3)
    ours, hf = our_model().to(args.device), hf_model().to(args.device)
    prompt = torch.randint(0, VOCAB_SIZE, (1, 64), device=args.device)
    tables = []
    for mode in ("greedy", "sample"):
        tables.append(speed_table(speed(ours, hf, prompt, new_tokens, mode, rounds), mode))
    intro = f"6 layers x dim 256, float32, batch 1, prompt 64, {new_tokens} new tokens, {rounds} rounds\n\n"
    return {"markdown": intro + "\n".join(tables), "failed": []}


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()
    return (text[0] if text else type(error).__name__)[:120].replace("|", "/")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
