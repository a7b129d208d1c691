"""That every torch operation an answer runs while a check counts or watches them passes the check's dispatch modes.

The counted and watched rules (:class:`~ttr_edu.checks._rules.OpCount`, :class:`~ttr_edu.checks._rules.WorkCount`,
:attr:`~ttr_edu.checks._rules.Rules.watch`: 2.1, 2.3, 6.4, 8.3, 8.4, 11.5) see an answer's torch operations through
``TorchDispatchMode`` s on torch's mode stack. Torch's own helpers take those modes off and put them back
(``torch.utils._python_dispatch._disable_current_modes``, ``_pop_mode_temporarily``, ``torch._C._DisableTorchDispatch``
...): work done in between was invisible, and the stack was intact again when the answer returned.

:class:`Witness`, entered innermost around the answer's call, closes that two ways:

* **the doors**: while it is entered, the public helpers that take a mode off torch's stacks, switch the dispatch or
  torch-function modes off, or stop torch's profiler are replaced in their modules by stand-ins that refuse
  (:class:`~ttr_edu.checks._guard.ForbiddenCall`, with the rule's message) when they would remove one of the check's
  modes; a mode the answer pushes itself it may pop;
* **an independent record**: torch's profiler (``RecordFunction``, below the Python modes, at torch's dispatcher)
  records every ATen operation that runs, in any thread, whatever the mode stack holds. The witness's own dispatch
  mode, on top of the check's, marks each operation it passes down (a record-function event whose name carries a
  secret drawn per call). Afterwards an ATen operation that ran neither inside a mark nor around one (a composite
  operator that dispatched nothing, ``contiguous`` of a contiguous tensor, is no work) ran unseen, and the answer is
  refused; so is a record with fewer marks than the mode passed down (the profiler was stopped or restarted). The
  witness's mode also checks, at every operation, that the modes below it are the ones it was entered on.

What it cannot see: an answer that writes Python objects of its own process rather than hiding operations. Plain
Python reaches them (the counter, a watch, this witness are objects in the answer's caller frames, and the report
pipe's descriptor is there too), so the counts and the watches' readings are what the answer's process reports
(grading.md section 5, "What the answer's process reports about itself"); nor work outside torch (NumPy, Python
numbers: the work rule refuses moving values out of torch, through a torch-function mode whose doors are closed the
same way); nor ``RecordFunction`` switched off through a reference to
``torch._C._autograd._enable_record_function`` taken before the check started, together with the modes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack, _pop_mode, _push_mode

from ttr_edu.checks._guard import ForbiddenCall

__all__ = ["Witness"]

_enter_mark = torch._C._autograd._record_function_with_args_enter
_exit_mark = torch._C._autograd._record_function_with_args_exit
_len_dispatch = torch._C._len_torch_dispatch_stack
_dispatch_at = torch._C._get_dispatch_stack_at
_len_functions = torch._C._len_torch_function_stack
_function_at = torch._C._get_function_stack_at
_profiler_enabled = torch._C._autograd._profiler_enabled
_prepare_profiler = torch._C._autograd._prepare_profiler
_enable_profiler = torch._C._autograd._enable_profiler
_disable_profiler = torch._C._autograd._disable_profiler


@functools.cache
def _composite() -> frozenset[str]:
    """The ATen operators (without overload) that have a composite kernel: they compute only by calling other
    operators, so one that dispatched nothing did no work."""
    names = torch._C._dispatch_get_all_op_names()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return frozenset(n.split(".")[0] for n in names if has(n, "CompositeImplicitAutograd"))


#: ATen operators that do no work, only name a tensor again: ``torch.tensor(data)`` runs ``detach_`` on the new tensor
#: below the Python modes (torch builds it with the Python dispatch key excluded), so the record shows it unmarked
_NO_WORK = frozenset({"aten::detach_", "aten::detach", "aten::alias", "aten::lift_fresh"})

#: torch's tensor formatting (``print``, ``repr``, f-strings) takes the modes off around itself; while a check counts,
#: it runs with them on instead, so the numbers it reads pass the check's modes like any other operation
_TENSOR_STR = os.path.join("torch", "_tensor_str.py")

#: opened on import: the engine's child may open no file once it is locked down
_NULL = os.open(os.devnull, os.O_WRONLY)


def _quiet(call: Callable[[], Any]) -> Any:
    """``call()`` with file descriptor 2 sent to /dev/null: libkineto writes a line to stderr when a profile starts
    and stops, and a graded cell with stderr loses its point."""
    saved = os.dup(2)
    try:
        os.dup2(_NULL, 2)
        return call()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _config():
    from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, _ExperimentalConfig

    return ProfilerConfig(
        ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig(profile_all_threads=True)
    ), {ProfilerActivity.CPU}


class _Passes(TorchDispatchMode):
    """The witness's dispatch mode, on top of the check's: marks each operation it passes down, and checks that the
    modes below it are still those it was entered on."""

    def __init__(self, witness: Witness) -> None:
        super().__init__()
        self.witness = witness

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing compiles inside an answer: no Dynamo guard (its first import takes seconds)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        witness = self.witness
        below = witness.below
        if _len_dispatch() != len(below) or any(_dispatch_at(i) is not m for i, m in enumerate(below)):
            witness.refuse("took the check's modes off torch's mode stack")
        mark = _enter_mark(witness.mark)
        try:
            return func(*args, **(kwargs or {}))
        finally:
            _exit_mark(mark)
            witness.passed += 1


class Witness:
    """Entered innermost around one call of an answer whose torch operations a check counts or watches (``what``:
    "counts" or "watches", for the message); ``hit`` is then None or why the answer is refused (also raised as
    :class:`~ttr_edu.checks._guard.ForbiddenCall` where the answer is stopped at once). See the module's docstring."""

    def __init__(self, what: str = "counts") -> None:
        self.what = what
        self.hit: str | None = None
        self.passed = 0
        self.mark = f"ttr_edu::seen::{secrets.token_hex(8)}"
        self.below: tuple = ()
        self._mode = _Passes(self)
        self._undo: list[tuple[Any, str, Any]] = []
        self._profiling = False

    def message(self, did: str) -> str:
        return (
            f"your function {did} while the check {self.what} its torch operations, so that they ran unseen; "
            "remove that code"
        )

    def refuse(self, did: str):
        if self.hit is None:
            self.hit = self.message(did)
        raise ForbiddenCall(self.hit)

    # -- entering and leaving ----------------------------------------------------------------------------------------

    def __enter__(self) -> Witness:
        self.below = tuple(_get_current_dispatch_mode_stack())
        self._functions = tuple(_function_at(i) for i in range(_len_functions()))
        if _profiler_enabled():
            self.hit = (
                f"torch's profiler was running when the check started; the check {self.what} your function's torch "
                "operations with it, so stop yours (leave the profiler out of the exercise's function)"
            )
        else:
            config, activities = _config()
            _quiet(lambda: (_prepare_profiler(config, activities), _enable_profiler(config, activities)))
            self._profiling = True
        start = _enter_mark(self.mark)
        _exit_mark(start)  # the first mark: a record without it is not this call's
        self._undo = _close_doors(self)
        _push_mode(self._mode)
        return self

    def __exit__(self, *exc) -> None:
        for holder, name, value in reversed(self._undo):
            setattr(holder, name, value)
        self._undo = []
        stack = _get_current_dispatch_mode_stack()
        if any(m is self._mode for m in stack):
            while _get_current_dispatch_mode_stack()[-1] is not self._mode:
                _pop_mode()  # what the answer left above the witness is its own
            _pop_mode()
        elif self.hit is None:
            self.hit = self.message("took the check's modes off torch's mode stack")
        if not self._profiling:
            return
        try:
            result = _quiet(_disable_profiler)
        except RuntimeError:  # stopped by the answer
            if self.hit is None:
                self.hit = self.message("stopped torch's profiler")
            return
        if self.hit is None:
            self.hit = self._judge(result.events())

    def _judge(self, events) -> str | None:
        """None, or why the record shows work the modes did not see."""
        mark = self.mark
        marks = sum(1 for e in events if e.name() == mark)
        if marks != self.passed + 1:  # + the first mark
            return self.message("stopped or restarted torch's profiler")
        composite = _composite()
        unseen: dict[str, int] = {}
        threads: dict[int, list[list]] = {}
        spans = sorted(
            ((e.start_ns(), -e.duration_ns(), e.name(), e.start_thread_id()) for e in events),
            key=lambda s: (s[3], s[0], s[1]),
        )

        def close(entry: list) -> None:
            end, name, under_mark, marked_below, children = entry
            if name.startswith("aten::") and not under_mark and not marked_below and name not in _NO_WORK:
                if children or name.split(".")[0] not in composite:
                    unseen[name] = unseen.get(name, 0) + 1

        for start, minus_duration, name, thread in spans:
            stack = threads.setdefault(thread, [])
            while stack and stack[-1][0] <= start:
                close(stack.pop())
            is_mark = name == mark
            under = bool(stack) and (stack[-1][2] or stack[-1][1] == mark)
            if stack:
                stack[-1][4] += 1
            if is_mark:
                for entry in stack:
                    entry[3] = True
            stack.append([start - minus_duration, name, under, False, 0])
        for stack in threads.values():
            while stack:
                close(stack.pop())
        if not unseen:
            return None
        names = ", ".join(f"{n.removeprefix('aten::')} ×{c}" for n, c in sorted(unseen.items(), key=lambda x: -x[1]))
        return self.message(f"ran torch operations outside the check's modes ({names})")


# -- the doors ---------------------------------------------------------------------------------------------------------


def _close_doors(witness: Witness) -> list[tuple[Any, str, Any]]:
    """Replace, in their modules, torch's public helpers that would take the check's modes off or stop the record;
    returns what to put back."""
    import torch.utils._python_dispatch as python_dispatch
    from torch import _C, _ops
    from torch._C import _autograd

    ours = len(witness.below) + 1  # the check's modes and the witness's own
    functions = len(witness._functions)

    def refuse(did: str) -> Callable:
        def stand_in(*args, **kwargs):
            witness.refuse(did)

        return stand_in

    def pop_dispatch(original: Callable) -> Callable:
        def stand_in(*args, **kwargs):
            if _len_dispatch() <= ours:
                witness.refuse("took the check's modes off torch's mode stack")
            return original(*args, **kwargs)

        return stand_in

    def pop_function(original: Callable) -> Callable:
        def stand_in(*args, **kwargs):
            if _len_functions() <= functions:
                witness.refuse("took the check's torch-function modes off their stack")
            return original(*args, **kwargs)

        return stand_in

    def formatting_keeps_modes(did: str) -> Callable:
        refused = refuse(did)

        def stand_in(*args, **kwargs):
            if sys._getframe(1).f_code.co_filename.endswith(_TENSOR_STR):
                return contextlib.nullcontext()  # printing a tensor: nothing is taken off, its reads are seen
            return refused(*args, **kwargs)

        return stand_in

    doors: list[tuple[Any, str, Callable]] = []
    off = "switched torch's modes off"
    doors.append((python_dispatch, "_disable_current_modes", formatting_keeps_modes(off)))
    for name in ("_disable_infra_mode", "_unset_infra_mode"):
        doors.append((python_dispatch, name, refuse(off)))
    # (torch.overrides' helpers of the same names pop torch-function modes, as every call through a function mode
    # does, legitimately: its doors are DisableTorchFunction and the C pop below)
    for name in ("_pop_mode", "_pop_mode_temporarily"):
        doors.append((python_dispatch, name, pop_dispatch(getattr(python_dispatch, name))))
    if hasattr(python_dispatch, "_pop_torch_dispatch_stack"):
        doors.append((python_dispatch, "_pop_torch_dispatch_stack", pop_dispatch(_C._pop_torch_dispatch_stack)))
    doors.append((_C, "_pop_torch_dispatch_stack", pop_dispatch(_C._pop_torch_dispatch_stack)))
    doors.append((_C, "_pop_torch_function_stack", pop_function(_C._pop_torch_function_stack)))
    for name in ("_DisableTorchDispatch", "_unset_dispatch_mode", "_set_dispatch_mode", "DisableTorchFunction"):
        doors.append((_C, name, refuse(off)))
    if functions:
        doors.append((_C, "_set_torch_function_state", refuse(off)))
    for name in ("_pop_mode_from_pre_dispatch", "_set_mode_pre_dispatch"):
        if hasattr(_ops, name):
            doors.append((_ops, name, refuse(off)))
    stop = "stopped torch's profiler or its record"
    for name in (
        "_disable_profiler",
        "_disable_profiler_legacy",
        "_enable_profiler",
        "_enable_profiler_legacy",
        "_prepare_profiler",
        "_enable_record_function",
    ):
        doors.append((_autograd, name, refuse(stop)))
    undo = []
    for holder, name, stand_in in doors:
        undo.append((holder, name, getattr(holder, name)))
        setattr(holder, name, stand_in)
    return undo
