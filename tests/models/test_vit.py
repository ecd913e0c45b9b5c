"""ViT: presets, pooling, timm-compatible layout, resizing positions on load, clear errors."""

import pytest
import torch

from multimodal.layers.positions.resample import resize_positions
from multimodal.models import VIT_PRESETS, ViT, ViTConfig


def micro(**overrides) -> ViTConfig:
    return ViTConfig.from_preset(
        "micro", **{"image_size": 8, "patch_size": 2, "channels": 1, "num_classes": 10, **overrides}
    )


@pytest.mark.parametrize("name", sorted(VIT_PRESETS))
def test_every_preset_builds_and_classifies(name):
    config = ViTConfig.from_preset(name, image_size=32, patch_size=16, num_classes=7)
    device = "cpu" if name in ("micro", "tiny") else "meta"  # the big ones: shapes only, no weights
    with torch.device(device):
        model = ViT(config).eval()
        logits = model(torch.rand(2, 3, 32, 32))
    assert logits.shape == (2, 7) and (device == "meta" or torch.isfinite(logits).all())
    assert config.grid_size == (2, 2) and config.max_seq_len == 1 + 4 and config.norm_eps == 1e-6


def test_standard_sizes_match_timm_vit_tiny_parameter_for_parameter():
    timm = pytest.importorskip("timm")
    with torch.device("meta"):  # shapes only
        reference = timm.create_model("vit_tiny_patch16_224", pretrained=False)
        ours = ViT(ViTConfig.from_preset("tiny", num_classes=1000))
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    theirs = dict(reference.named_parameters())
    mine = dict(ours.named_parameters())
    assert mine["encoder.blocks.0.attention.to_qkv.weight"].shape == theirs["blocks.0.attn.qkv.weight"].shape
    assert mine["encoder.blocks.0.ff.up.weight"].shape == theirs["blocks.0.mlp.fc1.weight"].shape
    assert mine["encoder.positions.weight"].shape == theirs["pos_embed"].shape[1:]
    assert mine["cls_token"].shape == theirs["cls_token"].shape
    assert mine["patch_embed.weight"].numel() == theirs["patch_embed.proj.weight"].numel()
    assert ours.encoder.norm.eps == reference.norm.eps == 1e-6
    assert [VIT_PRESETS[n]["dim"] for n in ("tiny", "small", "base")] == [192, 384, 768]


@pytest.mark.parametrize("position", ["learned", "relative2d"])
def test_pooling_and_feature_shapes(position):
    with_cls = ViT(micro(position=position, pooling="cls"))
    mean = ViT(micro(position=position, pooling="mean"))
    images = torch.rand(3, 1, 8, 8)
    assert with_cls.forward_features(images).shape == (3, 1 + 16, 64)
    assert mean.forward_features(images).shape == (3, 16, 64) and mean.cls_token is None
    features = mean.forward_features(images)
    torch.testing.assert_close(mean.forward_head(features, pre_logits=True), features.mean(1))
    torch.testing.assert_close(with_cls.forward_head(with_cls.forward_features(images)), with_cls(images))


@pytest.mark.parametrize("distillation_token", [False, True])
@pytest.mark.parametrize("position", ["learned", "relative2d"])
def test_class_token_shortcut_gives_the_full_model_logits_and_gradients(position, distillation_token):
    torch.manual_seed(0)
    model = ViT(micro(position=position, pooling="cls", distillation_token=distillation_token))
    with torch.no_grad():  # make the prefix scalars and every other parameter matter
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    images = torch.rand(3, 1, 8, 8)
    short, full = model(images), model.forward_head(model.forward_features(images))
    torch.testing.assert_close(short, full, atol=1e-5, rtol=0)
    weights = torch.randn_like(full)
    parameters = list(model.parameters())
    short_grads = torch.autograd.grad((short * weights).sum(), parameters)
    full_grads = torch.autograd.grad((full * weights).sum(), parameters)
    for got, expected in zip(short_grads, full_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_local_attention_vit_still_classifies_with_the_full_last_block():
    torch.manual_seed(0)
    model = ViT(micro(attention="local1d", local_window=4)).eval()
    images = torch.rand(2, 1, 8, 8)
    torch.testing.assert_close(model(images), model.forward_head(model.forward_features(images)))


def test_positions_make_the_model_see_where_patches_are():
    images = torch.rand(2, 1, 8, 8)
    moved = torch.roll(images, shifts=2, dims=-1)  # the same patches, one patch column further right
    for position in ("learned", "relative2d", "none"):
        torch.manual_seed(0)
        model = ViT(micro(position=position, pooling="mean")).eval()
        same = torch.allclose(model(images), model(moved), atol=1e-5)
        assert same == (position == "none"), position  # without positions, a ViT is permutation-blind


def test_state_dict_of_another_image_size_loads_with_resampled_positions():
    small = ViT(micro(position="learned"))
    large = ViT(micro(position="learned", image_size=16))
    large.load_state_dict(small.state_dict())
    old, new = small.encoder.positions.weight, large.encoder.positions.weight
    assert new.shape == (1 + 64, 64)
    torch.testing.assert_close(new[0], old[0])  # the class token's embedding is kept
    expected = resize_positions(old.detach(), 1 + 64, (4, 4), (8, 8))
    torch.testing.assert_close(new, expected)
    assert torch.isfinite(large(torch.rand(1, 1, 16, 16))).all()


def test_relative2d_state_dict_of_another_image_size_loads_with_resampled_tables():
    small = ViT(micro(position="relative2d"))
    large = ViT(micro(position="relative2d", image_size=(12, 16)))
    large.load_state_dict(small.state_dict())
    rows = large.encoder.blocks[0].attention.position.rows
    cols = large.encoder.blocks[0].attention.position.cols
    assert rows.shape == (4, 2 * 6 - 1, 16) and cols.shape == (4, 2 * 8 - 1, 16)
    torch.testing.assert_close(rows[:, 5], small.encoder.blocks[0].attention.position.rows[:, 3])
    assert large(torch.rand(1, 1, 12, 16)).shape == (1, 10)


def test_resampling_keeps_constant_embeddings_constant():
    weight = torch.cat([torch.randn(1, 5), torch.full((9, 5), 0.3)])
    resized = resize_positions(weight, 1 + 20, (3, 3), (5, 4))
    assert resized.shape == (1 + 20, 5)
    torch.testing.assert_close(resized[1:], torch.full((20, 5), 0.3))
    assert resize_positions(weight, 1 + 9, (3, 3), (3, 3)) is weight


def _naive_conv_gelu(images: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A 3x3, stride-1, zero-padded convolution and exact GELU, written out sum by sum."""
    batch, _, height, width = images.shape
    padded = torch.zeros(batch, images.shape[1], height + 2, width + 2, dtype=torch.float64)
    padded[:, :, 1:-1, 1:-1] = images.double()
    out = bias.double().view(1, -1, 1, 1).repeat(batch, 1, height, width)
    for dy in range(3):
        for dx in range(3):  # (b, c, h, w) x (o, c) -> (b, o, h, w)
            out += torch.einsum("bchw,oc->bohw", padded[:, :, dy : dy + height, dx : dx + width], weight[:, :, dy, dx].double())
    return 0.5 * out * (1 + torch.erf(out / 2**0.5))


def test_conv_stem_patches_the_convolved_image():
    """A ViT with a stem = the same ViT over the stem's feature maps, the stem computed by hand."""
    torch.manual_seed(0)
    stem = ViT(micro(stem_channels=(4, 6))).double()
    plain = ViT(micro(channels=6)).double()
    assert stem.config.patch_dim == plain.config.patch_dim == 2 * 2 * 6
    plain.load_state_dict({k: v for k, v in stem.state_dict().items() if not k.startswith("stem.")})  # strict
    images = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    features = images
    for conv in (stem.stem[0], stem.stem[2]):
        features = _naive_conv_gelu(features, conv.weight.detach(), conv.bias.detach())
    torch.testing.assert_close(stem(images), plain(features))
    stem(images).sum().backward()
    assert stem.stem[0].weight.grad.abs().sum() > 0  # the stem learns
    assert ViT(micro()).stem is None and "stem.0.weight" not in ViT(micro()).state_dict()  # no stem: timm's layout
    with pytest.raises(ValueError, match="stem_channels must be positive"):
        micro(stem_channels=(4, 0))


def test_strided_conv_stem_patches_every_other_pixel_of_the_full_convolution():
    """Stride 2 = the stride-1 convolution kept at even rows and columns (padding 1), layer by layer;
    odd sides round up (7 -> 4), and the grid is cut from the reduced map."""
    torch.manual_seed(0)
    stem = ViT(micro(image_size=7, patch_size=1, stem_channels=(4, 6), stem_stride=2)).double()
    assert stem.config.stem_size == (2, 2) and stem.config.grid_size == (2, 2)  # 7 -> 4 -> 2
    plain = ViT(micro(image_size=2, patch_size=1, channels=6)).double()
    plain.load_state_dict({k: v for k, v in stem.state_dict().items() if not k.startswith("stem.")})  # strict
    images = torch.rand(3, 1, 7, 7, dtype=torch.float64)
    features = images
    for conv in (stem.stem[0], stem.stem[2]):
        features = _naive_conv_gelu(features, conv.weight.detach(), conv.bias.detach())[:, :, ::2, ::2]
    assert features.shape == (3, 6, 2, 2)
    torch.testing.assert_close(stem(images), plain(features))
    assert ViTConfig.from_preset("micro", image_size=28, patch_size=1, channels=1, stem_channels=(8, 8, 8),
                                 stem_stride=2).grid_size == (4, 4)  # fmt: skip
    with pytest.raises(ValueError, match="stride-2 stem's 4x4 maps"):
        micro(image_size=8, patch_size=3, stem_stride=2, stem_channels=(4,))
    with pytest.raises(ValueError, match="stem_stride must be 1 or 2"):
        micro(stem_stride=3, stem_channels=(4,))
    with pytest.raises(ValueError, match=r"expected images \(batch, 1, 7, 7\)"):
        stem(torch.rand(1, 1, 8, 8, dtype=torch.float64))


def test_conv_stem_survives_a_model_folder(tmp_path):
    from multimodal.convert.folder import load, save_model_folder

    model = ViT(micro(stem_channels=[5, 3], stem_stride=2, patch_size=1)).eval()
    loaded, _ = load(save_model_folder(model, tmp_path / "vit"))
    assert loaded.config.stem_channels == (5, 3) and loaded.config.stem_stride == 2
    images = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), model(images), atol=0, rtol=0)


def test_weight_decay_skips_tokens_positions_norms_and_biases():
    skip = ViT(micro(position="relative2d")).no_weight_decay() | ViT(micro(distillation_token=True)).no_weight_decay()
    assert {"cls_token", "dist_token", "encoder.positions.weight", "encoder.norm.weight", "head.bias", "head_dist.bias"} <= skip
    assert "encoder.blocks.0.attention.position.rows" in skip
    assert "encoder.blocks.0.attention.to_qkv.weight" not in skip and "patch_embed.weight" not in skip


def test_wrong_inputs_and_sizes_say_how_to_fix():
    model = ViT(micro())
    with pytest.raises(ValueError, match=r"expected images \(batch, 1, 8, 8\).*ViTConfig.image_size"):
        model(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="not a multiple of patch_size=3"):
        micro(patch_size=3)
    with pytest.raises(ValueError, match="distillation_token needs pooling='cls'"):
        micro(pooling="mean", distillation_token=True)
    with pytest.raises(ValueError, match="forward_heads needs a ViT with a distillation token"):
        model.forward_heads(torch.rand(2, 1, 8, 8))
    with pytest.raises(ValueError, match="unknown ViT preset"):
        ViTConfig.from_preset("huge")
