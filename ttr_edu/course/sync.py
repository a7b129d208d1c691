"""Bring the course's notebooks into a student's folder without ever losing the student's work.

``ttr-edu copy`` and ``ttr-edu start`` call :func:`copy_into`. Per chapter it decides: new (write it), up to date
(leave it, outputs and all), untouched since we wrote it (refresh it to the release), or edited (keep it; with
``--force`` back it up first; a changed release goes beside it as ``NN_slug.new-release.ipynb``).

"Edited" means what a student can change: the cells' types, sources and attachments (:func:`content_digest`).
JupyterLab rewrites a notebook's bytes when it is only opened, run or autosaved (it fills in the kernel's metadata,
stores outputs and execution counts, lays the JSON out its own way); none of that is an edit, so a chapter that was
only read still gets the next release.

Safety: every write is atomic (a temporary file in the same folder, then ``os.replace``), one run at a time works in
a folder (a lock file), backups are created exclusively and whole, an edited notebook is never replaced without a
backup, and a backup that a killed run never reported is named by the next run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from ttr_edu.course.notebooks import CHAPTER_NAME, file_mode, write_atomically

__all__ = ["MANIFEST", "LOCK", "BESIDE", "CopyError", "Report", "content_digest", "copy_into"]

MANIFEST = ".ttr-edu-copy.json"  # per chapter slug (and per page copied along): digests of what we wrote, the release
LOCK = ".ttr-edu.lock"
BESIDE = "new-release"  # a changed release of an edited notebook goes beside it as NN_slug.new-release.ipynb
BACKUP = ".backup-"  # NN_slug.backup-YYYYmmdd-HHMMSS.ipynb: an edited notebook saved before --force replaced it
FORMAT = 3  # 3: content digests (cell sources); 2: byte digests, per slug; 1: byte digests, per file name


class CopyError(Exception):
    """A copy that cannot go ahead (a name taken, a file that cannot be written); reported in one line."""


def _bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_digest(data: bytes) -> str:
    """A digest of what a student can change in a file: for a notebook, each cell's type, source and attachments,
    in order (not its outputs, execution counts, metadata or JSON layout, which JupyterLab rewrites on open, run and
    autosave); for any other file, its bytes. A notebook that is not JSON is digested as bytes."""
    try:
        nb = json.loads(data.decode("utf-8"))
        cells = nb["cells"]
        content = [
            [
                cell.get("cell_type"),
                "".join(cell["source"]) if isinstance(cell.get("source"), list) else cell.get("source"),
                cell.get("attachments"),
            ]
            for cell in cells
        ]
    except (ValueError, TypeError, KeyError, AttributeError):
        return _bytes_digest(data)
    return "cells:" + _bytes_digest(json.dumps(content, sort_keys=True, ensure_ascii=False).encode("utf-8"))


def _digests(path: Path) -> set[str]:
    """The file's content digest and its byte digest (manifests before format 3 recorded bytes)."""
    data = path.read_bytes()
    return {content_digest(data), _bytes_digest(data)}


# -- the manifest: what we wrote into the student's folder -------------------------------------------------------------


def _load(path: Path) -> dict | None:
    """The manifest's JSON; ``{}`` when there is none, ``None`` when it is damaged."""
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _read_manifest(path: Path) -> tuple[dict[str, dict], dict[str, dict], set[str]]:
    """The notebooks (per chapter slug: ``file``, its name in DEST; ``written``, the digest of the notebook as we
    wrote it; ``release``, that of the newest release the student was given), the pages copied along (per path in
    DEST: ``written`` and ``release``) and the backups already reported to the student.

    A missing or damaged manifest counts as empty. Empty is the safe side: every notebook that differs from the
    course's then counts as edited and is kept. The manifests of older releases are read too.
    """
    manifest = _load(path)
    if manifest is None:
        print(f"note: {path} is damaged; treating every changed notebook as edited", file=sys.stderr)
        return {}, {}, set()
    pages = manifest.get("pages") if isinstance(manifest.get("pages"), dict) else {}
    pages = {name: entry for name, entry in pages.items() if isinstance(entry, dict)}
    backups = {b for b in manifest.get("backups", []) if isinstance(b, str)}
    if manifest.get("format") in (2, FORMAT) and isinstance(manifest.get("notebooks"), dict):
        notebooks = {slug: entry for slug, entry in manifest["notebooks"].items() if isinstance(entry, dict)}
        return notebooks, pages, backups
    converted = {}
    for name, digest in manifest.items():  # format 1: {"01_hebbian_memory.ipynb": sha256}
        match = CHAPTER_NAME.match(name)
        if match and isinstance(digest, str):
            converted[match[2]] = {"file": name, "written": digest, "release": digest}
    return converted, pages, backups


def _write_manifest(path: Path, notebooks: dict[str, dict], pages: dict[str, dict], backups: set[str]) -> None:
    content = {"format": FORMAT, "notebooks": notebooks, "pages": pages, "backups": sorted(backups)}
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
    taken = CopyError(f"cannot rename {old.name} to {new.name}: {new.name} already exists; move one of them away")
    try:
        os.link(old, new, follow_symlinks=False)
    except FileExistsError:
        raise taken from None
    except OSError:  # no hard links on this file system: a plain rename, after checking the name is free
        if new.exists() or new.is_symlink():
            raise taken from None
        os.rename(old, new)
        return
    old.unlink()


@dataclass
class Report:
    """What one run did, told in one or two lines."""

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


#: What a failed write tells the student to do, by its cause; a rerun carries on where the stopped one ended.
_REMEDY = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space within your disk quota",
    errno.EFBIG: "raise the shell's file-size limit (ulimit -f), which freeing space does not change",
    errno.EACCES: "make the folder writable for you",
    errno.EPERM: "make the folder writable for you",
    errno.EROFS: "choose a folder on a writable disk",
}


def _again(err: OSError) -> str:
    """What to do before running the command again, for the cause ``err`` names."""
    return f"{_REMEDY.get(err.errno, 'mend what the error names')}, then run the same command again"


def _write(path: Path, data: bytes) -> None:
    """Write atomically; a failure (a full disk) names the file, which is left as it was."""
    existed = path.exists()
    try:
        write_atomically(path, data)
    except OSError as err:
        left = "it is unchanged" if existed else "it was not created"
        raise CopyError(
            f"cannot write {path.name} in {path.parent}: {err.strerror or err}; {left} ({_again(err)})"
        ) from err


def _write_new(path: Path, data: bytes, unchanged: Path) -> Path:
    """:func:`_create_exclusive`, whose failure (a full disk) names the file it could not make and the student's
    notebook ``unchanged`` that it leaves as it was (a backup not made means nothing was replaced)."""
    try:
        return _create_exclusive(path, data)
    except OSError as err:
        raise CopyError(
            f"cannot write {path.name} in {path.parent}: {err.strerror or err}; your {unchanged.name} is unchanged "
            f"({_again(err)})"
        ) from err


def _sync(source: Path, data: bytes, dest: Path, manifest: dict, force: bool, stamp: str, report: Report) -> set[str]:
    """Bring one chapter (``data``: its student copy) into DEST; record it in ``manifest`` only after its files are
    written. Returns the names of the backups it made."""
    slug = CHAPTER_NAME.match(source.name)[2]
    want = content_digest(data)
    entry = dict(manifest.get(slug, {}))
    target = dest / source.name
    current = _existing(dest, slug, entry, target)
    label, made = source.name[:2], set()
    if current is None:
        _write(target, data)
        report.new.append(label)
        entry = {"file": target.name, "written": want, "release": want}
    else:
        have = _digests(current)
        if current != target:
            report.notes.append(f"renumbered {current.name} -> {target.name}")
        if want in have:  # the release's cells (a run interrupted after the write, before the manifest, ends here)
            if current != target:
                _move(current, target)
            report.current.append(label)
            entry = {"file": target.name, "written": want, "release": want}
        elif entry.get("written") in have:  # opened, run or saved, never edited: refresh
            _write(target, data)
            if current != target:
                current.unlink()
            report.refreshed.append(label)
            entry = {"file": target.name, "written": want, "release": want}
        else:  # edited by the student
            if current != target:
                _move(current, target)  # the edits follow the chapter's slug to its new number
            entry["file"] = target.name
            if force:
                backup_name = target.with_name(f"{target.stem}{BACKUP}{stamp}.ipynb")
                backup = _write_new(backup_name, target.read_bytes(), target)
                made.add(backup.name)
                _write(target, data)
                report.refreshed.append(label)
                report.notes.append(f"your edited {target.name} is backed up as {backup.name}")
                entry = {"file": target.name, "written": want, "release": want}
            else:
                report.kept.append(label)
                if entry.get("release") != want and entry.get("release") != _bytes_digest(data):  # a new release
                    beside = _put_beside(target, data, entry)
                    entry["beside"] = {"file": beside.name, "written": want}
                    entry["release"] = want
                    report.notes.append(f"a new version of {target.name} is beside it: {beside.name}")
    manifest[slug] = entry
    return made


def _sync_page(relative: PurePosixPath, data: bytes, dest: Path, pages: dict[str, dict], report: Report) -> None:
    """Bring one page the notebooks link to (``notation.md``) into DEST: written when missing or untouched since we
    wrote it; a page the student edited is kept as it is."""
    target, want = dest.joinpath(*relative.parts), content_digest(data)
    entry = pages.get(str(relative), {})
    if not target.exists() and not target.is_symlink():
        target.parent.mkdir(parents=True, exist_ok=True)
        _write(target, data)
        pages[str(relative)] = {"written": want, "release": want}
        return
    have = _digests(target) if target.is_file() and not target.is_symlink() else set()
    if want in have:
        pages[str(relative)] = {"written": want, "release": want}
    elif entry.get("written") in have:
        _write(target, data)
        pages[str(relative)] = {"written": want, "release": want}
    elif entry.get("release") != want:
        report.notes.append(f"kept your {relative} (edited); the course's new version of it was not copied")
        pages[str(relative)] = {**entry, "release": want}


def _retire_pages(dest: Path, pages: dict[str, dict], wanted: set[str]) -> None:
    """Pages an older release copied that this one no longer has (``notation.ipynb`` before the notation page was
    copied as Markdown): removed where untouched, kept where the student edited them, and forgotten either way."""
    for name in sorted(set(pages) - wanted):
        path = dest / name
        if path.is_file() and not path.is_symlink() and pages[name].get("written") in _digests(path):
            path.unlink()
        del pages[name]


def _put_beside(target: Path, data: bytes, entry: dict) -> Path:
    """Write a new release of an edited notebook beside it; replace an earlier one only if still untouched."""
    path = target.with_name(f"{target.stem}.{BESIDE}.ipynb")
    earlier = entry.get("beside") or {}
    if (
        path.is_file()
        and not path.is_symlink()
        and earlier.get("file") == path.name
        and earlier.get("written") in _digests(path)
    ):
        _write(path, data)
        return path
    return _write_new(path, data, target)


def copy_into(dest: Path, notebooks: dict[Path, bytes], pages: dict[PurePosixPath, bytes], force: bool) -> Report:
    """Bring ``notebooks`` (per chapter source: its student copy) and ``pages`` (per path in DEST) into ``dest``, a
    folder that exists, under its lock. Returns what was done.

    Raises:
        CopyError: a name is taken or a file cannot be written; what was written before stays recorded.
    """
    report = Report()
    with _locked(dest):
        # temporary files of a killed run (named by write_atomically); we hold the lock, so none is in use
        for leftover in [*dest.glob(".*.ipynb.*.tmp"), *dest.glob(".*.md.*.tmp"), *dest.glob(f".{MANIFEST}.*.tmp")]:
            leftover.unlink(missing_ok=True)
        manifest_path = dest / MANIFEST
        manifest, copied_pages, reported = _read_manifest(manifest_path)
        _name_unreported_backups(dest, reported, report)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        made: set[str] = set()  # this run's backups: reported only once the run has got through (a killed run never
        # prints its report, so the next run names them)
        for source, data in notebooks.items():
            made |= _sync(source, data, dest, manifest, force, stamp, report)
            _write_manifest(manifest_path, manifest, copied_pages, reported)  # after each chapter: it stays true
        for page, data in pages.items():
            _sync_page(page, data, dest, copied_pages, report)
        _retire_pages(dest, copied_pages, {str(page) for page in pages})
        _write_manifest(manifest_path, manifest, copied_pages, reported | made)
    return report


def _name_unreported_backups(dest: Path, reported: set[str], report: Report) -> None:
    """A run killed after it backed up an edited notebook never said so; name such backups now, once."""
    for backup in sorted(dest.glob(f"*{BACKUP}*.ipynb")):
        if backup.name not in reported and CHAPTER_NAME.match(backup.name.split(BACKUP)[0] + ".ipynb"):
            original = backup.name.split(BACKUP)[0] + ".ipynb"
            report.notes.append(
                f"{backup.name} holds your edits of {original} from before an earlier --force run that was stopped "
                f"(its {original} may now be the course's)"
            )
            reported.add(backup.name)
