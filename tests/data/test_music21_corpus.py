"""The music21 collections cache: parts and metadata against music21 itself, re-runs, failures, licences, splits."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from multimodal.data import music21_corpus
from multimodal.data.music21_corpus import convert_collections, load_pieces, music21_corpus_dir

FILES = ["madrigal.3.1.mxl", "madrigal.3.2.mxl"]  # two small five-part madrigals


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """A corpus folder of two Monteverdi madrigals, one broken file, and a one-file Palestrina (opt-in)."""
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "corpus"
    (root / "monteverdi").mkdir(parents=True)
    for name in FILES:
        shutil.copy(music21_corpus_dir() / "monteverdi" / name, root / "monteverdi" / name)
    (root / "monteverdi" / "broken.xml").write_text("<score-partwise><oops")
    (root / "palestrina").mkdir()
    shutil.copy(music21_corpus_dir() / "palestrina" / "Agnus_00.krn", root / "palestrina" / "Agnus_00.krn")
    monkeypatch.setattr(music21_corpus, "music21_corpus_dir", lambda: root)
    return root


def test_the_corpus_folder_is_music21s_own_or_the_one_the_environment_names(tmp_path, monkeypatch):
    import music21

    monkeypatch.delenv(music21_corpus.CORPUS_ENV, raising=False)
    assert music21_corpus_dir() == Path(music21.__file__).parent / "corpus"  # found without importing music21
    monkeypatch.setenv(music21_corpus.CORPUS_ENV, str(tmp_path))
    assert music21_corpus_dir() == tmp_path


def test_conversion_keeps_parts_and_metadata_as_music21_reads_them(corpus):
    from music21 import converter, key

    with pytest.warns(UserWarning, match="broken.xml"):
        report = convert_collections(["monteverdi"], num_workers=1, progress=False)
    assert report.converted == 2 and list(report.failed) == ["monteverdi/broken.xml"]
    pieces = load_pieces(["monteverdi"])
    assert [piece.name for piece in pieces] == ["monteverdi/madrigal.3.1", "monteverdi/madrigal.3.2"]
    for piece, name in zip(pieces, FILES, strict=True):
        score = converter.parse(corpus / "monteverdi" / name)  # the independent reference
        assert [part["name"] for part in piece.meta["parts"]] == [part.partName for part in score.parts]
        seconds_per_quarter = 60 / score.flatten().getElementsByClass("MetronomeMark").first().getQuarterBPM() \
            if score.flatten().getElementsByClass("MetronomeMark").first() else 0.5  # fmt: skip
        for index, part in enumerate(score.parts):
            # music21's own notes by the stream's offsets (one tempo in these madrigals)
            theirs = sorted((p.midi, round(n.offset * seconds_per_quarter, 6),
                             round((n.offset + n.quarterLength) * seconds_per_quarter, 6))
                            for n in part.toSoundingPitch().stripTies().flatten().notes for p in n.pitches
                            if n.quarterLength > 0)  # fmt: skip  (grace notes have no length: left out)
            ours = sorted((int(p), round(s, 6), round(e, 6)) for p, s, e in piece.part(index)[:, :3])
            assert ours == theirs and len(ours) > 50
        found = score.flatten().getElementsByClass(key.Key).first()
        assert piece.meta["key"] == f"{found.tonic.name} {found.mode}"
        assert piece.meta["time_signature"] == score.flatten().getElementsByClass("TimeSignature").first().ratioString
        assert piece.collection == "monteverdi" and piece.notes.shape[1] == 5
        assert np.all(np.diff(piece.notes[:, 1]) >= 0)  # sorted by start: the merged notes need no sort


def test_rerun_converts_nothing_new_and_a_changed_file_again(corpus):
    with pytest.warns(UserWarning):
        convert_collections(["monteverdi"], num_workers=1, progress=False)
    with pytest.warns(UserWarning, match="broken.xml"):  # named on every run, not tried again
        again = convert_collections(["monteverdi"], num_workers=1, progress=False)
    assert (again.converted, again.reused) == (0, 3)
    from music21 import converter

    converter.parse(corpus / "monteverdi" / FILES[1]).write("musicxml", fp=corpus / "monteverdi" / "broken.xml")
    fixed = convert_collections(["monteverdi"], num_workers=1, progress=False)
    assert (fixed.converted, fixed.reused, fixed.failed) == (1, 2, {})


def test_installed_files_are_stamped_by_music21s_version_and_a_changed_file_is_not_converted(corpus):
    import importlib.metadata
    import os

    installed = music21_corpus._installed_corpus()[0] / "monteverdi" / FILES[0]  # a reinstall gives it a new time
    version = importlib.metadata.version("music21")
    assert music21_corpus._stamp(installed) == [music21_corpus.FORMAT_VERSION, installed.stat().st_size, f"music21 {version}"]
    link = corpus / "link.mxl"  # how load_named_pieces reads a file: through a link, with the source's stamp
    link.symlink_to(installed)
    assert music21_corpus._stamp(link) == music21_corpus._stamp(installed)
    copy = corpus / "monteverdi" / FILES[0]  # a folder of your own files keeps modification times
    assert music21_corpus._stamp(copy)[2] == copy.stat().st_mtime_ns
    assert not music21_corpus.collections_converted(["monteverdi"])
    with pytest.warns(UserWarning):
        convert_collections(["monteverdi"], num_workers=1, progress=False)
    assert music21_corpus.collections_converted(["monteverdi"])
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 10**9))  # changed since: minutes again
    assert not music21_corpus.collections_converted(["monteverdi"])


def test_named_pieces_are_read_through_the_whole_collections_cache(corpus, tmp_path):
    with pytest.warns(UserWarning):
        convert_collections(["monteverdi"], num_workers=1, progress=False)
    cached = tmp_path / "cache" / "music21" / "monteverdi" / f"{FILES[0]}.npz"
    written = cached.stat().st_mtime_ns
    named = music21_corpus.load_named_pieces([f"monteverdi/{FILES[0].removesuffix('.mxl')}"], num_parts=5)
    assert len(named.names) == 1 and cached.stat().st_mtime_ns == written  # read, not converted again
    assert [p.name for p in load_pieces(["monteverdi"])].count(named.names[0]) == 1


def test_opt_in_collection_warns_with_its_licence_and_split_table_sums(corpus):
    with pytest.warns(UserWarning, match="opt-in.*Rights to all derivative electronic formats reserved"):
        report = convert_collections(["palestrina"], num_workers=1, progress=False)
    row = report.splits["palestrina"]
    assert row["pieces"] == 1 == row["train"] + row["val"] + row["test"]
    assert "palestrina" in str(report)
    assert load_pieces(["palestrina"], warn=False)[0].meta["composer"].startswith("Palestrina")


def test_data_module_with_collections_yields_windows(corpus):
    from tasks.datamodules.music import MusicDataModule

    data = MusicDataModule(collections=["monteverdi"], seq_len=32, batch_size=2, epoch_length=4, validation_percent=0,
                           test_percent=0)  # fmt: skip
    with pytest.warns(UserWarning, match="broken.xml"):
        data.prepare_data()
        data.setup("fit")
    assert data.corpus.names == ["monteverdi/madrigal.3.1", "monteverdi/madrigal.3.2"]
    assert data.corpus.notes[0].shape[1] == 4  # parts merged for the single-part vocabularies
    batch = next(iter(data.train_dataloader()))
    assert batch.shape == (2, 33)


def test_data_module_with_parts_keeps_each_voice_in_the_tokens(corpus):
    from tasks.datamodules.music import MusicDataModule

    with pytest.raises(ValueError, match="num_parts=5: parts need vocabulary: duration"):
        MusicDataModule(num_parts=5)
    data = MusicDataModule(collections=["monteverdi"], vocabulary="duration", num_parts=4, seq_len=32, batch_size=2,
                           epoch_length=4, validation_percent=0, test_percent=0)  # fmt: skip
    with pytest.warns(UserWarning, match="2 of 2 pieces have more than num_parts=4 parts"):
        data.setup("fit")
    assert data.corpus.names == [] and any("5 parts" in reason for reason in data.corpus.skipped)
    data = MusicDataModule(collections=["monteverdi"], vocabulary="duration", num_parts=5, seq_len=32, batch_size=2,
                           epoch_length=4, validation_percent=0, test_percent=0)  # fmt: skip
    with pytest.warns(UserWarning, match="broken.xml"):
        data.setup("fit")
    piece = load_pieces(["monteverdi"])[0]
    tokens = data.tokenizer.encode_notes(data.corpus.notes[0])
    parts = {data.tokenizer.token_to_event(t).value // 128 for t in tokens if data.tokenizer.token_to_event(t).kind == "PITCH"}
    assert parts == set(range(len(piece.meta["parts"]))) == set(range(5))
    assert next(iter(data.train_dataloader())).max() >= data.tokenizer.pitch_offset + 128  # a lower voice sampled


def test_data_module_infill_options_reach_the_vocabulary_and_are_checked():
    from tasks.datamodules.music import MusicDataModule

    data = MusicDataModule(collections=["monteverdi"], vocabulary="duration", num_parts=4, time_step=0.05,
                           anticipation_seconds=1.0, infill_after_seconds=4.0,
                           given_notes={"given_share": 0.5, "infill_share": 0.3, "infill_seconds": [1.0, 2.0]})  # fmt: skip
    assert data.tokenizer.config.infill_after_steps == 80 and data.given_notes.infill_seconds == (1.0, 2.0)
    assert data.tokenizer.vocab_size == data.tokenizer.infill_offset + 3  # GAP AFTER MIDDLE after AHEAD_0..20
    for share in ("infill_share", "read_ahead_share"):  # both need GAP AFTER MIDDLE ids
        with pytest.raises(ValueError, match="infill_share and read_ahead_share need infill_after_seconds"):
            MusicDataModule(collections=["monteverdi"], vocabulary="duration", anticipation_seconds=1.0,
                            given_notes={share: 0.3})  # fmt: skip
    with pytest.raises(ValueError, match="infill_after_seconds=2.0: infilling needs vocabulary: duration"):
        MusicDataModule(infill_after_seconds=2.0)
