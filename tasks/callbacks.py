"""Callbacks that let a user look at what a model makes while it trains."""

from __future__ import annotations

import pytorch_lightning as pl

from multimodal.music import continue_music, evaluate_continuations, primer_ids
from multimodal.music_stats import overlaps
from multimodal.synthesis import midi_to_waveform
from tasks.outputs import log_folder, show_audio, show_image, tensorboard

SAMPLE_RATE = 16_000


class MusicSampleCallback(pl.Callback):
    """Every ``every_n_epochs`` validation epochs, continues a held-out piece into MIDI + piano roll.

    Files go to ``<log_dir>/samples/epoch_<n>/sample_0.{mid,png}``; with the TensorBoard logger the
    piano roll and the synthesised continuation (``music/piano_roll``, ``music/continuation``) are
    also in TensorBoard's Images and Audio tabs. With
    ``num_stats_primers`` it also continues that many held-out pieces and logs how their note
    statistics compare with the real continuations (:mod:`multimodal.music_stats`):
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
