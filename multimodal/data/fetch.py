"""Where image data lives, how to get it, and the Fashion-MNIST data script.

Nothing in ``multimodal.data`` downloads by itself: a missing data set raises
:class:`DatasetNotFoundError` with :data:`HOW_TO_GET` filled in. :func:`fetch_fashion_mnist` is the one
explicit fetch (behind ``multimodal data fashion-mnist``).
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import tempfile
from pathlib import Path

from multimodal.data.storage import cache_root

__all__ = [
    "FASHION_MNIST_FILES",
    "HOW_TO_GET",
    "DatasetNotFoundError",
    "default_cache_dir",
    "fetch_fashion_mnist",
]

FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class DatasetNotFoundError(FileNotFoundError):
    """A data set's files are not on disk; the message says how to get them."""


def default_cache_dir() -> Path:
    """Where fetched data lives: the toolkit's cache root (:func:`multimodal.data.storage.cache_root`)."""
    return cache_root()


def fetch_fashion_mnist(root: str | Path | None = None) -> Path:
    """Places Fashion-MNIST where ``torchvision.datasets.FashionMNIST(root, download=False)`` reads it.

    Takes the original idx files from Debian's ``dataset-fashion-mnist`` package (31 MB, MIT):
    ``apt-get download`` it (running ``apt-get update`` first if the package is unknown), unpack it
    with ``dpkg-deb -x`` without installing, and write the four gunzipped files plus a README with
    the licence to ``root/FashionMNIST/raw/``. Does nothing if they are already there.

    Args:
        root: defaults to :func:`default_cache_dir`.

    Returns:
        ``root``, to pass to ``FashionMNIST`` or :func:`image_classification_dataset`.
    """
    root = Path(root) if root is not None else default_cache_dir()
    raw = root / "FashionMNIST" / "raw"
    if all((raw / name).is_file() for name in FASHION_MNIST_FILES):
        return root
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise DatasetNotFoundError(
            HOW_TO_GET["fashion_mnist"].format(root=root) + " (apt-get/dpkg-deb not found)"
        )
    raw.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if _run(["apt-get", "download", "dataset-fashion-mnist"], work).returncode != 0:
            _run(["apt-get", "update"], work)
            result = _run(["apt-get", "download", "dataset-fashion-mnist"], work)
            if result.returncode != 0:
                raise RuntimeError(f"apt-get download dataset-fashion-mnist failed:\n{result.stderr}")
        (deb,) = work.glob("dataset-fashion-mnist_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "x")], check=True)
        for name in FASHION_MNIST_FILES:
            found = sorted(work.glob(f"x/**/{name}*"))
            if not found:
                raise RuntimeError(f"{deb.name} holds no {name}; the package layout changed")
            _copy_maybe_gunzip(found[0], raw / name)
        copyright_file = next(work.glob("x/usr/share/doc/dataset-fashion-mnist/copyright"), None)
        if copyright_file is not None:
            shutil.copyfile(copyright_file, raw / "copyright")
    (raw / "README.md").write_text(_FASHION_MNIST_README)
    return root


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


def _copy_maybe_gunzip(source: Path, target: Path) -> None:
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)


_FASHION_MNIST_README = """\
# Fashion-MNIST

The original idx files of Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, Zalando Research):
60,000 training and 10,000 test images, 28x28 greyscale, 10 classes.

- Licence: MIT, Copyright (c) 2017 Zalando SE (see `copyright`, the Debian package's licence file).
- Source: Debian package `dataset-fashion-mnist`, unpacked with `dpkg-deb -x` by
  `multimodal.data.fetch.fetch_fashion_mnist` (`multimodal data fashion-mnist`).
- Read with `torchvision.datasets.FashionMNIST(root, download=False)`, root being two folders up.
"""

HOW_TO_GET = {
    "fashion_mnist": (
        "Fashion-MNIST is not in {root}/FashionMNIST/raw/. Fetch it once (31 MB, Debian package, MIT) with "
        "`multimodal data fashion-mnist`, or in Python "
        "`from multimodal.data.fetch import fetch_fashion_mnist; fetch_fashion_mnist({root!r})`, "
        "or copy the four gunzipped idx files (train-images-idx3-ubyte, ...) there"
    ),
    "mnist": (
        "MNIST is not in {root}/MNIST/raw/. Copy the four gunzipped idx files (train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte) there; nothing is downloaded"
    ),
    "cifar10": (
        "CIFAR-10 is not in {root}/cifar-10-batches-py/. Extract cifar-10-python.tar.gz into {root} "
        "(it creates that folder); nothing is downloaded"
    ),
    "cifar100": (
        "CIFAR-100 is not in {root}/cifar-100-python/. Extract cifar-100-python.tar.gz into {root} "
        "(it creates that folder); nothing is downloaded"
    ),
}
