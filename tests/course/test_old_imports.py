"""A student notebook with the imports of release 0.1 runs on the grouped package, with deprecation warnings."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).with_name("old_imports.ipynb")


@pytest.mark.notebook
def test_a_notebook_with_every_old_import_runs_and_is_told_where_each_moved():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    printed = "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs", []))
    assert "every old import is the module at its new home" in printed
    for old, new in [
        ("ttr_edu.models_lm", "ttr_edu.models.lm"),
        ("ttr_edu.claims", "ttr_edu.course.claims"),
        ("ttr_edu.memory", "ttr_edu.hebbian"),
        ("ttr_edu.mqar", "ttr_edu.tasks.mqar"),
    ]:
        assert f"{old} moved to {new}" in printed, (old, printed[:2000])
