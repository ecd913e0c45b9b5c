"""Harmonizer: a causal LM over the parts it writes, conditioned on given parts through an encoder.

The encoder reads the given parts (a melody) as plain MIDI events, in both directions, so each of its
notes carries the whole phrase around it. The decoder is a :class:`~multimodal.models.lm.CausalLM`
over the written parts only; at every position it reads the encoder's vectors of the given notes
around the time it is at — the one sounding (last begun), the ones before and after it, and how far
the nearest onsets are — through a hard, time-aligned read-out added to its input embeddings. The
alignment comes from the two clocks (:func:`multimodal.music.alignment.given_alignment`), so nothing
has to learn where in the melody the decoder is; unlike notes written ahead into one sequence, the
decoder's own sequence is the plain music it was trained on.

The read-out starts at zero: a fresh :class:`Harmonizer` around a trained LM's weights gives that
LM's logits until training moves it.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multimodal.layers.stack import Encoder
from multimodal.models.config import CausalLMConfig
from multimodal.models.init import init_weights
from multimodal.models.lm import CausalLM

__all__ = ["Harmonizer"]


class Harmonizer(nn.Module):
    """Written-part ids ``(batch, seq)`` + given-part ids ``(batch, given)`` -> next-id logits ``(batch, seq, vocab)``.

    Args:
        config: The decoder's config (the encoder takes its sizes, with ``given_layers`` blocks).
        given_layers: Encoder blocks over the given parts.
        notes_read: Given notes read at each position (``notes_read`` consecutive notes of the
            alignment: :func:`~multimodal.music.alignment.given_alignment`'s ``before``/``after``).
        distance_buckets: Steps of the clock distances to the nearest given onsets that are told
            apart (larger distances share the last bucket).
    """

    def __init__(self, config: CausalLMConfig, given_layers: int = 2, notes_read: int = 4,
                 distance_buckets: int = 201) -> None:  # fmt: skip
        super().__init__()
        self.config, self.notes_read, self.distance_buckets = config, notes_read, distance_buckets
        self.lm = CausalLM(config)
        self.given_encoder = Encoder(replace(config, num_layers=given_layers, cross_attention=False))
        init_weights(self.given_encoder, given_layers)
        self.no_note = nn.Parameter(torch.zeros(config.dim))
        self.read = nn.Linear(notes_read * config.dim, config.dim)
        self.since_onset = nn.Embedding(distance_buckets, config.dim)
        self.until_onset = nn.Embedding(distance_buckets, config.dim)
        for module in (self.read, self.since_onset, self.until_onset):  # zero: the LM's logits at the start
            for parameter in module.parameters():
                nn.init.zeros_(parameter)

    def encode_given(self, given: Tensor, given_padding: Tensor | None = None) -> Tensor:
        """Encoder vectors ``(batch, 1 + given, dim)`` of given-part ids ``(batch, given)``; index 0 is "no note"."""
        memory = self.given_encoder(self.lm.embedding(given), key_padding_mask=given_padding)
        return torch.cat([self.no_note.expand(memory.shape[0], 1, -1).to(memory.dtype), memory], dim=1)

    def conditioning(self, memory: Tensor, aligned: Tensor, distances: Tensor) -> Tensor:
        """What each position reads of the given parts, ``(batch, seq, dim)``.

        Args:
            memory: :meth:`encode_given`'s output ``(batch, 1 + given, dim)``.
            aligned: ``(batch, seq, notes_read)`` indices into ``memory`` (0: no note there).
            distances: ``(batch, seq, 2)`` steps since the sounding note's onset and until the next
                onset (clamped to the last bucket).
        """
        batch, seq, notes = aligned.shape
        if notes != self.notes_read:
            raise ValueError(f"aligned reads {notes} notes per position; this model reads {self.notes_read}")
        picked = torch.gather(memory, 1, aligned.reshape(batch, -1, 1).expand(-1, -1, memory.shape[-1]))
        distances = distances.clamp(0, self.distance_buckets - 1)
        return (self.read(picked.reshape(batch, seq, -1)) + self.since_onset(distances[..., 0])
                + self.until_onset(distances[..., 1]))  # fmt: skip

    def forward(self, tokens: Tensor, given: Tensor, aligned: Tensor, distances: Tensor, *,
                given_padding: Tensor | None = None, key_padding_mask: Tensor | None = None) -> Tensor:  # fmt: skip
        """Next-id logits ``(batch, seq, vocab_size)``.

        Args:
            tokens: Written-part ids ``(batch, seq)``.
            given: Given-part ids ``(batch, given)``; ``given_padding`` ``(batch, given)`` True at padding.
            aligned, distances: See :meth:`conditioning`, one row per position of ``tokens``.
            key_padding_mask: ``(batch, seq)`` True at padding of ``tokens``.
        """
        x = self.lm.embedding(tokens) + self.conditioning(self.encode_given(given, given_padding), aligned, distances)
        return self.lm.head(self.lm.decoder(x, key_padding_mask=key_padding_mask))

    def loss(self, tokens: Tensor, targets: Tensor, given: Tensor, aligned: Tensor, distances: Tensor, *,
             given_padding: Tensor | None = None, ignore_index: int = -100) -> Tensor:  # fmt: skip
        """Mean cross-entropy of ``targets`` ``(batch, seq)`` (``ignore_index`` not scored) given the inputs of :meth:`forward`."""
        logits = self(tokens, given, aligned, distances, given_padding=given_padding)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=ignore_index)
