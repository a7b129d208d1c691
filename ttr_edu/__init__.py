"""ttr-edu: reference implementations for a course on test-time memory in sequence layers.

Modules are imported on demand so that ``import ttr_edu`` stays light and never imports Triton
(the kernels need ``TRITON_INTERPRET`` decided before Triton loads).
"""

__version__ = "0.1.0"
