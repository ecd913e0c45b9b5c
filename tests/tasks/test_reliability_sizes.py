"""Sizes from files and arguments never exhaust the machine: each is checked against what exists (the
weights in a file, a documented limit) before anything is allocated, and refused in one line.

The cases that used to take gigabytes run in one child process whose address space is capped at a
couple of GiB above what its imports take (``RLIMIT_AS``): a refusal that came after the allocation
would fail there with a memory error instead of the expected message. Each case is listed in
docs/reliability.md.
"""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from multimodal.convert.folder import save_model_folder
from multimodal.limits import MAX_NEW_TOKENS, MAX_OUTPUT_PIXELS, MAX_SAMPLES
from multimodal.models.config import CausalLMConfig, ImageTransformerConfig, SuperResolutionConfig
from multimodal.models.image_transformer import ImageTransformer
from multimodal.models.lm import CausalLM
from multimodal.models.super_resolution import SuperResolutionRegressor
from multimodal.tokenizers.midi import MidiTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

HEADROOM = 2 * 2**30
"""Address space the child may take beyond its imports: plenty for every refusal, far less than any
of the allocations they prevent (6.9 to 24 GB before the fixes)."""

LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9 if previous else ['lol'] * 9)}]\n"
    for previous, name in zip([None, *"abcdefgh"], "abcdefghi", strict=True)
)
"""Ten lines of YAML aliases that expand to 9**9 strings ("billion laughs")."""

CAP = r"""
import resource, sys
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024  # after the imports
hard = resource.getrlimit(resource.RLIMIT_AS)[1]
cap = size + int(sys.argv[1]) if hard == resource.RLIM_INFINITY else min(size + int(sys.argv[1]), hard)
resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
"""
"""Caps the address space of a child at what it has mapped so far plus ``sys.argv[1]`` bytes."""

CHILD = (
    r"""
import contextlib, io, json, time
from tasks.cli import main
import tasks.lightning_cli, tasks.checkpoint, tasks.super_resolution, multimodal.convert.gpt2  # noqa: F401 (imports first)
"""
    + CAP
    + r"""
results = {"cap": cap}
for name, argv in json.loads(sys.argv[2]).items():
    err, start, code = io.StringIO(), time.perf_counter(), 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as stop:
            code = stop.code
        except BaseException as error:  # a MemoryError outside main's handler: report it, do not crash
            code, err = -1, io.StringIO(f"{type(error).__name__}: {error}")
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    results[name] = {"code": code, "lines": lines, "seconds": time.perf_counter() - start}
print(json.dumps(results))
"""
)


def _gpt2_folder(folder: Path, n_layer) -> Path:
    """A Hugging Face GPT-2 folder (config.json + model.safetensors) of one layer, with ``n_layer`` in its config."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab, dim, positions = 16, 8, 32
    generator = torch.Generator().manual_seed(0)
    shapes = {"wte.weight": (vocab, dim), "wpe.weight": (positions, dim), "ln_f.weight": (dim,), "ln_f.bias": (dim,),
              "h.0.ln_1.weight": (dim,), "h.0.ln_1.bias": (dim,), "h.0.ln_2.weight": (dim,), "h.0.ln_2.bias": (dim,),
              "h.0.attn.c_attn.weight": (dim, 3 * dim), "h.0.attn.c_attn.bias": (3 * dim,),
              "h.0.attn.c_proj.weight": (dim, dim), "h.0.attn.c_proj.bias": (dim,),
              "h.0.mlp.c_fc.weight": (dim, 4 * dim), "h.0.mlp.c_fc.bias": (4 * dim,),
              "h.0.mlp.c_proj.weight": (4 * dim, dim), "h.0.mlp.c_proj.bias": (dim,)}  # fmt: skip
    save_file({name: torch.randn(shape, generator=generator) * 0.02 for name, shape in shapes.items()},
              str(folder / "model.safetensors"))  # fmt: skip
    config = {"model_type": "gpt2", "vocab_size": vocab, "n_embd": dim, "n_layer": n_layer, "n_head": 2,
              "n_positions": positions}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _edit_model_config(folder: Path, **fields) -> Path:
    meta = json.loads((folder / "config.json").read_text())
    meta["model"].update(fields)
    (folder / "config.json").write_text(json.dumps(meta))
    return folder


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir(parents=True)
    for path in folder.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    return to


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Model folders of a music, an image-generation and a super-resolution task (untrained tiny models),
    a MIDI primer, a 9000x9000 PNG, a "billion laughs" YAML and a GPT-2 folder."""
    root = tmp_path_factory.mktemp("sizes")
    tokenizer = MidiTokenizer()
    music = CausalLM(CausalLMConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_seq_len=64))
    save_model_folder(
        music, root / "music", tokenizer=tokenizer, task="tasks.music_continuation.MusicContinuation"
    )
    images = ImageTransformer(ImageTransformerConfig.from_preset("tiny", height=4, width=4))
    save_model_folder(images, root / "images", task="tasks.image_generation.ImageGeneration")
    save_model_folder(SuperResolutionRegressor(SuperResolutionConfig.from_preset("tiny")), root / "sr",
                      task="tasks.super_resolution.SuperResolution")  # fmt: skip
    import pretty_midi

    midi = pretty_midi.PrettyMIDI()
    piano = pretty_midi.Instrument(0)
    piano.notes = [pretty_midi.Note(80, 60 + i, i * 0.5, i * 0.5 + 0.4) for i in range(8)]
    midi.instruments.append(piano)
    midi.write(str(root / "primer.mid"))
    Image.new("L", (9000, 9000), 128).save(root / "huge.png")  # ~100 KB on disk, 81 million pixels
    (root / "laughs.yaml").write_text(LAUGHS)
    _edit_model_config(_copy(root / "music", root / "deep"), num_layers=1_000_000)
    _edit_model_config(_copy(root / "music", root / "negative"), max_seq_len=-1)
    _gpt2_folder(root / "gpt2_float", 1e6)
    _gpt2_folder(root / "gpt2_int", 1_000_000)
    _gpt2_folder(root / "gpt2", 1)
    return root


@pytest.fixture(scope="module")
def capped(folders):
    """Every memory case, run by ``multimodal`` in one child process under an address-space cap."""
    out = folders / "out"
    cases = {
        "deep_folder": ["generate", "--checkpoint", folders / "deep", "--primer", folders / "primer.mid", "--out", out],
        "gpt2_float": ["convert", "gpt2", "--hf-dir", folders / "gpt2_float", "--out", out / "g1"],
        "gpt2_int": ["convert", "gpt2", "--hf-dir", folders / "gpt2_int", "--out", out / "g2"],
        "num_samples": ["generate", "--checkpoint", folders / "images", "--num-samples", "1000000000", "--out", out],
        "max_new_tokens": ["generate", "--checkpoint", folders / "music", "--primer", folders / "primer.mid",
                           "--max-new-tokens", "1000000000000", "--out", out],
        "huge_image": ["generate", "--checkpoint", folders / "sr", "--input", folders / "huge.png", "--out", out],
        "laughs": ["fit", "--config", folders / "laughs.yaml"],
    }  # fmt: skip
    cases = {name: [str(arg) for arg in argv] for name, argv in cases.items()}
    env = {key: value for key, value in os.environ.items() if key != "MULTIMODAL_DEBUG"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(HEADROOM), json.dumps(cases)], capture_output=True,
                          text=True, timeout=600, cwd=folders, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results.pop("cap") < 16 * 2**30  # the cap is small: each case needed 4.9 to 24 GB before its fix
    return results


def _refused(result: dict, *words: str) -> str:
    """The one error line of a capped case, checked: exit status 2, no traceback, quick, naming ``words``."""
    assert result["code"] == 2, result
    line = result["lines"][-1]
    assert "error: " in line and "Traceback" not in "\n".join(result["lines"]), result
    assert result["seconds"] < 30, result
    for word in words:
        assert word in line, line
    return line


# ------------------------------------------------------------------ configs against the weights


def test_a_model_folder_with_a_million_layers_is_refused_before_allocation(capped, folders):
    line = _refused(capped["deep_folder"], "num_layers=1000000", "config.json", "at most 2 layers")
    assert str(folders / "deep") in line


def test_convert_gpt2_checks_n_layer_against_the_weights(capped, folders, tmp_path):
    _refused(capped["gpt2_float"], "num_layers", "whole number", "1000000.0", "config.json")
    _refused(capped["gpt2_int"], "num_layers=1000000", "at most 1 layers", "config.json")
    from tasks.cli import main

    main(
        ["convert", "gpt2", "--hf-dir", str(folders / "gpt2"), "--out", str(tmp_path / "converted")]
    )  # the same
    assert (tmp_path / "converted" / "blocks.safetensors").is_file()  # weights with n_layer: 1 convert


def test_non_positive_and_non_integer_sizes_are_refused_by_the_configs():
    for fields, name in [({"max_seq_len": -1}, "max_seq_len"), ({"num_layers": 1e6}, "num_layers"),
                         ({"dim": True}, "dim"), ({"vocab_size": 0}, "vocab_size"), ({"num_heads": 2.5}, "num_heads")]:  # fmt: skip
        with pytest.raises(
            ValueError, match=f"CausalLMConfig.{name} must be a whole number >= 1.*fix {name}"
        ):
            CausalLMConfig.from_preset("tiny", **fields)
    with pytest.raises(ValueError, match="ImageTransformerConfig.height"):
        ImageTransformerConfig(height=-4)
    with pytest.raises(ValueError, match="SuperResolutionConfig.stem_channels must be a whole number >= 0"):
        SuperResolutionConfig(stem_channels=-1)
    assert (
        CausalLMConfig.from_preset("tiny", num_layers=torch.tensor(3).numpy()[()]).num_layers == 3
    )  # NumPy ints pass


def test_max_seq_len_minus_one_is_refused_by_load_and_generate(folders, capsys, monkeypatch):
    from test_reliability import one_line_error

    import multimodal

    with pytest.raises(
        ValueError, match=r"negative/config.json: CausalLMConfig.max_seq_len must be a whole number"
    ):
        multimodal.load(folders / "negative")
    line = one_line_error(["generate", "--checkpoint", folders / "negative", "--primer", folders / "primer.mid",
                           "--out", folders / "out_negative"], capsys, monkeypatch)  # fmt: skip
    assert "max_seq_len" in line and "-1" in line and "config.json" in line
    model, _ = multimodal.load(folders / "music")  # the folder it was copied from loads
    assert model.config.max_seq_len == 64


def test_the_weights_header_bounds_every_size_before_the_meta_build(folders, tmp_path):
    from multimodal.convert.folder import read_model_folder
    from multimodal.convert.weight_shapes import MAX_UNSAVED_ELEMENTS, layers_in, weight_shapes

    shapes = weight_shapes(folders / "music" / "model.safetensors")
    assert layers_in(shapes) == 2 and shapes["embedding.weight"] == (MidiTokenizer().vocab_size, 32)
    for fields, message in [({"dim": 64}, "of another shape"), ({"vocab_size": 10**12}, "larger than any size"),
                            ({"position": "sinusoidal", "max_seq_len": 2 * MAX_UNSAVED_ELEMENTS}, "larger than any size"),
                            ({"position": "learned"}, "missing")]:  # fmt: skip
        folder = _edit_model_config(
            _copy(folders / "music", tmp_path / str(len(list(tmp_path.iterdir())))), **fields
        )
        start = time.perf_counter()
        with pytest.raises(ValueError, match=message):
            read_model_folder(folder)
        assert time.perf_counter() - start < 5
    import multimodal

    model = CausalLM(CausalLMConfig.from_preset("tiny", vocab_size=11))
    config = {**json.loads((folders / "music" / "config.json").read_text())["model"], "vocab_size": 11}
    checkpoint = {"multimodal": {"task": "tasks.language_modeling.LanguageModeling", "family": "CausalLM"},
                  "hyper_parameters": {"model": {**config, "num_layers": 1_000_000}},
                  "state_dict": {f"model.{name}": value for name, value in model.state_dict().items()}}  # fmt: skip
    torch.save(checkpoint, tmp_path / "deep.ckpt")
    with pytest.raises(
        ValueError, match="deep.ckpt: num_layers=1000000, but the weights hold at most 2 layers"
    ):
        multimodal.load(tmp_path / "deep.ckpt")  # a checkpoint's config is checked against its state dict
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        weight_shapes(tmp_path / "broken" / "model.safetensors")


# ------------------------------------------------------------------ counts from arguments


def test_num_samples_and_max_new_tokens_are_bounded_by_the_parser(capped):
    _refused(capped["num_samples"], "--num-samples", "1000000000", f"{MAX_SAMPLES:,}")
    _refused(capped["max_new_tokens"], "--max-new-tokens", "1000000000000", f"{MAX_NEW_TOKENS:,}")


def test_the_library_bounds_max_new_tokens_before_allocating():
    from multimodal.generation import generate
    from multimodal.generation.beam import beam_search

    model = CausalLM(CausalLMConfig.from_preset("tiny", vocab_size=11, max_seq_len=64))
    prompt = torch.zeros(1, 3, dtype=torch.long)
    for call in (lambda: generate(model, prompt, 10**12), lambda: beam_search(model, prompt, 10**12, 2)):
        with pytest.raises(ValueError, match=f"at most {MAX_NEW_TOKENS:,}"):
            call()
    with pytest.raises(ValueError, match="MAX_BEAMS"):
        beam_search(model, prompt, 4, 10**6)
    assert generate(model, prompt, 5, temperature=0).shape == (1, 8)  # within the bound it generates
    images = ImageTransformer(ImageTransformerConfig.from_preset("tiny", height=4, width=4))
    from multimodal.images import sample_images

    assert sample_images(images, 1).shape == (
        1,
        1,
        4,
        4,
    )  # an image's sub-pixels count against max_seq_len too


def test_count_arguments_say_their_bound():
    import argparse

    from tasks.arguments import count

    parse = count(10)
    assert parse("10") == 10 and count(10, low=0)("0") == 0
    for text, message in [("11", "not in [1, 10]"), ("0", "not in [1, 10]"), ("1e12", "not a whole number")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message.replace("[", r"\[")):
            parse(text)


def test_the_serve_functions_check_counts_against_the_widgets_bounds(folders):
    gradio = pytest.importorskip("gradio")
    from tasks.checkpoint import load_task
    from tasks.serve import images, music, text

    with pytest.raises(gradio.Error, match="new tokens"):
        next(text.TextSession(None, None).continue_prompt("x", 10**9, 0.8, 0.95, 0))
    session = music.MusicSession.__new__(
        music.MusicSession
    )  # the bounds are checked before any piece is read
    session.task, session.tokenizer, session.pieces = None, None, {}
    with pytest.raises(gradio.Error, match="new events"):
        session.continue_primer(None, None, 3.0, 10**9, 1.0, 0.95, 0)
    task, _, _ = load_task(folders / "images")
    with pytest.raises(gradio.Error, match="samples"):
        images.GenerationSession(task).sample(None, 10**9, 1.0, 0)
    grid, message = images.GenerationSession(task).sample(None, images.SAMPLES[0], 1.0, 0)
    assert grid.ndim == 3 and "1 samples" in message
    assert (text.NEW_TOKENS[1], music.NEW_EVENTS[1], images.SAMPLES[1]) == (
        1024,
        1024,
        64,
    )  # the sliders' maxima


# ------------------------------------------------------------------ images


def test_super_resolution_of_a_huge_image_is_refused_from_its_header(capped, folders):
    line = _refused(
        capped["huge_image"], "huge.png", "9000x9000", "--max-output-pixels", f"{MAX_OUTPUT_PIXELS:,}"
    )
    assert "18000x18000" in line


def test_the_serve_page_refuses_a_huge_upload_without_decoding_it(folders, monkeypatch):
    from PIL import ImageFile

    from tasks.checkpoint import load_task
    from tasks.serve.images import SuperResolutionSession

    task, _, _ = load_task(folders / "sr")
    session = SuperResolutionSession(task)
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail("the huge upload was decoded"))
    compared, upscaled, message = session.upscale(str(folders / "huge.png"))
    assert (compared, upscaled) == (None, None) and message.startswith(
        "Too large to upscale here: huge.png: 9000x9000"
    )


def test_upscale_refuses_an_output_over_the_limit_and_the_limit_can_be_raised():
    from multimodal.images import ImageTooLarge, upscale

    model = SuperResolutionRegressor(SuperResolutionConfig.from_preset("tiny"))
    low_res = torch.rand(3, 12, 10)
    with pytest.raises(
        ImageTooLarge, match="10x12 pixels upscaled x2 is 20x24 = 480 pixels, more than the limit of 400"
    ):
        upscale(model, low_res, max_output_pixels=400)
    assert upscale(model, low_res, max_output_pixels=480).shape == (3, 24, 20)
    assert MAX_OUTPUT_PIXELS == 4096 * 4096 and math.isqrt(MAX_OUTPUT_PIXELS) == 4096


# ------------------------------------------------------------------ YAML


def test_billion_laughs_yaml_is_refused_before_lightning_cli_reads_it(capped, folders):
    _refused(capped["laughs"], "laughs.yaml", "aliases", "100,000")


def test_config_files_are_read_with_bounds(tmp_path, configs):
    from tasks.config_files import MAX_CONFIG_BYTES, expanded_size, read_config_file

    (tmp_path / "laughs.yaml").write_text(LAUGHS)
    start = time.perf_counter()
    with pytest.raises(
        ValueError, match=r"laughs.yaml: its aliases \(\*name\) expand to [\d,]+ values, more than"
    ):
        read_config_file(tmp_path / "laughs.yaml")
    assert time.perf_counter() - start < 1  # the shared nodes are counted once: no expansion
    (tmp_path / "loop.yaml").write_text("a: &a [1, *a]\n")
    with pytest.raises(ValueError, match="loop.yaml: a recursive alias"):
        read_config_file(tmp_path / "loop.yaml")
    (tmp_path / "big.yaml").write_text("a: " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ValueError, match="big.yaml: .* bytes; a config file may have at most"):
        read_config_file(tmp_path / "big.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ValueError, match="bad.yaml: not valid YAML"):
        read_config_file(tmp_path / "bad.yaml")
    import yaml

    for path in sorted(configs.glob("*.yaml")):  # every shipped config reads as yaml.safe_load reads it
        assert read_config_file(path) == yaml.safe_load(path.read_text())
    root, key_and_list = 1, 1 + 3
    assert (
        expanded_size(yaml.compose("a: &x [1, 2]\nb: *x\n")) == root + 2 * key_and_list
    )  # the alias counts again


def test_the_address_space_cap_is_what_stops_an_allocation():
    """The harness itself: an allocation past the cap fails in the child (so a late refusal could not pass)."""
    code = (
        "import torch\n"
        + CAP
        + (
            "torch.ones(2**28, dtype=torch.uint8)\n"  # 256 MiB: within the headroom
            "print('within', flush=True)\n"
            "torch.ones(2**32, dtype=torch.uint8)\n"  # 4 GiB: past it
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(HEADROOM)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "within" and done.returncode != 0
    assert "MemoryError" in done.stderr or "DefaultCPUAllocator" in done.stderr, done.stderr[-500:]
