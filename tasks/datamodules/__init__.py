"""Lightning data modules, one module per modality, re-exported flat.

Each wraps the plain torch data sets of ``multimodal.data``. Late-bound sizes (``vocab_size``,
``pad_id``, ``num_classes``) are properties available right after construction, so the CLI can
link them into the task before anything is loaded.
"""

from tasks.datamodules.images import ImageClassificationDataModule
from tasks.datamodules.music import MusicDataModule
from tasks.datamodules.pixels import PixelDataModule, SuperResolutionDataModule
from tasks.datamodules.text import TextDataModule

__all__ = ["ImageClassificationDataModule", "MusicDataModule", "PixelDataModule", "SuperResolutionDataModule", "TextDataModule"]
