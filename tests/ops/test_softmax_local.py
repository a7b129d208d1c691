"""Softmax attention (order 0) and local linear attention (order 1): per-token loops, the explicit weighted
least-squares fit, and the QK-norm / Nadaraya–Watson identity (Wang, Shi, Fox 2025 §4)."""

import warnings

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import relative_error
from ttr_edu.ops import local_linear_attention, softmax_attention

FAST = settings(max_examples=10, deadline=None)


def make_qkv(B, T, H, D_k, D_v, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, D_k, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, T, H, D_v, generator=gen, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def softmax_loop(q, k, v, scale):
    """o_t = Σ_{i≤t} exp(scale q_t·k_i) v_i / Σ_{i≤t} exp(scale q_t·k_i), one query at a time."""
    B, T, H, _ = q.shape
    y = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                logits = scale * k[b, : t + 1, h].double() @ q[b, t, h].double()
                w = torch.exp(logits - logits.max())
                y[b, t, h] = (w / w.sum()) @ v[b, : t + 1, h].double()
    return y


def weighted_least_squares_loop(q, k, v, scale, ridge):
    """Fit v ≈ a + B k by minimising Σ_i w_i ‖v_i − a − B k_i‖² + ridge ‖B‖² (intercept unpenalised), w the causal
    softmax weights of q_t, then predict a + B q_t: the normal equations of the augmented design [1, k]."""
    B_, T, H, D_k = q.shape
    y = torch.zeros(B_, T, H, v.shape[-1], dtype=torch.float64)
    penalty = torch.diag(torch.tensor([0.0] + [ridge] * D_k, dtype=torch.float64))
    for b in range(B_):
        for h in range(H):
            for t in range(T):
                keys, values = k[b, : t + 1, h].double(), v[b, : t + 1, h].double()
                w = torch.softmax(scale * keys @ q[b, t, h].double(), dim=0)
                X = torch.cat([torch.ones(t + 1, 1, dtype=torch.float64), keys], dim=1)  # (t+1, 1 + D_k)
                theta = torch.linalg.solve(X.T @ (w[:, None] * X) + penalty, X.T @ (w[:, None] * values))
                y[b, t, h] = torch.cat([torch.ones(1, dtype=torch.float64), q[b, t, h].double()]) @ theta
    return y


shapes = st.fixed_dictionaries(
    {
        "B": st.integers(1, 2),
        "T": st.integers(1, 20),
        "H": st.integers(1, 3),
        "D_k": st.integers(1, 5),
        "D_v": st.integers(1, 5),
        "scale": st.floats(0.1, 2.0),
        "seed": st.integers(0, 2**16),
    }
)
CORNER = dict(B=2, T=13, H=3, D_k=4, D_v=2, scale=0.5, seed=1)  # D_k != D_v, H > 1, fewer tokens than D_k early


@FAST
@example(dict(B=1, T=1, H=1, D_k=3, D_v=2, scale=1.0, seed=0))
@example(CORNER)
@given(case=shapes)
def test_softmax_matches_loop(case):
    q, k, v = make_qkv(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], torch.float64, case["seed"])
    o, state = softmax_attention(q, k, v, scale=case["scale"])
    assert state is None
    assert relative_error(o, softmax_loop(q, k, v, case["scale"])) <= 1e-10


def test_softmax_with_qk_norm_is_a_gaussian_kernel_smoother():
    """With unit q, k: exp(s q·k) ∝ exp(−s ‖q − k‖² / 2): softmax attention is Nadaraya–Watson, bandwidth 1/√s."""
    q, k, v = make_qkv(2, 9, 2, 4, 3, torch.float64, seed=2)
    o, _ = softmax_attention(q, k, v, scale=5.0, qk_norm=True)
    qn, kn = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    dist2 = ((qn.unsqueeze(2) - kn.unsqueeze(1)) ** 2).sum(-1)  # (B, T_q, T_k, H)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()[None, :, :, None]
    kernel = torch.exp(-5.0 * dist2 / 2).masked_fill(~causal, 0.0)
    nadaraya_watson = torch.einsum("b t s h, b s h v -> b t h v", kernel, v) / kernel.sum(2).unsqueeze(-1)
    assert relative_error(o, nadaraya_watson) <= 1e-12
    o_raw, _ = softmax_attention(q, k, v, scale=5.0)
    assert relative_error(o_raw, nadaraya_watson) > 1e-2  # without the norm the identity fails


@FAST
@example(case=dict(B=1, T=1, H=1, D_k=3, D_v=2, scale=1.0, seed=0), ridge=1e-2)
@example(case=CORNER, ridge=1e-3)
@given(case=shapes, ridge=st.floats(1e-3, 1.0))
def test_local_linear_matches_weighted_least_squares(case, ridge):
    q, k, v = make_qkv(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], torch.float64, case["seed"])
    o, state = local_linear_attention(q, k, v, scale=case["scale"], ridge=ridge)
    assert state is None
    assert relative_error(o, weighted_least_squares_loop(q, k, v, case["scale"], ridge)) <= 1e-10


def test_local_linear_fp32_close_to_fp64():
    q, k, v = make_qkv(2, 17, 2, 4, 3, torch.float64, seed=3)
    o64, _ = local_linear_attention(q, k, v, ridge=0.1)
    o32, _ = local_linear_attention(q.float(), k.float(), v.float(), ridge=0.1)
    assert o32.dtype == torch.float32
    assert relative_error(o32, o64) <= 1e-5


def test_local_linear_recovers_a_linear_map_where_softmax_cannot():
    """Order 1 reproduces v = M k + c exactly (up to the ridge) at any query; order 0 only averages."""
    gen = torch.Generator().manual_seed(4)
    M, c = torch.randn(2, 3, generator=gen, dtype=torch.float64), torch.randn(2, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 40, 1, 3, generator=gen, dtype=torch.float64)
    q = torch.randn(1, 40, 1, 3, generator=gen, dtype=torch.float64)
    v = torch.einsum("v k, b t h k -> b t h v", M, k) + c
    target = torch.einsum("v k, b t h k -> b t h v", M, q) + c
    o_lla, _ = local_linear_attention(q, k, v, scale=0.3, ridge=1e-9)
    o_sm, _ = softmax_attention(q, k, v, scale=0.3)
    later = slice(10, None)  # after enough tokens to pin a 3-d line
    assert relative_error(o_lla[:, later], target[:, later]) <= 1e-6
    assert relative_error(o_sm[:, later], target[:, later]) > 0.1


def test_first_token_returns_its_value_and_few_points_stay_finite():
    q, k, v = make_qkv(1, 3, 2, 8, 3, torch.float64, seed=5)  # 3 tokens, 8 key dims: Σ_kk is singular alone
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o, _ = local_linear_attention(q, k, v, ridge=1e-6)
    assert torch.isfinite(o).all()
    assert relative_error(o[:, 0], v[:, 0]) <= 1e-12


def test_local_linear_qk_norm_is_the_fit_on_normalised_queries_and_keys():
    q, k, v = make_qkv(2, 9, 2, 3, 2, torch.float64, seed=8)
    unit = torch.nn.functional.normalize
    o, _ = local_linear_attention(q, k, v, scale=2.0, ridge=0.05, qk_norm=True)
    assert (
        relative_error(o, local_linear_attention(unit(q, dim=-1), unit(k, dim=-1), v, scale=2.0, ridge=0.05)[0])
        <= 1e-12
    )


def test_local_linear_warns_when_the_ridge_is_below_rounding():
    """A ridge under the fp32 rounding of the key covariance leaves the slope to noise: a RuntimeWarning at the
    caller's line, naming the ridge."""
    q, k, v = make_qkv(1, 6, 1, 3, 2, torch.float32, seed=9)
    with pytest.warns(RuntimeWarning, match="^ridge: 1e-09 is below the rounding error") as record:
        local_linear_attention(100 * q, 100 * k, v, ridge=1e-9)
    assert {w.filename for w in record} == {__file__}


@pytest.mark.parametrize("ridge", [0.0, -1e-3])
def test_non_positive_ridge_is_rejected(ridge):
    q, k, v = make_qkv(1, 3, 1, 2, 2, torch.float64, seed=6)
    with pytest.raises(ValueError, match="ridge"):
        local_linear_attention(q, k, v, ridge=ridge)


@pytest.mark.parametrize("op", [softmax_attention, local_linear_attention])
def test_gradcheck(op):
    q, k, v = make_qkv(1, 5, 2, 3, 2, torch.float64, seed=7)
    inputs = [x.requires_grad_() for x in (q, k, v)]
    assert torch.autograd.gradcheck(lambda q, k, v: op(q, k, v, scale=0.8)[0], inputs, fast_mode=True)


@pytest.mark.parametrize("op", [softmax_attention, local_linear_attention])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_keeps_dtype(op, dtype):
    q, k, v = make_qkv(1, 6, 1, 3, 2, dtype, seed=8)
    assert op(q, k, v)[0].dtype == dtype


def test_default_scale_is_inverse_sqrt_dk():
    q, k, v = make_qkv(1, 6, 2, 9, 3, torch.float64, seed=9)
    for op in (softmax_attention, local_linear_attention):
        assert relative_error(op(q, k, v)[0], op(q, k, v, scale=9**-0.5)[0]) <= 1e-14
        assert relative_error(op(q, k, v)[0], op(q, k, v, scale=1.0)[0]) > 1e-3
