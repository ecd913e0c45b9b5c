"""Music continuation (Music Transformer): next-event prediction on MIDI performance events.

``multimodal fit --config configs/music_continuation.yaml`` trains it;
``multimodal generate --checkpoint CKPT --out DIR`` continues a primer into MIDI, PNG and WAV.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from multimodal.data.music import load_bach_chorales
from multimodal.music import continue_music, primer_ids
from multimodal.tokenizers.midi import MidiTokenizer, notes_from_midi
from tasks.causal_lm import CausalLMTask


class MusicContinuation(CausalLMTask):
    """Music Transformer task: a :class:`~multimodal.models.CausalLM` over performance events.

    Logs ``train_nll`` / ``val_nll`` in nats per event and ``val_ppl``. Relative attention
    (``model.position: relative``) is the default of its config, as in Huang et al. 2018.
    """

    @staticmethod
    def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
        """Options of ``multimodal generate`` for music checkpoints."""
        parser.add_argument("--primer", type=Path, help="MIDI file to continue (default: a held-out chorale)")
        parser.add_argument("--primer-seconds", type=float, default=5.0, help="length of the primer (s)")
        parser.add_argument("--num-samples", type=int, default=1)
        parser.add_argument("--max-new-tokens", type=int, default=512)
        parser.add_argument("--no-audio", action="store_true", help="skip the WAV preview")

    def run_generate(self, tokenizer: MidiTokenizer, args: argparse.Namespace) -> None:
        """Writes ``sample_{i}.mid/.png/.wav`` continuations of the primer to ``args.out``."""
        if args.primer is not None:
            notes, source = notes_from_midi(args.primer), str(args.primer)
        else:
            held_out = load_bach_chorales().split("validation")
            notes, source = held_out.notes[0], f"held-out chorale {held_out.names[0]}"
        primer = primer_ids(notes, tokenizer, args.primer_seconds)
        paths = continue_music(
            self.model, tokenizer, primer, args.out, num_samples=args.num_samples,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
            top_p=args.top_p, seed=args.seed, progress=True, audio=not args.no_audio,
        )  # fmt: skip
        print(f"primer: first {args.primer_seconds:g} s of {source} ({len(primer)} events)")
        for path in paths:
            print(f"wrote {path} (+ .png piano roll{'' if args.no_audio else ', .wav preview'})")
