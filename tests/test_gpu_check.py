"""The GPU check runs end to end (on CPU, tiny sizes): its report has every section and a verdict."""

from pathlib import Path

import pytest
from in_process import run_script

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path, *args):
    """The check's command line, run in this process (the tasks it starts are processes of their own)."""
    out = tmp_path / "report.md"
    done = run_script(ROOT / "benchmarks" / "gpu_check.py", "--device", "cpu", "--quick", "--out", str(out), *args,
                      cwd=tmp_path)  # fmt: skip
    return done, out.read_text()


def test_attention_and_generation_sections_report_ratios_against_their_peers(tmp_path):
    done, report = _run(tmp_path, "--sections", "attention", "generation")
    assert done.returncode == 0, report
    assert "## attention" in report and "## generation" in report and "every task and section ran" in report
    rows = [line for line in report.splitlines() if line.startswith("| 256 | forward")]
    assert len(rows) == 1 and "failed" not in rows[0]
    assert "| hf_gpt2 |" in report and "| ours |" in report


def test_a_failing_task_makes_the_check_fail_and_is_named(tmp_path):
    # A batch scale of 0 gives batch size 0: the data loader refuses it, the task fails.
    done, report = _run(tmp_path, "--sections", "tasks", "--tasks", "text_lm", "--batch-scale", "0")
    assert done.returncode == 1
    assert "FAILED: text_lm" in report


@pytest.mark.slow
def test_every_section_runs_on_cpu(tmp_path):
    done, report = _run(tmp_path, "--budget", "1200")
    assert done.returncode == 0, report
    for section in ("tasks", "lm", "attention", "generation"):
        assert f"## {section}" in report
