"""Music end to end without Lightning: continue primers into files (:mod:`.continuation`, directed by
:func:`parse_controls`), harmonize a melody or fill a gap (:mod:`.harmonize`; a gap in bars: :mod:`.bars`), choose
who plays the parts (:mod:`.instruments`), write sheet music (:mod:`.score`), score MIDI (:mod:`.scoring`),
compare continuations with the real ones (:mod:`.evaluation`, :mod:`.stats`)."""

from __future__ import annotations

from multimodal.music.bars import bar_starts, beat_grid, span_seconds
from multimodal.music.continuation import continue_music, continue_primers, primer_ids, read_primer
from multimodal.music.evaluation import evaluate_continuations, longest_note
from multimodal.music.harmonize import (
    check_melody,
    harmonize,
    harmonize_to_files,
    infill,
    infill_to_files,
    read_melody,
)
from multimodal.music.instruments import parse_program, with_part_names, with_programs
from multimodal.music.score import write_musicxml
from multimodal.music.scoring import MusicScore, score_music, token_nll
from multimodal.music.stats import FEATURES, ExcerptStats, comparison_table, excerpt_stats, overlaps
from multimodal.tokenizers.music_controls import Controls, parse_controls

__all__ = ["FEATURES", "Controls", "ExcerptStats", "MusicScore", "bar_starts", "beat_grid", "check_melody", "comparison_table", "continue_music", "continue_primers", "evaluate_continuations", "excerpt_stats", "harmonize", "harmonize_to_files", "infill", "infill_to_files", "longest_note", "overlaps", "parse_controls", "parse_program", "primer_ids", "read_melody", "read_primer", "score_music", "span_seconds", "token_nll", "with_part_names", "with_programs", "write_musicxml"]
