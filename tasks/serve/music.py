"""The music page: continue a held-out chorale or your own MIDI file, hear it, see it, download it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from multimodal.music import continue_music, primer_ids
from multimodal.tokenizers.midi import notes_from_midi
from tasks.music_continuation import run_pieces


class MusicSession:
    """What the page does, without the page: continue a primer into MIDI, piano roll and WAV.

    Args:
        task: A ``MusicContinuation`` task (its model in eval mode).
        tokenizer: Its MIDI tokenizer.
        checkpoint: Where it came from (the held-out pieces of its run are the primers offered).
    """

    def __init__(self, task: Any, tokenizer: Any, checkpoint: Path) -> None:
        self.task, self.tokenizer = task, tokenizer
        held_out = run_pieces(checkpoint, "val")
        self.pieces = dict(zip(held_out.names, held_out.notes, strict=True))
        self.folder = Path(tempfile.mkdtemp(prefix="multimodal-serve-"))
        self.count = 0

    def continue_primer(
        self, piece: str | None, upload: str | None, seconds: float, length: int, temperature: float, top_p: float,
        seed: int,
    ) -> tuple[str | None, str | None, str | None, str]:
        """``(wav, piano roll png, midi, message)`` for a held-out ``piece`` or an uploaded MIDI file (it wins)."""
        try:
            if upload:
                notes, source = notes_from_midi(upload), Path(upload).name
            elif piece in self.pieces:
                notes, source = self.pieces[piece], f"held-out piece {piece}"
            else:
                return None, None, None, "Choose a held-out piece or upload a MIDI file."
            if not len(notes[notes[:, 1] < seconds]):
                return None, None, None, f"{source}: no note starts in its first {seconds:g} s; give a longer primer."
        except ValueError as error:  # a broken upload: say so on the page
            return None, None, None, f"Could not read the upload: {error}"
        primer = primer_ids(notes, self.tokenizer, seconds)
        self.count += 1
        out = self.folder / f"request_{self.count}"
        (path,) = continue_music(self.task.model, self.tokenizer, primer, out, max_new_tokens=int(length),
                                 temperature=temperature, top_p=top_p, seed=int(seed), audio=True)  # fmt: skip
        message = f"The first {seconds:g} s of {source} ({len(primer)} events), then {int(length)} new events."
        return str(path.with_suffix(".wav")), str(path.with_suffix(".png")), str(path), message


def music_page(task: Any, tokenizer: Any, checkpoint: Path) -> Any:
    """The Gradio page of a music checkpoint."""
    import gradio as gr

    session = MusicSession(task, tokenizer, checkpoint)
    names = list(session.pieces)
    with gr.Blocks(title="multimodal: music continuation") as page:
        gr.Markdown(f"# Music continuation\n{type(task.model).__name__} from `{checkpoint}`: choose a held-out "
                    f"piece or upload a MIDI file; the model continues its first seconds.")  # fmt: skip
        with gr.Row():
            with gr.Column():
                piece = gr.Dropdown(names, value=names[0] if names else None, label="held-out piece")
                upload = gr.File(label="or your MIDI file", file_types=[".mid", ".midi"], type="filepath")
                seconds = gr.Slider(1, 30, value=6, step=0.5, label="primer (seconds)")
                length = gr.Slider(16, 1024, value=512, step=16, label="new events")
                temperature = gr.Slider(0.1, 1.5, value=1.0, step=0.05, label="temperature")
                top_p = gr.Slider(0.5, 1.0, value=0.95, step=0.01, label="top-p")
                seed = gr.Number(0, precision=0, label="seed")
                button = gr.Button("Continue", variant="primary")
            with gr.Column():
                message = gr.Markdown()
                audio = gr.Audio(label="listen", type="filepath")
                roll = gr.Image(label="piano roll: primer blue, continuation orange", type="filepath")
                midi = gr.File(label="MIDI")
        button.click(session.continue_primer, [piece, upload, seconds, length, temperature, top_p, seed],
                     [audio, roll, midi, message], api_name="continue")  # fmt: skip
    return page
