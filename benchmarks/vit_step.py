"""The Fashion-MNIST ViT's bare training step on 2 cores: one process or two (DDP), eager or compiled.

``--model shipped``: the model of ``configs/image_classification_fashion_mnist.yaml`` (patch 7 ->
4x4 grid + class token, 4 layers, dim 128, 8 heads, ff 256, learned positions); ``--model 30-minute``:
the best recipe of the 30-minute runs (docs/benchmarks.md: a 3x3 stem of 16 channels, dropout 0.1,
drop path 0.1). Random 28x28 images and labels, a step = forward, label-smoothed cross-entropy,
backward, AdamW. Contenders, all at 128 images per optimizer step:

    one process           2 threads, batch 128
    one, compiled         the same with every block compiled (``compile_blocks``); compile time reported
    two processes         DDP over gloo, 1 thread each, batch 64 each (what the shipped config runs)
    two processes, bf16   the same under bf16 autocast (``trainer.precision: bf16-mixed``); fast only
                          on a CPU with AMX or AVX-512-BF16 (the machine line says which this is)

Each contender runs in fresh processes, ``--steps`` timed steps after ``--warmup``, and the
contenders take turns for ``--rounds`` rounds; images/s is counted over both processes for DDP.

Usage (speed: run alone)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/vit_step.py
    flock /tmp/bench.lock .venv/bin/python benchmarks/vit_step.py --model 30-minute \
        --contenders "two processes" "two processes, bf16"
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import machine

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = {  # processes, threads per process, compiled, bf16 autocast
    "one process": (1, 2, False, False),
    "one, compiled": (1, 2, True, False),
    "two processes": (2, 1, False, False),
    "two processes, bf16": (2, 1, False, True),
}
MODELS = {
    "shipped": {"num_heads": 8, "dropout": 0.0},
    "30-minute": {"num_heads": 8, "stem_channels": [16], "dropout": 0.1, "drop_path": 0.1},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS)[:3], choices=list(CONTENDERS))
    parser.add_argument("--model", default="shipped", choices=list(MODELS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(**json.loads(args.worker))), flush=True)
        return
    print(f"# {machine()}; model: {args.model}")
    rates: dict[str, list[float]] = {name: [] for name in args.contenders}
    compile_seconds: list[float] = []
    for _ in range(args.rounds):
        for name in args.contenders:
            processes, threads, compiled, bf16 = CONTENDERS[name]
            results = launch(processes, threads, compiled, bf16, args.model, args.steps, args.warmup)
            rates[name].append(sum(r["images_per_s"] for r in results))
            if compiled:
                compile_seconds.append(results[0]["warmup_s"])
            print(f"{name}: {rates[name][-1]:.0f} images/s", flush=True)
    reference = statistics.median(rates[args.contenders[0]])
    print(f"\n| contender | images/s (median of {args.rounds}) | ratio to {args.contenders[0]} |\n|---|---:|---:|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):.0f} | {statistics.median(values) / reference:.2f} |")
    if compile_seconds:
        print(f"\nwarm-up of the compiled model ({args.warmup} steps, compilation included): "
              f"{statistics.median(compile_seconds):.0f} s")  # fmt: skip


def launch(processes: int, threads: int, compiled: bool, bf16: bool, model: str, steps: int, warmup: int) -> list[dict]:
    """Runs the worker in ``processes`` fresh interpreters (a gloo group when more than one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job = {"threads": threads, "compiled": compiled, "bf16": bf16, "model_name": model, "steps": steps, "warmup": warmup,
           "world": processes, "batch": 128 // processes, "port": port}  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    commands = [[sys.executable, __file__, "--worker", json.dumps({**job, "rank": rank})] for rank in range(processes)]
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=environment)
                for command in commands]  # fmt: skip
    outputs = [child.communicate()[0] for child in children]
    if any(child.returncode for child in children):
        raise RuntimeError(f"a worker failed: {outputs}")
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def worker(threads: int, compiled: bool, bf16: bool, model_name: str, steps: int, warmup: int, world: int, batch: int,
           port: int, rank: int) -> dict:  # fmt: skip
    """Times ``steps`` training steps of one process (of ``world``); returns its images/s."""
    import torch
    import torch.nn.functional as F

    from multimodal.layers import compile_blocks
    from multimodal.models import ViT, ViTConfig

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = ViTConfig(image_size=28, channels=1, num_classes=10, patch_size=7, dim=128, num_layers=4, ff_dim=256,
                       position="learned", **MODELS[model_name])  # fmt: skip
    model = ViT(config)
    if compiled:
        compile_blocks(model)
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images, labels = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))

    def train(count: int) -> float:
        """Seconds for ``count`` training steps."""
        start = time.perf_counter()
        for _ in range(count):
            with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(images).float(), labels, label_smoothing=0.1)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    warmup_s = train(warmup)
    if world > 1:
        torch.distributed.barrier()
    seconds = train(steps)
    if world > 1:
        torch.distributed.destroy_process_group()
    return {"images_per_s": steps * batch / seconds, "warmup_s": warmup_s}


if __name__ == "__main__":
    main()
