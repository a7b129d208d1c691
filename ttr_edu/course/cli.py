"""The ``ttr-edu`` command: list the chapters, copy them into a student's own folder and open JupyterLab there,
check a student's notebook, regenerate the student notebooks, build the book.

Every failure prints one line starting with ``ttr-edu:`` and exits non-zero, with no traceback. The student's
folder is kept in step with the course by :mod:`ttr_edu.course.sync` (which never loses an edit), and JupyterLab is
run by :mod:`ttr_edu.course.lab` (which never leaves a server or a kernel behind).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import sys
from pathlib import Path, PurePosixPath

from ttr_edu import __version__
from ttr_edu._internal.install import pip_install_extra
from ttr_edu.course import lab, student_copy, sync
from ttr_edu.course.book import BookError
from ttr_edu.course.notebooks import (
    CHAPTER_NAME,
    CHECK_CALL,
    CourseLayoutError,
    NotebookError,
    course_content,
    course_root,
    generate,
    list_chapters,
)

DESCRIPTION = (
    "ttr-edu: the course's command. Students: `ttr-edu start my-course` copies the notebooks into my-course/ (keeping "
    "your edits) and opens JupyterLab there; `ttr-edu check NOTEBOOK` grades your exercises. Instructors, in a clone "
    "of the repository: `ttr-edu generate` rebuilds chapters/ from solutions/; `ttr-edu book` builds the book."
)
MANIFEST = sync.MANIFEST


class UsageError(Exception):
    """A mistake of the user's; reported in one line."""


def cmd_list(args: argparse.Namespace) -> int:
    chapters = list_chapters(course_content(args.root), "chapters")
    if not chapters:
        raise UsageError("no chapters found; instructors run `ttr-edu generate` first")
    titles = [_short_title(chapter.title, chapter.number) for chapter in chapters]
    width = max(len("chapter"), *(len(t) for t in titles))
    print(f"{'#':>2}  {'chapter':<{width}}  exercises")
    for chapter, title in zip(chapters, titles):
        by_hand = f" (+{chapter.n_by_hand} by hand)" if chapter.n_by_hand else ""
        print(f"{chapter.number:>2}  {title:<{width}}  {chapter.n_exercises:>9}{by_hand}")
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
    if dest.resolve() == root.resolve():
        raise UsageError(
            f"cannot copy into the course itself ({root}); choose a folder of yours, e.g. {root / 'my-course'}"
        )
    own = _course_folder_holding(root.resolve(), dest.resolve())
    if own is not None:
        raise UsageError(
            f"cannot copy into {dest}: it is inside the course's own {own}/ (its sources, in a clone the package "
            f"itself); choose a folder of yours, e.g. {root / 'my-course'}"
        )
    return dest


def _course_folder_holding(root: Path, dest: Path) -> str | None:
    """The folder or file of the course ``root`` that ``dest`` lies in (``ttr_edu``, ``docs``, ...), or ``None`` when
    ``dest`` is outside ``root`` or in a folder of the student's: one that does not exist yet (``my-course``), is
    empty, or holds a copy made by ``ttr-edu`` (its manifest). Both paths resolved."""
    try:
        top = dest.relative_to(root).parts[0]
    except (ValueError, IndexError):
        return None
    folder = root / top
    if not folder.exists() or folder.is_dir() and (not any(folder.iterdir()) or (folder / sync.MANIFEST).exists()):
        return None
    return top


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
    report = sync.copy_into(dest, notebooks, pages, args.force)
    for line in report.lines(dest):
        print(line)
    if args.command == "copy":
        print(f"Open them with: ttr-edu start {shlex.quote(str(dest))}")
    return 0


# -- JupyterLab --------------------------------------------------------------------------------------------------------


def cmd_start(args: argparse.Namespace) -> int:
    root = course_content(args.root)
    dest = _check_dest(root, args.dest, "start")
    options = list(args.lab_options)
    for flag, value in (("--port", args.port), ("--ip", args.ip)):
        if value is not None:
            options.append(f"{flag}={value}")
    if args.no_browser:
        options.append("--no-browser")
    command = lab.lab_command(dest, options)  # fail before copying if JupyterLab is missing
    running = lab.running_server(dest)
    if running is not None:  # before copying: a new release would land under the open notebooks
        print(
            f"ttr-edu: JupyterLab already serves {dest} (process {running.get('pid')}): open "
            f"{lab.server_url(running)} , or stop it (Ctrl-C in its terminal) to start another"
        )
        return 0
    cmd_copy(args)
    settings = lab.write_settings(dest)
    at = command.index(str(dest)) + 1
    command[at:at] = [f"--LabApp.app_settings_dir={settings}", f"--LabApp.workspaces_dir={settings / lab.WORKSPACES}"]
    again = f"ttr-edu start {shlex.quote(str(dest))}"
    print(f"Opening JupyterLab in {dest}; stop it with Ctrl-C, resume any day with: {again}", flush=True)
    return lab.run_foreground(command, dest, resume=again)


# -- checking a student's notebook -------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """Grade NOTEBOOK as the course's autograder does: the grading engine's verdicts, one line per exercise."""
    try:
        return _check(args)
    except KeyboardInterrupt:
        print(CHECK_INTERRUPTED, file=sys.stderr)
        return 130


CHECK_INTERRUPTED = "ttr-edu: interrupted; the check stopped and its processes are ended (your notebook is unchanged)"


def _check(args: argparse.Namespace) -> int:
    import nbformat

    from ttr_edu.course import checking

    path = Path(args.notebook)
    if not path.is_file():
        raise UsageError(f"{path}: no such notebook")
    if args.timeout <= 0:
        raise UsageError(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
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
    print(f"grading {path} with the checks of {release_path.name} ...", file=sys.stderr, flush=True)
    report = checking.grade(nb, release, args.timeout)
    for problem in report.problems:
        print(f"ttr-edu: note: {problem}", file=sys.stderr)
    width = max((len(v.heading) for v in report.verdicts), default=0)
    for verdict in report.verdicts:
        lines = verdict.detail.splitlines() if verdict.status != "PASS" else []
        print(f"{verdict.status:<13}  {verdict.heading:<{width}}" + (f"  {lines[0]}" if lines else ""))
        for line in lines[1:]:  # the whole reason: a case, the first wrong element, a note on a special case
            print(f"{'':15}{line}")
    counts = {o: sum(v.status == o for v in report.verdicts) for o in ("PASS", "FAIL", "not attempted")}
    print(
        f"{counts['PASS']} of {len(report.verdicts)} pass, {counts['FAIL']} fail, {counts['not attempted']} not "
        "attempted."
    )
    print(f"{report.score:g} of {report.max_score:g} points.")
    for heading, points in checking.marked_by_hand(release):  # in the chapter's total, but no check can grade it
        print(f"+ {points:g} {'point' if points == 1 else 'points'} marked by hand, not checked here: {heading}.")
    if counts["FAIL"]:
        return 1
    return 0 if counts["PASS"] == len(report.verdicts) else 3


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
        description="Grade NOTEBOOK with the course's grading engine, as the autograder does: your exercise cells "
        "(and cells you added) run in a sandboxed process with the course's own setup and check cells, and each "
        "exercise gets one line: PASS, FAIL with the whole reason, or not attempted. Exit status: 0 every "
        "exercise passes; 1 one fails; 3 none fails but some are not attempted; 2 the notebook cannot be read; "
        "130 interrupted.",
    )
    check.add_argument("notebook", metavar="NOTEBOOK")
    check.add_argument(
        "--timeout", type=float, default=60, help="seconds the answers of one exercise may run (default: 60)"
    )
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
    closed_stdout = sys.stdout is None  # `ttr-edu list >&-`: Python sets sys.stdout to None when fd 1 is closed
    if closed_stdout:
        sys.stdout = io.StringIO()  # what the command prints is held, to say it was not shown
    try:
        status = args.run(args)
        sys.stdout.flush()  # a closed pipe (`ttr-edu list | head -1`) shows here, not at exit
        if closed_stdout and sys.stdout.getvalue():  # type: ignore[attr-defined]
            print(f"ttr-edu: {args.command}: standard output is closed, so its output was not shown", file=sys.stderr)
            return 2
        return status
    except (UsageError, CourseLayoutError, NotebookError, BookError, sync.CopyError, lab.UsageError) as err:
        print(f"ttr-edu: {err}", file=sys.stderr)
        return 2
    except ImportError as err:  # an extra that is not installed, e.g. nbgrader for `generate`
        print(f"ttr-edu: {_missing_extra(err, args.command)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head -1`): what it wanted was printed; exit as a shell's tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
        return 128 + 13  # SIGPIPE
    except OSError as err:  # permissions, a full disk, ...: one line, not a traceback
        where = f": {err.filename}" if err.filename else ""
        print(f"ttr-edu: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ttr-edu: interrupted; every notebook is whole (run the same command again to finish)", file=sys.stderr)
        return 130
    finally:
        if closed_stdout:
            sys.stdout = None  # as it was


#: the extra that installs each module a command may miss: the course's commands need the [course] extra (nbgrader,
#: for `generate`, comes with [dev])
EXTRAS = {"nbformat": "course", "nbclient": "course", "jupyter_client": "course", "ipykernel": "course"}


def _missing_extra(err: ImportError, command: str) -> str:
    """One line for a module that is not installed: which extra installs it, when one does."""
    module = (err.name or "").split(".")[0]
    if module in EXTRAS:
        extra = EXTRAS[module]
        return f"{command} needs {module}, which the [{extra}] extra installs: {pip_install_extra(extra)}"
    return str(err)


if __name__ == "__main__":
    sys.exit(main())
