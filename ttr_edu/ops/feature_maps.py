"""Feature maps φ for kernelised (linear) attention, and the two key normalisations.

A feature map replaces the softmax kernel ``exp(q·k)`` by a dot product ``φ(q)·φ(k)`` in a space of dimension
``d_dot`` (Katharopoulos et al. 2020; Schlag, Irie, Schmidhuber 2021, §5). The memory ``S = Σ φ(k) vᵀ`` then holds at
most ``d_dot`` mutually orthogonal keys, so ``d_dot`` is its capacity (Schlag et al. 2021, §4.1).

| name            | φ(x)                                                           | d_dot       |
|-----------------|----------------------------------------------------------------|-------------|
| ``elu_plus_one``| ``ELU(x) + 1`` (Katharopoulos et al. 2020)                     | ``d_k``     |
| ``relu``        | ``ReLU(x)``                                                    | ``d_k``     |
| ``identity``    | ``x``                                                          | ``d_k``     |
| ``dpfp``        | ``concat_{j=1..ν} r ⊙ roll(r, j)``, ``r = [ReLU(x); ReLU(−x)]``| ``2 d_k ν`` |
| ``favor_plus``  | ``exp(−‖x‖²/2)/√(2m) · [exp(Ωx); exp(−Ωx)]``                    | ``2 m``     |

Every map acts on the last axis, so ``(B, T, H, D_k)`` becomes ``(B, T, H, d_dot)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from ttr_edu._internal.validation import (
    check_allocation,
    check_bool,
    check_choice,
    check_generator,
    check_positive_float,
    check_positive_int,
    check_tensor,
    guarded,
)

__all__ = [
    "elu_plus_one",
    "relu_feature_map",
    "identity_feature_map",
    "dpfp",
    "favor_plus",
    "favor_plus_variance",
    "orthogonal_random_features",
    "FavorPlus",
    "sum_norm",
    "l2_norm",
    "d_dot",
    "get_feature_map",
    "FEATURE_MAPS",
]


@guarded
def elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    """``φ(x) = ELU(x) + 1`` (Katharopoulos et al. 2020, eq. 7): positive, ``d_dot = d_k``.

    Args:
        x: ``(..., D_k)`` floating tensor.
    Returns:
        ``(..., D_k)``, same dtype.
    Raises:
        TypeError: ``x`` is not a floating-point tensor.
    """
    check_tensor("x", x)
    return F.elu(x) + 1.0


@guarded
def relu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``φ(x) = ReLU(x)``: non-negative, ``d_dot = d_k``. ``(..., D_k) -> (..., D_k)``; TypeError if ``x`` not float."""
    check_tensor("x", x)
    return F.relu(x)


@guarded
def identity_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``φ(x) = x`` (plain linear attention; the form of the dual of a linear layer), ``d_dot = d_k``."""
    check_tensor("x", x)
    return x


@guarded
def dpfp(x: torch.Tensor, nu: int = 1) -> torch.Tensor:
    """Deterministic parameter-free projection DPFP(ν) (Schlag, Irie, Schmidhuber 2021, §5.4, eq. 37).

    ``r(x) = [ReLU(x); ReLU(−x)] ∈ R^{2 d_k}`` and ``φ(x) = concat_{j=1..ν} r ⊙ roll(r, j)``, so ``d_dot = 2 d_k ν``.
    Each feature is a product of two entries of ``r``; the features are non-negative. At ``ν = d_k`` a block
    multiplies ``ReLU(x_i)`` with ``ReLU(−x_i)`` and is identically zero.

    Args:
        x: ``(..., D_k)`` floating tensor.
        nu: the number of rolls ν, an int in ``[1, 2 D_k − 1]``.
    Returns:
        ``(..., 2 D_k ν)``, same dtype.
    Raises:
        TypeError: ``x`` not floating, ``nu`` not an int. ValueError: ``nu`` out of range.
    """
    check_tensor("x", x)
    check_positive_int("nu", nu)
    width = 2 * x.shape[-1]
    if nu >= width:
        raise ValueError(f"nu: expected an int in [1, 2 * D_k - 1] = [1, {width - 1}], got {nu}")
    r = torch.cat([F.relu(x), F.relu(-x)], dim=-1)  # (..., 2 D_k)
    return torch.cat([r * torch.roll(r, shifts=j, dims=-1) for j in range(1, nu + 1)], dim=-1)


def _check_projection_size(m: int, d: int, m_name: str, d_name: str) -> None:
    """Ω is drawn as ``ceil(m / d)`` Gaussian ``d × d`` blocks in fp64: refuse what cannot fit, naming the larger."""
    check_allocation(m_name if m >= d else d_name, (math.ceil(m / d), d, d), dtype=torch.float64, what="the draw of Ω")


@guarded
def orthogonal_random_features(
    m: int,
    d: int,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Draw the FAVOR+ projection Ω, ``(m, d)``: orthogonal random features (Choromanski et al. 2021, §2.4).

    Rows are drawn in blocks of ``d`` mutually orthogonal directions (QR of a Gaussian matrix); each row is then
    rescaled by the norm of an independent Gaussian vector in ``R^d``, so each row is marginally ``N(0, I_d)`` as
    the unbiased softmax-kernel estimator needs, while rows within a block stay exactly orthogonal.

    Args:
        m: number of random features (rows), a positive int; ``m > d`` stacks independent blocks.
        d: the input dimension ``D_k``.
        generator: a ``torch.Generator`` for reproducible draws (``None``: the global RNG).
        dtype, device: of the returned tensor (drawn in fp64 on the CPU, then converted).
    Returns:
        Ω, ``(m, d)``.
    Raises:
        TypeError / ValueError: ``m`` or ``d`` not a positive int, or so large that Ω would not fit in memory; a
            ``generator``, ``dtype`` or ``device`` of another kind.
    """
    check_positive_int("m", m)
    check_positive_int("d", d)
    _check_projection_size(m, d, "m", "d")
    gaussian = torch.randn(math.ceil(m / d), d, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)  # one orthogonal block per draw, batched
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # sign fix: Haar-distributed blocks
    directions = q.transpose(-1, -2).reshape(-1, d)[:m]  # (m, d): the blocks' columns as rows, unit norm
    norms = torch.randn(m, d, generator=generator, dtype=torch.float64).norm(dim=-1, keepdim=True)
    return (directions * norms).to(dtype=dtype, device=device)


@guarded
def favor_plus(x: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """FAVOR+ positive random features (Choromanski et al. 2021, eq. 5 with the hyperbolic ``[exp; exp(−)]`` pair).

    ``φ(x) = exp(−‖x‖²/2) / √(2m) · [exp(Ωx); exp(−Ωx)]``, so that ``E[φ(q)·φ(k)] = exp(q·k)``; ``d_dot = 2m``.
    (Performer also rescales ``x`` by ``d^{-1/4}``; do that before calling, if wanted.)

    Args:
        x: ``(..., D_k)`` floating tensor.
        projection: Ω, ``(m, D_k)``, e.g. from :func:`orthogonal_random_features`; same dtype and device as ``x``.
    Returns:
        ``(..., 2m)``, the dtype of ``x``.
    Raises:
        TypeError: non-floating tensors or different dtypes. ValueError: Ω is not ``(m, D_k)`` or on another device.
    """
    check_tensor("x", x)
    check_tensor("projection", projection)
    if projection.dim() != 2 or projection.shape[1] != x.shape[-1]:
        raise ValueError(f"projection: expected shape (m, D_k) = (m, {x.shape[-1]}), got {tuple(projection.shape)}")
    if projection.device != x.device:
        raise ValueError(f"projection: expected the device of x ({x.device}), got {projection.device}")
    if projection.dtype != x.dtype:
        raise TypeError(f"projection: expected the dtype of x ({x.dtype}), got {projection.dtype}")
    m = projection.shape[0]
    wx = x @ projection.T  # (..., m)
    half_sq_norm = 0.5 * x.pow(2).sum(-1, keepdim=True)
    # exp(±Ωx − ‖x‖²/2) in one exponent: the two factors alone overflow for large ‖x‖.
    return torch.cat([torch.exp(wx - half_sq_norm), torch.exp(-wx - half_sq_norm)], dim=-1) / math.sqrt(2 * m)


@guarded
def favor_plus_variance(q: torch.Tensor, k: torch.Tensor, m: int) -> torch.Tensor:
    """The variance of the FAVOR+ estimate ``φ(q)·φ(k)`` of ``exp(q·k)`` over ``m`` independent ``N(0, I)`` rows of Ω.

    Each row ``ω`` contributes ``exp(−(‖q‖² + ‖k‖²)/2) cosh(ωᵀ(q + k))`` and the estimate is their mean; with
    ``E[exp(ωᵀz)] = exp(‖z‖²/2)`` and ``cosh² u = (1 + cosh 2u)/2`` this gives

        ``Var = exp(2 q·k) (cosh(‖q + k‖²) − 1) / m = 2 exp(2 q·k) sinh²(‖q + k‖²/2) / m``

    (written with ``sinh²``, which loses no digits where ``‖q + k‖²`` is small). It is 0 at ``k = −q``, where the
    pair ``exp(±ωᵀz)`` cancels the noise exactly. Orthogonal rows (:func:`orthogonal_random_features`) are not
    independent and draw less noisy estimates (Choromanski et al. 2021, §4); this is the i.i.d. baseline.

    Args:
        q, k: ``(..., D_k)`` floating tensors of one shape and dtype.
        m: the number of rows of Ω, a positive int (``d_dot = 2m``).
    Returns:
        ``(...)``, the dtype of ``q``.
    Raises:
        TypeError: non-floating tensors, different dtypes, or ``m`` not an int. ValueError: ``q`` and ``k`` of
            different shapes, or ``m`` < 1.
    """
    check_tensor("q", q)
    check_tensor("k", k)
    check_positive_int("m", m)
    if k.shape != q.shape:
        raise ValueError(f"k: expected the shape of q, (..., D_k) = {tuple(q.shape)}, got {tuple(k.shape)}")
    if k.dtype != q.dtype:
        raise TypeError(f"k: expected the dtype of q ({q.dtype}), got {k.dtype}")
    half = 0.5 * (q + k).pow(2).sum(-1)
    return 2.0 * torch.exp(2.0 * (q * k).sum(-1)) * torch.sinh(half).pow(2) / m


class FavorPlus(torch.nn.Module):
    """FAVOR+ as a module holding Ω, ``(m, d_k)``, either fixed or redrawn on every call.

    Schlag et al.'s synthetic code redraws Ω on every forward pass; a fixed Ω makes the map deterministic.
    Ω is a buffer, so ``.to(device)`` moves it.

    Caution: ``redraw=True`` redraws on every *call*, not every forward pass. Keys and queries featurised in two
    calls, ``fmap(k)`` then ``fmap(q)``, then use different random features, and ``φ(q) · φ(k)`` no longer
    estimates ``exp(q · k)``: retrieval is noise. For one Ω per forward pass, featurise inside
    :meth:`shared_draw` (one fresh draw for the whole block), or keep ``redraw=False`` and call :meth:`draw` once
    at the start of each pass (as :class:`ttr_edu.models` does).

    Args:
        d_k: input dimension. m: number of random features (``d_dot = 2m``).
        redraw: draw a fresh Ω on every call (from ``generator``).
        generator: a ``torch.Generator`` for reproducible draws; ``seed`` makes one if none is given.

    Example::

        fmap = FavorPlus(d_k, m, redraw=True, seed=0)
        with fmap.shared_draw():  # one Ω for both
            phi_q, phi_k = fmap(q), fmap(k)
    """

    projection: torch.Tensor  # Ω, a buffer

    def __init__(
        self,
        d_k: int,
        m: int,
        *,
        redraw: bool = False,
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        self.d_k, self.m = check_positive_int("d_k", d_k), check_positive_int("m", m)
        _check_projection_size(m, d_k, "m", "d_k")
        self.redraw = check_bool("redraw", redraw)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed: expected an int or None, got {type(seed).__name__} {seed!r}")
        check_generator("generator", generator)
        if generator is None and seed is not None:
            generator = torch.Generator().manual_seed(seed)
        self.generator = generator
        self.register_buffer("projection", orthogonal_random_features(m, d_k, generator=generator))

    @property
    def d_dot(self) -> int:
        return 2 * self.m

    def draw(self) -> None:
        """Replace Ω by a fresh draw (keeping its dtype and device)."""
        self.projection = orthogonal_random_features(
            self.m, self.d_k, generator=self.generator, dtype=self.projection.dtype, device=self.projection.device
        )

    @contextmanager
    def shared_draw(self) -> Iterator[FavorPlus]:
        """Inside the block, every call uses the same Ω: drawn once on entry if ``redraw``, else the fixed one.

        ``redraw`` is restored on exit, so the next call (or block) draws again.
        """
        if self.redraw:
            self.draw()
        redraw, self.redraw = self.redraw, False
        try:
            yield self
        finally:
            self.redraw = redraw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_k) -> (..., 2m)``; see :func:`favor_plus`. Draws a fresh Ω first if ``redraw`` (see above)."""
        check_tensor("x", x)
        if x.dim() == 0 or x.shape[-1] != self.d_k:
            raise ValueError(f"x: expected shape (..., d_k) = (..., {self.d_k}), got {tuple(x.shape)}")
        if x.device != self.projection.device:
            raise ValueError(
                f"x: expected a tensor on {self.projection.device} (the device of the module's projection; "
                f"module.to(device) moves it), got one on {x.device}"
            )
        if self.redraw:
            self.draw()
        return favor_plus(x, self.projection.to(dtype=x.dtype))

    def extra_repr(self) -> str:
        return f"d_k={self.d_k}, m={self.m}, redraw={self.redraw}"


@guarded
def sum_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Sum normalisation ``x / (Σ_i x_i + eps)`` over the last axis (Schlag et al. 2021, §4.2, eq. 31).

    Meant for non-negative features: the result then lies on the simplex (up to ``eps``, which guards the all-zero
    vector, e.g. a ReLU feature map of a negative input). Schlag et al. call it crucial for stable training of the
    delta rule. ``(..., D) -> (..., D)``.
    """
    check_tensor("x", x)
    check_positive_float("eps", eps, allow_zero=True)
    return x / (x.sum(-1, keepdim=True) + eps)


@guarded
def l2_norm(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """L2 normalisation ``x / max(‖x‖, eps)`` over the last axis (as fla's DeltaNet applies to q and k).

    Unit keys make ``β ‖k‖² = β``, so any ``β ∈ (0, 2)`` keeps the delta rule stable. ``(..., D) -> (..., D)``.
    """
    check_tensor("x", x)
    check_positive_float("eps", eps)
    return F.normalize(x, p=2.0, dim=-1, eps=eps)


def _favor_plus_from_params(d_k: int | None = None, m: int | None = None, **params) -> FavorPlus:
    if d_k is None or m is None:
        raise ValueError("favor_plus: get_feature_map('favor_plus', d_k=..., m=...) needs both d_k and m")
    return FavorPlus(d_k, m, **params)


#: name -> (feature map factory from params, d_dot from (d_k, params))
FEATURE_MAPS: dict[str, tuple[Callable[..., Callable], Callable[..., int]]] = {
    "elu_plus_one": (lambda: elu_plus_one, lambda d_k: d_k),
    "relu": (lambda: relu_feature_map, lambda d_k: d_k),
    "identity": (lambda: identity_feature_map, lambda d_k: d_k),
    "dpfp": (
        lambda nu=1: partial(dpfp, nu=check_positive_int("nu", nu)),
        lambda d_k, nu=1: 2 * d_k * _dpfp_nu(nu, d_k),
    ),
    "favor_plus": (_favor_plus_from_params, lambda d_k, m, **_: 2 * check_positive_int("m", m)),
}


def _dpfp_nu(nu, d_k: int) -> int:
    """DPFP's ``nu`` as :func:`dpfp` accepts it: an int in ``[1, 2 d_k − 1]``."""
    check_positive_int("nu", nu)
    if nu >= 2 * d_k:
        raise ValueError(f"nu: expected an int in [1, 2 * D_k - 1] = [1, {2 * d_k - 1}], got {nu}")
    return nu


def _lookup(name: str):
    check_choice("name", name, FEATURE_MAPS)
    return FEATURE_MAPS[name]


@guarded
def d_dot(name: str, d_k: int, **params: Any) -> int:
    """The feature dimension ``d_dot`` of a named map on inputs of size ``d_k``, the memory's capacity.

    ``elu_plus_one``, ``relu``, ``identity``: ``d_k``; ``dpfp``: ``2 d_k ν`` (``nu=``); ``favor_plus``: ``2m`` (``m=``).

    Raises:
        ValueError: an unknown name (the message lists the valid ones). TypeError: unexpected params.
    """
    check_positive_int("d_k", d_k)
    return _lookup(name)[1](d_k, **params)


@guarded
def get_feature_map(name: str, **params: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The feature map called ``name``, with its parameters bound: ``(..., D_k) -> (..., d_dot)``.

    ``get_feature_map("dpfp", nu=2)``; ``get_feature_map("favor_plus", d_k=64, m=128, redraw=False, seed=0)``
    returns a :class:`FavorPlus` module.

    Raises:
        ValueError: an unknown name (the message lists the valid ones). TypeError: unexpected params.
    """
    return _lookup(name)[0](**params)
