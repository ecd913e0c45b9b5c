"""Run a project script's command line inside the test process.

A fresh interpreter pays ~7 s on 2 cores to import torch, Lightning and the torchmetrics that
Lightning pulls in; the test process has them already. :func:`run_script` runs the script as
``python SCRIPT ARGS...`` would -- ``__main__``, its folder first on ``sys.path``, in the given working
directory (the repository's unless told) and environment -- and answers like ``subprocess.run(...,
capture_output=True, text=True)``: the exit status, and what the script printed to stdout and
stderr. What a script may change for the whole process (environment, torch threads, default dtype,
determinism, matmul precision, the global generator, warning filters) is put back afterwards. An
exception the script does not handle propagates, so the test fails with its traceback.

Only for scripts that run their work in this process or in subprocesses of their own; text printed
by those subprocesses goes to the test's captured output, not to the returned ``stdout``.
"""

import contextlib
import io
import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _process_state_restored(env: dict[str, str] | None, script: Path, args: tuple[str, ...], cwd: Path):
    saved = (dict(os.environ), sys.argv[:], sys.path[:], os.getcwd(), torch.get_num_threads(),
             torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
             torch.get_float32_matmul_precision(), torch.random.get_rng_state())  # fmt: skip
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        sys.argv = [str(script), *args]
        sys.path.insert(0, str(script.parent))
        os.chdir(cwd)
        with warnings.catch_warnings():
            yield
    finally:
        environ, sys.argv, path, working, threads, dtype, deterministic, precision, rng = saved
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(working)
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.use_deterministic_algorithms(deterministic)
        torch.set_float32_matmul_precision(precision)
        torch.random.set_rng_state(rng)


def run_script(script: Path, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``python script *args`` in ``cwd`` in this process; returns its exit status and printed stdout/stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    status = 0
    with _process_state_restored(env, script, args, cwd), contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr):  # fmt: skip
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exit:
            if isinstance(exit.code, str):  # sys.exit("message") prints it and exits with 1
                print(exit.code, file=sys.stderr)
            status = 1 if isinstance(exit.code, str) else exit.code or 0
    return subprocess.CompletedProcess([sys.executable, str(script), *args], status, stdout.getvalue(),
                                       stderr.getvalue())  # fmt: skip
