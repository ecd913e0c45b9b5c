"""Audio classification: the ViT task on rendered phrases from the CLI, checkpoint, predict on WAV files."""

import csv
from pathlib import Path

import pretty_midi
import pytest
import torch
from melodies import melody_folder

from multimodal.audio.synthesis import midi_to_waveform, write_wav
from tasks.cli import MultimodalCLI, main
from tasks.image_classification import ImageClassification

pytest.importorskip("tinysoundfont")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RUN = Path("outputs/audio_classification/lightning_logs/version_0")


@pytest.fixture
def ast_args(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    return ["--config", str(CONFIGS / "audio_classification.yaml"), "--config",
            str(CONFIGS / "audio_classification_tiny.yaml"), f"--data.melodies={melody_folder(tmp_path / 'tunes')}",
            "--data.families=[Piano, Bass, Pipe]"]  # fmt: skip


def _wav(path: Path, program: int, pitch: int, seconds: float) -> Path:
    midi = pretty_midi.PrettyMIDI()
    instrument = pretty_midi.Instrument(program=program)
    instrument.notes += [pretty_midi.Note(90, pitch + step % 3, 0.3 * step, 0.3 * step + 0.28)
                         for step in range(int(seconds / 0.3))]  # fmt: skip
    midi.instruments.append(instrument)
    return write_wav(path, midi_to_waveform(midi, 22050), 22050)


def test_cli_trains_the_spectrogram_transformer_reloads_it_and_predicts_wav_files(ast_args, tmp_path):
    cli = MultimodalCLI(["fit", *ast_args], data_links=ImageClassification.data_links)
    config = cli.model.config
    assert (config.num_classes, config.channels, config.image_size, config.grid_size) == (3, 1, (64, 200), (8, 25))
    assert cli.model.class_names == ["Piano", "Bass", "Pipe"]
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    reloaded = ImageClassification.load_from_checkpoint(last).eval()
    clips = torch.stack([cli.datamodule.split("val")[i][0] for i in range(3)])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(clips), cli.model.eval()(clips))

    wavs = tmp_path / "wavs"
    _wav(wavs / "flute.wav", 73, 76, 3.0)  # 3 s: two clips of 2 s, the second padded with silence
    (wavs / "broken.wav").write_bytes(b"RIFF....WAVEjunk")
    with pytest.warns(UserWarning, match="broken.wav"):
        main(["predict", *ast_args, f"--ckpt_path={last}", f"--data.predict_dir={wavs}"])
    with (tmp_path / "outputs/audio_classification/predictions.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [row["file"] for row in rows] == [f"{wavs / 'flute.wav'}@0s", f"{wavs / 'flute.wav'}@2s"]
    assert all(row["prediction"] in ("Piano", "Bass", "Pipe") and 0 < float(row["probability"]) <= 1 for row in rows)
