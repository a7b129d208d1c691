"""`ttr-edu start` with a real JupyterLab: the course's settings are served, no way of stopping `ttr-edu` leaves a
server or a kernel running, Ctrl-C asks first and says what was saved, and a chapter that a student only opened, ran
and closed (saved by JupyterLab's own contents API) still gets the next release."""

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from jupyter_client import BlockingKernelClient

from tests.course.test_cli import course_copy
from tests.helpers import start_as_in_a_terminal
from ttr_edu.course import lab
from ttr_edu.course.book import _free_port
from ttr_edu.course.cli import main
from ttr_edu.course.sync import content_digest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "lab-test"


def wait_until(condition, timeout: float, what: str, log=lambda: ""):
    """Poll ``condition`` until it returns something true (returned), failing after ``timeout`` seconds, with what
    ``log()`` returns then: a test waits for what it needs, never for a fixed time."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}; the output so far:\n{log()}"
        time.sleep(0.2)


class Lab:
    """`ttr-edu start DEST CHAPTER...` in a session of its own (as in a terminal), its output collected."""

    def __init__(self, tmp_path: Path, *chapters: str, root: Path = ROOT, stdin=subprocess.DEVNULL):
        self.dest, self.port, self.log, self.runtime = tmp_path / "my-course", _free_port(), [], tmp_path / "runtime"
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.runtime), "PYTHONPATH": str(ROOT)}
        command = [
            sys.executable, "-m", "ttr_edu.course.cli", "--root", str(root), "start", str(self.dest), *chapters,
            "--no-browser", f"--port={self.port}", f"--IdentityProvider.token={TOKEN}",
        ]  # fmt: skip
        self.process = start_as_in_a_terminal(
            command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )
        fd = self.process.stdout.fileno()  # read as it comes: the Ctrl-C question ends without a newline
        chunks = iter(lambda: os.read(fd, 4096).decode(errors="replace"), "")
        threading.Thread(target=lambda: self.log.extend(chunks), daemon=True).start()
        wait_until(lambda: self.answers() or self.process.poll() is not None, 240, "JupyterLab to answer")
        assert self.process.poll() is None, self.text

    @property
    def text(self) -> str:
        return "".join(self.log)

    def api(self, path: str, method: str = "GET", body=None):
        data = None if body is None else json.dumps(body).encode()
        url = f"http://127.0.0.1:{self.port}{path}{'&' if '?' in path else '?'}token={TOKEN}"
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method), timeout=60) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def page_config(self) -> dict:
        """The page configuration JupyterLab's ``/lab`` page hands the browser (what it loads and leaves off)."""
        url = f"http://127.0.0.1:{self.port}/lab?token={TOKEN}"
        with urllib.request.urlopen(url, timeout=60) as response:
            html = response.read().decode()
        found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
        assert found, html[:2000]
        return json.loads(found.group(1))

    def answers(self) -> bool:
        try:
            self.api("/api/status")
            return True
        except OSError:
            return False

    def open_notebook(self, name: str) -> psutil.Process:
        """Open a notebook as JupyterLab does (a session, with its kernel); returns the kernel's process once the
        kernel is ready."""
        session = self.api("/api/sessions", "POST", {"path": name, "type": "notebook", "kernel": {"name": "python3"}})
        client = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{session['kernel']['id']}.json"))
        client.load_connection_file()
        # no heartbeat: on a loaded machine a beat arrives later than its 1 s time-to-dead and the client declares a
        # starting kernel dead ("Kernel died before replying to kernel_info"); readiness is its kernel_info reply
        client.start_channels(hb=False)
        try:
            client.wait_for_ready(timeout=120)  # it answers: started, not importing any more
        finally:
            client.stop_channels()
        server = psutil.Process(self.process.pid)
        return wait_until(
            lambda: next((p for p in server.children(recursive=True) if "ipykernel" in " ".join(p.cmdline())), None),
            120,
            "the kernel to start",
        )

    def run_in_browser_kernel(self, code: str) -> str:
        """Run ``code`` in the open notebook's kernel as the browser does, over JupyterLab's websocket (the server
        relays it to the kernel's channels); returns what it printed."""
        import asyncio
        import uuid

        from tornado.websocket import websocket_connect

        (kernel,) = self.api("/api/kernels")
        url = f"ws://127.0.0.1:{self.port}/api/kernels/{kernel['id']}/channels?token={TOKEN}"
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "", "session": "", "version": "5.3"}
        request = {"header": header, "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": []}
        request["content"] = {"code": code, "silent": False, "store_history": False, "allow_stdin": False}

        async def run() -> str:
            socket = await websocket_connect(url)
            await socket.write_message(json.dumps(request))
            printed = []
            while True:  # until the kernel is idle again: the shell's reply may come before the iopub output
                message = json.loads(await asyncio.wait_for(socket.read_message(), 120))
                if message["parent_header"].get("msg_id") != msg_id:
                    continue
                if message["msg_type"] == "stream":
                    printed.append(message["content"]["text"])
                if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                    socket.close()
                    return "".join(printed)

        return asyncio.run(run())

    def processes(self) -> list[psutil.Process]:
        """JupyterLab and its kernels (remembered, so that :meth:`stop` can end them whatever happened)."""
        found = psutil.Process(self.process.pid).children(recursive=True)
        self.seen = {*getattr(self, "seen", set()), *found}
        return found

    def stop(self):
        """After the test, whatever it did: nothing it started is left running."""
        if self.process.poll() is None:
            self.processes()
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for p in getattr(self, "seen", ()):
            try:
                p.kill()
            except psutil.Error:
                pass


def gone(processes: list[psutil.Process]) -> bool:
    return not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_the_course_settings_turn_the_news_off_open_markdown_rendered_and_end_a_closed_tabs_kernel(tmp_path):
    folder = lab.write_settings(tmp_path)
    overrides = json.loads((folder / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"] == {"markdown": "Markdown Preview"}
    assert overrides["@jupyterlab/notebook-extension:tracker"]["kernelShutdown"] is True  # a closed tab ends its kernel
    assert "--LabApp.news_url=None" in lab.lab_command(tmp_path, [])
    assert "--KernelManager.transport_encryption=auto" in lab.lab_command(tmp_path, [])  # this environment has CurveZMQ


def test_the_students_jupyterlab_leaves_nbgrader_off_and_keeps_what_was_off(tmp_path, monkeypatch):
    """nbgrader's menus belong to the instructor (``[dev]`` installs it into the same environment); JupyterLab reads
    what to leave off from the settings folder's ``page_config.json``, the way its page handler does here. What an
    administrator had turned off stays off, and what they had explicitly left on is not turned off (JupyterLab reads
    every key of a dict there as "off", so the file is written as a list)."""
    from jupyterlab_server.config import get_page_config

    settings = tmp_path / "app" / "settings"
    settings.mkdir(parents=True)
    admin = {"disabledExtensions": {"admin-off": True, "admin-on": False}}
    (settings / "page_config.json").write_text(json.dumps(admin))
    monkeypatch.setattr("jupyterlab.commands.get_app_dir", lambda: str(tmp_path / "app"))
    folder = lab.write_settings(tmp_path / "course")
    page = get_page_config([], str(folder))
    assert sorted(page["disabledExtensions"]) == ["@jupyter/nbgrader", "admin-off"]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_no_way_of_stopping_start_leaves_jupyterlab_or_a_kernel_running(tmp_path, signum):
    """SIGINT (Ctrl-C with no terminal to ask in), SIGHUP (the terminal closed), SIGTERM, and SIGKILL (no clean-up
    possible in ttr-edu): JupyterLab and its kernel end every time; a signal ttr-edu can catch gives one line, no
    traceback, and exit status 128 + the signal."""
    lab_ = Lab(tmp_path, "1")
    try:
        served = lab_.api("/lab/api/settings/@jupyterlab/apputils-extension:notification")["schema"]["properties"]
        assert served["fetchNews"]["default"] == "false"  # JupyterLab serves the course's settings: no news pop-up
        tracker = lab_.api("/lab/api/settings/@jupyterlab/notebook-extension:tracker")["schema"]["properties"]
        assert tracker["kernelShutdown"]["default"] is True  # closing a chapter's tab shuts its kernel down
        assert "@jupyter/nbgrader" in lab_.page_config()["disabledExtensions"]  # no instructor menus for a student
        kernel = lab_.open_notebook("01_hebbian_memory.ipynb")  # it answered over the encrypted channels
        (connection,) = lab_.runtime.glob("kernel-*.json")
        assert "curve_publickey" in json.loads(connection.read_text())  # the server gave the kernel its keys
        assert lab_.run_in_browser_kernel("print(6 * 7)") == "42\n"  # and relays the browser's cells to it
        tree = lab_.processes()
        assert kernel in tree and len(tree) >= 2  # JupyterLab and the kernel
        if signum == signal.SIGINT:
            os.killpg(lab_.process.pid, signum)  # what the terminal does on Ctrl-C
        else:
            os.kill(lab_.process.pid, signum)  # closing the terminal signals its controlling process
        lab_.process.wait(timeout=120)
        wait_until(lambda: gone(tree), 60, "JupyterLab and its kernel to end")
    finally:
        lab_.stop()
    text = lab_.text
    assert "Traceback" not in text and "without encryption" not in text, text
    if signum == signal.SIGKILL:
        assert lab_.process.returncode == -signal.SIGKILL
        return
    assert lab_.process.returncode == 128 + signum, text
    ours = [line for line in text.splitlines() if line.startswith("ttr-edu:")]
    assert len(ours) == 1 and ours[0].startswith("ttr-edu: JupyterLab stopped; no notebook was saved"), text


@pytest.mark.slow
def test_ctrl_c_asks_first_and_then_names_exactly_what_was_saved(tmp_path):
    """In a terminal, Ctrl-C asks (as JupyterLab's own Ctrl-C does): "n" keeps JupyterLab serving, "y" stops it. The
    closing line names the one notebook saved during the session (through the contents API, as JupyterLab saves)
    and says that later edits were not saved."""
    leader, follower = pty.openpty()
    lab_ = Lab(tmp_path, "1", "4", stdin=follower)
    os.close(follower)
    try:
        name = "04_delta_rule.ipynb"
        model = lab_.api(f"/api/contents/{name}?content=1")
        model["content"]["cells"][0]["source"] += "\nMY SAVED EDIT"
        lab_.api(f"/api/contents/{name}", "PUT", {"type": "notebook", "format": "json", "content": model["content"]})
        tree = [*lab_.processes()]
        for answer in ("n", "y"):
            asked = lab_.text.count("stop JupyterLab?")
            os.killpg(lab_.process.pid, signal.SIGINT)
            wait_until(lambda: lab_.text.count("stop JupyterLab?") > asked, 180, "the question", lambda: lab_.text)
            assert lab_.answers() and lab_.process.poll() is None  # nothing is stopped before the answer
            os.write(leader, f"{answer}\n".encode())
            if answer == "n":
                # the answer's line, not the question's "(… JupyterLab goes on)": it says what the next Ctrl-C does
                gone_on = "ttr-edu: JupyterLab goes on; Ctrl-C asks again, and Ctrl-C twice stops it."
                wait_until(lambda: gone_on in lab_.text, 180, "JupyterLab to go on", lambda: lab_.text)
                assert lab_.answers()
        lab_.process.wait(timeout=120)
        wait_until(lambda: gone(tree), 60, "JupyterLab to end")
    finally:
        lab_.stop()
        os.close(leader)
    text = lab_.text
    assert lab_.process.returncode == 130 and "Traceback" not in text, text
    last = [line for line in text.splitlines() if line.startswith("ttr-edu: JupyterLab stopped")]
    assert len(last) == 1, text
    assert f"saved during this session: {name} at " in last[0] and "01_hebbian_memory" not in last[0]
    assert "were not saved" in last[0]
    assert "MY SAVED EDIT" in (lab_.dest / name).read_text()


@pytest.mark.slow
def test_a_chapter_only_opened_run_and_closed_in_jupyterlab_gets_every_change_of_the_next_release(tmp_path):
    """Every chapter is opened through JupyterLab's contents API, its first code cell run by Jupyter's own client in
    a kernel of its own (which fills in the kernel's metadata and the outputs), and saved through the contents API, as
    JupyterLab saves and autosaves. Then a
    release changes every chapter and the notation page: the next `copy` refreshes all of them, keeps nothing, puts
    nothing beside them."""
    import nbformat
    from nbclient import NotebookClient

    chapters = sorted(p.name for p in (ROOT / "chapters").glob("*.ipynb"))
    lab_ = Lab(tmp_path)
    try:
        written = {name: (lab_.dest / name).read_bytes() for name in chapters}
        lab_.processes()
        for name in chapters:
            nb = nbformat.from_dict(lab_.api(f"/api/contents/{name}?content=1")["content"])  # opened
            client = NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(lab_.dest)}})
            with client.setup_kernel():
                first = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code")
                client.execute_cell(nb.cells[first], first)
            lab_.api(f"/api/contents/{name}", "PUT", {"type": "notebook", "format": "json", "content": nb})  # saved
        saved = {name: (lab_.dest / name).read_bytes() for name in chapters}
    finally:
        lab_.process.send_signal(signal.SIGTERM)
        lab_.process.wait(timeout=120)
        lab_.stop()
    assert all(saved[name] != written[name] for name in chapters)  # JupyterLab's save did rewrite every file
    assert all(content_digest(saved[name]) == content_digest(written[name]) for name in chapters)

    release = course_copy(tmp_path, "next", change=chapters)
    (release / "notation.md").write_text((release / "notation.md").read_text() + "\nNEW IN next\n")
    out = subprocess.run(
        [sys.executable, "-m", "ttr_edu.course.cli", "--root", str(release), "copy", str(lab_.dest)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"0 new, {len(chapters)} refreshed, 0 up to date." in out.stdout and "kept" not in out.stdout, out.stdout
    assert all("NEW IN next" in (lab_.dest / name).read_text() for name in [*chapters, "notation.md"])
    assert not list(lab_.dest.glob("*.new-release*"))


def test_opening_running_and_saving_is_not_an_edit_but_a_changed_source_is():
    nb = json.loads((ROOT / "chapters" / "01_hebbian_memory.ipynb").read_text())
    written = json.dumps(nb).encode()
    opened = dict(nb, metadata={"kernelspec": {"name": "python3"}, "language_info": {"name": "python", "version": "3"}})
    run = json.loads(json.dumps(opened))
    for cell in run["cells"]:
        if cell["cell_type"] == "code":
            cell.update(execution_count=1, outputs=[{"output_type": "stream", "name": "stdout", "text": "hi"}])
            cell["metadata"]["execution"] = {"iopub.status.idle": "2026-01-01T00:00:00Z"}
    for same in (opened, run):
        assert content_digest(json.dumps(same, indent=4).encode()) == content_digest(written)
    edited = json.loads(written)
    edited["cells"][-1]["source"] = "my answer"
    deleted, added = json.loads(written), json.loads(written)
    del deleted["cells"][0]
    added["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "my notes"})
    retyped = json.loads(written)
    retyped["cells"][0]["cell_type"] = "raw"
    for changed in (edited, deleted, added, retyped):
        assert content_digest(json.dumps(changed).encode()) != content_digest(written)


def test_start_runs_jupyterlab_with_the_course_settings(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr(lab, "run_foreground", lambda command, dest, resume: launched.append(command) or 0)
    dest = tmp_path / "my-course"
    assert main(["--root", str(ROOT), "start", str(dest), "1"]) == 0
    (command,) = launched
    folder = dest / lab.SETTINGS_DIR
    assert f"--LabApp.app_settings_dir={folder}" in command and (folder / "overrides.json").is_file()


def test_start_gives_the_course_its_own_workspaces_and_keeps_them(tmp_path, monkeypatch):
    """n39b's N7: the course's JupyterLab shared ~/.jupyter/lab/workspaces, so another JupyterLab's tabs (and their
    kernels) were restored into the course. Its workspaces now live in the course folder, kept from start to start,
    while its settings are written afresh."""
    from jupyterlab.labapp import LabApp

    assert "workspaces_dir" in LabApp.class_traits(config=True)  # the option JupyterLab reads
    launched = []
    monkeypatch.setattr(lab, "run_foreground", lambda command, dest, resume: launched.append(command) or 0)
    dest = tmp_path / "my-course"
    assert main(["--root", str(ROOT), "start", str(dest), "1"]) == 0
    workspaces = dest / lab.SETTINGS_DIR / lab.WORKSPACES
    assert f"--LabApp.workspaces_dir={workspaces}" in launched[0] and workspaces.is_dir()
    (workspaces / "default-37a8.jupyterlab-workspace").write_text("{}")  # what JupyterLab saves there
    (dest / lab.SETTINGS_DIR / "stale.json").write_text("{}")
    assert main(["--root", str(ROOT), "start", str(dest), "1"]) == 0
    assert f"--LabApp.workspaces_dir={workspaces}" in launched[1]
    assert (workspaces / "default-37a8.jupyterlab-workspace").read_text() == "{}"
    assert not (dest / lab.SETTINGS_DIR / "stale.json").exists()


def _server_file(runtime: Path, pid: int, root: Path) -> None:
    runtime.mkdir(parents=True, exist_ok=True)
    info = {"url": "http://127.0.0.1:8899/", "token": "abc", "root_dir": str(root), "pid": pid, "port": 8899}
    (runtime / f"jpserver-{pid}.json").write_text(json.dumps(info))


def test_a_second_start_on_a_served_folder_names_the_running_jupyterlab_and_starts_none(tmp_path, monkeypatch, capsys):
    """A JupyterLab that serves the folder (its server file, written by Jupyter, names a live process): one line
    with its address, exit 0, nothing started or copied."""
    launched = []
    monkeypatch.setattr(lab, "run_foreground", lambda command, dest, resume: launched.append(command) or 0)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    dest = tmp_path / "my-course"
    dest.mkdir()
    _server_file(tmp_path / "runtime", os.getpid(), dest)  # this process is alive: it stands for the JupyterLab
    assert main(["--root", str(ROOT), "start", str(dest), "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert launched == [] and not list(dest.glob("*.ipynb")), out
    assert len(out) == 1 and "already serves" in out[0] and "http://127.0.0.1:8899/lab?token=abc" in out[0]


def test_a_start_after_a_jupyterlab_that_died_starts_normally(tmp_path, monkeypatch):
    """A server file left by a JupyterLab that was killed (its process is gone) does not stop a new start."""
    launched = []
    monkeypatch.setattr(lab, "run_foreground", lambda command, dest, resume: launched.append(command) or 0)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    dest = tmp_path / "my-course"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process
    _server_file(tmp_path / "runtime", dead.pid, dest)
    other = tmp_path / "elsewhere"
    _server_file(tmp_path / "runtime", os.getpid(), other)  # a live JupyterLab on another folder does not count
    assert main(["--root", str(ROOT), "start", str(dest), "1"]) == 0
    assert len(launched) == 1


@pytest.mark.slow
def test_a_second_start_while_the_first_serves_the_folder_starts_no_second_jupyterlab(tmp_path, monkeypatch, capsys):
    """With a real JupyterLab from `ttr-edu start`: a second `start` on its folder prints its address and exits 0."""
    launched = []
    monkeypatch.setattr(lab, "run_foreground", lambda command, dest, resume: launched.append(command) or 0)
    lab_ = Lab(tmp_path, "1")
    try:
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(lab_.runtime))
        assert main(["--root", str(ROOT), "start", str(lab_.dest), "1"]) == 0
    finally:
        lab_.stop()
    out = capsys.readouterr().out.strip().splitlines()
    assert launched == [] and len(out) == 1 and f":{lab_.port}/lab?token={TOKEN}" in out[0], out
