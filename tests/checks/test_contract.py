"""The contract every exercise check keeps (CONTRIBUTING.md, "Notebooks and exercises"): an unattempted stub is
reported, never raised; every check is graded (reports in the student's kernel, raises under the autograder) and
cannot be replaced from a notebook.

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


def _check_modules():
    for info in pkgutil.iter_modules(ttr_edu.checks.__path__):
        if info.ispkg:  # the grading engine (ttr_edu.checks.grading) grades the checks; it is not one of them
            continue
        yield importlib.import_module(f"ttr_edu.checks.{info.name}")


@pytest.mark.parametrize("check", list(_all_checks()))
def test_every_check_is_graded_and_read_only(check):
    """Every check reports a failure in the student's kernel and raises under the autograder (``graded``), and no
    notebook cell can replace it."""
    assert getattr(check, "__ttr_edu_graded__", False), "a check_ function not wrapped by ttr_edu.checks._core.graded"
    module = importlib.import_module(check.__module__)
    with pytest.raises(AttributeError, match="read-only"):
        setattr(module, check.__name__, lambda f: True)


def test_every_checks_module_is_read_only():
    modules = list(_check_modules()) + [ttr_edu.checks]
    assert len(modules) >= 15
    for module in modules:
        name = next((n for n in vars(module) if not n.startswith("__")), None)
        if name is None:  # a package of submodules only (the grading engine's): nothing of its own to replace
            continue
        with pytest.raises(AttributeError, match="read-only"):
            setattr(module, name, None)
