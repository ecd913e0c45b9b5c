"""The Image Transformer: causality over sub-pixels, cached sampling, class conditioning, positions."""

import pytest
import torch

from multimodal.images import sample_images
from multimodal.models.config import ImageTransformerConfig
from multimodal.models.image_transformer import ImageTransformer, PixelPositionEmbedding
from multimodal.tokenizers.image import tokens_to_pixels

ATTENTION = {
    "full": dict(attention="full"),
    "local1d": dict(attention="local1d", local_window=7),
    "local2d": dict(attention="local2d", local_query_shape=(2, 3), local_memory_shape=(1, 2)),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _model(attention="local2d", **overrides):
    values = dict(dim=16, num_layers=2, num_heads=2, ff_dim=32, dropout=0.0, height=5, width=4, channels=3,
                  num_levels=8, num_classes=3, position="relative", **ATTENTION[attention])  # fmt: skip
    torch.manual_seed(0)
    return ImageTransformer(ImageTransformerConfig(**{**values, **overrides})).eval()


@pytest.mark.parametrize("attention", list(ATTENTION))
def test_cached_sampling_equals_the_uncached_path(attention):
    model = _model(attention, class_conditional=True, height=3, width=4, channels=2)
    labels = torch.tensor([0, 2, 1])
    draws = [sample_images(model, 3, labels=labels, generator=torch.Generator().manual_seed(5), use_cache=use_cache)
             for use_cache in (True, False)]  # fmt: skip
    assert draws[0].shape == (3, 2, 3, 4) and draws[0].dtype == torch.uint8
    assert torch.equal(draws[0], draws[1])
    assert int(draws[0].max()) <= 255 and len(draws[0].unique()) > 1


@pytest.mark.parametrize("attention", list(ATTENTION))
def test_teacher_forced_logits_equal_step_by_step_logits(attention):
    model = _model(attention)
    tokens = torch.randint(0, 8, (2, 60))
    inputs = model.inputs(tokens)
    full = model(inputs)
    state = model.new_state()
    steps = [model(inputs[:, :13], state=state)] + [
        model(inputs[:, t : t + 1], state=state) for t in range(13, 60)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)


def test_prediction_of_a_sub_pixel_never_sees_it_or_later_ones():
    model = _model()
    tokens = torch.randint(0, 8, (1, 60))
    changed = tokens.clone()
    changed[0, 30] = (changed[0, 30] + 3) % 8
    before, after = model(model.inputs(tokens)), model(model.inputs(changed))
    torch.testing.assert_close(before[:, :31], after[:, :31])  # input 31 is the first to carry token 30
    assert (before[:, 31:] - after[:, 31:]).abs().max() > 1e-4


def test_class_conditioning_changes_predictions_and_needs_labels():
    model = _model(class_conditional=True)
    inputs = model.inputs(torch.randint(0, 8, (1, 60)))
    assert (model(inputs, torch.tensor([0])) - model(inputs, torch.tensor([1]))).abs().max() > 1e-4
    with pytest.raises(ValueError, match="class-conditional"):
        model(inputs)
    with pytest.raises(ValueError, match="class-conditional"):
        sample_images(model, 2)


def test_pixel_position_embedding_adds_row_column_and_channel_tables():
    positions = PixelPositionEmbedding(8, height=3, width=4, channels=3)
    got = positions(5, offset=14)  # tokens 14..18: pixel 4 (row 1, col 0) channel 2, then pixel 5, 6
    expected = [positions.rows.weight[i // 12] + positions.cols.weight[i // 3 % 4] + positions.channel.weight[i % 3]
                for i in range(14, 19)]  # fmt: skip
    torch.testing.assert_close(got, torch.stack(expected))
    torch.testing.assert_close(positions.of_grid(3, 4), positions(36))


def test_sequences_longer_than_the_image_are_a_clear_error():
    model = _model()
    with pytest.raises(ValueError, match="exceed the 60 sub-pixels of a 5x4x3 image"):
        model(torch.zeros(1, 61, dtype=torch.long))


def test_config_derives_sequence_length_and_raster_grid():
    config = ImageTransformerConfig(height=28, width=28, channels=3, local_grid_width=5, max_seq_len=7)
    assert config.max_seq_len == config.seq_len == 28 * 28 * 3
    assert config.local_grid_width == 28 * 3
    with pytest.raises(ValueError, match="num_classes >= 1"):
        ImageTransformerConfig(class_conditional=True, num_classes=0)


def test_guided_class_sampling_equals_a_naive_loop_over_label_and_no_class():
    model = _model("full", class_conditional=True, class_dropout=0.1, height=2, width=3, channels=1)
    assert model.no_class_id == 3 and model.class_embedding.num_embeddings == 4
    labels, scale = torch.tensor([2, 0]), 2.5
    guided = sample_images(model, 2, labels=labels, temperature=0, guidance_scale=scale)
    tokens = torch.full((2, 1), model.bos_id)
    with torch.no_grad():
        for _ in range(6):  # greedy over log p(x | none) + s (log p(x | label) - log p(x | none)), full forwards
            conditional = model(tokens, labels)[:, -1].log_softmax(-1)
            unconditional = model(tokens, torch.full_like(labels, 3))[:, -1].log_softmax(-1)
            tokens = torch.cat([tokens, (unconditional + scale * (conditional - unconditional)).argmax(-1, keepdim=True)], 1)
    assert torch.equal(guided, tokens_to_pixels(tokens[:, 1:], 2, 3, 1, num_levels=8))
    assert not torch.equal(guided, sample_images(model, 2, labels=labels, temperature=0))  # guidance moved it


def test_guidance_needs_a_model_trained_with_class_dropout():
    with pytest.raises(ValueError, match="guidance_scale needs"):
        sample_images(_model(class_conditional=True), 1, labels=torch.tensor([0]), guidance_scale=2.0)
    with pytest.raises(ValueError, match="class_dropout"):
        ImageTransformerConfig(class_dropout=0.1)  # not class-conditional
