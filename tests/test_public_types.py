"""Every public function of ``ttr_edu.ops``, ``ttr_edu.layers`` and ``ttr_edu.regression`` has type hints (the
wheel ships ``py.typed``, so a type checker reads them) and a docstring that gives the shapes of its tensors. mypy
checks the hints themselves (``.ci/run``; configured in ``pyproject.toml``)."""

from __future__ import annotations

import importlib
import inspect
import re
import typing

import pytest

PACKAGES = ("ttr_edu.ops", "ttr_edu.layers", "ttr_edu.regression")
#: a shape such as ``(B, T, H, D_k)``, ``(N,)``, ``(..., D)``, ``(B·H, C, C)``
SHAPE = re.compile(r"\((?:\.\.\.|[A-Za-z_][\w·]*|\d+)(?:,\s*(?:\.\.\.|[\w·+−\- ]+))*,?\)")


def public_functions():
    """``(path, function, docstring)`` for each function in the ``__all__`` of the three packages and of their
    public modules, and each public method a public class defines itself (``__init__`` documented by its class)."""
    seen, found = set(), []
    for package in PACKAGES:
        module = importlib.import_module(package)
        names = [package] + [f"{package}.{m}" for m in _submodules(module)]
        for name in names:
            module = importlib.import_module(name)
            for attr in getattr(module, "__all__", ()):
                obj = getattr(module, attr)
                targets = []
                if inspect.isfunction(obj):
                    targets.append((f"{name}.{attr}", obj, inspect.getdoc(obj)))
                elif inspect.isclass(obj) and obj.__module__.startswith("ttr_edu."):
                    for method_name, method in vars(obj).items():
                        public = not method_name.startswith("_") or method_name in ("__init__", "__call__")
                        if inspect.isfunction(method) and public:
                            doc = inspect.getdoc(obj) if method_name == "__init__" else inspect.getdoc(method)
                            targets.append((f"{name}.{attr}.{method_name}", method, doc))
                for path, fn, doc in targets:
                    fn = inspect.unwrap(fn)
                    if id(fn) not in seen:
                        seen.add(id(fn))
                        found.append((path, fn, doc or ""))
    return found


def _submodules(package):
    import pkgutil

    return [m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")]


FUNCTIONS = public_functions()


def test_every_public_function_has_type_hints():
    missing = []
    for path, fn, _ in FUNCTIONS:
        signature = inspect.signature(fn)
        untyped = [
            name
            for name, p in signature.parameters.items()
            if name not in ("self", "cls") and p.annotation is inspect.Parameter.empty
        ]
        if untyped or (signature.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__"):
            no_return = " -> ?" if signature.return_annotation is inspect.Signature.empty else ""
            missing.append(f"{path}({', '.join(untyped)}){no_return}")
    assert len(FUNCTIONS) > 100
    assert not missing, "\n".join(missing)


def test_every_public_function_has_a_docstring_with_the_shapes_of_its_tensors():
    missing = []
    for path, fn, doc in FUNCTIONS:
        hints = typing.get_type_hints(fn) if doc else {}
        takes_tensors = any("Tensor" in str(hint) for hint in hints.values())
        if not doc or (takes_tensors and not SHAPE.search(doc)):
            missing.append(path)
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    "doc, has_shape", [("x ``(B, T, H, D_k)``", True), ("a tensor of any shape", False), ("(N,)", True)]
)
def test_the_shape_pattern_tells_a_shape_from_prose(doc, has_shape):
    assert bool(SHAPE.search(doc)) == has_shape
