"""Transcription data: segments and stitching, rendering with its cache, augmentation, the tokenizer file, the items."""

import json

import numpy as np
import pytest
import torch
from melodies import melody_folder

from multimodal.data import transcription
from multimodal.data.music import load_bach_chorales
from multimodal.data.transcription import (
    NO_AUGMENTATION,
    AudioAugmentation,
    reference_notes,
    rendered_pieces,
    segment_frames,
    segment_notes,
    segment_starts,
    stitch,
)
from multimodal.tokenizers.audio import AudioSpectrogramTokenizer
from multimodal.tokenizers.transcription import TranscriptionTokenizer
from tasks.datamodules.transcription import TranscriptionDataModule


def _notes(rows):
    return np.array(rows, dtype=np.float64)


def test_segments_of_every_test_chorale_stitch_back_to_the_piece():
    corpus = load_bach_chorales().split("test")  # the cache the tokenizer tests convert
    assert len(corpus.names) > 10
    for notes in corpus.notes:
        notes = notes[:, :4]
        starts = segment_starts(float(notes[:, 2].max()), 2.0)
        assert starts[0] == 0 and notes[:, 1].max() < starts[-1] + 2.0
        pieces = [segment_notes(notes, start, 2.0) for start in starts]
        assert sum(len(p) for p in pieces) == len(notes)  # every note in exactly one segment
        assert all((p[:, 1] >= 0).all() and (p[:, 1] < 2.0).all() for p in pieces)
        expected = notes[np.lexsort((notes[:, 0], notes[:, 1]))]
        np.testing.assert_allclose(stitch(pieces, starts), expected, atol=1e-9)


def test_segment_starts_and_frames():
    assert segment_starts(5.0, 2.0) == [0.0, 2.0, 4.0]
    assert segment_starts(4.0, 2.0) == [0.0, 2.0]
    assert segment_starts(0.0, 2.0) == [0.0]
    spectrogram = torch.arange(20.0).reshape(2, 10)
    window = segment_frames(spectrogram, 0.6, 0.6, 10.0)  # frames 6..11 of 10: 4 real, 2 of the floor (0)
    assert window.tolist() == [[6, 7, 8, 9, 0, 0], [16, 17, 18, 19, 0, 0]]


def test_reference_notes_merge_doubled_voices_only():
    notes = _notes([[60, 0, 1, 90], [60, 0, 0.5, 80], [60, 1, 2, 90], [64, 0, 1, 90]])
    np.testing.assert_array_equal(reference_notes(notes), _notes([[60, 0, 1, 90], [64, 0, 1, 90], [60, 1, 2, 90]]))


def test_augmentation_draws_a_level_and_keeps_the_length():
    rng = np.random.default_rng(0)
    audio = torch.sin(torch.arange(16000) / 5.0)
    for _ in range(5):
        out = AudioAugmentation(reverb_probability=1.0, noise_probability=1.0)(audio, 16000, rng)
        assert out.shape == audio.shape and 10 ** (-12 / 20) - 1e-6 <= float(out.abs().max()) <= 1 + 1e-6
    plain = NO_AUGMENTATION(audio * 0.3, 16000, rng)
    torch.testing.assert_close(plain, audio / audio.abs().max())


def test_drawn_tempo_is_log_uniform_in_its_range_and_the_default_draws_nothing():
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert AudioAugmentation().draw_tempo(rng) == 1.0 and NO_AUGMENTATION.draw_tempo(rng) == 1.0
    assert rng.bit_generator.state == state  # the default's renderings draw what they drew before tempi existed
    draws = np.array([AudioAugmentation(tempo_range=(0.5, 2.0)).draw_tempo(rng) for _ in range(4000)])
    assert draws.min() >= 0.5 and draws.max() <= 2.0
    # log-uniform on [1/2, 2]: half the draws are slower than the piece (a uniform draw would make a third)
    assert abs(float((draws < 1.0).mean()) - 0.5) < 0.03
    assert abs(float((draws < 2**0.5).mean()) - 0.75) < 0.03
    for bad in [(0.0, 1.0), (2.0, 1.0), (1.0,)]:
        with pytest.raises(ValueError, match="tempo_range"):
            AudioAugmentation(tempo_range=bad)


def test_rendered_pieces_play_each_piece_at_its_drawn_tempo(tmp_path):
    pytest.importorskip("tinysoundfont")
    from multimodal.audio.synthesis import TAIL_SECONDS, bundled_soundfont

    piece = _notes([[60 + 2 * k, 0.5 * k, 0.5 * k + 0.5, 90] for k in range(8)])  # 4 seconds
    faster = AudioAugmentation(level_range_db=0.0, reverb_probability=0.0, noise_probability=0.0, tempo_range=(2.5, 4.0))
    tokenizer = AudioSpectrogramTokenizer(n_mels=16, n_fft=400)
    rendered = rendered_pieces([piece] * 3, bundled_soundfont(), [0], tokenizer, seed=1, augmentation=faster,
                               cache_dir=tmp_path)  # fmt: skip
    factors = []
    for played, spectrogram in zip(rendered.notes, rendered.spectrograms, strict=True):
        factor = 4.0 / played[-1, 2]
        assert 2.5 <= factor <= 4.0
        retimed = piece.copy()
        retimed[:, 1:3] /= factor
        np.testing.assert_allclose(played, retimed)
        # the audio ends with the retimed notes (plus at most the release), not with the 4-second original
        heard = spectrogram.shape[1] / 100 - played[-1, 2]
        assert 0 <= heard <= TAIL_SECONDS + 0.05
        factors.append(factor)
    assert len(set(np.round(factors, 6))) == 3  # each rendering draws its own tempo


def test_rendered_pieces_are_cached_and_a_function_of_the_seed(tmp_path, monkeypatch):
    pytest.importorskip("tinysoundfont")
    from multimodal.audio.synthesis import bundled_soundfont

    pieces = [_notes([[60, 0, 0.5, 90], [64, 0.5, 1.0, 90]]), _notes([[48, 0, 1.5, 90]])]
    tokenizer = AudioSpectrogramTokenizer(n_mels=16, n_fft=400)
    first = rendered_pieces(pieces, bundled_soundfont(), [0, 6], tokenizer, seed=3, cache_dir=tmp_path)
    assert [s.shape[0] for s in first.spectrograms] == [16, 16] and set(first.programs) <= {0, 6}
    assert first.spectrograms[1].shape[1] > 150  # 1.5 s and the release, at 100 frames per second

    class NoRendering:
        def __init__(self, *args):
            raise AssertionError("rendered again instead of reading the cache")

    monkeypatch.setattr("multimodal.audio.synthesis.SoundFontRenderer", NoRendering)
    again = rendered_pieces(pieces, bundled_soundfont(), [0, 6], tokenizer, seed=3, cache_dir=tmp_path)
    for a, b in zip(first.spectrograms, again.spectrograms, strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(AssertionError, match="rendered again"):
        rendered_pieces(pieces, bundled_soundfont(), [0, 6], tokenizer, seed=4, cache_dir=tmp_path)


def test_tokenizer_file_round_trip_and_refusals(tmp_path):
    data = TranscriptionDataModule(n_mels=32, n_fft=400, segment_seconds=1.5, lookahead_seconds=0.5)
    path = tmp_path / "tokenizer.json"
    data.tokenizer.save(path)
    loaded = TranscriptionTokenizer.load(path)
    assert loaded == data.tokenizer.__class__(loaded.audio, loaded.midi, 1.5, 0.5, 384)
    assert loaded.audio == data.tokenizer.audio and loaded.midi.config == data.tokenizer.midi.config
    assert loaded.window_seconds == 2.0 and loaded.frames_per_second == 100.0
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "type": "Other"}))
    with pytest.raises(ValueError, match="not a TranscriptionTokenizer"):
        TranscriptionTokenizer.load(path)
    path.write_text(json.dumps({**state, "audio": {**state["audio"], "colour": 1}}))
    with pytest.raises(ValueError, match="colour"):
        TranscriptionTokenizer.load(path)


def test_data_module_items_hold_the_segments_notes_and_normalised_audio(tmp_path, monkeypatch):
    pytest.importorskip("tinysoundfont")
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    data = TranscriptionDataModule(pieces=str(melody_folder(tmp_path / "tunes")), max_pieces=2, n_mels=32, n_fft=400,
                                   augment=False)  # fmt: skip
    train = data.split("train")
    values = torch.cat([s.flatten().float() for s in train.spectrograms])
    assert data.tokenizer.audio.mean == pytest.approx(float(values.mean()), rel=1e-5)
    _, notes = data.split_pieces("train")
    first_piece_segments = [start for piece, start in train.index if piece == 0]
    for position, start in enumerate(first_piece_segments[:3]):
        audio, ids = train[position]
        assert audio.shape == (32, 300) and ids[0] == data.tokenizer.bos_id and ids[-1] == data.tokenizer.eos_id
        decoded = data.tokenizer.midi.decode_notes(ids.numpy())
        expected = reference_notes(segment_notes(notes[0], start, 2.0))
        np.testing.assert_allclose(decoded[:, 0], expected[:, 0])
        np.testing.assert_allclose(decoded[:, 1], expected[:, 1], atol=0.005 + 1e-9)
    spectrograms, batch = data.collate([train[0], train[1]])
    assert spectrograms.shape == (2, 32, 300) and batch.shape[1] == max(len(train[0][1]), len(train[1][1]))
    with pytest.raises(ValueError, match="programs"):
        TranscriptionDataModule(programs=[200])
    with pytest.raises(ValueError, match="tempo_range"):
        TranscriptionDataModule(tempo_range=[1.5, 1.0])
    assert transcription.segment_starts(3.0, 2.0) == [0.0, 2.0]


def test_data_module_retimes_the_training_notes_with_the_audio_only(tmp_path, monkeypatch):
    pytest.importorskip("tinysoundfont")
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    data = TranscriptionDataModule(pieces=str(melody_folder(tmp_path / "tunes")), max_pieces=2, n_mels=32, n_fft=400,
                                   tempo_range=[1.6, 1.6])  # fmt: skip
    _, notes = data.split_pieces("train")
    for played, original in zip(data.split("train").pieces, notes, strict=True):
        np.testing.assert_allclose(played[:, 1:3], original[:, 1:3] / 1.6)
        np.testing.assert_array_equal(played[:, [0, 3]], original[:, [0, 3]])
    _, val_notes = data.split_pieces("val")
    for played, original in zip(data.split("val").pieces, val_notes, strict=True):
        np.testing.assert_array_equal(played, original)
