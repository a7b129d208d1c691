"""Hebbian outer-product memory: the associative memory every later layer refines (chapter 01).

Notation. The papers write the memory as a fast weight matrix ``W`` of shape ``(D_v, D_k)``: write ``W += v kᵀ``, read
``W q``, the correlation-matrix memory [Steinbuch 1961; Anderson 1972; Kohonen 1972] (Schlag et al. 2021 call it a fast
weight, after Schmidhuber 1992). The layers in :mod:`ttr_edu.ops` keep the transposed state ``S = Wᵀ`` of shape
``(D_k, D_v)`` as flash-linear-attention does; chapter 02 makes the switch.

Why it works and when it fails. Reading with a stored key ``k_j`` gives

    W k_j = v_j (k_jᵀ k_j)  +  Σ_{i≠j} v_i (k_iᵀ k_j)
            signal             crosstalk

Orthonormal keys cancel the crosstalk exactly, so at most ``N = D_k`` pairs are recalled perfectly. For ``N``
random unit keys in ``D_k`` dimensions, ``E[(k_iᵀ k_j)²] = 1/D_k``, so the crosstalk energy
``Σ_{i≠j} (k_iᵀ k_j)²`` grows like ``(N − 1) / D_k``.

All functions take float tensors of one floating dtype, on one device, and return that dtype; mixing dtypes
raises ``TypeError`` rather than promoting silently. They follow the ops' input policy
(:func:`ttr_edu._internal.validation.guarded`): NaN/inf entries are refused by name, and so is an output that
overflows the dtype (named ``o``); ``ttr_edu.finite_checks(False)`` turns these scans off.
"""

from __future__ import annotations

import torch

from ttr_edu._internal.validation import (
    Dims,
    check_allocation,
    check_positive_int,
    check_same_device,
    check_seed,
    guarded,
)

__all__ = [
    "hebbian_write",
    "hebbian_read",
    "store",
    "recall",
    "random_unit_keys",
    "orthonormal_keys",
    "crosstalk_energy",
    "crosstalk_energies",
    "predicted_crosstalk_energy",
    "recall_accuracy",
    "cleanup_scores",
    "cleanup_accuracy",
    "rival_score_variance",
]


def _check_same_dtype(**tensors: torch.Tensor) -> None:
    """Raise ``TypeError`` unless all tensors share one dtype (``W @ q`` would fail inside torch, ``W + v kᵀ``
    promote)."""
    (first_name, first), *rest = tensors.items()
    for name, tensor in rest:
        if tensor.dtype != first.dtype:
            raise TypeError(f"{name}: expected dtype {first.dtype} (the dtype of {first_name}), got {tensor.dtype}")


def _check_not_empty(name: str, dims: Dims) -> None:
    if dims["N"] == 0:
        raise ValueError(f"{name}: expected at least one pair, N >= 1 in (N, D_k), got N = 0")


def _check_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating torch.dtype such as torch.float64, got {dtype!r}")


@guarded
def hebbian_write(W: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One Hebbian write: ``W + v kᵀ`` (a new tensor; ``W`` is not modified).

    Args:
        W: memory, shape ``(D_v, D_k)``, floating.
        k: key, shape ``(D_k,)``.
        v: value, shape ``(D_v,)``.

    Returns:
        The new memory, shape ``(D_v, D_k)``.

    Raises:
        TypeError: an argument is not a floating tensor, or the dtypes differ.
        ValueError: shapes disagree, or tensors are on different devices.

    Source: Hebbian outer-product learning [Hopfield 1982]; the fast-weight write of Schlag et al. (2021), eq. 3.
    """
    dims = Dims()
    dims.bind("W", W, ("D_v", "D_k"))
    dims.bind("k", k, ("D_k",))
    dims.bind("v", v, ("D_v",))
    check_same_device(W=W, k=k, v=v)
    _check_same_dtype(W=W, k=k, v=v)
    return W + torch.outer(v, k)


@guarded
def hebbian_read(W: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Read the memory with a query: ``W q``.

    Args:
        W: memory, shape ``(D_v, D_k)``.
        q: query, shape ``(D_k,)``.

    Returns:
        The retrieved value, shape ``(D_v,)``.

    Raises:
        TypeError, ValueError: as :func:`hebbian_write`.
    """
    dims = Dims()
    dims.bind("W", W, ("D_v", "D_k"))
    dims.bind("q", q, ("D_k",))
    check_same_device(W=W, q=q)
    _check_same_dtype(W=W, q=q)
    return W @ q


@guarded
def store(keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Write ``N`` pairs at once: ``W = Σ_i v_i k_iᵀ = Vᵀ K`` (the sum of :func:`hebbian_write` from zero).

    Args:
        keys: ``K``, shape ``(N, D_k)``.
        values: ``V``, shape ``(N, D_v)``.

    Returns:
        ``W``, shape ``(D_v, D_k)``.

    Raises:
        TypeError, ValueError: as :func:`hebbian_write`.
    """
    dims = Dims()
    dims.bind("keys", keys, ("N", "D_k"))
    dims.bind("values", values, ("N", "D_v"))
    check_same_device(keys=keys, values=values)
    _check_same_dtype(keys=keys, values=values)
    return values.transpose(0, 1) @ keys  # (D_v, N) @ (N, D_k)


@guarded
def recall(W: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Read many queries at once: row ``j`` is ``W q_j``.

    Args:
        W: memory, shape ``(D_v, D_k)``.
        queries: shape ``(N, D_k)``.

    Returns:
        Retrieved values, shape ``(N, D_v)``.

    Raises:
        TypeError, ValueError: as :func:`hebbian_write`.
    """
    dims = Dims()
    dims.bind("W", W, ("D_v", "D_k"))
    dims.bind("queries", queries, ("N", "D_k"))
    check_same_device(W=W, queries=queries)
    _check_same_dtype(W=W, queries=queries)
    return queries @ W.transpose(0, 1)  # (N, D_k) @ (D_k, D_v)


def _generator(seed: int | None) -> torch.Generator:
    check_seed("seed", seed, allow_none=True)
    generator = torch.Generator()
    if seed is not None:
        generator.manual_seed(seed)
    else:
        generator.seed()
    return generator


@guarded
def random_unit_keys(n: int, d: int, *, seed: int | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``n`` keys drawn uniformly on the unit sphere of ``R^d`` (normalised Gaussians), shape ``(n, d)``.

    Drawn in float64 and then cast to ``dtype``, so a seed gives the same keys in every dtype.

    Raises:
        TypeError: ``n`` or ``d`` is not an int, ``seed`` not an int or None, ``dtype`` not a floating dtype.
        ValueError: ``n`` or ``d`` is not positive.
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    _check_dtype(dtype)
    check_allocation("n" if n >= d else "d", (n, d), dtype=torch.float64, what="the keys")
    keys = torch.randn(n, d, generator=_generator(seed), dtype=torch.float64)
    return (keys / keys.norm(dim=1, keepdim=True)).to(dtype)


@guarded
def orthonormal_keys(n: int, d: int, *, seed: int | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``n`` random orthonormal keys in ``R^d`` (rows of a random orthogonal matrix), shape ``(n, d)``.

    Computed in float64 (QR has no float16 kernel) and then cast to ``dtype``.

    Raises:
        TypeError: as :func:`random_unit_keys`.
        ValueError: ``n`` or ``d`` not positive; ``n > d``: at most ``d`` vectors of ``R^d`` can be mutually
            orthogonal.
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    _check_dtype(dtype)
    if n > d:
        raise ValueError(f"n: at most d = {d} keys of R^{d} can be orthonormal, got n = {n}")
    check_allocation("d", (d, d), dtype=torch.float64, what="a random orthogonal matrix")
    gaussian = torch.randn(d, d, generator=_generator(seed), dtype=torch.float64)
    basis, _ = torch.linalg.qr(gaussian)  # columns are orthonormal
    return basis.transpose(0, 1)[:n].contiguous().to(dtype)


@guarded
def crosstalk_energy(keys: torch.Tensor) -> torch.Tensor:
    """Mean over ``j`` of ``Σ_{i≠j} (k_iᵀ k_j)²``: the interference a stored key meets on recall.

    With unit-norm values that are mutually orthogonal, this is the expected squared norm of the crosstalk term
    of ``W k_j``. Zero for orthonormal keys.

    Args:
        keys: shape ``(N, D_k)``.

    Returns:
        A 0-dim tensor of the keys' dtype.

    Raises:
        TypeError: ``keys`` is not a floating tensor. ValueError: not ``(N, D_k)``, or ``N = 0`` (no mean to take).
    """
    dims = Dims()
    dims.bind("keys", keys, ("N", "D_k"))
    _check_not_empty("keys", dims)
    gram = keys @ keys.transpose(0, 1)  # (N, N): entry (i, j) = k_iᵀ k_j
    off_diagonal = gram - torch.diag_embed(torch.diagonal(gram))
    return (off_diagonal**2).sum(dim=0).mean()


@guarded
def crosstalk_energies(keys: torch.Tensor) -> torch.Tensor:
    """:func:`crosstalk_energy` of ``R`` key sets at once, as one batch of matrix products.

    Args:
        keys: shape ``(R, N, D_k)``: ``R`` independent sets of ``N`` keys.

    Returns:
        ``(R,)`` in the keys' dtype: entry ``r`` is the mean over ``j`` of ``Σ_{i≠j} (k_iᵀ k_j)²`` within set ``r``.

    Raises:
        TypeError: ``keys`` is not a floating tensor. ValueError: not ``(R, N, D_k)``, or ``N = 0``.
    """
    dims = Dims()
    dims.bind("keys", keys, ("R", "N", "D_k"))
    _check_not_empty("keys", dims)
    gram = keys @ keys.transpose(1, 2)  # (R, N, N)
    off_diagonal = gram - torch.diag_embed(torch.diagonal(gram, dim1=1, dim2=2))
    return (off_diagonal**2).sum(dim=1).mean(dim=1)


def predicted_crosstalk_energy(n: int, d: int) -> float:
    """``(N − 1) / d``: the expected :func:`crosstalk_energy` of ``n`` random unit keys in ``R^d``.

    Each of the ``N − 1`` other keys contributes ``E[(k_iᵀ k_j)²] = 1/d`` for independent uniform unit vectors.
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    return (n - 1) / d


@guarded
def recall_accuracy(W: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> float:
    """Fraction of stored pairs recalled correctly, after clean-up by the nearest stored value.

    Key ``j`` counts as recalled when ``W k_j`` has a larger dot product with ``v_j`` than with any other
    stored value (ties count as failures).

    Args:
        W: memory, shape ``(D_v, D_k)``.
        keys: shape ``(N, D_k)``.
        values: shape ``(N, D_v)``.

    Returns:
        A float in ``[0, 1]``.

    Raises:
        TypeError: as :func:`hebbian_write`. ValueError: shapes disagree, different devices, ``N = 0``, or a
        NaN / infinite entry (it would make every comparison false and report 0 silently).
    """
    dims = Dims()
    dims.bind("W", W, ("D_v", "D_k"))
    dims.bind("keys", keys, ("N", "D_k"))
    dims.bind("values", values, ("N", "D_v"))
    _check_not_empty("keys", dims)
    check_same_device(W=W, keys=keys, values=values)
    _check_same_dtype(W=W, keys=keys, values=values)
    for name, tensor in (("W", W), ("keys", keys), ("values", values)):
        if not torch.isfinite(tensor).all():
            raise ValueError(f"{name}: expected finite entries, got NaN or infinity")
    scores = recall(W, keys) @ values.transpose(0, 1)  # (N, N): retrieved j against stored i
    target = torch.diagonal(scores)
    rivals = scores.clone()
    rivals.fill_diagonal_(-torch.inf)
    return (target > rivals.max(dim=1).values).double().mean().item()


@guarded
def cleanup_scores(keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The clean-up scores of ``R`` memories at once: entry ``[r, j, i] = v_iᵀ (W_r k_j)``, ``W_r = Σ_l v_l k_lᵀ``.

    Row ``j`` of memory ``r`` compares the value retrieved with key ``j`` against every stored value ``i``; recall of
    ``j`` succeeds when the diagonal entry ``[r, j, j]`` beats the rest of the row (:func:`recall_accuracy`).

    Args:
        keys: ``(R, N, D_k)``, floating.
        values: ``(R, N, D_v)``, the same dtype.

    Returns:
        ``(R, N, N)`` in the dtype of ``keys``.

    Raises:
        TypeError: not floating tensors of one dtype. ValueError: shapes that disagree, or a different device.
    """
    dims = Dims()
    dims.bind("keys", keys, ("R", "N", "D_k"))
    dims.bind("values", values, ("R", "N", "D_v"))
    check_same_device(keys=keys, values=values)
    _check_same_dtype(keys=keys, values=values)
    W = values.transpose(1, 2) @ keys  # (R, D_v, D_k): each memory's Σ v_l k_lᵀ
    return (keys @ W.transpose(1, 2)) @ values.transpose(1, 2)  # (R, N, D_v) @ (R, D_v, N)


@guarded
def cleanup_accuracy(scores: torch.Tensor) -> torch.Tensor:
    """Per memory, the fraction of rows of :func:`cleanup_scores` whose own (diagonal) score strictly beats every
    rival; ties fail, as in :func:`recall_accuracy`.

    Args:
        scores: ``(R, N, N)``, entry ``[r, j, i] = v_iᵀ (W_r k_j)``, with ``N ≥ 2``.

    Returns:
        ``(R,)`` float64 accuracies in ``[0, 1]``.

    Raises:
        TypeError: ``scores`` is not a floating tensor. ValueError: not ``(R, N, N)``, ``N < 2``, or a NaN entry.
    """
    dims = Dims()
    dims.bind("scores", scores, ("R", "N", "N"))
    if dims["N"] < 2:
        raise ValueError(f"scores: a rival needs N ≥ 2 stored pairs, got shape {tuple(scores.shape)}")
    if torch.isnan(scores).any():
        raise ValueError("scores: expected no NaN entry (every comparison with NaN is false)")
    own = torch.diagonal(scores, dim1=1, dim2=2)
    rivals = scores.masked_fill(torch.eye(dims["N"], dtype=torch.bool, device=scores.device), -torch.inf)
    return (own > rivals.max(dim=2).values).double().mean(dim=1)


def rival_score_variance(n: int, d: int) -> float:
    """``2/d + (N − 2)/d²``: the variance of a rival's score ``v_iᵀ (W k_j)``, ``i ≠ j``, for random unit pairs.

    The score is ``Σ_l (v_iᵀ v_l)(k_lᵀ k_j)``. The term ``l = i`` is ``k_iᵀ k_j`` and the term ``l = j`` is
    ``v_iᵀ v_j``: each has variance ``1/d``. Each of the other ``N − 2`` terms is a product of two independent
    dot products of variance ``1/d``, so ``1/d²``. All terms have mean 0 and are uncorrelated, so the variances add.
    The own score ``v_jᵀ (W k_j)`` is ``1`` plus ``N − 1`` such products: variance ``(N − 1)/d²``.

    Raises:
        TypeError, ValueError: ``n`` or ``d`` not a positive int; ``n < 2`` (no rival).
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    if n < 2:
        raise ValueError(f"n: a rival needs at least 2 stored pairs, got n = {n}")
    return 2 / d + (n - 2) / d**2
