"""Longhorn, DeltaProduct, TTT and Titans: every form equals a per-token loop of its paper's equation.

The loops below are written independently of the ops: one (batch, head) at a time, with the memory's gradient taken
by ``torch.func.grad`` of the loss (the ops write it out by hand), and Longhorn's step found by solving its proximal
objective as a linear system (the ops use the closed form).
"""

import pytest
import torch
from torch.func import grad

from tests.helpers import relative_error
from ttr_edu.ops import (
    TitansState,
    delta_product_chunk,
    delta_product_recurrent,
    delta_rule_recurrent,
    l2_norm,
    longhorn_chunk,
    longhorn_diagonal_recurrent,
    longhorn_recurrent,
    titans_recurrent,
    ttt_linear_chunk,
    ttt_linear_recurrent,
    ttt_mlp_chunk,
    ttt_mlp_recurrent,
)

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
DTYPES = [torch.float64, torch.float32]


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def qkv(B=2, T=11, H=2, D_k=4, D_v=3, seed=0, n=1):
    q = rand(B, T, H, D_k, seed=seed)
    k = l2_norm(rand(B, T * n, H, D_k, seed=seed + 1))
    v = rand(B, T * n, H, D_v, seed=seed + 2)
    return q, k, v


def close(a, b, dtype):
    err = relative_error(a.double(), b.double())
    assert err <= TOL[dtype], f"relative error {err:.3g} > {TOL[dtype]}"


def cast(dtype, *xs):
    return [x.to(dtype) for x in xs]


def rounded(dtype, *xs):
    """The inputs as the op sees them in ``dtype``, back in fp64: the reference then measures the op's rounding only."""
    return [x.to(dtype).double() for x in xs]


# ---- the memories, written from the papers ----------------------------------------------------------------------


def f_mem(params, x, layer_norm=False, residual=False):
    """The memory's output for one vector: linear ``Sᵀx`` or ``W2ᵀ GELU(W1ᵀx)``, optionally ``x + LN(·)``."""
    z = x @ params[0] if len(params) == 1 else torch.nn.functional.gelu(x @ params[0]) @ params[1]
    if layer_norm:
        z = torch.nn.functional.layer_norm(z, z.shape, eps=1e-6)
    return x + z if residual else z


def loss(params, k, v, **wrap):
    return 0.5 * (f_mem(params, k, **wrap) - v).pow(2).sum()


# ---- Longhorn --------------------------------------------------------------------------------------------------


def longhorn_loop(q, k, v, beta, scale):
    """``S_t = argmin ‖S − S_{t−1}‖² + Σ_j β_j (Sᵀk − v)_j²``, solved per value column as a linear system."""
    B, T, H, D_k = q.shape
    D_v = v.shape[-1]
    beta = beta if beta.dim() == 4 else beta[..., None].expand(B, T, H, D_v)
    o = torch.zeros(B, T, H, D_v, dtype=torch.float64)
    eye = torch.eye(D_k, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(D_k, D_v, dtype=torch.float64)
            for t in range(T):
                kt = k[b, t, h].double()
                cols = []
                for j in range(D_v):  # (I + β_j k kᵀ) s_j = s_j^{old} + β_j v_j k
                    bj = beta[b, t, h, j].double()
                    cols.append(torch.linalg.solve(eye + bj * torch.outer(kt, kt), S[:, j] + bj * v[b, t, h, j] * kt))
                S = torch.stack(cols, 1)
                o[b, t, h] = S.T @ (scale * q[b, t, h].double())
    return o


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_longhorn_equals_its_proximal_objective(dtype, per_channel):
    q, k, v = qkv()
    k = 2 * k  # ‖k‖² = 4: the explicit step would be unstable at β > 0.5
    beta = 5 * rand(*v.shape, seed=9).abs() if per_channel else 5 * rand(*v.shape[:3], seed=9).abs()
    q, k, v, beta = rounded(dtype, q, k, v, beta)
    ref = longhorn_loop(q, k, v, beta, 0.5)
    for op in (longhorn_recurrent, longhorn_chunk):
        kw = {"chunk_size": 4} if op is longhorn_chunk else {}
        o, S = op(*cast(dtype, q, k, v, beta), scale=0.5, output_final_state=True, **kw)
        close(o, ref, dtype)
        assert S.shape == (2, 2, 4, 3)


def test_longhorn_stays_bounded_where_the_delta_rule_blows_up():
    q, k, v = qkv(T=40)
    beta = torch.full(v.shape[:3], 10.0, dtype=torch.float64)  # β‖k‖² = 10: outside the delta rule's [0, 2]
    o, _ = longhorn_recurrent(q, k, v, beta)
    with pytest.warns(RuntimeWarning):
        o_delta, _ = delta_rule_recurrent(q, k, v, beta)
    assert o.abs().max() < 10 and o_delta.abs().max() > 1e6


def test_longhorn_diagonal_form_is_the_authors_scan_in_their_layout():
    """The authors' scan restated in their layout (Cranial-XIX/longhorn_cuda, ``selective_scan_online7_ref``):
    ``u`` ``(b, d, l)`` value channels, ``q, k`` ``(b, n, l)`` shared by all channels, ``β = sigmoid(dt + bias)``,
    ``ε = β / (1 + β Σ_n k_n²)``, state ``X`` ``(b, d, n)``: ``X = (1 − ε k²) X + ε u k``, ``y = X q``. Ours with
    one head, ``v = u``, ``β`` per value channel and ``scale=1.0`` gives the same outputs and state (``X = Sᵀ``); the
    default scale does not."""
    gen = torch.Generator().manual_seed(0)
    b, d, n, L = 2, 5, 4, 7
    u, dt = (torch.randn(b, d, L, generator=gen, dtype=torch.float64) for _ in range(2))
    q, k = (torch.randn(b, n, L, generator=gen, dtype=torch.float64) for _ in range(2))
    bias = torch.randn(d, generator=gen, dtype=torch.float64)
    beta = torch.sigmoid(dt + bias[:, None])
    eps = beta / (1 + beta * k.pow(2).sum(1, keepdim=True))  # (b, d, l)
    X, ys = torch.zeros(b, d, n, dtype=torch.float64), []
    for t in range(L):
        k_t = k[:, None, :, t]  # (b, 1, n)
        X = (1 - eps[:, :, t, None] * k_t**2) * X + (eps[:, :, t] * u[:, :, t])[..., None] * k_t
        ys.append(torch.einsum("bdn,bn->bd", X, q[:, :, t]))
    y = torch.stack(ys, -1)
    ours = lambda x: x.permute(0, 2, 1)[:, :, None, :]  # (b, ·, l) -> (B, T, H = 1, ·)
    o, S = longhorn_diagonal_recurrent(ours(q), ours(k), ours(u), ours(beta), scale=1.0, output_final_state=True)
    assert relative_error(o[:, :, 0].permute(0, 2, 1), y) < 1e-14
    assert relative_error(S[:, 0].mT, X) < 1e-14
    o_default, _ = longhorn_diagonal_recurrent(ours(q), ours(k), ours(u), ours(beta))
    assert relative_error(o_default[:, :, 0].permute(0, 2, 1), y) > 0.1


def test_longhorn_diagonal_form_matches_its_elementwise_recurrence_and_differs_from_the_exact_one():
    q, k, v = qkv()
    beta = rand(*v.shape[:3], seed=3).abs()
    B, T, H, D_k = q.shape
    ref = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(D_k, v.shape[-1], dtype=torch.float64)
            for t in range(T):
                kt, bt = k[b, t, h], beta[b, t, h]
                eps = bt / (1 + bt * kt @ kt)
                for i in range(D_k):
                    for j in range(v.shape[-1]):
                        S[i, j] = (1 - eps * kt[i] ** 2) * S[i, j] + eps * kt[i] * v[b, t, h, j]
                ref[b, t, h] = S.T @ (D_k**-0.5 * q[b, t, h])
    for dtype in DTYPES:
        o, _ = longhorn_diagonal_recurrent(*cast(dtype, q, k, v, beta))
        close(o, ref, dtype)
    assert relative_error(longhorn_recurrent(q, k, v, beta)[0], ref) > 1e-2  # an approximation, not the same rule


# ---- DeltaProduct ----------------------------------------------------------------------------------------------


def delta_product_loop(q, k, v, beta, n, g, scale):
    """Siems et al. 2025: per token, ``S ← exp(g) S``, then ``S ← (I − β k kᵀ) S + β k vᵀ`` for each of n steps."""
    B, T, H, D_k = q.shape
    o = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(D_k, v.shape[-1], dtype=torch.float64)
            for t in range(T):
                if g is not None:
                    S = g[b, t, h].double().exp() * S
                for j in range(n):
                    kk, vv, bb = k[b, t * n + j, h].double(), v[b, t * n + j, h].double(), beta[b, t * n + j, h]
                    S = (torch.eye(D_k, dtype=torch.float64) - bb * torch.outer(kk, kk)) @ S + bb * torch.outer(kk, vv)
                o[b, t, h] = S.T @ (scale * q[b, t, h].double())
    return o


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_delta_product_equals_householder_products(dtype, gated, n):
    q, k, v = qkv(n=n)
    beta = torch.rand(v.shape[:3], generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 1.9
    g = -rand(*q.shape[:3], seed=5).abs() if gated else None
    if gated:
        g[0, 3, 0] = -float("inf")  # a reset is exact
    q, k, v, beta = rounded(dtype, q, k, v, beta)
    g = None if g is None else g.to(dtype).double()
    ref = delta_product_loop(q, k, v, beta, n, g, 0.7)
    gd = None if g is None else g.to(dtype)
    for op, kw in ((delta_product_recurrent, {}), (delta_product_chunk, {"chunk_size": 5})):
        o, S = op(*cast(dtype, q, k, v, beta), n, g=gd, scale=0.7, output_final_state=True, **kw)
        close(o, ref, dtype)


def test_delta_product_with_one_step_is_the_delta_rule():
    q, k, v = qkv()
    beta = torch.rand(v.shape[:3], generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    o1, S1 = delta_product_chunk(q, k, v, beta, 1, output_final_state=True)
    o2, S2 = delta_rule_recurrent(q, k, v, beta, output_final_state=True)
    assert relative_error(o1, o2) < 1e-12 and relative_error(S1, S2) < 1e-12


# ---- TTT -------------------------------------------------------------------------------------------------------


def ttt_loop(q, k, v, beta, b_size, params0, scale, **wrap):
    """Sun et al. 2024 §2.4: ``W_t = W_s − Σ_{s<i≤t} η_i ∇ℓ(W_s; x_i)``, gradients by autodiff;
    ``o_t = f_{W_t}(q_t)``."""
    B, T, H, _ = q.shape
    o = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            W = [p[b, h].double() for p in params0]
            for t in range(T):
                if t % b_size == 0:
                    W_s = list(W)
                G = grad(loss)(W_s, k[b, t, h].double(), v[b, t, h].double(), **wrap)
                W = [w - beta[b, t, h].double() * gw for w, gw in zip(W, G)]
                o[b, t, h] = f_mem(W, scale * q[b, t, h].double(), **wrap)
    return o


def mlp_weights(B=2, H=2, D_k=4, D_h=6, D_v=3, seed=7):
    return (0.5 * rand(B, H, D_k, D_h, seed=seed), 0.5 * rand(B, H, D_h, D_v, seed=seed + 1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_size", [1, 4, 16])
@pytest.mark.parametrize("wrap", [{}, {"layer_norm": True, "residual": True}, {"layer_norm": True}])
def test_ttt_linear_equals_mini_batch_gd(dtype, b_size, wrap):
    D_k, D_v = (8, 8) if wrap else (4, 3)  # a LayerNorm over 3 channels is ill-conditioned in fp32
    q, k, v = qkv(D_k=D_k, D_v=D_v)
    beta = 0.5 * torch.rand(v.shape[:3], generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    S0 = 0.3 * rand(2, 2, D_k, D_v, seed=11)
    q, k, v, beta, S0 = rounded(dtype, q, k, v, beta, S0)
    ref = ttt_loop(q, k, v, beta, b_size, (S0,), 0.5, **wrap)
    for op in (ttt_linear_recurrent, ttt_linear_chunk):
        o, S = op(
            *cast(dtype, q, k, v, beta), b_size, scale=0.5, initial_state=S0.to(dtype), output_final_state=True, **wrap
        )
        close(o, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_size", [1, 5])
@pytest.mark.parametrize("wrap", [{}, {"layer_norm": True}])
def test_ttt_mlp_equals_mini_batch_gd(dtype, b_size, wrap):
    D_v = 8 if wrap else 3  # a LayerNorm over 3 channels is ill-conditioned in fp32
    q, k, v = qkv(D_v=D_v)
    beta = 0.5 * torch.rand(v.shape[:3], generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    W0 = mlp_weights(D_v=D_v)
    q, k, v, beta, *W0 = rounded(dtype, q, k, v, beta, *W0)
    ref = ttt_loop(q, k, v, beta, b_size, W0, 0.5, **wrap)
    for op in (ttt_mlp_recurrent, ttt_mlp_chunk):
        o, (W1, W2) = op(
            *cast(dtype, q, k, v, beta),
            b_size,
            scale=0.5,
            initial_state=cast(dtype, *W0),
            output_final_state=True,
            **wrap,
        )
        close(o, ref, dtype)


def test_ttt_with_mini_batch_one_is_deltanet():
    q, k, v = qkv()
    beta = torch.rand(v.shape[:3], generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    o_ttt, S_ttt = ttt_linear_chunk(q, k, v, beta, 1, output_final_state=True)
    o_dn, S_dn = delta_rule_recurrent(q, k, v, beta, output_final_state=True)
    assert relative_error(o_ttt, o_dn) < 1e-12 and relative_error(S_ttt, S_dn) < 1e-12
    assert relative_error(ttt_linear_chunk(q, k, v, beta, 4)[0], o_dn) > 1e-3  # larger mini-batches differ


# ---- Titans ----------------------------------------------------------------------------------------------------


def titans_loop(q, k, v, beta, eta, alpha, params0, scale):
    """Behrouz et al. 2024 eqs. 13–14: ``U = η U − θ ∇ℓ(M)``, ``M = (1 − α) M + U``, gradients by autodiff."""
    B, T, H, _ = q.shape
    o = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            M = [p[b, h].double() for p in params0]
            U = [torch.zeros_like(m) for m in M]
            for t in range(T):
                G = grad(loss)(M, k[b, t, h].double(), v[b, t, h].double())
                U = [eta[b, t, h] * u - beta[b, t, h] * gm for u, gm in zip(U, G)]
                M = [(1 - alpha[b, t, h]) * m + u for m, u in zip(M, U)]
                o[b, t, h] = f_mem(M, scale * q[b, t, h].double())
    return o


def gates(shape, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(shape, generator=gen, dtype=torch.float64) * s for s in (0.8, 0.9, 0.2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("memory", ["linear", "mlp"])
def test_titans_equals_momentum_with_decay(dtype, memory):
    q, k, v = qkv()
    beta, eta, alpha = gates(v.shape[:3], 5)
    params = (0.3 * rand(2, 2, 4, 3, seed=11),) if memory == "linear" else mlp_weights()
    q, k, v, beta, eta, alpha, *params = rounded(dtype, q, k, v, beta, eta, alpha, *params)
    ref = titans_loop(q, k, v, beta, eta, alpha, params, 0.5)
    init = params[0] if memory == "linear" else params
    init = init.to(dtype) if memory == "linear" else tuple(cast(dtype, *init))
    o, state = titans_recurrent(
        *cast(dtype, q, k, v, beta, eta, alpha), scale=0.5, initial_state=init, output_final_state=True
    )
    close(o, ref, dtype)
    # Carrying the state across a split equals one call.
    o1, st = titans_recurrent(
        *(x[:, :5].to(dtype) for x in (q, k, v, beta, eta, alpha)),
        scale=0.5,
        initial_state=init,
        output_final_state=True,
    )
    o2, _ = titans_recurrent(*(x[:, 5:].to(dtype) for x in (q, k, v, beta, eta, alpha)), scale=0.5, initial_state=st)
    close(torch.cat([o1, o2], 1), ref, dtype)
    assert isinstance(state, TitansState)


def test_titans_linear_without_momentum_or_decay_is_deltanet():
    q, k, v = qkv()
    beta = torch.rand(v.shape[:3], generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    zero = torch.zeros_like(beta)
    o_t, st = titans_recurrent(q, k, v, beta, zero, zero, output_final_state=True)
    o_d, S_d = delta_rule_recurrent(q, k, v, beta, output_final_state=True)
    assert relative_error(o_t, o_d) < 1e-12 and relative_error(st.memory, S_d) < 1e-12


# ---- gradients -------------------------------------------------------------------------------------------------


def small(seed=0, n=1, D_v=2):
    q, k, v = qkv(B=1, T=5, H=1, D_k=3, D_v=D_v, seed=seed, n=n)
    return [x.clone().requires_grad_() for x in (q, k, v)]


def test_gradcheck_longhorn_and_delta_product():
    q, k, v = small()
    beta = (torch.rand(1, 5, 1, dtype=torch.float64) + 0.1).requires_grad_()
    S0 = rand(1, 1, 3, 2, seed=3).requires_grad_()
    for op in (longhorn_recurrent, longhorn_chunk, longhorn_diagonal_recurrent):
        kw = {"chunk_size": 2} if op is longhorn_chunk else {}
        assert torch.autograd.gradcheck(
            lambda *a: op(*a[:4], initial_state=a[4], output_final_state=True, **kw), (q, k, v, beta, S0)
        )
    q, k, v = small(n=2)
    beta = (torch.rand(1, 10, 1, dtype=torch.float64) + 0.1).requires_grad_()
    g = (-torch.rand(1, 5, 1, dtype=torch.float64)).requires_grad_()
    for op, kw in ((delta_product_recurrent, {}), (delta_product_chunk, {"chunk_size": 3})):
        assert torch.autograd.gradcheck(
            lambda *a: op(*a[:4], 2, g=a[4], initial_state=a[5], output_final_state=True, **kw),
            (q, k, v, beta, g, S0),
        )


def test_gradcheck_ttt_and_titans():
    q, k, v = small(D_v=3)
    beta = (0.5 * torch.rand(1, 5, 1, dtype=torch.float64)).requires_grad_()
    S0 = (0.3 * rand(1, 1, 3, 3, seed=3)).requires_grad_()
    W1, W2 = (w.clone().requires_grad_() for w in mlp_weights(1, 1, 3, 4, 3))
    for op in (ttt_linear_recurrent, ttt_linear_chunk):
        assert torch.autograd.gradcheck(
            lambda *a: op(*a[:4], 2, initial_state=a[4], output_final_state=True, layer_norm=True, residual=True),
            (q, k, v, beta, S0),
        )
    for op in (ttt_mlp_recurrent, ttt_mlp_chunk):
        assert torch.autograd.gradcheck(
            lambda *a: (lambda o, W: (o, *W))(*op(*a[:4], 2, initial_state=a[4:], output_final_state=True)),
            (q, k, v, beta, W1, W2),
        )
    beta, eta, alpha = (x.requires_grad_() for x in gates((1, 5, 1), 2))
    assert torch.autograd.gradcheck(
        lambda *a: (lambda o, st: (o, *st.memory, *st.momentum))(
            *titans_recurrent(*a[:6], initial_state=a[6:], output_final_state=True)
        ),
        (q, k, v, beta, eta, alpha, W1, W2),
    )


# ---- bad input -------------------------------------------------------------------------------------------------


def test_bad_inputs_are_refused_by_name():
    q, k, v = qkv()
    beta = torch.rand(v.shape[:3], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"beta: expected a weight .* in \[0, inf\)"):
        longhorn_recurrent(q, k, v, -beta)
    with pytest.raises(ValueError, match="beta"):
        longhorn_chunk(q, k, v, beta[:, :3])
    with pytest.raises(ValueError, match=r"k: expected shape \(B, T·n_h, H, D_k\)"):
        delta_product_recurrent(q, k, v, beta, 2)
    with pytest.raises(TypeError, match="num_householder"):
        delta_product_chunk(q, k, v, beta, 2.0)
    with pytest.raises(ValueError, match="initial_state: the MLP memory needs its starting weights"):
        ttt_mlp_chunk(q, k, v, beta)
    with pytest.raises(ValueError, match="residual: f\\(x\\) = x \\+ m\\(x\\) needs D_k == D_v"):
        ttt_linear_chunk(q, k, v, beta, residual=True)
    with pytest.raises(TypeError, match="layer_norm: expected True or False"):
        ttt_linear_recurrent(q, k, v, beta, layer_norm="false")
    with pytest.raises(ValueError, match="mini_batch_size"):
        ttt_linear_chunk(q, k, v, beta, 0)
    with pytest.raises(ValueError, match=r"initial_state\[1\] \(W2\)"):
        ttt_mlp_recurrent(q, k, v, beta, initial_state=(rand(2, 2, 4, 5), rand(2, 2, 6, 3)))
    with pytest.raises(ValueError, match="eta: expected a momentum in \\[0, 1\\]"):
        titans_recurrent(q, k, v, beta, beta + 1, beta)
    with pytest.raises(ValueError, match="alpha"):
        titans_recurrent(q, k, v, beta, beta, beta * float("nan"))
    with pytest.raises(TypeError, match="q: expected a torch.Tensor"):
        titans_recurrent(None, k, v, beta, beta, beta)
    with pytest.raises(ValueError, match="T = 0"):
        ttt_linear_chunk(q[:, :0], k[:, :0], v[:, :0], beta[:, :0])
