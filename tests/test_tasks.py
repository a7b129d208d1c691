"""Retrieval settings 1 and 2 (Schlag et al. 2021, §6.1): shapes, the answers they claim, seeding, bad input."""

import pytest
import torch

from ttr_edu.tasks import RetrievalBatch, capacity_batch, overwrite_batch


def test_capacity_keys_and_values_are_unique_and_target_is_the_stored_value():
    batch = capacity_batch(64, 12, generator=torch.Generator().manual_seed(0))
    assert batch.keys.shape == batch.values.shape == (64, 12)
    assert batch.query.shape == batch.target.shape == (64,)
    for b in range(64):
        assert len(set(batch.keys[b].tolist())) == 12  # setting 1: unique keys
        assert len(set(batch.values[b].tolist())) == 12  # ... and S distinct values
        (position,) = (batch.keys[b] == batch.query[b]).nonzero()[0]
        assert batch.target[b] == batch.values[b, position]
    assert int(batch.keys.max()) < 12 and int(batch.values.max()) < 12


def test_capacity_shorter_sequence_from_a_larger_vocabulary():
    batch = capacity_batch(8, 50, seq_len=10, num_values=30, generator=torch.Generator().manual_seed(1))
    assert batch.keys.shape == (8, 10) and batch.num_keys == 50 and batch.num_values == 30
    assert int(batch.keys.max()) < 50 and int(batch.values.max()) < 30


def test_overwrite_target_is_the_latest_value_of_the_query_key():
    batch = overwrite_batch(200, 6, generator=torch.Generator().manual_seed(2))
    assert batch.keys.shape == (200, 12)  # length 2S
    rewritten = 0
    for b in range(200):
        hits = (batch.keys[b] == batch.query[b]).nonzero().flatten().tolist()
        assert hits, "the query must occur in the sequence"
        assert batch.target[b] == batch.values[b, hits[-1]]  # the latest, not the first
        rewritten += len({int(batch.values[b, h]) for h in hits}) > 1
    # The check above would also accept "first occurrence" if keys never repeated with new values.
    assert rewritten > 50


def test_same_seed_same_batch_and_different_seed_different_batch():
    for make in (capacity_batch, overwrite_batch):
        a = make(4, 9, generator=torch.Generator().manual_seed(3))
        b = make(4, 9, generator=torch.Generator().manual_seed(3))
        c = make(4, 9, generator=torch.Generator().manual_seed(4))
        assert torch.equal(a.keys, b.keys) and torch.equal(a.target, b.target)
        assert not torch.equal(a.keys, c.keys)


def test_batch_moves_to_a_device():
    batch = capacity_batch(2, 4, device="cpu")
    moved = batch.to(torch.device("cpu"))
    assert isinstance(moved, RetrievalBatch) and torch.equal(moved.keys, batch.keys)
    assert moved.keys.dtype == torch.int64 and moved.num_keys == 4


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: capacity_batch(4, 10, seq_len=11), ValueError, "vocabulary"),
        (lambda: capacity_batch(4, 10, num_values=5), ValueError, "num_values"),
        (lambda: capacity_batch(4, 0), ValueError, "num_keys"),
        (lambda: overwrite_batch(4, 0), ValueError, "num_keys"),
        (lambda: overwrite_batch(0, 3), ValueError, "batch_size"),
        (lambda: overwrite_batch(4, 3, seq_len=0), ValueError, "seq_len"),
        (lambda: capacity_batch(4, 2.5), TypeError, "num_keys"),
        (lambda: capacity_batch(4, 3, generator=0), TypeError, "generator"),
    ],
)
def test_impossible_settings_are_rejected(call, error, words):
    with pytest.raises(error, match=words):
        call()
