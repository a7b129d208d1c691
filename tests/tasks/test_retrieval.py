"""Retrieval settings 1 and 2 (Schlag et al. 2021, §6.1) and the switching regression stream of chapter 07:
shapes, the answers they claim, seeding, bad input."""

import pytest
import torch

from ttr_edu.tasks.retrieval import (
    RetrievalBatch,
    SwitchingStream,
    capacity_batch,
    overwrite_batch,
    switching_regression,
)


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


# --- switching regression stream (chapter 07) ---------------------------------------------------------------------


def test_switching_stream_shapes_shift_and_regimes():
    s = switching_regression(3, 20, 4, 5, switch_every=6, num_heads=2, generator=torch.Generator().manual_seed(0))
    assert isinstance(s, SwitchingStream)
    assert s.q.shape == s.k.shape == (3, 20, 2, 4) and s.v.shape == s.target.shape == (3, 20, 2, 5)
    assert s.maps.shape == (3, 4, 2, 4, 5)  # pairs 0..20 fall in regimes 0..3
    assert s.k.dtype == torch.float32
    assert torch.allclose(s.k.norm(dim=-1), torch.ones(3, 20, 2))
    # queries and targets are the next pair
    assert torch.equal(s.q[:, :-1], s.k[:, 1:]) and torch.equal(s.target[:, :-1], s.v[:, 1:])
    assert s.regime.tolist() == [(t + 1) // 6 for t in range(20)]
    assert s.switch_steps.tolist() == [5, 11, 17]
    assert all(s.regime[t] == s.regime[t - 1] + 1 for t in s.switch_steps.tolist())


def test_switching_stream_values_follow_the_map_of_their_regime():
    s = switching_regression(
        2, 30, 3, switch_every=10, noise=0.0, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    for t in range(30):
        W = s.maps[:, s.regime[t]]  # (B, H, D_k, D_v)
        assert torch.allclose(s.target[:, t], torch.einsum("bhd,bhde->bhe", s.q[:, t], W))
    # each switch changes the rule: the old map mispredicts the first value of the new regime
    t = int(s.switch_steps[0])
    old = torch.einsum("bhd,bhde->bhe", s.q[:, t], s.maps[:, s.regime[t] - 1])
    assert (old - s.target[:, t]).norm() > 0.1


def test_switching_stream_noise_has_the_requested_scale():
    s = switching_regression(
        4, 500, 6, switch_every=1000, noise=0.3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    residual = s.v - torch.einsum("bthd,bhde->bthe", s.k, s.maps[:, 0])
    assert s.switch_steps.numel() == 0 and abs(residual.std().item() - 0.3) < 0.02


def test_switching_stream_is_seeded_and_device_independent():
    a = switching_regression(2, 8, 3, switch_every=3, generator=torch.Generator().manual_seed(5))
    b = switching_regression(2, 8, 3, switch_every=3, generator=torch.Generator().manual_seed(5), device="cpu")
    c = switching_regression(2, 8, 3, switch_every=3, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a.v, b.v) and not torch.equal(a.v, c.v)
    half = switching_regression(
        2, 8, 3, switch_every=3, generator=torch.Generator().manual_seed(5), dtype=torch.float16
    )
    assert half.v.dtype == torch.float16 and torch.allclose(half.v.float(), a.v, atol=1e-2)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"switch_every": 0}, ValueError, "switch_every"),
        ({"switch_every": 2.5}, TypeError, "switch_every"),
        ({"switch_every": 4, "noise": -0.1}, ValueError, "noise"),
        ({"switch_every": 4, "noise": float("nan")}, ValueError, "noise"),
        ({"switch_every": 4, "num_heads": 0}, ValueError, "num_heads"),
        ({"switch_every": 4, "d_v": 0}, ValueError, "d_v"),
        ({"switch_every": 4, "dtype": torch.int64}, TypeError, "dtype"),
        ({"switch_every": 4, "generator": 3}, TypeError, "generator"),
    ],
)
def test_switching_stream_rejects_impossible_settings(kwargs, error, words):
    with pytest.raises(error, match=words):
        switching_regression(2, 10, 3, **kwargs)


def test_switching_stream_rejects_bad_sizes():
    with pytest.raises(ValueError, match="seq_len"):
        switching_regression(2, 0, 3, switch_every=2)
    with pytest.raises(ValueError, match="d_k"):
        switching_regression(2, 5, 0, switch_every=2)
    with pytest.raises(ValueError, match="batch_size"):
        switching_regression(0, 5, 3, switch_every=2)
