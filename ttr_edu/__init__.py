"""ttr-edu: reference implementations for a course on test-time memory in sequence layers.

Modules are imported on demand so that ``import ttr_edu`` stays light and never imports Triton (the kernels need
``TRITON_INTERPRET`` decided before Triton loads). The package's layout, one folder per kind of thing, is drawn in
the repository's ``ARCHITECTURE.md``.

Old module names keep working for one release. Students' edited notebooks are never overwritten by
``ttr-edu copy``, so they keep the imports of the release they started with (``from ttr_edu.models_lm import
TinyLM``, ``from ttr_edu import viz_dual_form``, ...). :data:`MOVED_MODULES` maps each old name to its new home; a
finder on ``sys.meta_path`` serves the new module under the old name, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import sys
import warnings

try:
    __version__ = importlib.metadata.version("ttr-edu")  # the one place the version lives: pyproject.toml
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

#: old module name -> its home since the package was grouped by kind (release 0.2)
MOVED_MODULES = {
    "ttr_edu.memory": "ttr_edu.hebbian",
    "ttr_edu.layers_memory": "ttr_edu.layers.memory",
    "ttr_edu.models_mqar": "ttr_edu.models.mqar",
    "ttr_edu.models_lm": "ttr_edu.models.lm",
    "ttr_edu.mqar": "ttr_edu.tasks.mqar",
    "ttr_edu.datasets": "ttr_edu.tasks.images",
    "ttr_edu.text_corpus": "ttr_edu.tasks.text",
    "ttr_edu.viz_chunkwise": "ttr_edu.viz.chunkwise",
    "ttr_edu.viz_dual_form": "ttr_edu.viz.dual_form",
    "ttr_edu.widgets": "ttr_edu.viz.widgets",
    "ttr_edu.claims": "ttr_edu.course.claims",
    "ttr_edu.cli": "ttr_edu.course.cli",
    "ttr_edu.notebooks": "ttr_edu.course.notebooks",
    "ttr_edu.book": "ttr_edu.course.book",
    "ttr_edu.ptxas_report": "ttr_edu.kernels.ptxas_report",
    "ttr_edu.progress": "ttr_edu._internal.progress",
    "ttr_edu._validation": "ttr_edu._internal.validation",
    "ttr_edu.ops._common": "ttr_edu._internal.contract",
    "ttr_edu.ops._memory": "ttr_edu._internal.mlp_memory",
}

#: an old flat module that is now a package of the same name -> the submodule its names went to
MOVED_NAMES = {
    "ttr_edu.models": "ttr_edu.models.retrieval",
    "ttr_edu.tasks": "ttr_edu.tasks.retrieval",
}


def _deprecated(old: str, new: str) -> None:
    # stacklevel 3 names the importing line (above the loader and this helper): warnings skips importlib's own
    # frames when stacklevel > 1
    warnings.warn(
        f"{old} moved to {new}; import it from there (the old name works until the next release)",
        DeprecationWarning,
        stacklevel=3,
    )


class _MovedModuleLoader(importlib.abc.Loader):
    """Serves the module at its new name under the old one (the same module object, not a copy)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):
        _deprecated(spec.name, self.new)
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__  # importlib overwrites it with the alias's spec; exec_module restores it
        return module

    def get_code(self, fullname):
        """The new module's code, so that ``python -m <old name>`` still runs it (runpy asks the loader)."""
        return importlib.util.find_spec(self.new).loader.get_code(self.new)

    def exec_module(self, module) -> None:
        """Nothing to run (:meth:`create_module` returned the imported module); give it back its own spec."""
        module.__spec__ = self.own_spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old module names of :data:`MOVED_MODULES` (and nothing else)."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED_MODULES.get(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, _MovedModuleLoader(new))


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())


def moved_name(package: str):
    """A module ``__getattr__`` for a package in :data:`MOVED_NAMES`: an old name is fetched from its submodule,
    with a ``DeprecationWarning`` (``from ttr_edu.models import RetrievalModel``)."""

    def __getattr__(name: str):
        target = importlib.import_module(MOVED_NAMES[package])
        if name.startswith("__") or name not in getattr(target, "__all__", ()):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(
            f"{package}.{name} moved to {target.__name__}.{name}; import it from there (the old name works until "
            "the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        value = getattr(target, name)
        setattr(sys.modules[package], name, value)  # warn once: `from package import name` looks the name up twice
        return value

    return __getattr__


def __getattr__(name: str):
    """``ttr_edu.finite_checks``: the switch of the input policy's NaN/inf scans (see
    ``ttr_edu._internal.validation``), loaded on first use so that ``import ttr_edu`` stays light."""
    if name in ("finite_checks", "finite_checks_enabled"):
        from ttr_edu._internal import validation

        return getattr(validation, name)
    raise AttributeError(f"module 'ttr_edu' has no attribute {name!r}")
