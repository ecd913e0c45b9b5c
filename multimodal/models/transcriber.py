"""Transcriber: a log-mel spectrogram encoder and a note-event decoder (sequence-to-sequence transcription).

The design of Hawthorne et al. 2021 ("Sequence-to-sequence piano transcription with Transformers")
and MT3, built from the shared blocks: an :class:`~multimodal.layers.Encoder` over groups of
spectrogram frames, a :class:`~multimodal.layers.Decoder` with cross-attention that writes the
note events of :class:`~multimodal.tokenizers.midi_duration.MidiDurationTokenizer` (time shift,
pitch, duration), so every decoded note has its own end and none can hang.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multimodal.layers.cache import DecodingState
from multimodal.layers.stack import Decoder, Encoder
from multimodal.models.config import TranscriberConfig
from multimodal.models.init import init_weights

__all__ = ["Transcriber"]


class Transcriber(nn.Module):
    """Spectrogram ``(batch, n_mels, frames)`` + note-event ids ``(batch, seq)`` -> next-id logits ``(batch, seq, vocab)``.

    Args:
        config: Sizes of both stacks, ``n_mels``, ``frame_stack`` and the vocabulary.
    """

    def __init__(self, config: TranscriberConfig) -> None:
        super().__init__()
        self.config = config
        self.frames_in = nn.Linear(config.n_mels * config.frame_stack, config.dim)
        self.encoder = Encoder(replace(config, num_layers=config.encoder_layers, cross_attention=False))
        self.embedding = nn.Embedding(config.vocab_size, config.dim)
        self.decoder = Decoder(replace(config, cross_attention=True, context_dim=config.dim))
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        init_weights(self, config.encoder_layers + config.num_layers)
        self.head.weight = self.embedding.weight

    def encode(self, spectrograms: Tensor) -> Tensor:
        """Encoder output ``(batch, ceil(frames / frame_stack), dim)`` of spectrograms ``(batch, n_mels, frames)``.

        Frames are grouped ``frame_stack`` at a time (the last group padded with the quietest value
        of its spectrogram: silence).
        """
        if spectrograms.dim() != 3 or spectrograms.shape[1] != self.config.n_mels:
            raise ValueError(f"expected spectrograms (batch, n_mels={self.config.n_mels}, frames), "
                             f"got {tuple(spectrograms.shape)}")  # fmt: skip
        stack = self.config.frame_stack
        missing = -spectrograms.shape[-1] % stack
        if missing:
            floor = spectrograms.amin(dim=(1, 2), keepdim=True).expand(-1, spectrograms.shape[1], missing)
            spectrograms = torch.cat([spectrograms, floor], dim=-1)
        grouped = spectrograms.transpose(1, 2).reshape(spectrograms.shape[0], -1, stack * self.config.n_mels)
        return self.encoder(self.frames_in(grouped))

    def forward(
        self,
        tokens: Tensor,
        context: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        state: DecodingState | None = None,
    ) -> Tensor:
        """Next-id logits ``(batch, seq, vocab_size)``.

        Args:
            tokens: Ids ``(batch, seq)`` (BOS first).
            context: :meth:`encode`'s output for the same rows.
            key_padding_mask: ``(batch, seq)`` bool, True at padding.
            state: From :meth:`new_state`, for cached decoding (the encoder keys and values are
                projected once, at the first step).
        """
        hidden = self.decoder(self.embedding(tokens), context=context, key_padding_mask=key_padding_mask, state=state)
        return self.head(hidden)

    def loss(self, spectrograms: Tensor, tokens: Tensor, pad_id: int, reduction: str = "mean") -> Tensor:
        """Cross-entropy of every next id of ``tokens`` ``(batch, seq)`` (BOS ... EOS, then ``pad_id``) given the audio.

        ``reduction``: ``"mean"`` over the predicted ids, or ``"sum"``.
        """
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        padding = inputs == pad_id
        logits = self(inputs, self.encode(spectrograms), key_padding_mask=padding if padding.any() else None)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=pad_id, reduction=reduction)

    def new_state(self) -> DecodingState:
        """An empty decoding state."""
        return self.decoder.new_state()

    @torch.no_grad()
    def greedy(self, spectrograms: Tensor, bos_id: int, eos_id: int, max_tokens: int) -> list[list[int]]:
        """The most likely id at every step, for every row at once, with a KV cache.

        Args:
            spectrograms: ``(batch, n_mels, frames)``.
            bos_id, eos_id: First id; the id that ends a row.
            max_tokens: Most ids written per row (without BOS).

        Returns:
            Per row, the ids after BOS up to (without) EOS.
        """
        context = self.encode(spectrograms)
        state = self.new_state()
        rows = spectrograms.shape[0]
        step = torch.full((rows, 1), bos_id, dtype=torch.long, device=spectrograms.device)
        written: list[Tensor] = []
        finished = torch.zeros(rows, dtype=torch.bool, device=spectrograms.device)
        for _ in range(max_tokens):
            step = self(step, context, state=state)[:, -1].argmax(-1, keepdim=True)
            written.append(step[:, 0])
            finished |= step[:, 0] == eos_id
            if bool(finished.all()):
                break
        ids = torch.stack(written, 1).tolist() if written else [[] for _ in range(rows)]
        return [row[: row.index(eos_id)] if eos_id in row else row for row in ids]
