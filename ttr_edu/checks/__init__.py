"""Exercise checks, one module per chapter (``ttr_edu.checks.hebbian_memory`` ...). See :mod:`ttr_edu.checks._core`."""

from ttr_edu.checks._core import CheckFailed, run_check

__all__ = ["CheckFailed", "run_check"]
