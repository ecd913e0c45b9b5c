"""The Fashion-MNIST ViT's bare training step on 2 cores: one process or two (DDP), eager or compiled.

The model of ``configs/image_classification_fashion_mnist.yaml`` (patch 7 -> 4x4 grid + class
token, 4 layers, dim 128, 4 heads, ff 256, learned positions), random 28x28 images and labels, a
step = forward, label-smoothed cross-entropy, backward, AdamW. Contenders, all at 128 images per
optimizer step:

    one process     2 threads, batch 128
    one, compiled   the same with every block compiled (``compile_blocks``); compile time reported
    two processes   DDP over gloo, 1 thread each, batch 64 each (what the shipped config runs)

Each contender runs in fresh processes, ``--steps`` timed steps after ``--warmup``, and the
contenders take turns for ``--rounds`` rounds; images/s is counted over both processes for DDP.

Usage (speed: run alone)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/vit_step.py
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

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = {"one process": (1, 2, False), "one, compiled": (1, 2, True), "two processes": (2, 1, False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(**json.loads(args.worker))), flush=True)
        return
    rates: dict[str, list[float]] = {name: [] for name in args.contenders}
    compile_seconds: list[float] = []
    for _ in range(args.rounds):
        for name in args.contenders:
            processes, threads, compiled = CONTENDERS[name]
            results = launch(processes, threads, compiled, args.steps, args.warmup)
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


def launch(processes: int, threads: int, compiled: bool, steps: int, warmup: int) -> list[dict]:
    """Runs the worker in ``processes`` fresh interpreters (a gloo group when more than one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job = {"threads": threads, "compiled": compiled, "steps": steps, "warmup": warmup, "world": processes,
           "batch": 128 // processes, "port": port}  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    commands = [[sys.executable, __file__, "--worker", json.dumps({**job, "rank": rank})] for rank in range(processes)]
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=environment)
                for command in commands]  # fmt: skip
    outputs = [child.communicate()[0] for child in children]
    if any(child.returncode for child in children):
        raise RuntimeError(f"a worker failed: {outputs}")
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def worker(threads: int, compiled: bool, steps: int, warmup: int, world: int, batch: int, port: int, rank: int) -> dict:
    """Times ``steps`` training steps of one process (of ``world``); returns its images/s."""
    import torch
    import torch.nn.functional as F

    from multimodal.layers import compile_blocks
    from multimodal.models import ViT, ViTConfig

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = ViTConfig(image_size=28, channels=1, num_classes=10, patch_size=7, dim=128, num_layers=4, num_heads=4,
                       ff_dim=256, dropout=0.0, position="learned")  # fmt: skip
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
            loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
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
