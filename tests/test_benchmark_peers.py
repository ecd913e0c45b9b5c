"""Benchmark peers are like for like: every peer of the throughput benchmarks has our model's size."""

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _count_without_positions(model) -> int:
    """Parameters other than position tables (learned absolute, or one relative table per layer)."""
    return sum(p.numel() for name, p in model.named_parameters() if "position" not in name)


def test_text_throughput_peers_have_our_parameter_count():
    pytest.importorskip("transformers")
    pytest.importorskip("x_transformers")
    import text_throughput

    ours = _count(text_throughput.ours(128))
    for name, build in text_throughput.BUILDERS.items():
        model = build(128)
        if name == "ours_relative":  # a position variant: the same model once position tables are set aside
            count, reference = _count_without_positions(model), _count_without_positions(text_throughput.ours(128))
        else:
            count, reference = _count(model), ours
        assert abs(count - reference) / reference < 0.01, f"{name}: {count:,} parameters against our {reference:,}"


def test_music_quality_lstm_matches_the_transformer():
    import argparse

    import music_quality

    args = argparse.Namespace(dim=32, num_layers=2, lstm_layers=2, seq_len=64)
    transformer, lstm = (_count(music_quality.build(name, 100, args)) for name in ("relative", "lstm"))
    assert abs(transformer - lstm) / transformer < 0.02


def test_image_generation_pixelcnn_is_causal_and_of_the_transformers_size():
    import image_generation
    import torch
    import yaml

    config = yaml.safe_load((BENCHMARKS.parent / "configs" / "image_generation.yaml").read_text())
    from tasks.datamodules import ImageGenerationDataModule

    data = ImageGenerationDataModule("digits", batch_size=4)
    transformer = _count(image_generation.build_task(config, data, [], None).model)
    model = image_generation.PixelCNN.matching(transformer, num_levels=17).eval()
    assert abs(_count(model) - transformer) / transformer < 0.01
    # The logits of pixel p depend on the pixels before p in raster order, never on p or later ones.
    torch.manual_seed(0)
    levels = torch.randint(0, 17, (1, 1, 8, 8))
    base = model(levels)
    for position in (0, 13, 40, 63):
        changed = levels.clone()
        changed.view(-1)[position] = (changed.view(-1)[position] + 7) % 17
        moved = (model(changed) - base).abs().sum(1).flatten()
        assert moved[: position + 1].max() == 0 and (position == 63 or moved[position + 1 :].max() > 0)


def test_super_resolution_cnn_matches_the_transformers_size():
    import super_resolution
    import yaml

    from tasks.datamodules import SuperResolutionDataModule

    config = yaml.safe_load((BENCHMARKS.parent / "configs" / "super_resolution.yaml").read_text())
    data = SuperResolutionDataModule(**config["data"]["init_args"])
    transformer = _count(super_resolution.build_task(config, data, [], None).model)
    assert abs(_count(super_resolution.PlainCNN.matching(transformer, data)) - transformer) / transformer < 0.01


def test_super_resolution_overrides_split_between_the_data_and_the_model():
    import super_resolution
    import yaml

    config = yaml.safe_load((BENCHMARKS.parent / "configs" / "super_resolution.yaml").read_text())
    overrides = ["data.dihedral=true", "dim=32"]
    data = super_resolution.data_module(config, 2, 0, overrides)
    assert data.dihedral and super_resolution.data_module(config, 2, 0, ["dim=32"]).dihedral is False
    assert super_resolution.build_task(config, data, overrides, None).model.config.dim == 32


def test_text_generation_peer_is_gpt2_of_our_size():
    pytest.importorskip("transformers")
    import text_generation

    ours, hf = _count(text_generation.our_model()), _count(text_generation.hf_model())
    assert abs(ours - hf) / hf < 0.01, f"ours {ours:,} against GPT-2's {hf:,}"


def test_vit_throughput_peer_is_timm_vit_tiny_of_our_size():
    timm = pytest.importorskip("timm")

    from multimodal.models import ViT, ViTConfig

    theirs = _count(timm.create_model("vit_tiny_patch16_224", pretrained=False))
    ours = _count(ViT(ViTConfig.from_preset("tiny", num_classes=1000)))
    assert abs(ours - theirs) / theirs < 0.01, f"ours {ours:,} against timm's {theirs:,}"


def test_super_resolution_table_keeps_budgets_apart():
    import super_resolution

    photos = [{"photo": "chelsea", "gain_rgb": gain, "gain_y": gain, "ours_ssim": 0.9} for gain in (1.0,)]
    rows = [{"stage": "select", "model": "cnn", "scale": 2, "epochs": epochs, "parameters": 10, "minutes": 1.0,
             "overrides": [], "val": [{**photos[0], "gain_y": gain}]} for epochs, gain in ((150, 1.5), (220, 1.7))]  # fmt: skip
    lines = [line for line in super_resolution.tables(rows).splitlines() if line.startswith("| x2 |")]
    assert [line.split(" | ")[1] for line in lines] == ["150", "220"]
    assert ["1.50" in lines[0], "1.70" in lines[1]] == [True, True]
