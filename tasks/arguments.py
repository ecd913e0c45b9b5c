"""Argument types for the commands' parsers: a bad value is refused before any work, in one line.

``argparse`` turns the ``ValueError`` of these into ``error: argument --top-p: ...`` and exit status 2.
Counts are bounded (:func:`count`) by the documented limits of :mod:`multimodal.limits`.
:func:`sampling_from_args` turns the parsed sampling options into the one ``SamplingConfig`` a command passes on.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multimodal.generation.config import SamplingConfig


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


#: The :class:`~multimodal.generation.config.SamplingConfig` fields a command's options may set
#: (``--temperature`` is ``args.temperature``, ...); each command has the ones it offers.
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "no_repeat_ngram_size",
                   "min_new_tokens", "num_beams", "length_penalty", "guidance_scale")  # fmt: skip


def sampling_from_args(args: argparse.Namespace) -> SamplingConfig:
    """The one :class:`~multimodal.generation.config.SamplingConfig` of a command's parsed options.

    Reads whichever of :data:`SAMPLING_FIELDS` the command has; the rest keep their defaults. An
    invalid combination is the config's ``ValueError`` (the CLI prints it in one line); ``multimodal
    generate`` refuses the ones it knows with its own messages first
    (``_check_decoding`` in :mod:`tasks.commands.checkpoint`).
    """
    from multimodal.generation.config import SamplingConfig  # torch: not at --help time

    return SamplingConfig(**{name: getattr(args, name) for name in SAMPLING_FIELDS if hasattr(args, name)})
