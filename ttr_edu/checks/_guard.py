"""What an exercise's rules forbid, and how an answer is held to them: one mechanism for every check.

An exercise declares its rules once (:class:`ttr_edu.checks._rules.Rules`). :func:`forbidden` resolves them into
three kinds of things, each caught where it cannot be avoided by spelling it differently:

* **torch operators** (the solvers: inverse, solve, least squares, eigen- and singular-value decompositions,
  factorisations). A kernel that refuses is registered over the operator's own kernel at torch's dispatcher
  (``torch.library``), so every route into it stops there: ``torch.linalg.inv``, ``Tensor.inverse``,
  ``torch.ops.aten.linalg_inv``, ``matrix_power(A, -1)``, ``pinv`` through its SVD, a name bound long before;
* **Python code** (the package's own answer to the exercise, numpy's and scipy's solvers, autograd's entry points),
  recognised by its code object when it starts running: a profile hook (``sys.setprofile``, and
  ``threading.setprofile`` for threads the answer starts) sees every Python function call, however it was reached
  (a module attribute, a name bound earlier, a frame's locals, a worker thread, ``functools.partial``);
* **the ways to hide from that hook**: switching it off (``sys.setprofile``), or a thread started below
  ``threading``.

Two ways to hold an answer to them:

* :func:`watching` (the student's own kernel, feedback): the dispatcher block and the profile hook for the duration
  of one call, then reported. Code that runs earlier in the same kernel can undo anything here; this is feedback.
  The hook holds an allow-list too (:func:`given_only`: any code of the package that the exercise's ``given`` does
  not reach is refused when it starts); a staged check (chapter 13) is held to its allow-list this way in the
  engine's child as well, where the process cannot be emptied because the check's own code runs the package there.
* :func:`lock_down` (the grading engine's child process, before the answer's cells run; for the rest of that process):
  the dispatcher block, and **removal** instead of a trace: every reference to a forbidden Python callable that the
  garbage collector knows of (module and class namespaces, instance attributes, containers, closures, defaults) is
  replaced by one that ends the process with the rule's message, so there is nothing left to call, in any thread; the
  dispatcher block cannot be unregistered (its only handle lives in the audit hook's closure). An **audit hook**
  (PEP 578; CPython has no way to remove one) then refuses what would bring a forbidden callable back or act outside
  the process: opening or re-importing the package's (or numpy's and scipy's linear algebra) code, ``ctypes``, ``gc``
  introspection, new code or function objects, starting processes, signalling other processes, tracing or profiling
  hooks, network, ``sqlite3``, writing outside the process's scratch folder, opening a folder (a folder handle) or
  anything under ``/proc``, and listing a folder outside the scratch folder and the import path; ``os.pidfd_open``
  and ``signal.pidfd_send_signal`` (no audit event) are removed. With an allow-list (``given``, declared once per
  exercise), every other Python function of the package is **emptied** as well: its code is replaced by one that
  ends the process ("the exercise asks you to write this yourself; <name> is not given to this exercise"), so the
  function object stays wherever it is held and runs nothing of its own; the given functions, what they use
  (:func:`reachable`) and the harness (``ttr_edu.checks``) keep theirs. What the engine cannot stop is stated in
  ``grading.md`` ("What the grader defends against").
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack, _pop_mode

__all__ = [
    "ForbiddenCall", "Forbidden", "forbidden", "given_only", "watching", "lock_down", "SOLVER_OPS", "AUTOGRAD",
    "SOLVERS",
]  # fmt: skip


class ForbiddenCall(Exception):
    """The answer reached something its exercise rules out; the message says what and why."""


#: aten operators that invert, solve, factorise or decompose a matrix -> how the course names them. Blocking these at
#: the dispatcher covers torch's composite functions too (``pinv`` calls the SVD, ``matrix_power(A, -1)`` the inverse).
SOLVER_OPS = {
    "linalg_inv_ex": "a matrix inverse (torch.linalg.inv, Tensor.inverse)",
    "_linalg_solve_ex": "a linear solve (torch.linalg.solve)",
    "linalg_solve_triangular": "a triangular solve (torch.linalg.solve_triangular)",
    "triangular_solve": "a triangular solve (torch.triangular_solve)",
    "linalg_lstsq": "a least-squares solve (torch.linalg.lstsq)",
    "_linalg_eigh": "an eigensolver (torch.linalg.eigh, eigvalsh)",
    "linalg_eig": "an eigensolver (torch.linalg.eig)",
    "linalg_eigvals": "an eigensolver (torch.linalg.eigvals)",
    "_linalg_svd": "a singular value decomposition (torch.linalg.svd, svdvals, pinv, torch.svd)",
    "linalg_cholesky_ex": "a Cholesky factorisation (torch.linalg.cholesky)",
    "cholesky_solve": "a Cholesky solve (torch.cholesky_solve)",
    "cholesky_inverse": "a Cholesky inverse (torch.cholesky_inverse)",
    "linalg_lu_factor_ex": "an LU factorisation (torch.linalg.lu_factor)",
    "linalg_lu": "an LU factorisation (torch.linalg.lu)",
    "linalg_lu_solve": "an LU solve (torch.linalg.lu_solve)",
    "linalg_ldl_factor_ex": "an LDL factorisation (torch.linalg.ldl_factor)",
    "linalg_ldl_solve": "an LDL solve (torch.linalg.ldl_solve)",
    "linalg_qr": "a QR factorisation (torch.linalg.qr)",
    "geqrf": "a QR factorisation (torch.geqrf)",
}

#: numpy's and scipy's routines of the same kinds (Python functions, recognised by their code).
SOLVERS = {
    "numpy.linalg": (
        "inv", "solve", "lstsq", "pinv", "eig", "eigh", "eigvals", "eigvalsh", "svd", "svdvals", "cholesky", "qr",
        "tensorinv", "tensorsolve", "matrix_power",
    ),
    "scipy.linalg": (
        "inv", "solve", "solve_triangular", "solve_banded", "solveh_banded", "solve_circulant", "solve_toeplitz",
        "lstsq", "pinv", "pinvh", "eig", "eigh", "eigvals", "eigvalsh", "eig_banded", "eigvals_banded",
        "eigh_tridiagonal", "eigvalsh_tridiagonal", "svd", "svdvals", "lu", "lu_factor", "lu_solve", "cho_factor",
        "cho_solve", "cholesky", "cho_solve_banded", "cholesky_banded", "qr", "rq", "schur", "ldl", "polar", "expm",
    ),
    "scipy.sparse.linalg": (
        "inv", "spsolve", "spsolve_triangular", "splu", "spilu", "factorized", "eigs", "eigsh", "svds", "lobpcg",
        "cg", "cgs", "bicg", "bicgstab", "gmres", "lgmres", "minres", "qmr", "gcrotmk", "tfqmr", "lsqr", "lsmr",
    ),
}  # fmt: skip

#: the compiled routines below numpy's and scipy's solvers -> the ones that solve nothing (kept).
_LAPACK = {
    "numpy.linalg._umath_linalg": ("det", "slogdet"),
    "numpy.linalg.lapack_lite": (),
    "scipy.linalg._flapack": (),
    "scipy.linalg._clapack": (),
}

#: autograd's entry points (``_engine_run_backward`` is where ``backward`` and ``autograd.grad`` meet the engine).
AUTOGRAD = (
    "torch.autograd.grad",
    "torch.autograd.backward",
    "torch.Tensor.backward",
    "torch.autograd.graph._engine_run_backward",
    "torch.autograd.functional.vjp",
    "torch.autograd.functional.jvp",
    "torch.autograd.functional.jacobian",
    "torch.autograd.functional.hessian",
    "torch.autograd.functional.vhp",
    "torch.autograd.functional.hvp",
    "torch.autograd.forward_ad.make_dual",
    "torch.func.grad",
    "torch.func.grad_and_value",
    "torch.func.vjp",
    "torch.func.jvp",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.hessian",
    "torch.func.linearize",
)


@functools.cache
def backward_ops() -> frozenset[str]:
    """The aten operators that are autograd's derivative kernels (``gelu_backward``, ``_softmax_backward_data``, ...):
    ruled out with autograd, since calling one (``torch.ops.aten.gelu_backward``) is taking autograd's derivative.
    ``aten::_backward`` (``Tensor.backward``'s own) is left to the call trace, which names it."""
    names = {name.split("::", 1)[1].split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names()}
    return frozenset(n for n in names if (n.endswith("_backward") or "_backward_" in n) and n != "_backward")


@dataclass(frozen=True)
class Forbidden:
    """What one answer may not reach, resolved to objects. ``codes``: code object -> message when it starts running;
    ``callables``: (object, message) to remove in the engine's child; ``ops``: aten operator -> message;
    ``allowed``: an allow-list traced instead of emptied (:func:`given_only`): the code objects of the package's
    functions the answer may run, every other code of the package (outside the harness) is refused when it starts
    running, however it was reached (None: no allow-list)."""

    codes: dict[types.CodeType, str] = field(default_factory=dict)
    callables: tuple[tuple[Any, str], ...] = ()
    ops: dict[str, str] = field(default_factory=dict)
    autograd: str | None = None  # the message for the autograd engine itself (its C entry point), when ruled out
    allowed: frozenset[types.CodeType] | None = None

    def __bool__(self) -> bool:
        return bool(self.codes or self.callables or self.ops or self.autograd) or self.allowed is not None

    def __or__(self, other: Forbidden) -> Forbidden:
        """Both sets of rules; two allow-lists give what either gives (as the exercises of one graded cell do)."""
        if self.allowed is None or other.allowed is None:
            allowed = self.allowed if other.allowed is None else other.allowed
        else:
            allowed = self.allowed | other.allowed
        return Forbidden(
            {**self.codes, **other.codes},
            self.callables + other.callables,
            {**self.ops, **other.ops},
            self.autograd or other.autograd,
            allowed,
        )


def _resolve(dotted: str) -> Any:
    """The object named ``"torch.linalg.inv"`` or ``"torch.Tensor.backward"``, or None when its module is missing."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name, None)
        return value
    return None


def code_of(value: Any) -> types.CodeType | None:
    """The code object behind a function, method, ``functools.partial``, ``functools.wraps`` wrapper or numpy's
    array-function dispatcher (its ``_implementation``), or None for C functions."""
    for _ in range(8):
        if isinstance(value, types.FunctionType):
            inner = getattr(value, "__wrapped__", None)
            if inner is None or not callable(inner):
                return value.__code__
            value = inner
            continue
        inner = (
            getattr(value, "__func__", None)
            or getattr(value, "_implementation", None)
            or (value.func if isinstance(value, functools.partial) else None)
            or getattr(value, "__wrapped__", None)
        )
        if inner is None:
            return None
        value = inner
    return None


def _layers(value: Any) -> Iterator[Any]:
    """``value`` and what it wraps (``__wrapped__``, ``__func__``, ``_implementation``), each removed in the child."""
    seen = []
    for _ in range(8):
        if value is None or any(value is s for s in seen):
            return
        seen.append(value)
        yield value
        value = (
            getattr(value, "__wrapped__", None)
            or getattr(value, "__func__", None)
            or getattr(value, "_implementation", None)
        )


def _label(value: Any) -> str:
    module = getattr(value, "__module__", None) or "?"
    return f"{module}.{getattr(value, '__qualname__', getattr(value, '__name__', repr(value)))}"


def forbidden(
    *,
    answers: Iterable[Callable] = (),
    no_solvers: bool = False,
    no_autograd: bool = False,
    why: str = "",
    solver_modules: Iterable[str] | None = None,
) -> Forbidden:
    """Resolve an exercise's rules into what its answer may not reach.

    Args:
        answers: the package's own implementations of the exercise (its reference among them): calling one of them is
            not the student's work.
        no_solvers: rule out torch's, numpy's and scipy's inverses, solves, factorisations and eigensolvers.
        no_autograd: rule out autograd (``backward``, ``torch.autograd``, ``torch.func``'s transforms, forward AD).
        why: the exercise's words for what to do instead, appended to a rule's message.
        solver_modules: numpy/scipy modules whose solvers are resolved (default: those already imported, so that
            a check in the student's kernel never imports scipy itself).
    """
    tail = f": {why}" if why else ""
    codes: dict[types.CodeType, str] = {}
    callables: list[tuple[Any, str]] = []
    for answer in answers:
        message = (
            f"your function calls the package's own implementation ({_label(answer)}); the exercise is to write it "
            "yourself, so this does not count as an answer"
        )
        code = code_of(answer)
        if code is not None:
            codes[code] = message
        callables.extend((layer, message) for layer in _layers(answer))
    ops = {}
    if no_solvers:
        ops = {op: f"your function used {what}, which this exercise rules out{tail}" for op, what in SOLVER_OPS.items()}
        modules = list(solver_modules) if solver_modules is not None else [m for m in SOLVERS if m in sys.modules]
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError:  # scipy is optional
                continue
            for name in SOLVERS.get(module_name, ()):
                value = getattr(module, name, None)
                if value is None:
                    continue
                message = f"your function called {module_name}.{name}, which this exercise rules out{tail}"
                code = code_of(value)
                if code is not None:
                    codes[code] = message
                callables.extend((layer, message) for layer in _layers(value))
        for module_name, allowed in _LAPACK.items():  # what those routines call: removed in the engine's child
            module = sys.modules.get(module_name)
            for name, value in sorted(vars(module).items()) if module is not None else ():
                if callable(value) and not name.startswith("_") and name not in allowed:
                    message = f"your function called {module_name}.{name}, which this exercise rules out{tail}"
                    callables.append((value, message))
    autograd = None
    if no_autograd:
        autograd = f"your function used autograd, which this exercise rules out{tail}"
        ops = ops | {  # refused at the dispatcher, as the solvers are (see watching for the student's kernel)
            op: f"your function used autograd's derivative kernel (torch.ops.aten.{op}), which this exercise rules "
            f"out{tail}"
            for op in sorted(backward_ops())
        }
        for dotted in AUTOGRAD:
            value = _resolve(dotted)
            if value is None:
                continue
            spelled = dotted.replace(".graph._engine_run_backward", "")
            message = f"your function used autograd ({spelled}), which this exercise rules out{tail}"
            code = code_of(value)
            if code is not None:
                codes[code] = message
            callables.extend((layer, message) for layer in _layers(value))
    return Forbidden(codes, tuple(callables), ops, autograd)


#: operators blocked in their default overload only: ``torch.linalg.det`` calls ``linalg_lu_factor_ex.out`` itself
_OVERLOADS_KEPT = frozenset({"linalg_lu_factor_ex"})

# -- the dispatcher block ----------------------------------------------------------------------------------------------

_DEVICE_KEYS = ("CPU", "CUDA") if torch.cuda.is_available() else ("CPU",)


def _block_ops(ops: dict[str, str], refuse: Callable[[str], Any]) -> Any:
    """A ``torch.library.Library`` whose kernels, registered over ``ops``' own, call ``refuse(message)``; its
    ``_destroy()`` puts torch's kernels back. None when there is nothing to block."""
    if not ops:
        return None
    library = torch.library.Library("aten", "IMPL")

    def kernel(message: str) -> Callable:
        def refused(*args, **kwargs):
            return refuse(message)

        return refused

    with warnings.catch_warnings():  # "overriding a previously registered kernel" is the point here
        warnings.simplefilter("ignore")
        for op, message in ops.items():
            packet = getattr(torch.ops.aten, op, None)
            # every overload, not only the default: ``out=`` forms (``eigvalsh(A, out=w)``) are overloads of their own;
            # except the LU factorisation's, which torch's determinant runs inside (a determinant solves nothing)
            others = () if packet is None or op in _OVERLOADS_KEPT else packet.overloads()
            overloads = [op] + [f"{op}.{name}" for name in others if name != "default"]
            for name in overloads:
                for key in _DEVICE_KEYS:
                    try:
                        library.impl(name, kernel(message), key)
                    except (RuntimeError, AttributeError, ValueError):  # an operator this torch does not have
                        pass
    return library


# -- the profile hook --------------------------------------------------------------------------------------------------

_GUARD_FILE = __file__
_STDLIB_THREADING = threading.__file__
_setprofile = sys.setprofile
_start_new_thread = getattr(sys.modules.get("_thread"), "start_new_thread", None)
_THREAD_HOOKS = {threading.setprofile.__code__, threading.settrace.__code__}


def _engine_backward(arg: Any) -> bool:
    """Whether a C call is autograd's engine itself (``Variable._execution_engine.run_backward``)."""
    return getattr(arg, "__name__", None) in ("run_backward", "queue_callback") and isinstance(
        getattr(arg, "__self__", None), torch._C._EngineBase
    )


class _Trace:
    """The profile hook: records the first forbidden code that starts running, or the first attempt to hide from it."""

    def __init__(self, bad: Forbidden, on_hit: Callable[[str], Any] | None = None) -> None:
        self.quiet = (_setprofile, _start_new_thread, _GUARD_FILE, _STDLIB_THREADING, _engine_backward)
        self.codes = bad.codes
        self.allowed = bad.allowed
        self.package = (_PACKAGE_DIR, _HARNESS_DIR)
        self.autograd = bad.autograd
        self.on_hit = on_hit
        self.hit: str | None = None

    def _found(self, message: str) -> None:
        if self.hit is None:
            self.hit = message
        if self.on_hit is not None:
            self.on_hit(message)

    def __call__(self, frame, event, arg):
        try:
            if event == "call":
                code = frame.f_code
                message = self.codes.get(code)
                caller = frame.f_back
                if code in _THREAD_HOOKS and caller is not None and caller.f_code.co_filename != _GUARD_FILE:
                    message = (  # threads started after it would run untraced
                        "your function switched off the call trace of the threads it starts (threading.setprofile); "
                        "remove that code"
                    )
                first = self.hit is None or self.on_hit is not None  # else only the first hit is reported
                if message is None and first and self.allowed is not None and code not in self.allowed:
                    package, harness = self.package
                    filename = code.co_filename
                    if _chapter_check_code(filename):  # a chapter's check code its exercise does not run
                        if code.co_name not in _KEPT_METHODS:
                            message = _not_given(code, frame)
                    elif filename.startswith(package) and not filename.startswith(harness):
                        if code.co_name not in _KEPT_METHODS:
                            # a decorator's wrapper around a function the rules name: the rule's own message
                            wrapped = _wrapped_of(code, frame)
                            message = self.codes.get(code_of(wrapped)) if wrapped is not None else None
                            message = message or _not_given(code, frame)
                if message is not None:
                    self._found(message)
            elif event == "c_call":
                setprofile, start_new_thread, guard_file, threading_file, engine_backward = self.quiet
                caller = frame.f_code.co_filename
                if arg is setprofile and caller != guard_file and caller != threading_file:
                    self._found("your function switched off the check's call trace (sys.setprofile); remove that code")
                elif arg is start_new_thread and caller != threading_file:
                    self._found(
                        "your function started a thread below the threading module (_thread); the check follows "
                        "the calls of your function's threads, so use threading (or no thread) instead"
                    )
                elif self.autograd is not None and engine_backward(arg):
                    self._found(self.autograd)
        except Exception:  # a hook that raises is switched off by CPython: record, never raise
            self._found("your function broke the check's call trace; remove the code that interferes with it")


def _refuse_now(message: str):
    raise ForbiddenCall(message)


class _DirectBackward(TorchDispatchMode):
    """Refuses autograd's derivative kernels (``ops``: name -> message) when the answer calls them itself, and lets
    autograd's engine run them: its use is the call trace's to report, after the answer's values (a wrong answer is
    shown as wrong first)."""

    def __init__(self, ops: dict[str, str]) -> None:
        super().__init__()
        self.ops = ops

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled: no need to import torch._dynamo

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        message = self.ops.get(func._schema.name.partition("::")[2])
        if message is not None and torch._C._current_autograd_node() is None:
            raise ForbiddenCall(message)
        return func(*args, **(kwargs or {}))


def _stand_in_for_compiled(bad: Forbidden, trace: _Trace) -> list[tuple[dict, str, Any]]:
    """Replace, in every loaded module's namespace (the notebook's ``__main__`` among them), the forbidden callables
    that have no Python code (the compiled LAPACK routines below numpy's and scipy's solvers: a profile hook sees no
    call of a ufunc or an f2py routine) by a stand-in that records the rule's message in ``trace`` and raises
    :class:`ForbiddenCall`. Returns what to put back. The engine's child removes the same callables everywhere
    (:func:`lock_down`); this is the kernel's view of it, so that both give one verdict."""
    compiled = {id(value): (value, message) for value, message in bad.callables if code_of(value) is None}
    compiled = {k: v for k, v in compiled.items() if not isinstance(v[0], (types.ModuleType, type))}
    if not compiled:
        return []

    def stand_in(message: str) -> Callable:
        def ruled_out(*args, **kwargs):
            trace._found(message)
            raise ForbiddenCall(message)

        return ruled_out

    undo = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            found = compiled.get(id(value))
            if found is not None and found[0] is value:
                namespace[key] = stand_in(found[1])
                undo.append((namespace, key, value))
    return undo


@contextmanager
def watching(bad: Forbidden) -> Iterator[_Trace]:
    """Hold the code inside the block to ``bad`` (the student's kernel): forbidden torch operators raise
    :class:`ForbiddenCall` (autograd's derivative kernels when the answer calls one itself, not when autograd's engine
    does), and so do forbidden compiled routines reached through a module (:func:`_stand_in_for_compiled`); a
    forbidden Python function, or an attempt to hide from the trace, is recorded in the yielded trace's ``hit`` (the
    caller reports it once the answer has returned). Everything is undone on exit."""
    trace = _Trace(bad)
    derivatives = {op: message for op, message in bad.ops.items() if op in backward_ops()}
    library = _block_ops({op: m for op, m in bad.ops.items() if op not in derivatives}, _refuse_now)
    direct = _DirectBackward(derivatives) if derivatives else contextlib.nullcontext()
    undo = _stand_in_for_compiled(bad, trace)
    direct.__enter__()
    previous = sys.getprofile()
    previous_threads = threading.getprofile() if hasattr(threading, "getprofile") else None
    threading.setprofile(trace)
    sys.setprofile(trace)
    try:
        yield trace
    finally:
        current = sys.getprofile()
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
        _leave_mode(direct)
        for namespace, key, value in reversed(undo):
            namespace[key] = value
        if library is not None:
            library._destroy()
        if current is not trace and trace.hit is None:
            trace.hit = "your function switched off the check's call trace (sys.setprofile); remove that code"


def _leave_mode(mode: Any) -> None:
    """Leave ``mode`` (entered in :func:`watching`), with what the answer left above it on torch's mode stack."""
    if not isinstance(mode, TorchDispatchMode):
        return
    stack = _get_current_dispatch_mode_stack()
    if any(m is mode for m in stack):
        while _get_current_dispatch_mode_stack()[-1] is not mode:
            _pop_mode()
        mode.__exit__(None, None, None)


# -- the engine's child: removal and refusal, for good -----------------------------------------------------------------


def _replace_everywhere(replacements: dict[int, tuple[Any, Any]]) -> list[str]:
    """Replace every reference the garbage collector knows to each ``old`` of ``{id(old): (old, new)}`` by its
    ``new``: in dicts (module and class namespaces, instance attributes), lists, sets, closure cells and function
    defaults; an immutable holder (a tuple, frozenset, bound method, partial) is itself replaced where it is held, in
    the next round. Returns descriptions of the holders it could not change. One heap scan per round."""
    import gc

    def swap(value: Any) -> Any:
        found = replacements.get(id(value))
        return found[1] if found is not None and found[0] is value else value

    left, todo, here = [], dict(replacements), sys._getframe()
    for _ in range(4):
        if not todo:
            break
        found, todo = gc.get_referrers(*(old for old, _ in todo.values())), {}
        for holder in found:
            if holder is here or isinstance(holder, (types.FrameType, types.CodeType, types.ModuleType)):
                continue
            if isinstance(holder, dict):
                for key, value in list(holder.items()):
                    if swap(value) is not value:
                        holder[key] = swap(value)
            elif isinstance(holder, list):
                holder[:] = [swap(v) for v in holder]
            elif isinstance(holder, set):
                olds = [v for v in holder if swap(v) is not v]
                holder.difference_update(olds)
                holder.update(swap(v) for v in olds)
            elif isinstance(holder, types.CellType):
                holder.cell_contents = swap(holder.cell_contents)
            elif isinstance(holder, types.FunctionType) and holder.__defaults__:
                holder.__defaults__ = tuple(swap(v) for v in holder.__defaults__)
            elif isinstance(holder, type):
                for key, value in list(vars(holder).items()):
                    if swap(value) is not value:
                        try:
                            setattr(holder, key, swap(value))
                        except (TypeError, AttributeError):
                            left.append(f"{holder.__name__}.{key}")
            elif isinstance(holder, (tuple, frozenset)):
                todo[id(holder)] = (holder, type(holder)(swap(v) for v in holder))
            elif isinstance(holder, (types.MethodType, functools.partial, staticmethod, classmethod)):
                inner = [getattr(holder, a, None) for a in ("__func__", "func", "__self__")]
                todo[id(holder)] = (holder, next(swap(v) for v in inner if swap(v) is not v))
            elif isinstance(getattr(holder, "__dict__", None), dict):  # an instance whose dict is kept inline
                for key, value in list(vars(holder).items()):
                    if swap(value) is not value:
                        object.__setattr__(holder, key, swap(value))
            else:
                left.append(type(holder).__name__)
        replacements.update(todo)
    return left


def _ender(message: str, end: Callable[[str], Any]) -> Callable:
    def ended(*args, **kwargs):
        return end(message)

    ended.__name__ = "ruled_out"
    return ended


# -- the allow-list: the package's functions an exercise does not give are emptied -----------------------------------

_PACKAGE_DIR = str(Path(__file__).resolve().parents[1]) + os.sep
_HARNESS_DIR = str(Path(__file__).resolve().parent) + os.sep
#: the harness modules whose code runs in the answer's process around the answer (what they use stays)
_MACHINERY = (
    "ttr_edu.checks._rules", "ttr_edu.checks._core", "ttr_edu.checks._guard", "ttr_edu.checks._forbid",
    "ttr_edu.checks._triton_sanitizer", "ttr_edu.checks.grading._child",
)  # fmt: skip
#: the harness code that is not a chapter's check module: the machinery and the grading engine (``_*.py``, ``grading``)
_HARNESS_OWN = ("_", "grading" + os.sep)


def _chapter_check_code(filename: str) -> bool:
    """Whether ``filename`` is a chapter's check module (``ttr_edu/checks/delta_rule.py``, ...): its references and
    specifications (chapter 11's ``ut_transform_spec``, chapter 08's ``householder_product``) compute answers, so the
    kernel's allow-list holds an answer to them as it holds the package (the grading engine's child does not even let
    an answer open these files); only the code its own exercise runs around the answer (:func:`given_only`'s
    ``harness``) may run."""
    return filename.startswith(_HARNESS_DIR) and not filename[len(_HARNESS_DIR) :].startswith(_HARNESS_OWN)


#: methods never emptied: the interpreter calls them on its own (a package object collected while the answer runs)
_KEPT_METHODS = frozenset({"__del__"})


def _package_code(value: Any) -> bool:
    """Whether ``value`` is a Python function whose code is the package's, outside the harness (``ttr_edu.checks``)."""
    code = value.__code__ if type(value) is types.FunctionType else None  # type(): no object's __class__ is asked
    return (
        code is not None and code.co_filename.startswith(_PACKAGE_DIR) and not code.co_filename.startswith(_HARNESS_DIR)
    )


def package_functions() -> list[types.FunctionType]:
    """Every Python function object of the package (outside the harness) alive in this process: module functions,
    methods, the inner functions of factories already called (a feature map built in a setup cell), wrapped ones.
    The grading engine's fork server lists them once; each graded cell's process empties those its exercises do not
    give (:func:`lock_down`)."""
    import gc

    return [f for f in gc.get_objects() if _package_code(f) and f.__name__ not in _KEPT_METHODS]


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def machinery() -> list[Any]:
    """What of the package runs around an answer besides what its exercise gives: the harness's machinery (its
    functions and classes, not its tables: its snapshot holds the whole package; e.g. the counters of
    :mod:`ttr_edu.profiling` that count an answer's operations), the package's import hooks (its finder of moved
    modules) and a package module's ``__getattr__``/``__dir__`` (PEP 562), which the interpreter calls on its own.
    Kept by the allow-list wherever it is held, by emptying (:func:`lock_down`) or by the call trace
    (:func:`given_only` with ``with_machinery``)."""
    kept: list[Any] = [
        v
        for m in _MACHINERY
        if m in sys.modules
        for v in vars(sys.modules[m]).values()
        if isinstance(v, (types.FunctionType, type))
    ]
    kept += [type(hook) for hook in [*sys.meta_path, *sys.path_hooks]]
    kept += [
        vars(m).get(name)
        for key, m in list(sys.modules.items())
        if key.startswith("ttr_edu") and isinstance(m, types.ModuleType)
        for name in ("__getattr__", "__dir__")
    ]
    return kept


def given_only(given: Iterable[Any], *, with_machinery: bool = False, harness: Iterable[Any] = ()) -> Forbidden:
    """The allow-list of ``given`` (the package's functions and classes an exercise hands the student), as a call
    trace holds an answer to it (:func:`watching`): the code of what the given functions and classes use
    (:func:`reachable`, their inner functions and comprehensions included) may run; any other code of the package,
    outside the harness (``ttr_edu.checks``), is refused when it starts running with the message of
    :func:`lock_down`'s emptied functions, naming it. This is for a check whose own code runs the package's objects
    beside the answer (chapter 13's capstone builds and rebuilds design-space points where the answer runs): there
    the package cannot be emptied for the whole process, so only the answer's calls are held to the list. Code the
    answer's process loads later (a module imported inside the answer) is refused too: nothing of it is given.

    ``with_machinery``: keep what :func:`machinery` keeps as well, so that the trace allows what the engine's child
    keeps after :func:`lock_down` has emptied the rest: the check in the student's kernel holds every declared
    exercise's answer to this list (:func:`ttr_edu.checks._rules.run_in_kernel`), and both give one verdict.

    ``harness``: the chapter check module's code that runs around the answer (its exercise's adapter and watches):
    kept with what it uses. Any other code of a chapter's check module is refused like the package's
    (:func:`_chapter_check_code`).

    Raises:
        TypeError: something in ``given`` that is neither a function nor a class.
    """
    given = tuple(given)
    for value in given:
        if not (isinstance(value, type) or callable(value)):
            raise TypeError(f"given_only: given expects functions and classes, got {type(value).__name__}")
    functions: list[types.FunctionType] = []
    reachable([*given, *harness, *(machinery() if with_machinery else ())], functions)
    return Forbidden(allowed=frozenset(c for f in functions for c in _codes(f.__code__)))


def _wrapped_of(code: types.CodeType, frame: types.FrameType | None) -> types.FunctionType | None:
    """The package's function that a decorator's wrapper (a closure, running as ``code`` in ``frame``) wraps, or
    None."""
    if frame is None or not code.co_freevars:
        return None
    try:
        held = [frame.f_locals.get(name) for name in code.co_freevars]
    except Exception:  # a frame that cannot show its variables
        return None
    return next((f for f in held if type(f) is types.FunctionType and _package_code(f)), None)


def _not_given(code: types.CodeType, frame: types.FrameType | None = None) -> str:
    """The allow-list's message for a code object of the package starting to run (in ``frame``): the function it
    belongs to, by module and name; for a decorator's wrapper (a closure over the package's function it wraps, as
    ``ttr_edu.ops``' ``varlen`` is), the wrapped function's name, which is what the answer called."""
    wrapped = _wrapped_of(code, frame)
    if wrapped is not None:
        return (
            f"the exercise asks you to write this yourself; {wrapped.__module__}.{wrapped.__qualname__} is not given "
            "to this exercise"
        )
    relative = code.co_filename[len(_PACKAGE_DIR) :].removesuffix(".py").split(os.sep)
    module = ".".join([Path(_PACKAGE_DIR).name, *relative]).removesuffix(".__init__")
    name = getattr(code, "co_qualname", code.co_name)
    what = module if name == "<module>" else f"{module}.{name}"  # an import of a module: the module, by name
    return f"the exercise asks you to write this yourself; {what} is not given to this exercise"


def reachable(roots: Iterable[Any], functions: list[types.FunctionType] | None = None) -> set[int]:
    """The ids of the package's functions (and classes) that ``roots`` use, themselves included: the globals their
    code names (and, for a module, its attributes the code names), their closures, defaults and wrapped functions,
    a class's methods and its bases, the items of a table the code names and the package's objects held there (their
    class and attributes). What a given function calls on its way is given with it. ``functions``: a list that
    receives each function object found."""
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        value = todo.pop()
        if value is None or id(value) in seen:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            todo.append(value.__func__)
            continue
        if isinstance(value, property):
            todo.extend((value.fget, value.fset, value.fdel))
            continue
        if isinstance(value, functools.partial):
            todo.extend((value.func, *value.args, *value.keywords.values()))
            continue
        if isinstance(value, types.MethodType):
            todo.append(value.__func__)
            continue
        if isinstance(value, type):
            seen.add(id(value))
            if (getattr(value, "__module__", "") or "").startswith("ttr_edu"):
                todo.extend(vars(value).values())
                todo.extend(value.__bases__)
            continue
        if type(value) in (dict, types.MappingProxyType, list, tuple, set, frozenset):  # a table the code names
            seen.add(id(value))
            todo.extend(value.values() if type(value) in (dict, types.MappingProxyType) else value)
            continue
        if not isinstance(value, types.FunctionType):
            inner = getattr(value, "fn", None) or getattr(value, "__wrapped__", None)  # a Triton kernel, a wrapper
            if isinstance(inner, types.FunctionType):
                todo.append(inner)
            elif not isinstance(value, types.ModuleType) and _package_object(value):  # an object of the package's
                seen.add(id(value))
                todo.append(type(value))
                todo.extend((getattr(value, "__dict__", None) or {}).values())
            continue
        seen.add(id(value))
        if functions is not None:
            functions.append(value)
        todo.extend(c.cell_contents for c in value.__closure__ or () if _filled(c))
        todo.extend(value.__defaults__ or ())
        todo.extend((value.__kwdefaults__ or {}).values())
        todo.append(getattr(value, "__wrapped__", None))
        names = {n for code in _codes(value.__code__) for n in code.co_names}
        found = [value.__globals__.get(n) for n in names]
        if value.__code__.co_filename.startswith(_HARNESS_DIR):  # the harness's tables (its snapshot of the package)
            found = [v for v in found if isinstance(v, (types.FunctionType, type, types.ModuleType))]
        for _ in range(3):  # ``ops.delta_rule.naive``: a module's attributes that the code names
            modules = [m for m in found if isinstance(m, types.ModuleType) and m.__name__.startswith("ttr_edu")]
            todo.extend(v for v in found if not isinstance(v, types.ModuleType))
            found = [getattr(m, n, None) for m in modules for n in names if id(m) not in seen]
            seen.update(id(m) for m in modules)
        todo.extend(v for v in found if not isinstance(v, types.ModuleType))
    return seen


def _package_object(value: Any) -> bool:
    """Whether ``value`` is an instance of a class of the package outside the harness."""
    module = getattr(type(value), "__module__", "") or ""
    return module.startswith("ttr_edu") and not module.startswith("ttr_edu.checks")


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _emptied_code(n_free: int) -> types.CodeType:
    """The code a removed package function runs instead of its own: it ends the process with the message held in its
    keyword defaults. ``n_free`` free variables, so that it fits a function with a closure of that size."""
    names = [f"c{i}" for i in range(n_free)]
    inner = "    def ruled_out(*args, __ruled_out__=None, **kwargs):\n"
    if names:
        inner += "        if False:\n            " + ", ".join(names) + "\n"
    inner += "        return __ruled_out__[1](__ruled_out__[0])\n"
    source = "def outer():\n" + "".join(f"    {n} = None\n" for n in names) + inner + "    return ruled_out\n"
    scope: dict = {}
    exec(compile(source, _GUARD_FILE, "exec"), scope)  # before the audit hook: new code is refused afterwards
    return scope["outer"]().__code__


def _empty_the_rest(package: Iterable[types.FunctionType], allowed: set[int], end: Callable[[str], Any]) -> int:
    """Replace the code of every function of ``package`` whose id is not in ``allowed`` by one that ends the process
    with the allow-list's message: the function objects stay where they are held (a module, a class, a name the
    student bound), with nothing left in them to run. Returns how many were emptied."""
    codes: dict[int, types.CodeType] = {}
    emptied = 0
    for function in package:
        if id(function) in allowed or not _package_code(function):
            continue
        n_free = len(function.__code__.co_freevars)
        if n_free not in codes:
            codes[n_free] = _emptied_code(n_free)
        name = f"{function.__module__}.{function.__qualname__}"
        message = f"the exercise asks you to write this yourself; {name} is not given to this exercise"
        function.__code__ = codes[n_free]
        function.__defaults__ = None
        function.__kwdefaults__ = {"__ruled_out__": (message, end)}
        emptied += 1
    return emptied


#: audit events refused once the answer's process is locked down (prefixes); see :func:`_refuse`.
_REFUSED_EVENTS = (
    "ctypes.",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "code.__new__",
    "function.__new__",
    "sys.setprofile",
    "sys.settrace",
    "sys._current_frames",
    "sys.addaudithook",
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "os.startfile",
    "os.kill",
    "os.killpg",
    "os.setsid",
    "subprocess.Popen",
    "pty.spawn",
    "socket.",
    "sqlite3.",
    "webbrowser.open",
    "urllib.Request",
    "ftplib.",
    "smtplib.",
    "http.client.",
)
#: file-system events whose first argument is a path; refused outside the scratch folder.
_WRITES = {
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink", "os.link",
    "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod", "shutil.rmtree",
    "shutil.move", "shutil.copyfile", "shutil.copytree",
}  # fmt: skip


def lock_down(
    bad: Forbidden,
    *,
    end: Callable[[str], Any],
    scratch: str | os.PathLike,
    code_dirs: Iterable[str | os.PathLike],
    given: Iterable[Any] | None = None,
    package: Iterable[types.FunctionType] | None = None,
) -> None:
    """Hold the rest of this process to ``bad``, for good (the grading engine's child, before the answer's cells run).

    ``end(message)`` reports a broken rule and ends the process (it must not return). ``scratch`` is the only folder
    written to; ``code_dirs`` hold code that must not be opened or re-imported (the package, numpy's and scipy's
    linear algebra). Call it once the modules the answer may use are imported: importing a compiled module afterwards
    is refused. ``given`` (the exercises' allow-list, :attr:`ttr_edu.checks._rules.Exercise.given`; None: no
    allow-list): every other function of the package (``package``, default :func:`package_functions`) is emptied, except
    what the given functions and the harness's machinery use (:func:`reachable`); the harness (``ttr_edu.checks``)
    stays.

    Raises:
        RuntimeError: a forbidden callable is held somewhere it cannot be replaced (a bug of the check, reported to
            the instructor, never the student's fault).
    """
    scratch = os.path.realpath(scratch)
    code_dirs = tuple(os.path.realpath(d) + os.sep for d in code_dirs)
    tracing = not bad  # nothing to remove: the caller keeps the call trace of `watching` (an older check)
    library = _block_ops(bad.ops, end)
    replacements = {
        id(value): (value, _ender(message, end))
        for value, message in bad.callables
        if value is not None and not isinstance(value, (types.ModuleType, type))
    }
    if bad.autograd is not None:
        engine = torch.autograd.Variable._execution_engine
        replacements[id(engine)] = (engine, _EndedEngine(bad.autograd, end))
    import signal

    for holder, name in ((os, "pidfd_open"), (signal, "pidfd_send_signal")):  # signals no audit event reports
        value = getattr(holder, name, None)
        if value is not None:
            message = f"the grader does not let an answer signal processes ({holder.__name__}.{name})"
            replacements[id(value)] = (value, _ender(message, end))
    stuck = _replace_everywhere(replacements)
    if stuck:
        raise RuntimeError("the grader could not remove what the rules forbid (held by " + ", ".join(stuck) + ")")
    if given is not None:
        allowed = reachable([*given, *machinery()])
        _empty_the_rest(package_functions() if package is None else package, allowed, end)
    loaded = set(sys.modules)
    readable = tuple(  # folders an answer may list: its scratch folder and the import path (imports list them)
        os.path.realpath(p) + os.sep for p in [scratch, *sys.path] if isinstance(p, str) and p and os.path.isdir(p)
    )
    sys.addaudithook(_audit(library, scratch, code_dirs, loaded, tracing, readable))


class _EndedEngine:
    """Stands for autograd's engine once autograd is ruled out: any use ends the process with the rule's message."""

    def __init__(self, message: str, end: Callable[[str], Any]) -> None:
        object.__setattr__(self, "_end", functools.partial(end, message))

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self._end()


def _audit(
    library: Any, scratch: str, code_dirs: tuple[str, ...], loaded: set[str], tracing: bool, readable: tuple[str, ...]
) -> Callable:
    """The audit hook of :func:`lock_down`. It holds the dispatcher block (its only reference: a hook cannot be listed,
    removed or reached through ``gc``, which it refuses), so the block lasts as long as the process."""

    def outside(path: Any) -> bool:
        try:
            real = os.path.realpath(os.fsdecode(path)) if not isinstance(path, int) else None
        except (TypeError, ValueError):
            return True
        return real is not None and real != scratch and not real.startswith(scratch + os.sep)

    def code_file(path: Any) -> bool:
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real.startswith(code_dirs) and real.endswith((".py", ".pyc", ".so", ".pyd"))

    def unlisted(path: Any) -> bool:
        if path is None:
            path = "."
        if isinstance(path, int):  # a folder handle: none can be opened (below), refused all the same
            return True
        try:
            real = os.path.realpath(os.fsdecode(path)) + os.sep
        except (TypeError, ValueError):
            return True
        return not real.startswith(readable)

    refused, writes_events, proc = _REFUSED_EVENTS, _WRITES, "/proc"  # held here: module globals go at shutdown
    directory = getattr(os, "O_DIRECTORY", 0)
    isdir = os.path.isdir
    hooks, getframe, guard_file = ("sys.setprofile", "sys.settrace"), sys._getframe, _GUARD_FILE
    if tracing:  # the check's call trace is this file's to switch on and off
        refused = tuple(e for e in refused if e not in hooks)

    def hook(event: str, args: tuple) -> None:
        if event == "":  # never raised; naming the block here keeps it alive as long as this hook
            return library
        if event.startswith(refused):
            raise PermissionError(f"the grader does not let an answer do this ({event})")
        if tracing and event in hooks:  # frame 1: the Python code that called it (map(sys.setprofile, …) included)
            caller = getframe(1)
            if caller is None or caller.f_code.co_filename != guard_file:
                raise PermissionError(f"the grader does not let an answer switch the check's call trace ({event})")
        if event == "open" and args:
            path, mode = args[0], args[1] if len(args) > 1 else "r"
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = isinstance(mode, str) and any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)
            if isinstance(path, int):
                return
            text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
            if (
                text.startswith(proc)
                or os.path.realpath(text).startswith(proc)
                or code_file(path)
                or (writes and outside(path))
            ):
                raise PermissionError(f"the grader does not let an answer open {text!r}")
            if flags & directory or isdir(text):  # a folder handle would open files relative to it, unaudited
                raise PermissionError(f"the grader does not let an answer open a folder ({text!r})")
        elif event in ("os.listdir", "os.scandir") and unlisted(args[0] if args else None):
            raise PermissionError(f"the grader does not let an answer list this folder ({event})")
        elif event in writes_events and args and outside(args[0]):
            raise PermissionError(
                f"the grader does not let an answer change files outside its scratch folder ({event})"
            )
        elif event == "import" and len(args) > 1 and args[0] not in loaded and args[1] and code_file(args[1]):
            raise ImportError(f"the grader does not let an answer load {args[0]} again")
        elif event == "exec" and args and isinstance(args[0], types.CodeType) and code_file(args[0].co_filename):
            raise PermissionError("the grader does not let an answer run the package's code again (reload)")

    return hook


def package_dirs() -> list[str]:
    """The folders whose code an answer may not open or re-import: the package, and numpy's and scipy's linear
    algebra."""
    dirs = [str(Path(__file__).resolve().parents[1])]
    for name in ("numpy.linalg", "scipy.linalg", "scipy.sparse.linalg"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(str(Path(module.__file__).resolve().parent))
    return dirs
