"""``multimodal sample-stats``: how a music model's continuations compare with the real ones."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from multimodal.limits import MAX_NEW_TOKENS, MAX_SAMPLES
from tasks.arguments import (
    count,
    non_negative_float,
    positive_float,
    positive_int,
    probability,
    sampling_from_args,
)


def sample_stats_command(argv: list[str]) -> None:
    """``multimodal sample-stats``: continues held-out pieces and compares note statistics with theirs.

    Each of the first ``--num-primers`` held-out pieces of the run (or each ``--primers`` file) is
    cut after ``--primer-seconds``; the model continues it once, and the generated continuation is
    compared with the piece's real continuation over the same seconds: histogram overlaps of note
    duration, polyphony, inter-onset interval, pitch class and pitch (1 = the same distribution), the
    longest note and the share of notes still sounding at the end (see multimodal/music/stats.py).
    """
    parser = argparse.ArgumentParser(prog="multimodal sample-stats", description=sample_stats_command.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--checkpoint", type=Path, required=True, help="a music .ckpt written by `multimodal fit`")
    parser.add_argument("--primers", type=Path, nargs="+", help="MIDI files to continue (default: held-out pieces)")
    parser.add_argument("--num-primers", type=count(MAX_SAMPLES), default=8,
                        help=f"held-out pieces to continue (at most {MAX_SAMPLES:,})")  # fmt: skip
    parser.add_argument("--split", choices=["val", "test"], default="val",
                        help="which held-out pieces (as the run split them)")  # fmt: skip
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--primer-seconds", type=positive_float, default=6.0)
    parser.add_argument("--max-new-tokens", type=count(MAX_NEW_TOKENS, low=0), default=512,
                        help=f"events to add (at most {MAX_NEW_TOKENS:,})")  # fmt: skip
    parser.add_argument("--temperature", type=non_negative_float, default=1.0)
    parser.add_argument("--top-k", type=positive_int, default=None)
    parser.add_argument("--top-p", type=probability, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    parser.add_argument("--overwrite", action="store_true", help="replace the --json file if it exists")
    args = parser.parse_args(argv)
    if not args.checkpoint.exists():
        parser.error(f"checkpoint not found: {args.checkpoint}")
    if args.json is not None and args.json.exists() and not args.overwrite:
        parser.error(f"--json {args.json}: already exists; pass --overwrite to replace it")
    import torch

    from multimodal.music import evaluate_continuations, longest_note
    from multimodal.music.stats import comparison_table, overlaps
    from multimodal.tokenizers.midi_files import notes_from_midi
    from tasks.checkpoint import load_task
    from tasks.commands.checkpoint import check_device
    from tasks.commands.music import run_pieces
    from tasks.music_continuation import MusicContinuation

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(parser, device)  # before loading: a bad device is not a bad checkpoint
    task, tokenizer, data = load_task(args.checkpoint, map_location=device)
    if not isinstance(task, MusicContinuation):
        parser.error(f"{args.checkpoint} is a {type(task).__name__} checkpoint, not a music model")
    if args.primers:
        pieces, names = [notes_from_midi(path) for path in args.primers], [str(path) for path in args.primers]
    else:
        held_out = run_pieces(data, args.split)
        pieces, names = held_out.notes[: args.num_primers], held_out.names[: args.num_primers]
    generated, reference, _ = evaluate_continuations(
        task.model, tokenizer, pieces, primer_seconds=args.primer_seconds, max_new_tokens=args.max_new_tokens,
        sampling=sampling_from_args(args), seed=args.seed,
    )  # fmt: skip
    training_longest = longest_note(run_pieces(data, "train").notes)
    print(f"{len(pieces)} primers of {args.primer_seconds:g} s ({', '.join(names)}), {args.max_new_tokens} new events each")
    print(comparison_table(generated, reference, training_longest))
    if args.json:
        report = {"overlaps": overlaps(generated, reference), "longest_note": generated.longest_note,
                  "reference_longest_note": reference.longest_note, "training_longest_note": training_longest,
                  "sounding_at_end": generated.sounding_at_end_share,
                  "reference_sounding_at_end": reference.sounding_at_end_share, "primers": names}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2) + "\n")
