"""A point's update rule, composed from its three choices: never written out per combination.

Each choice contributes one part, and :func:`update_rule` puts the parts together:

* the **weights** give the objective's weights ``γ_i^{(t)}``, the range of its sum, and the factor by which a
  recursive optimiser shrinks what it carries from the last token (``1``, ``γ``, ``α_t = e^{g_t}``); a window has no
  such factor, so moment-based solvers subtract the pair that leaves the window and stepped ones re-run the window;
* the **function class** gives the memory ``m``, its parameters and the (negative) gradient of one pair's loss
  ``ℓ_t = ½‖v_t − m(k_t)‖²`` at a state, written out for the linear class (the delta ``k_t (v_t − Xᵀk_t)ᵀ``);
* the **optimiser** gives the template that uses them: a step from the shrunk state (online SGD), the proximal
  step, k steps, a mini-batch's stale gradients, momentum, the running moments of a solve, Sherman–Morrison.

Every part is written twice, as LaTeX (JupyterLab and the book) and as Unicode text (plotly annotations, which
cannot typeset LaTeX in a static page). The rules follow Wang, Shi, Fox 2025 (§3–4) and the papers of each named
layer; the equations the framework computes are in the docstrings of :mod:`ttr_edu.regression.optimizers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .design_space import Point

__all__ = ["Formula", "UpdateRule", "update_rule"]


@dataclass(frozen=True)
class Formula:
    """One line of a rule: its LaTeX and its Unicode text."""

    latex: str
    text: str


@dataclass(frozen=True)
class UpdateRule:
    """A point's rule: the objective, the weights, the update (one or more lines) and the readout; or, for choices
    that make no layer, ``problem`` (the framework's reason) and no lines."""

    objective: Formula | None
    weights: Formula | None
    update: tuple[Formula, ...]
    readout: Formula | None
    problem: str | None = None

    @property
    def lines(self) -> tuple[Formula, ...]:
        return tuple(x for x in (self.objective, self.weights, *self.update, self.readout) if x is not None)

    def latex(self) -> str:
        """Every line as one display-math block (``$$ … $$`` with ``\\\\`` between lines), or the problem."""
        if self.problem:
            return f"No layer: {self.problem}"
        body = " \\\\ ".join(f"& {line.latex}" for line in self.lines)  # every line aligned on its left
        return f"$$\\begin{{aligned}}{body}\\end{{aligned}}$$"

    def text(self) -> str:
        """Every line as Unicode text, one per line, or the problem."""
        if self.problem:
            return f"No layer: {self.problem}"
        return "\n".join(line.text for line in self.lines)


# -- the weights' part ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Weights:
    gamma: Formula  # γ_i^{(t)} = ...
    factor: Formula | None  # what the carried state is multiplied by each token; None: nothing
    window: bool = False


def _weights_part(point: Point) -> _Weights:
    key = point.weights
    if key == "uniform":
        return _Weights(Formula(r"\gamma_i^{(t)} = 1", "γᵢ⁽ᵗ⁾ = 1"), None)
    if key == "decay":
        gamma = point.param("gamma")
        return _Weights(
            Formula(rf"\gamma_i^{{(t)}} = \gamma^{{t-i}},\ \gamma = {gamma}", f"γᵢ⁽ᵗ⁾ = γ^(t−i), γ = {gamma}"),
            Formula(r"\gamma", "γ"),
        )
    if key == "window":
        w = point.param("window")
        return _Weights(
            Formula(
                rf"\gamma_i^{{(t)}} = [\,t-w < i \le t\,],\ w = {w}",
                f"γᵢ⁽ᵗ⁾ = 1 if t−w < i ≤ t else 0, w = {w}",
            ),
            None,
            window=True,
        )
    return _Weights(  # gates
        Formula(
            r"\gamma_i^{(t)} = \prod_{j=i+1}^{t} \alpha_j,\ \alpha_j = e^{g_j} \text{ from token } j",
            "γᵢ⁽ᵗ⁾ = αᵢ₊₁ ⋯ αₜ, αⱼ = exp(gⱼ) from token j",
        ),
        Formula(r"\alpha_t", "αₜ"),
    )


def _shrunk(weights: _Weights, latex: str, text: str) -> Formula:
    """``factor · X``: the carried state as the next step sees it."""
    if weights.factor is None:
        return Formula(latex, text)
    return Formula(f"{weights.factor.latex} {latex}", f"{weights.factor.text}{text}")


# -- the function class's part -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Class:
    parametric: bool
    state: Formula  # the parameters' symbol at step t, with {t} for its index
    memory: Formula  # m(x)
    space: Formula  # the class M in the objective


def _class_part(point: Point) -> _Class:
    key = point.function_class
    if key == "linear":
        return _Class(
            True, Formula("S", "S"), Formula(r"S^\top x", "Sᵀx"), Formula(r"\{x \mapsto S^\top x\}", "linear maps Sᵀx")
        )
    if key == "mlp":
        return _Class(
            True,
            Formula(r"\theta", "θ"),
            Formula(r"W_2^\top \mathrm{GELU}(W_1^\top x)", "W₂ᵀ GELU(W₁ᵀx)"),
            Formula(r"\{x \mapsto W_2^\top \mathrm{GELU}(W_1^\top x)\}", "two-layer MLPs, θ = (W₁, W₂)"),
        )
    kernel = "exp(s q·k)" if point.param("kernel") == "softmax" else "exp(−s‖q − k‖²/2)"
    kernel_latex = r"e^{s\, q^\top k}" if point.param("kernel") == "softmax" else r"e^{-s\lVert q - k\rVert^2/2}"
    if key == "kernel_ridge":
        kernel, kernel_latex = "exp(−s‖x − y‖²/2)", r"e^{-s\lVert x - y\rVert^2/2}"
    s = point.param("sharpness")
    space = {
        "kernel_smoother": ("constants around each query", r"\text{constants around } q_t"),
        "local_linear": ("affine maps around each query", r"\text{affine maps around } q_t"),
        "kernel_ridge": ("the kernel's function space", r"\mathcal{H}_\kappa"),
    }[key]
    return _Class(
        False,
        Formula("", ""),
        Formula(rf"\kappa = {kernel_latex},\ s = {s}", f"κ = {kernel}, s = {s}"),
        Formula(space[1], space[0]),
    )


def _step(cls: _Class, state: Formula, size: Formula, pair: str = "t") -> tuple[str, Formula]:
    """The step at the state ``X``, as a sign and a term: ``+ size · k (v − Xᵀk)ᵀ`` (the linear class's negative
    gradient, the delta) or ``− size · ∇ℓ(X)``."""
    k, v = f"k_{{{pair}}}", f"v_{{{pair}}}"
    kt, vt = _sub("k", pair), _sub("v", pair)
    if cls.state.text == "S":
        plain = state.text.startswith("S")  # a bare state; a shrunk one (αₜSₜ₋₁) is transposed in parentheses
        x_latex = state.latex if plain else f"({state.latex})"
        x_text = state.text if plain else f"({state.text})"
        return "+", Formula(
            rf"{size.latex}\, {k}\,({v} - {x_latex}^\top {k})^\top", f"{size.text} {kt}({vt} − {x_text}ᵀ{kt})ᵀ"
        )
    return "-", Formula(
        rf"{size.latex}\, \nabla_\theta \ell_{{{pair}}}({state.latex})", f"{size.text} ∇ℓ{_sub('', pair)}({state.text})"
    )


def _signed(sign: str, term: Formula) -> Formula:
    return Formula(f" {sign} {term.latex}", f" {'+' if sign == '+' else '−'} {term.text}")


_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


_SUBSCRIPTS = str.maketrans("0123456789+-−=()aeijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₋₌₍₎ₐₑᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ")


def _sub(symbol: str, index: str) -> str:
    """``symbol`` with ``index`` as Unicode subscripts where they exist (``k``, ``t−1`` -> ``kₜ₋₁``)."""
    index = index.replace(",", "")
    if all(c in "0123456789+-−=()aeijklmnoprstuvx" for c in index):
        return symbol + index.translate(_SUBSCRIPTS)
    return f"{symbol}_{index}"


def _state(cls: _Class, index: str) -> Formula:
    return Formula(f"{cls.state.latex}_{{{index}}}", _sub(cls.state.text, index))


# -- the optimiser's part ------------------------------------------------------------------------------------------


def _moments(weights: _Weights, latex_symbol: str, text_symbol: str, latex_write: str, text_write: str) -> Formula:
    """A running moment ``X_t = factor · X_{t−1} + write_t`` (``− write_{t−w}`` for a window)."""
    carried = _shrunk(weights, f"{latex_symbol}_{{t-1}}", _sub(text_symbol, "t−1"))
    latex = f"{latex_symbol}_t = {carried.latex} + {latex_write.format(i='t')}"
    text = f"{_sub(text_symbol, 't')} = {carried.text} + {text_write.format(i='ₜ')}"
    if weights.window:
        latex += f" - {latex_write.format(i='t-w')}"
        text += f" − {text_write.format(i='_(t−w)')}"
    return Formula(latex, text)


def _step_rules(point: Point, weights: _Weights, cls: _Class) -> list[Formula]:
    """The rule of a stepped optimiser for one token, from the carried state (shrunk by the weights' factor)."""
    o = point.optimizer
    prev = _shrunk(weights, _state(cls, "t-1").latex, _state(cls, "t−1").text)
    new = _state(cls, "t")
    beta = Formula(r"\beta_t", "βₜ")
    if o == "online_sgd":
        step = _signed(*_step(cls, prev, beta))
        return [Formula(f"{new.latex} = {prev.latex}{step.latex}", f"{new.text} = {prev.text}{step.text}")]
    if o == "implicit_step":
        lines = [
            Formula(
                rf"{new.latex} = \arg\min_{{{cls.state.latex}}} \tfrac12\lVert {cls.state.latex} - {prev.latex}"
                rf"\rVert^2 + \beta_t\, \ell_t({cls.state.latex})",
                f"{new.text} = argmin ½‖{cls.state.text} − {prev.text}‖² + βₜ ℓₜ({cls.state.text})",
            )
        ]
        if point.function_class == "linear":
            step = _signed(*_step(cls, prev, Formula(r"\varepsilon_t", "εₜ")))
            lines.append(
                Formula(
                    rf"\phantom{{{new.latex}}} = {prev.latex}{step.latex},\ "
                    r"\varepsilon_t = \frac{\beta_t}{1 + \beta_t \lVert k_t\rVert^2}",
                    f"   = {prev.text}{step.text}, εₜ = βₜ/(1 + βₜ‖kₜ‖²)",
                )
            )
        return lines
    if o == "steps_per_token":
        k = point.param("steps")
        inner_prev = Formula(rf"{cls.state.latex}_t^{{(j-1)}}", f"{cls.state.text}ₜ⁽ʲ⁻¹⁾")
        step = _signed(*_step(cls, inner_prev, Formula(r"\beta_{t,j}", "βₜⱼ"), pair="t,j"))
        return [
            Formula(
                rf"{cls.state.latex}_t^{{(0)}} = {prev.latex},\ {cls.state.latex}_t^{{(j)}} = {inner_prev.latex}"
                rf"{step.latex},\ j = 1..{k},\ {new.latex} = {cls.state.latex}_t^{{({k})}}",
                f"{cls.state.text}ₜ⁽⁰⁾ = {prev.text}; {cls.state.text}ₜ⁽ʲ⁾ = {inner_prev.text}{step.text}, "
                f"j = 1..{k}; {new.text} = {cls.state.text}ₜ⁽{str(k).translate(_SUPERSCRIPTS)}⁾",
            )
        ]
    if o == "mini_batch_gd":
        b = point.param("mini_batch_size")
        start = _state(cls, "s")
        sign, step = _step(cls, start, Formula(r"\beta_i", "βᵢ"), pair="i")
        text_sign = "+" if sign == "+" else "−"
        return [
            Formula(
                rf"{new.latex} = {start.latex} {sign} \sum_{{s < i \le t}} {step.latex},\ "
                rf"s = {b}\lfloor (t-1)/{b} \rfloor",
                f"{new.text} = {start.text} {text_sign} Σ_(s<i≤t) {step.text}, "
                f"s = {b}⌊(t−1)/{b}⌋ (the mini-batch's start)",
            )
        ]
    # momentum: Titans' rule, which forgets through its own weight decay
    old = _state(cls, "t-1")
    step = _signed(*_step(cls, old, beta))
    return [
        Formula(
            rf"U_t = \eta\, U_{{t-1}}{step.latex},\ {new.latex} = (1-\alpha)\, {old.latex} + U_t,\ "
            rf"\eta = {point.param('eta')},\ \alpha = {point.param('alpha')}",
            f"Uₜ = η Uₜ₋₁{step.text}; {new.text} = (1 − α){_state(cls, 't−1').text} + Uₜ, "
            f"η = {point.param('eta')}, α = {point.param('alpha')}",
        )
    ]


def _solve_rules(point: Point, weights: _Weights) -> list[Formula]:
    """The linear class's solvers: one gradient step, the exact solve, conjugate gradients, RLS."""
    o = point.optimizer
    kv = (r"k_{{{i}}} v_{{{i}}}^\top", "k{i}v{i}ᵀ")
    kk = (r"k_{{{i}}} k_{{{i}}}^\top", "k{i}k{i}ᵀ")
    if o == "gradient_step":
        lr = point.param("lr")
        latex_kv, text_kv = (kv[0], kv[1]) if lr == 1 else (rf"{lr}\, " + kv[0], f"{lr}·" + kv[1])
        return [_moments(weights, "S", "S", latex_kv, text_kv)]
    if o == "rls":
        lam = point.param("ridge")
        return [
            Formula(
                rf"\tilde P = P_{{t-1}}{'/' + weights.factor.latex if weights.factor else ''},\ "
                r"P_t = \tilde P - \frac{\tilde P k_t k_t^\top \tilde P}{1 + k_t^\top \tilde P k_t},\ "
                rf"P_0 = I/\lambda,\ \lambda = {lam}",
                f"P̃ = Pₜ₋₁{'/' + weights.factor.text if weights.factor else ''}; "
                f"Pₜ = P̃ − P̃kₜkₜᵀP̃/(1 + kₜᵀP̃kₜ); P₀ = I/λ, λ = {lam}",
            ),
            Formula(
                r"S_t = S_{t-1} + P_t k_t\,(v_t - S_{t-1}^\top k_t)^\top",
                "Sₜ = Sₜ₋₁ + Pₜkₜ(vₜ − Sₜ₋₁ᵀkₜ)ᵀ",
            ),
        ]
    lam = point.param("ridge")
    lines = [_moments(weights, "A", "A", *kk), _moments(weights, "M", "M", *kv)]
    if o == "exact_solve":
        lines.append(
            Formula(rf"S_t = (A_t + \lambda I)^{{-1}} M_t,\ \lambda = {lam}", f"Sₜ = (Aₜ + λI)⁻¹Mₜ, λ = {lam}")
        )
    else:  # conjugate gradients on the readout's system
        c = point.param("cg_steps")
        lines.append(
            Formula(
                rf"x_t = \mathrm{{CG}}_{{{c}}}(A_t + \lambda I,\ q_t),\ \lambda = {lam}",
                f"xₜ = {c} CG steps on (Aₜ + λI)x = qₜ from x = 0, λ = {lam}",
            )
        )
    return lines


def _local_rules(point: Point, weights: _Weights, cls: _Class) -> list[Formula]:
    rng = r"t-w < i \le t" if weights.window else r"i \le t"
    rng_text = "t−w < i ≤ t" if weights.window else "i ≤ t"
    weight = Formula(
        rf"w_{{ti}} \propto \gamma_i^{{(t)}} \kappa(q_t, k_i),\ {rng}", f"wₜᵢ ∝ γᵢ⁽ᵗ⁾ κ(qₜ, kᵢ), {rng_text}"
    )
    if point.function_class == "kernel_smoother":
        return [weight, Formula(r"y_t = \sum_i w_{ti} v_i", "yₜ = Σᵢ wₜᵢ vᵢ")]
    lam = point.param("ridge")
    if point.function_class == "local_linear":
        return [
            weight,
            Formula(
                rf"y_t = \bar v_t + \Sigma_{{vk}} (\Sigma_{{kk}} + \lambda I)^{{-1}} (q_t - \bar k_t),\ "
                rf"\lambda = {lam}",
                f"yₜ = v̄ₜ + Σᵥₖ(Σₖₖ + λI)⁻¹(qₜ − k̄ₜ), λ = {lam} (means, covariances weighted by wₜᵢ)",
            ),
        ]
    return [
        Formula(
            rf"y_t = \kappa(q_t, K_t)\,(\Gamma_t \kappa(K_t, K_t) + \lambda I)^{{-1}} \Gamma_t V_t,\ "
            rf"\Gamma_t = \mathrm{{diag}}(\gamma_i^{{(t)}}),\ {rng},\ \lambda = {lam}",
            f"yₜ = κ(qₜ, Kₜ)(Γₜκ(Kₜ, Kₜ) + λI)⁻¹ΓₜVₜ, Γₜ = diag(γᵢ⁽ᵗ⁾), {rng_text}, λ = {lam}",
        )
    ]


_STEPPED = ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum")


def update_rule(point: Point) -> UpdateRule:
    """The objective, weights, update and readout of ``point``, composed from its three choices.

    Raises:
        TypeError: ``point`` is not a :class:`~ttr_edu.regression.design_space.Point`.
    """
    if not isinstance(point, Point):
        raise TypeError(f"point: expected a design_space.Point, got {type(point).__name__}")
    problem = point.problem()
    if problem is not None:
        return UpdateRule(None, None, (), None, problem)
    weights, cls = _weights_part(point), _class_part(point)
    rng, rng_text = (r"t-w < i \le t", "t−w<i≤t") if weights.window else (r"i \le t", "i≤t")
    ridge = (
        point.optimizer in ("exact_solve", "conjugate_gradient", "rls") and point.function_class != "kernel_smoother"
    )
    penalty = (r" + \tfrac{\lambda}{2}\lVert m\rVert^2", " + λ/2‖m‖²") if ridge else ("", "")
    if ridge and point.optimizer == "rls" and weights.factor is not None:
        # RLS divides P by the factor: the ridge, written once into P₀ = I/λ, is discounted with the old pairs
        penalty = (
            r" + \tfrac{\lambda}{2}\,\gamma_0^{(t)}\lVert m\rVert^2 \text{ (the ridge fades with the data)}",
            " + λ/2·γ₀⁽ᵗ⁾‖m‖² (the ridge fades with the data)",
        )
    objective = Formula(
        rf"m_t = \arg\min_{{m \in {cls.space.latex}}} \tfrac12 \sum_{{{rng}}} \gamma_i^{{(t)}} "
        rf"\lVert v_i - m(k_i)\rVert^2{penalty[0]}",
        f"mₜ = argmin over {cls.space.text} of ½ Σ_({rng_text}) γᵢ⁽ᵗ⁾ ‖vᵢ − m(kᵢ)‖²{penalty[1]}",
    )
    if not cls.parametric:
        update = [cls.memory, *_local_rules(point, weights, cls)]
        return UpdateRule(objective, weights.gamma, tuple(update), None)
    if point.optimizer in _STEPPED or point.optimizer == "rls" and weights.window:
        update = _step_rules(point, weights, cls) if point.optimizer in _STEPPED else _solve_rules(point, weights)
        if weights.window:  # no factor shrinks a window: each token runs the rule over its window's pairs again
            w = point.param("window")
            start = "θ₀" if cls.state.text == "θ" else "S₀"
            update = [
                Formula(
                    rf"\text{{each token re-runs the rule below over its last }} w = {w} "
                    r"\text{ pairs, from the initial state: no per-token recursion}",
                    f"each token re-runs the rule below over its last w = {w} pairs, from {start}: "
                    "no per-token recursion",
                ),
                *update,
            ]
    else:
        update = _solve_rules(point, weights)
    if point.optimizer == "conjugate_gradient":
        readout = Formula(r"y_t = M_t^\top x_t", "yₜ = Mₜᵀxₜ")
    elif point.function_class == "linear":
        readout = Formula(r"y_t = S_t^\top q_t", "yₜ = Sₜᵀqₜ")
    else:
        readout = Formula(r"y_t = m_{\theta_t}(q_t)", "yₜ = m(qₜ; θₜ)")
    return UpdateRule(objective, weights.gamma, tuple(update), readout)
