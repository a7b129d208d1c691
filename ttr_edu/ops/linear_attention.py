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

import torch

from ttr_edu._internal.contract import (
    STATE,
    check_inputs,
    check_state,
    compute_dtype,
    resolve_scale,
    shares_doc,
    to_chunks,
    zero_state,
)
from ttr_edu._internal.validation import check_chunk_size, check_positive_float, guarded

from ._chunking import chunk_blocks, chunks_per_block
from ._varlen import run_varlen

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
            shape ``(B, H, D_k)``); ``None`` means zero.
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
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, or a wrongly typed ``initial_state``.
        ValueError: mismatched shapes (named dims in the message), different devices, a bad ``scale``/``eps``.
"""


def _prepare(q, k, v, scale, normalize, eps, initial_state):
    """Check everything, upcast, scale q; return heads-first tensors ``(B, H, T, ·)`` and the initial (S, z)."""
    dims = check_inputs(q, k, v)
    scale = resolve_scale(scale, dims["D_k"])
    check_positive_float("eps", eps, allow_zero=True)
    dtype = compute_dtype(q.dtype)
    S0, z0 = unpack_state(initial_state, normalize, dims, q.device)
    S = zero_state(dims, dtype, q.device) if S0 is None else S0.to(dtype)
    z = None
    if normalize:
        z = q.new_zeros(dims["B"], dims["H"], dims["D_k"], dtype=dtype) if z0 is None else z0.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    return q * scale, k, v, S, z


def unpack_state(initial_state, normalize, dims, device):
    """``initial_state`` checked against the inputs' ``dims``: ``(S, None)`` without ``normalize``, ``(S, z)`` with it
    (``(None, None)`` for no state). Shared with the Triton kernel, which takes the same states."""
    if initial_state is None:
        return None, None
    if normalize:
        if not (isinstance(initial_state, (tuple, list)) and len(initial_state) == 2):
            raise TypeError(
                "initial_state: with normalize=True expected a tuple (S, z) of shapes (B, H, D_k, D_v) and "
                f"(B, H, D_k), got {type(initial_state).__name__}"
            )
        S0, z0 = initial_state
        check_state("initial_state[0] (S)", S0, dims, STATE, device)
        check_state("initial_state[1] (z)", z0, dims, ("B", "H", "D_k"), device)
        return S0, z0
    if isinstance(initial_state, (tuple, list)):
        raise TypeError(
            "initial_state: with normalize=False expected the tensor S of shape (B, H, D_k, D_v), got a "
            f"{type(initial_state).__name__} (the pair (S, z) is the state of normalize=True)"
        )
    check_state("initial_state", initial_state, dims, STATE, device)
    return initial_state, None


def _finish(o, normalizer, eps, S, z, out_dtype, output_final_state):
    """Divide by the normaliser (if any), go back to ``(B, T, H, D_v)`` and the input dtype."""
    if normalizer is not None:
        o = o / (normalizer.unsqueeze(-1) + eps)
    o = o.transpose(1, 2).to(out_dtype)
    if not output_final_state:
        return o, None
    return o, ((S, z) if z is not None else S)


@guarded
@shares_doc(_SHARED_DOC)
def linear_attention_recurrent(
    q, k, v, scale=None, normalize=False, initial_state=None, output_final_state=False, eps=1e-6, cu_seqlens=None
):
    """Recurrent form: one state update per token, ``S_t = S_{t-1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``.

    Cost ``O(T D_k D_v)``, memory ``O(D_k D_v)`` for the state. Source: Katharopoulos et al. 2020, eqs. 16-20;
    Schlag et al. 2021, eqs. 11-13.
    """
    if cu_seqlens is not None:
        return run_varlen(
            linear_attention_recurrent,
            cu_seqlens,
            dict(q=q, k=k, v=v),
            initial_state,
            output_final_state,
            scale=scale,
            normalize=normalize,
            eps=eps,
        )
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, S, z = _prepare(q, k, v, scale, normalize, eps, initial_state)
    outputs, normalizers = [], []
    for t in range(q.shape[2]):
        S = S + torch.einsum("b h k, b h v -> b h k v", k[:, :, t], v[:, :, t])
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
        if z is not None:
            z = z + k[:, :, t]
            normalizers.append(torch.einsum("b h k, b h k -> b h", z, q[:, :, t]))
    o = torch.stack(outputs, dim=2)  # (B, H, T, D_v)
    normalizer = torch.stack(normalizers, dim=2) if z is not None else None
    return _finish(o, normalizer, eps, S, z, out_dtype, output_final_state)


@guarded
@shares_doc(_SHARED_DOC)
def linear_attention_parallel(
    q, k, v, scale=None, normalize=False, initial_state=None, output_final_state=False, eps=1e-6
):
    """Parallel (T×T) form: ``O = Q S_0 + (Q Kᵀ ⊙ M) V`` with ``M`` the causal mask, diagonal included.

    This is "attention without the softmax" (Katharopoulos et al. 2020, eq. 4 with φ applied outside).
    Cost ``O(T² (D_k + D_v))``, memory ``O(T²)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, S0, z0 = _prepare(q, k, v, scale, normalize, eps, initial_state)
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
def linear_attention_chunk(
    q,
    k,
    v,
    scale=None,
    normalize=False,
    initial_state=None,
    output_final_state=False,
    chunk_size=64,
    eps=1e-6,
    cu_seqlens=None,
):
    """Chunkwise form: T×T attention inside chunks of ``C = chunk_size`` tokens, the state between chunks.

    For chunk ``n`` with state ``S_n`` at its start (Yang et al. 2024, "chunkwise parallel form"):

        O_n = Q_n S_n + (Q_n K_nᵀ ⊙ M) V_n,      S_{n+1} = S_n + K_nᵀ V_n.

    The chunk states are an exclusive prefix sum over chunks, so no Python loop over time is needed.
    Cost ``O(T C (D_k + D_v) + T D_k D_v)``, memory ``O(T C + (T / C) D_k D_v)``: nothing of size T×T.
    Any positive ``chunk_size`` works, and T need not be a multiple of it (the last chunk is zero-padded).
    """
    if cu_seqlens is not None:
        return run_varlen(
            linear_attention_chunk,
            cu_seqlens,
            dict(q=q, k=k, v=v),
            initial_state,
            output_final_state,
            scale=scale,
            normalize=normalize,
            eps=eps,
            chunk_size=chunk_size,
        )
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    chunk_size = check_chunk_size(chunk_size, q)  # capped at T
    q, k, v, S0, z0 = _prepare(q, k, v, scale, normalize, eps, initial_state)
    if z0 is None:  # without the normaliser: a block of chunks at a time, gathered from fla's layout
        o, S = _blockwise(q, k, v, S0, chunk_size)
        return _finish(o, None, eps, S, None, out_dtype, output_final_state)
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


def _blockwise(q, k, v, S, chunk_size):
    """The chunk form without the normaliser, a block of chunks at a time (:func:`ttr_edu.ops._chunking.chunk_blocks`
    gathers each block in one pass from fla's layout, and its intermediates stay in cache): per block, all chunks'
    ``Q Kᵀ ⊙ M`` and ``Kᵀ V`` at once, the states each chunk starts from by a running sum, then all outputs at once.
    Takes heads-first ``q`` (scaled), ``k``, ``v`` and ``S`` ``(B, H, D_k, D_v)``; returns heads-first ``o`` and
    ``S_T``."""
    B, H, T, D_k = q.shape
    D_v, C = v.shape[-1], chunk_size
    per_block = chunks_per_block(B, H, C)
    S = S.flatten(0, 1)  # (B·H, D_k, D_v)
    o = q.new_empty(B, -(-T // C) * C, H, D_v)
    for first, last, block in chunk_blocks([k, v, q], C, per_block):
        n = last - first
        x = block.flatten(0, 2)  # (n·B·H, C, W): [K V Q] of each chunk of each head
        kc, vc, qc = x[..., :D_k], x[..., D_k : D_k + D_v], x[..., D_k + D_v :]
        chunk_kv = (kc.mT @ vc).unflatten(0, (n, -1))  # what each chunk writes
        starts = []
        for i in range(n):  # the only sequential part: S ← S + Kᵀ V
            starts.append(S)
            S = S + chunk_kv[i]
        o_block = ((qc @ kc.mT).tril_() @ vc).baddbmm_(qc, torch.cat(starts))  # Q S + (Q Kᵀ ⊙ M) V
        o[:, first * C : last * C].view(B, n, C, H, D_v).copy_(o_block.unflatten(0, (n, B, H)).permute(1, 0, 3, 2, 4))
    return o[:, :T].transpose(1, 2), S.unflatten(0, (B, H))
