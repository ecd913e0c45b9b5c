"""``multimodal fit|validate|test|predict``: the LightningCLI over every task and data module.

The YAML names a task (``model.class_path``) and a data module (``data.class_path``); unknown keys
are errors; ``--print_config`` shows the full resolved config. Sizes the data decides (vocabulary,
number of classes) are linked from the data module into the task when both are instantiated; each
task lists them in its ``data_links``. Imported only when one of these subcommands runs
(:mod:`tasks.cli` stays light).
"""

from __future__ import annotations

import importlib
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.loggers import TensorBoardLogger

from tasks.checkpoint import checkpoint_task
from tasks.registry import TASKS
from tasks.runs import RUN_ENV, RUNS, RunClaim, check_run_name, claim_run, resolve_checkpoint, run_of, runs_in

# Lightning's messages that say nothing to a user of these commands: an advertisement for a cloud logger,
# a deprecation inside Lightning's own code (torch 2.11's pytree), and, when validate/test take a checkpoint
# from a run folder, the note that a callback state only fit uses is not restored
LIGHTNING_CHATTER = ("💡 Tip:",)
LIGHTNING_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                      r"The dirpath has changed from .* won't be reloaded")  # fmt: skip


class _DropChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(LIGHTNING_CHATTER)


def quiet_lightning() -> None:
    """Leaves out of the output Lightning's lines in :data:`LIGHTNING_CHATTER` and :data:`LIGHTNING_WARNINGS`
    (its other messages and warnings stay)."""
    for name in ("pytorch_lightning.utilities.rank_zero", "lightning_fabric.utilities.rank_zero"):
        log = logging.getLogger(name)
        if not any(isinstance(existing, _DropChatter) for existing in log.filters):
            log.addFilter(_DropChatter())
    for message in LIGHTNING_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def import_tasks() -> None:
    """Imports every registered task module, so LightningCLI knows the tasks by their short names too."""
    for class_path in TASKS.values():
        importlib.import_module(class_path.rpartition(".")[0])


class MultimodalCLI(LightningCLI):
    """LightningCLI over every task and data module, with the chosen task's data links.

    Args:
        args: Command-line arguments (without the program name); None reads ``sys.argv``.
        data_links: Data-module attribute -> task init argument, linked at instantiation.
        run: Run the subcommand (False: only instantiate, for tests).
    """

    def __init__(self, args: Sequence[str] | None, data_links: dict[str, str] | None = None, run: bool = True) -> None:
        quiet_lightning()
        self.data_links = data_links or {}
        self.run_claim: RunClaim | None = None  # the run folder a fit holds (tasks.runs.claim_run)
        try:
            super().__init__(
                pl.LightningModule,
                pl.LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                auto_configure_optimizers=False,  # tasks take an OptimizerCallable of their own
                save_config_kwargs={"overwrite": True},
                args=None if args is None else list(args),
                run=run,
            )
        finally:
            if self.run_claim is not None:
                self.run_claim.release()

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any):
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        if subcommand == "predict":
            parser.add_argument("--overwrite", action="store_true",
                                help="replace a predictions file that already exists (else predict refuses)")  # fmt: skip
        return parser

    def before_predict(self) -> None:
        """``--overwrite`` reaches the prediction writers (:class:`~tasks.image_classification.PredictionCSV`)
        through the trainer: a task adds its writer only when prediction starts."""
        self.trainer.overwrite_outputs = bool(self.config["predict"].get("overwrite"))

    def add_arguments_to_parser(self, parser) -> None:
        for source, target in self.data_links.items():
            parser.link_arguments(f"data.{source}", f"model.init_args.{target}", apply_on="instantiate")
        parser.add_argument(
            "--run_name", type=str | None, default=None,
            help="This run's folder under <default_root_dir>/lightning_logs/ (a name, not a path; default: the "
                 "next version_N); with --ckpt_path last, the run to resume. A fit holds its folder (run.lock) "
                 "while it runs: a second fit into it is refused",
        )  # fmt: skip

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> pl.Trainer:
        """The trainer, its logger writing into this run's folder (``--run_name``, else the next ``version_N``).

        A ``fit`` with the default logger first claims that folder (:func:`tasks.runs.claim_run`, a
        lock file): two fits never write into one folder, and the one that loses ends with one line.
        Data-parallel workers (rank > 0 re-runs this command) take the folder of the process that
        launched them instead of claiming one.
        """
        run_name = self.config[self.subcommand].get("run_name") if self.subcommand else None
        fit = self.subcommand == "fit"
        if (run_name or fit) and config.get("logger") in (None, True):
            root = config.get("default_root_dir") or "."
            if not fit:
                version = run_name
            elif _worker_rank() > 0:
                version = run_name or Path(os.environ.get(RUN_ENV, "")).name or None
            else:
                self.run_claim = claim_run(root, run_name)
                version = self.run_claim.folder.name
                if run_name and not self.config[self.subcommand].get("ckpt_path"):
                    self._refuse_a_finished_run(self.run_claim)
            config["logger"] = TensorBoardLogger(save_dir=root, name=RUNS, version=version, default_hp_metric=False)
        elif run_name and config.get("logger"):
            loggers = config["logger"] if isinstance(config["logger"], list) else [config["logger"]]
            if getattr(loggers[0], "version", None) != run_name:
                raise ValueError(f"--run_name {run_name}: the config's logger sets its own folder; set the "
                                 f"logger's `version: {run_name}` instead")  # fmt: skip
        return super()._instantiate_trainer(config, callbacks)

    @staticmethod
    def _refuse_a_finished_run(claim: RunClaim) -> None:
        """Refuses a fresh fit into a named run that has checkpoints, checked again under the run's lock.

        The parser's check (:meth:`_resolve_run`) runs before the lock is taken: a second fit started
        beside a first passes it, waits out no lock once the first has finished, and would then write
        over the first one's checkpoints.
        """
        checkpoints = claim.folder / "checkpoints"
        if checkpoints.is_dir() and any(checkpoints.iterdir()):
            claim.release()
            raise FileExistsError(17, "that run exists and its checkpoints would be overwritten; resume it with "
                                      "--ckpt_path last, or choose another --run_name", str(claim.folder))  # fmt: skip

    def _parse_ckpt_path(self) -> None:
        """Merges a ``--ckpt_path`` checkpoint's hyper-parameters into the config, as Lightning does.

        Lightning expects them under a ``_class_path`` key that only its own ``save_hyperparameters``
        writes; our tasks save plain init arguments and name their class in the ``"multimodal"`` entry.
        The checkpoint's task class comes from our ``tasks.`` package only, must be the config's
        task when the config names one, and checkpoints are never unpickled (``weights_only``).
        """
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return super()._parse_ckpt_path()
        settings = self.config[subcommand]
        if settings.get("weights_only") is False:
            self.parser.error("--weights_only false: checkpoints are read without unpickling; "
                              "a checkpoint that needs pickle is not one of ours")  # fmt: skip
        self._resolve_run(subcommand, settings)
        ckpt_path = settings.get("ckpt_path")
        if not ckpt_path or ckpt_path in ("last", "best", "hpc", "registry") or not Path(ckpt_path).is_file():
            return super()._parse_ckpt_path()
        try:
            checkpoint = torch.load(ckpt_path, weights_only=True, map_location="cpu")
        except Exception as error:  # a truncated or foreign file
            detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            self.parser.error(f"--ckpt_path {ckpt_path}: not a readable checkpoint ({detail[:200]})")
        entry, hparams = checkpoint.get("multimodal"), checkpoint.get("hyper_parameters")
        if entry is None or not hparams:
            self.parser.error(f"--ckpt_path {ckpt_path}: not written by a multimodal task (no 'multimodal' entry)")
        try:
            task_class, arguments = checkpoint_task(entry, hparams, ckpt_path)
        except (ValueError, ImportError, AttributeError) as error:
            self.parser.error(f"--ckpt_path {ckpt_path}: {error}")
        found = f"{task_class.__module__}.{task_class.__qualname__}"
        configured = (settings.get("model") or {}).get("class_path") if isinstance(settings.get("model"), dict) else None
        configured = getattr(settings.get("model"), "class_path", configured)
        if configured and configured != found and TASKS.get(configured, configured) != found:
            self.parser.error(f"--ckpt_path {ckpt_path}: a {task_class.__name__} checkpoint, but the config's task is "
                              f"{configured}; use that task's config, or leave --config out to take the checkpoint's")  # fmt: skip
        model = {"class_path": found, "init_args": arguments}
        self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)

    def _resolve_run(self, subcommand: str, settings: Any) -> None:
        """Turns ``--ckpt_path last`` or a folder into a file, and keeps a resumed fit in its run's folder.

        ``fit --ckpt_path last`` resumes the run named by ``--run_name``, or the only run under the
        root (several runs: name one). Any other checkpoint inside a run folder resumes that run in
        place. A fit into an existing run's folder without resuming it is refused (its
        checkpoints would be overwritten).
        """
        root = Path((settings.get("trainer") or {}).get("default_root_dir") or ".")
        ckpt_path, run_name = settings.get("ckpt_path"), settings.get("run_name")
        if run_name is not None:
            try:
                check_run_name(run_name)
            except ValueError as error:
                self.parser.error(str(error))
        resume = subcommand == "fit"
        if ckpt_path == "last" and resume:
            if run_name:
                ckpt_path = str(root / RUNS / run_name)
            else:
                runs = [run for run in runs_in(root) if (run / "checkpoints" / "last.ckpt").is_file()]
                if len(runs) != 1:
                    found = ", ".join(run.name for run in runs) or "none"
                    self.parser.error(f"--ckpt_path last: {len(runs)} runs to resume in {root / RUNS} ({found}); "
                                      f"name one with --run_name" if runs else
                                      f"--ckpt_path last: no run with a last.ckpt in {root / RUNS}")  # fmt: skip
                ckpt_path = str(runs[0])
        if ckpt_path and ckpt_path not in ("last", "best", "hpc", "registry"):
            try:
                ckpt_path = str(resolve_checkpoint(ckpt_path, resume=resume))
            except FileNotFoundError as error:
                self.parser.error(f"--ckpt_path {error.filename}: {error.strerror}")
            run = run_of(ckpt_path) if resume else None
            if run is not None and run_name is None and run[0] == root.resolve():
                run_name = run[1]  # resume in place: same folder for checkpoints and logs
        elif resume and run_name and (root / RUNS / run_name / "checkpoints").is_dir():
            self.parser.error(f"--run_name {run_name}: that run exists ({root / RUNS / run_name}) and its checkpoints would be "
                              f"overwritten; resume it with --ckpt_path last, or choose another name")  # fmt: skip
        settings["ckpt_path"], settings["run_name"] = ckpt_path, run_name


def _worker_rank() -> int:
    """This process's rank when a data-parallel launcher (Lightning's, torchrun, SLURM) started it, else 0."""
    ranks = [os.environ.get(name, "") for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")]
    return max((int(rank) for rank in ranks if rank.isdigit()), default=0)
