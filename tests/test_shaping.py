"""Logits shaping against Hugging Face's logits processors; stop ids, minimum length, streaming, stop strings."""

import pytest
import torch

from multimodal.generation import SamplingConfig, generate, generate_stream
from multimodal.generation.processors import (
    add_logit_bias,
    min_p_filter,
    no_repeat_ngram_mask,
    repetition_penalty,
)
from multimodal.models import CausalLM, CausalLMConfig


def test_repetition_penalty_equals_hugging_faces():
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    torch.manual_seed(0)
    logits, tokens = torch.randn(3, 50), torch.randint(0, 50, (3, 12))
    for penalty in (0.7, 1.3, 2.0):
        expected = RepetitionPenaltyLogitsProcessor(penalty)(tokens, logits.clone())
        torch.testing.assert_close(repetition_penalty(logits, tokens, penalty), expected)


def test_no_repeat_ngram_ban_equals_hugging_faces():
    from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

    tokens = torch.tensor([[1, 2, 3, 1, 2, 4, 1, 2], [5, 5, 5, 5, 6, 7, 8, 9]])
    for size in (1, 2, 3):
        expected = NoRepeatNGramLogitsProcessor(size)(tokens, torch.zeros(2, 10)) == float("-inf")
        assert torch.equal(no_repeat_ngram_mask(tokens, size, 10), expected), size


def test_min_p_equals_hugging_faces():
    from transformers.generation.logits_process import MinPLogitsWarper

    torch.manual_seed(1)
    logits = torch.randn(4, 30) * 3
    for min_p in (0.05, 0.2, 0.9):
        expected = MinPLogitsWarper(min_p)(None, logits.clone())
        assert torch.equal(min_p_filter(logits, min_p) == float("-inf"), expected == float("-inf"))


def test_logit_bias_equals_hugging_faces_sequence_bias_of_single_ids():
    from transformers.generation.logits_process import SequenceBiasLogitsProcessor

    torch.manual_seed(2)
    logits, tokens = torch.randn(3, 40), torch.randint(0, 40, (3, 5))
    bias = {4: 1.5, 17: -2.0, 39: 0.25, 0: -float("inf")}
    expected = SequenceBiasLogitsProcessor([[[token], value] for token, value in bias.items()])(tokens, logits.clone())
    config = SamplingConfig(logit_bias=bias)
    assert config.logit_bias == tuple(sorted(bias.items())) == SamplingConfig(logit_bias=list(bias.items())).logit_bias
    torch.testing.assert_close(add_logit_bias(logits, config.logit_bias), expected)
    assert add_logit_bias(logits, ()) is logits
    with pytest.raises(ValueError, match="outside the vocabulary of 40"):
        add_logit_bias(logits, ((40, 1.0),))


def test_a_bias_within_a_group_moves_probability_only_inside_it():
    torch.manual_seed(3)
    logits, group = torch.randn(4, 30).double(), tuple(range(10, 20))
    inside = torch.zeros(30, dtype=torch.bool)
    inside[10:20] = True
    before = logits.softmax(-1)
    # Naively: inside the group the odds scale by e^bias and the group keeps its total; the rest is untouched.
    after = add_logit_bias(logits, ((11, 2.0), (12, -1.0)), group).softmax(-1)
    raw = before.clone()
    raw[:, 11], raw[:, 12] = raw[:, 11] * torch.e**2, raw[:, 12] * torch.e**-1
    share = before[:, inside].sum(-1, keepdim=True)
    torch.testing.assert_close(after[:, inside], raw[:, inside] / raw[:, inside].sum(-1, keepdim=True) * share)
    torch.testing.assert_close(after[:, ~inside], before[:, ~inside])
    # A biased id outside the group moves mass as a plain bias does; inside, the odds are still those above.
    after = add_logit_bias(logits, ((11, 2.0), (12, -1.0), (25, 0.5)), group).softmax(-1)
    torch.testing.assert_close(after[:, inside] / after[:, inside].sum(-1, keepdim=True),
                               raw[:, inside] / raw[:, inside].sum(-1, keepdim=True))  # fmt: skip
    assert (after[:, 25] > before[:, 25]).all() and (after[:, inside].sum(-1) < share[:, 0]).all()


def test_logit_bias_steers_decoding_and_beam_search_refuses_it():
    model = _model()
    prompt = torch.tensor([[1, 2, 3]])
    free = generate(model, prompt, 8, temperature=0)[0, 3:].tolist()
    banned = generate(model, prompt, 8, temperature=0, logit_bias={free[0]: -float("inf")})[0, 3:].tolist()
    assert banned[0] != free[0] and free[0] not in banned
    assert generate(model, prompt, 8, temperature=0, logit_bias={7: 1e4})[0, 3:].tolist() == [7] * 8
    with pytest.raises(ValueError, match="logit_bias"):
        generate(model, prompt, 8, num_beams=2, logit_bias={7: 1.0})


def _model():
    torch.manual_seed(0)
    return CausalLM(CausalLMConfig.from_preset("tiny", vocab_size=50)).eval()


def test_stop_ids_end_rows_and_min_new_tokens_delays_them():
    model = _model()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    free = generate(model, prompt, 12, temperature=0)
    stop = int(free[0, 5])  # what greedy decoding says after two new tokens in row 0
    stopped = generate(model, prompt, 12, temperature=0, stop_ids=(stop,))
    row = stopped[0, 3:].tolist()
    assert row[: row.index(stop) + 1] == free[0, 3 : 3 + row.index(stop) + 1].tolist()
    assert all(token == stop for token in row[row.index(stop) :])  # padded with the stop id
    later = generate(model, prompt, 12, temperature=0, stop_ids=(stop,), min_new_tokens=6)
    assert stop not in later[0, 3:9].tolist()


def test_the_stream_yields_what_generate_returns():
    model = _model()
    prompt = torch.tensor([[7, 8, 9]])
    generator = torch.Generator().manual_seed(0)
    streamed = [int(token[0]) for token in generate_stream(model, prompt, 10, top_k=5, generator=generator)]
    generator = torch.Generator().manual_seed(0)
    assert generate(model, prompt, 10, top_k=5, generator=generator)[0, 3:].tolist() == streamed
    assert not torch.is_inference_mode_enabled()


def test_shaping_options_are_checked():
    for bad in ({"min_new_tokens": -1}, {"repetition_penalty": 0}, {"no_repeat_ngram_size": -2}, {"min_p": 1.5},
                {"logit_bias": {3: float("nan")}}, {"logit_bias": {-1: 1.0}}, {"logit_bias": {3: float("inf")}}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingConfig(**bad)


class _Scripted(torch.nn.Module):
    """Says ``script`` token after token (then EOS), whatever it is given."""

    def __init__(self, script, vocab_size, eos_id):
        super().__init__()
        self.script, self.vocab_size, self.eos_id = script, vocab_size, eos_id
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def new_state(self):
        from types import SimpleNamespace

        return SimpleNamespace(step=0)

    def forward(self, tokens, state=None):
        logits = torch.full((tokens.shape[0], tokens.shape[1], self.vocab_size), -1e9)
        token = self.script[state.step] if state.step < len(self.script) else self.eos_id
        logits[:, -1, token] = 0.0
        state.step += 1
        return logits


def test_text_streams_in_whole_characters_and_stops_before_a_stop_string():
    from multimodal.text import continue_text, stream_text
    from multimodal.tokenizers.text import TextTokenizer

    tokenizer = TextTokenizer.train(["plain ascii words only " * 20], vocab_size=270)
    script = tokenizer.encode("un café noir, très fort.")  # é, è: two byte tokens each, no merge
    assert len(script) > len("un café noir, très fort.")
    model = _Scripted(script, tokenizer.vocab_size, tokenizer.eos_id)
    pieces = list(stream_text(model, tokenizer, "", 100, temperature=0))
    assert "".join(pieces) == "un café noir, très fort."
    assert all("\ufffd" not in piece for piece in pieces)  # a half character waits for its other byte
    assert pieces[pieces.index("f") + 1] == "é"  # ... and the text before it is not held back
    model = _Scripted(script, tokenizer.vocab_size, tokenizer.eos_id)
    assert continue_text(model, tokenizer, "", 100, temperature=0, stop=[", t"]) == "un café noir"
    model = _Scripted(script, tokenizer.vocab_size, tokenizer.eos_id)
    streamed = list(stream_text(model, tokenizer, "", 100, temperature=0, stop=["ès"]))
    assert "".join(streamed) == "un café noir, tr" and all("\ufffd" not in piece for piece in streamed)
