"""Where the answers' process runs: a bubblewrap sandbox where the platform has one, else a process group.

With ``bwrap`` (bubblewrap; ``apt install bubblewrap``) the process gets new namespaces (PID, network, IPC, UTS,
user and cgroup where allowed), every file system read-only (``/dev`` too: its device nodes only), a private ``/tmp``,
``/dev/shm`` and scratch folder, the grader's home and the course folder hidden (gradebook, sources with hidden tests,
other students' files), no capabilities, and it dies with the grader (``--die-with-parent``; the PID namespace ends
every process it started); ``/tmp``, ``/dev/shm`` and the scratch folder are in memory, :data:`SCRATCH_BYTES` each,
and the engine empties them after every graded cell. Without it, the process leads a process group of its own,
which the grader kills when it is done, and the answer's process relies on the audit hook of
:func:`ttr_edu.checks._guard.lock_down` alone for files, processes and the network.
:func:`protection` says which holds; ``grading.md`` ("Where the grader's protections hold") says what each means.
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
        return "bubblewrap sandbox (read-only files, no network, own PID namespace, course folder hidden)"
    return "process group and the answer's audit hook (bubblewrap is not available here)"


def _needed() -> list[Path]:
    """What the answers' process reads: Python itself, its environment's packages, this package.

    Never the grader's whole ``sys.path``: nbgrader puts the course folder there (it loads the course's
    ``nbgrader_config.py`` from it), and binding it into the sandbox would show the answers ``source/``, the other
    students' ``submitted/`` folders and the gradebook that :func:`command` hides."""
    import site

    import ttr_edu

    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
    paths.add(Path(ttr_edu.__file__).resolve().parents[1])
    paths.update(Path(p) for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir())
    return sorted({p.resolve() for p in paths})


def command(argv: list[str], scratch: Path, hide: list[Path]) -> tuple[list[str], bool]:
    """``argv`` wrapped in the sandbox, and whether it is one. ``scratch`` is the only writable folder; ``hide``
    (the course folder) is replaced by an empty one, except the parts Python and the package need."""
    bwrap = _bwrap()
    if bwrap is None:
        return argv, False
    hidden = [p.resolve() for p in [*hide, Path.home()] if p.exists()]
    size = ["--size", str(SCRATCH_BYTES)]
    # /dev: the device nodes, read-only (a writable /dev would carry files from one graded cell to the next), with
    # /dev/shm a small private tmpfs the engine empties after every graded cell, like /tmp
    wrapped = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--remount-ro", "/dev", *size, "--tmpfs", "/dev/shm"]
    wrapped += ["--proc", "/proc", *size, "--tmpfs", "/tmp"]
    for folder in hidden:
        wrapped += ["--tmpfs", str(folder)]
    for path in _needed():
        if any(path == h or h in path.parents for h in hidden) or str(path).startswith("/tmp"):
            wrapped += ["--ro-bind", str(path), str(path)]
    # the scratch folder is the sandbox's own, in memory and limited: nothing the answers write reaches the disk
    for folder in hidden:  # read-only once what Python needs inside them is bound
        wrapped += ["--remount-ro", str(folder)]
    wrapped += [*size, "--tmpfs", str(scratch), "--chdir", str(scratch)]
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
