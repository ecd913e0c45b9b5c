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

3. Scores every arm on the validation and, once, the test chorales (nats per event, every token
   of every held-out piece once), and records one JSON line per (arm, seed) in ``--out``
   (``benchmarks/protocol.py``). No setting is chosen here, so there is no select stage: every
   arm runs the same fixed recipe and seeds, and the table reports mean ± sd over seeds plus each
   arm's *paired* difference to ``scratch`` (same seed, same data order) -- the comparison that
   cancels most of the seed-to-seed noise. An interrupted run resumes: (arm, seed) pairs already in
   ``--out`` with the same settings are not trained again.

The defaults are small (dim 64, 3 layers, 128-event windows, 200 + 4 x 100 steps per seed) so one
seed fits in about ten minutes on a CPU core; the same script runs bigger with the flags.

Usage::

    .venv/bin/python benchmarks/transfer.py --seeds 0 1 2 --pretrain-steps 2000 --steps 600 \
        --arms scratch text_frozen text_lora text_full random_frozen   # docs/benchmarks.md
    .venv/bin/python benchmarks/transfer.py --table
    .venv/bin/python benchmarks/transfer.py --pretrain-steps 50 --steps 20 --arms scratch text_frozen --out /tmp/t.jsonl
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import grouped, load, record, spread

from multimodal.convert.blocks import export_blocks
from multimodal.models import CausalLMConfig
from multimodal.models.parameters import count_parameters
from tasks.datamodules import MusicDataModule, TextDataModule
from tasks.finetune import FineTuneConfig
from tasks.language_modeling import LanguageModeling
from tasks.music_continuation import MusicContinuation

ROOT = Path(__file__).resolve().parents[1]
ARMS = ["scratch", "text_frozen", "text_lora", "text_full", "random_frozen"]
DEFAULT_ARMS = ["scratch", "text_frozen", "text_lora", "random_frozen"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=ARMS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--pretrain-steps", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100, help="music steps, the same for every arm")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--text-files", type=int, default=300, help="standard-library files to pretrain on")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "transfer.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = parser.parse_args()
    if args.table:
        print(table(load(args.out)))
        return
    torch.set_num_threads(args.threads)
    settings = {key: getattr(args, key) for key in SETTINGS}
    for seed in args.seeds:
        done = {r["arm"] for r in load(args.out) if r["seed"] == seed and r["settings"] == settings}
        arms = [arm for arm in args.arms if arm not in done]
        if not arms:
            continue
        with tempfile.TemporaryDirectory() as folder:
            blocks = Path(folder) / "text_blocks"
            text_nll = pretrain_text(args, seed, blocks) if any(arm.startswith("text") for arm in arms) else None
            for arm in arms:
                result = train_music(arm, args, seed, blocks)
                record(args.out, {**result, "arm": arm, "seed": seed, "text_val_nll": text_nll,
                                  "settings": settings}, "report")  # fmt: skip
    print(table(load(args.out)))


SETTINGS = ("pretrain_steps", "steps", "seq_len", "batch_size", "dim", "num_layers", "lr", "lora_rank", "text_files")


def table(results: list[dict]) -> str:
    """Mean ± sd over seeds of each arm, and its paired difference to ``scratch`` (test NLL, same seed)."""
    rows = [r for r in results if r["stage"] == "report"]
    if not rows:
        return "no results yet\n"
    scratch = {r["seed"]: r["test_nll"] for r in rows if r["arm"] == "scratch"}
    text = [r["text_val_nll"] for r in rows if r["text_val_nll"] is not None]
    settings = rows[0]["settings"]
    lines = [f"Text pretraining {settings['pretrain_steps']} steps (val NLL {spread(text, 3) if text else '-'} "
             f"nats/token); music {settings['steps']} steps per arm; mean ± sd over seeds, nats per event:", "",
             "| arm | trainable params | seeds | validation NLL | **test NLL** | test minus scratch (paired) "
             "| train s |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for arm, group in grouped(rows, key="arm").items():
        paired = [r["test_nll"] - scratch[r["seed"]] for r in group if r["seed"] in scratch]
        difference = "-" if arm == "scratch" or not paired else f"{spread(paired, 3)}"
        lines.append(f"| {arm} | {group[0]['trainable']:,} of {group[0]['total']:,} | {len(group)} | "
                     f"{spread([r['val_nll'] for r in group], 3)} | **{spread([r['test_nll'] for r in group], 3)}** | "
                     f"{difference} | {spread([r['seconds'] for r in group], 0)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def model_config(args: argparse.Namespace, vocab_size: int) -> CausalLMConfig:
    """The one architecture of every run (only the vocabulary differs between text and music)."""
    return CausalLMConfig(
        vocab_size=vocab_size, dim=args.dim, num_layers=args.num_layers, num_heads=4, ff_dim=4 * args.dim,
        dropout=0.1, position="relative", max_seq_len=args.seq_len,
    )  # fmt: skip


def pretrain_text(args: argparse.Namespace, seed: int, out: Path) -> float:
    """Trains the text LM, exports its blocks to ``out``; returns its validation NLL (nats/token)."""
    pl.seed_everything(seed, verbose=False)
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


def train_music(arm: str, args: argparse.Namespace, seed: int, blocks: Path) -> dict:
    """One arm: validation and test NLL (nats/event), trainable and total parameters, training seconds."""
    pl.seed_everything(seed, verbose=False)
    data = MusicDataModule(
        seq_len=args.seq_len, batch_size=args.batch_size, epoch_length=args.batch_size * 50, seed=seed
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
    test_nll = trainer.test(task, datamodule=data, verbose=False)[0]["test_nll"]
    counts = count_parameters(task.model)
    print(f"{arm} (seed {seed}): val_nll {nll:.4f}, test_nll {test_nll:.4f} after {args.steps} steps "
          f"({seconds:.0f} s); {counts.trainable:,} trainable", flush=True)  # fmt: skip
    return {"val_nll": nll, "test_nll": test_nll, "trainable": counts.trainable, "total": counts.total,
            "seconds": seconds}  # fmt: skip


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
