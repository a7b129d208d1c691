"""Triton kernels for the chunked delta rule and the chunked gated delta rule (WY/UT form).

Same signatures, checks and results as :func:`ttr_edu.ops.delta_rule_chunk` and
:func:`ttr_edu.ops.gated_delta_rule_chunk`; the kernel itself is
:func:`ttr_edu.kernels._triton_kernels.delta_rule_fwd_kernel`.
"""

from __future__ import annotations

from typing import Any

import torch
import triton

from ttr_edu._internal.contract import (
    STATE,
    State,
    check_inputs,
    check_log_decay,
    check_state,
    compute_dtype,
    require_tensor,
    resolve_scale,
)
from ttr_edu._internal.contract import check_stability as check_stability_of
from ttr_edu._internal.validation import check_positive_int, guarded
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
from ttr_edu.ops.delta_rule import delta_rule_chunk as _reference_delta
from ttr_edu.ops.gated_delta_rule import gated_delta_rule_chunk as _reference_gated

__all__ = ["delta_rule_chunk", "gated_delta_rule_chunk"]


def _launch(q, k, v, beta, g, initial_state, *, scale: float, chunk_size: int, cu_seqlens=None):
    """Run the kernel on checked inputs; return ``(o, final_state)``: ``o`` in q's dtype, the state in the
    reference's dtype (fp32, or fp64 for fp64 inputs, though the kernel itself computes in fp32)."""
    device, out_dtype = q.device, q.dtype
    B, T, H, d_k = q.shape
    d_v = v.shape[-1]
    q, k, v, beta, g = (kernel_input(x, device) for x in (q, k, v, beta, g))
    s0 = None if initial_state is None else initial_state.to(torch.float32).contiguous()
    rows = varlen_grid_rows(B, cu_seqlens)  # B, or N sequences
    offsets = None if cu_seqlens is None else cu_seqlens.to(device).contiguous()
    o = torch.empty(B, T, H, d_v, dtype=q.dtype, device=device)
    s_final = torch.empty(rows, H, d_k, d_v, dtype=torch.float32, device=device)
    block_k, block_v = tile_sizes(d_k, d_v, device)
    grid = (rows * H, triton.cdiv(d_v, block_v))  # rows * H on axis 0: CUDA caps axes 1 and 2 at 65 535 programs
    _triton_kernels.delta_rule_fwd_kernel[grid](
        q,
        k,
        v,
        beta,
        beta if g is None else g,
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
        USE_G=g is not None,
        HAS_S0=s0 is not None,
        STORE_FINAL=True,
        PRECISION=dot_precision(q.dtype, device),
        IS_VARLEN=offsets is not None,
        num_warps=warps_for(block_k, block_v, device),
    )
    return o.to(out_dtype), s_final.to(compute_dtype(out_dtype))


def _delta_kernel(q, k, v, beta, initial_state, **options):
    return _launch(q, k, v, beta, None, initial_state, **options)


def _delta_reference(q, k, v, beta, initial_state, **options):
    return _reference_delta(
        q, k, v, beta, initial_state=initial_state, output_final_state=True, check_stability="ignore", **options
    )


def _gated_kernel(q, k, v, g, beta, initial_state, **options):
    return _launch(q, k, v, beta, g, initial_state, **options)


def _gated_reference(q, k, v, g, beta, initial_state, **options):
    return _reference_gated(
        q, k, v, g, beta, initial_state=initial_state, output_final_state=True, check_stability="ignore", **options
    )


def _check(
    q, k, v, beta, scale, initial_state, chunk_size, check_stability, reference: str, g=None, cu_seqlens=None
) -> float:
    """The reference op's checks, in its order and with its helpers, then the kernel's own limits.

    Returns the resolved ``scale``.
    """
    check_positive_int("chunk_size", chunk_size)
    dims = check_inputs(q, k, v, **({"beta": beta} if g is None else {"g": g, "beta": beta}))
    scale = resolve_scale(scale, dims["D_k"])
    state_dims = varlen_state_dims(dims, cu_seqlens, q)  # (N, H, D_k, D_v) states with cu_seqlens
    if initial_state is not None:
        check_state("initial_state", initial_state, state_dims, STATE, q.device)
    check_stability_of(beta, k, check_stability)
    if g is not None:
        # The kernel forms in-chunk decays as differences of one running sum: a reset (g = -inf) would give
        # -inf - (-inf) = NaN. The reference op handles resets exactly; the kernel refuses them.
        check_log_decay(g, allow_reset=False)
    check_runnable(q.device, reference)
    check_kernel_sizes(dims["D_k"], chunk_size, reference, T=dims["T"], H=dims["H"], d_v=dims["D_v"])
    return scale


@guarded(cap_chunk=False)  # the tiles need a power of two: check_kernel_sizes bounds it
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
    """The delta rule, chunked in the WY/UT form, as a Triton kernel (forward) with autograd.

    Computes exactly what :func:`ttr_edu.ops.delta_rule_chunk` computes: per token
    ``S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ`` and ``o_t = S_tᵀ (scale · q_t)`` (Schlag et al. 2021 eq. 29,
    with ``W = Sᵀ``), evaluated chunk by chunk as fla does (Yang et al. 2024):
    ``T = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)``, ``W = T K``, ``U = T V − W S``,
    ``O = Q S + (Q Kᵀ ⊙ M) U``, ``S ← S + Kᵀ U``.

    Args:
        q, k: ``(B, T, H, D_k)``, float16/bfloat16/float32/float64, D_k ≤ 256.
        v: ``(B, T, H, D_v)``, the dtype of q.
        beta: ``(B, T, H)`` writing strengths.
        scale: multiplies q; ``D_k ** -0.5`` when None.
        initial_state: ``(B, H, D_k, D_v)`` or None (zeros).
        output_final_state: also return the state after the last token.
        chunk_size: tokens per chunk, a power of two from 16 to 128 (the answer does not depend on it).
        check_stability: ``"warn"`` (default), ``"raise"`` or ``"ignore"`` when ``β ‖k‖²`` leaves ``[0, 2]``.
        cu_seqlens: fla's variable-length offsets, an integer tensor ``(N + 1,)`` (``B = 1``, sequences packed
            along T): one program per sequence and head reads its own ``bos:eos`` range, and the states are
            ``(N, H, D_k, D_v)``. See :func:`ttr_edu.ops.delta_rule_chunk`.

    Returns:
        ``(o, final_state)``: ``o`` is ``(B, T, H, D_v)`` in q's dtype; ``final_state`` is ``(B, H, D_k, D_v)``
        fp32 (fp64 for fp64 inputs), or None unless ``output_final_state``.

    The kernel computes in fp32 whatever the input dtype; ``tl.dot`` runs in ieee precision under the interpreter,
    tf32x3 (≈ fp32) for fp32/fp64 inputs and tf32 for fp16/bf16 inputs on a GPU (see ``_dispatch.dot_precision``).
    Under the interpreter (CPU), fp16/bf16 inputs are converted to fp32 before the launch, since the interpreter
    mishandles bf16, and ``o`` is rounded to the input dtype once at the end. Inputs that are not contiguous are
    copied, never misread.

    Backward: by recomputation through :func:`ttr_edu.ops.delta_rule_chunk` (PyTorch), so gradients are the
    reference's exactly; only the forward pass is a Triton kernel.

    Raises:
        TypeError, ValueError: as :func:`ttr_edu.ops.delta_rule_chunk`, for the same mistakes.
        ValueError: ``chunk_size`` not a power of two in [16, 128], D_k > 256, or ``T·H·max(D_k, D_v) ≥ 2³⁰``
            (kernel limits).
        RuntimeError: CPU tensors without Triton's interpreter (the message says how to switch it on).
        ValueError: a device that is neither CUDA nor CPU (named ``q``).
    """
    reference = "ttr_edu.ops.delta_rule_chunk"
    scale = _check(q, k, v, beta, scale, initial_state, chunk_size, check_stability, reference, cu_seqlens=cu_seqlens)
    options = {"scale": scale, "chunk_size": chunk_size, "cu_seqlens": cu_seqlens}
    o, state = KernelFunction.apply(_delta_kernel, _delta_reference, options, q, k, v, beta, initial_state)
    return o, (state if output_final_state else None)


@guarded(cap_chunk=False)  # the tiles need a power of two: check_kernel_sizes bounds it
def gated_delta_rule_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    check_stability: str = "warn",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """The gated delta rule, chunked in the WY/UT form, as a Triton kernel (forward) with autograd.

    Computes exactly what :func:`ttr_edu.ops.gated_delta_rule_chunk` computes: per token, with the decay applied
    before the error as in fla (Yang, Kautz, Hatamizadeh 2025, Gated DeltaNet),
    ``S_t = α_t S_{t-1} + β_t k_t (v_t − α_t S_{t-1}ᵀ k_t)ᵀ`` with ``α_t = exp(g_t)``, and ``o_t = S_tᵀ (scale · q_t)``.
    Per chunk, with ``γ_i = exp(Σ_{s≤i} g_s)`` and ``Γ_ij = γ_i / γ_j``:
    ``T = (I + tril(diag(β) (K Kᵀ ⊙ Γ), −1))⁻¹ diag(β)``, ``W = T diag(γ) K``, ``U = T V − W S``,
    ``O = diag(γ) Q S + (Q Kᵀ ⊙ Γ ⊙ M) U``, ``S ← γ_last S + (diag(γ_last/γ) K)ᵀ U``.

    Args:
        q, k: ``(B, T, H, D_k)``, float16/bfloat16/float32/float64, D_k ≤ 256.
        v: ``(B, T, H, D_v)``, the dtype of q.
        g: ``(B, T, H)`` log decay (≤ 0 for a decay).
        beta: ``(B, T, H)`` writing strengths.
        scale, initial_state, output_final_state, chunk_size, check_stability, cu_seqlens: as
            :func:`delta_rule_chunk`.

    Returns:
        ``(o, final_state)`` as :func:`delta_rule_chunk`.

    Precision, fp16/bf16 under the interpreter and strided inputs: as :func:`delta_rule_chunk`.

    Backward: by recomputation through :func:`ttr_edu.ops.gated_delta_rule_chunk` (PyTorch).

    Raises:
        TypeError, ValueError: as :func:`ttr_edu.ops.gated_delta_rule_chunk`, for the same mistakes.
        ValueError: ``chunk_size`` not a power of two in [16, 128], D_k > 256, or ``T·H·max(D_k, D_v) ≥ 2³⁰``
            (kernel limits); ``g = −inf`` (a full reset: use the reference op, which handles it exactly).
        RuntimeError: CPU tensors without Triton's interpreter.
        ValueError: a device that is neither CUDA nor CPU (named ``q``).
        TypeError: ``g=None`` (the ungated rule is :func:`delta_rule_chunk`).
    """
    reference = "ttr_edu.ops.gated_delta_rule_chunk"
    require_tensor("g", g)  # g=None would run the ungated rule, which ops.gated_delta_rule_chunk refuses
    scale = _check(
        q, k, v, beta, scale, initial_state, chunk_size, check_stability, reference, g=g, cu_seqlens=cu_seqlens
    )
    options = {"scale": scale, "chunk_size": chunk_size, "cu_seqlens": cu_seqlens}
    o, state = KernelFunction.apply(_gated_kernel, _gated_reference, options, q, k, v, g, beta, initial_state)
    return o, (state if output_final_state else None)
