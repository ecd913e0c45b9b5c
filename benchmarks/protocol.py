"""The quality-benchmark protocol shared by the scripts: one JSON line per run, mean ± sd over seeds.

Choices are made in a ``select`` stage scored on validation data only; the chosen settings are
then run with several seeds in a ``report`` stage that also scores the test split, once. Each run
appends one JSON line (with its ``stage``) to the script's ``--out`` file, so a table can be
re-printed, and an interrupted sweep resumed, from that file.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def record(path: Path, result: dict, stage: str) -> None:
    """Appends ``result`` with its ``stage`` as one JSON line to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.write(json.dumps({**result, "stage": stage}) + "\n")


def load(path: Path) -> list[dict]:
    """Every result line of ``path`` (none if the file does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spread(values: list[float], digits: int = 4) -> str:
    """``mean ± sd`` of ``values`` (the value alone for a single run)."""
    if len(values) < 2:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def verdict(values: list[float], target: float, lower_is_better: bool = True) -> str:
    """Whether the mean of ``values`` clears ``target`` by more than one standard deviation."""
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    margin = (target - mean) if lower_is_better else (mean - target)
    if margin > sd:
        return f"met (mean clears {target:g} by {margin:.4g} > 1 sd = {sd:.2g})"
    if margin > 0:
        return f"not clearly met (mean clears {target:g} by {margin:.4g}, within 1 sd = {sd:.2g})"
    return f"not met (mean misses {target:g} by {-margin:.4g}; sd {sd:.2g})"


def grouped(rows: list[dict], key: str = "model") -> dict[str, list[dict]]:
    """``rows`` grouped by ``row[key]``, groups in order of first appearance."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    return groups
