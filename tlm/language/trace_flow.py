"""Data flow of a trace's plain-JSON instructions (``[kind, inputs, attrs, outputs]``):
which instruction produced a random variable, and which tile levels a loop is made of."""
from __future__ import annotations

from typing import Any, Callable, Sequence

#: The annotation that pipelines a loop's child blocks (its value: one stage per block).
PIPELINE_KEY = "software_pipeline_stage"


def producers(insts: Sequence[list]) -> dict[str, tuple[int, int]]:
    producer: dict[str, tuple[int, int]] = {}
    for i, inst in enumerate(insts):
        for p, out in enumerate(inst[3] or []):
            if isinstance(out, str):
                producer[out] = (i, p)
    return producer


def made_by(insts: Sequence[Any]) -> Callable[[Any], tuple[int, int] | None]:
    """For a trace's live instructions (``tvm.s_tir.schedule.Instruction``): a lookup from a random
    variable to ``(instruction index, output position)`` of the instruction that made it (None for
    an input of the trace). Compared with ``same_as``, the identity TVM's own replay uses."""
    made = [(o, i, j) for i, x in enumerate(insts) for j, o in enumerate(x.outputs)]

    def lookup(rv: Any) -> tuple[int, int] | None:
        return next(((i, j) for o, i, j in made if o.same_as(rv)), None)

    return lookup


def split_members(insts: Sequence[list], producer: dict, rv: Any) -> list[tuple[int, int]] | None:
    """The (tile instruction, factor position) of every split loop fused into loop ``rv``."""
    if not isinstance(rv, str) or rv not in producer:
        return None
    i, p = producer[rv]
    kind, inputs = insts[i][0], insts[i][1]
    if kind == "Fuse":
        out: list[tuple[int, int]] = []
        for x in inputs:
            m = split_members(insts, producer, x)
            if m is None:
                return None
            out += m
        return out
    if kind == "Split":
        f = inputs[1 + p] if 1 + p < len(inputs) else None
        if isinstance(f, str) and f in producer and insts[producer[f][0]][0] == "SamplePerfectTile":
            return [producer[f]]
    return None


