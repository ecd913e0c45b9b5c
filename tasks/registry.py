"""Every task, by short name: the registry the CLI resolves ``--model NAME`` and config class paths with.

To add a task, add its class here (and a config under ``configs/``); nothing else imports it.
"""

TASKS: dict[str, str] = {
    "CausalLMTask": "tasks.causal_lm.CausalLMTask",
    "MusicContinuation": "tasks.music_continuation.MusicContinuation",
    "LanguageModeling": "tasks.language_modeling.LanguageModeling",
    "ImageClassification": "tasks.image_classification.ImageClassification",
    "ConvNetClassification": "tasks.image_classification.ConvNetClassification",
    "ImageGeneration": "tasks.image_generation.ImageGeneration",
    "SuperResolution": "tasks.super_resolution.SuperResolution",
    "AutoregressiveSuperResolution": "tasks.super_resolution.AutoregressiveSuperResolution",
    "Transcription": "tasks.transcription.Transcription",
}
"""Short name -> full class path."""

LEGACY_TASK_PATHS: dict[str, str] = {
    "tasks.classification.ImageClassification": TASKS["ImageClassification"],
}
"""Class paths that checkpoints of earlier versions name -> where the class lives now."""
