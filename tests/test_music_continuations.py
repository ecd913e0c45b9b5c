"""Continuation statistics: a model that plays the real continuation matches the reference exactly."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from multimodal.data.music import load_bach_chorales
from multimodal.music import evaluate_continuations
from multimodal.music.stats import FEATURES, overlaps
from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer


class ScriptedModel(nn.Module):
    """Predicts, with certainty, the next id of whichever script its prompt starts (then EOS)."""

    def __init__(self, scripts: list[list[int]], vocab_size: int, eos_id: int) -> None:
        super().__init__()
        self.scripts, self.vocab_size, self.eos_id = scripts, vocab_size, eos_id
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the model a device

    def new_state(self):
        return SimpleNamespace(position=0, script=None)

    def forward(self, tokens, state=None):
        if state.script is None:  # the prompt: find the script it begins
            prompt = tokens[0].tolist()
            state.script = next(s for s in self.scripts if s[: len(prompt)] == prompt)
        logits = torch.full((tokens.shape[0], tokens.shape[1], self.vocab_size), -1e9)
        for offset in range(tokens.shape[1]):
            position = state.position + offset + 1
            logits[:, offset, state.script[position] if position < len(state.script) else self.eos_id] = 0.0
        state.position += tokens.shape[1]
        return logits


@pytest.mark.parametrize("tokenizer", [MidiTokenizer(), MidiDurationTokenizer()], ids=["performance", "duration"])
def test_a_model_playing_the_real_continuation_overlaps_it_exactly(tokenizer):
    pieces = load_bach_chorales(limit=4).notes[1:3]
    seconds, step = 6.0, tokenizer.config.time_step
    scripts = []
    for notes in pieces:
        real = tokenizer.decode_notes(tokenizer.encode_notes(notes))
        primer = real[real[:, 1] < seconds - step / 2].copy()
        primer[:, 2] = np.minimum(primer[:, 2], seconds)
        later = real[real[:, 1] >= seconds - step / 2]
        scripts.append([tokenizer.bos_id, *tokenizer.encode_notes(np.concatenate([primer, later])), tokenizer.eos_id])
    model = ScriptedModel(scripts, tokenizer.vocab_size, tokenizer.eos_id)
    generated, reference, samples = evaluate_continuations(model, tokenizer, pieces, primer_seconds=seconds,
                                                           max_new_tokens=5000)  # fmt: skip
    assert generated.num_notes == reference.num_notes > 50
    assert generated.seconds == pytest.approx(reference.seconds)
    for feature, value in overlaps(generated, reference).items():
        assert value == pytest.approx(1.0), feature
    assert generated.longest_note == pytest.approx(reference.longest_note)
    assert generated.sounding_at_end == reference.sounding_at_end
    assert set(overlaps(generated, reference)) == set(FEATURES) and len(samples) == 2


def test_a_model_that_only_holds_notes_is_told_apart():
    tokenizer = MidiTokenizer()
    pieces = load_bach_chorales(limit=4).notes[1:2]
    # After the primer: strike four notes and never release them (time passes, nothing else happens).
    t = tokenizer.event_to_token
    hanging = [t("NOTE_ON", p) for p in (40, 52, 55, 60)] + [t("TIME_SHIFT", 100)] * 30
    primer_tokens = [tokenizer.bos_id]
    real = tokenizer.decode_notes(tokenizer.encode_notes(pieces[0]))
    kept = real[real[:, 1] < 5.995].copy()
    kept[:, 2] = np.minimum(kept[:, 2], 6.0)
    primer_tokens += tokenizer.encode_notes(kept)
    model = ScriptedModel([primer_tokens + hanging], tokenizer.vocab_size, tokenizer.eos_id)
    generated, reference, _ = evaluate_continuations(model, tokenizer, pieces, primer_seconds=6.0, max_new_tokens=40)
    assert generated.num_notes == 4 and generated.longest_note == pytest.approx(30.0)
    assert generated.sounding_at_end_share == 1.0 and reference.sounding_at_end_share < 0.2
    assert overlaps(generated, reference)["duration"] < 0.2
