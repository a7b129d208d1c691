"""The package's shared internals: one documented place that every other folder may import from.

* :mod:`.validation`: the input policy (named errors for shapes, dtypes, devices, flags and values; the NaN/inf
  scans and their switch :func:`~.validation.finite_checks`; :func:`~.validation.guarded`, which every public op
  wears);
* :mod:`.contract`: the flash-linear-attention contract the ops, the kernels and the regression framework share
  (``q, k`` ``(B, T, H, D_k)``, ``v`` ``(B, T, H, D_v)``, state ``(B, H, D_k, D_v)``, the compute dtype, the decay
  matrix, the stability check);
* :mod:`.mlp_memory`: the two-layer MLP memory of TTT-MLP and Titans with its hand-written gradients;
* :mod:`.deprecation`: :func:`~.deprecation.renamed_arguments`, old argument names kept for one release with a
  ``DeprecationWarning``;
* :mod:`.progress`: when to draw a progress bar (never while the book builds).

Nothing here is public API: names may change between releases. A module inside another folder whose name starts with
an underscore (``ops._varlen``) is private to that folder; the import-graph test enforces both rules.
"""
