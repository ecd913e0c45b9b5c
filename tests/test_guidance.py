"""Classifier-free guidance: the guided decoding loop against a naive one that runs both prompts in full at every step."""

import numpy as np
import pytest
import torch

from multimodal.generation import generate, generate_batch
from multimodal.generation.guidance import GuidedModel
from multimodal.models import CausalLM, CausalLMConfig
from multimodal.music import continue_music, harmonize_to_files
from multimodal.music.continuation import unconditional_prompt
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig
from multimodal.tokenizers.midi_files import read_midi_notes
from multimodal.tokenizers.music_controls import Controls


def _model(vocab_size=40, position="relative"):
    torch.manual_seed(0)
    config = CausalLMConfig(vocab_size=vocab_size, dim=32, num_layers=2, num_heads=4, ff_dim=64, dropout=0.0,
                            position=position, max_seq_len=128, max_relative_distance=8)  # fmt: skip
    return CausalLM(config).double().eval()


def _naive_guided_greedy(model, prompt, unconditional, scale, steps):
    """Greedy decoding from ``log p_u + scale (log p_c - log p_u)``, each step two full forwards, no cache."""
    tokens = list(prompt)
    for _ in range(steps):
        with torch.no_grad():
            cond = model(torch.tensor([tokens]))[0, -1].log_softmax(-1)
            uncond = model(torch.tensor([list(unconditional) + tokens[len(prompt) :]]))[0, -1].log_softmax(-1)
        tokens.append(int((uncond + scale * (cond - uncond)).argmax()))
    return tokens


@pytest.mark.parametrize("position", ["relative", "rotary", "learned"])
@pytest.mark.parametrize("scale", [0.0, 2.5])
def test_guided_greedy_decoding_equals_the_naive_two_forward_loop(position, scale):
    model = _model(position=position)
    prompt, unconditional = [1, 7, 9, 3, 5], [1, 2, 2, 3, 5]  # the "controls" 7, 9 replaced by 2, 2
    expected = _naive_guided_greedy(model, prompt, unconditional, scale, 24)
    cached = generate(model, torch.tensor([prompt]), 24, temperature=0, guidance_scale=scale,
                      unconditional_prompt=torch.tensor([unconditional]))[0]  # fmt: skip
    uncached = generate(model, torch.tensor([prompt]), 24, temperature=0, guidance_scale=scale, use_cache=False,
                        unconditional_prompt=torch.tensor([unconditional]))[0]  # fmt: skip
    assert cached.tolist() == expected
    assert uncached.tolist() == expected


def test_scale_one_is_plain_sampling_and_zero_is_the_unconditional_prompt():
    model = _model()
    prompt, unconditional = torch.tensor([[1, 7, 9, 3]]), torch.tensor([[1, 2, 2, 3]])
    plain = generate(model, prompt, 16, temperature=0)
    assert torch.equal(generate(model, prompt, 16, temperature=0, guidance_scale=1.0, unconditional_prompt=unconditional), plain)
    unguided = generate(model, unconditional, 16, temperature=0)[:, 4:]
    assert torch.equal(generate(model, prompt, 16, temperature=0, guidance_scale=0.0, unconditional_prompt=unconditional)[:, 4:],
                       unguided)  # fmt: skip


def test_sampled_guidance_draws_from_the_guided_distribution():
    # One step, many rows: the empirical distribution of the first new token matches the guided probabilities.
    model = _model(vocab_size=12)
    prompt, unconditional, scale = [1, 7, 3], [1, 2, 3], 3.0
    with torch.no_grad():
        cond = model(torch.tensor([prompt]))[0, -1].log_softmax(-1)
        uncond = model(torch.tensor([unconditional]))[0, -1].log_softmax(-1)
    expected = (uncond + scale * (cond - uncond)).softmax(-1)
    rows = 4000
    out = generate(model, torch.tensor([prompt] * rows), 1, guidance_scale=scale,
                   unconditional_prompt=torch.tensor([unconditional]), generator=torch.Generator().manual_seed(0))  # fmt: skip
    counts = torch.bincount(out[:, -1], minlength=12).double() / rows
    assert (counts - expected).abs().max() < 0.03  # ~4 standard errors of the largest share


def test_batched_prompts_of_different_lengths_guide_each_row_as_alone():
    model = _model()
    prompts, unconditionals = [[1, 7, 3], [1, 9, 4, 4, 6]], [[1, 2, 3], [1, 2, 4, 4, 6]]
    rows = generate_batch(model, prompts, 12, temperature=0, guidance_scale=2.0, unconditional_prompts=unconditionals)
    for prompt, unconditional, row in zip(prompts, unconditionals, rows, strict=True):
        assert row.tolist() == _naive_guided_greedy(model, prompt, unconditional, 2.0, 12)


def test_guidance_is_refused_without_an_unconditional_prompt_or_with_beams():
    model = _model()
    with pytest.raises(ValueError, match="unconditional_prompt"):
        generate(model, torch.tensor([[1, 2]]), 4, guidance_scale=2.0)
    with pytest.raises(ValueError, match="unconditional_prompt"):
        generate(model, torch.tensor([[1, 2]]), 4, guidance_scale=2.0, unconditional_prompt=torch.tensor([[1]]))
    with pytest.raises(ValueError, match="guidance_scale"):
        generate(model, torch.tensor([[1, 2]]), 4, num_beams=2, guidance_scale=2.0)
    with pytest.raises(ValueError, match="guidance_scale must be"):
        generate(model, torch.tensor([[1, 2]]), 4, guidance_scale=float("nan"))
    with pytest.raises(ValueError, match="rows"):
        GuidedModel(model, torch.tensor([[1, 2], [1, 2]]), 2.0)(torch.tensor([[1, 2], [3, 4], [5, 6]]))


def _music_tokenizer():
    return MidiDurationTokenizer(MidiDurationTokenizerConfig(controls=True, num_parts=4))


def test_the_unconditional_music_prompt_is_the_prompt_with_every_control_unknown():
    tokenizer = _music_tokenizer()
    controls = Controls(style=0, key=19, meter=2, density=3)
    prompt = [tokenizer.bos_id, *tokenizer.control_ids(controls), tokenizer.time_shift_offset + 3]
    unconditional = tokenizer.without_controls(prompt)
    assert unconditional == [tokenizer.bos_id, *tokenizer.control_ids(None), tokenizer.time_shift_offset + 3]
    assert tokenizer.controls_in(unconditional) == Controls()
    from multimodal.generation import SamplingConfig

    assert unconditional_prompt(tokenizer, prompt, SamplingConfig()) is None
    plain = MidiDurationTokenizer(MidiDurationTokenizerConfig())
    with pytest.raises(ValueError, match="no controls"):
        unconditional_prompt(plain, [plain.bos_id], SamplingConfig(guidance_scale=2.0))


def test_guided_music_continues_and_harmonizes_with_the_given_notes_kept(tmp_path):
    tokenizer = _music_tokenizer()
    model = _model(vocab_size=tokenizer.vocab_size)
    head = [tokenizer.bos_id, *tokenizer.control_ids(Controls(key=3))]
    paths = continue_music(model, tokenizer, head, tmp_path / "continued", max_new_tokens=24, seed=0, audio=False,
                           guidance_scale=3.0, top_p=0.95)  # fmt: skip
    assert paths[0].is_file()
    melody = np.array([[60 + i, 0.5 * i, 0.5 * i + 0.5, 80] for i in range(6)], dtype=float)
    written = harmonize_to_files(model, tokenizer, melody, tmp_path / "harmonized", max_new_tokens=64, seed=0,
                                 audio=False, guidance_scale=3.0, controls=Controls(key=3))  # fmt: skip
    notes = read_midi_notes(written[0], parts=True)
    kept = notes[notes[:, 4] == 0]
    np.testing.assert_allclose(kept[:, :3], melody[:, :3], atol=1e-3)
