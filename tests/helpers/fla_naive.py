"""flash-linear-attention's pure-PyTorch references, loaded for comparison by tests and benchmarks.

fla (``pip install flash-linear-attention``) is a peer to compare against, never a dependency of the ops. Its
``naive.py`` files need only torch and einops and run on a CPU, but ``import fla`` first runs the package's
``__init__``, which imports its layers, models and ``transformers`` (tens of seconds). So each naive module is
loaded here from its file, without running any ``__init__``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["fla_naive", "fla_version"]

_cache: dict[str, ModuleType | None] = {}


def _fla_root() -> Path | None:
    spec = importlib.util.find_spec("fla")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def fla_naive(family: str) -> ModuleType | None:
    """fla's ``fla/ops/<family>/naive.py`` as a module (e.g. ``"gla"``, ``"simple_gla"``, ``"linear_attn"``,
    ``"delta_rule"``, ``"gated_delta_rule"``), or ``None`` when fla (or einops, which it needs) is not installed."""
    if family in _cache:
        return _cache[family]
    module = None
    root = _fla_root()
    path = None if root is None else root / "ops" / family / "naive.py"
    if path is not None and path.is_file() and importlib.util.find_spec("einops") is not None:
        spec = importlib.util.spec_from_file_location(f"_fla_naive_{family}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    _cache[family] = module
    return module


def fla_version() -> str | None:
    """The installed fla's version (from its distribution metadata, without importing it), or ``None``."""
    from importlib.metadata import PackageNotFoundError, version

    if _fla_root() is None:
        return None
    for name in ("flash-linear-attention", "fla-core"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None
