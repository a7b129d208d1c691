"""Where the ttr-edu command finds the course: a clone it is run in (or installed from) first, else the course a
wheel installs; generate and book need a clone and say so in one line. (tests/course/test_wheel.py runs the
installed command for real.)"""

import shutil
from pathlib import Path

import pytest

from ttr_edu.course import notebooks
from ttr_edu.course.cli import main
from ttr_edu.course.notebooks import CourseLayoutError, course_content, course_root

ROOT = Path(__file__).resolve().parents[2]


def no_clone(monkeypatch, tmp_path):
    """As in a wheel install run outside any clone: no clone around, the installed course in ``tmp_path/content``."""
    monkeypatch.chdir(tmp_path)

    def nowhere(start=None, *, command=None):
        raise CourseLayoutError(f"no clone (asked by {command})" if command else "no clone")

    monkeypatch.setattr(notebooks, "course_root", nowhere)
    monkeypatch.setattr(notebooks, "PACKAGED_COURSE", tmp_path / "content")
    return tmp_path / "content"


def test_a_clone_is_found_from_inside_it_and_from_the_package_it_installed(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT / "chapters")
    assert course_root() == ROOT and course_content() == ROOT
    monkeypatch.chdir(tmp_path)  # outside: the editable install's clone, found from the package's own folder
    assert course_root() == ROOT


def test_without_a_clone_the_installed_course_is_used(monkeypatch, tmp_path, capsys):
    packaged = no_clone(monkeypatch, tmp_path)
    shutil.copytree(ROOT / "chapters", packaged / "chapters")
    assert course_content() == packaged
    assert main(["list"]) == 0 and "Hebbian" in capsys.readouterr().out


def test_without_a_clone_or_an_installed_course_the_error_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    no_clone(monkeypatch, tmp_path)
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a wheel built in a clone holds them" in err


def test_an_explicit_root_needs_only_the_chapters(tmp_path):
    (tmp_path / "chapters").mkdir()
    assert course_content(tmp_path) == tmp_path.resolve()
    with pytest.raises(CourseLayoutError, match="no course found at"):
        course_root(tmp_path)


@pytest.mark.parametrize("command", ["generate", "book"])
def test_generate_and_book_outside_a_clone_say_in_one_line_that_they_need_one(tmp_path, capsys, command):
    assert main(["--root", str(tmp_path), command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"ttr-edu {command} works from a clone of ttr-edu" in err and "git clone" in err
