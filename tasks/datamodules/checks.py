"""Checks of data-module options, run in the constructor: a bad value stops the run before any work."""

from __future__ import annotations


def check_options(minimum: dict[str, int], **values: int | float | None) -> None:
    """Raises ``ValueError`` naming the first option below its minimum (None values are skipped).

    Args:
        minimum: Option name -> smallest allowed value.
        **values: The options, by name.
    """
    for name, value in values.items():
        if value is not None and value < minimum[name]:
            raise ValueError(f"{name}={value}: must be at least {minimum[name]}")


def check_percents(**percents: int) -> None:
    """Raises ``ValueError`` unless each share is in 0..100 and together they leave pieces to train on."""
    for name, value in percents.items():
        if not 0 <= value <= 100:
            raise ValueError(f"{name}={value}: must be a percentage, 0..100")
    if sum(percents.values()) >= 100:
        raise ValueError(f"{' + '.join(f'{n}={v}' for n, v in percents.items())} leave nothing to train on")
