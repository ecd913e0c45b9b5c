"""Audio: MIDI rendered through a SoundFont, WAV files and spectrograms (:mod:`.synthesis`)."""

from __future__ import annotations

