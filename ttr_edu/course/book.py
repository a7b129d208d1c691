"""Build the book with MyST, and prove it executed.

``ttr-edu book --execute`` starts its own Jupyter server (this interpreter, ``--allow-root`` when root) and points
MyST at it (``JUPYTER_BASE_URL``/``JUPYTER_TOKEN``), so the server is always stopped afterwards: left to itself MyST
leaves the server it launched running. MyST runs with ``--strict`` (a notebook that could not execute is an error),
and the built content is then read back: every notebook page must hold outputs, and none an error, a widget with
no static figure before it, or a raw ``[@key]`` citation (:func:`page_problems`).

Everything MyST executes sees ``TTR_EDU_BOOK=1``: progress bars stay off there (``ttr_edu.progress``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager, nullcontext
from pathlib import Path

from ttr_edu._internal.progress import BOOK_ENV

PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"
RAW_CITATION = re.compile(r"\[-?@[A-Za-z][\w:-]*")


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
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
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
            process.terminate()  # Jupyter stops its kernels on SIGTERM
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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


def build(root: Path, *, site: bool = False, serve: bool = False, execute: bool = False) -> int:
    """Run MyST on ``root/book.yml``; with ``execute``, fail unless every notebook page executed cleanly.

    Raises:
        BookError: MyST is missing, the Jupyter server did not start, or the built pages show a problem.
    """
    myst = shutil.which("myst")
    if myst is None:
        raise BookError("the book needs MyST: pip install 'ttr-edu[book]'")
    command = [myst, "--config", "book.yml"]
    command += ["start"] if serve else ["build", "--site" if site else "--html", "--strict"]
    env = {**os.environ, BOOK_ENV: "1"}
    if execute:
        command.append("--execute")
    print("running:", " ".join(command), flush=True)
    with jupyter_server(root, env) if execute else nullcontext() as server:
        if server is not None:
            env["JUPYTER_BASE_URL"], env["JUPYTER_TOKEN"] = server
        status = subprocess.call(command, cwd=root, env=env)
    if status != 0 or serve or not execute:
        return status
    problems = site_problems(root / "_build" / "site" / "content")
    if problems:
        raise BookError(f"the book built, but {len(problems)} page problem(s); first: {problems[0]}")
    return 0
