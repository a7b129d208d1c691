"""The ttr-edu command: list, copy (never overwriting edited work), generate --check, and its errors."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ttr_edu.cli import MANIFEST, main

ROOT = Path(__file__).resolve().parents[1]
FIRST = sorted((ROOT / "chapters").glob("*.ipynb"))[0]


def run(*args):
    return main(["--root", str(ROOT), *args])


def test_list_prints_every_chapter(capsys):
    assert run("list") == 0
    out = capsys.readouterr().out
    for path in (ROOT / "chapters").glob("*.ipynb"):
        assert path.name[:2] in out


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "ttr_edu.cli", "--root", str(ROOT), "list"], capture_output=True, text=True)
    assert result.returncode == 0 and "Hebbian" in result.stdout


def test_copy_then_copy_again_is_a_no_op(tmp_path, capsys):
    dest = tmp_path / "course"
    assert run("copy", str(dest)) == 0
    assert (dest / FIRST.name).read_bytes() == FIRST.read_bytes()
    assert (dest / MANIFEST).exists()
    capsys.readouterr()
    assert run("copy", str(dest)) == 0
    assert "0 notebook(s) written" in capsys.readouterr().out


def test_copy_refuses_to_overwrite_an_edited_notebook(tmp_path, capsys):
    dest = tmp_path / "course"
    assert run("copy", str(dest), "1") == 0
    edited = dest / FIRST.name
    edited.write_text(edited.read_text() + " ", encoding="utf-8")
    mine = edited.read_bytes()
    # An older copy of another chapter would be refreshed, but the refusal must write nothing at all.
    assert run("copy", str(dest)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refusing to overwrite" in err and FIRST.name in err
    assert edited.read_bytes() == mine
    assert sorted(p.name for p in dest.glob("*.ipynb")) == [FIRST.name]


def test_copy_force_keeps_a_backup(tmp_path):
    dest = tmp_path / "course"
    assert run("copy", str(dest), "1") == 0
    edited = dest / FIRST.name
    edited.write_text("my work", encoding="utf-8")
    assert run("copy", str(dest), "1", "--force") == 0
    backups = list(dest.glob("*.backup-*.ipynb"))
    assert len(backups) == 1 and backups[0].read_text() == "my work"
    assert edited.read_bytes() == FIRST.read_bytes()


def test_copy_refreshes_an_unedited_old_copy(tmp_path):
    dest = tmp_path / "course"
    dest.mkdir()
    old = dest / FIRST.name
    old.write_text("an older release", encoding="utf-8")
    (dest / MANIFEST).write_text(json.dumps({FIRST.name: __import__("hashlib").sha256(b"an older release").hexdigest()}))
    assert run("copy", str(dest), "1") == 0
    assert old.read_bytes() == FIRST.read_bytes()
    assert not list(dest.glob("*.backup-*"))


@pytest.mark.parametrize(
    "args,message",
    [
        (["copy", "{tmp}/missing/parent/dest"], "its parent folder"),
        (["copy", "{tmp}/dest", "99"], "unknown chapter '99'"),
    ],
)
def test_copy_errors_are_one_line_and_write_nothing(tmp_path, capsys, args, message):
    args = [a.format(tmp=tmp_path) for a in args]
    assert run(*args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "dest").exists() and not (tmp_path / "missing").exists()


def test_missing_root_is_a_one_line_error(tmp_path, capsys):
    assert main(["--root", str(tmp_path / "nowhere"), "list"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_generate_check_passes_here_and_fails_on_a_stale_copy(tmp_path, capsys):
    assert run("generate", "--check") == 0
    for name in ("solutions", "chapters", "book.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    stale = tmp_path / "chapters" / FIRST.name
    stale.write_text(stale.read_text().replace("Hebbian", "Hebian"), encoding="utf-8")
    assert main(["--root", str(tmp_path), "generate", "--check"]) == 1
    assert stale.read_text().count("Hebian") > 0  # --check writes nothing
    assert main(["--root", str(tmp_path), "generate"]) == 0
    assert stale.read_bytes() == FIRST.read_bytes()


def test_start_copies_then_opens_jupyterlab(tmp_path, monkeypatch, capsys):
    import ttr_edu.cli as cli

    launched = []
    monkeypatch.setattr(cli.subprocess, "call", lambda command: launched.append(command) or 0)
    monkeypatch.setattr(cli.shutil, "which", lambda name: f"/bin/{name}")
    dest = tmp_path / "course"
    assert run("start", str(dest)) == 0
    assert (dest / FIRST.name).exists()
    assert launched and launched[0][:3] == ["/bin/jupyter", "lab", str(dest)]


def test_start_without_jupyterlab_says_how_to_install_and_copies_nothing(tmp_path, monkeypatch, capsys):
    import ttr_edu.cli as cli

    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    assert run("start", str(tmp_path / "course")) == 2
    assert "pip install 'ttr-edu[course]'" in capsys.readouterr().err
    assert not (tmp_path / "course").exists()


# -- odd paths and damaged files found in review: each used to end in a traceback (or used another course) -----------


def _course_copy(tmp_path):
    for name in ("solutions", "chapters", "book.yml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    return tmp_path


def test_copy_under_a_file_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert run("copy", str(tmp_path / "afile" / "sub"), "1") == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and err.count("\n") == 1


def test_copy_refuses_a_folder_where_a_notebook_should_go(tmp_path, capsys):
    (tmp_path / "dest" / FIRST.name).mkdir(parents=True)
    assert run("copy", str(tmp_path / "dest"), "1") == 2
    assert "exists and is not a file" in capsys.readouterr().err
    assert (tmp_path / "dest" / FIRST.name).is_dir()


def test_a_damaged_manifest_keeps_edited_work_safe(tmp_path, capsys):
    dest = tmp_path / "dest"
    assert run("copy", str(dest), "1") == 0
    (dest / MANIFEST).write_text("{not json", encoding="utf-8")
    (dest / FIRST.name).write_text("my work", encoding="utf-8")
    assert run("copy", str(dest), "1") == 2  # no manifest to prove it untouched: it counts as edited
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (dest / FIRST.name).read_text() == "my work"


@pytest.mark.parametrize("spelling", ["001", "01_hebbian_memory.ipynb", "chapters/01_hebbian_memory.ipynb"])
def test_chapter_spellings_are_accepted(tmp_path, spelling):
    assert run("copy", str(tmp_path / "dest"), spelling) == 0
    assert (tmp_path / "dest" / "01_hebbian_memory.ipynb").exists()


def test_an_explicit_root_that_is_not_a_course_is_an_error(tmp_path, capsys):
    assert main(["--root", str(tmp_path), "list"]) == 2  # used to fall back to the installed course silently
    assert "no course found at" in capsys.readouterr().err
    assert main(["--root", str(ROOT / "book.yml"), "list"]) == 2
    assert "is a file" in capsys.readouterr().err


def test_generate_reports_a_broken_notebook_in_one_line(tmp_path, capsys):
    root = _course_copy(tmp_path)
    (root / "solutions" / "99_broken.ipynb").write_text("not json", encoding="utf-8")
    assert main(["--root", str(root), "generate"]) == 2
    err = capsys.readouterr().err
    assert "99_broken.ipynb: not a readable notebook" in err and err.count("\n") == 1


def test_generate_check_counts_a_garbled_chapter_as_out_of_date_and_writes_nothing(tmp_path, capsys):
    root = _course_copy(tmp_path)
    (root / "chapters" / FIRST.name).write_text("garbage", encoding="utf-8")
    assert main(["--root", str(root), "generate", "--check"]) == 1
    assert f"would write chapters/{FIRST.name}" in capsys.readouterr().out
    assert (root / "chapters" / FIRST.name).read_text() == "garbage"


def test_generate_with_chapters_as_a_file_is_a_one_line_error(tmp_path, capsys):
    root = _course_copy(tmp_path)
    shutil.rmtree(root / "chapters")
    (root / "chapters").write_text("oops")
    assert main(["--root", str(root), "generate"]) == 2
    assert "chapters/ must be a folder" in capsys.readouterr().err


def test_two_forced_copies_in_one_second_keep_both_backups(tmp_path, monkeypatch):
    import ttr_edu.cli as cli

    class FrozenClock:
        @staticmethod
        def now():
            return __import__("datetime").datetime(2026, 1, 1, 12, 0, 0)

    monkeypatch.setattr(cli, "datetime", FrozenClock)
    dest = tmp_path / "course"
    assert run("copy", str(dest), "1") == 0
    for work in ("first edit", "second edit"):
        (dest / FIRST.name).write_text(work, encoding="utf-8")
        assert run("copy", str(dest), "1", "--force") == 0
    assert sorted(p.read_text() for p in dest.glob("*.backup-*.ipynb")) == ["first edit", "second edit"]


def test_list_shows_whole_titles_without_the_repeated_number(capsys):
    assert run("list") == 0
    out = capsys.readouterr().out
    assert "01  Hebbian outer-product memory" in out and "01 · " not in out
    assert "attention over its training patterns" in out  # chapter 05's title used to be cut at 40 characters


@pytest.mark.parametrize("folder", ["chapters", "solutions"])
def test_copy_into_the_course_itself_is_refused(tmp_path, capsys, folder):
    root = _course_copy(tmp_path)
    before = sorted((p.name, p.read_bytes()) for p in (root / folder).iterdir())
    assert main(["--root", str(root), "copy", str(root / folder), "1", "--force"]) == 2
    assert "course's own" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in (root / folder).iterdir()) == before
