"""Feature maps: each formula, d_dot, DPFP's zero block, FAVOR+ unbiasedness and orthogonality, the registry."""

import math

import pytest
import torch

from ttr_edu.ops import (
    FEATURE_MAPS,
    FavorPlus,
    d_dot,
    dpfp,
    elu_plus_one,
    favor_plus,
    get_feature_map,
    identity_feature_map,
    l2_norm,
    orthogonal_random_features,
    relu_feature_map,
    sum_norm,
)


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_elementwise_maps():
    x = randn(2, 5, 3, 4)
    assert torch.allclose(elu_plus_one(x), torch.where(x > 0, x + 1, torch.exp(x)), rtol=1e-14, atol=0)
    assert (elu_plus_one(x) > 0).all()
    assert torch.equal(relu_feature_map(x), x.clamp_min(0))
    assert identity_feature_map(x) is x


@pytest.mark.parametrize("nu", [1, 2, 3])
def test_dpfp_matches_its_definition(nu):
    """φ_{(j−1)·2d + i}(x) = r_i r_{(i − j) mod 2d}, r = [ReLU(x); ReLU(−x)] (Schlag et al. 2021 eq. 37)."""
    d = 4
    x = randn(3, d, seed=nu)
    phi = dpfp(x, nu=nu)
    assert phi.shape == (3, 2 * d * nu) and phi.shape[-1] == d_dot("dpfp", d, nu=nu)
    for row in range(3):
        r = [max(float(x[row, i]), 0.0) for i in range(d)] + [max(-float(x[row, i]), 0.0) for i in range(d)]
        expected = [r[i] * r[(i - j) % (2 * d)] for j in range(1, nu + 1) for i in range(2 * d)]
        assert torch.allclose(phi[row], torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-15)


def test_dpfp_block_at_offset_d_k_is_zero():
    d = 5
    phi = dpfp(randn(7, d), nu=d)
    blocks = phi.reshape(7, d, 2 * d)  # (batch, ν, 2 d_k)
    assert blocks[:, -1].abs().max() == 0  # ReLU(x_i) · ReLU(−x_i) = 0
    assert blocks[:, :-1].abs().sum(-1).min() > 0
    with pytest.raises(ValueError, match="nu"):
        dpfp(randn(2, d), nu=2 * d)


def test_orthogonal_random_features_rows_and_reproducibility():
    d, m = 8, 20
    omega = orthogonal_random_features(m, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert omega.shape == (m, d)
    for start in range(0, m, d):  # rows inside one block of d are mutually orthogonal
        block = omega[start : start + d]
        gram = block @ block.T
        assert (gram - torch.diag(torch.diagonal(gram))).abs().max() < 1e-12
    again = orthogonal_random_features(m, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    other = orthogonal_random_features(m, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert torch.equal(omega, again) and not torch.equal(omega, other)


def test_favor_plus_matches_its_definition():
    """φ(x) = exp(−‖x‖²/2)/√(2m) · [exp(ω_1·x), …, exp(ω_m·x), exp(−ω_1·x), …] (Choromanski et al. 2021)."""
    x = randn(3, 4, seed=8)
    omega = randn(5, 4, seed=9)
    phi = favor_plus(x, omega)
    for row in range(3):
        norm2 = float(sum(x[row, i] ** 2 for i in range(4)))
        dots = [float(sum(omega[j, i] * x[row, i] for i in range(4))) for j in range(5)]
        expected = [math.exp(sign * d - norm2 / 2) / math.sqrt(10) for sign in (1, -1) for d in dots]
        assert torch.allclose(phi[row], torch.tensor(expected, dtype=torch.float64), rtol=1e-13, atol=0)


def test_favor_plus_is_unbiased_for_the_softmax_kernel():
    """E[φ(q)·φ(k)] = exp(q·k): with m = 20000 orthogonal features the estimate is within a few percent."""
    d = 4
    q, k = 0.3 * randn(5, d, seed=3), 0.3 * randn(5, d, seed=4)
    omega = orthogonal_random_features(20000, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    phi_q, phi_k = favor_plus(q, omega), favor_plus(k, omega)
    assert phi_q.shape == (5, 40000) and (phi_q > 0).all()
    estimate, exact = (phi_q * phi_k).sum(-1), torch.exp((q * k).sum(-1))
    assert ((estimate - exact).abs() / exact).max() < 0.03
    assert torch.isfinite(favor_plus(30.0 * q, omega)).all()  # one exponent: no overflow for large ‖x‖


def test_favor_plus_module_fixed_or_redrawn():
    x = randn(3, 6, dtype=torch.float32)
    fixed = FavorPlus(6, 16, seed=0)
    assert fixed.d_dot == 32 == d_dot("favor_plus", 6, m=16)
    assert torch.equal(fixed(x), fixed(x))
    assert torch.equal(fixed(x), FavorPlus(6, 16, seed=0)(x))  # the seed fixes Ω
    redrawn = FavorPlus(6, 16, redraw=True, seed=0)
    assert not torch.equal(redrawn(x), redrawn(x))


def test_favor_plus_shared_draw_uses_one_omega_per_block():
    """``redraw=True`` redraws per call; inside ``shared_draw`` keys and queries share one fresh Ω."""
    x = torch.randn(5, 6, dtype=torch.float64)
    fmap = FavorPlus(6, 16, redraw=True, seed=0)
    before = fmap.projection.clone()
    with fmap.shared_draw():
        first, second = fmap(x), fmap(x)
        omega = fmap.projection.clone()
    assert torch.equal(first, second)  # one Ω inside the block ...
    assert not torch.equal(omega, before)  # ... freshly drawn on entry
    assert fmap.redraw and not torch.equal(fmap(x), first)  # redraw restored: the next call draws again
    fixed = FavorPlus(6, 16, seed=1)
    with fixed.shared_draw():
        inside = fixed(x)
    assert torch.equal(inside, fixed(x)) and not fixed.redraw  # a fixed Ω stays fixed
    with pytest.raises(ValueError, match="projection"):
        favor_plus(x, torch.randn(16, 5))


def test_normalisations():
    x = randn(4, 7).abs()
    assert torch.allclose(sum_norm(x).sum(-1), torch.ones(4, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(sum_norm(x, eps=0.0).sum(-1), torch.ones(4, dtype=torch.float64), atol=1e-14)
    assert torch.isfinite(sum_norm(torch.zeros(2, 3))).all()  # a dead ReLU feature vector: no NaN
    y = randn(4, 7, seed=1)
    assert torch.allclose(l2_norm(y).norm(dim=-1), torch.ones(4, dtype=torch.float64), atol=1e-14)
    assert torch.isfinite(l2_norm(torch.zeros(2, 3))).all()


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("elu_plus_one", {}, 64),
        ("relu", {}, 64),
        ("identity", {}, 64),
        ("dpfp", {"nu": 1}, 128),
        ("dpfp", {"nu": 3}, 384),
        ("favor_plus", {"m": 128}, 256),
    ],
)
def test_d_dot_matches_the_map_output(name, params, expected):
    assert d_dot(name, 64, **params) == expected
    build = dict(params, d_k=64, seed=0) if name == "favor_plus" else params
    phi = get_feature_map(name, **build)
    assert phi(randn(2, 64, dtype=torch.float32)).shape == (2, expected)


def test_unknown_names_list_the_valid_ones():
    for call in (lambda: get_feature_map("softmax"), lambda: d_dot("softmax", 8)):
        with pytest.raises(ValueError, match="^name: expected one of") as info:
            call()
        assert all(name in str(info.value) for name in FEATURE_MAPS)


def test_bad_inputs():
    with pytest.raises(TypeError, match="x"):
        elu_plus_one(torch.arange(3))
    with pytest.raises(TypeError, match="nu"):
        dpfp(randn(2, 3), nu=1.5)
    with pytest.raises(ValueError, match="nu"):
        dpfp(randn(2, 3), nu=0)
    with pytest.raises(ValueError, match="m"):
        orthogonal_random_features(0, 3)


@pytest.mark.parametrize("name", ["elu_plus_one", "dpfp", "favor_plus"])
def test_gradcheck(name):
    params = {"d_k": 3, "m": 4, "seed": 0} if name == "favor_plus" else {}
    phi = get_feature_map(name, **params)
    if name == "favor_plus":
        phi = phi.double()
    x = (randn(2, 3, seed=7) + 0.1).requires_grad_()  # away from ReLU's kink at 0
    assert torch.autograd.gradcheck(phi, (x,))
    assert math.isfinite(phi(x).sum().item())
