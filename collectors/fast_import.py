"""CPU-only fix for the slow ``import tvm.s_tir.tensor_intrin`` (docs/STACK.md).

``TuneContext`` and every fresh ``LocalBuilder`` worker import ``tvm.s_tir.tensor_intrin``,
which registers the tensor intrinsics of every backend and takes ~16 s, 12 s of which are
CUDA's. A CPU node only ever tensorizes with the x86 intrinsics, so :func:`install` puts a
light stand-in package into ``sys.modules`` that loads ``tensor_intrin.x86`` alone (~1 s).
Later ``import tvm.s_tir.tensor_intrin`` statements then find the stand-in and cost nothing.

Use it in the tuning process and as the ``initializer`` of a ``LocalBuilder`` (its workers
are fresh processes): ``LocalBuilder(initializer=collectors.fast_import.install)``.
Never install it in a process that targets CUDA: CUDA sketch rules need the CUDA intrinsics
(:func:`install_for_target` does the right thing for either kind).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import types
from typing import Any, Iterator

logger = logging.getLogger(__name__)

_NAME = "tvm.s_tir.tensor_intrin"
#: Marker attribute on the stand-in module, so a second call is a no-op.
_MARK = "__tlm_light__"


def is_installed() -> bool:
    """True when the light stand-in is the module ``tvm.s_tir.tensor_intrin`` resolves to."""
    mod = sys.modules.get(_NAME)
    return bool(mod is not None and getattr(mod, _MARK, False))


def install() -> bool:
    """Register the light ``tvm.s_tir.tensor_intrin`` (x86 intrinsics only).

    Returns True if the stand-in is in place after the call, False if the full package had
    already been imported (then there is nothing to save, and nothing is replaced).
    Picklable by reference, so it can serve as a ``LocalBuilder`` ``initializer``.
    """
    existing = sys.modules.get(_NAME)
    if existing is not None:
        return bool(getattr(existing, _MARK, False))
    import tvm.s_tir  # the parent package (cheap compared to the intrinsics)

    spec = importlib.util.find_spec("tvm.s_tir")
    assert spec is not None and spec.submodule_search_locations
    pkg_dir = os.path.join(list(spec.submodule_search_locations)[0], "tensor_intrin")
    light = types.ModuleType(_NAME, "x86-only stand-in for tvm.s_tir.tensor_intrin (collectors.fast_import)")
    light.__path__ = [pkg_dir]  # submodules (x86, dot_product_common, ...) import from the real dir
    light.__package__ = _NAME
    setattr(light, _MARK, True)
    sys.modules[_NAME] = light
    tvm.s_tir.tensor_intrin = light  # type: ignore[attr-defined]
    try:
        x86 = importlib.import_module(_NAME + ".x86")
        light.x86 = x86  # type: ignore[attr-defined]
    except Exception:  # never leave a half-made stand-in behind
        del sys.modules[_NAME]
        raise
    logger.debug("installed the x86-only tvm.s_tir.tensor_intrin")
    return True


def install_for_target(target: Any) -> bool:
    """Install the stand-in when ``target`` is a CPU target (llvm).

    For a CUDA target nothing is replaced; if the stand-in is already in place (a CPU tune ran
    in this process), the CUDA intrinsics are loaded into it so CUDA rules see them.

    ``target`` may be a ``tvm.target.Target``, a dict such as ``{"kind": "llvm", ...}``, or
    a kind string. Returns whether the stand-in is in place.
    """
    kind = _target_kind(target)
    if kind == "llvm":
        return install()
    if is_installed():
        # A CPU tune in this process installed the stand-in: CUDA needs its intrinsics too.
        with shallow_stacks():
            cuda = importlib.import_module(_NAME + ".cuda")
        sys.modules[_NAME].cuda = cuda  # type: ignore[attr-defined]
        logger.info("loaded the CUDA tensor intrinsics into the light tensor_intrin module")
        return True
    if _NAME not in sys.modules:
        with shallow_stacks():  # what TuneContext would import anyway, without the quadratic inspect.stack()
            importlib.import_module(_NAME)
    return False


#: Innermost frames whose source lines ``inspect.stack`` still reads under :func:`shallow_stacks`.
STACK_CONTEXT_FRAMES = 3


@contextlib.contextmanager
def shallow_stacks(depth: int = STACK_CONTEXT_FRAMES) -> Iterator[None]:
    """``inspect.stack()`` reading source lines for the ``depth`` innermost frames only, for the
    duration of the block.

    Why: TVMScript's ``@T.prim_func`` calls ``inspect.stack()`` once per function it parses, and
    that reads the source line of every frame on the stack, each through ``inspect.getmodule``,
    which walks all of ``sys.modules``: in a process that has loaded torch, Ray and pytest
    (~1,500 modules), the CUDA tensor intrinsics' 496 ``prim_func`` calls took 119 of the 127 s of
    their import on a 2-core Zen 3 (cProfile). The parser reads the caller's line (frame 2, is it
    inside an ``@I.ir_module`` class?) and the outer frames' locals, never their source, so the
    frames past ``depth`` (3: the parser reads frame 2) keep their frame, file, line and function and get no source line."""
    real = inspect.stack

    def stack(context: int = 1) -> list:
        frame = sys._getframe(1)
        out = []
        while frame is not None:
            if len(out) < depth:
                out.append(inspect.FrameInfo(frame, *inspect.getframeinfo(frame, context)))
            else:
                code = frame.f_code
                out.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None))
            frame = frame.f_back
        return out

    inspect.stack = stack
    try:
        yield
    finally:
        inspect.stack = real


def _target_kind(target: Any) -> str:
    if isinstance(target, str):
        return target.split()[0]
    if isinstance(target, dict):
        return str(target.get("kind", ""))
    kind = getattr(target, "kind", None)
    return str(getattr(kind, "name", kind or ""))
