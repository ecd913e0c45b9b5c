"""Transcription: MIDI -> audio -> MIDI through a model that learned a short piece; the CLI from fit to `transcribe`."""

from pathlib import Path

import numpy as np
import pretty_midi
import pytest
import soundfile
import torch
from melodies import melody_folder

from multimodal.audio.synthesis import SoundFontRenderer, bundled_soundfont, write_wav
from multimodal.audio.transcription import note_scores, notes_to_midi, read_audio, transcribe
from multimodal.data.transcription import piece_midi, segment_notes, segment_starts
from multimodal.models.config import TranscriberConfig
from multimodal.models.transcriber import Transcriber
from multimodal.tokenizers.audio import AudioSpectrogramTokenizer
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer, MidiDurationTokenizerConfig
from multimodal.tokenizers.transcription import TranscriptionTokenizer
from tasks.cli import main

pytest.importorskip("tinysoundfont")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_note_scores_match_a_count_by_hand():
    reference = np.array([[60, 0.0, 1.0, 80], [64, 1.0, 2.0, 80], [67, 2.0, 3.0, 80]])
    estimate = np.array([[60, 0.03, 1.0, 80],   # onset 30 ms late, same offset: matches both ways
                         [64, 1.0, 1.3, 80],    # onset right, offset 0.7 s early: onset only
                         [68, 2.0, 3.0, 80],    # wrong pitch
                         [67, 2.08, 3.0, 80]])  # onset 80 ms late: no match  # fmt: skip
    scores = note_scores(reference, estimate)
    assert scores["onset_precision"] == pytest.approx(2 / 4) and scores["onset_recall"] == pytest.approx(2 / 3)
    assert scores["onset_f1"] == pytest.approx(2 * (1 / 2) * (2 / 3) / (1 / 2 + 2 / 3))
    assert scores["offset_precision"] == pytest.approx(1 / 4) and scores["offset_recall"] == pytest.approx(1 / 3)


def _piece() -> np.ndarray:
    """Four seconds of two voices: a scale over a held bass."""
    upper = [[72 + step, 0.5 * step, 0.5 * step + 0.45, 90] for step in (0, 2, 4, 5, 7, 9, 11, 12)]
    lower = [[48, 0.0, 1.9, 90], [55, 2.0, 3.9, 90]]
    notes = np.array(upper + lower, dtype=np.float64)
    return notes[np.lexsort((notes[:, 0], notes[:, 1]))]


def test_round_trip_midi_to_audio_to_midi_through_a_model_that_learned_the_piece(tmp_path):
    """Render, spectrogram, segments, training targets, cached decoding and stitching agree with each other."""
    tokenizer = TranscriptionTokenizer(AudioSpectrogramTokenizer(n_mels=48, n_fft=1024, f_min=30.0),
                                       MidiDurationTokenizer(MidiDurationTokenizerConfig(num_velocity_bins=1)),
                                       segment_seconds=2.0, lookahead_seconds=1.0, max_tokens=64)  # fmt: skip
    notes = _piece()
    rng = np.random.default_rng(0)
    audio = SoundFontRenderer(bundled_soundfont(), 16000)(piece_midi(notes, 0, 90, rng))
    path = write_wav(tmp_path / "piece.wav", audio / audio.abs().max() * 0.9, 16000)
    waveform, rate = read_audio(path)
    spectrogram = tokenizer.audio.spectrogram(waveform, rate)
    tokenizer.audio.mean, tokenizer.audio.std = float(spectrogram.mean()), float(spectrogram.std())
    spectrogram = tokenizer.audio.spectrogram(waveform, rate)
    starts = segment_starts(spectrogram.shape[1] / tokenizer.frames_per_second, 2.0)
    from multimodal.data.transcription import segment_frames

    inputs = torch.stack([segment_frames(spectrogram, s, 3.0, 100.0) for s in starts])
    rows = [[tokenizer.bos_id, *tokenizer.midi.encode_notes(segment_notes(notes, s, 2.0)), tokenizer.eos_id] for s in starts]
    ids = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_id)
    for row, values in enumerate(rows):
        ids[row, : len(values)] = torch.tensor(values)
    torch.manual_seed(0)
    model = Transcriber(TranscriberConfig(dim=64, num_layers=2, encoder_layers=1, num_heads=4, ff_dim=128, dropout=0.0,
                                          n_mels=48, vocab_size=tokenizer.vocab_size, max_seq_len=128))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        optimizer.zero_grad()
        loss = model.loss(inputs, ids, tokenizer.pad_id)
        loss.backward()
        optimizer.step()
    assert float(loss.detach()) < 0.1
    estimate = transcribe(model.eval(), tokenizer, waveform, rate)
    scores = note_scores(notes, estimate)
    assert scores["onset_f1"] >= 0.8 and scores["offset_f1"] >= 0.6, scores


def _wav(path: Path, seconds: float = 3.0) -> Path:
    midi = pretty_midi.PrettyMIDI()
    instrument = pretty_midi.Instrument(program=0)
    instrument.notes += [pretty_midi.Note(90, 60 + step % 5, 0.4 * step, 0.4 * step + 0.35) for step in range(int(seconds / 0.4))]
    midi.instruments.append(instrument)
    audio = SoundFontRenderer(bundled_soundfont(), 16000)(midi)
    return write_wav(path, audio / audio.abs().max() * 0.9, 16000)


def test_cli_fits_a_tiny_model_and_transcribes_files_and_folders(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    main(["fit", "--config", str(CONFIGS / "transcription.yaml"), "--config", str(CONFIGS / "transcription_tiny.yaml"),
          f"--data.pieces={melody_folder(tmp_path / 'tunes')}"])
    run = tmp_path / "outputs/transcription"
    assert (run / "lightning_logs/version_0/checkpoints/last.ckpt").is_file()

    song = _wav(tmp_path / "song.wav")
    folder = tmp_path / "more"
    folder.mkdir()
    data, rate = read_audio(_wav(folder / "tune.wav", 2.0))
    soundfile.write(folder / "tune.flac", data.T.numpy(), rate)  # the same stem twice: tune.mid, tune-2.mid
    (folder / "broken.ogg").write_bytes(b"OggS not really")
    out = tmp_path / "transcribed"
    main(["transcribe", "--checkpoint", str(run), str(song), str(folder), "--out", str(out)])
    captured = capsys.readouterr()
    assert "broken.ogg" in captured.err and "skipping" in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["song.mid", "song.png", "tune-2.mid", "tune-2.png", "tune.mid", "tune.png"]
    assert pretty_midi.PrettyMIDI(str(out / "song.mid")).get_end_time() >= 0  # a readable MIDI file

    monkeypatch.setenv("MULTIMODAL_DEBUG", "0")  # the one-line errors, as users see them

    def fails(argv: list[str]) -> str:
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        return capsys.readouterr().err.strip().splitlines()[-1]

    assert "already exists" in fails(["transcribe", "--checkpoint", str(run), str(song), "--out", str(out)])
    assert "broken.ogg: not a readable audio file" in fails(
        ["transcribe", "--checkpoint", str(run), str(folder / "broken.ogg"), "--out", str(tmp_path / "x")])
    assert "nothing.wav: no such file" in fails(["transcribe", "--checkpoint", str(run), "nothing.wav"])
    assert notes_to_midi(np.zeros((0, 4))).instruments[0].notes == []

    from multimodal import load
    from tasks.checkpoint import load_task
    from tasks.serve.audio import TranscriptionSession

    checkpoint = run / "lightning_logs/version_0/checkpoints/last.ckpt"
    model, tokenizer = load(checkpoint)  # the Python API, without Lightning's task
    expected = [n for i in pretty_midi.PrettyMIDI(str(out / "song.mid")).instruments for n in i.notes]
    audio, rate = read_audio(song)
    assert len(transcribe(model, tokenizer, audio, rate)) == len(expected)
    loaded = load_task(checkpoint)
    midi, roll, message = TranscriptionSession(loaded.task, loaded.tokenizer).transcribe(str(song))
    assert Path(midi).is_file() and Path(roll).is_file() and message.endswith("s of audio.")
    assert TranscriptionSession(loaded.task, loaded.tokenizer).transcribe(str(folder / "broken.ogg"))[:2] == (None, None)
    pytest.importorskip("gradio")
    from tasks.serve import build_page

    assert type(build_page(loaded.task, loaded.tokenizer, loaded.data, checkpoint)).__name__ == "Blocks"
