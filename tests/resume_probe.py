"""A Lightning callback for the resume tests: kills its own process, as a crash or ``kill -9`` would."""

import os
import signal

import pytorch_lightning as pl


class KillAt(pl.Callback):
    """Sends SIGKILL to this process at the end of training step ``step`` (no clean-up runs)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
