"""The README's promises hold: its Python example runs, and its test command is what .ci/run runs."""

import re
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


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_second():
    quick_start = README.split("## Quick start")[1].split("\n## ")[0]
    commands = re.findall(r"```bash\n(.*?)```", quick_start, flags=re.DOTALL)
    assert len(commands) == 2
    course, tests = ([line for line in c.splitlines() if not line.startswith("#")] for c in commands)
    assert len(course) == 1 and "ttr-edu start" in course[0]
    assert 'pip install "ttr-edu[course]"' in course[0] and " -e " not in course[0]  # students need no clone
    assert "git clone" in quick_start.split(commands[1])[0]  # contributors are told where the second one runs
    assert len(tests) == 1 and "pytest" in tests[0]
    assert "# 2. set up and run the tests" in commands[1]  # the marker .ci/run reads the command after
    assert "README.md" in (ROOT / ".ci" / "run").read_text()
