"""Real image data for the experiments: scikit-learn's digits (offline) and MNIST / Fashion-MNIST (download once).

Synthetic tasks live in :mod:`ttr_edu.tasks`; this module only loads real data sets into tensors.

* :func:`load_digits` ships with scikit-learn: 1,797 handwritten digits of 8×8 pixels. Tests and chapters use it.
* :func:`download_mnist` fetches MNIST or Fashion-MNIST from OpenML (through scikit-learn) into a local ``.npz``
  file, an explicit step for readers who are online; :func:`load_mnist` reads that file. Nothing here downloads
  implicitly, and no test needs the network.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ttr_edu._internal.validation import check_positive_float

__all__ = ["ImageDataset", "MNIST_NAMES", "default_data_home", "download_mnist", "load_digits", "load_mnist"]

# Our name -> (OpenML name, version, class names). Both have 70,000 28×28 images; the first 60,000 are the train set.
MNIST_NAMES = {
    "mnist": ("mnist_784", 1, tuple(str(c) for c in range(10))),
    "fashion_mnist": (
        "Fashion-MNIST",
        1,
        ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
    ),
}
MNIST_TRAIN_SIZE = 60_000

OFFLINE_FALLBACK = "ttr_edu.tasks.images.load_digits() (scikit-learn's 8×8 digits, which ship offline)"


@dataclass(frozen=True)
class ImageDataset:
    """A labelled image data set split into train and test, as float tensors in ``[0, 1]``.

    Attributes:
        x_train: ``(N_train, D)`` float32 flattened images (``D = H·W``); ``y_train``: ``(N_train,)`` int64.
        x_test: ``(N_test, D)`` float32; ``y_test``: ``(N_test,)`` int64.
        image_shape: ``(H, W)``, to reshape a row into an image.
        class_names: one name per class.
        name: the data set's name.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    image_shape: tuple[int, int]
    class_names: tuple[str, ...]
    name: str

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __repr__(self) -> str:
        h, w = self.image_shape
        return (
            f"ImageDataset({self.name}: {len(self.y_train):,} train / {len(self.y_test):,} test images of "
            f"{h}×{w}, {self.num_classes} classes)"
        )


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> ImageDataset:
    """scikit-learn's handwritten digits (1,797 images, 8×8, 10 classes), offline, split at random.

    Pixels are scaled from ``0..16`` to ``[0, 1]``. The split is stratified by class and fixed by ``seed``.

    Args:
        test_fraction: share of the images held out for the test set, in ``(0, 1)``.
        seed: the split's seed.

    Returns:
        :class:`ImageDataset` with ``D = 64``.

    Raises:
        TypeError / ValueError: ``test_fraction`` is not a number in ``(0, 1)`` or leaves fewer images than classes
        on one side of the split; ``seed`` not an int.
    """
    from sklearn.datasets import load_digits as sklearn_load_digits
    from sklearn.model_selection import train_test_split

    check_positive_float("test_fraction", test_fraction)
    if test_fraction >= 1:
        raise ValueError(f"test_fraction: expected a number in (0, 1), got {test_fraction}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed < 2**32:  # scikit-learn's random_state range, reported under this function's name
        raise ValueError(f"seed: expected an int in [0, 2**32 - 1], got {seed}")
    images, labels = sklearn_load_digits(return_X_y=True)
    n_classes, n_test = len(np.unique(labels)), math.ceil(test_fraction * len(labels))
    if n_test < n_classes or len(labels) - n_test < n_classes:  # a stratified split needs each class on both sides
        raise ValueError(
            f"test_fraction: {test_fraction} puts {n_test} of {len(labels)} images in the test set; a "
            f"stratified split needs at least {n_classes} on each side"
        )
    x_train, x_test, y_train, y_test = train_test_split(
        images / 16.0, labels, test_size=test_fraction, random_state=seed, stratify=labels
    )
    return ImageDataset(
        x_train=torch.tensor(x_train, dtype=torch.float32),
        y_train=torch.tensor(y_train, dtype=torch.int64),
        x_test=torch.tensor(x_test, dtype=torch.float32),
        y_test=torch.tensor(y_test, dtype=torch.int64),
        image_shape=(8, 8),
        class_names=tuple(str(c) for c in range(10)),
        name="digits",
    )


def default_data_home() -> Path:
    """Where MNIST files are kept: ``$TTR_EDU_DATA`` if set, else ``~/.cache/ttr_edu``."""
    return Path(os.environ.get("TTR_EDU_DATA", Path.home() / ".cache" / "ttr_edu"))


def _check_name(name: str) -> None:
    if name not in MNIST_NAMES:
        raise ValueError(f"name: expected one of {sorted(MNIST_NAMES)}, got {name!r}")


def _npz_path(name: str, data_home: str | Path | None) -> Path:
    if data_home is not None and not isinstance(data_home, (str, os.PathLike)):
        raise TypeError(f"data_home: expected a folder (a str or a path) or None, got {type(data_home).__name__}")
    return Path(data_home if data_home is not None else default_data_home()) / f"{name}.npz"


def download_mnist(name: str = "mnist", data_home: str | Path | None = None) -> Path:
    """Download MNIST or Fashion-MNIST once (about 55 MB from OpenML, via scikit-learn) and save it as ``.npz``.

    Args:
        name: ``"mnist"`` or ``"fashion_mnist"``.
        data_home: folder for the file (default :func:`default_data_home`).

    Returns:
        The path of the saved file, ``<data_home>/<name>.npz`` (uint8 images ``(70000, 784)``, int64 labels).

    Raises:
        ValueError: unknown ``name``.
        ConnectionError: the download failed (offline?); the message names the offline fallback.
    """
    from sklearn.datasets import fetch_openml

    _check_name(name)
    path = _npz_path(name, data_home)
    path.parent.mkdir(parents=True, exist_ok=True)
    openml_name, version, _ = MNIST_NAMES[name]
    try:
        images, labels = fetch_openml(
            openml_name,
            version=version,
            data_home=str(path.parent / "openml"),
            return_X_y=True,
            as_frame=False,
            parser="liac-arff",
            n_retries=1,
        )
    except OSError as error:  # URLError and socket errors are OSErrors
        raise ConnectionError(
            f"could not download {name} from OpenML ({error}). Are you offline? Use the offline fallback "
            f"{OFFLINE_FALLBACK} instead."
        ) from error
    np.savez_compressed(path, images=np.asarray(images, dtype=np.uint8), labels=np.asarray(labels).astype(np.int64))
    return path


def load_mnist(name: str = "mnist", data_home: str | Path | None = None) -> ImageDataset:
    """MNIST or Fashion-MNIST from the file :func:`download_mnist` saved (never downloads by itself).

    The standard split: the first 60,000 images train, the last 10,000 test. Pixels are scaled to ``[0, 1]``.

    Args:
        name: ``"mnist"`` or ``"fashion_mnist"``.
        data_home: folder holding the file (default :func:`default_data_home`).

    Returns:
        :class:`ImageDataset` with ``D = 784``, images 28×28.

    Raises:
        ValueError: unknown ``name``; a file that is not the archive :func:`download_mnist` saves.
        TypeError: ``data_home`` not a str, a path or None.
        FileNotFoundError: the file is not there; the message says how to download it, and names the offline
            fallback :func:`load_digits`.
    """
    _check_name(name)
    path = _npz_path(name, data_home)
    if not path.is_file():
        raise FileNotFoundError(
            f"data_home: {name} is not on disk at {path}. While online, run "
            f"ttr_edu.tasks.images.download_mnist({name!r}"
            f"{'' if data_home is None else f', {str(data_home)!r}'}) once (about 55 MB). Offline, use "
            f"{OFFLINE_FALLBACK}."
        )
    try:
        with np.load(path) as archive:
            images = torch.from_numpy(archive["images"]).float() / 255.0
            labels = torch.from_numpy(archive["labels"]).long()
    except (ValueError, OSError, KeyError, EOFError) as error:  # not an archive, or not download_mnist's
        raise ValueError(
            f"data_home: {path} is not the archive download_mnist saves ({str(error).splitlines()[0][:100]}); "
            f"delete it and run ttr_edu.tasks.images.download_mnist({name!r}) again"
        ) from None
    return ImageDataset(
        x_train=images[:MNIST_TRAIN_SIZE],
        y_train=labels[:MNIST_TRAIN_SIZE],
        x_test=images[MNIST_TRAIN_SIZE:],
        y_test=labels[MNIST_TRAIN_SIZE:],
        image_shape=(28, 28),
        class_names=MNIST_NAMES[name][2],
        name=name,
    )
