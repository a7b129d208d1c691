"""The machinery every exercise check shares (CONTRIBUTING.md, "Notebooks and exercises").

A check calls the student's function on seeded random cases and compares it with the package's reference.
It has exactly three outcomes:

* pass: prints one line starting with ``PASS`` and returns ``True``;
* not attempted (the untouched stub: ``raise NotImplementedError()`` is the first statement of the function that
  raised it, as nbgrader leaves it): prints a friendly line and returns ``False``, so an unsolved notebook still
  runs top to bottom (under nbgrader's autograder it raises :class:`CheckFailed` instead, so the exercise scores 0).
  A ``NotImplementedError`` raised anywhere else (a partly written function) is a wrong answer;
* wrong: raises :class:`CheckFailed` (an ``AssertionError``) that shows the failing case: its inputs' shapes,
  the first wrong element, the expected and the received value. In Jupyter only this message is shown, not a
  traceback through the package (``CheckFailed._render_traceback_``); when the student's function raised, the
  message names the line of the student's code where it did.
"""

from __future__ import annotations

import copy
import dis
import os
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckFailed", "run_check", "random_case", "relative_error", "first_mismatch", "describe"]


class CheckFailed(AssertionError):
    """A student's answer disagrees with the reference; the message shows the failing case."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows these lines instead of the traceback: the message is the whole story for a student."""
        return [f"CheckFailed: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


#: Frames in these folders are the package's or torch's, not the student's.
_LIBRARY_DIRS = tuple(str(Path(m.__file__).resolve().parent) for m in (torch,)) + (
    str(Path(__file__).resolve().parents[1]),
)
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


def _call_student(student_fn: Callable, kwargs: dict):
    """Call the student's function; a ``NotImplementedError`` other than the untouched stub's is a wrong answer."""
    try:
        return student_fn(**kwargs)
    except NotImplementedError as err:
        if _is_untouched_stub(err):
            raise
        raise _PartlyWritten(err) from None


class _PartlyWritten(Exception):
    """A ``NotImplementedError`` raised after the student's function began its work (reported as a failure)."""

    def __init__(self, err: NotImplementedError) -> None:
        super().__init__(str(err))
        self.original = err
        self.__traceback__ = err.__traceback__


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """``‖a − b‖ / ‖b‖`` in float64, as fla's tests compare; ``‖a − b‖`` when ``b`` is zero."""
    a64, b64 = a.detach().double(), b.detach().double()
    denominator = torch.linalg.vector_norm(b64).item()
    numerator = torch.linalg.vector_norm(a64 - b64).item()
    return numerator / denominator if denominator > 0 else numerator


def first_mismatch(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> str:
    """Describe the first element where ``got`` and ``want`` differ beyond tolerance."""
    close = torch.isclose(got.double(), want.double(), rtol=rtol, atol=atol)
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
    return repr(value)


def _dtype_note(got: torch.Tensor, want: torch.Tensor) -> str:
    """Name the dtypes when they differ: a float32 answer to a float64 check fails by rounding alone."""
    if got.dtype == want.dtype:
        return ""
    g, w = (str(t.dtype).replace("torch.", "") for t in (got, want))
    if got.is_floating_point() and want.is_floating_point():
        eps = torch.finfo(got.dtype).eps
        if torch.allclose(got.double(), want.double(), rtol=100 * eps, atol=100 * eps):
            return (
                f"\n  only the dtype differs: your result is {g}, the reference {w}; the values agree to {g}'s "
                f"rounding. Compute in {w} (e.g. pass dtype=torch.{w} to torch.arange / torch.tensor)."
            )
    return f"\n  note: your result is {g}, the reference {w}"


def _compare(name: str, got: Any, want: Any, case: dict, rtol: float, atol: float) -> None:
    inputs = ", ".join(f"{k}={describe(v)}" for k, v in case.items())
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{name}: expected a torch.Tensor, got {type(got).__name__}\n  inputs: {inputs}")
        if got.shape != want.shape:
            raise CheckFailed(
                f"{name}: wrong shape: got {tuple(got.shape)}, expected {tuple(want.shape)}\n  inputs: {inputs}"
            )
        if not torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol):
            raise CheckFailed(
                f"{name}: wrong values (relative error {relative_error(got, want):.3g})\n"
                f"  inputs: {inputs}\n  {first_mismatch(got, want, rtol, atol)}{_dtype_note(got, want)}"
            )
    elif isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            raise CheckFailed(f"{name}: expected a sequence of {len(want)} results, got {got!r}\n  inputs: {inputs}")
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(f"{name}[{i}]", g, w, case, rtol, atol)
    else:
        if isinstance(got, torch.Tensor) and got.numel() != 1:
            raise CheckFailed(
                f"{name}: expected a single number like {want!r}, got a tensor of shape {tuple(got.shape)}\n"
                f"  inputs: {inputs}"
            )
        try:
            ok = abs(float(got) - float(want)) <= atol + rtol * abs(float(want))
        except (TypeError, ValueError):
            ok = got == want
        if not ok:
            raise CheckFailed(f"{name}: got {got!r}, expected {want!r}\n  inputs: {inputs}")


def run_check(
    name: str,
    student_fn: Callable,
    reference_fn: Callable,
    cases: Iterable[dict],
    *,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    inputs_unchanged: bool = False,
) -> bool:
    """Compare ``student_fn(**case)`` with ``reference_fn(**case)`` on every case.

    Args:
        name: the exercise's name, as printed.
        student_fn: the student's function.
        reference_fn: the package's function with the same signature.
        cases: keyword-argument dicts; tensors are cloned before each call, so an in-place edit by
            the student cannot change what the reference sees.
        rtol, atol: tolerances of ``torch.allclose`` (floats compare the same way).
        inputs_unchanged: also fail when the student's function modifies an input tensor in place (for exercises
            whose text says "do not modify ... in place"; the copy it was given is compared with the case).

    Returns:
        ``True`` when every case agrees, ``False`` when the student's function is not written yet.

    Raises:
        CheckFailed: on the first disagreeing case, with the case and the first wrong element.
        ValueError: ``cases`` is empty (a check with no case could not fail).
    """
    if not callable(student_fn):
        raise TypeError(f"{name}: expected your function, got {type(student_fn).__name__}")
    n_cases = 0
    for case in cases:
        want = reference_fn(**_cloned(case))
        given = _cloned(case)
        try:
            got = _call_student(student_fn, given)
        except NotImplementedError:
            # nbgrader sets NBGRADER_EXECUTION while it autogrades ("autograde") or validates ("validate"): there an
            # unattempted exercise must fail its graded cell (0 points); in the student's own kernel it runs on.
            if os.environ.get("NBGRADER_EXECUTION") in ("autograde", "validate"):
                raise CheckFailed(f"{name}: not attempted (the stub still raises NotImplementedError)") from None
            print(f"[not attempted yet] {name}: fill in the function above, run its cell, then run this check again.")
            return False
        except Exception as err:  # the student's own bug: show it with the case that triggered it
            inputs = ", ".join(f"{k}={describe(v)}" for k, v in case.items())
            hint = ""
            if isinstance(err, TypeError) and "argument" in str(err):  # e.g. a renamed parameter
                hint = f"\n  hint: keep the stub's parameter names, the check calls it as {name}({', '.join(case)})"
            if isinstance(err, _PartlyWritten):
                err = err.original
                hint += "\n  (only the untouched stub counts as not attempted: finish the function)"
            raise CheckFailed(
                f"{name}: your function raised {type(err).__name__}: {err}{_where(err)}\n  inputs: {inputs}{hint}"
            ) from None
        if inputs_unchanged:
            for key, value in case.items():
                if isinstance(value, torch.Tensor) and not torch.equal(given[key], value):
                    raise CheckFailed(
                        f"{name}: your function modified its input {key} in place; return a new tensor instead\n"
                        f"  inputs: {', '.join(f'{k}={describe(v)}' for k, v in case.items())}"
                    )
        try:
            _compare(name, got, want, case, rtol, atol)
        except CheckFailed as failure:  # a short traceback: the check's frames below here tell a student nothing
            raise failure.with_traceback(None) from None
        n_cases += 1
    if n_cases == 0:
        raise ValueError(f"{name}: the check has no cases, so it could not fail")
    print(f"PASS {name}: your function agrees with the reference on {n_cases} random cases.")
    return True


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
