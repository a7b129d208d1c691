"""The standard-library corpus: offline, deterministic, split without overlap, named by its hash."""

import hashlib

import pytest
import torch

from ttr_edu.tasks.text import MODULES, eval_windows, load_stdlib_corpus, random_windows


def test_corpus_is_the_named_modules_split_in_order_and_hashed():
    corpus = load_stdlib_corpus()
    stream = torch.cat([corpus.train, corpus.valid, corpus.test])
    assert hashlib.sha256(stream.numpy().tobytes()).hexdigest() == corpus.sha256
    text = stream.numpy().tobytes().decode("utf-8")
    assert text.startswith(f"# ==== {MODULES[0]} ====\n")
    assert all(f"# ==== {name} ====\n" in text for name in MODULES)
    assert len(corpus.valid) == len(corpus.test) and len(corpus.train) > 15 * len(corpus.valid)
    assert corpus.sha256[:16] in corpus.describe() and corpus.python_version in corpus.describe()


def test_windows_are_reproducible_and_tile_the_split():
    tokens = torch.arange(1000) % 256
    a = random_windows(tokens, 4, 16, torch.Generator().manual_seed(1))
    b = random_windows(tokens, 4, 16, torch.Generator().manual_seed(1))
    assert a.shape == (4, 17) and a.dtype == torch.int64 and torch.equal(a, b)
    assert torch.equal(a[:, 1:] - a[:, :-1], torch.ones(4, 16, dtype=torch.int64) - 256 * (a[:, 1:] < a[:, :-1]))
    windows = eval_windows(tokens, 10)
    assert torch.equal(windows[:, 1:].flatten(), tokens[1 : 1 + windows[:, 1:].numel()])  # each target once, in order
    assert len(eval_windows(tokens, 10, max_windows=3)) == 3


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: random_windows(torch.arange(10), 2, 10), ValueError, "seq_len"),
        (lambda: random_windows(torch.arange(10), 0, 4), ValueError, "batch_size"),
        (lambda: eval_windows(torch.zeros(2, 20), 4), TypeError, "tokens"),
        (lambda: load_stdlib_corpus().split("dev"), ValueError, "name"),
    ],
)
def test_bad_arguments_are_refused_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()
