"""Recursive least squares and the Mesa layer: exact online ridge regression, two forms side by side.

Which layer the ops compute: without ``g``, RLS (the exact ridge regression kept online by Sherman–Morrison). With
``g``, **the Mesa layer, not forgetting-factor RLS**, despite the ``rls_`` in the names: the ridge stays constant,
``S_t = (Σ_i γ_i^{(t)} k_i k_iᵀ + λI)⁻¹ Σ_i γ_i^{(t)} k_i v_iᵀ`` (MesaNet, von Oswald et al. 2025, eq. 6 with a
constant ridge; the same as :class:`ttr_edu.regression.ExactSolve` under :class:`ttr_edu.regression.Gates`). Classical
forgetting-factor RLS, whose ridge fades with the data (``… + γ_0^{(t)} λI``), is
:class:`ttr_edu.regression.RecursiveLeastSquares` under ``Gates``; no op here computes it.

The memory is the exact (optionally gated) ridge-regression solution over the tokens so far (Wang, Shi, Fox 2025,
§3.1; von Oswald et al. 2023; MesaNet, von Oswald et al. 2025, eq. 6 with a constant ridge):

    H_t = α_t H_{t-1} + k_t k_tᵀ,   H_0 = 0            (α_t = exp(g_t), or 1 without ``g``)
    b_t = α_t b_{t-1} + k_t v_tᵀ,   b_0 = 0
    A_t = H_t + λ I
    S_t = A_t⁻¹ b_t = argmin_S Σ_{i≤t} γ_i^{(t)} ‖v_i − Sᵀ k_i‖² + λ ‖S‖²,    o_t = S_tᵀ q_t

with ``γ_i^{(t)} = Π_{j=i+1..t} α_j``. **The ridge λ does not decay** (the choice of MesaNet and of
:class:`ttr_edu.regression.ExactSolve`): ``A_t ⪰ λ I`` at every step, so the solve stays well posed and the output
finite for any gate, including a full reset ``g = −inf``. Classical forgetting-factor RLS instead decays the prior
with the data (``A_t = α_t A_{t−1} + k kᵀ``, ``A_0 = λ I``), which keeps the Sherman–Morrison recursion exact but
lets ``A_t`` become singular once the memory ``1/(1 − α)`` is shorter than ``D_k``: at ``g = −1`` in fp32 it
returned NaN after about 100 tokens. Without gates the two definitions are the same ridge regression.

The forms:

* without ``g``: :func:`rls_recurrent` runs the Sherman–Morrison recursion on ``P = A⁻¹`` (rank-one updates,
  ``O(D_k (D_k + D_v))`` per token, batched matrix products over ``B·H``); with ``g`` the constant ridge makes each
  step a rank-``D_k`` change of ``A``, so it carries ``(H, b)`` and solves ``A_t x = q_t`` by Cholesky per token
  (``O(D_k³)``; MesaNet uses conjugate gradients for the same solve);
* :func:`rls_exact` writes ``A_t`` for all ``t`` at once from the definition (weights summed segment by segment,
  so a reset ``g = −inf`` is exact), solves ``A_t x_t = q_t`` for all ``t`` in one batch and reads
  ``o_t = b_tᵀ x_t``: (gated) linear attention with the query ``x_t``, so ``b_t`` and ``S_t`` are never formed per
  token (MesaNet's readout). No recursion through the solve: ``O(T D_k² (D_k + C))`` with chunks of ``C ≤ 64`` tokens.

State carried between calls (``initial_state`` and the returned final state): the pair ``(S, P)`` with
``S = A⁻¹ b`` of shape ``(B, H, D_k, D_v)`` and the inverse ``P = A⁻¹`` of shape ``(B, H, D_k, D_k)``. Without
``g``, ``P`` holds the ridge and ``ridge`` is not used; with ``g`` the ops read ``H_0 = P⁻¹ − λ I``, so pass the
``ridge`` the state was built with. (``ridge`` was ``lam`` until release 0.2; the old name still works, with a
``DeprecationWarning``.)

Ill-posed problems are reported, never returned silently: a ridge too small for the keys makes ``A_t`` singular in
floating point (a ``ValueError`` naming ``ridge``), and an ``A_t`` whose condition number times the dtype's rounding
error exceeds 1e-3 gives a ``RuntimeWarning`` (e.g. collinear keys with ``ridge = 1e-8`` in fp32).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

from ttr_edu._internal.contract import (
    STATE,
    State,
    check_inputs,
    check_state_parts,
    compute_dtype,
    decayed_cumsum,
    fla_output,
    resolve_scale,
    shares_doc,
)
from ttr_edu._internal.deprecation import renamed_arguments
from ttr_edu._internal.validation import check_chunk_size, check_positive_float, check_scalar_fits, guarded

from ._chunking import even_chunk_size
from .gated_linear_attention import gated_linear_attention_chunk
from .linear_attention import linear_attention_chunk

__all__ = ["rls_recurrent", "rls_chunk", "rls_exact"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        ridge: the ridge λ > 0, constant in time (``A_t = H_t + λ I``), a number that fits the compute dtype.
            Without ``g`` it is unused when ``initial_state`` is given (``P_0`` holds it); with ``g`` pass the λ
            the state was built with.
        g: optional log decay ``(B, T, H)`` in ``[−inf, 0]`` (forgetting factor ``α_t = exp(g_t)``), any floating
            dtype; ``−inf`` is a full reset (the data so far is forgotten, the ridge stays).
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla convention; pass ``1.0`` for the plain regression).
        initial_state: a tuple ``(S_0, P_0)`` of shapes ``(B, H, D_k, D_v)`` and ``(B, H, D_k, D_k)``, ``P_0``
            symmetric positive definite, each in the dtype of ``q`` or the compute dtype (a final state carried
            over); ``None`` means ``(0, I / ridge)``.
        output_final_state: also return ``(S_T, P_T)`` (fp32, or fp64 for fp64 inputs).

    Returns:
        ``(o, (S_T, P_T))`` (the state is ``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in
        the dtype of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, an ``initial_state`` that is no pair or
            has a part in another dtype than q's or the compute dtype.
        ValueError: a ``g`` that is NaN, ``+inf`` or ``> 0``; non-finite q, k, v or state; mismatched shapes (the
            message names the dims), different devices, ``ridge <= 0`` or outside the compute dtype's range, a bad
            ``scale``; a ridge system that is not positive definite in floating point (naming ``ridge``).

    Warns:
        RuntimeWarning: the ridge system is so ill-conditioned that rounding alone may cost more than 1e-3
            relative error (a larger ``ridge`` or fp64 inputs fix it).
"""


def _prepare(q, k, v, ridge, g, scale, initial_state):
    per_token = {} if g is None else {"g": g}
    dims = check_inputs(q, k, v, **per_token)
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    ridge = check_positive_float("ridge", ridge)
    check_scalar_fits("ridge", ridge, q.dtype)
    B, H, D_k, D_v = dims["B"], dims["H"], dims["D_k"], dims["D_v"]
    if initial_state is None:
        S = torch.zeros(B, H, D_k, D_v, dtype=dtype, device=q.device)
        P = torch.eye(D_k, dtype=dtype, device=q.device).expand(B, H, D_k, D_k) / ridge
    else:
        if not (isinstance(initial_state, (tuple, list)) and len(initial_state) == 2):
            raise TypeError(
                "initial_state: expected a tuple (S, P) of shapes (B, H, D_k, D_v) and (B, H, D_k, D_k), "
                f"got {type(initial_state).__name__}"
            )
        parts = (("S", STATE), ("P", ("B", "H", "D_k", "D_k")))
        S, P = (x.to(dtype) for x in check_state_parts("initial_state", initial_state, parts, dims, q))
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·)
    log_decay = None if g is None else g.to(dtype).transpose(1, 2)  # (B, H, T)
    return q * scale, k, v, log_decay, S, P, ridge


def _prior(S, P, ridge):
    """``(H_0, b_0)`` from a state ``(S, P)``: ``A_0 = P⁻¹``, ``H_0 = A_0 − λI``, ``b_0 = A_0 S``."""
    A0, info = torch.linalg.inv_ex(P)
    if (info != 0).any():
        raise ValueError(
            "initial_state[1] (P): expected an invertible (symmetric positive definite) P = A⁻¹, got a singular one"
        )
    eye = torch.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return A0 - ridge * eye, A0 @ S


def _factorise(A, ridge, where: str, depth: int = 6):
    """Cholesky factors of the ridge systems ``A`` (``(..., D_k, D_k)``), or a ``ValueError`` naming ``ridge``.

    Warns when the condition number (estimated from the factor's diagonal, a lower bound) times the dtype's rounding
    error exceeds 1e-3: the answer then carries that relative error, and a larger ``ridge`` or fp64 is needed.
    """
    L, info = torch.linalg.cholesky_ex(A)
    if (info != 0).any():
        raise ValueError(
            f"ridge: A_t = H_t + ridge * I is not positive definite in {A.dtype} ({where}); ridge = {ridge:.3g} is too "
            "small for the scale of the keys (collinear or huge keys): raise ridge or compute in float64"
        )
    pivots = torch.diagonal(L, dim1=-2, dim2=-1).square()
    _warn_if_ill_conditioned(pivots.amax(-1) / pivots.amin(-1), ridge, A.dtype, depth)
    return L


def _check_inverse(P, ridge, k, fresh: bool) -> None:
    """After Sherman–Morrison: ``P_T = A_T⁻¹`` must still be positive definite; warn when ``A_t`` is ill-conditioned.

    ``A_t`` only grows without gates, so its condition number is at most ``λ_max(A_T) / λ_min(A_1)``; from a fresh
    state ``λ_min(A_t) ≥ λ`` and ``A_1 = λI + k_1 k_1ᵀ`` already has ``1 + ‖k_1‖² / λ``. The largest of those
    (and the final ``cond(P_T)``) is the estimate.
    """
    with torch.no_grad():
        eig = torch.linalg.eigvalsh(P)  # ascending: 1/λ_max(A_T) first
        if not (torch.isfinite(eig).all() and (eig[..., 0] > 0).all()):
            if not fresh:
                raise ValueError(
                    "initial_state[1] (P): the inverse covariance P = A⁻¹ is not positive definite after "
                    f"the update in {P.dtype}; pass a symmetric positive definite P"
                )
            raise ValueError(
                f"ridge: the inverse covariance P = A_T⁻¹ lost positive definiteness in {P.dtype}; ridge = "
                f"{ridge:.3g} is too small for the scale of the keys (collinear or huge keys): raise ridge or compute "
                "in float64"
            )
        kappa = eig[..., -1] / eig[..., 0]
        if fresh:  # λ_max(A_T) / λ, and cond(A_t) ≥ 1 + ‖k_t‖² / λ at every t (exact for t = 1)
            kappa = torch.maximum(kappa, 1.0 / (ridge * eig[..., 0]))
            kappa = torch.maximum(kappa, 1.0 + k.square().sum(-1).amax(-1) / ridge)
    _warn_if_ill_conditioned(kappa, ridge, P.dtype, 6)


def _warn_if_ill_conditioned(kappa, ridge, dtype, depth: int) -> None:
    """``kappa``: estimates of the condition numbers of the ridge systems (any shape); ``depth``: the frames from
    here to the caller of the public op (through its two wrappers, ``renamed_arguments`` and ``guarded``), so the
    warning points at the user's line."""
    with torch.no_grad():
        kappa = kappa.max().item()
    error = kappa * torch.finfo(dtype).eps
    if error > 1e-3:
        expect = f"relative errors up to about {error:.1g}" if error < 0.1 else "a result with no correct digit"
        warnings.warn(
            f"ridge: the ridge system A_t = H_t + ridge * I is ill-conditioned in {dtype} (condition number about "
            f"{kappa:.2g}): expect {expect}; raise ridge (now {ridge:.3g}) or use float64 inputs",
            RuntimeWarning,
            stacklevel=depth,
        )


@renamed_arguments(lam="ridge")
@guarded
@shares_doc(_SHARED_DOC)
def rls_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ridge: float = 1.0,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, Any]:
    """Recurrent form: one token at a time.

    Without ``g``: Sherman–Morrison updates of ``P = A⁻¹``, then a delta-rule step with learning rate ``P_t``,

        P_t = P_{t-1} − (P_{t-1} k_t)(P_{t-1} k_t)ᵀ / (1 + k_tᵀ P_{t-1} k_t)
        S_t = S_{t-1} + P_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ,     o_t = S_tᵀ q_t

    (the delta rule with the matrix learning rate ``P_t`` in place of β; Wang, Shi, Fox 2025, §3.1; von Oswald
    et al. 2023), cost ``O(T D_k (D_k + D_v))``.

    With ``g`` this op computes **the Mesa layer, not forgetting-factor RLS**, despite its name:
    ``H_t = α_t H_{t−1} + k kᵀ``, ``b_t = α_t b_{t−1} + k vᵀ`` and ``o_t = b_tᵀ (H_t + λI)⁻¹ q_t`` by a Cholesky
    solve per token, i.e. ``S_t = (Σ_i γ_i^{(t)} k_i k_iᵀ + λI)⁻¹ Σ_i γ_i^{(t)} k_i v_iᵀ`` with a ridge λ that the
    gates never decay (MesaNet, von Oswald et al. 2025, eq. 6 with a constant ridge), cost ``O(T D_k² (D_k + D_v))``.
    It equals :class:`ttr_edu.regression.ExactSolve` under :class:`ttr_edu.regression.Gates` (``NAMED_LAYERS
    ["mesa"]``), not :class:`ttr_edu.regression.RecursiveLeastSquares` under ``Gates``, which is forgetting-factor
    RLS: its ridge fades with the data, ``(Σ_i γ_i^{(t)} k_i k_iᵀ + γ_0^{(t)} λI)⁻¹``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, log_decay, S, P, ridge = _prepare(q, k, v, ridge, g, scale, initial_state)
    if log_decay is not None:
        return _gated_recurrent(q, k, v, log_decay, S, P, ridge, out_dtype, output_final_state)
    B, H, T, D_k = q.shape
    D_v = v.shape[-1]
    # (T, B·H, 1, D): each token a batch of row vectors, so every step is a few batched matrix products (bmm), which
    # trained 1.5–2× faster than the same loop in einsum (B·H separate small products per call)
    # unbind, not indexing: the backward of x[t] writes a zero tensor of all T tokens per step (O(T²) in all), the
    # backward of unbind stacks the T gradients once
    q_t, k_t, v_t = (x.permute(2, 0, 1, 3).reshape(T, B * H, 1, -1).unbind(0) for x in (q, k, v))
    P, S = P.reshape(B * H, D_k, D_k), S.reshape(B * H, D_k, D_v)
    outputs = []
    for q_i, k_i, v_i in zip(q_t, k_t, v_t):
        u = torch.bmm(k_i, P)  # (P_{t−1} k_t)ᵀ, P symmetric
        gain = u / (1.0 + (k_i * u).sum(-1, keepdim=True))  # (P_t k_t)ᵀ (Sherman–Morrison)
        P = torch.baddbmm(P, gain.mT, u, alpha=-1.0)
        error = torch.baddbmm(v_i, k_i, S, alpha=-1.0)  # (v_t − S_{t−1}ᵀ k_t)ᵀ
        S = torch.baddbmm(S, gain.mT, error)
        outputs.append(torch.bmm(q_i, S))  # (S_tᵀ q_t)ᵀ
    P, S = P.reshape(B, H, D_k, D_k), S.reshape(B, H, D_k, D_v)
    _check_inverse(P, ridge, k, fresh=initial_state is None)
    o = fla_output(torch.cat(outputs, dim=1).reshape(B, H, T, D_v).transpose(1, 2), out_dtype)
    return o, ((S, P) if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def rls_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ridge: float = 1.0,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, Any]:
    """Chunkwise form without gates: the Woodbury identity turns ``C`` Sherman–Morrison steps into one ``C × C``
    Cholesky factorisation per chunk (``chunk_size = C``; ``g`` is not taken: with gates the constant ridge makes no
    low-rank update, use :func:`rls_exact`).

    For a chunk with keys ``K`` (``C × D_k``), values ``V``, queries ``Q`` and the state ``(S_0, P_0)`` at its start,
    ``P_t = A_t⁻¹`` after token ``t`` of the chunk is ``P_0 − P_0 K_{≤t}ᵀ M_t⁻¹ K_{≤t} P_0`` (Woodbury) with
    ``M = I + K P_0 Kᵀ`` and ``M_t`` its leading ``t × t`` block. With ``M = L Lᵀ`` (Cholesky) the leading block of
    ``L`` factors ``M_t``, and the leading block of ``L⁻¹`` is ``L_t⁻¹``, so every prefix solve comes from one
    factorisation:

        G = L⁻¹ K P_0,  W = G Qᵀ,     Aᵀ = triu(W)ᵀ L⁻¹,      A_{ti} = k_i · P_t q_t  (i ≤ t, else 0)
        E = V − K S_0   (what the chunk's keys read wrongly from the memory at the chunk's start)
        O = Q S_0 + A E,        S_C = S_0 + Gᵀ (L⁻¹ E),      P_C = P_0 − Gᵀ G

    The output line is ``o_t = S_tᵀ q_t`` with ``S_t = S_0 + P_t K_{≤t}ᵀ E_{≤t}`` (the RLS update from ``S_0``),
    the same delta-rule shape as DeltaNet's chunk form, with ``A`` in place of its ``β``-weighted products. ``M ⪰ I``
    always, so the factorisation cannot fail. Cost ``O(T (C + D_k)(D_k + D_v) + T C²)``: a Python loop over the
    ``T / C`` chunks instead of the ``T`` tokens of :func:`rls_recurrent`, the same function (fp64 agreement to
    1e-12 in the tests).

    Extra arg:
        chunk_size: tokens per chunk ``C`` (a positive int, capped at ``T``); ``T`` need not be a multiple of it
            (the last chunk is padded with zero keys, which change nothing).
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)
    q, k, v, _, S, P, ridge = _prepare(q, k, v, ridge, None, scale, initial_state)
    T, C = q.shape[2], chunk_size
    pad = (-T) % C
    # (N, B, H, C, ·): chunk-major, so the loop unbinds once (indexing a chunk would cost its backward a full zero
    # tensor per chunk)
    qc, kc, vc = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, C)).movedim(2, 0) for x in (q, k, v))
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    outputs = []
    for Q, K, V in zip(qc.unbind(0), kc.unbind(0), vc.unbind(0)):
        PK = K @ P  # rows (P_0 k_i)ᵀ, P symmetric
        L = torch.linalg.cholesky(eye + PK @ K.mT)  # M = I + K P_0 Kᵀ ⪰ I: always positive definite
        G = torch.linalg.solve_triangular(L, PK, upper=False)  # L⁻¹ K P_0
        W = (G @ Q.mT).triu()  # column t: L_t⁻¹ K_{≤t} P_0 q_t
        A = torch.linalg.solve_triangular(L, W.mT, upper=False, left=False)  # A_{ti} = k_i · P_t q_t, i ≤ t
        E = V - K @ S
        outputs.append(Q @ S + A @ E)
        S = S + G.mT @ torch.linalg.solve_triangular(L, E, upper=False)
        P = P - G.mT @ G
    _check_inverse(P, ridge, k, fresh=initial_state is None)
    o = fla_output(torch.cat([piece.transpose(1, 2) for piece in outputs], dim=1)[:, :T], out_dtype)  # (B, T, H, D_v)
    return o, ((S, P) if output_final_state else None)


def _gated_recurrent(q, k, v, log_decay, S, P, ridge, out_dtype, output_final_state):
    H_t, b = _prior(S, P, ridge)
    eye = ridge * torch.eye(q.shape[-1], dtype=q.dtype, device=q.device)
    outputs = []
    for t in range(q.shape[2]):
        alpha = torch.exp(log_decay[:, :, t, None, None])  # exp(−inf) = 0: a reset forgets H and b exactly
        H_t = alpha * H_t + torch.einsum("b h i, b h j -> b h i j", k[:, :, t], k[:, :, t])
        b = alpha * b + torch.einsum("b h k, b h v -> b h k v", k[:, :, t], v[:, :, t])
        L = _factorise(H_t + eye, ridge, f"token {t}", depth=7)
        x = torch.cholesky_solve(q[:, :, t].unsqueeze(-1), L)  # (B, H, D_k, 1)
        outputs.append((b.transpose(-1, -2) @ x).squeeze(-1))
    o = fla_output(torch.stack(outputs, dim=1), out_dtype)
    if not output_final_state:
        return o, None
    return o, (torch.cholesky_solve(b, L), torch.cholesky_inverse(L))


@renamed_arguments(lam="ridge")
@guarded
@shares_doc(_SHARED_DOC)
def rls_exact(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ridge: float = 1.0,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, Any]:
    """Exact form: ``A_t`` for every ``t`` from the definition, one batched Cholesky solve, a linear-attention read.

    ``A_t = γ_0^{(t)} H_0 + Σ_{i≤t} γ_i^{(t)} k_i k_iᵀ + λI``, ``b_t = γ_0^{(t)} b_0 + Σ_{i≤t} γ_i^{(t)} k_i v_iᵀ``,
    ``o_t = b_tᵀ A_t⁻¹ q_t``: the closed-form regression ``M_t = (Σ γ v kᵀ)(Σ γ k kᵀ + λI)⁻¹`` itself, with no
    recursion through the solve (Wang, Shi, Fox 2025, §3.1). With ``g`` the ridge λ stays constant: this is the
    Mesa layer, as :func:`rls_recurrent` with ``g``, not forgetting-factor RLS (the module's docstring). The output
    is read without forming ``b_t``: with ``x_t = A_t⁻¹ q_t``,
    ``o_t = b_tᵀ x_t = γ_0^{(t)} b_0ᵀ x_t + Σ_{i≤t} γ_i^{(t)} (k_i·x_t) v_i`` is (gated) linear attention with the
    query ``x_t`` and the state ``b`` (:func:`ttr_edu.ops.gated_linear_attention_chunk`, or
    :func:`ttr_edu.ops.linear_attention_chunk` without ``g``), as MesaNet reads it (von Oswald et al. 2025). The
    weights ``γ_i^{(t)}`` of ``A_t`` are summed segment by segment (a decayed cumulative sum in chunks), exact for
    ``g = −inf``. From a state ``(S_0, P_0)`` it starts at ``A_0 = P_0⁻¹``, ``b_0 = A_0 S_0``. Cost
    ``O(T D_k² (D_k + C) + T C D_v)`` with chunks of ``C ≤ 64`` tokens, memory ``O(T D_k²)``: nothing of size
    ``T × T``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, log_decay, S, P, ridge = _prepare(q, k, v, ridge, g, scale, initial_state)
    T, D_k = q.shape[-2:]
    C = even_chunk_size(T)  # the chunks of the decayed sums and of the read, with as little padding as can be
    H0, b0 = (None, None) if initial_state is None else _prior(S, P, ridge)
    A = decayed_cumsum(k.unsqueeze(-1) * k.unsqueeze(-2), log_decay, C, initial=H0)  # (B, H, T, D_k, D_k)
    A = A + ridge * torch.eye(D_k, dtype=q.dtype, device=q.device)
    L = _factorise(A, ridge, "for some token")
    x = torch.cholesky_solve(q.unsqueeze(-1), L).squeeze(-1)  # x_t = A_t⁻¹ q_t, (B, H, T, D_k)
    fla = [y.transpose(1, 2) for y in (x, k, v)]  # (B, T, H, ·)
    read = dict(scale=1.0, initial_state=b0, output_final_state=output_final_state, chunk_size=C)
    if log_decay is None:
        o, b = linear_attention_chunk(*fla, **read)
    else:
        o, b = gated_linear_attention_chunk(*fla, log_decay.transpose(1, 2), **read)
    o = fla_output(o, out_dtype)
    if not output_final_state:
        return o, None
    return o, (torch.cholesky_solve(b, L[:, :, -1]), torch.cholesky_inverse(L[:, :, -1]))


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, ridge=1.0, g=None, scale=None, initial_state=None):
    """``H_t = α_t H_{t−1} + k_t k_tᵀ``, ``b_t = α_t b_{t−1} + k_t v_tᵀ``, ``S_t = (H_t + λI)⁻¹ b_t``,
    ``o_t = S_tᵀ q_t``, one solve per token; ``(o, (S_T, P_T = (H_T + λI)⁻¹))`` out. A state ``(S_0, P_0)`` gives
    ``H_0 + λI = P_0⁻¹`` and ``b_0 = P_0⁻¹ S_0``."""
    B, T, H, D_k = q.shape
    eye = torch.eye(D_k, dtype=q.dtype, device=q.device)
    if initial_state is None:
        A, b = ridge * eye.expand(B, H, D_k, D_k), q.new_zeros(B, H, D_k, v.shape[-1])
    else:
        A = torch.linalg.inv(initial_state[1])
        b = A @ initial_state[0]
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        alpha = 1.0 if g is None else g[:, t, :, None, None].exp()
        A = alpha * (A - ridge * eye) + ridge * eye + k[:, t, :, :, None] * k[:, t, :, None, :]  # the ridge stays
        b = alpha * b + k[:, t, :, :, None] * v[:, t, :, None, :]
        S = torch.linalg.solve(A, b)
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), (torch.linalg.solve(A, b), torch.linalg.inv(A))
