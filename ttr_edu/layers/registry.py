"""One registry of token mixers: each is a :class:`MixerSpec`, and every list of mixers in the package is a view of it.

A spec says everything the package needs to know about a mixer: its name, its label in tables, its class and the
options it is built with, whether it keeps a fixed-size (parametric) memory, its name among the regression
framework's layers (:data:`ttr_edu.regression.NAMED_LAYERS`), how the public-API fuzz draws its options, and which
lists it belongs to. The lists are live views, so a mixer registered at any time appears in each of them:

* :data:`ttr_edu.layers.MIXERS` and :data:`ttr_edu.layers.MEMORY_MIXERS`: the layers of chapters 04–07 and chapter
  08's memories (``family``);
* :data:`ttr_edu.models.mqar.MODELS`: the layers the main MQAR grid trains (``mqar``);
* :data:`ttr_edu.models.lm.LM_MIXERS`: the language models the chapter compares (``lm``).

:class:`~ttr_edu.models.lm.TinyLM` and :class:`~ttr_edu.models.mqar.MQARModel` take the name of any registered mixer.
Adding a mixer is one class and one spec::

    class DecayedHebbian(Mixer):
        ...

    register(MixerSpec("decayed_hebbian", "decayed Hebbian", DecayedHebbian))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from ttr_edu._internal.validation import check_bool, check_choice

from .base import QK_FEATURE_MAPS, Mixer

__all__ = ["MixerSpec", "SpecView", "register", "unregister", "REGISTRY"]

#: The lists a spec can belong to by its ``family``: the layers of chapters 04–07, chapter 08's memories, or a named
#: variant (other options of a registered class, e.g. for the language-model comparison).
FAMILIES = ("mixer", "memory", "variant")
#: The kinds of a fuzz recipe's entries (see :class:`MixerSpec`).
FUZZ_KINDS = ("flag", "int", "positive", "choice", "params")


@dataclass(frozen=True)
class MixerSpec:
    """One registered mixer: how to build it and where it is listed.

    Calling a spec builds its layer: ``spec(hidden_size, num_heads, **options)`` is
    ``spec.layer(hidden_size, num_heads, **spec.options, **options)``.

    Attributes:
        name: the key in the registry (``"deltanet"``), a Python identifier.
        label: the name in tables and figures (``"DeltaNet"``).
        layer: the class, a subclass of :class:`~ttr_edu.layers.base.Mixer`.
        options: the keyword arguments it is built with (e.g. ``{"use_gate": True}``).
        parametric: ``True`` for a fixed-size memory read through a feature map (it takes ``feature_map=``);
            ``False`` for a key-value cache. Read by the MQAR model (which passes a feature map to parametric
            mixers only) and checked against the layer by the tests.
        named_layer: its name in :data:`ttr_edu.regression.NAMED_LAYERS` (``None``: not one of them); the tests prove
            the layer's mixing equal to that framework layer's.
        fuzz: how the public-API fuzz draws the class's own options, ``{option: recipe}``, given on the class's first
            spec: ``("flag", default)``, ``("int", default)`` or ``("int", default, maximum)``,
            ``("positive", default)`` (a float > 0), ``("choice", default, (others, ...))``, ``("params", None)``
            (a dict of the feature map's parameters). ``None``: none (a variant of a class registered before).
        family: ``"mixer"`` (:data:`~ttr_edu.layers.MIXERS`), ``"memory"`` (:data:`~ttr_edu.layers.MEMORY_MIXERS`)
            or ``"variant"`` (neither).
        mqar: trained by the main MQAR grid (:data:`ttr_edu.models.mqar.MODELS`).
        lm: compared by the language-modelling chapter (:data:`ttr_edu.models.lm.LM_MIXERS`).
        description: a sentence for the language models' table (default: the label).

    Raises:
        TypeError, ValueError: a field of the wrong type or value, named.
    """

    name: str
    label: str
    layer: type[Mixer]
    options: Mapping[str, Any] = field(default_factory=dict)
    parametric: bool = True
    named_layer: str | None = None
    fuzz: Mapping[str, tuple] | None = None
    family: str = "mixer"
    mqar: bool = False
    lm: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"name: expected a Python identifier such as 'deltanet', got {self.name!r}")
        if not isinstance(self.label, str) or not self.label:
            raise TypeError(f"label: expected a non-empty str, got {type(self.label).__name__} {self.label!r}")
        if not (isinstance(self.layer, type) and issubclass(self.layer, Mixer)):
            raise TypeError(f"layer: expected a subclass of ttr_edu.layers.base.Mixer, got {self.layer!r}")
        if not isinstance(self.options, Mapping) or not all(isinstance(k, str) for k in self.options):
            raise TypeError(f"options: expected a dict of keyword arguments, got {type(self.options).__name__}")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        check_bool("parametric", self.parametric)
        if self.named_layer is not None and not isinstance(self.named_layer, str):
            raise TypeError(f"named_layer: expected a str or None, got {type(self.named_layer).__name__}")
        if self.fuzz is not None:
            if not isinstance(self.fuzz, Mapping):
                raise TypeError(f"fuzz: expected a dict of option -> recipe or None, got {type(self.fuzz).__name__}")
            for option, recipe in self.fuzz.items():
                if not isinstance(recipe, tuple) or not recipe or recipe[0] not in FUZZ_KINDS:
                    raise ValueError(
                        f"fuzz: the recipe of {option!r} must start with one of {FUZZ_KINDS}, got {recipe!r}"
                    )
            object.__setattr__(self, "fuzz", MappingProxyType(dict(self.fuzz)))
        check_choice("family", self.family, FAMILIES)
        check_bool("mqar", self.mqar)
        check_bool("lm", self.lm)
        if not isinstance(self.description, str):
            raise TypeError(f"description: expected a str, got {type(self.description).__name__}")

    def __call__(self, hidden_size: int, num_heads: int = 1, **options: Any) -> Mixer:
        """The layer, ``(B, T, hidden_size) -> (B, T, hidden_size)``, built with the spec's options and ``options``
        (which take precedence). Raises what the class raises for a bad option."""
        return self.layer(hidden_size, num_heads, **{**self.options, **options})


def feature_map_recipe(default: str) -> tuple:
    """The fuzz recipe of a parametric mixer's ``feature_map`` option: ``default`` and the other names of
    :data:`~ttr_edu.layers.base.QK_FEATURE_MAPS`."""
    return ("choice", default, tuple(name for name in QK_FEATURE_MAPS if name != default))


_REGISTRY: dict[str, MixerSpec] = {}
#: name -> :class:`MixerSpec` of every registered mixer, in the order of registration (read-only, live).
REGISTRY: Mapping[str, MixerSpec] = MappingProxyType(_REGISTRY)


def register(spec: MixerSpec, *, replace: bool = False) -> MixerSpec:
    """Add ``spec`` to the registry (and so to every view it belongs to) and return it.

    Raises:
        TypeError: ``spec`` is not a :class:`MixerSpec`, ``replace`` not a bool.
        ValueError: its name is registered already and ``replace`` is False.
    """
    if not isinstance(spec, MixerSpec):
        raise TypeError(f"spec: expected a MixerSpec, got {type(spec).__name__}")
    if spec.name in _REGISTRY and not check_bool("replace", replace):
        raise ValueError(
            f"spec: a mixer named {spec.name!r} is registered already ({_REGISTRY[spec.name].layer.__name__}); "
            "pass replace=True to replace it"
        )
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> MixerSpec:
    """Remove the mixer ``name`` from the registry and return its spec.

    Raises:
        ValueError: no mixer of that name (the message lists the registered ones).
    """
    check_choice("name", name, tuple(_REGISTRY))
    return _REGISTRY.pop(name)


V = TypeVar("V")


class SpecView(Mapping[str, V], Generic[V]):
    """A live, read-only view of the registry: ``name -> value(spec)`` for the specs that ``keep`` selects, in the
    order of registration.

    Args:
        keep: ``spec -> bool``.
        value: ``spec -> the view's value`` (default: the spec itself, which builds its layer when called).
    """

    def __init__(self, keep: Callable[[MixerSpec], bool], value: Callable[[MixerSpec], V] | None = None) -> None:
        self._keep = keep
        self._value: Callable[[MixerSpec], Any] = value or (lambda spec: spec)

    def __getitem__(self, name: str) -> V:
        spec = _REGISTRY.get(name)
        if spec is None or not self._keep(spec):
            raise KeyError(name)
        return self._value(spec)

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, spec in _REGISTRY.items() if self._keep(spec)])

    def __len__(self) -> int:
        return sum(1 for spec in _REGISTRY.values() if self._keep(spec))

    def __repr__(self) -> str:
        return f"SpecView({', '.join(self)})"
