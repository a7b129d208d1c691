"""Delta rule: the recurrent, parallel (T×T) and chunk (WY/UT) forms agree with each other and with Schlag et al."""

import warnings

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import fla_inputs, relative_error
from ttr_edu import finite_checks
from ttr_edu.ops import (
    delta_rule_chunk,
    delta_rule_parallel,
    delta_rule_pseudo_values,
    delta_rule_recurrent,
    linear_attention_chunk,
    linear_attention_recurrent,
    sum_norm,
)

FORMS = {"recurrent": delta_rule_recurrent, "parallel": delta_rule_parallel, "chunk": delta_rule_chunk}
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
FAST = settings(max_examples=12, deadline=None)


def make_inputs(B, T, H, D_k, D_v, dtype, seed):
    """Unit keys and β ∈ (0.05, 1.95): inside the stable range, β‖k‖² ∈ (0, 2)."""
    x = fla_inputs(B, T, H, D_k, D_v, dtype=dtype, seed=seed, beta=(0.05, 1.95))
    return [x["q"], x["k"], x["v"], x["beta"]]


def paper_loop(q, k, v, beta, scale):
    """Schlag et al. 2021 eq. 29, token by token, W = Sᵀ (D_v × D_k): v̄ = W k; W ← W + β (v − v̄) kᵀ; y = W q."""
    B, T, H, D_k = q.shape
    y = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            W = torch.zeros(v.shape[-1], D_k, dtype=torch.float64)
            for t in range(T):
                k_t, v_t = k[b, t, h].double(), v[b, t, h].double()
                v_bar = W @ k_t  # the value currently stored under k_t
                W = W + beta[b, t, h].double() * torch.outer(v_t - v_bar, k_t)
                y[b, t, h] = W @ (scale * q[b, t, h].double())
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
    dict(B=1, T=24, H=2, D_k=5, D_v=3, chunk_size=8, seed=2),  # whole chunks
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
    q, k, v, beta = make_inputs(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], dtype, case["seed"])
    o_ref, S_ref = delta_rule_recurrent(q, k, v, beta, scale=0.8, output_final_state=True)
    results = {
        "parallel": delta_rule_parallel(q, k, v, beta, scale=0.8, output_final_state=True),
        "chunk": delta_rule_chunk(q, k, v, beta, scale=0.8, output_final_state=True, chunk_size=case["chunk_size"]),
    }
    for name, (o, S) in results.items():
        assert o.dtype == dtype
        assert relative_error(o, o_ref) <= TOL[dtype], name
        assert relative_error(S, S_ref) <= TOL[dtype], name


@pytest.mark.parametrize("form", FORMS)
@FAST
@_with_examples
@given(case=shapes)
def test_matches_paper_equation(form, case):
    q, k, v, beta = make_inputs(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], torch.float64, case["seed"])
    extra = {"chunk_size": case["chunk_size"]} if form == "chunk" else {}
    o, _ = FORMS[form](q, k, v, beta, scale=0.8, **extra)
    assert relative_error(o, paper_loop(q, k, v, beta, 0.8)) <= 1e-10


def test_schlag_update_with_sum_normalised_keys():
    """Schlag et al.'s form W ← W − v̄ k̂ᵀ + (β v + (1 − β) v̄) k̂ᵀ with k̂ = φ(k)/Σφ(k) is the same update."""
    gen = torch.Generator().manual_seed(7)
    q, k = (torch.rand(1, 9, 1, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(1, 9, 1, 3, generator=gen, dtype=torch.float64)
    beta = torch.rand(1, 9, 1, generator=gen, dtype=torch.float64)
    k_hat = sum_norm(k, eps=0.0)
    W = torch.zeros(3, 4, dtype=torch.float64)
    for t in range(9):
        kt, bt = k_hat[0, t, 0], beta[0, t, 0]
        v_bar = W @ kt
        W = W - torch.outer(v_bar, kt) + torch.outer(bt * v[0, t, 0] + (1 - bt) * v_bar, kt)
    _, S = delta_rule_chunk(q, k_hat, v, beta, output_final_state=True, chunk_size=4)
    assert relative_error(S[0, 0].T, W) <= 1e-12


@pytest.mark.parametrize("form", FORMS)
@FAST
@given(T=st.integers(2, 30), data=st.data())
def test_split_with_state_equals_whole_run(form, T, data):
    split = data.draw(st.integers(1, T - 1), label="split")
    q, k, v, beta = make_inputs(2, T, 2, 4, 3, torch.float64, seed=T)
    extra = {"chunk_size": data.draw(st.integers(1, 8), label="chunk_size")} if form == "chunk" else {}
    run = lambda *x, **kw: FORMS[form](*x, output_final_state=True, **extra, **kw)
    o_whole, S_whole = run(q, k, v, beta)
    o_first, S = run(q[:, :split], k[:, :split], v[:, :split], beta[:, :split])
    o_second, S_end = run(q[:, split:], k[:, split:], v[:, split:], beta[:, split:], initial_state=S)
    assert relative_error(torch.cat([o_first, o_second], dim=1), o_whole) <= 1e-10
    assert relative_error(S_end, S_whole) <= 1e-10


@pytest.mark.parametrize("form", FORMS)
def test_gradcheck(form):
    q, k, v, beta = make_inputs(1, 5, 2, 3, 2, torch.float64, seed=8)
    S0 = torch.randn(1, 2, 3, 2, dtype=torch.float64)
    inputs = [x.requires_grad_() for x in (q, k, v, beta, S0)]
    extra = {"chunk_size": 2} if form == "chunk" else {}

    def fn(q, k, v, beta, S0):
        return FORMS[form](q, k, v, beta, initial_state=S0, output_final_state=True, check_stability="ignore", **extra)

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_output_keeps_dtype_and_state_is_fp32_or_wider(form, dtype):
    q, k, v, beta = make_inputs(1, 7, 1, 3, 2, dtype, seed=9)
    o, S = FORMS[form](q, k, v, beta, output_final_state=True)
    assert o.dtype == dtype
    assert S.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("beta_value", [2.5, -0.1])
def test_unstable_step_warns_or_raises(form, beta_value):
    q, k, v, beta = make_inputs(1, 6, 1, 3, 2, torch.float64, seed=10)
    beta = beta.clone()
    beta[0, 3, 0] = beta_value  # ‖k‖ = 1, so β‖k‖² = beta_value leaves [0, 2]
    with pytest.warns(RuntimeWarning, match=r"beta \* \|\|k\|\|\^2 leaves \[0, 2\] at 1 of 6"):
        FORMS[form](q, k, v, beta)
    with pytest.raises(ValueError, match="beta"):
        FORMS[form](q, k, v, beta, check_stability="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FORMS[form](q, k, v, beta, check_stability="ignore")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("beta_value", [float("nan"), float("inf")])
def test_stability_check_counts_a_non_finite_step_among_finite_ones(form, beta_value):
    """The check's fast path (one min/max reduction) must not let a NaN through: NaN compares false both ways."""
    q, k, v, beta = make_inputs(1, 6, 1, 3, 2, torch.float64, seed=10)
    beta = beta.clone()
    beta[0, 2, 0] = beta_value
    with finite_checks(False), pytest.raises(ValueError, match=r"leaves \[0, 2\] at 1 of 6"):
        FORMS[form](q, k, v, beta, check_stability="raise")


@pytest.mark.parametrize("form", FORMS)
def test_stability_check_decides_in_the_dtype_it_counts_in(form):
    """At the edge of the slack, the quick test and the count agree: β‖k‖² = 2.00002 in fp32 is within 2 + 2e-5 as
    fp32 rounds both, so it is silent (a test in double precision would flag it, then count 0 bad positions); one
    step of 2.0001 is flagged and counted."""
    k = torch.zeros(1, 4, 1, 4)
    k[..., 0] = 1.0  # unit keys: β‖k‖² = β
    q, v = torch.randn(1, 4, 1, 4), torch.randn(1, 4, 1, 4)
    for edge, flagged in ((2.00002, False), (2.0001, True)):
        beta = torch.full((1, 4, 1), 0.5)
        beta[0, 1, 0] = edge
        if flagged:
            with pytest.raises(ValueError, match=r"at 1 of 4 "):
                FORMS[form](q, k, v, beta, check_stability="raise")
        else:
            FORMS[form](q, k, v, beta, check_stability="raise")


@pytest.mark.parametrize("form", FORMS)
def test_stable_step_is_silent_and_bad_mode_is_rejected(form):
    q, k, v, beta = make_inputs(1, 6, 1, 3, 2, torch.float64, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FORMS[form](q, k, v, beta, check_stability="raise")
        FORMS[form](q, k, v, 2 * torch.ones_like(beta))  # β‖k‖² = 2 exactly: |1 − 2| = 1, not growing
    with pytest.raises(ValueError, match="check_stability"):
        FORMS[form](q, k, v, beta, check_stability="loud")


def test_unstable_update_really_grows():
    """The warning is not a formality: with β‖k‖² = 3 the state along k flips sign and doubles at each step."""
    k = torch.zeros(1, 20, 1, 2, dtype=torch.float64)
    k[..., 0] = 1.0
    v = torch.zeros(1, 20, 1, 2, dtype=torch.float64)
    beta = torch.full((1, 20, 1), 3.0, dtype=torch.float64)
    S0 = torch.eye(2, dtype=torch.float64).expand(1, 1, 2, 2)
    _, S = delta_rule_recurrent(k, k, v, beta, initial_state=S0, output_final_state=True, check_stability="ignore")
    assert S[0, 0, 0, 0].abs().item() == pytest.approx(2.0**20)


# --- pseudo-values: the delta rule is linear attention over u_t = β_t (v_t − S_{t−1}ᵀ k_t) --------------------------


@given(case=shapes, dtype=st.sampled_from([torch.float32, torch.float64]), scale=st.sampled_from([None, 1.0, 0.3]))
@FAST
def test_delta_rule_is_linear_attention_over_its_pseudo_values(case, dtype, scale):
    q, k, v, beta = make_inputs(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], dtype, case["seed"])
    S0 = torch.randn(case["B"], case["H"], case["D_k"], case["D_v"], dtype=torch.float64).to(dtype)
    u = delta_rule_pseudo_values(k, v, beta, initial_state=S0)
    assert u.shape == v.shape and u.dtype == dtype
    o_delta, S_delta = delta_rule_recurrent(q, k, v, beta, scale=scale, initial_state=S0, output_final_state=True)
    for linear in (linear_attention_recurrent, lambda *a, **kw: linear_attention_chunk(*a, chunk_size=5, **kw)):
        o_lin, S_lin = linear(q, k, u, scale=scale, initial_state=S0, output_final_state=True)
        assert relative_error(o_lin, o_delta) <= TOL[dtype]
        assert relative_error(S_lin, S_delta) <= TOL[dtype]


def test_pseudo_values_transcribe_the_definition():
    """``u_t = β_t (v_t − S_{t−1}ᵀ k_t)`` with ``S_t = S_{t−1} + k_t u_tᵀ``, one head at a time, written out here."""
    q, k, v, beta = make_inputs(2, 9, 2, 4, 3, torch.float64, seed=5)
    u = delta_rule_pseudo_values(k, v, beta)
    for b in range(2):
        for h in range(2):
            S = torch.zeros(4, 3, dtype=torch.float64)
            for t in range(9):
                expected = beta[b, t, h] * (v[b, t, h] - S.T @ k[b, t, h])
                assert torch.allclose(u[b, t, h], expected, rtol=1e-12, atol=1e-12)
                S = S + torch.outer(k[b, t, h], expected)
    assert relative_error(u, v * beta[..., None]) > 0.1  # not just β v: the correction matters here


def test_pseudo_values_refuse_bad_input():
    q, k, v, beta = make_inputs(1, 4, 2, 3, 2, torch.float64, seed=0)
    with pytest.raises(ValueError, match="beta"):
        delta_rule_pseudo_values(k, v, beta[:, :3])
    with pytest.raises(ValueError, match="v"):
        delta_rule_pseudo_values(k, v[:, :3], beta)
    with pytest.raises(ValueError, match="initial_state"):
        delta_rule_pseudo_values(k, v, beta, initial_state=torch.zeros(1, 2, 2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="v"):
        delta_rule_pseudo_values(k, v.float(), beta)
    with pytest.raises(TypeError, match="k"):
        delta_rule_pseudo_values(k.long(), v, beta)
    with pytest.raises(ValueError, match="beta"):
        delta_rule_pseudo_values(k, v, 3 * beta, check_stability="raise")
