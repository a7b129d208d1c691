"""What holds below the audit hook: an answer that has emptied the hook (pure Python that writes memory, no ctypes)
still reaches no other process, no file of the machine outside the sandbox, and dies with its grader.

Attackers did each of these (a hostile review): without bubblewrap an answer SIGKILLed the grader and the
class after it went ungraded, and its fork server went on grading; with bubblewrap an answer copied a classmate's
working copy, which the sandbox showed read-only with the rest of the machine."""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from tests.grading.submissions import RIGHT, submission
from ttr_edu.checks.grading import engine, sandbox

ROOT = Path(__file__).resolve().parents[2]
RELEASE_PATH = ROOT / "chapters" / "01_hebbian_memory.ipynb"
RELEASE = nbformat.read(RELEASE_PATH, as_version=4)

pytestmark = pytest.mark.notebook

#: Run by the grader's own Python, outside any sandbox: where the interpreter keeps its list of audit hooks, counted
#: from ``id(None)`` (both lie in the same binary, so the distance holds in the answer's process too).
_FIND_HOOKS = """
import ctypes, sys
def h(event, args): pass
sys.addaudithook(h)
readable = []
for line in open("/proc/self/maps"):
    span, mode = line.split()[:2]
    if mode.startswith("r"):
        readable.append(tuple(int(x, 16) for x in span.split("-")))
ok = lambda p: any(a <= p and p + 32 <= b for a, b in readable)
word = lambda p: ctypes.c_uint64.from_address(p).value
ctypes.pythonapi.PyInterpreterState_Get.restype = ctypes.c_void_p
interp = ctypes.pythonapi.PyInterpreterState_Get()
for offset in range(0, 1 << 19, 8):
    if not ok(interp + offset):
        break
    value = word(interp + offset)
    if value and ok(value) and word(value + 8) == id(list) and word(value + 16) == 1 and ok(word(value + 24)):
        if word(word(value + 24)) == id(h):
            print(interp + offset - id(None))
            break
"""

#: An answer's first lines: the audit hook list emptied through numpy's __array_interface__ over an address (no ctypes,
#: no audit event), as an attacker did; {offset} is what _FIND_HOOKS printed.
_UNHOOK = """
import numpy as _np, struct as _struct
class _Raw:
    pass
def _memory(address, size):
    raw = _Raw()
    raw.__array_interface__ = {{"data": (address, False), "shape": (size,), "typestr": "|u1", "version": 3}}
    return _np.asarray(raw)
_hooks = _struct.unpack("<Q", bytes(_memory(id(None) + {offset}, 8)))[0]
if _hooks:
    _memory(_hooks + 16, 8)[:] = 0  # Py_SIZE(list) = 0: no audit hook is called any more
"""


def _unhook() -> str:
    found = subprocess.run([sys.executable, "-c", _FIND_HOOKS], capture_output=True, text=True, timeout=60)
    if not found.stdout.strip():
        pytest.skip("the audit hook list was not found in this Python build")
    return _UNHOOK.format(offset=int(found.stdout))


def _with(answers: dict) -> nbformat.NotebookNode:
    nb = submission(RELEASE, "unsolved")
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nb


#: A grader in a process of its own (the one an answer may try to kill), without bubblewrap: grades the notebooks
#: named on its command line in turn and prints each score as soon as it has it.
_GRADER = """
import json, shutil, sys
import nbformat
from ttr_edu.checks.grading import engine, sandbox
which = shutil.which  # as on a machine without bubblewrap
shutil.which = lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k)
sandbox._bwrap.cache_clear()
assert sandbox._bwrap() is None
release = nbformat.read(sys.argv[1], as_version=4)
timeout = float(sys.argv[2])
for path in sys.argv[3:]:
    report = engine.grade(nbformat.read(path, as_version=4), release, timeout=timeout)
    print(json.dumps([report.score, [v.detail for v in report.verdicts if v.status != "PASS"]]), flush=True)
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_an_answer_past_the_audit_hook_cannot_stop_the_class_without_bubblewrap(tmp_path):
    """Three students graded without bubblewrap by a grader run as the same user; the second one's 1.1 cell empties
    the audit hook, reads its grader's pid from /proc, and tries to SIGKILL the grader, the fork server and its
    process group and to open the grader's memory. Everything else it hands in is right, and its 1.1 answer is right
    only where all of that failed: 9 points means the hook was gone (else opening /proc fails the cell) and nothing
    was reached; the students after it are graded."""
    attack = _unhook() + (
        "import os, signal\n"
        "_server = os.getppid()\n"
        "with open(f'/proc/{_server}/stat') as _f:\n"
        "    _grader = int(_f.read().rsplit(')', 1)[1].split()[1])\n"
        "_REACHED = []\n"
        "for _name, _try in (('kill the grader', lambda: os.kill(_grader, signal.SIGKILL)),\n"
        "                    ('kill the fork server', lambda: os.kill(_server, signal.SIGKILL)),\n"
        "                    ('kill the process group', lambda: os.kill(0, signal.SIGKILL)),\n"
        "                    ('signal every process', lambda: os.kill(-1, signal.SIGCONT)),\n"
        "                    ('open the grader memory', lambda: open(f'/proc/{_grader}/mem', 'r+b'))):\n"
        "    try:\n        _try()\n        _REACHED.append(_name)\n    except OSError:\n        pass\n"
        "def write(W, k, v):\n    return W if _REACHED else W + torch.outer(v, k)\n"
    )
    paths = []
    for name, answers in (("a", RIGHT), ("b", {**RIGHT, "ch01_write": attack}), ("c", RIGHT)):
        paths.append(tmp_path / f"{name}.ipynb")
        nbformat.write(_with(answers), paths[-1])
    graded = subprocess.run(
        [sys.executable, "-c", _GRADER, str(RELEASE_PATH), "30", *map(str, paths)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        start_new_session=True,
    )
    scores = [json.loads(line) for line in graded.stdout.splitlines()]
    assert graded.returncode == 0, (graded.returncode, scores, graded.stderr[-2000:])
    assert [score for score, _ in scores] == [9, 9, 9], scores


def test_the_fork_server_and_the_answers_die_with_the_grader(tmp_path):
    """Without bubblewrap, a grader killed while an answer runs takes the fork server and the answer's process with
    it (before, the fork server went on grading the later cells with no grader to report to)."""
    path = tmp_path / "slow.ipynb"
    nbformat.write(_with({**RIGHT, "ch01_write": "import time\ntime.sleep(300)\n" + RIGHT["ch01_write"]}), path)
    grader = subprocess.Popen(
        [sys.executable, "-c", _GRADER, str(RELEASE_PATH), "200", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        below: list[psutil.Process] = []
        while time.monotonic() < deadline and len(below) < 2:  # the fork server and the child of graded cell 1.1
            time.sleep(0.5)
            below = psutil.Process(grader.pid).children(recursive=True)
        assert len(below) >= 2, "the grader started no fork server and child"
        time.sleep(2)  # the child is asleep in the answer's cell by now
        grader.kill()
        grader.wait()
        gone, alive = psutil.wait_procs(below, timeout=10)
        alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert alive == [], [p.cmdline()[:3] for p in alive]
    finally:
        for process in psutil.Process().children(recursive=True):
            if process.pid == grader.pid or grader.pid in [p.pid for p in process.parents()]:
                process.kill()
        grader.kill()


def test_the_filter_lets_a_process_signal_only_itself():
    """The seccomp filter alone, in a process with no audit hook: a signal to itself (``os.kill(os.getpid())``,
    ``signal.raise_signal``, from a thread too) arrives; one to its parent, its process group or every process is
    refused, and so are the calls that reach another process or the kernel's mount and namespace interfaces."""
    script = (
        "import ctypes, errno, os, signal, threading\n"
        "from ttr_edu.checks.grading._no_processes import forbid_new_processes\n"
        "assert forbid_new_processes() is None\n"
        "got = []\n"
        "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "signal.raise_signal(signal.SIGUSR1)\n"
        "t = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGUSR1)); t.start(); t.join()\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def call(*args):\n"
        "    return errno.errorcode.get(ctypes.get_errno(), '?') if libc.syscall(*args) == -1 else 'allowed'\n"
        "x86 = os.uname().machine == 'x86_64'\n"
        "n = dict(pidfd_open=434, kcmp=312 if x86 else 272, unshare=272 if x86 else 97, setns=308 if x86 else 268,\n"
        "         personality=135 if x86 else 92, perf_event_open=298 if x86 else 241, bpf=321 if x86 else 280,\n"
        "         userfaultfd=323 if x86 else 282, io_uring_setup=425, tgkill=234 if x86 else 131)\n"
        "parent = os.getppid()\n"
        "result = {'self': len(got)}\n"
        "for name, target in (('parent', parent), ('group', 0), ('everyone', -1), ('own group', -os.getpgid(0))):\n"
        "    try:\n        os.kill(target, 0); result[name] = 'allowed'\n"
        "    except OSError as e:\n        result[name] = errno.errorcode[e.errno]\n"
        "result['tgkill parent'] = call(n['tgkill'], parent, parent, 0)\n"
        "result['pidfd_open'] = call(n['pidfd_open'], parent, 0)\n"
        "result['kcmp'] = call(n['kcmp'], os.getpid(), parent, 0, 0, 0)\n"
        "result['unshare'] = call(n['unshare'], 0x00020000)\n"  # CLONE_NEWNS
        "result['setns'] = call(n['setns'], 0, 0)\n"
        "result['personality'] = call(n['personality'], 0xFFFFFFFF)\n"
        "result['perf_event_open'] = call(n['perf_event_open'], 0, 0, -1, -1, 0)\n"
        "result['bpf'] = call(n['bpf'], 0, 0, 0)\n"
        "result['userfaultfd'] = call(n['userfaultfd'], 0)\n"
        "result['io_uring_setup'] = call(n['io_uring_setup'], 1, 0)\n"
        "print(__import__('json').dumps(result))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result.pop("self") == 3
    assert result == dict.fromkeys(result, "EPERM"), result


def test_without_bubblewrap_a_grader_run_as_root_lends_the_answers_no_capability():
    """As root, the answer's process gives up every capability (or becomes nobody): it cannot open the memory of a
    root process that keeps its capabilities, which an attacker's answer did to the grader's."""
    if os.geteuid() != 0:
        pytest.skip("the grader does not run as root here")
    script = (
        "import os, sys\n"
        "from ttr_edu.checks.grading import sandbox\n"
        "from ttr_edu.checks.grading._no_processes import drop_privileges\n"
        "scratch = sys.argv[1]\n"
        "print(drop_privileges([str(p) for p in sandbox._needed()], scratch, switch_user=True), file=sys.stderr)\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "try:\n    open(f'/proc/{os.getppid()}/mem', 'r+b'); mem = 'opened'\n"
        "except OSError as e:\n    mem = type(e).__name__\n"
        "print(status['CapEff'].strip(), status['CapPrm'].strip(), mem)\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "cell"
        folder.mkdir(mode=0o700)
        done = subprocess.run(
            [sys.executable, "-c", script, str(folder)], capture_output=True, text=True, env=_env(), timeout=120
        )
    assert done.stdout.split() == ["0000000000000000", "0000000000000000", "PermissionError"], done.stderr


def test_the_sandbox_shows_no_file_of_the_machine_the_answers_do_not_need(tmp_path):
    """With bubblewrap, an answer that reads other users' homes, /srv, the course's parent folder, a classmate's copy
    kept outside /tmp and the clone's solutions/ finds none of them, and scores nothing from them."""
    if sandbox._bwrap() is None:
        pytest.skip("bubblewrap is not available here")
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    classmate = Path(tempfile.mkdtemp(prefix="ttr-edu-classmate-", dir="/var/tmp"))
    try:
        (classmate / "01_hebbian_memory.ipynb").write_text("a classmate's solved notebook")
        targets = [
            "/home",
            "/srv",
            "/var",
            "/mnt",
            "/opt",
            str(Path.home()),
            str(tmp_path),
            str(classmate / "01_hebbian_memory.ipynb"),
            str(ROOT / "solutions" / "01_hebbian_memory.ipynb"),
            str(ROOT / "sources.yaml"),
        ]
        assert all(Path(t).exists() for t in targets[-2:])  # the clone is here: the test can fail
        peek = (
            "import os\nSEEN = []\n"
            f"for _path in {targets!r}:\n"
            "    try:\n"
            "        SEEN.append((_path, os.listdir(_path) if os.path.isdir(_path) else open(_path).read(9)))\n"
            "    except OSError:\n        pass\n"
            "def write(W, k, v):\n    return W if SEEN else W + torch.outer(v, k)\n"
        )
        report = engine.grade(_with({**RIGHT, "ch01_write": peek}), RELEASE, timeout=30, hide=[course])
    finally:
        for entry in classmate.iterdir():
            entry.unlink()
        classmate.rmdir()
    assert report.score == 9, [(v.heading, v.status, v.detail) for v in report.verdicts]
    assert ROOT not in sandbox._needed()  # the package's own folder only, not the clone's solutions/ beside it
