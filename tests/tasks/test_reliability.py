"""Bad input ends in one line, ``error: <file or option>: <reason>``, with exit status 2; nothing is
overwritten unasked; a checkpoint never chooses code to import. Each case is listed in docs/reliability.md."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from multimodal.tokenizers.midi import MidiTokenizer
from multimodal.tokenizers.text import TextTokenizer
from tasks.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MUSIC = ["--config", str(CONFIGS / "music_continuation.yaml"), "--config", str(CONFIGS / "music_continuation_tiny.yaml")]
TEXT = ["--config", str(CONFIGS / "text_lm.yaml"), "--config", str(CONFIGS / "text_lm_tiny.yaml")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny trained music and text checkpoints."""
    folder = tmp_path_factory.mktemp("runs")
    previous = os.getcwd()
    os.chdir(folder)
    try:
        main(["fit", *MUSIC, "--trainer.max_steps", "1"])
        main(["fit", *TEXT, "--trainer.max_steps", "1"])
    finally:
        os.chdir(previous)
    return {"music": folder / "outputs/music_continuation/lightning_logs/version_0/checkpoints/last.ckpt",
            "text": folder / "outputs/text_lm/lightning_logs/version_0/checkpoints/last.ckpt"}  # fmt: skip


def one_line_error(argv, capsys, monkeypatch) -> str:
    """Runs ``multimodal ARGV`` as a user would (no traceback) and returns its one error line."""
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([str(arg) for arg in argv])
    assert exit_.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "Traceback" not in "\n".join(lines)
    return lines[-1]


@pytest.mark.parametrize("content", [b"", b"MThd\x00\x00", bytes(range(256)) * 4], ids=["empty", "truncated", "random"])
def test_a_broken_midi_primer_is_named_in_one_line(runs, tmp_path, capsys, monkeypatch, content):
    primer = tmp_path / "primer.mid"
    primer.write_bytes(content)
    line = one_line_error(["generate", "--checkpoint", runs["music"], "--primer", primer, "--out", tmp_path / "o"],
                          capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: ") and str(primer) in line and "MIDI" in line


def test_a_folder_as_primer_and_a_primer_without_notes_are_refused(runs, tmp_path, capsys, monkeypatch):
    line = one_line_error(["generate", "--checkpoint", runs["music"], "--primer", tmp_path, "--out", tmp_path / "o"],
                          capsys, monkeypatch)  # fmt: skip
    assert str(tmp_path) in line and "no MIDI file" in line  # a folder of primers, with none in it
    import pretty_midi

    drums = pretty_midi.PrettyMIDI()
    kit = pretty_midi.Instrument(0, is_drum=True)
    kit.notes = [pretty_midi.Note(100, 36, 0.0, 0.1)]
    drums.instruments.append(kit)
    drums.write(str(tmp_path / "drums.mid"))
    line = one_line_error(["generate", "--checkpoint", runs["music"], "--primer", tmp_path / "drums.mid", "--out",
                           tmp_path / "o"], capsys, monkeypatch)  # fmt: skip
    assert "drums.mid" in line and "no note" in line


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04broken", b"not a checkpoint at all"], ids=["empty", "zip", "text"])
def test_a_broken_checkpoint_is_named_in_one_line(tmp_path, capsys, monkeypatch, content):
    checkpoint = tmp_path / "broken.ckpt"
    checkpoint.write_bytes(content)
    for argv in (["generate", "--checkpoint", checkpoint], ["perplexity", "--checkpoint", checkpoint, "x.txt"],
                 ["sample-stats", "--checkpoint", checkpoint], ["export", "--checkpoint", checkpoint, "--out", tmp_path]):  # fmt: skip
        line = one_line_error(argv, capsys, monkeypatch)
        assert line.startswith("error: ") and "broken.ckpt" in line


@pytest.mark.parametrize(("option", "value"), [("--top-p", "0"), ("--top-p", "1.5"), ("--temperature", "-1"),
                                               ("--top-k", "-3"), ("--num-samples", "0"), ("--primer-seconds", "-2"),
                                               ("--max-new-tokens", "-1")])  # fmt: skip
def test_sampling_values_are_checked_before_any_work(runs, tmp_path, capsys, monkeypatch, option, value):
    line = one_line_error(["generate", "--checkpoint", runs["music"], "--out", tmp_path / "o", option, value],
                          capsys, monkeypatch)  # fmt: skip
    assert option in line and value in line
    assert not (tmp_path / "o").exists()


def test_the_library_refuses_meaningless_sampling_settings():
    from multimodal.generation import sample_next

    logits = torch.randn(2, 9)
    for settings in ({"temperature": -0.5}, {"top_p": 0.0}, {"top_p": 2.0}, {"top_k": -1}):
        with pytest.raises(ValueError, match=next(iter(settings))):
            sample_next(logits, **settings)


def test_data_options_are_checked_when_the_run_is_built(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_line_error(["fit", *MUSIC, "--data.init_args.seq_len", "0"], capsys, monkeypatch)
    assert "seq_len=0" in line
    line = one_line_error(["fit", *MUSIC, "--data.init_args.validation_percent", "60",
                           "--data.init_args.test_percent", "40"], capsys, monkeypatch)  # fmt: skip
    assert "nothing to train on" in line


def test_broken_yaml_and_missing_files_are_one_line(runs, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    line = one_line_error(["fit", "--config", bad], capsys, monkeypatch)
    assert "bad.yaml" in line
    line = one_line_error(["perplexity", "--checkpoint", runs["text"], tmp_path / "missing.txt"], capsys, monkeypatch)
    assert "missing.txt" in line
    empty = tmp_path / "empty.txt"
    empty.write_text("   \n")
    line = one_line_error(["perplexity", "--checkpoint", runs["text"], empty], capsys, monkeypatch)
    assert "no text to score" in line


def test_an_existing_output_is_not_replaced_unless_asked(runs, tmp_path, capsys, monkeypatch):
    out = tmp_path / "story.txt"
    out.write_text("my own notes, not a sample\n")
    line = one_line_error(["generate", "--checkpoint", runs["text"], "--max-new-tokens", "4", "--out", out],
                          capsys, monkeypatch)  # fmt: skip
    assert str(out) in line and "--overwrite" in line
    assert out.read_text() == "my own notes, not a sample\n"
    main(["generate", "--checkpoint", str(runs["text"]), "--max-new-tokens", "4", "--out", str(out), "--overwrite"])
    assert out.read_text() != "my own notes, not a sample\n"
    main(["generate", "--checkpoint", str(runs["music"]), "--max-new-tokens", "8", "--out", str(tmp_path / "m"),
          "--no-audio"])  # fmt: skip
    line = one_line_error(["generate", "--checkpoint", runs["music"], "--max-new-tokens", "8", "--out", tmp_path / "m",
                           "--no-audio"], capsys, monkeypatch)  # fmt: skip
    assert "sample_0.mid" in line


def test_a_checkpoint_cannot_choose_the_task_or_import_code(runs, tmp_path, capsys, monkeypatch):
    checkpoint = torch.load(runs["music"], weights_only=True)
    checkpoint["multimodal"]["task"] = "this.Zen"  # a module whose import has an effect
    planted = tmp_path / "planted.ckpt"
    torch.save(checkpoint, planted)
    monkeypatch.chdir(tmp_path)
    line = one_line_error(["validate", *MUSIC, "--ckpt_path", planted], capsys, monkeypatch)
    assert "refusing to import 'this.Zen'" in line
    assert "Zen of Python" not in capsys.readouterr().out
    line = one_line_error(["generate", "--checkpoint", planted], capsys, monkeypatch)
    assert "this.Zen" in line
    # Another task's checkpoint does not replace the config's task.
    line = one_line_error(["validate", *MUSIC, "--ckpt_path", runs["text"]], capsys, monkeypatch)
    assert "LanguageModeling checkpoint" in line and "MusicContinuation" in line
    line = one_line_error(["validate", *MUSIC, "--ckpt_path", runs["music"], "--weights_only", "false"],
                          capsys, monkeypatch)  # fmt: skip
    assert "--weights_only" in line and "unpickling" in line


def test_tokenizers_refuse_ids_that_are_not_theirs():
    midi = MidiTokenizer()
    with pytest.raises(ValueError, match="integers"):
        midi.decode(np.array([3.5, 4.0]))
    with pytest.raises(ValueError, match="vocabulary"):
        midi.decode([midi.vocab_size])
    text = TextTokenizer.train(["some text to learn from"] * 3, vocab_size=270)
    for ids, match in (([text.vocab_size], "lie in"), ([-1], "lie in"), ([1.0], "integers")):
        with pytest.raises(ValueError, match=match):
            text.decode(ids)


def test_images_for_super_resolution_are_checked_and_deep_images_rescaled(tmp_path, capsys, monkeypatch):
    from PIL import Image

    from multimodal.data.image_folder import to_mode

    deep = Image.fromarray((np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000).astype(np.uint16))
    assert deep.mode.startswith("I;16")
    grey = np.asarray(to_mode(deep, "L"))
    assert grey.max() == round(63000 / 257) and (grey < 255).all()  # not clipped to white
    floats = Image.fromarray(np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8), mode="F")
    assert np.asarray(to_mode(floats, "RGB"))[..., 0].tolist()[-1][-1] == 255

    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(CONFIGS / "super_resolution.yaml"), "--config", str(CONFIGS / "super_resolution_tiny.yaml"),
          "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1"])  # fmt: skip
    last = next((tmp_path / "outputs/super_resolution/lightning_logs/version_0/checkpoints").glob("last*.ckpt"))
    (tmp_path / "noise.png").write_bytes(bytes(range(256)))
    Image.fromarray(np.zeros((1, 1, 3), dtype=np.uint8)).save(tmp_path / "dot.png")
    for argv, expected in ((["--input", tmp_path], "folder"), (["--input", tmp_path / "noise.png"], "not a readable image"),
                           (["--input", tmp_path / "dot.png", "--evaluate"], "too small")):  # fmt: skip
        line = one_line_error(["generate", "--checkpoint", last, "--out", tmp_path / "o", *argv], capsys, monkeypatch)
        assert expected in line
