"""Hebbian outer-product memory: the associative memory every later layer refines (chapter 01).

Notation. The papers write the memory as a fast weight matrix ``W`` of shape ``(D_v, D_k)``: write ``W += v kᵀ``,
read ``W q`` [Hopfield 1982; Schlag et al. 2021, eq. 3]. The layers in :mod:`ttr_edu.ops` keep the transposed state
``S = Wᵀ`` of shape ``(D_k, D_v)`` as flash-linear-attention does; chapter 02 makes the switch.

Why it works and when it fails. Reading with a stored key ``k_j`` gives

    W k_j = v_j (k_jᵀ k_j)  +  Σ_{i≠j} v_i (k_iᵀ k_j)
            signal             crosstalk

Orthonormal keys cancel the crosstalk exactly, so at most ``N = D_k`` pairs are recalled perfectly. For ``N``
random unit keys in ``D_k`` dimensions, ``E[(k_iᵀ k_j)²] = 1/D_k``, so the crosstalk energy
``Σ_{i≠j} (k_iᵀ k_j)²`` grows like ``(N − 1) / D_k``.

All functions take float tensors (any floating dtype) on any device and return the input's dtype.
"""

from __future__ import annotations

import torch

from ttr_edu._validation import Dims, check_positive_int, check_same_device

__all__ = [
    "hebbian_write",
    "hebbian_read",
    "store",
    "recall",
    "random_unit_keys",
    "orthonormal_keys",
    "crosstalk_energy",
    "predicted_crosstalk_energy",
    "recall_accuracy",
]


def hebbian_write(W: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One Hebbian write: ``W + v kᵀ`` (a new tensor; ``W`` is not modified).

    Args:
        W: memory, shape ``(D_v, D_k)``, floating.
        k: key, shape ``(D_k,)``.
        v: value, shape ``(D_v,)``.

    Returns:
        The new memory, shape ``(D_v, D_k)``.

    Raises:
        TypeError: an argument is not a floating tensor.
        ValueError: shapes disagree, or tensors are on different devices.

    Source: Hebbian outer-product learning [Hopfield 1982]; the fast-weight write of Schlag et al. (2021), eq. 3.
    """
    dims = Dims()
    dims.bind("W", W, ("D_v", "D_k"))
    dims.bind("k", k, ("D_k",))
    dims.bind("v", v, ("D_v",))
    check_same_device(W=W, k=k, v=v)
    return W + torch.outer(v, k)


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
    return W @ q


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
    return values.transpose(0, 1) @ keys  # (D_v, N) @ (N, D_k)


def recall(W: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Read many queries at once: row ``j`` is ``W q_j``.

    Args:
        W: memory, shape ``(D_v, D_k)``.
        queries: shape ``(N, D_k)``.

    Returns:
        Retrieved values, shape ``(N, D_v)``.
    """
    dims = Dims()
    dims.bind("W", W, ("D_v", "D_k"))
    dims.bind("queries", queries, ("N", "D_k"))
    check_same_device(W=W, queries=queries)
    return queries @ W.transpose(0, 1)  # (N, D_k) @ (D_k, D_v)


def _generator(seed: int | None) -> torch.Generator:
    generator = torch.Generator()
    if seed is not None:
        generator.manual_seed(seed)
    else:
        generator.seed()
    return generator


def random_unit_keys(n: int, d: int, *, seed: int | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``n`` keys drawn uniformly on the unit sphere of ``R^d`` (normalised Gaussians), shape ``(n, d)``.

    Raises:
        TypeError, ValueError: ``n`` or ``d`` is not a positive int.
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    keys = torch.randn(n, d, generator=_generator(seed), dtype=dtype)
    return keys / keys.norm(dim=1, keepdim=True)


def orthonormal_keys(n: int, d: int, *, seed: int | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``n`` random orthonormal keys in ``R^d`` (rows of a random orthogonal matrix), shape ``(n, d)``.

    Raises:
        ValueError: ``n > d``: at most ``d`` vectors of ``R^d`` can be mutually orthogonal.
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    if n > d:
        raise ValueError(f"n: at most d = {d} keys of R^{d} can be orthonormal, got n = {n}")
    gaussian = torch.randn(d, d, generator=_generator(seed), dtype=dtype)
    basis, _ = torch.linalg.qr(gaussian)  # columns are orthonormal
    return basis.transpose(0, 1)[:n].contiguous()


def crosstalk_energy(keys: torch.Tensor) -> torch.Tensor:
    """Mean over ``j`` of ``Σ_{i≠j} (k_iᵀ k_j)²``: the interference a stored key meets on recall.

    With unit-norm values that are mutually orthogonal, this is the expected squared norm of the crosstalk term
    of ``W k_j``. Zero for orthonormal keys.

    Args:
        keys: shape ``(N, D_k)``.

    Returns:
        A 0-dim tensor of the keys' dtype.
    """
    Dims().bind("keys", keys, ("N", "D_k"))
    gram = keys @ keys.transpose(0, 1)  # (N, N): entry (i, j) = k_iᵀ k_j
    off_diagonal = gram - torch.diag_embed(torch.diagonal(gram))
    return (off_diagonal**2).sum(dim=0).mean()


def predicted_crosstalk_energy(n: int, d: int) -> float:
    """``(N − 1) / d``: the expected :func:`crosstalk_energy` of ``n`` random unit keys in ``R^d``.

    Each of the ``N − 1`` other keys contributes ``E[(k_iᵀ k_j)²] = 1/d`` for independent uniform unit vectors.
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    return (n - 1) / d


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
    """
    dims = Dims()
    dims.bind("W", W, ("D_v", "D_k"))
    dims.bind("keys", keys, ("N", "D_k"))
    dims.bind("values", values, ("N", "D_v"))
    scores = recall(W, keys) @ values.transpose(0, 1)  # (N, N): retrieved j against stored i
    target = torch.diagonal(scores)
    rivals = scores.clone()
    rivals.fill_diagonal_(-torch.inf)
    return (target > rivals.max(dim=1).values).double().mean().item()
