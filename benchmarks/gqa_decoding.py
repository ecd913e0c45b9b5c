"""Grouped-query attention: KV-cache bytes and cached decoding speed at 1, 2, 4 and 8 key/value heads.

One ``CausalLM`` shape (Llama blocks: 4 × 512, 8 query heads, rotary, RMSNorm, SwiGLU, no bias),
float32, batch 1 and batch 8; only ``num_kv_heads`` changes. For each context length the KV cache
holds that many positions (random keys and values: a step costs the same whatever they are), then
``--steps`` tokens are decoded one at a time against it. The contenders alternate within
each round and the best of ``--rounds`` is kept. Ratios are to 8 key/value heads (ordinary
multi-head attention) in the same run.

Usage (run alone)::

    flock /tmp/bench.lock .venv/bin/python benchmarks/gqa_decoding.py
"""

from __future__ import annotations

import argparse
import time

import torch

from multimodal.models import CausalLM, CausalLMConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kv-heads", type=int, nargs="+", default=[8, 4, 2, 1])
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = {kv: model(kv) for kv in args.kv_heads}
    print(f"# Llama blocks 4 x 512, 8 heads, rotary, float32, {args.threads} threads, {args.steps} decoding steps, "
          f"best of {args.rounds} rounds (contenders alternate)\n")  # fmt: skip
    print("| batch | context | kv heads | KV cache MiB | tokens/s | × 8 heads |")
    print("|---:|---:|---:|---:|---:|---:|")
    for batch in args.batches:
        for context in args.contexts:
            best: dict[int, float] = {}
            cache_bytes: dict[int, int] = {}
            for _ in range(args.rounds):
                for kv, net in models.items():
                    seconds, cache_bytes[kv] = decode(net, batch, context, args.steps)
                    best[kv] = min(best.get(kv, float("inf")), seconds)
            reference = best.get(8)
            for kv in args.kv_heads:
                rate = batch * args.steps / best[kv]
                ratio = f"{reference / best[kv]:.2f}" if reference else "—"
                print(f"| {batch} | {context} | {kv} | {cache_bytes[kv] / 2**20:.1f} | {rate:.0f} | {ratio} |",
                      flush=True)  # fmt: skip


def model(num_kv_heads: int) -> CausalLM:
    """The benchmark's model with ``num_kv_heads`` key/value heads (eval mode)."""
    torch.manual_seed(0)
    config = CausalLMConfig(
        vocab_size=4096, dim=512, num_layers=4, num_heads=8, num_kv_heads=num_kv_heads, ff_dim=1376, dropout=0.0,
        position="rotary", norm="rmsnorm", activation="swiglu", bias=False, tie_embeddings=False, max_seq_len=8192,
    )  # fmt: skip
    return CausalLM(config).eval()


@torch.inference_mode()
def decode(net: CausalLM, batch: int, context: int, steps: int) -> tuple[float, int]:
    """Seconds for ``steps`` cached decoding steps after a ``context``-token prefill; the cache's bytes in use."""
    # The cache of a `context`-token prompt, filled with random keys and values: a step's cost does
    # not depend on what they hold, and a real prefill would dominate the benchmark's time.
    config = net.config
    state = net.new_state()
    shape = (batch, config.num_kv_heads or config.num_heads, context, config.head_dim)
    for cache in state.layers:
        cache.append(torch.randn(shape), torch.randn(shape))
    state.position = context
    next_token = torch.zeros(batch, 1, dtype=torch.long)
    start = time.perf_counter()
    for _ in range(steps):
        next_token = net(next_token, state=state)[:, -1].argmax(-1, keepdim=True)
    seconds = time.perf_counter() - start
    used = sum(2 * cache.keys[..., : cache.length, :].numel() * cache.keys.element_size() for cache in state.layers)
    return seconds, used


if __name__ == "__main__":
    main()
