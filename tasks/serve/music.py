"""The music page: continue a held-out piece or your own MIDI file (or start from nothing), harmonize a
melody or fill a gap in a piece, directed by style, key, meter and density when the model knows them; hear
it, see it, download it."""

from __future__ import annotations

import inspect
import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pretty_midi

from multimodal.generation import SamplingConfig
from multimodal.music import (
    continue_music,
    harmonize_to_files,
    infill_to_files,
    parse_controls,
    primer_ids,
    read_melody,
    read_primer,
    tonality,
)
from multimodal.music.bars import beat_grid, span_seconds
from multimodal.music.continuation import part_names, unconditional_prompt
from multimodal.music.instruments import with_programs
from multimodal.music.ranges import OutOfRange, check_melody_range, transposed
from multimodal.music.score import engrave_svg, keep_timing, write_musicxml
from multimodal.music.sheet_music import SHEET_MUSIC_SUFFIXES, is_sheet_music, sheet_music_to_midi
from multimodal.tokenizers.midi_duration import MidiDurationTokenizer
from multimodal.tokenizers.music_controls import KEYS, METERS, STYLES, parse_key
from tasks.commands.music import model_training_data, pieces_at_hand, run_pieces
from tasks.serve.checks import SEEDS, bounded

# the widgets' bounds, checked again in the function: a request through the API can send anything
SECONDS, NEW_EVENTS, TEMPERATURE, TOP_P, GUIDANCE = (1, 30), (16, 1024), (0.1, 1.5), (0.5, 1.0), (0.0, 5.0)
TRANSPOSE = (-60, 60)  # semitones (multimodal.music.ranges.transposed)
PICKUP_BEATS = (0.0, 15.0)  # an upbeat shorter than a bar of 16/x (multimodal.music.bars.beat_grid)
KEY_EMPHASIS = (0.0, 3.0)  # nats on the tonic chord's pitches (multimodal.music.tonality)
NOTHING = "(nothing: the controls lead)"  # the piece choice that starts from silence
TITLES = {"continue": "continued", "harmonize": "harmonized", "infill": "a gap filled"}  # a score's title, after the piece
KEEP = 32  # request folders kept (Gradio serves its own copies): the server's disk use stays bounded
ACTIONS = {"continue": "continue the piece", "harmonize": "harmonize the upload (kept as the top part)",
           "infill": "fill a gap in the piece"}  # fmt: skip
"""What the page can do (the ``action`` of :meth:`MusicSession.continue_primer`), with the page's words for it."""


def pickup_beats(value: float | str | None) -> float | None:
    """The page's pickup in beats: None when empty (the upload's own), else a number within :data:`PICKUP_BEATS`
    (a ``gradio.Error`` naming the setting otherwise)."""
    return None if value is None or str(value).strip() == "" else bounded("pickup (beats)", value, *PICKUP_BEATS)


class MusicSession:
    """What the page does, without the page: continue a primer into MIDI, piano roll and WAV.

    Args:
        task: A ``MusicContinuation`` task (its model in eval mode).
        tokenizer: Its MIDI tokenizer.
        data: Its run's data settings (the held-out pieces of the run are the primers offered, when they are
            at hand: :func:`~tasks.commands.music.pieces_at_hand`).
        source: The checkpoint or model folder, whose training data's part ranges a melody to harmonize is
            held to, and whose chord sizes bound the parts written (:func:`~tasks.commands.music.model_training_data`).
    """

    def __init__(self, task: Any, tokenizer: Any, data: dict[str, Any], source: str | Path | None = None) -> None:
        self.task, self.tokenizer = task, tokenizer
        self.facts = model_training_data(source, data) if getattr(tokenizer.config, "num_parts", 1) > 1 else {}
        held_out = run_pieces(data, "val") if pieces_at_hand(data) else None
        self.pieces = dict(zip(held_out.names, held_out.notes, strict=True)) if held_out is not None else {}
        self.folder = Path(tempfile.mkdtemp(prefix="multimodal-serve-"))
        self.count = itertools.count(1)  # next() is atomic: concurrent requests get their own folders
        self.sheet_music: dict[str, str] = {}  # an upload of sheet music -> its MIDI file

    def continue_primer(
        self, piece: str | None, upload: str | None, seconds: float, length: int, temperature: float, top_p: float,
        seed: int, style: str | None = None, key: str | None = None, meter: str | None = None,
        density: float | None = None, action: str = "continue", guidance_scale: float = 1.0,
        avoid_parallels: bool = False, key_emphasis: float = 0.0, parts: list[str] | None = None,
        gap_from: str = "", gap_to: str = "", instrument: str = "", pickup: float | str | None = None,
        melody_track: str = "", transpose: float = 0,
    ) -> tuple[str | None, str | None, str | None, str]:
        """``(wav, piano roll png, midi, message)`` for a held-out ``piece``, an uploaded MIDI file (it wins)
        or :data:`NOTHING` (the controls alone lead); ``style``/``key``/``meter``/``density`` direct a model
        trained with controls (empty: the model's choice). ``action`` (:data:`ACTIONS`): ``"continue"`` the first
        ``seconds``; ``"harmonize"``: the upload is a melody kept exactly and the model writes the other parts;
        ``"infill"``: the notes of the piece (or upload) that start from ``gap_from`` to ``gap_to`` (seconds, ``10s``,
        or bars of an upload, ``bar9``: :func:`~multimodal.music.bars.span_seconds`) are written anew, the rest
        kept. Both need a model with parts; ``avoid_parallels``: with no parallel fifths or octaves
        (:class:`~multimodal.music.voice_leading.ParallelsRule`); ``parts``: the names of the parts the model writes
        (:meth:`part_names`; None or empty: every part but the melody's, or every part of the gap).
        ``key_emphasis`` leans towards the key's tonic chord (:func:`~multimodal.music.tonality.key_emphasis`).
        ``instrument``: a General MIDI name or program that plays every part, in the MIDI file and the WAV (empty:
        the model's own; :func:`~multimodal.music.instruments.with_programs`). ``pickup``: beats of the meter before
        the upload's bar 1 (None: the upload's own short first bar, if any; :func:`~multimodal.music.bars.beat_grid`),
        for its bars and the written file's. ``melody_track``: the upload's track that holds the melody to harmonize
        (a number from 1 or a name; empty: all its notes; :func:`~multimodal.music.harmonize.read_melody`).
        ``transpose``: semitones the given music (piece, upload, melody) moves by first
        (:func:`~multimodal.music.ranges.transposed`). A ``gradio.Error`` (one line) for
        an upload that is not MIDI, a setting outside its widget's bounds, a gap that cannot be read, an
        instrument General MIDI does not have, or a control the model does not know."""
        import gradio as gr

        upload = self.upload_as_midi(upload)
        seconds = bounded("primer (seconds)", seconds, *SECONDS)
        length = int(bounded("new events", length, *NEW_EVENTS, whole=True))
        temperature = bounded("temperature", temperature, *TEMPERATURE)
        top_p = bounded("top-p", top_p, *TOP_P)
        seed = int(bounded("seed", seed, *SEEDS, whole=True))
        guidance_scale = bounded("guidance", guidance_scale, *GUIDANCE)
        key_emphasis = bounded("key emphasis", key_emphasis, *KEY_EMPHASIS)
        pickup = pickup_beats(pickup)
        transpose = int(bounded("transpose (semitones)", transpose or 0, *TRANSPOSE, whole=True))
        try:
            controls = parse_controls(style or None, key or None, meter or None, density or None)
        except ValueError as error:
            raise gr.Error(str(error)) from None
        if pickup is not None:  # a pickup of a bar or more is refused before any music is written
            self.beat_grid(upload, meter, pickup)
        if key_emphasis and controls.key is None:
            raise gr.Error("Key emphasis leans towards the chosen key: choose a key too.")
        leaning = tonality.key_emphasis(self.tokenizer, controls.key, key_emphasis) if key_emphasis else {}
        sampling = SamplingConfig(temperature=temperature, top_p=top_p, guidance_scale=guidance_scale, **leaning)
        if action not in self.actions():
            raise gr.Error(f"Action {action!r}: this model can {', '.join(self.actions())}.")
        try:
            writer = with_programs(self.tokenizer, [instrument]) if instrument else self.tokenizer
        except ValueError as error:
            raise gr.Error(f"Instrument: {str(error).removeprefix('instruments: ')}") from None
        if action == "harmonize":
            return self._harmonize(upload, controls, sampling, seed, avoid_parallels, parts, writer, melody_track,
                                   transpose)  # fmt: skip
        if action == "infill":
            bars = self.beat_grid(upload, meter, pickup) if upload else None  # the upload's, as its file is written
            return self._infill(piece, upload, (gap_from, gap_to), controls, sampling, seed, avoid_parallels, parts,
                                writer, bars, transpose)  # fmt: skip
        try:
            if upload:
                notes, source = read_primer(upload, self.tokenizer), self.shown(upload)
            elif piece == NOTHING:
                notes, source, seconds = np.empty((0, 4)), "nothing", 0.0
            elif piece in self.pieces:
                notes, source = self.pieces[piece], f"held-out piece {piece}"
            else:
                return None, None, None, "Choose a held-out piece or upload a MIDI file or sheet music."
            if seconds and not len(notes[notes[:, 1] < seconds]):
                return None, None, None, f"{source}: no note starts in its first {seconds:g} s; give a longer primer."
        except ValueError as error:  # not MIDI, or broken: one line on the page, an error through the API
            reason = " ".join(str(error).replace(str(upload), self.shown(upload)).split())
            raise gr.Error(f"Could not read the upload: {reason}") from None
        try:
            notes = transposed(notes, transpose, source)
        except ValueError as error:
            raise gr.Error(f"Transpose: {error}") from None
        try:
            primer = primer_ids(notes, self.tokenizer, seconds, controls)
            unconditional_prompt(self.tokenizer, primer, sampling)  # refuses guidance without controls
        except ValueError as error:  # controls or guidance asked of a model without controls
            raise gr.Error(str(error)) from None
        (path,) = continue_music(self.task.model, writer, primer, self._request_folder(), sampling,
                                 max_new_tokens=length, seed=seed, audio=True)  # fmt: skip
        asked = f" Asked for {controls.describe()}." if any(v is not None for v in controls.values()) else ""
        message = f"The first {seconds:g} s of {source} ({len(primer)} events), then {length} new events.{asked}"
        return str(path.with_suffix(".wav")), str(path.with_suffix(".png")), str(path), message


    def answer(self, *settings: Any, **named: Any) -> tuple[str | None, str | None, str | None, str | None, str | None, str]:
        """What the page shows for :meth:`continue_primer`'s settings: ``(wav, piano roll, the score engraved (SVG),
        midi, the score (MusicXML), message)``: :meth:`continue_primer`'s files and message, the MIDI
        file on the upload's beats, its tempo map, meters, pickup and key signature (or those chosen; :meth:`beat_grid`),
        its MusicXML score (:func:`~multimodal.music.score.write_musicxml`, in the key chosen, else the upload's key
        signature or the key music21 finds) and its engraving (:func:`~multimodal.music.score.engrave_svg`; both None
        when there is no music or no note)."""
        wav, roll, midi, message = self.continue_primer(*settings, **named)
        if midi is None:
            return wav, roll, None, midi, None, message
        asked = inspect.signature(self.continue_primer).bind(*settings, **named).arguments
        key = KEYS[parse_key(asked["key"])] if asked.get("key") else None
        continued = asked.get("action", "continue") == "continue"
        grid = self.beat_grid(self.upload_as_midi(asked.get("upload")), asked.get("meter"), pickup_beats(asked.get("pickup")),
                              until=asked.get("seconds") if continued else None, key=key,
                              transpose=int(asked.get("transpose") or 0))  # fmt: skip
        if grid is not None:
            keep_timing(midi, grid)
        upload, piece = asked.get("upload"), asked.get("piece")
        name = Path(upload).stem if upload else piece if piece in self.pieces else None  # the upload as given
        title = f"{name}, {TITLES[asked.get('action', 'continue')]}" if name else None
        try:
            score = write_musicxml(pretty_midi.PrettyMIDI(midi), Path(midi).with_suffix(".musicxml"), key, title)
        except ValueError:  # no notes: nothing to put on a staff
            return wav, roll, None, midi, None, message
        return wav, roll, str(engrave_svg(score)), midi, str(score), message

    def upload_as_midi(self, upload: str | None) -> str | None:
        """The upload as a MIDI file: itself, or a MIDI file (named after it) of an upload of sheet music, MusicXML or ABC
        (:func:`~multimodal.music.sheet_music.sheet_music_to_midi`, once per upload). A ``gradio.Error`` for sheet
        music music21 cannot read."""
        import gradio as gr

        if not upload or not is_sheet_music(upload):
            return upload
        if not Path(self.sheet_music.get(upload, "")).is_file():  # not converted yet, or its folder was removed
            try:
                midi = sheet_music_to_midi(upload, self._request_folder() / f"{Path(upload).stem}.mid")
            except (ValueError, OSError) as error:
                reason = " ".join(str(error).replace(str(upload), self.shown(upload)).split())
                raise gr.Error(f"Could not read the upload: {reason}") from None
            self.sheet_music[upload] = str(midi)
            while len(self.sheet_music) > KEEP:  # as bounded as the request folders that hold them
                self.sheet_music.pop(next(iter(self.sheet_music)))
        return self.sheet_music[upload]

    def shown(self, upload: str | Path) -> str:
        """The name of an upload as its visitor gave it: a MIDI file made of sheet music (:meth:`upload_as_midi`) is
        named as the sheet."""
        given = next((sheet for sheet, midi in self.sheet_music.items() if midi == str(upload)), upload)
        return Path(given).name

    def beat_grid(self, upload: str | None, meter: str | None, pickup: float | None, until: float | None = None,
                  key: str | None = None, transpose: int = 0) -> pretty_midi.PrettyMIDI | None:  # fmt: skip
        """The beats, bars and key signature of the music written from ``upload`` (its tempo map, meters, pickup and
        key signatures up to ``until`` seconds), the ``meter``, ``pickup`` and ``key`` chosen overriding
        (:func:`~multimodal.music.bars.beat_grid`); None when there is none of them. A ``gradio.Error`` for an
        unreadable upload or a pickup of a bar or more."""
        import gradio as gr

        meter = meter if meter and meter != "other" else None
        if not upload and meter is None and pickup is None and key is None:
            return None
        try:
            return beat_grid(upload or None, meter, pickup, until, key, transpose)
        except ValueError as error:
            reason = str(error).replace(str(upload), self.shown(upload)) if upload else str(error)
            raise gr.Error(f"Could not read the upload: {reason}" if "MIDI" in reason else reason.capitalize()) from None

    def _request_folder(self) -> Path:
        """A new folder for one request's files; the folder of the request ``KEEP`` before it is removed."""
        number = next(self.count)
        shutil.rmtree(self.folder / f"request_{number - KEEP}", ignore_errors=True)
        return self.folder / f"request_{number}"

    def part_names(self) -> list[str]:
        """The names of the model's parts (none without parts); the first holds a melody to harmonize."""
        return part_names(self.tokenizer) or []

    def can_orchestrate(self) -> bool:
        """Whether the page can choose the instrument: a vocabulary with a program per part (the duration one)."""
        return isinstance(self.tokenizer, MidiDurationTokenizer)

    def actions(self) -> list[str]:
        """What this model can do among :data:`ACTIONS`: continue; fill a gap with the duration vocabulary (a note's
        length is bounded when it starts); harmonize with parts too."""
        fills = hasattr(self.tokenizer, "duration_offset")
        return ["continue", *(["harmonize"] if fills and self.part_names() else []), *(["infill"] if fills else [])]

    def _chosen_parts(self, parts: list[str] | None) -> list[int] | None:
        """The indices of the named ``parts`` (None for none); a ``gradio.Error`` for a name the model lacks."""
        import gradio as gr

        names = self.part_names()
        if parts and not set(parts) <= set(names):
            raise gr.Error(f"Parts {', '.join(sorted(set(parts) - set(names)))}: choose among {', '.join(names)}.")
        return [names.index(name) for name in parts] if parts else None

    def _harmonize(self, upload: str | None, controls, sampling: SamplingConfig, seed: int,
                   avoid_parallels: bool, parts: list[str] | None, writer: Any, melody_track: str = "",
                   transpose: int = 0) -> tuple[str | None, str | None, str | None, str]:  # fmt: skip
        """The uploaded melody (its notes kept exactly, all of them or those of ``melody_track``) with the other
        parts, or the named ``parts``, written; ``writer``: the tokenizer that writes the files (the model's, or a
        copy with the instrument asked)."""
        import gradio as gr

        if not upload:
            return None, None, None, "Upload a one-line melody (a MIDI file or sheet music) to harmonize."
        names, chosen = self.part_names(), self._chosen_parts(parts)
        if chosen and 0 in chosen:
            raise gr.Error(f"{names[0]} holds the melody: choose the parts to write among {', '.join(names[1:])}.")
        try:
            melody = read_melody(upload, (melody_track or "").strip() or None, self.shown(upload))
            melody = transposed(melody, transpose, self.shown(upload))
            if self.facts.get("part_ranges") is not None:
                try:
                    check_melody_range(melody, self.facts["part_ranges"][0], self.tokenizer.config.part_name(0),
                                       self.shown(upload))  # fmt: skip
                except OutOfRange as error:  # the page's box that moves it there
                    move = "" if error.shift is None else f" (transpose: {transpose + error.shift})"
                    raise ValueError(f"{error}{move}") from None
            (path,) = harmonize_to_files(self.task.model, writer, melody, self._request_folder(),
                                         sampling, controls=controls, parts=chosen,
                                         chord_sizes=self.facts.get("chord_sizes"),
                                         part_ranges=self.facts.get("part_ranges"),
                                         seed=seed, audio=True,  # as many new ids as the melody needs
                                         avoid_parallels=avoid_parallels)  # fmt: skip
        except ValueError as error:  # not MIDI, several lines, a model without parts or controls
            reason = str(error).replace(str(upload), self.shown(upload)).replace("or choose one", "or choose as the "
                                                                                 "melody track one")  # fmt: skip
            raise gr.Error(" ".join(reason.split())) from None
        part = self.tokenizer.config.part_name(0)
        written = ", ".join(names[index] for index in chosen) if chosen else "the other parts"
        return (str(path.with_suffix(".wav")), str(path.with_suffix(".png")), str(path),
                f"{self.shown(upload)}: {len(melody)} notes kept as the {part}; the model wrote {written}.")

    def _infill(self, piece: str | None, upload: str | None, gap: tuple[str, str], controls, sampling: SamplingConfig,
                seed: int, avoid_parallels: bool, parts: list[str] | None, writer: Any,
                bars: pretty_midi.PrettyMIDI | None = None, transpose: int = 0,
                ) -> tuple[str | None, str | None, str | None, str]:  # fmt: skip
        """The upload (or held-out ``piece``) with the notes of ``parts`` (all) that start in the ``gap`` written anew
        (a gap in bars: those of the upload's :meth:`beat_grid` ``bars``); ``writer`` as :meth:`_harmonize`'s."""
        import gradio as gr

        chosen = self._chosen_parts(parts)
        try:
            if upload:
                notes, source = read_primer(upload, self.tokenizer), self.shown(upload)
            elif piece in self.pieces:
                notes, source = self.pieces[piece], f"held-out piece {piece}"
            else:
                return None, None, None, "Choose a held-out piece or upload a MIDI file or sheet music to fill a gap in."
            notes = transposed(notes, transpose, source)
            start, end = span_seconds(*gap, bars)
            if not len(notes) or start >= float(notes[:, 2].max()):
                raise ValueError(f"{source} ends before the gap starts")
            (path,) = infill_to_files(self.task.model, writer, notes, start, end, self._request_folder(),
                                      sampling, parts=chosen, controls=controls, seed=seed, audio=True,
                                      avoid_parallels=avoid_parallels, chord_sizes=self.facts.get("chord_sizes"),
                                      part_ranges=self.facts.get("part_ranges"))  # fmt: skip
        except ValueError as error:  # not MIDI, an unreadable gap, a model without parts or controls
            reason = str(error).replace(str(upload), self.shown(upload)) if upload else str(error)
            raise gr.Error(" ".join(reason.split())) from None
        written = ", ".join(self.part_names()[index] for index in chosen) if chosen else "every part"
        of_parts = f" of {written}" if self.part_names() else ""
        return (str(path.with_suffix(".wav")), str(path.with_suffix(".png")), str(path),
                f"{source}: {start:g}-{end:g} s{of_parts} written anew; everything else kept.")


def music_page(task: Any, tokenizer: Any, data: dict[str, Any], checkpoint: Path) -> Any:
    """The Gradio page of a music checkpoint (``data``: its run's data settings)."""
    import gradio as gr

    session = MusicSession(task, tokenizer, data, checkpoint)
    names = [*session.pieces, NOTHING]
    directed = bool(getattr(tokenizer.config, "controls", False))
    actions = session.actions()
    has_parts = "harmonize" in actions
    with gr.Blocks(title="multimodal: music") as page:
        gr.Markdown(f"# Music\n{type(task.model).__name__} from `{checkpoint}`: choose a held-out piece or upload a "
                    "MIDI file or sheet music; the model continues its first seconds"
                    + (", harmonizes your melody" if has_parts else "")
                    + (" or fills a gap in the piece." if "infill" in actions else "."))  # fmt: skip
        with gr.Row():
            with gr.Column():
                piece = gr.Dropdown(names, value=names[0] if names else None, label="held-out piece")
                upload = gr.File(label="or your MIDI file, or sheet music (MusicXML, ABC)", type="filepath",
                                 file_types=[".mid", ".midi", *SHEET_MUSIC_SUFFIXES])  # fmt: skip
                seconds = gr.Slider(*SECONDS, value=6, step=0.5, label="primer (seconds)")
                length = gr.Slider(*NEW_EVENTS, value=512, step=16,
                                   label="new events (a continuation; a harmonization follows the melody)")
                temperature = gr.Slider(*TEMPERATURE, value=1.0, step=0.05, label="temperature")
                top_p = gr.Slider(*TOP_P, value=0.95, step=0.01, label="top-p")
                seed = gr.Number(0, precision=0, minimum=SEEDS[0], maximum=SEEDS[1], label="seed")
                pickup = gr.Textbox("", label="pickup: beats before the upload's bar 1 (empty: its own, if it writes "
                                              "one; 0: none)")  # fmt: skip
                transpose = gr.Number(0, precision=0, minimum=TRANSPOSE[0], maximum=TRANSPOSE[1],
                                      label="transpose the piece or melody given (semitones; -12: an octave down)")
                instrument = gr.Dropdown(["", *pretty_midi.INSTRUMENT_MAP], value="", visible=session.can_orchestrate(),
                                         label="instrument of every part (empty: the model's, the piano)")  # fmt: skip
                action = gr.Radio([(ACTIONS[name], name) for name in actions], value="continue",
                                  label="what the model does", visible=len(actions) > 1)  # fmt: skip
                with gr.Row(visible="infill" in actions):
                    gap_from = gr.Textbox("", label="gap from (seconds: 10 or 10s; or bar9 of an upload)")
                    gap_to = gr.Textbox("", label="gap to (bar13: up to where bar 13 starts)")
                melody_track = gr.Textbox("", visible=has_parts, label="melody track of the upload, to harmonize "
                                          "(a number from 1 or a name, e.g. Soprano; empty: all its notes)")  # fmt: skip
                avoid_parallels = gr.Checkbox(False, label="no parallel fifths or octaves (harmonizing, filling)",
                                              visible=has_parts)  # fmt: skip
                parts = gr.CheckboxGroup(session.part_names(), visible=has_parts,
                                         label="parts to write (none ticked: all but the melody's when harmonizing, "
                                               "all of them in a gap)")  # fmt: skip
                with gr.Row(visible=directed):  # a model trained with controls (docs/music.md)
                    style = gr.Dropdown(["", *STYLES], value="", label="style")
                    key = gr.Dropdown(["", *KEYS], value="", label="key")
                    meter = gr.Dropdown(["", *METERS[:-1]], value="", label="meter")
                    density = gr.Number(0, minimum=0, maximum=50, label="notes per second (0: the model's choice)")
                    guidance = gr.Slider(*GUIDANCE, value=1.0, step=0.5,
                                         label="guidance (> 1: follow the controls more strictly)")  # fmt: skip
                    emphasis = gr.Slider(*KEY_EMPHASIS, value=0.0, step=0.25,
                                         label="key emphasis (lean on the key's tonic chord)")  # fmt: skip
                button = gr.Button("Generate", variant="primary")
            with gr.Column():
                message = gr.Markdown()
                audio = gr.Audio(label="listen", type="filepath")
                roll = gr.Image(label="piano roll", type="filepath")  # its legend says what was given
                engraved = gr.Image(label="the score", type="filepath")  # an SVG, engraved by Verovio
                midi = gr.File(label="MIDI")
                score = gr.File(label="score (MusicXML: MuseScore, Finale, Sibelius, Dorico)")
        button.click(session.answer, [piece, upload, seconds, length, temperature, top_p, seed, style,
                                      key, meter, density, action, guidance, avoid_parallels, emphasis,
                                      parts, gap_from, gap_to, instrument, pickup, melody_track, transpose],
                     [audio, roll, engraved, midi, score, message], api_name="continue")  # fmt: skip
    return page
