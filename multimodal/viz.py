"""Pictures of what the models make, written as PNG files with matplotlib's Agg canvas.

Figures are built with :func:`new_figure` and written with :func:`save_figure`, which never
touch pyplot's global state or the interactive backend, so they work in headless training jobs,
DataLoader workers and threads. Plots for other modalities (image grids, attention maps) are
meant to follow the same two helpers.

Music: :func:`piano_roll_png` draws notes as bars, time (seconds) across, pitch up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pretty_midi
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

PRIMER_COLOUR = "#4c72b0"  # blue: the notes given to the model
CONTINUATION_COLOUR = "#dd8452"  # orange: the notes the model wrote


def piano_roll_png(
    midi_or_notes: pretty_midi.PrettyMIDI | np.ndarray | str | Path,
    path: str | Path,
    primer_end_seconds: float | None = None,
    title: str | None = None,
) -> Path:
    """Draws a piano roll; notes starting before ``primer_end_seconds`` in one colour, later ones in another.

    Args:
        midi_or_notes: A ``PrettyMIDI``, a MIDI file path, or a note array ``(num_notes, 4)`` of
            ``[pitch, start_s, end_s, velocity]``. All non-drum instruments are drawn.
        path: PNG file to write (folders are created).
        primer_end_seconds: Where the primer ends; a dashed line marks it. ``None``: all notes
            are drawn in the primer colour.
        title: Optional title above the roll.

    Returns:
        The path written.
    """
    notes = _as_notes(midi_or_notes)
    figure, axes = new_figure(width=10.0, height=4.0)
    if len(notes):
        pitch, start, end = notes[:, 0], notes[:, 1], np.maximum(notes[:, 2], notes[:, 1])
        bars = np.stack(
            [
                np.stack([start, pitch - 0.4], axis=1),
                np.stack([end, pitch - 0.4], axis=1),
                np.stack([end, pitch + 0.4], axis=1),
                np.stack([start, pitch + 0.4], axis=1),
            ],
            axis=1,
        )  # (num_notes, 4 corners, xy)
        in_primer = np.ones(len(notes), bool) if primer_end_seconds is None else start < primer_end_seconds
        colours = np.where(in_primer, PRIMER_COLOUR, CONTINUATION_COLOUR)
        axes.add_collection(PolyCollection(list(bars), facecolors=list(colours), edgecolors="none"))
        axes.set_xlim(0.0, max(float(end.max()), primer_end_seconds or 0.0) * 1.01 + 1e-3)
        axes.set_ylim(pitch.min() - 2, pitch.max() + 2)
    else:
        axes.set_xlim(0.0, 1.0)
        axes.set_ylim(58, 62)
        axes.text(0.5, 60, "no notes", ha="center", va="center")
    if primer_end_seconds is not None:
        axes.axvline(primer_end_seconds, color="black", linestyle="--", linewidth=1.0)
        axes.plot([], [], color=PRIMER_COLOUR, linewidth=6, label="primer")
        axes.plot([], [], color=CONTINUATION_COLOUR, linewidth=6, label="continuation")
        axes.legend(loc="upper right", fontsize="small")
    axes.set_xlabel("time (s)")
    axes.set_ylabel("pitch (MIDI note number)")
    axes.grid(True, axis="y", alpha=0.3)
    if title:
        axes.set_title(title)
    return save_figure(figure, path)


def new_figure(width: float = 8.0, height: float = 4.0, dpi: int = 100) -> tuple[Figure, object]:
    """A figure with one axes on the Agg canvas (no pyplot, no global state); returns ``(figure, axes)``."""
    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def save_figure(figure: Figure, path: str | Path) -> Path:
    """Writes a figure as PNG (creating folders) and returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path


def _as_notes(item: pretty_midi.PrettyMIDI | np.ndarray | str | Path) -> np.ndarray:
    """Note array ``(num_notes, 4)`` of the non-drum notes of a MIDI object, file or array."""
    if isinstance(item, np.ndarray):
        return np.asarray(item, dtype=np.float64).reshape(-1, 4)
    if not isinstance(item, pretty_midi.PrettyMIDI):
        item = pretty_midi.PrettyMIDI(str(item))
    rows = [(n.pitch, n.start, n.end, n.velocity) for i in item.instruments if not i.is_drum for n in i.notes]
    return np.array(rows, dtype=np.float64).reshape(-1, 4)
