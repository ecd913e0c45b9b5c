"""Cached generation speed of our text LM against Hugging Face ``generate``, and per-token time vs context.

Both models have the size of the throughput benchmark (6 layers, dim 256, 8 heads, ff 1024,
vocab 8000, learned positions, 1024 positions), random weights, batch 1, a 64-token prompt and
``--new-tokens`` (512) new tokens with no early stop:

    ours     multimodal.generation.generate(use_cache=True)
    hf_gpt2  GPT2LMHeadModel.generate(use_cache=True, min_new_tokens = max_new_tokens)

Two decoding modes: ``greedy`` (temperature 0 / ``do_sample=False``) and ``sample`` (temperature 1,
top-k 50, as HF's default sampling). The models take turns; the table shows the median and best
new tokens/s over ``--rounds`` rounds and the ratio of medians.

The second table times single decoding steps of our model at growing context lengths: cached
(one token against the KV cache; the median of the 16 steps around that length) and uncached (a
full forward over the whole context, which ``generate(use_cache=False)`` runs every step).

``--decoding`` adds the other ways to decode, each against its HF counterpart in the same run,
taking turns, ``--decoding-tokens`` (128) new tokens, greedy, no early stop:

    beam      4 beams (``beam_search`` vs ``generate(num_beams=4)``), one 64-token prompt
    batch N   N prompts of mixed lengths (16..64 tokens, drawn once), left-padded
              (``generate_batch`` vs ``generate(attention_mask=...)`` on left-padded ids), N = 8, 32
    relative  batch 1, our model with relative positions (the Music Transformer's, clipped at 256)
              against the same model with learned positions and against HF

Usage::

    python benchmarks/text_generation.py                 # the tables of docs/benchmarks.md
    python benchmarks/text_generation.py --rounds 5 --new-tokens 256 --modes greedy
    python benchmarks/text_generation.py --decoding --modes --contexts   # only the decoding table
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from machine import machine
from torch import nn

from multimodal.generation import generate, generate_batch, sample_next
from multimodal.generation.beam import beam_search
from multimodal.models import CausalLM, CausalLMConfig

VOCAB_SIZE, DIM, LAYERS, HEADS, FF, POSITIONS = 8000, 256, 6, 8, 1024, 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="*", default=["greedy", "sample"], choices=["greedy", "sample"])
    parser.add_argument("--contexts", type=int, nargs="*", default=[64, 128, 256, 384, 512, 575])
    parser.add_argument("--decoding", action="store_true", help="also beam, batched and relative decoding vs HF")
    parser.add_argument("--decoding-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {machine()}")
    print(f"# batch 1, prompt {args.prompt_len}, {args.new_tokens} new tokens, {args.rounds} rounds\n")
    torch.manual_seed(0)
    ours, hf = our_model(), hf_model()
    prompt = torch.randint(0, VOCAB_SIZE, (1, args.prompt_len))
    for mode in args.modes:
        results = speed(ours, hf, prompt, args.new_tokens, mode, args.rounds)
        print(speed_table(results, mode))
    if args.contexts:
        print(context_table(ours, prompt, args.contexts))
    if args.decoding:
        print(decoding_table(ours, hf, prompt, args.decoding_tokens, args.rounds))


def decoding_table(ours: nn.Module, hf: nn.Module, prompt: torch.Tensor, new_tokens: int, rounds: int) -> str:
    """Beam, batched and relative-position decoding: new tokens/s (all rows) of ours and HF, taking turns."""
    generator = torch.Generator().manual_seed(1)
    fixed = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "use_cache": True, "pad_token_id": 0,
             "do_sample": False}  # fmt: skip
    cases = {}
    cases["beam 4"] = (
        lambda: beam_search(ours, prompt, new_tokens, 4)[0],
        lambda: hf.generate(prompt, attention_mask=torch.ones_like(prompt), num_beams=4, early_stopping=False,
                            length_penalty=1.0, **fixed),
        1,
    )
    for count in (8, 32):
        lengths = torch.randint(16, 65, (count,), generator=generator).tolist()
        prompts = [torch.randint(1, VOCAB_SIZE, (length,), generator=generator) for length in lengths]
        padded = torch.zeros(count, max(lengths), dtype=torch.long)
        mask = torch.zeros(count, max(lengths), dtype=torch.long)
        for row, ids in enumerate(prompts):
            padded[row, -len(ids) :], mask[row, -len(ids) :] = ids, 1
        cases[f"batch {count}"] = (
            lambda prompts=prompts: generate_batch(ours, prompts, new_tokens, temperature=0),
            lambda padded=padded, mask=mask: hf.generate(padded, attention_mask=mask, **fixed),
            count,
        )
    relative = our_model(position="relative")
    cases["relative (vs HF)"] = (
        lambda: generate(relative, prompt, new_tokens, temperature=0),
        lambda: hf.generate(prompt, attention_mask=torch.ones_like(prompt), **fixed),
        1,
    )
    cases["relative (vs ours, learned)"] = (
        lambda: generate(relative, prompt, new_tokens, temperature=0),
        lambda: generate(ours, prompt, new_tokens, temperature=0),
        1,
    )
    lines = [f"decoding, greedy, {new_tokens} new tokens per row; new tokens/s over all rows, median of {rounds}",
             "", "| case | ours | peer | ours / peer |", "|---|---:|---:|---:|"]  # fmt: skip
    with torch.inference_mode():
        for name, (run_ours, run_peer, rows) in cases.items():
            run_ours(), run_peer()  # warm-up
            times = {"ours": [], "peer": []}
            for _ in range(rounds):
                for side, run in (("ours", run_ours), ("peer", run_peer)):
                    start = time.perf_counter()
                    run()
                    times[side].append(time.perf_counter() - start)
            ours_rate, peer_rate = (rows * new_tokens / statistics.median(times[side]) for side in ("ours", "peer"))
            lines.append(f"| {name} | {ours_rate:.0f} | {peer_rate:.0f} | {ours_rate / peer_rate:.2f} |")
    return "\n".join(lines) + "\n"


def speed(ours: nn.Module, hf: nn.Module, prompt: torch.Tensor, new_tokens: int, mode: str, rounds: int):
    """New tokens/s of each model per round, taking turns after one short warm-up each."""
    sampling = {"temperature": 0.0} if mode == "greedy" else {"temperature": 1.0, "top_k": 50}
    hf_sampling = (
        {"do_sample": False} if mode == "greedy" else {"do_sample": True, "top_k": 50, "temperature": 1.0}
    )

    def hf_run(count: int) -> torch.Tensor:
        return hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=count,
                           min_new_tokens=count, use_cache=True, pad_token_id=0, **hf_sampling)  # fmt: skip

    runs = {"ours": lambda count: generate(ours, prompt, count, **sampling), "hf_gpt2": hf_run}
    for run in runs.values():
        run(8)
    results = {name: {"wall": [], "cpu": []} for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            out = run(new_tokens)
            if out.is_cuda:
                torch.cuda.synchronize(out.device)  # the GPU may still be decoding
            results[name]["cpu"].append(new_tokens / (time.process_time() - start_cpu))
            results[name]["wall"].append(new_tokens / (time.perf_counter() - start))
            assert out.shape[1] == prompt.shape[1] + new_tokens, f"{name} stopped early"
    return results


def speed_table(results: dict[str, dict[str, list[float]]], mode: str) -> str:
    """Wall-clock and CPU-time rates; CPU time (this process, all its threads) is less sensitive to
    other jobs on the machine than wall time, and equal to it on an idle machine with one thread."""
    medians = {
        name: {kind: statistics.median(values) for kind, values in runs.items()}
        for name, runs in results.items()
    }
    lines = [
        f"decoding {mode}; ratio = median / median of hf_gpt2",
        "",
        "| model | new tokens/s (median) | (best) | ratio | new tokens per CPU-second (median) | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        wall, cpu = medians[name]["wall"], medians[name]["cpu"]
        wall_ratio, cpu_ratio = wall / medians["hf_gpt2"]["wall"], cpu / medians["hf_gpt2"]["cpu"]
        best = max(runs["wall"])
        lines.append(f"| {name} | {wall:.0f} | {best:.0f} | {wall_ratio:.2f} | {cpu:.0f} | {cpu_ratio:.2f} |")
    return "\n".join(lines) + "\n"


@torch.inference_mode()
def context_table(model: nn.Module, prompt: torch.Tensor, contexts: list[int]) -> str:
    """Milliseconds per new token at each context length, cached vs uncached."""
    longest = max(contexts)
    state = model.new_state()
    logits = model(prompt, state=state)[:, -1]
    tokens, step_times = prompt, {}
    while tokens.shape[1] < longest + 8:  # cached: time every step, keep the per-length times
        next_token = sample_next(logits, temperature=0.0)[:, None]
        start = time.perf_counter()
        logits = model(next_token, state=state)[:, -1]
        step_times[tokens.shape[1]] = time.perf_counter() - start
        tokens = torch.cat([tokens, next_token], dim=1)
    lines = ["ms per new token vs context length (ours; cached: median of the 16 steps around it,",
             "uncached: best of 3 full forwards over the context)", "",
             "| context | cached ms | uncached ms | uncached / cached |",
             "|---:|---:|---:|---:|"]  # fmt: skip
    for context in contexts:
        nearby = [step_times[length] for length in range(context - 8, context + 8) if length in step_times]
        cached = statistics.median(nearby) * 1e3
        uncached = min(_time(lambda: model(tokens[:, :context]), repeats=3)) * 1e3  # noqa: B023
        lines.append(f"| {context} | {cached:.2f} | {uncached:.1f} | {uncached / cached:.0f} |")
    return "\n".join(lines) + "\n"


def _time(function, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def our_model(position: str = "learned") -> nn.Module:
    """The benchmark's LM; ``relative`` clips distances at 256 (the music task's setting)."""
    extra = {"max_relative_distance": 256} if position == "relative" else {}
    config = CausalLMConfig(
        vocab_size=VOCAB_SIZE, dim=DIM, num_layers=LAYERS, num_heads=HEADS, ff_dim=FF, max_seq_len=POSITIONS,
        position=position, dropout=0.0, activation="gelu_tanh", **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    return CausalLM(config).eval()


def hf_model() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB_SIZE, n_positions=POSITIONS, n_embd=DIM, n_layer=LAYERS, n_head=HEADS, n_inner=FF,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa",
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return GPT2LMHeadModel(config).eval()


if __name__ == "__main__":
    main()
