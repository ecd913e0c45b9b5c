"""``multimodal sample-stats``: how a music model's continuations compare with the real ones."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from multimodal.limits import MAX_NEW_TOKENS, MAX_SAMPLES
from tasks.arguments import (
    count,
    non_negative_float,
    positive_float,
    positive_int,
    probability,
    sampling_from_args,
)
from tasks.commands.checkpoint import add_model_arguments, model_path


def sample_stats_command(argv: list[str]) -> None:
    """``multimodal sample-stats``: continues held-out pieces and compares note statistics with theirs.

    Each of the first ``--num-primers`` held-out pieces of the run (or each ``--primers`` file) is
    cut after ``--primer-seconds``; the model continues it once, and the generated continuation is
    compared with the piece's real continuation over the same seconds: histogram overlaps of note
    duration, polyphony, inter-onset interval, pitch class and pitch (1 = the same distribution), the
    longest note and the share of notes still sounding at the end (see multimodal/music/stats.py).

    ``--compare MODEL`` (e.g. ``music``, the shipped model) continues the same primers with a second model
    and prints both side by side with each model's nats per second of music on those pieces; held-out
    pieces the second model trained on are left out for both (the same source file in its collections
    counts), and a model with parts reads each primer with its parts.
    """
    parser = argparse.ArgumentParser(prog="multimodal sample-stats", description=sample_stats_command.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    add_model_arguments(parser)
    parser.add_argument("--primers", type=Path, nargs="+", help="MIDI files to continue (default: held-out pieces)")
    parser.add_argument("--num-primers", type=count(MAX_SAMPLES), default=8,
                        help=f"held-out pieces to continue (at most {MAX_SAMPLES:,})")  # fmt: skip
    parser.add_argument("--split", choices=["val", "test", "held-out", "train"], default="val",
                        help="which pieces (as the run split them); held-out: val and test; train: its own "
                             "training pieces")  # fmt: skip
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--primer-seconds", type=positive_float, default=6.0)
    parser.add_argument("--max-new-tokens", type=count(MAX_NEW_TOKENS, low=0), default=512,
                        help=f"events to add (at most {MAX_NEW_TOKENS:,})")  # fmt: skip
    parser.add_argument("--temperature", type=non_negative_float, default=1.0)
    parser.add_argument("--top-k", type=positive_int, default=None)
    parser.add_argument("--top-p", type=probability, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", metavar="MODEL",
                        help="a second model on the same primers: a shipped model's name (music), a model folder or "
                             "a checkpoint")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    parser.add_argument("--overwrite", action="store_true", help="replace the --json file if it exists")
    args = parser.parse_args(argv)
    checkpoint = model_path(parser, args.checkpoint, args.model)
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
    task, tokenizer, data = load_task(checkpoint, map_location=device)
    if not isinstance(task, MusicContinuation):
        parser.error(f"{checkpoint} is a {type(task).__name__} checkpoint, not a music model")
    if args.primers:
        pieces, names = [notes_from_midi(path) for path in args.primers], [str(path) for path in args.primers]
    else:
        splits = ("val", "test") if args.split == "held-out" else (args.split,)
        chosen = [run_pieces(data, split) for split in splits]
        pieces = [notes for corpus in chosen for notes in corpus.notes]
        names = [name for corpus in chosen for name in corpus.names]
    if args.compare:
        other = load_task(model_path(parser, None, args.compare, option="--compare"), map_location=device)
        if not isinstance(other.task, MusicContinuation):
            parser.error(f"--compare {args.compare}: a {type(other.task).__name__} model, not a music model")
        kept, other_pieces = unseen_pieces(names, pieces, other.data, other.tokenizer)
        if not kept:
            parser.error(f"--compare {args.compare}: it trained on every one of these pieces")
        kept = kept if args.primers else kept[: args.num_primers]
        pieces, names, other_pieces = [pieces[i] for i in kept], [names[i] for i in kept], other_pieces[: len(kept)]
        where = "the given files" if args.primers else f"this run's {args.split} pieces"
        compare_models(args, [(str(checkpoint), task, tokenizer, pieces, data.get("seq_len", 256)),
                              (args.compare, other.task, other.tokenizer, other_pieces, other.data.get("seq_len", 256))],
                       names, f"{where} that {args.compare} did not train on")  # fmt: skip
        return
    if not args.primers:
        pieces, names = pieces[: args.num_primers], names[: args.num_primers]
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


def unseen_pieces(
    names: list[str], pieces: list[Any], data: dict[str, Any], tokenizer: Any
) -> tuple[list[int], list[Any]]:
    """Which of the pieces ``names`` a model (``data``: its run's data settings) did not train on, and each as
    that model reads it.

    A model trained on music21 collections owns a piece when the piece's source file is in one of them
    (``<collection>/<name>``); it reads the piece from there, with its parts. Any other model owns a piece
    of the same name (a collection's prefix dropped) and reads the notes given, parts merged when it has
    none. Either way the piece was trained on when the model's split puts that name in ``train``.
    """
    import numpy as np

    from multimodal.data.music import piece_split
    from multimodal.data.music21_collections import COLLECTIONS
    from multimodal.data.music21_corpus import load_named_pieces, source_file

    percents = data.get("validation_percent", 10), data.get("test_percent", 0)
    collections = list(data.get("collections") or [])
    own = {}
    for index, name in enumerate(names):
        if collections:
            candidates = [name] if name.split("/")[0] in collections else [f"{c}/{name}" for c in collections]
            own[index] = next((candidate for candidate in candidates if source_file(candidate) is not None), None)
        else:
            prefix, _, rest = name.partition("/")
            own[index] = rest if prefix in COLLECTIONS and rest else name
    kept = [i for i in range(len(names)) if own[i] is None or piece_split(own[i], *percents) != "train"]
    num_parts = getattr(tokenizer.config, "num_parts", 1)
    if not collections:
        def merged(notes: np.ndarray) -> np.ndarray:
            notes = notes[:, :4] if num_parts == 1 else notes
            return notes[np.lexsort((notes[:, 0], notes[:, 1]))]

        return kept, [merged(pieces[i]) for i in kept]
    wanted = [own[i] for i in kept if own[i] is not None]
    read = load_named_pieces(wanted, num_parts=num_parts) if wanted else None
    by_name = dict(zip(read.names, read.notes, strict=True)) if read is not None else {}
    kept = [i for i in kept if own[i] is None or own[i] in by_name]
    return kept, [pieces[i] if own[i] is None else by_name[own[i]] for i in kept]


def compare_models(
    args: argparse.Namespace, models: list[tuple[str, Any, Any, list[Any], int]], names: list[str], where: str
) -> None:
    """Prints one table: each model's overlaps with the real continuations, and its nats per second of music.

    ``models``: per model its label, task, tokenizer, the primers as it reads them and its window length;
    ``where``: what the primers are, for the heading. The controls of a model trained with them are left
    unknown, so both models hear only the primer."""
    from multimodal.music import evaluate_continuations, score_music
    from multimodal.music.stats import FEATURES, overlaps

    rows, scores = [], []
    for _, task, tokenizer, pieces, seq_len in models:
        generated, reference, _ = evaluate_continuations(
            task.model, tokenizer, pieces, primer_seconds=args.primer_seconds, max_new_tokens=args.max_new_tokens,
            sampling=sampling_from_args(args), seed=args.seed,
        )  # fmt: skip
        rows.append(overlaps(generated, reference))
        total = [score_music(task.model, tokenizer, notes, seq_len) for notes in pieces]
        scores.append(sum(total[1:], total[0]).per_second)
    print(f"{len(names)} primers of {args.primer_seconds:g} s, {where} ({', '.join(names)}), "
          f"{args.max_new_tokens} new events each; overlap with the real continuations")  # fmt: skip
    print("| feature | " + " | ".join(label for label, *_ in models) + " |")
    print("|---|" + "---:|" * len(models))
    for feature in FEATURES:
        print(f"| {feature} | " + " | ".join(f"{row[feature]:.3f}" for row in rows) + " |")
    print("| nats per second of music | " + " | ".join(f"{score:.2f}" for score in scores) + " |")
    if args.json:
        report = {"primers": names, "models": [label for label, *_ in models], "overlaps": rows,
                  "nats_per_second": scores}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2) + "\n")
