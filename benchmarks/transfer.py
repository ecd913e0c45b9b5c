"""Cross-modal transfer: do blocks pretrained on text help a music model?

1. Pretrains a text LM (relative positions, the Music Transformer's scheme) on the Python standard
   library for ``--pretrain-steps`` steps and exports its blocks (``multimodal.convert.blocks``).
2. Trains the music continuation task on the Bach chorales for ``--steps`` steps in each arm —
   same model sizes, data order, seed, optimizer and learning rate; every arm gets new token
   embeddings and a new head (music has its own vocabulary):

   ==============  =================================================================
   scratch         (a) random blocks, everything trains
   text_frozen     (b) text-pretrained blocks, frozen; embeddings + head train
   text_lora       (c) text-pretrained blocks, frozen, + LoRA (rank 8) on q, k, v, out
   text_full       text-pretrained blocks, everything trains (not run by default)
   random_frozen   random blocks, frozen (control for b: what frozen blocks give
                   without any pretraining)
   ==============  =================================================================

3. Prints the validation NLL (nats per event, every token of every held-out chorale once) of
   each arm and the trainable parameter counts, as the markdown table of ``docs/benchmarks.md``.

The defaults are small (dim 64, 3 layers, 128-event windows, 200 + 4 x 100 steps) so the whole run
fits in about ten minutes on two shared CPU cores; the same script runs bigger with the flags.

Usage::

    flock /tmp/bench.lock python benchmarks/transfer.py          # the table of docs/benchmarks.md
    python benchmarks/transfer.py --pretrain-steps 50 --steps 20 --arms scratch text_frozen
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from multimodal.convert.blocks import export_blocks
from multimodal.finetune import count_parameters
from multimodal.models import CausalLMConfig
from tasks.datamodules import MusicDataModule, TextDataModule
from tasks.finetune import FineTuneConfig
from tasks.language_modeling import LanguageModeling
from tasks.music_continuation import MusicContinuation

ARMS = ["scratch", "text_frozen", "text_lora", "text_full", "random_frozen"]
DEFAULT_ARMS = ["scratch", "text_frozen", "text_lora", "random_frozen"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=ARMS)
    parser.add_argument("--pretrain-steps", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100, help="music steps, the same for every arm")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--text-files", type=int, default=300, help="standard-library files to pretrain on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        blocks = Path(folder) / "text_blocks"
        text_nll = pretrain_text(args, blocks) if any(arm.startswith("text") for arm in args.arms) else None
        results = {arm: train_music(arm, args, blocks) for arm in args.arms}
    minutes = (time.perf_counter() - start) / 60
    print(f"\nText pretraining: {args.pretrain_steps} steps x {args.batch_size} windows of {args.seq_len} BPE tokens "
          f"(stdlib, {args.text_files} files), text val NLL {text_nll if text_nll is None else f'{text_nll:.3f}'}; "
          f"music: {args.steps} steps x {args.batch_size} windows of {args.seq_len} events; dim {args.dim}, "
          f"{args.num_layers} layers, relative positions, AdamW lr {args.lr}, seed {args.seed}; {minutes:.1f} min\n")  # fmt: skip
    print("| arm | blocks | trainable params | val NLL (nats/event) | val perplexity | train time (s) |")
    print("|---|---|---|---|---|---|")
    for arm, (nll, trainable, total, seconds) in results.items():
        print(f"| {arm} | {_describe(arm, args)} | {trainable:,} of {total:,} | {nll:.4f} | {math.exp(nll):.2f} "
              f"| {seconds:.0f} |")  # fmt: skip


def model_config(args: argparse.Namespace, vocab_size: int) -> CausalLMConfig:
    """The one architecture of every run (only the vocabulary differs between text and music)."""
    return CausalLMConfig(
        vocab_size=vocab_size, dim=args.dim, num_layers=args.num_layers, num_heads=4, ff_dim=4 * args.dim,
        dropout=0.1, position="relative", max_seq_len=args.seq_len,
    )  # fmt: skip


def pretrain_text(args: argparse.Namespace, out: Path) -> float:
    """Trains the text LM, exports its blocks to ``out``; returns its validation NLL (nats/token)."""
    pl.seed_everything(args.seed, verbose=False)
    data = TextDataModule(limit=args.text_files, vocab_size=4000, seq_len=args.seq_len, batch_size=args.batch_size,
                          epoch_length=args.batch_size * 100)  # fmt: skip
    task = LanguageModeling(model=model_config(args, data.vocab_size), warmup_steps=min(100, args.pretrain_steps // 10),
                            optimizer=_adamw(args.lr))  # fmt: skip
    trainer = _trainer(args.pretrain_steps, limit_val_batches=20)
    started = time.perf_counter()
    trainer.fit(task, datamodule=data)
    nll = trainer.validate(task, datamodule=data, verbose=False)[0]["val_nll"]
    print(f"text pretraining: val_nll {nll:.4f} after {args.pretrain_steps} steps "
          f"({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
    export_blocks(task.model, out)
    return nll


def train_music(arm: str, args: argparse.Namespace, blocks: Path) -> tuple[float, int, int, float]:
    """One arm; returns validation NLL, trainable and total parameters, training seconds."""
    pl.seed_everything(args.seed, verbose=False)
    data = MusicDataModule(
        seq_len=args.seq_len, batch_size=args.batch_size, epoch_length=args.batch_size * 50
    )
    task = MusicContinuation(
        model=model_config(args, data.vocab_size), warmup_steps=min(100, args.steps // 10), pad_id=data.pad_id,
        optimizer=_adamw(args.lr), finetune=finetune_for(arm, args, blocks),
    )  # fmt: skip
    trainer = _trainer(args.steps)
    started = time.perf_counter()
    trainer.fit(task, datamodule=data)
    seconds = time.perf_counter() - started
    nll = trainer.validate(task, datamodule=data, verbose=False)[0]["val_nll"]
    counts = count_parameters(task.model)
    print(f"{arm}: val_nll {nll:.4f} after {args.steps} steps ({seconds:.0f} s); {counts.trainable:,} trainable",
          flush=True)  # fmt: skip
    return nll, counts.trainable, counts.total, seconds


def finetune_for(arm: str, args: argparse.Namespace, blocks: Path) -> FineTuneConfig | None:
    """The fine-tuning options of an arm: which blocks, what is frozen, LoRA."""
    pretrained = dict(init_from=str(blocks), init_select=["blocks"])
    lora = {"rank": args.lora_rank, "alpha": 2.0 * args.lora_rank, "projections": ["q", "k", "v", "out"]}
    return {
        "scratch": None,
        "text_frozen": FineTuneConfig(**pretrained, freeze=["blocks"]),
        "text_lora": FineTuneConfig(**pretrained, freeze=["blocks"], lora=lora),
        "text_full": FineTuneConfig(**pretrained),
        "random_frozen": FineTuneConfig(freeze=["blocks"]),
    }[arm]


def _describe(arm: str, args: argparse.Namespace) -> str:
    return {
        "scratch": "(a) random, trained",
        "text_frozen": "(b) text, frozen",
        "text_lora": f"(c) text, frozen + LoRA r={args.lora_rank} on q,k,v,out",
        "text_full": "text, trained",
        "random_frozen": "random, frozen (control)",
    }[arm]


def _adamw(lr: float):
    return lambda params: torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=0.01)


def _trainer(steps: int, limit_val_batches: int | float = 1.0) -> pl.Trainer:
    return pl.Trainer(
        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, check_val_every_n_epoch=10**6,
        gradient_clip_val=1.0, limit_val_batches=limit_val_batches,
    )  # fmt: skip


if __name__ == "__main__":
    main()
