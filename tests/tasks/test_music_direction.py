"""Parts and controls through the command line: a model trained on music21 collections with both,
directed by --style/--key/--meter, writing one named track per part."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mido
import numpy as np
import pretty_midi
import pytest
import torch

from multimodal.data import music21_corpus
from multimodal.data.music21_corpus import music21_corpus_dir
from multimodal.music import parse_controls, primer_ids
from multimodal.music.voice_leading import voice_leading
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


def test_a_model_with_parts_and_controls_is_directed_from_the_command_line(chorales, tmp_path, capsys, monkeypatch):
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
    main(["generate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "guided"), "--primer-seconds", "0",
          "--key", "G minor", "--guidance-scale", "3", "--max-new-tokens", "48", "--seed", "0", "--no-audio"])  # fmt: skip
    assert (tmp_path / "guided" / "sample_0.mid").is_file()
    main(["generate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "leaning"), "--primer-seconds", "0",
          "--key", "G minor", "--key-emphasis", "40", "--max-new-tokens", "48", "--seed", "0", "--no-audio"])  # fmt: skip
    leaning = [n.pitch % 12 for t in pretty_midi.PrettyMIDI(str(tmp_path / "leaning/sample_0.mid")).instruments
               for n in t.notes]  # fmt: skip
    assert leaning and set(leaning) <= {7, 10, 2}  # 40 nats on G, B-flat, D: no other pitch is written
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
    with pytest.raises(gr.Error, match="choose a key"):
        session.continue_primer(NOTHING, None, 3.0, 32, 1.0, 0.95, 0, key="", key_emphasis=1.0)
    *_, message = session.continue_primer(NOTHING, None, 3.0, 32, 1.0, 0.95, 0, key="D major", key_emphasis=1.0)
    assert "key=D major" in message

    from music21 import converter

    primer = tmp_path / "bwv269.mid"  # four tracks, as music21 writes a chorale
    converter.parse(chorales / "bach" / "bwv269.mxl").write("midi", fp=primer)
    main(["generate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "continued"), "--primer", str(primer),
          "--primer-seconds", "3", "--max-new-tokens", "16", "--no-audio"])  # fmt: skip
    continued = pretty_midi.PrettyMIDI(str(tmp_path / "continued/sample_0.mid"))
    assert [track.name for track in continued.instruments] == SATB  # the primer's voices, read part by part

    # bars by the file's meter and tempo, worked out from its one time signature and tempo (mido)
    metas = [m for track in mido.MidiFile(str(primer)).tracks for m in track if m.type in ("time_signature", "set_tempo")]
    ((numerator, denominator),) = {(m.numerator, m.denominator) for m in metas if m.type == "time_signature"}
    (tempo,) = {m.tempo for m in metas if m.type == "set_tempo"}
    bar = numerator * 4 / denominator * tempo / 1e6
    original = pretty_midi.PrettyMIDI(str(primer))
    music21_names = [t.name for t in original.instruments]
    for span, (start, end) in [(("2s", "5"), (2.0, 5.0)), (("bar2", "bar3"), (bar, 2 * bar))]:
        capsys.readouterr()
        main(["generate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "filled"), "--primer", str(primer),
              "--infill", *span, "--parts", "tenor", "--no-audio", "--seed", "0", "--max-new-tokens", "64",
              "--overwrite"])  # fmt: skip
        assert f"filled {start:g}-{end:g} s" in capsys.readouterr().out
        filled = pretty_midi.PrettyMIDI(str(tmp_path / "filled/sample_0.mid"))

        def onsets(midi, name, inside, span=(start, end)):
            track = next(t for t in midi.instruments if t.name.lower() == name.lower())
            return sorted((n.pitch, round(n.start, 2)) for n in track.notes
                          if (round(span[0], 2) <= round(n.start, 2) < round(span[1], 2)) == inside)  # fmt: skip

        for voice, music21_name in zip(SATB, music21_names, strict=True):
            assert onsets(filled, voice, False) == onsets(original, music21_name, False)  # outside the span: as it was
            if voice != "Tenor":
                assert onsets(filled, voice, True) == onsets(original, music21_name, True)  # other voices: kept
        tenor = next(t for t in filled.instruments if t.name == "Tenor")
        replaced = next(t for t in original.instruments if t.name == music21_names[2]).notes
        reach = max([end, *(n.end for n in replaced if start <= round(n.start, 2) < end)])  # where the replaced notes rang
        assert all(n.end <= reach + 1e-6 for n in tenor.notes if start <= round(n.start, 2) < end)  # nothing hangs

    tune = pretty_midi.PrettyMIDI()  # a melody the model has never seen, one line
    line = pretty_midi.Instrument(0, name="flute")
    line.notes = [pretty_midi.Note(90, pitch, 0.5 * i, 0.5 * i + 0.5) for i, pitch in enumerate([67, 69, 71, 72, 74, 72, 71, 69])]
    tune.instruments.append(line)
    tune.write(str(tmp_path / "tune.mid"))
    main(["generate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "harmonized"), "--harmonize",
          str(tmp_path / "tune.mid"), "--parts", "alto", "tenor", "4", "--key", "G major", "--seed", "0",
          "--no-audio", "--max-new-tokens", "64", "--guidance-scale", "2", "--avoid-parallels"])  # fmt: skip
    harmonized = pretty_midi.PrettyMIDI(str(tmp_path / "harmonized/sample_0.mid"))
    parts = [[n.pitch, n.start, n.end, 80, SATB.index(t.name)] for t in harmonized.instruments for n in t.notes]
    counts = voice_leading(np.array(parts, dtype=float))
    assert counts["fifths"] + counts["octaves"] == 0  # --avoid-parallels reached the decoder
    soprano = next(track for track in harmonized.instruments if track.name == "Soprano")
    assert [(n.pitch, round(n.start, 2), round(n.end, 2)) for n in soprano.notes] == [
        (n.pitch, n.start, n.end) for n in line.notes]  # fmt: skip
    assert {track.name for track in harmonized.instruments} <= set(SATB)
    assert (tmp_path / "harmonized/sample_0.png").is_file()
    *_, message = session.continue_primer(None, str(tmp_path / "tune.mid"), 3.0, 32, 1.0, 0.95, 0,
                                          action="harmonize", avoid_parallels=True)  # fmt: skip
    assert "tune.mid: 8 notes kept as the Soprano" in message  # the page's upload, harmonized
    assert session.part_names() == SATB  # the page's choice of parts to write
    *_, midi_path, message = session.continue_primer(None, str(tmp_path / "tune.mid"), 3.0, 32, 1.0, 0.95, 0,
                                                     action="harmonize", parts=["Bass", "Alto"])  # fmt: skip
    assert message.endswith("the model wrote Bass, Alto.")
    assert {t.name for t in pretty_midi.PrettyMIDI(midi_path).instruments if t.notes} <= {"Soprano", "Alto", "Bass"}
    import gradio as gr

    with pytest.raises(gr.Error, match="Parts Quinto: choose among Soprano, Alto, Tenor, Bass"):
        session.continue_primer(None, str(tmp_path / "tune.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize",
                                parts=["Quinto"])  # fmt: skip
    with pytest.raises(gr.Error, match="Soprano holds the melody: choose the parts to write among Alto, Tenor, Bass"):
        session.continue_primer(None, str(tmp_path / "tune.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize",
                                parts=["Soprano", "Bass"])  # fmt: skip
    # the page fills a gap in bars of the upload, the tenor only: everything else comes back as it was
    *_, midi_path, message = session.continue_primer(None, str(primer), 3.0, 32, 1.0, 0.95, 0, action="infill",
                                                     gap_from="bar2", gap_to="bar3", parts=["Tenor"])  # fmt: skip
    assert message == f"bwv269.mid: {bar:g}-{2 * bar:g} s of Tenor written anew; everything else kept."
    page = pretty_midi.PrettyMIDI(midi_path)
    for voice, music21_name in zip(SATB, music21_names, strict=True):
        assert onsets(page, voice, False, (bar, 2 * bar)) == onsets(original, music21_name, False, (bar, 2 * bar))
    held_out = next(iter(session.pieces))  # a held-out piece has no file: seconds only
    *_, message = session.continue_primer(held_out, None, 3.0, 32, 1.0, 0.95, 0, action="infill", gap_from="1",
                                          gap_to="2s")  # fmt: skip
    assert message == f"held-out piece {held_out}: 1-2 s of every part written anew; everything else kept."
    for gap, reason in [(("bar1", "bar2"), "bars need the MIDI file"), (("2", "1"), "the start must come before"),
                        (("soon", "2"), "'soon' is not a time"), (("500", "600"), "ends before the gap starts")]:  # fmt: skip
        with pytest.raises(gr.Error, match=reason):
            session.continue_primer(held_out, None, 3.0, 32, 1.0, 0.95, 0, action="infill", gap_from=gap[0],
                                    gap_to=gap[1])  # fmt: skip
    with pytest.raises(gr.Error, match="Action 'dance': this model can continue, harmonize, infill"):
        session.continue_primer(held_out, None, 3.0, 32, 1.0, 0.95, 0, action="dance")
    from test_reliability import one_line_error

    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "y", "--harmonize",
                           tmp_path / "tune.mid", "--lookahead", "blocks"], capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --lookahead: this model cannot read a melody 'blocks'")
    assert not (tmp_path / "y").exists()

    # a melody outside the range its part had in training is one line naming the range and an octave that fits
    from tasks.commands import music as music_commands
    from tasks.commands.music import run_pieces

    sopranos = [int(row[0]) for notes in run_pieces(data, "train").notes for row in notes if row[4] == 0]
    low, high = max(min(sopranos) - data["max_transpose"], 0), min(max(sopranos) + data["max_transpose"], 127)
    high_line = pretty_midi.PrettyMIDI()
    high_line.instruments.append(pretty_midi.Instrument(0))
    high_line.instruments[0].notes = [pretty_midi.Note(90, pitch + 24, 0.5 * i, 0.5 * i + 0.5) for i, pitch in
                                      enumerate([67, 69, 71, 72])]  # fmt: skip
    high_line.write(str(tmp_path / "high.mid"))
    expected = (f"error: {tmp_path / 'high.mid'}: its notes go from 91 to 96 (MIDI pitch), outside the range Soprano had "
                f"in the model's training music, {low} to {high}; transposed by -24 semitones it fits")  # fmt: skip
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "z", "--harmonize",
                           tmp_path / "high.mid"], capsys, monkeypatch)  # fmt: skip
    assert line.startswith(expected) and not (tmp_path / "z").exists()
    main(["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "folder")])
    recorded = json.loads((tmp_path / "folder/config.json").read_text())["training_data"]
    assert recorded["part_ranges"][0] == [low, high] and len(recorded["part_ranges"]) == 4
    assert recorded["chord_sizes"] == [1, 1, 1, 1]  # each voice of these chorales sings one note at a time
    with monkeypatch.context() as patch:
        patch.setattr(music_commands, "pieces_at_hand", lambda data: False)  # the folder's record alone
        line = one_line_error(["generate", "--checkpoint", tmp_path / "folder", "--out", tmp_path / "z", "--harmonize",
                               tmp_path / "high.mid"], capsys, patch)  # fmt: skip
    assert line.startswith(expected)
    with pytest.raises(gr.Error, match="outside the range Soprano had in the model's training music"):
        MusicSession(task, tokenizer, data, checkpoint).continue_primer(None, str(tmp_path / "high.mid"), 3.0, 32, 1.0,
                                                                        0.95, 0, action="harmonize")  # fmt: skip


def test_controls_asked_of_a_model_without_them_and_bad_values_are_one_line(chorales, tmp_path, capsys, monkeypatch):
    from test_reliability import one_line_error

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
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "x", "--guidance-scale", "2"],
                          capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --guidance-scale: this model was trained without controls")
    assert not (tmp_path / "x").exists()
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "x", "--harmonize",
                           tmp_path / "none.mid"], capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --harmonize: this model has no parts")
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "x", "--avoid-parallels"],
                          capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --avoid-parallels: a rule of --harmonize and --infill")
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "x", "--lookahead", "blocks"],
                          capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --lookahead: an option of --harmonize")
    line = one_line_error(["generate", "--checkpoint", checkpoint, "--out", tmp_path / "x", "--key-emphasis", "1"],
                          capsys, monkeypatch)  # fmt: skip
    assert line.startswith("error: --key-emphasis: leans towards the --key's tonic chord")

    import gradio as gr

    from tasks.serve.music import MusicSession

    task, tokenizer, data = load_task(checkpoint)
    session = MusicSession(task, tokenizer, data)
    with pytest.raises(gr.Error, match="trained without controls"):
        session.continue_primer(next(iter(session.pieces)), None, 3.0, 32, 1.0, 0.95, 0, style="chorale")
