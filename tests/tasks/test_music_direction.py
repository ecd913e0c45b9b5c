"""Parts and controls through the command line: a model trained on music21 collections with both,
directed by --style/--key/--meter, writing one named track per part."""

from __future__ import annotations

import shutil
from pathlib import Path

import pretty_midi
import pytest
import torch

from multimodal.data import music21_corpus
from multimodal.data.music21_corpus import music21_corpus_dir
from multimodal.music import parse_controls, primer_ids
from tasks.checkpoint import load_task
from tasks.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CHORALES = ["bwv269.mxl", "bwv347.mxl", "bwv86.6.mxl", "bwv263.mxl", "bwv1.6.mxl", "bwv10.7.mxl", "bwv101.7.mxl",
            "bwv102.7.mxl", "bwv104.6.mxl", "bwv11.6.mxl"]  # fmt: skip (the last two held out at 30 %)
SATB = ["Soprano", "Alto", "Tenor", "Bass"]


@pytest.fixture
def chorales(tmp_path, monkeypatch):
    """music21's corpus cut to a few chorales, a cache of its own, the working folder in tmp_path."""
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "corpus"
    (root / "bach").mkdir(parents=True)
    for name in CHORALES:
        shutil.copy(music21_corpus_dir() / "bach" / name, root / "bach" / name)
    monkeypatch.setattr(music21_corpus, "music21_corpus_dir", lambda: root)
    monkeypatch.chdir(tmp_path)
    return root


def test_a_model_with_parts_and_controls_is_directed_from_the_command_line(chorales, tmp_path, capsys):
    fit = ["fit", "--config", CONFIGS / "music_continuation.yaml", "--config", CONFIGS / "music_continuation_tiny.yaml",
           "--data.init_args.collections=[bach]", "--data.init_args.num_parts=4", "--data.init_args.controls=true",
           f"--data.init_args.part_names=[{','.join(SATB)}]", "--data.init_args.validation_percent=30",
           "--data.init_args.test_percent=0", "--trainer.limit_val_batches=1",
           "--run_name", "directed"]  # fmt: skip
    main([str(arg) for arg in fit])
    checkpoint = tmp_path / "outputs/music_continuation/lightning_logs/directed/checkpoints/last.ckpt"
    task, tokenizer, data = load_task(checkpoint)
    assert tokenizer.config.num_parts == 4 and tokenizer.config.controls and data["collections"] == ["bach"]
    assert task.config.vocab_size == tokenizer.vocab_size == 3 + 100 + 32 + 4 * 128 + 200 + 6 + 25 + 11 + 9

    out = tmp_path / "directed"
    main(["generate", "--checkpoint", str(checkpoint), "--out", str(out), "--primer-seconds", "0", "--style", "chorale",
          "--key", "G minor", "--meter", "3/4", "--max-new-tokens", "48", "--seed", "0", "--no-audio"])  # fmt: skip
    assert "nothing" in capsys.readouterr().out
    midi = pretty_midi.PrettyMIDI(str(out / "sample_0.mid"))
    assert midi.instruments and all(track.name in SATB for track in midi.instruments)  # one named track per part
    assert [track.name for track in midi.instruments] == [name for name in SATB if name in
                                                          {track.name for track in midi.instruments}]  # in part order

    asked = parse_controls("chorale", "G minor", "3/4")
    prompt = primer_ids(torch.empty(0, 4).numpy(), tokenizer, 0, asked)
    assert prompt == [tokenizer.bos_id, *tokenizer.control_ids(asked)] and tokenizer.controls_in(prompt) == asked

    import gradio as gr

    from tasks.serve.music import NOTHING, MusicSession

    session = MusicSession(task, tokenizer, data)  # the serve page's fields
    wav, roll, midi_path, message = session.continue_primer(NOTHING, None, 3.0, 32, 1.0, 0.95, 0, style="chorale",
                                                            key="G minor", meter="", density=None)  # fmt: skip
    assert "from nothing" not in message and "nothing" in message and "key=G minor" in message
    assert Path(wav).is_file() and Path(roll).is_file() and Path(midi_path).is_file()
    with pytest.raises(gr.Error, match="key 'H major'"):
        session.continue_primer(NOTHING, None, 3.0, 32, 1.0, 0.95, 0, key="H major")

    from music21 import converter

    primer = tmp_path / "bwv269.mid"  # four tracks, as music21 writes a chorale
    converter.parse(chorales / "bach" / "bwv269.mxl").write("midi", fp=primer)
    main(["generate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "continued"), "--primer", str(primer),
          "--primer-seconds", "3", "--max-new-tokens", "16", "--no-audio"])  # fmt: skip
    continued = pretty_midi.PrettyMIDI(str(tmp_path / "continued/sample_0.mid"))
    assert [track.name for track in continued.instruments] == SATB  # the primer's voices, read part by part


def test_controls_asked_of_a_model_without_them_and_bad_values_are_one_line(chorales, tmp_path, capsys, monkeypatch):
    from tests.tasks.test_reliability import one_line_error

    fit = ["fit", "--config", CONFIGS / "music_continuation.yaml", "--config", CONFIGS / "music_continuation_tiny.yaml",
           "--trainer.limit_val_batches=1", "--data.init_args.limit=6", "--run_name", "plain"]
    main([str(arg) for arg in fit])
    checkpoint = tmp_path / "outputs/music_continuation/lightning_logs/plain/checkpoints/last.ckpt"
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "x", "--key", "D major"],
                          capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --key: this model was trained without controls")
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "x", "--style", "jazz"],
                          capsys, monkeypatch)  # fmt: skip
    assert "--style" in line and "unknown style 'jazz'" in line
    assert not (tmp_path / "x").exists()

    import gradio as gr

    from tasks.serve.music import MusicSession

    task, tokenizer, data = load_task(checkpoint)
    session = MusicSession(task, tokenizer, data)
    with pytest.raises(gr.Error, match="trained without controls"):
        session.continue_primer(next(iter(session.pieces)), None, 3.0, 32, 1.0, 0.95, 0, style="chorale")
