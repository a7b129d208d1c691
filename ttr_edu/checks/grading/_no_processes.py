"""No new process, and no reading of another's memory, for a graded answer: a seccomp filter (Linux).

The answer's process is locked down by an audit hook (:mod:`ttr_edu.checks._guard`), but a hook sees only what
raises an audit event, and ``_posixsubprocess.fork_exec`` raises none: an answer could start a fresh interpreter with
no hook, no lock-down and the whole package, and have it compute the answer (an attacker scored an unsolved notebook
9 of 9 that way). So the kernel refuses it: once :func:`forbid_new_processes` has run, this process and its threads
get ``EPERM`` for ``execve``, ``execveat``, ``fork``, ``vfork``, a ``clone`` that is not a new thread, ``ptrace`` and
``process_vm_readv``/``writev`` (``ENOSYS`` for ``clone3``, so that the C library falls back to ``clone`` for threads,
which stay allowed). A filter cannot be removed by the process it holds (``seccomp(2)``), and ``PR_SET_NO_NEW_PRIVS``
comes with it. Other architectures than x86-64 and AArch64, or a kernel without seccomp: the function says so and
changes nothing (grading.md, "What holds where").
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# <linux/prctl.h>, <linux/seccomp.h>, <linux/filter.h>, <linux/audit.h>, <linux/sched.h>
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_SET_DUMPABLE = 38, 22, 2, 4
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_CLONE_THREAD = 0x00010000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (the low word of args[0], little-endian)

# architecture: (AUDIT_ARCH_*, refused system calls, clone, clone3, first number of a foreign ABI or None)
_ARCHES = {
    "x86_64": (0xC000003E, (59, 322, 57, 58, 101, 310, 311), 56, 435, 0x40000000),  # x32's calls are refused
    "aarch64": (0xC00000B7, (221, 281, 117, 270, 271), 220, 435, None),
}


def _program(arch: int, refused: tuple[int, ...], clone: int, clone3: int, foreign: int | None) -> bytes:
    """The BPF program: one instruction is ``(code, jt, jf, k)``; jumps count the instructions they skip."""
    deny = _RET_ERRNO | errno.EPERM
    code: list[tuple[int, int, int, int]] = [(_LD_ABS_W, 0, 0, _ARCH), (_JEQ_K, 1, 0, arch), (_RET_K, 0, 0, deny)]
    code.append((_LD_ABS_W, 0, 0, _NR))
    if foreign is not None:
        code += [(_JGE_K, 0, 1, foreign), (_RET_K, 0, 0, deny)]
    for number in refused:
        code += [(_JEQ_K, 0, 1, number), (_RET_K, 0, 0, deny)]
    code += [(_JEQ_K, 0, 1, clone3), (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    code += [(_JEQ_K, 0, 3, clone), (_LD_ABS_W, 0, 0, _ARG0), (_JSET_K, 1, 0, _CLONE_THREAD), (_RET_K, 0, 0, deny)]
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("HBBI", *instruction) for instruction in code)


def forbid_new_processes() -> str | None:
    """Install the filter in this process (its threads started later inherit it); irreversible.

    Returns:
        None once installed, else why not (the machine, or the error of ``prctl``).
    """
    if platform.system() != "Linux" or platform.machine() not in _ARCHES:
        return f"no seccomp filter for {platform.system()} on {platform.machine()}"
    program = _program(*_ARCHES[platform.machine()])
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
