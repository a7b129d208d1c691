"""What every op in :mod:`ttr_edu.ops` shares: argument checks, the compute dtype, padding to whole chunks.

The contract (CONTRIBUTING.md, "Conventions"; the flash-linear-attention convention):

* ``q, k`` are ``(B, T, H, D_k)``, ``v`` is ``(B, T, H, D_v)``, ``beta`` and the log decay ``g`` are ``(B, T, H)``;
* the maths runs in fp32 (fp64 when the inputs are fp64); the state stays in that dtype and ``o`` is cast back to
  the dtype of ``q``;
* every op returns ``(o, final_state)`` when ``output_final_state`` and ``(o, None)`` otherwise.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ttr_edu._internal.validation import Dims, check_positive_float, check_same_device, finite_checks_enabled

QK = ("B", "T", "H", "D_k")
V = ("B", "T", "H", "D_v")
PER_TOKEN = ("B", "T", "H")
STATE = ("B", "H", "D_k", "D_v")


#: What an op carries between calls: the state ``S`` ``(B, H, D_k, D_v)``, or a tuple of tensors where it is more
#: (``(S, z)`` of normalised linear attention, ``(S, P)`` of RLS, the MLP's ``(W1, W2)``, Titans' memory and momentum).
State = torch.Tensor | tuple[Any, ...]


def shares_doc(shared: str):
    """A decorator appending ``shared`` (the ``Args``/``Returns`` that the forms of one layer have in common) to a
    function's docstring; under ``python -OO`` docstrings are ``None`` and stay so."""

    def decorate(fn):
        if fn.__doc__ is not None:
            fn.__doc__ += shared
        return fn

    return decorate


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the maths runs in: fp64 stays fp64, everything else is upcast to fp32 (as fla's references do)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_inputs(q, k, v, **per_token) -> Dims:
    """Check ``q, k, v`` (and the per-token ``(B, T, H)`` tensors given by keyword, e.g. ``beta=beta``).

    Non-finite values are refused by :func:`ttr_edu._internal.validation.guarded`, which wraps every public op (the log
    decay ``g`` here, by :func:`check_log_decay`).

    Raises:
        TypeError: a non-tensor, an integer dtype, or ``q, k, v`` of different dtypes.
        ValueError: a shape that disagrees with the fla layout, ``T``, ``B``, ``H``, ``D_k`` or ``D_v`` of 0, or
            tensors on different devices.
    """
    dims = Dims()
    dims.bind("q", q, QK)
    dims.bind("k", k, QK)
    dims.bind("v", v, V)
    for name, x in per_token.items():
        dims.bind(name, x, PER_TOKEN)
    if dims["T"] == 0:
        raise ValueError(f"q: expected at least one token, got shape {tuple(q.shape)} with T = 0")
    check_nonempty(dims, q=("B", "H", "D_k"), v=("D_v",))
    check_same_device(q=q, k=k, v=v, **per_token)
    if "g" in per_token:
        check_log_decay(per_token["g"])
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name}: expected the dtype of q ({q.dtype}), got {x.dtype}")
    return dims


def require_tensor(name: str, x):
    """``x`` itself, after a ``TypeError`` naming ``name`` unless it is a tensor (e.g. a gated op's ``g=None``,
    which would otherwise run the ungated rule in one form and crash in the other)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def check_nonempty(dims: Dims, **named: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming the argument when one of its named dims is 0 (an empty batch, head or feature
    axis has no meaningful output here, and would otherwise fail deep inside, e.g. as a ``ZeroDivisionError``)."""
    for name, dim_names in named.items():
        empty = [d for d in dim_names if dims.sizes.get(d) == 0]
        if empty:
            raise ValueError(f"{name}: expected {', '.join(empty)} >= 1, got {', '.join(f'{d} = 0' for d in empty)}")


def check_log_decay(g: torch.Tensor, allow_reset: bool = True, shape: str = "(B, T, H)") -> None:
    """Refuse a ``g`` that is not a log decay: NaN, ``+inf`` or ``g > 0`` (``exp(g) > 1`` would grow the state).

    ``g = −inf`` (``exp(g) = 0``, a full reset of the memory) is allowed unless ``allow_reset=False``. Called by
    :func:`check_inputs` for a per-token tensor named ``g``, and for per-key gates (``shape="(B, T, H, D_k)"``). A
    scan of the values, so it follows :func:`~ttr_edu._internal.validation.finite_checks`.

    Raises:
        ValueError: naming ``g``, how many ``shape`` entries are bad and the first one.
    """
    if g.device.type == "meta" or not finite_checks_enabled():
        return
    with torch.no_grad():
        bad = torch.isnan(g) | (g > 0)  # +inf > 0
        if not allow_reset:
            bad = bad | torch.isneginf(g)
        n_bad = int(bad.sum())
    if n_bad == 0:
        return
    allowed = "[-inf, 0]" if allow_reset else "(-inf, 0] (finite)"
    raise ValueError(
        f"g: expected a log decay in {allowed}, so that exp(g) is a decay factor; got {n_bad} of {g.numel()} "
        f"{shape} entries outside it (the first: {g[bad][0].item()})"
    )


def check_nonnegative(name: str, x: torch.Tensor, what: str, high: float | None = None) -> None:
    """Refuse entries of ``x`` that are negative (or above ``high``, when given), naming ``name`` and saying ``what``
    the values are (``"a learning rate"``). A scan of the values: skipped for meta tensors and when
    :func:`~ttr_edu._internal.validation.finite_checks` is off."""
    if not isinstance(x, torch.Tensor) or x.device.type == "meta" or not finite_checks_enabled():
        return
    with torch.no_grad():
        bad = x < 0 if high is None else (x < 0) | (x > high)
        n_bad = int(bad.sum())
    if n_bad:
        interval = "[0, inf)" if high is None else f"[0, {high:g}]"
        raise ValueError(
            f"{name}: expected {what} in {interval}, got {n_bad} of {x.numel()} entries outside it "
            f"(the first: {x[bad][0].item():.4g})"
        )


def decay_matrix(g: torch.Tensor) -> torch.Tensor:
    """Within-chunk decays ``Γ_ij = exp(Σ_{l=j+1..i} g_l)`` for ``i ≥ j`` and ``0`` above the diagonal.

    ``g`` is ``(..., C)`` (one chunk per row), the result ``(..., C, C)``. Each segment is summed directly instead of
    taking differences ``G_i − G_j`` of one cumulative sum: that is exact for ``g = −inf`` (a full reset, where the
    difference would be ``−inf − (−inf) = NaN``) and loses no precision when ``|G|`` grows large.
    """
    C = g.shape[-1]
    causal = torch.ones(C, C, dtype=torch.bool, device=g.device).tril()
    terms = g.unsqueeze(-1).expand(*g.shape, C).masked_fill(~causal.tril(-1), 0.0)  # [i, j] = g_i where i > j
    log_decay = terms.cumsum(-2)  # [i, j] = Σ_{j<l≤i} g_l on and below the diagonal
    # −inf above the diagonal: exp gives 0 there, where exp of the (positive) sums could overflow.
    return torch.exp(log_decay.masked_fill(~causal, float("-inf")))


def decayed_cumsum(
    x: torch.Tensor, g: torch.Tensor | None, chunk_size: int = 64, initial: torch.Tensor | None = None
) -> torch.Tensor:
    """``y_t = exp(g_t) y_{t−1} + x_t`` from ``y_0 = initial``: ``y_t = γ_0^{(t)} y_0 + Σ_{i≤t} γ_i^{(t)} x_i``.

    Along dim 2 of a heads-first ``x`` ``(B, H, T, *F)`` with any trailing feature shape; ``g`` ``(B, H, T)`` or
    ``None`` (a plain cumulative sum); ``initial`` ``(B, H, *F)`` or ``None`` (zero). With ``g`` the sum runs in
    chunks of ``C = chunk_size``: a dense ``C × C`` block of weights inside each chunk (:func:`decay_matrix`, each
    weight its own segment sum, so ``g = −inf`` is an exact reset) and a carry between chunks, ``O(T · C · |F|)``
    instead of the ``O(T² |F|)`` of a full weight matrix. Returns ``y``, the shape and dtype of ``x``. Unchecked:
    the public callers (``regression.decayed_cumsum``, the ops) check their arguments.
    """
    if g is None:
        y = x.cumsum(2)
        return y if initial is None else y + initial.unsqueeze(2)
    B, H, T = x.shape[:3]
    C = min(chunk_size, T)
    pad = (-T) % C
    flat = x.reshape(B, H, T, -1)
    if pad:  # a zero input with a zero log decay changes nothing; the padded rows are cut off below
        flat = F.pad(flat, (0, 0, 0, pad))
        g = F.pad(g, (0, pad))
    N = flat.shape[2] // C
    xc = flat.reshape(B, H, N, C, -1)
    Gc = g.reshape(B, H, N, C).cumsum(-1)  # log decay from the chunk start (a sum from the start: no difference)
    inner = decay_matrix(g.reshape(B, H, N, C)) @ xc  # the sums within each chunk
    # the sum up to the end of the previous chunk, (B, H, |F|)
    carry = torch.zeros_like(xc[:, :, 0, 0]) if initial is None else initial.reshape(B, H, -1).to(x.dtype)
    chunks = []
    for n in range(N):
        y = inner[:, :, n] + Gc[:, :, n, :, None].exp() * carry[:, :, None]
        chunks.append(y)
        carry = y[:, :, -1]
    return torch.stack(chunks, 2).reshape(B, H, N * C, *x.shape[3:])[:, :, :T]


def resolve_scale(scale, d_k: int) -> float:
    """``scale`` defaults to ``D_k ** -0.5`` (fla); otherwise it must be a finite number > 0."""
    return d_k**-0.5 if scale is None else check_positive_float("scale", scale)


def state_dtypes(dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """The dtypes a part of a state made of several tensors may have beside inputs of ``dtype``: the inputs' own, and
    the compute dtype in which an op returns its final state (fp32 for half inputs), so that a state carried from one
    call into the next is always taken. Another dtype is refused by name: a float16 part beside float32 inputs has
    already lost its digits, and a float64 part would be rounded to float32, both without a word."""
    return tuple(dict.fromkeys((dtype, compute_dtype(dtype))))


def check_state(
    name: str, state, dims: Dims, shape, device: torch.device, *, dtypes: Sequence[torch.dtype] = ()
) -> None:
    """Check one tensor of an ``initial_state`` against its named shape and the inputs' device, and against
    ``dtypes`` when given (the first one the dtype of q). Alone, a state of any floating dtype is cast by the op; the
    parts of a tuple state are checked by :func:`check_state_parts`.

    Raises:
        TypeError: not a floating tensor, or a dtype outside ``dtypes``.
        ValueError: a shape that disagrees with the named dims, another device than q's.
    """
    dims.bind(name, state, shape)
    if dtypes and state.dtype not in dtypes:
        names = [str(d).removeprefix("torch.") for d in dtypes]
        final = f" or {names[1]}, the dtype of a final state" if len(names) > 1 else ""
        raise TypeError(f"{name}: expected {names[0]} like q{final}, got {state.dtype}")
    if state.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of q), got one on {state.device}")


def check_state_parts(
    name: str, state, parts: Sequence[tuple[str, Sequence[str | int]]], dims: Dims, q: torch.Tensor, *, dtypes=None
) -> tuple[torch.Tensor, ...]:
    """Check the tensors of a state made of several (RLS's ``(S, P)``, the MLP memory's ``(W1, W2)``, ``(S, z)``, a
    key-value cache) and return them: ``state[i]`` is named ``f"{name}[i] (label)"`` after ``parts[i] = (label,
    named shape)`` and must have that shape, the device of ``q``, and one of ``dtypes`` (default
    :func:`state_dtypes` of q's dtype). The caller has checked that ``state`` is a tuple or list of ``len(parts)``.

    Raises:
        TypeError: a part that is no floating tensor, or of another dtype.
        ValueError: a part of the wrong shape or on another device.
    """
    allowed = state_dtypes(q.dtype) if dtypes is None else tuple(dtypes)
    for i, ((label, shape), part) in enumerate(zip(parts, state)):
        check_state(f"{name}[{i}] ({label})", part, dims, shape, q.device, dtypes=allowed)
    return tuple(state)


def zero_state(dims: Dims, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.zeros(dims["B"], dims["H"], dims["D_k"], dims["D_v"], dtype=dtype, device=device)


def pad_time(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Zero-pad the time axis (dim 2 of a heads-first tensor) up to a multiple of ``chunk_size``.

    Zero padding at the end is harmless for every layer here: a zero key (or a zero ``beta``) writes nothing, a zero
    log decay keeps the state, and the padded outputs are cut off.
    """
    T = x.shape[2]
    pad = (-T) % chunk_size
    if pad == 0:
        return x
    widths = [0, 0] * (x.dim() - 3) + [0, pad]
    return F.pad(x, widths)


def to_chunks(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """``(B, H, T, ...)`` -> ``(B, H, N, C, ...)`` with ``N = ceil(T / C)``, zero-padded at the end, contiguous.

    Contiguous because the inputs usually arrive as transposed views of fla's ``(B, T, H, ·)``: copied once here,
    each chunk is a dense matrix, where a strided view would be copied again by every matrix product that reads it.
    """
    x = pad_time(x, chunk_size)
    B, H, T = x.shape[:3]
    return x.reshape(B, H, T // chunk_size, chunk_size, *x.shape[3:]).contiguous()


def fla_output(o: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """An op's output as fla's ops return theirs: contiguous ``(B, T, H, D_v)`` (a caller may ``view`` it), in
    ``dtype``; at most one copy (a transposed heads-first result is made contiguous by its conversion, or copied).
    ``dtype=None`` keeps the dtype."""
    return o.to(dtype or o.dtype, memory_format=torch.contiguous_format).contiguous()


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stacklevel_outside_the_package() -> int:
    """The ``stacklevel`` for ``warnings.warn`` in the caller of this function that points at the first frame
    outside ``ttr_edu``: the user's line, however many of the package's wrappers (input policy, ``cu_seqlens``)
    lie between."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def check_stability(beta: torch.Tensor, k: torch.Tensor, mode: str) -> None:
    """Warn or raise when ``beta_t ||k_t||^2`` leaves ``[0, 2]`` (up to rounding), where the delta rule is unstable.

    The update ``S <- (I - beta k k^T) S + beta k v^T`` multiplies the state by a matrix with eigenvalue
    ``1 - beta ||k||^2`` along ``k`` (and 1 elsewhere). Its modulus exceeds 1, so the state can grow without bound,
    exactly when ``beta ||k||^2`` is outside ``[0, 2]``; strictly inside ``(0, 2)`` the update contracts along ``k``
    (Schlag et al. 2021 §4.2; Yang et al. 2024).
    """
    if mode not in ("warn", "raise", "ignore"):
        raise ValueError(f"check_stability: expected 'warn', 'raise' or 'ignore', got {mode!r}")
    if mode == "ignore" or beta.device.type == "meta" or beta.numel() == 0:
        return
    with torch.no_grad():
        dtype = compute_dtype(k.dtype)
        step = beta.to(dtype) * torch.linalg.vector_norm(k, dim=-1, dtype=dtype).square()  # (B, T, H)
        # A relative slack of 1e-5 forgives rounding: an fp32 unit key has ‖k‖² = 1 ± 1e-7, so β = 2 lands on 2 + ε.
        slack = 2e-5
        # One reduction and one sync in the common case, where the full mask takes about seven elementwise ops
        # (0.70 → 0.48 ms of a 43 ms delta_rule_chunk call at T = 4096, B·H = 8). The bounds are compared as
        # tensors, in step's dtype, as the mask below compares them (a Python float would round 2 + slack
        # differently); a NaN makes both comparisons false, so it reaches the count.
        low, high = torch.aminmax(step)
        if bool((low >= -slack) & (high <= 2 + slack)):
            return
        bad = (step < -slack) | (step > 2 + slack) | ~torch.isfinite(step)
        n_bad = int(bad.sum())
    if n_bad == 0:
        return
    message = (
        f"beta * ||k||^2 leaves [0, 2] at {n_bad} of {bad.numel()} (B, T, H) positions "
        f"(range [{step.min().item():.4g}, {step.max().item():.4g}]): the delta-rule update I - beta k k^T has an "
        "eigenvalue of modulus > 1 and the state can grow without bound; normalise k (l2_norm) and keep beta in (0, 1]"
    )
    if mode == "raise":
        raise ValueError(f"beta: {message}")
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel_outside_the_package())  # at the op's caller


def extend_kv_cache(k, v, initial_state, dims: Dims):
    """The keys and values a nonparametric op attends to: the cache ``initial_state = (k_cache, v_cache)`` of shapes
    ``(B, T_cache, H, D_k)`` and ``(B, T_cache, H, D_v)`` followed by this call's ``k, v`` (the cache is the state of
    softmax and local linear attention, as ``S`` is a linear memory's). Returns ``(k, v, T_cache)``.

    Raises:
        TypeError: ``initial_state`` not a pair of tensors of the dtype of ``k``.
        ValueError: cache shapes that disagree with ``k, v`` (named dims), or another device.
    """
    if initial_state is None:
        return k, v, 0
    if not (isinstance(initial_state, (tuple, list)) and len(initial_state) == 2):
        raise TypeError(
            "initial_state: expected the key-value cache (k_cache, v_cache) of shapes (B, T_cache, H, D_k) and "
            f"(B, T_cache, H, D_v), got {type(initial_state).__name__}"
        )
    # the cache is concatenated with this call's keys and values: it must have their dtype, not only a castable one
    cache = (("k_cache", ("B", "T_cache", "H", "D_k")), ("v_cache", ("B", "T_cache", "H", "D_v")))
    k0, v0 = check_state_parts("initial_state", initial_state, cache, dims, k, dtypes=(k.dtype,))
    return torch.cat([k0, k], dim=1), torch.cat([v0, v], dim=1), k0.shape[1]


def causal_mask(T: int, T_cache: int, device) -> torch.Tensor:
    """``(T, T_cache + T)`` bool: query ``i`` (position ``T_cache + i``) sees keys ``j ≤ T_cache + i``."""
    return torch.ones(T, T_cache + T, dtype=torch.bool, device=device).tril(T_cache)
