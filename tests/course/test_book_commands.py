"""`ttr-edu book` says what it does: by default it executes every notebook, --no-execute says the pages will have no
outputs, offline the theme error names --site, and a failed build leaves no Jupyter server, kernel or theme server
running. MyST itself is replaced by a small script here (the real build is test_book.py's)."""

import json
import shutil
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest

from ttr_edu.course import book
from ttr_edu.course.book import THEME_STUB, theme_folder
from ttr_edu.course.cli import main

ROOT = Path(__file__).resolve().parents[2]
GOOD_PAGE = {
    "location": "/chapters/01_x.ipynb",
    "mdast": {
        "type": "root",
        "children": [
            {"type": "paragraph", "children": [{"type": "text", "value": "Text"}]},
            {
                "type": "block",
                "children": [{"type": "output", "jupyter_data": {"output_type": "stream", "text": "PASS"}}],
            },
        ],
    },
}


def clone(tmp_path: Path) -> Path:
    """The smallest folder `ttr-edu book` accepts as a clone: book.yml (with its pinned theme) and solutions/."""
    root = tmp_path / "clone"
    (root / "solutions").mkdir(parents=True)
    (root / "book.yml").write_text((ROOT / "book.yml").read_text(encoding="utf-8"), encoding="utf-8")
    return root


def fake_myst(tmp_path: Path, monkeypatch, body: str, venv_bin: Path | None = None) -> Path:
    """A `myst` on PATH that runs ``body`` (Python) with ``argv`` and ``env`` at hand; it records its arguments.
    With ``venv_bin``, it is put there instead, beside a ``sys.executable`` of that folder, and PATH holds only the
    system's folders (a venv that is not activated). Otherwise the MyST beside this interpreter is not looked at."""
    folder = venv_bin or tmp_path / "bin"
    folder.mkdir(parents=True)
    script = folder / "myst"
    script.write_text(
        f"#!{sys.executable}\nimport json, os, subprocess, sys, time, urllib.request\nfrom pathlib import Path\n"
        f"Path({str(tmp_path / 'argv.json')!r}).write_text(json.dumps(sys.argv[1:]))\n{body}\n"
    )
    script.chmod(0o755)
    if venv_bin is None:
        monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
        monkeypatch.setattr(book, "find_myst", lambda: shutil.which("myst"))
    else:
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    return tmp_path / "argv.json"


WRITE_GOOD_PAGE = (
    "content = Path('_build/site/content'); content.mkdir(parents=True, exist_ok=True)\n"
    f"(content / '01.json').write_text({json.dumps(json.dumps(GOOD_PAGE))})\n"
)


def test_the_documented_command_executes_every_notebook(tmp_path, monkeypatch, capsys):
    root = clone(tmp_path)
    argv = fake_myst(tmp_path, monkeypatch, WRITE_GOOD_PAGE)
    monkeypatch.setattr(book, "jupyter_server", lambda root, env: nullcontext(("http://127.0.0.1:1/", "t")))
    assert main(["--root", str(root), "book", "--site"]) == 0
    assert "--execute" in json.loads(argv.read_text())
    assert main(["--root", str(root), "book", "--site", "--execute"]) == 0  # the old spelling still works
    assert "--execute" in json.loads(argv.read_text())


def test_myst_is_found_beside_the_interpreter_when_its_venv_is_not_activated(tmp_path, monkeypatch, capsys):
    """`/path/to/venv/bin/ttr-edu book` without activating the venv: its bin folder is not on PATH, but MyST,
    installed by the same pip, is beside the interpreter."""
    root = clone(tmp_path)
    venv_bin = tmp_path / "venv" / "bin"
    argv = fake_myst(tmp_path, monkeypatch, "", venv_bin=venv_bin)
    assert shutil.which("myst") != str(venv_bin / "myst")
    assert book.find_myst() == str(venv_bin / "myst")
    assert main(["--root", str(root), "book", "--site", "--no-execute"]) == 0, capsys.readouterr().err
    assert json.loads(argv.read_text())[:3] == ["--config", "book.yml", "build"]


def test_no_execute_says_the_pages_have_no_outputs(tmp_path, monkeypatch, capsys):
    root = clone(tmp_path)
    argv = fake_myst(tmp_path, monkeypatch, WRITE_GOOD_PAGE)
    assert main(["--root", str(root), "book", "--site", "--no-execute"]) == 0
    assert "--execute" not in json.loads(argv.read_text())
    assert "the pages show no outputs" in capsys.readouterr().out


def test_offline_the_theme_error_names_the_offline_recipe(tmp_path, monkeypatch, capsys):
    root = clone(tmp_path)
    offline = "print('request to https://github.com/... failed, reason: getaddrinfo ENOTFOUND github.com')"
    fake_myst(tmp_path, monkeypatch, offline + "\nsys.exit(1)")
    assert main(["--root", str(root), "book", "--no-execute"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not get the book's web theme" in err and "ttr-edu book --site" in err


def test_site_puts_a_stub_theme_in_place_and_html_takes_it_away(tmp_path, monkeypatch, capsys):
    root = clone(tmp_path)
    fake_myst(tmp_path, monkeypatch, WRITE_GOOD_PAGE)
    theme = theme_folder(root)
    assert main(["--root", str(root), "book", "--site", "--no-execute"]) == 0
    assert (theme / "template.yml").read_text() == THEME_STUB
    assert main(["--root", str(root), "book", "--no-execute"]) == 0  # the fake MyST "downloads" nothing
    assert not theme.exists(), "an HTML build must not render with the content-only stub"
    theme.mkdir(parents=True)
    (theme / "template.yml").write_text("myst: v1\nkind: site\n# a real theme\n")
    (theme / "server.js").write_text("")
    assert main(["--root", str(root), "book", "--no-execute"]) == 0
    assert (theme / "server.js").exists(), "a downloaded theme is never removed"


def _processes(marker: str) -> list[str]:
    # -ww: whole command lines (ps cuts them at 80 columns when it cannot tell a terminal's width)
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line and "ps -eo" not in line]


@pytest.mark.slow
def test_a_failed_build_leaves_no_jupyter_server_kernel_or_theme_server(tmp_path, monkeypatch, capsys):
    """MyST starts a kernel on our Jupyter server and a theme server of its own, then fails: all three are gone
    when `ttr-edu book` returns."""
    root = clone(tmp_path)
    marker = str(tmp_path)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # the kernel's command line names it
    fake_myst(
        tmp_path,
        monkeypatch,
        f"""
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "theme-server {marker}"])
base, token = os.environ["JUPYTER_BASE_URL"], os.environ["JUPYTER_TOKEN"]
request = urllib.request.Request(f"{{base}}api/kernels?token={{token}}", data=b"{{}}", method="POST",
                                 headers={{"Content-Type": "application/json"}})
urllib.request.urlopen(request, timeout=120).close()
for _ in range(1200):  # until both are up: up to 4 minutes on a loaded machine, no longer than they take
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    if "ipykernel" in ps and {str(tmp_path / "runtime")!r} in ps and "theme-server" in ps:
        Path({str(tmp_path / "seen")!r}).write_text(ps)
        break
    time.sleep(0.2)
print("a chapter failed to execute", flush=True)
sys.exit(1)
""",
    )
    assert main(["--root", str(root), "book", "--site"]) == 2
    assert "MyST stopped with exit status 1" in capsys.readouterr().err
    assert (tmp_path / "seen").exists(), "the fake MyST never saw its kernel and theme server running"
    left = _processes(marker)
    assert not left, f"still running after the failed build: {left}"
