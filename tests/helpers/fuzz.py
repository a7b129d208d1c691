"""The machinery of the public-API fuzz (``tests/test_fuzz_public_api.py``): argument kinds, their mutations, and
the classification of one call.

A *target* is one public callable with a recipe for a valid call: each argument has a *kind* (a float tensor with
named dims, an index tensor, a flag, an int, a number, a choice, ...) that builds a valid value from the drawn sizes
and lists the ways to break it. Each *case* is the valid call, or the valid call with one argument mutated. The
outcome of a case is one of:

* ``clean``: a valid input computed a finite output (and passed the target's own check), or a bad input was refused
  by a ``ValueError``/``TypeError`` whose message starts with the name of an argument, or announced by a warning;
* ``obscure``: any other exception (a torch error, ``IndexError``, ``ZeroDivisionError``, ...), or a ``ValueError``/
  ``TypeError`` that names no argument;
* ``silent``: a bad input accepted without a word, or a valid input that gave NaN/inf or a wrong output;
* ``refused``: a valid input refused (a bug of the target or of its recipe);
* ``hang``: the case ran past the per-case time limit.

Expectations of a mutation: ``"bad"`` must be refused or announced; ``"valid"`` must compute; ``"either"`` may do
either, as long as the outcome is clean (a meta tensor may run, yielding meta outputs, or be refused by name).

The input classes every argument is broken in, one argument at a time with the rest valid (:data:`CLASSES` counts
the cases of each): each axis of a tensor of size 0; int, bool, complex, half and another float dtype; NaN and ±inf
in float tensors and in int and float scalars; the same values in a non-contiguous view, and a stride-0 view; meta
tensors; NumPy and torch scalars where a Python number goes; ints beyond int64 and beyond a float, numbers as strings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import signal
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy
import torch

#: A size that no machine can hold: sizes must be refused (or capped) before anything is allocated for them.
HUGE = 10**12

# ------------------------------------------------------------------------------------------------------------------
# Building values
# ------------------------------------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a kind needs to build its value: the drawn sizes, a seeded generator, the float dtype of the call."""

    sizes: dict[str, int]
    gen: torch.Generator
    dtype: torch.dtype = torch.float32
    shared: frozenset = frozenset()  # dim names that appear in two or more arguments
    linked: int = 0  # how many dtype-linked float tensors the call has


def shape_of(dims, sizes) -> tuple[int, ...]:
    return tuple(sizes[d] if isinstance(d, str) else (d(sizes) if callable(d) else d) for d in dims)


Mutation = tuple[str, Callable[[], Any], str]  # label, a thunk giving the mutated value, "bad" | "valid" | "either"


@dataclass
class As:
    """A mutated value that brings its own expectation (a mutation that only breaks the input at some sizes)."""

    value: Any
    expect: str


class Kind:
    """One argument's kind: :meth:`make` builds a valid value, :meth:`mutations` the ways to break it."""

    dims: Sequence = ()

    def make(self, ctx: Ctx):
        raise NotImplementedError

    def mutations(self, value, ctx: Ctx) -> list[Mutation]:
        return []


def _resized(x: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.cat([x, x.narrow(axis, 0, 1)], dim=axis) if x.shape[axis] else x


def noncontiguous(x: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous view (every other element of a buffer twice as long)."""
    return torch.stack([x, x], dim=-1)[..., 0]


def stride0(x: torch.Tensor) -> torch.Tensor:
    """A view of ``x``'s shape whose elements all share one memory location (stride 0), as ``expand`` gives: writing
    into it in place fails, and its values are all the first element's."""
    if not x.numel():
        return x
    return x.reshape(-1)[:1].reshape([1] * x.dim()).expand(x.shape)


def tensor_mutations(x: torch.Tensor, dims, ctx: Ctx, rank: str = "bad") -> list[Mutation]:
    """Shape, layout, type and device mutations shared by every tensor kind (``rank``: what one more or one fewer
    leading axis must do; ``"either"`` for a function of any shape ``(..., D)``).

    Layout: the same values in a non-contiguous view must give the same result (``"valid"``); a stride-0 view (all
    elements one location) may be refused by name or computed, never fail inside. Size: each axis in turn of size 0,
    refused by name or computed (a shape mismatch, an empty batch, an empty sequence)."""
    out: list[Mutation] = [
        ("list", lambda: x.tolist(), "bad"),
        ("extra_dim", lambda: x[None], rank),
        ("meta", lambda: x.to("meta"), "either"),
        ("noncontiguous", lambda: noncontiguous(x), "valid"),
        ("stride0", lambda: stride0(x), "either"),
    ]
    for axis in range(x.dim()):
        if x.shape[axis]:
            out.append((f"zero_axis{axis}", lambda axis=axis: x.narrow(axis, 0, 0), "either"))
    if x.dim():
        out.append(("drop_dim", lambda: x[..., 0], rank))
    for axis, d in enumerate(dims):
        if isinstance(d, str) and d in ctx.shared and x.shape[axis]:
            out.append((f"resize_{d}", lambda axis=axis: _resized(x, axis), "bad"))
            break
    return out


@dataclass
class F(Kind):
    """A float tensor of named ``dims``.

    ``gen``: ``"randn"``, ``"unit"`` (unit rows), ``"small"`` (0.1 · randn), ``"logdecay"`` (in (−0.5, 0]),
    ``("uniform", lo, hi)`` or a callable ``(shape, gen, dtype) -> tensor``. ``neginf``: −inf is valid (a reset).
    ``linked``: must share the dtype of the call's other linked tensors. ``optional``: ``None`` is valid.
    ``extra``: more mutations, ``(label, fn(x) -> value, expect)``.
    """

    dims: Sequence = ()
    gen: Any = "randn"
    neginf: bool = False
    linked: bool = True
    optional: bool = False
    extra: Sequence = ()
    requires_grad: bool = False
    rank: str = "bad"  # what an extra or a missing axis must do ("either": a function of any shape)
    other_dtype: str | None = None  # what another float dtype must do (default: by ``linked``)

    def make(self, ctx: Ctx):
        shape = shape_of(self.dims, ctx.sizes)
        g = self.gen
        if callable(g):
            return g(shape, ctx.gen, ctx.dtype)
        if g in ("randn", "unit", "small"):
            x = torch.randn(shape, generator=ctx.gen, dtype=torch.float64)
            if g == "unit" and x.numel():
                x = torch.nn.functional.normalize(x, dim=-1)
            x = 0.1 * x if g == "small" else x
        elif g == "logdecay":
            x = -0.5 * torch.rand(shape, generator=ctx.gen, dtype=torch.float64)
        else:
            _, lo, hi = g
            x = lo + (hi - lo) * torch.rand(shape, generator=ctx.gen, dtype=torch.float64)
        return x.to(ctx.dtype).requires_grad_(self.requires_grad)

    def mutations(self, x, ctx):
        if x is None:
            return []

        def poke(value):
            def thunk():
                y = x.detach().clone()
                if y.numel():
                    y.view(-1)[y.numel() // 2] = value
                return y

            return thunk

        out: list[Mutation] = []
        if x.numel():
            out += [
                ("nan", poke(math.nan), "bad"),
                ("posinf", poke(math.inf), "bad"),
                ("neginf", poke(-math.inf), "valid" if self.neginf else "bad"),
            ]
        out += [
            ("int_dtype", lambda: x.detach().to(torch.int64), "bad"),
            ("bool_dtype", lambda: x.detach() > 0, "bad"),
            ("complex_dtype", lambda: x.detach().to(torch.complex64), "bad"),
            # half precision: refused by name, or computed (alone, it is another float dtype)
            ("half_dtype", lambda: x.detach().to(torch.float16), "bad" if self.linked and ctx.linked > 1 else "either"),
        ]
        other = torch.float64 if x.dtype != torch.float64 else torch.float32
        expect = self.other_dtype or ("bad" if self.linked and ctx.linked > 1 else "valid")
        out.append(("other_dtype", lambda: x.detach().to(other), expect))
        out.append(("none", lambda: None, "valid" if self.optional else "bad"))
        out += tensor_mutations(x.detach(), self.dims, ctx, self.rank)
        out += [(label, lambda fn=fn: fn(x.detach().clone()), expect) for label, fn, expect in self.extra]
        return out


@dataclass
class I(Kind):  # noqa: E742 - the index kind, named like F
    """An integer tensor of named ``dims`` with values in ``[0, high)`` (``high`` an int or a size name)."""

    dims: Sequence = ()
    high: Any = 2
    dtype: torch.dtype = torch.int64
    extra: Sequence = ()
    low: int = 0
    bounded: bool = True  # False: any int is valid (labels that only name groups)
    upper: bool = True  # False: no upper bound the function can know (tokens placed without a vocabulary)

    def bound(self, ctx):
        if callable(self.high):
            return self.high(ctx.sizes)
        return ctx.sizes[self.high] if isinstance(self.high, str) else self.high

    def make(self, ctx: Ctx):
        return torch.randint(self.low, self.bound(ctx), shape_of(self.dims, ctx.sizes), generator=ctx.gen).to(
            self.dtype
        )

    def mutations(self, x, ctx):
        def poke(value):
            def thunk():
                y = x.clone()
                if y.numel():
                    y.view(-1)[0] = value
                return y

            return thunk

        out: list[Mutation] = [
            ("float_dtype", lambda: x.to(torch.float32), "bad"),
            ("bool_dtype", lambda: x.bool(), "bad"),
            ("int32", lambda: x.to(torch.int32), "either"),
            ("uint8", lambda: x.clamp(0, 255).to(torch.uint8), "either"),
            ("half_dtype", lambda: x.to(torch.float16), "bad"),
            ("complex_dtype", lambda: x.to(torch.complex64), "bad"),
            ("none", lambda: None, "bad"),
        ]
        if x.numel():
            expect = "bad" if self.bounded else "valid"
            high = expect if self.upper else "valid"
            out += [("too_high", poke(self.bound(ctx)), high), ("negative", poke(self.low - 1), expect)]
        out += tensor_mutations(x, self.dims, ctx)
        out += [(label, lambda fn=fn: fn(x.clone()), expect) for label, fn, expect in self.extra]
        return out


@dataclass
class Flag(Kind):
    """A boolean flag: ``"false"``, ``1`` and ``None`` (unless ``optional``) are refused."""

    value: Any = False
    optional: bool = False

    def make(self, ctx):
        return self.value

    def mutations(self, value, ctx):
        return [
            ("str_false", lambda: "false", "bad"),
            ("int_one", lambda: 1, "bad"),
            ("none", lambda: None, "valid" if self.optional else "bad"),
            ("flipped", lambda: not value if isinstance(value, bool) else True, "valid"),
            ("numpy_bool", lambda: numpy.bool_(value), "either"),  # accepted as the bool it is, or refused by name
            ("tensor_bool", lambda: torch.tensor(bool(value)), "either"),
        ]


@dataclass
class Int(Kind):
    """An int in ``[lo, hi]``: ``value`` an int, a size name, or a callable of the sizes.

    ``huge``: what :data:`HUGE` must do (``"bad"``: refused before any allocation; ``"valid"``: capped, it runs).
    """

    value: Any = 1
    lo: int | None = 1
    hi: Any = None
    huge: str = "bad"
    optional: bool = False
    extra: Sequence = ()

    def make(self, ctx):
        v = self.value
        return ctx.sizes[v] if isinstance(v, str) else (v(ctx.sizes) if callable(v) else v)

    def mutations(self, value, ctx):
        out: list[Mutation] = [] if self.lo is None else [("below", lambda: self.lo - 1, "bad")]
        out += [
            ("bool", lambda: True, "bad"),
            ("float", lambda: 2.5, "bad"),
            ("str", lambda: "3", "bad"),
            ("none", lambda: None, "valid" if self.optional else "bad"),
            ("huge", lambda: HUGE, self.huge),
            # no tensor can hold it: refused by name, or capped where HUGE is
            ("beyond_int64", lambda: 10**30, "either" if self.huge == "valid" else self.huge),
            ("nan", lambda: math.nan, "bad"),
            ("inf", lambda: math.inf, "bad"),
            ("str_huge", lambda: "1" + "0" * 30, "bad"),
        ]
        if isinstance(value, int) and not isinstance(value, bool):
            out += [  # the same number as NumPy or torch gives it: taken as that int, or refused by name
                ("numpy_int", lambda: numpy.int64(value), "either"),
                ("tensor_int", lambda: torch.tensor(value), "either"),
                ("numpy_float", lambda: numpy.float64(value), "either"),
            ]
        hi = self.hi(ctx.sizes) if callable(self.hi) else self.hi
        if hi is not None:
            out.append(("above", lambda: hi + 1, "bad"))
        out += [(label, lambda fn=fn: fn(value), expect) for label, fn, expect in self.extra]
        return out


@dataclass
class Num(Kind):
    """A real number in ``[lo, hi]`` (open at ``lo`` when ``lo_open``). ``big``/``tiny``: what 1e300 and 1e-300 must
    do (``"bad"``: refused, as they overflow or underflow the compute dtype)."""

    value: Any = 1.0
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    optional: bool = False
    big: str = "bad"
    tiny: str = "bad"

    def make(self, ctx):
        return self.value

    def mutations(self, value, ctx):
        # 1e300 and 1e-300 overflow and underflow float32, not float64: with float64 inputs they may run
        big, tiny = (
            ("either" if e == "bad" else e for e in (self.big, self.tiny))
            if ctx.dtype == torch.float64
            else (self.big, self.tiny)
        )
        out: list[Mutation] = [
            ("nan", lambda: math.nan, "bad"),
            ("inf", lambda: math.inf, "bad"),
            ("str", lambda: "1", "bad"),
            ("bool", lambda: True, "bad"),
            ("none", lambda: None, "valid" if self.optional else "bad"),
            ("list", lambda: [1.0], "bad"),
            ("big", lambda: 1e300, big if self.hi is None else "bad"),
            ("huge_int", lambda: 10**400, "bad"),  # an int no float can hold: float() overflows
            ("str_nan", lambda: "nan", "bad"),
            ("complex", lambda: 1 + 1j, "bad"),
        ]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out += [  # the same number as NumPy or torch gives it
                ("numpy_float", lambda: numpy.float64(value), "valid"),  # a float subclass: must work as the float
                ("numpy_float32", lambda: numpy.float32(value), "either"),
                ("tensor_scalar", lambda: torch.tensor(float(value)), "either"),
                ("numpy_nan", lambda: numpy.float64("nan"), "bad"),
                ("tensor_nan", lambda: torch.tensor(math.nan), "bad"),
            ]
        if self.lo is not None:
            out.append(("below", lambda: self.lo - 1.0, "bad"))
            if self.lo_open:
                out.append(("at_lo", lambda: self.lo, "bad"))
        if self.lo is None or self.lo < 1e-300 < (self.hi if self.hi is not None else math.inf):
            out.append(("tiny", lambda: 1e-300, tiny))
        if self.hi is not None:
            out.append(("above", lambda: self.hi + 1.0, "bad"))
        return out


@dataclass
class Choice(Kind):
    """One of a few strings: an unknown name and a non-str are refused."""

    value: Any = None
    options: Sequence = ()

    def make(self, ctx):
        return self.value

    def mutations(self, value, ctx):
        out: list[Mutation] = [("unknown", lambda: "no_such_choice", "bad"), ("int", lambda: 3, "bad")]
        out += [(f"option_{o}", lambda o=o: o, "valid") for o in self.options if o != value]
        return out


@dataclass
class Obj(Kind):
    """Any other value, built by ``factory(ctx)``; ``extra`` mutations are ``(label, fn(value, ctx) -> value,
    expect)``; ``wrong_type`` adds a mutation passing an int."""

    factory: Callable[[Ctx], Any] = lambda ctx: None
    extra: Sequence = ()
    wrong_type: bool = True
    optional: bool = False

    def make(self, ctx):
        return self.factory(ctx)

    def mutations(self, value, ctx):
        out: list[Mutation] = []
        if self.wrong_type:
            out.append(("wrong_type", lambda: 3, "bad"))
        if self.optional:
            out.append(("none", lambda: None, "valid"))
        out += [(label, lambda fn=fn: fn(value, ctx), expect) for label, fn, expect in self.extra]
        return out


@dataclass
class Tup(Kind):
    """A tuple of tensors (a state such as ``(S, P)`` or ``(W1, W2)``): each part's mutations (a part of another float
    dtype than the call's is refused, as a half one is), a lone tensor, a shorter tuple. ``wrap``: builds the
    container from the parts (default ``tuple``)."""

    parts: Sequence = ()
    optional: bool = True
    wrap: Callable = tuple

    def make(self, ctx):
        return self.wrap([p.make(ctx) for p in self.parts])

    def mutations(self, value, ctx):
        out: list[Mutation] = [
            ("lone_tensor", lambda: value[0], "bad"),
            ("short", lambda: tuple(value[:-1]), "bad"),
            ("none", lambda: None, "valid" if self.optional else "bad"),
        ]
        for i, part in enumerate(self.parts):
            for label, thunk, expect in part.mutations(value[i], ctx):
                if label == "none":
                    continue
                out.append((f"[{i}]{label}", lambda i=i, thunk=thunk: self._replace(value, i, thunk()), expect))
        return out

    def _replace(self, value, i, new):
        items = list(value)
        items[i] = new
        return self.wrap(items)


def Gen() -> Obj:  # reads as a kind
    """An optional ``torch.Generator``."""
    return Obj(factory=lambda ctx: torch.Generator().manual_seed(0), optional=True)


#: The classes of input the fuzz covers, by the label of a case's mutation (the part after ``arg:``), for the tally.
CLASSES = {
    "zero-size dims": re.compile(r"(^|\])(zero_axis\d+|empty_\w+)$|^empty:"),
    "dtypes (int, bool, complex, half, mixed)": re.compile(
        r"(^|\])(int_dtype|bool_dtype|complex_dtype|half_dtype|other_dtype|float_dtype|int32|uint8)$"
    ),
    "NaN and inf": re.compile(r"(^|\])(nan|posinf|neginf|inf|numpy_nan|tensor_nan|str_nan)$"),
    "layout (non-contiguous, stride 0)": re.compile(r"(^|\])(noncontiguous|stride0)$"),
    "meta tensors": re.compile(r"(^|\])meta$|^all_meta$"),
    "NumPy and torch scalars": re.compile(r"(^|\])(numpy_\w+|tensor_\w+)$"),
    "huge numbers and strings": re.compile(r"(^|\])(huge|beyond_int64|huge_int|big|tiny|str|str_\w+)$"),
    "valid calls": re.compile(r"^valid$"),
}


def class_of(label: str) -> str:
    """The input class of a case (:data:`CLASSES`); anything else is "other mutations" (shapes, ranges, types)."""
    mutation = label.split(":", 1)[-1]
    return next((name for name, pattern in CLASSES.items() if pattern.search(mutation)), "other mutations")


# ------------------------------------------------------------------------------------------------------------------
# Targets and cases
# ------------------------------------------------------------------------------------------------------------------


def finite_problem(out, path="output") -> str | None:
    """The first non-finite floating tensor in ``out`` (tuples, lists, dicts and dataclasses searched), or None."""
    if isinstance(out, torch.Tensor):
        if out.device.type == "meta" or not (out.is_floating_point() or out.is_complex()):
            return None
        with torch.no_grad():
            if not bool(torch.isfinite(out).all()):
                return f"{path} holds NaN/inf"
        return None
    if isinstance(out, float) and not math.isfinite(out):
        return f"{path} is {out}"
    if isinstance(out, (tuple, list)):
        for i, item in enumerate(out):
            problem = finite_problem(item, f"{path}[{i}]")
            if problem:
                return problem
    if isinstance(out, dict):
        for key, item in out.items():
            problem = finite_problem(item, f"{path}[{key!r}]")
            if problem:
                return problem
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        for f in dataclasses.fields(out):
            problem = finite_problem(getattr(out, f.name), f"{path}.{f.name}")
            if problem:
                return problem
    return None


@dataclass
class Target:
    """One public callable: ``call(**args)`` runs it, ``args`` gives each argument's kind.

    ``sizes``: the size names it draws, with their ranges (defaults in the test module). ``empty``: dims whose size
    0 must be refused. ``check(out, args, sizes)``: a problem with a valid output (beyond finiteness), or None.
    ``names``: more names an error may start with. ``dtype``: the float dtype of its tensors. ``limit``: a per-case
    time limit in seconds (default: the module's).
    """

    name: str
    call: Callable[..., Any]
    args: dict[str, Kind] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    empty: Sequence[str] = ()
    check: Callable | None = None
    names: Sequence[str] = ()
    dtype: torch.dtype | None = None  # None: drawn, float32 or float64
    limit: float | None = None
    finite: bool = True  # whether a valid output must be finite (tile_owner_map marks masked lanes with NaN)
    errors: tuple = ()  # more exception types that are clean when they name an argument (a file's OSError)
    valid_when: Callable | None = None  # sizes -> whether the unmutated call is valid at these sizes (default: yes)
    skip: Sequence[str] = ()  # mutation labels ("arg:label") that do not apply, each with its reason in a comment

    def dims(self) -> set[str]:
        found = set()
        for kind in self.args.values():
            for sub in getattr(kind, "parts", (kind,)):
                found |= {d for d in getattr(sub, "dims", ()) if isinstance(d, str)}
                if isinstance(sub, Int) and isinstance(sub.value, str):
                    found.add(sub.value)
        return found | set(self.sizes)


NAMED = re.compile(r"^([A-Za-z_][A-Za-z_0-9.]*)(\[[^\]]+\])*( \([^)]*\))?: ")


class Hang(BaseException):
    """Raised by the timer: a case ran past its time limit (a BaseException: no ``except Exception`` eats it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def alarm(signum, frame):
        raise Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    kind: str  # clean | obscure | silent | refused | hang
    detail: str = ""


def classify(
    call: Callable[[], Any], expect: str, allowed: set[str], check, limit: float, errors=(), finite: bool = True
) -> Outcome:
    """Run one case and classify its outcome (see the module docstring); ``errors``: more exception types that count
    as a named refusal (besides ``ValueError`` and ``TypeError``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with time_limit(limit):
                out = call()
        except Hang:
            return Outcome("hang", f"over {limit} s")
        except (ValueError, TypeError, *errors) as error:
            message = str(error)
            match = NAMED.match(message)
            head = match.group(1).split(".")[0] if match else None
            if head not in allowed:
                return Outcome("obscure", f"{type(error).__name__} naming no argument: {message[:200]}")
            if expect == "valid":
                return Outcome("refused", f"{type(error).__name__}: {message[:200]}")
            return Outcome("clean", "refused")
        except Exception as error:  # anything else is obscure by definition
            return Outcome("obscure", f"{type(error).__name__}: {str(error)[:200]}")
    announced = [
        w
        for w in caught
        if issubclass(w.category, (RuntimeWarning, UserWarning)) and w.category is not DeprecationWarning
    ]
    if expect == "bad":
        if announced:
            return Outcome("clean", "announced")
        return Outcome("silent", "a bad input was accepted without a word")
    problem = finite_problem(out) if finite else None
    if problem is None and check is not None:
        problem = check(out)
    if problem:
        return Outcome("silent", problem)
    return Outcome("clean", "ok")
