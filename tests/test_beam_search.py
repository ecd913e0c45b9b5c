"""Beam search against Hugging Face's: the same sequences and scores on a converted random GPT-2."""

import pytest
import torch
from tiny_models import GPT2_VOCAB_SIZE, tiny_gpt2

from multimodal.convert.gpt2 import load_gpt2
from multimodal.generation.beam import beam_search

pytest.importorskip("transformers")


@pytest.mark.parametrize(("num_beams", "length_penalty", "early_stopping", "eos"),
                         [(2, 1.0, False, True), (4, 1.0, False, True), (3, 0.0, True, True), (4, 2.0, False, True),
                          (3, 1.0, False, False)])  # fmt: skip
def test_beam_search_returns_hugging_faces_sequences_and_scores(tmp_path, num_beams, length_penalty, early_stopping, eos):
    reference = tiny_gpt2(tmp_path, seed=num_beams)
    eos_id = GPT2_VOCAB_SIZE - 1
    if eos:  # a model that says EOS often, so hypotheses finish at different lengths
        with torch.no_grad():
            reference.transformer.wte.weight[eos_id] *= 6  # the tied output row too
        reference.save_pretrained(tmp_path)
    model = load_gpt2(tmp_path).eval()
    prompt = torch.randint(0, GPT2_VOCAB_SIZE - 1, (2, 5), generator=torch.Generator().manual_seed(1))
    returned = min(2, num_beams)
    expected = reference.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, num_beams=num_beams,
        length_penalty=length_penalty, early_stopping=early_stopping, num_return_sequences=returned,
        do_sample=False, eos_token_id=eos_id if eos else None, pad_token_id=eos_id,
        return_dict_in_generate=True, output_scores=True,
    )  # fmt: skip
    sequences, scores = beam_search(model, prompt, 12, num_beams, eos_id=eos_id if eos else None,
                                    length_penalty=length_penalty, early_stopping=early_stopping,
                                    num_return_sequences=returned)  # fmt: skip
    assert sequences.tolist() == expected.sequences.tolist()
    torch.testing.assert_close(scores, expected.sequences_scores, atol=1e-4, rtol=1e-4)


def test_beam_search_with_one_beam_is_greedy():
    from multimodal.generation import generate
    from multimodal.models import CausalLM, CausalLMConfig

    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig.from_preset("tiny", vocab_size=40, position="relative")).eval()
    prompt = torch.randint(0, 40, (3, 4))
    sequences, _ = beam_search(model, prompt, 10, 1)
    assert torch.equal(sequences, generate(model, prompt, 10, temperature=0))


def test_generate_with_num_beams_returns_hugging_faces_best_beam(tmp_path):
    from multimodal.generation import generate

    reference = tiny_gpt2(tmp_path, seed=3)
    model = load_gpt2(tmp_path).eval()
    prompt = torch.randint(0, GPT2_VOCAB_SIZE - 1, (2, 5), generator=torch.Generator().manual_seed(2))
    expected = reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, num_beams=3,
                                  length_penalty=0.5, do_sample=False, pad_token_id=0)  # fmt: skip
    got = generate(model, prompt, 8, num_beams=3, length_penalty=0.5)
    assert got.tolist() == expected.tolist()
    with pytest.raises(ValueError, match="top_k"):
        generate(model, prompt, 8, num_beams=3, top_k=5)
    with pytest.raises(ValueError, match="num_beams"):
        generate(model, prompt, 8, num_beams=0)
