"""When to draw a progress bar: the one rule every training loop and grid in the package follows.

A tqdm bar in JupyterLab is a live widget; in the static book it would be saved as a frozen "0%" widget that needs a
kernel connection. The book build (``ttr-edu book``, and the Pages workflow) sets ``TTR_EDU_BOOK=1`` in the
environment the notebooks execute in, and there no bar is drawn, whatever the caller asked for.
"""

from __future__ import annotations

import os
import sys

__all__ = ["BOOK_ENV", "progress_enabled"]

BOOK_ENV = "TTR_EDU_BOOK"


def progress_enabled(progress: bool | None) -> bool:
    """Whether to draw a progress bar.

    Args:
        progress: ``True``/``False`` to choose; ``None`` shows a bar in a terminal or a Jupyter kernel and stays quiet
            in logs and pipes.

    Returns:
        ``False`` whenever the book is being built (``TTR_EDU_BOOK`` set and not ``0``), else as above.

    Raises:
        TypeError: ``progress`` is neither a bool nor None (``"false"`` would be truthy).
    """
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress: expected True, False or None, got {type(progress).__name__} {progress!r}")
    if os.environ.get(BOOK_ENV, "0") not in ("", "0"):
        return False
    if progress is not None:
        return progress
    in_kernel = "ipykernel" in sys.modules
    return in_kernel or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
