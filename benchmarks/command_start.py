"""How long a command takes from the shell to its files: ``multimodal generate --model music``, fresh processes.

Usage::

    python benchmarks/command_start.py                                  # this checkout, 5 rounds
    git worktree add /tmp/before COMMIT
    python benchmarks/command_start.py --before /tmp/before --rounds 5  # another checkout, taking turns

Each round starts the README's first command (the shipped model, a G-minor chorale, MIDI + piano roll
+ WAV) in a new Python process and times it to its exit: imports, loading, 512 generated ids and
the files. With ``--before``, the other checkout runs the same command (its own ``tasks`` and
``multimodal`` first on the path; each checkout builds the attention kernel in a folder of its own) and
the two take turns; one untimed run of each comes first. The table gives mean ± sd of the seconds and
the ratio after / before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["-m", "tasks.cli", "generate", "--model", "music", "--style", "chorale", "--key", "G minor"]


def run_once(checkout: Path, extra: list[str]) -> float:
    """Seconds from start to exit of the command run from ``checkout`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, *COMMAND, "--out", out, *extra], cwd=checkout, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout of the project to time beside this one")
    parser.add_argument("--set", nargs=argparse.REMAINDER, default=[], help="more options of the command")
    args = parser.parse_args()
    if args.before is not None and not (args.before / "tasks" / "cli.py").is_file():
        parser.error(f"--before {args.before}: not a checkout of the project (no tasks/cli.py)")
    contenders = {"after": ROOT} if args.before is None else {"before": args.before.resolve(), "after": ROOT}
    for checkout in contenders.values():  # untimed: the files in the page cache, kernels built
        run_once(checkout, args.set)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, checkout in contenders.items():
            times[name].append(run_once(checkout, args.set))
    print(machine())
    print(f"`multimodal {' '.join(COMMAND[2:] + args.set)}`, {args.rounds} rounds, fresh processes\n")
    print("| checkout | seconds (mean ± sd) | runs |")
    print("|---|---:|---|")
    for name, seconds in times.items():
        spread = statistics.stdev(seconds) if len(seconds) > 1 else 0.0
        print(f"| {name} | {statistics.mean(seconds):.2f} ± {spread:.2f} | {', '.join(f'{s:.2f}' for s in seconds)} |")
    if "before" in times:
        print(f"\nafter / before: {statistics.mean(times['after']) / statistics.mean(times['before']):.2f}")


if __name__ == "__main__":
    main()
