"""The ttr-edu command: list, copy/start every day (edits kept, renumbered chapters followed, nothing lost), check,
generate, and its one-line errors."""

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path, PurePosixPath

import pytest

import ttr_edu.course.cli as cli
from tests.helpers import start_as_in_a_terminal
from ttr_edu._internal.install import pip_install_extra
from ttr_edu.course import lab, student_copy, sync
from ttr_edu.course.cli import MANIFEST, main

ROOT = Path(__file__).resolve().parents[2]
FIRST = sorted((ROOT / "chapters").glob("*.ipynb"))[0]
DELTA = ROOT / "chapters" / "04_delta_rule.ipynb"
RECALL = ROOT / "chapters" / "09_associative_recall.ipynb"  # was 08_associative_recall.ipynb before the renumbering


def run(*args, root=ROOT):
    return main(["--root", str(root), *args])


def release(path: Path, root: Path = ROOT) -> bytes:
    """A chapter as `copy` writes it into the student's folder (citations written out, links re-aimed)."""
    return student_copy.render(root, PurePosixPath("chapters", path.name))[0]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def edit(path: Path, tag: str) -> None:
    """What a student does: change a cell and save."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][0]["source"] = f"# {tag}\n" + "".join(nb["cells"][0]["source"])
    path.write_text(json.dumps(nb), encoding="utf-8")


def course_copy(tmp_path, name="course", change=()):
    """A copy of the course (a "release"); chapters named in ``change`` get an extra cell."""
    root = tmp_path / name
    root.mkdir()
    for part in ("solutions", "chapters", "book.yml", "references.bib", "notation.md"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / part)
    for chapter in change:
        path = root / "chapters" / chapter
        nb = json.loads(path.read_text(encoding="utf-8"))
        nb["cells"].append({"cell_type": "markdown", "id": f"new-{name}", "metadata": {}, "source": f"NEW IN {name}"})
        path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return root


def holding(dest: Path, text: str) -> list[str]:
    return sorted(
        p.name for p in dest.iterdir() if p.is_file() and text in p.read_text(encoding="utf-8", errors="replace")
    )


def test_list_prints_every_chapter(capsys):
    assert run("list") == 0
    out = capsys.readouterr().out
    for path in (ROOT / "chapters").glob("*.ipynb"):
        assert path.name[:2] in out


def test_list_counts_the_answers_marked_by_hand(capsys):
    """Chapter 13's open question (an nbgrader task) is counted beside its two checked exercises."""
    assert run("list") == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("13"))
    assert line.endswith("2 (+1 by hand)")


def test_console_script_is_installed():
    result = subprocess.run(
        [sys.executable, "-m", "ttr_edu.course.cli", "--root", str(ROOT), "list"], capture_output=True, text=True
    )
    assert result.returncode == 0 and "Hebbian" in result.stdout


def test_list_shows_whole_titles_without_the_repeated_number(capsys):
    assert run("list") == 0
    out = capsys.readouterr().out
    assert "01  Hebbian outer-product memory" in out and "01 · " not in out
    assert "attention over its training patterns" in out  # chapter 05's title used to be cut at 40 characters


# -- copy and start, every day -------------------------------------------------------------------------------------


def test_copy_then_copy_again_is_a_no_op(tmp_path, capsys):
    dest = tmp_path / "course"
    assert run("copy", str(dest)) == 0
    assert (dest / FIRST.name).read_bytes() == release(FIRST)
    assert (dest / MANIFEST).exists()
    capsys.readouterr()
    assert run("copy", str(dest)) == 0
    n = len(list((ROOT / "chapters").glob("*.ipynb")))
    assert f"0 new, 0 refreshed, {n} up to date." in capsys.readouterr().out


def test_second_start_after_editing_two_notebooks_opens_jupyterlab_with_the_edits(tmp_path, monkeypatch, capsys):
    launched = []
    monkeypatch.setattr(lab, "run_foreground", lambda command, dest, resume: launched.append(command) or 0)
    dest = tmp_path / "my-course"
    assert run("start", str(dest)) == 0
    for path in (dest / FIRST.name, dest / DELTA.name):
        edit(path, "MY ANSWER")
    mine = {p: p.read_bytes() for p in (dest / FIRST.name, dest / DELTA.name)}
    capsys.readouterr()
    assert run("start", str(dest)) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(launched) == 2, "the second start must open JupyterLab too"
    assert all(path.read_bytes() == data for path, data in mine.items())
    assert "kept your edits in 01, 04" in out[0]
    assert len(out) == 2 and "Opening JupyterLab" in out[1]  # one line about the notebooks, one about JupyterLab
    assert not list(dest.glob("*.new-release*")) and not list(dest.glob("*backup*"))  # the course did not change


def test_a_release_adds_refreshes_and_puts_a_changed_notebook_beside_an_edited_one(tmp_path, capsys):
    old = course_copy(tmp_path, "release-a")
    (old / "chapters" / RECALL.name).unlink()  # release a had no chapter 09 yet
    new = course_copy(tmp_path, "release-b", change=[FIRST.name, DELTA.name])
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), root=old) == 0
    edit(dest / DELTA.name, "MY ANSWER")
    capsys.readouterr()
    assert run("copy", str(dest), root=new) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "1 new, 1 refreshed" in lines[0] and "kept your edits in 04" in lines[0]
    assert "04_delta_rule.new-release.ipynb" in lines[1] and len(lines) == 3  # + the "open them with" hint
    assert "NEW IN release-b" in (dest / FIRST.name).read_text()  # untouched: refreshed
    assert "MY ANSWER" in (dest / DELTA.name).read_text() and "NEW IN" not in (dest / DELTA.name).read_text()
    assert (dest / "04_delta_rule.new-release.ipynb").read_bytes() == release(DELTA, root=new)
    assert (dest / RECALL.name).exists()
    capsys.readouterr()
    assert run("copy", str(dest), root=new) == 0  # nothing new: nothing written, no second copy beside
    assert "0 new, 0 refreshed" in capsys.readouterr().out
    assert len(list(dest.glob("04_*"))) == 2


def test_an_edited_notebook_follows_its_slug_when_chapters_are_renumbered(tmp_path, capsys):
    """Main renumbered associative_recall from 08 to 09; a student's edited 08 becomes their 09, never two files."""
    dest = tmp_path / "my-course"
    dest.mkdir()
    old_release = RECALL.read_text(encoding="utf-8").replace("Associative recall", "Associative recall (old)")
    old_edited, old_untouched = dest / "08_associative_recall.ipynb", dest / "09_chunkwise_algorithms.ipynb"
    old_edited.write_text(old_release, encoding="utf-8")
    chunkwise_old = (ROOT / "chapters" / "11_chunkwise_algorithms.ipynb").read_text(encoding="utf-8") + " "
    old_untouched.write_text(chunkwise_old, encoding="utf-8")
    # the manifest as the first ttr-edu wrote it: file name -> hash of the notebook as copied
    (dest / MANIFEST).write_text(
        json.dumps({old_edited.name: sha(old_release.encode()), old_untouched.name: sha(chunkwise_old.encode())})
    )
    edit(old_edited, "MY ANSWER")
    assert run("copy", str(dest)) == 0
    out = capsys.readouterr().out
    assert not old_edited.exists() and not old_untouched.exists()
    assert holding(dest, "MY ANSWER") == ["09_associative_recall.ipynb"]
    assert (dest / "09_associative_recall.new-release.ipynb").read_bytes() == release(RECALL)
    assert (dest / "11_chunkwise_algorithms.ipynb").read_text(encoding="utf-8") != chunkwise_old  # refreshed
    assert "renumbered 08_associative_recall.ipynb -> 09_associative_recall.ipynb" in out
    assert len([p for p in dest.glob("*associative_recall*")]) == 2  # the student's and the new release beside it


def test_copy_force_keeps_a_backup(tmp_path):
    dest = tmp_path / "course"
    assert run("copy", str(dest), "1") == 0
    edited = dest / FIRST.name
    edited.write_text("my work", encoding="utf-8")
    assert run("copy", str(dest), "1", "--force") == 0
    backups = list(dest.glob("*.backup-*.ipynb"))
    assert len(backups) == 1 and backups[0].read_text() == "my work"
    assert edited.read_bytes() == release(FIRST)


def test_copy_refreshes_an_unedited_old_copy(tmp_path):
    dest = tmp_path / "course"
    dest.mkdir()
    old = dest / FIRST.name
    old.write_text("an older release", encoding="utf-8")
    (dest / MANIFEST).write_text(json.dumps({FIRST.name: sha(b"an older release")}))
    assert run("copy", str(dest), "1") == 0
    assert old.read_bytes() == release(FIRST)
    assert not list(dest.glob("*.backup-*")) and not list(dest.glob("*.new-release*"))


def test_a_damaged_manifest_keeps_edited_work_safe(tmp_path, capsys):
    dest = tmp_path / "dest"
    assert run("copy", str(dest), "1") == 0
    (dest / MANIFEST).write_text("{not json", encoding="utf-8")
    (dest / FIRST.name).write_text("my work", encoding="utf-8")
    assert run("copy", str(dest), "1") == 0  # no manifest to prove it untouched: it counts as edited and is kept
    assert "kept your edits in 01" in capsys.readouterr().out
    assert (dest / FIRST.name).read_text() == "my work"


def test_two_forced_copies_in_one_second_keep_both_backups(tmp_path, monkeypatch):
    class FrozenClock:
        @staticmethod
        def now():
            return __import__("datetime").datetime(2026, 1, 1, 12, 0, 0)

    monkeypatch.setattr(sync, "datetime", FrozenClock)
    dest = tmp_path / "course"
    assert run("copy", str(dest), "1") == 0
    for work in ("first edit", "second edit"):
        (dest / FIRST.name).write_text(work, encoding="utf-8")
        assert run("copy", str(dest), "1", "--force") == 0
    assert sorted(p.read_text() for p in dest.glob("*.backup-*.ipynb")) == ["first edit", "second edit"]


def test_a_backup_appears_under_its_name_only_once_whole(tmp_path, monkeypatch):
    """A --force run killed while writing the backup must not leave a truncated ``*.backup-*.ipynb`` (a CI run's
    20-trial kill test once found one): the name appears only after the data is on disk, and a run stopped before
    that leaves only a temporary file, which the next run clears."""
    dest = tmp_path / "course"
    assert run("copy", str(dest), "1") == 0
    (dest / FIRST.name).write_text("my work", encoding="utf-8")
    real_fsync, seen = os.fsync, []

    class Killed(BaseException):
        """Stands for SIGKILL: nothing in the run handles it."""

    def killed_after_fsync(fd):
        real_fsync(fd)
        seen.append(sorted(p.name for p in dest.glob("*.backup-*.ipynb")))
        raise Killed  # the run dies with the data written but not yet under its name

    monkeypatch.setattr(sync.os, "fsync", killed_after_fsync)
    with pytest.raises(Killed):
        main(["--root", str(ROOT), "copy", str(dest), "1", "--force"])
    monkeypatch.setattr(sync.os, "fsync", real_fsync)
    assert seen == [[]]  # at the moment of the kill no backup name existed
    assert not list(dest.glob("*.backup-*.ipynb")) and (dest / FIRST.name).read_text() == "my work"
    assert run("copy", str(dest), "1", "--force") == 0
    assert [p.read_text() for p in dest.glob("*.backup-*.ipynb")] == ["my work"]
    assert not [p for p in dest.iterdir() if p.name.endswith(".tmp")]


def test_backups_stay_exclusive_where_the_file_system_has_no_hard_links(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(sync.os, "link", no_links)
    taken = tmp_path / "01_x.backup-1.ipynb"
    taken.write_text("an earlier backup", encoding="utf-8")
    written = sync._create_exclusive(taken, b"new backup")
    assert written.name == "01_x.backup-1-2.ipynb" and written.read_bytes() == b"new backup"
    assert taken.read_text() == "an earlier backup"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01_x.backup-1-2.ipynb", "01_x.backup-1.ipynb"]


def test_start_uses_this_interpreter_and_passes_jupyterlab_options_through(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr(lab, "run_foreground", lambda command, dest, resume: launched.append(command) or 0)
    monkeypatch.setenv("PATH", str(tmp_path))  # no `jupyter` on PATH, as when ttr-edu runs by its full path
    dest = tmp_path / "course"
    assert (
        run(
            "start",
            str(dest),
            "1",
            "--port",
            "8890",
            "--ip",
            "127.0.0.1",
            "--no-browser",
            "--ServerApp.token=abc",
            "--",
            "--LabApp.default_url=/lab",
        )
        == 0
    )
    command = launched[0]
    assert command[:4] == [sys.executable, "-m", "jupyterlab", str(dest)]
    for option in (
        "--port=8890",
        "--ip=127.0.0.1",
        "--no-browser",
        "--ServerApp.token=abc",
        "--LabApp.default_url=/lab",
    ):
        assert option in command
    assert [p.name for p in dest.glob("[0-9][0-9]_*.ipynb")] == [FIRST.name]


def test_start_without_jupyterlab_says_how_to_install_and_copies_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lab.importlib.util, "find_spec", lambda name: None)
    assert run("start", str(tmp_path / "course")) == 2
    assert pip_install_extra("course") in capsys.readouterr().err
    assert not (tmp_path / "course").exists()


@pytest.mark.parametrize("dest", ["4", "04", "04_delta_rule.ipynb"])
def test_start_refuses_a_chapter_number_as_its_folder(tmp_path, monkeypatch, capsys, dest):
    monkeypatch.chdir(tmp_path)
    assert run("start", dest) == 2
    assert "looks like a chapter, not a folder" in capsys.readouterr().err
    assert not (tmp_path / dest).exists()


def test_copied_files_are_readable_by_the_group_and_the_hint_quotes_the_folder(tmp_path, capsys):
    """Notebooks and manifest were once written 0600 (mkstemp), and the printed command to open
    them split a folder with a space in two."""
    dest = tmp_path / "my course"
    previous = os.umask(0o022)
    try:
        assert run("copy", str(dest), "1") == 0
    finally:
        os.umask(previous)
    assert {oct(p.stat().st_mode & 0o777) for p in dest.iterdir() if p.is_file()} == {"0o644"}
    assert f"Open them with: ttr-edu start '{dest}'" in capsys.readouterr().out


# -- one-line errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        (["copy", "{tmp}/missing/parent/dest"], "its parent folder"),
        (["copy", "{tmp}/dest", "99"], "unknown chapter '99'"),
        (["copy", "{tmp}/dest", "04_hebbian_memory.ipynb"], "chapter 04 is delta_rule, not hebbian_memory"),
        (["copy", ""], "DEST is empty"),
        (["copy"], "copy needs a folder: ttr-edu copy DEST"),
    ],
)
def test_copy_errors_are_one_line_and_write_nothing(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    args = [a.format(tmp=tmp_path) for a in args]
    assert run(*args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_the_same_chapter_named_twice_is_copied_once(tmp_path, capsys):
    assert run("copy", str(tmp_path / "c"), "1", "1", "01", "hebbian_memory") == 0
    assert "1 new, 0 refreshed, 0 up to date" in capsys.readouterr().out


def test_missing_root_is_a_one_line_error(tmp_path, capsys):
    assert main(["--root", str(tmp_path / "nowhere"), "list"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_help_is_whole_sentences_and_cites_no_missing_file(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    description = " ".join(out.split("\n\n")[1].split())
    assert description.endswith("builds the book.") and "``" not in description
    for cited in {w.strip("(),.`") for w in out.split() if w.strip("(),.`").endswith((".md", ".py"))}:
        assert (ROOT / cited).exists(), f"--help cites {cited}, which the repository does not have"


def test_generate_without_nbgrader_names_the_extra(tmp_path, monkeypatch, capsys):
    root = course_copy(tmp_path)
    (root / "solutions" / FIRST.name).write_text((root / "solutions" / FIRST.name).read_text() + " ")
    monkeypatch.setitem(sys.modules, "nbgrader.preprocessors", None)  # as in the [course] environment
    assert main(["--root", str(root), "generate"]) == 2
    err = capsys.readouterr().err
    assert pip_install_extra("dev") in err and err.count("\n") == 1


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


@pytest.mark.parametrize(
    "spelling", ["001", "01_hebbian_memory.ipynb", "chapters/01_hebbian_memory.ipynb", "hebbian_memory"]
)
def test_chapter_spellings_are_accepted(tmp_path, spelling):
    assert run("copy", str(tmp_path / "dest"), spelling) == 0
    assert (tmp_path / "dest" / "01_hebbian_memory.ipynb").exists()


def test_an_explicit_root_that_is_not_a_course_is_an_error(tmp_path, capsys):
    assert main(["--root", str(tmp_path), "list"]) == 2  # used to fall back to the installed course silently
    assert "no course found at" in capsys.readouterr().err
    assert main(["--root", str(ROOT / "book.yml"), "list"]) == 2
    assert "is a file" in capsys.readouterr().err


@pytest.mark.parametrize("folder", ["chapters", "solutions"])
def test_copy_into_the_course_itself_is_refused(tmp_path, capsys, folder):
    root = course_copy(tmp_path)
    before = sorted((p.name, p.read_bytes()) for p in (root / folder).iterdir())
    assert main(["--root", str(root), "copy", str(root / folder), "1", "--force"]) == 2
    assert "course's own" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in (root / folder).iterdir()) == before


# -- student data is never lost -----------------------------------------------------------------------------------


def test_an_interrupted_write_leaves_the_old_notebook_whole_and_exits_130(tmp_path, monkeypatch, capsys):
    new = course_copy(tmp_path, "release-b", change=["03_feature_maps_and_capacity.ipynb"])
    dest = tmp_path / "my-course"
    assert run("copy", str(dest)) == 0
    before = (dest / "03_feature_maps_and_capacity.ipynb").read_bytes()
    real = os.replace

    def interrupted(src, dst):
        if Path(dst).name.startswith("03_"):
            raise KeyboardInterrupt  # Ctrl-C between writing the temporary file and swapping it in
        return real(src, dst)

    monkeypatch.setattr(os, "replace", interrupted)
    capsys.readouterr()
    assert run("copy", str(dest), root=new) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err
    assert (dest / "03_feature_maps_and_capacity.ipynb").read_bytes() == before
    assert not [p.name for p in dest.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.setattr(os, "replace", real)
    assert run("copy", str(dest), root=new) == 0
    out = capsys.readouterr().out
    assert "kept your edits" not in out  # the untouched notebook is not taken for edited work
    assert "NEW IN" in (dest / "03_feature_maps_and_capacity.ipynb").read_text()


def test_a_killed_runs_temporary_files_are_cleared_and_nothing_else(tmp_path):
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), "1") == 0
    leftover = dest / f".{FIRST.name}.k3x9.tmp"  # what write_atomically leaves when SIGKILL hits mid-write
    leftover.write_text('{"cells": [')
    mine = dest / ".my-notes.tmp"
    mine.write_text("not ours")
    assert run("copy", str(dest), "1") == 0
    assert not leftover.exists() and mine.read_text() == "not ours"


def test_a_failed_run_never_makes_an_untouched_notebook_look_edited(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "my-course"
    assert run("copy", str(dest)) == 0
    rel_b = course_copy(tmp_path, "release-b", change=[FIRST.name, "05_dual_form.ipynb"])
    rel_c = course_copy(tmp_path, "release-c", change=[FIRST.name, "05_dual_form.ipynb"])
    real = sync.write_atomically

    def fail_on_05(path, text):
        if path.name.startswith("05_"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, text)

    monkeypatch.setattr(sync, "write_atomically", fail_on_05)
    assert run("copy", str(dest), root=rel_b) == 2  # 01 is refreshed, then 05 fails
    monkeypatch.setattr(sync, "write_atomically", real)
    capsys.readouterr()
    assert run("copy", str(dest), root=rel_c) == 0
    out = capsys.readouterr().out
    assert "kept your edits" not in out and not list(dest.glob("*.new-release*"))
    assert "NEW IN release-c" in (dest / FIRST.name).read_text()


def test_a_symlinked_notebook_is_never_written_through(tmp_path):
    dest, elsewhere = tmp_path / "c", tmp_path / "my_notes.ipynb"
    assert run("copy", str(dest), "4") == 0
    shutil.move(dest / DELTA.name, elsewhere)
    edit(elsewhere, "MY NOTES")
    notes = elsewhere.read_bytes()
    (dest / DELTA.name).symlink_to(elsewhere)
    assert run("copy", str(dest), "4", "--force") == 0
    assert elsewhere.read_bytes() == notes  # the file outside DEST is untouched
    assert not (dest / DELTA.name).is_symlink() and (dest / DELTA.name).read_bytes() == release(DELTA)
    assert any("MY NOTES" in p.read_text() for p in dest.glob("*.backup-*"))


def test_two_concurrent_forced_runs_cannot_both_back_up_and_replace(tmp_path, monkeypatch):
    """Both runs pass their checks together; the lock makes the second wait, so the edit survives in a backup."""
    dest = tmp_path / "course"
    assert run("copy", str(dest), "4") == 0
    edit(dest / DELTA.name, "STUDENT WORK")
    barrier = threading.Barrier(2, timeout=5)
    real_mkdir = Path.mkdir

    def synchronised_mkdir(self, *a, **k):
        if self == dest:
            try:
                barrier.wait()  # both runs have decided to go ahead
            except threading.BrokenBarrierError:
                pass
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", synchronised_mkdir)
    codes = []
    threads = [threading.Thread(target=lambda: codes.append(run("copy", str(dest), "4", "--force"))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [0, 0]
    assert len(holding(dest, "STUDENT WORK")) == 1


def test_generate_writes_all_or_nothing(tmp_path, capsys):
    root = course_copy(tmp_path)
    sol = root / "solutions" / FIRST.name
    nb = json.loads(sol.read_text())
    nb["cells"].insert(1, {"cell_type": "markdown", "id": "x-new", "metadata": {}, "source": "NEW-PARAGRAPH"})
    sol.write_text(json.dumps(nb))
    with open(root / "solutions" / "05_dual_form.ipynb", "a") as f:
        f.write("\n}}garbage")
    before = {p: p.read_bytes() for p in (root / "chapters").iterdir()}
    assert main(["--root", str(root), "generate"]) == 2
    assert "05_dual_form.ipynb: not a readable notebook" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (root / "chapters").iterdir()} == before
    assert "NEW-PARAGRAPH" in sol.read_text() and json.loads(sol.read_text()) == nb  # the source was not rewritten


def _wait_until_working(process, dest: Path, timeout: float = 120) -> bool:
    """Wait until ``process`` has opened DEST's lock file: past start-up, inside the copy (Linux /proc)."""
    lock = str(dest / sync.LOCK)
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            fds = os.listdir(f"/proc/{process.pid}/fd")
            if any(os.readlink(f"/proc/{process.pid}/fd/{fd}") == lock for fd in fds):
                return True
        except OSError:
            pass
        time.sleep(0.001)
    return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see when a run is inside the copy")
def test_concurrent_and_interrupted_copy_runs_lose_nothing_in_20_trials(tmp_path):
    """Each trial: a student has edited two notebooks; a new release arrives; five `copy` runs start together (three
    with --force). Once inside the copy (its lock file open), one is killed with SIGKILL and one gets Ctrl-C (SIGINT)
    a random 0-50 ms later. Afterwards every notebook is valid JSON, both edits still exist, and a last run calls
    nothing else edited."""
    import random

    new = course_copy(tmp_path, "release-b", change=[FIRST.name, DELTA.name, "05_dual_form.ipynb"])
    rng = random.Random(0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lost = killed_inside = false_edits = sigint_130 = 0
    broken = []
    for trial in range(20):
        dest = tmp_path / f"trial{trial}"
        assert run("copy", str(dest)) == 0
        edit(dest / FIRST.name, f"EDIT-A-{trial}")
        edit(dest / DELTA.name, f"EDIT-B-{trial}")
        base = [sys.executable, "-m", "ttr_edu.course.cli", "--root", str(new), "copy", str(dest)]
        runs = [
            subprocess.Popen(base + extra, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for extra in (["--force"], [], [], ["--force"], ["--force"])
        ]
        for process, sig in ((runs[0], signal.SIGKILL), (runs[1], signal.SIGINT)):
            inside = _wait_until_working(process, dest)
            time.sleep(rng.uniform(0, 0.05))
            if inside and process.poll() is None:
                process.send_signal(sig)
                killed_inside += sig == signal.SIGKILL
        codes = [p.wait(timeout=300) for p in runs]
        sigint_130 += codes[1] == 130
        for path in dest.glob("*.ipynb"):
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                broken.append(f"trial{trial}/{path.name}")
        lost += (not holding(dest, f"EDIT-A-{trial}")) + (not holding(dest, f"EDIT-B-{trial}"))
        check = subprocess.run(base, env=env, capture_output=True, text=True)
        still_edited = any("EDIT-" in (dest / name).read_text() for name in (FIRST.name, DELTA.name))
        false_edits += "kept your edits" in check.stdout and not still_edited
    print(
        f"20 trials: {killed_inside} runs SIGKILLed inside the copy, {sigint_130} Ctrl-C'd inside it exited 130; "
        f"{lost} edits lost, {len(broken)} broken notebooks {broken}, {false_edits} untouched notebooks called edited"
    )
    assert (lost, broken, false_edits) == (0, [], 0)


# -- ttr-edu check -----------------------------------------------------------------------------------------------------

CHAPTER_01 = ROOT / "chapters" / "01_hebbian_memory.ipynb"
SOLVED = {  # exercise cell id -> a right answer
    "ch01_write": "def write(W, k, v):\n    return W + torch.outer(v, k)",
    "ch01_store": "def store(keys, values):\n    return values.T @ keys",
}


def _student_copy(path: Path, answers: dict[str, str], check_cells: dict[str, str | None] = None) -> Path:
    """Chapter 01 as a student saves it: ``answers`` replace exercise cells (by nbgrader id); ``check_cells`` replace
    graded cells' sources, or delete them (None)."""
    import nbformat

    nb = nbformat.read(CHAPTER_01, as_version=4)
    for cell in list(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
        if grade_id in (check_cells or {}):
            if check_cells[grade_id] is None:
                nb.cells.remove(cell)
            else:
                cell.source = check_cells[grade_id]
    nbformat.write(nb, path)
    return path


def _verdict_lines(out: str) -> list[str]:
    """The lines of `ttr-edu check` that start an exercise's verdict (a failure's reason continues, indented)."""
    return [line for line in out.splitlines() if line and not line.startswith(" ")]


@pytest.mark.notebook
def test_check_prints_one_line_per_exercise_with_the_whole_reason_and_an_exit_status(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")  # the caller's environment changes nothing
    answers = {**SOLVED, "ch01_store": "def store(keys, values):\n    return 2 * values.T @ keys"}
    path = _student_copy(tmp_path / "01_hebbian_memory.ipynb", answers)
    assert run("check", str(path)) == 1
    out, err = capfd.readouterr()
    lines = _verdict_lines(out)
    assert lines[0].startswith("PASS") and "Exercise 1.1 — the write" in lines[0]
    assert lines[1].startswith("FAIL") and "Exercise 1.2" in lines[1] and "store: wrong values" in lines[1]
    assert all(line.startswith("not attempted") for line in lines[2:5]) and "Exercise 1.5" in lines[4]
    assert lines[5:] == ["1 of 5 pass, 1 fail, 3 not attempted.", "1 of 9 points."]
    reason = out.split("store: wrong values", 1)[1].split("not attempted", 1)[0]  # the whole reason, not its first line
    assert "inputs: keys=tensor(1, 1) float64" in reason and "first wrong element at index" in reason
    assert "NotImplementedError" not in out and "Traceback" not in out + err
    assert err.strip().splitlines() == [f"grading {path} with the checks of {CHAPTER_01.name} ..."]


@pytest.mark.notebook
def test_check_shows_a_special_cases_note_and_names_a_pasted_copy(tmp_path, capfd):
    """1.4's tie note (the second line of its reason) reaches the student; a pasted copy of a check cell is named."""
    import nbformat

    ties = "def recall_accuracy(W, keys, values):\n    s = (keys @ W.T) @ values.T\n"
    ties += "    return (s.argmax(dim=1) == torch.arange(len(keys))).double().mean().item()"
    path = _student_copy(tmp_path / "01_hebbian_memory.ipynb", {**SOLVED, "ch01_accuracy": ties})
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_check_write"))
    nbformat.write(nb, path)
    assert run("check", str(path)) == 1
    out, err = capfd.readouterr()
    assert "every score ties with its rivals" in out
    assert "the cell 'test_check_write' is in the notebook twice (a pasted copy?)" in err


@pytest.mark.notebook
def test_check_exits_0_when_all_pass_and_3_when_some_are_not_attempted(tmp_path, capsys):
    solved = shutil.copy(ROOT / "solutions" / CHAPTER_01.name, tmp_path / "mine.ipynb")  # any name: found by its ids
    assert run("check", str(solved)) == 0
    assert "5 of 5 pass" in capsys.readouterr().out
    assert run("check", str(_student_copy(tmp_path / "01_hebbian_memory.ipynb", SOLVED))) == 3
    assert "2 of 5 pass, 0 fail, 3 not attempted.\n2 of 9 points." in capsys.readouterr().out


_CHEATS = """
import os
import torch as _t

os.environ.pop("NBGRADER_EXECUTION", None)  # what the grader runs under (check sets it too)


class _AlwaysPass:  # the review's rebinding of `checks`
    def __getattr__(self, name):
        return lambda *a, **k: print(f"PASS {name}") or True


checks = _AlwaysPass()
import ttr_edu.checks.hebbian_memory as _module

try:
    _module.check_recall_accuracy = lambda f: True  # a student's patch of a check itself
except AttributeError:
    pass


class _Agree(_t.Tensor):  # the review's Tensor subclass
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (_t.allclose, _t.Tensor.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def write(W, k, v):
    return _t.zeros_like(W).as_subclass(_Agree)
"""


@pytest.mark.notebook
def test_check_is_not_fooled_by_the_reviews_five_attacks(tmp_path, capsys):
    """Round 2's attacks on one notebook: `checks` rebound and a check patched, a Tensor subclass, NBGRADER_EXECUTION
    unset, a one-line call to the package's own solution, an edited and a deleted check cell, and a fake `ttr_edu`
    package beside the notebook. No exercise passes."""
    fake = tmp_path / "ttr_edu" / "checks"
    fake.mkdir(parents=True)
    everything_passes = "def __getattr__(name):\n    return lambda *a, **k: print('PASS', name) or True\n"
    for part in (fake.parent / "__init__.py", fake / "__init__.py", fake / "hebbian_memory.py"):
        part.write_text(everything_passes)
    answers = {
        "ch01_write": _CHEATS,
        "ch01_store": "def store(keys, values):\n    return 2 * values.T @ keys",
        "ch01_accuracy": "def recall_accuracy(W, keys, values):\n    return hebbian.recall_accuracy(W, keys, values)",
    }
    edited = {
        "test_check_store": 'print("PASS store")  # checks.check_store(store)',
        "test_check_crosstalk_energy": None,
    }
    path = _student_copy(tmp_path / "01_hebbian_memory.ipynb", answers, edited)
    assert run("check", str(path)) == 1
    lines = _verdict_lines(capsys.readouterr().out)
    assert lines[0].startswith("FAIL") and "expected a plain torch.Tensor, got _Agree" in lines[0]
    assert lines[1].startswith("FAIL") and "store: wrong values" in lines[1]
    assert lines[2].startswith("not attempted") and "Exercise 1.3" in lines[2]  # deleted, put back, still a stub
    assert lines[3].startswith("FAIL") and "package's own implementation (ttr_edu.hebbian.recall_accuracy)" in lines[3]
    assert lines[4].startswith("not attempted")
    assert lines[5:] == ["0 of 5 pass, 3 fail, 2 not attempted.", "0 of 9 points."]


@pytest.mark.parametrize("chapter", ["13_design_your_own_memory.ipynb", "01_hebbian_memory.ipynb"])
def test_check_names_the_exercises_marked_by_hand_beside_its_total(tmp_path, monkeypatch, capsys, chapter):
    """13.3 is an nbgrader task (1 point, marked by hand): the total the check prints leaves it out, so the check names
    it, from the release's own metadata; a chapter without one prints no such line."""
    from ttr_edu.checks.grading.engine import Report
    from ttr_edu.course import checking

    monkeypatch.setattr(checking, "grade", lambda nb, release, timeout: Report(verdicts=[]))  # the engine aside
    path = shutil.copy(ROOT / "chapters" / chapter, tmp_path / chapter)
    run("check", str(path))
    lines = capsys.readouterr().out.splitlines()
    by_hand = [line for line in lines if "marked by hand" in line]
    if chapter.startswith("13"):
        assert by_hand == ["+ 1 point marked by hand, not checked here: Exercise 13.3 — where your point lands."]
        assert lines.index(by_hand[0]) == lines.index("0 of 0 points.") + 1
    else:
        assert by_hand == []


def test_check_refuses_what_is_not_a_course_notebook(tmp_path, capsys):
    import nbformat

    assert run("check", str(tmp_path / "missing.ipynb")) == 2
    (tmp_path / "plain.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    assert run("check", str(tmp_path / "plain.ipynb")) == 2
    v4 = nbformat.v4
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell("checks.check_write(write)")]), tmp_path / "mine.ipynb")
    assert run("check", str(tmp_path / "mine.ipynb")) == 2
    err = capsys.readouterr().err
    assert "no such notebook" in err and "no exercise checks" in err and "not one of the course's chapters" in err


@pytest.mark.slow
@pytest.mark.notebook
def test_ctrl_c_during_check_is_one_line_and_exit_130_and_leaves_no_process(tmp_path):
    """SIGINT to the process group (a terminal's Ctrl-C) while an answer runs: one line, 130, the grader's processes
    (the sandbox and everything in it) gone."""
    import nbformat
    import psutil

    nb = nbformat.read(CHAPTER_01, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ch01_write")
    answer.source = "import time\n\n\ndef write(W, k, v):\n    time.sleep(600)  # a slow answer"
    nbformat.write(nb, tmp_path / CHAPTER_01.name)
    command = [
        sys.executable,
        "-m",
        "ttr_edu.course.cli",
        "--root",
        str(ROOT),
        "check",
        str(tmp_path / CHAPTER_01.name),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = start_as_in_a_terminal(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        graders, deadline = [], time.monotonic() + 240
        while len(graders) < 2 and time.monotonic() < deadline:  # the answers' process and its fork are up
            time.sleep(0.5)
            graders = psutil.Process(process.pid).children(recursive=True)
        assert graders, "no grading process started"
        time.sleep(5)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith("grading ")]
    assert lines == ["ttr-edu: interrupted; the check stopped and its processes are ended (your notebook is unchanged)"]
    psutil.wait_procs(graders, timeout=60)  # returns as soon as they are gone
    assert not [p for p in graders if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


# -- every error is one line, with a non-zero exit and nothing overwritten ---------------------------------------------


def test_a_full_disk_names_the_notebook_and_says_nothing_was_replaced(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), "1") == 0
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    release_b = course_copy(tmp_path, "release-b", change=[FIRST.name])

    def disk_full(path, data):
        raise OSError(28, "No space left on device")  # as a failed write() raises it: no file name

    monkeypatch.setattr(sync, "write_atomically", disk_full)
    capsys.readouterr()
    assert run("copy", str(dest), "1", root=release_b) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "None" not in err and "Traceback" not in err, err
    assert f"cannot write {FIRST.name}" in err and "No space left on device" in err and "unchanged" in err
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


def test_a_full_disk_on_a_first_copy_says_the_notebook_was_not_created(tmp_path, monkeypatch, capsys):
    def disk_full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sync, "write_atomically", disk_full)
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), "1") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"cannot write {FIRST.name}" in err and "it was not created" in err and "unchanged" not in err, err
    assert not (dest / FIRST.name).exists()


def test_a_full_disk_for_the_backup_of_force_names_it_and_replaces_nothing(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), "1") == 0
    edit(dest / FIRST.name, "mine")
    before = {p.name: p.read_bytes() for p in dest.iterdir()}

    def disk_full(path, data):
        raise OSError(28, "No space left on device")  # the backup is the first file --force writes

    monkeypatch.setattr(sync, "_create_exclusive", disk_full)
    capsys.readouterr()
    assert run("copy", str(dest), "1", "--force") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"cannot write {FIRST.stem}{sync.BACKUP}" in err and "No space left on device" in err, err
    assert f"your {FIRST.name} is unchanged" in err, err
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


@pytest.mark.parametrize(
    ("code", "advice", "not_advice"),
    [
        (errno.ENOSPC, "free some space", "ulimit"),
        (errno.EFBIG, "file-size limit (ulimit -f)", "free some space,"),
        (errno.EACCES, "make the folder writable", "free some space"),
        (errno.EIO, "mend what the error names", "free some space"),
    ],
)
def test_a_failed_write_advises_what_its_cause_needs(tmp_path, monkeypatch, capsys, code, advice, not_advice):
    """A file-size limit (``ulimit -f``) is not a full disk: freeing space would not help, so the advice names it."""

    def fails(path, data):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(sync, "write_atomically", fails)
    assert run("copy", str(tmp_path / "my-course"), "1") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and advice in err and not_advice not in err, err
    assert err.rstrip().endswith("then run the same command again)"), err


def test_an_os_error_without_a_file_name_does_not_end_in_none(monkeypatch, capsys):
    def fails(args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "cmd_list", fails)
    assert main(["list"]) == 2
    assert capsys.readouterr().err == "ttr-edu: No space left on device\n"


@pytest.mark.parametrize(
    "killed_after",
    [
        lambda written: written[-1] == FIRST.name,  # the notebook replaced, the chapter not yet recorded
        lambda written: FIRST.name in written and written[-1] == sync.MANIFEST,  # the chapter recorded too
    ],
    ids=["the notebook", "the chapter's record"],
)
def test_after_a_killed_force_copy_the_next_run_says_the_edits_are_in_a_backup(
    tmp_path, monkeypatch, capsys, killed_after
):
    """SIGKILL after the backup is written and the notebook replaced (and, in the second case, the chapter recorded:
    the manifest follows each chapter), before the run could say so: the next run, with or without --force, names
    the backup (once); the record must not count it as said."""
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), "1") == 0
    edit(dest / FIRST.name, "MY WORK")
    real, written = sync.write_atomically, []

    class Killed(BaseException):
        """Stands for SIGKILL: nothing in the run handles it."""

    def killed(path, data):
        real(path, data)
        written.append(path.name)
        if killed_after(written):
            raise Killed

    monkeypatch.setattr(sync, "write_atomically", killed)
    with pytest.raises(Killed):
        run("copy", str(dest), "1", "--force")
    monkeypatch.setattr(sync, "write_atomically", real)
    (backup,) = dest.glob("*.backup-*.ipynb")
    assert "MY WORK" in backup.read_text() and "MY WORK" not in (dest / FIRST.name).read_text()
    capsys.readouterr()
    assert run("copy", str(dest), "1") == 0
    out = capsys.readouterr().out
    assert f"{backup.name} holds your edits of {FIRST.name}" in out, out
    assert run("copy", str(dest), "1") == 0
    assert "backup" not in capsys.readouterr().out  # said once


def test_a_force_copy_that_finishes_names_its_backup_once(tmp_path, capsys):
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), "1") == 0
    edit(dest / FIRST.name, "MY WORK")
    capsys.readouterr()
    assert run("copy", str(dest), "1", "--force") == 0
    assert capsys.readouterr().out.count("backup") == 1
    assert run("copy", str(dest), "1") == 0
    assert "backup" not in capsys.readouterr().out


def test_copy_into_the_clones_own_root_is_refused(tmp_path, capsys):
    root = course_copy(tmp_path)
    before = sorted(p.name for p in root.iterdir())
    for command in ("copy", "start"):
        assert main(["--root", str(root), command, str(root)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot copy into the course itself" in err
    assert sorted(p.name for p in root.iterdir()) == before


def test_copy_into_any_folder_of_the_course_is_refused_but_not_into_the_students(tmp_path, capsys):
    """n39b's N5: `ttr-edu copy ./ttr_edu/course 1` inside the clone wrote notebooks into the package's own source."""
    root = course_copy(tmp_path)
    (root / "ttr_edu" / "course").mkdir(parents=True)
    (root / "ttr_edu" / "course" / "cli.py").write_text("# the package\n")
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "page.md").write_text("a page\n")
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    for dest in (root / "ttr_edu" / "course", root / "ttr_edu" / "new-folder", root / "docs", root / "chapters" / "x"):
        for command in ("copy", "start"):
            assert main(["--root", str(root), command, str(dest), "1"]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "inside the course's own" in err, err
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
    (root / "empty").mkdir()
    for dest in (root / "my-course", root / "my-course" / "again", root / "empty"):  # the student's folders
        assert main(["--root", str(root), "copy", str(dest), "1"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    "recorded, expected",
    [
        (
            '{"url": "file:///opt/me/ttr-edu", "dir_info": {"editable": true}}',
            "pip install -e '/opt/me/ttr-edu[course]'",
        ),
        ('{"url": "file:///opt/me/ttr-edu", "dir_info": {}}', "pip install '/opt/me/ttr-edu[course]'"),
        (
            '{"url": "file:///tmp/my%20dist/ttr_edu-0.1.0-py3-none-any.whl", "archive_info": {}}',
            "pip install '/tmp/my dist/ttr_edu-0.1.0-py3-none-any.whl[course]'",
        ),
        (None, "pip install 'ttr-edu[course]'"),  # from an index: pip records no direct_url.json
    ],
    ids=["editable clone", "clone", "wheel", "index"],
)
def test_the_install_hint_names_the_clone_or_wheel_this_ttr_edu_came_from(monkeypatch, recorded, expected):
    """n39b's N6: a student who installed the wheel was told `pip install 'ttr-edu[course]'`, which is not published
    yet; pip needs the same wheel (or clone) to add the extra."""
    from ttr_edu._internal import install

    class Installed:
        def read_text(self, name):
            return recorded if name == "direct_url.json" else None

    monkeypatch.setattr(install.metadata, "distribution", lambda name: Installed())
    assert install.pip_install_extra("course") == expected
    with pytest.raises(TypeError, match="extra: expected a str"):
        install.pip_install_extra(None)


def test_list_into_a_closed_pipe_exits_quietly(tmp_path):
    read, write = os.pipe()
    os.close(read)  # `ttr-edu list | head -1`, with head already gone
    result = subprocess.run(
        [sys.executable, "-m", "ttr_edu.course.cli", "--root", str(ROOT), "list"],
        stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    os.close(write)
    assert result.stderr == "" and result.returncode == 128 + signal.SIGPIPE


def test_list_with_stdout_closed_is_one_line_not_a_traceback():
    """`ttr-edu list >&-`: Python sets sys.stdout to None, and the flush after the command raised AttributeError."""
    result = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m", "ttr_edu.course.cli", "--root", str(ROOT), "list"],
        stderr=subprocess.PIPE, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines() == ["ttr-edu: list: standard output is closed, so its output was not shown"]


def test_check_without_the_course_extra_names_the_extra(tmp_path, monkeypatch, capsys):
    """A bare `pip install ttr-edu` has no nbformat, the first thing `check` imports."""
    dest = tmp_path / "my-course"
    assert run("copy", str(dest), "1") == 0
    monkeypatch.setitem(sys.modules, "nbformat", None)  # as in a bare `pip install ttr-edu`
    assert run("check", str(dest / FIRST.name)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the [course] extra installs" in err and pip_install_extra("course") in err, err
