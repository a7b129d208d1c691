"""Rule library routines out of an exercise: "derive it, do not call an eigensolver".

:func:`forbid` wraps a student's function so that, while it runs, the named routines raise :class:`ForbiddenCall`
(the check then reports it with the student's line of code). The reference the student is compared with runs
outside the wrapper and may use them. A name bound before the check runs (``from torch.linalg import eigvalsh`` at
the top of a cell) escapes the patch; the message of the exercise says what is ruled out, the check catches the
usual spellings (``torch.linalg.eigvalsh``, ``np.linalg.eigvalsh``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable


class ForbiddenCall(Exception):
    """The student's function called a routine its exercise rules out."""


def forbid(fn: Callable, names: Iterable[str], why: str) -> Callable:
    """``fn`` with the dotted ``names`` (e.g. ``"torch.linalg.eigvalsh"``) raising :class:`ForbiddenCall` inside it.

    ``why`` completes the message: ``"<name> is ruled out here: <why>"``.
    """
    targets = []
    for name in names:
        module_name, attribute = name.rsplit(".", 1)
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # numpy absent: nothing to patch
            continue
        if hasattr(module, attribute):
            targets.append((name, module, attribute))

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        saved = [(module, attribute, getattr(module, attribute)) for _, module, attribute in targets]
        try:
            for name, module, attribute in targets:
                setattr(module, attribute, _refuse(name, why))
            return fn(*args, **kwargs)
        finally:
            for module, attribute, original in saved:
                setattr(module, attribute, original)

    return guarded


def _refuse(name: str, why: str) -> Callable:
    def refuse(*args, **kwargs):
        raise ForbiddenCall(f"{name} is ruled out here: {why}")

    return refuse
