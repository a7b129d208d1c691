"""Gated linear attention with per-key gates (GLA): recurrent and chunkwise forms.

The GLA layer (Yang, Wang, Shen, Panda, Kim 2024, "Gated Linear Attention Transformers with Hardware-Efficient
Training", eq. 3 and §4) forgets each key dimension at its own rate ``α_t = exp(g_t)``, with ``g_t`` a vector:

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ,     o_t = S_tᵀ q_t          (q already scaled by ``scale``)

so row d of the state (what key feature d has stored) decays by ``exp(g_{t,d})``. With the same ``g`` in every
dimension this is the scalar gate of :mod:`ttr_edu.ops.gated_linear_attention` (fla's ``simple_gla``).

Correspondence with flash-linear-attention 0.6.0:

* :func:`gla_recurrent` is ``fla.ops.gla.fused_recurrent_gla`` / the pure-torch
  ``fla.ops.gla.naive.naive_recurrent_gla`` (whose ``gk`` is our ``g``; the naive reference fixes
  ``scale = D_k ** -0.5``);
* :func:`gla_chunk` is ``fla.ops.gla.chunk_gla`` (fla has no pure-torch chunk form of this layer);
* the scalar-gate ops ``gated_linear_attention_*`` are ``fla.ops.simple_gla``'s ``chunk_simple_gla`` and
  ``naive_recurrent_simple_gla`` (``g`` of shape ``(B, T, H)``).

Unlike fla's kernels, both forms accept ``g = −inf`` (a full reset of that key dimension) exactly.
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import (
    QK,
    STATE,
    State,
    check_inputs,
    check_log_decay,
    check_state,
    compute_dtype,
    fla_output,
    resolve_scale,
    shares_doc,
    zero_state,
)
from ttr_edu._internal.validation import check_chunk_size, guarded

from ._chunking import MIN_FACTORED_DECAY, chunk_states, pack, run_blocks, scaled_bmm
from ._varlen import varlen

__all__ = ["gla_recurrent", "gla_chunk"]

#: Side of the sub-chunks inside a chunk (fla's BC): decays between sub-chunks factor through a reference row and
#: become matrix products; only the sub-chunks on the diagonal need the elementwise form.
SUB_CHUNK = 16

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        g: per-key log decay ``(B, T, H, D_k)`` in ``[−inf, 0]`` (fla's ``gk``), any floating dtype; row d of the
            state is multiplied by ``exp(g_{t,d})`` before step t. ``−inf`` resets that row, exactly in both forms.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla).
        initial_state: ``S_0`` ``(B, H, D_k, D_v)``; ``None`` means zero.
        output_final_state: also return ``S_T`` (fp32, or fp64 for fp64 inputs).
        chunk_size: (``gla_chunk`` only) tokens per chunk, any positive int; T need not be a multiple.
        cu_seqlens: fla's variable-length offsets, an integer tensor ``(N + 1,)``: N sequences packed along T in a
            batch of one (``B = 1``), sequence n is tokens ``cu_seqlens[n]:cu_seqlens[n+1]``; the initial and final
            states are then ``(N, H, D_k, D_v)`` and no state crosses a boundary.

    Returns:
        ``(o, S_T)`` (``S_T`` is ``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in the dtype
        of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v; a ``cu_seqlens`` that is not an
            integer tensor.
        ValueError: a ``g`` that is NaN, ``+inf`` or ``> 0``; mismatched shapes (the message names the dims),
            different devices, a bad ``scale`` or ``chunk_size``; offsets that do not start at 0, end at T and
            increase.
"""


def _prepare(q, k, v, g, scale, initial_state):
    dims = check_inputs(q, k, v)
    if isinstance(g, torch.Tensor) and g.dim() == 3:
        raise ValueError(
            f"g: expected a per-key log decay (B, T, H, D_k), got shape {tuple(g.shape)}; for a scalar gate per head "
            "(fla's simple_gla) use gated_linear_attention_recurrent / gated_linear_attention_chunk"
        )
    dims.bind("g", g, QK)
    if g.device != q.device:
        raise ValueError(f"g: expected a tensor on {q.device} (the device of q), got one on {g.device}")
    check_log_decay(g, shape="(B, T, H, D_k)")
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    if initial_state is not None:
        check_state("initial_state", initial_state, dims, STATE, q.device)
    S = zero_state(dims, dtype, q.device) if initial_state is None else initial_state.to(dtype)
    q, k, v, g = (x.to(dtype).transpose(1, 2) for x in (q, k, v, g))  # (B, H, T, ·), q not yet scaled
    return q, k, v, g, S, scale


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "g")
def gla_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Recurrent form: ``S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``, one token at a time.

    Source: Yang et al. 2024 (GLA), eq. 3 with ``G_t = α_t 1ᵀ``; fla's ``naive_recurrent_gla`` and
    ``fused_recurrent_gla``. Cost ``O(T D_k D_v)``, memory ``O(D_k D_v)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, g, S, scale = _prepare(q, k, v, g, scale, initial_state)
    q = q * scale
    outputs = []
    for t in range(q.shape[2]):
        S = torch.exp(g[:, :, t, :, None]) * S + torch.einsum("b h k, b h v -> b h k v", k[:, :, t], v[:, :, t])
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    o = fla_output(torch.stack(outputs, dim=1), out_dtype)
    return o, (S if output_final_state else None)


def _suffix_sums(g: torch.Tensor) -> torch.Tensor:
    """``[i] = Σ_{l > i} g_l`` along dim −2 (the time axis of a chunk): a direct sum, never a difference of running
    sums, so it keeps full relative precision and ``−inf`` (a reset) gives ``−inf``, never NaN."""
    inclusive = g.flip(-2).cumsum(-2).flip(-2)
    return torch.cat([inclusive[..., 1:, :], torch.zeros_like(inclusive[..., :1, :])], dim=-2)


def _segment_sums(g: torch.Tensor) -> torch.Tensor:
    """``[i, j] = Σ_{j < l ≤ i} g_l`` for ``i ≥ j`` and ``−inf`` above the diagonal: ``g`` ``(..., c, D)`` gives
    ``(..., c, c, D)``. Each segment is summed directly (as :func:`ttr_edu._internal.contract.decay_matrix` does for a
    scalar gate), exact for ``g = −inf``."""
    c = g.shape[-2]
    below = torch.ones(c, c, dtype=torch.bool, device=g.device).tril(-1)[:, :, None]  # i > j
    terms = torch.where(below, g.unsqueeze(-2), 0.0)  # [i, j] = g_i where i > j
    causal = torch.ones(c, c, dtype=torch.bool, device=g.device).tril()[:, :, None]
    return terms.cumsum(-3).masked_fill(~causal, float("-inf"))


def _intra_chunk_scores(q, k, g, sub):
    """``A_ij = Σ_d q_id k_jd exp(Σ_{j<l≤i} g_ld)`` for ``i ≥ j`` (0 above the diagonal), every exponent ≤ 0.

    ``q, k, g`` are ``(..., C, D_k)``, ``C`` a multiple of ``sub``. Between sub-chunks a > b the decay factors
    through the last row r of sub-chunk a − 1: ``Σ_{j<l≤i} = Σ_{r<l≤i} + Σ_{j<l≤r}``, two sums of log decays, each
    ≤ 0, so each block is a product of rescaled q and k that cannot overflow (fla's ``chunk_gla`` does the same, with
    sub-chunks of 16). Inside a sub-chunk the exponent is formed per element. All exponents are direct sums of ``g``
    (no differences of running sums), which keeps fp32 precise under strong decay and resets exact.
    """
    *lead, C, D = q.shape
    n = C // sub
    qs, ks, gs = (x.reshape(*lead, n, sub, D) for x in (q, k, g))
    within = gs.cumsum(-2)  # (…, n, sub, D): Σ from the sub-chunk's first row to i, = Σ_{r<l≤i} for i in a
    q_hat = qs * torch.exp(within)
    to_end = _suffix_sums(gs)  # Σ_{j<l≤end of b} for j in b
    total = within[..., -1, :]  # (…, n, D): each sub-chunk's total log decay
    # between[a, b] = Σ_{b<m<a} total_m: summed under a mask with where(), since 0 · (−inf) would be NaN
    m = torch.arange(n, device=q.device)
    inside = (m[None, None, :] > m[None, :, None]) & (m[None, None, :] < m[:, None, None])  # [a, b, m]
    between = torch.where(inside[..., None], total.unsqueeze(-3).unsqueeze(-3), 0.0).sum(-2)  # (…, n_a, n_b, D)
    strictly_below = (m[:, None] > m[None, :])[:, :, None, None]  # blocks b < a
    log_k = torch.where(strictly_below, to_end.unsqueeze(-4) + between.unsqueeze(-2), float("-inf"))
    k_hat = ks.unsqueeze(-4) * torch.exp(log_k)  # (…, n_a, n_b, sub, D); zero on and above the block diagonal
    blocks = q_hat.unsqueeze(-3) @ k_hat.transpose(-1, -2)  # (…, n_a, n_b, sub, sub)
    diag = (qs.unsqueeze(-2) * ks.unsqueeze(-3) * torch.exp(_segment_sums(gs))).sum(-1)  # (…, n, sub, sub)
    blocks.diagonal(dim1=-4, dim2=-3).copy_(diag.movedim(-3, -1))
    return blocks.transpose(-3, -2).reshape(*lead, C, C)


def _log_decays(g: torch.Tensor, scratch) -> torch.Tensor:
    """``G_i = Σ_{j≤i} g_j`` within each chunk of a block ``g`` ``(n, B, H, C, D_k)`` (a view from
    :func:`~ttr_edu.ops._chunking.chunk_blocks`), as the same ``(n, B, H, C, D_k)`` view of a buffer laid out as the
    caller's ``(B, T, H, D_k)``.

    One product per sequence with the lower-triangular ones ``L`` ``(C, C)``: ``L`` times the chunk's ``(C, H D_k)``
    slab of ``g`` as it lies, for all heads and keys at once, twice as fast on a CPU as ``cumsum`` along the chunk,
    which scans element by element. A ``g = −inf`` (a reset) makes ``0 · (−inf) = NaN`` here: the caller then takes
    the exact path, which sums ``g`` itself.
    """
    n, B, H, C, D_k = g.shape
    slab = g.permute(1, 0, 3, 2, 4)  # (B, n, C, H, D_k): the block where it lies
    ones = torch.ones(C, C, dtype=g.dtype, device=g.device).tril().expand(n, C, C)
    out = scratch("G", B * n, C, H * D_k)
    if out is None:
        G = torch.stack([torch.bmm(ones, slab[b].reshape(n, C, H * D_k)) for b in range(B)])
    else:
        G = out.view(B, n, C, H * D_k)
        for b in range(B):
            torch.bmm(ones, slab[b].reshape(n, C, H * D_k), out=G[b])
    return G.view(B, n, C, H, D_k).permute(1, 0, 3, 2, 4)


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v", "g")
def gla_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Chunkwise form: per-key decayed attention inside chunks, the decayed state between chunks.

    With ``Σ_{j<l≤i} g_l`` the per-key log decay from token j to token i of a chunk (a vector), ``γ_i`` its value
    from the chunk's start and ``γ̄_j`` to its end (Yang et al. 2024, GLA, §4.2):

        O_n = (Q_n ⊙ exp(γ)) S_n + A_n V_n,        A_ij = Σ_d q_id k_jd exp(Σ_{j<l≤i} g_ld)   (i ≥ j)
        S_{n+1} = diag(exp(γ_C)) S_n + (K_n ⊙ exp(γ̄))ᵀ V_n

    Where every chunk of a block decays by at most e⁸ in every key, ``Q Kᵀ ⊙ Γ`` factorises as ``(Q ⊙ γ)(K / γ)ᵀ`` (one
    product, rounding within 2·8 units). Otherwise every exponent is a direct sum of log decays, ≤ 0 (see
    :func:`_intra_chunk_scores`), so strong decays neither overflow nor lose precision, and ``g = −inf`` is exact. The
    chunks are taken a block at a time (:mod:`ttr_edu.ops._chunking`). Memory ``O(T C + T D_k)``, nothing of size
    T×T; any positive ``chunk_size``, any T (zero-padded: ``g = 0`` keeps the state).
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)  # capped at T
    q, k, v, g, S, scale = _prepare(q, k, v, g, scale, initial_state)
    inputs = [x.transpose(1, 2) for x in (k, v, q, g)]  # (B, T, H, ·): fla's layout, where they lie
    o, S = run_blocks(_block_forward, inputs, S, chunk_size, scale=scale)
    return fla_output(o, out_dtype), (S if output_final_state else None)


def _block_forward(k, v, q, g, *, state, scale, scratch):
    """One block of n chunks, each input an ``(n, B, H, C, ·)`` view from
    :func:`~ttr_edu.ops._chunking.chunk_blocks`; ``state`` ``(B·H, D_k, D_v)`` is the state before the block.

    Everything but the chunk-to-chunk state update is computed for all n chunks at once, the outputs too, from the
    state each chunk starts with (as the scalar-gate forms do). Returns ``inter = (Q ⊙ γ) S``, ``intra = A V``
    ``(n, B, H, C, D_v)`` (see :func:`gla_chunk`; the caller adds them into its output) and the state after the
    block. ``scale`` is applied by the two products that read ``Q`` (:func:`~ttr_edu.ops._chunking.scaled_bmm`).
    """
    n, B, H, C, D_k = k.shape
    D_v = v.shape[-1]
    BH = B * H
    M = n * BH
    fast = scratch.enabled
    G = _log_decays(g, scratch)  # log γ_i = Σ_{j≤i} g_j, per key, an (n, B, H, C, D_k) view of a buffer
    V = pack(None, v, out=scratch("V", M, C, D_v))  # V: no op to fold its packing into
    # (NaN from a reset, g = −inf, fails the test; a meta tensor has no values and takes the exact path)
    if G.device.type != "meta" and bool((G[..., -1, :].exp() >= MIN_FACTORED_DECAY).all()):
        # Γ_ijd = γ_id / γ_jd has rank one in (i, j) for each d: Q Kᵀ ⊙ Γ = (Q ⊙ γ)(K / γ)ᵀ, one product. Every
        # chunk decays by at most e⁸ per key here, so 1/γ cannot overflow and Γ carries at most 2·8 units of
        # rounding: fp32 round-off of order 1e-6 (as the scalar gate's factorised path).
        chunk_decay = G[..., -1, :].exp().reshape(M, D_k, 1)  # γ_C, a tensor of its own
        gamma = G.exp_() if fast else G.exp()
        Q = pack(torch.mul, q, gamma, out=scratch("Q", M, C, D_k))  # Q ⊙ γ
        inverse = gamma.reciprocal_() if fast else gamma.reciprocal()  # 1 / γ ≤ e⁸ (a multiply is cheaper than /)
        K = pack(torch.mul, k, inverse, out=scratch("K", M, C, D_k))  # K / γ
        scores = scaled_bmm(Q, K.mT, scale, out=scratch("scores", M, C, C)).tril_()  # scale Q Kᵀ ⊙ Γ, causal
        k_to_end, write_scale, inter_scale = K, chunk_decay, scale  # γ_C (K / γ)ᵀ V: each write decayed to its end
    else:  # strong decay or a reset: the exact sub-chunked form, every exponent a direct sum of log decays
        sub = SUB_CHUNK if C % SUB_CHUNK == 0 else C  # other chunk sizes: one sub-chunk, all exact
        gc = pack(None, g, out=scratch("g", M, C, D_k))
        K = pack(None, k, out=scratch("K", M, C, D_k))
        Q = pack(torch.mul, q, scale, out=scratch("Q", M, C, D_k))
        scores = _intra_chunk_scores(Q, K, gc, sub)  # (n·B·H, C, C)
        gamma = torch.exp(gc.cumsum(-2))  # each γ_i a running sum of g: −inf stays −inf, exp gives 0
        chunk_decay = gamma[:, -1, :, None]
        Q = Q * gamma  # scale Q ⊙ γ
        k_to_end = K * torch.exp(_suffix_sums(gc))  # K ⊙ γ_C / γ, without dividing by a γ that may be 0
        write_scale, inter_scale = None, 1.0  # Q is scaled here

    # The only sequential part: S_{i+1} = diag(γ_C) S_i + (each chunk's write decayed to its end), one op per chunk.
    decay = chunk_decay.view(n, BH, D_k, 1)
    starts, state = chunk_states(state, k_to_end, V, n=n, write_scale=write_scale, decay=decay, scratch=scratch)

    inter = scaled_bmm(Q, starts, inter_scale, out=scratch("inter", M, C, D_v))  # scale (Q ⊙ γ) S_start
    intra = torch.bmm(scores, V, out=scratch("intra", M, C, D_v))  # A V
    return inter.view(n, B, H, C, D_v), intra.view(n, B, H, C, D_v), state


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, g, scale=None, initial_state=None):
    """``S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``: ``g`` ``(B, T, H, D_k)``, one rate per key
    dimension; ``(o, S_T)`` out."""
    B, T, H, D_k = q.shape
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if initial_state is None else initial_state
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        S = g[:, t, :, :, None].exp() * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S
