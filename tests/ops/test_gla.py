"""Gated linear attention with per-key gates (GLA, fla's chunk_gla): recurrent and chunk forms equal a per-token,
per-element loop, reduce to the scalar gate, and stay exact under strong decay and resets."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import relative_error
from ttr_edu import ops


def make_inputs(B=2, T=45, H=3, D_k=8, D_v=5, dtype=torch.float64, seed=0, temperature=1.0):
    """g = logsigmoid(x) / temperature: a small temperature is a strong decay."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)
    q, k, v = rand(B, T, H, D_k), rand(B, T, H, D_k), rand(B, T, H, D_v)
    g = F.logsigmoid(rand(B, T, H, D_k)) / temperature
    S0 = rand(B, H, D_k, D_v)
    return [x.to(dtype) for x in (q, k, v, g, S0)]


def element_loop(q, k, v, g, S0, scale):
    """S[d, e] ← exp(g_{t,d}) S[d, e] + k_{t,d} v_{t,e};  o_{t,e} = Σ_d S[d, e] scale q_{t,d} (GLA eq. 3), scalars."""
    B, T, H, D_k = q.shape
    D_v = v.shape[-1]
    o = torch.zeros(B, T, H, D_v, dtype=torch.float64)
    S_T = torch.zeros(B, H, D_k, D_v, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            S = [[float(S0[b, h, d, e]) for e in range(D_v)] for d in range(D_k)]
            for t in range(T):
                for d in range(D_k):
                    alpha, key = float(torch.exp(g[b, t, h, d])), float(k[b, t, h, d])
                    for e in range(D_v):
                        S[d][e] = alpha * S[d][e] + key * float(v[b, t, h, e])
                for e in range(D_v):
                    o[b, t, h, e] = sum(S[d][e] * scale * float(q[b, t, h, d]) for d in range(D_k))
            S_T[b, h] = torch.tensor(S, dtype=torch.float64)
    return o, S_T


def test_recurrent_and_chunk_equal_the_per_element_loop():
    q, k, v, g, S0 = make_inputs(B=1, T=21, H=2, D_k=4, D_v=3)
    o_ref, S_ref = element_loop(q, k, v, g, S0, scale=0.7)
    for fn, options in ((ops.gla_recurrent, {}), (ops.gla_chunk, {"chunk_size": 16})):
        o, S = fn(q, k, v, g, scale=0.7, initial_state=S0, output_final_state=True, **options)
        assert relative_error(o, o_ref) < 1e-13 and relative_error(S, S_ref) < 1e-13


@pytest.mark.parametrize("chunk_size", [1, 7, 16, 32, 64, 128])
@pytest.mark.parametrize("temperature", [10.0, 1.0, 0.1, 0.01])
def test_chunk_equals_recurrent_for_any_chunk_size_and_decay(chunk_size, temperature):
    q, k, v, g, S0 = make_inputs(T=77, temperature=temperature)
    o_r, S_r = ops.gla_recurrent(q, k, v, g, initial_state=S0, output_final_state=True)
    o_c, S_c = ops.gla_chunk(q, k, v, g, initial_state=S0, output_final_state=True, chunk_size=chunk_size)
    assert relative_error(o_c, o_r) < 1e-12 and relative_error(S_c, S_r) < 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fp32_chunk_stays_precise_under_strong_decay(seed):
    """g = logsigmoid(x) / 0.1: every exponent is a direct sum of log decays (never a difference of running sums),
    so the fp32 chunk form is as close to fp64 as the fp32 recurrence is."""
    x64 = make_inputs(B=1, T=256, H=2, D_k=32, D_v=32, seed=seed, temperature=0.1)
    o64, S64 = ops.gla_recurrent(*x64[:4], initial_state=x64[4], output_final_state=True)
    x32 = [x.float() for x in x64]
    o_r, S_r = ops.gla_recurrent(*x32[:4], initial_state=x32[4], output_final_state=True)
    o_c, S_c = ops.gla_chunk(*x32[:4], initial_state=x32[4], output_final_state=True)
    assert relative_error(S_c, S64) < max(2 * relative_error(S_r, S64), 1e-6)
    assert relative_error(o_c, o64) < max(2 * relative_error(o_r, o64), 1e-6)


def test_a_scalar_gate_broadcast_over_keys_is_simple_gla():
    q, k, v, g, S0 = make_inputs()
    g_scalar = g[..., 0]
    g_keys = g_scalar.unsqueeze(-1).expand_as(g)
    for per_key, scalar in (
        (ops.gla_recurrent, ops.gated_linear_attention_recurrent),
        (ops.gla_chunk, ops.gated_linear_attention_chunk),
    ):
        o, S = per_key(q, k, v, g_keys, initial_state=S0, output_final_state=True)
        o_s, S_s = scalar(q, k, v, g_scalar, initial_state=S0, output_final_state=True)
        assert relative_error(o, o_s) < 1e-12 and relative_error(S, S_s) < 1e-12


def test_reset_of_one_key_dimension_is_exact():
    """g = −inf in one key dimension forgets that row of the state and nothing else, in both forms."""
    q, k, v, g, S0 = make_inputs(T=40)
    g[:, 20, :, 3] = float("-inf")
    g[0, 33, 1, :] = float("-inf")
    o_r, S_r = ops.gla_recurrent(q, k, v, g, initial_state=S0, output_final_state=True)
    o_c, S_c = ops.gla_chunk(q, k, v, g, initial_state=S0, output_final_state=True, chunk_size=16)
    assert torch.isfinite(o_c).all() and torch.isfinite(S_c).all()
    assert relative_error(o_c, o_r) < 1e-12 and relative_error(S_c, S_r) < 1e-12
    # what the reset row holds afterwards was written after token 20 only
    _, S_after = ops.gla_recurrent(q[:, 20:], k[:, 20:], v[:, 20:], g[:, 20:], output_final_state=True)
    assert torch.allclose(S_r[1, :, 3], S_after[1, :, 3], rtol=1e-12, atol=0)


def test_gradients_agree_between_forms():
    q, k, v, g, S0 = make_inputs(T=30)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, S0)]
    grads = []
    for fn in (ops.gla_recurrent, ops.gla_chunk):
        o, S = fn(*leaves[:4], initial_state=leaves[4], output_final_state=True)
        grads.append(torch.autograd.grad(o.sin().sum() + S.cos().sum(), leaves))
    for a, b in zip(*grads):
        assert relative_error(a, b) < 1e-11


def test_state_handed_over_equals_one_run():
    q, k, v, g, S0 = make_inputs(T=50)
    o, S = ops.gla_chunk(q, k, v, g, initial_state=S0, output_final_state=True, chunk_size=16)
    o1, S1 = ops.gla_chunk(q[:, :19], k[:, :19], v[:, :19], g[:, :19], initial_state=S0, output_final_state=True)
    o2, S2 = ops.gla_chunk(q[:, 19:], k[:, 19:], v[:, 19:], g[:, 19:], initial_state=S1, output_final_state=True)
    assert relative_error(torch.cat([o1, o2], 1), o) < 1e-12 and relative_error(S2, S) < 1e-12


@pytest.mark.parametrize("fn", [ops.gla_recurrent, ops.gla_chunk])
def test_bad_gates_are_refused_by_name(fn):
    q, k, v, g, _ = make_inputs()
    with pytest.raises(
        ValueError,
        match=r"g: expected a per-key log decay \(B, T, H, D_k\), got shape \(2, 45, 3\); "
        r"for a scalar gate .* use gated_linear_attention_recurrent",
    ):
        fn(q, k, v, g[..., 0])
    with pytest.raises(ValueError, match=r"g: expected shape \(B, T, H, D_k\) = \(2, 45, 3, 8\), got \(2, 45, 3, 4\)"):
        fn(q, k, v, g[..., :4])
    bad = g.clone()
    bad[0, 3, 1, 2] = 0.5
    with pytest.raises(ValueError, match=r"g: expected a log decay in \[-inf, 0\].*1 of 2160 \(B, T, H, D_k\)"):
        fn(q, k, v, bad)
    with pytest.raises(TypeError, match="g: expected a floating-point tensor"):
        fn(q, k, v, g.long())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtype_contract(dtype):
    q, k, v, g, S0 = make_inputs(dtype=dtype)
    o, S = ops.gla_chunk(q, k, v, g, initial_state=S0, output_final_state=True)
    assert o.dtype == dtype and S.dtype == torch.float32


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_factorised_and_exact_paths_agree(monkeypatch, dtype, tol):
    """Weak decays take the rank-one path (Q ⊙ γ)(K / γ)ᵀ, strong ones the exact sub-chunked one: forcing either on
    the same weak-decay inputs gives the same result, to rounding."""
    from ttr_edu.ops import gla

    q, k, v, g, S0 = make_inputs(T=130, D_k=16, D_v=16, temperature=10.0, dtype=dtype)
    results = []
    for threshold in (0.0, 1.0):  # 0: every block factorised; 1: none (γ_C < 1 everywhere)
        monkeypatch.setattr(gla, "MIN_FACTORED_DECAY", threshold)
        results.append(ops.gla_chunk(q, k, v, g, initial_state=S0, output_final_state=True))
    (o_f, S_f), (o_e, S_e) = results
    assert relative_error(o_f, o_e) < tol and relative_error(S_f, S_e) < tol
