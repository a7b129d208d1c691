"""Run a chapter with one parameter changed, to show that its claims are really checked (CONTRIBUTING.md, "Claims").

``run_mutated(path, old, new)`` replaces the text ``old`` (which must occur exactly once in the notebook's code) by
``new``, executes the notebook top to bottom with nbclient, and returns the first failing cell's exception as
``"<name>: <message>"`` (only the exception, not the traceback, whose echo of the cell's source would contain every
claim of that cell), or ``None`` when every cell ran. A test then asserts that the error is a ``ClaimFailed`` naming
the claim.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[2]


def run_mutated(path: str | Path, old: str, new: str, timeout: int = 300) -> str | None:
    path = ROOT / path
    nb = nbformat.read(path, as_version=4)
    hits = [cell for cell in nb.cells if cell.cell_type == "code" and old in cell.source]
    if len(hits) != 1 or hits[0].source.count(old) != 1:
        raise ValueError(f"{old!r} must occur exactly once in the code of {path.name}; found it in {len(hits)} cells")
    hits[0].source = hits[0].source.replace(old, new)
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env_before]))  # the kernel imports this tree
    try:
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        )
        client.execute()
    except CellExecutionError as err:
        return f"{err.ename}: {err.evalue}"
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    return None
