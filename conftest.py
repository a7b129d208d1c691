"""Collection rules for the whole repository (tests/, chapters/ and solutions/)."""

import importlib.util

# Triton has wheels for Linux only; elsewhere the kernel chapter is skipped rather than failed.
collect_ignore_glob = [] if importlib.util.find_spec("triton") else ["*/10_triton_kernels.ipynb"]
