"""The recipes of the public-API fuzz: one :class:`~tests.helpers.fuzz.Target` per public callable (a class's
constructor and its main methods are targets of their own, named ``module.Class.method``).

Each recipe builds a small valid call from drawn sizes; the kinds of :mod:`tests.helpers.fuzz` then break one
argument at a time. The names are the public paths users import (``ttr_edu.ops.delta_rule_chunk``), and
``tests/test_fuzz_public_api.py`` checks that every callable of every public ``__all__`` has one (or a reason).
"""

from __future__ import annotations

import math
import os

import torch

from tests.helpers.fuzz import As, F, Flag, Gen, I, Int, Num, Obj, Target, Tup
from tests.helpers.fuzz import Choice as Ch

TARGETS: dict[str, Target] = {}


def add(target: Target) -> Target:
    assert target.name not in TARGETS, target.name
    TARGETS[target.name] = target
    return target


QK = ("B", "T", "H", "D_k")
V = ("B", "T", "H", "D_v")
PT = ("B", "T", "H")
ST = ("B", "H", "D_k", "D_v")
OP_DIMS = ("B", "T", "H", "D_k", "D_v")

# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.ops: the reference ops
# ------------------------------------------------------------------------------------------------------------------


def _beta(lo=0.0, hi=1.0, neg="bad", dims=PT, rank="bad"):
    return F(
        dims, gen=("uniform", lo + 0.05, hi), linked=False, rank=rank, extra=(("negative", lambda x: -x - 0.5, neg),)
    )


def _g(dims=PT):
    return F(dims, gen="logdecay", neginf=True, linked=False, extra=(("positive", lambda x: x + 1.0, "bad"),))


SCALE = Num(None, lo=0.0, lo_open=True, optional=True)
STATE = F(ST, gen="small", optional=True, linked=False)  # a state of another float dtype is cast
STABILITY = Ch("warn", ("warn", "raise", "ignore"))


def _cu_seqlens():
    """fla's offsets: the valid value is ``None``; offsets of the wrong kind are refused by name."""
    return Obj(
        factory=lambda ctx: None,
        extra=(
            ("meta", lambda v, ctx: torch.tensor([0, ctx.sizes["T"]], device="meta"), "bad"),
            ("float", lambda v, ctx: torch.tensor([0.0, ctx.sizes["T"]]), "bad"),
            ("list", lambda v, ctx: [0, ctx.sizes["T"]], "bad"),
            ("unsorted", lambda v, ctx: torch.tensor([0, ctx.sizes["T"] + 1, ctx.sizes["T"]]), "bad"),
        ),
        optional=True,
    )


def op(name, args, *, empty=OP_DIMS, module="ttr_edu.ops", **kw):
    import importlib

    fn_name = name

    def call(**a):
        return getattr(importlib.import_module(module), fn_name)(**a)

    return add(Target(f"{module}.{name}", call, args, empty=empty, names=("o",), **kw))


def qkv(unit_k=True):
    return dict(q=F(QK), k=F(QK, gen="unit" if unit_k else "randn"), v=F(V))


for form in ("recurrent", "parallel", "chunk"):
    args = dict(
        qkv(),
        scale=SCALE,
        normalize=Flag(),
        initial_state=STATE,
        output_final_state=Flag(),
        eps=Num(1e-6, lo=0.0, tiny="either"),
    )
    if form == "chunk":
        args["chunk_size"] = Int(2, huge="valid")
    if form != "parallel":
        args["cu_seqlens"] = _cu_seqlens()
    op(f"linear_attention_{form}", args, skip=("normalize:flipped",))  # normalize needs positive features and (S, z)

for form in ("recurrent", "parallel", "chunk"):
    args = dict(qkv(), beta=_beta(neg="bad"), scale=SCALE, initial_state=STATE, output_final_state=Flag())
    args["check_stability"] = STABILITY
    if form == "chunk":
        args["chunk_size"] = Int(2, huge="valid")
    if form != "parallel":
        args["cu_seqlens"] = _cu_seqlens()
    op(f"delta_rule_{form}", args)

op(
    "delta_rule_pseudo_values",
    dict(k=F(QK, gen="unit"), v=F(V), beta=_beta(), initial_state=STATE, check_stability=STABILITY),
    empty=OP_DIMS,
)

for prefix, gdims in (("gated_linear_attention", PT), ("gla", QK)):
    for form in ("recurrent", "chunk"):
        args = dict(qkv(), g=_g(gdims), scale=SCALE, initial_state=STATE, output_final_state=Flag())
        if form == "chunk":
            args["chunk_size"] = Int(2, huge="valid")
        args["cu_seqlens"] = _cu_seqlens()
        op(f"{prefix}_{form}", args)

for form in ("recurrent", "chunk"):
    args = dict(qkv(), g=_g(), beta=_beta(), scale=SCALE, initial_state=STATE, output_final_state=Flag())
    args["check_stability"] = STABILITY
    if form == "chunk":
        args["chunk_size"] = Int(2, huge="valid")
    args["cu_seqlens"] = _cu_seqlens()
    op(f"gated_delta_rule_{form}", args)


def _spd(shape, gen, dtype):
    *batch, d, _ = shape
    return torch.eye(d, dtype=dtype).expand(*batch, d, d).clone()


for form in ("recurrent", "exact"):
    op(
        f"rls_{form}",
        dict(
            qkv(),
            ridge=Num(1.0, lo=0.0, lo_open=True),
            g=F(PT, gen="logdecay", neginf=True, linked=False, optional=True),
            scale=SCALE,
            initial_state=Tup((F(ST, gen="small"), F(("B", "H", "D_k", "D_k"), gen=_spd))),
            output_final_state=Flag(),
        ),
    )

op(
    "rls_chunk",
    dict(
        qkv(),
        ridge=Num(1.0, lo=0.0, lo_open=True),
        scale=SCALE,
        initial_state=Tup((F(ST, gen="small"), F(("B", "H", "D_k", "D_k"), gen=_spd))),
        output_final_state=Flag(),
        chunk_size=Int(2, huge="valid"),
    ),
)

KV_CACHE = Tup((F(("B", "T_cache", "H", "D_k")), F(("B", "T_cache", "H", "D_v"))))
op(
    "softmax_attention",
    dict(qkv(), scale=SCALE, qk_norm=Flag(), initial_state=KV_CACHE, output_final_state=Flag()),
    sizes={"T_cache": (1, 3)},
)
op(
    "local_linear_attention",
    dict(
        qkv(),
        scale=SCALE,
        ridge=Num(0.01, lo=0.0, lo_open=True),
        qk_norm=Flag(),
        initial_state=KV_CACHE,
        output_final_state=Flag(),
    ),
    sizes={"T_cache": (1, 3)},
)

for form in ("recurrent", "chunk", "diagonal_recurrent"):
    # an extra axis may read as a per-channel beta (B, T, H, D_v) when the sizes happen to agree
    args = dict(qkv(), beta=_beta(0.0, 2.0, rank="either"), scale=SCALE, initial_state=STATE, output_final_state=Flag())
    if form == "chunk":
        args["chunk_size"] = Int(2, huge="valid")
    op(f"longhorn_{form}", args)

op(
    "longhorn_step_size",
    dict(beta=_beta(0.0, 2.0), k=F(QK)),
    empty=("B", "T", "H", "D_k"),
)


def _n_rows(s):
    return s["T"] * s["n_h"]


DP_K = ("B", _n_rows, "H", "D_k")
for form in ("recurrent", "chunk"):
    args = dict(
        q=F(QK),
        k=F(DP_K, gen="unit"),
        v=F(("B", _n_rows, "H", "D_v")),
        beta=F(("B", _n_rows, "H"), gen=("uniform", 0.05, 1.0), linked=False),
        num_householder=Int("n_h", hi=None, huge="bad"),
        g=F(PT, gen="logdecay", neginf=True, linked=False, optional=True),
        scale=SCALE,
        initial_state=STATE,
        output_final_state=Flag(),
        check_stability=STABILITY,
    )
    if form == "chunk":
        args["chunk_size"] = Int(2, huge="valid")
    op(f"delta_product_{form}", args, sizes={"n_h": (1, 3)})


def _mlp_state(optional):
    return Tup((F(("B", "H", "D_k", "D_h"), gen="small"), F(("B", "H", "D_h", "D_v"), gen="small")), optional=optional)


for memory in ("linear", "mlp"):
    for form in ("recurrent", "chunk"):
        args = dict(
            qkv(),
            beta=_beta(0.0, 1.0),
            mini_batch_size=Int(2, huge="valid"),
            scale=SCALE,
            initial_state=STATE if memory == "linear" else _mlp_state(False),
            output_final_state=Flag(),
            layer_norm=Flag(),
            residual=Flag(),
        )
        op(f"ttt_{memory}_{form}", args, sizes={"D_h": (1, 3)}, skip=("residual:flipped",))  # needs D_k == D_v


def _titans_state(ctx):
    from ttr_edu.ops import TitansState

    s = ctx.sizes
    S = 0.1 * torch.randn(s["B"], s["H"], s["D_k"], s["D_v"], generator=ctx.gen).to(ctx.dtype)
    return TitansState(S, torch.zeros_like(S))


def _titans_mutations():
    from ttr_edu.ops import TitansState

    def nan_memory(state, ctx):
        S = state.memory.clone()
        S.view(-1)[0] = math.nan
        return TitansState(S, state.momentum)

    def inf_momentum(state, ctx):
        U = state.momentum.clone()
        U.view(-1)[0] = math.inf
        return TitansState(state.memory, U)

    return (
        ("none_none", lambda state, ctx: TitansState(None, None), "bad"),
        ("nan_memory", nan_memory, "bad"),
        ("inf_momentum", inf_momentum, "bad"),
        ("momentum_shape", lambda state, ctx: TitansState(state.memory, state.momentum[None]), "bad"),
        ("memory_drop_dim", lambda state, ctx: TitansState(state.memory[..., 0], state.momentum), "bad"),
        ("meta", lambda state, ctx: TitansState(state.memory.to("meta"), state.momentum.to("meta")), "either"),
        ("plain_state", lambda state, ctx: state.memory, "valid"),
    )


_GATE = F(PT, gen=("uniform", 0.0, 0.9), linked=False, extra=(("above_one", lambda x: x + 1.5, "bad"),))
op(
    "titans_recurrent",
    dict(
        qkv(),
        beta=_beta(0.0, 0.5),
        eta=_GATE,
        alpha=_GATE,
        scale=SCALE,
        initial_state=Obj(_titans_state, extra=_titans_mutations(), optional=True),
        output_final_state=Flag(),
    ),
)

# ---- feature maps --------------------------------------------------------------------------------------------

FEATURE_X = ("N", "D_k")
ANY_X = F(FEATURE_X, rank="either")  # feature maps take any shape (..., D_k)
for fname in ("elu_plus_one", "relu_feature_map", "identity_feature_map"):
    op(fname, dict(x=ANY_X), empty=())
op("dpfp", dict(x=ANY_X, nu=Int(1, hi=lambda s: 2 * s["D_k"] - 1)), empty=())
op("sum_norm", dict(x=ANY_X, eps=Num(1e-6, lo=0.0, tiny="either")), empty=())
op("l2_norm", dict(x=ANY_X, eps=Num(1e-12, lo=0.0, lo_open=True)), empty=())
op("favor_plus", dict(x=ANY_X, projection=F(("M", "D_k"))), empty=(), sizes={"M": (1, 4)})
op("favor_plus_variance", dict(q=ANY_X, k=ANY_X, m=Int("M", huge="valid")), empty=(), sizes={"M": (1, 4)})
op(
    "orthogonal_random_features",
    dict(
        m=Int("M"),
        d=Int("D_k"),
        generator=Gen(),
        dtype=Obj(lambda ctx: torch.float32, extra=(("int_dtype", lambda v, ctx: torch.int64, "bad"),)),
        device=Obj(lambda ctx: "cpu", optional=True, extra=(("unknown", lambda v, ctx: "nodevice", "bad"),)),
    ),
    empty=(),
    sizes={"M": (1, 4)},
)
op(
    "d_dot",
    dict(name=Ch("dpfp", ("elu_plus_one", "identity")), d_k=Int("D_k", huge="valid")),  # arithmetic only
    empty=(),
)
op("get_feature_map", dict(name=Ch("dpfp", ("elu_plus_one", "identity", "relu"))), empty=())

_FAVOR_CACHE: dict = {}


def _favor(ctx):
    from ttr_edu.ops import FavorPlus

    return FavorPlus(ctx.sizes["D_k"], ctx.sizes["M"], seed=0)


op(
    "FavorPlus",
    dict(
        d_k=Int("D_k"), m=Int("M"), redraw=Flag(), generator=Gen(), seed=Int(0, lo=None, optional=True, huge="either")
    ),
    empty=(),
    sizes={"M": (1, 4)},
    skip=("generator:wrong_type",),  # covered below with the seed; a FavorPlus takes one of them
)
add(
    Target(
        "ttr_edu.ops.FavorPlus.forward",
        lambda module, x: module(x),
        dict(module=Obj(_favor, wrong_type=False), x=ANY_X),
        sizes={"M": (1, 4)},
        names=("o",),
    )
)

# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.kernels: the same signatures as the ops' chunk forms (run when a GPU or Triton's interpreter is there)
# ------------------------------------------------------------------------------------------------------------------


def kernels_runnable() -> bool:
    try:
        from ttr_edu import kernels
    except ImportError:
        return False
    return torch.cuda.is_available() or kernels.interpreter_active()


KERNEL_CHUNK = Int(16, huge="bad", extra=(("not_power_of_two", lambda v: 24, "bad"),))
op(
    "linear_attention_chunk",
    dict(
        qkv(),
        scale=SCALE,
        normalize=Flag(),
        initial_state=STATE,
        output_final_state=Flag(),
        chunk_size=KERNEL_CHUNK,
        eps=Num(1e-6, lo=0.0, tiny="either"),
        cu_seqlens=_cu_seqlens(),
    ),
    module="ttr_edu.kernels",
    skip=("normalize:flipped",),
)
op(
    "delta_rule_chunk",
    dict(
        qkv(),
        beta=_beta(),
        scale=SCALE,
        initial_state=STATE,
        output_final_state=Flag(),
        chunk_size=KERNEL_CHUNK,
        check_stability=STABILITY,
        cu_seqlens=_cu_seqlens(),
    ),
    module="ttr_edu.kernels",
)
op(
    "gated_delta_rule_chunk",
    dict(
        qkv(),
        g=F(
            PT, gen="logdecay", linked=False, extra=(("positive", lambda x: x + 1.0, "bad"),)
        ),  # no −inf: a kernel limit
        beta=_beta(),
        scale=SCALE,
        initial_state=STATE,
        output_final_state=Flag(),
        chunk_size=KERNEL_CHUNK,
        check_stability=STABILITY,
        cu_seqlens=_cu_seqlens(),
    ),
    module="ttr_edu.kernels",
)
add(Target("ttr_edu.kernels.interpreter_active", lambda: __import__("ttr_edu.kernels").kernels.interpreter_active()))
add(
    Target(
        "ttr_edu.kernels.ptxas_report.read_shipped",
        lambda: __import__("ttr_edu.kernels.ptxas_report", fromlist=["read_shipped"]).read_shipped(),
    )
)
add(
    Target(
        "ttr_edu.kernels.ptxas_report.read_shipped_tiles",
        lambda: __import__("ttr_edu.kernels.ptxas_report", fromlist=["read_shipped_tiles"]).read_shipped_tiles(),
    )
)
KERNEL_TARGETS = {n for n in TARGETS if n.startswith("ttr_edu.kernels.") and "ptxas" not in n}

# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.regression: the three choices, the layer, its named points, and the helpers
# ------------------------------------------------------------------------------------------------------------------


def _reg(name):
    import ttr_edu.regression as R

    return getattr(R, name)


def choice_target(name, args, **kw):
    return add(Target(f"ttr_edu.regression.{name}", lambda **a: _reg(name)(**a), args, **kw))


for name in ("Uniform", "Gates", "Linear"):
    choice_target(name, {})
choice_target("ExponentialDecay", dict(gamma=Num(0.5, lo=0.0, lo_open=True, hi=1.0, tiny="either")))
choice_target("SlidingWindow", dict(window=Int(4, huge="valid")))  # a window longer than T is uniform weights
choice_target("LocalConstant", dict(kernel=Ch("softmax", ("gaussian",))))
choice_target("LocalLinear", dict(kernel=Ch("softmax", ("gaussian",))))
choice_target("KernelRidge", dict(kernel=Ch("gaussian", ("exponential",))))
# A hyperparameter is stored, not computed with: a huge ridge is refused at the call, when the dtype is known.
RIDGE = dict(big="either", tiny="either")
choice_target("ExactSolve", dict(ridge=Num(1e-3, lo=0.0, **RIDGE)))
choice_target("RecursiveLeastSquares", dict(ridge=Num(1.0, lo=0.0, lo_open=True, **RIDGE)))
choice_target("GradientStep", dict(lr=Num(1.0, lo=0.0, lo_open=True, **RIDGE)))
choice_target("OnlineSGD", dict(chunk_size=Int(64, huge="either")))
choice_target("ImplicitStep", dict(chunk_size=Int(64, huge="either")))
choice_target("MultiPassSGD", dict(passes=Int(2, hi=1000)))
choice_target("MLP", dict(layer_norm=Flag(), residual=Flag()))
choice_target("StepsPerToken", dict(num_householder=Int(2, huge="either"), chunk_size=Int(64, huge="either")))
choice_target("MiniBatchGD", dict(mini_batch_size=Int(16, huge="either")))
choice_target(
    "MomentumSGD", dict(eta=Num(0.5, lo=0.0, hi=1.0, tiny="either"), alpha=Num(0.1, lo=0.0, hi=1.0, tiny="either"))
)
choice_target("ConjugateGradient", dict(steps=Int(8, huge="either"), ridge=Num(1e-3, lo=0.0, lo_open=True, **RIDGE)))


def _spd_batch(shape, gen, dtype):
    *batch, d, _ = shape
    m = torch.randn(*batch, d, d, generator=gen, dtype=torch.float64)
    return (m @ m.mT + torch.eye(d, dtype=torch.float64)).to(dtype)


choice_target(
    "conjugate_gradient",
    dict(
        A=F(
            ("B", "D", "D"),
            gen=_spd_batch,
            extra=(
                ("not_definite", lambda A: -A, "bad"),
                (
                    "not_symmetric",
                    lambda A: As(
                        A + torch.ones_like(A).triu(1) * (A.abs().max() + 1), "bad" if A.shape[-1] > 1 else "valid"
                    ),
                    "bad",
                ),
            ),
        ),
        b=F(("B", "D")),
        steps=Int(3, huge="valid"),  # capped at D: CG is exact after D steps
    ),
    sizes={"D": (1, 4)},
    empty=("B", "D"),
)
choice_target(
    "regression_weights",
    dict(g=F(PT, gen="logdecay", neginf=True, optional=True), T=Int("T", optional=True)),
    empty=("B", "T", "H"),
)
choice_target(
    "decayed_cumsum",
    dict(
        x=F(("B", "H", "T", "D_v"), rank="either"),  # any trailing feature shape (B, H, T, *F)
        g=F(("B", "H", "T"), gen="logdecay", neginf=True, linked=False, optional=True),
        chunk_size=Int(2, huge="valid"),
    ),
    empty=("B", "H", "T"),
)


def _ttr_parts(ctx):
    R = __import__("ttr_edu.regression", fromlist=["Uniform"])
    return R


choice_target(
    "TestTimeRegression",
    dict(
        weights=Obj(lambda ctx: _reg("Uniform")(), extra=(("gates_with_mini_batch", lambda v, c: v, "valid"),)),
        function_class=Obj(
            lambda ctx: _reg("Linear")(),
            extra=(("local_with_sgd", lambda v, c: _reg("LocalConstant")(), "bad"),),
        ),
        optimizer=Obj(
            lambda ctx: _reg("OnlineSGD")(),
            extra=(("solve_without_ridge", lambda v, c: _reg("ExactSolve")(ridge=0.0), "bad"),),
        ),
    ),
)
choice_target(
    "named_layer",
    dict(
        name=Ch("deltanet", ("rls", "titans", "softmax_attention")),
        ridge=Num(None, lo=0.0, lo_open=True, optional=True, **RIDGE),
    ),
    skip=tuple(f"ridge:{m}" for m in ("big", "tiny", "below", "at_lo", "str", "bool", "list", "nan", "inf")),
)


def named_call(layer, *, stepped, gated, warm, mlp, rows=1, local=False, momentum=False, options=None, build=None):
    """A call of ``named_layer(layer)`` (or of the layer ``build()`` makes): the tensors its three choices need,
    built from the drawn sizes."""
    K = ("B", (lambda s: s["T"] * rows) if rows > 1 else "T", "H", "D_k")
    VV = ("B", K[1], "H", "D_v")
    args = dict(q=F(QK), k=F(K, gen="unit"), v=F(VV), scale=SCALE, output_final_state=Flag())
    if stepped:
        args["beta"] = F(("B", K[1], "H"), gen=("uniform", 0.05, 0.9), linked=False)
    if gated:
        args["g"] = F(
            PT,
            gen="logdecay",
            neginf=layer not in ("rls",),
            linked=False,
            extra=(("positive", lambda x: x + 1, "bad"),),
        )
    if mlp:
        args["initial_state"] = _mlp_state(False)
    elif warm:
        args["initial_state"] = STATE
    if momentum:
        args["eta"] = F(
            PT, gen=("uniform", 0.0, 0.9), linked=False, optional=True, extra=(("above_one", lambda x: x + 1.5, "bad"),)
        )
        args["alpha"] = F(
            PT, gen=("uniform", 0.0, 0.2), linked=False, optional=True, extra=(("above_one", lambda x: x + 1.5, "bad"),)
        )
    options = options or {}

    def call(**a):
        return (build() if build else _reg("named_layer")(layer, **options))(**a)

    skip = ("output_final_state:flipped",) if local else ()
    add(
        Target(
            f"ttr_edu.regression.TestTimeRegression.__call__.{layer}",
            call,
            args,
            empty=OP_DIMS,
            names=("o",),
            sizes={"D_h": (1, 3)},
            skip=skip,
        )
    )


STEPPED_LAYERS = (
    "deltanet",
    "gated_deltanet",
    "longhorn",
    "deltaproduct",
    "gated_deltaproduct",
    "ttt_linear",
    "ttt_mlp",
    "titans",
)
for layer_name in (
    "linear_attention",
    "gated_linear_attention",
    "deltanet",
    "gated_deltanet",
    "longhorn",
    "deltaproduct",
    "gated_deltaproduct",
    "ttt_linear",
    "ttt_mlp",
    "titans",
    "rls",
    "mesa",
    "mesa_cg",
    "softmax_attention",
    "local_linear_attention",
    "kernel_ridge",
):
    named_call(
        layer_name,
        stepped=layer_name in STEPPED_LAYERS,
        gated=layer_name.startswith("gated_") or layer_name.startswith("mesa"),
        warm=layer_name
        not in ("rls", "mesa", "mesa_cg", "softmax_attention", "local_linear_attention", "kernel_ridge"),
        mlp=layer_name in ("ttt_mlp", "titans"),
        rows=2 if "deltaproduct" in layer_name else 1,
        local=layer_name in ("softmax_attention", "local_linear_attention", "kernel_ridge"),
        momentum=layer_name == "titans",
        options={"num_householder": 2}
        if "deltaproduct" in layer_name
        else {"mini_batch_size": 2}
        if layer_name.startswith("ttt")
        else None,
    )

# sliding-window weights: the uniform layer run over each window (ttr_edu.regression.window), checked as the named ones
named_call(
    "window_deltanet",
    stepped=True,
    gated=False,
    warm=True,
    mlp=False,
    build=lambda: _reg("TestTimeRegression")(_reg("SlidingWindow")(2), _reg("Linear")(), _reg("OnlineSGD")()),
)
named_call(
    "window_softmax_attention",
    stepped=False,
    gated=False,
    warm=False,
    mlp=False,
    local=True,
    build=lambda: _reg("TestTimeRegression")(
        _reg("SlidingWindow")(2), _reg("LocalConstant")(), _reg("ExactSolve")(0.0)
    ),
)

for layer_name, stepped, gated in (
    ("deltanet", True, False),
    ("mesa", False, True),
    ("softmax_attention", False, False),
):
    args = dict(k=F(("N", "D_k"), gen="unit"), v=F(("N", "D_v")), queries=F(("M", "D_k")), scale=SCALE)
    if stepped:
        args["beta"] = F(("N",), gen=("uniform", 0.05, 0.9), linked=False)
    if gated:
        args["g"] = F(("N",), gen="logdecay", neginf=True, linked=False)
    add(
        Target(
            f"ttr_edu.regression.TestTimeRegression.predict.{layer_name}",
            lambda layer_name=layer_name, **a: _reg("named_layer")(layer_name).predict(**a),
            args,
            empty=("N", "M", "D_k", "D_v"),
            names=("o",),
        )
    )

# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.layers: each mixer's constructor, forward, step, initial_state and state_size
# ------------------------------------------------------------------------------------------------------------------


def _hidden(s):
    return s["H"] * s["D"]


LAYER_SIZES = {"H": (1, 2), "D": (1, 4), "T": (1, 5)}
COMMON_LAYER_ARGS = dict(
    hidden_size=Int(_hidden),
    num_heads=Int("H", huge="bad"),
    use_short_conv=Flag(True),
    conv_size=Int(2, hi=64),
)


def _option(recipe):
    """A fuzz argument from a mixer spec's recipe (:class:`ttr_edu.layers.MixerSpec`, ``fuzz``)."""
    kind, default, *more = recipe
    if kind == "flag":
        return Flag(default)
    if kind == "int":
        return Int(default, hi=more[0]) if more else Int(default, huge="either")
    if kind == "positive":
        return Num(default, lo=0.0, lo_open=True, **RIDGE)
    if kind == "choice":
        return Ch(default, more[0])
    return Obj(lambda ctx: None, optional=True, extra=(("unknown_param", lambda v, c: {"nope": 1}, "bad"),))


def _layer_options():
    """class name -> the fuzz arguments of its own options, from the registry's specs (each class's first recipe)."""
    from ttr_edu.layers import REGISTRY

    found = {}
    for spec in REGISTRY.values():
        if spec.fuzz is not None and spec.layer.__module__.startswith("ttr_edu."):
            found.setdefault(spec.layer.__name__, {name: _option(r) for name, r in spec.fuzz.items()})
    return found


LAYER_OPTIONS = _layer_options()


def _layers():
    import ttr_edu.layers as L

    return L


def _build_layer(cls_name, ctx, **options):
    torch.manual_seed(0)
    s = ctx.sizes
    return getattr(_layers(), cls_name)(_hidden(s), s["H"], **options).to(ctx.dtype)


def _layer_state(cls_name, ctx, batch=None):
    layer = _build_layer(cls_name, ctx)
    B = ctx.sizes["B"] if batch is None else batch
    state = layer.initial_state(B)
    x = torch.randn(B, _hidden(ctx.sizes), generator=ctx.gen).to(ctx.dtype)
    return layer.step(x, state)[1]


for cls_name, options in LAYER_OPTIONS.items():
    path = f"ttr_edu.layers.{cls_name}"
    add(
        Target(
            path,
            lambda cls_name=cls_name, **a: getattr(_layers(), cls_name)(**a),
            dict(COMMON_LAYER_ARGS, **options),
            sizes=LAYER_SIZES,
            names=("hidden_size",),
        )
    )
    module = Obj(lambda ctx, cls_name=cls_name: _build_layer(cls_name, ctx), wrong_type=False)
    WIDE = (("wide", lambda x: torch.cat([x, x], -1), "bad"),)
    X = F(("B", "T", _hidden), extra=WIDE, other_dtype="bad")  # x must have the module's dtype
    add(
        Target(
            f"{path}.forward",
            lambda module, x: module(x),
            dict(module=module, x=X),
            sizes=LAYER_SIZES,
            empty=("B", "T"),
        )
    )
    add(
        Target(
            f"{path}.step",
            lambda module, x, state: module.step(x, state),
            dict(
                module=module,
                x=F(("B", _hidden), extra=(*WIDE, ("no_rows", lambda x: x[:0], "bad")), other_dtype="bad"),
                state=Obj(
                    lambda ctx, cls_name=cls_name: _layer_state(cls_name, ctx),
                    extra=(
                        (
                            "other_batch",
                            lambda v, ctx, cls_name=cls_name: _layer_state(cls_name, ctx, ctx.sizes["B"] + 1),
                            "bad",
                        ),
                        (
                            "fresh",
                            lambda v, ctx, cls_name=cls_name: _build_layer(cls_name, ctx).initial_state(ctx.sizes["B"]),
                            "valid",
                        ),
                    ),
                ),
            ),
            sizes=LAYER_SIZES,
        )
    )
    add(
        Target(
            f"{path}.initial_state",
            lambda module, batch_size: module.initial_state(batch_size),
            dict(module=module, batch_size=Int("B", huge="bad")),
            sizes=LAYER_SIZES,
        )
    )
    add(
        Target(
            f"{path}.state_size",
            lambda module, seq_len: module.state_size(seq_len),
            dict(module=module, seq_len=Int("T", huge="valid")),  # arithmetic only
            sizes=LAYER_SIZES,
        )
    )

add(
    Target(
        "ttr_edu.layers.ShortConvolution",
        lambda **a: _layers().ShortConvolution(**a),
        dict(hidden_size=Int("D"), conv_size=Int(2, hi=64)),
        sizes=LAYER_SIZES,
    )
)
add(
    Target(
        "ttr_edu.layers.ShortConvolution.forward",
        lambda module, x: module(x),
        dict(
            module=Obj(lambda ctx: _layers().ShortConvolution(ctx.sizes["D"], 2).to(ctx.dtype), wrong_type=False),
            x=F(("B", "T", "D"), other_dtype="bad"),
        ),
        sizes=LAYER_SIZES,
        empty=("B", "T"),
    )
)
add(
    Target(
        "ttr_edu.layers.MixerSpec",
        lambda **a: _layers().MixerSpec(**a),
        dict(
            name=Obj(lambda ctx: "fuzzed", extra=(("not_an_identifier", lambda v, c: "no name", "bad"),)),
            label=Obj(lambda ctx: "fuzzed"),
            layer=Obj(lambda ctx: _layers().DeltaNet, extra=(("not_a_mixer", lambda v, c: torch.nn.Linear, "bad"),)),
            options=Obj(lambda ctx: {}, extra=(("not_a_dict", lambda v, c: [1], "bad"),)),
            parametric=Flag(True),
            mqar=Flag(),
            lm=Flag(),
        ),
    )
)

# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.hebbian: chapter 01's memory (the papers' W, (D_v, D_k))
# ------------------------------------------------------------------------------------------------------------------


def _mod(name):
    import importlib

    return importlib.import_module(name)


def fn_target(module, name, args, **kw):
    return add(Target(f"{module}.{name}", lambda **a: getattr(_mod(module), name)(**a), args, **kw))


HEB = "ttr_edu.hebbian"
W_ = F(("D_v", "D_k"))
fn_target(HEB, "hebbian_write", dict(W=W_, k=F(("D_k",)), v=F(("D_v",))))
fn_target(HEB, "hebbian_read", dict(W=W_, q=F(("D_k",))))
fn_target(HEB, "store", dict(keys=F(("N", "D_k"), gen="unit"), values=F(("N", "D_v"))))
fn_target(HEB, "recall", dict(W=W_, queries=F(("N", "D_k"))))
SEED = Int(0, lo=None, optional=True, huge="either")
DTYPE = Obj(lambda ctx: torch.float64, extra=(("int_dtype", lambda v, c: torch.int64, "bad"),))
fn_target(HEB, "random_unit_keys", dict(n=Int("N"), d=Int("D_k"), seed=SEED, dtype=DTYPE))
fn_target(
    HEB,
    "orthonormal_keys",
    dict(
        n=Int("N", extra=(("more_than_d", lambda n: 10**3, "bad"),)),
        d=Int(lambda s: s["N"] + s["D_k"]),
        seed=SEED,
        dtype=DTYPE,
    ),
    sizes={"N": (1, 4), "D_k": (0, 3)},
)
fn_target(HEB, "crosstalk_energy", dict(keys=F(("N", "D_k"), gen="unit")), empty=("N",))
fn_target(HEB, "crosstalk_energies", dict(keys=F(("R", "N", "D_k"), gen="unit")), sizes={"R": (1, 2)}, empty=("N",))
fn_target(HEB, "cleanup_accuracy", dict(scores=F(("R", "N", "N"))), sizes={"R": (1, 2), "N": (2, 4)})
fn_target(HEB, "predicted_crosstalk_energy", dict(n=Int("N", huge="valid"), d=Int("D_k", huge="valid")))  # arithmetic
fn_target(
    HEB,
    "rival_score_variance",
    dict(n=Int(lambda s: s["N"] + 1, lo=2, huge="valid"), d=Int("D_k", huge="valid")),
    sizes={"N": (1, 4)},
)
fn_target(HEB, "recall_accuracy", dict(W=W_, keys=F(("N", "D_k"), gen="unit"), values=F(("N", "D_v"))), empty=("N",))
fn_target(
    HEB, "cleanup_scores", dict(keys=F(("R", "N", "D_k"), gen="unit"), values=F(("R", "N", "D_v"))), sizes={"R": (1, 2)}
)

# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.dual_form: the dual form of a linear layer trained by SGD
# ------------------------------------------------------------------------------------------------------------------

DF = "ttr_edu.dual_form"
DUAL_SIZES = {"D_in": (1, 4), "D_out": (1, 3), "Q": (1, 3), "N": (1, 4), "C": (1, 3)}
fn_target(
    DF,
    "dual_output",
    dict(
        W0=F(("D_out", "D_in"), linked=False),
        keys=F(("N", "D_in"), linked=False),
        values=F(("N", "D_out"), linked=False),
        query=F(("Q", "D_in"), linked=False),
    ),
    sizes=DUAL_SIZES,
)
fn_target(DF, "momentum_rescale", dict(momentum=Num(0.5, lo=0.0, hi=0.99, tiny="either"), num_steps=Int("N")))
fn_target(
    DF,
    "class_votes",
    dict(
        scores=F(("Q", "N")),
        labels=I(("N",), high="C"),
        num_classes=Int("C", extra=(("too_few", lambda c: 1, "either"),)),
    ),
    sizes=DUAL_SIZES,
)


def _recorded(ctx, *, labels=True):
    """A recorder that watched a tiny linear layer train for two SGD steps of N patterns."""
    from ttr_edu.dual_form import DualFormRecorder

    s = ctx.sizes
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(s["D_in"], s["D_out"])).to(ctx.dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    recorder = DualFormRecorder(model, opt, ["0"], max_steps=2, patterns_per_step=s["N"], verbose=False)
    for step in range(2):
        x = torch.randn(s["N"], s["D_in"], generator=ctx.gen).to(ctx.dtype)
        opt.zero_grad()
        model(x).square().sum().backward()
        if labels:
            recorder.annotate(labels=torch.arange(s["N"]) % 2, sample_ids=torch.arange(s["N"]) + step * s["N"])
        opt.step()
    recorder.close()
    return recorder


MEMORY = Obj(lambda ctx: _recorded(ctx).memory("0"))
AT_STEP = Int(1, lo=0, hi=2, optional=True, huge="bad")
QUERY = F(("Q", "D_in"), linked=False)
fn_target(DF, "dual_linear", dict(memory=MEMORY, query=QUERY, at_step=AT_STEP), sizes=DUAL_SIZES)
fn_target(DF, "spotlight_scores", dict(memory=MEMORY, query=QUERY, at_step=AT_STEP), sizes=DUAL_SIZES)
fn_target(
    DF,
    "top_patterns",
    dict(
        memory=MEMORY,
        query=QUERY,
        k=Int(1, hi=lambda s: 2 * s["N"]),
        at_step=Int(None, lo=0, hi=2, optional=True),
        distinct_samples=Flag(),
    ),
    sizes=DUAL_SIZES,
)


def _model_and_opt(ctx):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(ctx.sizes["D_in"], ctx.sizes["D_out"]))
    return model


def _recorder_call(model, optimizer, layers, **kw):
    from ttr_edu.dual_form import DualFormRecorder

    if optimizer == "sgd":  # the model's own SGD (or, for a mutated model, some SGD: the model is refused first)
        params = model.parameters() if isinstance(model, torch.nn.Module) else [torch.zeros(1, requires_grad=True)]
        optimizer = torch.optim.SGD(params, lr=0.1)
    return DualFormRecorder(model, optimizer, layers, **kw)


add(
    Target(
        f"{DF}.DualFormRecorder",
        _recorder_call,
        dict(
            model=Obj(_model_and_opt),
            optimizer=Obj(lambda ctx: "sgd", extra=(("adam", lambda v, c: "adam", "bad"),)),
            layers=Obj(
                lambda ctx: ["0"], extra=(("unknown", lambda v, c: ["nope"], "bad"), ("str", lambda v, c: "0", "bad"))
            ),
            max_steps=Int(2, huge="bad"),
            patterns_per_step=Int("N", huge="bad"),
            key_dtype=Obj(
                lambda ctx: None,
                extra=(("int_dtype", lambda v, c: torch.int64, "bad"), ("half", lambda v, c: torch.float16, "valid")),
            ),
            allow_inexact=Flag(),
            verify=Flag(True),
            verbose=Flag(False),
        ),
        sizes=DUAL_SIZES,
    )
)

# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.models: the retrieval model (chapters 03-04), the MQAR models (chapter 09), the tiny LM (chapter 10)
# ------------------------------------------------------------------------------------------------------------------

RET = "ttr_edu.models.retrieval"
fn_target(RET, "retrieval_loss", dict(y=F(("B", "D_v")), target=I(("B",), high="D_v")))
fn_target(
    RET,
    "sum_rule_retrieve",
    dict(
        phi_k=F(("B", "T", "d_dot"), gen=("uniform", 0.1, 1.0)),
        v=F(("B", "T", "D_v")),
        phi_q=F(("B", "d_dot"), gen=("uniform", 0.1, 1.0)),
    ),
    sizes={"d_dot": (1, 4)},
)
RET_SIZES = {"K": (2, 5), "D_v": (2, 4), "d": (1, 4), "B": (1, 2)}
add(
    Target(
        f"{RET}.RetrievalModel",
        lambda **a: _mod(RET).RetrievalModel(**a),
        dict(
            num_keys=Int("K"),
            num_values=Int("D_v"),
            d_k=Int("d"),
            feature_map=Ch("elu_plus_one", ("identity", "relu")),
            feature_map_params=Obj(
                lambda ctx: None, optional=True, extra=(("unknown_param", lambda v, c: {"nope": 1}, "bad"),)
            ),
            update_rule=Ch("sum", ("delta",)),
            trained_keys=Flag(True),
            read_out=Obj(lambda ctx: None, optional=True),
        ),
        sizes=RET_SIZES,
    )
)


def _retrieval_batch(ctx, num_keys=None, num_values=None):
    from ttr_edu.tasks.retrieval import capacity_batch

    s = ctx.sizes
    return capacity_batch(s["B"], num_keys or s["K"], seq_len=2, num_values=num_values or s["D_v"], generator=ctx.gen)


def _retrieval_model(ctx):
    torch.manual_seed(0)
    return _mod(RET).RetrievalModel(ctx.sizes["K"], ctx.sizes["D_v"], d_k=ctx.sizes["d"], feature_map="elu_plus_one")


for method in ("forward", "loss", "accuracy"):
    add(
        Target(
            f"{RET}.RetrievalModel.{method}",
            lambda module, batch, method=method: (
                module(batch) if method == "forward" else getattr(module, method)(batch)
            ),
            dict(
                module=Obj(_retrieval_model, wrong_type=False),
                batch=Obj(
                    _retrieval_batch,
                    extra=(
                        ("more_keys", lambda v, c: _retrieval_batch(c, num_keys=c.sizes["K"] + 3), "bad"),
                        ("other_values", lambda v, c: _retrieval_batch(c, num_values=c.sizes["D_v"] + 1), "bad"),
                    ),
                ),
            ),
            sizes=RET_SIZES,
        )
    )

LM = "ttr_edu.models.lm"
LM_SIZES = {"V": (2, 9), "H": (1, 2), "D": (1, 4), "B": (1, 2), "T": (1, 4), "L": (1, 2)}


def _lm_config(ctx, mixer="deltanet"):
    s = ctx.sizes
    return _mod(LM).LMConfig(
        mixer=mixer, d_model=s["H"] * s["D"], num_heads=s["H"], n_layers=s["L"], mlp_ratio=2, vocab_size=s["V"]
    )


def _lm(ctx, mixer="deltanet"):
    torch.manual_seed(0)
    return _mod(LM).TinyLM(_lm_config(ctx, mixer))


add(
    Target(
        f"{LM}.LMConfig",
        lambda **a: _mod(LM).LMConfig(**a),
        dict(
            mixer=Ch("deltanet", ("linear", "softmax", "longhorn")),
            d_model=Int(_hidden),
            num_heads=Int("H", huge="bad"),
            n_layers=Int("L"),
            mlp_ratio=Int(2),
            vocab_size=Int("V"),
        ),
        sizes=LM_SIZES,
    )
)
add(
    Target(
        f"{LM}.TinyLM",
        lambda config: _mod(LM).TinyLM(config),
        dict(config=Obj(_lm_config)),
        sizes=LM_SIZES,
    )
)
for mixer in ("deltanet", "softmax", "linear_sumnorm", "titans"):
    module = Obj(lambda ctx, mixer=mixer: _lm(ctx, mixer), wrong_type=False)
    add(
        Target(
            f"{LM}.TinyLM.forward.{mixer}",
            lambda module, tokens: module(tokens),
            dict(module=module, tokens=I(("B", "T"), high="V")),
            sizes=LM_SIZES,
            empty=("B", "T"),
        )
    )

    def _stepped(ctx, mixer=mixer, batch=None):
        model = _lm(ctx, mixer)
        state = model.init_state()
        B = ctx.sizes["B"] if batch is None else batch
        model.step(torch.zeros(B, dtype=torch.long), state)
        return state

    add(
        Target(
            f"{LM}.TinyLM.step.{mixer}",
            lambda module, token, state: module.step(token, state),
            dict(
                module=module,
                token=I(("B",), high="V", extra=(("batch_of_one_more", lambda t: torch.cat([t, t[:1]]), "bad"),)),
                state=Obj(
                    _stepped,
                    extra=(
                        ("fresh", lambda v, c, mixer=mixer: _lm(c, mixer).init_state(), "valid"),
                        ("wider_model", lambda v, c, mixer=mixer: _stepped(_wider(c), mixer), "bad"),
                    ),
                ),
            ),
            sizes=LM_SIZES,
        )
    )


def _wider(ctx):
    import copy

    wider = copy.copy(ctx)
    wider.sizes = {**ctx.sizes, "D": ctx.sizes["D"] + 1}
    return wider


add(
    Target(
        f"{LM}.TinyLM.init_state",
        lambda module: module.init_state(),
        dict(module=Obj(_lm, wrong_type=False)),
        sizes=LM_SIZES,
    )
)
add(
    Target(
        f"{LM}.TinyLM.num_parameters",
        lambda module: module.num_parameters(),
        dict(module=Obj(_lm, wrong_type=False)),
        sizes=LM_SIZES,
    )
)
fn_target(
    LM,
    "lm_loss",
    dict(
        logits=F(("B", "T", "V")),
        targets=I(("B", "T"), high="V", extra=(("ignore_index", lambda t: torch.full_like(t, -100), "bad"),)),
    ),
    sizes=LM_SIZES,
    empty=("B", "T"),
)
fn_target(
    LM,
    "causal_lm_loss",
    dict(logits=F(("B", "T", "V")), tokens=I(("B", "T"), high="V")),
    sizes={**LM_SIZES, "T": (1, 4)},
    empty=("B", "T"),
    valid_when=lambda s: s["T"] >= 2,  # T = 1 scores no position: refused (it gave NaN)
)
fn_target(LM, "bits_per_byte", dict(loss_nats=Num(2.0, lo=0.0, big="either", tiny="either")))
add(
    Target(
        f"{LM}.generate",
        lambda **a: _mod(LM).generate(**a),
        dict(
            model=Obj(_lm),
            prompt=I(("B", "T"), high="V"),
            num_tokens=Int(2, huge="bad"),
            temperature=Num(1.0, lo=0.0, big="either", tiny="valid"),  # greedy: exact in fp64
            generator=Gen(),
        ),
        sizes=LM_SIZES,
        empty=("B", "T"),
    )
)


def _checkpoint_path(ctx):
    import tempfile

    folder = tempfile.mkdtemp(prefix="ttr-fuzz-")
    return os.path.join(folder, "model.pt")


add(
    Target(
        f"{LM}.save_checkpoint",
        lambda **a: _mod(LM).save_checkpoint(**a),
        dict(
            model=Obj(_lm),
            path=Obj(
                _checkpoint_path,
                extra=(
                    ("missing_folder", lambda v, c: "/nonexistent-ttr-folder/x.pt", "bad"),
                    ("a_folder", lambda v, c: os.path.dirname(v), "bad"),
                ),
            ),
            metadata=Obj(
                lambda ctx: {"seed": 0, "note": "fuzz"},
                extra=(("a_tensor", lambda v, c: {"t": torch.zeros(1)}, "bad"), ("a_list", lambda v, c: [1], "bad")),
            ),
        ),
        sizes=LM_SIZES,
        errors=(FileNotFoundError, IsADirectoryError),  # a path that names no file: the file API's own errors
    )
)


def _saved(ctx):
    path = _checkpoint_path(ctx)
    _mod(LM).save_checkpoint(_lm(ctx), path, {"seed": 0})
    return path


add(
    Target(
        f"{LM}.load_checkpoint",
        lambda **a: _mod(LM).load_checkpoint(**a),
        dict(
            path=Obj(
                _saved,
                extra=(
                    ("missing", lambda v, c: v + ".missing", "bad"),
                    ("not_a_checkpoint", lambda v, c: _junk_file(v), "bad"),
                    ("a_folder", lambda v, c: os.path.dirname(v), "bad"),
                ),
            ),
        ),
        sizes=LM_SIZES,
        errors=(FileNotFoundError,),
    )
)


def _junk_file(path):
    with open(path, "wb") as f:
        f.write(b"not a checkpoint")
    return path


# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.tasks: retrieval settings, MQAR, images, text
# ------------------------------------------------------------------------------------------------------------------

TR = "ttr_edu.tasks.retrieval"
DEVICE = Obj(
    lambda ctx: "cpu", extra=(("unknown", lambda v, c: "nodevice", "bad"), ("meta", lambda v, c: "meta", "either"))
)
for fname in ("capacity_batch", "overwrite_batch"):
    vocabulary = "bad" if fname == "capacity_batch" else "valid"  # a permutation of the vocabulary, or draws from it
    fn_target(
        TR,
        fname,
        dict(
            batch_size=Int("B"),
            num_keys=Int(lambda s: s["K"] + 2, huge=vocabulary),
            seq_len=Int(2, optional=True),
            num_values=Int(lambda s: s["K"] + 2, optional=True, huge=vocabulary),
            generator=Gen(),
            device=DEVICE,
        ),
        sizes={"K": (0, 3)},
    )
fn_target(
    TR,
    "switching_regression",
    dict(
        batch_size=Int("B"),
        seq_len=Int("T"),
        d_k=Int("D_k"),
        d_v=Int("D_v", optional=True),
        switch_every=Int(2, huge="valid"),  # longer than T: one regime
        num_heads=Int("H"),
        noise=Num(0.05, lo=0.0, tiny="either", big="either"),  # 1e300 fits float64 (refused for float32)
        generator=Gen(),
        device=DEVICE,
        dtype=DTYPE,
    ),
)

MQ = "ttr_edu.tasks.mqar"
MQ_SIZES = {"P": (1, 3), "V": (16, 24), "B": (1, 2)}
fn_target(
    MQ,
    "mqar_batch",
    dict(
        batch_size=Int("B"),
        seq_len=Int(lambda s: 4 * s["P"] + 2),
        num_pairs=Int("P"),
        vocab_size=Int("V"),
        power_a=Num(0.01, lo=0.0, lo_open=True, tiny="either"),
        random_non_queries=Flag(True),
        generator=Gen(),
    ),
    sizes=MQ_SIZES,
)
fn_target(
    MQ, "query_slots", dict(seq_len=Int(lambda s: 4 * s["P"] + 2, huge="valid"), num_pairs=Int("P")), sizes=MQ_SIZES
)
fn_target(
    MQ,
    "free_slot_fraction",
    dict(seq_len=Int(lambda s: 4 * s["P"] + 2, huge="valid"), num_pairs=Int("P")),
    sizes=MQ_SIZES,
)


def _distinct_slots(shape, gen, dtype):
    B, P = shape
    return torch.stack([torch.randperm(P + 2, generator=gen)[:P] for _ in range(B)])


class _Slots(I):
    """Query slots: ``P`` distinct values in ``[0, P + 2)`` per example (a draw with repeats is not a valid call)."""

    def make(self, ctx):
        return _distinct_slots((ctx.sizes["B"], ctx.sizes["P"]), ctx.gen, self.dtype)


fn_target(
    MQ,
    "mqar_layout",
    dict(
        keys=I(("B", "P"), high="V", upper=False),  # mqar_layout takes no vocabulary: any token >= 0 is placed
        values=I(("B", "P"), high="V", upper=False),
        slots=_Slots(
            ("B", "P"),
            high=lambda s: s["P"] + 2,
            extra=(
                ("repeated", lambda t: As(t[:, :1].expand_as(t).clone(), "bad" if t.shape[1] > 1 else "valid"), "bad"),
            ),
        ),
        seq_len=Int(lambda s: 4 * s["P"] + 4),
        filler=Obj(
            lambda ctx: None,
            optional=True,
            extra=(("float", lambda v, c: torch.zeros(c.sizes["B"], 4 * c.sizes["P"] + 4), "bad"),),
        ),
    ),
    sizes=MQ_SIZES,
)
fn_target(
    MQ,
    "filler_key_copies",
    dict(
        batch=Obj(
            lambda ctx: _mod(MQ).mqar_batch(
                ctx.sizes["B"], 4 * ctx.sizes["P"] + 4, ctx.sizes["P"], ctx.sizes["V"], generator=ctx.gen
            )
        )
    ),
    sizes=MQ_SIZES,
)
fn_target(
    MQ,
    "mqar_accuracy",
    dict(
        logits=F(("B", "T", "V")),
        labels=I(("B", "T"), high="V", extra=(("ignored", lambda t: torch.full_like(t, -100), "either"),)),
    ),
    sizes={"V": (2, 5)},
)

IMG = "ttr_edu.tasks.images"
fn_target(IMG, "default_data_home", {})
fn_target(
    IMG,
    "load_digits",
    dict(test_fraction=Num(0.2, lo=0.0, lo_open=True, hi=0.9, tiny="bad"), seed=Int(0, lo=0, huge="bad")),
)


def _fake_mnist(ctx):
    import tempfile

    import numpy as np

    folder = tempfile.mkdtemp(prefix="ttr-fuzz-mnist-")
    images = np.zeros((12, 784), dtype=np.uint8)
    np.savez_compressed(os.path.join(folder, "mnist.npz"), images=images, labels=np.arange(12) % 10)
    return folder


def _junk_folder(ctx):
    folder = _fake_mnist(ctx)
    with open(os.path.join(folder, "mnist.npz"), "wb") as f:
        f.write(b"not an archive")
    return folder


fn_target(
    IMG,
    "load_mnist",
    dict(
        name=Ch("mnist", ()),
        data_home=Obj(
            _fake_mnist,
            extra=(
                ("empty_folder", lambda v, c: os.path.dirname(v), "bad"),
                ("not_an_archive", lambda v, c: _junk_folder(c), "bad"),
            ),
        ),
    ),
    errors=(FileNotFoundError,),
)

TXT = "ttr_edu.tasks.text"
fn_target(TXT, "load_stdlib_corpus", {})


def _bytes(shape, gen, dtype):
    return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)


BYTES = I(
    ("N",),
    high=256,
    dtype=torch.uint8,
    extra=(("wide_ids", lambda t: t.long() + 256, "bad"), ("int64", lambda t: t.long(), "valid")),
)
TEXT_SIZES = {"N": (8, 20), "L": (1, 4), "B": (1, 3)}
fn_target(
    TXT,
    "random_windows",
    dict(
        tokens=BYTES,
        batch_size=Int("B"),
        seq_len=Int("L", extra=(("too_long", lambda n: 10**3, "bad"),)),
        generator=Gen(),
    ),
    sizes=TEXT_SIZES,
    skip=("tokens:negative", "tokens:too_high"),  # a uint8 tensor cannot hold them: wide_ids covers the range
)
fn_target(
    TXT,
    "eval_windows",
    dict(
        tokens=BYTES,
        seq_len=Int("L", extra=(("too_long", lambda n: 10**3, "bad"),)),
        max_windows=Int(2, optional=True, huge="valid"),
    ),
    sizes=TEXT_SIZES,
    skip=("tokens:negative", "tokens:too_high"),
)
add(
    Target(
        f"{TXT}.TextCorpus.split",
        lambda corpus, name: corpus.split(name),
        dict(
            corpus=Obj(lambda ctx: _mod(TXT).load_stdlib_corpus(), wrong_type=False),
            name=Ch("train", ("valid", "test")),
        ),
    )
)

MM = "ttr_edu.models.mqar"
MM_SIZES = {"H": (1, 2), "D": (1, 4), "V": (4, 9), "B": (1, 2), "T": (1, 5)}
add(
    Target(
        f"{MM}.MQARModel",
        lambda **a: _mod(MM).MQARModel(**a),
        dict(
            mixer=Ch("deltanet", ("softmax_attention", "linear_attention")),
            vocab_size=Int("V"),
            d_model=Int(_hidden),
            num_heads=Int("H", huge="bad"),
            feature_map=Ch("identity", ("elu_plus_one",)),
            use_short_conv=Flag(True),
        ),
        sizes=MM_SIZES,
    )
)


def _mqar_model(ctx):
    torch.manual_seed(0)
    s = ctx.sizes
    return _mod(MM).MQARModel("deltanet", s["V"], _hidden(s), s["H"])


add(
    Target(
        f"{MM}.MQARModel.forward",
        lambda module, inputs: module(inputs),
        dict(module=Obj(_mqar_model, wrong_type=False), inputs=I(("B", "T"), high="V")),
        sizes=MM_SIZES,
        empty=("B", "T"),
    )
)
# ------------------------------------------------------------------------------------------------------------------
# ttr_edu.train, ttr_edu.profiling, ttr_edu.viz (the figures of tensors and sizes)
# ------------------------------------------------------------------------------------------------------------------

TRN = "ttr_edu.train"


def _tiny_model(ctx):
    torch.manual_seed(0)
    return torch.nn.Linear(2, 1)


def _tiny_loss(model, batch):
    return model(batch).square().mean()


def _tiny_batch(generator):
    return torch.randn(4, 2, generator=generator)


CALLABLE = dict(wrong_type=True)
add(
    Target(
        f"{TRN}.train",
        lambda **a: _mod(TRN).train(**a),
        dict(
            model=Obj(_tiny_model, extra=(("frozen", lambda v, c: v.requires_grad_(False), "bad"),)),
            sample_batch=Obj(lambda ctx: _tiny_batch),
            loss_fn=Obj(lambda ctx: _tiny_loss),
            max_steps=Int(3),
            lr=Num(1e-3, lo=0.0, lo_open=True, tiny="either", big="either"),
            target_loss=Num(1e-3, lo=0.0, optional=True, tiny="either", big="either"),
            eval_every=Int(2, huge="valid"),  # evaluates at the last step
            eval_batches=Int(2),
            seed=Int(0, lo=None, huge="either"),
            progress=Flag(False, optional=True),
            desc=Obj(lambda ctx: "train", wrong_type=False),
        ),
        # a training budget (max_steps) and the evaluation set's size (eval_batches) are work the caller asks for:
        # their huge values would run, not allocate, so they are not cases of the size policy
        skip=("max_steps:huge", "eval_batches:huge"),
        errors=(FloatingPointError,),  # a diverging run (lr=1e300), named by its loss_fn
    )
)
add(
    Target(
        f"{TRN}.evaluate",
        lambda **a: _mod(TRN).evaluate(**a),
        dict(
            model=Obj(_tiny_model),
            batches=Obj(lambda ctx: [_tiny_batch(ctx.gen)], extra=(("empty", lambda v, c: [], "bad"),)),
            loss_fn=Obj(lambda ctx: _tiny_loss),
        ),
        skip=("all_meta",),  # the batches are the caller's data, read by the caller's loss_fn and model
    )
)
add(
    Target(
        f"{TRN}.progress_enabled",
        lambda **a: _mod(TRN).progress_enabled(**a),
        dict(progress=Flag(False, optional=True)),
    )
)

PRF = "ttr_edu.profiling"
for fname in ("peak_memory", "bytes_created", "matmul_flops", "operation_count", "work_count"):
    fn_target(PRF, fname, dict(fn=Obj(lambda ctx: lambda: torch.ones(3, 3) @ torch.ones(3, 3))))
fn_target(PRF, "best_seconds", dict(fn=Obj(lambda ctx: lambda: torch.ones(3) * 2), repeats=Int(2, hi=1000)))
for cname in ("PeakMemory", "BytesCreated"):
    add(Target(f"{PRF}.{cname}", lambda cname=cname: getattr(_mod(PRF), cname)()))

VIZ = "ttr_edu.viz"
fn_target(
    VIZ,
    "heatmap",
    dict(
        matrix=F(("R", "C"), extra=(("ints", lambda x: x.round().long(), "valid"),)),
        title=Obj(lambda ctx: "scores", wrong_type=False),
        x_title=Obj(lambda ctx: "column", wrong_type=False),
        y_title=Obj(lambda ctx: "row", wrong_type=False),
        zmid=Num(0.0, big="either", tiny="valid", optional=True),  # None: plotly centres the scale itself
    ),
    sizes={"R": (1, 3), "C": (1, 3)},
    skip=("matrix:int_dtype",),  # an int matrix is drawn: covered by "ints", valid
)
fn_target(VIZ, "recall_scores_figure", dict(n=Int("N"), d=Int("D_k"), seed=Int(0, lo=None, huge="either")))
VD = "ttr_edu.viz.dual_form"
fn_target(
    VD,
    "sorted_scores_figure",
    dict(
        scores=F(("N",), gen=("uniform", 0.0, 1.0)),
        labels=I(("N",), high=3, bounded=False),  # any int names a group
        title=Obj(lambda ctx: "scores", wrong_type=False),
        top=Int(2, optional=True, huge="valid"),
    ),
)


def _gallery(ctx):
    s = ctx.sizes
    images = torch.rand(2, s["h"] * s["w"], generator=ctx.gen)
    return {"fc1": (images, ["a", "b"])}


fn_target(
    VD,
    "spotlight_figure",
    dict(
        test_image=F((lambda s: s["h"] * s["w"],), gen=("uniform", 0.0, 1.0), rank="either"),
        rows=Obj(
            _gallery,
            extra=(
                ("few_captions", lambda v, c: {"fc1": (v["fc1"][0], ["a"])}, "bad"),
                ("nan_image", lambda v, c: {"fc1": (v["fc1"][0] * math.nan, ["a", "b"])}, "bad"),
                ("empty", lambda v, c: {}, "bad"),
            ),
        ),
        image_shape=Obj(
            lambda ctx: (ctx.sizes["h"], ctx.sizes["w"]), extra=(("wrong", lambda v, c: (v[0] + 1, v[1]), "bad"),)
        ),
        title=Obj(lambda ctx: "gallery", wrong_type=False),
    ),
    sizes={"h": (1, 3), "w": (1, 3)},
)
VC = "ttr_edu.viz.chunkwise"
fn_target(VC, "block_decomposition", dict(T=Int("T"), chunk_size=Int(2, huge="valid")))
fn_target(
    VC,
    "block_decomposition_figure",
    dict(
        T=Int("T"),
        chunk_sizes=Obj(
            lambda ctx: [1, 2], extra=(("empty", lambda v, c: [], "bad"), ("zero", lambda v, c: [0], "bad"))
        ),
        active=Int(0, lo=0, hi=1),
    ),
)
fn_target(
    VC,
    "tile_owner_map",
    dict(B=Int("B"), H=Int("H"), T=Int("T"), D_v=Int("D_v"), block_v=Int(2, huge="bad")),
    finite=False,  # NaN marks the masked lanes d >= D_v, by design
)
fn_target(
    VC,
    "tile_map_figure",
    dict(
        B=Int("B"),
        H=Int("H"),
        T=Int("T"),
        D_v=Int("D_v"),
        block_vs=Obj(lambda ctx: [1, 2], extra=(("empty", lambda v, c: [], "bad"), ("zero", lambda v, c: [0], "bad"))),
        active=Int(0, lo=0, hi=1),
    ),
)
