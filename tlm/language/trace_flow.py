"""Data flow of a trace's instructions (TVM's, or plain JSON ``[kind, inputs, attrs, outputs]``):
which instruction produced a random variable, which tile levels a loop is made of, and which
tiles split a block iterator's own loop (its extent the same whatever the decisions)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

#: The annotation that pipelines a loop's child blocks (its value: one stage per block).
PIPELINE_KEY = "software_pipeline_stage"
#: Instructions that leave the loops of every remaining block as they were (inlining a block into
#: its consumer, or a consumer into its producer, changes a body, not the other block's nest).
NEST_KEEPING = frozenset({
    "GetSBlock", "GetLoops", "GetConsumers", "GetProducers", "GetChildBlocks", "GetOutputBlocks",
    "Annotate", "Unannotate", "SamplePerfectTile", "SamplePartitionedTile", "SampleCategorical",
    "ComputeInline", "ReverseComputeInline"})


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


def first_reshape(insts: Sequence[Any]) -> int:
    """Index of the first instruction that reshapes a loop nest (``len(insts)``: none does): the
    loops a ``GetLoops`` returned before it are the block's own, one per iterator."""
    return next((i for i, x in enumerate(insts) if x.kind.name not in NEST_KEEPING), len(insts))


def own_loop_tiles(insts: Sequence[Any], choices: Iterable[Any]) -> set[int]:
    """The instruction indices of the tile choices (``tlm.language.space.Choice`` of kind tile or
    ptile) that split a loop some ``GetLoops`` returned before the first reshape: the loop is
    the block iterator's, so its extent is the same whatever the sketch's decisions are."""
    reshaped = first_reshape(insts)
    source = made_by(insts)
    out = set()
    for c in choices:
        if c.kind not in ("tile", "ptile"):
            continue
        src = source(insts[c.inst_index].inputs[0])
        if src is not None and insts[src[0]].kind.name == "GetLoops" and src[0] < reshaped:
            out.add(c.inst_index)
    return out
