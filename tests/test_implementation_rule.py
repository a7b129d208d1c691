"""The rule of CONTRIBUTING.md, "Which implementation a layer calls": a layer calls ops only; the regression
framework explains the ops and is called by one layer only, the generic path of ``layers/regression.py`` (any point of
the design space, before it has an op; ARCHITECTURE.md says why); a kernel takes the signature of its op."""

import ast
import inspect
from pathlib import Path

import pytest

import ttr_edu.layers
from ttr_edu import ops

LAYERS = Path(ttr_edu.layers.__file__).parent
#: The one layer module that calls the regression framework instead of an op.
GENERIC_PATH = "regression.py"


def imported_modules(path: Path) -> set[str]:
    """The absolute names a module imports (``from ttr_edu.ops import x`` gives ``ttr_edu.ops``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(LAYERS.glob("*.py")), ids=lambda p: p.name)
def test_layers_call_ops_and_neither_the_framework_nor_the_kernels(path):
    ruled_out = (
        (["ttr_edu", "kernels"],) if path.name == GENERIC_PATH else (["ttr_edu", "regression"], ["ttr_edu", "kernels"])
    )
    forbidden = {name for name in imported_modules(path) if name.split(".")[:2] in ruled_out}
    assert not forbidden, f"{path.name} imports {sorted(forbidden)}: a layer calls ttr_edu.ops only"


def test_the_generic_path_calls_the_framework_and_no_op():
    modules = imported_modules(LAYERS / GENERIC_PATH)
    assert any(name.startswith("ttr_edu.regression") for name in modules)
    assert not any(name.startswith(("ttr_edu.ops", "ttr_edu.kernels")) for name in modules)


def test_each_kernel_takes_the_signature_of_its_op():
    kernels = pytest.importorskip("ttr_edu.kernels", exc_type=ImportError)
    for name in kernels.__all__:
        if callable(getattr(kernels, name)) and hasattr(ops, name):
            assert inspect.signature(getattr(kernels, name)) == inspect.signature(getattr(ops, name)), name
