"""timm ViT conversion: logits equal timm's on the same images (float32, 1e-4); no download."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from multimodal.convert.blocks import export_blocks, load_blocks
from multimodal.convert.timm_vit import convert_timm_vit, load_timm_vit, timm_vit_config
from multimodal.models import ViT, ViTConfig

timm = pytest.importorskip("timm")
SIZES = dict(patch_size=8, num_classes=10, embed_dim=48, depth=2, num_heads=3)


def _timm_vit(image_size: int = 32, seed: int = 0, **options):
    torch.manual_seed(seed)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=image_size, **{**SIZES, **options}
    )
    with torch.no_grad():
        for parameter in model.parameters():  # biases, norms, tokens away from their initial values
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_converted_vit_logits_equal_timm(tmp_path, suffix):
    reference = _timm_vit()
    path = tmp_path / f"vit{suffix}"
    state = {name: tensor.contiguous() for name, tensor in reference.state_dict().items()}
    save_file(state, str(path)) if suffix == ".safetensors" else torch.save(state, path)
    model = load_timm_vit(path, model_name="vit_tiny_patch16_224")
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (reference(images) - model(images)).abs().max() < 1e-4
        features = reference.forward_features(images)
        assert (features - model.forward_features(images)).abs().max() < 1e-4
    assert model.config.num_heads == 3 and model.config.grid_size == (4, 4) and model.config.num_classes == 10


def test_export_loads_into_a_vit_for_larger_images_like_timm_resampling(tmp_path):
    reference = _timm_vit()
    save_file(
        {n: t.contiguous() for n, t in reference.state_dict().items()}, str(tmp_path / "vit.safetensors")
    )
    convert_timm_vit(tmp_path / "vit.safetensors", tmp_path / "export", num_heads=3)
    config = ViTConfig(
        dim=48, num_layers=2, num_heads=3, ff_dim=192, image_size=48, patch_size=8, num_classes=10
    )
    model = ViT(config).eval()
    report = load_blocks(model, tmp_path / "export", ["blocks", "embeddings", "head"])
    assert report.resized == {"encoder.positions.weight": ((17, 48), (37, 48))}
    # timm at 48 px with its own resampling of the same weights (what timm does for a new img_size)
    larger = _timm_vit(image_size=48, seed=5)
    state = reference.state_dict()
    state["pos_embed"] = timm.layers.resample_abs_pos_embed(
        state["pos_embed"], [6, 6], [4, 4], num_prefix_tokens=1
    )
    larger.load_state_dict(state)
    images = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        assert (larger(images) - model(images)).abs().max() < 1e-4


def test_vit_blocks_into_a_new_classifier_keep_features(tmp_path):
    reference = _timm_vit()
    model = load_timm_vit(reference.state_dict(), num_heads=3)
    convert_dir = tmp_path / "export"
    export_blocks(model, convert_dir)
    fresh = ViT(
        ViTConfig(dim=48, num_layers=2, num_heads=3, ff_dim=192, image_size=32, patch_size=8, num_classes=3)
    )
    load_blocks(fresh, convert_dir, ["blocks", "embeddings"])  # new head for 3 classes
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            fresh.eval().forward_features(images), reference.forward_features(images), atol=1e-4, rtol=0
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"global_pool": "avg", "class_token": False}, "fc_norm"),
        ({"init_values": 1e-5}, "layer scale"),
        ({"qkv_bias": False}, "qkv bias"),
        ({"reg_tokens": 2}, "register tokens"),
    ],
)
def test_unsupported_timm_variants_are_refused_by_name(options, message):
    state = _timm_vit(**options).state_dict()
    with pytest.raises(ValueError, match=message):
        timm_vit_config(state, num_heads=3)


def test_heads_must_be_given_when_the_name_does_not_tell():
    with pytest.raises(ValueError, match="pass num_heads"):
        timm_vit_config(_timm_vit().state_dict(), model_name="my_vit")


def test_a_converted_deit_distilled_vit_gives_timm_s_two_heads_and_their_mean():
    torch.manual_seed(0)
    reference = timm.models.deit.VisionTransformerDistilled(img_size=32, **SIZES)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model = load_timm_vit(reference.state_dict(), model_name="deit_tiny_distilled_patch16_224")  # 3 heads by name
    assert model.config.num_heads == 3 and model.config.distillation_token and model.num_prefix_tokens == 2 and model.config.grid_size == (4, 4)
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (reference.eval()(images) - model(images)).abs().max() < 1e-4  # inference: the mean of the heads
        reference.set_distilled_training(True)
        class_logits, distilled_logits = reference.train()(images)  # distilled training: each head apart
        ours = model.forward_heads(images)
    assert (class_logits - ours[0]).abs().max() < 1e-4 and (distilled_logits - ours[1]).abs().max() < 1e-4
    assert (ours[0] - ours[1]).abs().max() > 1e-2  # two different heads
