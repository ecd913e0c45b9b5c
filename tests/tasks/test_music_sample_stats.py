"""`multimodal sample-stats` and the sample callback's logged statistics, on a tiny trained model."""

import json
import os
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from multimodal.music.stats import FEATURES
from tasks.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MUSIC = ["--config", str(CONFIGS / "music_continuation.yaml"), "--config", str(CONFIGS / "music_continuation_tiny.yaml")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("music")
    previous = os.getcwd()
    os.chdir(folder)
    try:
        main(["fit", *MUSIC])
    finally:
        os.chdir(previous)
    return folder / "outputs" / "music_continuation" / "lightning_logs" / "version_0"


def test_sample_callback_logs_every_overlap_and_the_scalars(trained):
    events = EventAccumulator(str(trained)).Reload()
    tags = set(events.Tags()["scalars"])
    for feature in FEATURES:
        assert f"sample_{feature}_overlap" in tags
        values = [event.value for event in events.Scalars(f"sample_{feature}_overlap")]
        assert all(0.0 <= value <= 1.0 + 1e-9 for value in values)
    assert {"sample_longest_note", "sample_sounding_at_end"} <= tags


def test_sample_stats_command_prints_the_table_and_writes_json(trained, tmp_path, capsys):
    report = tmp_path / "stats.json"
    main(["sample-stats", "--checkpoint", str(trained / "checkpoints" / "last.ckpt"), "--num-primers", "2",
          "--max-new-tokens", "40", "--json", str(report)])  # fmt: skip
    printed = capsys.readouterr().out
    numbers = json.loads(report.read_text())
    assert set(numbers["overlaps"]) == set(FEATURES) and len(numbers["primers"]) == 2
    for feature, value in numbers["overlaps"].items():
        assert f"| {feature} | {value:.3f} |" in printed
    assert numbers["training_longest_note"] > 1.0  # chorales hold final fermatas for seconds


def test_sample_stats_says_when_the_checkpoint_is_missing(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["sample-stats", "--checkpoint", str(tmp_path / "missing.ckpt")])
    assert "no such checkpoint file or folder" in capsys.readouterr().err


def test_sample_stats_refuses_a_checkpoint_of_another_task(tmp_path, monkeypatch, capsys):
    text = [arg.replace("music_continuation", "text_lm") for arg in MUSIC]
    monkeypatch.chdir(tmp_path)
    main(["fit", *text, "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1"])
    last = next((tmp_path / "outputs/text_lm/lightning_logs/version_0/checkpoints").glob("last*.ckpt"))
    with pytest.raises(SystemExit):
        main(["sample-stats", "--checkpoint", str(last)])
    assert "not a music model" in capsys.readouterr().err


def test_perplexity_of_midi_files_per_event_note_and_second(trained, tmp_path, capsys):
    import numpy as np
    import torch
    import torch.nn.functional as F

    from multimodal.data.music import cache_root, load_bach_chorales
    from multimodal.tokenizers.midi_files import notes_from_midi
    from tasks.checkpoint import load_task

    last = trained / "checkpoints" / "last.ckpt"
    name = load_bach_chorales(limit=12).names[0]  # converted by the tiny run
    piece = cache_root() / "bach_chorales" / "midi" / f"{name}.mid"
    corrupt = tmp_path / "broken.mid"
    corrupt.write_bytes(b"MThd not really")
    with pytest.warns(UserWarning, match="broken.mid"):
        main(["perplexity", "--checkpoint", str(last), str(piece), str(corrupt)])
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith(f"{name}.mid"))
    events, notes, seconds, per_event, per_note, per_second = (float(x) for x in row.split()[1:])
    # Reference: [BOS] + events + [EOS] cut into windows of 64 that predict every token once.
    task, tokenizer, _ = load_task(last)
    notes_array = notes_from_midi(piece)
    ids = torch.tensor([tokenizer.bos_id, *tokenizer.encode_notes(notes_array), tokenizer.eos_id])
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, 64):
            window = ids[start : start + 65][None]
            total += F.cross_entropy(task(window[:, :-1])[0], window[0, 1:], reduction="sum").item()
    assert events == len(ids) - 1 and notes == len(notes_array)
    assert seconds == pytest.approx(notes_array[:, 2].max(), abs=0.05)
    assert per_event == pytest.approx(total / (len(ids) - 1), abs=1e-3)
    assert per_note == pytest.approx(total / len(notes_array), abs=1e-3)
    assert per_second == pytest.approx(total / notes_array[:, 2].max(), abs=1e-3)
    assert "skipped 1 file(s)" in printed and np.isfinite(per_second)


def test_duration_vocabulary_trains_and_validation_reports_nats_per_note_and_second(tmp_path, monkeypatch):
    import pytorch_lightning as pl

    from multimodal.tokenizers.midi_duration import MidiDurationTokenizer
    from tasks.cli import MultimodalCLI
    from tasks.music_continuation import MusicContinuation

    monkeypatch.chdir(tmp_path)
    cli = MultimodalCLI([*MUSIC, "--data.init_args.vocabulary", "duration", "--trainer.logger", "false"],
                        data_links=MusicContinuation.data_links, run=False)  # fmt: skip
    assert isinstance(cli.datamodule.tokenizer, MidiDurationTokenizer)
    assert cli.model.config.vocab_size == MidiDurationTokenizer().vocab_size
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         num_sanity_val_steps=0)  # fmt: skip
    trainer.fit(cli.model, datamodule=cli.datamodule)
    metrics = trainer.callback_metrics
    # Counted here from the held-out pieces themselves: every event plus EOS is a target, every note
    # a note, the last note's end the piece's length.
    held_out = cli.datamodule.split("val").notes
    tokenizer = cli.datamodule.tokenizer
    targets = sum(len(tokenizer.encode_notes(notes)) + 1 for notes in held_out)
    notes, seconds = sum(len(notes) for notes in held_out), sum(float(notes[:, 2].max()) for notes in held_out)
    nll_sum = float(metrics["val_nll"]) * targets
    assert float(metrics["val_nll_per_note"]) == pytest.approx(nll_sum / notes, rel=1e-5)
    assert float(metrics["val_nll_per_second"]) == pytest.approx(nll_sum / seconds, rel=1e-5)


def test_sample_stats_compares_with_the_shipped_model_on_pieces_neither_trained_on(trained, tmp_path, capsys):
    from multimodal.data.music import load_bach_chorales, piece_split
    from tasks.checkpoint import data_settings

    checkpoint = trained / "checkpoints" / "last.ckpt"
    data = data_settings(checkpoint)
    own_training = load_bach_chorales(limit=data["limit"]).split("train", data["validation_percent"], data["test_percent"])
    # the shipped model trained on music21's bach/<name> files its split puts in "train"
    unseen = [name for name in own_training.names if piece_split(f"bach/{name}", 10, 10) != "train"]
    assert unseen, "the tiny run's training chorales should include some the shipped model never saw"
    report = tmp_path / "compare.json"
    main(["sample-stats", "--checkpoint", str(checkpoint), "--split", "train", "--num-primers", "12", "--compare",
          "music", "--max-new-tokens", "32", "--json", str(report)])  # fmt: skip
    printed = capsys.readouterr().out
    numbers = json.loads(report.read_text())
    assert numbers["primers"] == unseen and numbers["models"] == [str(checkpoint), "music"]
    assert all(0 <= row[feature] <= 1 for row in numbers["overlaps"] for feature in FEATURES)
    tiny, shipped = numbers["nats_per_second"]
    assert 0 < shipped < tiny  # an 8-window model against one trained for an hour: the shipped one reads the chorales
    assert f"| {checkpoint!s} | music |" in printed
