"""The ``ttr-edu`` command (DESIGN.md §5): list the chapters, copy them for a student (and start JupyterLab on the
copy), regenerate the student notebooks, build the book.

Every failure prints one line starting with ``ttr-edu:`` and exits non-zero, having written nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from ttr_edu.notebooks import CourseLayoutError, NotebookError, course_root, generate, list_chapters

MANIFEST = ".ttr-edu-copy.json"  # hashes of the notebooks as copied: tells an edited notebook from an old one


class UsageError(Exception):
    """A mistake of the user's; reported in one line."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cmd_list(args: argparse.Namespace) -> int:
    chapters = list_chapters(course_root(args.root), "chapters")
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
            title = title[len(prefix):]
            break
    return title if len(title) <= 70 else title[:69] + "…"


def _select(root: Path, wanted: list[str] | None) -> list[Path]:
    available = {c.number: root / "chapters" / c.filename for c in list_chapters(root, "chapters")}
    if not available:
        raise UsageError(f"no chapters in {root / 'chapters'}; instructors run `ttr-edu generate` first")
    if not wanted:
        return list(available.values())
    chosen = []
    for item in wanted:
        prefix = Path(item).name.split("_")[0]  # "1", "01", "001", "01_hebbian_memory.ipynb" all name chapter 01
        number = f"{int(prefix):02d}" if prefix.isascii() and prefix.isdigit() else prefix
        if number not in available:
            raise UsageError(f"unknown chapter {item!r}; choose from {', '.join(sorted(available))}")
        chosen.append(available[number])
    return chosen


def _read_manifest(path: Path) -> dict[str, str]:
    """The hashes of the notebooks as last copied; a missing or damaged manifest counts as empty.

    Empty is the safe side: every notebook that differs from the course's then counts as edited and is kept.
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
    return manifest


def cmd_copy(args: argparse.Namespace) -> int:
    root = course_root(args.root)
    sources = _select(root, args.chapters)
    dest = Path(args.dest)
    if not dest.parent.exists():
        raise UsageError(f"cannot copy to {dest}: its parent folder {dest.parent} does not exist")
    if not dest.parent.is_dir():
        raise UsageError(f"cannot copy to {dest}: {dest.parent} is a file, not a folder")
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"cannot copy to {dest}: it is a file, not a folder")
    if dest.resolve() in {(root / "chapters").resolve(), (root / "solutions").resolve()}:
        raise UsageError(f"cannot copy into the course's own {dest.resolve().name}/ folder; choose a folder of yours")
    manifest = _read_manifest(dest / MANIFEST)
    manifest_path = dest / MANIFEST

    # Decide everything first, so that a refusal writes nothing.
    plan, edited = [], []
    for source in sources:
        target = dest / source.name
        if target.exists() and not target.is_file():
            raise UsageError(f"cannot copy {source.name}: {target} exists and is not a file; move it away first")
        if not target.exists():
            plan.append((source, target, "new"))
            continue
        current = _digest(target)
        if current == _digest(source):
            continue  # already up to date
        if manifest.get(source.name) == current:
            plan.append((source, target, "updated"))  # untouched since we copied it: safe to refresh
        else:
            edited.append(target)
            plan.append((source, target, "replaced"))
    if edited and not args.force:
        names = ", ".join(t.name for t in edited)
        raise UsageError(
            f"refusing to overwrite notebook(s) you have edited: {names} (rename them, or pass --force to back them up first)"
        )

    dest.mkdir(exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for source, target, what in plan:
        if what == "replaced":
            backup = target.with_name(f"{target.stem}.backup-{stamp}.ipynb")
            n = 1
            while backup.exists():  # two --force runs in one second must not overwrite the first backup
                n += 1
                backup = target.with_name(f"{target.stem}.backup-{stamp}-{n}.ipynb")
            shutil.copy2(target, backup)
            print(f"backed up {target.name} -> {backup.name}")
        shutil.copyfile(source, target)
        manifest[source.name] = _digest(target)
        print(f"{what:>8} {target}")
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"{len(plan)} notebook(s) written to {dest}; {len(sources) - len(plan)} already up to date.")
    if args.command == "copy":
        print(f"Start the course with: ttr-edu start {dest}")
    return 0


def lab_command(dest: Path) -> list[str]:
    """The JupyterLab command for ``dest``; as root (containers, cloud notebooks) Jupyter needs ``--allow-root``."""
    jupyter = shutil.which("jupyter")
    if jupyter is None or shutil.which("jupyter-lab") is None:
        raise UsageError("JupyterLab is not installed: pip install 'ttr-edu[course]'")
    command = [jupyter, "lab", str(dest)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    return command


def cmd_start(args: argparse.Namespace) -> int:
    command = lab_command(Path(args.dest))  # fail before copying if JupyterLab is missing
    status = cmd_copy(args)
    if status != 0:
        return status
    print("running:", " ".join(command))
    sys.stdout.flush()
    return subprocess.call(command)


def cmd_generate(args: argparse.Namespace) -> int:
    root = course_root(args.root)
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
    root = course_root(args.root)
    myst = shutil.which("myst")
    if myst is None:
        raise UsageError("the book needs MyST: pip install 'ttr-edu[book]'")
    command = [myst, "--config", "book.yml"]
    command += ["start"] if args.serve else ["build", "--site" if args.site else "--html"]
    if args.execute:
        command.append("--execute")
    print("running:", " ".join(command))
    return subprocess.call(command, cwd=root)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ttr-edu", description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="the course folder (default: found from the current folder)")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list the chapters").set_defaults(run=cmd_list)

    copy = sub.add_parser("copy", help="copy the student notebooks into your own working folder")
    copy.add_argument("dest", help="the folder to copy into (created if its parent exists)")
    copy.add_argument("chapters", nargs="*", help="chapter numbers (default: all), e.g. 1 2")
    copy.add_argument("--force", action="store_true", help="replace edited notebooks, keeping a backup of each")
    copy.set_defaults(run=cmd_copy)

    start = sub.add_parser("start", help="copy the notebooks (as copy does) and open them in JupyterLab")
    start.add_argument("dest", nargs="?", default="my-course", help="your working folder (default: my-course)")
    start.add_argument("chapters", nargs="*", help="chapter numbers (default: all)")
    start.add_argument("--force", action="store_true", help="replace edited notebooks, keeping a backup of each")
    start.set_defaults(run=cmd_start)

    gen = sub.add_parser("generate", help="build chapters/ from solutions/ (instructors)")
    gen.add_argument("--check", action="store_true", help="write nothing; fail if anything is out of date")
    gen.set_defaults(run=cmd_generate)

    book = sub.add_parser("book", help="build (or serve) the book with MyST")
    mode = book.add_mutually_exclusive_group()
    mode.add_argument("--site", action="store_true", help="build the site's content only (works offline)")
    mode.add_argument("--serve", action="store_true", help="serve the book locally with live reload")
    book.add_argument("--execute", action="store_true", help="execute the notebooks while building")
    book.set_defaults(run=cmd_book)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, CourseLayoutError, NotebookError) as err:
        print(f"ttr-edu: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # permissions, a full disk, ...: one line, not a traceback
        print(f"ttr-edu: {err.strerror or err}: {err.filename}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
