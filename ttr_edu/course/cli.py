"""The ``ttr-edu`` command: list the chapters, copy them into a student's own folder and open JupyterLab there,
check a student's notebook, regenerate the student notebooks, build the book.

Every failure prints one line starting with ``ttr-edu:`` and exits non-zero. A student's notebook is never lost:
every write is atomic (a temporary file in the same folder, then ``os.replace``), one run at a time works in a folder
(a lock file), backups are created exclusively, and an edited notebook is never replaced without a backup.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from ttr_edu import __version__
from ttr_edu.course import student_copy
from ttr_edu.course.book import BookError
from ttr_edu.course.notebooks import (
    CHAPTER_NAME,
    CHECK_CALL,
    CourseLayoutError,
    NotebookError,
    course_content,
    course_root,
    file_mode,
    generate,
    list_chapters,
    write_atomically,
)

DESCRIPTION = (
    "ttr-edu: the course's command. Students: `ttr-edu start my-course` copies the notebooks into my-course/ (keeping "
    "your edits) and opens JupyterLab there; `ttr-edu check NOTEBOOK` grades your exercises. Instructors, in a clone "
    "of the repository: `ttr-edu generate` rebuilds chapters/ from solutions/; `ttr-edu book` builds the book."
)
MANIFEST = ".ttr-edu-copy.json"  # per chapter slug (and per page copied along): hashes of what we wrote, of the release
LOCK = ".ttr-edu.lock"
BESIDE = "new-release"  # a changed release of an edited notebook goes beside it as NN_slug.new-release.ipynb


class UsageError(Exception):
    """A mistake of the user's; reported in one line."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: Path) -> str:
    return _digest(path.read_bytes())


def cmd_list(args: argparse.Namespace) -> int:
    chapters = list_chapters(course_content(args.root), "chapters")
    if not chapters:
        raise UsageError("no chapters found; instructors run `ttr-edu generate` first")
    titles = [_short_title(chapter.title, chapter.number) for chapter in chapters]
    width = max(len("chapter"), *(len(t) for t in titles))
    print(f"{'#':>2}  {'chapter':<{width}}  exercises")
    for chapter, title in zip(chapters, titles):
        print(f"{chapter.number:>2}  {title:<{width}}  {chapter.n_exercises:>9}")
    return 0


def _short_title(title: str, number: str) -> str:
    """The title without its leading "NN · " (the number has its own column), cut at 70 characters."""
    for prefix in (f"{number} · ", f"{number} - ", f"{number}. ", f"{number} "):
        if title.startswith(prefix):
            title = title[len(prefix) :]
            break
    return title if len(title) <= 70 else title[:69] + "…"


def _select(root: Path, wanted: list[str] | None) -> list[Path]:
    """The chapter notebooks named by ``wanted`` (numbers, slugs or file names), each once, in course order.

    Chapters are known by their file names (``NN_slug.ipynb``), so nothing is parsed here.
    """
    files = sorted(p.name for p in (root / "chapters").glob("*.ipynb") if CHAPTER_NAME.match(p.name))
    if not files:
        raise UsageError(f"no chapters in {root / 'chapters'}; instructors run `ttr-edu generate` first")
    by_number = {name[:2]: name for name in files}
    by_slug = {CHAPTER_NAME.match(name)[2]: name for name in files}
    chosen = set()
    for item in wanted or list(by_number):
        name = Path(item).name.removesuffix(".ipynb")
        number, _, slug = name.partition("_")
        if name in by_slug:  # a bare slug, e.g. "delta_rule"
            chosen.add(by_slug[name])
        elif number.isascii() and number.isdigit() and f"{int(number):02d}" in by_number:
            file = by_number[f"{int(number):02d}"]
            if slug and f"{int(number):02d}_{slug}.ipynb" != file:  # "04_hebbian_memory": number and name disagree
                hint = f"; did you mean {by_slug[slug]}?" if slug in by_slug else ""
                raise UsageError(f"{item!r}: chapter {file[:2]} is {file[3:-6]}, not {slug}{hint}")
            chosen.add(file)
        else:
            raise UsageError(f"unknown chapter {item!r}; choose from {', '.join(by_number)}")
    return [root / "chapters" / name for name in files if name in chosen]


# -- the manifest: what we wrote into the student's folder -------------------------------------------------------------


def _read_manifest(path: Path) -> dict[str, dict]:
    """Per chapter slug: ``file`` (its name in DEST), ``written`` (hash of the notebook as we wrote it) and
    ``release`` (hash of the newest release the student was given). A missing or damaged manifest counts as empty.

    Empty is the safe side: every notebook that differs from the course's then counts as edited and is kept.
    The first manifests (before chapters could be renumbered) mapped file names to hashes; they are read too.
    """
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict):
        print(f"note: {path} is damaged; treating every changed notebook as edited", file=sys.stderr)
        return {}
    if manifest.get("format") == 2 and isinstance(manifest.get("notebooks"), dict):
        return {slug: entry for slug, entry in manifest["notebooks"].items() if isinstance(entry, dict)}
    converted = {}
    for name, digest in manifest.items():  # format 1: {"01_hebbian_memory.ipynb": sha256}
        match = CHAPTER_NAME.match(name)
        if match and isinstance(digest, str):
            converted[match[2]] = {"file": name, "written": digest, "release": digest}
    return converted


def _read_pages(path: Path) -> dict[str, dict]:
    """Per page copied along with the notebooks (``notation.ipynb``): ``written`` and ``release`` hashes, as for a
    notebook. Missing or damaged counts as empty (an existing page then counts as edited and is kept)."""
    try:
        pages = json.loads(path.read_text(encoding="utf-8")).get("pages", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {name: entry for name, entry in pages.items() if isinstance(entry, dict)} if isinstance(pages, dict) else {}


def _write_manifest(path: Path, manifest: dict[str, dict], pages: dict[str, dict] | None = None) -> None:
    content = {"format": 2, "notebooks": manifest, **({"pages": pages} if pages else {})}
    write_atomically(path, json.dumps(content, indent=1, sort_keys=True) + "\n")


@contextmanager
def _locked(dest: Path):
    """Hold DEST's lock file for the whole run, so two runs into one folder cannot interleave.

    ``flock`` locks vanish with their process, so a killed run never leaves the folder locked. On systems without
    ``fcntl`` (Windows) runs are not serialised, but backups and writes stay exclusive and atomic.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)  # a lock file that is a symlink is refused
    with os.fdopen(os.open(dest / LOCK, flags, 0o644), "r+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another ttr-edu run in {dest} to finish...", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _create_exclusive(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path``, or to ``path`` with ``-2``, ``-3``, ... added, never over an existing file, and
    never half: a run killed mid-write must not leave a truncated backup that looks like a notebook. Returns the path
    written.

    The data goes to a temporary file first (named as :func:`write_atomically` names them, so the next run clears a
    killed run's leftover); a hard link then puts it at the first free name, and ``link`` fails on an existing name,
    so two runs can never pick the same one. Where the file system has no hard links, a rename after checking the name
    is free (the caller holds the folder's lock).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, file_mode(path.with_name(f".{path.name}.new")))  # a new file's mode: 0666 less the umask
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        stem, n = path.name.removesuffix(".ipynb"), 1
        while True:
            candidate = path if n == 1 else path.with_name(f"{stem}-{n}.ipynb")
            n += 1
            try:
                os.link(tmp, candidate)
            except FileExistsError:
                continue
            except OSError:  # no hard links here
                if candidate.exists() or candidate.is_symlink():
                    continue
                os.rename(tmp, candidate)
            return candidate
    finally:
        Path(tmp).unlink(missing_ok=True)


def _move(old: Path, new: Path) -> None:
    """Rename a renumbered notebook, never over an existing file (the link of a symlink is moved, not its target)."""
    try:
        os.link(old, new, follow_symlinks=False)
    except FileExistsError:
        raise UsageError(
            f"cannot rename {old.name} to {new.name}: {new.name} already exists; move one of them away"
        ) from None
    except OSError:  # no hard links on this file system: a plain rename, after checking the name is free
        if new.exists() or new.is_symlink():
            raise UsageError(
                f"cannot rename {old.name} to {new.name}: {new.name} already exists; move one of them away"
            ) from None
        os.rename(old, new)
        return
    old.unlink()


@dataclass
class Report:
    new: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self, dest: Path) -> list[str]:
        counts = [f"{len(self.new)} new", f"{len(self.refreshed)} refreshed", f"{len(self.current)} up to date"]
        first = f"{dest}: " + ", ".join(counts)
        if self.kept:
            first += f"; kept your edits in {', '.join(self.kept)}"
        return [first + "."] + (["; ".join(self.notes) + "."] if self.notes else [])


def _existing(dest: Path, slug: str, entry: dict, target: Path) -> Path | None:
    """The student's notebook for ``slug``, whatever number it had: the current name first, then the manifest's."""
    found = [p for p in sorted(dest.glob(f"*_{slug}.ipynb")) if (m := CHAPTER_NAME.match(p.name)) and m[2] == slug]
    found = [p for p in found if p.is_file() or p.is_symlink()]
    for preferred in (target, dest / str(entry.get("file", ""))):
        if preferred in found:
            return preferred
    return found[0] if found else None


def _sync(
    source: Path, data: bytes, dest: Path, manifest: dict[str, dict], force: bool, stamp: str, report: Report
) -> None:
    """Bring one chapter (``data``: its student copy, :func:`student_copy.render`) into DEST; records it in
    ``manifest`` only after its files are written."""
    slug = CHAPTER_NAME.match(source.name)[2]
    want = _digest(data)
    entry = dict(manifest.get(slug, {}))
    target = dest / source.name
    current = _existing(dest, slug, entry, target)
    label = source.name[:2]
    if current is None:
        write_atomically(target, data.decode("utf-8"))
        report.new.append(label)
        entry = {"file": target.name, "written": want, "release": want}
    else:
        have = _file_digest(current)
        if current != target:
            report.notes.append(f"renumbered {current.name} -> {target.name}")
        if have == want:  # already the release (a run interrupted after the write, before the manifest, ends here)
            if current != target:
                _move(current, target)
            report.current.append(label)
            entry = {"file": target.name, "written": want, "release": want}
        elif entry.get("written") == have:  # untouched since we wrote it: refresh
            write_atomically(target, data.decode("utf-8"))
            if current != target:
                current.unlink()
            report.refreshed.append(label)
            entry = {"file": target.name, "written": want, "release": want}
        else:  # edited by the student
            if current != target:
                _move(current, target)  # the edits follow the chapter's slug to its new number
            entry["file"] = target.name
            if force:
                backup = _create_exclusive(target.with_name(f"{target.stem}.backup-{stamp}.ipynb"), target.read_bytes())
                write_atomically(target, data.decode("utf-8"))
                report.refreshed.append(label)
                report.notes.append(f"your edited {target.name} is backed up as {backup.name}")
                entry = {"file": target.name, "written": want, "release": want}
            else:
                report.kept.append(label)
                if entry.get("release") != want:  # a release changed a notebook the student edited
                    beside = _put_beside(target, data, entry)
                    entry["beside"] = {"file": beside.name, "written": want}
                    entry["release"] = want
                    report.notes.append(f"a new version of {target.name} is beside it: {beside.name}")
    manifest[slug] = entry


def _sync_page(relative: PurePosixPath, data: bytes, dest: Path, pages: dict[str, dict], report: Report) -> None:
    """Bring one page the notebooks link to (``notation.ipynb``) into DEST: written when missing or untouched since we
    wrote it; a page the student edited is kept as it is."""
    target, want = dest.joinpath(*relative.parts), _digest(data)
    entry = pages.get(str(relative), {})
    if not target.exists() and not target.is_symlink():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, data)
        pages[str(relative)] = {"written": want, "release": want}
        return
    have = _file_digest(target) if target.is_file() and not target.is_symlink() else None
    if have == want:
        pages[str(relative)] = {"written": want, "release": want}
    elif have is not None and entry.get("written") == have:
        write_atomically(target, data)
        pages[str(relative)] = {"written": want, "release": want}
    elif entry.get("release") != want:
        report.notes.append(f"kept your {relative} (edited); the course's new version of it was not copied")
        pages[str(relative)] = {**entry, "release": want}


def _put_beside(target: Path, data: bytes, entry: dict) -> Path:
    """Write a new release of an edited notebook beside it; replace an earlier one only if still untouched."""
    path = target.with_name(f"{target.stem}.{BESIDE}.ipynb")
    earlier = entry.get("beside") or {}
    if (
        path.is_file()
        and not path.is_symlink()
        and earlier.get("file") == path.name
        and _file_digest(path) == earlier.get("written")
    ):
        write_atomically(path, data.decode("utf-8"))
        return path
    return _create_exclusive(path, data)


def _check_dest(root: Path, raw: str | None, command: str) -> Path:
    if raw is None:
        raise UsageError(
            f"{command} needs a folder: ttr-edu {command} DEST [CHAPTER ...], e.g. ttr-edu {command} my-course"
        )
    if not raw.strip():
        raise UsageError("DEST is empty; name a folder, e.g. my-course")
    dest = Path(raw)
    if (
        re.fullmatch(r"\d{1,3}|\d\d_\w+\.ipynb", raw) and not dest.is_dir()
    ):  # `ttr-edu start 4`: a chapter, not a folder
        raise UsageError(
            f"{raw!r} looks like a chapter, not a folder: give the folder first (ttr-edu {command} my-course {raw}), "
            f"or write ./{raw} if you do mean a folder of that name"
        )
    if not dest.parent.exists():
        raise UsageError(f"cannot copy to {dest}: its parent folder {dest.parent} does not exist")
    if not dest.parent.is_dir():
        raise UsageError(f"cannot copy to {dest}: {dest.parent} is a file, not a folder")
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"cannot copy to {dest}: it is a file, not a folder")
    if dest.resolve() in {(root / "chapters").resolve(), (root / "solutions").resolve()}:
        raise UsageError(f"cannot copy into the course's own {dest.resolve().name}/ folder; choose a folder of yours")
    return dest


def _student_copies(root: Path, sources: list[Path]) -> tuple[dict[Path, bytes], dict[PurePosixPath, bytes]]:
    """Each chapter's student copy, and the pages they link to (by path in DEST): citations written out and links
    aimed inside the student's folder (:mod:`ttr_edu.course.student_copy`). Everything is rendered before anything
    is written."""
    try:
        bibliography = student_copy.bibliography_of(root)
    except ValueError as err:
        raise NotebookError(f"{root / 'references.bib'}: {err}") from err
    notebooks, linked = {}, set()
    for source in sources:
        try:
            notebooks[source], links = student_copy.render(root, PurePosixPath("chapters", source.name), bibliography)
        except ValueError as err:
            raise NotebookError(f"{source}: not a readable notebook ({type(err).__name__})") from err
        linked |= links
    return notebooks, student_copy.linked_pages(root, linked, bibliography)


def cmd_copy(args: argparse.Namespace) -> int:
    root = course_content(args.root)
    dest = _check_dest(root, args.dest, args.command)
    sources = _select(root, args.chapters)
    notebooks, pages = _student_copies(root, sources)
    for name in [*(source.name for source in sources), *(str(page) for page in pages)]:
        target = dest / name
        if target.exists() and not target.is_file():
            raise UsageError(f"cannot copy {name}: {target} exists and is not a file; move it away first")
    dest.mkdir(exist_ok=True)
    report = Report()
    with _locked(dest):
        # temporary files of a killed run (named by write_atomically); we hold the lock, so none is in use
        for leftover in [*dest.glob(".*.ipynb.*.tmp"), *dest.glob(f".{MANIFEST}.*.tmp")]:
            leftover.unlink(missing_ok=True)
        manifest_path = dest / MANIFEST
        manifest, copied_pages = _read_manifest(manifest_path), _read_pages(manifest_path)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        for source in sources:
            _sync(source, notebooks[source], dest, manifest, args.force, stamp, report)
            _write_manifest(manifest_path, manifest, copied_pages)  # after each chapter: a failure later leaves it true
        for page, data in pages.items():
            _sync_page(page, data, dest, copied_pages, report)
        _write_manifest(manifest_path, manifest, copied_pages)
    for line in report.lines(dest):
        print(line)
    if args.command == "copy":
        print(f"Open them with: ttr-edu start {shlex.quote(str(dest))}")
    return 0


# -- JupyterLab --------------------------------------------------------------------------------------------------------


def lab_command(dest: Path, options: list[str]) -> list[str]:
    """JupyterLab on ``dest`` through this very interpreter (works without activating the venv).

    As root (containers, cloud notebooks) Jupyter needs ``--allow-root``. ``options`` go to JupyterLab as given.
    """
    if importlib.util.find_spec("jupyterlab") is None:
        raise UsageError(f"JupyterLab is not installed for {sys.executable}: pip install 'ttr-edu[course]'")
    command = [sys.executable, "-m", "jupyterlab", str(dest)]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in options:
        command.append("--allow-root")
    return command + options


def run_foreground(command: list[str], stopped: str = "") -> int:
    """Run ``command`` (JupyterLab) and wait. Ctrl-C stops it: one line (``stopped``), exit status 130.

    On POSIX the command runs in a session of its own, so the terminal's Ctrl-C reaches this process alone, which then
    asks JupyterLab to stop with SIGTERM: its own clean shutdown, kernels included, with no confirmation prompt and
    no traceback of its own. If it has not stopped after 30 s, its process group is killed (its kernels, which poll
    their parent, then end by themselves). Elsewhere Ctrl-C goes to JupyterLab as the terminal sends it.
    """
    if not hasattr(os, "killpg"):  # pragma: no cover - Windows: the console signals JupyterLab itself
        previous = signal.signal(signal.SIGINT, lambda *_: None)  # a no-op handler, unlike SIG_IGN, is not inherited
        try:
            status = subprocess.Popen(command).wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        return 130 if status == -signal.SIGINT else status
    process = subprocess.Popen(command, start_new_session=True)
    try:
        return process.wait()
    except KeyboardInterrupt:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
        try:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        print(f"ttr-edu: {stopped or 'stopped'}", file=sys.stderr, flush=True)
        return 130


def cmd_start(args: argparse.Namespace) -> int:
    root = course_content(args.root)
    dest = _check_dest(root, args.dest, "start")
    options = list(args.lab_options)
    for flag, value in (("--port", args.port), ("--ip", args.ip)):
        if value is not None:
            options.append(f"{flag}={value}")
    if args.no_browser:
        options.append("--no-browser")
    command = lab_command(dest, options)  # fail before copying if JupyterLab is missing
    cmd_copy(args)
    again = f"ttr-edu start {shlex.quote(str(dest))}"
    print(f"Opening JupyterLab in {dest}; stop it with Ctrl-C, resume any day with: {again}", flush=True)
    return run_foreground(command, stopped=f"JupyterLab stopped; your notebooks are saved in {dest} (resume: {again})")


# -- checking a student's notebook -------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """Grade NOTEBOOK as nbgrader's autograder would: the release's check cells, run in a fresh kernel."""
    try:
        return _check(args)
    except KeyboardInterrupt:  # before the kernel started; afterwards checking.Interrupted says the same
        print(CHECK_INTERRUPTED, file=sys.stderr)
        return 130


CHECK_INTERRUPTED = "ttr-edu: interrupted; the check stopped and its kernel is shut down (your notebook is unchanged)"


def _check(args: argparse.Namespace) -> int:
    import nbformat

    import ttr_edu
    from ttr_edu.course import checking

    path = Path(args.notebook)
    if not path.is_file():
        raise UsageError(f"{path}: no such notebook")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:
        raise UsageError(f"{path}: not a readable notebook ({type(err).__name__})") from err
    releases = sorted((course_content(args.root) / "chapters").glob("*.ipynb"))
    release_path = checking.release_for(path, nb, releases)
    if release_path is None:
        if not CHECK_CALL.search("\n".join(c.source for c in nb.cells if c.cell_type == "code")):
            raise UsageError(f"{path}: this notebook has no exercise checks (checks.check_...)")
        raise UsageError(
            f"{path}: not one of the course's chapters (its exercise cells have no course ids and its name is no "
            "chapter's); check runs the course's own check cells, so it needs a copy made by ttr-edu copy or start"
        )
    release = nbformat.read(release_path, as_version=4)
    restored = checking.restore_checks(nb, release)
    print(f"running {path} with the check cells of {release_path.name} ...", file=sys.stderr, flush=True)
    try:
        run = checking.run_graded(restored, path.parent.resolve(), args.timeout, Path(ttr_edu.__file__).resolve())
    except checking.Interrupted:
        print(CHECK_INTERRUPTED, file=sys.stderr)
        return 130
    if run.setup_error is not None:
        tail = "".join(run.kernel_log.strip().splitlines(keepends=True)[-5:])
        raise UsageError(f"{path}: the check could not start: {run.setup_error}" + (f"\n{tail}" if tail else ""))
    if run.stopped:
        print(f"ttr-edu: {path}: the notebook stopped early ({run.stopped}); results so far:", file=sys.stderr)
    results = checking.exercise_results(run.nb, release)
    width = max(len(name) for name, _, _ in results)
    for name, outcome, detail in results:
        print(f"{outcome:<13}  {name:<{width}}" + (f"  {detail}" if detail else ""))
    counts = {o: sum(r[1] == o for r in results) for o in ("PASS", "FAIL", "not attempted", "not run")}
    print(
        f"{counts['PASS']} of {len(results)} pass, {counts['FAIL']} fail, {counts['not attempted']} not attempted"
        + (f", {counts['not run']} not run" if counts["not run"] else "")
        + "."
    )
    if counts["FAIL"] or counts["not run"]:
        return 1
    return 0 if counts["PASS"] == len(results) else 3


# -- instructors -------------------------------------------------------------------------------------------------------


def cmd_generate(args: argparse.Namespace) -> int:
    root = course_root(args.root, command="generate")
    changes = generate(root, check=args.check)
    for line in changes:
        print(line)
    if args.check:
        if changes:
            print("ttr-edu: chapters/ is out of date with solutions/; run `ttr-edu generate`", file=sys.stderr)
            return 1
        print("chapters/ and solutions/ are in sync and stored clean.")
    elif not changes:
        print("nothing to do: chapters/ already in sync.")
    return 0


def cmd_book(args: argparse.Namespace) -> int:
    from ttr_edu.course import book

    root = course_root(args.root, command="book")
    return book.build(root, site=args.site, serve=args.serve, execute=not args.no_execute)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ttr-edu", description=DESCRIPTION)
    parser.add_argument(
        "--root", help="the course folder (default: a clone found from the current folder, else the installed course)"
    )
    parser.add_argument("--version", action="version", version=f"ttr-edu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("list", help="list the chapters").set_defaults(run=cmd_list)

    copy = sub.add_parser("copy", help="copy the student notebooks into your own folder, keeping your edits")
    copy.add_argument("dest", nargs="?", metavar="DEST", help="the folder to copy into (created if its parent exists)")
    copy.add_argument(
        "chapters", nargs="*", metavar="CHAPTER", help="chapter numbers or names (default: all), e.g. 1 4"
    )
    copy.add_argument("--force", action="store_true", help="replace edited notebooks too, keeping a backup of each")
    copy.set_defaults(run=cmd_copy)

    start = sub.add_parser(
        "start",
        help="copy (as copy does) and open JupyterLab; run it again any day",
        description="Copy the notebooks into DEST (new chapters added, untouched ones refreshed, your edits kept, a "
        "changed release of an edited notebook put beside it), then open JupyterLab there. Options not "
        "listed here go to JupyterLab as --name=value (e.g. --ServerApp.token=abc), or after `--`.",
    )
    start.add_argument("dest", nargs="?", default="my-course", metavar="DEST", help="your folder (default: my-course)")
    start.add_argument("chapters", nargs="*", metavar="CHAPTER", help="chapter numbers or names (default: all)")
    start.add_argument("--force", action="store_true", help="replace edited notebooks too, keeping a backup of each")
    start.add_argument("--port", help="JupyterLab's port")
    start.add_argument("--ip", help="JupyterLab's address, e.g. 0.0.0.0")
    start.add_argument("--no-browser", action="store_true", help="do not open a browser")
    start.set_defaults(run=cmd_start)

    check = sub.add_parser(
        "check",
        help="grade a notebook as the autograder will and print each exercise's result",
        description="Run NOTEBOOK from the top with the course's own check cells (an edited or deleted check cell is "
        "put back, as nbgrader does) and print one line per exercise: PASS, FAIL with the reason, or not "
        "attempted. Exit status: 0 every exercise passes; 1 one fails (or a check did not run); "
        "3 none fails but some are not attempted; 2 the notebook cannot be read; 130 interrupted.",
    )
    check.add_argument("notebook", metavar="NOTEBOOK")
    check.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default: 600)")
    check.set_defaults(run=cmd_check)

    gen = sub.add_parser("generate", help="build chapters/ from solutions/, grading metadata included (instructors)")
    gen.add_argument("--check", action="store_true", help="write nothing; fail if anything is out of date")
    gen.set_defaults(run=cmd_generate)

    book = sub.add_parser(
        "book",
        help="build (or serve) the book with MyST, every notebook executed (instructors, in a clone)",
        description="Build the HTML book in _build/html with MyST, executing every notebook on a Jupyter server of "
        "this Python, and fail unless every page executed cleanly. The web theme is downloaded on first use; "
        "offline, --site builds the pages' content only.",
    )
    mode = book.add_mutually_exclusive_group()
    mode.add_argument("--site", action="store_true", help="build the site's content only (_build/site; works offline)")
    mode.add_argument("--serve", action="store_true", help="serve the book locally with live reload")
    run = book.add_mutually_exclusive_group()
    run.add_argument(
        "--no-execute", action="store_true", help="do not run the notebooks (a quick preview: pages show no outputs)"
    )
    run.add_argument("--execute", action="store_true", help=argparse.SUPPRESS)  # the default; kept for old scripts
    book.set_defaults(run=cmd_book)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough = []
    if "--" in argv:  # `ttr-edu start my-course -- --ServerApp.token abc`: the rest is JupyterLab's
        passthrough = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command != "start" and (unknown or passthrough):
        parser.error(f"unrecognized arguments: {' '.join(unknown + passthrough)}")
    stray = [u for u in unknown if not u.startswith("--")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)} (JupyterLab options go as --name=value, or after --)")
    args.lab_options = unknown + passthrough
    try:
        return args.run(args)
    except (UsageError, CourseLayoutError, NotebookError, BookError) as err:
        print(f"ttr-edu: {err}", file=sys.stderr)
        return 2
    except ImportError as err:  # an extra that is not installed, e.g. nbgrader for `generate`
        print(f"ttr-edu: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # permissions, a full disk, ...: one line, not a traceback
        print(f"ttr-edu: {err.strerror or err}: {err.filename}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ttr-edu: interrupted; every notebook is whole (run the same command again to finish)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
