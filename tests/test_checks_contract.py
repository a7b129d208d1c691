"""The contract every exercise check keeps (DESIGN.md §4): an unattempted stub is reported, never raised.

Collected from every chapter's checks module, so a new check is covered without being listed. Chapter 10's checks
take Triton kernels, whose stubs are kernels themselves: tests/test_checks_ch10.py covers them.
"""

import importlib
import inspect
import pkgutil

import pytest

import ttr_edu.checks


def _all_checks():
    for info in pkgutil.iter_modules(ttr_edu.checks.__path__):
        if not info.name.startswith("ch") or info.name == "ch10":
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
    covered = {p.id.split(".")[0] for p in _all_checks()}
    assert covered >= {f"ch{n:02d}" for n in range(1, 10)}
