"""Argument checks shared by every public function.

Errors follow CONTRIBUTING.md ("Conventions"): ``TypeError`` for a wrong type or dtype, ``ValueError`` for a wrong
shape or value, and the message always names the argument, the expected shape (with named dims) and what was
received.

The central helper is :class:`Dims`. Dimensions are named (``"B", "T", "H", "D_k"``) and bound on first
sight, so a later tensor that disagrees is reported against the tensor that fixed the size::

    dims = Dims()
    dims.bind("q", q, ("B", "T", "H", "D_k"))
    dims.bind("k", k, ("B", "T", "H", "D_k"))   # ValueError naming k, T and q on a mismatch

The input policy (the same for every public callable; CONTRIBUTING.md "Conventions"):

* **Non-finite values are refused by name.** NaN or ±inf in ``q, k, v, beta``, a state, a layer's ``x`` or any
  other tensor argument raises :class:`NonFiniteError` (a ``ValueError``, and a ``FloatingPointError`` for training
  loops) naming the argument and counting the bad entries; the log decay ``g`` may be ``−inf`` (a full reset) where
  the op says so, never NaN or ``+inf``. An output that is not finite although its inputs are (an
  overflow of the dtype, e.g. fp16) is refused the same way, naming ``o``. Each scan costs one reduction and, on a
  GPU, one synchronisation; :func:`finite_checks` (exported as ``ttr_edu.finite_checks``) switches them off for
  speed in a training loop whose inputs you trust: then NaN in means NaN out and a ``g > 0`` goes unnoticed.
* **Scalars must fit the dtype the maths runs in** (fp32, or fp64 for fp64 inputs): ``scale=1e300`` or
  ``ridge=1e-300`` in fp32 is a ``ValueError`` (:func:`check_scalar_fits`), not a silent ``inf`` or ``0``.
* **Boolean flags take booleans only** (:func:`check_bool`): ``normalize="false"`` is a ``TypeError``.
* **Sizes:** zero-size ``B, H, D_k, D_v`` or ``T`` raise ``ValueError``; a ``chunk_size`` larger than ``T`` is
  capped at ``T`` (:func:`check_chunk_size`, applied by :func:`guarded`), so nothing is allocated for it. A size
  that asks for more memory than the device has is refused by name before anything is allocated
  (:func:`check_allocation`), and a count of steps has a documented bound (:func:`check_positive_int`'s ``maximum``).
* **Other arguments:** a ``generator`` is a ``torch.Generator`` or ``None``, a ``dtype`` a floating ``torch.dtype``,
  a ``device`` one torch knows (:func:`guarded` checks these by name), a named choice one of its options
  (:func:`check_choice`). Meta tensors either run (shapes only) or are refused by name, never with a torch error.
* **Ill-posed solves** (a ridge too small for the keys) raise a ``ValueError`` naming the ridge when a
  factorisation fails, and warn (``RuntimeWarning``) when the system is too ill-conditioned for the dtype.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
from collections.abc import Iterator, Sequence

import torch

__all__ = [
    "check_tensor",
    "Dims",
    "check_same_device",
    "check_positive_int",
    "check_positive_float",
    "fmt_dims",
    "finite_checks",
    "finite_checks_enabled",
    "check_finite",
    "check_bool",
    "check_scalar_fits",
    "check_chunk_size",
    "guarded",
    "check_decayed_sum_args",
    "check_cu_seqlens",
    "check_choice",
    "check_generator",
    "check_dtype",
    "check_device",
    "check_allocation",
    "check_real",
    "check_seed",
    "NonFiniteError",
]


class NonFiniteError(ValueError, FloatingPointError):
    """NaN or inf where a finite number is needed: a ``ValueError`` (a bad value, named in the message) that is also a
    ``FloatingPointError``, so that a training loop catching divergence (``except FloatingPointError``) sees NaN
    activations or logits the same way it sees a NaN loss."""


# The switch of the non-finite scans (module-level, so torch.compile guards on it like any global).
_FINITE_CHECKS = True


def finite_checks_enabled() -> bool:
    """Whether the non-finite scans of the input policy run (the default: yes)."""
    return _FINITE_CHECKS


@contextlib.contextmanager
def finite_checks(enabled: bool) -> Iterator[None]:
    """Switch the scans for NaN/inf inputs and outputs on or off inside a ``with`` block (restored on exit).

    Each scan is a reduction over the tensor and, on a GPU, a host synchronisation; turn them off in a training
    loop whose inputs are known to be finite::

        with ttr_edu.finite_checks(False):
            for batch in loader:
                loss = model(batch).sum()

    With the scans off, NaN in means NaN out, and a log decay ``g > 0`` is no longer refused. Shape, dtype, flag
    and scalar checks stay on (they cost no synchronisation).

    Raises:
        TypeError: ``enabled`` is not a bool.
    """
    global _FINITE_CHECKS
    check_bool("enabled", enabled)
    before = _FINITE_CHECKS
    _FINITE_CHECKS = enabled
    try:
        yield
    finally:
        _FINITE_CHECKS = before


#: Half-precision sums would overflow at 65504 (any large gate tensor): :func:`all_finite` sums them in single.
_SUM_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}


def all_finite(x: torch.Tensor) -> bool:
    """Whether every entry of the floating tensor ``x`` is finite, in one reduction: True proves it, False may be
    an overflow of the sum, so the caller then scans entry by entry.

    NaN makes the sum NaN, and ±inf makes it ±inf or NaN, so a finite sum rules both out. The sum reads ``x`` once
    and allocates nothing of its size; the entry-wise scan (``isfinite``, a negation and a count) added 42 % to
    ``delta_rule_chunk``'s time at T = 1024 on one core, and 71 % at T = 4096.
    """
    with torch.no_grad():
        return bool(torch.isfinite(x.sum(dtype=_SUM_DTYPE.get(x.dtype, x.dtype))))


def check_finite(name: str, x, *, allow_neginf: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` when the tensor ``x`` holds NaN or ±inf (``−inf`` allowed if asked).

    Does nothing for non-tensors (their type is checked elsewhere), meta tensors, integer tensors, or when the
    scans are switched off (:func:`finite_checks`). One sum decides for almost every tensor (:func:`all_finite`);
    only when the sum is not finite (a bad entry, or finite entries whose sum overflows) are the entries scanned.
    """
    if not (_FINITE_CHECKS and isinstance(x, torch.Tensor)) or x.device.type == "meta":
        return
    if not (x.is_floating_point() or x.is_complex()):
        return
    if all_finite(x):
        return
    with torch.no_grad():
        bad = ~torch.isfinite(x)
        if allow_neginf:
            bad = bad & ~torch.isneginf(x)
        n_bad = int(bad.sum())
    if n_bad:
        n_nan = int(torch.isnan(x).sum())
        raise NonFiniteError(
            f"{name}: expected finite values, got {n_bad} of {x.numel()} entries NaN or inf ({n_nan} NaN); "
            f"the first at index {tuple(int(i) for i in bad.nonzero()[0])}. (ttr_edu.finite_checks(False) turns "
            "this check off.)"
        )


def check_bool(name: str, value) -> bool:
    """Raise ``TypeError`` unless ``value`` is a bool (a string such as ``"false"`` is truthy: never guess)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")
    return value


def _compute_dtype(dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_scalar_fits(name: str, value, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` when the nonzero number ``value`` overflows or underflows the compute dtype.

    The compute dtype is fp64 for fp64 inputs and fp32 otherwise (``dtype`` is the inputs' dtype): ``1e300``
    would become ``inf`` and ``1e-300`` would become ``0`` there, turning a finite request into NaN output or a
    division by zero. Non-numbers are left to the caller's type check.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
        return
    value = _as_float(name, value)
    if not math.isfinite(value):
        return
    info = torch.finfo(_compute_dtype(dtype))
    if abs(value) > info.max or abs(value) < info.tiny:
        raise ValueError(
            f"{name}: {value!r} does not fit {info.dtype} (|{name}| must lie in [{info.tiny:.3g}, {info.max:.3g}]), "
            f"the dtype the computation runs in for {dtype} inputs; use a moderate value or float64 inputs"
        )


def check_chunk_size(chunk_size, q) -> int:
    """A positive int ``chunk_size``, capped at ``T = q.shape[1]``: a longer chunk would only allocate padding.

    ``q`` is the op's ``(B, T, H, D_k)`` input (not capped when it is no such tensor: the op's own checks refuse it).

    Raises:
        TypeError / ValueError: ``chunk_size`` is not a positive int.
    """
    check_positive_int("chunk_size", chunk_size)
    if isinstance(q, torch.Tensor) and q.dim() >= 2 and q.shape[1] > 0:
        return min(chunk_size, q.shape[1])
    return chunk_size


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


INT64_MAX = 2**63 - 1  # the largest int a tensor, a shape or a range in torch can hold


def _big(value: int) -> str:
    """An int as an error message shows it: its digits, or how many there are."""
    digits = str(abs(value))
    return digits if len(digits) <= 24 else f"an int of {len(digits)} digits"


def _as_float(name: str, value) -> float:
    """``float(value)``; an int too large for a float (``10**400``) is refused by name, not an ``OverflowError``."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name}: {_big(value)} is too large for a float") from None


def check_positive_int(name: str, value, *, maximum: int | None = None, why: str = "") -> int:
    """Raise ``TypeError``/``ValueError`` unless ``value`` is a positive int (bools are rejected) that a 64-bit int
    holds, at most ``maximum`` when given (``why`` says where the bound comes from)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    if value > INT64_MAX:
        raise ValueError(f"{name}: expected an int a 64-bit integer holds (at most 2**63 - 1), got {_big(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: expected an int from 1 to {maximum}{f' ({why})' if why else ''}, got {value}")
    return value


def check_seed(name: str, seed, *, allow_none: bool = False) -> None:
    """Raise unless ``seed`` is an int that ``torch.Generator.manual_seed`` takes (from -2**63 to 2**64 - 1), or
    ``None`` when ``allow_none``."""
    if seed is None and allow_none:
        return
    if isinstance(seed, bool) or not isinstance(seed, int):
        expected = "an int or None" if allow_none else "an int"
        raise TypeError(f"{name}: expected {expected}, got {type(seed).__name__} {seed!r}")
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"{name}: expected a seed from -2**63 to 2**64 - 1 (a torch generator's), got {_big(seed)}")


def check_real(name: str, value, *, low: float | None = None, high: float | None = None, dtype=None) -> float:
    """A finite real number (not a bool) in ``[low, high]``, returned as a float; with ``dtype``, one that fits it
    (:func:`check_scalar_fits`).

    Raises:
        TypeError: not an int or float (a bool, a str, a tensor).
        ValueError: NaN, ±inf, or outside ``[low, high]``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    value = _as_float(name, value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
        raise ValueError(f"{name}: expected a number in {bounds}, got {value:g}")
    if dtype is not None:
        check_scalar_fits(name, value, dtype)
    return value


def check_choice(name: str, value, options) -> str:
    """Raise ``TypeError`` unless ``value`` is a str, ``ValueError`` unless it is one of ``options`` (listed)."""
    listing = ", ".join(repr(o) for o in options)
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {listing}, got {type(value).__name__} {value!r}")
    if value not in options:
        raise ValueError(f"{name}: expected one of {listing}, got {value!r}")
    return value


def check_generator(name: str, generator) -> None:
    """Raise ``TypeError`` unless ``generator`` is a ``torch.Generator`` or ``None``."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name}: expected a torch.Generator or None, got {type(generator).__name__} {generator!r}")


def check_dtype(name: str, dtype, *, floating: bool = True) -> torch.dtype:
    """Raise ``TypeError`` unless ``dtype`` is a ``torch.dtype`` (a floating one when ``floating``)."""
    if not isinstance(dtype, torch.dtype) or (floating and not dtype.is_floating_point):
        kind = "a floating torch.dtype such as torch.float32" if floating else "a torch.dtype"
        raise TypeError(f"{name}: expected {kind}, got {dtype!r}")
    return dtype


def check_device(name: str, device, *, allow_none: bool = True) -> torch.device | None:
    """A ``torch.device`` from ``device`` (a ``torch.device`` or a str such as ``"cpu"``, ``"cuda:0"``).

    Raises:
        TypeError: neither a str nor a ``torch.device`` (nor ``None`` when allowed).
        ValueError: a string torch does not parse, or a device this machine does not have (``"cuda"`` without a GPU).
    """
    if device is None and allow_none:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"{name}: expected a torch.device or a str such as 'cpu', got {type(device).__name__} {device!r}"
        )
    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"{name}: not a device torch knows: {device!r} ({str(error).splitlines()[0][:80]})") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}: {device!r} asks for a CUDA GPU, and this machine has none")
    return parsed


def memory_bytes(device=None) -> int:
    """The memory a tensor on ``device`` may at most occupy: the GPU's total memory, or the host's physical memory
    (unbounded for the meta device, which allocates nothing)."""
    device = torch.device("cpu") if device is None else torch.device(device)
    if device.type == "meta":
        return 2**62
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 2**40


def check_allocation(name: str, shape: Sequence[int], *, dtype=torch.float32, device=None, what: str = "") -> None:
    """Refuse, naming the argument ``name``, a tensor of ``shape`` that could not fit in the device's memory.

    Called before the allocation, so a huge size (``hidden_size=10**9``) is a one-line ``ValueError`` instead of
    a torch allocator error (or minutes of swapping).

    Raises:
        ValueError: ``prod(shape) × itemsize`` exceeds :func:`memory_bytes` of ``device``.
    """
    numel = math.prod(int(n) for n in shape)
    itemsize = torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 4
    needed, available = numel * itemsize, memory_bytes(device)
    if needed > available:
        label = f" for {what}" if what else ""
        raise ValueError(
            f"{name}: asks for {fmt_dims(tuple(int(n) for n in shape))} = {numel:.3g} entries{label}, "
            f"{needed / 2**30:.3g} GiB of {str(dtype).replace('torch.', '')}, more than the {available / 2**30:.3g} "
            f"GiB of memory of {torch.device('cpu') if device is None else device}"
        )


def check_positive_float(name: str, value, *, allow_zero: bool = False) -> float:
    """Raise unless ``value`` is a finite real number > 0 (or ≥ 0 when ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    value = _as_float(name, value)
    bad = value < 0 if allow_zero else value <= 0
    if bad or not math.isfinite(value):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value}")
    return value


def check_decayed_sum_args(x, g, chunk_size) -> None:
    """The arguments of ``regression.decayed_cumsum``: ``x`` a finite floating ``(B, H, T, *F)`` tensor, ``g`` a
    ``(B, H, T)`` log decay in ``[−inf, 0]`` (or ``None``) on its device, ``chunk_size`` a positive int.

    Raises:
        TypeError: a non-tensor or integer ``x``/``g``, a non-int ``chunk_size``.
        ValueError: too few dims, ``g`` not ``(B, H, T)`` of ``x``, another device, NaN/inf values, ``g > 0``.
    """
    check_positive_int("chunk_size", chunk_size)
    check_tensor("x", x)
    if x.dim() < 3:
        raise ValueError(f"x: expected at least 3 dims (B, H, T, *F), got shape {tuple(x.shape)}")
    if 0 in x.shape[:3]:
        raise ValueError(f"x: expected B, H, T >= 1 in (B, H, T, *F), got shape {tuple(x.shape)}")
    check_finite("x", x)
    if g is None:
        return
    check_tensor("g", g)
    if tuple(g.shape) != tuple(x.shape[:3]):
        raise ValueError(
            f"g: expected shape (B, H, T) = {tuple(x.shape[:3])} (the first dims of x), got {tuple(g.shape)}"
        )
    check_same_device(x=x, g=g)
    check_finite("g", g, allow_neginf=True)
    if _FINITE_CHECKS and g.device.type != "meta" and bool((g > 0).any()):
        raise ValueError(f"g: expected a log decay <= 0 (exp(g) a decay factor), got max {g.max().item():.4g}")


#: Argument names that :func:`guarded` treats as boolean flags (beside every argument whose default is a bool), and
#: as scalars that must fit the compute dtype. An old name (``lam``) never reaches it:
#: :func:`~ttr_edu._internal.deprecation.renamed_arguments` wraps outside it and renames first, so the checks hold
#: for both spellings.
BOOL_ARGS = frozenset({"output_final_state", "normalize", "qk_norm", "redraw"})
SCALAR_ARGS = frozenset({"scale", "ridge", "eps"})
#: A log decay may be −inf (a reset); its own check (:func:`ttr_edu._internal.contract.check_log_decay`) refuses
#: NaN and +inf.
LOG_DECAY_ARGS = frozenset({"g"})
#: Arguments checked by their name: a random generator, a floating dtype, a device.
GENERATOR_ARGS = frozenset({"generator"})
DTYPE_ARGS = frozenset({"dtype"})
DEVICE_ARGS = frozenset({"device"})


def _check_finite_tree(name: str, value) -> None:
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _check_finite_tree(f"{name}[{i}]", item)
    else:
        check_finite(name, value)


def _has_meta(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == "meta"
    return isinstance(value, (tuple, list)) and any(_has_meta(item) for item in value)


def _capped_chunk(chunk_size, named: dict):
    """``chunk_size`` capped at the longest time axis of ``q, k, v`` (dim 1 in the fla layout); unchanged when it is
    no positive int (the op's own check names it) or no such tensor is given."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        return chunk_size
    lengths = [x.shape[1] for n in ("q", "k", "v") if isinstance(x := named.get(n), torch.Tensor) and x.dim() >= 2]
    longest = max(lengths, default=0)
    return min(chunk_size, longest) if longest > 0 else chunk_size


def guarded(fn=None, *, cap_chunk: bool = True):
    """Wrap a public function with the input policy of this module, keyed on its argument names.

    Before the call: flags (the names in :data:`BOOL_ARGS` and every argument whose default is a bool) must be
    bools; numbers named in :data:`SCALAR_ARGS` must fit the compute dtype of the first tensor argument; a
    ``generator``, ``dtype`` or ``device`` must be one; a ``chunk_size`` is capped at the longest time axis of
    ``q, k, v`` (:func:`check_chunk_size`: nothing is allocated for a huge one); every other tensor argument (and
    each tensor of a tuple, such as ``initial_state``) must be finite, except the log decay ``g``. After the call: a
    non-finite output ``o`` (the first returned tensor) from finite inputs is an overflow of its dtype and raises
    ``ValueError`` naming ``o``. A function that reads the values of a meta tensor (which has none) fails with a
    ``ValueError`` naming that argument, not torch's ``RuntimeError``. Shapes and dtypes stay with the function
    itself. The scans follow :func:`finite_checks`.

    ``@guarded(cap_chunk=False)`` leaves ``chunk_size`` alone (the kernels, whose tiles need a power of two).
    """
    if fn is None:
        return functools.partial(guarded, cap_chunk=cap_chunk)
    signature = inspect.signature(fn)
    params = list(signature.parameters)
    flags = BOOL_ARGS | {n for n, p in signature.parameters.items() if isinstance(p.default, bool)}
    chunk_index = params.index("chunk_size") if cap_chunk and "chunk_size" in params else None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        named = dict(zip(params, args))
        named.update(kwargs)
        first = next((x for x in named.values() if isinstance(x, torch.Tensor)), None)
        dtype = first.dtype if first is not None else torch.float32
        for name, value in named.items():
            if name in flags:
                check_bool(name, value)
            elif name in SCALAR_ARGS:
                check_scalar_fits(name, value, dtype)
            elif name in GENERATOR_ARGS:
                check_generator(name, value)
            elif name in DTYPE_ARGS:
                check_dtype(name, value)
            elif name in DEVICE_ARGS:
                check_device(name, value)
            elif name not in LOG_DECAY_ARGS:
                _check_finite_tree(name, value)
        if chunk_index is not None and "chunk_size" in named:
            capped = _capped_chunk(named["chunk_size"], named)
            if capped != named["chunk_size"]:
                if chunk_index < len(args):
                    args = (*args[:chunk_index], capped, *args[chunk_index + 1 :])
                else:
                    kwargs["chunk_size"] = capped
        try:
            out = fn(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as error:
            meta = next((n for n, v in named.items() if _has_meta(v)), None)
            if meta is None or "meta" not in str(error):
                raise
            raise ValueError(
                f"{meta}: a meta tensor carries no values, and {fn.__name__} reads them (a check or a branch on the "
                "data); pass tensors with values"
            ) from None
        o = out[0] if isinstance(out, tuple) else out
        if _FINITE_CHECKS and isinstance(o, torch.Tensor) and o.device.type != "meta" and o.is_floating_point():
            n_bad = 0 if all_finite(o) else int((~torch.isfinite(o.detach())).sum())
            if n_bad:
                raise NonFiniteError(
                    f"o: {n_bad} of {o.numel()} outputs are NaN or inf although every input is finite: the result "
                    f"overflows {o.dtype} (largest finite {torch.finfo(o.dtype).max:.3g}); lower scale, normalise q "
                    "and k (l2_norm) or the values, or compute in float32/float64"
                )
        return out

    return wrapper


def check_cu_seqlens(cu_seqlens, q) -> list[int]:
    """Check fla's variable-length offsets against ``q`` and return them as Python ints.

    Convention (flash-linear-attention, FlashAttention's varlen API): the N sequences are packed one after another
    along the time axis of a batch of one, ``q`` is ``(1, T, H, D_k)``, and sequence ``n`` is the tokens
    ``cu_seqlens[n] : cu_seqlens[n + 1]``. So ``cu_seqlens`` is a 1-D integer tensor ``(N + 1,)`` that starts at 0,
    increases strictly (no empty sequence) and ends at T.

    Raises:
        TypeError: ``cu_seqlens`` is not a tensor, or not of an integer dtype.
        ValueError: ``cu_seqlens`` is not 1-D with at least two entries, does not start at 0, does not end at T or
            does not increase strictly; ``q`` is not 4-D or its batch size is not 1.
    """
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(
            f"cu_seqlens: expected an integer torch.Tensor of shape (N + 1,), got {type(cu_seqlens).__name__}"
        )
    if cu_seqlens.is_floating_point() or cu_seqlens.is_complex() or cu_seqlens.dtype == torch.bool:
        raise TypeError(f"cu_seqlens: expected an integer dtype (int32 or int64 offsets), got {cu_seqlens.dtype}")
    if cu_seqlens.device.type == "meta":
        raise ValueError("cu_seqlens: expected offsets with values (on the CPU or the device of q), got a meta tensor")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(
            "cu_seqlens: expected a 1-D tensor of shape (N + 1,) with N >= 1 sequences, "
            f"got shape {tuple(cu_seqlens.shape)}"
        )
    check_tensor("q", q)
    if q.dim() != 4 or q.shape[0] != 1:
        raise ValueError(
            "q: with cu_seqlens the sequences are packed along T in a batch of one, expected shape (1, T, H, D_k), "
            f"got {tuple(q.shape)}"
        )
    offsets = [int(x) for x in cu_seqlens.tolist()]
    T = q.shape[1]
    if offsets[0] != 0:
        raise ValueError(f"cu_seqlens: expected offsets that start at 0, got cu_seqlens[0] = {offsets[0]}")
    if offsets[-1] != T:
        raise ValueError(
            f"cu_seqlens: expected offsets that end at T = {T} (the packed length of q), got {offsets[-1]}"
        )
    steps = [b - a for a, b in zip(offsets, offsets[1:])]
    if min(steps) <= 0:
        n = steps.index(min(steps))
        raise ValueError(
            "cu_seqlens: expected strictly increasing offsets (every sequence at least one token), got "
            f"cu_seqlens[{n}] = {offsets[n]} and cu_seqlens[{n + 1}] = {offsets[n + 1]}"
        )
    return offsets
