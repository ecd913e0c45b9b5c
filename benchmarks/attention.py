"""Attention with each position scheme against SDPA: relative (ours, naive Shaw, the plain skew), rotary, ALiBi.

Every (implementation, seq_len, mode) runs in a fresh process so peak memory is its own: the
"extra memory" column is the process's peak RSS minus its RSS after the inputs were built.
Times are the best of ``--repeats`` runs after one warm-up. Ratios are to SDPA in the same run.

Modes:
    train    forward + backward over the whole sequence
    forward  forward only, no autograd (inference / scoring)
    decode   one new query against ``seq_len`` cached keys (a step of cached generation)

``--taking-turns``: each (seq_len, mode) runs all implementations in one process instead, one
call of each per round, best of ``--repeats`` rounds — the ratios then come from calls seconds
apart, so a machine whose speed drifts between processes (this VM's moves by tens of percent
within minutes) moves peer and contender together; no memory column then.

Implementations: ``sdpa`` (causal SDPA, no positions: the peer), ``ours`` (relative, as a model
runs it: the fused C++ kernel on the CPU), ``skew`` (the skewed kernel of PyTorch calls, always),
``naive_shaw`` and ``plain_skew`` (the two classic ways of computing it), ``rotary`` (q and k
turned, then causal SDPA), ``alibi`` (query-blocked SDPA with the distance bias), ``ours_b{N}`` (the skewed kernel with query blocks of N: the block-size sweep) and
``fused_b{N}`` (the fused kernel with query tiles of N).

``--dtype bfloat16``: q, k and v in bf16, every call under bf16 autocast (the relative table stays
float32, as in a model). ``sdpa`` is then PyTorch's own bf16 kernel, forward and backward; compare
with a float32 run of the same command to see what 16 bits buy on this CPU.

Usage::

    python benchmarks/attention.py                       # the relative table of docs/benchmarks.md
    python benchmarks/attention.py --implementations sdpa rotary alibi --lengths 512 1024 2048 4096
    python benchmarks/attention.py --implementations sdpa ours_b32 ours_b64 ours_b128 ours_b256 --modes train
    python benchmarks/attention.py --implementations sdpa ours --lengths 1024 2048 4096 --modes train forward \
        --repeats 10 --taking-turns
    python benchmarks/attention.py --implementations sdpa --lengths 17 256 1024 --modes train forward \
        --repeats 10 --taking-turns --batch 8 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

from machine import machine

IMPLEMENTATIONS = [
    "sdpa",
    "naive_shaw",
    "plain_skew",
    "skew",
    "ours",
]  # the default table; also rotary, alibi, ours_b{N}, fused_b{N}
NAIVE_LIMIT_BYTES = 8 * 2**30  # naive Shaw materialises (heads, L, L, head_dim): skip when larger


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--modes", nargs="+", default=["train", "forward", "decode"])
    parser.add_argument("--implementations", nargs="+", default=IMPLEMENTATIONS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--taking-turns", action="store_true", help="all implementations in one process, in turns"
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        job = json.loads(args.worker)
        print(json.dumps(_measure_in_turns(**job) if "names" in job else _measure(**job)))
        return
    print(f"# {machine()}")
    for mode in args.modes:
        rows = {}
        for length in args.lengths:
            if args.taking_turns:
                job = dict(names=args.implementations, length=length, mode=mode, repeats=args.repeats, dtype=args.dtype, batch=args.batch)
                turns = _run_fresh(job)
                for name in args.implementations:  # a skipped one, or all of them when the process failed
                    rows[length, name] = turns.get(name) or _skip({**job, "name": name}) or turns
                continue
            for name in args.implementations:
                rows[length, name] = _run_fresh(
                    dict(name=name, length=length, mode=mode, repeats=args.repeats, dtype=args.dtype, batch=args.batch)
                )
        _print_table(mode, args.lengths, args.implementations, rows, args.dtype, args.batch)


def _run_fresh(job: dict) -> dict:
    if "names" in job:  # taking turns: the skipped ones are left out of the round
        job = {**job, "names": [n for n in job["names"] if "skipped" not in _skip({**job, "name": n})]}
    elif "skipped" in _skip(job):
        return _skip(job)
    result = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(job)], capture_output=True, text=True, check=False
    )
    if result.returncode:
        return {"skipped": "failed: " + result.stderr.strip().splitlines()[-1][:60]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def _skip(job: dict) -> dict:
    """``{"skipped": why}`` for a job that does not run (too large, or no such mode), else ``{}``."""
    if job["name"] == "naive_shaw" and 8 * job["length"] ** 2 * 32 * 4 * 3 > NAIVE_LIMIT_BYTES:
        return {"skipped": "needs > 8 GiB"}
    if job["mode"] == "decode" and (
        job["name"] in ("naive_shaw", "plain_skew") or job["name"].startswith("ours_b")
    ):
        return {"skipped": "n/a"}
    return {}


def _measure(name: str, length: int, mode: str, repeats: int, dtype: str = "float32", batch: int = 1) -> dict:
    step = _steps([name], length, mode, dtype, batch)[name]
    baseline = _rss_peak_mb()
    step()
    extra = _rss_peak_mb() - baseline
    return {"ms": 1000 * min(_seconds(step) for _ in range(repeats)), "extra_mb": max(extra, 0.0)}


def _measure_in_turns(
    names: list[str], length: int, mode: str, repeats: int, dtype: str = "float32", batch: int = 1
) -> dict:
    """Every implementation over the same inputs, one call each per round after a warm-up round; best of ``repeats``."""
    steps = _steps(names, length, mode, dtype, batch)
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            times[name].append(_seconds(step))
    return {name: {"ms": 1000 * min(seconds), "extra_mb": None} for name, seconds in times.items()}


def _steps(names: list[str], length: int, mode: str, dtype: str = "float32", batch: int = 1) -> dict:
    """A zero-argument step per implementation (forward, and backward when training) over shared inputs."""
    import torch

    half = dtype != "float32"
    torch_dtype = getattr(torch, dtype)

    torch.set_num_threads(2)
    torch.manual_seed(0)
    heads, head_dim = 8, 32  # dim 256
    grad = mode == "train"
    q_len = 1 if mode == "decode" else length
    q = torch.randn(batch, heads, q_len, head_dim, dtype=torch_dtype, requires_grad=grad)
    k, v = (torch.randn(batch, heads, length, head_dim, dtype=torch_dtype, requires_grad=grad) for _ in range(2))
    table = _table(heads, head_dim, length)
    table.weight.requires_grad_(grad)

    def step_of(run):
        def step():
            with torch.autocast("cpu", torch_dtype, enabled=half):
                if grad:
                    run(q, k, v).float().sum().backward()
                else:
                    with torch.no_grad():
                        run(q, k, v)

        return step

    return {name: step_of(_implementation(name, table, query_offset=length - q_len)) for name in names}


def _seconds(step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def _table(heads: int, head_dim: int, length: int):
    from multimodal.layers.positions.relative import RelativePositionEmbedding

    return RelativePositionEmbedding(heads, head_dim, length - 1, causal=True)


def _implementation(name: str, table, query_offset: int):
    import torch
    import torch.nn.functional as F

    from multimodal.layers.attend import attend
    from multimodal.layers.positions import ALiBiPositions, RotaryPositions
    from multimodal.layers.positions.relative import relative_attention

    if name == "skew" or name.startswith(("ours_b", "fused_b")):
        backend = "fused" if name.startswith("fused_b") else "skew"
        block_size = int(name.split("_b")[1]) if "_b" in name else 64
        return lambda q, k, v: relative_attention(q, k, v, table, causal=True, query_offset=query_offset,
                                                  block_size=block_size, backend=backend)  # fmt: skip
    rotary, alibi = RotaryPositions(table.weight.shape[-1]), ALiBiPositions(table.weight.shape[0])

    def rotary_sdpa(q, k, v):
        positions = torch.arange(k.shape[-2])
        q = rotary.rotate(q, positions[query_offset:])
        if q.shape[-2] > 1:  # a decoding step finds its keys turned already, in the cache
            k = rotary.rotate(k, positions)
        return sdpa(q, k, v)

    def alibi_attention(q, k, v):
        return attend(q, k, v, causal=True, position=alibi, query_offset=query_offset)

    def sdpa(q, k, v):
        if q.shape[-2] == 1:
            return F.scaled_dot_product_attention(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def ours(q, k, v):
        return attend(q, k, v, causal=True, position=table, query_offset=query_offset)

    def naive_shaw(q, k, v):
        length = q.shape[-2]
        i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
        a = table.weight[:, table.index(j - i)]  # (h, L, L, d)
        logits = (q @ k.transpose(-1, -2) + torch.einsum("bhid,hijd->bhij", q, a)) / math.sqrt(q.shape[-1])
        return torch.softmax(logits.masked_fill(j > i, float("-inf")), -1) @ v

    def plain_skew(q, k, v):
        # Huang et al. 2018: Q E^T (L x L), pad a column, reshape, drop a row: the skew in L^2 memory.
        length = q.shape[-2]
        rel = q @ table.weight[:, -length:].transpose(-1, -2)  # distances -(L-1)..0
        rel = F.pad(rel, (1, 0)).reshape(*rel.shape[:2], length + 1, length)[:, :, 1:]
        logits = (q @ k.transpose(-1, -2) + rel) / math.sqrt(q.shape[-1])
        mask = torch.ones(length, length, dtype=torch.bool).triu(1)
        return torch.softmax(logits.masked_fill(mask, float("-inf")), -1) @ v

    return {"sdpa": sdpa, "ours": ours, "naive_shaw": naive_shaw, "plain_skew": plain_skew, "rotary": rotary_sdpa,
            "alibi": alibi_attention}[name]  # fmt: skip


def _rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _print_table(mode: str, lengths, names, rows, dtype: str, batch: int) -> None:
    print(f"\n### mode: {mode} (causal, dim 256, 8 heads, head_dim 32, batch {batch}, {dtype}, 2 threads)\n")
    header = "| seq_len | " + " | ".join(f"{n} ms (×sdpa) | {n} extra MB (×sdpa)" for n in names) + " |"
    print(header)
    print("|" + "---|" * (1 + 2 * len(names)))
    for length in lengths:
        base = rows[length, "sdpa"] if "sdpa" in names else None
        cells = []
        for name in names:
            row = rows[length, name]
            if "skipped" in row:
                cells += [row["skipped"], ""]
                continue
            time_ratio = f" ({row['ms'] / base['ms']:.2f}×)" if base and "ms" in base else ""
            if row["extra_mb"] is None:  # taking turns: one process, no memory of its own
                cells += [f"{row['ms']:.1f}{time_ratio}", "—"]
                continue
            memory_ratio = (
                f" ({row['extra_mb'] / base['extra_mb']:.1f}×)"
                if base and (base.get("extra_mb") or 0) > 1
                else ""
            )
            cells += [f"{row['ms']:.1f}{time_ratio}", f"{row['extra_mb']:.0f}{memory_ratio}"]
        print(f"| {length} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
