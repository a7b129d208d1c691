"""The delta rule (DeltaNet), three forms side by side: recurrent, parallel (T×T) and chunkwise (WY/UT).

The fast weight memory is corrected towards each new value instead of summed into
(Schlag, Irie, Schmidhuber 2021, §4.2, eq. 29, with W = Sᵀ; Widrow & Hoff 1960):

    S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ  =  (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ
    o_t = S_tᵀ q_t                                   (q already scaled by ``scale``)

It is one step of online SGD, with learning rate β_t, on ``½‖v_t − Sᵀ k_t‖²`` (Wang, Shi, Fox 2025).
The update is stable when ``β_t ‖k_t‖² ∈ [0, 2]`` (the eigenvalue ``1 − β‖k‖²`` of ``I − β k kᵀ`` has modulus ≤ 1);
every form checks it (``check_stability="warn"`` by default, ``"raise"`` or ``"ignore"``).

The chunkwise form follows Yang et al. 2024 ("Parallelizing linear transformers with the delta rule over sequence
length") in fla's convention: inside a chunk of C tokens the C rank-one updates are gathered with the UT transform

    𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β),   W = 𝒯 K,   U = 𝒯 V,

after which ``S' = S + Kᵀ (U − W S)`` and ``O = Q S + (Q Kᵀ ⊙ M)(U − W S)``, M causal with the diagonal.

Correspondence with flash-linear-attention 0.6.0: :func:`delta_rule_chunk` is ``fla.ops.delta_rule.chunk_delta_rule``
(pure-torch, heads-first: ``naive.delta_rule_chunkwise``), :func:`delta_rule_recurrent` is
``fused_recurrent_delta_rule`` (``naive.delta_rule_recurrence``). fla's kernels can L2-normalise ``q, k`` inside
(``use_qk_l2norm_in_kernel``); here apply :func:`ttr_edu.ops.l2_norm` first.
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import (
    PER_TOKEN,
    QK,
    STATE,
    State,
    V,
    check_inputs,
    check_nonempty,
    check_state,
    compute_dtype,
    decay_matrix,
    fla_output,
    resolve_scale,
    shares_doc,
    zero_state,
)
from ttr_edu._internal.contract import (
    check_stability as _check_stability,
)
from ttr_edu._internal.validation import Dims, check_chunk_size, check_same_device, guarded

from ._chunking import MIN_FACTORED_DECAY, pack, run_blocks
from ._varlen import varlen

__all__ = ["delta_rule_recurrent", "delta_rule_parallel", "delta_rule_chunk", "delta_rule_pseudo_values"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q`` (usually L2-normalised, see ``l2_norm``).
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        beta: the per-token learning rate β ``(B, T, H)``, any floating dtype.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla). Chapters that follow a paper pass ``1.0``.
        initial_state: ``S_0`` ``(B, H, D_k, D_v)``; ``None`` means zero.
        output_final_state: also return ``S_T`` (fp32, or fp64 for fp64 inputs).
        chunk_size: (``delta_rule_chunk`` only) tokens per chunk, any positive int; T need not be a multiple.
        check_stability: ``"warn"`` (default), ``"raise"`` or ``"ignore"`` when ``β ‖k‖²`` leaves ``[0, 2]``.
        cu_seqlens: (recurrent and chunk forms) fla's variable-length offsets, an integer tensor ``(N + 1,)``: the N
            sequences are packed along T in a batch of one (``B = 1``), sequence n is tokens
            ``cu_seqlens[n]:cu_seqlens[n+1]``, and the initial and final states are ``(N, H, D_k, D_v)``, one per
            sequence; no state crosses a boundary. ``None``: one sequence per batch row.

    Returns:
        ``(o, S_T)`` (``S_T`` is ``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in the dtype
        of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v.
        ValueError: mismatched shapes (the message names the dims), different devices, a bad ``scale``,
            ``chunk_size`` or ``check_stability``; with ``check_stability="raise"``, ``β ‖k‖² ∉ [0, 2]``.
        RuntimeWarning: with ``check_stability="warn"``, ``β ‖k‖² ∉ [0, 2]``.
"""


def prepare(q, k, v, beta, scale, initial_state, check_stability, g=None):
    """Check and upcast the inputs; return heads-first ``q, k, v, beta, g``, the initial state and the scale.

    Shared with the gated delta rule (``g`` is its log decay).
    """
    per_token = {"beta": beta} if g is None else {"g": g, "beta": beta}
    dims = check_inputs(q, k, v, **per_token)
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    if initial_state is not None:
        check_state("initial_state", initial_state, dims, STATE, q.device)
    _check_stability(beta, k, check_stability)
    S = zero_state(dims, dtype, q.device) if initial_state is None else initial_state.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·)
    beta = beta.to(dtype).transpose(1, 2)  # (B, H, T)
    g = None if g is None else g.to(dtype).transpose(1, 2)
    return q, k, v, beta, g, S, scale


def chunk_forward(q, k, v, beta, S, chunk_size, scale=1.0, g=None):
    """The WY/UT chunkwise delta rule on heads-first tensors; gated (fla's gated delta rule) when ``g`` is given.

    Inside a chunk with in-chunk cumulative log decay ``G_i = Σ_{j≤i} g_j``, ``γ_i = exp(G_i)`` and
    ``Γ_ij = exp(G_i − G_j)`` (i ≥ j), unrolling ``S_i = α_i (I − β_i k_i k_iᵀ) S_{i−1} + β_i k_i v_iᵀ`` gives
    ``S_i = γ_i S_0 + Σ_{j≤i} Γ_ij k_j u_jᵀ`` with pseudo-values ``u = U − W S_0``, where

        L = I + tril(diag(β) (Γ ⊙ K Kᵀ), −1),    W = L⁻¹ diag(β) diag(γ) K,    U = L⁻¹ diag(β) V    (UT transform)
        O = diag(γ) Q S_0 + (Q Kᵀ ⊙ Γ ⊙ M) u,     S_C = γ_C S_0 + (diag(γ_C / γ) K)ᵀ u.

    Without decay, γ = Γ = 1 and this is fla's chunked delta rule:
    ``O = Q S + (Q Kᵀ ⊙ M)(U − W S)``, ``S' = S + Kᵀ (U − W S)``.

    The chunks are taken a block at a time (:func:`_block_forward`, :mod:`ttr_edu.ops._chunking`), a block being
    about ``BLOCK_ROWS`` rows of ``q`` (8 chunks of 64 tokens at B·H = 8), read where they lie in the caller's
    ``(B, T, H, ·)`` layout, and the output is written there too.

    Takes ``q, k, v`` ``(B, H, T, ·)`` (usually transposed views of fla's layout), ``beta`` and ``g`` ``(B, H, T)``
    and ``S`` ``(B, H, D_k, D_v)``; returns ``o`` ``(B, T, H, D_v)`` (fla's layout) and ``S_T``.
    """
    inputs = [x.transpose(1, 2) for x in (k, v, q, beta, g) if x is not None]  # (B, T, H, ·)
    return run_blocks(_block_forward, inputs, S, chunk_size, scale=scale)


def ut_solve(gram, rhs, *, in_place=False):
    """``L⁻¹ rhs`` for the unit lower-triangular ``L`` whose strict lower triangle is that of ``gram`` ``(N, C, C)``:
    the UT transform's triangular solve (never ``L⁻¹`` itself, which would cost ``C³``: ``T³`` in the parallel form).

    It reads only the strict lower triangle of ``gram`` and takes ones on its diagonal, so ``gram`` needs no masked
    copy. ``rhs`` ``(N, C, R)``; returns ``(N, C, R)``. With ``in_place`` the solution overwrites a contiguous
    ``rhs`` (LAPACK's triangular solve works in place on a row-major right-hand side: no copy at all).
    """
    return torch.linalg.solve_triangular(gram, rhs, upper=False, unitriangular=True, out=rhs if in_place else None)


def _block_forward(k, v, q, beta, g=None, *, state, scale, scratch):
    """One block of n chunks, each input an ``(n, B, H, C, ·)`` (``beta``, ``g``: ``(n, B, H, C)``) view from
    :func:`~ttr_edu.ops._chunking.chunk_blocks`; ``state`` ``(B·H, D_k, D_v)`` is the state before the block.

    Three stages, as fla's kernels do it: (1) for all n chunks at once, the inputs packed into matrices with the
    decays folded in, the masked scores and the UT transforms (two triangular solves, in place); (2) a loop over the
    chunks for what is truly sequential, the pseudo-values ``u = U − W S`` and the state each chunk starts from
    (two products per chunk); (3) for all n chunks at once, the two terms of the output, ``inter = diag(γ) Q S``
    and ``intra = (Q Kᵀ ⊙ Γ ⊙ M) u``, which the caller adds into its output
    (:func:`~ttr_edu.ops._chunking.store`). Computing the outputs inside the loop would add two small products per
    step, which on a CPU run slower per FLOP than one batched product. (Folding each chunk into a transition
    ``S ← (γ_C I − K̃ᵀ W) S + K̃ᵀ U`` leaves one product per step but costs 4 more ``C·D²`` products per chunk: 13 %
    slower here.) ``scale`` is folded into the packed ``Q``.

    Where every chunk of the block decays by at most e⁸ (always without decay), ``Γ_ij = γ_i / γ_j`` factorises:
    ``Q Kᵀ ⊙ Γ = (diag(γ) Q)(diag(1/γ) K)ᵀ``, so the decays enter as the inputs are packed and every product is a
    plain batched product; ``1/γ ≤ e⁸`` cannot overflow, and ``Γ`` carries at most 2·8 units of rounding.
    Otherwise (strong decay, or a reset ``g = −inf``) each ``Γ_ij`` comes from its own segment sum, exact.

    Under ``torch.no_grad`` the intermediates live in ``scratch`` buffers and the solves and updates work in
    place; under autograd the same steps run out of place. Returns ``inter``, ``intra`` ``(n, B, H, C, D_v)`` and
    the state after the block.
    """
    n, B, H, C, D_k = k.shape
    D_v = v.shape[-1]
    BH = B * H
    M = n * BH
    fast = scratch.enabled
    beta = beta.unsqueeze(-1)  # (n, B, H, C, 1)
    gamma = chunk_decay = None
    factorised = True
    if g is not None:
        G = torch.cumsum(g, -1, out=_viewed(scratch("G", M, C), g.shape))  # log γ_i
        gamma = torch.exp(G)  # (n, B, H, C)
        chunk_decay = gamma[..., -1].reshape(M, 1, 1)  # γ_C
        factorised = bool((chunk_decay >= MIN_FACTORED_DECAY).all())

    # (1) The right-hand sides of the UT transform, β diag(γ) K and β V, packed as the inputs are read.
    W = pack(torch.mul, k, beta if gamma is None else beta * gamma.unsqueeze(-1), out=scratch("W", M, C, D_k))
    U = pack(torch.mul, v, beta, out=scratch("U", M, C, D_v))
    if factorised:
        # K̂ = diag(1/γ) K and Q̂ = scale diag(γ) Q: then β_i Γ_ij k_i·k_j = (β γ K)_i·K̂_j and Γ_ij q_i·k_j = Q̂_i·K̂_j
        if gamma is None:
            K = pack(None, k, out=scratch("K", M, C, D_k))  # K: the one input with no op to fold its packing into
            Q = pack(torch.mul, q, scale, out=scratch("Q", M, C, D_k))
        else:
            K = pack(torch.mul, k, torch.reciprocal(gamma).unsqueeze(-1), out=scratch("K", M, C, D_k))
            Q = pack(torch.mul, q, (scale * gamma).unsqueeze(-1), out=scratch("Q", M, C, D_k))
        gram = torch.bmm(W, K.mT, out=scratch("gram", M, C, C))  # β_i Γ_ij k_i·k_j (its strict lower triangle)
        scores = torch.bmm(Q, K.mT, out=scratch("scores", M, C, C)).tril_()  # scale Γ_ij q_i·k_j, causal
        K_end = K  # the state update uses γ_C (S + K̂ᵀ u) = γ_C S + K̃ᵀ u
    else:  # strong decay or a reset in this block: each Γ_ij from its own segment sum, exact for g = −inf
        Gamma = decay_matrix(g).reshape(M, C, C)  # Γ_ij, 0 above the diagonal (so Γ ⊙ M = Γ)
        K = pack(None, k, out=scratch("K", M, C, D_k))
        Q = pack(torch.mul, q, scale, out=scratch("Q", M, C, D_k))
        gram = _mul(torch.bmm(K, K.mT, out=scratch("gram", M, C, C)), Gamma * beta.reshape(M, C, 1), fast)
        scores = _mul(torch.bmm(Q, K.mT, out=scratch("scores", M, C, C)), Gamma, fast)
        Q = _mul(Q, gamma.reshape(M, C, 1), fast)  # scale diag(γ) Q, for the state term of the output
        # K̃ = diag(γ_C / γ) K = diag(Γ_C·) K, without dividing by a γ_j that may be 0
        K_end = torch.mul(K, Gamma[:, -1, :, None], out=scratch("K_end", M, C, D_k))

    # The UT transform, in place: W ← L⁻¹ β diag(γ) K, U ← L⁻¹ β V (two solves keep W and U contiguous).
    W, U = ut_solve(gram, W, in_place=fast), ut_solve(gram, U, in_place=fast)

    # (2) The only sequential part, per chunk: the pseudo-values u = U − W S (in place of U) and the next state,
    # S ← S + K̂ᵀ u times γ_C (factorised) or S ← γ_C S + K̃ᵀ u (exact); the states written into one buffer.
    Us, Ws, Kt = U.unflatten(0, (n, BH)), W.unflatten(0, (n, BH)), K_end.mT.unflatten(0, (n, BH))
    decay = None if chunk_decay is None else chunk_decay.view(n, BH, 1, 1)
    states = scratch("states", M + BH, D_k, D_v)
    if states is not None:
        chain = states.view(n + 1, BH, D_k, D_v)
        if chain[0].data_ptr() != state.data_ptr():
            chain[0].copy_(state)
        # the per-chunk operands unbound once (one op each, not one indexing op per chunk and operand)
        links, decays = chain.unbind(0), ([None] * n if decay is None else decay.unbind(0))
        for U_i, W_i, K_i, d_i, S_i, S_next in zip(Us.unbind(0), Ws.unbind(0), Kt.unbind(0), decays, links, links[1:]):
            u = U_i.baddbmm_(W_i, S_i, alpha=-1.0)
            if d_i is None:
                torch.baddbmm(S_i, K_i, u, out=S_next)
            elif factorised:
                torch.baddbmm(S_i, K_i, u, out=S_next).mul_(d_i)
            else:
                torch.mul(S_i, d_i, out=S_next).baddbmm_(K_i, u)
        starts, state, u = states[:M], chain[n], U
    else:
        starts, pseudo_values = [], []
        for i in range(n):
            starts.append(state)
            pseudo_values.append(torch.baddbmm(Us[i], Ws[i], state, alpha=-1.0))
            if decay is None:
                state = torch.baddbmm(state, Kt[i], pseudo_values[-1])
            elif factorised:
                state = torch.baddbmm(state, Kt[i], pseudo_values[-1]) * decay[i]
            else:
                state = torch.baddbmm(decay[i] * state, Kt[i], pseudo_values[-1])
        starts, u = torch.cat(starts), torch.cat(pseudo_values)

    # (3) All n outputs at once: O = Q̂ S_start + (Q Kᵀ ⊙ Γ ⊙ M) u.
    inter = torch.bmm(Q, starts, out=scratch("inter", M, C, D_v))
    intra = torch.bmm(scores, u, out=scratch("intra", M, C, D_v))
    return inter.view(n, B, H, C, D_v), intra.view(n, B, H, C, D_v), state


def _viewed(buffer, shape):
    """``buffer`` viewed as ``shape``, or ``None`` (no buffer: the op allocates)."""
    return None if buffer is None else buffer.view(shape)


def _mul(x, factor, in_place):
    """``x * factor``, in place on a buffer when nothing is recorded by autograd."""
    return x.mul_(factor) if in_place else x * factor


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "beta")
def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    check_stability: str = "warn",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Recurrent form: ``S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ``, ``o_t = S_tᵀ q_t``, one token at a time.

    Source: Schlag, Irie, Schmidhuber 2021, eq. 29 (W = Sᵀ). Cost ``O(T D_k D_v)``, memory ``O(D_k D_v)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, _, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability)
    o, S = recurrent_forward(q, k, v, beta, S, scale)
    return fla_output(o, out_dtype), (S if output_final_state else None)


def recurrent_forward(q, k, v, beta, S, scale, g=None):
    """The recurrent form on checked heads-first tensors, one :func:`recurrent_step` per token; gated (decay first,
    as fla) when the log decay ``g`` is given. Takes ``q, k, v`` ``(B, H, T, ·)``, ``beta`` and ``g`` ``(B, H, T)``,
    ``S`` ``(B, H, D_k, D_v)``; returns ``o`` ``(B, T, H, D_v)`` and ``S_T``."""
    B, H, T, D_k = q.shape
    rows = lambda x: x.reshape(B * H, T, -1)  # noqa: E731  (B·H, T, ·): one row per token of each head
    q, k, v, beta = rows(q * scale), rows(k), rows(v), rows(beta)
    decay = None if g is None else rows(torch.exp(g))
    S = S.reshape(B * H, D_k, -1)
    outputs = []
    for t in range(T):
        o, S = recurrent_step(
            S,
            q[:, t : t + 1],
            k[:, t : t + 1],
            v[:, t : t + 1],
            beta[:, t : t + 1],
            None if g is None else decay[:, t : t + 1],
        )
        outputs.append(o)
    o = torch.cat(outputs, dim=1).unflatten(0, (B, H)).transpose(1, 2)  # (B, T, H, D_v)
    return o, S.unflatten(0, (B, H))


def recurrent_step(S, q, k, v, beta, decay=None):
    """One token of the delta rule, unchecked: decay (gated), correct towards the value, read.

    ``S_t = α_t S_{t−1} + β_t k_t (v_t − α_t S_{t−1}ᵀ k_t)ᵀ``, ``o_t = S_tᵀ q_t``, for ``N`` heads at once: ``S``
    ``(N, D_k, D_v)``, ``q`` (already scaled) and ``k`` ``(N, 1, D_k)``, ``v`` ``(N, 1, D_v)``, ``beta`` and
    ``decay = α_t = exp(g_t)`` ``(N, 1, 1)`` (``None``: no decay). Returns ``(o (N, 1, D_v), S_t)``. Three batched
    products and no argument check: the recurrent forms call it after theirs, and the layers' one-token step
    (:meth:`ttr_edu.layers.base.Mixer.step`) after the caller's checks.
    """
    if decay is not None:
        S = S * decay  # decay first (fla), then the error against the decayed memory
    error = torch.baddbmm(v, k, S, alpha=-1.0)  # v_t − S_{t−1}ᵀ k_t, as a row
    S = torch.baddbmm(S, k.mT, error * beta)  # + β_t k_t errorᵀ
    return torch.bmm(q, S), S


@guarded
@shares_doc(_SHARED_DOC)
def delta_rule_parallel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    check_stability: str = "warn",
) -> tuple[torch.Tensor, Any]:
    """Parallel (T×T) form: the UT transform over the whole sequence at once.

    With ``𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)`` (T×T; applied by a unit lower-triangular solve, never
    inverted), ``W = 𝒯 K``, ``U = 𝒯 V``: ``O = Q S_0 + (Q Kᵀ ⊙ M)(U − W S_0)`` and ``S_T = S_0 + Kᵀ (U − W S_0)``
    (Yang et al. 2024, §3). Cost ``O(T² (D_k + D_v))``, memory ``O(T²)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, _, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability)
    o, S = chunk_forward(q, k, v, beta, S, chunk_size=q.shape[2], scale=scale)
    return fla_output(o, out_dtype), (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "beta")
def delta_rule_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    check_stability: str = "warn",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Chunkwise form (WY/UT representation): C tokens at a time, the state handed from chunk to chunk.

    Per chunk (fla's convention, Yang et al. 2024): ``𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)``, ``W = 𝒯 K``,
    ``U = 𝒯 V``; ``O = Q S + (Q Kᵀ ⊙ M)(U − W S)``; ``S ← S + Kᵀ (U − W S)``. Everything but the chunk-to-chunk
    state update is computed for a block of chunks at once (a few thousand rows of ``q``); the update is a loop of
    ``ceil(T / C)`` steps (see :func:`chunk_forward`).
    Cost ``O(T C (D_k + D_v) + T D_k D_v)``, memory ``O(T C + T (D_k + D_v) + T D_k D_v / C)``: nothing of size
    T×T.
    Any positive ``chunk_size`` works, and T need not be a multiple of it.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)  # capped at T
    q, k, v, beta, _, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability)
    o, S = chunk_forward(q, k, v, beta, S, chunk_size, scale=scale)
    return fla_output(o, out_dtype), (S if output_final_state else None)


@guarded
def delta_rule_pseudo_values(
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    check_stability: str = "warn",
) -> torch.Tensor:
    """The delta rule's pseudo-values ``u_t = β_t (v_t − S_{t-1}ᵀ k_t)``: the corrected values it actually writes.

    With them the delta-rule update becomes the sum rule, ``S_t = S_{t-1} + k_t u_tᵀ``, so
    ``S_t = S_0 + Σ_{i≤t} k_i u_iᵀ`` and the delta rule's outputs are causal linear attention over ``(q, k, u)``
    started from ``S_0``: ``delta_rule_*(q, k, v, beta, scale=s, initial_state=S_0)`` equals
    ``linear_attention_*(q, k, u, scale=s, initial_state=S_0)`` (Schlag, Irie, Schmidhuber 2021, eq. 29 rewritten;
    Yang et al. 2024, §3, where ``u`` is what the WY/UT transform computes per chunk: ``U − W S``).

    A plain per-token loop, the reference; :func:`chunk_forward` computes the same ``u`` chunk by chunk.

    Args:
        k: keys ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        v: values ``(B, T, H, D_v)``, same dtype as ``k``.
        beta: the per-token learning rate β ``(B, T, H)``, any floating dtype.
        initial_state: ``S_0`` ``(B, H, D_k, D_v)``; ``None`` means zero.
        check_stability: ``"warn"`` (default), ``"raise"`` or ``"ignore"`` when ``β ‖k‖²`` leaves ``[0, 2]``.

    Returns:
        ``u`` ``(B, T, H, D_v)`` in the dtype of ``v``.

    Raises:
        TypeError: a non-tensor, an integer dtype, ``k`` and ``v`` of different dtypes.
        ValueError: mismatched shapes (the message names the dims), T = 0, different devices, a bad
            ``check_stability``; with ``check_stability="raise"``, ``β ‖k‖² ∉ [0, 2]``.
        RuntimeWarning: with ``check_stability="warn"``, ``β ‖k‖² ∉ [0, 2]``.
    """
    dims = Dims()
    dims.bind("k", k, QK)
    dims.bind("v", v, V)
    dims.bind("beta", beta, PER_TOKEN)
    if dims["T"] == 0:
        raise ValueError(f"k: expected at least one token, got shape {tuple(k.shape)} with T = 0")
    check_nonempty(dims, k=("B", "H", "D_k"), v=("D_v",))
    check_same_device(k=k, v=v, beta=beta)
    if v.dtype != k.dtype:
        raise TypeError(f"v: expected the dtype of k ({k.dtype}), got {v.dtype}")
    if initial_state is not None:
        check_state("initial_state", initial_state, dims, STATE, k.device)
    _check_stability(beta, k, check_stability)
    dtype = compute_dtype(k.dtype)
    S = zero_state(dims, dtype, k.device) if initial_state is None else initial_state.to(dtype)
    out_dtype = v.dtype
    k, v = (x.to(dtype).transpose(1, 2) for x in (k, v))  # (B, H, T, ·)
    beta = beta.to(dtype).transpose(1, 2)  # (B, H, T)
    u = []
    for t in range(k.shape[2]):
        k_t = k[:, :, t]
        read = torch.einsum("b h k v, b h k -> b h v", S, k_t)  # S_{t−1}ᵀ k_t, what the memory holds for k_t
        u.append(beta[:, :, t, None] * (v[:, :, t] - read))
        S = S + torch.einsum("b h k, b h v -> b h k v", k_t, u[-1])  # the sum rule over pseudo-values
    return fla_output(torch.stack(u, dim=1), out_dtype)


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, beta, scale=None, initial_state=None):
    """``S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ``, ``o_t = S_tᵀ q_t`` (Schlag et al. 2021, eq. 29):
    ``(B, T, H, ·)`` and ``beta`` ``(B, T, H)`` in, ``(o, S_T)`` out."""
    B, T, H, D_k = q.shape
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if initial_state is None else initial_state
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        error = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])
        S = S + beta[:, t, :, None, None] * k[:, t, :, :, None] * error[:, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S
