"""Packaging promises that need no build: one version, classifiers that say who and what the package is for, a wheel
build step and an sdist that agree on the course's files, and a release workflow that publishes what it tested.
(tests/course/test_wheel.py builds and installs the wheel.)"""

import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
VERSION = re.search(r'^version\s*=\s*"([^"]+)"', PYPROJECT, re.MULTILINE)[1]


def test_the_version_lives_in_pyproject_and_citation_cff_says_the_same():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    cff = re.search(r"^version:\s*(\S+)\s*$", (ROOT / "CITATION.cff").read_text(encoding="utf-8"), re.MULTILINE)
    assert cff and cff[1] == VERSION, f"CITATION.cff says {cff and cff[1]}, pyproject.toml {VERSION}"
    written = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "ttr_edu").rglob("*.py")
        if re.search(r"^__version__\s*=\s*[\"']\d", path.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert not written, f"a version typed into the code instead of read from the metadata: {written}"


def test_the_changelog_has_a_section_for_the_version_or_an_unreleased_one():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{VERSION}]" in changelog and "## [Unreleased]" in changelog


def test_classifiers_name_the_python_versions_the_os_and_the_audience():
    classifiers = set(re.findall(r'^\s*"([^"]+ :: [^"]+)",?\s*$', PYPROJECT, re.MULTILINE))
    minimum = re.search(r'^requires-python\s*=\s*">=3\.(\d+)"', PYPROJECT, re.MULTILINE)[1]
    pythons = sorted(
        int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert pythons == list(range(int(minimum), 14)), f"requires-python >=3.{minimum}, classifiers name {pythons}"
    assert any(c.startswith("Operating System :: ") for c in classifiers)
    assert {"Intended Audience :: Education", "Intended Audience :: Science/Research"} <= classifiers


def test_the_sdist_carries_every_course_file_the_wheel_build_copies():
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    course = re.findall(r'"([^"]+)"', re.search(r"^COURSE = \[(.*?)\]", setup, re.MULTILINE | re.DOTALL)[1])
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").split()
    assert course and all((ROOT / name).exists() for name in course)
    missing = [name for name in course if name not in manifest]
    assert not missing, f"setup.py copies {missing} into the wheel, but MANIFEST.in leaves them out of the sdist"


def test_an_editable_install_of_this_checkout_puts_the_nbgrader_config_into_the_environment():
    """The README's commands install the checkout editable; the nbgrader_config.py that makes `nbgrader autograde`
    use the grading engine must land in {sys.prefix}/etc/jupyter then too (setuptools leaves data files out of an
    editable install unless setup.py's distribution class asks for them). The wheel: tests/course/test_wheel.py."""
    # the installed distribution's record, not the ttr_edu.egg-info that setuptools leaves in the checkout (which is on
    # sys.path here and, found first, has no direct_url.json: the test then skipped under the README's own command)
    records = [dist.read_text("direct_url.json") for dist in metadata.distributions(name="ttr-edu")]
    direct = next((json.loads(record) for record in records if record), {})
    if direct.get("url") != ROOT.as_uri() or not direct.get("dir_info", {}).get("editable"):
        pytest.skip(f"ttr-edu in this environment is not an editable install of {ROOT}")
    installed = Path(sys.prefix, "etc", "jupyter", "nbgrader_config.py")
    assert installed.is_file(), f"{installed} is missing: reinstall with pip install -e ."
    assert installed.read_bytes() == (ROOT / "jupyter-config" / "nbgrader_config.py").read_bytes()


def test_the_release_workflow_builds_tests_the_built_files_and_publishes_them_with_trusted_publishing():
    workflow = (ROOT / ".github/workflows/release.yml").read_text(encoding="utf-8")
    assert re.search(r"tags:\s*\[\"v\*\"\]", workflow)
    assert (
        "python -m build" in workflow and "TTR_EDU_DIST: dist" in workflow and "tests/course/test_wheel.py" in workflow
    )
    assert "pypa/gh-action-pypi-publish@release/v1" in workflow and "id-token: write" in workflow
    assert "needs: test" in workflow and "needs: build" in workflow  # nothing is published untested
