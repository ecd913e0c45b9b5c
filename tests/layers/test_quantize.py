"""Int8 and float16 weights and 16-bit KV caches (multimodal.layers.quantize) against naive references and float32."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from multimodal.convert.folder import load, save_model_folder
from multimodal.generation import generate, generate_batch
from multimodal.generation.beam import beam_search
from multimodal.generation.speculative import speculative_generate
from multimodal.layers import quantize as quantize_module
from multimodal.layers.quantize import Float16Linear, Int8Linear, quantize_model, set_kv_cache_dtype
from multimodal.models import CausalLM, CausalLMConfig

LOGIT_BOUND = 0.05
"""Documented bound (docs/text.md): the root-mean-square difference of int8 logits from float32's is at
most this fraction of the float32 logits' standard deviation (measured: 0.033-0.035 on these models)."""

FLOAT16_LOGIT_BOUND = 0.001
"""The same for float16 weights (measured: 0.0004 on these models: only the weights are rounded)."""

BOUNDS = {"int8": LOGIT_BOUND, "float16": FLOAT16_LOGIT_BOUND}

FAMILIES = {
    "learned": dict(position="learned"),
    "relative": dict(position="relative", max_relative_distance=12),
    "rotary": dict(position="rotary"),
    "alibi": dict(position="alibi"),
    "gqa": dict(position="rotary", num_kv_heads=2),
    "local": dict(position="relative", attention="local1d", local_window=8, max_relative_distance=8),
}


def _model(family: str, seed: int = 0, **overrides) -> CausalLM:
    torch.manual_seed(seed)
    sizes = dict(vocab_size=96, dim=64, num_layers=2, num_heads=4, ff_dim=128, max_seq_len=64, dropout=0.0)
    config = CausalLMConfig(**{**sizes, **FAMILIES[family], **overrides})
    model = CausalLM(config).eval()
    with torch.no_grad():  # away from the initialisation, as a trained model is
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Root-mean-square difference over the standard deviation of ``expected``."""
    return float((got - expected).pow(2).mean().sqrt() / expected.std())


def _naive_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row by row, the textbook symmetric scheme: scale = max|w| / 127, q = round(w / scale)."""
    rows, scales = [], []
    for row in weight.double():
        scale = row.abs().max() / 127
        rows.append([max(-127, min(127, round(float(value / scale)))) for value in row])
        scales.append(float(scale))
    return torch.tensor(rows, dtype=torch.int8), torch.tensor(scales, dtype=torch.float64)


def _naive_input_quantization(x: torch.Tensor) -> torch.Tensor:
    """The input as the kernel sees it: one affine 7-bit grid (0..127) over [min(x, 0), max(x, 0)]."""
    low, high = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (high - low) / 127
    zero = max(0, min(127, round(-low / scale)))
    return (torch.clamp(torch.round(x.double() / scale) + zero, 0, 127) - zero) * scale


def test_int8_linear_equals_the_naive_quantized_product():
    torch.manual_seed(0)
    linear = nn.Linear(48, 40)
    layer = Int8Linear.from_linear(linear)
    qweight, scales = _naive_int8(linear.weight.detach())
    assert torch.equal(layer.qweight, qweight)
    torch.testing.assert_close(layer.scales.double(), scales)
    x = torch.randn(3, 5, 48)
    expected = _naive_input_quantization(x) @ (qweight.double() * scales[:, None]).T + linear.bias.detach().double()
    torch.testing.assert_close(layer(x).double(), expected, atol=1e-5, rtol=1e-5)
    # Quantization error of the weights is at most half a step of each row's scale.
    assert (layer.dequantized() - linear.weight).abs().max() <= scales.max() / 2 + 1e-7
    # New weights loaded into the layer are packed again
    other = Int8Linear.from_linear(nn.Linear(48, 40))
    layer.load_state_dict(other.state_dict())
    torch.testing.assert_close(layer(x), other(x))


def test_float16_linear_equals_the_product_with_float16_rounded_weights():
    torch.manual_seed(0)
    linear = nn.Linear(48, 40)
    layer = Float16Linear.from_linear(linear)
    weight = torch.tensor([[float(torch.tensor(v, dtype=torch.float16)) for v in row] for row in linear.weight.tolist()])
    assert torch.equal(layer.weight.float(), weight)  # round to nearest, value by value
    x = torch.randn(3, 5, 48)
    expected = x.double() @ weight.double().T + linear.bias.detach().double()  # the input is not quantized
    torch.testing.assert_close(layer(x).double(), expected, atol=1e-5, rtol=1e-5)
    other = Float16Linear.from_linear(nn.Linear(48, 40))
    layer.load_state_dict(other.state_dict())  # new weights are packed again
    torch.testing.assert_close(layer(x), other(x))
    with pytest.raises(ValueError, match="does not fit float16; use int8"):
        Float16Linear.from_linear(nn.Linear(4, 4).requires_grad_(False).apply(lambda m: m.weight.fill_(7e4)))


@pytest.mark.parametrize("scheme", list(BOUNDS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_quantized_logits_stay_within_the_documented_bound_of_float32(family, scheme):
    model = _model(family)
    tokens = torch.randint(0, 96, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(tokens)
        quantized = quantize_model(model, scheme)(tokens)
    assert all(type(module) is not nn.Linear for module in model.modules())
    assert _relative_error(quantized, reference) <= BOUNDS[scheme]
    assert not torch.equal(quantized, reference)  # the reduced path did run


@pytest.mark.parametrize("scheme", list(BOUNDS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_quantized_cached_decoding_stays_as_close_to_the_quantized_full_forward(family, scheme):
    # int8 quantizes each call's input with the range of the rows it holds: a cached step (one token)
    # and the full forward (every token) see different ranges, so they agree within the bound, not
    # exactly. float16 rounds only the weights: cached steps equal the full forward up to float32 sums.
    model = _model(family)
    tokens = torch.randint(0, 96, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        reference = model(tokens)
        quantize_model(model, scheme)
        full = model(tokens)
        state = model.new_state()
        steps = torch.cat([model(tokens[:, :7], state=state)] + [model(tokens[:, t : t + 1], state=state)
                                                                 for t in range(7, 30)], 1)  # fmt: skip
    assert _relative_error(steps, full) <= (LOGIT_BOUND if scheme == "int8" else 1e-5)
    assert _relative_error(steps, reference) <= BOUNDS[scheme]
    assert state.position == 30


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("family", ["relative", "gqa", "local"])
def test_a_16_bit_kv_cache_stores_half_and_decodes_close_to_the_full_forward(family, dtype):
    model = set_kv_cache_dtype(_model(family), dtype)
    tokens = torch.randint(0, 96, (2, 30), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(tokens)
        state = model.new_state()
        steps = [model(tokens[:, :5], state=state)] + [model(tokens[:, t : t + 1], state=state) for t in range(5, 30)]
    assert state.layers[0].keys.dtype == getattr(torch, dtype) and steps[-1].dtype == torch.float32
    # 16-bit keys/values: float16 keeps 11 significant bits, bfloat16 8; the logits move by well under the bound.
    assert _relative_error(torch.cat(steps, 1), full) <= LOGIT_BOUND / 4


def test_beam_batched_and_speculative_decoding_pick_the_float32_tokens_with_int8_and_a_float16_cache():
    prompt = torch.randint(1, 96, (1, 6), generator=torch.Generator().manual_seed(4))
    prompts = [prompt[0], prompt[0, :4], prompt[0, 2:]]
    runs = {
        "greedy": lambda m: generate(m, prompt, 12, temperature=0),
        "beam": lambda m: beam_search(m, prompt, 12, 3)[0],
        "batched": lambda m: torch.cat(generate_batch(m, prompts, 12, temperature=0)),
        "speculative": lambda m: speculative_generate(
            m, _model("rotary", seed=5, num_layers=1), prompt, 12, temperature=0, num_draft=3
        ),
    }
    for name, run in runs.items():
        with torch.no_grad():
            expected = run(_sharp(_model("rotary")))
            got = run(set_kv_cache_dtype(quantize_model(_sharp(_model("rotary"))), "float16"))
        assert torch.equal(got, expected), name


def _sharp(model: CausalLM) -> CausalLM:
    """A model whose next-token choices are clear (larger logits), so the tokens test the decoding, not ties."""
    with torch.no_grad():
        model.embedding.weight.mul_(4)
    return model


@pytest.mark.parametrize("scheme, family, share", [
    # int8: the linear layers at a quarter; the embedding (stored once, tied to the head) stays float32: 0.41 here.
    ("int8", "relative", 0.45),
    # float16: the linear layers at half; the embedding stays float32, the head gets a float16 copy: 0.65 here.
    ("float16", "rotary", 0.67),
])  # fmt: skip
def test_a_quantized_folder_is_smaller_and_loads_the_same_model(tmp_path, scheme, family, share):
    model = _model(family, vocab_size=512, dim=128, ff_dim=512)
    save_model_folder(model, tmp_path / "float32")
    save_model_folder(model, tmp_path / scheme, quantize=scheme)
    size = {name: (tmp_path / name / "model.safetensors").stat().st_size for name in ("float32", scheme)}
    assert size[scheme] < share * size["float32"]
    assert json.loads((tmp_path / scheme / "config.json").read_text())["quantization"] == scheme
    from_folder, _ = load(tmp_path / scheme)
    at_load, _ = load(tmp_path / "float32", quantize=scheme)
    assert from_folder.quantization == at_load.quantization == scheme
    tokens = torch.randint(0, 512, (1, 20))
    with torch.no_grad():
        assert torch.equal(from_folder(tokens), at_load(tokens))
    assert model.head.weight is model.embedding.weight  # the caller's model was left as it was
    other = next(name for name in quantize_module.WEIGHT_SCHEMES if name != scheme)
    with pytest.raises(ValueError, match=f"weights are {scheme} already"):
        quantize_model(from_folder, other)


def test_the_commands_offer_what_the_library_takes():
    from tasks.commands.checkpoint import KV_CACHE_CHOICES, QUANTIZE_CHOICES

    assert QUANTIZE_CHOICES == quantize_module.WEIGHT_SCHEMES
    assert list(KV_CACHE_CHOICES) == list(quantize_module.KV_CACHE_DTYPES)


def test_unknown_options_and_a_missing_kernel_are_refused_with_what_to_do(monkeypatch):
    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        quantize_model(_model("learned"), "int4")
    with pytest.raises(ValueError, match="unknown KV-cache dtype 'int2'"):
        set_kv_cache_dtype(_model("learned"), "int2")
    with pytest.raises(ValueError, match="cannot run on cuda; run on the CPU or without --quantize"):
        quantize_module.check_kernel("int8", "cuda")  # the quantized kernels are CPU kernels
    monkeypatch.setattr(quantize_module, "_kernel_works", lambda scheme, device_type: False)
    with pytest.raises(ValueError, match="cannot run on cpu; run on the CPU or without --quantize"):
        quantize_model(_model("learned"))


def test_generate_perplexity_and_export_take_the_quantized_mode(tmp_path, capsys, monkeypatch):
    """The shipped music model through the commands: --quantize int8 --kv-cache float16, an int8 export."""
    from multimodal import load as load_named
    from tasks.cli import main

    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))  # no converted collections: from nothing
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--max-new-tokens", "32", "--no-audio",
          "--seed", "0", "--quantize", "int8", "--kv-cache", "float16"])  # fmt: skip
    assert (tmp_path / "out" / "sample_0.mid").is_file()
    main(["perplexity", "--model", "music", "--quantize", "int8", str(tmp_path / "out" / "sample_0.mid")])
    assert "nats" in capsys.readouterr().out
    model, tokenizer = load_named("music", quantize="int8", kv_cache_dtype="bfloat16")
    assert model.quantization == "int8" and model.decoder.kv_cache_dtype == torch.bfloat16
    save_model_folder(model, tmp_path / "int8", tokenizer=tokenizer)
    again, _ = load(tmp_path / "int8")
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids))


def test_the_shipped_model_generates_with_float16_weights_close_to_float32(tmp_path, monkeypatch):
    from multimodal import load as load_named
    from tasks.cli import main

    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--max-new-tokens", "16", "--no-audio",
          "--seed", "0", "--quantize", "float16"])  # fmt: skip
    assert (tmp_path / "out" / "sample_0.mid").is_file()
    half, _ = load_named("music", quantize="float16")
    full, _ = load_named("music")
    ids = torch.randint(0, full.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert half.quantization == "float16" and _relative_error(half(ids), full(ids)) <= FLOAT16_LOGIT_BOUND


@pytest.mark.parametrize("argv, message", [
    (["--quantize", "int4"], "argument --quantize: invalid choice: 'int4'"),
    (["--kv-cache", "int8"], "argument --kv-cache: invalid choice: 'int8'"),
])  # fmt: skip
def test_a_bad_quantized_mode_is_one_line(argv, message, tmp_path, capsys):
    from tasks.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["generate", "--model", "music", "--out", str(tmp_path), *argv])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_a_folder_that_lies_about_its_quantization_is_refused_before_loading(tmp_path):
    model = _model("learned")
    folder = save_model_folder(model, tmp_path / "int8", quantize="int8")
    meta = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**meta, "quantization": "int4"}))
    with pytest.raises(ValueError, match="unknown quantization 'int4'; known: \\['int8', 'float16'\\]"):
        load(folder)
    meta.pop("quantization")  # int8 tensors under a float32 config: the shapes check names them
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="the weights do not fit the config: missing .*unexpected"):
        load(folder)


def test_an_int8_folder_cannot_start_a_training_run(tmp_path):
    from multimodal.convert.folder import folder_export

    folder = save_model_folder(_model("learned"), tmp_path / "int8", quantize="int8")
    with pytest.raises(ValueError, match="its weights are int8 .* start a run from a float folder"):
        folder_export(folder)
