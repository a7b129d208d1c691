"""Any point of the test-time-regression design space as a token mixer: the generic path, slower, and said so.

Every other mixer of the package calls an op of :mod:`ttr_edu.ops` (CONTRIBUTING.md, "Which implementation a layer
calls"). :class:`RegressionMixer` is the one exception: it calls the regression framework
(:class:`ttr_edu.regression.TestTimeRegression`) at a point of :mod:`ttr_edu.regression.design_space`, so that a
point no op computes (a window with the implicit step, forgetting-factor RLS, a learner's own design) can be trained
in :class:`~ttr_edu.models.mqar.MQARModel` and :class:`~ttr_edu.models.lm.TinyLM` before anyone writes its op
(:func:`register_point` registers a point under a name; the registry holds none by default, so its lists stay the
package's own layers). The
price is speed: the framework is written from the objective, not for speed, and the one-token step has no
recurrence to carry, so it reruns the framework over the whole prefix, ``O(t)`` per token. ARCHITECTURE.md says why
this is the only place the framework sits on a layer's path.

The layer's inputs follow the package's parametric mixers: ``q`` and ``k`` through the feature map and an L2 norm
(so a step ``β ∈ (0, 1)`` is stable on every key), ``v`` per head; ``β = σ(W_β x)`` for a stepped optimiser,
``g = log σ(W_g x)`` (a gate in ``(0, 1)``) for data-dependent gates; an MLP memory starts from learned weights. The
point's other parameters (a decay, a window, a ridge, steps, momentum) are its own, fixed.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.validation import check_positive_int
from ttr_edu.layers.base import Mixer
from ttr_edu.layers.registry import MixerSpec, register
from ttr_edu.regression.cost import cost, matched_hidden
from ttr_edu.regression.design_space import Point, named_point

__all__ = ["RegressionMixer", "STEPPED", "register_point"]

#: the optimisers that take a step size ``beta`` per token (each gets one from the layer)
STEPPED = ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum")


def _as_point(point: Point | str) -> Point:
    if isinstance(point, Point):
        return point
    if isinstance(point, str):
        return named_point(point)  # raises ValueError naming the valid names
    raise TypeError(f"point: expected a design_space.Point or a name of NAMED_LAYERS, got {type(point).__name__}")


class RegressionMixer(Mixer):
    """The token mixer of any valid point of the design space, through the regression framework (slow).

    Args:
        hidden_size, num_heads: as every mixer's.
        point: a :class:`~ttr_edu.regression.design_space.Point` (or a name of ``NAMED_LAYERS``).
        use_short_conv, conv_size: the short convolution.
        feature_map: ``φ`` on ``q`` and ``k`` before their L2 norm (:data:`ttr_edu.layers.QK_FEATURE_MAPS`), for a
            parametric point; a kernel point (its memory is the key-value cache) takes none.

    Raises:
        TypeError: ``point`` not a Point or a name; ValueError: a point that makes no layer (the framework's reason),
            or an unknown name; the errors of :class:`~ttr_edu.layers.base.Mixer` for the other arguments.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        point: Point | str,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str | None = "silu",
    ) -> None:
        self.point = _as_point(point)
        problem = self.point.problem()
        if problem is not None:
            raise ValueError(f"point: {self.point.describe()} makes no layer: {problem}")
        self.parametric = self.point.function_class in ("linear", "mlp")
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map if self.parametric else None)
        self.framework = self.point.layer()
        D = self.head_dim
        if self.point.optimizer in STEPPED:
            self.b_proj = nn.Linear(hidden_size, num_heads)
        if self.point.weights == "gates":
            self.g_proj = nn.Linear(hidden_size, num_heads)
            nn.init.constant_(self.g_proj.bias, 3.0)  # gates start nearly open: σ(3) ≈ 0.95
        if self.point.function_class == "mlp":
            hidden = matched_hidden(D, D)
            self.W1 = nn.Parameter(torch.randn(num_heads, self.d_k, hidden) / self.d_k**0.5)
            self.W2 = nn.Parameter(torch.zeros(num_heads, hidden, D))  # the memory starts at the zero function
        self.o_norm = nn.RMSNorm(D)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """``q, k`` ``l2(φ(·))`` and ``v`` ``(B, T, H, D)``; ``beta = σ(W_β x)`` and ``g = log σ(W_g x)``
        ``(B, T, H)`` where the point takes them."""
        q, k = self._normed_qk(qkv)
        inputs = {"q": q, "k": k, "v": self._heads(qkv[..., 2 * self.hidden_size :])}
        if self.point.optimizer in STEPPED:
            inputs["beta"] = torch.sigmoid(self.b_proj(x))
        if self.point.weights == "gates":
            inputs["g"] = F.logsigmoid(self.g_proj(x))
        return inputs

    def _call(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        """The framework at the point on a sequence's inputs: ``o`` ``(B, T, H, D)``, before the output norm."""
        rows = self.point.param("steps") if self.point.optimizer == "steps_per_token" else 1
        if rows > 1:  # k steps per token, each on the token's own pair
            k, v = k.repeat_interleave(rows, 1), v.repeat_interleave(rows, 1)
            inputs["beta"] = inputs["beta"].repeat_interleave(rows, 1)
        options: dict[str, Any] = dict(inputs)
        if self.point.function_class == "mlp":
            B = q.shape[0]
            options["initial_state"] = tuple(W.expand(B, *W.shape) for W in (self.W1, self.W2))
        elif not self.parametric:
            options["scale"] = float(self.point.param("sharpness"))
        return self.framework(q, k, v, **options)[0]

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        """The regression framework at the point over the whole sequence, then the RMSNorm: ``(B, T, H, D)``."""
        return self.o_norm(self._call(q, k, v, **inputs))

    def mix_step(
        self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **inputs: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """One token ``(B, 1, H, ·)``: the framework rerun over the prefix, which ``memory`` keeps (a dict of the
        inputs so far, ``(B, t, H, ·)``; ``None`` before the first token). ``O(t)``: the generic path has no
        recurrence to carry."""
        token = {"q": q, "k": k, "v": v, **inputs}
        memory = token if memory is None else {n: torch.cat([memory[n], x], dim=1) for n, x in token.items()}
        o = self._call(**memory)[:, -1:]
        return self.o_norm(o), memory

    def state_size(self, seq_len: int) -> int:
        """The floats the point's own recurrence keeps per sequence (:func:`ttr_edu.regression.cost.cost`, all heads):
        what an op of this point would carry. This generic path keeps more, every input so far
        (:meth:`cache_size`), since its step reruns the prefix."""
        check_positive_int("seq_len", seq_len)
        return self.num_heads * cost(self.point, self.d_k, self.head_dim, t=seq_len).state

    def cache_size(self, seq_len: int) -> int:
        """The floats this generic path keeps per sequence after ``seq_len`` tokens: every input of the op."""
        check_positive_int("seq_len", seq_len)
        per_token = 2 * self.d_k + self.head_dim + (self.point.optimizer in STEPPED) + (self.point.weights == "gates")
        return seq_len * self.num_heads * per_token


def register_point(
    name: str, point: Point, label: str | None = None, *, replace: bool = False, **fields: Any
) -> MixerSpec:
    """Register ``point`` as the mixer ``name`` (a :class:`RegressionMixer` built at it), so that
    ``TinyLM(LMConfig(mixer=name))`` and ``MQARModel(name, ...)`` train it; ``fields`` go to the
    :class:`~ttr_edu.layers.registry.MixerSpec`, ``replace`` to :func:`~ttr_edu.layers.registry.register` (a name
    registered already is refused unless it is true).

    Raises:
        TypeError / ValueError: as :class:`RegressionMixer` for the point, as :class:`MixerSpec` for the rest.
    """
    point = _as_point(point)
    RegressionMixer(8, 1, point=point)  # refuse a point that makes no layer here, by name
    spec = MixerSpec(
        name,
        label or f"{point.describe()} (generic)",
        RegressionMixer,
        options={"point": point},
        parametric=point.function_class in ("linear", "mlp"),
        family="variant",
        **fields,
    )
    return register(spec, replace=replace)
