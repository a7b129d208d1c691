"""Longhorn: the implicit (proximal) online step, exact and in the published layer's diagonal approximation.

Longhorn (Liu, Wang, Wu, Feng, Stone, Liu 2024, "State Space Models are Amortized Online Learners") asks each step
to stay close to the old memory while fitting the new pair, and solves that exactly:

    S_t = argmin_S ‖S − S_{t−1}‖²_F + β_t ‖Sᵀk_t − v_t‖²

Setting the gradient to zero, ``S − S_{t−1} + β k (Sᵀk − v)ᵀ = 0``; multiply by ``kᵀ`` to get the new prediction
``Sᵀk = (S_{t−1}ᵀk + β‖k‖² v) / (1 + β‖k‖²)``, and put it back:

    S_t = S_{t−1} + ε_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ,     ε_t = β_t / (1 + β_t ‖k_t‖²)

the delta rule at the step ``ε``. Since ``ε ‖k‖² = β‖k‖² / (1 + β‖k‖²) ∈ [0, 1)``, the step is stable for every
``β ≥ 0``, where the explicit (delta-rule) step needs ``β ‖k‖² ≤ 2``. ``β`` may be one number per token and head,
``(B, T, H)``, or one per value channel, ``(B, T, H, D_v)`` (Longhorn's β is a vector over the value channels;
each column of ``S`` is then its own proximal problem with its own ``ε``).

Which is which:

* :func:`longhorn_recurrent` and :func:`longhorn_chunk` compute the **exact** implicit step above (the objective's
  closed form, ``(I − ε k kᵀ)`` acting on ``S``);
* :func:`longhorn_diagonal_recurrent` is the **published layer's** recurrence: Longhorn replaces the rank-one
  ``k kᵀ`` by its diagonal ``diag(k ⊙ k)`` so that the update is elementwise (a Mamba-style selective scan),
  ``S_t[i, j] = (1 − ε_t[j] k_t[i]²) S_{t−1}[i, j] + ε_t[j] k_t[i] v_t[j]``. It is an approximation of the step, and
  is also stable for all ``β ≥ 0`` (each factor ``1 − ε k_i²`` lies in ``(0, 1]``).

  Checked against the authors' code: the pure-PyTorch reference ``selective_scan_online7_ref`` in
  ``mamba_ssm/ops/selective_scan_interface.py`` and the CUDA forward ``selective_scan_online_fwd_kernel.cuh`` of
  Cranial-XIX/longhorn_cuda (commits 1be5222 and 4b1e3ba), and ``Longhorn.step`` in Cranial-XIX/longhorn
  (``models/longhorn.py``). There the state is ``Sᵀ`` (value channels × ``d_state``), their ``u`` (the value
  channels) is our ``v``, their ``k`` and ``q`` (Mamba's ``B`` and ``C`` slots, shared by all channels: one head,
  ``D_k = d_state``) are ours, and ``β = sigmoid(W_dt x + b)`` per value channel, with ``ε = β / (1 + β ‖k‖²)``
  over the whole key: the same recurrence, with no ``A``, ``exp`` or softplus. Their ``q`` is not scaled: pass
  ``scale=1.0`` to reproduce their outputs. The skip term ``D u`` and the ``silu(z)`` gate are outside the
  recurrence, in the outer layer. The paper's own equations were not read for this check.
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
    check_nonnegative,
    check_state,
    compute_dtype,
    fla_output,
    resolve_scale,
    shares_doc,
    zero_state,
)
from ttr_edu._internal.validation import Dims, check_positive_int, check_same_device, guarded

from .delta_rule import chunk_forward

__all__ = ["longhorn_recurrent", "longhorn_chunk", "longhorn_diagonal_recurrent", "longhorn_step_size"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        beta: the objective's weight β ≥ 0, ``(B, T, H)`` or per value channel ``(B, T, H, D_v)``, any floating dtype.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla).
        initial_state: ``S_0`` ``(B, H, D_k, D_v)``; ``None`` means zero.
        output_final_state: also return ``S_T`` (fp32, or fp64 for fp64 inputs).
        chunk_size: (``longhorn_chunk`` only) tokens per chunk, any positive int.

    Returns:
        ``(o, S_T)`` (``S_T`` is ``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in the dtype
        of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v.
        ValueError: mismatched shapes (the message names the dims), T = 0, different devices, a bad ``scale`` or
            ``chunk_size``, a ``beta`` that is negative or not finite.
"""


def _step_size(beta: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``ε = β / (1 + β ‖k‖²)`` on checked heads-first tensors: ``beta`` ``(..., 1 or D_v)``, ``k`` ``(..., D_k)``."""
    return beta / (1.0 + beta * k.pow(2).sum(-1, keepdim=True))


@guarded
def longhorn_step_size(beta: torch.Tensor, k: torch.Tensor, *, per_channel: bool = False) -> torch.Tensor:
    """The implicit step ``ε = β / (1 + β ‖k‖²)`` of every token (Liu et al. 2024; the module docstring derives it).

    Args:
        beta: the objective's weight β ≥ 0, ``(B, T, H)``, or ``(B, T, H, D_v)`` with ``per_channel``, floating.
        k: keys ``(B, T, H, D_k)``, floating, on the device of ``beta``.
        per_channel: ``beta`` holds one weight per value channel. Said explicitly because nothing else here knows
            ``D_v``: a per-channel ``beta`` that lost its last axis would otherwise pass for a per-token one.

    Returns:
        ``ε`` in the shape of ``beta``, in the compute dtype (fp32, or fp64 when both are fp64); ``ε ‖k‖² < 1``.

    Raises:
        TypeError: a non-tensor or a non-floating dtype.
        ValueError: shapes that disagree (named dims), a ``beta`` of the other form than ``per_channel`` says, an
            empty dim, another device, a negative ``beta``.
    """
    dims = Dims()
    dims.bind("k", k, QK)
    if not per_channel and isinstance(beta, torch.Tensor) and beta.dim() == 4:
        raise ValueError(
            f"beta: expected (B, T, H), one weight per token and head, got shape {tuple(beta.shape)}; a weight per "
            "value channel (B, T, H, D_v) needs per_channel=True"
        )
    dims.bind("beta", beta, ("B", "T", "H", "D_v") if per_channel else PER_TOKEN)
    check_nonempty(dims, k=("B", "T", "H", "D_k"))
    check_same_device(k=k, beta=beta)
    _check_beta(beta)
    dtype = torch.float64 if beta.dtype == k.dtype == torch.float64 else torch.float32
    beta, k = beta.to(dtype), k.to(dtype)
    eps = _step_size(beta if per_channel else beta[..., None], k)
    return eps if per_channel else eps[..., 0]


def _check_beta(beta: torch.Tensor) -> None:
    check_nonnegative("beta", beta, "a weight (the implicit step is stable for every beta >= 0)")


def _prepare(q, k, v, beta, scale, initial_state):
    dims = check_inputs(q, k, v)
    if not isinstance(beta, torch.Tensor) or beta.dim() != 4:
        dims.bind("beta", beta, ("B", "T", "H"))
        per_channel = False
    else:
        dims.bind("beta", beta, V)
        per_channel = True
    if beta.device != q.device:
        raise ValueError(f"beta: all tensors must be on one device, got q on {q.device}, beta on {beta.device}")
    _check_beta(beta)
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    if initial_state is not None:
        check_state("initial_state", initial_state, dims, STATE, q.device)
    S = zero_state(dims, dtype, q.device) if initial_state is None else initial_state.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·)
    beta = beta.to(dtype).transpose(1, 2)
    beta = beta if per_channel else beta[..., None]  # (B, H, T, 1 or D_v)
    return q * scale, k, v, beta, S


@guarded
@shares_doc(_SHARED_DOC)
def longhorn_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, Any]:
    """Exact implicit step, token by token: ``S_t = S_{t−1} + k_t (ε_t ⊙ (v_t − S_{t−1}ᵀ k_t))ᵀ``; ``o_t = S_tᵀ q_t``.

    Source: Liu et al. 2024, the closed form of the online objective (§3, "Longhorn"). Cost ``O(T D_k D_v)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, S = _prepare(q, k, v, beta, scale, initial_state)
    eps = _step_size(beta, k)  # (B, H, T, 1 or D_v)
    outputs = []
    for t in range(q.shape[2]):
        k_t = k[:, :, t]
        error = v[:, :, t] - torch.einsum("b h k v, b h k -> b h v", S, k_t)
        S = S + torch.einsum("b h k, b h v -> b h k v", k_t, eps[:, :, t] * error)
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    o = fla_output(torch.stack(outputs, dim=1), out_dtype)
    return o, (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def longhorn_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, Any]:
    """Exact implicit step in chunks: the delta rule's WY/UT chunk form run at the step ``ε = β/(1 + β‖k‖²)``.

    With a per-channel β, each value channel ``j`` is its own delta rule (step ``ε[j]``), so the channels run as
    extra heads with ``D_v = 1`` (``D_v`` times the key work: a teaching form, not a kernel).
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    check_positive_int("chunk_size", chunk_size)
    q, k, v, beta, S = _prepare(q, k, v, beta, scale, initial_state)
    eps = _step_size(beta, k)
    B, H, T, D_k = q.shape
    D_v = v.shape[-1]
    if eps.shape[-1] == 1:
        o, S = chunk_forward(q, k, v, eps[..., 0], S, chunk_size)
        return fla_output(o, out_dtype), (S if output_final_state else None)
    # One head per (h, j): keys and queries repeated over j, value channel j alone, step ε[j].
    rep = lambda x: x[:, :, None].expand(B, H, D_v, T, D_k).reshape(B, H * D_v, T, D_k)  # noqa: E731
    v_j = v.permute(0, 1, 3, 2).reshape(B, H * D_v, T, 1)
    eps_j = eps.permute(0, 1, 3, 2).reshape(B, H * D_v, T)
    S_j = S.permute(0, 1, 3, 2).reshape(B, H * D_v, D_k, 1)
    o, S_j = chunk_forward(rep(q), rep(k), v_j, eps_j, S_j, chunk_size)  # o: (B, T, H·D_v, 1)
    o = o.reshape(B, T, H, D_v)
    S = S_j.reshape(B, H, D_v, D_k).transpose(-1, -2)
    return fla_output(o, out_dtype), (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def longhorn_diagonal_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, Any]:
    """The published Longhorn layer: ``k kᵀ`` replaced by ``diag(k ⊙ k)``, an elementwise (selective-scan) update.

    ``S_t = (1 − k_t² ε_tᵀ) ⊙ S_{t−1} + k_t (ε_t ⊙ v_t)ᵀ``, ``o_t = S_tᵀ q_t``: the recurrence of the authors' scan
    (Liu et al. 2024; Cranial-XIX/longhorn_cuda, ``selective_scan_online7_ref``, see the module docstring for the
    mapping; their ``q`` is unscaled, so ``scale=1.0`` reproduces their outputs). An approximation of
    :func:`longhorn_recurrent`; equal to it when ``k`` is one-hot.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, S = _prepare(q, k, v, beta, scale, initial_state)
    eps = _step_size(beta, k)  # (B, H, T, 1 or D_v)
    outputs = []
    for t in range(q.shape[2]):
        k_t, eps_t = k[:, :, t, :, None], eps[:, :, t, None, :]  # (B, H, D_k, 1), (B, H, 1, 1 or D_v)
        S = (1.0 - k_t.pow(2) * eps_t) * S + k_t * (eps_t * v[:, :, t, None, :])
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    o = fla_output(torch.stack(outputs, dim=1), out_dtype)
    return o, (S if output_final_state else None)


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, beta, scale=None, initial_state=None):
    """``S_t = argmin_S ‖S − S_{t−1}‖² + β_t ‖Sᵀk_t − v_t‖²`` in its closed form, the delta rule at
    ``ε_t = β_t / (1 + β_t ‖k_t‖²)``; ``beta`` ``(B, T, H)`` or per value channel ``(B, T, H, D_v)``; ``(o, S_T)``."""
    B, T, H, D_k = q.shape
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if initial_state is None else initial_state
    q = q * (D_k**-0.5 if scale is None else scale)
    beta = beta if beta.dim() == 4 else beta[..., None]
    outputs = []
    for t in range(T):
        eps = beta[:, t] / (1 + beta[:, t] * k[:, t].pow(2).sum(-1, keepdim=True))  # (B, H, 1 or D_v)
        error = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])
        S = S + k[:, t, :, :, None] * (eps * error)[:, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S


def naive_diagonal(q, k, v, beta, scale=None, initial_state=None):
    """The published layer's diagonal approximation:
    ``S_t[i, j] = (1 − ε_t[j] k_t[i]²) S_{t−1}[i, j] + ε_t[j] k_t[i] v_t[j]``; ``(o, S_T)``."""
    B, T, H, D_k = q.shape
    S = q.new_zeros(B, H, D_k, v.shape[-1]) if initial_state is None else initial_state
    q = q * (D_k**-0.5 if scale is None else scale)
    beta = beta if beta.dim() == 4 else beta[..., None]
    outputs = []
    for t in range(T):
        eps = (beta[:, t] / (1 + beta[:, t] * k[:, t].pow(2).sum(-1, keepdim=True)))[:, :, None, :]  # (B, H, 1, ·)
        kk = k[:, t, :, :, None]
        S = (1 - eps * kk**2) * S + eps * kk * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outputs, dim=1), S
