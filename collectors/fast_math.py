"""A vectorized float32 ``exp`` (and ``erf``, and ``pow`` to a small whole power) for whole-model builds on CPUs.

TVM lowers ``exp`` on LLVM to ``llvm.exp``, which LLVM turns into one scalar ``expf`` call per
lane: a 16-lane vector of EfficientNet-B0's SiLU (``x * sigmoid(x)``) made 16 libm calls. Its
first depthwise convolution fused with the SiLU ran 839 us against 63 us for the convolution
alone (Rocket Lake), and every sigmoid, softmax and tanh-GELU of a model pays the same way.
:func:`fast_exp` lowers float32 ``exp`` to Cephes' ``expf`` written as TIR arithmetic instead
(range reduction by ``ln 2`` in two parts, a degree-7 polynomial, the power of two built in the
exponent bits), which LLVM vectorizes like any other expression: within 1e-7 of the exact value
(relative) for |x| < 87; below -87.3 it gives 0 where float32 would give a subnormal; above
88.38 it gives +inf (float32 overflows at 88.72); NaN stays NaN. 7x ``llvm.exp`` on 2^20 values
(Rocket Lake, AVX-512).

``erf`` (BERT's exact GELU) had the same libm call per lane; inside the context it is Eigen's
rational approximation (:func:`_lower_erf`); ``pow(x, 3)`` (GPT-2's tanh GELU) a libm ``powf``
call per lane, inside it two multiplications (:func:`_lower_pow`).

Only inside ``with fast_exp():`` (the lowering rule is registered once per process and does
nothing outside it), so the measurement path (builder workers, correctness references) is
TVM's as it was and the corpus's latencies stay comparable; :func:`collectors.compile.compile_model`
builds every whole model (served, MetaSchedule's, untuned) with it by default, so they are
compared under one compiler.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("tlm_fast_exp", default=False)
_INSTALLED = False
#: TVM's own lowering of each op ours replaces on LLVM, taken before ours is registered: what a call
#: outside :func:`fast_exp` (or of another dtype, or another power) still gets
_TVM: dict[str, Any] = {}

#: Cephes ``expf``: ln 2 split for an exact range reduction, and the polynomial of exp(r) - 1 - r
_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
#: the largest x whose exp the exponent bits can hold (2^127 x the polynomial's at most sqrt(2))
_HI = 88.3762626647949


@contextlib.contextmanager
def fast_exp() -> Iterator[None]:
    """Builds inside lower float32 ``exp`` and ``erf`` (scalar and vector), and ``pow`` to a small whole
    power, on LLVM targets to vector arithmetic."""
    _install()
    token = _ON.set(True)
    try:
        yield
    finally:
        _ON.reset(token)


def _install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    import tvm
    from tvm.tirx import register_intrin_lowering

    for name, ours in (("tirx.exp", _lower_exp), ("tirx.erf", _lower_erf), ("tirx.pow", _lower_pow)):
        op = tvm.ir.Op.get(name)
        _TVM[name] = op.get_attr("llvm.FLowerIntrinsic") or op.get_attr("default.FLowerIntrinsic")
        register_intrin_lowering(name, target="llvm", f=ours, level=99)
    _INSTALLED = True


def _lower_exp(op: Any) -> Any:
    """The ``tirx.exp`` call ``op`` as Cephes' ``expf`` in TIR (float32 of any lanes, inside
    :func:`fast_exp`); otherwise ``llvm.exp``, the lowering TVM gives it."""
    from tvm import tirx

    dtype = str(op.ty.dtype)
    if not _ON.get() or not dtype.startswith("float32"):
        return _TVM["tirx.exp"](op)
    lanes = dtype[len("float32"):]
    const = lambda v: tirx.const(v, dtype)  # noqa: E731
    x = op.args[0]
    clamped = tirx.max(tirx.min(x, const(_HI)), const(-_HI))
    n = tirx.floor(clamped * const(_LOG2E) + const(0.5))
    r = clamped - n * const(_LN2_HI) - n * const(_LN2_LO)
    p = const(_POLY[0])
    for c in _POLY[1:]:
        p = p * r + const(c)
    p = p * r * r + r + const(1.0)
    int_t = "int32" + lanes
    two_n = tirx.reinterpret(dtype, tirx.shift_left(tirx.Cast(int_t, n) + tirx.const(127, int_t),
                                                    tirx.const(23, int_t)))
    out = tirx.Select(x > const(_HI), const(float("inf")), p * two_n)
    return tirx.Select(tirx.isnan(x), x, out)


#: Eigen's ``generic_fast_erf_float`` (TVM's ``topi.fast_erf`` too): erf(x) = x p(x^2) / q(x^2) on
#: [-4, 4], where float32 erf is already +-1 outside; odd numerator and even denominator, highest first
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _lower_erf(op: Any) -> Any:
    """The ``tirx.erf`` call ``op`` as Eigen's rational approximation in TIR (float32 of any
    lanes, inside :func:`fast_exp`): BERT's exact GELU made one libm ``erff`` call per lane, 600 us
    a layer on its 128 x 3072 activations (Rocket Lake). Within 3e-7 of the exact value; NaN
    stays NaN. Otherwise TVM's own lowering (that libm call)."""
    from tvm import tirx

    dtype = str(op.ty.dtype)
    if not _ON.get() or not dtype.startswith("float32"):
        return _TVM["tirx.erf"](op)
    const = lambda v: tirx.const(v, dtype)  # noqa: E731
    x = tirx.max(tirx.min(op.args[0], const(4.0)), const(-4.0))
    x2 = x * x
    p, q = const(_ERF_P[0]), const(_ERF_Q[0])
    for c in _ERF_P[1:]:
        p = p * x2 + const(c)
    for c in _ERF_Q[1:]:
        q = q * x2 + const(c)
    return tirx.Select(tirx.isnan(op.args[0]), op.args[0], x * p / q)


def _lower_pow(op: Any) -> Any:
    """``pow(x, n)`` for a constant whole ``n`` from 2 to 4 as ``n - 1`` multiplications (inside
    :func:`fast_exp`): GPT-2's tanh GELU cubes its input, and ``llvm.pow`` made a libm ``powf`` call
    per lane (3.5 ms a layer on 128 x 3072 values, Rocket Lake). Any other pow: TVM's lowering."""
    from tvm import tirx

    base, exponent = op.args
    if isinstance(exponent, tirx.Broadcast):  # a vector's exponent: the constant broadcast to its lanes
        exponent = exponent.value
    value = exponent.value if isinstance(exponent, (tirx.FloatImm, tirx.IntImm)) else None
    if not _ON.get() or value is None or float(value) not in (2.0, 3.0, 4.0) or \
            not str(op.ty.dtype).startswith(("float32", "float64")):
        return _TVM["tirx.pow"](op)
    out = base
    for _ in range(int(value) - 1):
        out = out * base
    return out
