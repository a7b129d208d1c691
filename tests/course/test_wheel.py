"""The wheel is the course. Built as a release builds it (the sdist, then the wheel from the sdist), installed with its
``[course]`` extra in a fresh virtual environment outside the repository, it lists, copies, checks and serves the
chapters with no clone anywhere, and the commands that need the sources say so in one line.

Slow (minutes: torch and JupyterLab are installed into the new environment from the package index); the README's test
command runs it, so CI does. With ``TTR_EDU_DIST`` naming a folder that holds an sdist and a wheel already built (the
release workflow's), those are tested instead of building new ones.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.course.test_student_copies import folder_problems

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.name for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
PAGES = ["notation.md", "sources.md", "grading.md", "intro.md", "references.bib", "images/logo.svg"]
VERSION = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)[1]
CHAPTER = "01_hebbian_memory.ipynb"  # the chapter `check` runs: the quickest to execute
TORCH = "torch==2.13.0"  # the README's pin


def run(command, *, env, cwd, timeout=600, expect=0):
    """Run ``command``; fail with its output unless it exits ``expect``."""
    result = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == expect, f"{' '.join(map(str, command))} exited {result.returncode}:\n{output[-4000:]}"
    return output


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without what ties it to the repository or its venv (PYTHONPATH, VIRTUAL_ENV) and
    with Jupyter's and IPython's folders of its own, so that no kernel or setting installed elsewhere is used. pip's
    own settings (the package index) are kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV", "IPYTHON"))}
    for name in ("JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[name] = str(home / name.lower())
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env["PIP_NO_INPUT"] = "1"
    return env


def source_tree(dest: Path) -> Path:
    """A copy of the repository's files as git knows them (tracked, and new files not ignored), as a release
    checkout would hold them; without git, everything but build outputs and environments."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True, check=True, timeout=60,
        ).stdout  # fmt: skip
        files = [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        files = None
    if files:
        for name in files:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    else:
        skip = shutil.ignore_patterns(".git", ".venv", "venv", "_build", "build", "dist", "*.egg-info", "__pycache__")
        shutil.copytree(ROOT, dest, ignore=skip)
        shutil.rmtree(dest / "ttr_edu" / "course" / "content", ignore_errors=True)
    return dest


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wheel")


@pytest.fixture(scope="module")
def dist(work) -> dict[str, Path]:
    """The sdist and the wheel: ``TTR_EDU_DIST``'s, or built with ``python -m build`` (the wheel from the sdist)."""
    env = clean_env(work / "home-build")
    if os.environ.get("TTR_EDU_DIST"):
        folder = Path(os.environ["TTR_EDU_DIST"]).resolve()
    else:
        folder, src = work / "dist", source_tree(work / "src")
        python = sys.executable
        if find_spec("build") is None:  # not in the [dev] extra's environment: a throwaway one for the builder
            run([sys.executable, "-m", "venv", work / "builder"], env=env, cwd=work, timeout=300)
            python = work / "builder" / "bin" / "python"
            run([python, "-m", "pip", "install", "--quiet", "build"], env=env, cwd=work, timeout=900)
        started = time.monotonic()
        run([python, "-m", "build", "--outdir", folder, src], env=env, cwd=work, timeout=900)
        print(f"built the sdist and the wheel in {time.monotonic() - started:.0f} s")
    found = {"sdist": sorted(folder.glob("ttr_edu-*.tar.gz")), "wheel": sorted(folder.glob("ttr_edu-*.whl"))}
    assert all(len(paths) == 1 for paths in found.values()), f"expected one sdist and one wheel in {folder}: {found}"
    return {kind: paths[0] for kind, paths in found.items()}


def test_the_sdist_holds_the_course_the_wheel_build_copies(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    shipped = ["setup.py", "MANIFEST.in", "pyproject.toml", "jupyter-config/nbgrader_config.py"]
    for needed in [*shipped, *(f"chapters/{c}" for c in CHAPTERS), *PAGES]:
        assert needed in names, f"the sdist lacks {needed}: a wheel built from it would miss the course"
    assert not any(name.startswith(("solutions/", "tests/")) for name in names)


def test_the_wheel_holds_the_course_the_shipped_data_and_its_metadata(dist):
    assert dist["wheel"].name == f"ttr_edu-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        content = "ttr_edu/course/content/"
        for chapter in CHAPTERS:
            assert wheel.read(f"{content}chapters/{chapter}") == (ROOT / "chapters" / chapter).read_bytes()
        for page in PAGES:
            assert wheel.read(content + page) == (ROOT / page).read_bytes()
        shipped = [
            *(ROOT / "ttr_edu/experiments/results").glob("*.csv"),
            *(ROOT / "ttr_edu/experiments/results").glob("*.json"),
        ]
        # the chapters' data and the design-space explorer's grid
        assert {f"ttr_edu/experiments/results/{p.name}" for p in shipped} <= names
        assert not any("solutions/" in name for name in names)
        # installed into {sys.prefix}/etc/jupyter, where nbgrader reads it: autograde uses the grading engine
        config = wheel.read(f"ttr_edu-{VERSION}.data/data/etc/jupyter/nbgrader_config.py")
        assert config == (ROOT / "jupyter-config" / "nbgrader_config.py").read_bytes()
        metadata = wheel.read(f"ttr_edu-{VERSION}.dist-info/METADATA").decode()
    assert f"Version: {VERSION}\n" in metadata
    classifiers = set(re.findall(r"^Classifier: (.+)$", metadata, re.MULTILINE))
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (10, 11, 12, 13)} <= classifiers
    assert {"Operating System :: POSIX :: Linux", "Intended Audience :: Education"} <= classifiers
    print(f"wheel: {dist['wheel'].stat().st_size / 1e3:.0f} kB, sdist: {dist['sdist'].stat().st_size / 1e3:.0f} kB")


@pytest.fixture(scope="module")
def student(work, dist) -> dict:
    """A fresh virtual environment with ``torch`` and ``<the wheel>[course]``, and an empty folder outside any clone
    to work in, as a student who never cloned the repository has."""
    home = work / "student"
    env, venv, cwd = clean_env(home), home / "venv", home / "elsewhere"
    cwd.mkdir(parents=True)
    run([sys.executable, "-m", "venv", venv], env=env, cwd=cwd, timeout=300)
    python, started = venv / "bin" / "python", time.monotonic()
    run([python, "-m", "pip", "install", "--quiet", TORCH], env=env, cwd=cwd, timeout=1800)
    torch_s = time.monotonic() - started
    run([python, "-m", "pip", "install", "--quiet", f"{dist['wheel']}[course]"], env=env, cwd=cwd, timeout=1800)
    course_s = time.monotonic() - started - torch_s
    print(f"installed {TORCH} in {torch_s:.0f} s, then the wheel with [course] in {course_s:.0f} s")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    where = run([python, "-c", "import ttr_edu; print(ttr_edu.__file__)"], env=env, cwd=cwd)
    assert Path(where.strip()).is_relative_to(venv), f"ttr_edu came from {where}, not from the wheel"
    assert (venv / "etc" / "jupyter" / "nbgrader_config.py").is_file()  # nbgrader autograde uses the grading engine
    return {"env": env, "cwd": cwd, "bin": venv / "bin"}


def test_list_copy_and_check_work_with_no_clone(student, work):
    env, cwd, ttr_edu = student["env"], student["cwd"], student["bin"] / "ttr-edu"
    assert run([ttr_edu, "--version"], env=env, cwd=cwd).strip() == f"ttr-edu {VERSION}"
    listed = run([ttr_edu, "list"], env=env, cwd=cwd)
    assert [line[:2] for line in listed.splitlines()[1:]] == [c[:2] for c in CHAPTERS]
    copied = run([ttr_edu, "copy", "my-course"], env=env, cwd=cwd)
    assert f"{len(CHAPTERS)} new, 0 refreshed, 0 up to date" in copied
    folder = cwd / "my-course"
    assert sorted(p.name for p in folder.glob("*.ipynb")) == sorted(CHAPTERS) and (folder / "notation.md").is_file()
    assert (folder / "sources.md").is_file()
    assert folder_problems(folder) == []  # no raw citation, no link out of the folder

    started = time.monotonic()
    checked = run([ttr_edu, "check", f"my-course/{CHAPTER}"], env=env, cwd=cwd, expect=3)  # 3: not attempted
    assert re.search(r"0 of (\d+) pass, 0 fail, \1 not attempted\.", checked), checked
    solved = work / "solved"
    solved.mkdir()
    shutil.copy(ROOT / "solutions" / CHAPTER, solved)
    checked = run([ttr_edu, "check", solved / CHAPTER], env=env, cwd=cwd)  # 0: every exercise passes
    assert re.search(r"(\d+) of \1 pass, 0 fail, 0 not attempted\.", checked), checked
    print(f"two checks of chapter {CHAPTER[:2]} in {time.monotonic() - started:.0f} s")


def test_generate_and_book_say_in_one_line_that_they_need_a_clone(student):
    for command in ("generate", "book"):
        result = subprocess.run(
            [student["bin"] / "ttr-edu", command], env=student["env"], cwd=student["cwd"], capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "works from a clone of ttr-edu" in result.stderr and "git clone" in result.stderr


def test_start_serves_the_chapters_with_jupyterlab_myst(student):
    from ttr_edu.course.book import _free_port

    port, token = _free_port(), "wheel-test"
    process = subprocess.Popen(
        [student["bin"] / "ttr-edu", "start", "served", "--no-browser", f"--port={port}",
         f"--IdentityProvider.token={token}"],
        env=student["env"], cwd=student["cwd"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        with urllib.request.urlopen(f"{url}/api/contents?token={token}", timeout=30) as response:
            served = sorted(item["name"] for item in __import__("json").load(response)["content"])
        assert served == sorted([*CHAPTERS, "notation.md", "sources.md"])
        with urllib.request.urlopen(f"{url}/lab?token={token}", timeout=30) as response:
            assert "jupyterlab-myst" in response.read().decode()  # the page loads the MyST renderer
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, as a student stops it
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        output = process.stdout.read()
    assert "Traceback" not in output, output
    with pytest.raises(ProcessLookupError):  # nothing left: no server, no kernel
        os.killpg(process.pid, 0)
