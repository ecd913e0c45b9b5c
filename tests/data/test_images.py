"""Image data sets: fixed splits, corrupt files, how-to errors, augmentation specs, SR pairs."""

import collections
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits
from torchvision.transforms import v2

from multimodal.data.augment import build_transform
from multimodal.data.fetch import DatasetNotFoundError, default_cache_dir
from multimodal.data.image_folder import ImageFolder
from multimodal.data.images import (
    DIGITS_SPLIT_SIZES,
    digits_split_indices,
    image_classification_dataset,
    load_digits_split,
)
from multimodal.data.super_resolution import (
    SKIMAGE_HELD_OUT_PHOTOS,
    SKIMAGE_TEST_PHOTOS,
    SKIMAGE_TRAIN_PHOTOS,
    SuperResolutionCrops,
    skimage_photos,
    square_symmetry,
    super_resolution_dataset,
)
from multimodal.tokenizers.image import PixelTokenizer

# ------------------------------------------------------------------------------------------------
# Fixtures
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def class_folder(tmp_path: Path) -> Path:
    """``cats/`` and ``dogs/`` with 3 good PNGs each and one garbage ``.png`` among the dogs."""
    rng = np.random.default_rng(0)
    for name in ("cats", "dogs"):
        (tmp_path / name).mkdir()
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(
                tmp_path / name / f"{i}.png"
            )
    (tmp_path / "dogs" / "broken.png").write_bytes(b"this is not a png at all" * 10)
    (tmp_path / "dogs" / "notes.txt").write_text("not an image")
    return tmp_path


def coordinate_photo(height: int, width: int) -> Image.Image:
    """RGB photo whose red channel is the row and green channel the column of each pixel."""
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return Image.fromarray(np.stack([rows, cols, np.full_like(rows, 7)], axis=-1).astype(np.uint8))


def pil_bicubic(high_res: torch.Tensor, scale: int) -> torch.Tensor:
    """Independent reference: PIL's antialiased bicubic resize, per channel on float ("F") images."""
    size = (high_res.shape[-1] // scale, high_res.shape[-2] // scale)
    channels = [
        np.asarray(Image.fromarray(c.numpy()).resize(size, Image.Resampling.BICUBIC)) for c in high_res
    ]
    return torch.from_numpy(np.stack(channels)).clamp(0, 1)


# ------------------------------------------------------------------------------------------------
# Digits
# ------------------------------------------------------------------------------------------------


def test_digits_split_is_fixed_disjoint_complete_and_stratified():
    labels = load_digits().target
    splits = {name: digits_split_indices(name) for name in ("train", "val", "test")}
    assert (
        {name: len(idx) for name, idx in splits.items()}
        == DIGITS_SPLIT_SIZES
        == {
            "train": 1257,
            "val": 180,
            "test": 360,
        }
    )
    union = np.concatenate(list(splits.values()))
    assert len(np.unique(union)) == len(union) == len(labels) == 1797
    overall = np.bincount(labels) / len(labels)
    for name, idx in splits.items():
        fractions = np.bincount(labels[idx], minlength=10) / len(idx)
        assert np.abs(fractions - overall).max() < 1.5 / len(idx) + 1e-9, name
    # pinned: a changed split would silently change every reported validation number
    assert splits["test"][:6].tolist() == [21, 24, 28, 34, 35, 37]
    assert splits["val"][:6].tolist() == [5, 43, 47, 56, 59, 64]


def test_digits_representations_match_sklearn_pixels():
    raw = load_digits().images[digits_split_indices("val")]
    floats, labels = load_digits_split("val")
    levels, _ = load_digits_split("val", "levels")
    bytes_, _ = load_digits_split("val", "uint8")
    assert floats.shape == (180, 1, 8, 8) and floats.dtype == torch.float32 and labels.shape == (180,)
    assert np.array_equal(floats[:, 0].numpy(), (raw / 16).astype(np.float32))
    assert np.array_equal(levels[:, 0].numpy(), raw.astype(np.int64))
    assert bytes_.dtype == torch.uint8 and int(bytes_.max()) == 255
    # the documented way to get the 17 raw levels back as pixel tokens
    tokenizer = PixelTokenizer(height=8, width=8, channels=1, num_levels=17)
    for image, level in zip(bytes_[:50], levels[:50], strict=True):
        assert tokenizer.encode(image) == level.flatten().tolist()


def test_digits_factory_yields_float_images_and_class_metadata():
    dataset = image_classification_dataset("digits", split="test")
    image, label = dataset[0]
    assert len(dataset) == 360 and dataset.num_classes == 10 and dataset.class_names[3] == "3"
    assert image.shape == (1, 8, 8) and image.dtype == torch.float32 and 0 <= image.min() <= image.max() <= 1
    assert type(image) is torch.Tensor and isinstance(label, int) and label == dataset.targets[0]


# ------------------------------------------------------------------------------------------------
# ImageFolder
# ------------------------------------------------------------------------------------------------


def test_image_folder_skips_corrupt_file_with_a_warning_naming_it(class_folder):
    with pytest.warns(UserWarning, match=r"broken\.png"):
        folder = ImageFolder(class_folder)
    assert folder.classes == ["cats", "dogs"] and len(folder) == 6
    assert folder.skipped == [class_folder / "dogs" / "broken.png"]
    assert collections.Counter(folder.targets) == {0: 3, 1: 3}
    for image, _ in folder:
        assert image.size == (12, 10) and image.mode == "RGB"


def test_image_folder_survives_corruption_found_only_when_decoding(class_folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing checked at construction
        folder = ImageFolder(class_folder, channels=1, verify=False)
    assert len(folder) == 7
    broken_index = [path.name for path, _ in folder.samples].index("broken.png")
    with pytest.warns(UserWarning, match=r"broken\.png"):
        image, label = folder[broken_index]
    assert folder.skipped == [class_folder / "dogs" / "broken.png"]
    next_path, next_label = folder.samples[(broken_index + 1) % len(folder)]  # the next readable image
    assert label == next_label
    assert np.array_equal(np.asarray(image), np.asarray(Image.open(next_path).convert("L")))


def test_imagefolder_factory_uses_split_subfolders_and_transform(class_folder, tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    class_folder.rename(root / "train")
    with pytest.warns(UserWarning, match="broken"):
        dataset = image_classification_dataset(
            "imagefolder", root, "train", transform=[{"name": "Resize", "size": [4, 6]}], channels=1
        )
    image, _ = dataset[0]
    assert dataset.class_names == ["cats", "dogs"] and dataset.num_classes == 2 and len(dataset) == 6
    assert image.shape == (1, 4, 6) and image.dtype == torch.float32
    with pytest.raises(DatasetNotFoundError, match="'val'"):
        image_classification_dataset("imagefolder", root, "val")


def test_imagefolder_without_split_folders_is_split_70_10_20_disjointly(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(10):
            Image.fromarray(np.full((4, 4), i, dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    splits = {s: image_classification_dataset("imagefolder", tmp_path, s) for s in ("train", "val", "test")}
    assert {s: len(d) for s, d in splits.items()} == {"train": 14, "val": 2, "test": 4}
    indices = np.concatenate([d.indices for d in splits.values()])
    assert sorted(indices.tolist()) == list(range(20))
    assert collections.Counter(splits["test"].targets) == {0: 2, 1: 2}


# ------------------------------------------------------------------------------------------------
# Missing data and the Fashion-MNIST script
# ------------------------------------------------------------------------------------------------


def test_missing_fashion_mnist_says_how_to_fetch_it(tmp_path):
    with pytest.raises(DatasetNotFoundError) as error:
        image_classification_dataset("fashion_mnist", tmp_path, "train")
    message = str(error.value)
    assert "multimodal data fashion-mnist" in message and "fetch_fashion_mnist" in message
    assert str(tmp_path / "FashionMNIST" / "raw") in message


@pytest.mark.parametrize(("name", "where"), [("mnist", "MNIST/raw"), ("cifar10", "cifar-10-batches-py")])
def test_missing_user_data_sets_say_where_to_put_files(tmp_path, name, where):
    with pytest.raises(DatasetNotFoundError, match=where):
        image_classification_dataset(name, tmp_path, "test")


def test_cache_dir_follows_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("MULTIMODAL_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "multimodal"


@pytest.mark.skipif(
    not (default_cache_dir() / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte").is_file(),
    reason="Fashion-MNIST not fetched (multimodal data fashion-mnist)",
)
def test_fetched_fashion_mnist_has_the_published_sizes():
    counts = {}
    for split in ("train", "val", "test"):
        dataset = image_classification_dataset("fashion_mnist", split=split)
        counts[split] = collections.Counter(dataset.targets)
    assert {s: sum(c.values()) for s, c in counts.items()} == {"train": 54000, "val": 6000, "test": 10000}
    assert set(counts["val"].values()) == {600} and set(counts["test"].values()) == {1000}
    image, _ = dataset[0]
    assert image.shape == (1, 28, 28) and dataset.class_names[0] == "T-shirt/top"


@pytest.mark.slow
def test_fetch_fashion_mnist_from_the_debian_package(tmp_path):
    from torchvision.datasets import FashionMNIST

    from multimodal.data.fetch import fetch_fashion_mnist

    root = fetch_fashion_mnist(tmp_path)
    assert "MIT" in (root / "FashionMNIST" / "raw" / "README.md").read_text()
    assert len(FashionMNIST(root, train=True, download=False)) == 60000


# ------------------------------------------------------------------------------------------------
# Augmentation specs
# ------------------------------------------------------------------------------------------------


def test_augmentation_spec_builds_the_named_transforms():
    spec = [
        {"name": "RandomCrop", "size": 28, "padding": 2},
        {"name": "RandomHorizontalFlip", "p": 0.25},
        {"name": "RandomApply", "p": 0.3, "transforms": [{"name": "ColorJitter", "brightness": 0.2}]},
        {"name": "ToDtype", "dtype": "float32", "scale": True},
    ]
    crop, flip, apply, to_dtype = build_transform(spec).transforms
    assert isinstance(crop, v2.RandomCrop) and crop.size == (28, 28) and crop.padding == [2, 2, 2, 2]
    assert isinstance(flip, v2.RandomHorizontalFlip) and flip.p == 0.25
    assert isinstance(apply, v2.RandomApply) and isinstance(apply.transforms[0], v2.ColorJitter)
    assert isinstance(to_dtype, v2.ToDtype) and to_dtype.dtype == torch.float32
    assert build_transform([]) is None
    with pytest.raises(ValueError, match=r"torchvision\.transforms\.v2"):
        build_transform([{"name": "NoSuchTransform"}])


def test_recipe_augmentations_build_and_run_on_uint8_images():
    spec = [
        {"name": "RandAugment", "num_ops": 2, "magnitude": 9, "interpolation": "bilinear"},
        {"name": "TrivialAugmentWide"},
        {"name": "AutoAugment", "policy": "cifar10"},
        {"name": "RandomErasing", "p": 1.0, "value": 0},
    ]
    rand, trivial, auto, erasing = build_transform(spec).transforms
    assert isinstance(rand, v2.RandAugment) and (rand.num_ops, rand.magnitude) == (2, 9)
    assert rand.interpolation == v2.InterpolationMode.BILINEAR
    assert isinstance(trivial, v2.TrivialAugmentWide)
    assert auto.policy == v2.AutoAugmentPolicy.CIFAR10
    assert isinstance(erasing, v2.RandomErasing) and erasing.p == 1.0
    torch.manual_seed(0)
    image = v2.ToImage()(torch.full((3, 32, 32), 200, dtype=torch.uint8))
    erased = build_transform([spec[-1]])(image)
    assert erased.dtype == torch.uint8 and (erased == 0).any() and (erased == 200).any()
    assert build_transform(spec)(image).shape == (3, 32, 32)


@pytest.mark.parametrize("name", ["Lambda", "MixUp", "CutMix", "Transform", "functional"])
def test_only_allow_listed_transforms_are_built_from_a_spec(name):
    with pytest.raises(ValueError, match="mixup_alpha" if name in ("MixUp", "CutMix") else "allowed"):
        build_transform([{"name": name}])
    with pytest.raises(ValueError):  # nested entries are checked too
        build_transform([{"name": "RandomApply", "transforms": [{"name": name}]}])


def test_augmentation_spec_is_applied_by_the_dataset():
    plain = image_classification_dataset("digits", split="val")
    flipped = image_classification_dataset(
        "digits", split="val", transform=[{"name": "RandomHorizontalFlip", "p": 1.0}]
    )
    assert torch.equal(flipped[3][0], torch.flip(plain[3][0], dims=[-1]))


# ------------------------------------------------------------------------------------------------
# Super-resolution
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [2, 4])
@pytest.mark.parametrize("channels", [1, 3])
def test_sr_pairs_have_right_shapes_and_low_res_is_pil_bicubic(scale, channels):
    dataset = super_resolution_dataset("skimage", "val", scale=scale, crop_size=48, channels=channels)
    assert len(dataset) == len(SKIMAGE_HELD_OUT_PHOTOS) * 16
    for index in (0, 20, 47):
        low_res, high_res = dataset[index]
        assert high_res.shape == (channels, 48, 48) and low_res.shape == (channels, 48 // scale, 48 // scale)
        assert high_res.dtype == low_res.dtype == torch.float32
        torch.testing.assert_close(low_res, pil_bicubic(high_res, scale), atol=1e-5, rtol=0)


def test_sr_crops_are_true_crops_of_the_photo():
    dataset = SuperResolutionCrops([coordinate_photo(60, 90)], scale=2, crop_size=16, crops_per_photo=20)
    for index in range(len(dataset)):
        _, high_res = dataset[index]
        rows, cols = (high_res[:2] * 255).round().long()
        top, left = int(rows[0, 0]), int(cols[0, 0])
        assert torch.equal(rows, torch.arange(top, top + 16)[:, None].expand(16, 16))
        assert torch.equal(cols, torch.arange(left, left + 16)[None, :].expand(16, 16))
        assert top + 16 <= 60 and left + 16 <= 90


def test_sr_validation_crops_are_fixed_and_training_crops_vary():
    val = super_resolution_dataset("skimage", "val", crop_size=32)
    assert torch.equal(val[5][1], val[5][1])
    train = super_resolution_dataset("skimage", "train", crop_size=32)
    torch.manual_seed(0)
    assert not all(torch.equal(train[0][1], train[0][1]) for _ in range(3))


def numpy_square_symmetries(image: np.ndarray) -> list[bytes]:
    """Independent reference: the 8 symmetries of a square ``(channels, side, side)`` image, by numpy."""
    turns = [np.rot90(image, k, axes=(-2, -1)) for k in range(4)]
    return [np.ascontiguousarray(t).tobytes() for t in turns + [np.flip(t, -1) for t in turns]]


def test_square_symmetry_gives_all_eight_symmetries_of_the_square():
    image = np.asarray(coordinate_photo(6, 6)).transpose(2, 0, 1).copy()
    ours = [square_symmetry(torch.from_numpy(image), which).numpy().tobytes() for which in range(8)]
    assert len(set(ours)) == 8 and set(ours) == set(numpy_square_symmetries(image))
    with pytest.raises(ValueError, match="8 symmetries"):
        square_symmetry(torch.from_numpy(image), 8)


def test_sr_dihedral_crops_are_turned_uniformly_and_downsampled_after_the_turn():
    photo = coordinate_photo(16, 16)
    symmetries = numpy_square_symmetries(np.asarray(photo).transpose(2, 0, 1))
    dataset = SuperResolutionCrops([photo], scale=2, crop_size=16, crops_per_photo=400, dihedral=True)
    torch.manual_seed(0)
    seen = collections.Counter()
    for low_res, high_res in dataset:
        seen[symmetries.index((high_res * 255).round().to(torch.uint8).numpy().tobytes())] += 1
        torch.testing.assert_close(low_res, pil_bicubic(high_res, 2), atol=1e-5, rtol=0)
    assert set(seen) == set(range(8)) and min(seen.values()) >= 25  # 50 expected each
    plain = SuperResolutionCrops([photo], scale=2, crop_size=16, crops_per_photo=3)
    assert all(torch.equal(item[1], plain[0][1]) for item in plain)  # off: never turned


def test_sr_validation_crops_are_never_turned():
    turned = super_resolution_dataset("skimage", "val", crop_size=32, dihedral=True)
    plain = super_resolution_dataset("skimage", "val", crop_size=32)
    assert all(torch.equal(turned[i][1], plain[i][1]) for i in (0, 17, 40))
    assert super_resolution_dataset("skimage", "train", crop_size=32, dihedral=True).dihedral


def test_sr_greyscale_photos_become_rgb_and_rgb_becomes_luma():
    grey = Image.fromarray(np.arange(64 * 64, dtype=np.uint8).reshape(64, 64) % 251)
    _, high_res = SuperResolutionCrops([grey], crop_size=64, channels=3, crops_per_photo=1)[0]
    assert torch.equal(high_res[0], high_res[1]) and torch.equal(high_res[1], high_res[2])
    photo = coordinate_photo(32, 32)
    _, luma = SuperResolutionCrops([photo], crop_size=32, channels=1, crops_per_photo=1)[0]
    expected = np.asarray(photo.convert("L"), dtype=np.float32) / 255
    assert np.array_equal(luma[0].numpy(), expected)


def test_sr_held_out_photos_are_disjoint_from_training_photos():
    from skimage import data

    assert not set(SKIMAGE_TRAIN_PHOTOS) & set(SKIMAGE_HELD_OUT_PHOTOS)
    assert "cat" not in SKIMAGE_TRAIN_PHOTOS  # skimage's cat() is chelsea(), which is held out
    train = [getattr(data, name)() for name in SKIMAGE_TRAIN_PHOTOS]
    for name in SKIMAGE_HELD_OUT_PHOTOS:
        held_out = getattr(data, name)()
        assert not any(p.shape == held_out.shape and np.array_equal(p, held_out) for p in train), name
    # the benchmark's test photos: in neither split, and different pictures from every one of them
    assert not set(SKIMAGE_TEST_PHOTOS) & (set(SKIMAGE_TRAIN_PHOTOS) | set(SKIMAGE_HELD_OUT_PHOTOS))
    seen = train + [getattr(data, name)() for name in SKIMAGE_HELD_OUT_PHOTOS]
    for name, photo in zip(SKIMAGE_TEST_PHOTOS, skimage_photos(SKIMAGE_TEST_PHOTOS), strict=True):
        pixels = np.asarray(photo)
        assert not any(p.shape == pixels.shape and np.array_equal(p, pixels) for p in seen), name


def test_sr_rejects_crop_not_divisible_by_scale():
    with pytest.raises(ValueError, match="multiple of scale=4"):
        SuperResolutionCrops([coordinate_photo(40, 40)], scale=4, crop_size=30)


def test_sr_photo_folder_holds_out_a_fixed_disjoint_part(tmp_path):
    for i in range(12):
        coordinate_photo(40, 50).save(tmp_path / f"photo_{i:02d}.png")
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / "tiny.png")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train = super_resolution_dataset(tmp_path, "train", crop_size=32, crops_per_photo=1)
        val = super_resolution_dataset(tmp_path, "val", crop_size=32, crops_per_photo=1)
    assert [str(w.message) for w in caught if "tiny.png" in str(w.message)]  # smaller than the crop
    train_names = {Path(photo.name).name for photo in train.photos}
    val_names = {Path(photo.name).name for photo in val.photos}
    assert not train_names & val_names and val_names
    assert train_names | val_names == {f"photo_{i:02d}.png" for i in range(12)}
    again = super_resolution_dataset(tmp_path, "val", crop_size=32, crops_per_photo=1)
    assert {Path(photo.name).name for photo in again.photos} == val_names
    low_res, high_res = val[0]
    assert low_res.shape == (3, 16, 16) and high_res.shape == (3, 32, 32)


def test_images_module_still_exports_the_names_other_modules_import():
    from multimodal.data import images, super_resolution

    assert images.super_resolution_dataset is super_resolution.super_resolution_dataset
    assert images.SuperResolutionCrops is super_resolution.SuperResolutionCrops
    assert images.bicubic_downsample is super_resolution.bicubic_downsample
    assert images.ImageFolder is ImageFolder and images.build_transform is build_transform
    assert images.fetch_fashion_mnist.__module__ == "multimodal.data.fetch"
    assert set(images.__all__) <= set(dir(images))


def test_pixel_array_items_equal_torchvision_pil_items():
    from types import SimpleNamespace

    from multimodal.data.images import PixelArray

    rng = np.random.default_rng(0)
    grey = SimpleNamespace(
        data=torch.from_numpy(rng.integers(0, 256, (3, 5, 4), dtype=np.uint8)), targets=[2, 0, 1]
    )
    rgb = SimpleNamespace(data=rng.integers(0, 256, (3, 5, 4, 3), dtype=np.uint8), targets=[1, 1, 0])
    for base, mode in ((grey, "L"), (rgb, "RGB")):
        items = PixelArray(base)
        for index in range(3):
            image, label = items[index]
            pil = Image.fromarray(np.asarray(base.data[index]), mode=mode)  # what torchvision returns
            assert (
                torch.equal(image, v2.ToImage()(pil).as_subclass(torch.Tensor))
                and label == base.targets[index]
            )


def test_untransformed_tensor_items_equal_the_v2_pipeline():
    """Without transforms, tensors skip v2; the items must equal ToImage + ToDtype(scale=True)."""
    from multimodal.data.images import ImageClassificationDataset

    rng = np.random.default_rng(0)
    uint8 = torch.from_numpy(rng.integers(0, 256, (4, 1, 5, 4), dtype=np.uint8))
    floats = torch.rand(4, 3, 5, 4)
    reference = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    for images in (uint8, floats):
        labels = [3, 1, 0, 2]
        items = ImageClassificationDataset(
            torch.utils.data.StackDataset(images, labels), list("abcd"), labels
        )
        for index in range(4):
            image, label = items[index]
            assert type(image) is torch.Tensor and image.dtype == torch.float32 and label == labels[index]
            torch.testing.assert_close(
                image, reference(images[index]).as_subclass(torch.Tensor), rtol=0, atol=0
            )
