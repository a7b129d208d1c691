"""Where the answers' process runs: a bubblewrap sandbox where the platform has one, else a process group.

With ``bwrap`` (bubblewrap; ``apt install bubblewrap``) the process gets new namespaces (PID, network, IPC, UTS,
user and cgroup where allowed) and a root built from what it needs, read-only: ``/usr`` (with ``/bin``, ``/lib``... as
the machine has them), the dynamic linker's and the C library's files of ``/etc`` (:data:`ETC`), Python's prefix, its
environment's packages and this package's own folder (:func:`_needed`); nothing else of the machine exists there (no
``/home``, ``/root``, ``/srv``, ``/var``, ``/opt``, no course folder, no clone's ``solutions/``). It gets ``/dev``'s
device nodes read-only, a ``/proc`` of its own PID namespace, a private ``/tmp``, ``/dev/shm`` and scratch folder, no
capabilities, and it dies with the grader (``--die-with-parent``; the PID namespace ends every process it started);
``/tmp``, ``/dev/shm`` and the scratch folder are in memory, :data:`SCRATCH_BYTES` each, and the engine empties them
after every graded cell. Without it, the process leads a process group of its own, which the grader kills when it is
done, and files are guarded by the answer's user (``nobody`` where a root grader can switch to it, see
:func:`ttr_edu.checks.grading._no_processes.drop_privileges`) and by the audit hook of
:func:`ttr_edu.checks._guard.lock_down`, which code that writes memory can remove. :func:`protection` says which
holds; ``grading.md`` ("Where the grader's protections hold") says what each means.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["command", "protection", "environment", "SCRATCH_BYTES"]

#: What the answers of one notebook may write, in all, inside the sandbox.
SCRATCH_BYTES = 256 << 20


@functools.lru_cache(maxsize=1)
def _bwrap() -> str | None:
    """The bubblewrap executable, if it is installed and can create its namespaces here (a container may forbid it)."""
    found = shutil.which("bwrap")
    if found is None:
        return None
    probe = [found, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--", "/bin/true"]
    try:
        ok = subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return found if ok else None


def protection() -> str:
    """How the answers' process is contained on this machine, in words."""
    if _bwrap() is not None:
        return "bubblewrap sandbox (only the files Python needs, read-only; no network; own PID namespace)"
    return "process group and the answer's audit hook (bubblewrap is not available here)"


def _needed() -> list[Path]:
    """What the answers' process reads besides the system's own folders: Python itself, its environment's packages,
    this package's own folder (not the folder above it: in a clone that is the course's repository, ``solutions/``
    included).

    Never the grader's whole ``sys.path``: nbgrader puts the course folder there (it loads the course's
    ``nbgrader_config.py`` from it), and binding it into the sandbox would show the answers ``source/``, the other
    students' ``submitted/`` folders and the gradebook."""
    import site

    import ttr_edu

    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
    paths.add(Path(ttr_edu.__file__).resolve().parent)
    paths.update(Path(p) for p in site.getsitepackages() if Path(p).is_dir())
    return sorted({p.resolve() for p in paths})


#: The system's folders the answers' process may read (what exists of them): programs and libraries, and of ``/etc``
#: only what the dynamic linker and the C library read. Nothing else of the machine is in the sandbox: no ``/home``,
#: ``/root``, ``/srv``, ``/var``, ``/mnt``, ``/opt``, ``/media`` or the folder the course or the venv lies in (only
#: the exact folders of :func:`_needed`).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
    "/etc/nsswitch.conf", "/etc/passwd", "/etc/group",
)  # fmt: skip


def _outermost(paths: list[Path]) -> list[Path]:
    """``paths`` without those that lie inside another of them (bound once, with what is inside)."""
    return [p for p in paths if not any(q != p and q in p.parents for q in paths)]


def command(argv: list[str], scratch: Path, hide: list[Path]) -> tuple[list[str], bool]:
    """``argv`` wrapped in the sandbox, and whether it is one. ``scratch`` is the only writable folder; ``hide``
    (the course folder) is never bound in, even where it lies inside a folder Python needs (then it is replaced by an
    empty one, but for the parts Python and the package need)."""
    bwrap = _bwrap()
    if bwrap is None:
        return argv, False
    hidden = [p.resolve() for p in [*hide, Path.home()] if p.exists()]
    size = ["--size", str(SCRATCH_BYTES)]
    # the root is an empty folder in memory: only what is bound below exists (an attacker's answer read a classmate's
    # working copy in /home when the sandbox bound the whole machine read-only)
    wrapped = [bwrap, "--tmpfs", "/"]
    for system in SYSTEM:
        if os.path.islink(system):  # merged /usr: /lib -> usr/lib
            wrapped += ["--symlink", os.readlink(system), system]
        elif os.path.isdir(system):
            wrapped += ["--ro-bind", system, system]
    for file in ETC:
        if os.path.exists(file):
            wrapped += ["--ro-bind", file, file]
    # /dev: the device nodes, read-only (a writable /dev would carry files from one graded cell to the next), with
    # /dev/shm a small private tmpfs the engine empties after every graded cell, like /tmp; /proc: of the sandbox's PID
    # namespace (a child reads the memory it has mapped there before it sets its memory limit)
    wrapped += ["--dev", "/dev", "--remount-ro", "/dev", *size, "--tmpfs", "/dev/shm"]
    wrapped += ["--proc", "/proc", *size, "--tmpfs", "/tmp"]
    needed = [p for p in _needed() if not any(str(p) == s or str(p).startswith(s + "/") for s in SYSTEM)]
    bound = _outermost(needed)
    for path in bound:
        if not str(path).startswith("/tmp/"):  # under /tmp: bound after the sandbox's own /tmp, below
            wrapped += ["--ro-bind", str(path), str(path)]
    for path in bound:
        if str(path).startswith("/tmp/"):
            wrapped += ["--ro-bind", str(path), str(path)]
    for folder in hidden:  # a hidden folder inside a bound one: emptied, then what Python needs inside it bound again
        if any(b in folder.parents or b == folder for b in bound):
            wrapped += ["--tmpfs", str(folder)]
            wrapped += [a for p in needed if folder in p.parents for a in ("--ro-bind", str(p), str(p))]
            wrapped += ["--remount-ro", str(folder)]
    # the scratch folder is the sandbox's own, in memory and limited: nothing the answers write reaches the disk
    wrapped += [*size, "--tmpfs", str(scratch), "--chdir", str(scratch)]
    wrapped += ["--remount-ro", "/"]
    wrapped += ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--"]
    return wrapped + argv, True


def environment(scratch: Path) -> dict[str, str]:
    """The answers' process's whole environment: nothing of the grader's but what Python and torch need."""
    env = {
        "PATH": os.defpath,
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "TRITON_CACHE_DIR": str(scratch / "triton"),
        "NBGRADER_EXECUTION": "autograde",
        # Triton kernels run in Triton's interpreter, on the CPU: a CUDA context does not survive the fork of one
        # process per graded cell, and the verdicts are the same
        "TRITON_INTERPRET": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    return env
