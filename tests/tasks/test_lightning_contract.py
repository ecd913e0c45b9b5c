"""The private parts of Lightning this project leans on, checked by name: when Lightning moves one, this
fails first and says which, and with which version, instead of a resume quietly going wrong.

Where each is used: ``tasks/lightning_cli.py`` overrides ``LightningCLI._prepare_subcommand_parser``,
``_instantiate_trainer`` and ``_parse_ckpt_path`` (a run's folder and lock, checkpoints read without
unpickling); ``tasks/base.py`` reads the fit loop's ``restarted_on_epoch_end`` and epoch progress to
resume from an epoch-end checkpoint exactly.
"""

import inspect

import pytorch_lightning as pl
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.loops.fit_loop import _FitLoop
from pytorch_lightning.loops.progress import _Progress

PINNED = "2.6.6"


def _fail(what: str) -> str:
    return (f"pytorch-lightning {pl.__version__} (pinned {PINNED}) changed {what}, which the project overrides "
            f"or reads; update tasks/lightning_cli.py / tasks/base.py and this test together")  # fmt: skip


def test_the_cli_methods_we_override_keep_their_signatures():
    expected = {
        "_prepare_subcommand_parser": ["self", "klass", "subcommand", "kwargs"],
        "_instantiate_trainer": ["self", "config", "callbacks"],
        "_parse_ckpt_path": ["self"],
    }
    for name, parameters in expected.items():
        method = getattr(LightningCLI, name, None)
        assert method is not None, _fail(f"LightningCLI.{name} (gone)")
        assert list(inspect.signature(method).parameters) == parameters, _fail(f"the signature of LightningCLI.{name}")


def test_the_fit_loop_state_read_on_resume_is_there():
    assert isinstance(getattr(_FitLoop, "restarted_on_epoch_end", None), property), _fail("_FitLoop.restarted_on_epoch_end")
    progress = _Progress()
    for name in ("processed", "completed"):
        assert hasattr(progress.total, name) and hasattr(progress.current, name), _fail(f"_Progress.total/current.{name}")
