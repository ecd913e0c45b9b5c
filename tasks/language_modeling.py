"""Text language modelling: next-token cross-entropy, perplexity and bits per byte, text samples.

``multimodal fit --config configs/text_lm.yaml`` trains it; ``multimodal test`` reports
``test_ppl`` and ``test_bpb`` on the test files; ``multimodal perplexity --checkpoint CKPT FILE...``
computes the same numbers for any text files; ``multimodal generate --checkpoint CKPT --prompt TEXT``
continues a prompt (both in :mod:`tasks.commands.text`).

Units (see ``docs/text.md`` for the exact definition of the evaluation windows):

- ``nll``: mean negative log-likelihood in nats per scored token;
- ``ppl = exp(nll)``: token-level perplexity (depends on the tokenizer);
- ``bpb = sum of NLL / ln 2 / UTF-8 bytes of the scored tokens``: bits per byte, comparable
  across tokenizers (EOS and other special tokens are scored but spell 0 bytes).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytorch_lightning as pl
from torch import Tensor

from multimodal.text import Score, continue_text, window_sums
from tasks.causal_lm import CausalLMTask
from tasks.outputs import log_folder, show_text


class LanguageModeling(CausalLMTask):
    """Text language model: a :class:`~multimodal.models.CausalLM` over byte-level BPE tokens.

    Trains on random windows of the token stream, every target counted (text streams have no
    padding, and EOS targets are kept). Logs ``train_loss`` (nats per token); ``val_nll``, ``val_ppl``, ``val_bpb``
    over the validation documents; ``test_nll``, ``test_ppl``, ``test_bpb`` over the test documents,
    with the sliding windows of :class:`~multimodal.data.text_windows.DocumentWindows`.
    """

    data_links: ClassVar[dict[str, str]] = {"vocab_size": "model.vocab_size"}
    evaluation_sum_names: ClassVar[tuple[str, ...]] = ("nll", "targets", "bytes")

    def evaluation_sums(self, batch: dict[str, Tensor]) -> Tensor:
        """Summed NLL (nats), number of scored targets and their UTF-8 bytes of a batch of windows
        (:func:`multimodal.text.window_sums`, the code ``multimodal perplexity`` runs too)."""
        return window_sums(self.model, batch)

    def log_epoch_metrics(self, stage: str, sums: dict[str, float]) -> None:
        """Adds ``{stage}_bpb`` (bits per UTF-8 byte) to the NLL and perplexity."""
        super().log_epoch_metrics(stage, sums)
        self.log(f"{stage}_bpb", Score.from_sums(sums).bits_per_byte, sync_dist=False)


class TextSampleCallback(pl.Callback):
    """Every ``every_n_epochs`` validation epochs, writes a continuation to ``samples/epoch_<n>.txt``.

    The file goes under the run's log folder. The prompt is ``prompt``, or by default the first
    ``prompt_tokens`` tokens of the first validation document, so epochs compare like for like.

    Args:
        every_n_epochs: How often to sample.
        prompt: Text to continue; None: the start of a held-out document.
        prompt_tokens: Length of the default prompt.
        max_new_tokens: Tokens to generate (fewer if a learned-position model runs out of positions).
        temperature: Sampling temperature.
        top_k: Keep only the ``top_k`` most likely tokens (None: all).
        seed: Sampling seed.
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        prompt: str | None = None,
        prompt_tokens: int = 32,
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = 40,
        seed: int = 0,
    ) -> None:
        self.every_n_epochs, self.prompt, self.prompt_tokens = every_n_epochs, prompt, prompt_tokens
        self.max_new_tokens, self.temperature, self.top_k, self.seed = (
            max_new_tokens,
            temperature,
            top_k,
            seed,
        )

    def on_validation_epoch_end(self, trainer: pl.Trainer, task: pl.LightningModule) -> None:
        if (
            trainer.sanity_checking
            or not trainer.is_global_zero
            or (trainer.current_epoch + 1) % self.every_n_epochs
        ):
            return
        tokenizer = trainer.datamodule.tokenizer
        prompt = self.prompt
        if prompt is None:
            stream = trainer.datamodule.stream("val")
            prompt = tokenizer.decode(np.asarray(stream[: self.prompt_tokens]).tolist())
        config = task.model.config
        room = (
            config.max_seq_len - len(tokenizer.encode(prompt)) - 1 if config.position == "learned" else None
        )
        new_tokens = self.max_new_tokens if room is None else max(0, min(self.max_new_tokens, room))
        text = continue_text(task.model, tokenizer, prompt, new_tokens, temperature=self.temperature,
                             top_k=self.top_k, seed=self.seed)  # fmt: skip
        path = (
            log_folder(trainer)
            / "samples"
            / f"epoch_{trainer.current_epoch}.txt"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        show_text(trainer, "text/sample", text)
