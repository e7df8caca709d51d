"""The one Registry type: the generic class, then every registry built on it.

``BAD_PARAMS`` is the table every registry joins: an unknown name, an unknown parameter and a bad
value per registry, each with the exception type and a fragment of its message. A new registry
adds rows (and, when its ``make`` needs positional inputs, an entry in ``INPUTS``).
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
import types

import numpy as np
import pytest

import gradcode
from codes_util import SMALL_INSTANCES
from gradcode.experiments.reproduce import REPRODUCTIONS
from gradcode.problems import DATASETS, OPTIMIZERS, PROBLEMS, DataSpec, make_dataset
from gradcode.registry import REQUIRED, ParameterError, Registry, UnknownNameError
from gradcode.codes import CODES
from gradcode.schemes import SCHEMES
from gradcode.stragglers import DELAY_MODELS

# ------------------------------------------------------------------------------ the generic class


def _shapes():
    """A registry of toy classes and factories: class registration with ``summary`` or a
    docstring, a factory, aliases, a required parameter, ``**kwargs``."""
    reg = Registry("shape")

    @reg.register("square", aliases=("sq",))
    class Square:
        summary = "a square"

        def __init__(self, side, *, unit="m"):
            if side <= 0:
                raise ValueError(f"side must be > 0, got {side}")
            self.side, self.unit = side, unit

    @reg.register("circle")
    class Circle:
        """A circle of radius r.

        Longer text that is not the summary."""

        def __init__(self, r=1.0):
            self.r = r

    @reg.register("blob")
    def blob(**anything):
        """Whatever you like,
        on two lines."""
        return dict(anything)

    @reg.register("dot")
    @dataclasses.dataclass(frozen=True)
    class Dot:
        pass

    return reg, Square, Circle, blob, Dot


def test_register_names_lookup_and_reprs():
    reg, Square, Circle, blob, Dot = _shapes()
    assert Square.name == "square" and Circle.name == "circle" and Dot.name == "dot"
    assert not hasattr(blob, "name")  # a factory function is left as it is
    assert reg.names() == ["blob", "circle", "dot", "square"]
    assert reg.names(aliases=True) == ["blob", "circle", "dot", "sq", "square"]
    assert list(reg) == reg.names() and len(reg) == 4
    assert "sq" in reg and "square" in reg and "triangle" not in reg and 3 not in reg
    assert reg.get("sq") is Square and reg.canonical("sq") == "square"
    assert repr(reg) == "<Registry 'shape': blob, circle, dot, square>"
    assert repr(Registry("thing")) == "<Registry 'thing': (none)>"
    assert repr(REQUIRED) == "REQUIRED" and pickle.loads(pickle.dumps(REQUIRED)) is REQUIRED


def test_parameters_and_info():
    reg, *_ = _shapes()
    assert reg.parameters("square") == {"side": REQUIRED, "unit": "m"}
    assert reg.parameters("sq") == reg.parameters("square")
    assert reg.parameters("circle") == {"r": 1.0}
    assert reg.parameters("blob") == {}  # **kwargs: open, nothing to list
    assert reg.info("sq") == {"name": "square", "class": "Square", "summary": "a square",
                              "params": {"side": None, "unit": "m"}}
    assert reg.info("circle")["summary"] == "A circle of radius r."  # first paragraph of the docstring
    assert reg.info("blob") == {"name": "blob", "class": "blob", "summary": "Whatever you like, on two lines.",
                                "params": {}}
    assert reg.info("dot")["summary"] == ""  # not dataclass's "Dot()" text


def test_make_validates_then_builds():
    reg, Square, *_ = _shapes()
    sq = reg.make("sq", side=2, unit="cm")
    assert isinstance(sq, Square) and (sq.side, sq.unit) == (2, "cm")
    assert reg.make("blob", a=1, b=2) == {"a": 1, "b": 2}  # **kwargs: anything goes through
    # a bad value is the constructor's own error, passed through untouched
    with pytest.raises(ValueError, match="side must be > 0, got -1") as info:
        reg.make("square", side=-1)
    assert not isinstance(info.value, ParameterError)


@pytest.mark.parametrize(
    "name, params, exc, message",
    [
        ("triangle", {}, UnknownNameError, "unknown shape 'triangle'; available shapes: blob, circle, dot, sq, square"),
        ("circle", {"radius": 2}, ParameterError, "shape 'circle' does not take 'radius'; its parameters are r"),
        ("square", {}, ParameterError, "shape 'square' needs 'side'; its parameters are side, unit"),
        ("sq", {"z": 1, "a": 2}, ParameterError,
         "shape 'square' does not take 'a', 'z' and needs 'side'; its parameters are side, unit"),
        ("dot", {"x": 0}, ParameterError, "shape 'dot' does not take 'x'; it takes no parameters"),
    ],
)
def test_error_texts(name, params, exc, message):
    reg, *_ = _shapes()
    with pytest.raises(exc) as info:
        reg.make(name, **params)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError) and isinstance(info.value, gradcode.GradcodeError)
    if exc is ParameterError:  # Python reports a wrong keyword as a TypeError; old callers caught that
        assert isinstance(info.value, TypeError)
        with pytest.raises(exc, match=message.replace("(", r"\(").replace(")", r"\)")):
            reg.check(name, **params)  # the same verdict without building


def test_bad_registry_use():
    reg, Square, *_ = _shapes()
    with pytest.raises(ValueError, match="shape name 'square' is already registered by Square"):
        reg.register("square")(lambda: None)
    with pytest.raises(ValueError, match="'sq' is already registered by Square"):
        reg.register("sq2", aliases=("sq",))(lambda: None)
    assert "sq2" not in reg  # a refused registration leaves nothing behind
    with pytest.raises(ValueError, match="repeat a name"):
        reg.register("x", aliases=("x",))
    with pytest.raises(TypeError, match="non-empty string"):
        reg.register("")
    with pytest.raises(TypeError, match="class or a function"):
        reg.register("x")(3)
    with pytest.raises(TypeError, match="a shape name must be a string, got 3 \\(int\\)"):
        reg.make(3)
    with pytest.raises(TypeError, match="kind"):
        Registry("")
    with pytest.raises(TypeError, match="need wrap"):
        Registry("thing", common={"a": 1})


def test_inputs_are_passed_through_and_not_parameters():
    reg = Registry("fit", inputs=("data",))

    @reg.register("mean")
    def mean(data, *, weight=1.0):
        return weight * float(np.mean(data))

    assert reg.parameters("mean") == {"weight": 1.0}
    assert reg.make("mean", [1.0, 3.0], weight=2.0) == 4.0
    with pytest.raises(TypeError, match=r"takes 1 positional input\(s\) \(data\)"):
        reg.make("mean", weight=2.0)
    with pytest.raises(ParameterError, match="fit 'mean' does not take 'data'"):
        reg.make("mean", [1.0], data=[2.0])


def test_common_parameters_compose_through_wrap():
    """What the delay models use for the communication component: every entry takes the common
    parameters, which ``wrap`` applies to the built object."""
    calls = []

    def wrap(obj, *, scale):
        calls.append(scale)
        return obj * scale

    reg = Registry("number", common={"scale": 1}, wrap=wrap)
    reg.register("two")(lambda: 2)
    assert reg.parameters("two") == {"scale": 1}
    assert reg.make("two") == 2 and reg.make("two", scale=5) == 10 and calls == [1, 5]
    reg.check("two", scale=3)
    with pytest.raises(ParameterError, match="does not take 'size'; its parameters are scale$"):
        reg.make("two", size=3)


def test_modules_are_imported_on_first_read(tmp_path, monkeypatch):
    """A registry fills itself from modules that import it (the reproductions)."""
    holder = types.ModuleType("_registry_holder")
    holder.REG = Registry("recipe", modules=["_registry_lazy_fixture"])
    monkeypatch.setitem(sys.modules, "_registry_holder", holder)
    (tmp_path / "_registry_lazy_fixture.py").write_text(
        "from _registry_holder import REG\n\n"
        "@REG.register('soup')\n"
        "def soup(salt=1):\n"
        "    '''Hot soup.'''\n"
        "    return 'soup' * salt\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "_registry_lazy_fixture", raising=False)
    assert "_registry_lazy_fixture" not in sys.modules
    assert holder.REG.names() == ["soup"] and holder.REG.make("soup", salt=2) == "soupsoup"
    assert holder.REG.info("soup")["summary"] == "Hot soup."


def test_the_codes_registry_is_expressible():
    """The codes' registry (class decorator, ``cls.name``, a ``summary`` ClassVar, parameters
    from ``__init__``) rebuilt on :class:`Registry` gives what ``code_info`` and ``make_code``
    give, code by code."""
    from gradcode.codes import available_codes, code_info, make_code

    reg = Registry("code")
    for name in available_codes():
        params = SMALL_INSTANCES[name][0]
        cls = type(make_code(name, **params))
        assert cls.name == name  # registering again stores the same name: no side effect
        reg.register(name)(cls)
        assert cls.name == name
        assert reg.info(name) == code_info(name), name
        assert repr(reg.make(name, **params)) == repr(make_code(name, **params))
    assert reg.names() == available_codes()
    with pytest.raises(UnknownNameError, match="unknown code 'nope'; available codes: agc, "):
        reg.make("nope")


# ------------------------------------------------------------------------------ every registry

#: the registries converted to :class:`Registry` (codes join when theirs is)
REGISTRIES = [CODES, SCHEMES, DELAY_MODELS, PROBLEMS, DATASETS, OPTIMIZERS, REPRODUCTIONS]


def _digits():
    return make_dataset(DataSpec("digits", {"binary": True}, seed=0))


#: positional inputs of ``make`` for the registries that take some, by kind
INPUTS = {
    "problem": lambda: (_digits(),),
    "dataset": lambda: (np.random.default_rng(0), 0.2),
}

#: (registry, name, params, exception type, message fragment (a regex, searched))
BAD_PARAMS = [
    # delay models
    (DELAY_MODELS, "weibull", {}, UnknownNameError,
     "^unknown delay model 'weibull'; available delay models: bernoulli, fixed, gilbert-elliot, gilbert-elliot-het,"),
    (DELAY_MODELS, "shifted-exp", {"rate": 3}, ParameterError,
     "^delay model 'shifted-exp' does not take 'rate'; its parameters are mu, alpha, partitions, comm, comm_latency$"),
    (DELAY_MODELS, "gilbert-elliot-het", {"mu_fast": 3}, ParameterError, "does not take 'mu_fast'"),
    (DELAY_MODELS, "bernoulli", {"p": 1.5}, ValueError, "^p must be <= 1.0, got 1.5$"),
    (DELAY_MODELS, "fixed", {"stragglers": 1.5}, TypeError, "^stragglers must be an integer, got 1.5 \\(float\\)$"),
    (DELAY_MODELS, "fixed", {"comm": -1}, ValueError, "^comm must be >= 0.0, got -1.0$"),
    (DELAY_MODELS, "gilbert-elliot", {"heterogeneous": True}, ParameterError, "does not take 'heterogeneous'"),
    (DELAY_MODELS, "trace", {}, TypeError, "exactly one of delays .* or path"),
    # problems
    (PROBLEMS, "svm", {}, UnknownNameError, "^unknown problem 'svm'; available problems: cnn, linear, logistic, mlp, softmax$"),
    (PROBLEMS, "logistic", {"lr": 1.0}, ParameterError,
     "^problem 'logistic' does not take 'lr'; its parameters are l2, fit_intercept$"),
    (PROBLEMS, "logistic", {"l2": -1.0}, ValueError, "^l2 must be >= 0.0, got -1.0$"),
    (PROBLEMS, "logistic", {"fit_intercept": 1}, TypeError, "^fit_intercept must be a bool, got 1$"),
    # datasets
    (DATASETS, "mnist", {}, UnknownNameError, "^unknown dataset 'mnist'; available datasets: amazon-csv, amazon-synthetic,"),
    (DATASETS, "digits", {"n_samples": 10}, ParameterError, "^dataset 'digits' does not take 'n_samples'; its parameters are binary$"),
    (DATASETS, "linear-synthetic", {"noise": -1.0}, ValueError, "^noise must be >= 0.0, got -1.0$"),
    # optimizers
    (OPTIMIZERS, "adam", {}, UnknownNameError, "^unknown optimizer 'adam'; available optimizers: gd, nesterov, sgd$"),
    (OPTIMIZERS, "sgd", {"lr": 0.1}, ParameterError, "^optimizer 'sgd' does not take 'lr'; its parameters are c1, c2$"),
    (OPTIMIZERS, "gd", {"lr": 0.0}, ValueError, "^lr must be > 0.0, got 0.0$"),
    (OPTIMIZERS, "nesterov", {"momentum": 1.0}, ValueError, "^momentum must be < 1.0, got 1.0$"),
    # reproductions
    (REPRODUCTIONS, "table9", {}, UnknownNameError,
     "^unknown reproduction 'table9'; available reproductions: agc-table1, agc-table6, agc-training, commfr-table1, "
     "gcdc-fig10, gcdc-fig11, gcdc-fig12, gcdc-fig4, gcdc-fig5, gcdc-fig6, gcdc-fig7, gcdc-fig8, gcdc-fig9, "
     "gcdc-figs, gcdc-table1, sgc-example, sgc-load-bounds, sgc-probe-switch, sgc-resnet, sgc-table1-loads, "
     "sgc-training$"),
    (REPRODUCTIONS, "commfr-table1", {"kappa_": 1.0}, ParameterError,
     "^reproduction 'commfr-table1' does not take 'kappa_'; its parameters are kappa, eps, C$"),
    (REPRODUCTIONS, "commfr-table1", {"kappa": -1.0}, ValueError, "^kappa must be > 0.0, got -1.0$"),
    # codes
    (CODES, "lrc", {}, UnknownNameError, "^unknown code 'lrc'; available codes: agc, cgc, commfr, crc,"),
    (CODES, "crc", {"n": 6, "s": 2, "t": 1}, ParameterError, "^code 'crc' does not take 't'; its parameters are n, s, seed$"),
    (CODES, "crc", {"n": 6}, ParameterError, "^code 'crc' needs 's'; its parameters are n, s, seed$"),
    (CODES, "crc", {"n": 6, "s": 6}, ValueError, "s must be < n"),
    (CODES, "frc", {"n": 7, "s": 2}, ValueError, "frc needs \\(s \\+ 1\\) to divide n"),
    # scheme families
    (SCHEMES, "lagrange", {}, UnknownNameError, "^unknown scheme 'lagrange'; available schemes: gc-dc"),
    (SCHEMES, "gc-dc", {"n": 12, "clusters": 4, "r": 3, "q": 1}, ParameterError, "does not take 'q'"),
    (SCHEMES, "gc-dc", {"n": 12, "clusters": 5, "r": 3}, ValueError, "clusters"),
    (SCHEMES, "m-sgc", {"n": 4, "B": 3, "W": 3, "lam": 2}, ValueError, "M-SGC needs 0 < B < W \\(Sec. 3.3\\)"),
    (SCHEMES, "sr-sgc", {"n": 8, "B": 2, "W": 4, "lam": 2}, ValueError, "W = x B \\+ 1"),
    (SCHEMES, "m-sgc", {"n": 4, "B": 1, "W": 2, "lam": 2, "T": 1}, ParameterError, "does not take 'T'"),
]


@pytest.mark.parametrize("registry, name, params, exc, fragment", BAD_PARAMS,
                         ids=[f"{r.kind}-{n}-{','.join(p) or 'name'}" for r, n, p, _, _ in BAD_PARAMS])
def test_bad_params_table(registry, name, params, exc, fragment):
    inputs = INPUTS.get(registry.kind, tuple)()
    with pytest.raises(exc, match=fragment):
        registry.make(name, *inputs, **params)


def test_every_registry_has_rows_in_the_table():
    kinds = {(r.kind, e) for r, _, _, e, _ in BAD_PARAMS}
    for reg in REGISTRIES:
        assert (reg.kind, UnknownNameError) in kinds and (reg.kind, ParameterError) in kinds, reg.kind
        assert any(r is reg and not issubclass(e, (UnknownNameError, ParameterError)) for r, _, _, e, _ in BAD_PARAMS)


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.kind)
def test_every_registry_speaks_the_same_text(registry):
    names = registry.names()
    assert names and names == sorted(names)
    with pytest.raises(UnknownNameError) as info:
        registry.make("no-such-name")
    assert str(info.value) == (
        f"unknown {registry.kind} 'no-such-name'; available {registry.plural}: {', '.join(registry.names(aliases=True))}"
    )
    for name in names:
        params = registry.parameters(name)
        info = registry.info(name)
        assert info["name"] == name and info["summary"], name
        assert info["params"] == {k: None if v is REQUIRED else v for k, v in params.items()}
        inputs = INPUTS.get(registry.kind, tuple)()
        with pytest.raises(ParameterError,
                           match=f"^{registry.kind} '{name}' does not take 'no_such_parameter'( and needs [^;]+)?; "):
            registry.make(name, *inputs, no_such_parameter=1)


def test_public_wrappers_are_the_registries():
    """The make_*/available_* functions callers use are thin wrappers over the registries."""
    from gradcode.experiments.reproduce import available_reproductions
    from gradcode.problems import available_datasets, available_optimizers, available_problems, make_optimizer

    assert gradcode.available_delay_models() == DELAY_MODELS.names(aliases=True)
    assert list(available_problems()) == PROBLEMS.names()
    assert list(available_datasets()) == DATASETS.names()
    assert list(available_optimizers()) == OPTIMIZERS.names()
    assert list(available_reproductions()) == REPRODUCTIONS.names()
    assert available_reproductions()["agc-table6"] == REPRODUCTIONS.info("agc-table6")["summary"]
    assert make_optimizer("gd", lr=0.5) == OPTIMIZERS.make("gd", lr=0.5)
    assert gradcode.make_delay_model("fixed", comm=1.0) == DELAY_MODELS.make("fixed", comm=1.0)
    # a DataSpec refuses a parameter its dataset does not take when it is made
    with pytest.raises(ParameterError, match="dataset 'digits' does not take 'n_samples'"):
        DataSpec("digits", {"n_samples": 10})
