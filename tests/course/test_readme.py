"""The README's promises hold: its Python example runs, and its test command is what .ci/run runs."""

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_python_example_runs_and_returns_the_documented_shapes():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)
    assert blocks, "the README has no Python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    o, S = namespace["o"], namespace["S"]
    B, T, H, D = (namespace[name] for name in ("B", "T", "H", "D"))
    assert o.shape == (B, T, H, D) and S.shape == (B, H, D, D)


def test_quick_start_has_exactly_two_commands_and_ci_runs_both():
    quick_start = README.split("## Quick start")[1].split("\n## ")[0]
    commands = re.findall(r"```bash\n(.*?)```", quick_start, flags=re.DOTALL)
    assert len(commands) == 2
    course, tests = ([line for line in c.splitlines() if not line.startswith("#")] for c in commands)
    assert len(course) == 1 and course[0].endswith("ttr-edu start my-course")
    assert 'pip install -e ".[course]"' in course[0]  # from the clone: the package is not published yet
    assert "git clone" in quick_start.split(commands[0])[0]  # the reader is told where both commands run
    assert len(tests) == 1 and "pytest" in tests[0]
    assert 'pip install "ttr-edu[course]"' in quick_start and "After the first release" in quick_start
    ci = (ROOT / ".ci" / "run").read_text()
    for marker in ("# 1. set up and run the course", "# 2. set up and run the tests"):  # .ci/run reads the line after
        assert marker in commands[0] + commands[1] and marker in ci


def test_the_readme_says_how_to_get_torchs_cpu_build_and_which_versions_were_tested():
    quick_start = README.split("## Quick start")[1].split("\n## ")[0]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in quick_start
    assert "keeps the install small" not in README  # the pin alone does not: PyPI's Linux torch is the CUDA build
    assert "torch 2.13.0 (its CPU build) and triton 3.9.0" in quick_start and "triton 3.7.1" in quick_start


def test_ci_stops_before_it_touches_a_students_my_course(tmp_path):
    """The README's command 1 makes ``my-course`` in the clone, so a contributor who took the course there has their
    notebooks in it: .ci/run, which runs that command as written, stops first and changes nothing."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    work = tmp_path / "my-course" / "01_hebbian_memory.ipynb"
    work.parent.mkdir()
    work.write_text("my edits")
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "my-course/ holds your course notebooks" in done.stderr and "nothing was changed" in done.stderr
    assert done.stdout == "" and work.read_text() == "my edits"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ci", "README.md", "my-course"]
