"""Pictures of what the models make, written as PNG files with matplotlib's Agg canvas.

Figures are built with :func:`new_figure` and written with :func:`save_figure`, which never
touch pyplot's global state or the interactive backend, so they work in headless training jobs,
DataLoader workers and threads. Plots for other modalities (image grids, attention maps) are
meant to follow the same two helpers.

Music: :func:`piano_roll_png` draws notes as bars, time (seconds) across, pitch up.

Images: :func:`image_grid_png` and :func:`side_by_side_png` write pixels directly with PIL (every
image pixel becomes an exact ``pixel_scale × pixel_scale`` square; small files), no matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pretty_midi
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

PRIMER_COLOUR = "#4c72b0"  # blue: the notes given to the model
CONTINUATION_COLOUR = "#dd8452"  # orange: the notes the model wrote
# one hue a part where the music has several (seaborn's "deep" palette); what was given is drawn pale
PART_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
PALE = 0.6  # a given note's colour: this share of white mixed into its part's


def pale(colour: str) -> str:
    """``colour`` (``#rrggbb``) mixed with :data:`PALE` white: how a part's given notes are drawn."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * PALE):02x}" for c in rgb)


def piano_roll_png(
    midi_or_notes: pretty_midi.PrettyMIDI | np.ndarray | str | Path,
    path: str | Path,
    primer_end_seconds: float | None = None,
    title: str | None = None,
    given: np.ndarray | None = None,
    part_names: Sequence[str] | None = None,
) -> Path:
    """Draws a piano roll: time (seconds) across, pitch up, what was given told from what the model wrote.

    Music of one part: given notes (the primer's, or ``given``) in blue, the model's in orange. Music of
    several parts (a note array's part column, or a MIDI file's tracks) gets a hue per part
    (:data:`PART_COLOURS`, named in the legend by its track name or ``Part <n>``), the given notes pale
    (:func:`pale`), the model's in full colour.

    Args:
        midi_or_notes: A ``PrettyMIDI``, a MIDI file path (each non-drum track a part), or a note array
            ``(num_notes, 4)`` of ``[pitch, start_s, end_s, velocity]`` or ``(num_notes, 5)`` with the part last.
        path: PNG file to write (folders are created).
        primer_end_seconds: Where the primer ends (notes starting before it were given); a dashed line
            marks it. ``None`` and no ``given``: one part is drawn in blue, several in full colour.
        title: Optional title above the roll.
        given: Instead of a primer, a bool per note of a note array: the given notes (a melody to
            harmonize, the music kept around a filled gap).
        part_names: The names of a note array's parts, by part (None: ``Part <n>``).

    Returns:
        The path written.
    """
    notes, part, names = _as_parts(midi_or_notes)
    if part_names is not None and isinstance(midi_or_notes, np.ndarray):
        names = [part_names[index] if index < len(part_names) else name for index, name in enumerate(names)]
    by_part = len(names) > 1
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
        if given is not None:
            in_primer = np.asarray(given, dtype=bool)
        if by_part and given is None and primer_end_seconds is None:
            in_primer[:] = False  # nothing was given: every part in full colour
        if by_part:
            hues = [PART_COLOURS[index % len(PART_COLOURS)] for index in part]
            colours = [pale(hue) if was_given else hue for hue, was_given in zip(hues, in_primer, strict=True)]
        else:
            colours = list(np.where(in_primer, PRIMER_COLOUR, CONTINUATION_COLOUR))
        axes.add_collection(PolyCollection(list(bars), facecolors=colours, edgecolors="none"))
        axes.set_xlim(0.0, max(float(end.max()), primer_end_seconds or 0.0) * 1.01 + 1e-3)
        axes.set_ylim(pitch.min() - 2, pitch.max() + 2)
    else:
        axes.set_xlim(0.0, 1.0)
        axes.set_ylim(58, 62)
        axes.text(0.5, 60, "no notes", ha="center", va="center")
    if primer_end_seconds is not None and given is None:
        axes.axvline(primer_end_seconds, color="black", linestyle="--", linewidth=1.0)
    if by_part:
        for index, name in enumerate(names):
            if np.any(part == index):
                axes.plot([], [], color=PART_COLOURS[index % len(PART_COLOURS)], linewidth=6, label=name)
        if given is not None or primer_end_seconds is not None:
            axes.plot([], [], color=pale(PART_COLOURS[-1]), linewidth=6, label=f"pale: {'given' if given is not None else 'primer'}")
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")  # beside the roll: no note hidden
    elif given is not None or primer_end_seconds is not None:
        labels = ("given", "generated") if given is not None else ("primer", "continuation")
        axes.plot([], [], color=PRIMER_COLOUR, linewidth=6, label=labels[0])
        axes.plot([], [], color=CONTINUATION_COLOUR, linewidth=6, label=labels[1])
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


def _as_parts(item: pretty_midi.PrettyMIDI | np.ndarray | str | Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The non-drum notes of a MIDI object, file or array: ``(num_notes, 4)`` notes, the part of each
    ``(num_notes,)`` and the parts' names (a track's name, else ``Part <n>``; one name: one part)."""
    if isinstance(item, np.ndarray):
        item = np.asarray(item, dtype=np.float64)
        item = item if item.ndim == 2 else item.reshape(-1, 4)
        part = item[:, 4].astype(np.int64) if item.shape[1] == 5 and len(item) else np.zeros(len(item), np.int64)
        return item[:, :4], part, [f"Part {index + 1}" for index in range(int(part.max(initial=0)) + 1)]
    if not isinstance(item, pretty_midi.PrettyMIDI):
        item = pretty_midi.PrettyMIDI(str(item))
    tracks = [instrument for instrument in item.instruments if not instrument.is_drum]
    rows = [(n.pitch, n.start, n.end, n.velocity, index) for index, track in enumerate(tracks) for n in track.notes]
    rows = np.array(rows, dtype=np.float64).reshape(-1, 5)
    names = [track.name.strip() or f"Part {index + 1}" for index, track in enumerate(tracks)]
    return rows[:, :4], rows[:, 4].astype(np.int64), names


# --------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------


def image_grid(images, nrow: int | None = None, padding: int = 2, pixel_scale: int = 1) -> np.ndarray:
    """Tiles images into one RGB array ``(height, width, 3)`` uint8 on a white background.

    Args:
        images: ``(n, channels, h, w)`` tensor or array, uint8 or float in ``[0, 1]``; 1 or 3 channels.
        nrow: Images per row; default ``ceil(sqrt(n))``.
        padding: White pixels between images (after scaling).
        pixel_scale: Each pixel becomes a square this many pixels wide (nearest neighbour).
    """
    array = _as_uint8_images(images)  # (n, h, w, 3)
    count, height, width = array.shape[:3]
    if count == 0:
        raise ValueError("image_grid needs at least one image")
    array = array.repeat(pixel_scale, axis=1).repeat(pixel_scale, axis=2)
    height, width = height * pixel_scale, width * pixel_scale
    nrow = nrow or int(np.ceil(np.sqrt(count)))
    rows = -(-count // nrow)
    shape = (rows * (height + padding) + padding, nrow * (width + padding) + padding, 3)
    grid = np.full(shape, 255, np.uint8)
    for index in range(count):
        top = padding + (index // nrow) * (height + padding)
        left = padding + (index % nrow) * (width + padding)
        grid[top : top + height, left : left + width] = array[index]
    return grid


def image_grid_png(
    images, path: str | Path, nrow: int | None = None, padding: int = 2, pixel_scale: int | None = None
) -> Path:
    """Writes :func:`image_grid` as a PNG (creating folders); returns the path.

    Args:
        images: ``(n, channels, h, w)``, uint8 or float in ``[0, 1]``.
        path: PNG file to write.
        nrow: Images per row; default ``ceil(sqrt(n))``.
        padding: White pixels between images.
        pixel_scale: Nearest-neighbour enlargement; default makes each image at least 64 pixels wide.
    """
    from PIL import Image

    height, width = np.shape(images)[-2:]
    pixel_scale = pixel_scale or max(1, -(-64 // max(height, width)))
    return _save_png(Image.fromarray(image_grid(images, nrow, padding, pixel_scale)), path)


def side_by_side_png(panels, path: str | Path, pixel_scale: int = 1, padding: int = 4) -> Path:
    """Writes images next to each other with a title above each (e.g. bicubic | ours | original).

    Args:
        panels: ``(title, image)`` pairs; each image ``(channels, h, w)``, uint8 or float in ``[0, 1]``.
            Images of different heights are top-aligned.
        path: PNG file to write.
        pixel_scale: Nearest-neighbour enlargement of every panel.
        padding: White pixels around and between panels.
    """
    from PIL import Image, ImageDraw

    pictures = [_as_uint8_images(np.asarray(image)[None])[0] for _, image in panels]
    pictures = [p.repeat(pixel_scale, axis=0).repeat(pixel_scale, axis=1) for p in pictures]
    title_height = 16
    height = max(p.shape[0] for p in pictures) + title_height + 2 * padding
    width = sum(p.shape[1] for p in pictures) + padding * (len(pictures) + 1)
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    left = padding
    for (title, _), picture in zip(panels, pictures, strict=True):
        draw.text((left, padding), str(title), fill="black")
        canvas.paste(Image.fromarray(picture), (left, padding + title_height))
        left += picture.shape[1] + padding
    return _save_png(canvas, path)


def _as_uint8_images(images) -> np.ndarray:
    """``(n, c, h, w)`` uint8 or float ``[0, 1]`` (tensor or array) → uint8 ``(n, h, w, 3)``."""
    array = images.detach().cpu().numpy() if hasattr(images, "detach") else np.asarray(images)
    if array.ndim != 4 or array.shape[1] not in (1, 3):
        raise ValueError(f"expected images (n, 1 or 3 channels, h, w), got shape {array.shape}")
    if array.dtype != np.uint8:
        array = (np.clip(array.astype(np.float64), 0, 1) * 255).round().astype(np.uint8)
    array = array.transpose(0, 2, 3, 1)
    return np.repeat(array, 3, axis=-1) if array.shape[-1] == 1 else array


def _save_png(image, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG", optimize=True)
    return path
