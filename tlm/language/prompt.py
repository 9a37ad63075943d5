"""The prompt of a sentence: the hardware, the task's blocks and the sketch, in each language version.

A prompt is fixed by (task, hardware, sketch, version); :mod:`tlm.language.sentences` holds the
grammar (its docstring) and reads and writes whole sentences. Version 2's words (each buffer's
dimensions, lanes, registers, the tile level a sketch fuses at) are built here too.
"""
from __future__ import annotations

from typing import Any, Sequence

from collectors.hardware import Hardware
from collectors.tir import dtype_bits
from collectors.tasks import Task
from tlm.language.numbers import number_tokens
from tlm.language.space import Sketch, Space, sblocks
from tlm.language.trace_flow import made_by
from tlm.language.words import BOS, DECIDE, DEFAULT_LANGUAGE, ISA_WORDS, LANGUAGE_VERSIONS

_ITER_WORD = {0: "S", 2: "R"}  # DataPar, CommReduce; anything else is "O" (ordered/opaque)


def hardware_tokens(hw: Hardware, *, language: int = 1) -> list[str]:
    """The hardware part of a prompt (CPU ISA and vector width derived from the target's
    ``mcpu`` via LLVM, so a stored target gives the same words as a live machine; version 2 adds
    the CPU's vector registers, which bound a register tile)."""
    from dataclasses import replace

    from collectors.hardware import isa_of, vector_bits_of, vector_registers

    if hw.kind == "cpu":
        isa = isa_of(hw)
        cores = int(hw.target.get("num-cores", hw.cores))
        vector = vector_bits_of(isa) if isa else hw.vector_bits
    else:
        isa, cores, vector = (), hw.cores, hw.vector_bits
    out = ["hw", hw.kind, "arch", hw.arch or "unknown", "sms" if hw.kind == "cuda" else "cores"]
    out += number_tokens(cores) + ["vector"] + number_tokens(vector)
    flags = [f for f in ISA_WORDS if f in set(isa)]
    if flags:
        out += ["isa", *flags]
    if language >= 2 and hw.kind == "cpu":
        out += ["regs", *number_tokens(vector_registers(replace(hw, isa=tuple(isa))))]
    return out


def task_tokens(task: Task, *, language: int = 1, vector_bits: int = 0) -> list[str]:
    """The task part of a prompt: op kind, name words, every block's iterators and dtype; version
    2 adds the dtype's vector lanes (of ``vector_bits``, when given) and, for every buffer the
    block reads and then writes, which of its iterators index each dimension, in order."""
    out = ["task", task.op_kind or "unknown", "name", *_name_words(task.task_name or "main")]
    last_dtype = None
    for block, name, iters, dtype in _blocks(task.mod):
        out += ["block", *_name_words(name), "iters"]
        for kind, extent in iters:
            out += [_ITER_WORD.get(kind, "O"), *(number_tokens(extent) if extent is not None else ["var"])]
        out += ["dtype", dtype]
        if language >= 2:
            bits = dtype_bits(dtype)
            if vector_bits and bits and dtype != last_dtype:  # said again only where the dtype changes
                out += ["lanes", *number_tokens(max(1, vector_bits // bits))]
            last_dtype = dtype
            for word, dims in _accesses(block):
                out.append(word)
                if dims == [[i] for i in range(len(dims))] and dims:  # dimension d indexed by iterator d
                    out.append("identity")
                    continue
                for used in dims:
                    out += ["dim", *(w for i in used for w in number_tokens(i))]
    return out


def _accesses(block: Any) -> list[tuple[str, list[list[int]]]]:
    """``("read" | "write", [iterator positions per dimension])`` of every buffer ``block`` reads
    (the written ones aside: a reduction's update reads its output) and then writes."""
    from tvm.tirx.analysis import undefined_vars

    position = {iv.var: i for i, iv in enumerate(block.iter_vars)}

    def dims(region: Any) -> list[list[int]]:
        out = []
        for rng in region.region:
            used = {position[v] for v in undefined_vars(rng.min) if v in position}
            out.append(sorted(used))
        return out

    written = list(block.writes)
    reads = [r for r in block.reads if not any(r.source.same_as(w.source) for w in written)]
    return [("read", dims(r)) for r in reads] + [("write", dims(w)) for w in written]


def sketch_tokens(space: Space, sketch: Sketch, *, language: int = 1) -> list[str]:
    """The sketch part of a prompt: its instruction skeleton and the facts bounding each choice
    (version 2: and after which tile level a consumer or cache write is computed)."""
    out = _sketch_words(space, sketch)
    by_index = {c.inst_index: c for c in sketch.choices}
    levels = _compute_at_levels(sketch) if language >= 2 else {}
    for i, kind in enumerate(sketch.kinds):
        c = by_index.get(i)
        out.append(kind)
        if i in levels:
            out += ["level", *levels[i]]
        if kind == "Annotate":
            key = sketch.ann_keys.get(i, "")
            out.append(key.removeprefix("meta_schedule."))
            if c is not None:
                out += ["max", *number_tokens(c.max_parallel)]
        elif c is None:
            continue
        elif c.kind == "tile":
            out += ["n", *number_tokens(c.n), "extent", *_maybe(c.extent), "inner"]
            out += number_tokens(c.max_innermost) if c.max_innermost > 0 else ["any"]
        elif c.kind == "ptile":
            out += ["n", *number_tokens(c.n), "extent", *_maybe(c.extent), "part",
                    *number_tokens(c.partition_pos), "factor", *number_tokens(c.innerpart_factor)]
        elif c.kind == "pick":
            out += ["n", *number_tokens(len(c.candidates))]
            for v in c.candidates:
                out += number_tokens(v)
        elif c.kind == "at":
            out += ["locations", *_maybe(c.n_locations)]
    return out


def _compute_at_levels(sketch: Sketch) -> dict[int, list[str]]:
    """Position of every ``ReverseComputeAt``/``ComputeAt`` -> the words of the tile level its loop
    is: ``n`` when the loop is the n-th (outermost first) of the loops a ``Split`` (or
    ``GetLoops``) made, ``var`` when a sampled compute location chose it. Two sketches that fuse
    a consumer (or a cache write) under different tiles differ here and nowhere else."""
    insts = [x for x in sketch.trace.insts if x.kind.name != "EnterPostproc"]
    source = made_by(insts)
    out = {}
    for i, inst in enumerate(insts[: len(sketch.kinds)]):
        if inst.kind.name not in ("ReverseComputeAt", "ComputeAt") or len(inst.inputs) < 2:
            continue
        loop = inst.inputs[1]
        found = source(loop)
        out[i] = number_tokens(found[1] + 1) if found and insts[found[0]].kind.name in ("Split", "GetLoops", "Fuse") \
            else ["var"]
    return out


def prompt_tokens(space: Space, sketch: Sketch, language: int = DEFAULT_LANGUAGE) -> list[str]:
    """The whole prompt for one sketch in prompt grammar ``language`` (cached on the space)."""
    if language not in LANGUAGE_VERSIONS:
        raise ValueError(f"unknown language version {language}; known: {', '.join(map(str, LANGUAGE_VERSIONS))}")
    cache = space.__dict__.setdefault("_prompts", {})
    toks = cache.get((sketch.sketch_id, language))
    if toks is None:
        toks = [*_stem(space, language), *sketch_tokens(space, sketch, language=language), DECIDE]
        cache[(sketch.sketch_id, language)] = toks
    return list(toks)


def prompt_head(space: Space, sketch: Sketch, language: int = DEFAULT_LANGUAGE) -> list[str]:
    """The opening of ``sketch``'s prompt up to its count of sketches (``... sketch K of N``): what
    tells the sketches' prompts apart, read without the sketch's static facts (``Sketch.choices``,
    replays of ~2 ms), so that a sentence's sketch is found without describing every other one."""
    return [*_stem(space, language), *_sketch_words(space, sketch)]


def _sketch_words(space: Space, sketch: Sketch) -> list[str]:
    """``sketch K of N``: how every sketch part of a prompt opens (:func:`sketch_tokens`)."""
    return ["sketch", *number_tokens(sketch.sketch_id), "of", *number_tokens(len(space.sketches))]


def _stem(space: Space, language: int) -> list[str]:
    """What every sketch's prompt opens with: the version, the hardware and the task (cached on the space)."""
    stems = space.__dict__.setdefault("_prompt_stems", {})
    if language not in stems:
        version = ["language", *number_tokens(language)] if language >= 2 else []
        stems[language] = [BOS, *version, *hardware_tokens(space.hardware, language=language),
                           *task_tokens(space.task, language=language,
                                        vector_bits=space.hardware.vector_bits if space.hardware.kind == "cpu" else 0)]
    return stems[language]


def sentence_language(words: Sequence[str]) -> int:
    """The prompt grammar version a sentence (or its start) is written in: ``[BOS] language N``
    opens version N, anything else is version 1."""
    if len(words) > 2 and words[1] == "language" and str(words[2]).isdigit():
        return int(words[2])
    return 1


def prompt_languages(words: Sequence[str]) -> tuple[int, ...]:
    """The versions whose prompts a (partial) sentence may start: all until its second word says."""
    if len(words) < 2:
        return LANGUAGE_VERSIONS
    if words[1] == "language" and len(words) < 3:
        return tuple(v for v in LANGUAGE_VERSIONS if v >= 2)
    return (sentence_language(words),)


def _maybe(value: int | None) -> list[str]:
    return number_tokens(value) if value is not None else ["var"]


def _name_words(name: str) -> list[str]:
    """Words of an op/block name: split on "_" with counter digits dropped (matmul3 -> matmul)."""
    words = []
    for w in str(name).replace(".", "_").split("_"):
        stripped = w.rstrip("0123456789")
        if stripped or w:
            words.append(stripped or w)
    return words or ["main"]


def _blocks(mod: Any) -> list[tuple[Any, str, list[tuple[int, int | None]], str]]:
    """(SBlock, name, [(iter type, extent)], dtype) of every block but the root, in program order."""
    out: list = []
    for s in sblocks(mod):
        if s.name_hint == "root":
            continue
        iters = []
        for iv in s.iter_vars:
            ext = iv.dom.extent
            iters.append((int(iv.iter_type), int(ext.value) if hasattr(ext, "value") else None))
        dtype = str(s.writes[0].source.dtype) if len(s.writes) else "void"
        out.append((s, s.name_hint, iters, dtype))
    return out
