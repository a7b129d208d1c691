"""Recursive least squares (Mesa): the Sherman–Morrison recurrence and the per-step exact solve agree with each
other and with the ridge-regression argmin written from Wang, Shi, Fox 2025 §3.1."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import fla_inputs, relative_error
from ttr_edu.ops import rls_chunk, rls_exact, rls_recurrent

FORMS = {"recurrent": rls_recurrent, "exact": rls_exact}
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
FAST = settings(max_examples=10, deadline=None)


def make_inputs(B, T, H, D_k, D_v, dtype, seed, max_decay=0.2):
    """Gaussian keys over √D_k (not unit: the ridge regression must not depend on it), g ∈ (−max_decay, 0]."""
    x = fla_inputs(B, T, H, D_k, D_v, dtype=dtype, seed=seed, key_norm="scaled", max_decay=max_decay)
    return [x["q"], x["k"], x["v"], x["g"]]


def ridge_argmin_loop(q, k, v, ridge, g, scale):
    """For each t, solve argmin_M Σ_{i≤t} γ_i ‖v_i − M k_i‖² + γ_0 λ ‖M‖² as a least-squares problem.

    γ_i = Π_{j=i+1..t} α_j (Wang, Shi, Fox 2025 §3.1-3.2); the ridge is the pseudo-observation √λ I, which does
    not decay (MesaNet's constant ridge).
    """
    B, T, H, D_k = q.shape
    y = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    log_alpha = torch.zeros(B, T, H, dtype=torch.float64) if g is None else g.double()
    for b in range(B):
        for h in range(H):
            for t in range(T):
                # log γ_i for i = 0..t (i = 0 is the ridge), γ_i = exp(Σ_{j=i+1..t} log α_j), 1-based tokens
                logs = log_alpha[b, : t + 1, h]
                log_gamma = torch.cat([logs.flip(0).cumsum(0).flip(0), torch.zeros(1, dtype=torch.float64)])
                rows = torch.sqrt(torch.exp(log_gamma[1:])).unsqueeze(-1)
                ridge_rows = ridge**0.5 * torch.eye(D_k, dtype=torch.float64)
                design = torch.cat([rows * k[b, : t + 1, h], ridge_rows])
                target = torch.cat([rows * v[b, : t + 1, h], torch.zeros(D_k, v.shape[-1], dtype=torch.float64)])
                S = torch.linalg.lstsq(design, target).solution  # (D_k, D_v), the ridge solution Mᵀ
                y[b, t, h] = S.T @ (scale * q[b, t, h])
    return y


shapes = st.fixed_dictionaries(
    {
        "B": st.integers(1, 2),
        "T": st.integers(1, 24),
        "H": st.integers(1, 3),
        "D_k": st.integers(1, 5),
        "D_v": st.integers(1, 5),
        "decay": st.booleans(),
        "ridge": st.floats(0.3, 3.0),
        "seed": st.integers(0, 2**16),
    }
)
CORNER_CASES = [
    dict(B=1, T=1, H=1, D_k=3, D_v=2, decay=False, ridge=1.0, seed=0),  # T = 1
    dict(B=2, T=13, H=3, D_k=4, D_v=5, decay=True, ridge=0.5, seed=1),  # D_k != D_v, H > 1, decay
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
    q, k, v, g = make_inputs(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], dtype, case["seed"])
    g = g if case["decay"] else None
    o_rec, (S_rec, P_rec) = rls_recurrent(q, k, v, ridge=case["ridge"], g=g, scale=0.9, output_final_state=True)
    o_ex, (S_ex, P_ex) = rls_exact(q, k, v, ridge=case["ridge"], g=g, scale=0.9, output_final_state=True)
    assert o_rec.dtype == o_ex.dtype == dtype
    assert relative_error(o_rec, o_ex) <= TOL[dtype]
    assert relative_error(S_rec, S_ex) <= TOL[dtype]
    assert relative_error(P_rec, P_ex) <= TOL[dtype]


@pytest.mark.parametrize("form", FORMS)
@FAST
@_with_examples
@given(case=shapes)
def test_matches_ridge_argmin(form, case):
    q, k, v, g = make_inputs(case["B"], case["T"], case["H"], case["D_k"], case["D_v"], torch.float64, case["seed"])
    g = g if case["decay"] else None
    o, _ = FORMS[form](q, k, v, ridge=case["ridge"], g=g, scale=0.9)
    assert relative_error(o, ridge_argmin_loop(q, k, v, case["ridge"], g, 0.9)) <= 1e-10


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("decay", [False, True])
@FAST
@given(T=st.integers(2, 20), data=st.data())
def test_split_with_state_equals_whole_run(form, decay, T, data):
    split = data.draw(st.integers(1, T - 1), label="split")
    q, k, v, g = make_inputs(2, T, 2, 3, 4, torch.float64, seed=T)
    g = g if decay else None
    cut = lambda x, s: None if x is None else x[:, s]
    o_whole, (S_whole, P_whole) = FORMS[form](q, k, v, ridge=0.7, g=g, output_final_state=True)
    first, second = slice(None, split), slice(split, None)
    o_first, state = FORMS[form](
        q[:, first], k[:, first], v[:, first], ridge=0.7, g=cut(g, first), output_final_state=True
    )
    o_second, (S_end, P_end) = FORMS[form](
        q[:, second],
        k[:, second],
        v[:, second],
        ridge=0.7,
        g=cut(g, second),
        initial_state=state,
        output_final_state=True,
    )
    assert relative_error(torch.cat([o_first, o_second], dim=1), o_whole) <= 1e-10
    assert relative_error(S_end, S_whole) <= 1e-10
    assert relative_error(P_end, P_whole) <= 1e-10


def test_many_passes_of_data_pin_the_ridge_solution():
    """With many tokens the ridge fades: RLS recovers a linear map v = M k exactly (linear attention would not)."""
    gen = torch.Generator().manual_seed(3)
    M = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 200, 1, 4, generator=gen, dtype=torch.float64)
    v = torch.einsum("v k, b t h k -> b t h v", M, k)
    _, (S, _) = rls_recurrent(k, k, v, ridge=1e-6, output_final_state=True)
    assert relative_error(S[0, 0].T, M) <= 1e-8


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("decay", [False, True])
def test_gradcheck(form, decay):
    """Gradients of o, S_T and P_T with respect to q, k, v (and g), from a fresh state and from a given one."""
    q, k, v, g = make_inputs(1, 4, 2, 3, 2, torch.float64, seed=4)
    _, (S0, P0) = FORMS[form](q, k, v, ridge=0.8, output_final_state=True)
    inputs = [x.requires_grad_() for x in ((q, k, v, g) if decay else (q, k, v))]

    def fn(q, k, v, g=None, state=None):
        o, (S, P) = FORMS[form](q, k, v, ridge=0.8, g=g, initial_state=state, output_final_state=True)
        return o, S, P

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)
    # P_0 is symmetric: perturbed through its symmetric part (a Cholesky factorisation reads one triangle only)
    symmetric = lambda P: (P + P.mT) / 2
    S0, P0 = S0.requires_grad_(), P0.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda *x: fn(*x[:-2], state=(x[-2], symmetric(x[-1]))), [*inputs, S0, P0], fast_mode=True
    )


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_keeps_dtype_and_state_is_fp32(form, dtype):
    q, k, v, _ = make_inputs(1, 5, 1, 3, 2, dtype, seed=5)
    o, (S, P) = FORMS[form](q, k, v, output_final_state=True)
    assert o.dtype == dtype and S.dtype == P.dtype == torch.float32


@pytest.mark.parametrize("form", FORMS)
def test_bad_lam_and_state(form):
    q, k, v, _ = make_inputs(1, 5, 1, 3, 2, torch.float64, seed=6)
    for ridge in (0.0, -1.0):
        with pytest.raises(ValueError, match="ridge"):
            FORMS[form](q, k, v, ridge=ridge)
    with pytest.raises(TypeError, match="initial_state"):
        FORMS[form](q, k, v, initial_state=torch.zeros(1, 1, 3, 2, dtype=torch.float64))
    S0, P0 = torch.zeros(1, 1, 3, 2, dtype=torch.float64), torch.eye(2, dtype=torch.float64).expand(1, 1, 2, 2)
    with pytest.raises(ValueError, match=r"initial_state\[1\] \(P\)"):
        FORMS[form](q, k, v, initial_state=(S0, P0))


# ---- the forms as they were before release 0.2 (an einsum loop; b_t formed for every token), kept as references:
# the faster forms of today must compute the same function, with the same gradients


def einsum_recurrent(q, k, v, ridge, scale):
    """The ungated Sherman–Morrison loop of release 0.1, one einsum per product (fp64, no gates)."""
    B, T, H, D_k = q.shape
    q, k, v = (x.transpose(1, 2) for x in (q * scale, k, v))
    P = torch.eye(D_k, dtype=q.dtype).expand(B, H, D_k, D_k) / ridge
    S = q.new_zeros(B, H, D_k, v.shape[-1])
    outputs = []
    for t in range(T):
        k_t = k[:, :, t]
        Pk = torch.einsum("b h i j, b h j -> b h i", P, k_t)
        gain = Pk / (1.0 + (k_t * Pk).sum(-1, keepdim=True))
        P = P - torch.einsum("b h i, b h j -> b h i j", gain, Pk)
        error = v[:, :, t] - torch.einsum("b h k v, b h k -> b h v", S, k_t)
        S = S + torch.einsum("b h k, b h v -> b h k v", gain, error)
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    return torch.stack(outputs, dim=1), S, P


def full_b_exact(q, k, v, ridge, g, scale):
    """The exact form of release 0.1: the T×T weights, ``A_t`` and ``b_t`` ``(B, H, T, D_k, D_v)`` for every t."""
    from ttr_edu._internal.contract import decay_matrix

    q, k, v = (x.transpose(1, 2) for x in (q * scale, k, v))
    B, H, T, D_k = q.shape
    if g is None:
        weights = torch.ones(T, T, dtype=q.dtype).tril().expand(B, H, T, T)
    else:
        weights = decay_matrix(g.transpose(1, 2))
    A = torch.einsum("b h t i, b h i j l -> b h t j l", weights, k.unsqueeze(-1) * k.unsqueeze(-2))
    A = A + ridge * torch.eye(D_k, dtype=q.dtype)
    b = (weights @ (k.unsqueeze(-1) * v.unsqueeze(-2)).flatten(-2)).unflatten(-1, (D_k, v.shape[-1]))
    L = torch.linalg.cholesky(A)
    o = (b.mT @ torch.cholesky_solve(q.unsqueeze(-1), L)).squeeze(-1).transpose(1, 2)
    return o, torch.cholesky_solve(b[:, :, -1], L[:, :, -1]), torch.cholesky_inverse(L[:, :, -1])


def _grads(outputs, inputs):
    """The gradients of a fixed random projection of ``outputs`` with respect to ``inputs``."""
    gen = torch.Generator().manual_seed(11)
    loss = sum((y * torch.randn(y.shape, generator=gen, dtype=y.dtype)).sum() for y in outputs)
    return torch.autograd.grad(loss, inputs, retain_graph=True)


@pytest.mark.parametrize("decay", [False, True, "reset"])
def test_forms_equal_the_previous_release_with_their_gradients(decay):
    """fp64: today's forms (batched Sherman–Morrison; the exact form read as linear attention) and the forms of
    release 0.1 agree to 1e-12 in o, S_T, P_T and in the gradients with respect to q, k, v and g."""
    q, k, v, g = make_inputs(2, 23, 3, 4, 5, torch.float64, seed=12, max_decay=0.5)
    if decay == "reset":
        g[1, 9, 2] = float("-inf")
    inputs = [x.clone().requires_grad_() for x in ((q, k, v) if decay is False else (q, k, v, g))]
    g_in = None if decay is False else inputs[3]
    old = full_b_exact(*inputs[:3], 0.6, g_in, 0.9)
    o, (S, P) = rls_exact(*inputs[:3], ridge=0.6, g=g_in, scale=0.9, output_final_state=True)
    for new, want in zip((o, S, P), old):
        assert relative_error(new, want) <= 1e-12
    for new, want in zip(_grads((o, S), inputs), _grads(old[:2], inputs)):
        assert relative_error(new, want) <= 1e-12
    if decay is False:
        old = einsum_recurrent(*inputs, 0.6, 0.9)
        o, (S, P) = rls_recurrent(*inputs, ridge=0.6, scale=0.9, output_final_state=True)
        for new, want in zip((o, S, P), old):
            assert relative_error(new, want) <= 1e-12
        for new, want in zip(_grads((o, S, P), inputs), _grads(old, inputs)):
            assert relative_error(new, want) <= 1e-12


@pytest.mark.parametrize("decay", [False, True])
def test_forms_equal_the_regression_framework_with_their_gradients(decay):
    """The ops equal the generic path that explains them (ttr_edu.regression), in fp64 to 1e-12, gradients too:
    RecursiveLeastSquares and ExactSolve without gates, ExactSolve under Gates (Mesa's constant ridge) with them."""
    from ttr_edu.regression import ExactSolve, Gates, Linear, RecursiveLeastSquares, TestTimeRegression, Uniform

    q, k, v, g = make_inputs(2, 29, 2, 4, 3, torch.float64, seed=13, max_decay=0.5)
    inputs = [x.clone().requires_grad_() for x in ((q, k, v) if decay is False else (q, k, v, g))]
    kw = {} if decay is False else {"g": inputs[3]}
    frameworks = [TestTimeRegression(Gates() if decay else Uniform(), Linear(), ExactSolve(0.6))]
    if decay is False:
        frameworks.append(TestTimeRegression(Uniform(), Linear(), RecursiveLeastSquares(0.6)))
    for form in FORMS.values():
        o, (S, _) = form(*inputs[:3], ridge=0.6, scale=0.9, output_final_state=True, **kw)
        for framework in frameworks:
            want = framework(*inputs[:3], scale=0.9, output_final_state=True, **kw)
            for new, old in zip((o, S), want):
                assert relative_error(new, old) <= 1e-12
            for new, old in zip(_grads((o, S), inputs), _grads(want, inputs)):
                assert relative_error(new, old) <= 1e-12


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("decay", [False, True])
def test_ill_conditioning_warning_points_at_the_caller(form, decay):
    """The RuntimeWarning of an ill-conditioned ridge system names the user's line, through both wrappers of the op
    (renamed_arguments, guarded), with the new and with the old name of the ridge."""
    q, _, v, _ = make_inputs(1, 16, 1, 4, 2, torch.float32, seed=7)
    k = torch.ones(1, 16, 1, 4) * torch.linspace(0.5, 2, 16)[None, :, None, None]  # collinear keys
    g = torch.full((1, 16, 1), -0.05) if decay else None
    with pytest.warns(RuntimeWarning, match="^ridge: the ridge system") as record:
        FORMS[form](q, k, v, ridge=1e-4, g=g)
    assert {w.filename for w in record if issubclass(w.category, RuntimeWarning)} == {__file__}
    with pytest.warns(RuntimeWarning) as record:
        FORMS[form](q, k, v, lam=1e-4, g=g)
    assert {w.filename for w in record if issubclass(w.category, RuntimeWarning)} == {__file__}


# ---- the chunkwise form (Woodbury): no gates, any chunk size, the same function as Sherman–Morrison


chunk_cases = st.fixed_dictionaries(
    {
        "B": st.integers(1, 2),
        "T": st.integers(1, 40),
        "H": st.integers(1, 3),
        "D_k": st.integers(1, 6),
        "D_v": st.integers(1, 5),
        "chunk_size": st.integers(1, 48),
        "ridge": st.floats(0.3, 3.0),
        "from_state": st.booleans(),
        "seed": st.integers(0, 2**16),
    }
)


def _state(B, H, D_k, D_v, dtype, seed):
    """A state (S_0, P_0) with P_0 symmetric positive definite and far from a multiple of I."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(B, H, D_k, D_k, generator=gen, dtype=torch.float64)
    P0 = X @ X.mT / D_k + 0.5 * torch.eye(D_k, dtype=torch.float64)
    return torch.randn(B, H, D_k, D_v, generator=gen, dtype=torch.float64).to(dtype), P0.to(dtype)


def fp32_chunk_tolerance(k, ridge, P0, chunk_size):
    """The fp32 chunk form's relative error bound, from how rounding errors grow in it.

    Each chunk factorises (Cholesky) and solves with the information matrix A_t = P_t⁻¹ (D_k × D_k) after summing up
    to C outer products into it. A backward-stable Cholesky solve errs by at most γ_3n · κ(A) relative to the
    solution, with γ_m ≈ m·u, u = 2⁻²⁴ fp32's unit roundoff and n = D_k (Higham, Accuracy and Stability of Numerical
    Algorithms, 2nd ed., Thm 10.4 with §7.1); the C-term sums add γ_C. The state carries each chunk's error into the
    next, so the errors add up over the ceil(T / C) chunks. κ(A_t) ≤ (λ_max(A_0) + Σ_i ‖k_i‖²) / λ_min(A_0) for every
    t, since A_t = A_0 + Σ_{i≤t} k_i k_iᵀ (A_0 = ridge·I, or P_0⁻¹ from a state). So the bound is
    3·u·κ·(D_k + C)·ceil(T / C). Over 400 random cases of this test's ranges the measured error stayed below 0.42 of
    u·κ·(D_k + C)·ceil(T / C), so the factor 3 (γ_3n's) leaves room; a wrong chunk form errs by 10⁻¹ or more.
    """
    B, T, H, D_k = k.shape
    A0 = torch.linalg.inv(P0.double()) if P0 is not None else ridge * torch.eye(D_k, dtype=torch.float64)
    eigenvalues = torch.linalg.eigvalsh(A0).expand(B, H, D_k)
    kappa = (eigenvalues[..., -1] + k.double().square().sum((1, 3))) / eigenvalues[..., 0]
    u = torch.finfo(torch.float32).eps / 2
    return 3 * u * kappa.max().item() * (D_k + min(chunk_size, T)) * -(-T // chunk_size)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@FAST
@example(dict(B=1, T=1, H=1, D_k=3, D_v=2, chunk_size=4, ridge=1.0, from_state=False, seed=0))  # T = 1 < C
@example(dict(B=2, T=37, H=2, D_k=4, D_v=5, chunk_size=8, ridge=0.5, from_state=True, seed=1))  # padded last chunk
@given(case=chunk_cases)
def test_chunk_form_equals_sherman_morrison(dtype, case):
    """o, S_T and P_T of rls_chunk equal rls_recurrent's in fp64 to 1e-12 at every chunk size; in fp32 the chunk
    form is within the bound of :func:`fp32_chunk_tolerance` of that fp64 answer (both fp32 forms round, so they are
    compared with the truth)."""
    B, T, H, D_k, D_v = (case[n] for n in ("B", "T", "H", "D_k", "D_v"))
    q, k, v, _ = make_inputs(B, T, H, D_k, D_v, dtype, case["seed"])
    state = _state(B, H, D_k, D_v, dtype, case["seed"]) if case["from_state"] else None
    kw = dict(ridge=case["ridge"], scale=0.9, output_final_state=True)
    as64 = None if state is None else tuple(x.double() for x in state)
    o_rec, (S_rec, P_rec) = rls_recurrent(q.double(), k.double(), v.double(), initial_state=as64, **kw)
    o_ch, (S_ch, P_ch) = rls_chunk(q, k, v, chunk_size=case["chunk_size"], initial_state=state, **kw)
    if dtype == torch.float64:
        tol = 1e-12
    else:
        tol = fp32_chunk_tolerance(k, case["ridge"], None if state is None else state[1], case["chunk_size"])
        assert tol < 2e-2  # a bound this loose would test nothing: keep the cases well conditioned
    assert o_ch.dtype == dtype and o_ch.shape == o_rec.shape
    for new, want in zip((o_ch, S_ch, P_ch), (o_rec, S_rec, P_rec)):
        assert relative_error(new, want) <= tol


def test_chunk_form_matches_ridge_argmin():
    """Against the regression's definition itself (a least-squares solve per token), not only the other form."""
    q, k, v, _ = make_inputs(2, 19, 2, 4, 3, torch.float64, seed=21)
    o, _ = rls_chunk(q, k, v, ridge=0.7, scale=0.9, chunk_size=5)
    assert relative_error(o, ridge_argmin_loop(q, k, v, 0.7, None, 0.9)) <= 1e-10


def test_chunk_form_gradients_equal_sherman_morrisons():
    """fp64: the gradients of o, S_T, P_T with respect to q, k, v and the state equal those of rls_recurrent to 1e-12,
    and pass gradcheck (a Cholesky factorisation per chunk is differentiated, not a token loop)."""
    q, k, v, _ = make_inputs(2, 23, 2, 4, 3, torch.float64, seed=22)
    S0, P0 = _state(2, 2, 4, 3, torch.float64, seed=22)
    inputs = [x.clone().requires_grad_() for x in (q, k, v, S0, P0)]

    def run(form, *x, **kw):
        o, (S, P) = form(*x[:3], ridge=0.6, initial_state=(x[3], (x[4] + x[4].mT) / 2), output_final_state=True, **kw)
        return o, S, P

    new = run(rls_chunk, *inputs, chunk_size=6)
    for got, want in zip(_grads(new, inputs), _grads(run(rls_recurrent, *inputs), inputs)):
        assert relative_error(got, want) <= 1e-12
    q, k, v, _ = make_inputs(1, 7, 1, 3, 2, torch.float64, seed=23)  # T = 7 in chunks of 3: a padded last chunk
    small = [x.requires_grad_() for x in (q, k, v, *_state(1, 1, 3, 2, torch.float64, seed=23))]
    assert torch.autograd.gradcheck(lambda *x: run(rls_chunk, *x, chunk_size=3), small, fast_mode=True)


def test_chunk_form_refuses_a_gate_and_a_bad_chunk_size():
    q, k, v, g = make_inputs(1, 5, 1, 3, 2, torch.float64, seed=6)
    with pytest.raises(TypeError, match="g"):
        rls_chunk(q, k, v, g=g)
    for bad in (0, -2, 2.5):
        with pytest.raises((TypeError, ValueError), match="^chunk_size"):
            rls_chunk(q, k, v, chunk_size=bad)
