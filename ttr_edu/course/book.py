"""Build the book with MyST, and prove it executed.

``ttr-edu book`` executes every notebook: it starts its own Jupyter server (this interpreter, ``--allow-root`` when
root) and points MyST at it (``JUPYTER_BASE_URL``/``JUPYTER_TOKEN``), so the server is always stopped afterwards: left
to itself MyST leaves the server it launched running. MyST runs with ``--strict`` (a notebook that could not execute
is an error), and the built content is then read back: every notebook page must hold outputs, and none an error, a
widget with no static figure before it, a raw ``[@key]`` citation, or an output that the book's theme would show as raw
Markdown or ``$...$`` maths (:func:`page_problems`). The theme (its ``@myst-theme/jupyter`` outputs, through
thebe-core's JupyterLab renderers) renders HTML outputs and typesets their maths with MathJax, but its Markdown
renderer has no parser and shows the source as text; so ``claims.say`` writes HTML while the book builds.
``--no-execute`` is a quick preview and says so.

MyST and the Jupyter server each run in a process group of their own, which is emptied when the build ends, however
it ends: MyST's theme server (``node server.js``) does not outlive a failed HTML build. The web theme is downloaded
on first use; offline, ``--site`` builds the pages' content with a stub theme put in its place
(:func:`theme_folder`), and an HTML build that cannot download the theme says so and names ``--site``.

Everything MyST executes sees ``TTR_EDU_BOOK=1``: progress bars stay off there (``ttr_edu._internal.progress``), and
an unsolved exercise's check prints that the exercise is done in JupyterLab, not "[not attempted yet]" (a reader of
the book has no kernel); a page that shows that line anyway fails the build.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager, nullcontext
from pathlib import Path

from ttr_edu._internal.install import pip_install_extra
from ttr_edu._internal.progress import BOOK_ENV

PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"
RAW_CITATION = re.compile(r"\[-?@[A-Za-z][\w:-]*")
#: what the book's theme renders (its outputs go through JupyterLab's renderers, with MathJax for the maths in HTML)
RENDERED = {"text/html", "image/png", "image/jpeg", "image/gif", "image/svg+xml", PLOTLY, WIDGET}
#: what it shows as raw text: its renderers have no Markdown parser, and it loads no LaTeX renderer for outputs
SHOWN_RAW = ("text/markdown", "text/latex")
#: what an unsolved exercise's check prints in the student's kernel: never shown in the book
NOT_ATTEMPTED = "[not attempted yet]"
RAW_MATH = re.compile(r"(?<![\\\w])\$[^$\s][^$\n]*\$")


def theme_folder(root: Path) -> Path:
    """Where MyST keeps the pinned web theme of ``root/book.yml`` (mystmd names a URL template's folder by the
    SHA-256 of its URL). With a ``template.yml`` there, MyST uses that folder and downloads nothing: an offline
    ``--site`` build needs only a stub holding ``myst: v1`` and ``kind: site``."""
    import hashlib

    match = re.search(r"^\s*template:\s*(\S+)\s*$", (root / "book.yml").read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise BookError(f"{root / 'book.yml'}: no site template")
    return root / "_build" / "templates" / "site" / hashlib.sha256(match.group(1).encode()).hexdigest()


class BookError(Exception):
    """The book did not build, or built without executing; the message says what to do."""


#: a theme for content-only (``--site``) builds: MyST needs a template folder, and a site build uses none of it
THEME_STUB = "myst: v1\nkind: site\n"
OFFLINE = (
    "MyST could not get the book's web theme (downloaded from the URL pinned in book.yml on first use; offline?). "
    "Offline, `ttr-edu book --site` builds the pages' content in _build/site; online, run this again"
)


def _is_stub(theme: Path) -> bool:
    try:
        return [p.name for p in theme.iterdir()] == ["template.yml"] and (
            (theme / "template.yml").read_text(encoding="utf-8") == THEME_STUB
        )
    except OSError:
        return False


def _prepare_theme(root: Path, site: bool) -> Path:
    """A ``--site`` build gets the stub theme where the pinned theme is missing; any other build gets the stub
    removed, so that MyST downloads the real theme instead of rendering with the stub."""
    theme = theme_folder(root)
    if site and not (theme / "template.yml").is_file():
        theme.mkdir(parents=True, exist_ok=True)
        (theme / "template.yml").write_text(THEME_STUB, encoding="utf-8")
        print(f"note: --site needs no web theme; put a stub in its place ({theme.relative_to(root)})", flush=True)
    elif not site and _is_stub(theme):
        shutil.rmtree(theme)
        print("note: removed the --site theme stub; MyST downloads the pinned web theme", flush=True)
    return theme


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a reused id owned by someone else: not ours
        return False
    return True


def stop_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop ``process`` (started with ``start_new_session=True``) and everything left in its process group: SIGTERM,
    then SIGKILL after ``grace`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if not hasattr(os, "killpg") or not _group_alive(process.pid):
        return
    os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _group_alive(process.pid):
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.1)


def _run_in_own_group(command: list[str], cwd: Path, env: dict[str, str]) -> int:
    """Run ``command`` in a process group of its own and wait; Ctrl-C is passed on to it, and whatever it started
    is stopped when it ends. Returns its exit status (130 after Ctrl-C)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
    interrupted = False
    try:
        while True:
            try:
                status = process.wait()
                break
            except KeyboardInterrupt:  # the terminal's Ctrl-C reached us alone: pass it on
                interrupted = True
                if hasattr(os, "killpg") and _group_alive(process.pid):
                    os.killpg(process.pid, signal.SIGINT)
    finally:
        stop_group(process)
    return 130 if interrupted else status


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyter_server(root: Path, env: dict[str, str], timeout: float = 180.0):
    """A Jupyter server for MyST to execute on; yields ``(base_url, token)`` and always stops it."""
    token, port = secrets.token_hex(16), _free_port()
    command = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}/"
            deadline = time.monotonic() + timeout
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    last = (log.read().strip().splitlines() or ["(no output)"])[-1]
                    raise BookError(f"the Jupyter server for executing the book did not start: {last}")
                try:
                    with urllib.request.urlopen(f"{url}api/status?token={token}", timeout=5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise BookError(f"the Jupyter server did not answer within {timeout:.0f} s") from None
                    time.sleep(0.5)
            yield url, token
        finally:
            stop_group(process, grace=30)  # Jupyter stops its kernels on SIGTERM


def _outputs(node):
    """Every Jupyter output object in a page's mdast."""
    if isinstance(node, dict):
        if node.get("type") == "output" and isinstance(node.get("jupyter_data"), dict):
            yield node["jupyter_data"]
        for child in node.get("children", []):
            yield from _outputs(child)
    elif isinstance(node, list):
        for child in node:
            yield from _outputs(child)


def _text(node) -> str:
    """The reader-visible text of a page (text nodes only, so code and outputs do not count)."""
    if isinstance(node, dict):
        own = node.get("value", "") if node.get("type") == "text" else ""
        return own + " ".join(_text(child) for child in node.get("children", []))
    if isinstance(node, list):
        return " ".join(_text(child) for child in node)
    return ""


def _blocks(node):
    """Each code cell's outputs, in order (one list per ``block``)."""
    if isinstance(node, dict):
        if node.get("type") == "block":
            outs = list(_outputs(node))
            if outs:
                yield outs
            return
        for child in node.get("children", []):
            yield from _blocks(child)
    elif isinstance(node, list):
        for child in node:
            yield from _blocks(child)


def _content(value) -> str:
    """The text of an output's data or stream (in the site JSON: a string, a list of lines, or ``{"content": ...}``)."""
    if isinstance(value, dict):
        value = value.get("content", "")
    if isinstance(value, list):
        value = "".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


def _raw_output(out: dict) -> str | None:
    """How an output would show raw Markdown or maths in the book, or ``None``: a Markdown or LaTeX output with
    nothing the theme renders beside it, or plain text (a stream too) holding ``$...$``."""
    data = out.get("data") or {}
    if out.get("output_type") == "stream":
        text = _content(out.get("text"))
    elif set(data) & RENDERED:
        return None
    elif shown := [mime for mime in SHOWN_RAW if mime in data]:
        return f"a {shown[0]} output shown as raw text: {_content(data[shown[0]])[:80]!r}"
    else:
        text = _content(data.get("text/plain"))
    math = RAW_MATH.search(text)
    return f"raw maths {math.group()[:60]!r} in a text output" if math else None


def page_problems(page: dict) -> list[str]:
    """What is wrong with one page of MyST's ``--site`` content (a ``_build/site/content/*.json`` file)."""
    where = page.get("location", "?")
    mdast = page.get("mdast", {})
    problems = []
    if RAW_CITATION.search(_text(mdast)):
        problems.append(
            f"{where}: a raw citation {RAW_CITATION.search(_text(mdast)).group()}... (key not in references.bib?)"
        )
    if not where.endswith(".ipynb"):
        return problems
    outputs = list(_outputs(mdast))
    if not any(out.get("output_type") in ("stream", "display_data", "execute_result") for out in outputs):
        problems.append(f"{where}: no outputs: the notebook did not execute")
    for out in outputs:
        if out.get("output_type") == "error":
            problems.append(f"{where}: error output {out.get('ename')}: {str(out.get('evalue'))[:100]}")
        data = out.get("data") or {}
        if "text/html" in data and "plotly" in str(data["text/html"]).lower() and PLOTLY not in data:
            problems.append(f"{where}: a plotly figure saved as HTML only (no plotly JSON): it will not draw")
        if raw := _raw_output(out):
            problems.append(f"{where}: {raw} (claims.say writes HTML while the book builds)")
        if NOT_ATTEMPTED in _content(out.get("text")) + _content(data.get("text/plain")):
            problems.append(
                f"{where}: an exercise's check shows {NOT_ATTEMPTED!r} to the book's readers, who have no kernel "
                "(the checks print a note that the exercise is done in JupyterLab while the book builds)"
            )
    for block in _blocks(mdast):
        seen_figure = False
        for out in block:
            data = out.get("data") or {}
            seen_figure |= PLOTLY in data or "image/png" in data or "image/svg+xml" in data
            if WIDGET in data and not seen_figure:
                problems.append(f"{where}: a widget output with no static figure before it (frozen in the book)")
    return problems


def site_problems(content: Path) -> list[str]:
    """:func:`page_problems` over every page in ``content`` (``_build/site/content``)."""
    pages = sorted(content.glob("*.json"))
    if not pages:
        return [f"{content}: no pages were built"]
    problems = []
    for path in pages:
        page = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(page, dict) and "mdast" in page:
            problems += page_problems(page)
    return problems


def find_myst() -> str | None:
    """The ``myst`` command: the one installed beside this interpreter first (``ttr-edu book`` run by its full path,
    ``/path/to/venv/bin/ttr-edu``, with the venv not activated, so its ``bin`` is not on ``PATH``), else the first on
    ``PATH``; ``None`` when there is none. ``sys.executable`` is not resolved: a venv's ``python`` is a link to the
    base interpreter, whose folder holds no ``myst``."""
    beside = Path(sys.executable).parent / ("myst.exe" if os.name == "nt" else "myst")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("myst")


def build(root: Path, *, site: bool = False, serve: bool = False, execute: bool = True) -> int:
    """Run MyST on ``root/book.yml``; with ``execute`` (the default), fail unless every notebook page executed
    cleanly. Returns 0, or 130 after Ctrl-C.

    Raises:
        BookError: MyST is missing or failed (offline: the message names ``--site``), the Jupyter server did not
            start, or the built pages show a problem.
    """
    myst = find_myst()
    if myst is None:
        raise BookError(f"the book needs MyST, which the [book] extra installs: {pip_install_extra('book')}")
    theme = _prepare_theme(root, site)
    command = [myst, "--config", "book.yml"]
    command += ["start"] if serve else ["build", "--site" if site else "--html", "--strict"]
    env = {**os.environ, BOOK_ENV: "1"}
    if execute:
        command.append("--execute")
    else:
        print(
            "note: --no-execute: the notebooks do not run, so the pages show no outputs, figures or checks", flush=True
        )
    print("running:", " ".join(command), flush=True)
    with jupyter_server(root, env) if execute else nullcontext() as server:
        if server is not None:
            env["JUPYTER_BASE_URL"], env["JUPYTER_TOKEN"] = server
        status = _run_in_own_group(command, root, env)
    if status == 130 or (serve and status == 0):
        return status
    if status != 0:
        if not site and not (theme / "template.yml").is_file():
            raise BookError(OFFLINE)
        raise BookError(f"MyST stopped with exit status {status}; its messages are above")
    if not execute:
        return 0
    problems = site_problems(root / "_build" / "site" / "content")
    if problems:
        raise BookError(f"the book built, but {len(problems)} page problem(s); first: {problems[0]}")
    return 0
