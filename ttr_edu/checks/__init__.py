"""Exercise checks, one module per chapter, named by its slug (``ttr_edu.checks.hebbian_memory`` ...).

Every chapter does ``from ttr_edu.checks import <slug> as checks``, and every graded check cell imports it again
before it calls its check, so a cell that rebinds ``checks`` changes nothing. The machinery they share is
:mod:`ttr_edu.checks._core`. The package and its modules are read-only (:func:`ttr_edu.checks._core.seal`): a cell
cannot replace a check or a reference by assigning to them. :func:`relative_error` (``‖a − b‖ / ‖b‖`` in float64) is
the comparison the course and its tests use everywhere; :func:`passed` tells a cell below an exercise whether the
student's function passed its check, so that it uses the package's own implementation otherwise.
"""

import sys

from ttr_edu.checks._core import CheckFailed, passed, relative_error, seal
from ttr_edu.checks._rules import run_check

__all__ = ["CheckFailed", "passed", "relative_error", "run_check"]

seal(sys.modules[__name__])  # last: from here on, each check module is sealed as it is imported
