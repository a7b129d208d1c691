"""One build step that pyproject.toml cannot declare: the course goes into the wheel.

The student notebooks (``chapters/``), the pages they link to (``notation.md`` and ``sources.md``, and ``intro.md``
and ``grading.md`` beside them), the figures (``images/``) and the bibliography (``references.bib``) live at the top
of the repository, where the book and the tests read them. Building the wheel copies them into the package as
``ttr_edu/course/content/``, so ``pip install ttr-edu[course]`` installs the course and ``ttr-edu start`` works with
no clone, while git holds each file once. The sdist carries them (``MANIFEST.in``), so a wheel built from the sdist
is the same. An editable install copies nothing: it finds the clone itself.

And one fix: an editable install (``pip install -e .``) installs the data files too (the ``nbgrader_config.py`` that
pyproject.toml puts into ``etc/jupyter/``), as a wheel install does.

Everything else (metadata, dependencies, package data, data files) is in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
#: what the wheel ships of the course, as paths from the repository root (folders: every file in them)
COURSE = ["chapters", "images", "intro.md", "notation.md", "sources.md", "grading.md", "references.bib"]
TARGET = Path("ttr_edu", "course", "content")


def course_files() -> list[Path]:
    """The course's files, as paths from the repository root (chapters: the student notebooks only)."""
    files = []
    for name in COURSE:
        path = HERE / name
        if not path.exists():
            raise SystemExit(
                f"setup.py: {name} is missing; build from a clone of ttr-edu or from its sdist, which hold the course"
            )
        if path.is_dir():
            pattern = "[0-9][0-9]_*.ipynb" if name == "chapters" else "*"
            files += [p.relative_to(HERE) for p in sorted(path.glob(pattern)) if p.is_file()]
        else:
            files.append(path.relative_to(HERE))
    return files


class BuildPyWithCourse(build_py):
    """``build_py``, then the course files copied into the build as package data."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for relative in course_files():
            target = Path(self.build_lib) / TARGET / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(HERE / relative), str(target))

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return outputs + [str(Path(self.build_lib) / TARGET / relative) for relative in course_files()]


class DistributionWithEditableData(Distribution):
    """setuptools' editable build installs data files only if the distribution answers ``has_data()``, a name that
    ``Distribution`` does not define (it has ``has_data_files``), so ``pip install -e .`` left them out (setuptools up
    to 84 at least); answering it puts them into an editable install's environment as into a wheel's."""

    def has_data(self):
        return self.has_data_files()


setup(cmdclass={"build_py": BuildPyWithCourse}, distclass=DistributionWithEditableData)
