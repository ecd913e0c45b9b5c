"""The ``multimodal`` command: LightningCLI subcommands for training, tool subcommands for the rest.

``multimodal fit|validate|test|predict --config configs/<task>.yaml`` runs
:class:`tasks.lightning_cli.MultimodalCLI`; ``generate``, ``perplexity``, ``data``, … are the
functions of :data:`tasks.commands.COMMANDS`, each parsing its own arguments. This module imports
neither torch nor Lightning, so ``multimodal --help`` and a tool's ``--help`` answer at once.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from multimodal.class_paths import check_config_class_paths
from tasks.commands import COMMANDS
from tasks.registry import TASKS

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``multimodal`` console script.

    A failure ends with one line, ``error: <file or option>: <reason>``, and exit status 2; the
    traceback only with ``--debug`` (or ``MULTIMODAL_DEBUG=1``). The project's own warnings (a file
    skipped, a budget that ran out) are one line too, ``warning: <message>`` (:func:`one_line_warnings`).
    """
    from_shell = argv is None
    argv = list(sys.argv[1:] if from_shell else argv)
    debug = "--debug" in argv or os.environ.get("MULTIMODAL_DEBUG", "") not in ("", "0")
    argv = [arg for arg in argv if arg != "--debug"]
    if from_shell and "--debug" in sys.argv:
        sys.argv = [arg for arg in sys.argv if arg != "--debug"]  # LightningCLI reads sys.argv itself
    try:
        with warnings.catch_warnings():  # puts the usual warning display back afterwards
            if not debug:
                warnings.showwarning = one_line_warnings(warnings.showwarning)
            _run(argv, from_shell)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if debug:
            raise
        print(f"error: {describe_error(error)} (--debug shows the traceback)", file=sys.stderr)
        sys.exit(2)


def one_line_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` that writes a warning raised in ``multimodal`` or ``tasks`` as one line,
    ``warning: <message>`` on stderr, once per message (a corpus read for training and again for the samples
    names a file it skips once), and hands the others (PyTorch's, Lightning's) to ``show``."""
    # the packages' folders: this module's and multimodal's, and every folder of their __path__, as a test run may
    # import ``tasks`` as a namespace package (no __file__) whose __path__ need not hold this folder
    own = {Path(__file__).resolve().parent, Path(sys.modules["multimodal"].__file__).resolve().parent}
    own |= {Path(folder).resolve() for name in ("multimodal", "tasks") for folder in sys.modules[name].__path__}
    shown: set[str] = set()

    def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
        if any(Path(filename).resolve().is_relative_to(folder) for folder in own):
            text = " ".join(str(message).split())
            if text not in shown:
                shown.add(text)
                print(f"warning: {text}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return show_warning


def describe_error(error: BaseException) -> str:
    """One line for an exception: ``file: reason`` for file errors, else its message (or its kind)."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or type(error).__name__}"
    message = " ".join(str(error).split())
    return message if message else type(error).__name__


def _run(argv: list[str], from_shell: bool) -> None:
    if argv and argv[0] in COMMANDS:
        COMMANDS[argv[0]].load()(argv[1:])
        return
    if not argv or argv[0] in ("-h", "--help"):
        _print_overview()
        return
    from tasks.lightning_cli import MultimodalCLI, import_tasks

    import_tasks()
    task = task_class_from_args(argv)
    MultimodalCLI(None if from_shell else argv, data_links=getattr(task, "data_links", None))


def task_class_from_args(argv: Sequence[str]) -> type | None:
    """The task class named by ``--config`` files (``model.class_path``) or ``--model``, if any.

    Each config file is read with :func:`tasks.config_files.read_config_file` (size and alias
    bounds), so a file LightningCLI could not afford to read is refused here, before it parses it.
    """
    from tasks.config_files import read_config_file

    class_path = None
    for index in range(len(argv)):
        value = _option_value(argv, index, ("--config", "-c"))
        if value is not None and Path(value).is_file():
            loaded = read_config_file(value)  # bounded: jsonargparse would expand a "billion laughs"
            check_config_class_paths(loaded, value)
            section = (loaded if isinstance(loaded, dict) else {}).get("model")
            if isinstance(section, dict) and "class_path" in section:
                class_path = section["class_path"]
            elif isinstance(section, str):
                class_path = section
        value = _option_value(argv, index, ("--model", "--model.class_path"))
        if value is not None and not value.lstrip().startswith("{"):
            class_path = value
    for arg in argv:  # jsonargparse also reads a YAML file given to any other option (--data x.yaml)
        candidate = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if candidate.endswith((".yaml", ".yml")) and Path(candidate).is_file():
            read_config_file(candidate)
    return _resolve_task(class_path) if class_path else None


def _option_value(argv: Sequence[str], index: int, names: tuple[str, ...]) -> str | None:
    arg = argv[index]
    for name in names:
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _resolve_task(class_path: str) -> type | None:
    """A registered task class, by full path or by its short name (None for anything else)."""
    class_path = TASKS.get(class_path, class_path)
    if class_path not in TASKS.values():
        return None  # LightningCLI reports a class it cannot use itself
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _print_overview() -> None:
    print("usage: multimodal SUBCOMMAND [options]\n")
    print("Training (LightningCLI; `multimodal SUBCOMMAND --help` for options):")
    for name in LIGHTNING_SUBCOMMANDS:
        print(f"  {name:<13} {name} a task: multimodal {name} --config configs/<task>.yaml")
    print("\nTools:")
    for name, entry in sorted(COMMANDS.items()):
        print(f"  {name:<13} {entry.help}")


def __getattr__(name: str):
    """``tasks.cli.MultimodalCLI`` is imported on first use (it pulls in Lightning)."""
    if name == "MultimodalCLI":
        from tasks.lightning_cli import MultimodalCLI, import_tasks

        import_tasks()
        return MultimodalCLI
    raise AttributeError(f"module 'tasks.cli' has no attribute {name!r}")


if __name__ == "__main__":
    main()
