"""Where a training run keeps its files, and how the commands find a run's checkpoint.

Every ``multimodal fit`` is a run with its own folder, Lightning's logger layout under the
config's ``trainer.default_root_dir``::

    outputs/music_continuation/lightning_logs/version_0/     (or .../<NAME>/ with --run_name NAME)
        checkpoints/best.ckpt, last.ckpt                      ModelCheckpoint's files
        events.out.tfevents.*, hparams.yaml, config.yaml      the logger's metrics, the resolved config
        samples/                                              what the sample callbacks made

so two runs of one config never share files, and ``--trainer.default_root_dir`` moves the
checkpoints and the logs together. A command that takes a checkpoint also takes a folder: a run's
folder (or its ``checkpoints``), or a root holding runs, meaning the newest run; in a run it
takes ``best.ckpt`` (else the newest monitored checkpoint, else ``last.ckpt``); resuming takes
``last.ckpt``.
"""

from __future__ import annotations

from pathlib import Path

#: The folder of runs under a root: Lightning's default logger name.
RUNS = "lightning_logs"


def runs_in(root: str | Path) -> list[Path]:
    """The run folders under ``root`` that hold checkpoints, oldest first (by their newest checkpoint)."""
    folder = Path(root) / RUNS
    runs = [run for run in folder.iterdir() if _checkpoints(run)] if folder.is_dir() else []
    return sorted(runs, key=lambda run: max(path.stat().st_mtime for path in _checkpoints(run)))


def resolve_checkpoint(path: str | Path, resume: bool = False) -> Path:
    """The checkpoint file ``path`` means: a file itself, or the chosen checkpoint of a run or root folder.

    Args:
        path: A ``.ckpt`` file; a run folder or its ``checkpoints`` folder; a root holding runs
            (``<root>/lightning_logs/<run>``: the newest run).
        resume: Take ``last.ckpt`` (where training stopped) instead of the best checkpoint.

    Raises:
        FileNotFoundError: Nothing at ``path``, or a folder with no checkpoint, naming what it looked for.
    """
    path = Path(path)
    if not path.is_dir():
        if not path.exists():
            raise FileNotFoundError(2, "no such checkpoint file or folder", str(path))
        return path
    run = path
    if not _checkpoints(run):
        runs = runs_in(path)
        if not runs:
            raise FileNotFoundError(2, f"no checkpoint in this folder, its checkpoints/ or {RUNS}/*/checkpoints/", str(path))
        run = runs[-1]
    files = _checkpoints(run)
    last = [file for file in files if file.name.startswith("last")]
    if resume:
        if not last:
            raise FileNotFoundError(2, "this run has no last.ckpt to resume from", str(run))
        return last[-1]
    best = [file for file in files if file.name == "best.ckpt"] or [file for file in files if file not in last]
    return (best or last)[-1]


def run_of(checkpoint: str | Path) -> tuple[Path, str] | None:
    """``(root, run name)`` when ``checkpoint`` lies in a run folder (``root/lightning_logs/NAME/checkpoints/``)."""
    checkpoint = Path(checkpoint).resolve()
    folder = checkpoint.parent
    if folder.name != "checkpoints" or folder.parent.parent.name != RUNS:
        return None
    return folder.parent.parent.parent, folder.parent.name


def _checkpoints(folder: Path) -> list[Path]:
    """The ``.ckpt`` files of a run folder (or of a ``checkpoints`` folder itself), oldest first."""
    for candidate in (folder / "checkpoints", folder):
        files = sorted(candidate.glob("*.ckpt"), key=lambda file: file.stat().st_mtime) if candidate.is_dir() else []
        if files:
            return files
    return []
