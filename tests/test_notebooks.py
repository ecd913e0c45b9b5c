"""Executes every notebook in notebooks/ top to bottom with the kernel of this Python.

A notebook may set its own time limit (seconds, whole notebook) in its metadata:
``{"multimodal": {"timeout": 600}}``; the default is :data:`DEFAULT_TIMEOUT`. Notebooks run in a
temporary working folder, so whatever they write is thrown away; they see the same environment
(``MULTIMODAL_CACHE``, ...) as the tests.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
DEFAULT_TIMEOUT = 300


SLOW_NOTEBOOKS = {"image_classification"}  # 30 s: with `make test-all`


@pytest.mark.parametrize("path", [pytest.param(path, marks=pytest.mark.slow) if path.stem in SLOW_NOTEBOOKS else path
                                  for path in NOTEBOOKS], ids=[path.stem for path in NOTEBOOKS])  # fmt: skip
def test_notebook_runs_without_errors(path: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    budget = notebook.metadata.get("multimodal", {}).get("timeout", DEFAULT_TIMEOUT)
    deadline = time.monotonic() + budget

    def remaining(cell) -> int:  # per-cell limit = what is left of the notebook's budget
        left = int(deadline - time.monotonic())
        if left <= 0:
            pytest.fail(f"{path.name} ran past its {budget} s budget before cell {cell.get('id')}")
        return left

    # "python3" is ipykernel's kernel; jupyter_client starts it with sys.executable (this venv).
    client = NotebookClient(notebook, kernel_name="python3", timeout=budget, timeout_func=remaining,
                            resources={"metadata": {"path": str(tmp_path)}})  # fmt: skip
    client.execute()
