"""Argument types for the commands' parsers: a bad value is refused before any work, in one line.

``argparse`` turns the ``ValueError`` of these into ``error: argument --top-p: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse


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


def positive_float(text: str) -> float:
    """A number ``> 0``."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def non_negative_float(text: str) -> float:
    """A number ``>= 0`` (a temperature: 0 is greedy)."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def probability(text: str) -> float:
    """A number in ``(0, 1]`` (nucleus sampling's ``top_p``)."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not in (0, 1]")
    return value
