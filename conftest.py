"""Test-session setup for the whole repository (tests/, chapters/ and solutions/)."""

import importlib.util
import os
import random

import pytest
import torch

# Triton kernels run on CPU tensors only through the interpreter, which must be chosen before triton is imported.
# Notebook kernels started by nbval inherit this environment.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Triton has wheels for Linux only; elsewhere the kernel chapter is skipped rather than failed.
collect_ignore_glob = [] if importlib.util.find_spec("triton") else ["*/12_triton_kernels.ipynb"]


def _hypothesis_profiles():
    """Hypothesis draws the same examples on every run unless asked otherwise, so a run passes or fails by the code,
    not by luck: the profile ``derandomized`` (the default, and CI's) seeds each test from its own name and keeps no
    example database. ``pytest --hypothesis-profile=random`` opts in to fresh examples; its seed is printed in the
    header and reused by every xdist worker, so a failure can be replayed with ``--hypothesis-seed=SEED``."""
    try:
        from hypothesis import settings
    except ImportError:
        return
    settings.register_profile("derandomized", derandomize=True, database=None, print_blob=True)
    settings.register_profile("random", derandomize=False, print_blob=True)
    settings.load_profile("derandomized")


_hypothesis_profiles()
HYPOTHESIS_SEED = "TTR_EDU_HYPOTHESIS_SEED"  # the random profile's seed, shared with the xdist workers


@pytest.hookimpl(trylast=True)  # after Hypothesis's own plugin has loaded the profile asked for
def pytest_configure(config):
    try:
        from hypothesis import core, settings
    except ImportError:
        return
    if settings.default.derandomize or core.global_force_seed is not None:
        return
    os.environ.setdefault(HYPOTHESIS_SEED, str(random.SystemRandom().getrandbits(32)))  # set before workers start
    core.global_force_seed = int(os.environ[HYPOTHESIS_SEED])


def pytest_report_header(config):
    try:
        from hypothesis import core, settings
    except ImportError:
        return None
    if settings.default.derandomize:
        return "hypothesis: derandomized (each test seeded from its name; --hypothesis-profile=random for new examples)"
    seed = core.global_force_seed
    return f"hypothesis: random examples, seed {seed} (replay: --hypothesis-seed={seed})"


def pytest_collection_modifyitems(items):
    """Mark every notebook cell (collected by nbval) as ``notebook``, so ``-m "not notebook"`` skips them."""
    for item in items:
        if str(item.path).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)


def _retry_kernel_start():
    """Let nbval retry a kernel that dies while starting (twice at most), and nothing else.

    Once in a full run here, every cell of one notebook errored with "Kernel died" at start-up (nbval hides the
    kernel's stderr). The likely cause, not confirmed: with ``pytest -n 2`` two kernels and the book test's Jupyter
    server start at once, and jupyter_client picks its ports by binding and releasing them, so another process can
    take one in between (a known race, e.g. treebeardtech/nbmake#129). A cell that fails, or a kernel that dies
    while running a cell, is not retried.
    """
    try:
        import nbval.kernel
    except ImportError:
        return
    start = nbval.kernel.start_new_kernel

    def start_with_retries(*args, **kwargs):
        for attempt in range(3):
            try:
                return start(*args, **kwargs)  # on failure it has already shut the dead kernel down
            except RuntimeError:
                if attempt == 2:
                    raise

    nbval.kernel.start_new_kernel = start_with_retries


_retry_kernel_start()
