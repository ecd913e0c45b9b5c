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

A ``fit`` claims its run folder before anything is written into it (:func:`claim_run`): a lock
file, ``run.lock``, created only if absent (``O_CREAT | O_EXCL``), holding the process id and
host. A second ``fit`` into the same folder, or two choosing the same next ``version_N``, cannot
both win; the loser ends with one line naming the folder and the process that holds it. The lock
goes when the run ends (and at exit); one left by a killed run (its process gone from this host)
is taken over.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

#: The folder of runs under a root: Lightning's default logger name.
RUNS = "lightning_logs"
#: The lock file of a run folder that a ``fit`` is writing into.
LOCK = "run.lock"
#: The environment variable through which a ``fit`` tells the processes it launches (data
#: parallelism: they run the same command) which run folder they belong to.
RUN_ENV = "MULTIMODAL_RUN"


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


def check_run_name(name: str) -> str:
    """``name`` when it can name a run folder: one path component, not ``.`` or ``..``, no separator.

    Raises:
        ValueError: For a path (``../x``, ``a/b``, ``/abs``) or an empty name.
    """
    separators = {"/", "\\", os.sep, os.altsep or "/"}
    if not name.strip() or name in (".", "..") or any(sep in name for sep in separators) or "\0" in name:
        raise ValueError(f"--run_name {name!r}: a run's name, not a path (no '/', '\\', '..'); "
                         f"its folder is <default_root_dir>/{RUNS}/NAME")  # fmt: skip
    return name


def next_version(folder: str | Path) -> int:
    """One more than the largest ``N`` of the ``version_N`` entries in ``folder`` (0 when there is none)."""
    folder = Path(folder)
    numbers = [int(match.group(1)) for entry in (folder.iterdir() if folder.is_dir() else [])
               if (match := re.fullmatch(r"version_(\d+)", entry.name))]  # fmt: skip
    return max(numbers, default=-1) + 1


@dataclass
class RunClaim:
    """A run folder this process has claimed (:func:`claim_run`); :meth:`release` gives it back.

    Attributes:
        folder: The run folder.
        lock: Its lock file (None: this process shares its launcher's claim, ``owned`` is False).
        token: What this process wrote into the lock, so it never removes another's.
    """

    folder: Path
    lock: Path | None = None
    token: str = ""

    def release(self) -> None:
        """Removes the lock if it is still this claim's (safe to call more than once)."""
        if self.lock is None:
            return
        try:
            if self.lock.read_text(encoding="utf-8") == self.token:
                self.lock.unlink()
        except OSError:
            pass
        if os.environ.get(RUN_ENV) == str(self.folder):
            del os.environ[RUN_ENV]
        self.lock = None


def claim_run(root: str | Path, name: str | None = None) -> RunClaim:
    """Claims ``<root>/lightning_logs/<name>`` (created if missing), or the next free ``version_N``.

    The claim is atomic: a ``version_N`` folder is created with ``mkdir`` (a second process gets
    the next number), then its lock file with ``O_CREAT | O_EXCL``. It is released by
    :meth:`RunClaim.release` and, failing that, at exit; a lock whose process is gone from this
    host is stale and taken over. The process that holds the lock, or launched this one (data
    parallel workers re-run the command), shares the folder instead of being refused.

    Raises:
        FileExistsError: Another live process holds the folder (naming it, its process and host).
        ValueError: ``name`` is a path, not a name.
    """
    runs = Path(root) / RUNS
    if name is not None:
        folder = runs / check_run_name(name)
        folder.mkdir(parents=True, exist_ok=True)
        return _lock(folder)
    runs.mkdir(parents=True, exist_ok=True)
    while True:
        folder = runs / f"version_{next_version(runs)}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # another run took this number a moment ago: the next one
        return _lock(folder)


def _lock(folder: Path) -> RunClaim:
    lock = folder / LOCK
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _process_start(os.getpid()),
          "claim": uuid.uuid4().hex}  # fmt: skip
    token = json.dumps(me)
    for _ in range(5):
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            text = _read(lock)
            if text is None:
                continue  # released a moment ago: try again
            holder = _holder(text)
            if holder is not None and holder.get("host") == me["host"] and holder.get("pid") == os.getppid():
                return RunClaim(folder)  # a data-parallel worker of the run that holds it
            if _alive(holder, lock):
                who = (f"process {holder.get('pid')} on {holder.get('host')}" if holder else "another process")
                raise FileExistsError(17, f"a run is writing into this folder ({who}, lock file {LOCK}); wait for it "
                                          f"to end or choose another --run_name (remove {LOCK} only if no run "
                                          f"is going on)", str(folder)) from None  # fmt: skip
            _remove_stale(lock, text)
            continue
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(token)
        claim = RunClaim(folder, lock, token)
        atexit.register(claim.release)
        os.environ[RUN_ENV] = str(folder)
        return claim
    raise FileExistsError(17, f"could not take its lock file {LOCK}: other runs keep claiming it", str(folder))


def _read(lock: Path) -> str | None:
    try:
        return lock.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _holder(text: str) -> dict | None:
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


def _alive(holder: dict | None, lock: Path) -> bool:
    """Whether the process of a lock may still run: unknown hosts and fresh unreadable locks count as alive."""
    if holder is None:  # being written this instant, or garbage: stale once it is a minute old
        try:
            return time.time() - lock.stat().st_mtime < 60
        except FileNotFoundError:
            return False
    if holder.get("host") != socket.gethostname():
        return True  # another machine's process (a shared file system): cannot tell
    pid = holder["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    started = _process_start(pid)
    if started == "zombie":
        return False
    return holder.get("started") is None or started is None or started == holder["started"]  # else: a reused pid


def _remove_stale(lock: Path, text: str) -> None:
    """Removes a stale lock, unless another process replaced it meanwhile (then it is put back)."""
    aside = lock.with_name(f"{LOCK}.stale-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return  # another process removed it first
    if _read(aside) == text:
        aside.unlink(missing_ok=True)
        return
    with contextlib.suppress(FileExistsError):  # a live claim made after we read the stale one: give it back
        os.link(aside, lock)
    aside.unlink(missing_ok=True)


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), ``"zombie"``, or None where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return "zombie" if fields[0] in ("Z", "X") else fields[19]
