"""Linear attention: the recurrent, parallel and chunk forms agree with each other and with the paper's equations."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import relative_error
from ttr_edu.ops import (
    elu_plus_one,
    linear_attention_chunk,
    linear_attention_parallel,
    linear_attention_recurrent,
)

FORMS = {
    "recurrent": linear_attention_recurrent,
    "parallel": linear_attention_parallel,
    "chunk": linear_attention_chunk,
}
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
FAST = settings(max_examples=12, deadline=None)


def make_qkv(B, T, H, D_k, D_v, dtype, seed, positive=False):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, D_k, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, T, H, D_v, generator=gen, dtype=torch.float64)
    if positive:  # the normaliser z_tᵀ q_t needs positive features to stay away from zero
        q, k = elu_plus_one(q), elu_plus_one(k)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def paper_loop(q, k, v, scale, normalize, eps):
    """Schlag et al. 2021 eqs. 11-13, token by token, in the papers' orientation W = Sᵀ (D_v × D_k)."""
    B, T, H, D_k = q.shape
    D_v = v.shape[-1]
    y = torch.zeros(B, T, H, D_v, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            W = torch.zeros(D_v, D_k, dtype=torch.float64)
            z = torch.zeros(D_k, dtype=torch.float64)
            for t in range(T):
                phi_k, phi_q = k[b, t, h].double(), scale * q[b, t, h].double()
                W = W + torch.outer(v[b, t, h].double(), phi_k)  # W_t = W_{t-1} + v_t φ(k_t)ᵀ
                z = z + phi_k  # z_t = z_{t-1} + φ(k_t)
                y[b, t, h] = W @ phi_q / (z @ phi_q + eps) if normalize else W @ phi_q
    return y


shapes = st.fixed_dictionaries(
    {
        "B": st.integers(1, 2),
        "T": st.integers(1, 33),
        "H": st.integers(1, 3),
        "D_k": st.integers(1, 6),
        "D_v": st.integers(1, 6),
        "chunk_size": st.integers(1, 12),
        "normalize": st.booleans(),
        "seed": st.integers(0, 2**16),
    }
)
CORNER_CASES = [
    dict(B=1, T=1, H=1, D_k=3, D_v=2, chunk_size=4, normalize=False, seed=0),  # T = 1
    dict(B=2, T=13, H=3, D_k=4, D_v=6, chunk_size=5, normalize=True, seed=1),  # T % C != 0, D_k != D_v, H > 1
    dict(B=1, T=16, H=2, D_k=5, D_v=3, chunk_size=16, normalize=False, seed=2),  # one whole chunk
]


def _with_examples(test):
    for case in CORNER_CASES:
        test = example(case)(test)
    return test


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@FAST
@_with_examples
@given(case=shapes)
def test_forms_agree(dtype, case):
    q, k, v = make_qkv(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], dtype, case["seed"], True)
    kwargs = dict(scale=0.7, normalize=case["normalize"], output_final_state=True)
    o_ref, state_ref = linear_attention_recurrent(q, k, v, **kwargs)
    for name, (o, state) in {
        "parallel": linear_attention_parallel(q, k, v, **kwargs),
        "chunk": linear_attention_chunk(q, k, v, chunk_size=case["chunk_size"], **kwargs),
    }.items():
        assert o.dtype == dtype
        assert relative_error(o, o_ref) <= TOL[dtype], name
        states, refs = (state, state_ref) if case["normalize"] else ((state,), (state_ref,))
        for s, r in zip(states, refs):
            assert relative_error(s, r) <= TOL[dtype], name


@pytest.mark.parametrize("form", FORMS)
@FAST
@_with_examples
@given(case=shapes)
def test_matches_paper_equation(form, case):
    q, k, v = make_qkv(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], torch.float64, case["seed"], True)
    extra = {"chunk_size": case["chunk_size"]} if form == "chunk" else {}
    o, _ = FORMS[form](q, k, v, scale=0.7, normalize=case["normalize"], eps=1e-6, **extra)
    assert relative_error(o, paper_loop(q, k, v, 0.7, case["normalize"], 1e-6)) <= 1e-10


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("normalize", [False, True])
@FAST
@given(T=st.integers(2, 30), data=st.data())
def test_split_with_state_equals_whole_run(form, normalize, T, data):
    split = data.draw(st.integers(1, T - 1), label="split")
    q, k, v = make_qkv(2, T, 2, 4, 3, torch.float64, seed=T, positive=True)
    extra = {"chunk_size": data.draw(st.integers(1, 8), label="chunk_size")} if form == "chunk" else {}
    run = lambda *x, **kw: FORMS[form](*x, normalize=normalize, output_final_state=True, **extra, **kw)
    o_whole, state_whole = run(q, k, v)
    o_first, state = run(q[:, :split], k[:, :split], v[:, :split])
    o_second, state_end = run(q[:, split:], k[:, split:], v[:, split:], initial_state=state)
    assert relative_error(torch.cat([o_first, o_second], dim=1), o_whole) <= 1e-10
    if normalize:
        assert isinstance(state_end, tuple) and len(state_end) == 2
        assert relative_error(state_end[1], state_whole[1]) <= 1e-10
        state_end, state_whole = state_end[0], state_whole[0]
    assert relative_error(state_end, state_whole) <= 1e-10


def test_default_scale_is_inverse_sqrt_dk():
    q, k, v = make_qkv(1, 6, 2, 9, 3, torch.float64, seed=3)
    o_default, _ = linear_attention_recurrent(q, k, v)
    o_explicit, _ = linear_attention_recurrent(q, k, v, scale=9**-0.5)
    assert relative_error(o_default, o_explicit) <= 1e-14
    o_one, _ = linear_attention_recurrent(q, k, v, scale=1.0)
    assert relative_error(o_default, o_one) > 0.5  # the scale really is applied


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("normalize", [False, True])
def test_gradcheck(form, normalize):
    q, k, v = make_qkv(1, 5, 2, 3, 2, torch.float64, seed=4, positive=True)
    S0 = torch.randn(1, 2, 3, 2, dtype=torch.float64)
    z0 = torch.rand(1, 2, 3, dtype=torch.float64) + 1.0
    inputs = [x.requires_grad_() for x in (q, k, v, S0, z0)]
    extra = {"chunk_size": 2} if form == "chunk" else {}

    def fn(q, k, v, S0, z0):
        state = (S0, z0) if normalize else S0
        o, final = FORMS[form](q, k, v, normalize=normalize, initial_state=state, output_final_state=True, **extra)
        return (o, *final) if normalize else (o, final)

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_output_keeps_dtype_and_state_is_fp32_or_wider(form, dtype):
    q, k, v = make_qkv(1, 7, 1, 3, 2, dtype, seed=5)
    o, S = FORMS[form](q, k, v, output_final_state=True)
    assert o.dtype == dtype
    assert S.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_normalize_state_must_be_a_pair():
    q, k, v = make_qkv(1, 4, 1, 3, 2, torch.float64, seed=6, positive=True)
    S0 = torch.zeros(1, 1, 3, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match="initial_state"):
        linear_attention_chunk(q, k, v, normalize=True, initial_state=S0)
    with pytest.raises(TypeError, match="initial_state"):
        linear_attention_recurrent(q, k, v, normalize=False, initial_state=(S0, S0[..., 0]))
    with pytest.raises(ValueError, match=r"initial_state\[1\] \(z\)"):
        linear_attention_parallel(q, k, v, normalize=True, initial_state=(S0, S0))
