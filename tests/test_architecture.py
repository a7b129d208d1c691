"""The package's shape, as ARCHITECTURE.md draws it: floors that import only downwards, no import circle, private
modules imported only inside their own folder, a short top level, every module importable on its own (also under
``python -OO``), and old module names that still work."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import ttr_edu

ROOT = Path(__file__).resolve().parents[1]

#: each top-level entry of ttr_edu and its floor: a module imports only from its own floor or below
FLOORS = {
    "_internal": 0,
    "ops": 1,
    "kernels": 2,
    "regression": 2,
    "layers": 3,
    "hebbian": 3,
    "dual_form": 3,
    "profiling": 3,
    "tasks": 4,
    "models": 4,
    "train": 4,
    "experiments": 5,
    "viz": 5,
    "checks": 6,
    "course": 6,
}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: the ttr_edu modules it imports}`` for the package under ``root``, lazy imports included."""
    paths = {module_name(p, root): p for p in sorted((root / "ttr_edu").rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def floor(module: str) -> int | None:
    parts = module.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    seen, path, found = set(), [], []

    def visit(node):
        if node in path:
            found.append(path[path.index(node) :] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        path.append(node)
        for nxt in sorted(graph[node]):
            if not nxt.startswith(node + "."):  # a package's __init__ re-exporting its submodules is no circle
                visit(nxt)
        path.pop()

    for name in sorted(graph):
        visit(name)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{a} (floor {floor(a)}) imports {b} (floor {floor(b)})"
        for a, targets in graph.items()
        for b in targets
        if floor(a) is not None and floor(b) is not None and floor(b) > floor(a)
    ]


def private_imports(graph: dict[str, set[str]]) -> list[str]:
    """``ttr_edu.X._y`` may be imported only inside ``ttr_edu.X``; ``ttr_edu._internal`` is shared by design."""
    bad = []
    for a, targets in graph.items():
        for b in targets:
            parts = b.split(".")
            for i, part in enumerate(parts[1:], start=1):
                if part.startswith("_") and not part.startswith("__") and parts[:2] != ["ttr_edu", "_internal"]:
                    owner = ".".join(parts[:i])
                    if not (a == owner or a.startswith(owner + ".")):
                        bad.append(f"{a} imports {b}, private to {owner}")
    return bad


GRAPH = import_graph(ROOT)


def test_every_top_level_entry_has_a_floor_and_there_are_at_most_17():
    entries = sorted(p.name for p in (ROOT / "ttr_edu").iterdir() if p.name != "__pycache__")
    assert len(entries) <= 17, entries
    named = {e.removesuffix(".py") for e in entries} - {"__init__", "py.typed"}
    assert named == set(FLOORS), named ^ set(FLOORS)


def test_no_import_circle():
    found = circles(GRAPH)
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_imports_run_down_the_floors_only():
    assert not upward_imports(GRAPH), "\n".join(upward_imports(GRAPH))


def test_a_private_module_is_imported_only_inside_its_own_folder():
    assert not private_imports(GRAPH), "\n".join(private_imports(GRAPH))


def test_the_rules_catch_a_circle_an_upward_import_and_a_private_import(tmp_path):
    """The checks above fail on a package that breaks each rule, so they cannot pass vacuously."""
    files = {
        "ttr_edu/__init__.py": "",
        "ttr_edu/ops/__init__.py": "",
        "ttr_edu/ops/a.py": "from . import b\n",
        "ttr_edu/ops/b.py": "def f():\n    from ttr_edu.ops import a\n",  # a lazy import still closes a circle
        "ttr_edu/ops/_private.py": "",
        "ttr_edu/layers/__init__.py": "",
        "ttr_edu/layers/c.py": "from ttr_edu.ops._private import x\n",
        "ttr_edu/course/__init__.py": "",
        "ttr_edu/ops/d.py": "from ttr_edu.course import e\n",
        "ttr_edu/course/e.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert [c for c in circles(graph) if "ttr_edu.ops.a" in c and "ttr_edu.ops.b" in c]
    assert "ttr_edu.ops.d (floor 1) imports ttr_edu.course.e (floor 6)" in upward_imports(graph)
    assert all(line.startswith("ttr_edu.ops.d ") for line in upward_imports(graph))
    assert private_imports(graph) == ["ttr_edu.layers.c imports ttr_edu.ops._private, private to ttr_edu.ops"]


def _run(code: str, *args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    command = [sys.executable, *flags, "-c", code, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)


MODULES = sorted(m for m in GRAPH if not m.endswith("__main__"))

#: One interpreter loads the third-party libraries once, then forks a child per module that imports that module
#: first: no ttr_edu module may work only because another one was imported before it (``import
#: ttr_edu.layers_memory`` once failed this way).
FORK_EACH = """
import json, os, sys
import numpy, torch, plotly.graph_objects, ipywidgets, sklearn, triton  # third-party, shared by every child
bad = []
for name in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(name)
            message = ""
        except BaseException as error:
            message = f"{type(error).__name__}: {error}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    message = os.read(read, 4000).decode()
    os.close(read)
    os.waitpid(pid, 0)
    if message:
        bad.append([name, message])
print(json.dumps(bad))
"""


def test_every_module_imports_first_in_a_fresh_interpreter():
    assert any(name.startswith("ttr_edu") for name in MODULES)
    result = _run(FORK_EACH, json.dumps(MODULES))
    assert result.returncode == 0, result.stderr[-2000:]
    bad = json.loads(result.stdout)
    assert not bad, "\n".join(f"{n}: {message}" for n, message in bad)


def test_the_package_imports_under_python_OO():
    """Docstrings are None under -OO; nothing may append to one at import."""
    result = _run("import importlib, sys\nfor n in sys.argv[1:]: importlib.import_module(n)", *MODULES, flags=("-OO",))
    assert result.returncode == 0, result.stderr[-2000:]


def test_old_module_names_are_the_new_modules_with_a_deprecation_warning():
    code = (
        "import importlib, json, warnings\n"
        "import ttr_edu\n"
        "out = {}\n"
        "for old, new in ttr_edu.MOVED_MODULES.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(old)\n"
        "    out[old] = [module is importlib.import_module(new), module.__name__, module.__spec__.name,\n"
        "                [str(w.message) for w in caught if w.category is DeprecationWarning]]\n"
        "print(json.dumps(out))\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) == set(ttr_edu.MOVED_MODULES)
    for old, (same, name, spec, messages) in out.items():
        new = ttr_edu.MOVED_MODULES[old]
        assert same and name == new and spec == new, (old, name, spec)
        assert any(old in m and new in m for m in messages), (old, messages)


def test_old_names_of_a_flat_module_that_became_a_package_still_work():
    code = "import warnings\nwarnings.simplefilter('error')\nfrom ttr_edu.models import RetrievalModel\n"
    result = _run(code)
    assert "DeprecationWarning: ttr_edu.models.RetrievalModel moved to ttr_edu.models.retrieval" in result.stderr
    result = _run("from ttr_edu.models import RetrievalModel, UPDATE_RULES\nprint(RetrievalModel.__module__)")
    assert result.stdout.strip() == "ttr_edu.models.retrieval", result.stderr
    assert "ImportError" in _run("from ttr_edu.tasks import no_such_name").stderr


def test_the_package_names_its_modules_by_their_new_names():
    """The old names import for one release (above), but the package and its benchmarks never name them: an error
    message that tells a user to run an old name sends them through a deprecation warning for nothing."""
    old = re.compile(
        r"\b(" + "|".join(re.escape(n) for n in sorted(ttr_edu.MOVED_MODULES, key=len, reverse=True)) + r")\b"
    )
    texts = tracked_texts()
    bad = [
        f"{name}:{i}: {m.group(1)} (now {ttr_edu.MOVED_MODULES[m.group(1)]})"
        for name, text in texts.items()
        if name.startswith(("ttr_edu/", "benchmarks/")) and name.endswith(".py") and name != "ttr_edu/__init__.py"
        for i, line in enumerate(text.splitlines(), 1)
        for m in old.finditer(line)
    ]
    assert not bad, "\n".join(bad)


def test_python_m_runs_a_moved_module():
    result = subprocess.run(
        [sys.executable, "-m", "ttr_edu.cli", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0 and "ttr-edu" in result.stdout, result.stderr


#: What a newcomer cannot open: an issue or pull request by number, a review, a path outside the repository.
CITATIONS = {
    "an issue or pull request by number": re.compile(r"\b(?:issues?|PR|pull requests?)\s*#?\d+", re.IGNORECASE),
    "a review": re.compile(
        r"\breviews?\s*(?:round\s*)?\d+|\b(?:code|reliability|newcomer|classroom|browser)\s+reviews?\b"
        r"|\breviews?/|\breproducers-\d",
        re.IGNORECASE,
    ),
    "an absolute path outside the repository": re.compile(r"(?<![\w.~])/(?:work|home|Users|mnt|root)/[\w./-]+"),
    "a shared folder outside the repository": re.compile(r"(?:\.\./)+shared\b"),
    "a design note outside the repository": re.compile(r"\bDESIGN\.md\b"),
}
#: A link in a notebook or a Markdown page: ``[text](../path)``.
RELATIVE_LINK = re.compile(r"\]\(((?:\.\./)+[^)\s#]*)")


def outside_citations(name: str, text: str, root: Path = ROOT) -> list[str]:
    """``"name: what (the text)"`` for each citation in ``text`` (the file ``name`` of the repository at ``root``)
    that a reader of the repository cannot follow: the patterns of :data:`CITATIONS`, and links of notebooks and
    Markdown pages that leave the repository."""
    found = [f"{name}: {what} ({m.group(0)!r})" for what, pattern in CITATIONS.items() for m in pattern.finditer(text)]
    if name.endswith((".md", ".ipynb")):
        folder = (root / name).parent
        for m in RELATIVE_LINK.finditer(text):
            if not (folder / m.group(1)).resolve().is_relative_to(root.resolve()):
                found.append(f"{name}: a link outside the repository ({m.group(1)!r})")
    return found


def tracked_texts(root: Path = ROOT) -> dict[str, str]:
    """Every tracked text file: code, tests, notebooks, docs, configuration."""
    names = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=root, check=True).stdout.split()
    texts = {}
    for name in names:
        try:
            texts[name] = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):  # data and images; a deleted file
            continue
    return texts


def test_no_file_cites_what_a_newcomer_cannot_open():
    """The project explains itself: no file points at an issue, a review, or a note outside the repository; it says
    what and why instead."""
    texts = tracked_texts()
    assert len(texts) > 100 and any(name.endswith(".ipynb") for name in texts)
    bad = [line for name, text in texts.items() for line in outside_citations(name, text)]
    assert not bad, "\n".join(bad)


def test_the_citation_rule_catches_each_kind_and_spares_links_inside():
    """The rule fails on a citation added to any tracked file, and passes the repository's own relative links."""
    see = "# see issue " + "27"
    texts = tracked_texts()
    missed = [name for name, text in texts.items() if not outside_citations(name, text + "\n" + see + "\n")]
    assert not missed, missed
    for text in (
        "(issue " + "13)",
        "fixed in PR #" + "40",
        "reliability rev" + "iew, round 2",
        "rev" + "iew 2",
        "see ../sha" + "red/notes.md",
        "tests from rev" + "iews/2026",
        "/work/" + "shared/notes.md",
        "DESIGN" + ".md",
    ):
        assert outside_citations("ttr_edu/ops/x.py", text), text
    assert outside_citations("README.md", "[the notes](../notes.md)")
    assert not outside_citations("chapters/01_x.ipynb", "[source](../sources.md#fla-delta-net)")
    assert not outside_citations("ttr_edu/ops/x.py", "the issue of stability; reviewed by the tests; /dev/null")
