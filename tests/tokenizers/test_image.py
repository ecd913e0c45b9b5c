"""Patches and raster pixel tokens, checked against naive loops and hand-written expectations."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from multimodal.tokenizers.base import Tokenizer
from multimodal.tokenizers.image import (
    PixelTokenizer,
    patchify,
    pixel_positions,
    pixels_to_tokens,
    tokens_to_pixels,
    unpatchify,
)


def naive_patchify(images: torch.Tensor, patch_height: int, patch_width: int) -> torch.Tensor:
    """Loops over patches in raster order; each patch flattened row by row, channels innermost."""
    batch, channels, height, width = images.shape
    out = []
    for b in range(batch):
        patches = []
        for top in range(0, height, patch_height):
            for left in range(0, width, patch_width):
                values = []
                for row in range(top, top + patch_height):
                    for col in range(left, left + patch_width):
                        for channel in range(channels):
                            values.append(images[b, channel, row, col])
                patches.append(torch.stack(values))
        out.append(torch.stack(patches))
    return torch.stack(out)


@pytest.mark.parametrize(
    ("shape", "patch_size"),
    [((2, 3, 8, 12), 4), ((1, 1, 6, 4), 2), ((2, 3, 6, 8), (3, 4)), ((1, 3, 4, 4), 4)],
)
def test_patchify_matches_naive_loop(shape, patch_size):
    images = torch.randn(shape)
    patch_height, patch_width = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    expected = naive_patchify(images, patch_height, patch_width)
    torch.testing.assert_close(patchify(images, patch_size), expected, rtol=0, atol=0)


@pytest.mark.parametrize(("channels", "height", "width"), [(3, 12, 20), (1, 8, 32), (3, 4, 4)])
def test_unpatchify_inverts_patchify_on_rectangular_images(channels, height, width):
    images = torch.rand(2, channels, height, width)
    patches = patchify(images, 4)
    assert patches.shape == (2, (height // 4) * (width // 4), 4 * 4 * channels)
    assert torch.equal(unpatchify(patches, 4, (height, width), channels), images)


def test_patchify_accepts_unbatched_image():
    image = torch.rand(3, 8, 12)
    patches = patchify(image, 4)
    assert torch.equal(patches, patchify(image[None], 4)[0])
    assert torch.equal(unpatchify(patches, 4, (8, 12), 3), image)


def test_patchify_error_names_sizes_and_fix():
    with pytest.raises(ValueError, match=r"10x12.*4x4 patches.*resize or crop"):
        patchify(torch.rand(1, 3, 10, 12), 4)


def test_unpatchify_rejects_patches_of_wrong_shape():
    with pytest.raises(ValueError, match=r"\(num_patches, patch_dim\) = \(6, 48\)"):
        unpatchify(torch.rand(1, 6, 16), 4, (8, 12), 3)


def test_pixel_tokens_interleave_channels_per_pixel_on_2x2_rgb():
    # pixel (row, col) has R = 10 + k, G = 20 + k, B = 30 + k with k = 2 * row + col
    image = torch.tensor(
        [[[10, 11], [12, 13]], [[20, 21], [22, 23]], [[30, 31], [32, 33]]], dtype=torch.uint8
    )
    tokenizer = PixelTokenizer(height=2, width=2, channels=3)
    assert tokenizer.encode(image) == [10, 20, 30, 11, 21, 31, 12, 22, 32, 13, 23, 33]
    assert pixel_positions(2, 2, 3)[:4].tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0]]
    assert pixel_positions(2, 2, 3)[-1].tolist() == [1, 1, 2]


def test_positions_address_the_pixel_each_token_came_from():
    image = torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8)
    tokens = torch.tensor(PixelTokenizer(5, 7, 3).encode(image))
    rows, cols, chans = PixelTokenizer(5, 7, 3).positions().unbind(-1)
    assert torch.equal(image[chans, rows, cols].long(), tokens)


def test_pixel_tokens_round_trip_exactly_at_256_levels():
    tokenizer = PixelTokenizer(height=5, width=7, channels=3)
    image = torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8)
    ids = tokenizer.encode(image)
    assert ids == image.permute(1, 2, 0).flatten().tolist()  # token id == intensity
    assert torch.equal(tokenizer.decode(ids), image)
    # float input in [0, 1] means value / 255
    assert tokenizer.encode(image.float() / 255) == ids


@pytest.mark.parametrize("num_levels", [2, 16, 17, 100])
def test_fewer_levels_decode_within_half_a_bin(num_levels):
    values = torch.arange(256, dtype=torch.uint8).reshape(1, 16, 16)
    tokens = pixels_to_tokens(values, num_levels)
    assert tokens.min() == 0 and tokens.max() == num_levels - 1
    assert torch.all(tokens.diff() >= 0)  # monotone in intensity
    decoded = tokens_to_pixels(tokens, 16, 16, 1, num_levels)
    half_bin = 128 / num_levels
    assert (decoded.int() - values.int()).abs().max() <= math.ceil(half_bin)
    # every level's decoded value is the centre of the values mapped to it, within rounding
    for level in range(num_levels):
        members = values.flatten()[tokens == level].float()
        centre = decoded.flatten()[tokens == level].unique()
        assert len(centre) == 1 and abs(centre.item() - members.mean().item()) <= 0.5


def test_specials_follow_intensities_and_are_skipped_by_decode():
    tokenizer = PixelTokenizer(height=1, width=2, channels=1, num_levels=16)
    assert (tokenizer.bos_id, tokenizer.pad_id, tokenizer.vocab_size) == (16, 17, 18)
    assert tokenizer.eos_id == tokenizer.bos_id
    assert isinstance(tokenizer, Tokenizer)
    image = torch.tensor([[[0, 255]]], dtype=torch.uint8)
    ids = tokenizer.encode(image)
    assert ids == [0, 15]
    assert tokenizer.decode([tokenizer.bos_id, *ids, tokenizer.pad_id]).tolist() == [[[8, 248]]]


def test_pixel_tokenizer_reads_pil_images_and_rejects_wrong_size():
    array = np.random.default_rng(0).integers(0, 256, (4, 6, 3), dtype=np.uint8)  # (height, width, channels)
    tokenizer = PixelTokenizer(height=4, width=6, channels=3)
    assert tokenizer.encode(Image.fromarray(array)) == array.flatten().tolist()
    with pytest.raises(ValueError, match="resize or crop"):
        tokenizer.encode(torch.zeros(3, 6, 4, dtype=torch.uint8))


def test_pixel_tokenizer_save_load_round_trip(tmp_path):
    tokenizer = PixelTokenizer(height=8, width=8, channels=1, num_levels=17)
    tokenizer.save(tmp_path / "pixels.json")
    loaded = PixelTokenizer.load(tmp_path / "pixels.json")
    assert loaded == tokenizer and loaded.vocab_size == 19
    (tmp_path / "other.json").write_text('{"type": "MidiTokenizer"}')
    with pytest.raises(ValueError, match="PixelTokenizer"):
        PixelTokenizer.load(tmp_path / "other.json")
