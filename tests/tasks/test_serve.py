"""``multimodal serve``: each task's page does its work, says what is wrong with a bad upload, and answers over HTTP."""

import itertools
import socket
from pathlib import Path

import music21
import pretty_midi
import pytest
from checkpoints import one_step_checkpoint
from PIL import Image

from tasks.checkpoint import load_task
from tasks.cli import main

gradio = pytest.importorskip("gradio")
CONFIGS = {
    "music": ["music_continuation.yaml", "music_continuation_tiny.yaml"],
    "text": ["text_lm.yaml", "text_lm_tiny.yaml"],
    "vit": ["image_classification.yaml", "image_classification_tiny.yaml"],
    "image_generation": ["image_generation.yaml", "image_generation_tiny.yaml"],
    "super_resolution": ["super_resolution.yaml", "super_resolution_tiny.yaml"],
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One-step checkpoints of every task's tiny config."""
    folder = tmp_path_factory.mktemp("serve")
    return {name: one_step_checkpoint(configs, folder / f"{name}.ckpt") for name, configs in CONFIGS.items()}


def _broken(tmp_path, suffix):
    path = tmp_path / f"broken{suffix}"
    path.write_bytes(b"\x89PNG\r\n\x1a\n broken" if suffix == ".png" else b"MThd\x00\x00")
    return str(path)


def test_music_page_continues_a_held_out_piece_and_explains_a_broken_upload(checkpoints, tmp_path):
    from tasks.serve.music import MusicSession

    task, tokenizer, data = load_task(checkpoints["music"])
    session = MusicSession(task, tokenizer, data)
    piece = next(iter(session.pieces))
    wav, roll, midi, message = session.continue_primer(piece, None, 3.0, 32, 1.0, 0.95, 0)
    assert Path(wav).stat().st_size > 1000 and Path(roll).stat().st_size > 1000 and Path(midi).is_file()
    assert piece in message
    for chosen in (piece, None):  # the upload wins over the piece; a broken one is a one-line error
        with pytest.raises(gradio.Error, match="Could not read the upload: broken.mid: not a readable MIDI"):
            session.continue_primer(chosen, _broken(tmp_path, ".mid"), 3.0, 32, 1.0, 0.95, 0)
    # one part and note lengths: the page fills a gap (seconds of a held-out piece) but has no melody to harmonize
    assert session.actions() == ["continue", "infill"]
    *_, midi, message = session.continue_primer(piece, None, 3.0, 32, 1.0, 0.95, 0, action="infill", gap_from="1",
                                                gap_to="2")  # fmt: skip
    assert message == f"held-out piece {piece}: 1-2 s written anew; everything else kept." and Path(midi).is_file()
    with pytest.raises(gradio.Error, match="Action 'harmonize': this model can continue, infill"):
        session.continue_primer(piece, None, 3.0, 32, 1.0, 0.95, 0, action="harmonize")
    # the instrument chosen plays the piece, in the MIDI file the WAV is rendered from
    assert session.can_orchestrate()
    for action in ("continue", "infill"):
        *_, midi, _ = session.continue_primer(piece, None, 3.0, 32, 1.0, 0.95, 0, action=action, gap_from="1",
                                              gap_to="2", instrument="Church Organ")  # fmt: skip
        assert {track.program for track in pretty_midi.PrettyMIDI(midi).instruments} == {19}, action
    # what the page shows: the same files and the MusicXML score of the MIDI file (one staff: one part)
    *_, midi, score, message = session.answer(piece, None, 3.0, 32, 1.0, 0.95, 0)
    assert Path(score).suffix == ".musicxml" and Path(score).with_suffix(".mid") == Path(midi) and piece in message
    assert len(music21.converter.parse(score).parts) == 1
    with pytest.raises(gradio.Error, match="Instrument: 'kazoo' is not a General MIDI instrument"):
        session.continue_primer(piece, None, 3.0, 32, 1.0, 0.95, 0, instrument="kazoo")


def test_text_page_streams_a_continuation(checkpoints):
    from tasks.serve.text import TextSession

    task, tokenizer, _ = load_task(checkpoints["text"])
    pieces = list(TextSession(task, tokenizer).continue_prompt("def ", 12, 0.8, 0.95, 0))
    assert len(pieces) >= 2 and all(piece.startswith("def ") for piece in pieces)
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(pieces))  # the text grows


def test_image_pages_and_their_bad_uploads(checkpoints, tmp_path):
    from tasks.serve.images import ClassificationSession, GenerationSession, SuperResolutionSession

    photo = tmp_path / "photo.png"
    Image.new("RGB", (16, 12), (200, 30, 60)).save(photo)
    task, _, _ = load_task(checkpoints["super_resolution"])
    session = SuperResolutionSession(task)
    compared, upscaled, message = session.upscale(str(photo))
    assert Image.open(upscaled).size == (16 * task.config.scale, 12 * task.config.scale) and Path(compared).is_file()
    message = session.upscale(_broken(tmp_path, ".png"))[2]
    assert message.startswith("Could not read the upload") and "is not a readable image" in message
    assert str(tmp_path) not in message  # the upload's name, not the server's path to it

    task, _, data = load_task(checkpoints["vit"])
    digit = tmp_path / "digit.png"
    Image.new("L", (8, 8), 128).save(digit)
    probabilities, _ = ClassificationSession(task, data).classify(str(digit))
    assert sorted(probabilities) == sorted(task.class_names) and abs(sum(probabilities.values()) - 1) < 1e-5
    assert ClassificationSession(task, data).classify(_broken(tmp_path, ".png"))[0] is None

    task, _, _ = load_task(checkpoints["image_generation"])
    grid, message = GenerationSession(task).sample("3", 4, 1.0, 0)
    assert grid.ndim == 3 and grid.shape[-1] == 3 and "4 samples" in message


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_page_answers_over_http(checkpoints, tmp_path):
    from gradio_client import Client

    from tasks.serve import build_page

    task, _, data = load_task(checkpoints["vit"])
    page = build_page(task, None, data, checkpoints["vit"])
    port = _free_port()
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        digit = tmp_path / "digit.png"
        Image.new("L", (8, 8), 200).save(digit)
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        from gradio_client import handle_file

        label, message = client.predict(handle_file(str(digit)), api_name="/classify")
        assert label["label"] in task.class_names and message == ""
        label, message = client.predict(handle_file(_broken(tmp_path, ".png")), api_name="/classify")
        assert "Could not read the upload" in message
    finally:
        page.close()


def test_serve_refuses_a_missing_checkpoint_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MULTIMODAL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--checkpoint", str(tmp_path / "missing.ckpt")])
    assert stopped.value.code == 2 and "no such checkpoint file or folder" in capsys.readouterr().err


def test_text_and_image_functions_check_their_settings_whatever_the_api_sends(checkpoints):
    from tasks.serve.images import GenerationSession
    from tasks.serve.text import TextSession

    task, tokenizer, _ = load_task(checkpoints["text"])
    text = TextSession(task, tokenizer)
    for settings in [(1.6, 0.95, 0), (float("nan"), 0.95, 0), (0.8, 0.4, 0), (0.8, 0.95, -1), (0.8, 0.95, None)]:
        with pytest.raises(gradio.Error, match="temperature|top-p|seed"):
            next(text.continue_prompt("def ", 8, *settings))
    task, _, _ = load_task(checkpoints["image_generation"])
    images = GenerationSession(task)
    for label, temperature, seed in [("3", 0.0, 0), ("3", 1.0, 2**32), ("3", 1.0, 0.5), ("10", 1.0, 0), ("-1", 1.0, 0)]:
        with pytest.raises(gradio.Error, match="class|temperature|seed"):
            images.sample(label, 2, temperature, seed)
