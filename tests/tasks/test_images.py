"""ttr_edu.datasets: digits offline; MNIST only from an explicit download, with a clear offline message."""

import urllib.error

import numpy as np
import pytest
import torch

from ttr_edu.tasks import images as image_data


def test_load_digits_split_and_scaling():
    data = image_data.load_digits(test_fraction=0.25, seed=1)
    assert data.x_train.shape[1] == data.x_test.shape[1] == 64 and data.image_shape == (8, 8)
    assert len(data.y_train) + len(data.y_test) == 1797
    assert abs(len(data.y_test) / 1797 - 0.25) < 0.01
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert 0.0 <= data.x_train.min() and data.x_train.max() == 1.0
    assert set(data.y_test.tolist()) == set(range(10)) and data.num_classes == 10
    again = image_data.load_digits(test_fraction=0.25, seed=1)
    assert torch.equal(again.x_test, data.x_test)
    assert not torch.equal(image_data.load_digits(test_fraction=0.25, seed=2).y_test, data.y_test)


@pytest.mark.parametrize(
    "kwargs, error",
    [(dict(test_fraction=1.0), ValueError), (dict(test_fraction=0), ValueError), (dict(seed=1.5), TypeError)],
)
def test_load_digits_bad_input(kwargs, error):
    with pytest.raises(error):
        image_data.load_digits(**kwargs)


def test_load_mnist_offline_names_the_fallback(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"download_mnist\('fashion_mnist'.*load_digits\(\)"):
        image_data.load_mnist("fashion_mnist", data_home=tmp_path)
    with pytest.raises(ValueError, match="name: expected one of"):
        image_data.load_mnist("cifar10", data_home=tmp_path)


def test_download_offline_gives_a_clear_message(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr("sklearn.datasets.fetch_openml", offline)
    with pytest.raises(ConnectionError, match="offline.*load_digits"):
        image_data.download_mnist("mnist", data_home=tmp_path)


def test_load_mnist_reads_the_saved_file(tmp_path, monkeypatch):
    # Stand in for OpenML with a small fake of the right layout: no network in tests.
    monkeypatch.setattr(image_data, "MNIST_TRAIN_SIZE", 5)  # 5 train + 3 test images instead of 60,000 + 10,000
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(8, 784)).astype(np.float64)
    labels = (np.arange(8) % 10).astype(str)
    monkeypatch.setattr("sklearn.datasets.fetch_openml", lambda *a, **k: (images, labels))
    path = image_data.download_mnist("mnist", data_home=tmp_path)
    data = image_data.load_mnist("mnist", data_home=tmp_path)
    assert path.is_file() and data.image_shape == (28, 28)
    assert data.x_train.shape == (5, 784) and data.x_test.shape == (3, 784)
    assert torch.equal(data.y_test, torch.tensor([5, 6, 7]))
    assert torch.allclose(data.x_test[0], torch.tensor(images[5] / 255.0, dtype=torch.float32))


@pytest.mark.parametrize("fraction", [0.001, 0.999])
def test_a_split_too_small_for_every_class_names_test_fraction(fraction):
    with pytest.raises(ValueError, match=r"test_fraction: .* at least 10 on each side"):
        image_data.load_digits(test_fraction=fraction)
