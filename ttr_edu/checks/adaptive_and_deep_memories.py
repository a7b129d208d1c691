"""Checks for chapter 08, adaptive steps and deep memories. Each compares with :mod:`ttr_edu.ops`.

* ``longhorn_step``, ``momentum_step``, ``mlp_gradient_step``: one token of one head against the package's ops;
* ``rotation_keys(theta) -> (k1, k2)``: two unit keys whose reflections (β = 2, first ``k1``) compose the rotation
  ``R(θ)``; the check compares the product of the two steps with ``R(θ)``, so every right pair of keys passes.

One head, one token: a linear memory ``S`` is ``(D_k, D_v)``, a key ``k`` is ``(D_k,)``, a value ``v`` is ``(D_v,)``;
the MLP memory is ``(W1, W2)`` of shapes ``(D_k, D_h)`` and ``(D_h, D_v)``. The references run the package's ops in
the fla layout ``(1, 1, 1, D)`` (one batch, one token, one head). Each exercise is declared once
(:func:`ttr_edu.checks._rules.exercise`): the package's own implementations are refused as answers, and the two
gradients the text asks to derive (8.3's and 8.4's) are refused when autograd computes them, however it is reached,
when one of autograd's derivative kernels does (``gelu_backward``), and when finite differences do (they write far
more numbers per weight than a derived step, evaluate at displaced copies ``x ± ε`` or at ``x ± s`` for any step
``s``, evaluate the activation at several points per unit, or read the memory into Python floats, a printed tensor
included; :class:`_DerivedStep`).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.autograd.forward_ad as _forward_ad
from torch.utils._python_dispatch import TorchDispatchMode

from ttr_edu._internal.mlp_memory import gelu_derivative
from ttr_edu.checks._core import CheckFailed, conversion_watch, pop_watch, push_watch
from ttr_edu.checks._guard import ForbiddenCall
from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.ops import (
    TitansState,
    longhorn_chunk,
    longhorn_recurrent,
    longhorn_step_size,
    titans_recurrent,
    ttt_mlp_chunk,
    ttt_mlp_recurrent,
)
from ttr_edu.ops.ttt import _mlp_deltas
from ttr_edu.regression.deep import linear_map_gradients, momentum_sgd
from ttr_edu.regression.linear import _implicit_step

__all__ = [
    "check_longhorn_step",
    "check_rotation_keys",
    "check_momentum_step",
    "check_mlp_gradient_step",
    "rotation_keys_spec",
    "householder_product",
]


def _token(x: torch.Tensor) -> torch.Tensor:
    return x[None, None, None]  # (D,) -> (1, 1, 1, D)


def _gate(x: float) -> torch.Tensor:
    return torch.full((1, 1, 1), float(x), dtype=torch.float64)


def reference_longhorn_step(S, k, v, beta) -> torch.Tensor:
    """``argmin_S' ‖S' − S‖² + β ‖S'ᵀk − v‖²``: ``S + ε k (v − Sᵀk)ᵀ``, ``ε = β/(1 + β‖k‖²)``."""
    _, S_new = longhorn_recurrent(
        _token(k), _token(k), _token(v), _gate(beta), scale=1.0, initial_state=S[None, None], output_final_state=True
    )
    return S_new[0, 0]


def reference_momentum_step(S, U, k, v, beta, eta, alpha) -> tuple[torch.Tensor, torch.Tensor]:
    """Titans, linear memory: ``U' = η U − β k (Sᵀk − v)ᵀ``, ``S' = (1 − α) S + U'``; returns ``(S', U')``."""
    _, state = titans_recurrent(
        _token(k),
        _token(k),
        _token(v),
        _gate(beta),
        _gate(eta),
        _gate(alpha),
        scale=1.0,
        initial_state=TitansState(S[None, None], U[None, None]),
        output_final_state=True,
    )
    return state.memory[0, 0], state.momentum[0, 0]


def reference_mlp_gradient_step(W1, W2, k, v, lr) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step on ``½ ‖W2ᵀ GELU(W1ᵀk) − v‖²`` (exact GELU): returns ``(W1', W2')``."""
    _, (W1_new, W2_new) = ttt_mlp_recurrent(
        _token(k),
        _token(k),
        _token(v),
        _gate(lr),
        1,
        scale=1.0,
        initial_state=(W1[None, None], W2[None, None]),
        output_final_state=True,
    )
    return W1_new[0, 0], W2_new[0, 0]


def _cases(seed: int, n: int = 4) -> Iterator[dict]:
    for i in range(n):
        gen = torch.Generator().manual_seed(seed + i)
        d_k, d_v = 2 + i, 3 + (i % 2)
        yield {
            "d_k": d_k,
            "d_v": d_v,
            "gen": gen,
            "k": (0.5 + 1.5 * torch.rand(1, generator=gen, dtype=torch.float64))  # keys of different lengths
            * torch.randn(d_k, generator=gen, dtype=torch.float64),
            "v": torch.randn(d_v, generator=gen, dtype=torch.float64),
        }


def _longhorn_cases() -> Iterator[dict]:
    # the states are small (entries ~0.1), so a wrong step shows as a large relative error of the result rather than
    # hiding behind the part of S that every step keeps; the keys have set lengths, none near zero, and the first case
    # has β‖k‖² = 4.5, far from the explicit step's range: a wrong step fails there, by a wide margin, first
    for c, beta, norm in zip(_cases(800), (2.0, 0.3, 10.0, 0.7), (1.5, 0.6, 2.0, 1.2)):
        S = 0.1 * torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        k = norm * c["k"] / torch.linalg.vector_norm(c["k"])  # ‖k‖ = norm: keys are not unit vectors here
        yield {"S": S, "k": k, "v": c["v"], "beta": beta}


def _momentum_cases() -> Iterator[dict]:
    for c, (beta, eta, alpha) in zip(_cases(810), ((0.5, 0.9, 0.1), (0.2, 0.5, 0.3), (1.0, 0.0, 0.0), (0.3, 0.7, 0.6))):
        S = torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        U = torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        yield {"S": S, "U": U, "k": c["k"], "v": c["v"], "beta": beta, "eta": eta, "alpha": alpha}
    yield _momentum_at(10)  # a larger memory: finite differences write over 100 numbers per weight there


def _mlp_cases() -> Iterator[dict]:
    for c, lr in zip(_cases(820), (0.1, 0.5, 0.05, 1.0)):
        d_h = c["d_k"] + 2
        W1 = torch.randn(c["d_k"], d_h, generator=c["gen"], dtype=torch.float64)
        W2 = torch.randn(d_h, c["d_v"], generator=c["gen"], dtype=torch.float64) / d_h**0.5
        yield {"W1": W1, "W2": W2, "k": c["k"], "v": c["v"], "lr": lr}
    yield _mlp_at(10)  # a larger memory: finite differences write over 100 numbers per weight there


def _momentum_at(n: int) -> dict:
    """A momentum-step case with ``D_k = D_v = n``; a key of unit length on average."""
    gen = torch.Generator().manual_seed(830 + n)
    S, U = (torch.randn(n, n, generator=gen, dtype=torch.float64) for _ in range(2))
    k, v = (
        torch.randn(n, generator=gen, dtype=torch.float64) / n**0.5,
        torch.randn(n, generator=gen, dtype=torch.float64),
    )
    return {"S": S, "U": U, "k": k, "v": v, "beta": 0.5, "eta": 0.9, "alpha": 0.1}


def _mlp_at(n: int) -> dict:
    """An MLP-step case with ``D_k = D_h = D_v = n``; a key of unit length on average (the gradient's size then does
    not grow with ``n``, so a float32 answer stays within the tolerance as on the small cases)."""
    gen = torch.Generator().manual_seed(840 + n)
    W1 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    W2 = torch.randn(n, n, generator=gen, dtype=torch.float64) / n**0.5
    k, v = (
        torch.randn(n, generator=gen, dtype=torch.float64) / n**0.5,
        torch.randn(n, generator=gen, dtype=torch.float64),
    )
    return {"W1": W1, "W2": W2, "k": k, "v": v, "lr": 0.1}


#: the most numbers an answer's torch operations may write per weight of the memory. A derived step writes a few per
#: weight (4 to 9 for the package's tests' answers, an entry-by-entry loop included); central finite differences
#: evaluate the loss twice per weight, each evaluation writing at least a perturbed copy of the weights, so 50 or more
#: per weight on the smallest case and over 500 on a 12 × 12 memory, looped or batched alike.
MAX_WRITES_PER_WEIGHT = 30

#: a displaced copy ``x ± ε`` (finite differences' evaluation points): an operation's result that differs from one of
#: its inputs by the same step in every entry (``x + ε``) or by the same factor (``x (1 + ε)``), at most this fraction
#: of the input's largest entry and more than rounding. The right answers' closest results sit at 0.03 (``W − lr ∇``,
#: not one step for every entry) and 0.1 (``(1 − α) S``, one factor); a central difference that passes the values'
#: check steps by at most 1e-3 (wider steps fail at 3e-3).
MAX_STEP = 1e-2
#: any displacement at most this fraction of the input's largest entry is a displaced copy, one step or not
MAX_ANY_STEP = 1e-3
#: the operators that move a value by an offset (``x + s``, ``x − s``, ``x (1 ± s)``), at any step size: a value moved
#: both ways by the same offset, or moved and then restored, is a pair of finite-difference points (a central
#: difference is exact on a quadratic loss at any step, so the step's size tells nothing)
_OFFSET_OPS = {"add", "sub", "rsub", "mul", "addcmul", "addcdiv"}
#: the activation's evaluations (GELU and the functions GELU′ is written with) an answer to 8.4 may run per hidden
#: unit: a derived step runs 2 to 4 (GELU(a), then Φ(a) and φ(a), or the forward pass twice); a difference quotient
#: runs 2 per step, so an extrapolation over several steps (Richardson's) runs 5 or more
MAX_EVALUATIONS_PER_UNIT = 6
_ACTIVATIONS = {"gelu", "erf", "erfc", "special_ndtr", "special_log_ndtr", "exp", "tanh", "sigmoid", "special_erfcx"}
#: bound at import: while an answer runs, the check's witness puts a refusing stand-in in torch._C's place (an
#: answer must not switch the modes off), and this is the check's own reading, not the answer's
_DISABLE_TORCH_FUNCTION = torch._C.DisableTorchFunction


def _displacement(out: torch.Tensor, x: torch.Tensor) -> tuple[float, float, bool, bool] | None:
    """``(step, factor, one_step, one_factor)`` when ``out`` is a copy of ``x`` (same dtype, broadcast) displaced by
    more than rounding and at most :data:`MAX_STEP` of ``x``'s largest entry: ``step`` the displacement's largest
    magnitude, ``factor`` the largest ``|out/x − 1|``, ``one_step``/``one_factor`` whether every entry moved by one
    step, or by one factor. None otherwise."""
    if x.dtype != out.dtype or x.numel() == 0 or out.numel() == 0:
        return None
    try:
        d = (out - x).flatten()
    except RuntimeError:  # shapes that do not broadcast
        return None
    if d.numel() != out.numel():
        return None
    scale = float(x.abs().max())
    floor = 1000 * torch.finfo(x.dtype).eps * scale
    step = float(d.abs().max())
    if not (scale > 0 and floor < step <= MAX_STEP * scale) or not bool(torch.isfinite(d).all()):
        return None
    xs = x.expand_as(out).flatten()
    moved = xs.abs() > floor
    ratios = d[moved] / xs[moved]
    factor = float(ratios.abs().max()) if ratios.numel() else math.inf
    one_step = float(d.max() - d.min()) <= 2 * floor
    one_factor = ratios.numel() > 0 and float(ratios.max() - ratios.min()) <= 1e-6 * factor
    return step, factor, one_step, bool(one_factor)


def _constant(x: torch.Tensor) -> bool:
    """Whether ``x`` holds one repeated value (several entries) or is a single zero: not the answer's weights."""
    flat = x.detach().flatten()
    return bool((flat == flat[0]).all()) if flat.numel() > 1 else float(flat[0]) == 0.0


class _DerivedStep:
    """What Exercises 8.3 and 8.4 rule out besides autograd, judged by what the answer runs: finite differences. Three
    signs, each on the torch operations (a dispatch mode) or the conversions (a function mode) of one call:

    * **writes**: more than :data:`MAX_WRITES_PER_WEIGHT` numbers written per weight of the memory (``weights``: the
      case's input names); views write nothing;
    * **displaced copies**: a result that is one of its inputs moved by a small step, ``x ± ε`` or ``x (1 + ε)``
      (:func:`_displacement`), where finite differences evaluate; for a tensor of several entries once is enough, for
      single entries (an entry-by-entry loop) the same step twice. A step or factor must be written in the code (a
      number, or a tensor made from numbers alone): a tensor scaled by a number the answer computed that happens to
      lie near 1 (``k · GELU′(a_j)``) is refused only where an activation reads it, or anything computed from it;
    * **points at any step**: a value moved by ``+s`` and by ``−s`` from where it started, or moved and put back
      (``x → x + s → x − s → x``), by an offset operator (:meth:`_track_points`); a central difference is exact on a
      quadratic loss at any step, so the step's size proves nothing;
    * **evaluations**: for 8.4 (``units``, the hidden layer's width), the activation and the functions GELU′ is
      written with evaluated more than :data:`MAX_EVALUATIONS_PER_UNIT` times per unit (Richardson's extrapolation);
    * **Python numbers**: as many numbers handed to Python or NumPy (``.item()``, ``float()``, ``.tolist()``,
      ``.numpy()``, ``np.asarray``, storage, a tensor formatted by ``repr``/``print``/``format``) as
      ``python_limit`` (the memory's size for 8.3, the hidden layer's width for 8.4): finite differences in Python
      floats read them all, a derived step in torch reads none.

    ``hit`` is set on leaving: the first sign's message (writes first), ending with ``why``."""

    def __init__(
        self, case: dict, weights: tuple[str, ...], why: str, python_limit: int, limit_names: str, units: int = 0
    ) -> None:
        self.size = sum(case[name].numel() for name in weights)
        self.why, self.written = why, 0
        self.hit: str | None = None
        self.python_limit, self.limit_names = python_limit, limit_names
        self.to_python, self.last_conversion = 0, ""
        self.displaced: str | None = None
        self.single_steps: list[tuple[float, float]] = []
        self.earlier: dict[tuple, list[torch.Tensor]] = {}
        # finite-difference points at any step: a value's key -> (the value it was moved from, first of its chain;
        # the offset from there), and each first value's offsets
        self.points: dict[bytes, tuple[bytes, torch.Tensor]] = {}
        self.offsets: dict[bytes, list[torch.Tensor]] = {}
        self.units, self.evaluated = units, 0
        self.complex: str | None = None
        # storages holding a copy displaced by a small step that is not one step for every entry (``W1n[:, j] −=
        # lr g_j k`` in a right answer, ``x + ε e_i`` in finite differences): refused only when something evaluates
        # at them (:meth:`_read_displaced`); data_ptr -> the storage, kept alive so that its address is not reused
        self.pending: dict[int, Any] = {}
        # storages holding a copy scaled by one factor the answer computed that lies near 1 (``k · GELU′(a_j)`` in a
        # loop over hidden units), or anything computed from one: ordinary arithmetic, refused only when an
        # activation reads one (``gelu(a · f)``, after a clone, a stack, a matrix product or GELU written by hand);
        # data_ptr -> (the storage, kept alive so that its address is not reused; the message)
        self.scaled: dict[int, Any] = {}
        # tensors made from numbers alone (``torch.tensor(1 + 1e-6)``, ``1 + h`` of such a tensor): a factor or a
        # step written in the code, as a Python number is; data_ptr -> a weak reference to the tensor
        self.constants: dict[int, weakref.ref] = {}
        # the numbers handed to Python: conversions and printings (converted below), and single numbers, counted by
        # the dispatch mode with python.read_at_dispatch (which skips what torch's formatter reads to print)
        self.python = conversion_watch(self)
        watch = self

        class Operations(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False  # nothing here is compiled: no need to import torch._dynamo on the first operation

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if _forward_ad._current_level >= 0:  # inside a dual level: the watch must not compute on dual tensors
                    watch.hit = (  # (reading a dual tensor's results here crashed the process)
                        f"your function used autograd (torch.autograd.forward_ad.make_dual), which this exercise "
                        f"rules out: {watch.why}"
                    )
                    raise ForbiddenCall(watch.hit)
                before = None
                if func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
                    before = args[0].clone()  # an in-place step, x.add_(ε): compared with x as it was
                carried = scaled = None
                if watch.pending and watch.displaced is None and not func.is_view:
                    carried = watch._read_displaced(func, args, kwargs or {})
                if watch.scaled and watch.displaced is None:
                    scaled = watch._reads_scaled(func, args, kwargs or {})
                out = func(*args, **(kwargs or {}))
                if carried is not None and isinstance(out, torch.Tensor):
                    watch.pending[out.untyped_storage().data_ptr()] = (out.untyped_storage(), carried)
                if scaled is not None:
                    written_into = args[:1] if func._schema.is_mutable else ()
                    for o in (*(out if isinstance(out, (tuple, list)) else (out,)), *written_into):
                        if isinstance(o, torch.Tensor):
                            watch.scaled[o.untyped_storage().data_ptr()] = (o.untyped_storage(), scaled)
                watch._note_constant(func, args, out)
                if watch.python.read_at_dispatch(func, args):
                    watch.to_python += 1
                    watch.last_conversion = ".item() or float()"
                if not func.is_view:
                    outs = out if isinstance(out, (tuple, list)) else (out,)
                    for o in outs:
                        if isinstance(o, torch.Tensor) and o.is_complex() and watch.complex is None:
                            watch.complex = f"{func.__name__.split('.')[0]} made a {o.dtype} tensor"
                    watch.written += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
                    name = func.__name__.split(".")[0].removesuffix("_")
                    if name in _ACTIVATIONS:
                        watch.evaluated += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
                    if watch.displaced is None and name in _OFFSET_OPS:
                        watch._track_points(name, args, outs, before)
                    # a copy into a tensor (W_new[j, m] = value, W.copy_(...)) evaluates nothing: it moves a value
                    # computed by an earlier operation, whose step is already seen there (seen twice, it would read as
                    # an entry-by-entry step repeated)
                    if watch.displaced is None and func.__name__.split(".")[0] != "copy_":
                        watch._look_for_steps(func, args, outs, before)
                return out

        self._modes = (Operations(), self.python)

    def converted(self, numbers: int, spelled: str) -> None:
        """``numbers`` handed to NumPy or Python by a conversion or a printing, named by how they left
        (:func:`~ttr_edu.checks._core.conversion_watch`)."""
        self.to_python += numbers
        self.last_conversion = spelled

    def _look_for_steps(self, func, args: tuple, outs: tuple, before: torch.Tensor | None) -> None:
        inputs = [before if (i == 0 and before is not None) else a for i, a in enumerate(args)]
        for out in outs:
            if not (isinstance(out, torch.Tensor) and out.is_floating_point()):
                continue
            for i, x in enumerate(inputs):
                if not (isinstance(x, torch.Tensor) and x.is_floating_point()) or x is out:
                    continue
                found = _displacement(out, x)
                if found is None:
                    continue
                step, factor, one_step, one_factor = found
                uniform = one_step or one_factor
                name = func.__name__.split(".")[0]
                written = self._written_in_code(args, i)
                if out.numel() > 1 and one_factor and not one_step and not written:
                    # x times a number the answer computed that happens to lie near 1 (GELU′(a_j) ≈ 1 near a ≈ 0.75
                    # and for large a): a step only if the activation is then evaluated at the result
                    storage = out.untyped_storage()
                    self.scaled[storage.data_ptr()] = (
                        storage,
                        f"{name} scaled a tensor of shape {tuple(x.shape)} by 1 + {factor:.1e}, then the activation "
                        "was evaluated at",
                    )
                    continue
                if out.numel() > 1 and uniform:
                    self.displaced = f"{name} moved a tensor of shape {tuple(x.shape)} by {step:.1e}"
                    return
                if out.numel() > 1 and step <= MAX_ANY_STEP * float(x.abs().max()):
                    # a small move, not one step for every entry: a one-hot ``x + ε e_i`` of finite differences, or a
                    # right answer's small update written into a clone column by column; refused once evaluated at
                    storage = out.untyped_storage()
                    self.pending[storage.data_ptr()] = (
                        storage,
                        f"{name} moved a tensor of shape {tuple(x.shape)} by {step:.1e}, then it was evaluated at",
                    )
                    continue
                if out.numel() == 1:
                    # one factor near 1 for many entries is common (GELU′(a) → 1 for large a); a factor written in
                    # the code as a number, x * (1 + ε), applied twice, is a step
                    by_number = written
                    for earlier_step, earlier_factor in self.single_steps:
                        same_step = abs(step - earlier_step) <= 1e-6 * step
                        same_factor = (
                            by_number
                            and not math.isnan(earlier_factor)
                            and factor <= MAX_ANY_STEP
                            and abs(factor - earlier_factor) <= 1e-6 * factor
                        )
                        if same_step or same_factor:
                            self.displaced = (
                                f"{func.__name__.split('.')[0]} moved single entries by the same step, {step:.1e}, "
                                "more than once"
                            )
                            return
                    self.single_steps.append((step, factor if by_number else math.nan))
            if out.numel() > 1 and self.displaced is None:
                self._compare_with_earlier(func, out)

    def _note_constant(self, func, args: tuple, out: Any) -> None:
        """Remember ``out`` as written in the code when it is made from numbers alone: a factory (no tensor input;
        ``torch.tensor``'s ``lift_fresh``) or an operation on such tensors."""
        if not isinstance(out, torch.Tensor) or out.numel() > 1:
            return
        name = func.__name__.split(".")[0]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name.startswith("lift_fresh") or all(self._constant(t) for t in tensors):
            self.constants[out.untyped_storage().data_ptr()] = weakref.ref(out)

    def _constant(self, t: torch.Tensor) -> bool:
        ref = self.constants.get(t.untyped_storage().data_ptr())
        held = None if ref is None else ref()
        return held is not None and held.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()

    def _written_in_code(self, args: tuple, moved: int) -> bool:
        """Whether every operand besides ``args[moved]`` (the tensor moved) is a number written in the code: a Python
        number, or a tensor made from numbers alone (:meth:`_note_constant`), not one the answer computed."""
        return all(self._constant(a) for j, a in enumerate(args) if j != moved and isinstance(a, torch.Tensor))

    def _reads_scaled(self, func, args: tuple, kwargs: dict) -> str | None:
        """Before ``func`` runs: whether it reads a scaled copy (:attr:`scaled`). An activation reading one is refused
        (:attr:`displaced`); any other operation passes it on, its message returned for the result to carry."""
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        tensors += [t for a in args if isinstance(a, (tuple, list)) for t in a if isinstance(t, torch.Tensor)]
        for t in tensors:
            hit = self.scaled.get(t.untyped_storage().data_ptr())
            if hit is None:
                continue
            if func.__name__.split(".")[0].removesuffix("_") in _ACTIVATIONS:
                self.displaced = hit[1]
                return None
            return hit[1]
        return None

    def _read_displaced(self, func, args: tuple, kwargs: dict) -> str | None:
        """Before ``func`` runs: refuse an evaluation at a pending displaced copy (:attr:`pending`). Moving it further
        in place (``add_``/``sub_`` on it, the next column of a clone) or copying it (``copy_``, ``clone``) evaluates
        nothing, and neither does gathering it with others (``cat``, ``stack``: the columns of an update): the copy's
        storage becomes pending in its turn (returned for the result of ``clone``, ``cat`` or ``stack``, marked here
        for ``copy_``'s target)."""
        name = func.__name__.split(".")[0]
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        tensors += [t for a in args if isinstance(a, (tuple, list)) for t in a if isinstance(t, torch.Tensor)]
        for i, t in enumerate(tensors):
            hit = self.pending.get(t.untyped_storage().data_ptr())
            if hit is None:
                continue
            if i == 0 and func._schema.is_mutable and name.removesuffix("_") in ("add", "sub"):
                continue  # moved again in place: the next entries of an update written into a clone
            if name == "copy_":
                if i == 1 and isinstance(args[0], torch.Tensor):
                    target = args[0].untyped_storage()
                    self.pending[target.data_ptr()] = (target, hit[1])
                continue
            if name in ("clone", "_to_copy", "cat", "stack"):  # copied, or gathered with others (columns stacked)
                return hit[1]
            self.displaced = hit[1]
            return None
        return None

    @staticmethod
    def _key(x: torch.Tensor, shape: torch.Size) -> bytes:
        with _DISABLE_TORCH_FUNCTION():  # the check's own reading, not the answer's: no conversion counted
            x = x.detach().expand(shape).contiguous()
            return repr((x.dtype, tuple(shape))).encode() + x.cpu().numpy().tobytes()

    def _track_points(self, name: str, args: tuple, outs: tuple, before: torch.Tensor | None) -> None:
        """Finite-difference points at any step: a result of an offset operator (:data:`_OFFSET_OPS`) is its tensor
        input moved by ``out − x``; the offsets are followed along a chain (``x → x + s → x − s → x``). A value moved
        by ``+s`` and by ``−s`` from where its chain began, or moved and then brought back, is refused. The values
        a chain may begin at are the answer's numbers, not constants: a tensor of zeros (where a gradient is
        accumulated) or of one repeated value is not followed."""
        out = outs[0] if outs else None
        if not (isinstance(out, torch.Tensor) and out.is_floating_point()) or out.numel() == 0:
            return
        tensors = [before if (i == 0 and before is not None) else a for i, a in enumerate(args)]
        tensors = [a for a in tensors if isinstance(a, torch.Tensor)]
        if name == "mul" and len(tensors) != 1:
            return  # a product of two tensors moves neither by an offset written in the code
        for x in tensors:
            if not x.is_floating_point() or x.dtype != out.dtype or x is out or x.numel() > out.numel():
                continue
            try:
                d = out.detach() - x.detach()
            except RuntimeError:
                continue
            if d.shape != out.shape or not bool(torch.isfinite(d).all()):
                continue
            scale = max(float(x.abs().max()), float(out.abs().max()))
            floor = 1000 * torch.finfo(x.dtype).eps * scale
            if float(d.abs().max()) <= floor:
                continue
            key = self._key(x, out.shape)
            root, start = self.points.get(key, (key, torch.zeros_like(d)))
            if root == key and _constant(x):
                continue  # zeros (where a gradient is accumulated), ones: no weights of the answer's
            offset = start + d
            earlier = self.offsets.setdefault(root, [])
            close = 1e-9 * float(offset.abs().max()) + floor
            if float(offset.abs().max()) <= floor and float(start.abs().max()) > floor:
                self.displaced = f"{name} brought a value of shape {tuple(out.shape)} back to where it was moved from"
                return
            for e in earlier:
                if e.shape == offset.shape and float((offset + e).abs().max()) <= close:
                    self.displaced = (
                        f"{name} moved a value of shape {tuple(out.shape)} by −s where it was moved by +s before, "
                        f"|s| = {float(offset.abs().max()):.1e}"
                    )
                    return
            earlier.append(offset)
            out_key = self._key(out, out.shape)
            if out_key != root and not _constant(out):  # x · 0 replaces x by a constant, it does not move it
                self.points.setdefault(out_key, (root, offset))

    def _compare_with_earlier(self, func, out: torch.Tensor) -> None:
        """Against the results computed before (the last few of the same shape): two evaluation points ``x + ε`` and
        ``x − ε`` built apart (``torch.addmv(ε, W1ᵀ, k)``) are displaced copies of each other."""
        earlier = self.earlier.setdefault((tuple(out.shape), out.dtype), [])
        for before in earlier:
            found = _displacement(out, before)
            # by one step only: two results in one proportion are common in a right answer (rows h_j·d of an outer
            # product, for two hidden units of nearly equal h_j), two points x ± ε one step apart are not
            if found is not None and found[2]:
                name = func.__name__.split(".")[0]
                self.displaced = (
                    f"{name} gave a tensor of shape {tuple(out.shape)}, an earlier result moved by {found[0]:.1e}"
                )
                return
        earlier.append(out.detach().clone())
        del earlier[:-16]

    def __enter__(self) -> _DerivedStep:
        push_watch(*self._modes)
        return self

    def __exit__(self, *exc) -> None:
        if not pop_watch(*self._modes):
            self.hit = "your function switched off the check's watch of its torch operations; remove that code"
        elif self.complex is not None:
            self.hit = (
                f"your function computes with complex numbers ({self.complex}): the complex step evaluates the loss "
                f"at x + ih and reads the gradient off the imaginary part, a numerical gradient, which this exercise "
                f"rules out, as it rules out finite differences: {self.why}"
            )
        elif self.written > MAX_WRITES_PER_WEIGHT * self.size:
            self.hit = (
                f"your function's torch operations wrote {self.written} numbers for one step of a memory of "
                f"{self.size} weights, {self.written / self.size:.0f} per weight (a derived gradient writes about 10, "
                f"at most {MAX_WRITES_PER_WEIGHT} are allowed): finite differences evaluate the loss twice per weight, "
                f"which this exercise rules out: {self.why}"
            )
        elif self.displaced is not None:
            self.hit = (
                f"your function evaluates at a displaced copy of its own numbers ({self.displaced}, x ± ε): that is "
                f"where finite differences evaluate, and this exercise rules them out: {self.why}"
            )
        elif self.units and self.evaluated > MAX_EVALUATIONS_PER_UNIT * self.units:
            self.hit = (
                f"your function evaluated the activation (GELU, erf, Φ, exp...) {self.evaluated} times for "
                f"{self.units} hidden units, {self.evaluated / self.units:.0f} per unit (a derived GELU′ needs 2 to 4, "
                f"at most {MAX_EVALUATIONS_PER_UNIT} are allowed): evaluations at several displaced points are "
                f"finite differences, extrapolated or not, which this exercise rules out: {self.why}"
            )
        elif self.to_python >= self.python_limit:
            self.hit = (
                f"your function handed {self.to_python} numbers to Python or NumPy (the last with "
                f"{self.last_conversion}), as many as {self.limit_names} ({self.python_limit}): finite differences "
                f"in Python floats read them all, and this exercise rules them out; work in torch: {self.why}"
            )


_WHY_MOMENTUM = "derive ∇_S ℓ for ℓ = ½‖Sᵀk − v‖² (an outer product of two vectors you have) and write it out"
_WHY_MLP = "write both gradients out by the chain rule (δ = W2ᵀh − v, then back through W2 and GELU′)"


@exercise(
    reference=reference_longhorn_step,
    cases=_longhorn_cases,
    rules=Rules(
        answers=(longhorn_recurrent, longhorn_chunk, longhorn_step_size, _implicit_step),
        inputs_unchanged=True,
    ),
)
def check_longhorn_step(longhorn_step: Callable) -> bool:
    """Check ``longhorn_step(S, k, v, beta)``: the implicit (proximal) step, returns the new ``S`` and leaves ``S`` as
    it was; keys of several lengths (not unit vectors), and ``β‖k‖²`` from 0.1 to 40."""


@exercise(
    reference=reference_momentum_step,
    cases=_momentum_cases,
    rules=Rules(
        answers=(titans_recurrent, momentum_sgd),
        no_autograd=True,
        inputs_unchanged=True,
        watch=lambda case: _DerivedStep(case, ("S",), _WHY_MOMENTUM, case["S"].numel(), "the memory S has entries"),
        why=_WHY_MOMENTUM,
    ),
)
def check_momentum_step(momentum_step: Callable) -> bool:
    """Check ``momentum_step(S, U, k, v, beta, eta, alpha)``: Titans' step on a linear memory, returns ``(S, U)``,
    the gradient derived: no autograd, none of its derivative kernels (``torch.ops.aten.*_backward``), and no finite
    differences (at most :data:`MAX_WRITES_PER_WEIGHT` numbers written per weight of ``S``, no evaluation at a copy
    moved by a small step, fewer numbers handed to Python than ``S`` has entries: :class:`_DerivedStep`)."""


@exercise(
    reference=reference_mlp_gradient_step,
    cases=_mlp_cases,
    rules=Rules(
        answers=(
            ttt_mlp_recurrent,
            ttt_mlp_chunk,
            _mlp_deltas,
            titans_recurrent,
            linear_map_gradients,
            gelu_derivative,
        ),
        no_autograd=True,
        inputs_unchanged=True,
        watch=lambda case: _DerivedStep(
            case, ("W1", "W2"), _WHY_MLP, case["W1"].shape[1], "the hidden layer has units", case["W1"].shape[1]
        ),
        why=_WHY_MLP,
    ),
)
def check_mlp_gradient_step(mlp_gradient_step: Callable) -> bool:
    """Check ``mlp_gradient_step(W1, W2, k, v, lr)``: one SGD step of a two-layer GELU MLP memory, with both
    gradients written out: autograd (``backward``, ``torch.autograd``, ``torch.func``'s transforms, forward AD, the
    derivative kernels ``torch.ops.aten.*_backward`` such as ``gelu_backward``) is refused however it is reached, and
    so are finite differences (at most :data:`MAX_WRITES_PER_WEIGHT` numbers written per weight, no evaluation at a
    copy moved by a small step, GELU's included, fewer numbers handed to Python than the hidden layer has units:
    :class:`_DerivedStep`)."""


def householder_product(k1: torch.Tensor, k2: torch.Tensor, beta: float = 2.0) -> torch.Tensor:
    """The transition of one DeltaProduct token with two steps on keys ``k1`` then ``k2``:
    ``(I − β k2 k2ᵀ)(I − β k1 k1ᵀ)`` (Siems et al. 2025, eq. 4), ``(D, D)`` in the keys' (promoted) dtype."""
    dtype = torch.promote_types(k1.dtype, k2.dtype)
    k1, k2 = k1.to(dtype), k2.to(dtype)
    eye = torch.eye(k1.shape[0], dtype=dtype)
    return (eye - beta * torch.outer(k2, k2)) @ (eye - beta * torch.outer(k1, k1))


def rotation_keys_spec(theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Two unit keys of ``R²`` whose reflections compose the rotation by ``theta``: ``k1 = e1`` and ``k2`` at the
    angle ``θ/2`` (a product of two reflections rotates by twice the angle between their keys)."""
    k1 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    k2 = torch.tensor([math.cos(theta / 2), math.sin(theta / 2)], dtype=torch.float64)
    return k1, k2


def _rotation(theta: float) -> torch.Tensor:
    c, s = math.cos(theta), math.sin(theta)
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


def _transition(rotation_keys: Callable, case: dict) -> torch.Tensor:
    """The ``(2, 2)`` transition of the keys the answer returns for ``case``, built in their dtype."""
    keys = rotation_keys(**case)
    if not (
        isinstance(keys, (tuple, list))
        and len(keys) == 2
        and all(isinstance(k, torch.Tensor) and k.shape == (2,) and k.is_floating_point() for k in keys)
    ):
        raise CheckFailed(f"rotation_keys: expected two tensors of shape (2,), (k1, k2), floating, got {keys!r}")
    return householder_product(*keys)


def _keys_dtype_note(message: str, case: dict, result: Any) -> str:
    if "only the dtype differs" not in message:
        return ""
    return (
        "\n  the result compared is the transition (I − 2k₂k₂ᵀ)(I − 2k₁k₁ᵀ), built in your keys' dtype: the "
        "exercise asks for float64 keys, e.g. torch.tensor([1.0, 0.0], dtype=torch.float64)"
    )


def _angles() -> Iterator[dict]:
    for theta in (2 * math.pi / 3, math.pi / 2, 2 * math.pi / 5, -math.pi / 3, math.pi, 0.0):
        yield {"theta": theta}


def _fresh_angle(generator: torch.Generator) -> dict:
    """An angle no one has seen, uniform in [−π, π) (the grader's extra case; the public angles are fixed)."""
    return {"theta": (2 * torch.rand((), generator=generator, dtype=torch.float64).item() - 1) * math.pi}


@exercise(
    reference=_rotation,
    cases=_angles,
    fresh=_fresh_angle,
    rules=Rules(answers=(rotation_keys_spec,)),
    call=_transition,
    explain=_keys_dtype_note,
    rtol=1e-6,
    atol=1e-8,
)
def check_rotation_keys(rotation_keys: Callable) -> bool:
    """Check ``rotation_keys(theta) -> (k1, k2)``: ``(I − 2 k2 k2ᵀ)(I − 2 k1 k1ᵀ) = R(θ)`` for several angles.

    Compared: the ``(2, 2)`` transition the two keys give (in their dtype), so any correct pair passes (the keys are
    not unique); keys that are not two floating tensors of shape ``(2,)`` are refused with what was received.
    """
