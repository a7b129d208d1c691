"""Choice 1 of a test-time regression layer: the regression weights ``γ_i^{(t)}``, as matrices and as sums.

:class:`Uniform`, :class:`ExponentialDecay` and :class:`Gates` have the recursive form
``γ_i^{(t)} = exp(g_t) γ_i^{(t−1)}``, ``γ_t^{(t)} = 1``, so each is described by a per-token log decay ``g`` (``None``:
no decay). :class:`SlidingWindow` has no such form (a pair's weight drops from 1 to 0 after ``window`` tokens, whatever
came between); the layer evaluates it window by window (:mod:`ttr_edu.regression.window`). Every sum over a segment
of ``g`` is taken directly (never as a difference of one cumulative sum): a reset ``g = −inf`` is then exact, and a
very negative ``g`` loses no precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ttr_edu._internal.contract import check_log_decay, check_nonempty, decay_matrix
from ttr_edu._internal.contract import decayed_cumsum as _decayed_cumsum
from ttr_edu._internal.validation import (
    Dims,
    check_allocation,
    check_decayed_sum_args,
    check_positive_float,
    check_positive_int,
)

__all__ = [
    "Uniform",
    "ExponentialDecay",
    "Gates",
    "SlidingWindow",
    "regression_weights",
    "decayed_cumsum",
]


@dataclass(frozen=True)
class Uniform:
    """``γ_i^{(t)} = 1``: every pair seen so far counts equally (linear attention, DeltaNet, softmax attention)."""

    def log_decay(
        self, g: torch.Tensor | None, dims: Dims, dtype: torch.dtype, device: torch.device | str | None
    ) -> torch.Tensor | None:
        """No log decay (``None``): every weight is 1. Raises ``ValueError`` for a ``g`` ``(B, T, H)``."""
        if g is not None:
            raise ValueError("g: weights=Uniform() has no decay, so it takes no g; use weights=Gates() for gates")
        return None


@dataclass(frozen=True)
class ExponentialDecay:
    """``γ_i^{(t)} = gamma^{t−i}`` with a fixed ``gamma ∈ (0, 1]`` (RetNet-style decay; Wang et al. 2025 §3.2).

    Raises:
        ValueError: ``gamma`` outside ``(0, 1]``.
    """

    gamma: float

    def __post_init__(self):
        check_positive_float("gamma", self.gamma)
        if self.gamma > 1:
            raise ValueError(f"gamma: expected a decay in (0, 1], got {self.gamma}")

    def log_decay(
        self, g: torch.Tensor | None, dims: Dims, dtype: torch.dtype, device: torch.device | str | None
    ) -> torch.Tensor | None:
        """The log decay ``log gamma`` at every token, ``(B, T, H)`` in ``dtype`` on ``device``. Raises ``ValueError``
        for a ``g``."""
        if g is not None:
            raise ValueError("g: weights=ExponentialDecay(gamma) fixes the decay, so it takes no g; use Gates()")
        return torch.full((dims["B"], dims["T"], dims["H"]), math.log(self.gamma), dtype=dtype, device=device)


@dataclass(frozen=True)
class Gates:
    """Data-dependent weights ``γ_i^{(t)} = Π_{j=i+1..t} exp(g_j)`` from the call's log decay ``g ≤ 0``, ``(B, T, H)``.

    This is the weighting behind gated linear attention and gated DeltaNet (Wang et al. 2025 §3.2; Yang et al.
    2024). ``g = −inf`` is a full reset (``γ = 0`` for every earlier pair), exact in every optimiser that allows it.
    Raises ``ValueError`` at the call, naming ``g``, when it is missing, NaN, ``+inf`` or positive somewhere.
    """

    def log_decay(
        self, g: torch.Tensor | None, dims: Dims, dtype: torch.dtype, device: torch.device | str | None
    ) -> torch.Tensor | None:
        """The call's log decay ``g`` ``(B, T, H)``, checked (``≤ 0``, ``−inf`` allowed), in ``dtype``."""
        if g is None:
            raise ValueError("g: weights=Gates() needs the log decay g, shaped (B, T, H), at the call")
        dims.bind("g", g, ("B", "T", "H"))
        check_log_decay(g)  # NaN, +inf and g > 0 refused by name, as the ops do; −inf (a reset) is allowed
        return g.to(dtype)


@dataclass(frozen=True)
class SlidingWindow:
    """``γ_i^{(t)} = 1`` for the last ``window`` pairs (``t − window < i ≤ t``) and 0 before: a hard forgetting horizon.

    The weights of sliding-window (local) attention, for every function class and optimiser: the
    memory at step ``t`` is the chosen optimiser's fit to the window's pairs alone, from the initial state. No
    per-token decay gives these weights, so a warm-started optimiser cannot carry its state from one token to the next:
    :class:`~ttr_edu.regression.TestTimeRegression` runs the uniform-weight layer over each window
    (:func:`ttr_edu.regression.window.windowed`), ``O(window)`` pairs per token.

    Raises:
        TypeError / ValueError: ``window`` not a positive int.
    """

    window: int

    def __post_init__(self):
        check_positive_int("window", self.window)

    def log_decay(
        self, g: torch.Tensor | None, dims: Dims, dtype: torch.dtype, device: torch.device | str | None
    ) -> torch.Tensor | None:
        """None exists: no per-token log decay ``g`` ``(B, T, H)`` gives a window's weights, so
        :class:`~ttr_edu.regression.TestTimeRegression` evaluates them window by window. Raises ``ValueError``."""
        raise ValueError("weights: SlidingWindow has no per-token log decay; the layer evaluates it window by window")


WEIGHTS = (Uniform, ExponentialDecay, Gates, SlidingWindow)

# --------------------------------------------------------------------------------------------------------------


def regression_weights(g: torch.Tensor | None, T: int | None = None) -> torch.Tensor:
    """The weight matrix ``Γ[t, i] = γ_i^{(t)} = exp(Σ_{j=i+1..t} g_j)`` for ``i ≤ t`` and 0 above the diagonal.

    Args:
        g: log decays ``(B, T, H)``, or ``None`` for uniform weights (then ``T`` is needed).
        T: the sequence length when ``g`` is ``None``.
    Returns:
        ``Γ`` of shape ``(B, H, T, T)`` (``(1, 1, T, T)`` when ``g`` is ``None``), the dtype of ``g`` (fp32 if None).
    Raises:
        ValueError: ``g`` not ``(B, T, H)``, neither ``g`` nor ``T`` given, a ``T`` that is not the length of ``g``,
            or a ``T`` whose ``(T, T)`` matrix would not fit in memory.
        TypeError: ``T`` not an int.

    Each entry sums its own segment of ``g`` (:func:`ttr_edu._internal.contract.decay_matrix`), instead of taking
    differences ``G_t − G_i`` of one cumulative sum: a reset ``g = −inf`` gives exact zeros (the difference would be
    ``−inf − (−inf) = NaN``), and a very negative ``g`` loses no precision to a large ``|G|``.
    """
    if g is None:
        if T is None:
            raise ValueError("T: needed when g is None (uniform weights)")
        check_positive_int("T", T)
        check_allocation("T", (T, T), what="the (T, T) weight matrix")
        return torch.ones(T, T).tril()[None, None]
    dims = Dims()
    dims.bind("g", g, ("B", "T", "H"))
    check_nonempty(dims, g=("B", "T", "H"))
    if T is not None and check_positive_int("T", T) != g.shape[1]:
        raise ValueError(f"T: expected the length of g ({g.shape[1]}) or None, got {T}")
    check_log_decay(g)
    return decay_matrix(g.transpose(1, 2))  # (B, H, T, T)


def decayed_cumsum(x: torch.Tensor, g: torch.Tensor | None, chunk_size: int = 64) -> torch.Tensor:
    """``y_t = exp(g_t) y_{t−1} + x_t``, i.e. ``y_t = Σ_{i≤t} γ_i^{(t)} x_i``, along the time axis.

    Args:
        x: ``(B, H, T, *F)`` (heads-first), any trailing feature shape.
        g: ``(B, H, T)`` log decays, or ``None`` for a plain cumulative sum.
        chunk_size: the sum runs as dense ``C × C`` weight blocks within chunks and a carry between them, so the
            cost is ``O(T · C · |F|)`` instead of the ``O(T² |F|)`` of a full weight matrix.
    Returns:
        ``y``, the shape and dtype of ``x``.
    Raises:
        TypeError / ValueError: ``x`` or ``g`` not floating tensors of the shapes above, a bad ``g`` or ``chunk_size``.
    """
    check_decayed_sum_args(x, g, chunk_size)  # the input policy of ttr_edu._internal.validation
    return _decayed_cumsum(x, None if g is None else g.to(x.dtype), chunk_size)  # g: any floating dtype


def _decay_from_start(g, like):
    """``γ_0^{(t)} = exp(Σ_{j≤t} g_j)``, ``(B, H, T)``: the weight left on an initial state at step ``t``."""
    if g is None:
        return torch.ones_like(like[..., 0])
    return g.cumsum(-1).exp()
