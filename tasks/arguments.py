"""Argument types for the commands' parsers: a bad value is refused before any work, in one line.

``argparse`` turns the ``ValueError`` of these into ``error: argument --top-p: ...`` and exit status 2.
Counts are bounded (:func:`count`) by the documented limits of :mod:`multimodal.limits`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def positive_int(text: str) -> int:
    """An integer ``>= 1``."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive whole number")
    return value


def non_negative_int(text: str) -> int:
    """An integer ``>= 0``."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def finite_float(text: str) -> float:
    """A number, not ``nan`` or ``inf`` (every float type here is finite)."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{value} is not a finite number")
    return value


def positive_float(text: str) -> float:
    """A finite number ``> 0``."""
    value = finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def non_negative_float(text: str) -> float:
    """A finite number ``>= 0`` (a temperature: 0 is greedy)."""
    value = finite_float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def probability(text: str) -> float:
    """A number in ``(0, 1]`` (nucleus sampling's ``top_p``)."""
    value = finite_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not in (0, 1]")
    return value


def count(high: int, low: int = 1) -> Callable[[str], int]:
    """An argument type: a whole number in ``[low, high]``; the error says the bound.

    Counts that size memory (tokens, samples, beams, batches) take one of these with a limit of
    :mod:`multimodal.limits`, so ``--num-samples 1000000000`` is refused before any work.
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in [{low}, {high:,}]")
        return value

    parse.__name__ = f"count in [{low}, {high}]"  # argparse names the type in some messages
    return parse
