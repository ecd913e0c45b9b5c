"""Callbacks of the training runs: ``last.ckpt`` kept at the latest step, and samples to look at while a model trains."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from multimodal.audio.synthesis import midi_to_waveform
from multimodal.music import continue_music, evaluate_continuations, primer_ids
from multimodal.music.stats import overlaps
from tasks.outputs import log_folder, show_audio, show_image, tensorboard

SAMPLE_RATE = 16_000


class LastCheckpoint(ModelCheckpoint):
    """Keeps ``checkpoints/last.ckpt`` at the run's latest steps, whether or not a metric improved.

    Lightning's ``ModelCheckpoint(monitor=..., save_last=True)`` writes ``last.ckpt`` only when it
    writes a monitored checkpoint: once the metric stops improving, a killed run resumes from the
    last improvement and the final weights are never saved. This callback writes ``last.ckpt``

    - at the end of every training epoch, or every ``every_n_train_steps`` optimizer steps when
      that is set (long epochs, big checkpoints): a ``kill -9`` loses at most that much training;
    - at the run's last step (``max_steps``; a stop asked by ``max_time`` or early stopping; else
      when training ends): ``last.ckpt`` of a finished run always holds its final weights.

    A due step that ends an epoch is written at the end of the epoch (after its validation, the
    monitored checkpoint and the other epoch-end hooks), one followed by a mid-epoch validation
    once that has run: a resumed run does not run again what Lightning counts as done, so the
    checkpoint holds it. Pair it with a ``ModelCheckpoint`` that keeps the best weights
    (``best.ckpt``) with ``save_last`` off, as both would write ``last.ckpt``.

    Args:
        every_n_train_steps: Optimizer steps between two writes; None: at the end of every epoch.
        dirpath: The folder; None: the run's ``checkpoints/`` folder, as for ``ModelCheckpoint``.
    """

    def __init__(self, every_n_train_steps: int | None = None, dirpath: str | None = None) -> None:
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be at least 1 (or null: every epoch), got {every_n_train_steps}")
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=every_n_train_steps,
                         enable_version_counter=False)  # fmt: skip
        self._pending = False  # a due step, written after its validation or at its epoch's end

    def on_train_batch_end(self, trainer: pl.Trainer, task: pl.LightningModule, *args: Any, **kwargs: Any) -> None:
        if self._should_skip_saving_checkpoint(trainer):
            return
        step, every, max_steps = trainer.global_step, self._every_n_train_steps, trainer.max_steps
        final = (max_steps is not None and 0 <= max_steps <= step) or trainer.should_stop
        if not (final or (every and step % every == 0)):
            return
        epoch_loop = trainer.fit_loop.epoch_loop
        if epoch_loop._num_ready_batches_reached() or epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher):
            self._pending = True  # written in on_validation_end (mid-epoch) or on_train_epoch_end
            return
        self._write(trainer)

    def on_validation_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        # a mid-epoch validation; at the end of an epoch, the epoch's end hooks come next
        if self._pending and not trainer.sanity_checking and not trainer.fit_loop.epoch_loop._num_ready_batches_reached():
            self._write(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        if trainer.fit_loop.restarted_on_epoch_end:
            return  # a resumed run replaying the epoch's end its checkpoint was written at
        if self._pending or not self._every_n_train_steps:
            self._write(trainer)

    def on_train_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        self._write(trainer)  # the last step, wherever training stopped (nothing if it is written)

    def _write(self, trainer: pl.Trainer) -> None:
        self._pending = False
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


class MusicSampleCallback(pl.Callback):
    """Every ``every_n_epochs`` validation epochs, continues a held-out piece into MIDI + piano roll.

    Files go to ``<log_dir>/samples/epoch_<n>/sample_0.{mid,png}``; with the TensorBoard logger the
    piano roll and the synthesised continuation (``music/piano_roll``, ``music/continuation``) are
    also in TensorBoard's Images and Audio tabs. With
    ``num_stats_primers`` it also continues that many held-out pieces and logs how their note
    statistics compare with the real continuations (:mod:`multimodal.music.stats`):
    ``sample_<feature>_overlap`` for duration, polyphony, ioi, pitch_class and pitch (1 = the same
    distribution), ``sample_longest_note`` (seconds) and ``sample_sounding_at_end`` (share of notes).

    Args:
        every_n_epochs: How often to sample.
        primer_seconds: Length of the primer taken from the first validation piece.
        max_new_tokens: Events to generate.
        temperature: Sampling temperature.
        top_k: Keep only the ``top_k`` most likely events (None: all).
        seed: Sampling seed, so samples of different epochs compare like for like.
        num_stats_primers: Held-out pieces continued for the logged statistics (0: none).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        primer_seconds: float = 5.0,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
        num_stats_primers: int = 4,
    ) -> None:
        self.every_n_epochs, self.primer_seconds, self.max_new_tokens = every_n_epochs, primer_seconds, max_new_tokens
        self.temperature, self.top_k, self.seed = temperature, top_k, seed
        self.num_stats_primers = num_stats_primers

    def on_validation_epoch_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        datamodule = trainer.datamodule
        held_out = datamodule.split("val")
        primer = primer_ids(held_out.notes[0], datamodule.tokenizer, self.primer_seconds)
        out_dir = log_folder(trainer) / "samples" / f"epoch_{trainer.current_epoch}"
        (path,) = continue_music(
            task.model, datamodule.tokenizer, primer, out_dir, max_new_tokens=self.max_new_tokens,
            temperature=self.temperature, top_k=self.top_k, seed=self.seed, audio=False,
        )  # fmt: skip
        if tensorboard(trainer) is not None:  # what it sounds and looks like, beside the curves
            show_image(trainer, "music/piano_roll", path.with_suffix(".png"))
            show_audio(trainer, "music/continuation", midi_to_waveform(path, SAMPLE_RATE), SAMPLE_RATE)
        if self.num_stats_primers:
            generated, reference, _ = evaluate_continuations(
                task.model, datamodule.tokenizer, held_out.notes[: self.num_stats_primers],
                primer_seconds=self.primer_seconds, max_new_tokens=self.max_new_tokens,
                temperature=self.temperature, top_k=self.top_k, seed=self.seed,
            )  # fmt: skip
            metrics = {f"sample_{name}_overlap": value for name, value in overlaps(generated, reference).items()}
            metrics["sample_longest_note"] = generated.longest_note
            metrics["sample_sounding_at_end"] = generated.sounding_at_end_share
            if trainer.logger is not None:
                trainer.logger.log_metrics(metrics, step=trainer.global_step)
