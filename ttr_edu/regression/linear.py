"""The linear class ``m(x) = Sᵀx`` under each optimiser, written from the objective.

Tensors are heads-first: ``q, k`` ``(B, H, T, D_k)``, ``v`` ``(B, H, T, D_v)``, ``g``, ``beta`` ``(B, H, T)``; ``q`` is
already scaled. Each solver returns ``(o, S_T)`` with ``o`` ``(B, H, T, D_v)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ttr_edu._internal.contract import decay_matrix
from ttr_edu._internal.validation import (
    Dims,
    check_positive_int,
    check_same_device,
    check_tensor,
    finite_checks_enabled,
    guarded,
)

from .optimizers import (
    ConjugateGradient,
    ExactSolve,
    GradientStep,
    ImplicitStep,
    MiniBatchGD,
    MultiPassSGD,
    OnlineSGD,
    RecursiveLeastSquares,
    StepsPerToken,
)
from .weights import _decay_from_start, decayed_cumsum, regression_weights

__all__ = [
    "conjugate_gradient",
    "LINEAR_SOLVERS",
]


def _weighted_readout(x, k, v, g, chunk_size: int = 64):
    """``o_t = Σ_{i≤t} γ_i^{(t)} (x_t·k_i) v_i`` for every ``t``, and ``M_T = Σ_i γ_i^{(T)} k_i v_iᵀ``.

    The weighted sum over stored pairs that every linear-class readout needs. It runs in chunks of ``C`` tokens:
    inside a chunk with the dense weight block ``Γ``, across chunks through the weighted moment ``M`` at each chunk
    boundary, so nothing of size ``T × T`` is formed. Shapes are heads-first: ``x, k`` ``(B, H, T, D_k)``, ``v``
    ``(B, H, T, D_v)``, ``g`` ``(B, H, T)`` or ``None`` (uniform weights: no exponentials at all).
    """
    B, H, T, _ = k.shape
    C = min(chunk_size, T)
    pad = (-T) % C
    if pad:  # zero keys write nothing and a zero log decay keeps the sum: the padding is inert
        x, k, v = (torch.nn.functional.pad(y, (0, 0, 0, pad)) for y in (x, k, v))
        g = None if g is None else torch.nn.functional.pad(g, (0, pad))
    N = (T + pad) // C
    xc, kc, vc = (y.reshape(B, H, N, C, -1) for y in (x, k, v))
    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    if g is None:
        inside = (xc @ kc.transpose(-1, -2)).masked_fill(~causal, 0.0) @ vc  # (B, H, N, C, D_v)
        moments = (kc.transpose(-1, -2) @ vc).cumsum(2)  # M after each chunk: (B, H, N, D_k, D_v)
        decay_to_t = None
    else:
        gc = g.reshape(B, H, N, C)
        G = gc.cumsum(-1)  # log weight of the chunk start seen from each position
        gamma = decay_matrix(gc)  # Γ inside each chunk, each entry its own segment sum (exact for g = −inf)
        inside = ((xc @ kc.transpose(-1, -2)) * gamma) @ vc
        writes = (kc * gamma[..., -1, :, None]).transpose(-1, -2) @ vc  # each chunk's M at its end
        moments = decayed_cumsum(writes, G[..., -1])
        decay_to_t = G.exp()[..., None]
    before = torch.cat([torch.zeros_like(moments[:, :, :1]), moments[:, :, :-1]], dim=2)
    earlier = (xc if decay_to_t is None else xc * decay_to_t) @ before  # the pairs of earlier chunks
    o = (inside + earlier).reshape(B, H, N * C, -1)[:, :, :T]
    return o, moments[:, :, -1]


def _gradient_step(opt: GradientStep, q, k, v, g, beta, S0):
    """``S_t = lr Σ_i γ_i^{(t)} k_i v_iᵀ`` (minus the gradient at zero): ``o_t = lr Σ_i γ_i^{(t)} (q_t·k_i) v_i``."""
    o, S = _weighted_readout(q, k, v, g)
    o, S = opt.lr * o, opt.lr * S
    if S0 is not None:
        carried = _decay_from_start(g, q)  # (B, H, T)
        o = o + carried[..., None] * (q @ S0)
        S = S + carried[..., -1, None, None] * S0
    return o, S


def _online_sgd(opt: OnlineSGD, q, k, v, g, beta, S0):
    """``S_t = α_t S_{t−1} + k_t e_tᵀ`` with the step's error ``e_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)``;
    ``o_t = S_tᵀ q_t``.

    One step per pair is the definition, and a loop over pairs would take it literally. But steps on a linear
    regressor compose. In a chunk of C pairs that starts from ``S_0``, with ``Γ_ij`` the weight the decays leave from
    step j to step i and ``γ_i`` the one left on ``S_0``, the state before step i is read as
    ``α_i S_{i−1} = γ_i S_0 + Σ_{j<i} Γ_ij k_j e_jᵀ``. So the chunk's errors solve one unit lower-triangular system,

        e_i + β_i Σ_{j<i} Γ_ij (k_i·k_j) e_j = β_i (v_i − γ_i S_0ᵀ k_i),

    (each error corrected for the steps before it in the chunk), and then

        o_i = γ_i S_0ᵀ q_i + Σ_{j≤i} Γ_ij (q_i·k_j) e_j,      S_C = γ_C S_0 + Σ_j Γ_Cj k_j e_jᵀ.

    The solve stays inside the loop over chunks, since its right side needs ``S_0``. The ops (chapter
    chunkwise_algorithms) hoist it out of the loop instead (the WY/UT form: ``e = U − W S_0``), which is faster but
    further from the objective.
    """
    B, H, T, D_k = k.shape
    S = k.new_zeros(B, H, D_k, v.shape[-1]) if S0 is None else S0
    outputs = []
    for start in range(0, T, opt.chunk_size):
        chunk = slice(start, start + opt.chunk_size)
        q_c, k_c, v_c, beta_c = q[:, :, chunk], k[:, :, chunk], v[:, :, chunk], beta[:, :, chunk, None]
        g_c = None if g is None else g[:, :, chunk]
        gamma = _decay_from_start(g_c, k_c)[..., None]  # (B, H, C, 1): γ_i = exp(Σ_{l≤i} g_l), the weight on S_0
        if g is None:  # uniform weights: Γ is the causal mask
            Gamma = torch.ones(k_c.shape[2], k_c.shape[2], dtype=k.dtype, device=k.device).tril()
        else:
            Gamma = decay_matrix(g[:, :, chunk])  # (B, H, C, C): Γ_ij = exp(Σ_{l=j+1..i} g_l), 0 above the diagonal
        system = beta_c * (k_c @ k_c.mT) * Gamma  # its strict lower triangle; the diagonal is taken as ones
        right = beta_c * (v_c - gamma * (k_c @ S))
        errors = torch.linalg.solve_triangular(system, right, upper=False, unitriangular=True)  # (B, H, C, D_v)
        outputs.append(gamma * (q_c @ S) + ((q_c @ k_c.mT) * Gamma) @ errors)
        S = gamma[..., -1:, :] * S + (Gamma[..., -1, :, None] * k_c).mT @ errors
    return torch.cat(outputs, dim=2), S


def _multi_pass_sgd(opt: MultiPassSGD, q, k, v, g, beta, S0):
    """For every prefix ``t`` at once: ``passes`` cyclic SGD passes over ``i = 1..t``, step ``β_i Γ[t, i]``."""
    B, H, T, D_k = k.shape
    if g is None:
        gamma = regression_weights(None, T).to(q).expand(B, H, T, T)
    else:
        gamma = regression_weights(g.transpose(1, 2)).to(q)  # (B, H, T, T)
    S = k.new_zeros(B, H, T, D_k, v.shape[-1])  # one state per prefix t
    if S0 is not None:  # the prior memory, faded to each prefix as in the other optimisers
        S = S + _decay_from_start(g, q)[..., None, None] * S0[:, :, None]
    for _ in range(opt.passes):
        for i in range(T):
            k_i = k[:, :, i]  # (B, H, D_k)
            error = v[:, :, i, None] - torch.einsum("bhk,bhtkv->bhtv", k_i, S)  # (B, H, T, D_v)
            step = beta[:, :, i, None] * gamma[:, :, :, i]  # (B, H, T): zero for prefixes t < i
            S = S + torch.einsum("bht,bhk,bhtv->bhtkv", step, k_i, error)
    o = torch.einsum("bhtk,bhtkv->bhtv", q, S)
    return o, S[:, :, -1]


def _covariances(k, g):
    """``A_t = Σ_i γ_i^{(t)} k_i k_iᵀ`` for every ``t``: ``(B, H, T, D_k, D_k)``."""
    return decayed_cumsum(k[..., :, None] * k[..., None, :], g)


def _exact_solve(opt: ExactSolve, q, k, v, g, beta, S0):
    """``S_t = (A_t + λI)⁻¹ Σ γ k vᵀ``, read as ``o_t = Σ_i γ_i^{(t)} (k_i·x_t) v_i`` with ``x_t = (A_t + λI)⁻¹ q_t``.

    The readout never forms ``S_t``: one ``D_k × D_k`` Cholesky solve per step, then the weighted sum over pairs.
    """
    D_k = q.shape[3]
    eye = torch.eye(D_k, dtype=q.dtype, device=q.device)
    A = _covariances(k, g) + opt.ridge * eye  # positive definite since ridge > 0
    L, info = torch.linalg.cholesky_ex(A)
    _raise_if_not_factorised(info, "the key covariance plus ridge")
    x = torch.cholesky_solve(q[..., None], L)[..., 0]  # (B, H, T, D_k)
    o, moment = _weighted_readout(x, k, v, g)
    S = torch.cholesky_solve(moment, L[:, :, -1])
    return o, S


def _recursive_least_squares(opt: RecursiveLeastSquares, q, k, v, g, beta, S0):
    """Sherman–Morrison: ``P̃ = P/α``, ``u = P̃ k``, ``P ← P̃ − u uᵀ/(1 + kᵀu)``, ``S ← S + (P k)(v − Sᵀk)ᵀ``."""
    B, H, T, D_k = k.shape
    D_v = v.shape[-1]
    P = torch.eye(D_k, dtype=q.dtype, device=q.device).expand(B * H, D_k, D_k) / opt.ridge
    S = k.new_zeros(B * H, D_k, D_v)
    q_t, k_t, v_t = (x.permute(2, 0, 1, 3).reshape(T, B * H, 1, -1) for x in (q, k, v))  # (T, B·H, 1, D)
    alpha = None if g is None else g.exp().permute(2, 0, 1).reshape(T, B * H, 1, 1)
    outputs = []
    for t in range(T):
        if alpha is not None:
            P = P / alpha[t]  # the old data (and the ridge) weigh α_t less: A_t = α_t A_{t−1} + k kᵀ
        u = torch.bmm(k_t[t], P)  # (B·H, 1, D_k): (P̃ k)ᵀ, P̃ symmetric
        gain = u / (1 + (k_t[t] * u).sum(-1, keepdim=True))  # (P_t k_t)ᵀ
        P = torch.baddbmm(P, gain.transpose(1, 2), u, alpha=-1.0)
        error = torch.baddbmm(v_t[t], k_t[t], S, alpha=-1.0)  # v_t − Sᵀ k_t
        S = torch.baddbmm(S, gain.transpose(1, 2), error)
        outputs.append(torch.bmm(q_t[t], S))
    o = torch.cat(outputs, 1).reshape(B, H, T, D_v)
    return o, S.reshape(B, H, D_k, D_v)


def _raise_if_not_factorised(info: torch.Tensor, what: str) -> None:
    if (info != 0).any():
        raise ValueError(
            f"{what} is not positive definite in floating point (non-finite inputs, or a ridge too small for the "
            "scale of the keys); check the inputs for NaN/inf or raise the ridge"
        )


def _implicit_step(opt, q, k, v, g, beta, S0):
    """Longhorn: the proximal step's closed form is the SGD step at ``ε = β / (1 + β ‖k‖²)`` (see
    :class:`ImplicitStep`)."""
    eps = beta / (1.0 + beta * k.pow(2).sum(-1))
    return _online_sgd(OnlineSGD(chunk_size=opt.chunk_size), q, k, v, g, eps, S0)


def _steps_per_token(opt, q, k, v, g, beta, S0):
    """DeltaProduct: online SGD over the ``T·n`` pairs; token t's query reads after its last pair, its decay before
    its first. Zero queries on the other rows read nothing we keep; a zero log decay there keeps the state."""
    B, H, T, D_k = q.shape
    n = opt.num_householder
    q_rows = torch.cat([q.new_zeros(B, H, T, n - 1, D_k), q[:, :, :, None]], dim=3).flatten(2, 3)
    g_rows = None if g is None else torch.cat([g[..., None], g.new_zeros(B, H, T, n - 1)], dim=3).flatten(2)
    o, S = _online_sgd(OnlineSGD(chunk_size=opt.chunk_size), q_rows, k, v, g_rows, beta, S0)
    return o[:, :, n - 1 :: n], S


@guarded
def conjugate_gradient(A: torch.Tensor, b: torch.Tensor, steps: int) -> torch.Tensor:
    """``steps`` conjugate-gradient iterations for ``A x = b`` from ``x = 0`` (Hestenes & Stiefel 1952).

    Each step minimises ``½ xᵀAx − bᵀx`` along a direction conjugate to the earlier ones. In exact arithmetic ``D``
    steps give the exact answer; in floating point an ill-conditioned ``A`` loses the directions' conjugacy and needs
    more (condition number 10⁶ at ``D = 6``: 4e-2 after 6 steps in fp64, 2e-11 after 12). So the tolerance comes
    from the dtype, not from ``D``: a system stops once its residual is at the rounding level of ``b``'s dtype,
    ``‖r‖ ≤ ε ‖b‖`` (``ε`` = ``torch.finfo(dtype).eps``), and ``steps`` is capped at ``10 D``, the iteration limit
    SciPy's ``cg`` takes by default (so a huge ``steps`` costs no more than that).

    Args:
        A: ``(*batch, D, D)``, symmetric positive definite, floating.
        b: ``(*batch, D)``, the same batch dims (no broadcasting), dtype and device.
        steps: a positive int.

    Returns:
        ``x`` ``(*batch, D)`` in the dtype of ``b``.

    Raises:
        TypeError: non-tensors, integer or mixed dtypes, a non-int ``steps``.
        ValueError: shapes that disagree (named dims), an empty dim, another device, ``steps < 1``, NaN/inf, an
            ``A`` that is not symmetric or not positive definite (a direction with ``pᵀAp ≤ 0``).
    """
    check_tensor("A", A)
    check_tensor("b", b)
    if A.dim() < 2:
        raise ValueError(f"A: expected (*batch, D, D), got shape {tuple(A.shape)}")
    batch = tuple(f"batch{i}" for i in range(A.dim() - 2))
    dims = Dims()
    dims.bind("A", A, (*batch, "D", "D"))
    dims.bind("b", b, (*batch, "D"))
    if b.dtype != A.dtype:
        raise TypeError(f"b: expected the dtype of A ({A.dtype}), got {b.dtype}")
    check_same_device(A=A, b=b)
    if 0 in A.shape:
        raise ValueError(f"A: expected no empty dim, got shape {tuple(A.shape)}")
    check_positive_int("steps", steps)
    if A.device.type != "meta" and finite_checks_enabled():
        scale = A.abs().amax(dim=(-2, -1), keepdim=True)
        if not bool(((A - A.mT).abs() <= 1e-5 * scale).all()):
            raise ValueError("A: expected a symmetric positive definite matrix, got one that is not symmetric")
    x, definite = _cg(A, b, min(steps, MAX_STEPS_PER_DIM * dims["D"]))
    if not definite:
        raise ValueError("A: expected a symmetric positive definite matrix, got a direction p with pᵀAp <= 0")
    return x


#: The most conjugate-gradient steps per dimension of the system (SciPy's ``cg`` stops at ``maxiter = 10 n``).
MAX_STEPS_PER_DIM = 10


def _cg(A: torch.Tensor, b: torch.Tensor, steps: int) -> tuple[torch.Tensor, bool]:
    """The iterations of :func:`conjugate_gradient` on checked (or broadcasting) inputs; returns ``x`` and whether
    every direction met ``pᵀAp > 0`` where the residual was not yet at rounding level. A system whose residual is
    at the rounding level of the dtype takes no further step; the loop ends when every system has."""
    definite = True
    x = torch.zeros_like(b)
    r, p = b, b
    rr = (r * r).sum(-1, keepdim=True)
    solved = torch.finfo(b.dtype).eps ** 2 * rr  # ‖r‖² ≤ (ε ‖b‖)²: at the rounding level of b's dtype
    for _ in range(steps):
        active = rr > solved
        if p.device.type != "meta" and not bool(active.any()):
            break
        Ap = (A @ p[..., None])[..., 0]
        pAp = (p * Ap).sum(-1, keepdim=True)
        if p.device.type != "meta" and bool(((pAp <= 0) & active).any()):
            definite = False
        go = active & (pAp > 0)
        step = torch.where(go, rr / torch.where(go, pAp, 1), 0)
        x = x + step * p
        r = r - step * Ap
        rr_new = (r * r).sum(-1, keepdim=True)
        p = torch.where(go, r + torch.where(rr > 0, rr_new / torch.where(rr > 0, rr, 1), 0) * p, p)
        rr = torch.where(go, rr_new, rr)
    return x, definite


def _conjugate_gradient(opt, q, k, v, g, beta, S0):
    """MesaNet's readout: ``x_t ≈ (A_t + λI)⁻¹ q_t`` by CG, then ``o_t = Σ γ (k_i·x_t) v_i``; ``S_T`` by CG too."""
    D_k = q.shape[3]
    A = _covariances(k, g) + opt.ridge * torch.eye(D_k, dtype=q.dtype, device=q.device)
    steps = min(opt.steps, MAX_STEPS_PER_DIM * D_k)  # a system stops at its dtype's rounding level (see _cg)
    x = _cg(A, q, steps)[0]
    o, moment = _weighted_readout(x, k, v, g)
    S = _cg(A[:, :, -1, None], moment.mT, steps)[0].mT  # each column of S: (A_T + λI) s = m
    return o, S


def _mini_batch_gd(opt, q, k, v, g, beta, S0):
    """TTT-Linear from its objective: in the mini-batch from ``S_s``, every gradient ``k_i (S_sᵀk_i − v_i)ᵀ`` is taken
    at ``S_s``, so ``S_t = S_s − Σ_{s<i≤t} β_i k_i e_iᵀ`` with ``e = K S_s − V``, and ``o_t = S_tᵀ q_t``.

    The gradient of the linear class written out (as :func:`_online_sgd` does); other classes take it by autodiff
    (:mod:`ttr_edu.regression.deep`)."""
    B, H, T, D_k = k.shape
    S = k.new_zeros(B, H, D_k, v.shape[-1]) if S0 is None else S0
    outputs = []
    for start in range(0, T, opt.mini_batch_size):
        batch = slice(start, start + opt.mini_batch_size)
        q_b, k_b = q[:, :, batch], k[:, :, batch]
        steps = beta[:, :, batch, None] * (k_b @ S - v[:, :, batch])  # β_i e_i, each at the mini-batch's start
        outputs.append(q_b @ S - (q_b @ k_b.mT).tril() @ steps)
        S = S - k_b.mT @ steps
    return torch.cat(outputs, dim=2), S


#: optimiser class -> how the linear class computes ``(o, S_T)`` under it: ``solve(opt, scale · q, k, v, g, beta,
#: S_0)`` on heads-first tensors in the compute dtype. Adding an optimiser of the linear class is one solver here.
LINEAR_SOLVERS: dict[type, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    ExactSolve: _exact_solve,
    RecursiveLeastSquares: _recursive_least_squares,
    GradientStep: _gradient_step,
    OnlineSGD: _online_sgd,
    MultiPassSGD: _multi_pass_sgd,
    ImplicitStep: _implicit_step,
    StepsPerToken: _steps_per_token,
    ConjugateGradient: _conjugate_gradient,
    MiniBatchGD: _mini_batch_gd,
}
