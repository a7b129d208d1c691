"""An exercise, declared once: its reference, its cases, its tolerances and its rules (CONTRIBUTING.md, "Notebooks
and exercises"; ``grading.md`` for how a notebook is graded).

A chapter's check module declares each exercise with :func:`exercise` on the check function the notebook calls::

    @exercise(reference=hebbian.hebbian_write, cases=_write_cases, rules=Rules(inputs_unchanged=True))
    def check_write(write: Callable) -> bool:
        \"\"\"Check ``write(W, k, v) -> W + v kᵀ`` ...\"\"\"

The same declaration is run two ways, with the same verdict:

* in the student's kernel (``checks.check_write(write)``): :func:`run_in_kernel`, fast feedback;
* by the grading engine (``ttr_edu.checks.grading.engine``): the answer runs in a child process holding only the
  notebook's setup cells, the student's answer cells and the package, held to the rules by
  :func:`ttr_edu.checks._guard.lock_down`; what it returns crosses back as plain tensors, and the reference, the
  comparison and the rule verdicts (:func:`judge_case`, :func:`judge_ops`, :func:`judge_work`) run in the grader's
  own process.

In both, the answer runs first and the reference afterwards (nothing of the expected value exists while the answer
runs), and a case's tensors are cloned for each call.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode

from ttr_edu.checks import _core
from ttr_edu.checks._core import CheckFailed, describe
from ttr_edu.checks._guard import SOLVERS, Forbidden, ForbiddenCall, forbidden, given_only, watching
from ttr_edu.checks._witness import Witness
from ttr_edu.profiling import _CountOperations, _CountWork, work_count

__all__ = [
    "Rules",
    "OpCount",
    "WorkCount",
    "Exercise",
    "exercise",
    "Outcome",
    "NotAttempted",
    "answer_outcome",
    "judge_case",
    "judge_source",
    "judge_ops",
    "judge_work",
    "counting_ops",
    "run_in_kernel",
    "to_plain",
    "plain_size",
    "Foreign",
    "Staged",
    "staged",
    "run_staged",
    "to_record",
    "outcome_from",
    "outcome_of",
    "reseeded",
    "fresh_case",
    "has_fresh",
    "rule_case",
]


@dataclass(frozen=True)
class OpCount:
    """A rule about loops ("no Python loop", "a loop over t", "one step per chunk"): how the number of torch
    operations the answer runs grows between the two ``sizes`` of ``case(n)``.

    The operations are counted below autograd, at torch's dispatcher (``torch.ops.aten``), so every spelling of a
    loop counts, and the count does not depend on the machine. Their growth exponent
    ``log(ops₂ / ops₁) / log(n₂ / n₁)`` must lie in ``[low, high]``: vectorised code measures about 0, a loop over
    ``n`` about 1, a loop over the ``T / n`` chunks of a fixed ``T`` about −1. The answer's output at each size is
    compared with the reference too. ``size_name`` names ``n`` in the message, and ``expect`` says what the exercise
    asks for instead.
    """

    case: Callable[[int], dict]
    sizes: tuple[int, int]
    low: float = -math.inf
    high: float = math.inf
    size_name: str = "n"
    expect: str = ""


@dataclass(frozen=True)
class WorkCount:
    """A rule about cost ("linear cost in ``T``", "``O(D²)`` per step"): how the work of the torch operations the
    answer runs grows between the two ``sizes`` of ``case(n)``.

    The work is counted below autograd, at torch's dispatcher, as :func:`ttr_edu.profiling.work_count` counts it:
    the elements each operation reads and writes (views none) plus the multiply-adds of matrix products, every
    operation, read from its schema. It depends only on the shapes and the code path, so the rule holds on a loaded
    machine as on an idle one. The growth exponent ``log(work₂ / work₁) / log(n₂ / n₁)`` may be at most ``high``: for
    sizes ``T`` and ``4T``, a cost linear in ``T`` measures at most 1 (less where a part does not grow with ``T``), a
    ``T × T`` matrix or a loop that re-reads the whole prefix close to 2. The answer's output at each size is
    compared with the reference too. While the work is counted, moving a tensor's values out of torch (``.numpy()``,
    ``.tolist()``, ``numpy.asarray``), where no count sees them, is refused. ``size_name`` names ``n`` in the message,
    and ``expect`` says what the exercise asks for instead.

    With ``affine``, the rule is exact rather than a bound on the exponent: ``sizes`` are three, ``(n, 2n, 4n)``, and
    since the counts are integers that depend only on the shapes, a cost linear in ``n`` (the same work per token or
    per chunk, plus a part that does not grow) gives ``W(4n) − 3 W(2n) + 2 W(n) = 0`` exactly: the step from ``2n`` to
    ``4n`` adds twice what the step from ``n`` to ``2n`` adds. Any work that grows with a token's or a chunk's
    position (a prefix re-summed, an output copied again by ``torch.cat``) makes it positive, however small its share;
    an exponent bound lets a small quadratic part through at small sizes. Pick sizes where every right form is affine
    (for a chunk form, multiples of its chunk size, so that no chunk is short).

    With a ``yardstick`` (a plain torch implementation of what the exercise asks for), the work at the largest size
    may also be at most ``at_most`` times the yardstick's own work on the same inputs: an exponent bound alone lets a
    cost of the right order but many times the size through (a fixed number of conjugate-gradient steps per pair
    grows like ``D_k²``, as two rank-one updates do, at twenty times their work).
    """

    case: Callable[[int], dict]
    sizes: tuple[int, ...]
    high: float
    size_name: str = "T"
    expect: str = ""
    affine: bool = False
    yardstick: Callable[..., Any] | None = None
    at_most: float = math.inf

    def __post_init__(self) -> None:
        if self.affine:
            if len(self.sizes) != 3 or not (2 * self.sizes[0] == self.sizes[1] and 2 * self.sizes[1] == self.sizes[2]):
                raise ValueError(f"WorkCount(affine=True): sizes must be (n, 2n, 4n), got {self.sizes}")
        elif len(self.sizes) != 2:
            raise ValueError(f"WorkCount: sizes must be two sizes (three with affine=True), got {self.sizes}")
        if (self.yardstick is None) != (self.at_most == math.inf):
            raise ValueError("WorkCount: a yardstick and its bound at_most come together")


@dataclass(frozen=True)
class Rules:
    """What an exercise rules out or requires, beyond agreeing with its reference.

    Attributes:
        answers: the package's own implementations of the exercise besides the reference (always ruled out): a
            function the reference wraps, or another module's copy.
        no_solvers: no inverse, solve, least squares, factorisation or eigen/singular-value routine of torch, numpy or
            scipy (blocked at torch's dispatcher, so every spelling counts).
        no_autograd: no ``backward``, ``torch.autograd``, ``torch.func`` transform or forward AD.
        inputs_unchanged: the answer may not modify an input tensor in place (also one inside a tuple or list, e.g.
            ``initial_state = (S0, P0)``). The default for every exercise: an answer that overwrites its inputs passes
            its own cases (each call gets copies) but breaks the notebook's later cells, which pass it their tensors.
            An exercise whose text asks for work in place opts out with ``inputs_unchanged=False`` and a comment
            saying why; a module the answer is asked to change (a model it wires or trains) is no tensor input, so
            those exercises keep the default.
        keep_grad: names of inputs the result must carry gradients back to (no ``detach``, ``.item()`` or
            ``no_grad`` on the way): the answer's vector-Jacobian products are compared with the reference's.
        watch: for a rule that depends on the case (its sizes): ``watch(case)`` is a context, entered around each
            call of the answer, whose value has a ``hit`` attribute (the first broken rule's message, or None); it
            watches the torch operations the answer runs (a ``TorchDispatchMode``, say) and may also raise
            :class:`~ttr_edu.checks._guard.ForbiddenCall` to stop the answer there. Used where a rule is about sizes,
            e.g. "invert no block wider than ``block``" (chapter 11's blocked inverse).
        source: for a rule no run at the cases' sizes can show (a Triton kernel's int32 offsets overflow only past
            2³¹ elements): ``source(answer)`` reads the answer's source and returns what breaks the rule, or None. It
            runs where the answer runs and is reported once every case agrees (:func:`judge_source`).
        op_count: how its number of torch operations may grow with a size (:class:`OpCount`): no Python loop, or one.
        work: how the work of its torch operations may grow with a size (:class:`WorkCount`, one per size that
            matters): a cost linear in ``T``, a step whose cost does not grow faster than ``D_k²``.
        returns: the Python type the exercise asks the result to be (``float``: "return it as a Python float"); a
            result of another type (a 0-d tensor) fails, naming both.
        why: what to do instead, in the exercise's words; ends the message of a broken rule.
    """

    answers: tuple[Callable, ...] = ()
    no_solvers: bool = False
    no_autograd: bool = False
    inputs_unchanged: bool = True
    keep_grad: tuple[str, ...] = ()
    watch: Callable[[dict], AbstractContextManager] | None = None
    source: Callable[[Callable], str | None] | None = None
    op_count: OpCount | None = None
    work: tuple[WorkCount, ...] = ()
    returns: type | None = None
    why: str = ""

    def __post_init__(self) -> None:
        if self.keep_grad and self.no_autograd:
            raise ValueError("rules: keep_grad needs autograd to measure the gradients, so it excludes no_autograd")


def _call(answer: Callable, case: dict) -> Any:
    return answer(**case)


@dataclass(frozen=True)
class Exercise:
    """One exercise's check, declared (see the module's docstring). ``call(answer, case)`` calls the answer on a case
    where the answer runs (default ``answer(**case)``); ``explain(message, case, result)`` may add words to a failure
    of the values (``result``: what the answer returned, as the grader sees it).
    ``rtol``/``atol`` hold where the case's tensors are float64, ``tol32`` (``(rtol, atol)``) where one of them is
    float32 or narrower: there the answer and the reference round differently by more.
    ``given``: the package's functions and classes the chapter's text hands the student for this exercise (feature
    maps, data helpers, a base class to subclass). In the grading engine every other function of the package is
    emptied before the answer runs (:func:`ttr_edu.checks._guard.lock_down`): only these, what they use, and the
    harness (``ttr_edu.checks``) are left to call.
    ``fresh(generator) -> case``: for an exercise whose cases are parameters rather than random tensors (an angle, a
    width and a length), a case of the same kind drawn from ``generator``; the grading engine calls the answer on one
    such case no one has seen (:func:`fresh_case`). Exercises whose cases draw random tensors need none: their own
    case generator, reseeded, gives it."""

    name: str
    reference: Callable
    cases: Callable[[], Iterable[dict]]
    rules: Rules = field(default_factory=Rules)
    rtol: float = 1e-6
    atol: float = 1e-8
    call: Callable[[Callable, dict], Any] = _call
    explain: Callable[[str, dict, Any], str] | None = None
    tol32: tuple[float, float] = (1e-4, 1e-5)
    given: tuple[Any, ...] = ()
    fresh: Callable[[torch.Generator], dict] | None = None

    def tolerances(self, case: dict) -> tuple[float, float]:
        """``(rtol, atol)`` for ``case``: the exercise's own, or ``tol32`` when a tensor of the case is float32 or
        narrower."""
        narrow = any(
            isinstance(v, torch.Tensor) and v.is_floating_point() and torch.finfo(v.dtype).bits < 64
            for v in case.values()
        )
        return (max(self.rtol, self.tol32[0]), max(self.atol, self.tol32[1])) if narrow else (self.rtol, self.atol)

    def forbidden(self, *, solver_modules: Iterable[str] | None = None) -> Forbidden:
        """What the answer may not reach: the reference and the declared package implementations, and the rules."""
        return forbidden(
            answers=(self.reference, *self.rules.answers),
            no_solvers=self.rules.no_solvers,
            no_autograd=self.rules.no_autograd,
            why=self.rules.why,
            solver_modules=solver_modules,
        )


def exercise(
    *,
    reference: Callable,
    cases: Callable[[], Iterable[dict]],
    rules: Rules | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    call: Callable[[Callable, dict], Any] = _call,
    explain: Callable[[str, dict, Any], str] | None = None,
    tol32: tuple[float, float] = (1e-4, 1e-5),
    given: Iterable[Any] = (),
    fresh: Callable[[torch.Generator], dict] | None = None,
) -> Callable[[Callable], Callable[[Callable], bool]]:
    """Declare the exercise checked by the decorated ``check_<name>`` function (whose docstring says what it checks);
    the function becomes its check in the student's kernel, and carries the declaration (``__exercise__``) for the
    grading engine. ``given``: the package's functions and classes the answer may call (:attr:`Exercise.given`);
    ``fresh``: a case drawn from a generator, where the cases are parameters (:attr:`Exercise.fresh`).

    Raises:
        TypeError: something in ``given`` that is neither a function nor a class.
    """
    given = tuple(given)
    for value in given:
        if not (isinstance(value, type) or callable(value)):
            raise TypeError(f"exercise: given expects functions and classes, got {type(value).__name__}")

    def wrap(fn: Callable) -> Callable[[Callable], bool]:
        declared = Exercise(
            fn.__name__.removeprefix("check_"),
            reference,
            cases,
            rules or Rules(),
            rtol,
            atol,
            call,
            explain,
            tol32,
            given,
            fresh,
        )

        @functools.wraps(fn)
        def check(answer: Callable) -> bool:
            return run_in_kernel(declared, answer)

        check.__exercise__ = declared
        return check

    return wrap


# -- one call of the answer ------------------------------------------------------------------------------------------


#: what an untouched stub's check asks the student to do
_FILL_IN = "fill in the function above, run its cell, then run this check again."


class NotAttempted(Exception):
    """The answer is the untouched stub. ``NotAttempted(name)``, or ``NotAttempted(name, line, todo)`` with what the
    check in the student's kernel asks the student to do instead of the usual request (``line``: the whole line, for
    the record)."""


@dataclass
class Outcome:
    """What one call of the answer gave, as plain data (it crosses from the engine's child to the grader):
    ``result`` (see :func:`to_plain`), or the ``raised`` message, or ``not_attempted``, or a ``broke_rule`` message
    (the answer was stopped); ``called``: what the call trace saw it reach that it may not (reported once the values
    are judged: a wrong answer is shown as wrong first); ``inputs_after`` (the case's tensors after the call) and
    ``grads`` (input name -> vector-Jacobian product) when the rules ask for them; ``ops``: the number of torch
    operations the call ran, when counted (:class:`OpCount`); ``work``: their work, when counted (:class:`WorkCount`),
    and ``cat_work`` the part of it done by ``torch.cat`` (it only words the message: :func:`judge_work`);
    ``source``: what the rules' reading of the answer's source found (:func:`judge_source`)."""

    result: Any = None
    raised: str | None = None
    not_attempted: bool = False
    broke_rule: str | None = None
    called: str | None = None
    inputs_after: dict | None = None
    grads: dict | None = None
    source: str | None = None
    ops: int | None = None
    work: int | None = None
    cat_work: int | None = None

    def as_dict(self) -> dict:
        return dict(vars(self))


class Foreign:
    """Stands, in the grader, for a result that was no plain tensor or number: its type's name and kind."""

    def __init__(self, type_name: str, tensor_subclass: bool) -> None:
        self.type_name, self.tensor_subclass = type_name, tensor_subclass

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def to_plain(value: Any, depth: int = 0) -> Any:
    """``value`` as data that ``torch.load(weights_only=True)`` reads: a plain tensor (detached, cloned) or number
    stays; a tuple or list is converted item by item; anything else becomes ``{"foreign": type name, "tensor": bool}``.
    Methods are called through ``torch.Tensor``, never through the value, and a tensor carrying attributes of its
    own is foreign too."""
    kind = type(value)  # compared by identity: a metaclass could answer == for a class of the student's
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind is torch.Tensor or kind is torch.nn.Parameter:
        if (getattr(value, "__dict__", None) or {}) or value.layout is not torch.strided:
            return {"foreign": f"{type(value).__name__} with attributes of its own", "tensor": True}
        return torch.Tensor.clone(torch.Tensor.detach(value)).cpu()
    if (kind is tuple or kind is list) and depth < 4:
        return kind(to_plain(v, depth + 1) for v in value)
    numpy = sys.modules.get("numpy")
    scalars = (numpy.float64, numpy.float32, numpy.int64, numpy.int32, numpy.bool_) if numpy is not None else ()
    if any(kind is t for t in scalars):
        return value.item()
    return {"foreign": str(getattr(kind, "__name__", "?")), "tensor": isinstance(value, torch.Tensor)}


#: how deep and how large a record the grader reads back from the answers' process may be (:func:`plain_size`):
#: :func:`to_record` nests at most 6 levels of dicts and lists around :func:`to_plain`'s 4 levels of tuples and
#: lists and an outcome's own dict; the largest honest record of the solved chapters holds a few hundred items
PLAIN_DEPTH = 16
PLAIN_ITEMS = 20_000


def plain_size(value: Any, *, depth: int = PLAIN_DEPTH, items: int = PLAIN_ITEMS) -> tuple[int, int]:
    """``(items, depth)`` of plain data read back from the answers' process (containers, their entries, dict keys
    and leaves, each counted once), walked without recursion and without expanding anything, so that its cost is
    bounded whatever the data: ``torch.load`` keeps pickle's memo, so a few bytes can hold one list referenced a
    million times, which every later walk (:func:`from_plain`, a judge) would expand. :func:`to_plain` and
    :func:`to_record` build a new container for every value, so a list, tuple or dict met twice is never honest.

    Raises:
        ValueError: a container met twice, more than ``items`` items, or deeper than ``depth`` levels.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    count = deepest = 0
    while stack:
        node, level = stack.pop()
        count += 1
        if count > items:
            raise ValueError(f"a report of more than {items} items (the grader reads no record that large)")
        deepest = max(deepest, level)
        kind = type(node)
        if kind is dict or kind is list or kind is tuple:
            if level >= depth:
                raise ValueError(f"a report nested deeper than {depth} levels")
            if node and id(node) in seen:  # () is one object in CPython: an empty tuple may recur
                raise ValueError("a report holding one container in several places (the grader writes none)")
            seen.add(id(node))
            if len(node) > items:
                raise ValueError(f"a report of more than {items} items (the grader reads no record that large)")
            entries = [x for pair in node.items() for x in pair] if kind is dict else node
            stack.extend((entry, level + 1) for entry in entries)
    return count, deepest


def from_plain(value: Any, depth: int = 0) -> Any:
    """The grader's view of :func:`to_plain`'s data: foreign markers become :class:`Foreign`.

    Raises:
        ValueError: data nested deeper than :data:`PLAIN_DEPTH` (:func:`to_plain` writes 4 levels).
    """
    if depth > PLAIN_DEPTH:
        raise ValueError(f"a result nested deeper than {PLAIN_DEPTH} levels")
    if isinstance(value, dict) and set(value) == {"foreign", "tensor"}:
        return Foreign(str(value["foreign"]), bool(value["tensor"]))
    if type(value) in (tuple, list):
        return type(value)(from_plain(v, depth + 1) for v in value)
    return value


def _cloned(case: dict, keep_grad: tuple[str, ...] = ()) -> dict:
    given = _core._cloned(case)
    for name, value in given.items():  # a state given as a tuple of tensors, e.g. initial_state = (S0, P0)
        if type(value) is tuple or type(value) is list:
            given[name] = type(value)(v.clone() if isinstance(v, torch.Tensor) else v for v in value)
    for name in keep_grad:
        if isinstance(given.get(name), torch.Tensor) and given[name].is_floating_point():
            given[name] = given[name].detach().requires_grad_()
    return given


def _cotangent(shape: torch.Size, dtype: torch.dtype, index: int) -> torch.Tensor:
    """The direction a vector-Jacobian product is taken in, the same in the grader and the answer's process."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(7000 + index), dtype=dtype)


def _vjp(result: Any, given: dict, names: tuple[str, ...], index: int) -> dict:
    """``{name: ∂⟨result, c⟩/∂given[name]}`` for a tensor ``result`` (None where no gradient arrives)."""
    if not isinstance(result, torch.Tensor) or not result.is_floating_point() or not result.requires_grad:
        return {name: None for name in names}
    inputs = [given[name] for name in names]
    grads = torch.autograd.grad(
        result, inputs, _cotangent(result.shape, result.dtype, index), allow_unused=True, retain_graph=False
    )
    return {name: None if g is None else g.detach() for name, g in zip(names, grads)}


#: the ways a tensor's values leave torch, where no count of its operations sees what is done with them
_ESCAPES = ("numpy", "tolist", "__array__", "__dlpack__")


class _Outside(_core.PythonNumbers):
    """What a count of the answer's torch operations must know about the calls around them.

    * Printing a tensor (``repr``, ``format``): torch's formatter runs operations of its own, which are not the
      answer's work; the count and the work are put back as they were before the printing (a debugging
      ``print(S)`` once in a loop over ``T`` lowered 2.1's measured growth below its bound).
    * With ``work`` counted (``budget``: how many numbers the answer may read into Python), values moved out of torch
      (``.numpy()``, ``.tolist()``, ...) are refused, and so are more than ``budget`` numbers read or printed into
      Python (``.item()``, ``float()``, ``int()``, a printed tensor: :func:`~ttr_edu.checks._core.numbers_handed`
      says which count and how many; a few are ordinary, a step size or a norm for a message): a Gauss–Jordan in
      Python floats, or a prefix re-read number by number, does work the count cannot see.
    Refusals raise :class:`ForbiddenCall`."""

    def __init__(self, counter: Any, work: bool, budget: int) -> None:
        super().__init__()
        self.counter, self.work, self.budget = counter, work, budget
        self.read = 0

    def called(self, name: str, tensor: torch.Tensor) -> None:
        if not self.work:
            return
        if name in _ESCAPES:
            raise ForbiddenCall(
                f"your function moved a tensor's values out of torch (Tensor.{name}) while the check counts the "
                "work of its torch operations, which cannot see what is done outside torch; write it with torch "
                "operations"
            )
        if name in _core.READS or name in _core.FORMATTING:
            numbers = _core.numbers_handed(name, tensor)
            if numbers:
                self._read(numbers, _core.FORMATTING.get(name) or f"Tensor.{name}")

    def printed(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        counter = self.counter
        count, work, cat_work = counter.count, getattr(counter, "work", None), getattr(counter, "cat_work", None)
        try:
            return func(*args, **kwargs)
        finally:
            counter.count = count
            if work is not None:
                counter.work, counter.cat_work = work, cat_work

    def _read(self, n: int, how: str) -> None:
        self.read += n
        if self.read > self.budget:
            raise ForbiddenCall(
                f"your function read {self.read} numbers into Python ({how}, the last) while the check counts the "
                f"work of its torch operations, which cannot see what Python does with them (at most {self.budget} "
                "are allowed here, a quarter of the inputs' numbers); write the computation with torch operations"
            )


def _read_budget(given: dict) -> int:
    """How many numbers an answer may read into Python while its work is counted: a quarter of its inputs' numbers
    (one or two per token or pair is ordinary; a computation in Python numbers reads every input, or more)."""
    tensors = [v for v in given.values() if isinstance(v, torch.Tensor)]
    tensors += [x for v in given.values() if type(v) in (tuple, list) for x in v if isinstance(x, torch.Tensor)]
    return sum(t.numel() for t in tensors) // 4


@contextmanager
def counting_ops(enabled: bool = True, work: bool = False, budget: int = 0) -> Iterator[_CountOperations | None]:
    """Count the torch operations run inside the block (``.count`` of the value, as
    :func:`ttr_edu.profiling.operation_count` counts them; None when not ``enabled``), and with ``work`` their work
    (``.work``, as :func:`ttr_edu.profiling.work_count` counts it; moving values out of torch, or reading more than
    ``budget`` numbers into Python, is then refused: :class:`_Outside`). What torch's formatter runs to print a tensor
    is not counted. An answer that takes the counter off torch's mode stack is refused (:class:`ForbiddenCall`)."""
    if not enabled:
        yield None
        return
    counter = _CountWork() if work else _CountOperations()
    counter.__enter__()
    try:
        with _Outside(counter, work, budget):
            yield counter
    finally:
        stack = _get_current_dispatch_mode_stack()
        intact = bool(stack) and stack[-1] is counter
        if any(mode is counter for mode in stack):
            while _get_current_dispatch_mode_stack()[-1] is not counter:
                _pop_mode()  # what the answer left above the counter
        else:
            _push_mode(counter)  # taken off by the answer: back on, so that leaving it restores torch's flags
        counter.__exit__(None, None, None)
    if not intact:
        raise ForbiddenCall("your function switched off the check's count of torch operations; remove that code")


def shared_inputs(case: dict) -> dict:
    """``case`` with each tensor (also inside a tuple or list) copied into memory that a forked child shares with its
    parent (an anonymous shared mapping): what the answer writes into its inputs in place, the parent reads back
    itself once the child has ended (the grading engine's judge of :attr:`Rules.inputs_unchanged`)."""
    import mmap

    def shared(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or value.numel() == 0 or value.layout is not torch.strided:
            return value.clone() if isinstance(value, torch.Tensor) else value
        plain = torch.Tensor.detach(value).contiguous()
        buffer = mmap.mmap(-1, plain.numel() * plain.element_size())
        copy = torch.frombuffer(buffer, dtype=plain.dtype, count=plain.numel()).view(plain.shape)
        copy.copy_(plain)
        return copy

    return {k: type(v)(shared(x) for x in v) if type(v) in (tuple, list) else shared(v) for k, v in case.items()}


def changed_inputs(case: dict, after: dict) -> list[str]:
    """The names of the inputs of ``case`` whose tensors differ in ``after`` (:func:`shared_inputs`, read back)."""

    with plain_torch():
        return [k for k, v in case.items() if not _unchanged(v, after.get(k))]


def answer_outcome(
    declared: Exercise,
    answer: Callable,
    case: dict,
    index: int,
    guard=nullcontext,
    count_ops: bool = False,
    given: dict | None = None,
    count_work: bool = False,
) -> Outcome:
    """Call ``answer`` on ``case`` under ``guard`` (a context whose value has a ``hit`` attribute, or none) and say
    what it gave; with ``count_ops``, also how many torch operations it ran (:class:`OpCount`), with ``count_work``
    also their work (:class:`WorkCount`). Runs where the answer
    runs: the student's kernel, or the engine's child (where nothing is guarded here, because the whole process is
    locked down). ``given``: the inputs to call it with (:func:`shared_inputs`; default: copies of the case's)."""
    rules = declared.rules
    if given is None:
        given = _cloned(case, rules.keep_grad)
    else:  # shared with the grader: its tensors are the inputs themselves (leaves of their own for the gradients)
        given = {k: type(v)(v) if type(v) in (tuple, list) else v for k, v in given.items()}
        for name in rules.keep_grad:
            if isinstance(given.get(name), torch.Tensor) and given[name].is_floating_point():
                given[name] = given[name].detach().requires_grad_()
    outcome = Outcome()
    watch = rules.watch(case) if rules.watch is not None else nullcontext()
    witnessed = count_ops or count_work or rules.watch is not None
    witness = Witness("counts" if count_ops or count_work else "watches") if witnessed else None
    with guard() as trace:
        try:
            with (
                watch as watched,
                counting_ops(count_ops or count_work, work=count_work, budget=_read_budget(given)) as counter,
                witness or nullcontext(),
            ):
                outcome.result = declared.call(answer, given)
            outcome.ops = None if counter is None else counter.count
            outcome.work = counter.work if isinstance(counter, _CountWork) else None
            outcome.cat_work = counter.cat_work if isinstance(counter, _CountWork) else None
        except NotImplementedError as err:
            if _core._is_untouched_stub(err):
                outcome.not_attempted = True
            else:
                outcome.raised = _raised(err, case, declared.name) + (
                    "\n  (only the untouched stub counts as not attempted: finish the function)"
                )
        except ForbiddenCall as err:
            outcome.broke_rule = str(err)
        except CheckFailed as err:  # an adapter's own refusal (e.g. "call model.step one token at a time")
            outcome.broke_rule = str(err).removeprefix(f"{declared.name}: ")
        except Exception as err:  # the student's own bug, shown with its case
            outcome.raised = _raised(err, case, declared.name)
    outcome.called = getattr(trace, "hit", None)
    if getattr(watched, "hit", None) is not None and outcome.broke_rule is None:  # a refusal the answer caught
        outcome.broke_rule = watched.hit
    if witness is not None and witness.hit is not None and outcome.broke_rule is None:  # work beside the modes
        outcome.broke_rule = witness.hit
    if rules.keep_grad and outcome.raised is None and outcome.broke_rule is None and not outcome.not_attempted:
        try:
            outcome.grads = _vjp(outcome.result, given, rules.keep_grad, index)
        except Exception as err:  # e.g. a backward hook of the answer's that raises
            outcome.raised = f"computing gradients through your result raised {type(err).__name__}: {err}"
    if rules.inputs_unchanged:
        outcome.inputs_after = {
            k: v for k, v in given.items() if isinstance(v, torch.Tensor) or type(v) in (tuple, list)
        }
    if rules.source is not None and outcome.raised is None and outcome.broke_rule is None and not outcome.not_attempted:
        outcome.source = rules.source(answer)
    return outcome


def _raised(err: BaseException, case: dict, name: str) -> str:
    hint = ""
    if isinstance(err, TypeError) and "argument" in str(err):  # e.g. a renamed parameter
        hint = f"\n  hint: keep the stub's parameter names, the check calls it as {name}({', '.join(case)})"
    return f"your function raised {type(err).__name__}: {err}{_core._where(err)}\n  inputs: {_inputs(case)}{hint}"


def _inputs(case: dict) -> str:
    return ", ".join(f"{k}={describe(v)}" for k, v in case.items())


# -- a case no one has seen: the exercise's own generator, reseeded with a secret -------------------------------------

#: held while torch's seeding is swapped for a reseeding one (:func:`reseeded`): one case generator at a time
_RESEEDING = threading.Lock()


def _mixed(secret: int, seed: Any) -> int:
    """A 63-bit seed from ``secret`` and the seed a case generator asked for (distinct seeds stay distinct)."""
    digest = hashlib.blake2b(f"{int(secret)}/{int(seed)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@contextmanager
def reseeded(secret: int) -> Iterator[None]:
    """While inside, every seed a case generator sets (``torch.Generator().manual_seed(s)``, ``torch.manual_seed(s)``,
    in the check module or in the package functions it calls) becomes a seed mixed from ``secret`` and ``s``: the
    generator then draws new inputs from its own distribution (the same shapes, dtypes, scales and constructions; only
    the random draws differ), and the same ``secret`` gives the same inputs again (the grader rebuilds the case from
    it). Swaps ``torch.Generator``, ``torch.manual_seed`` and ``torch.random.manual_seed`` for the duration, under a
    lock; only for the grader's own case generators, never around an answer."""

    class _Reseeded(torch._C.Generator):
        def manual_seed(self, seed: Any) -> torch.Generator:
            return super().manual_seed(_mixed(secret, seed))

    with _RESEEDING:
        generator, seed, random_seed = torch.Generator, torch.manual_seed, torch.random.manual_seed

        def manual_seed(s: Any) -> torch.Generator:
            return random_seed(_mixed(secret, s))

        torch.Generator, torch.manual_seed, torch.random.manual_seed = _Reseeded, manual_seed, manual_seed
        try:
            yield
        finally:
            torch.Generator, torch.manual_seed, torch.random.manual_seed = generator, seed, random_seed


def _same_input(a: Any, b: Any) -> bool:
    """Whether two inputs of a case hold the same values (tensors, containers, modules' parameters, numbers)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a.detach(), b.detach()))
        )
    if isinstance(a, torch.nn.Module) and isinstance(b, torch.nn.Module):
        sa, sb = a.state_dict(), b.state_dict()
        return sa.keys() == sb.keys() and all(_same_input(sa[k], sb[k]) for k in sa)
    if type(a) in (tuple, list) and type(b) is type(a):
        return len(a) == len(b) and all(_same_input(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_input(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # values that do not compare: taken as different (the case is then drawn, never skipped)
        return False


def fresh_case(declared: Exercise, secret: int, public: list[dict] | None = None) -> tuple[int, dict] | None:
    """One case of ``declared`` that no one has seen: the exercise's own case generator run under :func:`reseeded`
    (``secret``), and one of the cases it yields whose inputs differ from the public case at its place, chosen by
    ``secret``; ``(its place in the generator's order, the case)``. For an exercise answered by a number
    (``Rules.returns``), the choice is among the cases whose answer tells (:func:`_telling`), where there is one.
    None when reseeding changes no case (every case is fixed by design: hand-written inputs). Where the exercise
    declares :attr:`Exercise.fresh` (its cases are parameters), that draws the case instead, from a generator seeded
    from ``secret``, at place -1. ``public``: ``list(declared.cases())``, if the caller has it."""
    if declared.fresh is not None:
        return -1, declared.fresh(torch.Generator().manual_seed(_mixed(secret, 0)))
    public = list(declared.cases()) if public is None else public
    drawn, differ = _reseeded_cases(declared, secret, public)
    if not differ:
        return None
    if declared.rules.returns in (float, int, bool):  # a number can be matched by a constant: draw one that tells
        differ = _telling(declared, public, drawn, differ) or differ
    index = differ[_mixed(secret, -1) % len(differ)]
    return index, drawn[index]


def _reseeded_cases(declared: Exercise, secret: int, public: list[dict]) -> tuple[list[dict], list[int]]:
    """The exercise's cases drawn under :func:`reseeded` (``secret``), and the places where they differ from
    ``public``."""
    with reseeded(secret):
        drawn = list(declared.cases())
    differ = [
        i
        for i, (p, d) in enumerate(zip(public, drawn))
        if p.keys() != d.keys() or not all(_same_input(p[k], d[k]) for k in p)
    ]
    return drawn, differ


def _telling(declared: Exercise, public: list[dict], drawn: list[dict], candidates: list[int]) -> list[int]:
    """Of ``candidates`` (places in ``drawn``), those whose reference answer is none of the public cases' answers.
    An exercise answered by a number has few distinct answers (1.4's accuracy is 0.0 on many draws of correlated
    keys), so a table of the public cases' answers, with any of them as its answer for an input it has not seen,
    would pass a fresh case that repeats one; on a telling case it fails. Runs the reference, so only in the grader's
    processes (the fork server and the judge), never where an answer runs."""
    with plain_torch():
        seen = [declared.reference(**_cloned(case)) for case in public]
        answers = {i: declared.reference(**_cloned(drawn[i])) for i in candidates}
    return [i for i in candidates if not any(_same_number(answers[i], s, *declared.tolerances(drawn[i])) for s in seen)]


def _same_number(a: Any, b: Any, rtol: float, atol: float) -> bool:
    """Whether two numeric answers agree within the check's tolerances (NaN agrees with NaN)."""
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


def rule_case(rule: OpCount | WorkCount, size: int, secret: int) -> dict:
    """The inputs of a counted rule (:class:`OpCount`, :class:`WorkCount`) at ``size`` that no one has seen: the rule's
    own ``case(size)`` run under :func:`reseeded` (``secret``), so the shapes (the sizes the growth exponent needs) are
    the rule's and only the random draws are new. The grader draws ``secret`` after the answers' process is forked
    and rebuilds the same inputs from it; a table of the public ``case(size)``'s answers then holds nothing."""
    with reseeded(secret):
        return rule.case(size)


def has_fresh(declared: Exercise) -> bool:
    """Whether :func:`fresh_case` gives ``declared`` a case (the grader and the answers' process ask alike)."""
    return declared.fresh is not None or bool(_reseeded_cases(declared, 0, list(declared.cases()))[1])


# -- the verdict -----------------------------------------------------------------------------------------------------


@contextmanager
def plain_torch() -> Iterator[None]:
    """References and comparisons run with the notebook's torch function and dispatch modes set aside
    (``torch.set_default_device`` pushes one), so they compute what the package computes whatever the notebook set."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


def judge_case(declared: Exercise, case: dict, index: int, outcome: Outcome) -> str:
    """The verdict on one case: returns when the answer agrees and keeps the rules (a note, or ``""``), raises
    :class:`NotAttempted` for the untouched stub and :class:`CheckFailed` (the reason, the case, the first wrong
    element) otherwise. Runs in the grader's process (or the student's kernel); the reference runs here, after the
    answer."""
    name, rules = declared.name, declared.rules
    if outcome.not_attempted:
        raise NotAttempted(name)
    if outcome.broke_rule is not None:  # a ruled-out call entered first (the package's op, whose solver was refused)
        raise CheckFailed(f"{name}: {outcome.called or outcome.broke_rule}")
    if outcome.raised is not None:  # a ruled-out call on the way explains more than what it raised
        raise CheckFailed(f"{name}: {outcome.called or outcome.raised}")
    if rules.inputs_unchanged:
        after = outcome.inputs_after or {}
        for key, value in case.items():
            if not _unchanged(value, after.get(key)):
                raise CheckFailed(
                    f"{name}: your function modified its input {key} in place; return a new tensor instead\n"
                    f"  inputs: {_inputs(case)}"
                )
    if rules.returns is not None and not _is_a(outcome.result, rules.returns):
        got = outcome.result
        what = (
            f"a tensor of shape {tuple(got.shape)} (a one-element tensor becomes a number with .item())"
            if _core._is_plain_tensor(got)
            else _core._short(got)
        )
        raise CheckFailed(
            f"{name}: the exercise asks for a Python {rules.returns.__name__}, your function returned {what}\n"
            f"  inputs: {_inputs(case)}"
        )
    rtol, atol = declared.tolerances(case)
    with plain_torch():
        given = _cloned(case, rules.keep_grad)
        want = declared.reference(**given)
        try:
            _core._compare(name, outcome.result, want, case, rtol, atol)
        except CheckFailed as failure:
            message = str(failure)
            if declared.explain is not None:
                message += declared.explain(message, case, outcome.result)
            raise CheckFailed(message) from None
        if outcome.called is not None:  # right, but not the student's work
            raise CheckFailed(f"{name}: {outcome.called}")
        if rules.keep_grad:
            _judge_grads(declared, given, want, index, outcome.grads or {}, rtol, atol)
    return _dtype_note(outcome.result, want)


def _unchanged(before: Any, after: Any) -> bool:
    """Whether an input of a case (a tensor, or a tuple or list holding tensors) is the same after the call."""
    if isinstance(before, torch.Tensor):
        return (
            isinstance(after, torch.Tensor)
            and after.shape == before.shape
            and _core._equal(after.to(before.dtype), before)
        )
    if type(before) in (tuple, list):
        return (
            type(after) is type(before)
            and len(after) == len(before)
            and all(_unchanged(b, a) for b, a in zip(before, after))
        )
    return True


def _is_a(value: Any, kind: type) -> bool:
    """Whether ``value`` is of the Python type ``kind`` (a NumPy float counts as a float; a bool is no int)."""
    if kind is float:
        numpy = sys.modules.get("numpy")
        return type(value) is float or (numpy is not None and type(value) is numpy.float64)
    return type(value) is kind


def _dtype_note(got: Any, want: Any) -> str:
    """A right answer in another floating dtype than the reference's passes, with a note naming both (the first such
    tensor of a tuple or list of results); so does one computed in float32 and widened to the reference's float64."""
    if type(want) in (tuple, list) and type(got) in (tuple, list):
        return next((note for g, w in zip(got, want) if (note := _dtype_note(g, w))), "")
    if isinstance(want, torch.Tensor) and _core._is_plain_tensor(got) and got.dtype != want.dtype:
        g, w = (str(t.dtype).replace("torch.", "") for t in (got, want))
        return f"note: your result is {g}; the exercise works in {w} (the values agree to the check's tolerance)"
    if isinstance(want, torch.Tensor) and _core._is_plain_tensor(got) and _core._widened_from_float32(got, want):
        return (
            "note: your result is float64, but every value in it is a float32 number: it was computed in float32 and "
            "widened; the exercise works in float64 (the values agree to the check's tolerance)"
        )
    return ""


def _judge_grads(declared: Exercise, given: dict, want: Any, index: int, grads: dict, rtol: float, atol: float) -> None:
    expected = _vjp(want, given, declared.rules.keep_grad, index)
    why = f"\n  {declared.rules.why}" if declared.rules.why else ""
    for key in declared.rules.keep_grad:
        got, wanted = grads.get(key), expected[key]
        if wanted is None:
            continue
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(
                f"{declared.name}: your result does not carry gradients back to {key}; something on the way cut the "
                f"graph (.detach(), .item(), torch.tensor(...) of a result, or a torch.no_grad() block){why}"
            )
        if got.shape != wanted.shape or not _core._allclose(
            _core._to_double(got),
            _core._to_double(wanted),
            rtol=max(rtol, 1e-6),
            atol=max(atol, 1e-8),
        ):
            how = (
                f"its norm is {torch.Tensor.norm(got).item():.3g} where the reference's is "
                f"{torch.Tensor.norm(wanted).item():.3g}, a relative error of {_core.relative_error(got, wanted):.3g}"
                if got.shape == wanted.shape
                else f"its shape is {tuple(got.shape)}, the input's {tuple(wanted.shape)}"
            )
            raise CheckFailed(
                f"{declared.name}: your result's gradient with respect to {key} is wrong: {how} (the gradient of "
                f"⟨result, c⟩ for a fixed random c)\n  inputs: {_inputs(given)}\n  part of the computation was cut off "
                f"from the graph (.detach(), .data, an in-place write into a leaf){why}"
            )


def judge_source(declared: Exercise, found: list[str | None]) -> None:
    """The verdict of the rules' reading of the answer's source (:attr:`Rules.source`), from what each case's outcome
    found, once every case agrees: raises :class:`CheckFailed` with the first problem."""
    problem = next((f for f in found if f), None)
    if problem is not None:
        raise CheckFailed(f"{declared.name}: {problem}")


def judge_ops(declared: Exercise, ops: dict[int, int]) -> None:
    """The verdict of the :class:`OpCount` rule from the answer's operation counts at its two sizes."""
    rule = declared.rules.op_count
    (small, n_small), (large, n_large) = sorted(ops.items())
    if n_small == n_large:
        exponent = 0.0
    elif n_small == 0 or n_large == 0:
        exponent = math.inf if n_large > n_small else -math.inf
    else:
        exponent = math.log(n_large / n_small) / math.log(large / small)
    if not rule.low <= exponent <= rule.high:
        n = rule.size_name
        why = f": {declared.rules.why}." if declared.rules.why else "."
        raise CheckFailed(
            f"{declared.name}: right values, but your function runs {n_small} torch operations at {n} = {small} and "
            f"{n_large} at {n} = {large}, a count that grows like {n}^{exponent:.1f}{why} {rule.expect}".rstrip()
        )


#: What an answer that grows its output by ``torch.cat`` inside its loop did, and what to do instead: the one wording
#: every work rule's message uses when the concatenations' own work is what grows too fast (:func:`judge_work`).
CAT_GROWTH = (
    "growing the output with torch.cat at every step copies all of it again each time, which grows like T²: collect "
    "the rows in a list and stack them once, or write them into a preallocated tensor"
)


def _growth_exponent(work: dict[int, int]) -> float:
    """The exponent of ``work`` (size -> work) between its smallest and largest size: log(W(large)/W(small)) over
    log(large/small)."""
    counts = sorted(work.items())
    (small, w_small), (large, w_large) = counts[0], counts[-1]
    return math.log(max(w_large, 1) / max(w_small, 1)) / math.log(large / small)


def _excess_over_linear(work: dict[int, int]) -> int:
    """``W(4n) − 3 W(2n) + 2 W(n)`` for ``work`` at the sizes n, 2n, 4n: zero for work linear in n, whatever its
    constant part, and positive when the work per token or chunk grows with its position."""
    (_, w1), (_, w2), (_, w4) = sorted(work.items())
    return (w4 - w2) - 2 * (w2 - w1)


def _too_fast(rule: WorkCount, work: dict[int, int]) -> bool:
    """Whether ``work`` (size -> work) breaks ``rule``'s growth: its exponent, or with ``rule.affine`` its linearity."""
    return _growth_exponent(work) > rule.high or (rule.affine and _excess_over_linear(work) > 0)


def _growth_reason(declared: Exercise, rule: WorkCount, work: dict[int, int], cat: dict[int, int] | None) -> str:
    """The end of a growth refusal: what the answer did, as far as the counts tell. When the work of its
    ``torch.cat`` calls (``cat``: size -> that part of ``work``) grows too fast by itself, the message says so
    (:data:`CAT_GROWTH`), and drops the exercise's own reasons (re-summing, solving) if the rest of its work grows as
    the rule allows: the answer did none of them."""
    why = f": {declared.rules.why}." if declared.rules.why else "."
    generic = f"{why} {rule.expect}".rstrip()
    if not cat or cat.keys() != work.keys() or not _too_fast(rule, cat):
        return generic
    counts = sorted(cat.items())
    n = rule.size_name
    said = ", ".join(f"{c} at {n} = {size}" for size, c in counts)
    cat_reason = f": of this work, your torch.cat calls do {said}; {CAT_GROWTH}."
    if _too_fast(rule, {size: work[size] - cat[size] for size in work}):
        return f"{cat_reason} The rest of it grows too fast as well{generic}"
    return cat_reason


def judge_work(declared: Exercise, rule: WorkCount, work: dict[int, int], cat: dict[int, int] | None = None) -> None:
    """The verdict of a :class:`WorkCount` rule from the answer's work at its sizes: the growth exponent between the
    smallest and the largest, with ``rule.affine`` the exact linearity ``W(4n) − 3 W(2n) + 2 W(n) = 0``, and with a
    ``rule.yardstick`` the work at the largest size against the yardstick's (at most ``rule.at_most`` times).
    ``cat``: the part of each work done by ``torch.cat`` (:attr:`Outcome.cat_work`), which only words the message of a
    growth refusal (:func:`_growth_reason`), never the verdict."""
    counts = sorted(work.items())
    (small, w_small), (large, w_large) = counts[0], counts[-1]
    n = rule.size_name
    why = f": {declared.rules.why}." if declared.rules.why else "."
    exponent = _growth_exponent(work)
    if exponent > rule.high:
        raise CheckFailed(
            f"{declared.name}: right values, but the work of your function's torch operations (elements read and "
            f"written, plus the multiply-adds of matrix products) grows like {n}^{exponent:.2f}: {w_small} at {n} = "
            f"{small}, {w_large} at {n} = {large} ({w_large / max(w_small, 1):.2f} times; at most {n}^{rule.high:g} "
            f"is allowed){_growth_reason(declared, rule, work, cat)}"
        )
    if rule.affine:
        (_, w1), (middle, w2), (_, w4) = counts
        first, second = w2 - w1, w4 - w2
        if _excess_over_linear(work) > 0:
            raise CheckFailed(
                f"{declared.name}: right values, but the work of your function's torch operations (elements read and "
                f"written, plus the multiply-adds of matrix products) grows faster than {n}: {w1} at {n} = {small}, "
                f"{w2} at {n} = {middle}, {w4} at {n} = {large}. Going from {n} = {middle} to {large} adds {second}, "
                f"more than twice the {first} that going from {small} to {middle} adds (a linear cost adds exactly "
                f"twice as much), so the work for each token or chunk grows with its position"
                f"{_growth_reason(declared, rule, work, cat)}"
            )
    if rule.yardstick is not None:
        case = rule.case(large)  # the work depends on the shapes alone: the same as on the answer's secret inputs
        w_yard = work_count(lambda: rule.yardstick(**case))
        if w_large > rule.at_most * w_yard:
            raise CheckFailed(
                f"{declared.name}: right values, but your function's torch operations do {w_large / w_yard:.1f} times "
                f"the work of the update the exercise asks for, at {n} = {large} ({w_large} against {w_yard}: elements "
                f"read and written, plus the multiply-adds of matrix products; at most {rule.at_most:g} times is "
                f"allowed){why} {rule.expect}".rstrip()
            )


def _solver_modules() -> frozenset[str]:
    """The numpy and scipy linear-algebra modules loaded so far (:data:`ttr_edu.checks._guard.SOLVERS`)."""
    return frozenset(name for name in SOLVERS if name in sys.modules)


# -- the check in the student's kernel ---------------------------------------------------------------------------------


@contextmanager
def one_thread() -> Iterator[None]:
    """Runs the block on one intra-op thread (as the engine's child runs answers): for many small operations, the
    pool's other threads only wait."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_in_kernel(
    declared: Exercise, answer: Callable, *, bad: Forbidden | None = None, then: Callable[[], None] | None = None
) -> bool:
    """The check of ``declared`` in this process (the student's kernel): prints ``PASS`` and returns True, or prints
    "not attempted yet" and returns False (raising instead under the autograder), or raises :class:`CheckFailed`.
    ``bad`` replaces what the declaration forbids (the older checks name code objects themselves); ``then`` is a last
    test once every case agrees. Without ``bad`` the answer is held, by the call trace, to the exercise's allow-list
    too (:attr:`Exercise.given` and the harness's machinery, :func:`~ttr_edu.checks._guard.given_only`): any other
    code of the package (``ttr_edu.ops``, ``layers``, ``regression``, ``kernels``, ...) that starts running while the
    answer runs is refused by name, as the grading engine refuses it by emptying it.

    Raises:
        ValueError: the exercise has no cases (a check with no case could not fail).
    """
    name = declared.name
    if not callable(answer):
        raise CheckFailed(f"{name}: expected your function, got {type(answer).__name__}")
    declared_bad = bad is None
    if bad is None:  # the declaration's rules, and its allow-list as the grading engine holds it (given, machinery)
        around = (declared.call, declared.rules.watch)  # the check module's code that runs around the answer
        given = given_only(declared.given, with_machinery=True, harness=around)
        bad = declared.forbidden() | given
    loaded = _solver_modules()
    n_cases, notes, found = 0, [], []
    try:
        for index, case in enumerate(declared.cases()):
            outcome = answer_outcome(declared, answer, case, index, guard=functools.partial(watching, bad))
            if declared_bad and declared.rules.no_solvers and _solver_modules() != loaded:
                # the answer imported numpy's or scipy's linear algebra itself, after its solvers were resolved:
                # resolve them again and run the case again, now that they are known
                loaded, bad = _solver_modules(), declared.forbidden() | given
                outcome = answer_outcome(declared, answer, case, index, guard=functools.partial(watching, bad))
            notes.append(judge_case(declared, case, index, outcome))
            found.append(outcome.source)
            n_cases += 1
        if n_cases == 0:
            raise ValueError(f"{name}: the check has no cases, so it could not fail")
        counted = declared.rules.op_count
        if counted is not None:
            ops = {}
            for size in counted.sizes:
                case = counted.case(size)
                outcome = answer_outcome(
                    declared, answer, case, -1, guard=functools.partial(watching, bad), count_ops=True
                )
                judge_case(declared, case, -1, outcome)
                ops[size] = outcome.ops
            judge_ops(declared, ops)
        for rule in declared.rules.work:
            work, cat = {}, {}
            for size in rule.sizes:
                case = rule.case(size)
                outcome = answer_outcome(
                    declared, answer, case, -1, guard=functools.partial(watching, bad), count_work=True
                )
                judge_case(declared, case, -1, outcome)
                if outcome.work is None:  # judge_case raised for every other outcome: only a count comes here
                    raise CheckFailed(f"{declared.name}: the check could not count your function's work")
                work[size] = outcome.work
                cat[size] = outcome.cat_work or 0
            judge_work(declared, rule, work, cat)
        judge_source(declared, found)
        if then is not None:
            then()
    except NotAttempted:
        if _core.under_autograder():
            raise CheckFailed(f"{name}: not attempted (the stub still raises NotImplementedError)") from None
        _core.not_attempted(name, _FILL_IN)
        return False
    except CheckFailed as failure:
        raise failure.with_traceback(None) from None
    note = next((n for n in notes if n), "")
    print(f"PASS {name}: your function agrees with the reference on {n_cases} cases." + (f" ({note})" if note else ""))
    return True


# -- a check whose cases depend on data the student chose (chapter 13's point) ----------------------------------------


@dataclass(frozen=True)
class Staged:
    """An exercise whose cases, references and rules depend on plain data the student chose beside the answer (chapter
    13's design-space point), declared as two halves:

    * ``collect(arguments, guard) -> record`` runs where the answer runs (the student's kernel, or the engine's child):
      it turns the check's arguments (``signature``'s, defaults applied) into plain data (the chosen point as a dict
      of names and numbers, never an object) and calls the answer on the cases that data gives, each call under
      ``guard`` (:func:`answer_outcome`); what each call gave goes into the record as an :class:`Outcome`, and the
      record crosses to the grader through :func:`to_record`;
    * ``judge(record, say) -> None`` runs in the grader (or the kernel, on the same plain record): it rebuilds and
      validates the data, builds the cases and the references itself, and judges each outcome
      (:func:`judge_case`); it raises :class:`NotAttempted` or :class:`CheckFailed`, and passes the lines to print
      to ``say`` (the last one the ``PASS`` line).

    ``forbidden()``: what the answer's calls may not reach, watched by a call trace around each call (in the engine's
    child too: such a check adds nothing to the child's lock-down). ``given``: the package's functions and classes the
    chapter hands the student for this exercise, as :attr:`Exercise.given`; every other function of the package is
    refused while the answer runs (:meth:`held_to`), by the same call trace: ``collect`` itself runs the package's
    objects beside the answer, so nothing can be emptied for the whole process, unless ``empties``: ``collect`` needs
    nothing of the package but ``given`` (13.1: the point travels as data), so the engine's child empties every other
    function before the student's cells run, as for an :class:`Exercise`. ``harness``: the check module's functions
    that wrap the answer for each call (the wrappers ``collect`` builds around it, which the trace sees first): their
    code, and what it uses, may run; any other code of a chapter's check module is refused like the package's.
    Whatever ``collect`` reports is
    untrusted: the verdict is the judge's, on the grader's own cases; only what ``collect`` reads off the answer's
    objects (a spec's registration, a norm's weight) rests on the answer's process."""

    name: str
    signature: Any
    collect: Callable[[tuple, Callable], dict]
    judge: Callable[[dict, Callable[[str], None]], None]
    forbidden: Callable[[], Forbidden]
    given: tuple[Any, ...] = ()
    empties: bool = False
    harness: tuple[Callable, ...] = ()

    def held_to(self) -> Forbidden:
        """What each of the answer's calls is held to, in the student's kernel and in the engine's child alike:
        ``forbidden()`` and the allow-list of ``given`` and ``harness`` (:func:`~ttr_edu.checks._guard.given_only`)."""
        return self.forbidden() | given_only(self.given, harness=self.harness)

    def arguments(self, *args: Any, **kwargs: Any) -> tuple:
        """The check's arguments as a tuple, in its signature's order, its defaults applied.

        Raises:
            TypeError: arguments the check does not take.
        """
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())


def staged(
    *,
    collect: Callable[[tuple, Callable], dict],
    judge: Callable[[dict, Callable[[str], None]], None],
    forbidden: Callable[[], Forbidden],
    given: Iterable[Any] = (),
    empties: bool = False,
    harness: Iterable[Callable] = (),
) -> Callable[[Callable], Callable[..., bool]]:
    """Declare the :class:`Staged` exercise checked by the decorated ``check_<name>`` function (its signature gives the
    arguments and their defaults; its docstring says what it checks): the function becomes its check in the student's
    kernel (:func:`run_staged`), and carries the declaration (``__exercise__``) for the grading engine. ``given``: the
    package's functions and classes the answer may call (:attr:`Staged.given`); ``harness``: the check module's
    wrappers around the answer (:attr:`Staged.harness`).

    Raises:
        TypeError: something in ``given`` that is neither a function nor a class.
    """
    import inspect

    given = tuple(given)
    for value in given:
        if not (isinstance(value, type) or callable(value)):
            raise TypeError(f"staged: given expects functions and classes, got {type(value).__name__}")

    def wrap(fn: Callable) -> Callable[..., bool]:
        declared = Staged(
            fn.__name__.removeprefix("check_"),
            inspect.signature(fn),
            collect,
            judge,
            forbidden,
            given,
            empties,
            tuple(harness),
        )

        @functools.wraps(fn)
        def check(*args: Any, **kwargs: Any) -> bool:
            return run_staged(declared, declared.arguments(*args, **kwargs))

        check.__exercise__ = declared
        return check

    return wrap


def run_staged(declared: Staged, arguments: tuple) -> bool:
    """The check of a :class:`Staged` exercise in this process (the student's kernel): the same plain record and the
    same judge as the grading engine's, on one intra-op thread (as the engine's child runs answers). Prints ``PASS``
    and returns True, or prints "not attempted yet" and returns False (raising instead under the autograder), or
    raises :class:`CheckFailed`."""
    if not getattr(_core._state, "depth", 0):  # called directly, not through a graded check (which has looked already)
        _core._refuse_tampering(declared.name)
    bad = declared.held_to()
    try:
        with one_thread():  # many small operations (chapter 13 runs a whole layer token by token): threads only wait
            record = to_record(declared.collect(arguments, functools.partial(watching, bad)))
            declared.judge(record, print)
    except NotAttempted as stub:
        name = str(stub.args[0]) if stub.args else declared.name
        if _core.under_autograder():
            raise CheckFailed(f"{name}: not attempted (the stub still raises NotImplementedError)") from None
        # in the book, the note that the exercise is done in JupyterLab
        _core.not_attempted(name, stub.args[2] if len(stub.args) > 2 else _FILL_IN)
        return False
    except CheckFailed as failure:
        raise failure.with_traceback(None) from None
    return True


def to_record(value: Any, depth: int = 0) -> Any:
    """``value`` as plain data for :class:`Staged`'s record: a dict with string keys and a list are converted item by
    item, an :class:`Outcome` becomes its dict (``{"outcome": ...}``, its result through :func:`to_plain`), the rest
    as :func:`to_plain` converts it."""
    if type(value) is dict and depth < 6:
        return {str(k): to_record(v, depth + 1) for k, v in value.items()}
    if type(value) is list and depth < 6:
        return [to_record(v, depth + 1) for v in value]
    if type(value) is Outcome:
        record = value.as_dict()
        record["result"] = to_plain(value.result)
        for key in ("inputs_after", "grads"):
            if record[key] is not None:
                record[key] = {str(k): to_plain(v) for k, v in dict(record[key]).items()}
        return {"outcome": record}
    return to_plain(value)


def outcome_from(data: Any) -> Outcome:
    """The :class:`Outcome` of a record's ``{"outcome": ...}`` (:func:`to_record`), checked for shape: the grader's
    view of what the answer's process reported.

    Raises:
        CheckFailed: not an outcome's record.
    """
    try:
        return outcome_of(data.get("outcome") if isinstance(data, dict) else None)
    except ValueError as err:
        raise CheckFailed(f"the grader could not read back what your answer gave ({err})") from None


def outcome_of(record: Any) -> Outcome:
    """The :class:`Outcome` of a plain record (:meth:`Outcome.as_dict`, read back with ``weights_only=True``), checked
    for shape: keys it does not know are dropped, its texts must be text.

    Raises:
        ValueError: not an outcome's record.
    """
    if not isinstance(record, dict):
        raise ValueError("not an outcome")
    outcome = Outcome(**{k: v for k, v in record.items() if k in Outcome.__dataclass_fields__})
    outcome.result = from_plain(outcome.result)
    for text in ("raised", "broke_rule", "called", "source"):
        if getattr(outcome, text) is not None and not isinstance(getattr(outcome, text), str):
            raise ValueError(f"its {text} is not text")
    outcome.not_attempted = outcome.not_attempted is True
    return outcome


def run_check(
    name: str,
    student_fn: Callable,
    reference_fn: Callable,
    cases: Iterable[dict],
    *,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    inputs_unchanged: bool = True,
    then: Callable[[], None] | None = None,
) -> bool:
    """Compare ``student_fn(**case)`` with ``reference_fn(**case)`` on every case.

    Args:
        name: the exercise's name, as printed.
        student_fn: the student's function.
        reference_fn: the package's function with the same signature.
        cases: keyword-argument dicts; tensors are cloned before each call, so an in-place edit by
            the student cannot change what the reference sees.
        rtol, atol: tolerances of ``torch.allclose`` (floats compare the same way).
        inputs_unchanged: also fail when the student's function modifies an input tensor in place (the default, as
            in :class:`Rules`; the copy it was given is compared with the case).
        then: a last test once every case agrees (e.g. reading a kernel's source for what the interpreter cannot
            show); it raises :class:`CheckFailed` to fail the check, before ``PASS`` is printed.

    Returns:
        ``True`` when every case agrees, ``False`` when the student's function is not written yet.

    Raises:
        CheckFailed: on the first disagreeing case, with the case and the first wrong element; when the student's
            function calls the package's own implementation (:func:`_core.implementations`); when it returns a tensor
            subclass or something else than a plain tensor or number; when the notebook replaced a function the
            check relies on; and, under the autograder, when the exercise is not attempted. A check called from a
            graded cell reports these in the student's own kernel instead (see :func:`graded`).
        ValueError: ``cases`` is empty (a check with no case could not fail).
    """
    if not getattr(_core._state, "depth", 0):  # called directly, not through a graded check (which has looked already)
        _core._refuse_tampering(name)
    if not callable(student_fn):
        raise CheckFailed(f"{name}: expected your function, got {type(student_fn).__name__}")
    targets = _core.implementations(reference_fn)
    launcher = _core._function(student_fn)
    if (
        launcher is not None
        and _core._in_checks(launcher)
        and launcher.__closure__
        and launcher is not _core._function(reference_fn)
    ):
        # the check's own wrapper around the student's function, built as the reference's wrapper (the same code)
        targets = {code: label for code, label in targets.items() if code is not launcher.__code__}
    bad = Forbidden(
        codes={
            code: f"your function calls the package's own implementation ({label}); the exercise is to write it "
            "yourself, so this does not count as an answer"
            for code, label in targets.items()
        }
    )
    cases = list(cases)
    declared = Exercise(
        name, reference_fn, lambda: cases, Rules(inputs_unchanged=inputs_unchanged), rtol=rtol, atol=atol
    )
    try:
        return run_in_kernel(declared, student_fn, bad=bad, then=then)
    except CheckFailed as failure:  # the student sees the message, not the package's frames
        raise failure.with_traceback(None) from None
