"""No new process, no reaching another process, for a graded answer: a seccomp filter, credentials, a parent's death.

The answer's process is locked down by an audit hook (:mod:`ttr_edu.checks._guard`), but a hook sees only what
raises an audit event (``_posixsubprocess.fork_exec`` raises none: an attacker's fresh interpreter, with no hook, scored
an unsolved notebook 9 of 9), and pure Python that writes memory (numpy's ``__array_interface__`` over an address from
``id()``) can empty the hook list altogether. So what must hold is put below it, where the answer's code cannot undo it:

- :func:`forbid_new_processes`, a seccomp filter (``seccomp(2)``: a filter cannot be removed by the process it holds,
  and ``PR_SET_NO_NEW_PRIVS`` comes with it). This process and its threads get ``EPERM`` for ``execve``, ``execveat``,
  ``fork``, ``vfork``, a ``clone`` that is not a new thread (``ENOSYS`` for ``clone3``, so that the C library falls
  back to ``clone`` for threads, which stay allowed), ``ptrace``, ``process_vm_readv``/``writev``; for a signal sent
  to any process but itself (``kill``, ``tkill``, ``tgkill``, ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``: an attacker's
  answer, past the hook and without bubblewrap, SIGKILLed the grader and the class after it went ungraded); for the
  ``pidfd`` calls, ``kcmp``, ``process_madvise``, file handles, ``perf_event_open``, ``bpf``, ``userfaultfd``,
  ``io_uring``, the key ring, ``personality``, mounts and namespaces.
- :func:`drop_privileges`: a grader run as root gives its forks every capability (``CAP_KILL``, ``CAP_SYS_PTRACE``,
  ``CAP_DAC_OVERRIDE``); the answer's process becomes ``nobody`` where it can still read Python and the package as
  ``nobody``, and else keeps uid 0 with no capability at all.
- :func:`die_with_parent`: ``PR_SET_PDEATHSIG(SIGKILL)``, so that the fork server dies with the grader and the answer's
  process with the fork server (without it, a fork server whose grader was killed went on grading).
- :func:`hide_memory`: the fork server is not dumpable, so that its ``/proc/<pid>/mem`` is closed to the answers.

Other architectures than x86-64 and AArch64, or a kernel without seccomp: the functions say so and change nothing
(grading.md, "Where the grader's protections hold").
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# <linux/prctl.h>, <linux/seccomp.h>, <linux/filter.h>, <linux/audit.h>, <linux/sched.h>
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_SET_DUMPABLE = 38, 22, 2, 4
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_CLONE_THREAD = 0x00010000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (the low word of args[0], little-endian)

# architecture: (AUDIT_ARCH_*, refused system calls, signal calls allowed only at this process, clone, clone3, first
# number of a foreign ABI or None). Refused besides starting a process and reading another's memory: reaching another
# process (pidfd_*, kcmp, process_madvise, process_mrelease), a file by handle (name_to_handle_at,
# open_by_handle_at), the kernel's other interfaces an answer never needs (perf_event_open, bpf, userfaultfd,
# io_uring_*, keyctl, add_key, request_key, personality) and the mount table and namespaces (mount, umount2,
# pivot_root, chroot, unshare, setns and the new mount API: open_tree .. fspick, mount_setattr)
_ARCHES = {
    "x86_64": (
        0xC000003E,
        (59, 322, 57, 58, 101, 310, 311)  # execve, execveat, fork, vfork, ptrace, process_vm_readv/writev
        + (434, 424, 438, 312, 440, 448, 303, 304, 298, 321, 323, 425, 426, 427, 250, 248, 249, 135)
        + (165, 166, 155, 161, 272, 308, 428, 429, 430, 431, 432, 433, 442),
        (62, 200, 234, 129, 297),  # kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo
        56,
        435,
        0x40000000,  # x32's calls are refused
    ),
    "aarch64": (
        0xC00000B7,
        (221, 281, 117, 270, 271)
        + (434, 424, 438, 272, 440, 448, 264, 265, 241, 280, 282, 425, 426, 427, 219, 217, 218, 92)
        + (40, 39, 41, 51, 97, 268, 428, 429, 430, 431, 432, 433, 442),
        (129, 130, 131, 138, 240),
        220,
        435,
        None,
    ),
}


def _program(
    arch: int,
    refused: tuple[int, ...],
    signals: tuple[int, ...],
    clone: int,
    clone3: int,
    foreign: int | None,
    pid: int,
) -> bytes:
    """The BPF program: one instruction is ``(code, jt, jf, k)``; jumps count the instructions they skip. ``signals``
    (kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo) are allowed only when their first argument is ``pid``,
    this process (its thread group: ``os.kill(os.getpid(), ...)``, ``signal.raise_signal`` and ``abort`` still work);
    the kernel reads that argument as a 32-bit ``pid_t``, the low word compared here, so 0 (the process group, which
    holds the fork server), -1 (every process the user may signal) and any other pid are refused."""
    deny = _RET_ERRNO | errno.EPERM
    code: list[tuple[int, int, int, int]] = [(_LD_ABS_W, 0, 0, _ARCH), (_JEQ_K, 1, 0, arch), (_RET_K, 0, 0, deny)]
    code.append((_LD_ABS_W, 0, 0, _NR))
    if foreign is not None:
        code += [(_JGE_K, 0, 1, foreign), (_RET_K, 0, 0, deny)]
    for number in refused:
        code += [(_JEQ_K, 0, 1, number), (_RET_K, 0, 0, deny)]
    for number in signals:  # each block returns once entered, so loading the argument over the number is safe
        code += [(_JEQ_K, 0, 4, number), (_LD_ABS_W, 0, 0, _ARG0), (_JEQ_K, 0, 1, pid & 0xFFFFFFFF)]
        code += [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, deny)]
    code += [(_JEQ_K, 0, 1, clone3), (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    code += [(_JEQ_K, 0, 3, clone), (_LD_ABS_W, 0, 0, _ARG0), (_JSET_K, 1, 0, _CLONE_THREAD), (_RET_K, 0, 0, deny)]
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("HBBI", *instruction) for instruction in code)


def forbid_new_processes() -> str | None:
    """Install the filter in this process (its threads started later inherit it); irreversible. Signals are allowed
    to this process only (its pid now: call it after the fork, in the process that runs the answer).

    Returns:
        None once installed, else why not (the machine, or the error of ``prctl``).
    """
    if platform.system() != "Linux" or platform.machine() not in _ARCHES:
        return f"no seccomp filter for {platform.system()} on {platform.machine()}"
    program = _program(*_ARCHES[platform.machine()], pid=os.getpid())
    buffer = ctypes.create_string_buffer(program)
    count = len(program) // 8

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(count, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"prctl(PR_SET_SECCOMP) failed: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    return None


def hide_memory() -> str | None:
    """Make this process not dumpable (``prctl(PR_SET_DUMPABLE, 0)``): its ``/proc/<pid>/mem``, ``maps`` and the like
    belong to root from now on, so another process of the same user cannot read or write its memory there (root,
    outside a user namespace, still can). Inherited by its forks.

    Returns:
        None, or why not (not Linux, or prctl's error).
    """
    if platform.system() != "Linux":
        return f"no PR_SET_DUMPABLE on {platform.system()}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_DUMPABLE, 0, None, 0, 0) != 0:
        return f"prctl(PR_SET_DUMPABLE) failed: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    return None


_PR_SET_PDEATHSIG, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 1, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
#: the user an answer's process becomes where the grader runs as root (without bubblewrap), if it has no entry
NOBODY = 65534


def die_with_parent(parent: int | None = None) -> bool:
    """Have the kernel SIGKILL this process when its parent ends (``PR_SET_PDEATHSIG``; cleared by a fork and by a
    change of credentials, so call it after :func:`drop_privileges`).

    Args:
        parent: the parent's pid as the parent saw it before the fork; a parent that died before the call (the race
            ``prctl`` leaves open) has handed this process to another (``getppid`` differs).

    Returns:
        False where the parent is known to be gone already (the caller ends), else True (also where the platform has
        no such call: not Linux).
    """
    if platform.system() != "Linux":
        return True
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL
    return parent is None or os.getppid() == parent


def _others_may_read(path: str) -> bool:
    """Whether a user with no relation to the owners may reach ``path`` (search permission on every folder above it)
    and read it."""
    import stat

    current = os.path.abspath(path)
    try:
        if not os.stat(current).st_mode & stat.S_IROTH:
            return False
        while True:
            mode = os.stat(current).st_mode
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(current)
            if parent == current:
                return True
            current = parent
    except OSError:
        return False


def drop_privileges(readable: list[str], writable: str, switch_user: bool) -> str | None:
    """Give up what a grader run as root would lend the answer's process; irreversible. Call it before any of the
    answer's code, after the last thing that needs the privileges.

    Where this process runs as root and ``switch_user`` (no bubblewrap: its user namespace maps only this uid) and
    ``nobody`` may read every path of ``readable`` (Python, its packages, this package), it becomes ``nobody``
    (``setresuid``, ``setresgid``, no supplementary groups), owner of ``writable`` (the scratch folder) and of nothing
    else: no other process of the grader's user can be signalled or read, and the grader's files are written only
    where anyone may write. Otherwise it keeps its uid and drops every capability (``capset`` to empty, the ambient
    set cleared): a root process without ``CAP_SYS_PTRACE`` cannot open the memory of one that holds more
    capabilities (the grader's), and without ``CAP_KILL`` nor ``CAP_DAC_OVERRIDE`` it is held by file permissions, but
    it still owns what root owns.

    Returns:
        None where it became ``nobody`` or was not root, else what holds instead, in words (for the grader's log).
    """
    if platform.system() != "Linux":
        return f"no capabilities to drop on {platform.system()}"
    root = os.geteuid() == 0
    if root and switch_user:
        unreadable = [path for path in readable if not _others_may_read(path)]
        if not unreadable:
            import pwd

            try:
                uid, gid = pwd.getpwnam("nobody")[2:4]
            except KeyError:
                uid = gid = NOBODY
            os.chmod(os.path.dirname(os.path.abspath(writable)), 0o711)  # reach the folder, list nothing beside it
            os.chown(writable, uid, gid)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)  # all three ids: no way back to root; every capability goes with them
            return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two of (effective, permitted, inheritable), all empty
    if libc.capset(header, data) != 0:
        return f"capset failed: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    if not root or not switch_user:  # bubblewrap's user namespace: its file systems are read-only already
        return None
    return (
        f"the answers run as root with no capabilities (user nobody cannot read {unreadable[0]}): they cannot "
        "signal or read the grader, but can write files root owns where the file system lets them"
    )
