"""Exercise checks, one module per chapter, named by its slug (``ttr_edu.checks.hebbian_memory`` ...).

Every chapter does ``from ttr_edu.checks import <slug> as checks``; the machinery they share is
:mod:`ttr_edu.checks._core`. :func:`relative_error` (``‖a − b‖ / ‖b‖`` in float64) is the comparison the course and
its tests use everywhere.
"""

from ttr_edu.checks._core import CheckFailed, relative_error, run_check

__all__ = ["CheckFailed", "relative_error", "run_check"]
