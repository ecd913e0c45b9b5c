"""Text end to end without Lightning: continue a prompt (:mod:`.continuation`), score documents (:mod:`.scoring`)."""

from __future__ import annotations

from multimodal.text.continuation import continue_text, continue_texts, stream_text
from multimodal.text.scoring import IGNORE_INDEX, Score, score_text, score_windows, window_sums

__all__ = ["IGNORE_INDEX", "Score", "continue_text", "continue_texts", "score_text", "score_windows", "stream_text", "window_sums"]
