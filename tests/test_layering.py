"""The layering rule, checked on the source: nothing under ``multimodal/`` imports Lightning or ``tasks``,
and ``multimodal --help`` and a tool's ``--help`` import neither torch nor Lightning."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = ("pytorch_lightning", "lightning", "lightning_fabric", "tasks")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_the_library_never_imports_lightning_or_the_tasks():
    offending = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "multimodal").rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[0] in FORBIDDEN
    ]
    assert not offending, offending


def test_the_layering_check_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom pytorch_lightning import Trainer\n")
    assert "pytorch_lightning" in _imports(bad)


@pytest.mark.parametrize(
    "argv", [["--help"], ["data", "--help"], ["convert", "--help"], ["export", "--help"], ["generate", "--help"]]
)
def test_help_answers_without_importing_torch_or_lightning(argv):
    code = (
        "import sys\nfrom tasks.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'pytorch_lightning') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "HEAVY []" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "usage" in done.stdout.lower()


def _project_imports() -> dict[str, set[str]]:
    """Module -> the project modules it imports (at any depth of the file, lazy imports included)."""
    import ast

    def name_of(path: Path) -> str:
        parts = path.relative_to(ROOT).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {name_of(path): path for package in ("multimodal", "tasks") for path in (ROOT / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if alias.name in files}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in files else node.module)
        graph[name] = {target for target in targets if target in files and target != name}
    return graph


def test_no_module_of_the_project_imports_itself_back_through_others():
    graph = _project_imports()
    circles = []
    for start in graph:  # a path from a module's imports back to the module is a circle
        seen, frontier = set(), list(graph[start])
        while frontier:
            module = frontier.pop()
            if module == start:
                circles.append(start)
                break
            if module not in seen:
                seen.add(module)
                frontier.extend(graph[module])
    assert not circles, f"import circles through: {sorted(circles)}"
