"""Music continuation (Music Transformer): next-event prediction on MIDI performance events.

``multimodal fit --config configs/music_continuation.yaml`` trains it;
``multimodal generate --checkpoint CKPT --out DIR`` continues a primer into MIDI, PNG and WAV.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from multimodal.data.music import MidiCorpus, load_bach_chorales, load_midi_files
from multimodal.limits import MAX_BATCH_SIZE, MAX_BEAMS, MAX_CONTEXT, MAX_NEW_TOKENS, MAX_SAMPLES
from multimodal.music import (
    MusicScore,
    continue_music,
    continue_primers,
    primer_ids,
    score_music,
)
from multimodal.tokenizers.midi import MidiTokenizer, notes_from_midi
from tasks.arguments import count, positive_float
from tasks.causal_lm import CausalLMTask
from tasks.checkpoint import data_settings
from tasks.outputs import claim_outputs


class MusicContinuation(CausalLMTask):
    """Music Transformer task: a :class:`~multimodal.models.CausalLM` over performance events.

    Logs ``train_loss`` / ``val_nll`` in nats per event and ``val_ppl``; when validation scored
    every held-out event, also ``val_nll_per_note`` and ``val_nll_per_second`` (nats per note and
    per second of music: units that compare across vocabularies). Relative attention
    (``model.position: relative``) is the default of its config, as in Huang et al. 2018.
    """

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        super().log_epoch_metrics(stage, sums)
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if not hasattr(datamodule, "evaluation_totals"):
            return
        split = "test" if stage == "test" else "val"
        totals = datamodule.evaluation_totals(split)
        if int(sums["targets"]) == totals["targets"]:  # not with limit_val_batches
            self.log(f"{stage}_nll_per_note", sums["nll"] / max(totals["notes"], 1), sync_dist=False)
            self.log(f"{stage}_nll_per_second", sums["nll"] / max(totals["seconds"], 1e-9), sync_dist=False)

    @staticmethod
    def add_perplexity_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal perplexity`` for music checkpoints."""
        parser.add_argument("files", nargs="+", type=Path, help="MIDI files or folders (searched recursively)")
        parser.add_argument("--seq-len", type=count(MAX_CONTEXT), default=None,
                            help=f"window length (default: the run's seq_len; at most {MAX_CONTEXT:,})")  # fmt: skip
        parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8, help=f"at most {MAX_BATCH_SIZE:,}")

    def run_perplexity(self, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
        """Prints nats per event, per note and per second of music for each file and in total.

        Each file is scored as validation scores a held-out piece, so the total over the run's
        held-out pieces equals its ``val_nll``. Files that cannot be read are skipped with a warning.
        """
        data = data_settings(args.checkpoint)
        seq_len = args.seq_len if args.seq_len is not None else data.get("seq_len") or self.config.max_seq_len
        corpus = load_midi_files(args.files)
        print(f"windows of {seq_len} events; nll in nats per event, per note and per second of music")
        print(f"{'file':<44} {'events':>8} {'notes':>7} {'seconds':>8} {'/event':>8} {'/note':>8} {'/second':>8}")
        total = MusicScore(0.0, 0, 0, 0.0)
        for name, notes in zip(corpus.names, corpus.notes, strict=True):
            score = score_music(self.model, tokenizer, notes, seq_len, args.batch_size)
            total = total + score
            print(_score_row(name, score))
        if total.events == 0:
            raise ValueError(f"{' '.join(map(str, args.files))}: no MIDI file with notes to score "
                             f"({corpus.num_skipped} skipped: {'; '.join(corpus.skipped)[:300]})")  # fmt: skip
        print(_score_row("total", total))
        if corpus.num_skipped:
            print(f"skipped {corpus.num_skipped} file(s): " + "; ".join(corpus.skipped))

    @staticmethod
    def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal generate`` for music checkpoints."""
        parser.add_argument("--primer", type=Path,
                            help="MIDI file to continue (default: a held-out chorale), or a folder: each file "
                                 "continued once, --batch-size at a time, into <name>.mid/.png/.wav")  # fmt: skip
        parser.add_argument("--batch-size", type=count(MAX_BATCH_SIZE), default=8,
                            help=f"a folder of primers: files per batch (at most {MAX_BATCH_SIZE:,})")  # fmt: skip
        parser.add_argument("--primer-seconds", type=positive_float, default=5.0, help="length of the primer (s)")
        parser.add_argument("--num-samples", type=count(MAX_SAMPLES), default=1,
                            help=f"continuations of the primer (at most {MAX_SAMPLES:,})")  # fmt: skip
        parser.add_argument("--max-new-tokens", type=count(MAX_NEW_TOKENS, low=0), default=512,
                            help=f"events to add (at most {MAX_NEW_TOKENS:,})")  # fmt: skip
        parser.add_argument("--no-audio", action="store_true", help="skip the WAV preview")
        parser.add_argument("--soundfont", default=None, help="a .sf2/.sf3 file to render the WAV with, or 'sine' "
                            "(default: $MULTIMODAL_SOUNDFONT, else pretty_midi's TimGM6mb.sf2; docs/music.md)")  # fmt: skip
        parser.add_argument("--num-beams", type=count(MAX_BEAMS), default=1,
                            help=f"beam search: the --num-samples best of N beams instead of samples (at most "
                                 f"{MAX_BEAMS})")  # fmt: skip

    def run_generate(self, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
        """Writes ``sample_{i}.mid/.png/.wav`` continuations of the primer to ``args.out``."""
        if args.primer is not None and args.primer.is_dir():
            self._continue_folder(tokenizer, args)
            return
        if args.primer is not None:
            notes, source = notes_from_midi(args.primer), str(args.primer)
            if not len(notes[notes[:, 1] < args.primer_seconds]):
                raise ValueError(f"{args.primer}: no note (outside drum tracks) starts in its first "
                                 f"{args.primer_seconds:g} s; give a longer --primer-seconds or another file")  # fmt: skip
        else:
            held_out = run_pieces(args.checkpoint, "val")
            notes, source = held_out.notes[0], f"held-out piece {held_out.names[0]}"
        primer = primer_ids(notes, tokenizer, args.primer_seconds)
        out = Path(args.out)
        claim_outputs([out / f"sample_{i}{suffix}" for i in range(args.num_samples)
                       for suffix in (".mid", ".png", ".wav", "_spectrogram.png")], args.overwrite)  # fmt: skip
        paths = continue_music(
            self.model, tokenizer, primer, args.out, num_samples=args.num_samples,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
            top_p=args.top_p, seed=args.seed, progress=True, audio=not args.no_audio, num_beams=args.num_beams,
            soundfont=args.soundfont,
        )  # fmt: skip
        print(f"primer: first {args.primer_seconds:g} s of {source} ({len(primer)} events)")
        for path in paths:
            print(f"wrote {path} (+ .png piano roll{'' if args.no_audio else ', .wav preview'})")


    def _continue_folder(self, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
        """``--primer FOLDER``: every MIDI file in it (corrupt or note-less ones skipped, named) continued once."""
        if args.num_beams > 1 or args.num_samples > 1:
            raise ValueError("--primer FOLDER continues each file once: it takes neither --num-beams nor --num-samples")
        primers, skipped = {}, []
        for path in sorted(p for p in args.primer.rglob("*") if p.suffix.lower() in (".mid", ".midi")):
            try:
                notes = notes_from_midi(path)
            except ValueError as error:
                skipped.append(str(error))
                continue
            if not len(notes[notes[:, 1] < args.primer_seconds]):
                skipped.append(f"{path}: no note starts in its first {args.primer_seconds:g} s")
                continue
            primers[path.relative_to(args.primer).with_suffix("").as_posix().replace("/", "_")] = primer_ids(
                notes, tokenizer, args.primer_seconds
            )
        for problem in skipped:
            warnings.warn(f"skipping {problem}", stacklevel=2)
        if not primers:
            raise ValueError(f"{args.primer}: no MIDI file with notes in its first {args.primer_seconds:g} s "
                             f"({len(skipped)} skipped)")  # fmt: skip
        out = Path(args.out)
        claim_outputs([out / f"{name}{suffix}" for name in primers
                       for suffix in (".mid", ".png", ".wav", "_spectrogram.png")], args.overwrite)  # fmt: skip
        paths = continue_primers(
            self.model, tokenizer, primers, out, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed, audio=not args.no_audio,
            soundfont=args.soundfont,
        )  # fmt: skip
        print(f"continued the first {args.primer_seconds:g} s of {len(paths)} file(s) of {args.primer}"
              + (f" ({len(skipped)} skipped)" if skipped else ""))  # fmt: skip
        for path in paths:
            print(f"wrote {path}")


def _score_row(name: str, score: MusicScore) -> str:
    name = name if len(name) <= 44 else "…" + name[-43:]
    return (f"{name:<44} {score.events:>8} {score.notes:>7} {score.seconds:>8.1f} {score.per_event:>8.4f} "
            f"{score.per_note:>8.4f} {score.per_second:>8.4f}")  # fmt: skip


def run_pieces(checkpoint: Path, split: str) -> MidiCorpus:
    """One split of the pieces a checkpoint's run used: its ``midi_dir`` or the chorales, split as the run split them.

    Runs saved before the test split existed trained on every piece outside validation, so for
    them ``"test"`` is empty and ``"train"`` is all the rest.
    """
    from tasks.datamodules.music import midi_folder_corpus

    data = data_settings(checkpoint)
    midi_dir = data.get("midi_dir")
    corpus = midi_folder_corpus(midi_dir) if midi_dir else load_bach_chorales(limit=data.get("limit"))
    return corpus.split(split, data.get("validation_percent", 10), data.get("test_percent", 0))
