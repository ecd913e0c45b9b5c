"""Lightning data modules, one module per modality, re-exported flat.

Each wraps the plain torch data sets of ``multimodal.data``. Late-bound sizes (``vocab_size``,
``pad_id``, ``num_classes``) are properties available right after construction, so the CLI can
link them into the task before anything is loaded.
"""

from tasks.datamodules.audio_classification import InstrumentFamilyDataModule
from tasks.datamodules.image_classification import ImageClassificationDataModule
from tasks.datamodules.image_generation import ImageGenerationDataModule
from tasks.datamodules.music import MusicDataModule
from tasks.datamodules.super_resolution import SuperResolutionDataModule
from tasks.datamodules.text import TextDataModule
from tasks.datamodules.transcription import TranscriptionDataModule

__all__ = ["ImageClassificationDataModule", "ImageGenerationDataModule", "InstrumentFamilyDataModule", "MusicDataModule", "SuperResolutionDataModule", "TextDataModule",
           "TranscriptionDataModule"]
