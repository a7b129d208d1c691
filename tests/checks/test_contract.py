"""The contract every exercise check keeps (CONTRIBUTING.md, "Notebooks and exercises"): an unattempted stub is
reported, never raised.

Collected from every chapter's checks module, so a new check is covered without being listed. The Triton chapter's
checks take kernels, whose stubs are kernels themselves: tests/checks/test_triton_kernels.py covers them.
"""

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import ttr_edu.checks
from ttr_edu.course.notebooks import list_chapters


def _all_checks():
    for info in pkgutil.iter_modules(ttr_edu.checks.__path__):
        if info.name.startswith("_") or info.name == "triton_kernels":
            continue
        module = importlib.import_module(f"ttr_edu.checks.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("check_") and fn.__module__ == module.__name__:
                yield pytest.param(fn, id=f"{info.name}.{name}")


def stub(*args, **kwargs):
    raise NotImplementedError()  # what nbgrader leaves in place of a solution


@pytest.mark.parametrize("check", list(_all_checks()))
def test_stub_is_not_attempted(check, capsys):
    assert check(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def test_every_chapter_with_exercises_is_covered():
    root = Path(__file__).resolve().parents[2]
    covered = {p.id.split(".")[0] for p in _all_checks()}
    slugs = {chapter.slug for chapter in list_chapters(root)} - {"triton_kernels"}
    assert covered >= slugs
