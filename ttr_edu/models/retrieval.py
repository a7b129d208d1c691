"""The single-layer retrieval model of Schlag, Irie and Schmidhuber (2021, §6.1).

The model reads a :class:`ttr_edu.tasks.RetrievalBatch`: it embeds the key symbols, projects them to keys and the
query symbol to a query (both ``D_k``), applies a feature map φ and writes one-hot values into a fast-weight
memory; then it reads the memory with the query:

* ``update_rule="sum"`` (linear attention, Schlag et al. eqs. 11-13):
  ``S = Σ_t φ(k_t) v_tᵀ``, ``z = Σ_t φ(k_t)``, ``y = Sᵀφ(q) / (zᵀφ(q) + ε)``;
* ``update_rule="delta"`` (eq. 29 with sum-normalised keys, eq. 31, as the authors' code):
  ``k̂_t = φ(k_t)/Σφ(k_t)``, ``β_t = σ(W_β x_t)``, ``S_t = S_{t-1} + β_t k̂_t (v_t − S_{t-1}ᵀk̂_t)ᵀ``,
  ``y = S_Tᵀ φ(q)/(Σφ(q) + ε)``;
* ``update_rule="softmax"`` (the baseline with unbounded capacity): ``y = Σ_t softmax_t(q·k_t/√D_k) v_t``.

The delta rule's memory is computed by the package's chunkwise op :func:`ttr_edu.ops.delta_rule_chunk` (final
state ``S`` of shape ``(B, H=1, d_dot, D_v)``); the sum rule's is the plain sum ``φ(K)ᵀV``, which equals the final
state of the ``linear_attention_*`` ops with ``normalize=True`` (a test checks it).
The loss is ``½‖y − onehot(target)‖²`` (0.5 for the all-zero answer, the paper's "chance").

With ``trained_keys=False`` the keys are fixed random Gaussian vectors, the query is the stored key itself and
nothing is trained: this is the untrained-keys control, whose loss degrades smoothly with the number of keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.validation import (
    Dims,
    check_allocation,
    check_bool,
    check_choice,
    check_positive_int,
    check_same_device,
    guarded,
)
from ttr_edu.ops import delta_rule_chunk
from ttr_edu.ops.feature_maps import FEATURE_MAPS, d_dot, get_feature_map, sum_norm
from ttr_edu.tasks.retrieval import RetrievalBatch

__all__ = ["RetrievalModel", "UPDATE_RULES", "retrieval_loss", "sum_rule_retrieve"]

UPDATE_RULES = ("sum", "delta", "softmax")
EPS = 1e-6  # the authors' normaliser epsilon


@guarded
def retrieval_loss(y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``½‖y − onehot(target)‖²`` averaged over the batch (Schlag et al. 2021, §6.1); 0.5 for ``y = 0``.

    Args:
        y: retrieved vectors ``(B, D_v)``, floating.
        target: value symbols ``(B,)``, int64 in ``[0, D_v)``.
    Returns:
        A scalar tensor of the dtype of ``y``.
    Raises:
        TypeError: ``y`` not floating or ``target`` not an integer tensor.
        ValueError: shapes that disagree, or a target outside ``[0, D_v)``.
    """
    dims = Dims()
    dims.bind("y", y, ("B", "D_v"))
    if not isinstance(target, torch.Tensor) or target.dtype != torch.int64:
        raise TypeError(f"target: expected an int64 tensor of shape (B,), got {getattr(target, 'dtype', type(target))}")
    if target.shape != (dims["B"],):
        raise ValueError(f"target: expected shape (B,) = ({dims['B']},), got {tuple(target.shape)}")
    if target.device != y.device:
        raise ValueError(f"target: expected a tensor on {y.device} (the device of y), got one on {target.device}")
    if target.device.type != "meta" and len(target) and (target.min() < 0 or target.max() >= dims["D_v"]):
        raise ValueError(
            f"target: expected symbols in [0, D_v) = [0, {dims['D_v']}), got range "
            f"[{int(target.min())}, {int(target.max())}]"
        )
    return 0.5 * (y - F.one_hot(target, dims["D_v"]).to(y.dtype)).pow(2).sum(-1).mean()


@guarded
def sum_rule_retrieve(phi_k: torch.Tensor, v: torch.Tensor, phi_q: torch.Tensor) -> torch.Tensor:
    """Write every pair with the sum rule, then read with the normaliser (Schlag et al. 2021, eqs. 11-13).

    ``S = Σ_t φ(k_t) v_tᵀ``, ``z = Σ_t φ(k_t)``, ``y = Sᵀφ(q) / (zᵀφ(q) + ε)`` with ``ε = 1e-6`` (the authors' code).
    The final state equals that of the ``linear_attention_*`` ops with ``normalize=True`` (a test checks it).

    Args:
        phi_k: featurised keys ``(B, T, d_dot)``.
        v: values ``(B, T, D_v)``, the same dtype.
        phi_q: the featurised query ``(B, d_dot)``.

    Returns:
        ``y``, ``(B, D_v)``.

    Raises:
        TypeError: non-floating tensors, or ``v``/``phi_q`` of another dtype than ``phi_k``.
        ValueError: shapes that disagree (named dims in the message), another device, NaN/inf entries.
    """
    dims = Dims()
    dims.bind("phi_k", phi_k, ("B", "T", "d_dot"))
    dims.bind("v", v, ("B", "T", "D_v"))
    dims.bind("phi_q", phi_q, ("B", "d_dot"))
    for name, x in (("v", v), ("phi_q", phi_q)):
        if x.dtype != phi_k.dtype:
            raise TypeError(f"{name}: expected the dtype of phi_k ({phi_k.dtype}), got {x.dtype}")
    check_same_device(phi_k=phi_k, v=v, phi_q=phi_q)
    S = torch.einsum("b t k, b t v -> b k v", phi_k, v)  # (B, d_dot, D_v)
    z = phi_k.sum(1)  # (B, d_dot)
    numerator = torch.einsum("b k v, b k -> b v", S, phi_q)
    return numerator / (torch.einsum("b k, b k -> b", z, phi_q)[:, None] + EPS)


class RetrievalModel(nn.Module):
    """Embed keys, write (φ(k), v) pairs into a fast-weight memory, read it with φ(q).

    Args:
        num_keys: size of the key vocabulary (the embedding's rows).
        num_values: size of the value vocabulary, ``D_v`` (values are one-hot).
        d_k: key/query dimension ``D_k`` (the paper: 64; the course's CPU scale: 16).
        feature_map: a name from :data:`ttr_edu.ops.feature_maps.FEATURE_MAPS` (``"dpfp"``, ``"elu_plus_one"``,
            ``"favor_plus"``, ...); must be ``None`` for ``update_rule="softmax"``.
        feature_map_params: its parameters, e.g. ``{"nu": 2}`` for DPFP or ``{"m": 32}`` for FAVOR+ (``d_k`` is
            filled in; FAVOR+ draws fresh random features on every forward pass, shared by the keys and the query
            of that pass, as the authors' synthetic code, unless ``{"redraw": False}``).
        update_rule: ``"sum"``, ``"delta"`` or ``"softmax"``.
        trained_keys: learn the embedding and the key/query projections (``True``), or use fixed random keys
            with the query equal to its key, ``β = 1`` and nothing trainable (``False``).
        read_out: the sum rule's write-and-read ``(phi_k, v, phi_q) -> y``; default :func:`sum_rule_retrieve`
            (chapter 03's exercise passes the student's own). Only ``update_rule="sum"`` uses it.

    Raises:
        ValueError: an unknown ``update_rule`` or ``feature_map`` (the message lists the valid names), a feature
            map with ``"softmax"`` or none without it, a size < 1, or sizes whose weights could not fit in memory.
        TypeError: a size that is not an int, a ``trained_keys`` that is not a bool, ``feature_map_params`` that are
            not a dict or not the map's.
    """

    def __init__(
        self,
        num_keys: int,
        num_values: int,
        *,
        d_k: int = 16,
        feature_map: str | None = "dpfp",
        feature_map_params: dict | None = None,
        update_rule: str = "sum",
        trained_keys: bool = True,
        read_out=None,
    ) -> None:
        super().__init__()
        if read_out is not None and not callable(read_out):
            raise TypeError(f"read_out: expected a function (phi_k, v, phi_q) -> y, got {type(read_out).__name__}")
        self.read_out = read_out or sum_rule_retrieve
        self.num_keys = check_positive_int("num_keys", num_keys)
        self.num_values = check_positive_int("num_values", num_values)
        self.d_k = check_positive_int("d_k", d_k)
        check_allocation("num_keys" if num_keys >= d_k else "d_k", (num_keys, d_k), what="the key embedding")
        check_allocation("d_k", (d_k, d_k), what="the key and query projections")
        if update_rule not in UPDATE_RULES:
            raise ValueError(f"update_rule: unknown rule {update_rule!r}; valid rules are {', '.join(UPDATE_RULES)}")
        self.update_rule = update_rule
        self.trained_keys = check_bool("trained_keys", trained_keys)
        if feature_map_params is not None and not isinstance(feature_map_params, dict):
            raise TypeError(
                "feature_map_params: expected a dict such as {'nu': 2} or None, got "
                f"{type(feature_map_params).__name__}"
            )
        params = dict(feature_map_params or {})
        self.redraw_features = False
        if update_rule == "softmax":
            if feature_map is not None:
                raise ValueError(
                    f"feature_map: update_rule='softmax' uses no feature map; pass None, got {feature_map!r}"
                )
            self.feature_map, self.d_dot = None, None
        else:
            if feature_map is None:
                raise ValueError(f"feature_map: update_rule={update_rule!r} needs one of {', '.join(FEATURE_MAPS)}")
            check_choice("feature_map", feature_map, FEATURE_MAPS)
            if feature_map == "favor_plus":
                # Redraw once per forward pass (below), not once per call: keys and query must share Ω.
                self.redraw_features = bool(params.pop("redraw", True))
                params = {"d_k": d_k, **params, "redraw": False}
            try:  # an unknown or bad parameter is the caller's feature_map_params
                self.feature_map = get_feature_map(feature_map, **params)
                self.d_dot = d_dot(feature_map, d_k, **{k: v for k, v in params.items() if k in ("nu", "m")})
            except (TypeError, ValueError) as error:
                raise type(error)(f"feature_map_params: {error}") from None
        check_allocation("num_values", (self.d_dot or d_k, num_values), what="the memory S (d_dot, D_v)")
        self.feature_map_name = feature_map

        self.embedding = nn.Embedding(num_keys, d_k)
        if self.trained_keys:
            self.key_proj = nn.Linear(d_k, d_k, bias=False)
            self.query_proj = nn.Linear(d_k, d_k, bias=False)
        else:
            self.embedding.weight.requires_grad_(False)
            self.key_proj = self.query_proj = nn.Identity()
        # β_t = σ(W_β x_t), one scalar per token (Schlag et al. 2021, eq. 30); only the delta rule uses it.
        self.beta_proj = nn.Linear(d_k, 1) if update_rule == "delta" and self.trained_keys else None

    def forward(self, batch: RetrievalBatch) -> torch.Tensor:
        """The retrieved vector ``y``, ``(B, D_v)`` float32 (compare with ``onehot(batch.target)``).

        Raises:
            TypeError: ``batch`` is not a :class:`RetrievalBatch`.
            ValueError: the batch's vocabularies do not fit the model's.
        """
        self._check_batch(batch)
        x = self.embedding(batch.keys)  # (B, T, D_k)
        k = self.key_proj(x)
        q = self.query_proj(self.embedding(batch.query))  # (B, D_k)
        v = F.one_hot(batch.values, self.num_values).to(k.dtype)  # (B, T, D_v)
        if self.update_rule == "softmax":
            weights = torch.softmax(torch.einsum("b t d, b d -> b t", k, q) * self.d_k**-0.5, dim=-1)
            return torch.einsum("b t, b t v -> b v", weights, v)

        if self.redraw_features:
            self.feature_map.draw()
        phi_k, phi_q = self.feature_map(k), self.feature_map(q)  # (B, T, d_dot), (B, d_dot)
        if self.update_rule == "sum":
            # A plain sum rather than the recurrent op: the same final state, 3x faster to train.
            return self.read_out(phi_k, v, phi_q)

        k_hat = sum_norm(phi_k, eps=EPS)  # ‖k̂‖² ≤ 1 and β < 1, so β‖k̂‖² ∈ (0, 1): always stable
        if self.beta_proj is not None:
            beta = torch.sigmoid(self.beta_proj(x))  # (B, T, 1)
        else:
            beta = torch.ones_like(k_hat[..., :1])
        _, S = delta_rule_chunk(
            k_hat[:, :, None],
            k_hat[:, :, None],
            v[:, :, None],
            beta,
            scale=1.0,
            output_final_state=True,
            check_stability="ignore",
        )
        return torch.einsum("b k v, b k -> b v", S[:, 0], sum_norm(phi_q, eps=EPS))

    def loss(self, batch: RetrievalBatch) -> torch.Tensor:
        """``½‖y − onehot(target)‖²`` averaged over the batch (0.5 for ``y = 0``); a scalar tensor."""
        return retrieval_loss(self(batch), batch.target)

    @torch.no_grad()
    def accuracy(self, batch: RetrievalBatch) -> float:
        """Fraction of queries whose ``argmax y`` is the target value."""
        return (self(batch).argmax(-1) == batch.target).float().mean().item()

    def _check_batch(self, batch) -> None:
        if not isinstance(batch, RetrievalBatch):
            raise TypeError(f"batch: expected a ttr_edu.tasks.RetrievalBatch, got {type(batch).__name__}")
        if batch.num_keys > self.num_keys or batch.num_values != self.num_values:
            raise ValueError(
                f"batch: its vocabularies (num_keys={batch.num_keys}, num_values={batch.num_values}) do not fit the "
                f"model (num_keys<={self.num_keys}, num_values={self.num_values})"
            )

    def extra_repr(self) -> str:
        return (
            f"update_rule={self.update_rule!r}, feature_map={self.feature_map_name!r}, d_k={self.d_k}, "
            f"d_dot={self.d_dot}, trained_keys={self.trained_keys}"
        )
