"""JupyterLab for ``ttr-edu start``: the command, the course's settings, and a run in the foreground that no way of
stopping ``ttr-edu`` leaves behind.

- Ctrl-C asks first, as JupyterLab's own Ctrl-C does, because edits not yet saved in the browser are lost when the
  server stops (the server cannot save them: they live in the browser tab until JupyterLab saves). A second Ctrl-C,
  or no terminal to ask in, stops at once. The closing line names the notebooks saved during the session and when.
- Closing the terminal (SIGHUP) or SIGTERM stops JupyterLab the same clean way, its kernels included.
- A second ``ttr-edu start`` on a folder that a JupyterLab still serves starts no second one: it prints that
  JupyterLab's address (:func:`running_server`) and exits 0. A JupyterLab that died does not count.
- A ``ttr-edu`` that is killed outright (SIGKILL) cannot clean up; on Linux the kernel then sends JupyterLab a
  SIGTERM (``PR_SET_PDEATHSIG``), and JupyterLab shuts its kernels down.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ttr_edu._internal.install import pip_install_extra

__all__ = ["SETTINGS", "SETTINGS_DIR", "lab_command", "run_foreground", "running_server", "server_url"]

#: JupyterLab settings for the course, as JupyterLab's ``overrides.json`` takes them (the student can still change
#: them in JupyterLab's settings editor): no news pop-up and no update check (the course runs offline too); a
#: linked Markdown page (``notation.md``) opens rendered, by jupyterlab-myst, with no kernel of its own; and closing a
#: chapter's tab shuts its kernel down. A chapter opened by a link to it starts a kernel, as any notebook does (Run
#: All needs one: with JupyterLab's ``notebook_starts_kernel`` off it asks for a kernel and runs nothing), so the
#: student who follows "Next" through the course holds one kernel per open tab, not one per chapter ever opened.
SETTINGS = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Markdown Preview"}},
    "@jupyterlab/notebook-extension:tracker": {"kernelShutdown": True},
}
#: JupyterLab extensions the student's JupyterLab leaves off. nbgrader's menus and "Create Assignment" panel are for
#: the instructor, who installs it with the ``[dev]`` extra into the same environment; a student who opens the course
#: with ``ttr-edu start`` from there should not meet them. (JupyterLab reads these from ``page_config.json`` in the
#: application settings folder; disabling an extension that is not installed does nothing.)
DISABLED_EXTENSIONS = ("@jupyter/nbgrader",)
SETTINGS_DIR = ".ttr-edu-lab"  # in the student's folder: JupyterLab's application settings for the course
#: in :data:`SETTINGS_DIR`: the course's own JupyterLab workspaces (``--LabApp.workspaces_dir``), so that the tabs of
#: the student's other JupyterLabs (kept in ``~/.jupyter/lab/workspaces``) are not restored into the course, with their
#: kernels, nor the course's into theirs
WORKSPACES = "workspaces"
ASK_SECONDS = 10  # how long the Ctrl-C question waits for an answer before JupyterLab goes on (Jupyter waits 5 s)


class UsageError(Exception):
    """JupyterLab cannot be started as asked; reported in one line."""


def lab_command(dest: Path, options: list[str]) -> list[str]:
    """JupyterLab on ``dest`` through this very interpreter (works without activating the venv), with the course's
    settings (:data:`SETTINGS`) and no news feed fetched.

    As root (containers, cloud notebooks) Jupyter needs ``--allow-root``. ``options`` go to JupyterLab as given, after
    ours, so a student's own option wins.
    """
    if importlib.util.find_spec("jupyterlab") is None:
        raise UsageError(
            f"JupyterLab is not installed for {sys.executable}: the [course] extra installs it: "
            f"{pip_install_extra('course')}"
        )
    command = [sys.executable, "-m", "jupyterlab", str(dest), "--LabApp.news_url=None", *_encrypted_kernels()]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in options:
        command.append("--allow-root")
    return command + options


def _encrypted_kernels() -> list[str]:
    """The option that has JupyterLab give each kernel CurveZMQ keys where the kernel says it takes them: the
    traffic between server and kernel is then encrypted, and ipykernel (7.4 here) no longer warns in the student's
    terminal, at every kernel start, that it runs "over TCP without encryption". ``auto`` leaves a kernel that declares
    no support as it was; no option where ``jupyter_client`` lacks it or ``libzmq`` was built without CurveZMQ."""
    try:
        import zmq
        from jupyter_client.manager import KernelManager
    except ImportError:
        return []
    if not zmq.has("curve") or "transport_encryption" not in KernelManager.class_trait_names():
        return []
    return ["--KernelManager.transport_encryption=auto"]


def write_settings(dest: Path) -> Path:
    """Write JupyterLab's application settings for the course into ``dest/.ttr-edu-lab`` and return the folder, for
    ``--LabApp.app_settings_dir``: ``overrides.json`` (:data:`SETTINGS`) and ``page_config.json``
    (:data:`DISABLED_EXTENSIONS` off). Its ``workspaces`` folder (:data:`WORKSPACES`, for ``--LabApp.workspaces_dir``)
    is made if missing and otherwise kept as it is.

    That option replaces JupyterLab's own settings folder, so what it holds (overrides that other packages or the
    administrator installed) is copied first, and ``overrides.json`` is theirs with the course's settings on top.
    """
    from jupyterlab.commands import get_app_dir

    default, folder = Path(get_app_dir()) / "settings", dest / SETTINGS_DIR
    if folder.is_dir():  # written afresh, but for the course's workspaces (its open tabs), kept from start to start
        for entry in folder.iterdir():
            if entry.name != WORKSPACES:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    if default.is_dir():
        shutil.copytree(default, folder, ignore=shutil.ignore_patterns("overrides.json"), dirs_exist_ok=True)
    folder.mkdir(exist_ok=True)
    (folder / WORKSPACES).mkdir(exist_ok=True)
    overrides = _read_json(default / "overrides.json")
    for plugin, values in SETTINGS.items():
        overrides[plugin] = {**overrides.get(plugin, {}), **values}
    (folder / "overrides.json").write_text(json.dumps(overrides, indent=2) + "\n", encoding="utf-8")
    page_config = _read_json(folder / "page_config.json")
    disabled = page_config.get("disabledExtensions", [])
    if isinstance(disabled, dict):  # a list, as JupyterLab reads this file: it turns every key of a dict into "off"
        disabled = [name for name, off in disabled.items() if off]
    page_config["disabledExtensions"] = sorted({*disabled, *DISABLED_EXTENSIONS})
    (folder / "page_config.json").write_text(json.dumps(page_config, indent=2) + "\n", encoding="utf-8")
    return folder


def _read_json(path: Path) -> dict:
    """A settings file as a dict; an empty one for a missing or unreadable file (it is rewritten whole)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def running_server(dest: Path) -> dict | None:
    """The Jupyter server (a JupyterLab that ``ttr-edu start`` or anyone else started) that still serves ``dest``
    as its root folder, or ``None``. Read from the server files in Jupyter's runtime folder (``jpserver-*.json``,
    ``JUPYTER_RUNTIME_DIR`` if set), as ``jupyter server list`` reads them: a file whose process is gone is not a
    running server (Jupyter removes it)."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:  # no Jupyter server installed: none can be running from here
        return None
    want = Path(dest).resolve()
    for info in list_running_servers():
        try:
            if Path(str(info.get("root_dir", ""))).resolve() == want:
                return info
        except (OSError, ValueError):
            continue
    return None


def server_url(info: dict) -> str:
    """The address of a running server's JupyterLab, with its token when it has one (as JupyterLab prints it)."""
    url = str(info.get("url", "")).rstrip("/")
    token = info.get("token")
    return f"{url}/lab?token={token}" if token else f"{url}/lab"


class _Stopped(Exception):
    def __init__(self, signum: int):
        self.signum = signum


def _raise_stopped(signum, frame):
    raise _Stopped(signum)


def _die_with_parent():
    """In JupyterLab's process, before it starts (Linux): receive SIGTERM when ``ttr-edu`` dies, however it dies."""
    parent = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # ttr-edu died before the line above: nobody will send the signal
        os.kill(os.getpid(), signal.SIGTERM)


def _notebooks(dest: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in sorted(dest.glob("*.ipynb")) if p.is_file()}


def _saved_since(dest: Path, before: dict[str, float]) -> str:
    """The notebooks saved in ``dest`` since ``before`` (their modification times), with the time of the last save."""
    saved = [(name, t) for name, t in _notebooks(dest).items() if before.get(name) != t]
    if not saved:
        return "no notebook was saved during this session"
    when = ", ".join(f"{name} at {time.strftime('%H:%M:%S', time.localtime(t))}" for name, t in saved)
    return f"saved during this session: {when}"


def _ask_to_stop(dest: Path, before: dict[str, float]) -> bool:
    """After a Ctrl-C: whether to stop JupyterLab. Without a terminal to ask in, yes; a second Ctrl-C, yes."""
    if sys.stdin is None or not sys.stdin.isatty():
        return True
    print(
        f"\nttr-edu: stop JupyterLab? Edits not saved yet (a notebook tab marked ●) would be lost: save them first "
        f"(Ctrl-S); so far {_saved_since(dest, before)}. Stop now? (y/[n]; with no answer in {ASK_SECONDS} s "
        "JupyterLab goes on) ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    try:
        answer = _answer(sys.stdin.fileno(), ASK_SECONDS)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return True
    if answer.startswith("y"):
        return True
    # The next Ctrl-C asks again; only one that comes while the question is open stops at once.
    print("ttr-edu: JupyterLab goes on; Ctrl-C asks again, and Ctrl-C twice stops it.", file=sys.stderr, flush=True)
    return False


def _answer(fd: int, seconds: float) -> str:
    """The first line typed on the terminal ``fd`` within ``seconds`` (lower case), or "" if none came. Read from the
    file descriptor itself (a terminal gives a line per read, and nothing stays in a buffer for the next question);
    an empty read, which a terminal can give spuriously, is not an answer."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        line = os.read(fd, 1024).decode(errors="replace").strip().lower()
        if line:
            return line
        time.sleep(0.1)
    return ""


def _stop(process: subprocess.Popen) -> None:
    """JupyterLab's own clean shutdown (SIGTERM: kernels included, no prompt); after 30 s its process group is
    killed (its kernels, which poll their parent, then end by themselves)."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # the terminal is gone (SIGHUP)
        pass


def run_foreground(command: list[str], dest: Path, resume: str) -> int:
    """Run ``command`` (JupyterLab on ``dest``) and wait for it.

    Ctrl-C asks first (:func:`_ask_to_stop`); SIGHUP and SIGTERM stop at once. Either way JupyterLab and its kernels
    are shut down, one line says what was saved, and the exit status is 128 + the signal (130 for Ctrl-C).
    """
    if not hasattr(os, "killpg"):  # pragma: no cover - Windows: the console signals JupyterLab itself
        previous = signal.signal(signal.SIGINT, lambda *_: None)  # a no-op handler, unlike SIG_IGN, is not inherited
        try:
            status = subprocess.Popen(command).wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        return 130 if status == -signal.SIGINT else status
    before = _notebooks(dest)
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.getsignal(signum) for signum in handled}
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGHUP, _raise_stopped)
    process, signum, asked = None, None, False
    try:
        # its own session and no standard input: the terminal's Ctrl-C, and the answer to our question, reach
        # ttr-edu alone, which asks before it stops JupyterLab
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec)
        while True:
            # one try holds the question and the wait, so a Ctrl-C that lands anywhere between them (a loaded
            # machine can pause ttr-edu just after the answer) asks again instead of escaping as a traceback
            try:
                if asked:
                    if _ask_to_stop(dest, before):
                        signum = signal.SIGINT
                        break
                    asked = False
                status = process.wait()  # JupyterLab ended by itself (File > Shut Down)
                break
            except KeyboardInterrupt:
                asked = True
    except _Stopped as stopped:
        signum = stopped.signum
    except KeyboardInterrupt:  # a Ctrl-C after the decision was taken: stop, as that Ctrl-C asks
        signum = signal.SIGINT
    try:
        if signum is None:
            return status
        for each in handled:  # nothing may cut the shutdown short
            signal.signal(each, signal.SIG_IGN)
        if process is not None and process.poll() is None:
            _stop(process)
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
    _say(
        f"ttr-edu: JupyterLab stopped; {_saved_since(dest, before)} (edits after a notebook's last save, Ctrl-S or "
        f"JupyterLab's autosave, were not saved); resume: {resume}"
    )
    return 128 + signum
