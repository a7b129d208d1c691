"""ttr_edu.memory: the Hebbian memory's identities and its argument checks."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ttr_edu import hebbian


def test_write_is_outer_product_and_leaves_input_untouched():
    W = torch.randn(3, 5, dtype=torch.float64)
    k, v = torch.randn(5, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    before = W.clone()
    new = hebbian.hebbian_write(W, k, v)
    for i in range(3):
        for j in range(5):
            assert new[i, j].item() == pytest.approx((before[i, j] + v[i] * k[j]).item(), abs=1e-14)
    assert torch.equal(W, before)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), d_k=st.integers(1, 9), d_v=st.integers(1, 9), seed=st.integers(0, 10_000))
def test_store_equals_sequential_writes(n, d_k, d_v, seed):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, d_k, generator=g, dtype=torch.float64)
    values = torch.randn(n, d_v, generator=g, dtype=torch.float64)
    W = torch.zeros(d_v, d_k, dtype=torch.float64)
    for k, v in zip(keys, values):
        W = hebbian.hebbian_write(W, k, v)
    torch.testing.assert_close(hebbian.store(keys, values), W, rtol=1e-12, atol=1e-12)
    reads = torch.stack([hebbian.hebbian_read(W, k) for k in keys])
    torch.testing.assert_close(hebbian.recall(W, keys), reads, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n,d", [(1, 1), (5, 8), (16, 16)])
def test_orthonormal_keys_recall_exactly(n, d):
    keys = hebbian.orthonormal_keys(n, d, seed=3)
    torch.testing.assert_close(keys @ keys.T, torch.eye(n, dtype=torch.float64), rtol=0, atol=1e-12)
    values = torch.randn(n, 4, dtype=torch.float64)
    torch.testing.assert_close(hebbian.recall(hebbian.store(keys, values), keys), values, rtol=1e-12, atol=1e-12)
    assert hebbian.crosstalk_energy(keys).item() < 1e-24


def test_orthonormal_keys_refuse_more_than_d():
    with pytest.raises(ValueError, match=r"n: at most d = 4"):
        hebbian.orthonormal_keys(5, 4)


def test_random_unit_keys_are_unit_and_seeded():
    keys = hebbian.random_unit_keys(50, 7, seed=1)
    torch.testing.assert_close(keys.norm(dim=1), torch.ones(50, dtype=torch.float64))
    assert torch.equal(keys, hebbian.random_unit_keys(50, 7, seed=1))
    assert not torch.equal(keys, hebbian.random_unit_keys(50, 7, seed=2))


def test_crosstalk_energy_matches_definition_and_prediction():
    keys = hebbian.random_unit_keys(6, 5, seed=0)
    by_loop = sum(float(keys[i] @ keys[j]) ** 2 for j in range(6) for i in range(6) if i != j) / 6
    assert hebbian.crosstalk_energy(keys).item() == pytest.approx(by_loop, rel=1e-12)
    # The mean over many draws approaches (N - 1)/d (a loose statistical bound, fixed seeds).
    draws = torch.stack([hebbian.crosstalk_energy(hebbian.random_unit_keys(40, 20, seed=s)) for s in range(200)])
    assert draws.mean().item() == pytest.approx(hebbian.predicted_crosstalk_energy(40, 20), rel=0.05)


def test_recall_accuracy_extremes_and_ties():
    keys = hebbian.orthonormal_keys(8, 8, seed=0)
    values = hebbian.random_unit_keys(8, 8, seed=1)
    assert hebbian.recall_accuracy(hebbian.store(keys, values), keys, values) == 1.0
    # Identical values make every score a tie: ties count as failures.
    same = torch.ones(8, 3, dtype=torch.float64)
    assert hebbian.recall_accuracy(hebbian.store(keys, same), keys, same) == 0.0
    # Far too many random pairs for d = 4: most recalls fail.
    keys, values = hebbian.random_unit_keys(200, 4, seed=2), hebbian.random_unit_keys(200, 4, seed=3)
    assert hebbian.recall_accuracy(hebbian.store(keys, values), keys, values) < 0.2


def test_bad_shapes_name_the_argument():
    W = torch.zeros(3, 5)
    with pytest.raises(ValueError, match=r"k: expected shape \(D_k,\) = \(5,\), got \(3,\)"):
        hebbian.hebbian_write(W, torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"values: expected shape \(N, D_v\).*N is 4, expected 2 \(set by keys\)"):
        hebbian.store(torch.zeros(2, 5), torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"W: expected 2 dims \(D_v, D_k\)"):
        hebbian.hebbian_read(torch.zeros(3), torch.zeros(3))


def test_bad_dtypes_and_devices():
    with pytest.raises(TypeError, match=r"keys: expected a floating-point tensor.*int64"):
        hebbian.store(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 3))
    with pytest.raises(TypeError, match=r"q: expected a torch.Tensor, got list"):
        hebbian.hebbian_read(torch.zeros(3, 5), [0.0] * 5)
    with pytest.raises(ValueError, match=r"all tensors must be on one device"):
        hebbian.hebbian_read(torch.zeros(3, 5), torch.zeros(5, device="meta"))
    with pytest.raises(ValueError, match=r"n: expected a positive int, got 0"):
        hebbian.random_unit_keys(0, 3)


# -- bad input found in review: each used to give a raw torch error, a silent promotion or a silent NaN / 0 --------


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: hebbian.hebbian_read(torch.zeros(3, 4), torch.zeros(4, dtype=torch.float64)),
            r"q: expected dtype torch.float32",
        ),
        (
            lambda: hebbian.hebbian_write(torch.zeros(3, 4), torch.zeros(4, dtype=torch.float64), torch.zeros(3)),
            r"k: expected dtype",
        ),
        (lambda: hebbian.store(torch.zeros(2, 4), torch.zeros(2, 3, dtype=torch.float64)), r"values: expected dtype"),
        (lambda: hebbian.recall(torch.zeros(3, 4), torch.zeros(2, 4, dtype=torch.float64)), r"queries: expected dtype"),
        (
            lambda: hebbian.recall_accuracy(
                torch.zeros(3, 4), torch.zeros(2, 4), torch.zeros(2, 3, dtype=torch.float64)
            ),
            r"values: expected dtype",
        ),
        (lambda: hebbian.random_unit_keys(3, 4, dtype=torch.int64), r"dtype: expected a floating torch.dtype"),
        (lambda: hebbian.orthonormal_keys(3, 4, dtype=torch.int32), r"dtype: expected a floating torch.dtype"),
        (lambda: hebbian.random_unit_keys(3, 4, seed=1.5), r"seed: expected an int or None, got float"),
    ],
)
def test_mixed_or_wrong_dtypes_raise_type_error_naming_the_argument(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_empty_key_sets_are_refused_instead_of_nan():
    with pytest.raises(ValueError, match=r"keys: expected at least one pair.*N = 0"):
        hebbian.crosstalk_energy(torch.zeros(0, 4))
    with pytest.raises(ValueError, match=r"keys: expected at least one pair"):
        hebbian.recall_accuracy(torch.zeros(3, 4), torch.zeros(0, 4), torch.zeros(0, 3))


def test_recall_accuracy_refuses_values_on_another_device_and_nan():
    with pytest.raises(ValueError, match=r"values on meta"):
        hebbian.recall_accuracy(torch.zeros(3, 4), torch.zeros(2, 4), torch.zeros(2, 3, device="meta"))
    with pytest.raises(ValueError, match=r"W: expected finite values"):
        hebbian.recall_accuracy(torch.full((3, 4), float("nan")), torch.randn(2, 4), torch.randn(2, 3))


def test_key_generators_give_the_same_keys_in_every_floating_dtype():
    keys16 = hebbian.orthonormal_keys(3, 4, seed=0, dtype=torch.float16)  # QR has no float16 kernel: drawn in float64
    assert keys16.dtype == torch.float16
    torch.testing.assert_close(keys16.double(), hebbian.orthonormal_keys(3, 4, seed=0), rtol=0, atol=1e-3)
    torch.testing.assert_close(
        hebbian.random_unit_keys(5, 3, seed=2, dtype=torch.float32).double(),
        hebbian.random_unit_keys(5, 3, seed=2),
        rtol=0,
        atol=1e-7,
    )


def test_heatmap_axis_names_reach_the_hover_label():
    # A go.Heatmap trace has no axes of its own: x_title / y_title used to be accepted and silently dropped.
    from ttr_edu import viz

    trace = viz.heatmap(torch.zeros(2, 3), title="Γ", x_title="pair i", y_title="step t")
    assert "pair i %{x}" in trace.hovertemplate and "step t %{y}" in trace.hovertemplate


def test_cleanup_scores_equal_the_scores_of_each_memory():
    keys = hebbian.random_unit_keys(3 * 7, 5, seed=1).view(3, 7, 5)
    values = hebbian.random_unit_keys(3 * 7, 4, seed=2).view(3, 7, 4)
    scores = hebbian.cleanup_scores(keys, values)
    assert scores.shape == (3, 7, 7)
    for r in range(3):
        expected = hebbian.recall(hebbian.store(keys[r], values[r]), keys[r]) @ values[r].T
        torch.testing.assert_close(scores[r], expected)


def test_cleanup_scores_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="N"):
        hebbian.cleanup_scores(torch.zeros(2, 3, 4, dtype=torch.float64), torch.zeros(2, 5, 4, dtype=torch.float64))


def test_rival_score_variance_matches_a_monte_carlo_estimate():
    d, n, draws = 16, 12, 400
    keys = hebbian.random_unit_keys(draws * n, d, seed=3).view(draws, n, d)
    values = hebbian.random_unit_keys(draws * n, d, seed=4).view(draws, n, d)
    scores = hebbian.cleanup_scores(keys, values)
    rivals = scores[:, ~torch.eye(n, dtype=torch.bool)]
    # 400 draws × 132 rivals: the estimate's spread is a few percent; a formula missing a 1/d term is off by 40%+
    assert rivals.var().item() == pytest.approx(hebbian.rival_score_variance(n, d), rel=0.08)
    assert hebbian.rival_score_variance(n, d) == pytest.approx(2 / d + (n - 2) / d**2)


def test_rival_score_variance_needs_a_rival():
    with pytest.raises(ValueError, match="n"):
        hebbian.rival_score_variance(1, 8)


def test_crosstalk_energies_are_the_per_set_energies():
    keys = hebbian.random_unit_keys(60, 8, seed=3).view(3, 20, 8)
    batched = hebbian.crosstalk_energies(keys)
    assert batched.shape == (3,)
    for r in range(3):
        assert torch.allclose(batched[r], hebbian.crosstalk_energy(keys[r]), rtol=1e-12)
    with pytest.raises(ValueError, match="keys"):
        hebbian.crosstalk_energies(keys[0])


def test_cleanup_accuracy_counts_strict_wins_per_memory():
    keys = hebbian.random_unit_keys(3 * 40, 16, seed=4).view(3, 40, 16)
    values = hebbian.random_unit_keys(3 * 40, 16, seed=5).view(3, 40, 16)
    accuracy = hebbian.cleanup_accuracy(hebbian.cleanup_scores(keys, values))
    for r in range(3):
        W = hebbian.store(keys[r], values[r])
        assert accuracy[r].item() == pytest.approx(hebbian.recall_accuracy(W, keys[r], values[r]))
    assert hebbian.cleanup_accuracy(torch.ones(2, 4, 4, dtype=torch.float64)).tolist() == [0.0, 0.0]  # ties fail
    with pytest.raises(ValueError, match="N ≥ 2"):
        hebbian.cleanup_accuracy(torch.ones(2, 1, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="NaN"):
        hebbian.cleanup_accuracy(torch.full((1, 3, 3), float("nan"), dtype=torch.float64))
