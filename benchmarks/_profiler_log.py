"""Keep ``torch.profiler``'s trace-point log out of a benchmark's output.

Kineto, the profiler's backend, prints two lines on stderr at every profile's start and stop (``USDT: …
profiler_start`` / ``profiler_stop``, and ``STAGE: …`` lines at some log levels). A benchmark that profiles each
call prints a hundred of them between the rows of its table. Its log level cannot drop them alone: the level that
hides them (``KINETO_LOG_LEVEL=6``) hides Kineto's errors too. So the process's stderr goes through a pipe that
drops those lines and passes every other line, Python's and the C++ libraries' alike.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: how Kineto's trace-point lines begin
TRACE_POINT_PREFIXES = (b"USDT:", b"STAGE:")


@contextmanager
def without_profiler_trace_points() -> Iterator[None]:
    """Within the block, stderr (file descriptor 2) passes every line but Kineto's trace points."""
    sys.stderr.flush()
    original = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                if not line.startswith(TRACE_POINT_PREFIXES):
                    os.write(original, line)

    thread = threading.Thread(target=forward, daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(original, 2)  # the pipe's last write end is gone: the forwarder reads to the end and stops
        thread.join()
        os.close(original)
