"""Old argument names that keep working for one release, with a ``DeprecationWarning`` naming the new one.

Release 0.2 gave each quantity one name across ``ops``, ``regression`` and ``layers`` (CONTRIBUTING.md, "One name
per quantity"): the ridge is ``ridge`` (was ``lam``), Titans' inner step is ``beta`` (was ``theta``), TTT's
mini-batch is ``mini_batch_size`` (was ``batch_size``) and DeltaProduct's steps per token are ``num_householder``
(was ``steps``). :func:`renamed_arguments` is the one mechanism that keeps the old spellings alive::

    @renamed_arguments(lam="ridge")
    def rls_recurrent(q, k, v, ridge=1.0, ...): ...

    @renamed_arguments(batch_size="mini_batch_size")   # on a class: its __init__, and the old attribute
    @dataclass(frozen=True)
    class MiniBatchGD:
        mini_batch_size: int = 16

It goes outermost, so the wrapped function (and the input policy of :func:`~.validation.guarded`, which keys its
checks on argument names) only ever sees the new names.
"""

from __future__ import annotations

import functools
import inspect
import warnings

__all__ = ["renamed_arguments", "rename_keywords"]


def _warn(owner: str, old: str, new: str, what: str, stacklevel: int) -> None:
    warnings.warn(
        f"{owner}: the {what} {old!r} is now called {new!r}; the old name works until the next release",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def rename_keywords(kwargs: dict, renames: dict[str, str], owner: str, *, given=(), stacklevel: int = 2) -> dict:
    """``kwargs`` with each old name of ``renames`` (``{old: new}``) replaced by its new one, warning for each.

    For a function that passes keywords on (``regression.named_layer`` to the optimiser it builds): the warning
    points ``stacklevel`` frames above the caller of this function, as ``warnings.warn`` counts (2: the caller's
    caller). ``given``: names the call already binds by position.

    Raises:
        TypeError: both an old name and its new one are given.
    """
    kwargs = dict(kwargs)
    for old, new in renames.items():
        if old not in kwargs:
            continue
        if new in kwargs or new in given:
            raise TypeError(f"{owner}: got both {old!r} (the old name) and {new!r}; pass {new!r} only")
        _warn(owner, old, new, "argument", stacklevel + 1)
        kwargs[new] = kwargs.pop(old)
    return kwargs


def _wrap_function(fn, renames: dict[str, str], owner: str):
    signature = inspect.signature(fn)
    missing = [new for new in renames.values() if new not in signature.parameters]
    if missing:
        raise TypeError(f"renamed_arguments: {owner} has no parameter {', '.join(map(repr, missing))}")
    positional = [
        name
        for name, p in signature.parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs:
            kwargs = rename_keywords(kwargs, renames, owner, given=positional[: len(args)], stacklevel=2)
        return fn(*args, **kwargs)

    wrapper.renamed_arguments = {**getattr(fn, "renamed_arguments", {}), **renames}
    return wrapper


def _old_attribute(cls_name: str, old: str, new: str) -> property:
    def read(self):
        _warn(cls_name, old, new, "attribute", stacklevel=2)
        return getattr(self, new)

    return property(read, doc=f"Deprecated alias of ``{new}`` (until the next release).")


def renamed_arguments(**renames: str):
    """Accept each old keyword ``old=`` as ``new=`` for one release: ``renamed_arguments(old="new", ...)``.

    On a function, a call with ``old=x`` warns (``DeprecationWarning``, pointing at the caller's line and naming
    ``new``) and runs as ``new=x``. On a class, its ``__init__`` is wrapped so, and a read-only attribute ``old``
    returns ``new`` with the same warning (for a dataclass, put the decorator above ``@dataclass``). Positional
    calls are unaffected: the new name keeps the old one's position.

    Raises:
        TypeError: at the call, when both ``old`` and ``new`` are given (by keyword or position); at decoration,
            when the function has no parameter ``new``.
    """

    def decorate(target):
        if isinstance(target, type):
            target.__init__ = _wrap_function(target.__init__, renames, target.__name__)
            for old, new in renames.items():
                setattr(target, old, _old_attribute(target.__name__, old, new))
            return target
        return _wrap_function(target, renames, f"{target.__name__}()")

    return decorate
