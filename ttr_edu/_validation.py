"""Argument checks shared by every public function.

Errors follow DESIGN.md §3: ``TypeError`` for a wrong type or dtype, ``ValueError`` for a wrong shape or
value, and the message always names the argument, the expected shape (with named dims) and what was received.

The central helper is :class:`Dims`. Dimensions are named (``"B", "T", "H", "D_k"``) and bound on first
sight, so a later tensor that disagrees is reported against the tensor that fixed the size::

    dims = Dims()
    dims.bind("q", q, ("B", "T", "H", "D_k"))
    dims.bind("k", k, ("B", "T", "H", "D_k"))   # ValueError naming k, T and q on a mismatch
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "check_tensor",
    "Dims",
    "check_same_device",
    "check_positive_int",
    "check_positive_float",
    "fmt_dims",
]


def fmt_dims(dims: Sequence[str | int]) -> str:
    """``("B", "T", 4)`` -> ``"(B, T, 4)"``; one dim keeps Python's trailing comma: ``"(D_k,)"``."""
    inner = ", ".join(str(d) for d in dims)
    return f"({inner},)" if len(dims) == 1 else f"({inner})"


def check_tensor(name: str, x, *, floating: bool = True, allow_none: bool = False) -> None:
    """Raise ``TypeError`` unless ``x`` is a tensor (of a floating dtype when ``floating``)."""
    if x is None and allow_none:
        return
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(
            f"{name}: expected a floating-point tensor (float16, bfloat16, float32 or float64), got {x.dtype}"
        )


class Dims:
    """Named dimension sizes, bound on first sight and checked on every later sight.

    Example::

        dims = Dims()
        dims.bind("q", q, ("B", "T", "H", "D_k"))
        dims.bind("v", v, ("B", "T", "H", "D_v"))
        B, T = dims["B"], dims["T"]
    """

    def __init__(self, **known: int) -> None:
        self.sizes: dict[str, int] = dict(known)
        self.owner: dict[str, str] = {}

    def __getitem__(self, dim: str) -> int:
        return self.sizes[dim]

    def bind(self, name: str, x, dims: Sequence[str | int]) -> None:
        """Check that ``x`` has the named shape ``dims``, binding names seen for the first time.

        Args:
            name: the argument's name, used in the message.
            x: the tensor to check (type and dtype are checked with :func:`check_tensor` first).
            dims: one entry per axis: a dimension name (``"T"``) or a fixed int.

        Raises:
            TypeError: ``x`` is not a floating-point tensor.
            ValueError: wrong number of axes, or a size that disagrees with an earlier argument or a fixed int.
        """
        check_tensor(name, x)
        if x.dim() != len(dims):
            raise ValueError(
                f"{name}: expected {len(dims)} dims {fmt_dims(dims)}, got shape {tuple(x.shape)} with {x.dim()} dims"
            )
        expected = tuple(self.sizes.get(d, d) if isinstance(d, str) else d for d in dims)
        for dim, got in zip(dims, x.shape):
            if isinstance(dim, str) and dim not in self.sizes:
                self.sizes[dim], self.owner[dim] = got, name
                continue
            want = dim if isinstance(dim, int) else self.sizes[dim]
            if got != want:
                source = f" (set by {self.owner[dim]})" if dim in self.owner else ""
                raise ValueError(
                    f"{name}: expected shape {fmt_dims(dims)} = {fmt_dims(expected)}, got {tuple(x.shape)}; "
                    f"{dim} is {got}, expected {want}{source}"
                )


def check_same_device(**tensors: torch.Tensor | None) -> torch.device:
    """Raise ``ValueError`` unless all given (non-None) tensors live on one device; return that device."""
    present = {k: t for k, t in tensors.items() if t is not None}
    devices = {k: t.device for k, t in present.items()}
    first_name, first = next(iter(devices.items()))
    for k, dev in devices.items():
        if dev != first:
            listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
            raise ValueError(f"{k}: all tensors must be on one device, got {listing}")
    return first


def check_positive_int(name: str, value) -> int:
    """Raise ``TypeError``/``ValueError`` unless ``value`` is a positive int (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    return value


def check_positive_float(name: str, value, *, allow_zero: bool = False) -> float:
    """Raise unless ``value`` is a finite real number > 0 (or ≥ 0 when ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    value = float(value)
    bad = value < 0 if allow_zero else value <= 0
    if bad or not math.isfinite(value):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value}")
    return value
