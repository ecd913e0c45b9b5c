"""Controls a musician sets: style, key, meter and note density, as tokens at the start of a sequence.

A sequence of a vocabulary with controls opens ``BOS STYLE_s KEY_k METER_m DENSITY_d`` and then
the notes. Each control has an ``unknown`` value: training drops each one to ``unknown`` at random
(:data:`DEFAULT_DROPOUT`), so one model samples with any subset of them set.

- **style**: a group of collections that differ musically (:data:`STYLES`);
- **key**: tonic and mode (24 keys), as music21's Krumhansl–Schmuckler analysis finds it in the
  piece; a transposition of the piece moves the tonic with it (:meth:`Controls.transposed`);
- **meter**: the first time signature (:data:`METERS`, ``other`` for the rest);
- **density**: notes per second of the piece, in :data:`DENSITY_EDGES` buckets.

This module only names the values and parses what a user types; the ids are the tokenizer's
(:class:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer` with ``controls=True``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

STYLES: dict[str, tuple[str, ...]] = {
    "chorale": ("bach",),
    "renaissance": ("monteverdi", "palestrina"),
    "medieval": ("trecento",),
    "fiddle": ("oneills1850", "ryansMammoth", "airdsAirs"),
    "folk": ("essenFolksong",),
}
TONICS = ("C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B")
KEYS = tuple(f"{tonic} {mode}" for mode in ("major", "minor") for tonic in TONICS)
METERS = ("2/2", "2/4", "3/4", "4/4", "3/8", "6/8", "9/8", "12/8", "3/2", "other")
DENSITY_EDGES = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)  # notes per second; bucket b holds [edge b-1, edge b)
CONTROL_NAMES = ("style", "key", "meter", "density")
DEFAULT_DROPOUT = 0.25  # chance that training hides each control (writes it as unknown)

_LETTERS = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}


def control_sizes() -> dict[str, int]:
    """Values of each control, ``unknown`` included (the ids the tokenizer reserves for it)."""
    return {"style": len(STYLES) + 1, "key": len(KEYS) + 1, "meter": len(METERS) + 1,
            "density": len(DENSITY_EDGES) + 2}  # fmt: skip


@dataclass(frozen=True)
class Controls:
    """One sequence's controls; ``None`` is unknown. Values are indices into :data:`STYLES` (in order),
    :data:`KEYS`, :data:`METERS` and the density buckets (0 .. ``len(DENSITY_EDGES)``)."""

    style: int | None = None
    key: int | None = None
    meter: int | None = None
    density: int | None = None

    def transposed(self, semitones: int) -> Controls:
        """The controls of the piece moved by ``semitones``: the tonic moves, the mode stays."""
        if self.key is None:
            return self
        mode, tonic = divmod(self.key, 12)
        return replace(self, key=12 * mode + (tonic + semitones) % 12)

    def dropped(self, keep: list[bool]) -> Controls:
        """These controls with each one whose ``keep`` flag is False made unknown (order of :data:`CONTROL_NAMES`)."""
        return Controls(*(value if kept else None for value, kept in zip(self.values(), keep, strict=True)))

    def values(self) -> tuple[int | None, ...]:
        """``(style, key, meter, density)``."""
        return (self.style, self.key, self.meter, self.density)

    def describe(self) -> str:
        """``style=chorale key=G major meter=3/4 density=?`` for logs and file names."""
        names = (list(STYLES), KEYS, METERS, [density_label(b) for b in range(len(DENSITY_EDGES) + 1)])
        return " ".join(f"{name}={'?' if value is None else labels[value]}"
                        for name, value, labels in zip(CONTROL_NAMES, self.values(), names, strict=True))  # fmt: skip


def density_label(bucket: int) -> str:
    """``"<1"``, ``"1-2"``, …, ``">=12"`` notes per second."""
    edges = DENSITY_EDGES
    if bucket == 0:
        return f"<{edges[0]:g}"
    if bucket == len(edges):
        return f">={edges[-1]:g}"
    return f"{edges[bucket - 1]:g}-{edges[bucket]:g}"


def density_bucket(notes_per_second: float) -> int:
    """The bucket of a density (0 .. ``len(DENSITY_EDGES)``)."""
    return sum(notes_per_second >= edge for edge in DENSITY_EDGES)


def style_of_collection(collection: str) -> int | None:
    """The style index of a music21 collection, None for a collection outside :data:`STYLES`."""
    for index, collections in enumerate(STYLES.values()):
        if collection in collections:
            return index
    return None


def parse_style(text: str) -> int:
    """``"chorale"`` → its index. Raises ValueError naming the styles."""
    names = list(STYLES)
    if text.strip().lower() not in names:
        raise ValueError(f"unknown style {text!r}; choose one of {', '.join(names)}")
    return names.index(text.strip().lower())


def parse_key(text: str) -> int:
    """``"G minor"``, ``"g"``, ``"Bb major"``, ``"F# minor"``, ``"E-flat major"``, ``"B- minor"`` → index in
    :data:`KEYS` (no mode: major; a lower-case tonic alone: minor, as in ABC and Humdrum). Raises ValueError."""
    match = re.fullmatch(r"\s*([A-Ga-g])\s*(#|b|-|-?flat|-?sharp|♯|♭)?\s*(major|minor|maj|min|m)?\s*", text)
    if not match:
        raise ValueError(f"key {text!r}: write a tonic and a mode, e.g. 'G minor', 'Bb major', 'F# minor'")
    letter, accidental, mode = match.groups()
    tonic = _LETTERS[letter.upper()]
    if accidental in ("#", "sharp", "-sharp", "♯"):
        tonic += 1
    elif accidental:
        tonic -= 1
    minor = mode in ("minor", "min", "m") if mode else letter.islower()
    return 12 * minor + tonic % 12


def parse_meter(text: str) -> int:
    """``"3/4"`` → its index in :data:`METERS`; any other well-formed signature → ``other``."""
    if not re.fullmatch(r"\s*\d+\s*/\s*\d+\s*", text):
        raise ValueError(f"meter {text!r}: write a time signature, e.g. 3/4 or 6/8")
    normal = re.sub(r"\s", "", text)
    return METERS.index(normal) if normal in METERS else METERS.index("other")


def parse_density(text: str | float) -> int:
    """Notes per second (``"5"``, ``5.0``) → its bucket. Raises ValueError for a non-positive number."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"density {text!r}: give notes per second, e.g. 4") from None
    if not value > 0:
        raise ValueError(f"density {text!r}: notes per second must be positive")
    return density_bucket(value)


def controls_of_piece(collection: str | None, analysed_key: str | None, time_signature: str | None,
                      notes_per_second: float | None) -> Controls:  # fmt: skip
    """The controls a converted piece carries (unknown where its source says nothing)."""
    return Controls(
        style=style_of_collection(collection) if collection else None,
        key=parse_key(analysed_key) if analysed_key else None,
        meter=parse_meter(time_signature) if time_signature and re.fullmatch(r"\d+/\d+", time_signature) else None,
        density=density_bucket(notes_per_second) if notes_per_second else None,
    )


def parse_controls(style: str | None = None, key: str | None = None, meter: str | None = None,
                   density: str | float | None = None) -> Controls:  # fmt: skip
    """Controls from what a user typed (None: unknown). Raises ValueError naming the bad one."""
    return Controls(
        style=None if style is None else parse_style(style),
        key=None if key is None else parse_key(key),
        meter=None if meter is None else parse_meter(meter),
        density=None if density is None else parse_density(density),
    )
