"""Bars of a MIDI file and span ends in seconds or bars: held to the notes a MIDI file places on its downbeats,
read by symusic (:func:`read_midi_notes`), and to bar lengths worked out by hand."""

from __future__ import annotations

import mido
import numpy as np
import pytest

from multimodal.music.bars import bar_starts, span_point, span_seconds
from multimodal.tokenizers.midi_files import read_midi_notes

TICKS = 480  # per quarter note


def meters_and_tempi(path) -> None:
    """Two bars of 3/4 at 90 beats a minute, then two of 6/8 at 120, a note on every downbeat (written in ticks)."""
    track = mido.MidiTrack()
    track.append(mido.MetaMessage("time_signature", numerator=3, denominator=4, time=0))
    track.append(mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(90), time=0))
    bars = [3 * TICKS, 3 * TICKS, 3 * TICKS, 3 * TICKS]  # 3/4 and 6/8 bars both hold three quarters
    for index, length in enumerate(bars):
        if index == 2:
            track.append(mido.MetaMessage("time_signature", numerator=6, denominator=8, time=0))
            track.append(mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(120), time=0))
        track.append(mido.Message("note_on", note=60 + index, velocity=80, time=0))
        track.append(mido.Message("note_off", note=60 + index, velocity=0, time=length))
    midi = mido.MidiFile(ticks_per_beat=TICKS)
    midi.tracks.append(track)
    midi.save(str(path))


def test_bars_start_where_the_file_puts_its_downbeat_notes_and_go_on_past_its_end(tmp_path):
    path = tmp_path / "meters.mid"
    meters_and_tempi(path)
    onsets = read_midi_notes(path)[:, 1]
    np.testing.assert_allclose(onsets, [0.0, 2.0, 4.0, 5.5], atol=1e-5)  # 3 quarters at 90: 2 s; at 120: 1.5 s
    starts = bar_starts(path, 6)
    np.testing.assert_allclose(starts[:4], onsets, atol=1e-5)
    np.testing.assert_allclose(starts[4:], [7.0, 8.5], atol=1e-5)  # 6/8 at 120 goes on: 1.5 s a bar


def test_a_file_without_meter_or_tempo_is_four_four_at_120(tmp_path):
    track = mido.MidiTrack([mido.Message("note_on", note=60, velocity=80, time=0),
                            mido.Message("note_off", note=60, velocity=0, time=TICKS)])  # fmt: skip
    midi = mido.MidiFile(ticks_per_beat=TICKS)
    midi.tracks.append(track)
    midi.save(str(tmp_path / "plain.mid"))
    np.testing.assert_allclose(bar_starts(tmp_path / "plain.mid", 3), [0.0, 2.0, 4.0], atol=1e-5)
    empty = mido.MidiFile(ticks_per_beat=TICKS)  # no notes at all: the bars still start at 0
    empty.tracks.append(mido.MidiTrack([mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(60), time=0)]))
    empty.save(str(tmp_path / "empty.mid"))
    np.testing.assert_allclose(bar_starts(tmp_path / "empty.mid", 3), [0.0, 4.0, 8.0], atol=1e-5)


def test_span_ends_read_seconds_and_bars_and_refuse_anything_else(tmp_path):
    path = tmp_path / "meters.mid"
    meters_and_tempi(path)
    assert span_point("12.5") == (12.5, False) and span_point("12.5s") == (12.5, False) and span_point("Bar 9") == (9, True)
    assert span_seconds("bar2", "bar4", path) == pytest.approx((2.0, 5.5))
    assert span_seconds("1s", "bar3", path) == pytest.approx((1.0, 4.0)) and span_seconds("1", "3") == (1.0, 3.0)
    for bad, reason in [("bar0", "counted from 1"), ("-1", "0 or more"), ("inf", "0 or more"), ("nan", "0 or more"),
                        ("9bars", "not a time"), ("", "not a time")]:  # fmt: skip
        with pytest.raises(ValueError, match=reason):
            span_point(bad)
    with pytest.raises(ValueError, match="bars need the MIDI file"):
        span_seconds("bar1", "bar2")
    with pytest.raises(ValueError, match="the start must come before the end"):
        span_seconds("bar3", "3.5", path)  # bar 3 starts at 4 s
    (tmp_path / "broken.mid").write_bytes(b"MThd not really")
    with pytest.raises(ValueError, match="broken.mid: not a readable MIDI file"):
        span_seconds("bar1", "bar2", tmp_path / "broken.mid")


def upbeat_tune(path, marked: bool) -> None:
    """A 6/8 tune at 120 (a quarter 0.5 s) starting one eighth before its first full bar's downbeat: the upbeat
    marked as MuseScore writes one (a bar of 1/8, then 6/8) or not marked at all (6/8 from time 0, as music21
    writes one)."""
    eighth = TICKS // 2
    meters = [(1, 8, 0), (6, 8, eighth)] if marked else [(6, 8, 0)]
    events = [(tick, mido.MetaMessage("time_signature", numerator=n, denominator=d)) for n, d, tick in meters]
    for index, onset in enumerate([0, eighth, 4 * eighth, 7 * eighth]):  # the upbeat, then bar 1's and bar 2's downbeats
        events += [(onset, mido.Message("note_on", note=60 + index, velocity=80)),
                   (onset + eighth, mido.Message("note_off", note=60 + index, velocity=0))]  # fmt: skip
    track, now = mido.MidiTrack(), 0
    for tick, message in sorted(events, key=lambda event: (event[0], event[1].type != "time_signature")):
        track.append(message.copy(time=tick - now))
        now = tick
    midi = mido.MidiFile(ticks_per_beat=TICKS)
    midi.tracks.append(track)
    midi.save(str(path))


def test_bar_1_is_the_first_full_bar_after_a_pickup_the_file_writes_or_the_user_gives(tmp_path):
    from multimodal.music.bars import beat_grid, pickup_quarters

    upbeat_tune(tmp_path / "marked.mid", marked=True)
    upbeat_tune(tmp_path / "plain.mid", marked=False)
    onsets = read_midi_notes(tmp_path / "marked.mid")[:, 1]
    np.testing.assert_allclose(onsets, [0.0, 0.25, 1.0, 1.75], atol=1e-5)  # notes 2 and 4 on the downbeats
    np.testing.assert_allclose(bar_starts(tmp_path / "marked.mid", 3), [0.25, 1.75, 3.25], atol=1e-5)
    np.testing.assert_allclose(bar_starts(tmp_path / "plain.mid", 2), [0.0, 1.5], atol=1e-5)  # not marked: from 0
    given = beat_grid(tmp_path / "plain.mid", pickup=1)  # one beat of 6/8: an eighth
    assert pickup_quarters(given) == 0.5 and pickup_quarters(beat_grid(tmp_path / "plain.mid")) == 0.0
    np.testing.assert_allclose(bar_starts(given, 3), [0.25, 1.75, 3.25], atol=1e-5)
    assert span_seconds("bar1", "bar3", given) == pytest.approx((0.25, 3.25))
    no_pickup = beat_grid(tmp_path / "marked.mid", pickup=0)  # the user says it starts on a downbeat
    np.testing.assert_allclose(bar_starts(no_pickup, 2), [0.0, 1.5], atol=1e-5)
    np.testing.assert_allclose(bar_starts(beat_grid(tmp_path / "marked.mid", pickup=3), 2), [0.75, 2.25], atol=1e-5)
    for bar in (6, 7.5):
        with pytest.raises(ValueError, match=f"pickup: {bar:g} beats is not 0 or more and shorter than a bar of 6/8"):
            beat_grid(tmp_path / "plain.mid", pickup=bar)
    with pytest.raises(ValueError, match="shorter than a bar of 3/4"):
        beat_grid(tmp_path / "plain.mid", meter="3/4", pickup=3)
