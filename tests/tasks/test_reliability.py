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


def test_a_file_that_is_not_a_soundfont_is_refused_before_generating(runs, tmp_path, capsys, monkeypatch):
    text = tmp_path / "piano.sf2"
    text.write_text("not a SoundFont\n")
    out = tmp_path / "o"
    for soundfont, reason in [(text, "no RIFF sfbk header"), (tmp_path / "absent.sf2", "No such file")]:
        line = one_line_error(["generate", "--checkpoint", runs["music"], "--max-new-tokens", "8", "--out", out,
                               "--soundfont", soundfont], capsys, monkeypatch)  # fmt: skip
        assert line.startswith(f"error: {soundfont}: not a readable SoundFont (") and reason in line
    assert not out.exists()  # refused before anything was generated or written
    main(["generate", "--checkpoint", str(runs["music"]), "--max-new-tokens", "8", "--out", str(out),
          "--soundfont", "sine"])  # fmt: skip
    assert (out / "sample_0.wav").is_file()


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


def test_a_checkpoint_may_name_only_a_registered_task_class(runs, tmp_path, capsys, monkeypatch):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.json").write_text("the user's own file\n")
    checkpoint = torch.load(runs["music"], weights_only=True)
    # Functions under tasks.: the CLI's entry point told to export over the victim folder, and the export itself.
    for task, hyper_parameters in [
        ("tasks.cli.main", {"argv": ["export", "--checkpoint", str(runs["music"]), "--out", str(victim), "--overwrite"]}),
        ("tasks.commands.export.export_model_folder", {"checkpoint": str(runs["music"]), "out": str(victim)}),
        ("tasks.base.Task", checkpoint["hyper_parameters"]),  # the base class is no registered task either
    ]:
        planted = {**checkpoint, "multimodal": {**checkpoint["multimodal"], "task": task}, "hyper_parameters": hyper_parameters}
        path = tmp_path / "planted.ckpt"
        torch.save(planted, path)
        line = one_line_error(["perplexity", "--checkpoint", path, tmp_path / "missing.mid"], capsys, monkeypatch)
        assert f"refusing to import {task!r}" in line and "registered task" in line
        line = one_line_error(["validate", *MUSIC, "--ckpt_path", path], capsys, monkeypatch)
        assert f"refusing to import {task!r}" in line
    assert sorted(path.name for path in victim.iterdir()) == ["config.json"]
    assert (victim / "config.json").read_text() == "the user's own file\n"


@pytest.mark.parametrize("where", ["optimizer", "optimizer_string", "callback", "instantiator"])
def test_no_class_path_from_a_file_is_imported_unless_trusted(runs, tmp_path, capsys, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    checkpoint = torch.load(runs["music"], weights_only=True)
    zen = {"class_path": "this.Zen"}
    if where in ("optimizer", "optimizer_string", "instantiator"):
        key, value = {"optimizer": ("optimizer", zen), "optimizer_string": ("optimizer", "this.Zen"),
                      "instantiator": ("_instantiator", "this.Zen")}[where]  # fmt: skip
        checkpoint["hyper_parameters"][key] = value
        planted = tmp_path / "planted.ckpt"
        torch.save(checkpoint, planted)
        for argv in (["validate", *MUSIC, "--ckpt_path", planted], ["generate", "--checkpoint", planted]):
            line = one_line_error(argv, capsys, monkeypatch)
            assert "refusing to import 'this.Zen'" in line
            assert "Zen of Python" not in capsys.readouterr().out
    # The same class paths in a config file: refused before LightningCLI reads it.
    config = tmp_path / "zen.yaml"
    config.write_text({"optimizer": "model:\n  init_args:\n    optimizer:\n      class_path: this.Zen\n",
                       "optimizer_string": "model:\n  init_args:\n    optimizer: this.Zen\n",
                       "callback": "trainer:\n  callbacks:\n    - class_path: this.Zen\n",
                       "instantiator": "model:\n  init_args:\n    _instantiator: this.Zen\n"}[where])  # fmt: skip
    line = one_line_error(["fit", *MUSIC, "--config", config], capsys, monkeypatch)
    assert "zen.yaml" in line and "refusing to import 'this.Zen'" in line
    assert "Zen of Python" not in capsys.readouterr().out


@pytest.mark.parametrize("tokenizer_class", ["json.JSONDecoder", "multimodal.tokenizers.midi.torch",
                                             "multimodal.tokenizers.midi.notes_from_midi", "multimodal.tokenizersx.T"])
def test_a_checkpoint_names_only_a_tokenizer_class_of_ours(runs, tmp_path, capsys, monkeypatch, tokenizer_class):
    checkpoint = torch.load(runs["music"], weights_only=True)
    checkpoint["multimodal"]["tokenizer_class"] = tokenizer_class
    planted = tmp_path / "planted.ckpt"
    torch.save(checkpoint, planted)
    line = one_line_error(["generate", "--checkpoint", planted], capsys, monkeypatch)
    assert str(planted) in line and tokenizer_class in line
    assert "tmp" not in line.replace(str(tmp_path), "")  # the user's file, not a scratch copy


def test_a_users_own_package_can_be_trusted_by_name(monkeypatch):
    from multimodal.class_paths import check_config_class_paths

    config = {"trainer": {"callbacks": [{"class_path": "my_lab.callbacks.Probe"}]}}
    with pytest.raises(ValueError, match="my_lab.callbacks.Probe"):
        check_config_class_paths(config, "lab.yaml")
    monkeypatch.setenv("MULTIMODAL_TRUSTED_PACKAGES", "my_lab")
    check_config_class_paths(config, "lab.yaml")
    with pytest.raises(ValueError, match="my_labs"):  # a package, not a prefix of a name
        check_config_class_paths({"optimizer": "my_labs.Evil"}, "lab.yaml")


def test_export_refuses_a_run_config_that_links_outside_the_run(runs, tmp_path, capsys, monkeypatch):
    import shutil

    run = tmp_path / "outputs/lightning_logs/version_0"
    shutil.copytree(runs["music"].parents[1], run)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for sharing\n")
    (run / "config.yaml").unlink(missing_ok=True)
    (run / "config.yaml").symlink_to(secret)
    out = tmp_path / "exported"
    line = one_line_error(["export", "--checkpoint", run / "checkpoints/last.ckpt", "--out", out], capsys, monkeypatch)
    assert "config.yaml" in line and "outside the run folder" in line
    assert not out.exists()
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to(run / "hparams.yaml" if (run / "hparams.yaml").exists() else secret)
    if (run / "hparams.yaml").exists():  # a link inside the run folder is the run's own file
        main(["export", "--checkpoint", str(run / "checkpoints/last.ckpt"), "--out", str(out)])
        assert (out / "training_config.yaml").read_text() == (run / "hparams.yaml").read_text()


def test_paths_inside_a_model_folder_are_not_followed(runs, tmp_path, monkeypatch):
    import json
    import shutil

    from multimodal.data.midi_cache import default_cache_dir

    folder = tmp_path / "model"
    main(["export", "--checkpoint", str(runs["music"]), "--out", str(folder)])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(_one_midi_file(tmp_path), elsewhere / "piece.mid")
    meta = json.loads((folder / "config.json").read_text())
    meta["data"] = {**meta.get("data", {}), "midi_dir": str(elsewhere)}
    (folder / "config.json").write_text(json.dumps(meta))
    before = sorted(elsewhere.rglob("*"))
    main(["generate", "--checkpoint", str(folder), "--max-new-tokens", "8", "--out", str(tmp_path / "out"), "--no-audio"])
    assert sorted(elsewhere.rglob("*")) == before
    assert not default_cache_dir(elsewhere).exists()
    assert list((tmp_path / "out").glob("*.mid"))


def _one_midi_file(folder: Path) -> Path:
    import pretty_midi

    midi = pretty_midi.PrettyMIDI()
    piano = pretty_midi.Instrument(program=0)
    piano.notes.append(pretty_midi.Note(velocity=80, pitch=60, start=0.0, end=1.0))
    midi.instruments.append(piano)
    path = folder / "one.mid"
    midi.write(str(path))
    return path


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


def test_a_checkpoints_model_config_must_fit_its_weights_before_the_task_builds_it(runs, tmp_path, capsys, monkeypatch):
    checkpoint = torch.load(runs["music"], weights_only=True)
    checkpoint["hyper_parameters"]["model"]["num_layers"] = 1_000_000
    planted = tmp_path / "planted.ckpt"
    torch.save(checkpoint, planted)
    for command in ("generate", "perplexity"):
        line = one_line_error([command, "--checkpoint", planted, tmp_path / "x.mid"][: 3 if command == "generate" else 4],
                              capsys, monkeypatch)  # fmt: skip
        assert str(planted) in line and "num_layers=1000000" in line


class _Planted:
    """Unpickling this runs ``Path.touch`` on a marker file: the code a crafted pickle would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_crafted_pickle_is_never_unpickled(runs, tmp_path, capsys, monkeypatch):
    import pickle

    marker = tmp_path / "code-ran"
    checkpoint = torch.load(runs["music"], weights_only=True)
    checkpoint["hyper_parameters"]["planted"] = _Planted(marker)
    planted = tmp_path / "planted.ckpt"
    torch.save(checkpoint, planted, pickle_module=pickle)
    for argv in (["generate", "--checkpoint", planted], ["export", "--checkpoint", planted, "--out", tmp_path / "e"],
                 ["validate", *MUSIC, "--ckpt_path", planted]):  # fmt: skip
        line = one_line_error(argv, capsys, monkeypatch)
        assert "planted.ckpt" in line and "not a readable checkpoint" in line
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        __import__("multimodal").load(planted)
    assert not marker.exists()


def test_text_generate_refuses_a_folder_as_its_out_file(runs, tmp_path, capsys, monkeypatch):
    line = one_line_error(["generate", "--checkpoint", runs["text"], "--max-new-tokens", "2", "--out", tmp_path,
                           "--overwrite"], capsys, monkeypatch)  # fmt: skip
    assert str(tmp_path) in line and "folder" in line
