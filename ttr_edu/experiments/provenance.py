"""What a grid CSV records about how its rows were made: the code, the software and the machine.

Two runs of one cell give the same row only with the same training code, the same torch and BLAS, and (float for
float) the same CPU kernels. The runner (:mod:`.runner`) writes all of it above the rows:

* :func:`git_commit` and :func:`package_version`: the checkout and the installed ttr-edu;
* :func:`training_code`: a digest of every module a cell's training runs through (the import closure, inside
  ``ttr_edu``, of the module that defines the cell function). The recipe hash every row carries covers it, so
  ``--resume`` refuses a CSV whose rows were trained by other code, even at the same version number;
* :func:`platform_lines`: torch (with the CPU kernels it dispatches to), the BLAS it was built with, Python, and the
  CPU with its core count.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["git_commit", "package_version", "training_code", "code_digest", "platform_lines", "cpu_name"]

#: the runner itself writes the CSV but trains nothing: a change to it never changes a row
_NOT_TRAINING = frozenset(
    {"ttr_edu.experiments.runner", "ttr_edu.experiments.provenance", "ttr_edu.experiments.workers"}
)


def package_version() -> str:
    """The installed ttr-edu's version (the ``version`` column)."""
    import ttr_edu

    return ttr_edu.__version__


def git_commit(skip: str | Path | None = None) -> str:
    """The checkout's commit, marked ``(uncommitted changes)`` when tracked files other than ``skip`` (the CSV being
    written) differ from it; ``"unknown"`` outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not commit:
        return "unknown"
    skip_path = None if skip is None else Path(skip).resolve()
    dirty = [line for line in status if skip_path is None or (root / line[3:]).resolve() != skip_path]
    return f"{commit}{' (uncommitted changes)' if dirty else ''}"


# ---------------------------------------------------------------------------------------------------------------------
# The training code
# ---------------------------------------------------------------------------------------------------------------------


def _origin(name: str) -> str | None:
    """The source file of module ``name``, or ``None`` (a built-in module, or a name that is not a module)."""
    module = sys.modules.get(name)
    if getattr(module, "__file__", None):
        origin = module.__file__
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a parent that is not a package, or a name that is an attribute
            return None
        origin = spec.origin if spec is not None else None
    return origin if origin and origin.endswith(".py") else None


def _top_level(body: list[ast.stmt]):
    """The statements of a module body that run on import, those under ``if`` and ``try`` included (a fallback
    import); function and class bodies are left out."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(handler.body for handler in node.handlers)):
                yield from _top_level(block)


def _imports(name: str, path: str) -> set[str]:
    """The ``ttr_edu`` modules that module ``name`` (file ``path``) imports at its top level, with the packages
    whose ``__init__`` runs first.

    Imports inside functions are left out: in this package they load what only plotting, the command line or an
    optional backend needs; the training paths import at the top."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # kept below only where it is a module
    modules = set()
    for module in found:
        parts = module.split(".")
        modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {m for m in modules if (m == "ttr_edu" or m.startswith("ttr_edu.")) and _origin(m) is not None}


@functools.lru_cache(maxsize=16)
def _closure(root: str) -> tuple[str, ...]:
    """``root`` and every ``ttr_edu`` module it imports, directly or not, without the runner's own."""
    todo, seen = [root], set()
    while todo:
        name = todo.pop()
        if name in seen or name in _NOT_TRAINING or _origin(name) is None:
            continue
        seen.add(name)
        todo += sorted(_imports(name, _origin(name)))
    return tuple(sorted(seen))


def training_code(cell_fn: Callable) -> dict[str, str]:
    """The source files a cell of ``cell_fn`` trains through, each with the first 12 hex digits of its SHA-256.

    The files are the module that defines ``cell_fn`` (through ``functools.partial``) and the ``ttr_edu`` modules
    it imports at their top level, directly or not, with every package ``__init__`` on the way; the runner's own
    modules are left out (they write rows, they never change one). So a change to an op, a layer, the model, the
    task or the training loop changes the digest, and one to a plotting helper imported inside a function does not.

    Returns:
        ``{"ttr_edu/ops/delta_rule.py": "3f2a9c0d1b4e", ...}``, sorted by path (relative to the checkout, or the file
        name for a module outside it).
    """
    while isinstance(cell_fn, functools.partial):
        cell_fn = cell_fn.func
    root = getattr(cell_fn, "__module__", None) or "__main__"
    checkout = Path(__file__).resolve().parents[2]
    out = {}
    for name in _closure(root):
        path = Path(_origin(name)).resolve()
        shown = path.relative_to(checkout).as_posix() if path.is_relative_to(checkout) else path.name
        out[shown] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return dict(sorted(out.items()))


def code_digest(code: dict[str, str]) -> str:
    """One 12-hex-digit digest of :func:`training_code`'s files and their hashes."""
    return hashlib.sha256(json.dumps(code, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------------------------------
# The software and the machine
# ---------------------------------------------------------------------------------------------------------------------


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS, else ``platform.processor()``), its
    architecture and the cores this process may use: ``"AMD EPYC (x86_64, 2 cores)"``."""
    name = ""
    try:
        text = Path("/proc/cpuinfo").read_text()
        name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    except OSError:
        pass
    if not name and sys.platform == "darwin":
        try:
            name = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    name = name or platform.processor() or "unknown CPU"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    return f"{name} ({platform.machine()}, {cores} cores)"


def _blas() -> str:
    """The BLAS torch was built with, and its version where torch's build summary names one."""
    import torch

    summary = torch.__config__.show()
    kind = re.search(r"BLAS_INFO=([^,\s]+)", summary)
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", summary)
    openblas = re.search(r"OpenBLAS ([\d.]+)", summary)
    version = f" (MKL {mkl.group(1)})" if mkl else f" (OpenBLAS {openblas.group(1)})" if openblas else ""
    return f"{kind.group(1) if kind else 'unknown'}{version}"


def platform_lines() -> dict[str, str]:
    """The header lines that name the software and the machine the cells ran on (this machine: for a Dask
    cluster the runner adds the workers' own, see :mod:`.workers`).

    Returns:
        ``{"torch": "2.13.0+cpu (CPU kernels: AVX512)", "blas": "mkl (MKL 2024.2)", "python": "3.11.7",
        "cpu": "AMD EPYC (x86_64, 2 cores)"}``.
    """
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    return {
        "torch": f"{torch.__version__} (CPU kernels: {capability})",
        "blas": _blas(),
        "python": platform.python_version(),
        "cpu": cpu_name(),
    }
