"""What a listener hears, measured: histograms of note statistics compared between two sets of music.

Validation NLL says how well a model predicts real music; it does not say whether what the model
*plays* sounds like it. Following Yang & Lerch (2020, "On the evaluation of generative models in
music"), a set of generated continuations is compared with the real continuations of the same
primers through the distributions of a few features, each a normalised histogram over fixed bins:

============  ==============================================================================
feature       values, and bins
============  ==============================================================================
duration      length of each note in seconds; 24 log-spaced bins from 20 ms to 16 s, plus one
              bin below and one above
polyphony     number of notes sounding at once, weighted by how long that lasts (silence is 0);
              one bin per count 0..15, plus 16 or more
ioi           inter-onset interval: time between successive distinct onsets, seconds; 20
              log-spaced bins from 10 ms to 8 s, plus one bin below and one above
pitch_class   pitch modulo 12 of each note (C = 0)
pitch         MIDI pitch of each note, one bin per semitone 0..127 (where the notes lie: the
              register and range)
============  ==============================================================================

The overlap of two histograms ``p`` and ``q`` over the same bins is ``sum(min(p, q))``: 1 for
identical distributions, 0 for disjoint ones (the overlapping area of Yang & Lerch, here between
the two sets' feature histograms). Two scalars complete the picture: the longest note, and the
share of notes still sounding at the end of the excerpt (a model that forgets to release notes
leaves many; a real excerpt cut at the same point leaves only the chord sounding there).

Everything works on note arrays ``(num_notes, 4)`` = ``[pitch, start_s, end_s, velocity]`` (see
:func:`multimodal.tokenizers.midi_files.notes_from_midi`), so it serves any tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FEATURES = ("duration", "polyphony", "ioi", "pitch_class", "pitch")
_INF = np.inf
BIN_EDGES: dict[str, np.ndarray] = {
    "duration": np.r_[-_INF, np.geomspace(0.02, 16.0, 25), _INF],
    "polyphony": np.r_[np.arange(17) - 0.5, _INF],
    "ioi": np.r_[-_INF, np.geomspace(0.01, 8.0, 21), _INF],
    "pitch_class": np.arange(13) - 0.5,
    "pitch": np.arange(129) - 0.5,
}
"""Bin edges of each feature's histogram (a value ``v`` falls in ``edges[i] <= v < edges[i + 1]``)."""


@dataclass
class ExcerptStats:
    """The statistics of a set of excerpts (one or more pieces, pooled).

    Attributes:
        counts: Per feature, the (unnormalised) histogram over :data:`BIN_EDGES`; polyphony counts
            seconds, the others count notes or intervals.
        num_notes: Notes in all excerpts.
        seconds: Total length of the excerpts.
        longest_note: Longest note duration in seconds (0 without notes).
        sounding_at_end: Notes that last until their excerpt's end.
    """

    counts: dict[str, np.ndarray] = field(default_factory=lambda: {f: np.zeros(len(BIN_EDGES[f]) - 1) for f in FEATURES})
    num_notes: int = 0
    seconds: float = 0.0
    longest_note: float = 0.0
    sounding_at_end: int = 0

    def histogram(self, feature: str) -> np.ndarray:
        """The normalised histogram of ``feature`` (sums to 1; all zeros if empty)."""
        counts = self.counts[feature]
        total = counts.sum()
        return counts / total if total > 0 else counts.copy()

    @property
    def sounding_at_end_share(self) -> float:
        """Share of notes that last until the end of their excerpt."""
        return self.sounding_at_end / self.num_notes if self.num_notes else 0.0

    def __add__(self, other: ExcerptStats) -> ExcerptStats:
        return ExcerptStats(
            {f: self.counts[f] + other.counts[f] for f in FEATURES},
            self.num_notes + other.num_notes,
            self.seconds + other.seconds,
            max(self.longest_note, other.longest_note),
            self.sounding_at_end + other.sounding_at_end,
        )


def excerpt_stats(
    notes: np.ndarray, start: float = 0.0, end: float | None = None, tolerance: float = 0.011, select: bool = True
) -> ExcerptStats:
    """Statistics of the notes of an excerpt ``[start, end]``, each cut at ``end``.

    Args:
        notes: ``(num_notes, 4)`` = ``[pitch, start_s, end_s, velocity]`` (or 5, the part last: merged).
        start: Where the excerpt begins (a continuation: where its primer was cut).
        end: Where it ends; None: the last note's end.
        tolerance: A note ending within this many seconds of ``end`` counts as sounding at the end.
        select: Keep only the notes that begin in ``[start, end)``; False: ``notes`` are the
            excerpt's notes already (a continuation separated from its primer), only cut at ``end``.
    """
    notes = np.asarray(notes, dtype=np.float64)
    notes = notes[:, :4] if notes.ndim == 2 else notes.reshape(-1, 4)  # parts (a fifth column) merged
    if end is None:
        end = float(notes[:, 2].max()) if len(notes) else start
    if select:
        notes = notes[(notes[:, 1] >= start) & (notes[:, 1] < end)]
    notes = notes[notes[:, 1] < end].copy()
    notes[:, 2] = np.minimum(notes[:, 2], end)
    stats = ExcerptStats(seconds=max(end - start, 0.0), num_notes=len(notes))
    if len(notes) == 0:
        stats.counts["polyphony"][0] = stats.seconds
        return stats
    durations = notes[:, 2] - notes[:, 1]
    onsets = np.unique(notes[:, 1])
    stats.counts["duration"] = _histogram(durations, "duration")
    stats.counts["ioi"] = _histogram(np.diff(onsets), "ioi")
    stats.counts["pitch_class"] = _histogram(np.rint(notes[:, 0]) % 12, "pitch_class")
    stats.counts["pitch"] = _histogram(np.rint(notes[:, 0]), "pitch")
    stats.counts["polyphony"] = _polyphony_seconds(notes, start, end)
    stats.longest_note = float(durations.max())
    stats.sounding_at_end = int((notes[:, 2] >= end - tolerance).sum())
    return stats


def overlaps(generated: ExcerptStats, reference: ExcerptStats) -> dict[str, float]:
    """Overlap area ``sum(min(p, q))`` of each feature's normalised histograms (1: identical)."""
    return {f: float(np.minimum(generated.histogram(f), reference.histogram(f)).sum()) for f in FEATURES}


def comparison_table(generated: ExcerptStats, reference: ExcerptStats, training_longest_note: float | None = None) -> str:
    """A markdown table: each feature's overlap, and the scalars of both sets side by side."""
    lines = ["| feature | overlap | generated | reference |", "|---|---:|---:|---:|"]
    for feature, value in overlaps(generated, reference).items():
        lines.append(f"| {feature} | {value:.3f} | {_summary(generated, feature)} | {_summary(reference, feature)} |")
    lines.append(f"| longest note (s) | | {generated.longest_note:.2f} | {reference.longest_note:.2f} |")
    lines.append(f"| notes sounding at the end | | {generated.sounding_at_end_share:.1%} | "
                 f"{reference.sounding_at_end_share:.1%} |")  # fmt: skip
    lines.append(f"| notes / seconds | | {generated.num_notes} / {generated.seconds:.1f} | "
                 f"{reference.num_notes} / {reference.seconds:.1f} |")  # fmt: skip
    if training_longest_note is not None:
        lines.append(f"| longest training note (s) | | | {training_longest_note:.2f} |")
    return "\n".join(lines) + "\n"


def _summary(stats: ExcerptStats, feature: str) -> str:
    """A readable centre of a histogram: the median bin's representative value."""
    histogram = stats.histogram(feature)
    if histogram.sum() == 0:
        return "-"
    index = int(np.searchsorted(np.cumsum(histogram), 0.5))
    edges = BIN_EDGES[feature]
    low, high = edges[index], edges[index + 1]
    if feature == "polyphony":
        return f"median {index}"
    if feature in ("pitch", "pitch_class"):
        return f"median {index}"
    low_text = "0" if not np.isfinite(low) else f"{low:.2f}"
    high_text = "inf" if not np.isfinite(high) else f"{high:.2f}"
    return f"median {low_text}-{high_text} s"


def _histogram(values: np.ndarray, feature: str) -> np.ndarray:
    """Counts of ``values`` in the bins of ``feature`` (left-closed bins)."""
    edges = BIN_EDGES[feature]
    index = np.searchsorted(edges, values, side="right") - 1
    return np.bincount(index.clip(0, len(edges) - 2), minlength=len(edges) - 1).astype(np.float64)


def _polyphony_seconds(notes: np.ndarray, start: float, end: float) -> np.ndarray:
    """Seconds of ``[start, end]`` during which exactly ``k`` notes sound, per polyphony bin."""
    times = np.r_[notes[:, 1], notes[:, 2], start, end]
    changes = np.r_[np.ones(len(notes)), -np.ones(len(notes)), 0.0, 0.0]
    order = np.lexsort((changes, times))  # at one instant, endings (-1) before beginnings (+1)
    times, changes = times[order], changes[order]
    sounding = np.cumsum(changes)[:-1]  # notes sounding from times[i] to times[i + 1]
    lengths = np.diff(times)
    inside = (times[:-1] >= start) & (times[1:] <= end)
    counts = np.zeros(len(BIN_EDGES["polyphony"]) - 1)
    np.add.at(counts, np.minimum(sounding[inside].astype(np.int64), len(counts) - 1), lengths[inside])
    return counts
