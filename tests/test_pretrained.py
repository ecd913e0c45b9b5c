"""The music model that ships inside the package: intact, loadable without Lightning, and making chorale-like
music from held-out chorales it never trained on."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from multimodal.data.music import piece_split
from multimodal.data.music21_corpus import load_music21_corpus, music21_corpus_dir
from multimodal.pretrained import HERE, SHIPPED, file_checksums, resolve_model, verify, weights_id
from tasks.cli import main

ROOT = Path(__file__).resolve().parents[1]
FOLDER = HERE / "music"


def test_the_shipped_folder_matches_its_checksums_and_stays_small():
    listed = dict(reversed(line.split("  ")) for line in (FOLDER / "SHA256SUMS").read_text().splitlines())
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(listed)
    assert verify(FOLDER) == [] and file_checksums(FOLDER) == listed
    assert sum(path.stat().st_size for path in FOLDER.iterdir()) < 30 * 2**20


def test_the_weights_id_is_the_start_of_the_weights_file_sha256():
    assert weights_id("music") == hashlib.sha256((FOLDER / "model.safetensors").read_bytes()).hexdigest()[:12]
    with pytest.raises(ValueError, match="not a shipped model"):
        weights_id("poetry")


def test_a_changed_byte_is_caught(tmp_path):
    copy = shutil.copytree(FOLDER, tmp_path / "music")
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    assert verify(copy) == ["model.safetensors"]


def test_load_music_and_generate_need_no_lightning_and_read_half_precision_into_float32(tmp_path):
    """``load('music')`` and ``multimodal generate --model music`` (a model folder) build the model without its
    Lightning task: importing Lightning (and the torchmetrics, transformers and torchvision it pulls in) is
    3-4 s of a command's start; nor do they import music21 (a third of a second) to find its corpus folder."""
    script = ("import sys, torch; from multimodal import load; model, tokenizer = load('music'); "
              "lightning = lambda: any(name.split('.')[0] in ('pytorch_lightning', 'lightning') for name in sys.modules); "
              "assert not lightning(); "
              "assert {p.dtype for p in model.parameters()} == {torch.float32} and not model.training; "
              "assert tokenizer.config.num_parts == 5 and tokenizer.config.controls; "
              "from tasks.cli import main; main(['generate', '--model', 'music', '--out', sys.argv[1], '--max-new-tokens', "
              "'8', '--no-audio', '--seed', '0']); assert not lightning() and 'music21' not in sys.modules; print('ok')")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "ok", done.stderr[-2000:]
    assert (tmp_path / "out" / "sample_0.mid").is_file()


def test_a_shipped_name_resolves_and_a_path_stays_a_path(tmp_path):
    assert resolve_model("music") == FOLDER and set(SHIPPED) == {"music"}
    assert resolve_model(str(tmp_path)) == tmp_path


@pytest.fixture(scope="module")
def held_out_chorales(tmp_path_factory):
    """Up to six chorales of the shipped model's test split, converted from music21's corpus."""
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "bach").mkdir()
    chosen = [path for path in sorted((music21_corpus_dir() / "bach").glob("bwv*.mxl"))
              if piece_split(f"bach/{path.stem}", 10, 10) == "test"][:6]  # fmt: skip
    for path in chosen:
        shutil.copy(path, folder / "bach")
    corpus = load_music21_corpus(["bach"], cache_dir=folder / "cache", corpus_dir=folder, num_parts=5)
    assert len(corpus) >= 4
    return corpus


def test_the_shipped_model_continues_held_out_chorales_like_the_chorales(held_out_chorales):
    from multimodal import load
    from multimodal.music import evaluate_continuations
    from multimodal.music.stats import overlaps

    model, tokenizer = load("music")
    pieces = held_out_chorales
    generated, reference, _ = evaluate_continuations(
        model, tokenizer, pieces.notes, primer_seconds=4.0, max_new_tokens=256, top_p=0.95, seed=0,
        controls=pieces.controls)  # fmt: skip
    found = overlaps(generated, reference)
    # The card reports 8 test chorales' overlaps; a loose bound on these few (a model that ignores
    # the primer, or writes one voice, falls far below).
    assert found["duration"] > 0.6 and found["polyphony"] > 0.6, found


def test_generate_and_models_know_the_shipped_model_by_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))  # no converted collections: from nothing
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--style", "chorale", "--key", "G minor",
          "--max-new-tokens", "48", "--no-audio", "--seed", "0"])  # fmt: skip
    printed = capsys.readouterr().out
    assert "primer: nothing" in printed and (tmp_path / "out" / "sample_0.mid").is_file()
    main(["models"])
    assert "music" in (listing := capsys.readouterr().out) and "checksums match" in listing


def test_the_shipped_models_parts_are_sung_by_the_instruments_asked(tmp_path):
    """A chorale for a choir: every track of the MIDI file (which the WAV plays) carries the asked program."""
    import pretty_midi

    main(["generate", "--model", "music", "--out", str(tmp_path / "choir"), "--style", "chorale", "--primer-seconds",
          "0", "--max-new-tokens", "64", "--seed", "0", "--instruments", "choir aahs"])  # fmt: skip
    tracks = pretty_midi.PrettyMIDI(str(tmp_path / "choir/sample_0.mid")).instruments
    assert len(tracks) >= 2 and {track.program for track in tracks} == {52}
    assert (tmp_path / "choir/sample_0.wav").is_file()


def test_the_parts_are_called_what_the_musician_calls_them(tmp_path, capsys, monkeypatch):
    """--part-names: the MIDI tracks and the score's staves carry the names, and --parts / --melody-part take them."""
    import pretty_midi
    from test_score import read_parts, waltz

    melody = waltz()
    melody.instruments = melody.instruments[:1]
    melody.write(str(tmp_path / "waltz.mid"))
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--harmonize", str(tmp_path / "waltz.mid"),
          "--part-names", "Soprano", "Alto", "Tenor", "Bass", "--parts", "alto", "Bass", "--no-audio", "--seed", "0",
          "--score"])  # fmt: skip
    tracks = {track.name for track in pretty_midi.PrettyMIDI(str(tmp_path / "out" / "sample_0.mid")).instruments}
    assert tracks == {"Soprano", "Alto", "Bass"}  # the two parts asked, by their new names, under the melody
    assert set(read_parts(tmp_path / "out" / "sample_0.musicxml")[0]) == tracks
    assert "(7 notes in Soprano)" in capsys.readouterr().out
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stopped:
        main(["generate", "--model", "music", "--out", str(tmp_path / "bad"), "--harmonize", str(tmp_path / "waltz.mid"),
              "--part-names", "S", "A", "T", "B", "Organ", "Drums"])  # fmt: skip
    assert stopped.value.code == 2 and not (tmp_path / "bad").exists()
    assert capsys.readouterr().err.startswith("error: --part-names: give at most one a part, 5 (this model's parts), not 6")


def test_a_hymns_soprano_is_harmonized_anew_from_its_track(tmp_path, capsys, monkeypatch):
    """--melody-track Soprano (and the page's melody track): the other voices of the file are left out and the model
    writes its own under the soprano, kept note for note; a file of four voices without it is one line naming them."""
    import gradio as gr
    import pretty_midi
    from test_harmonize import satb_file

    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task
    from tasks.serve.music import MusicSession

    soprano = satb_file(tmp_path / "hymn.mid")
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--harmonize", str(tmp_path / "hymn.mid"),
          "--melody-track", "Soprano", "--parts", "2", "3", "4", "--no-audio", "--seed", "0"])  # fmt: skip
    tracks = pretty_midi.PrettyMIDI(str(tmp_path / "out" / "sample_0.mid")).instruments
    written = [(n.pitch, round(n.start, 2), round(n.end, 2)) for n in tracks[0].notes]
    assert tracks[0].name == "Part 1" and written == [(int(p), s, e) for p, s, e, _ in soprano.tolist()]
    session = MusicSession(*load_task(resolve_model("music")), resolve_model("music"))
    *_, page_midi, _, message = session.answer(None, str(tmp_path / "hymn.mid"), 3.0, 32, 1.0, 0.95, 0,
                                               action="harmonize", melody_track="soprano")  # fmt: skip
    assert "4 notes kept as the Part 1" in message
    assert [n.pitch for n in pretty_midi.PrettyMIDI(page_midi).instruments[0].notes] == soprano[:, 0].tolist()
    with pytest.raises(gr.Error, match="or choose as the melody track one of its 4 tracks: 1 Soprano, 2 Alto"):
        session.answer(None, str(tmp_path / "hymn.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize")
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stopped:
        main(["generate", "--model", "music", "--out", str(tmp_path / "bad"), "--harmonize", str(tmp_path / "hymn.mid"),
              "--no-audio"])  # fmt: skip
    said = capsys.readouterr().err
    assert stopped.value.code == 2 and said.startswith("error: ") and said.count("\n") == 1
    assert "or choose with --melody-track one of its 4 tracks: 1 Soprano, 2 Alto, 3 Tenor, 4 Bass" in said


def test_sheet_music_is_harmonized_on_the_command_line_and_the_page(tmp_path, capsys, monkeypatch):
    """An ABC jig with an upbeat and a MusicXML chorale: harmonized from the sheet, the score keeps the upbeat, and
    messages name the file given, not the MIDI file made of it."""
    from xml.etree import ElementTree

    import gradio as gr
    import pretty_midi
    from test_sheet_music import JIG

    from multimodal.music.bars import pickup_quarters
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task
    from tasks.serve.music import MusicSession

    (tmp_path / "jig.abc").write_text(JIG)
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--harmonize", str(tmp_path / "jig.abc"),
          "--parts", "2", "3", "--style", "fiddle", "--no-audio", "--seed", "0", "--score"])  # fmt: skip
    assert f"harmonized {tmp_path / 'jig.abc'} (22 notes in Part 1)" in capsys.readouterr().out
    first = ElementTree.parse(tmp_path / "out" / "sample_0.musicxml").getroot().find("part/measure")
    assert first.get("implicit") == "yes" and first.find("attributes/time/beat-type").text == "8"
    session = MusicSession(*load_task(resolve_model("music")), resolve_model("music"))
    *_, page_midi, page_score, message = session.answer(None, str(tmp_path / "jig.abc"), 3.0, 32, 1.0, 0.95, 0,
                                                        action="harmonize", parts=["Part 2"])  # fmt: skip
    assert message.startswith("jig.abc: 22 notes kept") and Path(page_score).is_file()
    assert pickup_quarters(pretty_midi.PrettyMIDI(page_midi)) == 0.5  # the page's MIDI keeps the jig's upbeat too
    assert ElementTree.parse(page_score).getroot().find("movement-title").text == "jig, harmonized"
    assert ElementTree.parse(Path(page_score).with_suffix(".svg")).getroot().tag.endswith("svg")  # shown engraved
    (tmp_path / "broken.abc").write_text("X:1\nK:C\n[[[")
    with pytest.raises(gr.Error, match="Could not read the upload: broken.abc"):
        session.answer(None, str(tmp_path / "broken.abc"), 3.0, 32, 1.0, 0.95, 0, action="harmonize")
    from music21 import corpus

    corpus.parse("bach/bwv66.6").write("musicxml", fp=str(tmp_path / "chorale.musicxml"))
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    with pytest.raises(SystemExit):
        main(["generate", "--model", "music", "--out", str(tmp_path / "bad"), "--harmonize",
              str(tmp_path / "chorale.musicxml"), "--no-audio"])  # fmt: skip
    said = capsys.readouterr().err
    assert said.startswith(f"error: {tmp_path / 'chorale.musicxml'}: several notes sound together") and "--melody-track" in said


def test_a_melody_above_its_parts_range_is_moved_there_by_transpose(tmp_path, capsys, monkeypatch):
    """The refusal of a melody an octave too high names the --transpose that fits; with it, the melody comes back
    note for note an octave lower, and its key signature moves with it."""
    import mido
    import pretty_midi

    tune = pretty_midi.PrettyMIDI()
    line = pretty_midi.Instrument(0, name="Tune")
    line.notes = [pretty_midi.Note(80, pitch, 0.5 * i, 0.5 * i + 0.5) for i, pitch in enumerate([100, 102, 104, 105, 107])]
    tune.instruments.append(line)
    tune.key_signature_changes = [pretty_midi.KeySignature(pretty_midi.key_name_to_key_number("E major"), 0.0)]
    tune.write(str(tmp_path / "high.mid"))
    argv = ["generate", "--model", "music", "--out", str(tmp_path / "out"), "--harmonize", str(tmp_path / "high.mid"),
            "--parts", "2", "3", "--no-audio", "--seed", "0"]  # fmt: skip
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    with pytest.raises(SystemExit):
        main(argv)
    assert capsys.readouterr().err.rstrip().endswith("transposed by -12 semitones it fits (--transpose -12) "
                                                     "(--debug shows the traceback)")  # fmt: skip
    with pytest.raises(SystemExit):  # a first move that falls short: the rest is counted in
        main([*argv, "--transpose", "-5"])
    assert "transposed by -12 semitones it fits (--transpose -17)" in capsys.readouterr().err
    main([*argv, "--transpose", "-12"])
    written = pretty_midi.PrettyMIDI(str(tmp_path / "out" / "sample_0.mid")).instruments[0].notes
    assert [n.pitch for n in written] == [88, 90, 92, 93, 95]
    keys = [m.key for m in mido.merge_tracks(mido.MidiFile(str(tmp_path / "out" / "sample_0.mid")).tracks)
            if m.type == "key_signature"]  # fmt: skip
    assert keys == ["E"]  # an octave down: the same key
    with pytest.raises(SystemExit):
        main([*argv, "--transpose", "61"])
    assert "argument --transpose: 61 is not in [-60, 60]" in capsys.readouterr().err
    # the page: the same refusal names its box, and the box moves the melody
    import gradio as gr

    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task
    from tasks.serve.music import MusicSession

    session = MusicSession(*load_task(resolve_model("music")), resolve_model("music"))
    with pytest.raises(gr.Error, match="transposed by -12 semitones it fits \\(transpose: -12\\)"):
        session.answer(None, str(tmp_path / "high.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize")
    *_, page_midi, _, _ = session.answer(None, str(tmp_path / "high.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize",
                                         transpose=-12)  # fmt: skip
    assert [n.pitch for n in pretty_midi.PrettyMIDI(page_midi).instruments[0].notes] == [88, 90, 92, 93, 95]
    with pytest.raises(gr.Error, match="transpose \\(semitones\\): expected a whole number, got 1.5"):
        session.answer(None, str(tmp_path / "high.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize", transpose=1.5)


def test_a_harmonized_waltz_comes_with_its_score_in_three_four_at_its_tempo(tmp_path, capsys, monkeypatch):
    """The harmonized MIDI file keeps the tune's tempo (90 a minute) and meter (3/4); --score: the melody stands in
    the MusicXML note for note, in those beats and bars; a score already there is not replaced without --overwrite."""
    import mido
    import pretty_midi
    from test_score import QUARTER, read_parts, waltz

    melody = waltz()
    melody.instruments = melody.instruments[:1]
    melody.write(str(tmp_path / "waltz.mid"))
    argv = ["generate", "--model", "music", "--out", str(tmp_path / "out"), "--harmonize", str(tmp_path / "waltz.mid"),
            "--parts", "2", "3", "4", "--no-audio", "--seed", "0", "--score"]  # fmt: skip
    main(argv)
    notes, firsts = read_parts(tmp_path / "out" / "sample_0.musicxml")
    assert (tmp_path / "out" / "sample_0.svg").read_text().lstrip().startswith("<svg")  # the score engraved
    expected = [(n.pitch, round(n.start / QUARTER, 6), round((n.end - n.start) / QUARTER, 6)) for n in melody.instruments[0].notes]
    assert [(p, round(o, 6), round(q, 6)) for p, o, q in notes["Part 1"]] == expected
    assert len(notes) == 4 and all(first.timeSignature.ratioString == "3/4" for first in firsts)
    # the MIDI file has the waltz's tempo and meter for a sequencer's bars (read with mido), its notes their seconds
    meta = [message for track in mido.MidiFile(str(tmp_path / "out" / "sample_0.mid")).tracks for message in track
            if message.is_meta]  # fmt: skip
    assert [m.tempo for m in meta if m.type == "set_tempo"] == [pytest.approx(mido.bpm2tempo(90), abs=1)]  # µs a beat
    assert [(m.numerator, m.denominator) for m in meta if m.type == "time_signature"] == [(3, 4)]
    written = pretty_midi.PrettyMIDI(str(tmp_path / "out" / "sample_0.mid")).instruments[0].notes
    source = melody.instruments[0].notes
    assert [n.pitch for n in written] == [n.pitch for n in source]
    assert max(abs(w.start - n.start) for w, n in zip(written, source, strict=True)) < 0.006  # onsets: a 10 ms grid
    assert max(abs(w.end - n.end) for w, n in zip(written, source, strict=True)) < 0.026  # lengths: 50 ms steps past 1 s
    # the serve page's harmonization of the same upload keeps them too, and offers its score
    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task
    from tasks.serve.music import MusicSession

    task, tokenizer, data = load_task(resolve_model("music"))
    *_, page_midi, page_score, _ = MusicSession(task, tokenizer, data, resolve_model("music")).answer(
        None, str(tmp_path / "waltz.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize", parts=["Part 2", "Part 3"])
    assert [(signature.numerator, signature.denominator)
            for signature in pretty_midi.PrettyMIDI(page_midi).time_signature_changes] == [(3, 4)]  # fmt: skip
    page_notes, page_firsts = read_parts(page_score)  # the page's score: the melody in its beats, in 3/4
    assert [(p, round(o, 6), round(q, 6)) for p, o, q in page_notes["Part 1"]] == expected
    assert len(page_notes) == 3 and all(first.timeSignature.ratioString == "3/4" for first in page_firsts)
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    for written in (tmp_path / "out").glob("sample_0.*"):  # only the score stands in the way now
        if written.suffix != ".musicxml":
            written.unlink()
    with pytest.raises(SystemExit):
        main(argv)
    assert "sample_0.musicxml: already exists; pass --overwrite" in capsys.readouterr().err


def test_a_hymn_with_an_upbeat_is_barred_from_its_first_full_bar(tmp_path, capsys, monkeypatch):
    """--pickup 1: the score starts with a one-beat upbeat (bar 0) and the melody's downbeat notes open bars 1, 2,
    ...; the MIDI file writes the upbeat as MuseScore does (and --key's signature); --infill's bars count from the
    first full bar; a pickup of a whole bar is one line."""
    from xml.etree import ElementTree

    import mido
    import pretty_midi
    from test_score import QUARTER, file_timing, read_parts

    hymn = pretty_midi.PrettyMIDI(initial_tempo=90)  # G | C' - B | C' - - | D' C' B | C' - -  (3/4, an upbeat)
    line = pretty_midi.Instrument(0, name="Tune")
    for start, length, pitch in [(0, 1, 67), (1, 2, 72), (3, 1, 71), (4, 3, 72), (7, 1, 74), (8, 1, 72), (9, 1, 71),
                                 (10, 3, 72)]:  # fmt: skip
        line.notes.append(pretty_midi.Note(80, pitch, start * QUARTER, (start + length) * QUARTER))
    hymn.instruments.append(line)
    hymn.time_signature_changes = [pretty_midi.TimeSignature(3, 4, 0.0)]
    hymn.write(str(tmp_path / "hymn.mid"))
    main(["generate", "--model", "music", "--out", str(tmp_path / "out"), "--harmonize", str(tmp_path / "hymn.mid"),
          "--parts", "2", "3", "4", "--no-audio", "--seed", "0", "--score", "--pickup", "1", "--key", "G major"])  # fmt: skip
    _, meters, ticks = file_timing(tmp_path / "out" / "sample_0.mid")
    keys = [m.key for m in mido.merge_tracks(mido.MidiFile(str(tmp_path / "out" / "sample_0.mid")).tracks)
            if m.type == "key_signature"]  # fmt: skip
    assert keys == ["G"] and read_parts(tmp_path / "out" / "sample_0.musicxml")[1][0].keySignature.sharps == 1
    assert [(tick / ticks, n, d) for tick, n, d in meters] == [(0, 1, 4), (1, 3, 4)]
    score = ElementTree.parse(tmp_path / "out" / "sample_0.musicxml").getroot()
    measures = score.find("part").findall("measure")
    assert [(m.get("number"), m.get("implicit")) for m in measures[:2]] == [("0", "yes"), ("1", "no")]
    assert score.find("movement-title").text == "hymn, harmonized"
    downbeats = [m.find("note/pitch/step").text + m.find("note/pitch/octave").text for m in measures[1:5]]
    assert downbeats == ["C5", "C5", "D5", "C5"]  # each full bar opens with the melody's downbeat note
    assert read_parts(tmp_path / "out" / "sample_0.musicxml")[0]["Part 1"] == [
        (n.pitch, round(n.start / QUARTER, 6), round((n.end - n.start) / QUARTER, 6)) for n in line.notes]
    main(["generate", "--model", "music", "--out", str(tmp_path / "filled"), "--primer", str(tmp_path / "out" /
          "sample_0.mid"), "--infill", "bar2", "bar3", "--no-audio", "--seed", "0"])  # fmt: skip
    filled = re.search(r"filled ([\d.]+)-([\d.]+) s \(bar2 bar3\)", capsys.readouterr().out)
    assert [float(end) for end in filled.groups()] == pytest.approx([4 * QUARTER, 7 * QUARTER], abs=1e-4)  # its upbeat
    # the page: the same upbeat chosen for the upload, in the MIDI file and the score; a whole bar is refused
    import gradio as gr

    from multimodal.pretrained import resolve_model
    from tasks.checkpoint import load_task
    from tasks.serve.music import MusicSession

    session = MusicSession(*load_task(resolve_model("music")), resolve_model("music"))
    *_, page_midi, page_score, _ = session.answer(None, str(tmp_path / "hymn.mid"), 3.0, 32, 1.0, 0.95, 0,
                                                  action="harmonize", pickup=1)  # fmt: skip
    assert [(m.numerator, m.denominator) for m in pretty_midi.PrettyMIDI(page_midi).time_signature_changes] == [
        (1, 4), (3, 4)]
    assert ElementTree.parse(page_score).getroot().find("part/measure").get("implicit") == "yes"
    with pytest.raises(gr.Error, match="Pickup: 3 beats is not 0 or more and shorter than a bar of 3/4"):
        session.answer(None, str(tmp_path / "hymn.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize", pickup=3)
    with pytest.raises(gr.Error, match="pickup \\(beats\\): expected a number, got 'one'"):
        session.answer(None, str(tmp_path / "hymn.mid"), 3.0, 32, 1.0, 0.95, 0, action="harmonize", pickup="one")
    *_, own_midi, _, _ = session.answer(None, str(tmp_path / "out" / "sample_0.mid"), 3.0, 32, 1.0, 0.95, 0,
                                        action="infill", gap_from="bar2", gap_to="bar3", pickup="")  # fmt: skip
    assert [(m.numerator, m.denominator) for m in pretty_midi.PrettyMIDI(own_midi).time_signature_changes] == [
        (1, 4), (3, 4)]  # the box left empty, as the page sends it: the upload's own upbeat
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stopped:
        main(["generate", "--model", "music", "--out", str(tmp_path / "bad"), "--harmonize", str(tmp_path / "hymn.mid"),
              "--no-audio", "--pickup", "3"])  # fmt: skip
    assert stopped.value.code == 2 and not (tmp_path / "bad").exists()
    assert capsys.readouterr().err.startswith("error: --pickup: 3 beats is not 0 or more and shorter than a bar of 3/4")


def _tune(path: Path, phrases: int) -> Path:
    """A one-line tune the model never trained on, 8.75 s a phrase, written to ``path``."""
    import pretty_midi

    tune, line = pretty_midi.PrettyMIDI(), pretty_midi.Instrument(0, name="flute")
    phrase = [64, 64, 65, 67, 67, 65, 64, 62, 60, 60, 62, 64, 64, 62, 62]
    lengths = [0.5] * 12 + [1.5, 0.25, 1.0]
    start = 0.0
    for pitch, length in zip(phrase * phrases, lengths * phrases, strict=True):
        line.notes.append(pretty_midi.Note(80, pitch, start, start + length))
        start += length
    tune.instruments.append(line)
    tune.write(str(path))
    return path


def _documented_commands(*pages: Path) -> list[str]:
    """The ``multimodal generate --model music`` command lines of ``pages`` that read a file (backslashes joined)."""
    lines = "\n".join(page.read_text() for page in pages).replace("\\\n", " ").splitlines()
    commands = [line.split("multimodal ", 1)[1].split("  #")[0] for line in lines
                if line.lstrip().startswith(("multimodal generate --model music", ".venv/bin/multimodal generate --model music"))]  # fmt: skip
    return [command for command in commands if "--harmonize" in command or "--infill" in command]


def test_the_documented_harmonize_and_infill_commands_of_the_shipped_model_run(tmp_path, capsys, monkeypatch):
    import shlex

    commands = _documented_commands(ROOT / "README.md", ROOT / "docs/pretrained.md")
    assert len(commands) >= 4
    tune = str(_tune(tmp_path / "tune.mid", 2))
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    for number, command in enumerate(commands):
        argv = shlex.split(command)
        argv = [tune if arg.endswith(".mid") else arg for arg in argv]
        argv[argv.index("--out") + 1] = str(tmp_path / str(number))
        main([*argv, "--no-audio", "--seed", "0"])
        assert (tmp_path / str(number) / "sample_0.mid").is_file(), command
        assert "warning" not in capsys.readouterr().err, command


def test_the_documented_python_harmonization_runs(tmp_path, monkeypatch):
    text = (ROOT / "docs/music.md").read_text()
    start = text.index("```python\n", text.index("## Harmonizing a melody")) + len("```python\n")
    block = text[start : text.index("```", start)]
    assert 'chord_sizes=facts["chord_sizes"]' in block and "check_melody_range" in block
    _tune(tmp_path / "tune.mid", 1)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/music.md", "exec"), {})
    assert (tmp_path / "out" / "sample_0.mid").is_file()


def test_the_shipped_model_harmonizes_a_long_tune_to_its_end_and_a_short_budget_is_a_one_line_warning(
        tmp_path, capsys, monkeypatch):  # fmt: skip
    import pretty_midi

    _tune(tmp_path / "tune.mid", 8)  # 70 s
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)  # warnings as users see them
    main(["generate", "--model", "music", "--out", str(tmp_path / "whole"), "--harmonize", str(tmp_path / "tune.mid"),
          "--no-audio", "--seed", "0"])  # fmt: skip
    assert "warning" not in capsys.readouterr().err
    harmonized = pretty_midi.PrettyMIDI(str(tmp_path / "whole/sample_0.mid"))
    others = [note.start for track in harmonized.instruments[1:] for note in track.notes]
    assert harmonized.instruments[0].notes[-1].end == pytest.approx(70.0)
    assert max(others) > 67.0  # the new parts go on to the end (512 new ids, the earlier default, stopped at 38 s)
    main(["generate", "--model", "music", "--out", str(tmp_path / "cut"), "--harmonize", str(tmp_path / "tune.mid"),
          "--no-audio", "--seed", "0", "--max-new-tokens", "40"])  # fmt: skip
    said = capsys.readouterr().err.strip().splitlines()
    assert [line for line in said if "warn" in line.lower()] == [said[0]]  # one line, without Python's source line
    assert said[0].startswith("warning: the new notes stop at ") and "the budget of 40 new ids ran out" in said[0]


@pytest.mark.parametrize("argv, message", [
    (["generate", "--model", "nosuch", "--out", "x"], "--model nosuch: neither a shipped model (music) nor a model folder or checkpoint"),
    (["generate", "--model", "music", "--checkpoint", "x.ckpt"], "--checkpoint, --model: give one of them"),
    (["generate", "--model", "music", "--out", "x", "--instruments", "kazoo"], "--instruments: 'kazoo' is not a General MIDI instrument"),
    (["generate", "--model", "music", "--out", "x", "--instruments", *"123456"], "--instruments: give one for every part or one a part, at most 5"),
])  # fmt: skip
def test_a_bad_model_is_one_line(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)  # the one line users see
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_a_run_with_another_vocabulary_starts_from_the_shipped_blocks():
    """docs/pretrained.md: a MIDI folder's single-part vocabulary takes the blocks alone (init_select: [blocks])."""
    import json

    import torch

    from multimodal import load
    from multimodal.tokenizers.midi_duration import MidiDurationTokenizer
    from tasks.music_continuation import MusicContinuation

    shipped, _ = load("music")
    config = {**json.loads((FOLDER / "config.json").read_text())["model"], "vocab_size": MidiDurationTokenizer().vocab_size}
    task = MusicContinuation(config, finetune={"init_from": "music", "init_select": ["blocks"]})
    task.load_pretrained()
    blocks = dict(shipped.decoder.named_parameters())
    assert blocks and dict(task.model.decoder.named_parameters()).keys() == blocks.keys()
    for name, parameter in task.model.decoder.named_parameters():
        torch.testing.assert_close(parameter, blocks[name], atol=0, rtol=0)
    assert task.model.embedding.weight.shape[0] < shipped.embedding.weight.shape[0]  # its own, fresh


def test_the_shipped_folder_rebuilds_its_task_without_a_weight_source():
    """Exported from a run that started from other weights, the folder names none: its own are whole."""
    meta = json.loads((FOLDER / "config.json").read_text())
    assert meta["task_settings"]["finetune"] is None or meta["task_settings"]["finetune"]["init_from"] is None
