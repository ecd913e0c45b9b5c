"""Music continuation (Music Transformer): next-event prediction on MIDI performance events.

``multimodal fit --config configs/music_continuation.yaml`` trains it;
``multimodal generate --checkpoint CKPT --out DIR`` continues a primer into MIDI, PNG and WAV
(:mod:`tasks.commands.music`).
"""

from __future__ import annotations

from tasks.causal_lm import CausalLMTask


class MusicContinuation(CausalLMTask):
    """Music Transformer task: a :class:`~multimodal.models.CausalLM` over performance events.

    Logs ``train_loss`` / ``val_nll`` in nats per event and ``val_ppl``; when validation scored
    every held-out event, also ``val_nll_per_note`` and ``val_nll_per_second`` (nats per note and
    per second of music: units that compare across vocabularies). Relative attention
    (``model.position: relative``) is the default of its config, as in Huang et al. 2018.
    """

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        super().log_epoch_metrics(stage, sums)
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if not hasattr(datamodule, "evaluation_totals"):
            return
        split = "test" if stage == "test" else "val"
        totals = datamodule.evaluation_totals(split)
        if int(sums["targets"]) == totals["targets"]:  # not with limit_val_batches
            self.log(f"{stage}_nll_per_note", sums["nll"] / max(totals["notes"], 1), sync_dist=False)
            self.log(f"{stage}_nll_per_second", sums["nll"] / max(totals["seconds"], 1e-9), sync_dist=False)

