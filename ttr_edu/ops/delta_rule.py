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

    T = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β),   W = T K,   U = T V,

after which ``S' = S + Kᵀ (U − W S)`` and ``O = Q S + (Q Kᵀ ⊙ M)(U − W S)``, M causal with the diagonal.

Correspondence with flash-linear-attention 0.6.0: :func:`delta_rule_chunk` is ``fla.ops.delta_rule.chunk_delta_rule``
(pure-torch, heads-first: ``naive.delta_rule_chunkwise``), :func:`delta_rule_recurrent` is
``fused_recurrent_delta_rule`` (``naive.delta_rule_recurrence``). fla's kernels can L2-normalise ``q, k`` inside
(``use_qk_l2norm_in_kernel``); here apply :func:`ttr_edu.ops.l2_norm` first.
"""

from __future__ import annotations

import torch

from ttr_edu._internal.contract import (
    PER_TOKEN,
    QK,
    STATE,
    V,
    check_inputs,
    check_nonempty,
    check_state,
    compute_dtype,
    decay_matrix,
    resolve_scale,
    shares_doc,
    zero_state,
)
from ttr_edu._internal.contract import (
    check_stability as _check_stability,
)
from ttr_edu._internal.validation import Dims, check_chunk_size, check_same_device, guarded

from ._chunking import chunk_blocks, chunks_per_block
from ._varlen import run_varlen

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

    Without decay, γ = Γ = 1 and this is fla's chunked delta rule: ``O = Q S + (Q Kᵀ ⊙ M)(U − W S)``,
    ``S' = S + Kᵀ (U − W S)``.

    The chunks are taken a block at a time (:func:`_block_forward`, :mod:`ttr_edu.ops._chunking`), a block being
    about ``BLOCK_ROWS`` rows of ``q`` (4 chunks of 64 tokens at B·H = 8), whose intermediates stay in the CPU's
    cache.

    Takes ``q, k, v`` ``(B, H, T, ·)``, ``beta`` and ``g`` ``(B, H, T)`` and ``S`` ``(B, H, D_k, D_v)``; returns
    ``o`` ``(B, T, H, D_v)`` (fla's layout) and ``S_T``.
    """
    B, H, T, D_k = q.shape
    D_v = v.shape[-1]
    per_block = chunks_per_block(B, H, chunk_size)
    S = S.flatten(0, 1)  # (B·H, D_k, D_v)
    o = q.new_empty(B, -(-T // chunk_size) * chunk_size, H, D_v)
    # [K V Q β (g)] of each chunk of each head, side by side: (n, B, H, C, 2 D_k + D_v + 1 (+ 1))
    for first, last, block in chunk_blocks([k, v, q, beta] if g is None else [k, v, q, beta, g], chunk_size, per_block):
        o_block, S = _block_forward(block, D_k=D_k, D_v=D_v, gated=g is not None, S=S, scale=scale)
        # (n, B, H, C, D_v) into fla's (B, n·C, H, D_v) layout
        o[:, first * chunk_size : last * chunk_size].view(B, last - first, chunk_size, H, D_v).copy_(
            o_block.permute(1, 0, 3, 2, 4)
        )
    return o[:, :T], S.unflatten(0, (B, H))


def ut_solve(gram, rhs):
    """``L⁻¹ rhs`` for the unit lower-triangular ``L`` whose strict lower triangle is that of ``gram`` ``(N, C, C)``.

    One triangular solve per half of the chunk and a product between them (block forward substitution):
    ``X_1 = L_11⁻¹ R_1``, ``X_2 = L_22⁻¹ (R_2 − L_21 X_1)``. The product moves a quarter of the solve's work into a
    matrix product, which runs several times faster per FLOP on a CPU; at C = 64 this took the solve from 1.1 to
    0.8 ms for 64 chunks. Each solve is taken in transposed form, ``Xᵀ Lᵀ = Rᵀ``, whose solution lands row-major
    (the direct form returns it column-major after a copy). ``rhs`` ``(N, C, R)``; returns ``(N, C, R)``.
    """

    def solve(L, R):  # reads only the strict lower triangle of L, and takes ones on its diagonal
        return torch.linalg.solve_triangular(L.mT, R.mT, upper=True, left=False, unitriangular=True).mT

    h = gram.shape[-1] // 2
    if h < 8:  # small chunks: one solve
        return solve(gram, rhs)
    first = solve(gram[:, :h, :h], rhs[:, :h])
    second = solve(gram[:, h:, h:], torch.baddbmm(rhs[:, h:], gram[:, h:, :h], first, alpha=-1.0))
    return torch.cat([first, second], dim=1)


def _block_forward(block, *, D_k, D_v, gated, S, scale):
    """One block of n chunks: ``block`` ``(n, B, H, C, W)`` from :func:`~ttr_edu.ops._chunking.chunk_blocks`,
    ``[K V Q β (g)]`` per chunk, ``S`` ``(B·H, D_k, D_v)``.

    Three stages, as fla's kernels do it: (1) the UT transforms and masked scores of all n chunks at once; (2) a loop
    over the chunks for what is truly sequential, the pseudo-values ``u`` and the state each chunk starts from (two
    fused products per chunk); (3) the outputs of all n chunks at once from those states. Computing each chunk's
    output inside the loop would add two small products per step, which on a CPU run several times slower per FLOP
    than one batched product. ``q`` enters only the output, linearly, so ``scale`` multiplies ``O`` once at the end.
    Returns ``o`` ``(n, B, H, C, D_v)`` and the state after the block.
    """
    n, B, H, C, _ = block.shape
    x = block.flatten(0, 2)  # (n·B·H, C, W); K, V, Q, β and g are views of its columns
    kvq = x[..., : 2 * D_k + D_v]
    kc, qc = kvq[..., :D_k], kvq[..., -D_k:]
    betac = x[..., 2 * D_k + D_v, None]  # (n·B·H, C, 1)
    g = x[..., -1] if gated else None
    rhs = kvq[..., :-D_k] * betac  # β [K V]: the UT transform's right-hand sides
    gram = rhs[..., :D_k] @ kc.mT  # β_i k_i · k_j
    scores = (qc @ kc.mT).tril_()  # q_i · k_j, causal mask M with the diagonal
    if g is None:
        k_to_end, chunk_decay = kc, None
    else:
        gc = g  # (n·B·H, C); zero-padded g keeps the state
        Gamma = decay_matrix(gc)  # Γ_ij, 0 above the diagonal (so Γ ⊙ M = Γ)
        gram, scores = gram * Gamma, scores * Gamma
        gamma = torch.exp(gc.cumsum(-1)).unsqueeze(-1)  # (n·B·H, C, 1): γ_i
        rhs = torch.cat([rhs[..., :D_k] * gamma, rhs[..., D_k:]], dim=-1)  # β [diag(γ) K  V]
        qc = qc * gamma
        k_to_end = kc * Gamma[:, -1, :, None]  # γ_C / γ_j = Γ_Cj, without dividing by a γ_j that may be 0
        chunk_decay = gamma[:, -1:].unflatten(0, (n, -1))  # (n, B·H, 1, 1): γ_C

    # (1) The UT transform, triangular solves for [W U] (never L⁻¹ itself, which would cost C³: T³ in the parallel
    # form). They read only the strict lower triangle of `gram` and take ones on the diagonal: that is L, with no
    # masked copy (see ut_solve).
    WU = ut_solve(gram, rhs)
    W, U = (x.unflatten(0, (n, -1)) for x in (WU[..., :D_k], WU[..., D_k:]))  # (n, B·H, C, ·)
    k_to_end = k_to_end.mT.unflatten(0, (n, -1))  # (n, B·H, D_k, C)

    # (2) The only sequential part: per chunk, the pseudo-values u = U − W S and the next state S ← γ_C S + K̃ᵀ u,
    # with K̃ = diag(γ_C / γ) K (`k_to_end`, K itself without decay).
    starts, pseudo_values = [], []
    for i in range(n):
        starts.append(S)
        pseudo_values.append(torch.baddbmm(U[i], W[i], S, alpha=-1.0))  # (B·H, C, D_v)
        carried = S if chunk_decay is None else chunk_decay[i] * S
        S = torch.baddbmm(carried, k_to_end[i], pseudo_values[-1])
    u, starts = torch.cat(pseudo_values), torch.cat(starts)  # (n·B·H, C, D_v), (n·B·H, D_k, D_v)

    # (3) All n outputs at once: O = scale (Q S_start + (Q Kᵀ ⊙ Γ ⊙ M) u).
    o = (scores @ u).baddbmm_(qc, starts).mul_(scale)  # (n·B·H, C, D_v)
    return o.unflatten(0, (n, B, H)), S


@guarded
@shares_doc(_SHARED_DOC)
def delta_rule_recurrent(
    q, k, v, beta, scale=None, initial_state=None, output_final_state=False, check_stability="warn", cu_seqlens=None
):
    """Recurrent form: ``S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ``, ``o_t = S_tᵀ q_t``, one token at a time.

    Source: Schlag, Irie, Schmidhuber 2021, eq. 29 (W = Sᵀ). Cost ``O(T D_k D_v)``, memory ``O(D_k D_v)``.
    """
    if cu_seqlens is not None:
        return run_varlen(
            delta_rule_recurrent,
            cu_seqlens,
            dict(q=q, k=k, v=v, beta=beta),
            initial_state,
            output_final_state,
            scale=scale,
            check_stability=check_stability,
        )
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, _, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability)
    q = q * scale
    outputs = []
    for t in range(q.shape[2]):
        k_t, beta_t = k[:, :, t], beta[:, :, t, None]
        error = v[:, :, t] - torch.einsum("b h k v, b h k -> b h v", S, k_t)  # v_t − S_{t−1}ᵀ k_t
        S = S + torch.einsum("b h k, b h v -> b h k v", k_t, beta_t * error)
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    o = torch.stack(outputs, dim=2).transpose(1, 2).to(out_dtype)
    return o, (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def delta_rule_parallel(
    q, k, v, beta, scale=None, initial_state=None, output_final_state=False, check_stability="warn"
):
    """Parallel (T×T) form: the UT transform over the whole sequence at once.

    With ``T = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)`` (T×T, unit lower-triangular solve), ``W = T K``,
    ``U = T V``: ``O = Q S_0 + (Q Kᵀ ⊙ M)(U − W S_0)`` and ``S_T = S_0 + Kᵀ (U − W S_0)``
    (Yang et al. 2024, §3). Cost ``O(T² (D_k + D_v))``, memory ``O(T²)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, _, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability)
    o, S = chunk_forward(q, k, v, beta, S, chunk_size=q.shape[2], scale=scale)
    return o.to(out_dtype), (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def delta_rule_chunk(
    q,
    k,
    v,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=False,
    chunk_size=64,
    check_stability="warn",
    cu_seqlens=None,
):
    """Chunkwise form (WY/UT representation): C tokens at a time, the state handed from chunk to chunk.

    Per chunk (fla's convention, Yang et al. 2024): ``T = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)``, ``W = T K``,
    ``U = T V``; ``O = Q S + (Q Kᵀ ⊙ M)(U − W S)``; ``S ← S + Kᵀ (U − W S)``. Everything but the chunk-to-chunk
    state update is computed for a block of chunks at once (a few thousand rows of ``q``); the update is a loop of
    ``ceil(T / C)`` steps (see :func:`chunk_forward`).
    Cost ``O(T C (D_k + D_v) + T D_k D_v)``, memory ``O(T C + T (D_k + D_v) + T D_k D_v / C)``: nothing of size
    T×T.
    Any positive ``chunk_size`` works, and T need not be a multiple of it.
    """
    if cu_seqlens is not None:
        return run_varlen(
            delta_rule_chunk,
            cu_seqlens,
            dict(q=q, k=k, v=v, beta=beta),
            initial_state,
            output_final_state,
            scale=scale,
            chunk_size=chunk_size,
            check_stability=check_stability,
        )
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)  # capped at T
    q, k, v, beta, _, S, scale = prepare(q, k, v, beta, scale, initial_state, check_stability)
    o, S = chunk_forward(q, k, v, beta, S, chunk_size, scale=scale)
    return o.to(out_dtype), (S if output_final_state else None)


@guarded
def delta_rule_pseudo_values(k, v, beta, initial_state=None, check_stability="warn"):
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
    return torch.stack(u, dim=2).transpose(1, 2).to(out_dtype)
