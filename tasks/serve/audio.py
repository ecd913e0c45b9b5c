"""The transcription page: upload a recording, get its MIDI file and piano roll."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from multimodal.audio.transcription import notes_to_midi, read_audio, transcribe
from multimodal.viz import piano_roll_png

MAX_SECONDS = 600.0  # longest recording the page transcribes (a 10 MB upload of FLAC can hold more)


class TranscriptionSession:
    """Transcription without the page: an uploaded WAV / FLAC / OGG file -> MIDI file, piano roll, message."""

    def __init__(self, task: Any, tokenizer: Any) -> None:
        self.task, self.tokenizer = task, tokenizer
        self.folder = Path(tempfile.mkdtemp(prefix="multimodal-serve-"))
        self.count = 0

    def transcribe(self, upload: str | None) -> tuple[str | None, str | None, str]:
        """``(MIDI path, piano-roll PNG path, message)``; a message alone for a missing, broken or too long upload."""
        if not upload:
            return None, None, "Upload a WAV, FLAC or OGG file to transcribe."
        try:
            audio, rate = read_audio(upload)
        except ValueError:
            return None, None, f"Could not read the upload: {Path(upload).name} is not a readable audio file."
        seconds = audio.shape[-1] / rate
        if seconds > MAX_SECONDS:
            return None, None, f"The recording lasts {seconds:.0f} s; the page transcribes up to {MAX_SECONDS:.0f} s."
        notes = transcribe(self.task.model, self.tokenizer, audio, rate)
        self.count += 1
        stem = f"{self.count}-{Path(upload).stem}"
        midi, roll = self.folder / f"{stem}.mid", self.folder / f"{stem}.png"
        notes_to_midi(notes).write(str(midi))
        piano_roll_png(notes, roll, title=f"{Path(upload).name}: {len(notes)} notes")
        return str(midi), str(roll), f"{len(notes)} notes in {seconds:.1f} s of audio."


def transcription_page(task: Any, tokenizer: Any) -> Any:
    """The Gradio page of a transcription checkpoint."""
    import gradio as gr

    session = TranscriptionSession(task, tokenizer)
    with gr.Blocks(title="multimodal: transcription") as page:
        gr.Markdown("# Transcription\nUpload a recording (WAV, FLAC, OGG): its notes as a MIDI file and a piano roll.")
        upload = gr.File(label="audio", file_types=[".wav", ".flac", ".ogg"], type="filepath")
        button = gr.Button("Transcribe", variant="primary")
        message = gr.Markdown()
        roll = gr.Image(label="piano roll", type="filepath")
        midi = gr.File(label="MIDI")
        button.click(session.transcribe, [upload], [midi, roll, message], api_name="transcribe")
    return page
