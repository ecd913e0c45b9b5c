"""Music end to end without Lightning: continue primers into files (:mod:`.continuation`), score MIDI
(:mod:`.scoring`), compare continuations with the real ones (:mod:`.evaluation`, :mod:`.stats`)."""

from __future__ import annotations

from multimodal.music.continuation import continue_music, continue_primers, primer_ids
from multimodal.music.evaluation import evaluate_continuations, longest_note
from multimodal.music.scoring import MusicScore, score_music
from multimodal.music.stats import FEATURES, ExcerptStats, comparison_table, excerpt_stats, overlaps

__all__ = ["FEATURES", "ExcerptStats", "MusicScore", "comparison_table", "continue_music", "continue_primers", "evaluate_continuations", "excerpt_stats", "longest_note", "overlaps", "primer_ids", "score_music"]
