"""The machinery every exercise check shares (CONTRIBUTING.md, "Notebooks and exercises").

A check calls the student's function on seeded random cases and compares it with the package's reference. Exercises
are declared with :func:`ttr_edu.checks._rules.exercise` (their reference, cases, tolerances and rules, in one place);
:func:`run_check` is the older form, which builds such a declaration on the fly. Either way a check has exactly three
outcomes:

* pass: prints one line starting with ``PASS`` and returns ``True``;
* not attempted (the untouched stub: ``raise NotImplementedError()`` is the first statement of the function that
  raised it, as nbgrader leaves it): prints a friendly line and returns ``False``, so an unsolved notebook still
  runs top to bottom (under nbgrader's autograder it raises :class:`CheckFailed` instead, so the exercise scores 0).
  A ``NotImplementedError`` raised anywhere else (a partly written function) is a wrong answer;
* wrong: raises :class:`CheckFailed` (an ``AssertionError``) that shows the failing case: its inputs' shapes,
  the first wrong element, the expected and the received value. In Jupyter only this message is shown, not a
  traceback through the package (``CheckFailed._render_traceback_``); when the student's function raised, the
  message names the line of the student's code where it did.

Where a wrong answer goes depends on who runs the notebook. In the student's own kernel (JupyterLab, Run All) a failed
check prints ``FAIL`` with the reason and returns ``False``: the notebook runs on, and the cells below do not use the
student's function until its check passes (:func:`passed`), as for an unattempted exercise. Under nbgrader's
autograder or *Validate* it raises, so the graded cell fails. Elsewhere (a plain Python process, the test suite) it
raises too.

The check in the student's kernel is **feedback**: code that ran earlier in the same kernel can reach anything here.
The grade comes from the grading engine (``ttr_edu.checks.grading.engine``), which runs the answer in a process of
its own and judges it in another; ``grading.md`` says what each defends against. In the kernel the check still:

* reads whether the autograder runs from ``NBGRADER_EXECUTION`` in the environment this process **started** with
  (``/proc/self/environ``) and at import, not only from ``os.environ``;
* keeps the package's check modules read-only (:func:`seal`) and refuses to run when a function of ``torch``, of
  Python's builtins or of the package was replaced (compared with what they were at import), comparing with ``torch``
  functions held from import time; the notebook's torch modes (``torch.set_default_device``) are set aside while the
  reference and the comparison run;
* calls the student's function first and the reference afterwards, so no expected value exists while the answer runs;
* accepts only a plain ``torch.Tensor`` (by identity of its type, with no attributes of its own) or a plain number;
* holds the answer to the exercise's rules while it runs (:func:`ttr_edu.checks._guard.watching`): calling the
  package's own implementation, a ruled-out solver or autograd is a failure, however it is reached.
"""

from __future__ import annotations

import builtins
import copy
import dis
import functools
import os
import site
import sys
import sysconfig
import threading
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CheckFailed",
    "random_case",
    "relative_error",
    "first_mismatch",
    "describe",
    "under_autograder",
    "graded",
    "seal",
]

# -- torch as it was when the checks were imported ---------------------------------------------------------------------
# The comparisons call these, never a name looked up at check time: a cell that rebinds torch.allclose changes nothing
# here (and is refused by _refuse_tampering as well).
_allclose = torch.allclose
_isclose = torch.isclose
_equal = torch.equal
_vector_norm = torch.linalg.vector_norm
_to_double = torch.Tensor.double
_to_float = torch.Tensor.float
_STRIDED = torch.strided


class CheckFailed(AssertionError):
    """A student's answer disagrees with the reference; the message shows the failing case."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows these lines instead of the traceback: the message is the whole story for a student."""
        return [f"CheckFailed: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


# -- who runs the notebook ---------------------------------------------------------------------------------------------

#: What nbgrader 0.9 sets in NBGRADER_EXECUTION while it autogrades or validates (the kernel inherits it).
_GRADER_MODES = frozenset({"autograde", "validate"})


def _started_under_grader() -> bool:
    """Whether NBGRADER_EXECUTION named the autograder when this process started or when this module was imported.

    The environment a process started with stays in ``/proc/self/environ`` whatever ``os.environ`` later becomes
    (``os.environ.pop``, ``unsetenv`` and ``clearenv`` change a copy). Where there is no ``/proc`` (macOS, Windows),
    psutil reads the start-up environment if it is installed; the value at import is kept in any case.
    """
    if os.environ.get("NBGRADER_EXECUTION") in _GRADER_MODES:
        return True
    try:
        with open("/proc/self/environ", "rb") as f:
            entries = f.read().split(b"\0")
        return any(entry == b"NBGRADER_EXECUTION=" + mode.encode() for entry in entries for mode in _GRADER_MODES)
    except OSError:
        pass
    try:
        import psutil

        return psutil.Process().environ().get("NBGRADER_EXECUTION") in _GRADER_MODES
    except Exception:  # no psutil, or a platform it cannot read: the value at import stands
        return False


_STARTED_UNDER_GRADER = _started_under_grader()


def under_autograder() -> bool:
    """True while nbgrader autogrades or validates this notebook (or ``ttr-edu check`` grades it): a check then raises
    on an unattempted or wrong exercise, so its graded cell scores 0. A cell cannot turn this off by unsetting
    ``NBGRADER_EXECUTION``: the value the process started with counts."""
    return _STARTED_UNDER_GRADER or os.environ.get("NBGRADER_EXECUTION") in _GRADER_MODES


def _in_kernel() -> bool:
    """Whether the check runs in an IPython kernel or shell (JupyterLab, the student's own notebook)."""
    ipython = sys.modules.get("IPython")
    try:
        return ipython is not None and ipython.get_ipython() is not None
    except Exception:  # a broken IPython is no kernel
        return False


# -- what the student's code may not have changed ----------------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _trusted_roots() -> tuple[str, ...]:
    """Folders whose code is a library's, not the notebook's: the package, torch, the stdlib, site-packages."""
    paths = sysconfig.get_paths()
    roots = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - very old virtualenvs
        pass
    roots.add(site.getusersitepackages() if site.ENABLE_USER_SITE else None)
    roots.update({str(Path(torch.__file__).resolve().parent), str(_PACKAGE_DIR)})
    return tuple(sorted({str(Path(root).resolve()) + os.sep for root in roots if root}))


_TRUSTED_ROOTS = _trusted_roots()


@functools.lru_cache(maxsize=4096)
def _trusted_file(filename: str) -> bool:
    try:
        return str(Path(filename).resolve()).startswith(_TRUSTED_ROOTS)
    except (OSError, ValueError):
        return False


def _trusted_module(name: str) -> bool:
    module = sys.modules.get(name)
    if module is None or name == "__main__":
        return False
    file = getattr(module, "__file__", None)
    return file is None or _trusted_file(file)  # a built-in module has no file


def _from_notebook(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` (a function, method, partial or class) was defined by the notebook rather than a library.

    A function counts as the notebook's when its code lives outside every trusted folder (an IPython cell, a module
    beside the notebook), or was compiled from a string with the notebook's globals. Wrappers are followed through
    ``__wrapped__``, ``__func__`` and ``func``, and every layer is looked at (a notebook function cannot hide behind a
    ``__wrapped__`` that names a package function).
    """
    if depth > 8:
        return False
    if isinstance(value, (types.FunctionType, types.LambdaType)):
        code = value.__code__
        if code.co_filename.startswith("<"):  # compiled from a string: namedtuple and dataclass methods, or a cell's
            name = value.__globals__.get("__name__", "")
            own = not name or name == "__main__" or (name in sys.modules and not _trusted_module(name))
        else:
            own = not _trusted_file(code.co_filename)
        if own:
            return True
    elif isinstance(value, type):
        if value.__module__ == "__main__" or not _trusted_module(value.__module__):
            return True
        return False
    elif type(value).__module__ == "__main__":  # an instance of a notebook class standing in for a function
        return True
    for attribute in ("__wrapped__", "__func__", "func"):
        try:
            inner = object.__getattribute__(value, attribute)
        except AttributeError:
            continue
        if inner is not value and _from_notebook(inner, depth + 1):
            return True
    return False


def _watched() -> dict[str, dict]:
    """The namespaces whose functions a check relies on: builtins, torch and its tensor methods, the linear algebra
    and functional namespaces. (The package's own modules are scanned by :func:`_refuse_tampering` instead.)"""
    return {
        "builtins": vars(builtins),
        "torch": vars(torch),
        "torch.Tensor": {**vars(torch._C.TensorBase), **vars(torch.Tensor)},
        "torch.linalg": vars(torch.linalg),
        "torch.nn.functional": vars(torch.nn.functional),
    }


def _snapshot() -> dict[str, dict[str, Any]]:
    snapshot = {}
    for where, namespace in _watched().items():
        if where == "builtins":  # only real builtins: kernels rebind input/exit/quit per cell, as bound methods
            kept = {k: v for k, v in namespace.items() if isinstance(v, (types.BuiltinFunctionType, type))}
        else:
            kept = {k: v for k, v in namespace.items() if callable(v)}
        snapshot[where] = kept
    return snapshot


_SNAPSHOT = _snapshot()


def _wraps(value: Any, original: Any) -> bool:
    """Whether ``value`` wraps ``original`` (``functools.wraps``): torch._dynamo wraps ``torch.manual_seed`` so."""
    for _ in range(8):
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return False
        if value is original:
            return True
    return False


def _package_snapshot() -> dict[str, dict[str, Any]]:
    """The package's functions and classes as imported so far (a check module imports what its references use)."""
    return {
        name: {k: v for k, v in vars(module).items() if callable(v) and not k.startswith("__")}
        for name, module in list(sys.modules.items())
        if (name == "ttr_edu" or name.startswith("ttr_edu.")) and isinstance(module, types.ModuleType)
    }


_PACKAGE_SNAPSHOT: dict[str, dict[str, Any]] = {}


def snapshot_package() -> None:
    """Remember the package's functions as they are now, for :func:`_tampering` (called as each check module is
    sealed, so the modules its references use are in)."""
    for name, kept in _package_snapshot().items():
        _PACKAGE_SNAPSHOT.setdefault(name, kept)


def _tampering() -> str | None:
    """What the notebook changed that a check relies on, or ``None``: a replaced or deleted function of builtins,
    torch or the package (replaced by anything: notebook code, or a library callable such as ``'ok'.format``).
    Torch function and dispatch modes (``torch.set_default_device``) are not refused: references and comparisons run
    with them set aside (:func:`ttr_edu.checks._rules.plain_torch`)."""
    current = _watched()
    for where, kept in _SNAPSHOT.items():
        namespace = current[where]
        for name, original in kept.items():
            now = namespace.get(name)
            if now is not original and not _wraps(now, original):
                return f"{where}.{name} was {'deleted' if now is None else 'replaced'}"
        for name, value in namespace.items():
            if callable(value) and _from_notebook(value):
                return f"{where}.{name} was replaced by code from the notebook"
    for module_name, module in list(sys.modules.items()):
        if not (module_name == "ttr_edu" or module_name.startswith("ttr_edu.")) or not isinstance(
            module, types.ModuleType
        ):
            continue
        for name, value in list(vars(module).items()):
            if name.startswith("__") or not callable(value):
                continue
            if _from_notebook(value):
                return f"{module_name}.{name} was replaced by code from the notebook"
            if isinstance(value, type) and value.__module__.startswith("ttr_edu"):
                for attribute, member in list(vars(value).items()):
                    if callable(member) or isinstance(member, (staticmethod, classmethod)):
                        if _from_notebook(member):
                            return f"{module_name}.{name}.{attribute} was replaced by code from the notebook"
    for module_name, kept in _PACKAGE_SNAPSHOT.items():
        module = sys.modules.get(module_name)
        namespace = vars(module) if isinstance(module, types.ModuleType) else {}
        for name, original in kept.items():
            if namespace.get(name) is not original and not _wraps(namespace.get(name), original):
                return f"{module_name}.{name} was replaced"
    return None


def _refuse_tampering(name: str) -> None:
    problem = _tampering()
    if problem is not None:
        raise CheckFailed(
            f"{name}: the check refuses to run: {problem}. Checks compare with torch and the package as they are "
            "installed; restart the kernel, remove that code and run the notebook again."
        )


# -- calling the student's function ------------------------------------------------------------------------------------

#: Frames in these folders are the package's or torch's, not the student's.
_LIBRARY_DIRS = tuple(str(Path(m.__file__).resolve().parent) for m in (torch,)) + (str(_PACKAGE_DIR),)
#: Bytecode a function runs before its first statement (not a statement of the body).
_PROLOGUE = {"RESUME", "NOP", "COPY_FREE_VARS", "MAKE_CELL", "RETURN_GENERATOR", "POP_TOP", "CACHE"}


def _is_library(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_LIBRARY_DIRS)


def _is_untouched_stub(err: NotImplementedError) -> bool:
    """True when ``err`` was raised by the first statement of the student's function that raised it (the stub
    nbgrader leaves: ``raise NotImplementedError()`` and nothing before it), False for a partly written one.

    A ``NotImplementedError`` re-raised by the package (the Triton puzzles re-raise what the interpreter wrapped)
    is traced back through ``__cause__``/``__context__`` to the one the student's code raised.
    """
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        tb = err.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if isinstance(err, NotImplementedError) and tb is not None and not _is_library(tb.tb_frame.f_code.co_filename):
            return tb.tb_lineno == _first_statement_line(tb.tb_frame.f_code)
        err = err.__cause__ or err.__context__
    return False  # raised inside torch or the package: the student's code called something unfinished


def _first_statement_line(code) -> int | None:
    return next(
        (
            ins.positions.lineno
            for ins in dis.get_instructions(code)
            if ins.opname not in _PROLOGUE and ins.positions is not None and ins.positions.lineno is not None
        ),
        None,
    )


def _where(err: BaseException) -> str:
    """``"\n  at line N of your code: <source>"`` for the last frame of ``err`` outside the package and torch."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not _is_library(f.filename)]
    if not frames:
        return ""
    frame = frames[-1]
    source = f": {frame.line.strip()}" if frame.line else ""
    return f"\n  at line {frame.lineno} of your code ({frame.name}){source}"


def _function(value: Any) -> types.FunctionType | None:
    """The Python function behind ``value`` (through ``__wrapped__``, bound methods and partials), or None."""
    for _ in range(8):
        if isinstance(value, types.FunctionType) and not hasattr(value, "__wrapped__"):
            return value
        inner = getattr(value, "__wrapped__", None) or getattr(value, "__func__", None)
        if inner is None and isinstance(value, functools.partial):
            inner = value.func
        if inner is None:
            return value if isinstance(value, types.FunctionType) else None
        value = inner
    return None


def _label(fn: types.FunctionType) -> str:
    module = fn.__module__ or "?"
    return f"{module}.{fn.__qualname__}"


def _in_checks(fn: types.FunctionType) -> bool:
    return (fn.__module__ or "").startswith("ttr_edu.checks")


def _package_code(value: Any) -> bool:
    module = getattr(value, "__module__", "") or ""
    return module.startswith("ttr_edu.") and not module.startswith(("ttr_edu.checks", "ttr_edu._internal"))


def _callees(fn: types.FunctionType) -> list[Any]:
    """The functions and classes that ``fn`` names: globals, attributes of package modules it names
    (``hebbian.store``), and what its closure holds (a reference built by a factory)."""
    names, stack = set(), [fn.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    found = []
    for name in sorted(names):
        value = fn.__globals__.get(name)
        if isinstance(value, types.ModuleType) and value.__name__.startswith("ttr_edu."):
            found.extend(getattr(value, attribute) for attribute in sorted(names) if hasattr(value, attribute))
        elif value is not None:
            found.append(value)
    for cell in fn.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    unique = []
    for value in found:
        if callable(value) and all(value is not u for u in unique):
            unique.append(value)
    return unique


def _methods(cls: type) -> dict[types.CodeType, str]:
    """The code of a package class's own methods that do its work: ``__init__``, ``__call__`` and public methods."""
    found = {}
    for klass in cls.__mro__:
        if not _package_code(klass):
            continue
        for name, member in vars(klass).items():
            method = _function(member)
            if method is not None and (name in ("__init__", "__call__") or not name.startswith("_")):
                found[method.__code__] = _label(method)
    return found


def implementations(reference_fn: Callable, _depth: int = 0) -> dict[types.CodeType, str]:
    """The package's own implementations of the exercise a check compares with ``reference_fn``: code objects and
    their names. A student's function that runs one of them is not the student's own work.

    * ``reference_fn`` itself (the package function, or the check's own reference);
    * when ``reference_fn`` is a check's adapter (defined in ``ttr_edu.checks``): the one package function it calls,
      if it calls exactly one (``delta_rule_recurrent`` behind chapter 04's one-head step); when it calls no package
      function but builds package classes (the regression framework), those classes' methods; and, for an
      adapter built around another one (held in its closure), the same for the inner one. An adapter that calls
      several package functions (a training loop calling ``random_windows`` and ``causal_lm_loss``) uses them as
      tools the exercise may use too, so only the adapter itself counts.
    """
    fn = _function(reference_fn)
    if fn is None:
        return {}
    found = {fn.__code__: _label(fn)}
    if _in_checks(fn) and _depth < 3:
        callees = _callees(fn)
        package = [c for c in callees if _package_code(c)]
        functions = [f for f in (_function(c) for c in package if not isinstance(c, type)) if f is not None]
        if len(functions) == 1:
            found[functions[0].__code__] = _label(functions[0])
        elif not functions:
            for cls in (c for c in package if isinstance(c, type)):
                found.update(_methods(cls))
        for cell in fn.__closure__ or ():  # an adapter built around another (a check's fresh-setup wrapper)
            try:
                inner = _function(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
            if inner is not None and inner is not fn and _in_checks(inner):
                found.update(implementations(inner, _depth + 1))
    return found


# -- comparing ---------------------------------------------------------------------------------------------------------


#: tensor methods that hand a tensor's data to NumPy or Python -> how the course spells them
CONVERSIONS = {
    "numpy": ".numpy()",
    "tolist": ".tolist()",
    "__array__": "np.asarray or np.array",
    "untyped_storage": ".untyped_storage()",
    "storage": ".storage()",
    "_typed_storage": ".storage()",
    "data_ptr": ".data_ptr()",
    "__dlpack__": "DLPack",
}


def push_watch(operations, conversions) -> None:
    """Start watching an answer's torch operations (a ``TorchDispatchMode``) and its tensor methods (a
    ``TorchFunctionMode``: the conversions to NumPy or Python above)."""
    from torch.utils._python_dispatch import _push_mode

    _push_mode(operations)
    torch._C._push_on_torch_function_stack(conversions)


def pop_watch(operations, conversions) -> bool:
    """Stop the watch :func:`push_watch` started; False where the answer took either mode off its stack (what it left
    there is the answer's business: it broke the rule that it may not switch the watch off)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    intact = True
    functions = torch._C._len_torch_function_stack()
    if functions and torch._C._get_function_stack_at(functions - 1) is conversions:
        torch._C._pop_torch_function_stack()
    else:
        intact = False
    stack = _get_current_dispatch_mode_stack()
    if stack and stack[-1] is operations:
        _pop_mode()
    else:
        intact = False
    return intact


#: formatting a tensor (``repr``, ``str``, ``print``, f-strings) hands its numbers to Python as text -> how the course
#: spells it. While a check watches, torch's formatter runs with the check's modes on and reads each number it prints
#: (``.item()``, ``.tolist()``): :class:`PythonNumbers` counts the printed tensor once, by its formatting call, and
#: skips what the formatter reads.
FORMATTING = {"__repr__": "repr() or print()", "__format__": "format() or an f-string"}
#: tensor methods that read single numbers into Python (``.item()``, ``float()``, ``int()``, an index, ``complex()``)
READS = ("item", "__float__", "__int__", "__index__", "__complex__")


def numbers_handed(name: str, tensor: torch.Tensor) -> int:
    """How many numbers calling the tensor method ``name`` on ``tensor`` hands to NumPy or Python, as the checks that
    rule out work done outside torch count them (finite differences in Python floats, a Gauss–Jordan in Python
    numbers: work no count of torch operations sees):

    * a conversion (:data:`CONVERSIONS`) or a read (:data:`READS`): every entry, ``tensor.numel()``;
    * a printing (:data:`FORMATTING`): every entry, unless torch's formatter prints them with its default digits (4
      after the point, ``PRINT_OPTS.precision <= 4``): too few for a difference quotient to reach any check's
      tolerance, so a debugging ``print`` hands over nothing. ``format`` of a 0-d tensor is not the formatter's: it
      formats ``.item()`` with the caller's spec (``f"{x:.17g}"``), every digit, so it always counts;
    * nothing from a boolean tensor (a validation's ``if (x > 0).all()``): no number to take a difference quotient
      of; nothing from any other method.

    Whole tensors and single numbers are counted at this level (the tensor methods a function mode sees); a dispatch
    mode sees single numbers as ``_local_scalar_dense`` instead (:meth:`PythonNumbers.read_at_dispatch`)."""
    if tensor.dtype == torch.bool:
        return 0
    if name in FORMATTING:
        from torch._tensor_str import PRINT_OPTS

        by_item = name == "__format__" and tensor.dim() == 0 and type(tensor) is torch.Tensor
        return tensor.numel() if by_item or PRINT_OPTS.precision > 4 else 0
    return tensor.numel() if name in CONVERSIONS or name in READS else 0


class PythonNumbers(torch.overrides.TorchFunctionMode):
    """The function mode of a check that counts the numbers an answer hands to NumPy or Python (the count:
    :func:`numbers_handed`). Each tensor method called outside a printing goes to :meth:`called`, which a check
    overrides to count or refuse; a printing (:data:`FORMATTING`) runs through :meth:`printed`, with ``printing``
    counting how deep inside one the answer is: torch's formatter reads every number it prints (``.item()``), with
    the check's modes on, and those reads are the printing's, counted once by its formatting call, so a check skips
    them (:meth:`read_at_dispatch` for a dispatch mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.printing = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if not self.printing and args and isinstance(args[0], torch.Tensor):
            self.called(name, args[0])
        if name not in FORMATTING:
            return func(*args, **(kwargs or {}))
        self.printing += 1
        try:
            return self.printed(func, args, kwargs or {})
        finally:
            self.printing -= 1

    def called(self, name: str, tensor: torch.Tensor) -> None:
        """The tensor method ``name`` called on ``tensor`` outside a printing (before it runs)."""

    def printed(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        """Run a printing (``printing`` is already raised)."""
        return func(*args, **kwargs)

    def read_at_dispatch(self, func: Any, args: tuple) -> int:
        """The single numbers an aten operator seen by a dispatch mode reads into Python: 1 for
        ``_local_scalar_dense`` (what ``.item()``, ``float()``, ``int()``, ``bool()`` and torch's own reads of a
        number run) of a tensor that is not boolean, outside a printing; 0 otherwise (:func:`numbers_handed`)."""
        if self.printing or func.__name__.split(".")[0] != "_local_scalar_dense":
            return 0
        return int(bool(args) and isinstance(args[0], torch.Tensor) and args[0].dtype != torch.bool)


def conversion_watch(watch: Any) -> PythonNumbers:
    """The function mode of a watch that counts the numbers an answer hands to NumPy or Python (for
    :func:`push_watch`): each conversion (:data:`CONVERSIONS`) or printing (:data:`FORMATTING`) that hands numbers
    over (:func:`numbers_handed`) is reported once to ``watch.converted(numbers, spelled)``. Single numbers are the
    watch's dispatch mode's to count, with :meth:`PythonNumbers.read_at_dispatch` of this mode (which also sees
    ``bool()`` of a number and torch's own reads, that no tensor method shows)."""

    class Conversions(PythonNumbers):
        def called(self, name: str, tensor: torch.Tensor) -> None:
            spelled = CONVERSIONS.get(name) or FORMATTING.get(name)
            numbers = numbers_handed(name, tensor) if spelled is not None else 0
            if numbers:
                watch.converted(numbers, spelled)

    return Conversions()


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """``‖a − b‖ / ‖b‖`` in float64, as fla's tests compare; ``‖a − b‖`` when ``b`` is zero."""
    a64, b64 = _to_double(a.detach()), _to_double(b.detach())
    denominator = _vector_norm(b64).item()
    numerator = _vector_norm(a64 - b64).item()
    return numerator / denominator if denominator > 0 else numerator


def first_mismatch(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> str:
    """Describe the first element where ``got`` and ``want`` differ beyond tolerance."""
    close = _isclose(_to_double(got), _to_double(want), rtol=rtol, atol=atol)
    bad = (~close).nonzero()
    if len(bad) == 0:
        return "all elements agree"
    index = tuple(bad[0].tolist())
    g, w = got[index].item(), want[index].item()
    digits = 6
    while f"{g:.{digits}g}" == f"{w:.{digits}g}" and digits < 17:  # show the digits where they differ
        digits += 1
    return f"first wrong element at index {index}: got {g:.{digits}g}, expected {w:.{digits}g}"


def describe(value: Any) -> str:
    """Short description of an input for failure messages: tensors by shape and dtype."""
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if type(value) is tuple and any(isinstance(v, torch.Tensor) for v in value):  # a state, e.g. (S0, P0)
        return f"({', '.join(describe(v) for v in value)})"
    return repr(value)


def _dtype_note(got: torch.Tensor, want: torch.Tensor) -> str:
    """Name the dtypes when they differ: a float32 answer to a float64 check fails by rounding alone."""
    if got.dtype == want.dtype:
        return ""
    g, w = (str(t.dtype).replace("torch.", "") for t in (got, want))
    if got.is_floating_point() and want.is_floating_point():
        eps = torch.finfo(got.dtype).eps
        if _allclose(_to_double(got), _to_double(want), rtol=100 * eps, atol=100 * eps):
            return (
                f"\n  only the dtype differs: your result is {g}, the reference {w}; the values agree to {g}'s "
                f"rounding. Compute in {w} (e.g. pass dtype=torch.{w} to torch.arange / torch.tensor)."
            )
    return f"\n  note: your result is {g}, the reference {w}"


def _dtype_lead(got: torch.Tensor, want: torch.Tensor) -> str:
    """What a failure says first when the precision explains it, naming both dtypes; ``""`` otherwise.

    * another floating dtype than the reference's: the dtype is wrong, and the values agree to the coarser dtype's
      rounding (only the dtype differs) or not (they differ as well);
    * the reference's float64, but every value a float32 number (where the reference's are not) and within
      float32's rounding of the reference: the result was computed in float32 (a tensor made without
      ``dtype=torch.float64``) and widened afterwards. An answer computed in float64 almost never lands on float32
      numbers alone, so a slightly wrong float64 answer (an ε in the wrong place) is not mistaken for one, and a far
      wrong one (zeros, small integers) is told "wrong values". Only the entries that tell are read: where the
      reference is not a float32 number and lies above float64's rounding of its largest entry.
    """
    if not (got.is_floating_point() and want.is_floating_point()):
        return ""
    g, w = (str(t.dtype).replace("torch.", "") for t in (got, want))
    scale = _vector_norm(_to_double(want), float("inf")).item() if want.numel() else 0.0
    if got.dtype != want.dtype:
        coarse = got.dtype if torch.finfo(got.dtype).eps > torch.finfo(want.dtype).eps else want.dtype
        eps = torch.finfo(coarse).eps
        if _allclose(_to_double(got), _to_double(want), rtol=100 * eps, atol=100 * eps * max(scale, 1e-30)):
            c = str(coarse).replace("torch.", "")
            return (
                f"wrong dtype: your result is {g}, the exercise works in {w}; the values agree to {c}'s rounding, so "
                f"only the dtype differs. Compute in {w} (e.g. pass dtype=torch.{w} to torch.arange / torch.tensor)."
            )
        return f"wrong dtype: your result is {g}, the exercise works in {w}; the values differ as well"
    if _widened_from_float32(got, want):
        return (
            "your result is float64, but every value in it is a float32 number, within float32's rounding of the "
            "reference: it was computed in float32 (a tensor made without dtype=torch.float64, or .float()) and "
            "widened afterwards; the exercise works in float64 throughout"
        )
    return ""


def _widened_from_float32(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether a float64 result was computed in float32 and widened: every entry that tells is a float32 number, and
    the result lies within float32's rounding of the float64 reference. The entries that tell are those where the
    reference is not a float32 number and lies above float64's rounding of its largest entry: a right answer's 2⁻⁵²
    where the reference has cos(π/2) ≈ 6e-17 is a float32 number by chance, and tells nothing."""
    if not (got.dtype == want.dtype == torch.float64 and got.numel() and got.shape == want.shape):
        return False
    eps = torch.finfo(torch.float32).eps
    scale = _vector_norm(_to_double(want), float("inf")).item()
    telling = (_to_double(_to_float(want)) != want) & (want.abs() > 1e3 * torch.finfo(torch.float64).eps * scale)
    got_telling = got.detach()[telling]
    return (
        bool(telling.any())
        and _equal(_to_double(_to_float(got_telling)), got_telling)
        and _allclose(_to_double(got), want, rtol=100 * eps, atol=100 * eps * max(scale, 1e-30))
    )


def _is_plain_tensor(value: Any) -> bool:
    """Exactly a ``torch.Tensor`` or ``Parameter`` (compared by identity: a metaclass cannot answer ``==`` for it),
    with no attributes of its own (an instance ``.detach`` would be found before the class's)."""
    kind = type(value)
    return (kind is torch.Tensor or kind is torch.nn.Parameter) and not (getattr(value, "__dict__", None) or {})


def _plain_number(value: Any) -> bool:
    """A Python or NumPy number, or a one-element plain tensor: nothing whose comparison its own code could answer."""
    kind = type(value)
    if kind is int or kind is float or kind is bool:
        return True
    if _is_plain_tensor(value):
        return torch.Tensor.numel(value) == 1
    numpy = sys.modules.get("numpy")
    return numpy is not None and kind.__module__ == "numpy" and isinstance(value, numpy.number | numpy.bool_)


def _kind(got: Any) -> str:
    """How a result that is no plain tensor is named in a failure."""
    foreign = getattr(type(got), "__name__", "") == "Foreign" and type(got).__module__ == "ttr_edu.checks._rules"
    if not foreign and (type(got) is torch.Tensor or type(got) is torch.nn.Parameter):
        return "a torch.Tensor carrying attributes of its own (an instance attribute would answer for its methods)"
    name = got.type_name if foreign else type(got).__name__
    subclass = got.tensor_subclass if foreign else isinstance(got, torch.Tensor)
    return f"{name} ({'a subclass of torch.Tensor' if subclass else 'not a tensor'})"


def _compare(name: str, got: Any, want: Any, case: dict, rtol: float, atol: float) -> None:
    inputs = ", ".join(f"{k}={describe(v)}" for k, v in case.items())
    if isinstance(want, torch.Tensor):
        if not _is_plain_tensor(got):
            raise CheckFailed(f"{name}: expected a plain torch.Tensor, got {_kind(got)}\n  inputs: {inputs}")
        got = torch.Tensor.detach(got)
        if got.layout != _STRIDED or got.device != want.device:
            raise CheckFailed(
                f"{name}: expected a dense tensor on {want.device}, got a {got.layout} tensor on {got.device}\n"
                f"  inputs: {inputs}"
            )
        if got.shape != want.shape:
            raise CheckFailed(
                f"{name}: wrong shape: got {tuple(got.shape)}, expected {tuple(want.shape)}\n  inputs: {inputs}"
            )
        if not _allclose(_to_double(got), _to_double(want.detach()), rtol=rtol, atol=atol):
            how, where = _how_far(got, want.detach(), rtol, atol), first_mismatch(got, want.detach(), rtol, atol)
            lead = _dtype_lead(got, want.detach())
            if lead:  # the dtype first: a float32 answer to a float64 exercise is off by rounding alone
                raise CheckFailed(f"{name}: {lead}\n  then the values: {how}\n  inputs: {inputs}\n  {where}")
            raise CheckFailed(f"{name}: wrong values ({how})\n  inputs: {inputs}\n  {where}{_dtype_note(got, want)}")
    elif type(want) is tuple or type(want) is list:
        if not (type(got) is tuple or type(got) is list) or len(got) != len(want):
            raise CheckFailed(
                f"{name}: expected a sequence of {len(want)} results, got {_short(got)}\n  inputs: {inputs}"
            )
        for i, (g, w) in enumerate(zip(list(got), want)):
            _compare(f"{name}[{i}]", g, w, case, rtol, atol)
    elif _plain_number(want):
        if _is_plain_tensor(got) and torch.Tensor.numel(got) != 1:
            raise CheckFailed(
                f"{name}: expected a single number like {want!r}, got a tensor of shape {tuple(got.shape)}\n"
                f"  inputs: {inputs}"
            )
        if not _plain_number(got):
            raise CheckFailed(f"{name}: expected a plain number like {want!r}, got {_kind(got)}\n  inputs: {inputs}")
        got_value = torch.Tensor.item(got) if _is_plain_tensor(got) else float(got)
        ok = abs(float(got_value) - float(want)) <= atol + rtol * abs(float(want))
        if not ok:
            raise CheckFailed(f"{name}: got {got_value!r}, expected {want!r}\n  inputs: {inputs}")
    else:
        if type(got) is not type(want) or not want == got:
            raise CheckFailed(f"{name}: got {_short(got)}, expected {want!r}\n  inputs: {inputs}")


def _how_far(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> str:
    """How far a wrong result is: its relative error, or for integers (ids, counts, positions), where a relative
    error means nothing, how many entries differ."""
    if want.is_floating_point() or want.is_complex():
        return f"relative error {relative_error(got, want):.3g}"
    wrong = int((~_isclose(_to_double(got), _to_double(want), rtol=rtol, atol=atol)).sum())
    return f"{wrong} of {want.numel()} entries differ"


def _short(value: Any) -> str:
    """A result as a failure shows it: plain values by ``repr``, anything else by its type (its ``repr`` is its own
    code)."""
    if value is None or type(value) in (int, float, bool, str):
        return repr(value)[:80]
    return f"a {_kind(value)}"


_state = threading.local()  # depth of nested graded checks in this thread: only the outermost one reports


def random_case(seed: int, **shapes: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """A check case of float64 standard-normal tensors, ``name -> shape``, drawn in order from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=generator, dtype=torch.float64) for name, shape in shapes.items()}


def _cloned(case: dict) -> dict:
    """Tensors are cloned and modules deep-copied, so that neither call can change what the other one sees."""
    return {
        k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) if isinstance(v, torch.nn.Module) else v
        for k, v in case.items()
    }


# -- an exercise not attempted -----------------------------------------------------------------------------------------

#: what the book shows under an exercise's check: the book is built from the student copies with no one to solve
#: them, and a reader of the book has no kernel, so "not attempted yet" would speak to no one there
IN_THE_BOOK = (
    "Exercise {name}: you solve it in JupyterLab (ttr-edu start), where this check runs your function; the book "
    "shows the chapter with the exercise unsolved."
)


def not_attempted(name: str, todo: str) -> None:
    """Print the line of an exercise whose stub is untouched: ``[not attempted yet] NAME: TODO`` in the student's
    kernel; while the book builds (``TTR_EDU_BOOK`` set), :data:`IN_THE_BOOK` instead."""
    from ttr_edu._internal.progress import BOOK_ENV

    if os.environ.get(BOOK_ENV, "0") not in ("", "0"):
        print(IN_THE_BOOK.format(name=name))
    else:
        print(f"[not attempted yet] {name}: {todo}")


# -- graded checks and read-only modules -------------------------------------------------------------------------------

_GOES_ON = "The notebook goes on: the cells below do not use your function until its check passes."

#: The outcome of the latest run of each graded check in this process, by exercise name (see :func:`passed`).
_OUTCOMES: dict[str, bool] = {}


def passed(exercise: str) -> bool:
    """Whether the latest run of the graded check of ``exercise`` (``"pseudo_values"`` for ``check_pseudo_values``)
    in this process passed. ``False`` when it failed, was not attempted or has not run yet.

    A cell below an exercise uses the student's function only when this is ``True`` and the package's own
    implementation otherwise, so that a wrong answer, like an unattempted one, never breaks "Run All".

    Raises:
        TypeError: ``exercise`` is not a string.
    """
    if not isinstance(exercise, str):
        raise TypeError(f"exercise: expected the exercise's name as a string, got {type(exercise).__name__}")
    return _OUTCOMES.get(exercise, False)


def graded(check: Callable[..., bool]) -> Callable[..., bool]:
    """Wrap a chapter's ``check_...`` function (done for every one by :func:`seal`) for the cell that calls it.

    Before the check runs, the notebook's changes to torch, builtins and the package are looked for
    (:func:`_tampering`). Then a failed check raises :class:`CheckFailed` under the autograder (the graded cell scores
    0) and outside a kernel, while in the student's own kernel it prints ``FAIL`` with the reason and returns
    ``False``, so that "Run All" runs every cell, the cells below not using the function until its check passes.
    """
    if getattr(check, "__ttr_edu_graded__", False):
        return check
    exercise = check.__name__.removeprefix("check_")

    @functools.wraps(check)
    def checked(*args, **kwargs):
        if getattr(_state, "depth", 0):  # a check calling another check: the outer one reports
            return check(*args, **kwargs)
        _state.depth = 1
        _OUTCOMES[exercise] = False  # until this run passes
        try:
            _refuse_tampering(exercise)
            outcome = check(*args, **kwargs)
            _OUTCOMES[exercise] = outcome is True
            return outcome
        except CheckFailed as failure:
            if under_autograder() or not _in_kernel():
                raise failure.with_traceback(None) from None
            lines = str(failure).splitlines() or [exercise]
            print("\n".join([f"FAIL {lines[0]}", *lines[1:], _GOES_ON]), file=sys.stderr, flush=True)
            return False
        finally:
            _state.depth = 0

    checked.__ttr_edu_graded__ = True
    return checked


class _ReadOnlyModule(types.ModuleType):
    """A module of the package's checks: its attributes can be added (the import system adds submodules) but never
    replaced or deleted, so a notebook cannot swap a check, a reference or this machinery by assignment."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ and not (name.startswith("__") and name.endswith("__")):
            raise AttributeError(f"{self.__name__}.{name} is read-only: a notebook cannot change the course's checks")
        super().__setattr__(name, value)
        if isinstance(value, types.ModuleType) and value.__name__.startswith("ttr_edu.checks."):
            seal(value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self.__name__}.{name} is read-only: a notebook cannot change the course's checks")


def seal(module: types.ModuleType) -> None:
    """Make a module of ``ttr_edu.checks`` read-only, its ``check_...`` functions wrapped by :func:`graded`; the
    package itself passes each submodule here as the import system attaches it. Idempotent."""
    if isinstance(module, _ReadOnlyModule):
        return
    for name, value in list(vars(module).items()):
        if name.startswith("check_") and isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            vars(module)[name] = graded(value)
    module.__class__ = _ReadOnlyModule
    snapshot_package()
    for value in list(vars(module).values()):  # submodules attached before the package was sealed (_core)
        if isinstance(value, types.ModuleType) and value.__name__.startswith("ttr_edu.checks."):
            seal(value)
