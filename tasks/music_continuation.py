"""Music continuation (Music Transformer): next-event prediction on MIDI performance events.

``multimodal fit --config configs/music_continuation.yaml`` trains it;
``multimodal generate --checkpoint CKPT --out DIR`` continues a primer into MIDI, PNG and WAV.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from multimodal.data.music import MidiCorpus, load_bach_chorales, load_midi_files, load_midi_folder
from multimodal.music import (
    MusicScore,
    continue_music,
    evaluate_continuations,
    longest_note,
    primer_ids,
    score_music,
)
from multimodal.music_stats import comparison_table, overlaps
from multimodal.tokenizers.midi import MidiTokenizer, notes_from_midi
from tasks.causal_lm import CausalLMTask
from tasks.checkpoint import load_task
from tasks.cli import command


class MusicContinuation(CausalLMTask):
    """Music Transformer task: a :class:`~multimodal.models.CausalLM` over performance events.

    Logs ``train_nll`` / ``val_nll`` in nats per event and ``val_ppl``; when validation scored
    every held-out event, also ``val_nll_per_note`` and ``val_nll_per_second`` (nats per note and
    per second of music: units that compare across vocabularies). Relative attention
    (``model.position: relative``) is the default of its config, as in Huang et al. 2018.
    """

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        super().log_epoch_metrics(stage, sums)
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if not hasattr(datamodule, "evaluation_totals"):
            return
        split = "test" if stage == "test" else "validation"
        if not hasattr(self, "_evaluation_totals"):
            self._evaluation_totals: dict[str, dict[str, float]] = {}  # per split, read once
        if split not in self._evaluation_totals:
            self._evaluation_totals[split] = datamodule.evaluation_totals(split)
        totals = self._evaluation_totals[split]
        if int(sums["targets"]) == totals["targets"]:  # not with limit_val_batches
            self.log(f"{stage}_nll_per_note", sums["nll"] / max(totals["notes"], 1), sync_dist=False)
            self.log(f"{stage}_nll_per_second", sums["nll"] / max(totals["seconds"], 1e-9), sync_dist=False)

    @staticmethod
    def add_perplexity_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal perplexity`` for music checkpoints."""
        parser.add_argument("files", nargs="+", type=Path, help="MIDI files or folders (searched recursively)")
        parser.add_argument("--seq-len", type=int, default=None, help="window length (default: the run's seq_len)")
        parser.add_argument("--batch-size", type=int, default=8)

    def run_perplexity(self, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
        """Prints nats per event, per note and per second of music for each file and in total.

        Each file is scored as validation scores a held-out piece, so the total over the run's
        held-out pieces equals its ``val_nll``. Files that cannot be read are skipped with a warning.
        """
        data = torch.load(args.checkpoint, map_location="cpu", weights_only=True).get("datamodule_hyper_parameters", {})
        seq_len = args.seq_len or data.get("seq_len") or self.config.max_seq_len
        corpus = load_midi_files(args.files)
        print(f"windows of {seq_len} events; nll in nats per event, per note and per second of music")
        print(f"{'file':<44} {'events':>8} {'notes':>7} {'seconds':>8} {'/event':>8} {'/note':>8} {'/second':>8}")
        total = MusicScore(0.0, 0, 0, 0.0)
        for name, notes in zip(corpus.names, corpus.notes, strict=True):
            score = score_music(self.model, tokenizer, notes, seq_len, args.batch_size)
            total = total + score
            print(_score_row(name, score))
        print(_score_row("total", total))
        if corpus.num_skipped:
            print(f"skipped {corpus.num_skipped} file(s): " + "; ".join(corpus.skipped))

    @staticmethod
    def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal generate`` for music checkpoints."""
        parser.add_argument("--primer", type=Path, help="MIDI file to continue (default: a held-out chorale)")
        parser.add_argument("--primer-seconds", type=float, default=5.0, help="length of the primer (s)")
        parser.add_argument("--num-samples", type=int, default=1)
        parser.add_argument("--max-new-tokens", type=int, default=512)
        parser.add_argument("--no-audio", action="store_true", help="skip the WAV preview")

    def run_generate(self, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
        """Writes ``sample_{i}.mid/.png/.wav`` continuations of the primer to ``args.out``."""
        if args.primer is not None:
            notes, source = notes_from_midi(args.primer), str(args.primer)
        else:
            held_out = load_bach_chorales().split("validation")
            notes, source = held_out.notes[0], f"held-out chorale {held_out.names[0]}"
        primer = primer_ids(notes, tokenizer, args.primer_seconds)
        paths = continue_music(
            self.model, tokenizer, primer, args.out, num_samples=args.num_samples,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
            top_p=args.top_p, seed=args.seed, progress=True, audio=not args.no_audio,
        )  # fmt: skip
        print(f"primer: first {args.primer_seconds:g} s of {source} ({len(primer)} events)")
        for path in paths:
            print(f"wrote {path} (+ .png piano roll{'' if args.no_audio else ', .wav preview'})")


def run_corpus(checkpoint: Path) -> MidiCorpus:
    """The pieces a checkpoint's run trained on: its ``midi_dir``, or the chorales."""
    data = torch.load(checkpoint, map_location="cpu", weights_only=True).get("datamodule_hyper_parameters", {})
    midi_dir = data.get("midi_dir")
    return load_midi_folder(midi_dir) if midi_dir else load_bach_chorales(limit=data.get("limit"))


@command("sample-stats", "how a music model's continuations compare with the real ones: multimodal sample-stats --checkpoint CKPT")
def sample_stats_command(argv: list[str]) -> None:
    """``multimodal sample-stats``: continues held-out pieces and compares note statistics with theirs.

    Each of the first ``--num-primers`` held-out pieces of the run (or each ``--primers`` file) is
    cut after ``--primer-seconds``; the model continues it once, and the generated continuation is
    compared with the piece's real continuation over the same seconds: histogram overlaps of note
    duration, polyphony, inter-onset interval, pitch class and pitch (1 = the same distribution), the
    longest note and the share of notes still sounding at the end (see multimodal/music_stats.py).
    """
    parser = argparse.ArgumentParser(prog="multimodal sample-stats", description=sample_stats_command.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--checkpoint", type=Path, required=True, help="a music .ckpt written by `multimodal fit`")
    parser.add_argument("--primers", type=Path, nargs="+", help="MIDI files to continue (default: held-out pieces)")
    parser.add_argument("--num-primers", type=int, default=8, help="held-out pieces to continue")
    parser.add_argument("--primer-seconds", type=float, default=6.0)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    if not args.checkpoint.is_file():
        parser.error(f"checkpoint not found: {args.checkpoint}")
    task, tokenizer = load_task(args.checkpoint)
    if not isinstance(task, MusicContinuation):
        parser.error(f"{args.checkpoint} is a {type(task).__name__} checkpoint, not a music model")
    corpus = run_corpus(args.checkpoint)
    if args.primers:
        pieces, names = [notes_from_midi(path) for path in args.primers], [str(path) for path in args.primers]
    else:
        held_out = corpus.split("validation")
        pieces, names = held_out.notes[: args.num_primers], held_out.names[: args.num_primers]
    generated, reference, _ = evaluate_continuations(
        task.model, tokenizer, pieces, primer_seconds=args.primer_seconds, max_new_tokens=args.max_new_tokens,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
    )  # fmt: skip
    training_longest = longest_note(corpus.split("train").notes)
    print(f"{len(pieces)} primers of {args.primer_seconds:g} s ({', '.join(names)}), {args.max_new_tokens} new events each")
    print(comparison_table(generated, reference, training_longest))
    if args.json:
        report = {"overlaps": overlaps(generated, reference), "longest_note": generated.longest_note,
                  "reference_longest_note": reference.longest_note, "training_longest_note": training_longest,
                  "sounding_at_end": generated.sounding_at_end_share,
                  "reference_sounding_at_end": reference.sounding_at_end_share, "primers": names}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def _score_row(name: str, score: MusicScore) -> str:
    name = name if len(name) <= 44 else "…" + name[-43:]
    return (f"{name:<44} {score.events:>8} {score.notes:>7} {score.seconds:>8.1f} {score.per_event:>8.4f} "
            f"{score.per_note:>8.4f} {score.per_second:>8.4f}")  # fmt: skip
