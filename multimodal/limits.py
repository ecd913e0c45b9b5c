"""The documented bounds on counts and sizes that come from arguments, requests and files.

Every count a user or a file gives (tokens to generate, samples to draw, beams, output pixels) is
checked against one of these *before* anything is allocated, so a typo (``--num-samples
1000000000``) is one line of error instead of a machine out of memory. The library functions
check them (:func:`multimodal.generation.generate`, :func:`multimodal.images.upscale`); the
commands' parsers (``tasks.arguments``) and the serve pages use the same values, and say them in
their help and errors. This module imports nothing, so the parsers can use it before torch loads.
"""

from __future__ import annotations

MAX_NEW_TOKENS = 65_536
"""Tokens one generation call adds per sequence (``2**16``), unless the model's ``max_seq_len`` is larger
(an Image Transformer samples ``height * width * channels`` sub-pixels). The prompt and the cache
grow with it; a learned-position model stops at its ``max_seq_len`` anyway."""

MAX_CONTEXT = 65_536
"""Tokens in one scoring window (``multimodal perplexity --context`` / ``--seq-len``)."""

MAX_SAMPLES = 1_024
"""Samples one command draws (``--num-samples`` of images or music); each is also a file written."""

MAX_BEAMS = 64
"""Beams of one beam search (``--num-beams``): the search keeps ``2 * beams`` sequences per prompt."""

MAX_BATCH_SIZE = 1_024
"""Prompts, primers, windows or tiles processed together (``--batch-size``)."""

MAX_OUTPUT_PIXELS = 4096 * 4096
"""Pixels (16.8 million) of a super-resolution output unless raised (``--max-output-pixels``): the
upscaled image, its blending weights and the bicubic comparison are held in memory as float32,
about 60 bytes per output pixel (measured: ``multimodal generate`` of a 2048x2048 RGB input to
4096x4096 peaks at 2.4 GB resident, 0.8 GB of it the imports). A larger input is refused from its
header, before it is decoded."""
