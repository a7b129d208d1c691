"""ttr-edu: reference implementations for a course on test-time memory in sequence layers.

Modules are imported on demand so that ``import ttr_edu`` stays light and never imports Triton
(the kernels need ``TRITON_INTERPRET`` decided before Triton loads).
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``ttr_edu.finite_checks``: the switch of the input policy's NaN/inf scans (see ``ttr_edu._validation``),
    loaded on first use so that ``import ttr_edu`` stays light."""
    if name in ("finite_checks", "finite_checks_enabled"):
        from ttr_edu import _validation

        return getattr(_validation, name)
    raise AttributeError(f"module 'ttr_edu' has no attribute {name!r}")
