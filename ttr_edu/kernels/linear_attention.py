"""Triton kernel for chunked causal linear attention, with the optional normaliser.

Same signature, checks and results as :func:`ttr_edu.ops.linear_attention_chunk`; the kernel itself is
:func:`ttr_edu.kernels._triton_kernels.linear_attention_fwd_kernel`.
"""

from __future__ import annotations

from typing import Any

import torch
import triton

from ttr_edu._internal.contract import State, check_inputs, compute_dtype, resolve_scale
from ttr_edu._internal.validation import check_positive_float, check_positive_int, guarded
from ttr_edu.kernels import _triton_kernels
from ttr_edu.kernels._dispatch import (
    KernelFunction,
    check_kernel_sizes,
    check_runnable,
    dot_precision,
    kernel_input,
    tile_sizes,
    varlen_grid_rows,
    varlen_state_dims,
    warps_for,
)
from ttr_edu.ops.linear_attention import linear_attention_chunk as _reference_chunk
from ttr_edu.ops.linear_attention import unpack_state

__all__ = ["linear_attention_chunk"]

_REFERENCE = "ttr_edu.ops.linear_attention_chunk"


def _launch(
    q, k, v, initial_state, *, scale: float, chunk_size: int, out_dtype: torch.dtype | None = None, cu_seqlens=None
):
    """Run the kernel on checked inputs; return ``(o, final_state)`` in the reference's dtypes (``o`` in
    ``out_dtype`` when given, else in q's dtype)."""
    device, state_dtype, out_dtype = q.device, compute_dtype(q.dtype), out_dtype or q.dtype
    B, T, H, d_k = q.shape
    d_v = v.shape[-1]
    q, k, v = (kernel_input(x, device) for x in (q, k, v))
    s0 = None if initial_state is None else initial_state.to(torch.float32).contiguous()
    rows = varlen_grid_rows(B, cu_seqlens)  # B, or N sequences
    offsets = None if cu_seqlens is None else cu_seqlens.to(device).contiguous()
    o = torch.empty(B, T, H, d_v, dtype=out_dtype if device.type == "cuda" else torch.float32, device=device)
    s_final = torch.empty(rows, H, d_k, d_v, dtype=torch.float32, device=device)
    block_k, block_v = tile_sizes(d_k, d_v, device)
    grid = (rows * H, triton.cdiv(d_v, block_v))  # rows * H on axis 0: CUDA caps axes 1 and 2 at 65 535 programs
    _triton_kernels.linear_attention_fwd_kernel[grid](
        q,
        k,
        v,
        o,
        s_final if s0 is None else s0,
        s_final,
        s_final if offsets is None else offsets,
        scale,
        T,
        H=H,
        D_K=d_k,
        D_V=d_v,
        BT=chunk_size,
        BK=block_k,
        BV=block_v,
        HAS_S0=s0 is not None,
        STORE_FINAL=True,
        PRECISION=dot_precision(q.dtype, device),
        IS_VARLEN=offsets is not None,
        num_warps=warps_for(block_k, block_v, device),
    )
    return o.to(out_dtype), s_final.to(state_dtype)


def _kernel(q, k, v, S0, z0, *, normalize: bool, eps: float, scale: float, chunk_size: int, cu_seqlens=None):
    """The kernel's answer as a flat tuple ``(o, S)`` or ``(o, S, z)``.

    The normaliser is linear attention with a value of 1: append a column of ones to ``v`` (and ``z`` to the
    state), and the kernel's last output column is ``z_tᵀ q_t``. One kernel serves both variants.
    """
    if not normalize:
        return _launch(q, k, v, S0, scale=scale, chunk_size=chunk_size, cu_seqlens=cu_seqlens)
    B, T, H, _ = q.shape
    v_ones = torch.cat([v, v.new_ones(B, T, H, 1)], dim=-1)
    # The reference's _unpack_state guarantees S0 and z0 are both given or both None.
    state = None if S0 is None else torch.cat([S0.float(), z0.float().unsqueeze(-1)], dim=-1)
    # numerator and normaliser stay in fp32 (fp64 for fp64 inputs) until the division, as in the reference
    o_ext, S_ext = _launch(
        q, k, v_ones, state, scale=scale, chunk_size=chunk_size, out_dtype=compute_dtype(q.dtype), cu_seqlens=cu_seqlens
    )
    o = (o_ext[..., :-1] / (o_ext[..., -1:] + eps)).to(q.dtype)
    return o, S_ext[..., :-1].contiguous(), S_ext[..., -1].contiguous()


def _reference(q, k, v, S0, z0, *, normalize: bool, **options):
    """The reference op's answer in the same flat form as :func:`_kernel` (for the backward pass)."""
    if normalize:
        state = None if S0 is None else (S0, z0)
        o, (S, z) = _reference_chunk(q, k, v, normalize=True, initial_state=state, output_final_state=True, **options)
        return o, S, z
    return _reference_chunk(q, k, v, initial_state=S0, output_final_state=True, **options)


@guarded(cap_chunk=False)  # the tiles need a power of two: check_kernel_sizes bounds it
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
    """Chunked causal linear attention as a Triton kernel (forward) with autograd.

    Computes exactly what :func:`ttr_edu.ops.linear_attention_chunk` computes: ``S_t = S_{t-1} + k_t v_tᵀ``,
    ``o_t = S_tᵀ (scale · q_t)`` (Katharopoulos et al. 2020; Schlag et al. 2021 eqs. 11-13, ``W = Sᵀ``), chunk by
    chunk: ``O = Q S + (Q Kᵀ ⊙ M) V``, ``S ← S + Kᵀ V`` (Yang et al. 2024). With ``normalize=True``,
    ``o_t = S_tᵀ q_t / (z_tᵀ q_t + eps)`` with ``z_t = z_{t-1} + k_t``, computed by the same kernel with a column
    of ones appended to ``v``.

    Args:
        q, k: ``(B, T, H, D_k)``, float16/bfloat16/float32/float64, D_k ≤ 256.
        v: ``(B, T, H, D_v)``, the dtype of q.
        scale: multiplies q; ``D_k ** -0.5`` when None.
        normalize: divide by ``z_tᵀ q_t + eps``; the state is then the pair ``(S, z)``, ``z`` ``(B, H, D_k)``.
        initial_state: ``S_0`` ``(B, H, D_k, D_v)`` (with ``normalize``, the pair ``(S_0, z_0)``) or None.
        output_final_state: also return the state after the last token.
        chunk_size: tokens per chunk, a power of two from 16 to 128 (the answer does not depend on it).
        eps: added to the normaliser; ignored without ``normalize``.
        cu_seqlens: fla's variable-length offsets, an integer tensor ``(N + 1,)`` (``B = 1``, sequences packed
            along T): one program per sequence and head, states ``(N, H, D_k, D_v)`` (``z``: ``(N, H, D_k)``).

    Returns:
        ``(o, final_state)``: ``o`` ``(B, T, H, D_v)`` in q's dtype; ``final_state`` ``S_T`` (or ``(S_T, z_T)``)
        in fp32 (fp64 for fp64 inputs), or None unless ``output_final_state``.

    The kernel computes in fp32 whatever the input dtype; ``tl.dot`` runs in ieee precision under the interpreter,
    tf32x3 (≈ fp32) for fp32/fp64 inputs and tf32 for fp16/bf16 inputs on a GPU (see ``_dispatch.dot_precision``).
    Under the interpreter (CPU), fp16/bf16 inputs are converted to fp32 before the launch, since the interpreter
    mishandles bf16, and ``o`` is rounded to the input dtype once at the end. Inputs that are not contiguous are
    copied, never misread.

    Backward: by recomputation through :func:`ttr_edu.ops.linear_attention_chunk` (PyTorch), so gradients are
    the reference's exactly; only the forward pass is a Triton kernel.

    Raises:
        TypeError, ValueError: as :func:`ttr_edu.ops.linear_attention_chunk`, for the same mistakes.
        ValueError: ``chunk_size`` not a power of two in [16, 128], D_k > 256, or ``T·H·max(D_k, D_v) ≥ 2³⁰``
            (kernel limits).
        RuntimeError: CPU tensors without Triton's interpreter (the message says how to switch it on).
        ValueError: a device that is neither CUDA nor CPU (named ``q``).
    """
    # The reference op's checks, in its order and with its helpers, then the kernel's own limits.
    check_positive_int("chunk_size", chunk_size)
    dims = check_inputs(q, k, v)
    scale = resolve_scale(scale, dims["D_k"])
    check_positive_float("eps", eps, allow_zero=True)
    S0, z0 = unpack_state(initial_state, normalize, varlen_state_dims(dims, cu_seqlens, q), q)
    check_runnable(q.device, _REFERENCE)
    check_kernel_sizes(dims["D_k"], chunk_size, _REFERENCE, T=dims["T"], H=dims["H"], d_v=dims["D_v"] + bool(normalize))

    options = {
        "normalize": bool(normalize),
        "eps": eps,
        "scale": scale,
        "chunk_size": chunk_size,
        "cu_seqlens": cu_seqlens,
    }
    if normalize:
        o, S, z = KernelFunction.apply(_kernel, _reference, options, q, k, v, S0, z0)
        return o, ((S, z) if output_final_state else None)
    o, S = KernelFunction.apply(_kernel, _reference, options, q, k, v, S0, z0)
    return o, (S if output_final_state else None)
