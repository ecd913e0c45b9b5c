"""What the models make shows in TensorBoard: read back from the event files of tiny runs of every task."""

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tasks.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RUNS = {
    "music": (["music_continuation.yaml", "music_continuation_tiny.yaml"], "music_continuation",
              {"images": ["music/piano_roll"], "audio": ["music/continuation"]}),
    "text": (["text_lm.yaml", "text_lm_tiny.yaml"], "text_lm", {"tensors": ["text/sample/text_summary"]}),
    "vit": (["image_classification.yaml", "image_classification_tiny.yaml"], "image_classification",
            {"images": ["confusion_matrix/val"]}),
    "image_generation": (["image_generation.yaml", "image_generation_tiny.yaml"], "image_generation",
                         {"images": ["samples"]}),
    "super_resolution": (["super_resolution.yaml", "super_resolution_tiny.yaml"], "super_resolution",
                         {"images": ["samples/bicubic_ours_original"]}),
}  # fmt: skip


@pytest.mark.parametrize("name", list(RUNS))
def test_samples_are_in_the_event_files(name, tmp_path, monkeypatch):
    configs, folder, expected = RUNS[name]
    monkeypatch.chdir(tmp_path)
    main(["fit", *[arg for config in configs for arg in ("--config", str(CONFIGS / config))]])
    run = tmp_path / "outputs" / folder / "lightning_logs" / "version_0"
    events = EventAccumulator(str(run), size_guidance={"images": 0, "audio": 0, "tensors": 0}).Reload()
    tags = events.Tags()
    for kind, names in expected.items():
        for tag in names:
            assert tag in tags[kind], f"{tag} not among the {kind}: {tags[kind]}"
    for tag in expected.get("images", []):
        image = events.Images(tag)[-1]
        assert image.width > 10 and image.height > 10 and len(image.encoded_image_string) > 500
    for tag in expected.get("audio", []):
        clip = events.Audio(tag)[-1]
        assert clip.sample_rate == 16_000 and clip.length_frames > 16_000 // 2  # more than half a second of music
    for tag in expected.get("tensors", []):
        text = events.Tensors(tag)[-1].tensor_proto.string_val[0].decode()
        assert len(text) > 10
