"""Causal linear attention, three forms side by side: recurrent, parallel (T×T) and chunkwise.

The layer is a fast weight memory (Katharopoulos et al. 2020; Schlag, Irie, Schmidhuber 2021, eqs. 11-13):

    S_t = S_{t-1} + k_t v_tᵀ                 (S: (D_k, D_v); the papers' fast weight is W = Sᵀ)
    o_t = S_tᵀ q_t                            (q already scaled by ``scale``)

With ``normalize=True`` a second state ``z_t = z_{t-1} + k_t`` divides the output (Schlag et al. 2021, eq. 13;
Katharopoulos et al. 2020, eq. 6):

    o_t = S_tᵀ q_t / (z_tᵀ q_t + eps)

State carried between calls: ``S`` of shape ``(B, H, D_k, D_v)``; with ``normalize=True`` the pair ``(S, z)`` with
``z`` of shape ``(B, H, D_k)``, in ``initial_state`` and in the returned final state alike, so that a sequence split
anywhere and run piece by piece with the state handed over gives the same output as one run.

The inputs are the featurised queries and keys: apply a feature map (:mod:`ttr_edu.ops.feature_maps`) first.

Correspondence with flash-linear-attention 0.6.0: :func:`linear_attention_chunk` is ``fla.ops.linear_attn.
chunk_linear_attn`` (and ``naive_chunk_linear_attn``), :func:`linear_attention_recurrent` is
``fused_recurrent_linear_attn`` (and ``naive_recurrent_linear_attn``). The conventions differ in three places:

* ``normalize`` defaults to False here and to True in fla's ``chunk_linear_attn`` (pass it explicitly when porting);
* the normaliser's ``eps`` is 1e-6 here (Schlag et al.'s code) and 1e-10 in fla (pass ``eps=1e-10`` to match);
* the ``z`` state is ``(B, H, D_k)`` here and ``(B, 1, H, D_k)`` in fla (``z.unsqueeze(1)`` / ``z.squeeze(1)``).
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import (
    STATE,
    State,
    check_inputs,
    check_state,
    check_state_parts,
    compute_dtype,
    decay_matrix,
    fla_output,
    resolve_scale,
    shares_doc,
    to_chunks,
    zero_state,
)
from ttr_edu._internal.validation import check_chunk_size, check_positive_float, guarded

from ._chunking import MIN_FACTORED_DECAY, chunk_states, pack, run_blocks
from ._varlen import varlen

__all__ = ["linear_attention_recurrent", "linear_attention_parallel", "linear_attention_chunk"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla). Chapters that follow a paper pass ``1.0``.
        normalize: divide by ``z_tᵀ q_t + eps`` with ``z_t = Σ_{i≤t} k_i``; then the state is the pair ``(S, z)``.
        eps: added to the normaliser (Schlag et al.'s code uses 1e-6); ignored without ``normalize``.
        initial_state: ``S_0`` of shape ``(B, H, D_k, D_v)`` (with ``normalize``: a tuple ``(S_0, z_0)``, ``z_0`` of
            shape ``(B, H, D_k)``, each in the dtype of ``q`` or the compute dtype); ``None`` means zero.
        output_final_state: also return the final state (fp32, or fp64 for fp64 inputs).
        chunk_size: (``linear_attention_chunk`` only) tokens per chunk, any positive int; T need not be a multiple.
        cu_seqlens: (recurrent and chunk forms) fla's variable-length offsets, an integer tensor ``(N + 1,)``: the N
            sequences are packed along T in a batch of one (``B = 1``), sequence n is tokens
            ``cu_seqlens[n]:cu_seqlens[n+1]``, and the initial and final states are ``(N, H, D_k, D_v)``, one per
            sequence (with ``normalize``, ``z`` is ``(N, H, D_k)``); no state crosses a boundary. ``None``: one
            sequence per batch row.

    Returns:
        ``(o, final_state)``: ``o`` is ``(B, T, H, D_v)`` in the dtype of ``q``; ``final_state`` is ``S_T``
        (or ``(S_T, z_T)`` with ``normalize``), or ``None`` unless ``output_final_state``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, a wrongly typed ``initial_state``, or a
            part of ``(S_0, z_0)`` in another dtype than q's or the compute dtype.
        ValueError: mismatched shapes (named dims in the message), different devices, a bad ``scale``/``eps``.
"""


def _prepare(q, k, v, scale, normalize, eps, initial_state):
    """Check everything and upcast; return heads-first tensors ``(B, H, T, ·)`` (``q`` not yet scaled), the initial
    (S, z) and the scale."""
    dims = check_inputs(q, k, v)
    scale = resolve_scale(scale, dims["D_k"])
    check_positive_float("eps", eps, allow_zero=True)
    dtype = compute_dtype(q.dtype)
    S0, z0 = unpack_state(initial_state, normalize, dims, q)
    S = zero_state(dims, dtype, q.device) if S0 is None else S0.to(dtype)
    z = None
    if normalize:
        z = q.new_zeros(dims["B"], dims["H"], dims["D_k"], dtype=dtype) if z0 is None else z0.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    return q, k, v, S, z, scale


def unpack_state(initial_state, normalize, dims, q):
    """``initial_state`` checked against the inputs' ``dims`` and ``q`` (device; the dtypes of a pair ``(S, z)``):
    ``(S, None)`` without ``normalize``, ``(S, z)`` with it (``(None, None)`` for no state). Shared with the Triton
    kernel, which takes the same states."""
    if initial_state is None:
        return None, None
    if normalize:
        if not (isinstance(initial_state, (tuple, list)) and len(initial_state) == 2):
            raise TypeError(
                "initial_state: with normalize=True expected a tuple (S, z) of shapes (B, H, D_k, D_v) and "
                f"(B, H, D_k), got {type(initial_state).__name__}"
            )
        S0, z0 = check_state_parts("initial_state", initial_state, (("S", STATE), ("z", ("B", "H", "D_k"))), dims, q)
        return S0, z0
    if isinstance(initial_state, (tuple, list)):
        raise TypeError(
            "initial_state: with normalize=False expected the tensor S of shape (B, H, D_k, D_v), got a "
            f"{type(initial_state).__name__} (the pair (S, z) is the state of normalize=True)"
        )
    check_state("initial_state", initial_state, dims, STATE, q.device)
    return initial_state, None


def _finish(o, normalizer, eps, S, z, out_dtype, output_final_state):
    """Divide by the normaliser (if any), go back to ``(B, T, H, D_v)`` and the input dtype."""
    if normalizer is not None:
        o = o / (normalizer.unsqueeze(-1) + eps)
    o = fla_output(o.transpose(1, 2), out_dtype)
    if not output_final_state:
        return o, None
    return o, ((S, z) if z is not None else S)


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v")
def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    normalize: bool = False,
    initial_state: State | None = None,
    output_final_state: bool = False,
    eps: float = 1e-06,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Recurrent form: one state update per token, ``S_t = S_{t-1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``.

    Cost ``O(T D_k D_v)``, memory ``O(D_k D_v)`` for the state. Source: Katharopoulos et al. 2020, eqs. 16-20;
    Schlag et al. 2021, eqs. 11-13.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, S, z, scale = _prepare(q, k, v, scale, normalize, eps, initial_state)
    q = q * scale
    B, H, T, D_k = q.shape
    rows = lambda x: x.reshape(B * H, T, -1)  # noqa: E731  (B·H, T, ·): one row per token of each head
    q_rows, k_rows, v_rows, S = rows(q), rows(k), rows(v), S.reshape(B * H, D_k, -1)
    outputs, normalizers = [], []
    for t in range(T):
        o_t, S = recurrent_step(S, q_rows[:, t : t + 1], k_rows[:, t : t + 1], v_rows[:, t : t + 1])
        outputs.append(o_t)
        if z is not None:
            z = z + k[:, :, t]
            normalizers.append(torch.einsum("b h k, b h k -> b h", z, q[:, :, t]))
    o = torch.cat(outputs, dim=1).unflatten(0, (B, H))  # (B, H, T, D_v)
    normalizer = torch.stack(normalizers, dim=2) if z is not None else None
    return _finish(o, normalizer, eps, S.unflatten(0, (B, H)), z, out_dtype, output_final_state)


def recurrent_step(S, q, k, v, decay=None):
    """One token of (gated) linear attention, unchecked: ``S_t = α_t S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``, for
    ``N`` heads at once: ``S`` ``(N, D_k, D_v)``, ``q`` (already scaled) and ``k`` ``(N, 1, D_k)``, ``v``
    ``(N, 1, D_v)``, ``decay = α_t`` ``(N, 1, 1)`` (``None``: none). Returns ``(o (N, 1, D_v), S_t)``: two batched
    products, and no check (the recurrent form calls it after its own, a layer's one-token step after the caller's).
    """
    if decay is not None:
        S = S * decay
    S = torch.baddbmm(S, k.mT, v)
    return torch.bmm(q, S), S


@guarded
@shares_doc(_SHARED_DOC)
def linear_attention_parallel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    normalize: bool = False,
    initial_state: State | None = None,
    output_final_state: bool = False,
    eps: float = 1e-06,
) -> tuple[torch.Tensor, Any]:
    """Parallel (T×T) form: ``O = Q S_0 + (Q Kᵀ ⊙ M) V`` with ``M`` the causal mask, diagonal included.

    This is "attention without the softmax" (Katharopoulos et al. 2020, eq. 4 with φ applied outside).
    Cost ``O(T² (D_k + D_v))``, memory ``O(T²)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, S0, z0, scale = _prepare(q, k, v, scale, normalize, eps, initial_state)
    q = q * scale
    scores = (q @ k.transpose(-1, -2)).tril()  # (B, H, T, T), causal mask M with the diagonal
    o = torch.einsum("b h k v, b h t k -> b h t v", S0, q) + scores @ v
    S = S0 + k.transpose(-1, -2) @ v
    normalizer, z = None, None
    if z0 is not None:
        normalizer = scores.sum(-1) + torch.einsum("b h k, b h t k -> b h t", z0, q)
        z = z0 + k.sum(2)
    return _finish(o, normalizer, eps, S, z, out_dtype, output_final_state)


@guarded
@shares_doc(_SHARED_DOC)
@varlen("q", "k", "v")
def linear_attention_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    normalize: bool = False,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    eps: float = 1e-06,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """Chunkwise form: T×T attention inside chunks of ``C = chunk_size`` tokens, the state between chunks.

    For chunk ``n`` with state ``S_n`` at its start (Yang et al. 2024, "chunkwise parallel form"):

        O_n = Q_n S_n + (Q_n K_nᵀ ⊙ M) V_n,      S_{n+1} = S_n + K_nᵀ V_n.

    The chunk states are an exclusive prefix sum over chunks, so no Python loop over time is needed.
    Cost ``O(T C (D_k + D_v) + T D_k D_v)``, memory ``O(T C + (T / C) D_k D_v)``: nothing of size T×T.
    Any positive ``chunk_size`` works, and T need not be a multiple of it (the last chunk is zero-padded).
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)  # capped at T
    q, k, v, S0, z0, scale = _prepare(q, k, v, scale, normalize, eps, initial_state)
    if z0 is None:  # without the normaliser: a block of chunks at a time, read where they lie in fla's layout
        o, S = blockwise(q, k, v, S0, chunk_size, scale)
        return fla_output(o, out_dtype), (S if output_final_state else None)
    q = q * scale
    T, C = q.shape[2], chunk_size
    qc, kc, vc = (to_chunks(x, C) for x in (q, k, v))  # (B, H, N, C, ·)
    scores = (qc @ kc.transpose(-1, -2)).tril()  # (B, H, N, C, C), causal mask M with the diagonal

    chunk_kv = kc.transpose(-1, -2) @ vc  # (B, H, N, D_k, D_v): what each chunk writes
    S_after = S0.unsqueeze(2) + chunk_kv.cumsum(2)  # state after each chunk
    S_before = torch.cat([S0.unsqueeze(2), S_after[:, :, :-1]], dim=2)  # state at each chunk's start
    o = qc @ S_before + scores @ vc  # (B, H, N, C, D_v)
    o = o.flatten(2, 3)[:, :, :T]
    S = S_after[:, :, -1]

    # the normaliser z_tᵀ q_t, chunkwise as the state: z at each chunk's start, plus the masked scores' row sums
    z_after = z0.unsqueeze(2) + kc.sum(3).cumsum(2)  # (B, H, N, D_k)
    z_before = torch.cat([z0.unsqueeze(2), z_after[:, :, :-1]], dim=2)
    normalizer = (qc * z_before.unsqueeze(3)).sum(-1) + scores.sum(-1)  # (B, H, N, C)
    normalizer = normalizer.flatten(2, 3)[:, :, :T]
    return _finish(o, normalizer, eps, S, z_after[:, :, -1], out_dtype, output_final_state)


def blockwise(q, k, v, S, chunk_size, scale, g=None):
    """The chunk form without the normaliser, a block of chunks at a time (:mod:`ttr_edu.ops._chunking`); with a
    scalar log decay ``g`` it is the chunk form of :func:`ttr_edu.ops.gated_linear_attention_chunk`.

    Takes heads-first ``q`` (not scaled), ``k``, ``v`` ``(B, H, T, ·)`` (usually transposed views of fla's layout),
    ``g`` ``(B, H, T)`` and ``S`` ``(B, H, D_k, D_v)``; returns ``o`` ``(B, T, H, D_v)`` (fla's layout) and ``S_T``.
    """
    inputs = [x.transpose(1, 2) for x in (k, v, q, g) if x is not None]  # (B, T, H, ·)
    return run_blocks(_block_forward, inputs, S, chunk_size, scale=scale)


def _block_forward(k, v, q, g=None, *, state, scale, scratch):
    """One block of n chunks, each input an ``(n, B, H, C, ·)`` (``g``: ``(n, B, H, C)``) view from
    :func:`~ttr_edu.ops._chunking.chunk_blocks`; ``state`` ``(B·H, D_k, D_v)`` is the state before the block.

    With the in-chunk cumulative log decay ``G_i = Σ_{j≤i} g_j``, ``γ = exp(G)``, ``Γ_ij = exp(G_i − G_j)`` (i ≥ j;
    ``γ = Γ = 1`` without decay), chunk by chunk (Yang et al. 2024, chunkwise form):

        O = diag(γ) Q S + (Q Kᵀ ⊙ Γ ⊙ M) V,        S ← γ_C S + (diag(γ_C / γ) K)ᵀ V.

    Everything but the chunk-to-chunk state update is computed for all n chunks at once, the outputs too, from the
    state each chunk starts with; the update is a running sum without decay, a loop of one op per chunk with it.
    Where every chunk of the block decays by at most e⁸, ``Γ_ij = γ_i / γ_j`` has rank one:
    ``Q Kᵀ ⊙ Γ = (diag(γ) Q)(diag(1/γ) K)ᵀ``, folded into the inputs as they are packed, with no ``C × C``
    exponentials; ``1/γ ≤ e⁸`` cannot overflow and ``Γ`` carries at most 2·8 units of rounding (fp32 round-off of
    order 1e-6). Otherwise (strong decay or a reset, ``γ = 0``) each ``Γ_ij`` comes from its own segment sum, exact
    for ``g = −inf``. ``scale`` is folded into the packed ``Q``.

    Returns ``inter = diag(γ) Q S``, ``intra = (Q Kᵀ ⊙ Γ ⊙ M) V`` ``(n, B, H, C, D_v)`` (the caller adds them into
    its output) and the state after the block.
    """
    n, B, H, C, D_k = k.shape
    D_v = v.shape[-1]
    BH = B * H
    M = n * BH
    fast = scratch.enabled
    gamma = chunk_decay = None
    factorised = True
    if g is not None:
        G = torch.cumsum(g, -1, out=None if not fast else scratch("G", M, C).view(g.shape))  # log γ_i
        gamma = torch.exp(G)  # (n, B, H, C)
        chunk_decay = gamma[..., -1].reshape(M, 1, 1)  # γ_C
        # (a meta tensor has no values to test: it takes the exact path, which holds for any decay)
        factorised = g.device.type != "meta" and bool((chunk_decay >= MIN_FACTORED_DECAY).all())
    V = pack(None, v, out=scratch("V", M, C, D_v))  # V: no op to fold its packing into
    if factorised:
        if gamma is None:
            K = pack(None, k, out=scratch("K", M, C, D_k))
            Q = pack(torch.mul, q, scale, out=scratch("Q", M, C, D_k))
        else:  # K̂ = diag(1/γ) K, Q̂ = scale diag(γ) Q: Q Kᵀ ⊙ Γ = Q̂ K̂ᵀ, and K̃ = diag(γ_C / γ) K = γ_C K̂
            K = pack(torch.div, k, gamma.unsqueeze(-1), out=scratch("K", M, C, D_k))
            Q = pack(torch.mul, q, (scale * gamma).unsqueeze(-1), out=scratch("Q", M, C, D_k))
        scores = torch.bmm(Q, K.mT, out=scratch("scores", M, C, C)).tril_()  # causal mask M with the diagonal
        K_end, write_scale = K, chunk_decay
    else:  # strong decay or a reset (γ = 0) in this block: each Γ_ij from its own segment sum, exact for g = −inf
        Gamma = decay_matrix(g).reshape(M, C, C)  # Γ_ij, 0 above the diagonal (so Γ ⊙ M = Γ)
        K = pack(None, k, out=scratch("K", M, C, D_k))
        Q = pack(torch.mul, q, scale, out=scratch("Q", M, C, D_k))
        scores = torch.bmm(Q, K.mT, out=scratch("scores", M, C, C))
        scores = scores.mul_(Gamma) if fast else scores * Gamma
        Q = Q.mul_(gamma.reshape(M, C, 1)) if fast else Q * gamma.reshape(M, C, 1)
        # each chunk's write decayed to its end, (diag(Γ_C·) K)ᵀ V, without dividing by a γ_j that may be 0
        K_end, write_scale = torch.mul(K, Gamma[:, -1, :, None], out=scratch("K_end", M, C, D_k)), None

    # The only sequential part: S_{i+1} = γ_C S_i + K̃_iᵀ V_i (a running sum without decay)
    decay = None if chunk_decay is None else chunk_decay.view(n, BH, 1, 1)
    starts, state = chunk_states(state, K_end, V, n=n, write_scale=write_scale, decay=decay, scratch=scratch)

    inter = torch.bmm(Q, starts, out=scratch("inter", M, C, D_v))  # diag(γ) Q S_start (scaled)
    intra = torch.bmm(scores, V, out=scratch("intra", M, C, D_v))  # (Q Kᵀ ⊙ Γ ⊙ M) V (scaled)
    return inter.view(n, B, H, C, D_v), intra.view(n, B, H, C, D_v), state


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, scale=None, normalize=False, initial_state=None, eps=1e-6):
    """``S_t = S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t`` (``/ (z_tᵀ q_t + eps)`` with ``z_t = z_{t−1} + k_t`` when
    ``normalize``): ``(B, T, H, ·)`` in, ``(o, S_T)`` (or ``(o, (S_T, z_T))``) out."""
    B, T, H, D_k = q.shape
    S, z = (initial_state if normalize else (initial_state, None)) if initial_state is not None else (None, None)
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if S is None else S
    z = q.new_zeros(B, H, D_k) if z is None else z
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        S = S + k[:, t, :, :, None] * v[:, t, :, None, :]
        o = torch.einsum("bhkv,bhk->bhv", S, q[:, t])
        if normalize:
            z = z + k[:, t]
            o = o / ((z * q[:, t]).sum(-1, keepdim=True) + eps)
        outputs.append(o)
    return torch.stack(outputs, dim=1), ((S, z) if normalize else S)
