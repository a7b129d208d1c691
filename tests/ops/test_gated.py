"""Gated linear attention and the gated delta rule: recurrent and chunk forms agree with each other and with the
per-token equations (decay before the error for the gated delta rule, as in fla)."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import fla_inputs, relative_error
from ttr_edu.ops import (
    _chunking,
    delta_rule_chunk,
    delta_rule_recurrent,
    gated_delta_rule_chunk,
    gated_delta_rule_recurrent,
    gated_linear_attention_chunk,
    gated_linear_attention_recurrent,
)

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
FAST = settings(max_examples=10, deadline=None)


def make_inputs(B, T, H, D_k, D_v, dtype, seed, max_decay=1.0):
    """Unit keys, β ∈ (0.05, 1.95), log decay g ∈ (−max_decay, 0]."""
    x = fla_inputs(B, T, H, D_k, D_v, dtype=dtype, seed=seed, beta=(0.05, 1.95), max_decay=max_decay)
    return [x["q"], x["k"], x["v"], x["g"], x["beta"]]


def gla_loop(q, k, v, g, scale):
    """W_t = α_t W_{t-1} + v_t k_tᵀ, y_t = W_t q_t (Wang, Shi, Fox 2025 §3.2, decay weights), W = Sᵀ."""
    B, T, H, D_k = q.shape
    y = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            W = torch.zeros(v.shape[-1], D_k, dtype=torch.float64)
            for t in range(T):
                W = torch.exp(g[b, t, h]) * W + torch.outer(v[b, t, h], k[b, t, h])
                y[b, t, h] = W @ (scale * q[b, t, h])
    return y


def gated_delta_loop(q, k, v, g, beta, scale):
    """W ← α W, then W ← W + β (v − W k) kᵀ (Yang, Kautz, Hatamizadeh 2025 eq. 10), y = W q; W = Sᵀ."""
    B, T, H, D_k = q.shape
    y = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            W = torch.zeros(v.shape[-1], D_k, dtype=torch.float64)
            for t in range(T):
                W = torch.exp(g[b, t, h]) * W
                W = W + beta[b, t, h] * torch.outer(v[b, t, h] - W @ k[b, t, h], k[b, t, h])
                y[b, t, h] = W @ (scale * q[b, t, h])
    return y


shapes = st.fixed_dictionaries(
    {
        "B": st.integers(1, 2),
        "T": st.integers(1, 33),
        "H": st.integers(1, 3),
        "D_k": st.integers(1, 6),
        "D_v": st.integers(1, 6),
        "chunk_size": st.integers(1, 12),
        "seed": st.integers(0, 2**16),
    }
)
CORNER_CASES = [
    dict(B=1, T=1, H=1, D_k=3, D_v=2, chunk_size=4, seed=0),  # T = 1
    dict(B=2, T=13, H=3, D_k=4, D_v=6, chunk_size=5, seed=1),  # T % C != 0, D_k != D_v, H > 1
]


def _with_examples(test):
    for case in CORNER_CASES:
        test = example(case)(test)
    return test


def _dims(case):
    return case["B"], case["T"], case["H"], case["D_k"], case["D_v"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@FAST
@_with_examples
@given(case=shapes)
def test_gla_forms_agree_and_match_equation(dtype, case):
    q, k, v, g, _ = make_inputs(*_dims(case), dtype, case["seed"])
    o_rec, S_rec = gated_linear_attention_recurrent(q, k, v, g, scale=0.8, output_final_state=True)
    o_chk, S_chk = gated_linear_attention_chunk(
        q, k, v, g, scale=0.8, output_final_state=True, chunk_size=case["chunk_size"]
    )
    assert o_chk.dtype == o_rec.dtype == dtype
    assert relative_error(o_chk, o_rec) <= TOL[dtype]
    assert relative_error(S_chk, S_rec) <= TOL[dtype]
    if dtype == torch.float64:
        y = gla_loop(q, k, v, g, 0.8)
        assert relative_error(o_rec, y) <= 1e-10
        assert relative_error(o_chk, y) <= 1e-10


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@FAST
@_with_examples
@given(case=shapes)
def test_gated_delta_forms_agree_and_match_equation(dtype, case):
    q, k, v, g, beta = make_inputs(*_dims(case), dtype, case["seed"])
    o_rec, S_rec = gated_delta_rule_recurrent(q, k, v, g, beta, scale=0.8, output_final_state=True)
    o_chk, S_chk = gated_delta_rule_chunk(
        q, k, v, g, beta, scale=0.8, output_final_state=True, chunk_size=case["chunk_size"]
    )
    assert o_chk.dtype == o_rec.dtype == dtype
    assert relative_error(o_chk, o_rec) <= TOL[dtype]
    assert relative_error(S_chk, S_rec) <= TOL[dtype]
    if dtype == torch.float64:
        y = gated_delta_loop(q, k, v, g, beta, 0.8)
        assert relative_error(o_rec, y) <= 1e-10
        assert relative_error(o_chk, y) <= 1e-10


def test_strong_decay_in_long_chunks_stays_finite():
    """exp(G_i − G_j) is masked before exp: a chunk whose total log decay is −6400 must not produce inf or NaN."""
    q, k, v, g, beta = make_inputs(1, 64, 2, 4, 3, torch.float32, seed=2, max_decay=200.0)
    o_rec, _ = gated_delta_rule_recurrent(q, k, v, g, beta)
    o_chk, _ = gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=64)
    assert torch.isfinite(o_chk).all()
    assert relative_error(o_chk, o_rec) <= 1e-5
    o_rec, _ = gated_linear_attention_recurrent(q, k, v, g)
    o_chk, _ = gated_linear_attention_chunk(q, k, v, g, chunk_size=64)
    assert torch.isfinite(o_chk).all()
    assert relative_error(o_chk, o_rec) <= 1e-5


def test_zero_decay_reduces_to_ungated_layers():
    q, k, v, g, beta = make_inputs(2, 11, 2, 4, 3, torch.float64, seed=3)
    zero = torch.zeros_like(g)
    o_gdn, _ = gated_delta_rule_chunk(q, k, v, zero, beta, chunk_size=4)
    assert relative_error(o_gdn, delta_rule_recurrent(q, k, v, beta)[0]) <= 1e-12
    o_gla, _ = gated_linear_attention_chunk(q, k, v, zero, chunk_size=4)
    causal = torch.ones(11, 11, dtype=torch.bool).tril()
    scores = torch.einsum("b t h k, b s h k -> b h t s", q * 4**-0.5, k).masked_fill(~causal, 0.0)
    plain = torch.einsum("b h t s, b s h v -> b t h v", scores, v)
    assert relative_error(o_gla, plain) <= 1e-12


GATED = {
    "gla_recurrent": lambda q, k, v, g, beta, **kw: gated_linear_attention_recurrent(q, k, v, g, **kw),
    "gla_chunk": lambda q, k, v, g, beta, **kw: gated_linear_attention_chunk(q, k, v, g, chunk_size=3, **kw),
    "gdn_recurrent": lambda q, k, v, g, beta, **kw: gated_delta_rule_recurrent(q, k, v, g, beta, **kw),
    "gdn_chunk": lambda q, k, v, g, beta, **kw: gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=3, **kw),
}


@pytest.mark.parametrize("form", GATED)
@FAST
@given(T=st.integers(2, 30), data=st.data())
def test_split_with_state_equals_whole_run(form, T, data):
    split = data.draw(st.integers(1, T - 1), label="split")
    q, k, v, g, beta = make_inputs(2, T, 2, 4, 3, torch.float64, seed=T)
    run = lambda *x, **kw: GATED[form](*x, output_final_state=True, **kw)
    o_whole, S_whole = run(q, k, v, g, beta)
    first = [x[:, :split] for x in (q, k, v, g, beta)]
    second = [x[:, split:] for x in (q, k, v, g, beta)]
    o_first, S = run(*first)
    o_second, S_end = run(*second, initial_state=S)
    assert relative_error(torch.cat([o_first, o_second], dim=1), o_whole) <= 1e-10
    assert relative_error(S_end, S_whole) <= 1e-10


@pytest.mark.parametrize("form", GATED)
def test_gradcheck(form):
    q, k, v, g, beta = make_inputs(1, 5, 2, 3, 2, torch.float64, seed=4)
    S0 = torch.randn(1, 2, 3, 2, dtype=torch.float64)
    inputs = [x.requires_grad_() for x in (q, k, v, g, beta, S0)]

    def fn(q, k, v, g, beta, S0):
        return GATED[form](q, k, v, g, beta, initial_state=S0, output_final_state=True)

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@pytest.mark.parametrize("form", GATED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_keeps_dtype_and_state_is_fp32(form, dtype):
    q, k, v, g, beta = make_inputs(1, 7, 1, 3, 2, dtype, seed=5)
    o, S = GATED[form](q, k, v, g, beta, output_final_state=True)
    assert o.dtype == dtype and S.dtype == torch.float32


@pytest.mark.parametrize("form", ["gdn_recurrent", "gdn_chunk"])
def test_gated_delta_warns_when_unstable(form):
    q, k, v, g, beta = make_inputs(1, 6, 1, 3, 2, torch.float64, seed=6)
    with pytest.warns(RuntimeWarning, match="leaves"):
        GATED[form](q, k, v, g, 3.0 * torch.ones_like(beta))


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("t_bad", [0, 23, 36])  # first token, last of a middle block, the padded last chunk
def test_chunk_stability_check_sees_every_token(monkeypatch, gated, t_bad):
    """One bad β‖k‖² anywhere is found and counted by the chunk forms. The check reads the whole β once, before
    the blocks; this guards that, whatever the check becomes (one read off each block's Gram diagonal was tried),
    no token escapes it: not in a later block, not in the padded last chunk, not on the exact decay path (gated:
    chunks that decay by more than e⁸), not under autograd."""
    monkeypatch.setattr(_chunking, "BLOCK_ROWS", 72)  # blocks of 3 chunks (B·H·C = 24 rows per chunk)
    q, k, v, g, beta = make_inputs(2, 37, 3, 5, 4, torch.float64, seed=8, max_decay=30.0)
    beta = beta.clone()
    beta[1, t_bad, 2] = 2.5  # β‖k‖² = 2.5 for a unit key
    inputs = [x.requires_grad_() for x in ((q, k, v, g, beta) if gated else (q, k, v, beta))]
    chunk = gated_delta_rule_chunk if gated else delta_rule_chunk
    with pytest.raises(ValueError, match=rf"leaves \[0, 2\] at 1 of {2 * 37 * 3} "):
        chunk(*inputs, chunk_size=4, check_stability="raise")
    beta.data[1, t_bad, 2] = 2.0  # on the boundary: stable (|1 − 2| = 1), silent
    chunk(*inputs, chunk_size=4, check_stability="raise")


@pytest.mark.parametrize("block_rows", [1, 72])
@pytest.mark.parametrize("gated", [False, True])
def test_chunk_forward_is_the_same_for_any_block_split(monkeypatch, block_rows, gated):
    """The chunk forms take their chunks a block at a time; one chunk per block, or ragged blocks of 3, 3, 3 and 1
    chunks (B·H·C = 24 rows per chunk), give the recurrence's outputs, state and gradients."""
    monkeypatch.setattr(_chunking, "BLOCK_ROWS", block_rows)
    q, k, v, g, beta = make_inputs(2, 37, 3, 5, 4, torch.float64, seed=5)
    S0 = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    inputs = [x.requires_grad_() for x in ((q, k, v, g, beta) if gated else (q, k, v, beta))]
    chunk = gated_delta_rule_chunk if gated else delta_rule_chunk
    recurrent = gated_delta_rule_recurrent if gated else delta_rule_recurrent
    o, S = chunk(*inputs, initial_state=S0, output_final_state=True, chunk_size=4)
    o_ref, S_ref = recurrent(*inputs, initial_state=S0, output_final_state=True)
    assert relative_error(o, o_ref) <= 1e-10
    assert relative_error(S, S_ref) <= 1e-10
    probe = torch.randn_like(o)
    grads = torch.autograd.grad((o * probe).sum() + S.sum(), inputs)
    grads_ref = torch.autograd.grad((o_ref * probe).sum() + S_ref.sum(), inputs)
    for a, b in zip(grads, grads_ref):
        assert relative_error(a, b) <= 1e-10
