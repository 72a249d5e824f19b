"""lengen: length generalization of positional encodings, at laptop scale.

A small replication of Kazemnejad et al., "The Impact of Positional Encoding on Length
Generalization in Transformers" (NeurIPS 2023). Everything the notebooks call lives here,
in the order a reader meets it; each section's header names the notebook that explains it.

The teaching core, sections 1-8, is the model and how it is trained and scored; it holds no
experiment and names nothing defined after it (a test over the module's syntax tree keeps it so).
A chapter adds itself by registering: a task (`register_task`), a format that wraps tasks
(`register_task_wrapper`), an encoding (`register_encoding`), a position scheme
(`register_position_scheme`), model options (`register_model_options`), and the experiments it
trains (`register_experiment`). Section 9 holds what every chapter reads its runs with; then one
section per notebook, in the notebooks' order, each read top to bottom: its mechanism, its runs,
then what its notebook shows (tables, figures, verdicts), which nothing above calls. No definition
names anything defined in a later section:

    1. tasks                           (copy, reverse, their batches; a registry for more, with formats)
    2. positional encodings            (nope, sinusoidal, learned, rope, alibi, t5; a registry)
    3. attention                       (written out, the fused kernel where it is the same maths; hook points)
    4. blocks and the model            (DecoderOnlyLM)
    5. fast decoding                   (the caches, filled from one forward pass, then one token at a time)
    6. exact match                     (teacher-forced, per length)
    7. training one run                (RunConfig, train_run, checkpoints)
    8. the sweep                       (resumable, parallel, any concurrent.futures executor; experiments)
    9. what every chapter shares       (caches, compute in copy runs, records -> frames, the paper's statistics)
   10. verification                    (01, 02: the encoder-decoder Transformer, PyTorch references, checks)
   11. the grid                        (03, 04: reciprocal ranks, bootstraps, the ablation, training's speed)
   12. attention inspection            (05: pointer heads, JSD similarity to NoPE, the explorer)
   13. the decoding benchmark          (06: the caches against recomputing every step)
   14. the paper's other tasks         (07: eight tasks, the ranking across them two ways)
   15. how NoPE knows where it is      (08: the theorems as hand-set weights, probes)
   16. what moves the cliff            (09: failure anatomy, attention scaling, training interventions)
   17. scratchpads                     (10: a task's steps before its answer, scored on the final answer)
   18. addition that generalizes       (11: digit places as positions, Cho et al. and McLeish et al.)
   19. one recipe                      (12: aligned positions and a window, from copy to parity)
   20. command line                    (python -m lengen_helpers train|sweep|bench-train|bench-kv)
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import functools
import hashlib
import inspect
import itertools
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter
from torch import Tensor, nn

__version__ = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parent
RESULTS_DIR = REPO_ROOT / "results"
FIGURES_DIR = REPO_ROOT / "figures"


def _unknown(kind: str, name: str, valid: Iterable[str]) -> ValueError:
    return ValueError(f"unknown {kind} {name!r}; valid choices: {', '.join(sorted(valid))}")


def save_figure(fig: Any, path: Path | None, dpi: int = 110) -> None:
    """Write a figure to `path`, if one is given (every figure of the study is saved here)."""
    if path is not None:
        fig.savefig(path, dpi=dpi)


def show_source(obj: Any) -> Any:
    """The source of one of this module's functions or classes, shown as code in a notebook, so a
    reader sees the piece beside the prose that explains it."""
    from IPython.display import Markdown  # a notebook's dependency, not the training workers'

    return Markdown(f"```python\n{inspect.getsource(obj)}```")


# Config fields state their valid range where they are declared (`ranged`), and every config checks
# its fields when it is made (`check_ranges`): a bad setting fails before any compute is spent.


def ranged(
    default: Any, low: float | None = None, high: float | None = None, *, above: bool = False, below: bool = False
) -> Any:
    """A dataclass field whose value must lie in [low, high]; `above` / `below` make an end open."""
    return field(default=default, metadata={"range": (low, high, above, below)})


def when_set(f: Any) -> Any:
    """Mark `f` (a dataclass field) as named in a run's hash only where it is set to other than its
    default (`config_hash`): a setting added to a config leaves the names of the runs that never
    set it as they were."""
    f.metadata = types.MappingProxyType({**f.metadata, "hash": "when set"})
    return f


def _describe_range(kind: str, low: float | None, high: float | None, above: bool, below: bool) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if above else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if below else '<='} {high:g}")
    what = {"int": "an integer", "float": "a number", "bool": "True or False", "str": "a name"}[kind]
    return what + (" " + " and ".join(parts) if parts else "")


def check_ranges(config: Any) -> None:
    """Raise a ValueError naming the field, its value and its valid range for the first field of
    `config` (a dataclass) whose type or value is out of range."""
    for f in dataclasses.fields(config):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        if kind not in ("int", "float", "bool", "str"):
            continue
        value = getattr(config, f.name)
        low, high, above, below = f.metadata.get("range", (None, None, False, False))
        if kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "str":
            ok = isinstance(value, str)
        else:
            numeric = (int,) if kind == "int" else (int, float)
            ok = isinstance(value, numeric) and not isinstance(value, bool) and math.isfinite(value)
            if ok and low is not None:
                ok = value > low if above else value >= low
            if ok and high is not None:
                ok = value < high if below else value <= high
        if not ok:
            raise ValueError(
                f"{type(config).__name__}.{f.name}={value!r} is out of range; valid: "
                f"{_describe_range(kind, low, high, above, below)}"
            )


# ---------------------------------------------------------------------------------------------
# 1. Tasks (notebook 01)
# ---------------------------------------------------------------------------------------------
PAD, BOS, SEP, EOS = 0, 1, 2, 3  # the special tokens every task shares
SPECIAL_TOKENS = ("<pad>", "<s>", "<sep>", "</s>")
N_SPECIAL = len(SPECIAL_TOKENS)
N_SYMBOLS = 20
VOCAB_SIZE = N_SPECIAL + N_SYMBOLS  # copy's and reverse's: the special tokens and 20 symbols


class Task:
    """A sequence-to-sequence task: for a size n, a prompt and its answer, as token ids.

    Subclass, set `name`, and implement `target` (the answer to n random symbols, the default
    prompt) or override `sample` (any prompt and answer); register with `@register_task`. A task
    has its own `symbols` after the shared special tokens (token ids N_SPECIAL, N_SPECIAL + 1, ..)
    and says how long its prompt and answer are for a size n: every sequence of one size has the
    same lengths. The model reads [BOS, prompt, SEP, answer, EOS] and is scored on the answer and
    EOS.
    """

    name: str = ""
    symbols: tuple[str, ...] = tuple(f"s{i}" for i in range(N_SYMBOLS))
    min_size: int = 1
    max_size: int | None = None  # the largest size the task can draw, if it has one
    train_max_size: int = 16  # L: the study trains on sizes up to L and tests on L+1 to 2L
    # The task's formats: option -> its valid values, the first the default. A run names the ones
    # it changes (`RunConfig.task_options`); with every option at its default a task is the one
    # the study first trained, so its runs keep their records.
    options: dict[str, tuple[str, ...]] = {}
    added_options: frozenset[str] = frozenset()  # options given from outside (`add_task_option`)

    def __init__(self, **options: str) -> None:
        for key, value in options.items():
            if key not in self.options:
                valid = ", ".join(sorted(self.options)) or "none"
                raise ValueError(f"task {self.name!r} has no option {key!r}; its options: {valid}")
            if value not in self.options[key]:
                valid = ", ".join(map(repr, self.options[key]))
                raise ValueError(f"task {self.name!r}: option {key}={value!r} is not valid; valid values: {valid}")
        self.format = {key: options.get(key, values[0]) for key, values in self.options.items()}

    @property
    def key(self) -> str:
        """The task's name, with each option that differs from its default (`addition.paper`;
        an option added from outside is written name-value, `option-value`): names its runs."""
        named = self.added_options
        changed = [f"{k}-{v}" if k in named else v for k, v in self.format.items() if v != self.options[k][0]]
        return ".".join([self.name, *changed])

    @property
    def prompt_key(self) -> str:
        """The key that seeds the task's evaluation prompts: `key`, less the options that change
        only how the answer is written, so runs that differ only there are tested on the same prompts."""
        return self.key

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + len(self.symbols)

    def prompt_length(self, n: int) -> int:
        return n

    def answer_length(self, n: int) -> int:
        return n

    def sequence_length(self, n: int) -> int:
        """Tokens in [BOS, prompt, SEP, answer, EOS] at size n."""
        return self.prompt_length(n) + self.answer_length(n) + 3

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`batch_size` prompts of size n and their answers: (B, prompt_length(n)), (B, answer_length(n))."""
        x = self.draw_prompts(n, batch_size, generator)
        return x, self.target(x)

    def draw_prompts(self, n: int, batch_size: int, generator: torch.Generator) -> Tensor:
        return torch.randint(N_SPECIAL, self.vocab_size, (batch_size, n), generator=generator)

    def target(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"task {self.name!r} implements neither `target` nor `sample`")

    def source_positions(self, n: int) -> list[int] | None:
        """For each answer token y_i, the index (1..prompt_length) of the prompt token it
        reproduces, if the task has one (pointer-head inspection needs it)."""
        return None

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Token ids -> their names (special tokens, then this task's symbols)."""
        names = SPECIAL_TOKENS + tuple(self.symbols)
        return [names[int(i)] for i in ids]

    def encode(self, names: Iterable[str]) -> Tensor:
        """Symbol names -> token ids."""
        index = {name: i for i, name in enumerate(SPECIAL_TOKENS + tuple(self.symbols))}
        return torch.tensor([index[name] for name in names])

    def has_size(self, n: int) -> bool:
        """Whether the task can draw size n."""
        return self.min_size <= n and (self.max_size is None or n <= self.max_size)

    def sizes(self, low: int, high: int) -> list[int]:
        """The sizes from low to high that the task can draw."""
        return [n for n in range(low, high + 1) if self.has_size(n)]

    def size_weights(self, sizes: Sequence[int]) -> Tensor | None:
        """How often training draws each of `sizes`, relative to the others; None: uniformly."""
        return None

    def score_run(
        self, model: DecoderOnlyLM, lengths: Sequence[int], n_per_length: int, seed: int
    ) -> tuple[dict[int, float], dict[str, Any]] | None:
        """How a trained run is scored, for a task that scores its own way: exact match per size
        and any further entries for its record. None (the default): by greedy exact match of the
        whole answer (`exact_match_by_length`). A task whose answer follows steps of its own
        overrides it, to score the answer apart from the steps."""
        return None

    def check_size(self, n: int) -> None:
        """Raise a ValueError naming the valid sizes if the task cannot draw size n."""
        if not self.has_size(n):
            top = "" if self.max_size is None else f" to {self.max_size}"
            gaps = "" if n < self.min_size or (self.max_size and n > self.max_size) else " (not every size between)"
            raise ValueError(f"task {self.name!r} has sizes {self.min_size}{top or ' and up'}{gaps}; got size {n}")


TASKS: dict[str, type[Task]] = {}
# Formats that change what a task is, not only how it writes itself (a chapter registers one,
# such as steps written before the answer): each takes the task `get_task` built and returns it,
# or a task that wraps it. Applied in the order registered.
TASK_WRAPPERS: list[Callable[[Task], Task]] = []


def register_task(cls: type[Task]) -> type[Task]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a `name` to be registered")
    TASKS[cls.name] = cls
    return cls


def add_task_option(task: str, name: str, values: Sequence[str]) -> None:
    """Give the registered `task` one more option (`values`: its valid values, the first the
    default), as a format added to tasks from outside them. In a task's key it is written
    name-value (`name-value`): its values, chosen apart from the task's own, could be mistaken
    for them."""
    if task not in TASKS:
        raise _unknown("task", task, TASKS)
    cls = TASKS[task]
    if name in cls.options:
        raise ValueError(f"task {task!r} has an option {name!r} already")
    cls.options = {**cls.options, name: tuple(values)}
    cls.added_options = cls.added_options | {name}


def register_task_wrapper(wrap: Callable[[Task], Task]) -> Callable[[Task], Task]:
    """Add a format that wraps tasks (`TASK_WRAPPERS`); returns `wrap`, so it can decorate."""
    TASK_WRAPPERS.append(wrap)
    return wrap


@register_task
class Copy(Task):
    name = "copy"

    def target(self, x: Tensor) -> Tensor:
        return x.clone()

    def source_positions(self, n: int) -> list[int]:
        return list(range(1, n + 1))


@register_task
class Reverse(Task):
    name = "reverse"

    def target(self, x: Tensor) -> Tensor:
        return x.flip(-1)

    def source_positions(self, n: int) -> list[int]:
        return list(range(n, 0, -1))


def _compact(t: Tensor, keep: Tensor) -> Tensor:
    """Each row's kept entries moved to its front, in order, and PAD after them."""
    order = (~keep).to(torch.uint8).argsort(dim=1, stable=True)
    return torch.where(keep.gather(1, order), t.gather(1, order), PAD)


def get_task(name: str, options: dict[str, str] | None = None) -> Task:
    """The registered task `name`, with its format `options` (`Task.options`; defaults if None)."""
    if name not in TASKS:
        raise _unknown("task", name, TASKS)
    task = TASKS[name](**(options or {}))
    for wrap in TASK_WRAPPERS:
        task = wrap(task)
    return task


@dataclass
class Batch:
    """Token rows [BOS, prompt, SEP, answer, EOS] plus what the model needs to learn from them.

    `positions` restart at 0 for every sequence and `segments` number the sequences in a row
    (-1 for padding), so several sequences can share a row (packing) without seeing each other.
    `loss_mask[b, t]` is True where tokens[b, t + 1] is a scored answer token or EOS.
    """

    tokens: Tensor  # (B, T) long
    positions: Tensor  # (B, T) long
    segments: Tensor  # (B, T) long
    loss_mask: Tensor  # (B, T - 1) bool

    @property
    def inputs(self) -> Tensor:
        return self.tokens[:, :-1]

    @property
    def targets(self) -> Tensor:
        return self.tokens[:, 1:]


def make_sequences(task: Task, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """`batch_size` sequences of size n: tokens (B, T) = [BOS, prompt, SEP, answer, EOS], and which
    tokens are scored targets, (B, T) bool. An answer shorter than `answer_length(n)` (a task whose
    answers vary within a size) ends in PAD: EOS then follows its last real token, and the PADs
    after it are neither scored nor attended by anything scored. A prompt shorter than
    `prompt_length(n)` ends in PAD too: SEP then follows its last real token, and the sequence
    ends in PAD."""
    task.check_size(n)
    prompt, answer = task.sample(n, batch_size, generator)
    P, A = task.prompt_length(n), task.answer_length(n)
    if prompt.shape != (batch_size, P) or answer.shape != (batch_size, A):
        raise ValueError(
            f"task {task.name!r} at size {n} must give prompts ({batch_size}, {P}) and answers "
            f"({batch_size}, {A}); got {tuple(prompt.shape)} and {tuple(answer.shape)}"
        )
    col = lambda v: torch.full((batch_size, 1), v, dtype=torch.long)  # noqa: E731
    tokens = torch.cat([col(BOS), prompt, col(SEP), answer, col(EOS)], dim=1)
    scored = torch.zeros(batch_size, P + A + 3, dtype=torch.bool)
    scored[:, P + 2 :] = True  # the answer and EOS
    real = answer != PAD
    if not real.all():  # answers of several lengths: EOS after each one's last real token
        if (real[:, 1:] & ~real[:, :-1]).any():
            raise ValueError(f"task {task.name!r} at size {n}: PAD may only end an answer, not interrupt it")
        eos = P + 2 + real.sum(dim=1, keepdim=True)  # (B, 1): where EOS goes
        column = torch.arange(P + A + 3)
        tokens = torch.where(column == eos, EOS, tokens)
        tokens = torch.where(column > eos, PAD, tokens)
        scored &= column <= eos
    shown = prompt != PAD
    if not shown.all():  # prompts of several lengths: each sequence moves up to its prompt's end
        if (shown[:, 1:] & ~shown[:, :-1]).any():
            raise ValueError(f"task {task.name!r} at size {n}: PAD may only end a prompt, not interrupt it")
        keep = tokens != PAD
        order = (~keep).to(torch.uint8).argsort(dim=1, stable=True)
        tokens, scored = _compact(tokens, keep), scored.gather(1, order) & keep.gather(1, order)
    return tokens, scored


def single_length_batch(task: Task, n: int, batch_size: int, generator: torch.Generator) -> Batch:
    """A batch in which every sequence has size n (no padding)."""
    tokens, scored = make_sequences(task, n, batch_size, generator)
    B, T = tokens.shape
    positions = torch.arange(T).expand(B, T)
    return Batch(tokens, positions, torch.zeros(B, T, dtype=torch.long), scored[:, 1:])


def _draw_groups(lengths: Sequence[int]) -> dict[int, list[int]]:
    """Indices into `lengths` grouped by value, in increasing length (one task call per group)."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(int(n), []).append(i)
    return dict(sorted(groups.items()))


def _draw_by_length(task: Task, lengths: Sequence[int], generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """One sequence per entry of `lengths` (in order), drawn in one task call per distinct size:
    (tokens (T,), scored targets (T,))."""
    out: list[tuple[Tensor, Tensor]] = [None] * len(lengths)  # type: ignore[list-item]
    for n, idx in _draw_groups(lengths).items():
        tokens, scored = make_sequences(task, n, len(idx), generator)
        for row, row_scored, i in zip(tokens, scored, idx):
            out[i] = (row, row_scored)
    return out


def first_fit_decreasing(sizes: Sequence[int], capacity: int) -> list[tuple[int, int, int]]:
    """Place items into bins of `capacity`, longest first, each into the first bin with room.
    Returns, per item, (bin, offset in the bin, index of the item within its bin)."""
    place: list[tuple[int, int, int]] = [(0, 0, 0)] * len(sizes)
    used: list[int] = []  # filled length of each bin
    count: list[int] = []  # items in each bin
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        r = next((r for r, u in enumerate(used) if u + sizes[i] <= capacity), len(used))
        if r == len(used):
            used.append(0)
            count.append(0)
        place[i] = (r, used[r], count[r])
        used[r] += sizes[i]
        count[r] += 1
    return place


def packed_training_batch(task: Task, lengths: Sequence[int], generator: torch.Generator) -> Batch:
    """One training batch of len(lengths) sequences, packed into rows with little padding.

    Sequences are placed first-fit-decreasing into rows no longer than the longest sequence;
    attention is masked to each sequence and positions restart per sequence, so the loss (a
    mean over all target tokens) equals that of the same sequences padded one per row. The
    rows are filled by one scatter per tensor, not a copy per sequence.
    """
    lengths = [int(n) for n in lengths]
    groups = _draw_groups(lengths)
    drawn = {n: make_sequences(task, n, len(idx), generator) for n, idx in groups.items()}  # (tokens, scored)
    size = [drawn[n][0].shape[1] for n in lengths]
    capacity = max(size)
    place = first_fit_decreasing(size, capacity)
    rows = 1 + max(r for r, _, _ in place)
    # per sequence, in the order the groups were drawn: where it starts, how long, its segment number
    order = [i for idx in groups.values() for i in idx]
    start = torch.tensor([place[i][0] * capacity + place[i][1] for i in order])
    length = torch.tensor([size[i] for i in order])
    segment = torch.tensor([place[i][2] for i in order])
    # per token: which sequence it belongs to and its offset in it (= its position)
    seq = torch.repeat_interleave(torch.arange(len(order)), length)
    offset = torch.arange(len(seq)) - (torch.cumsum(length, 0) - length)[seq]
    dest = start[seq] + offset
    src = torch.cat([drawn[n][0].flatten() for n in groups])
    scored = torch.cat([drawn[n][1].flatten() for n in groups])
    tokens = torch.full((rows * capacity,), PAD, dtype=torch.long).index_put_((dest,), src)
    positions = torch.zeros(rows * capacity, dtype=torch.long).index_put_((dest,), offset)
    segments = torch.full((rows * capacity,), -1, dtype=torch.long).index_put_((dest,), segment[seq])
    # a scored token is predicted from the token before it, always in its own sequence (it is never a BOS)
    is_target = torch.zeros(rows * capacity, dtype=torch.bool).index_put_((dest,), scored)
    shape = (rows, capacity)
    return Batch(tokens.view(shape), positions.view(shape), segments.view(shape), is_target.view(shape)[:, 1:])


def padded_training_batch(task: Task, lengths: Sequence[int], generator: torch.Generator) -> Batch:
    """The same sequences as `packed_training_batch`, one per row, right-padded (the naive way)."""
    seqs = _draw_by_length(task, [int(n) for n in lengths], generator)
    T = max(len(t) for t, _ in seqs)
    B = len(seqs)
    tokens = torch.full((B, T), PAD, dtype=torch.long)
    segments = torch.full((B, T), -1, dtype=torch.long)
    is_target = torch.zeros(B, T, dtype=torch.bool)
    for b, (t, scored) in enumerate(seqs):
        L = len(t)
        tokens[b, :L] = t
        segments[b, :L] = 0
        is_target[b, :L] = scored
    positions = torch.arange(T).expand(B, T)
    return Batch(tokens, positions, segments, is_target[:, 1:])


@dataclass(frozen=True)
class PositionScheme:
    """A way of giving tokens positions other than 0, 1, .. in their sequence (a chapter registers
    one, with the model settings that turn it on: `ModelOptions`).

    `active(config)`: whether a model config uses it. `apply(config, batch, offsets, task,
    generator)`: the batch with new positions (`offsets`: each token's index in its sequence, the
    positions before any scheme). `check_room(config, task, n)`: raise a ValueError if size n
    cannot be placed; given, it replaces the learned table's check on sequence length (the
    positions no longer grow with the length). A model that uses any scheme reads positions of
    its own, so greedy decoding needs them passed and the caches do not decode it."""

    name: str
    active: Callable[[ModelConfig], bool]
    apply: Callable[[ModelConfig, Batch, Tensor, Task, torch.Generator], Batch]
    check_room: Callable[[ModelConfig, Task, int], None] | None = None


POSITION_SCHEMES: list[PositionScheme] = []  # applied in the order registered


def register_position_scheme(scheme: PositionScheme) -> PositionScheme:
    if any(s.name == scheme.name for s in POSITION_SCHEMES):
        raise ValueError(f"a position scheme named {scheme.name!r} is registered already")
    POSITION_SCHEMES.append(scheme)
    return scheme


def active_schemes(config: ModelConfig) -> list[PositionScheme]:
    """The registered position schemes a model config uses, in the order they apply."""
    return [s for s in POSITION_SCHEMES if s.active(config)]


def model_positions(config: ModelConfig, batch: Batch, generator: torch.Generator, task: Task) -> Batch:
    """The batch with the positions the model reads: each active `PositionScheme` in turn, else
    as they are."""
    out, offsets = batch, batch.positions.expand_as(batch.segments)
    for scheme in active_schemes(config):
        out = scheme.apply(config, out, offsets, task, generator)
    return out


def task_of_key(key: str) -> Task:
    """The task a `Task.key` names ("addition.paper": addition in its paper format)."""
    name, *values = key.split(".")
    task = get_task(name)
    options = {}
    for value in values:
        named = value.split("-", 1)
        if named[0] in task.added_options and len(named) == 2:
            options[named[0]] = named[1]
            continue
        option = next((k for k, valid in task.options.items() if value in valid[1:]), None)
        if option is None:
            raise ValueError(f"task key {key!r}: {value!r} is no option value of task {name!r}")
        options[option] = value
    return get_task(name, options)


# ---------------------------------------------------------------------------------------------
# 2. Positional encodings (notebook 01)
# ---------------------------------------------------------------------------------------------
# Each encoding overrides one of three hooks: add to the token embeddings, rotate queries and
# keys, or add a bias to the attention logits. `positions` are integer tensors (.., T).
class PositionalEncoding(nn.Module):
    """Subclass, set `name`, override one hook, and register with `@register_encoding`: the new
    encoding then joins the grid, the figures and the explorer with no other edit."""

    name: str = ""
    label: str = ""  # how tables and figures name it (default: `name`)
    color: str = ""  # its colour in figures (default: one picked by its place in the registry)
    relative: bool = False  # True if `bias` depends on q_pos - k_pos only (lets packed rows share it)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        """Raise a ValueError if the model settings `cfg` do not suit the encoding."""

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Token embeddings (B, T, d) -> embeddings with absolute position added."""
        return x

    def rotary(self, positions: Tensor) -> Callable[[Tensor], Tensor] | None:
        """A function that rotates queries and keys (B, H, T, dh) at `positions`, or None."""
        return None

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Additive attention bias (B or 1, H, Tq, Tk), shared by every layer, or None."""
        return None

    @property
    def max_length(self) -> int | None:
        """The most positions the encoding can represent (None: any number)."""
        return None

    @property
    def rotates_keys(self) -> bool:
        """True if `rotary` is overridden: keys then depend on position after their projection, so
        decoding must cache the keys themselves (KVCache), not the inputs they come from."""
        return type(self).rotary is not PositionalEncoding.rotary


ENCODINGS: dict[str, type[PositionalEncoding]] = {}  # name -> class, in the order registered


def register_encoding(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a `name` to be registered")
    ENCODINGS[cls.name] = cls
    return cls


def encoding_names() -> tuple[str, ...]:
    """Every registered encoding, in registry order: the study's six first, then any added."""
    return tuple(ENCODINGS)


def encoding_title(encoding: str) -> str:
    """An encoding's name in tables and figures (its class's `label`); other names pass through."""
    cls = ENCODINGS.get(encoding)
    return (cls.label or cls.name) if cls is not None else encoding


# Layers and heads are drawn in the palette's colours that no encoding of the study takes, so that
# no figure shows an encoding's colour for something else.
ORDINAL_COLORS = ("tab:pink", "tab:gray", "tab:olive", "tab:cyan", "black")


def ordinal_color(i: int) -> str:
    """The colour of layer or head i (0-based) in figures that draw one line per layer or head."""
    return ORDINAL_COLORS[i % len(ORDINAL_COLORS)]


def encoding_color(encoding: str) -> str | None:
    """An encoding's colour in figures: its class's `color`, else the palette entry of its place in
    the registry; None for a name that is not an encoding (matplotlib then picks one)."""
    cls = ENCODINGS.get(encoding)
    if cls is None:
        return None
    return cls.color or f"C{list(ENCODINGS).index(encoding) % 10}"


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Query position minus key position, (.., Tq, Tk), with a leading batch axis."""
    if q_pos.dim() == 1:
        q_pos, k_pos = q_pos[None], k_pos[None]
    return q_pos[:, :, None] - k_pos[:, None, :]


@register_encoding
class NoPE(PositionalEncoding):
    """No positional information at all: only the causal mask tells tokens apart."""

    name, label, color = "nope", "NoPE", "C0"


def sinusoidal_table(positions: Tensor, d: int, base: float = 10000.0) -> Tensor:
    """Vaswani et al.'s fixed encoding, sin half then cos half: (.., T) -> (.., T, d)."""
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = positions.to(torch.float32)[..., None] * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


@register_encoding
class Sinusoidal(PositionalEncoding):
    """Vaswani et al.'s fixed table of sines and cosines, added to the token embeddings."""

    name, label, color = "sinusoidal", "Sinusoidal", "C1"

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + sinusoidal_table(positions, x.shape[-1]).to(x.dtype)


@register_encoding
class Learned(PositionalEncoding):
    """A trained table of absolute positions; rows past the training length stay untrained."""

    name, label, color = "learned", "Learned", "C5"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.table = nn.Embedding(cfg.max_positions, cfg.d_model)

    @property
    def max_length(self) -> int:
        return self.cfg.max_positions

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        top = int(positions.max()) if positions.numel() else 0
        if top >= self.cfg.max_positions:
            raise ValueError(
                f"position {top} is past the learned table's {self.cfg.max_positions} rows "
                f"(max_positions={self.cfg.max_positions}); build the model with a larger max_positions"
            )
        return x + self.table(positions)


@register_encoding
class Rotary(PositionalEncoding):
    """RoPE (GPT-J style, interleaved pairs) on the first `rope_fraction` of each head's dims."""

    name, label, color = "rope", "RoPE", "C2"

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        rotary_dims(cfg)

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.rot_dims = rotary_dims(cfg)
        inv_freq = cfg.rope_base ** (-torch.arange(0, self.rot_dims, 2, dtype=torch.float32) / self.rot_dims)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotary(self, positions: Tensor) -> Callable[[Tensor], Tensor]:
        angles = positions.to(torch.float32)[..., None] * self.inv_freq  # (.., T, rot/2)
        if angles.dim() == 3:
            angles = angles[:, None]  # (B, 1, T, rot/2): broadcast over heads
        turn = torch.polar(torch.ones_like(angles), angles)  # e^(i * angle)
        r = self.rot_dims

        def rotate(t: Tensor) -> Tensor:
            # pairs (t0, t1), (t2, t3), .. as complex numbers, each turned by its angle
            pairs = torch.view_as_complex(t[..., :r].float().reshape(*t.shape[:-1], r // 2, 2))
            rotated = torch.view_as_real(pairs * turn).flatten(-2).to(t.dtype)
            return rotated if r == t.shape[-1] else torch.cat([rotated, t[..., r:]], dim=-1)

        return rotate


def rotary_dims(cfg: ModelConfig) -> int:
    head_dim = cfg.d_model // cfg.n_heads
    dims = round(head_dim * cfg.rope_fraction)
    if not 0.0 < cfg.rope_fraction <= 1.0 or dims == 0 or dims % 2:
        raise ValueError(
            f"rope_fraction={cfg.rope_fraction} rotates {head_dim * cfg.rope_fraction:g} of each head's "
            f"{head_dim} dims; rotary needs a positive even number (e.g. 0.25 -> {round(head_dim * 0.25)})"
        )
    return dims


def alibi_slopes(n_heads: int) -> Tensor:
    """Press et al.'s head slopes: geometric from 2^(-8/n); for n not a power of two, the slopes
    of the nearest lower power of two, then every other slope of the next power of two."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads & (n_heads - 1) == 0:
        return torch.tensor(power_of_two(n_heads))
    lower = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(power_of_two(lower) + extra)


@register_encoding
class ALiBi(PositionalEncoding):
    """A fixed bias -slope * distance on the attention logits, one geometric slope per head."""

    name, label, color = "alibi", "ALiBi", "C3"
    relative = True

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = relative_distance(q_pos, k_pos).to(torch.float32)  # (B, Tq, Tk)
        return -self.slopes[None, :, None, None] * self.distance(distance)[:, None]

    def distance(self, distance: Tensor) -> Tensor:
        """What the penalty grows with: q - k (a key is never later than its query, causally)."""
        return distance


def t5_bucket(distance: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's unidirectional bucket of a distance q - k >= 0: half the buckets exact, the rest
    log-spaced up to max_distance; anything farther shares the last bucket."""
    distance = distance.clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    scaled = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return torch.where(is_small, distance, large)


@register_encoding
class T5Bias(PositionalEncoding):
    """A learned scalar per (distance bucket, head), one table shared by all layers."""

    name, label, color = "t5", "T5 bias", "C4"
    relative = True

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.table = nn.Embedding(cfg.t5_num_buckets, cfg.n_heads)

    exact_share = 2  # 1/exact_share of the buckets are exact distances

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        exact = cfg.t5_num_buckets // cls.exact_share
        if cfg.t5_max_distance <= exact:
            raise ValueError(
                f"t5_max_distance={cfg.t5_max_distance} must exceed {exact}, the distances the exact "
                f"buckets cover (1/{cls.exact_share} of t5_num_buckets={cfg.t5_num_buckets})"
            )

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.table(self.buckets(relative_distance(q_pos, k_pos))).permute(0, 3, 1, 2)  # (B, H, Tq, Tk)

    def buckets(self, distance: Tensor) -> Tensor:
        """Each distance q - k's bucket (a key later than its query shares distance 0's)."""
        return t5_bucket(distance, self.cfg.t5_num_buckets, self.cfg.t5_max_distance)


# ---------------------------------------------------------------------------------------------
# 3. Attention (notebooks 01 and 02)
# ---------------------------------------------------------------------------------------------
class HookPoint(nn.Module):
    """An identity that names a tensor inside the model, so code outside it can read or change
    that tensor (`register_forward_hook`, or the `hooked` context manager) without the model
    knowing: decoding fills its cache this way, and inference-time interventions attach so
    (a chapter scales the attention scores through one). TransformerLens' hook points, in miniature."""

    def forward(self, x: Tensor) -> Tensor:
        return x

    def __call__(self, x: Tensor) -> Tensor:  # with nothing attached, skip the module-call machinery
        return super().__call__(x) if self._forward_hooks else x

    @property
    def active(self) -> bool:
        return bool(self._forward_hooks)


@contextlib.contextmanager
def hooked(hooks: Iterable[tuple[HookPoint, Callable[[Tensor], Tensor | None]]]):
    """Attach `fn` to each hook point while the block runs: fn(tensor) returns the tensor to use
    in its place, or None to leave it (and only read it)."""
    handles = [point.register_forward_hook(lambda _m, _a, out, fn=fn: fn(out)) for point, fn in hooks]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    hook_scores: HookPoint | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(dh) + bias, masked) v, written out. Returns (output, weights).

    q (.., Tq, dh), k and v (.., Tk, dh); `mask` is boolean, True where attention is allowed,
    broadcastable to (.., Tq, Tk); `bias` is added to the logits before masking; `hook_scores`
    sees the content scores q k^T / sqrt(dh) before the bias.
    """
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # scaling q is cheaper than the scores
    if hook_scores is not None:
        scores = hook_scores(scores)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    bias: Tensor | None,
    dropout: float = 0.0,
    need_weights: bool = False,
    hook_scores: HookPoint | None = None,
) -> tuple[Tensor, Tensor | None]:
    """The attention the model runs: the written-out one above where its weights or scores are
    wanted (`need_weights`, an active `hook_scores`), for a single query (a decoding step:
    PyTorch's fused CPU kernel is tiled for long query blocks and is slower there) and for a
    trained bias (T5, which PyTorch sends to its own unfused path anyway); otherwise PyTorch's
    fused kernel, the same maths (checked in notebook 02). Returns (output, weights or None)."""
    hooked_scores = hook_scores is not None and hook_scores.active
    if need_weights or hooked_scores or q.shape[-2] == 1 or (bias is not None and bias.requires_grad):
        out, weights = scaled_dot_product_attention(q, k, v, mask, bias, hook_scores if hooked_scores else None)
        return out, weights if need_weights else None
    attn_mask = mask
    if bias is not None:
        attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout), None


def causal_mask(tq: int, tk: int | None = None, device: torch.device | None = None) -> Tensor:
    """(tq, tk) boolean: query i (the last tq of tk positions) sees keys up to itself."""
    tk = tq if tk is None else tk
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril(diagonal=tk - tq)


def padding_mask(tokens: Tensor) -> Tensor:
    """(B, 1, 1, T) boolean: True at real tokens, so no query attends to PAD keys."""
    return (tokens != PAD)[:, None, None, :]


class MultiHeadAttention(nn.Module):
    """Multi-head attention: one stacked query/key/value map and an output map; self- or
    cross-attention. Hook points name its input, its keys and values (after any rotation) and its
    content scores, for code outside the model (section 5's caches, inference-time interventions)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)  # query, key and value maps stacked
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.hook_input, self.hook_keys, self.hook_values, self.hook_scores = (HookPoint() for _ in range(4))

    def _split(self, x: Tensor) -> Tensor:  # (B, T, d) -> (B, H, T, dh)
        B, T, _ = x.shape
        return x.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        rotate: Callable[[Tensor], Tensor] | None = None,
        need_weights: bool = False,
        memory: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """`mask` True = may attend; `bias` is added to the logits; `rotate` turns queries and keys
        (RoPE); `memory` makes it cross-attention (keys and values from the memory)."""
        x = self.hook_input(x)
        if memory is None:  # one matmul for all three maps
            q, k, v = self.in_proj(x).chunk(3, dim=-1)
        else:
            w, b, d = self.in_proj.weight, self.in_proj.bias, x.shape[-1]
            q = F.linear(x, w[:d], b[:d])
            k, v = F.linear(memory, w[d:], b[d:]).chunk(2, dim=-1)
        q, k, v = self._split(q), self._split(k), self._split(v)
        if rotate is not None:
            q, k = rotate(q), rotate(k)
        k, v = self.hook_keys(k), self.hook_values(v)
        dropout = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, bias, dropout, need_weights, self.hook_scores)
        B, H, T, dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * dh)), weights


# ---------------------------------------------------------------------------------------------
# 4. Blocks and the decoder-only model (notebook 01)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelOptions:
    """Settings a chapter adds to the model, registered with `register_model_options`.

    `settings`: a dataclass whose fields are the settings, each with its default (and range, by
    `ranged`); a setting at its default changes nothing, so it is left out of a run's hash.
    `check(config)`: raise a ValueError for a combination the chapter does not support.
    `encoding(config)`: the encoding class a config uses instead of its registered one (a variant
    with the same name and weights), or None. `attention_mask(config)`: None, or a function of the
    positions (B, T) or (T,) giving the keys each query may see ((B, 1, T, T) or (T, T) boolean),
    on top of the causal mask; the caches do not decode such a model. `build(model)`: called last
    when a model is built, to change it from outside (its initial weights, its embedding scale)."""

    settings: type
    check: Callable[[ModelConfig], None] | None = None
    encoding: Callable[[ModelConfig], type[PositionalEncoding] | None] | None = None
    attention_mask: Callable[[ModelConfig], Callable[[Tensor], Tensor] | None] | None = None
    build: Callable[[nn.Module], None] | None = None


MODEL_OPTIONS: list[ModelOptions] = []


def register_model_options(options: ModelOptions) -> ModelOptions:
    taken = set(model_option_defaults()) | {f.name for f in dataclasses.fields(ModelConfig)}
    clash = [f.name for f in dataclasses.fields(options.settings) if f.name in taken]
    if clash:
        raise ValueError(f"model setting {', '.join(map(repr, clash))} is registered already")
    MODEL_OPTIONS.append(options)
    return options


def model_option_defaults() -> dict[str, Any]:
    """Every registered model option, with its default."""
    return {f.name: f.default for o in MODEL_OPTIONS for f in dataclasses.fields(o.settings)}


def encoding_class(cfg: ModelConfig) -> type[PositionalEncoding]:
    """The class a config's encoding is built from: its registered one, or the variant a
    registered model option gives (`ModelOptions.encoding`)."""
    if cfg.encoding not in ENCODINGS:
        raise _unknown("positional encoding", cfg.encoding, ENCODINGS)
    variants = [v for o in MODEL_OPTIONS if o.encoding is not None and (v := o.encoding(cfg)) is not None]
    return variants[0] if variants else ENCODINGS[cfg.encoding]


def make_encoding(cfg: ModelConfig) -> PositionalEncoding:
    """The positional encoding a config asks for, built (`encoding_class`)."""
    return encoding_class(cfg)(cfg)


@dataclass
class ModelConfig:
    """The study's model by default: d_model 64, 4 heads, 3 layers, d_ff 256, post-LN, no dropout.
    Settings that chapters register (`ModelOptions`) go in `options`, by name, and are read with
    `option(name)`; one at its default is dropped, so that a run has one config (and one hash)."""

    encoding: str = "nope"
    d_model: int = ranged(64, 1)
    n_heads: int = ranged(4, 1)
    n_layers: int = ranged(3, 1)
    d_ff: int = ranged(256, 1)
    pre_norm: bool = False
    dropout: float = ranged(0.0, 0, 1, below=True)
    max_positions: int = ranged(128, 1)  # learned table rows; covers [BOS, 48 + SEP + 48, EOS] = 99
    rope_fraction: float = ranged(1.0, 0, 1, above=True)  # the paper rotated 0.25
    rope_base: float = ranged(10000.0, 1, above=True)
    t5_num_buckets: int = ranged(32, 2)
    t5_max_distance: int = ranged(128, 2)
    options: dict[str, Any] = field(default_factory=dict)  # registered settings away from their defaults

    def __post_init__(self) -> None:
        defaults = model_option_defaults()
        unknown = [k for k in self.options if k not in defaults]
        if unknown:
            valid = [f.name for f in dataclasses.fields(self) if f.name != "options"] + list(defaults)
            raise ValueError(f"no model setting {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
        self.options = {k: v for k, v in sorted(self.options.items()) if v != defaults[k]}
        if self.encoding not in ENCODINGS:
            raise _unknown("positional encoding", self.encoding, ENCODINGS)
        check_ranges(self)
        for group in MODEL_OPTIONS:
            check_ranges(group.settings(**{f.name: self.option(f.name) for f in dataclasses.fields(group.settings)}))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for group in MODEL_OPTIONS:
            if group.check is not None:
                group.check(self)
        encoding_class(self).check(self)

    def option(self, name: str) -> Any:
        """A registered setting (`register_model_options`): its value here, or its default."""
        defaults = model_option_defaults()
        if name not in defaults:
            raise _unknown("model option", name, defaults)
        return self.options.get(name, defaults[name])

    def to_dict(self) -> dict[str, Any]:
        """Every setting by name, the registered ones beside the model's own (as records hold it)."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "options"}
        return json.loads(json.dumps(own | {name: self.option(name) for name in model_option_defaults()}))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelConfig:
        """The config `to_dict` wrote: names that are not the model's own are registered options."""
        own = {f.name for f in dataclasses.fields(cls)} - {"options"}
        options = {**d.get("options", {}), **{k: v for k, v in d.items() if k not in own | {"options"}}}
        return cls(**{k: v for k, v in d.items() if k in own}, options=options)

    def given_options(self) -> str:
        """The registered settings given away from their defaults, as name=value."""
        return ", ".join(f"{k}={v!r}" for k, v in self.options.items())


class FeedForward(nn.Sequential):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))


class Block(nn.Module):
    """Self-attention, then feed-forward; each a residual, post- or pre-LN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, pre_norm: bool, dropout: float = 0.0):
        super().__init__()
        self.pre_norm = pre_norm
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None  # skipped, not called, when 0

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        rotate: Callable[[Tensor], Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, d) -> (B, T, d), and the self-attention weights if `need_weights`."""
        h, weights = self.self_attn(self._sublayer_input(x, self.norm1), mask, bias, rotate, need_weights)
        x = self._residual(x, h, self.norm1)
        x = self._residual(x, self.ffn(self._sublayer_input(x, self.norm2)), self.norm2)
        return x, weights

    def _sublayer_input(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return norm(x) if self.pre_norm else x  # pre-LN normalizes what enters a sublayer

    def _residual(self, x: Tensor, h: Tensor, norm: nn.LayerNorm) -> Tensor:
        if self.drop is not None:
            h = self.drop(h)
        return x + h if self.pre_norm else norm(x + h)  # post-LN normalizes the sum


@dataclass
class Internals:
    """What `DecoderOnlyLM.forward(..., return_internals=True)` exposes for inspection."""

    attentions: list[Tensor]  # per layer, (B, H, T, T)
    hidden_states: list[Tensor]  # embeddings, then the output of each layer, (B, T, d)


class DecoderOnlyLM(nn.Module):
    """A decoder-only Transformer whose positional encoding is chosen by name."""

    def __init__(self, config: ModelConfig, vocab_size: int = VOCAB_SIZE):
        super().__init__()
        self.config, self.vocab_size = config, vocab_size
        self.tok_emb = nn.Embedding(vocab_size, config.d_model)
        self.pos = make_encoding(config)
        self.blocks = nn.ModuleList(
            Block(config.d_model, config.n_heads, config.d_ff, config.pre_norm, config.dropout)
            for _ in range(config.n_layers)
        )
        self.final_norm = nn.LayerNorm(config.d_model) if config.pre_norm else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, vocab_size)
        self.apply(_init_weights)
        nn.init.normal_(self.tok_emb.weight, std=1.0)
        self.emb_scale = 1.0  # what the token embeddings are multiplied by
        for group in MODEL_OPTIONS:
            if group.build is not None:
                group.build(self)

    def forward(
        self,
        idx: Tensor,
        positions: Tensor | None = None,
        segments: Tensor | None = None,
        return_internals: bool = False,
    ) -> Tensor | tuple[Tensor, Internals]:
        """Token ids (B, T) -> logits (B, T, vocab). `positions` (B, T) or (T,), default 0..T-1;
        `segments` (B, T) number the sequences packed into a row: attention never crosses them."""
        check_inputs(idx, self.vocab_size, positions, segments)
        T = idx.shape[1]
        positions = torch.arange(T, device=idx.device) if positions is None else positions
        mask = causal_mask(T, device=idx.device)
        if segments is not None:
            mask = mask & (segments[:, None, :, None] == segments[:, None, None, :])
        for limit in attention_masks(self.config):
            mask = mask & limit(positions)
        bias, mask = attention_bias(self.pos, positions, segments, mask)
        x = self.pos.embed(self.embed(idx), positions)
        rotate = self.pos.rotary(positions)
        attentions, hidden = [], [x]
        for block in self.blocks:
            x, weights = block(x, mask, bias, rotate, return_internals)
            attentions.append(weights)
            hidden.append(x)
        logits = self.lm_head(self.final_norm(x))
        return (logits, Internals(attentions, hidden)) if return_internals else logits

    def embed(self, idx: Tensor) -> Tensor:
        """Token embeddings, times the model's `emb_scale` (1 unless a registered option sets it)."""
        x = F.embedding(idx, self.tok_emb.weight)  # the table's lookup, as a plain call (decoding is per call)
        return x * self.emb_scale if self.emb_scale != 1.0 else x

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def check_inputs(idx: Tensor, vocab_size: int, positions: Tensor | None = None, segments: Tensor | None = None) -> None:
    """Token ids: a non-empty (batch, length) integer tensor within the vocabulary; positions and
    segments, if given: integer tensors shaped like the ids (or (length,))."""
    if not isinstance(idx, Tensor) or idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
        got = f"{idx.dtype} {tuple(idx.shape)}" if isinstance(idx, Tensor) else type(idx).__name__
        raise ValueError(f"token ids must be an integer tensor of shape (batch, length); got {got}")
    if idx.shape[0] == 0 or idx.shape[1] == 0:
        got = tuple(idx.shape)
        raise ValueError(f"token ids must hold at least one sequence of at least one token; got shape {got}")
    if int(idx.min()) < 0 or int(idx.max()) >= vocab_size:
        raise ValueError(f"token ids must lie in [0, {vocab_size}); got [{int(idx.min())}, {int(idx.max())}]")
    B, T = idx.shape
    for name, t in (("positions", positions), ("segments", segments)):
        if t is not None and (t.dtype not in (torch.int64, torch.int32) or t.shape not in ((B, T), (T,))):
            raise ValueError(
                f"{name} must be an integer tensor of shape ({B}, {T}) or ({T},), like the token "
                f"ids; got {t.dtype} {tuple(t.shape)}"
            )


def attention_masks(config: ModelConfig) -> list[Callable[[Tensor], Tensor]]:
    """The masks that registered model options put on a config's attention (`ModelOptions`):
    functions of the positions, each True where a query may see a key."""
    masks = [o.attention_mask(config) for o in MODEL_OPTIONS if o.attention_mask is not None]
    return [m for m in masks if m is not None]


def attention_bias(
    pos: PositionalEncoding, positions: Tensor, segments: Tensor | None, mask: Tensor
) -> tuple[Tensor | None, Tensor | None]:
    """The encoding's attention bias with the mask folded in once for every layer: (bias, None),
    or (None, mask) for an encoding without a bias. In packed rows a relative bias sees only
    q - k, which within a sequence is the column distance: one (T, T) bias then serves every row."""
    if pos.relative and segments is not None and _counts_up_within(positions, segments):
        columns = torch.arange(positions.shape[-1], device=positions.device)
        bias = pos.bias(columns, columns)
    else:
        bias = pos.bias(positions, positions)
    return (None, mask) if bias is None else (bias.masked_fill(~mask, float("-inf")), None)


def _counts_up_within(positions: Tensor, segments: Tensor) -> bool:
    """True if (B, T) positions go up by one from each token to the next of the same sequence
    (padding, segment -1, is ignored: nothing reads its outputs)."""
    if positions.dim() != 2:
        return False
    same = (segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] >= 0)
    return bool(((positions[:, 1:] - positions[:, :-1] == 1) | ~same).all())


def _init_weights(module: nn.Module) -> None:
    """Linear maps and tables N(0, 0.02) as in GPT-2; token embeddings are set to N(0, 1) by the
    model, so content and the sinusoidal table (entries in [-1, 1]) start on the same scale."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)


# ---------------------------------------------------------------------------------------------
# 5. Fast decoding: the same maths, one token at a time (notebook 06)
# ---------------------------------------------------------------------------------------------
# Greedy generation feeds one new token per step. Re-running the whole sequence each step costs
# O(T^2) per step; a cache of what earlier positions computed makes a step cost O(T). Two caches
# serve the same attention: the textbook one keeps every layer's keys and values; the input cache
# keeps only each attention layer's input and moves W_k and W_v to the other side of the
# attention's products (notebook 06 derives it). Both are allocated once, written in place, and
# read as views of the filled prefix. The step functions below restate `forward` for a single
# token with plain function calls: in generation's inner loop the cost is per call, not per flop.
class _Cache:
    """What both decoding caches share: preallocated tensors, the filled length, a bounds check."""

    length: int  # positions filled so far
    max_len: int
    layers: list[StepWeights] | None = None  # each block's weights for the decoding steps, from `prefill`

    def _span(self, new: int) -> tuple[int, int]:
        start, end = self.length, self.length + new
        if end > self.max_len:
            raise ValueError(f"{type(self).__name__} holds {self.max_len} positions; cannot write up to {end}")
        return start, end


class KVCache(_Cache):
    """Keys and values of every layer, preallocated once for `max_len` positions.

    Each step writes its new keys in place and attends over a view of the filled prefix, so the
    cost of a step grows only with the attention over the cache, never with copies of it. Serves
    every encoding, RoPE included (keys are stored already rotated).
    """

    kind = "kv"

    def __init__(self, n_layers: int, batch: int, n_heads: int, max_len: int, head_dim: int, dtype=torch.float32):
        shape = (n_layers, batch, n_heads, max_len, head_dim)
        # not zeroed: attention only ever reads the filled prefix [:length]
        self.k = torch.empty(shape, dtype=dtype)
        self.v = torch.empty(shape, dtype=dtype)
        self.length, self.max_len = 0, max_len

    @property
    def nbytes(self) -> int:
        return self.k.element_size() * (self.k.numel() + self.v.numel())

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Writes k and v (B, H, T, dh) at the current length; returns every key and value so far."""
        start, end = self._span(k.shape[2])
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def hooks(self, model: DecoderOnlyLM) -> list[tuple[HookPoint, Callable[[Tensor], None]]]:
        """What `prefill` reads from a forward pass: each layer's keys and values."""
        keys: dict[int, Tensor] = {}

        def store(layer: int, values: Tensor) -> None:
            self.append(layer, keys.pop(layer), values)

        out = []
        for i, block in enumerate(model.blocks):
            out.append((block.self_attn.hook_keys, lambda k, i=i: keys.__setitem__(i, k)))
            out.append((block.self_attn.hook_values, lambda v, i=i: store(i, v)))
        return out


class InputCache(_Cache):
    """The input of every attention layer, (B, max_len, d) per layer, preallocated once.

    Keys and values are linear maps of that input, so one tensor stands in for both: a step applies
    W_k to the query and W_v after the weighted sum (notebook 06 derives why this is the same
    attention). `maps` holds each layer's weights laid out for that (`input_maps`), made from the
    weights the cache serves: like any decoding cache, it is only valid for those weights. Half the
    memory of a `KVCache`. Keys rotated after their projection (RoPE) cannot be served so.
    """

    kind = "inputs"

    def __init__(
        self,
        n_layers: int,
        batch: int,
        max_len: int,
        d_model: int,
        maps: Sequence[tuple[Tensor, ...]],
        dtype=torch.float32,
    ):
        if len(maps) != n_layers:
            raise ValueError(f"an InputCache for {n_layers} layers needs {n_layers} sets of maps, got {len(maps)}")
        self.h = torch.empty(n_layers, batch, max_len, d_model, dtype=dtype)  # not zeroed, as above
        self.maps = list(maps)
        self.length, self.max_len = 0, max_len

    @property
    def nbytes(self) -> int:
        return self.h.element_size() * self.h.numel()

    def append(self, layer: int, h: Tensor) -> Tensor:
        """Writes h (B, T, d) at the current length; returns the inputs so far (B, length + T, d)."""
        start, end = self._span(h.shape[1])
        self.h[layer, :, start:end] = h
        return self.h[layer, :, :end]

    def hooks(self, model: DecoderOnlyLM) -> list[tuple[HookPoint, Callable[[Tensor], None]]]:
        """What `prefill` reads from a forward pass: each attention layer's input."""
        if model.pos.rotates_keys:
            raise ValueError("an InputCache cannot serve rotated keys (RoPE); use a KVCache")

        def store(layer: int, x: Tensor) -> None:
            self.append(layer, x)

        return [(b.self_attn.hook_input, lambda x, i=i: store(i, x)) for i, b in enumerate(model.blocks)]


CACHE_KINDS = {"kv": KVCache, "inputs": InputCache}
Cache = KVCache | InputCache


def new_cache(model: DecoderOnlyLM, batch: int, max_len: int, kind: str = "auto") -> Cache:
    """A decoding cache for `max_len` positions: "kv" (keys and values, any encoding), "inputs"
    (each attention layer's input: half the memory; not for encodings that rotate keys), or
    "auto": "inputs" where it applies, else "kv"."""
    c, dtype = model.config, model.lm_head.weight.dtype
    if kind == "auto":
        kind = "kv" if model.pos.rotates_keys else "inputs"
    if kind not in CACHE_KINDS:
        raise _unknown("cache kind", kind, ["auto", *CACHE_KINDS])
    if attention_masks(c):
        raise ValueError(
            f"the caches attend to every earlier key; a model whose attention is masked ({c.given_options()}) "
            "decodes uncached (use_cache=False)"
        )
    if kind == "inputs":
        if model.pos.rotates_keys:
            raise ValueError(f"encoding {c.encoding!r} rotates keys, so an input cache cannot serve it; use kind='kv'")
        return InputCache(c.n_layers, batch, max_len, c.d_model, [input_maps(b.self_attn) for b in model.blocks], dtype)
    return KVCache(c.n_layers, batch, c.n_heads, max_len, c.d_model // c.n_heads, dtype)


def prefill(model: DecoderOnlyLM, prompt: Tensor, cache: Cache) -> Tensor:
    """Run the prompt (B, P) through one plain forward pass, writing what each layer's attention
    computed (through its hook points) into an empty cache; returns the last position's logits."""
    if cache.length:
        raise ValueError(f"prefill fills an empty cache; this one holds {cache.length} positions")
    with hooked(cache.hooks(model)):
        logits = model(prompt)[:, -1]
    cache.length = prompt.shape[1]
    cache.layers = [step_weights(b) for b in model.blocks]
    return logits


class StepWeights(NamedTuple):
    """One block's weights as plain tensors, and its content-score hook point if anything is
    attached to it: gathered once per generation (`prefill`), because at batch 1 looking a
    parameter up through its module costs about as much as the small product that uses it."""

    pre_norm: bool
    norm1: tuple[Tensor, Tensor, float]  # LayerNorm weight, bias, eps
    norm2: tuple[Tensor, Tensor, float]
    qkv: tuple[Tensor, Tensor]  # the stacked query, key and value maps: weight, bias
    out: tuple[Tensor, Tensor]
    up: tuple[Tensor, Tensor]  # the feed-forward's two linear maps
    down: tuple[Tensor, Tensor]
    n_heads: int
    head_dim: int
    hook_scores: HookPoint | None


def step_weights(block: Block) -> StepWeights:
    """`StepWeights` of a decoder-only model's block."""
    up, _, _, down = block.ffn  # linear, ReLU, dropout (off in generation), linear
    attn = block.self_attn
    hook = attn.hook_scores if attn.hook_scores.active else None
    return StepWeights(
        block.pre_norm,
        (block.norm1.weight, block.norm1.bias, block.norm1.eps),
        (block.norm2.weight, block.norm2.bias, block.norm2.eps),
        (attn.in_proj.weight, attn.in_proj.bias),
        (attn.out_proj.weight, attn.out_proj.bias),
        (up.weight, up.bias),
        (down.weight, down.bias),
        attn.n_heads,
        attn.head_dim,
        hook,
    )


def decode_step(model: DecoderOnlyLM, token: Tensor, cache: Cache) -> Tensor:
    """Logits (B, vocab) for one new token per row (B,), whose entries join the cache:
    generation's inner loop. Equal to `forward` on the same tokens (tested for every encoding)."""
    t = cache.length
    position = torch.tensor([t], device=token.device)
    x = model.pos.embed(model.embed(token[:, None]), position)[:, 0]  # (B, d)
    bias = model.pos.bias(position, torch.arange(t + 1, device=token.device))  # (1, H, 1, t + 1) or None
    rotate = model.pos.rotary(position)
    for i, w in enumerate(cache.layers or [step_weights(b) for b in model.blocks]):
        x = block_step(w, x, cache, i, bias, rotate)
    cache.length += 1
    return F.linear(model.final_norm(x), model.lm_head.weight, model.lm_head.bias)


def block_step(
    w: StepWeights, x: Tensor, cache: Cache, layer: int, bias: Tensor | None, rotate: Callable[[Tensor], Tensor] | None
) -> Tensor:
    """`Block.forward` for one new token per row, x (B, d), attending over the cache (no dropout,
    as in eval mode)."""
    if w.pre_norm:
        x = x + attention_step(w, _layer_norm(w.norm1, x), cache, layer, bias, rotate)
        return x + _feed_forward(w, _layer_norm(w.norm2, x))
    x = _layer_norm(w.norm1, x + attention_step(w, x, cache, layer, bias, rotate))
    return _layer_norm(w.norm2, x + _feed_forward(w, x))


def _layer_norm(norm: tuple[Tensor, Tensor, float], x: Tensor) -> Tensor:
    weight, bias, eps = norm
    return F.layer_norm(x, weight.shape, weight, bias, eps)


def _feed_forward(w: StepWeights, x: Tensor) -> Tensor:
    return F.linear(F.relu(F.linear(x, *w.up)), *w.down)


def attention_step(
    w: StepWeights,
    x: Tensor,
    cache: Cache,
    layer: int,
    bias: Tensor | None,
    rotate: Callable[[Tensor], Tensor] | None,
) -> Tensor:
    """`MultiHeadAttention.forward` for one new token per row, x (B, d): its key and value
    (KVCache) or x itself (InputCache) go into the cache; its query attends over everything cached.
    An active `hook_scores` (attached before `prefill`) sees the content scores, as in the
    forward pass."""
    if isinstance(cache, InputCache):
        if rotate is not None:
            raise ValueError("an InputCache cannot serve rotated keys (RoPE); use a KVCache")
        return _attention_step_on_inputs(w, x, cache, layer, bias)
    B = x.shape[0]
    q, k, v = F.linear(x, *w.qkv).view(B, 3, w.n_heads, 1, w.head_dim).unbind(1)
    if rotate is not None:
        q, k = rotate(q), rotate(k)
    keys, values = cache.append(layer, k, v)
    out, _ = scaled_dot_product_attention(q, keys, values, None, bias, w.hook_scores)  # (B, H, 1, dh)
    return F.linear(out.view(B, -1), *w.out)


@torch.no_grad()
def input_maps(attn: MultiHeadAttention) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """What a decoding step over an InputCache needs (see there), laid out for it once: the
    query map W_q (d, d) and b_q, both scaled by 1/sqrt(dh); W_k by head, (H, dh, d); W_v^T by
    head, (H, d, dh); b_v by head, (H, 1, dh). b_k is left out: it shifts every score alike."""
    H, dh = attn.n_heads, attn.head_dim
    d = H * dh
    w_q, w_k, w_v = attn.in_proj.weight.split(d)
    b_q, _, b_v = attn.in_proj.bias.split(d)
    scale = 1 / math.sqrt(dh)
    return (
        w_q * scale,
        b_q * scale,
        w_k.reshape(H, dh, d).contiguous(),
        w_v.reshape(H, dh, d).transpose(1, 2).contiguous(),
        b_v.reshape(H, 1, dh).contiguous(),
    )


def _attention_step_on_inputs(w: StepWeights, x: Tensor, cache: InputCache, layer: int, bias: Tensor | None) -> Tensor:
    """`attention_step` over the cached inputs h (B, L, d): per head, the scores are (W_k^T q) . h_j
    and the output is W_v (sum_j w_j h_j) + b_v (notebook 06). (Leaving out b_k shifts a query's
    scores alike, so a hook that scales them scales the same softmax.)"""
    (B, d), H = x.shape, w.n_heads
    w_q, b_q, w_k, w_v, b_v = cache.maps[layer]
    h = cache.append(layer, x[:, None])
    q = F.linear(x, w_q, b_q).view(B, H, -1).transpose(0, 1)  # (H, B, dh), scaled
    q = torch.bmm(q, w_k).transpose(0, 1)  # (B, H, d): each head's query in input space
    scores = torch.bmm(q, h.transpose(1, 2))  # (B, H, L)
    if w.hook_scores is not None:
        scores = w.hook_scores(scores[:, :, None])[:, :, 0]
    if bias is not None:
        scores = scores + bias[:, :, 0]  # (1 or B, H, 1, L) -> (1 or B, H, L)
    mixed = torch.bmm(scores.softmax(dim=-1), h).transpose(0, 1)  # (H, B, d): each head's weighted inputs
    out = torch.baddbmm(b_v, mixed, w_v).transpose(0, 1).reshape(B, d)  # (B, H * dh): the heads' values
    return F.linear(out, *w.out)


@torch.inference_mode()  # like no_grad, and skips autograd's bookkeeping on every tensor: cheaper per call
def generate(
    model: DecoderOnlyLM,
    prompt: Tensor,
    max_new_tokens: int,
    use_cache: bool = True,
    return_logits: bool = False,
    cache_kind: str = "auto",
    positions: Tensor | None = None,
    stop_at_eos: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Greedy decoding: (B, P) prompt -> (B, P + max_new_tokens) tokens (and the step logits).
    With `stop_at_eos`, a row writes PAD after its EOS and decoding stops once every row has
    written one: the result may then be shorter (a task that writes steps before its answer).

    With a cache (`cache_kind` as in `new_cache`), the prompt fills it in one forward pass and each
    later step feeds only the newest token (`decode_step`); without, every step re-runs the whole
    sequence so far. The caches decode at positions 0, 1, ..; `positions` (B, at least
    P + max_new_tokens - 1) gives others to the uncached decoding (a model whose positions a
    `PositionScheme` sets reads its own: see `model_positions`).
    """
    _check_generation(model, prompt, max_new_tokens, use_cache, positions)
    B, P = prompt.shape
    total = P + max_new_tokens
    out = torch.empty(B, total, dtype=torch.long, device=prompt.device)
    out[:, :P] = prompt
    if use_cache:
        cache = new_cache(model, B, total, cache_kind)
        logits, step = prefill(model, prompt, cache), lambda t: decode_step(model, out[:, t], cache)
    else:
        at = (lambda t: None) if positions is None else (lambda t: positions[:, :t])  # noqa: E731
        logits, step = model(prompt, at(P))[:, -1], lambda t: model(out[:, : t + 1], at(t + 1))[:, -1]
    step_logits, done = [], torch.zeros(B, dtype=torch.bool, device=prompt.device)
    for t in range(P, total):
        token = logits.argmax(-1)
        out[:, t] = torch.where(done, PAD, token) if stop_at_eos else token  # PAD after a row's EOS
        if return_logits:  # kept only when asked: (B, vocab) per step adds up over long generations
            step_logits.append(logits)
        if stop_at_eos:
            done |= out[:, t] == EOS
            if done.all():
                out = out[:, : t + 1]
                break
        if t + 1 < total:
            logits = step(t)
    return (out, torch.stack(step_logits, dim=1)) if return_logits else out


def _uncached_only(config: ModelConfig) -> bool:
    """Whether the caches cannot decode a model: it reads positions of its own, or a registered
    option masks its attention (`new_cache` refuses it)."""
    return _own_positions(config) or bool(attention_masks(config))


def _own_positions(config: ModelConfig) -> bool:
    """Whether a model reads positions of its own (any `PositionScheme`), not 0, 1, .."""
    return bool(active_schemes(config))


def _check_generation(
    model: DecoderOnlyLM, prompt: Tensor, max_new_tokens: int, use_cache: bool, positions: Tensor | None
) -> None:
    """What `generate` refuses, each with the reason and what to do instead."""
    check_inputs(prompt, model.vocab_size)  # generated tokens are argmaxes over the vocabulary: valid
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0; got {max_new_tokens!r}")
    B, P = prompt.shape
    total = P + max_new_tokens
    if positions is None and _own_positions(model.config):
        schemes = ", ".join(s.name for s in active_schemes(model.config))
        raise ValueError(
            f"generate decodes at positions 0, 1, ..; a model whose positions a scheme sets ({schemes}: "
            f"{model.config.given_options()}) reads others: pass them (positions=, use_cache=False), or score it "
            "teacher-forced (exact_match_by_length), which equals greedy"
        )
    if positions is not None and (use_cache or positions.shape[0] != B or positions.shape[1] < total - 1):
        raise ValueError(
            f"positions serve uncached decoding (use_cache=False) and need shape ({B}, >= {total - 1}); "
            f"got use_cache={use_cache}, shape {tuple(positions.shape)}"
        )
    limit = model.pos.max_length
    if limit is not None and total - 1 > limit:  # the last token is never fed back
        raise ValueError(
            f"{P} prompt tokens + {max_new_tokens} new ones need {total - 1} positions, past the "
            f"{model.config.encoding} encoding's {limit} (max_positions={limit})"
        )


# ---------------------------------------------------------------------------------------------
# 6. Exact match (notebooks 02 and 04)
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def evaluating(model: nn.Module):
    """The model in eval mode (no dropout) and no gradients recorded within the block, then back
    in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def evaluation_batch(task: Task, n: int, count: int, seed: int, config: ModelConfig | None = None) -> Batch:
    """The `count` sequences of size n that evaluation seed `seed` draws for `task` (the same for
    every model: they depend only on the task, its format, n and the seed), at the positions a
    model of `config` reads (randomized or coupled, if it was trained so)."""
    g = eval_generator(task.prompt_key, n, seed)
    batch = single_length_batch(task, n, count, g)
    return batch if config is None else model_positions(config, batch, g, task)


def exact_from_logits(logits: Tensor, batch: Batch) -> Tensor:
    """(B,) bool from teacher-forced logits: every scored token (answer and EOS) is the argmax."""
    return ((logits.argmax(-1) == batch.targets) | ~batch.loss_mask).all(dim=1)


def exact_match_rows(model: DecoderOnlyLM, batch: Batch) -> Tensor:
    """(B,) bool: every target symbol and EOS is the argmax given the true prefix.

    Equivalent to greedy decoding reproducing the whole answer: if every step's argmax is the
    true token, greedy decoding follows the true prefix; at the first wrong argmax, it fails.
    """
    return exact_from_logits(model(batch.inputs, positions=batch.positions[:, :-1]), batch)


def eval_generator(task: str, n: int, seed: int) -> torch.Generator:
    """The evaluation sequences depend only on (task, n, seed): the same for every model."""
    digest = hashlib.sha256(f"{task}/{n}/{seed}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def exact_match_by_length(
    model: DecoderOnlyLM,
    task: str | Task,
    lengths: Iterable[int],
    n_per_length: int = 256,
    seed: int = 1234,
    batch_size: int = 256,
) -> dict[int, float]:
    """Exact-match accuracy at each input length n (greedy decoding, computed teacher-forced).
    `task`: a registered name, or a task in its format (`RunConfig.make_task`). The whole target
    is scored, every token the task writes before its end."""
    t = get_task(task) if isinstance(task, str) else task
    lengths = list(lengths)
    for name, value in (("n_per_length", n_per_length), ("batch_size", batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    for n in lengths:
        if not isinstance(n, int | np.integer) or isinstance(n, bool):
            raise ValueError(f"lengths must be integers; got {n!r}")
        t.check_size(int(n))
    out: dict[int, float] = {}
    with evaluating(model):
        for n in lengths:
            batch = evaluation_batch(t, n, n_per_length, seed, model.config)
            hits = [
                exact_match_rows(model, _slice_batch(batch, i, i + batch_size))
                for i in range(0, n_per_length, batch_size)
            ]
            out[int(n)] = float(torch.cat(hits).float().mean())
    return out


def _slice_batch(b: Batch, i: int, j: int) -> Batch:
    return Batch(b.tokens[i:j], b.positions[i:j], b.segments[i:j], b.loss_mask[i:j])


def greedy_exact_match(model: DecoderOnlyLM, batch: Batch) -> Tensor:
    """(B,) bool by step-by-step greedy generation from [BOS, prompt, SEP]: the slow reference.
    Every row has one size (a `single_length_batch`); the answer is compared where it is scored."""
    sep = int((batch.tokens[0] == SEP).nonzero()[0]) + 1
    prompt, answer = batch.tokens[:, :sep], batch.tokens[:, sep:]
    with evaluating(model):
        generated = generate(model, prompt, answer.shape[1])[:, sep:]
    return ((generated == answer) | ~batch.loss_mask[:, sep - 1 :]).all(dim=1)


# ---------------------------------------------------------------------------------------------
# 7. Training one run (notebook 03)
# ---------------------------------------------------------------------------------------------
@dataclass
class RunConfig:
    """One training run. Defaults are the study's settings (the baseline's, see README)."""

    task: str = "copy"
    model: ModelConfig = field(default_factory=ModelConfig)  # model.encoding names the encoding
    task_options: dict[str, str] = when_set(field(default_factory=dict))  # the task's format (`Task.options`)
    train_task_options: dict[str, str] = when_set(field(default_factory=dict))  # options changed for training only
    seed: int = ranged(0, 0)
    train_min_len: int = ranged(1, 1)
    train_max_len: int = ranged(16, 1)
    batch_size: int = ranged(64, 1)
    steps: int = ranged(5000, 0)  # 0: an untrained baseline, evaluated and recorded as such
    lr: float = ranged(1e-3, 0, above=True)
    weight_decay: float = ranged(0.01, 0)
    warmup_steps: int = ranged(250, 0)  # linear warm-up (at most `steps`), then cosine decay to zero
    grad_clip: float = ranged(1.0, 0, above=True)
    eval_max_len: int = ranged(48, 1)
    eval_per_length: int = ranged(256, 1)
    eval_seed: int = ranged(1234, 0)  # apart from the training seeds: the same test set for every model
    packed: bool = when_set(field(default=True))  # pack sequences into rows; False: one per row, padded
    train_eos: bool = when_set(field(default=True))  # False: EOS is left out of the loss, so its stop is never trained

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = ModelConfig.from_dict(self.model)  # an unknown setting is refused by name
        if not isinstance(self.model, ModelConfig):
            raise ValueError(f"RunConfig.model must be a ModelConfig (or its dict); got {type(self.model).__name__}")
        task = get_task(self.task, self.task_options)  # raises on an unknown task or option
        # an option at its default is left out, so a run has one config (and one hash)
        self.task_options = {k: v for k, v in sorted(self.task_options.items()) if v != task.options[k][0]}
        get_task(self.task, {**self.task_options, **self.train_task_options})
        self.train_task_options = {
            k: v for k, v in sorted(self.train_task_options.items()) if v != task.format[k]
        }  # an option the same as the test's changes nothing: left out
        check_ranges(self)
        if self.steps > 0 and self.warmup_steps > self.steps:
            raise ValueError(
                f"RunConfig.warmup_steps={self.warmup_steps} is out of range; valid: an integer "
                f">= 0 and <= steps ({self.steps})"
            )
        if task.max_size is not None and self.eval_max_len > task.max_size:
            raise ValueError(
                f"RunConfig.eval_max_len={self.eval_max_len} is out of range; task {self.task!r} "
                f"has sizes up to {task.max_size}"
            )
        if not task.min_size <= self.train_min_len <= self.train_max_len <= self.eval_max_len:
            raise ValueError(
                f"need {task.min_size} <= train_min_len ({self.train_min_len}) <= train_max_len ({self.train_max_len}) "
                f"<= eval_max_len ({self.eval_max_len}) (task {self.task!r} starts at size {task.min_size})"
            )
        longest = task.sequence_length(self.eval_max_len)
        rooms = [s.check_room for s in active_schemes(self.model) if s.check_room is not None]
        for check_room in rooms:  # positions that do not grow with the length
            check_room(self.model, task, self.eval_max_len)
        if not rooms and self.model.encoding == "learned" and longest > self.model.max_positions:
            raise ValueError(
                f"eval_max_len={self.eval_max_len} needs {longest} positions for task {self.task!r} but the "
                f"learned table has max_positions={self.model.max_positions}"
            )

    @property
    def encoding(self) -> str:
        return self.model.encoding

    @property
    def name(self) -> str:
        return f"{self.make_task().key}-{self.encoding}-s{self.seed}"

    def make_task(self) -> Task:
        """The run's task, in its format: what it is scored on."""
        return get_task(self.task, self.task_options)

    def make_training_task(self) -> Task:
        """The task its training draws from: its format, with `train_task_options` on top (a
        training distribution apart from the test's; the same task where there are none)."""
        return get_task(self.task, {**self.task_options, **self.train_task_options})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"model": self.model.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        return cls(**d)

    @property
    def hash(self) -> str:
        return config_hash(self.to_dict(), TRAINING_REVISION)


# Bump when a change to the training or evaluation code changes what a run produces: every
# config hash changes with it, so the sweep re-runs the grid instead of serving records that the
# old code made. Every record is of revision 2: batches packed by scatter, the relative bias
# shared across packed rows, PyTorch's fused AdamW.
TRAINING_REVISION = 2


def _named_when_set() -> dict[str, Any]:
    """Every setting named in the hash only where set (`when_set` fields of RunConfig and
    ModelConfig, and every registered model option), keyed "field" or "model.field", with its default."""
    out = {}
    for prefix, cls in (("", RunConfig), ("model.", ModelConfig)):
        for f in dataclasses.fields(cls):
            if f.metadata.get("hash") == "when set":
                out[prefix + f.name] = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return out | {f"model.{name}": default for name, default in model_option_defaults().items()}


def _hashed_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The config as its hash reads it: every setting of `_named_when_set` left out at its default."""
    out = json.loads(json.dumps(config))  # a deep copy
    for key, default in _named_when_set().items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.get(p, {})
        if node.get(leaf, default) == default:
            node.pop(leaf, None)
    return out


def config_hash(config: dict[str, Any], revision: int = TRAINING_REVISION) -> str:
    """12 hex digits naming a run: its full config and the revision of the code that trains it."""
    blob = json.dumps(_hashed_fields(config), sort_keys=True).encode() + f"|revision={revision}".encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def make_model(config: RunConfig) -> DecoderOnlyLM:
    """A fresh model for a run: its ModelConfig, with its task's vocabulary."""
    return DecoderOnlyLM(config.model, config.make_task().vocab_size)


def make_run(task: str, encoding: str, seed: int = 0, **overrides: Any) -> RunConfig:
    """RunConfig from names; overrides may set RunConfig fields, ModelConfig fields or registered
    model options, each by its name. A run of
    fewer steps than the default warm-up warms up over all of them unless `warmup_steps` is given."""
    if "steps" in overrides and "warmup_steps" not in overrides and isinstance(overrides["steps"], int):
        overrides["warmup_steps"] = max(0, min(RunConfig.warmup_steps, overrides["steps"]))
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)} | set(model_option_defaults())
    model_kw = {k: overrides.pop(k) for k in list(overrides) if k in model_fields}
    return RunConfig(task=task, model=ModelConfig.from_dict({"encoding": encoding, **model_kw}), seed=seed, **overrides)


def lr_at(step: int, cfg: RunConfig) -> float:
    """Linear warm-up to cfg.lr over warmup_steps, then cosine decay to zero at cfg.steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW as the study trains: PyTorch's fused kernel (one call for all tensors; the update
    rule is AdamW's, only the float order of operations differs from the loop version)."""
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def training_batch(task: Task, cfg: RunConfig, generator: torch.Generator, packed: bool = True) -> Batch:
    """batch_size sequences, each with n drawn uniformly from [train_min_len, train_max_len], at
    the positions the model reads (`model_positions`); EOS left out of the loss if not `train_eos`."""
    make = packed_training_batch if packed else padded_training_batch
    batch = model_positions(cfg.model, make(task, training_lengths(cfg, generator), generator), generator, task)
    if not cfg.train_eos:
        batch.loss_mask = batch.loss_mask & (batch.targets != EOS)
    return batch


def batch_loss(model: DecoderOnlyLM, batch: Batch) -> Tensor:
    """Mean cross-entropy over the target tokens (y1..ym, EOS) of every sequence in the batch."""
    logits = model(batch.inputs, positions=batch.positions[:, :-1], segments=batch.segments[:, :-1])
    return F.cross_entropy(logits[batch.loss_mask], batch.targets[batch.loss_mask])


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes files private; results are ordinary files
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _atomic_json(path: Path, obj: Any) -> None:
    _atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=1)))


def library_versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "lengen": __version__,
    }


def _progress(iterable, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, mininterval=1.0)


@contextlib.contextmanager
def torch_threads(n: int):
    """Run a block with n intra-op threads, then restore the previous count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Entries a chapter adds to the records of the runs it concerns (such as scores on further kinds
# of input): name -> a function of (config, trained model) giving the entry, or None for a run it
# does not concern. Scored after the exact match, in the order registered.
RECORD_ENTRIES: dict[str, Callable[[RunConfig, DecoderOnlyLM], Any]] = {}


def register_record_entry(name: str, score: Callable[[RunConfig, DecoderOnlyLM], Any]) -> None:
    """Add `name` to the records of the runs `score` concerns (`RECORD_ENTRIES`)."""
    reserved = {"name", "config", "config_hash", "exact_match", "in_distribution_mean", "loss_curve"}
    if name in reserved:
        raise ValueError(f"record entry {name!r} is one every record has; reserved: {', '.join(sorted(reserved))}")
    RECORD_ENTRIES[name] = score


def train_run(
    config: RunConfig, checkpoint: Path | None = None, checkpoint_every: int = 500, progress: bool = True
) -> tuple[DecoderOnlyLM, dict[str, Any]]:
    """Train one model and evaluate it at every length. Returns (model, record).

    Runs on one thread (a model this small gains nothing from more, and a fixed count keeps the
    result deterministic for a given config on a given machine). With `checkpoint`, state is
    saved every `checkpoint_every` steps and an existing checkpoint is resumed from.
    """
    with torch_threads(1):
        return _train_run(config, checkpoint, checkpoint_every, progress)


@dataclass
class _TrainingState:
    """Everything a run carries from step to step, and what a checkpoint saves."""

    model: DecoderOnlyLM
    optimizer: torch.optim.Optimizer
    data: torch.Generator  # draws every training batch
    step: int = 0
    losses: list[float] = field(default_factory=list)
    tokens_seen: int = 0


def _train_run(
    config: RunConfig, checkpoint: Path | None, checkpoint_every: int, progress: bool
) -> tuple[DecoderOnlyLM, dict[str, Any]]:
    """Start (or resume), train, evaluate, record: the four parts below, in order."""
    t0 = time.perf_counter()
    state = _start(config, checkpoint)
    resumed_from = state.step
    t_train = time.perf_counter()
    _train_steps(config, state, checkpoint, checkpoint_every, progress)
    train_time = time.perf_counter() - t_train
    t_eval = time.perf_counter()
    task = config.make_task()
    sizes = task.sizes(1, config.eval_max_len)
    scored = task.score_run(state.model, sizes, config.eval_per_length, config.eval_seed)
    if scored is None:
        scored = exact_match_by_length(state.model, task, sizes, config.eval_per_length, config.eval_seed), {}
    em, extra = scored
    for name, score in RECORD_ENTRIES.items():  # a chapter's further scores, for the runs it concerns
        if (value := score(config, state.model)) is not None:
            extra[name] = value
    timings = {"wall_time_s": None, "train_time_s": train_time, "eval_time_s": time.perf_counter() - t_eval}
    record = _record(config, state, em, resumed_from, timings) | extra
    record["wall_time_s"] = time.perf_counter() - t0
    return state.model, record


def _start(config: RunConfig, checkpoint: Path | None) -> _TrainingState:
    """A fresh model, optimizer and data stream from the run's seed; or, if `checkpoint` exists,
    the state it saved (refused if it belongs to another config)."""
    torch.manual_seed(config.seed)
    model = make_model(config)
    state = _TrainingState(model, make_optimizer(model, config), torch.Generator().manual_seed(config.seed))
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        if saved["config_hash"] != config.hash:
            raise ValueError(
                f"checkpoint {checkpoint} belongs to another config ({saved['config_hash']} != {config.hash})"
            )
        model.load_state_dict(saved["model"])
        state.optimizer.load_state_dict(saved["optimizer"])
        state.data.set_state(saved["data_rng"])
        state.step, state.losses, state.tokens_seen = saved["step"], saved["losses"], saved["tokens_seen"]
    return state


def _train_steps(
    config: RunConfig, state: _TrainingState, checkpoint: Path | None, checkpoint_every: int, progress: bool
) -> None:
    """From state.step to config.steps: draw a batch, step the optimizer, checkpoint now and then."""
    task, model, opt = config.make_training_task(), state.model, state.optimizer
    model.train()
    for step in _progress(range(state.step, config.steps), config.steps - state.step, config.name, progress):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, config)
        batch = training_batch(task, config, state.data, packed=config.packed)
        loss = batch_loss(model, batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"run {config.name} ({config.hash}): loss became {loss.item()} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        state.losses.append(loss.item())
        state.tokens_seen += int((batch.segments >= 0).sum())
        state.step = step + 1
        if checkpoint is not None and state.step % checkpoint_every == 0 and state.step < config.steps:
            _save_checkpoint(config, state, checkpoint)


def _save_checkpoint(config: RunConfig, state: _TrainingState, path: Path) -> None:
    saved = dict(
        config_hash=config.hash,
        model=state.model.state_dict(),
        optimizer=state.optimizer.state_dict(),
        data_rng=state.data.get_state(),
        losses=state.losses,
        tokens_seen=state.tokens_seen,
        step=state.step,
    )
    _atomic_write(path, lambda p: torch.save(saved, p))


def _record(
    config: RunConfig, state: _TrainingState, em: dict[int, float], resumed_from: int, timings: dict[str, Any]
) -> dict[str, Any]:
    """The run's JSON record: config and hash, versions, loss curve, exact match, timings."""
    every = max(1, config.steps // 100)
    losses, train_time = state.losses, timings["train_time_s"]
    in_dist = [em[n] for n in config.make_task().sizes(config.train_min_len, config.train_max_len)]
    return {
        "name": config.name,
        "config": config.to_dict(),
        "config_hash": config.hash,
        "training_revision": TRAINING_REVISION,
        "versions": library_versions(),
        "n_parameters": state.model.num_parameters(),
        "resumed_from_step": resumed_from,
        "loss_curve": {
            "every": every,
            "mean_loss": [float(np.mean(losses[i : i + every])) for i in range(0, len(losses), every)],
        },
        "exact_match": {str(n): v for n, v in em.items()},
        "in_distribution_mean": float(np.mean(in_dist)),
        "untrained_baseline": config.steps == 0,  # 0 steps: the model as initialised, evaluated
        **timings,
        "steps_per_s": (config.steps - resumed_from) / train_time if train_time > 0 else float("nan"),
        "train_tokens_per_s": state.tokens_seen / max(train_time, 1e-9) if resumed_from == 0 else None,
        "threads": torch.get_num_threads(),
    }


def training_lengths(cfg: RunConfig, generator: torch.Generator) -> list[int]:
    """The sizes of one training batch: batch_size draws, uniform in [train_min_len, train_max_len]
    unless the task weighs its sizes (`Task.size_weights`)."""
    task = cfg.make_task()
    sizes = task.sizes(cfg.train_min_len, cfg.train_max_len)
    weights = task.size_weights(sizes)
    if weights is None:
        return torch.randint(cfg.train_min_len, cfg.train_max_len + 1, (cfg.batch_size,), generator=generator).tolist()
    draws = torch.multinomial(weights.double(), cfg.batch_size, replacement=True, generator=generator)
    return [sizes[i] for i in draws.tolist()]


# ---------------------------------------------------------------------------------------------
# 8. The sweep: resumable, parallel, any concurrent.futures executor (notebook 03)
# ---------------------------------------------------------------------------------------------
def grid(
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seeds: Sequence[int] = range(5),
    **overrides: Any,
) -> list[RunConfig]:
    """Every (task, encoding, seed) combination, seed-major (a partial grid has whole seeds first).
    `encodings` defaults to every registered encoding."""
    encodings = encoding_names() if encodings is None else encodings
    return [make_run(t, e, s, **dict(overrides)) for s in seeds for t in tasks for e in encodings]


@dataclass(frozen=True)
class Experiment:
    """A named set of runs (`sweep --grid NAME`): the function that lists them, the folder under
    results/ that keeps their records ("." for the grid's own), and the notebook that reads them."""

    name: str
    runs: Callable[[], list[RunConfig]]
    folder: str
    notebook: str

    def results_dir(self, results_dir: str | Path = RESULTS_DIR) -> Path:
        return Path(results_dir) / self.folder


# Every experiment of the study, registered by name (`register_experiment`) in the section of the
# chapter that trains it, so nothing here changes with a chapter.
EXPERIMENTS: dict[str, Experiment] = {}


def register_experiment(name: str, runs: Callable[[], list[RunConfig]], folder: str, notebook: str) -> Experiment:
    if name in EXPERIMENTS:
        raise ValueError(f"an experiment named {name!r} is registered already")
    EXPERIMENTS[name] = Experiment(name, runs, folder, notebook)
    return EXPERIMENTS[name]


def register_experiments(notebook: str, rows: Iterable[tuple[str, Callable[[], list[RunConfig]], str]]) -> None:
    """`register_experiment` for each (name, runs, folder) of one notebook's experiments, in order."""
    for name, runs, folder in rows:
        register_experiment(name, runs, folder, notebook)


def experiment(name: str) -> Experiment:
    """The registered experiment `name` (a ValueError naming the valid ones otherwise)."""
    if name not in EXPERIMENTS:
        raise _unknown("experiment", name, EXPERIMENTS)
    return EXPERIMENTS[name]


def record_path(results_dir: Path, cfg: RunConfig) -> Path:
    return Path(results_dir) / "runs" / f"{cfg.name}-{cfg.hash}.json"


def weights_path(results_dir: Path, cfg: RunConfig) -> Path:
    return Path(results_dir) / "weights" / f"{cfg.name}-{cfg.hash}.pt"


def checkpoint_path(results_dir: Path, cfg: RunConfig) -> Path:
    return Path(results_dir) / "checkpoints" / f"{cfg.name}-{cfg.hash}.pt"


class CorruptRecord(ValueError):
    pass


def read_record(path: Path) -> dict[str, Any]:
    """A run record, checked for completeness; raises CorruptRecord naming the file and the fault."""
    try:
        rec = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptRecord(f"{path}: not valid JSON ({e})") from None
    missing = [k for k in ("config", "config_hash", "training_revision", "exact_match", "loss_curve") if k not in rec]
    if missing:
        raise CorruptRecord(f"{path}: incomplete record, missing {', '.join(missing)}")
    try:
        cfg_hash = config_hash(RunConfig.from_dict(rec["config"]).to_dict(), rec["training_revision"])
    except (TypeError, ValueError) as e:
        raise CorruptRecord(f"{path}: its config is not a valid RunConfig ({e})") from None
    if cfg_hash != rec["config_hash"]:
        raise CorruptRecord(f"{path}: config does not match its hash {rec['config_hash']}")
    return rec


def record_of(results_dir: str | Path, cfg: RunConfig) -> dict[str, Any] | None:
    """The run's record in `results_dir` (checked, `read_record`), or None where it is not trained."""
    path = record_path(Path(results_dir), cfg)
    return read_record(path) if path.exists() else None


def extension_classes(configs: Sequence[RunConfig]) -> bytes | None:
    """The encoding and task classes that `configs` use and this module does not define, pickled
    for worker processes, or None. A worker started by spawn or forkserver (macOS's default,
    Python 3.14's, Dask's) imports this module afresh and knows only its own classes; a class from
    a notebook cell or a script's __main__ cannot be imported there, so it travels by value
    (cloudpickle), and one from an importable module by reference."""
    classes = {ENCODINGS[c.encoding] for c in configs} | {TASKS[c.task] for c in configs}
    extra = sorted((c for c in classes if c.__module__ != __name__), key=lambda c: c.__qualname__)
    if not extra:
        return None
    import cloudpickle

    return cloudpickle.dumps(extra)


def register_extensions(payload: bytes | None) -> None:
    """In a worker: register the classes `extension_classes` sent (where a name is already taken by
    the same class, nothing changes)."""
    if payload is None:
        return
    import pickle

    for cls in pickle.loads(payload):
        (register_encoding if issubclass(cls, PositionalEncoding) else register_task)(cls)


def run_and_save(
    config: RunConfig | dict,
    results_dir: str | Path,
    save_weights: bool = True,
    progress: bool = False,
    extensions: bytes | None = None,
) -> dict[str, Any]:
    """Train one run (resuming from its checkpoint), then write weights and record atomically.

    The sweep's unit of work; top level so any executor can pickle it. The weights (about 0.6 MB
    a run) are kept so that notebook 05 can inspect every seed's model without retraining.
    `extensions` registers user-defined classes first (`extension_classes`).
    """
    register_extensions(extensions)
    cfg = config if isinstance(config, RunConfig) else RunConfig.from_dict(config)
    results_dir = Path(results_dir)
    ckpt = checkpoint_path(results_dir, cfg)
    model, record = train_run(cfg, checkpoint=ckpt, progress=progress)
    if save_weights:
        _atomic_write(weights_path(results_dir, cfg), lambda p: torch.save(model.state_dict(), p))
    _atomic_json(record_path(results_dir, cfg), record)
    ckpt.unlink(missing_ok=True)
    return record


IN_CI = bool(os.environ.get("CI"))  # continuous integration reads committed results, never trains


def sweep(
    configs: Sequence[RunConfig],
    results_dir: str | Path = RESULTS_DIR,
    executor: Executor | None = None,
    max_workers: int | None = None,
    progress: bool = True,
    train: bool = True,
) -> list[dict[str, Any]]:
    """Run what `results_dir` lacks; return every config's record, in the order given.
    With train=False, missing runs are an error that names them instead.

    Done runs are found by config hash, so a changed setting never gets a stale record. A corrupt
    record is reported by name, kept beside as `.corrupt`, and its run re-done. A run that was
    killed resumes from its last checkpoint. By default one process per core, one thread each;
    pass any concurrent.futures-style executor (e.g. a Dask client's) to run elsewhere.
    """
    results_dir = Path(results_dir)
    t0, started = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%S")
    records: dict[str, dict] = {}
    todo: list[RunConfig] = []
    for cfg in configs:
        path = record_path(results_dir, cfg)
        if path.exists():
            try:
                records[cfg.hash] = read_record(path)
                continue
            except CorruptRecord as e:
                keep = path.with_suffix(f".corrupt-{int(time.time())}")
                print(f"sweep: {e}; moved to {keep.name} and re-running {cfg.name}", file=sys.stderr)
                path.rename(keep)
        todo.append(cfg)
    if todo and not train:
        raise FileNotFoundError(
            f"{len(todo)} runs have no record in {results_dir} and training is off: "
            f"{', '.join(c.name for c in todo[:5])}{' ...' if len(todo) > 5 else ''}"
        )
    if todo:
        own = executor is None
        workers = min(max_workers or os.cpu_count() or 1, len(todo)) if own else None
        if own:
            executor = ProcessPoolExecutor(max_workers=workers)  # train_run uses one thread
        try:
            extensions = extension_classes(todo)
            futures = {
                executor.submit(run_and_save, cfg.to_dict(), str(results_dir), True, False, extensions): cfg
                for cfg in todo
            }
            for fut in _progress(as_completed(futures), len(futures), "sweep", progress):
                cfg = futures[fut]
                records[cfg.hash] = fut.result()
        finally:
            if own:
                executor.shutdown(cancel_futures=True)
        log = {
            "started": started,
            "wall_s": round(time.perf_counter() - t0, 1),
            "runs": len(configs),
            "tasks": sorted({c.task for c in configs}),
            "steps": sorted({c.steps for c in configs}),
            "trained": len(todo),
            "workers": workers,
            "executor": None if own else type(executor).__name__,
            "cpus": os.cpu_count(),
            "training_revision": TRAINING_REVISION,
        }
        with open(results_dir / "sweeps.jsonl", "a") as f:  # one line per sweep that trained: its wall time
            f.write(json.dumps(log) + "\n")
    return [records[cfg.hash] for cfg in configs]


# ---------------------------------------------------------------------------------------------
# 9. What every chapter shares: caches, compute, records read back, tables and figures (notebooks 03-11)
# ---------------------------------------------------------------------------------------------
# The core trains and records runs; the chapters read them. What they all read them with
# lives here: caches of computed tables, compute in copy runs, the records as frames, the
# paper's statistics, a run's model loaded back, and the exact-match-by-length figure.


def read_keyed_cache(path: str | Path | None, columns: Sequence[str], what: str) -> dict[tuple[str, ...], str]:
    """A CSV cache of one value per key (`columns`: the key's, then the value's), as {key: value},
    all as text: empty if `path` is None or absent; a file of other columns (not a `what` cache)
    is refused, never overwritten."""
    if path is None or not Path(path).exists():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != list(columns):
        raise ValueError(f"{path} is not a {what} cache (header {rows[:1]}, expected {list(columns)}); move it aside")
    return {tuple(r[:-1]): r[-1] for r in rows[1:]}


def write_keyed_cache(path: str | Path, columns: Sequence[str], entries: Mapping[tuple[str, ...], str]) -> None:
    """Every entry (key -> value, as `read_keyed_cache` gives them) to `path`, atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            csv.writer(f).writerows([list(columns), *([*k, v] for k, v in entries.items())])

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(Path(path), write)


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    """The median wall time, in seconds, of `repeats` calls of `fn`."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def training_step_flops(batch: Batch, cfg: ModelConfig, vocab_size: int = VOCAB_SIZE, computed: bool = False) -> float:
    """Useful FLOPs of one training step: matmuls over the real tokens only, causal attention
    over each real sequence, forward plus backward (= 3x forward). Padding counts as waste.
    With computed=True, what the model computes instead: every slot of every row, padding
    included, and attention over whole rows (the compute a run spends)."""
    d, L = cfg.d_model, cfg.n_layers
    seg = batch.segments[:, :-1]
    dense = 2 * (4 * d * d + 2 * d * cfg.d_ff) * L + 2 * d * vocab_size  # per token
    if computed:
        B, T = seg.shape
        return 3.0 * (B * T * dense + B * L * 2 * 2 * d * T * T)
    tokens = int((seg >= 0).sum())
    attention = 0
    for row in seg:
        for s in row.unique():
            if s >= 0:
                S = int((row == s).sum())
                attention += L * 2 * d * S * (S + 1)  # q.k and weights.v over t+1 keys, t = 0..S-1
    return 3.0 * (tokens * dense + attention)


# An estimate of a run's compute is a fixed function of its config (the batches are a seeded
# draw): each is kept in one file, keyed by the run's hash, the number of batches sampled and its
# name, so that a notebook reads it instead of drawing the batches again. None: every estimate afresh.
COMPUTE_CACHE: Path | None = RESULTS_DIR / "compute.csv"
COMPUTE_CACHE_COLUMNS = ["config_hash", "sample_steps", "name", "flops"]


def run_compute_flops(cfg: RunConfig, sample_steps: int = 200) -> float:
    """The FLOPs a run spends training (`training_step_flops(computed=True)` times its steps),
    estimated from its first `sample_steps` batches (read from `COMPUTE_CACHE` where it holds the
    estimate, else computed and added to it). The study states compute in copy runs: the FLOPs of
    one 5,000-step copy run of its model."""
    known = read_keyed_cache(COMPUTE_CACHE, COMPUTE_CACHE_COLUMNS, "compute")
    key = (cfg.hash, str(sample_steps), cfg.name)
    if key in known:
        return float(known[key])
    g, task = torch.Generator().manual_seed(cfg.seed), cfg.make_training_task()
    per_step = np.mean(
        [
            training_step_flops(training_batch(task, cfg, g, cfg.packed), cfg.model, task.vocab_size, computed=True)
            for _ in range(sample_steps)
        ]
    )
    flops = float(per_step * cfg.steps)
    if COMPUTE_CACHE is not None:
        write_keyed_cache(COMPUTE_CACHE, COMPUTE_CACHE_COLUMNS, known | {key: repr(flops)})
    return flops


def loss_at(record: dict[str, Any], step: int) -> float:
    """A record's training loss at `step`: the mean over the `loss_curve` interval ending there."""
    curve = record["loss_curve"]
    if step % curve["every"] or not 0 < step <= curve["every"] * len(curve["mean_loss"]):
        raise ValueError(
            f"{record['name']} logs its loss every {curve['every']} steps to step "
            f"{curve['every'] * len(curve['mean_loss'])}; no interval ends at {step}"
        )
    return float(curve["mean_loss"][step // curve["every"] - 1])


# A run whose loss is still falling at its last step has not finished learning: a comparison
# waits for it to train longer. "Still falling": down by more than a tenth over the last steps,
# while the cosine schedule brings the learning rate towards 0.
STILL_FALLING = 0.1


def still_falling(before: float, last: float, falling: float = STILL_FALLING) -> bool:
    """Whether a loss that went from `before` to `last` over a run's last steps is still falling:
    down by more than the fraction `falling`."""
    return last < (1 - falling) * before


# The study states compute in copy runs: the training FLOPs of one 5,000-step copy run of its
# model (NoPE, seed 0), estimated once per process from 100 sampled batches.
COPY_RUN_SAMPLE_STEPS = 100


@functools.cache
def copy_run_flops() -> float:
    """The FLOPs of one copy run, the study's unit of compute (`run_compute_flops` of copy, NoPE,
    seed 0, from `COPY_RUN_SAMPLE_STEPS` batches), computed once and cached."""
    return run_compute_flops(make_run("copy", "nope", 0), sample_steps=COPY_RUN_SAMPLE_STEPS)


def _listed(values: Iterable[Any]) -> str:
    """Distinct values in first-seen order, joined: "a, b" (numbers as they print with :g)."""
    seen = dict.fromkeys(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
    return ", ".join(seen)


def experiments_table(results_dir: str | Path = RESULTS_DIR) -> pd.DataFrame:
    """Every registered experiment, a row each, in the order registered: its runs and how many
    have a record under `results_dir`, its tasks, encodings, seeds, models (layers x d_model),
    steps and learning rates, its results folder and the notebook that reads it."""
    rows = []
    for exp in EXPERIMENTS.values():
        runs, folder = exp.runs(), exp.results_dir(results_dir)
        rows.append(
            {
                "experiment": exp.name,
                "runs": len(runs),
                "recorded": sum(record_path(folder, c).exists() for c in runs),
                "tasks": _listed(c.task for c in runs),
                "encodings": _listed(c.encoding for c in runs),
                "seeds": _listed(c.seed for c in runs),
                "model": _listed(f"{c.model.n_layers}x{c.model.d_model}" for c in runs),
                "steps": _listed(c.steps for c in runs),
                "learning rate": _listed(c.lr for c in runs),
                "folder": f"results/{exp.folder}".rstrip("/."),
                "notebook": exp.notebook,
            }
        )
    return pd.DataFrame(rows).set_index("experiment")


def under_results(path: Path) -> str:
    """A chapter's results folder as an experiment names it: relative to `RESULTS_DIR`."""
    return path.relative_to(RESULTS_DIR).as_posix()


def trained_runs_of(task: str, results_dir: str | Path | None = None) -> list[tuple[str, RunConfig, dict[str, Any]]]:
    """(experiment, config, record) for every trained run of `task` (its name, in any format) in
    every experiment, in the table's order; a run in two experiments stands once, where first
    listed. `results_dir`: the results root (`RESULTS_DIR` if None)."""
    seen, out = set(), []
    for name, e in EXPERIMENTS.items():
        for cfg in e.runs():
            path = record_path(e.results_dir(RESULTS_DIR if results_dir is None else results_dir), cfg)
            if cfg.task == task and cfg.hash not in seen and path.exists():
                seen.add(cfg.hash)
                out.append((name, cfg, read_record(path)))
    return out


PUBLISHED_DIR = RESULTS_DIR / "published"


def load_records(
    configs: Sequence[RunConfig] | None = None, results_dir: str | Path = RESULTS_DIR
) -> list[dict[str, Any]]:
    """The records of `configs` (default: the study's grid); names what is missing or corrupt."""
    configs = grid() if configs is None else configs
    missing = [c.name for c in configs if not record_path(Path(results_dir), c).exists()]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} of {len(configs)} runs have no record in {results_dir} (e.g. {', '.join(missing[:3])}); "
            "run `make study` or `python -m lengen_helpers sweep` to train them"
        )
    return [read_record(record_path(Path(results_dir), c)) for c in configs]


def load_available(configs: Sequence[RunConfig], results_dir: str | Path = RESULTS_DIR):
    """(the records of `configs` that exist, the names of those that do not): for a report on a
    grid still being trained."""
    have = [c for c in configs if record_path(Path(results_dir), c).exists()]
    return [read_record(record_path(Path(results_dir), c)) for c in have], [c.name for c in configs if c not in have]


def training_rows(df):
    """The rows of an `exact_match_frame` at its tasks' training sizes (n up to each task's L)."""
    return df[df["n"] <= df["task"].map(lambda t: task_of_key(t).train_max_size)]


def learned_in_distribution(df, bar: float = 0.9):
    """Per task: the best encoding's mean exact match (over seeds) at the training sizes, and whether
    it reaches `bar` (the study's test of whether a task is learned at all)."""
    best = training_rows(df).groupby(["task", "encoding"])["exact_match"].mean().groupby(level="task").max()
    return pd.DataFrame({"best in-distribution exact match (%)": (100 * best).round(1), "learned": best >= bar})


def exact_match_frame(records: Sequence[dict[str, Any]]):
    """Long table: one row per (task, encoding, seed, n) with exact match in [0, 1]."""
    rows = [
        {
            "task": get_task(r["config"]["task"], r["config"].get("task_options")).key,  # with its format
            "encoding": r["config"]["model"]["encoding"],
            "seed": r["config"]["seed"],
            "n": int(n),
            "exact_match": v,
        }
        for r in records
        for n, v in r["exact_match"].items()
    ]
    order = {e: i for i, e in enumerate(ENCODINGS)}  # registry order: nope, sinusoidal, learned, ...
    df = pd.DataFrame(rows, columns=["task", "encoding", "seed", "n", "exact_match"])  # columns even when empty
    df = df.astype({"seed": "int64", "n": "int64", "exact_match": "float64"})
    return df.sort_values(
        ["task", "encoding", "seed", "n"], key=lambda c: c.map(order) if c.name == "encoding" else c, ignore_index=True
    )


def longest_at_least(em_by_n: dict[int, float], threshold: float = 0.9) -> int:
    """The largest n such that every length 1..n scores at least `threshold` (0 if n = 1 fails)."""
    longest = 0
    for n in sorted(em_by_n):
        if em_by_n[n] < threshold:
            break
        longest = n
    return longest


def reach_summary(
    table,
    keys: Sequence[str],
    train_max: int = 16,
    at: Sequence[int] = (),
    window: tuple[int, int] | None = None,
    threshold: float = 0.9,
    columns: Sequence[str] = ("exact_match",),
):
    """How far each group of a long table (one row per size n; grouped by `keys`) reaches, in %:
    for each of `columns`, the mean over the training sizes (n <= train_max), the value at each n
    in `at`, the mean over the `window` of sizes, and the longest n up to which every size keeps
    `threshold` (`longest_at_least`). Columns other than exact match are named by a suffix (the
    failure anatomy's `length_given`: ", length given"). The one summary of reach the study uses."""
    rows = []
    for key, g in table.groupby(list(keys), sort=False):
        g = g.set_index("n").sort_index()
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        for column in columns:
            v, suffix = g[column], "" if column == "exact_match" else ", " + column.replace("_", " ")
            inside = v[v.index <= train_max]
            row[f"n = {int(inside.index.min())}-{train_max}{suffix}"] = 100 * inside.mean()
            row.update({f"n = {n}{suffix}": 100 * v[n] if n in v.index else float("nan") for n in at})
            if window is not None:
                row[f"n = {window[0]}-{window[1]}{suffix}"] = 100 * v.loc[window[0] : window[1]].mean()
            row[f"longest n >= {threshold:.0%}{suffix}"] = longest_at_least(v.to_dict(), threshold)
        rows.append(row)
    return pd.DataFrame(rows)


def ood_rows(df, test_lengths: Sequence[int] | None = range(17, 33)):
    """The rows of `df` at the test lengths: `test_lengths` for every task, or with None each
    task's own, L+1 to 2L for its training length L (17-32 for copy and reverse, 9-16 for the
    paper's other tasks)."""
    if test_lengths is not None:
        return df[df["n"].isin(list(test_lengths))]
    top = df["task"].map(lambda t: task_of_key(t).train_max_size)
    return df[(df["n"] > top) & (df["n"] <= 2 * top)]


def column_reciprocal_ranks(scores, order: Sequence[str] | None = None):
    """1 / rank within each row of `scores` (1 = best). `order` None: ties share the average rank;
    else only the encodings in `order`, a tie going to the one listed first (the paper's rule)."""
    if order is None:
        return 1.0 / scores.rank(axis=1, ascending=False, method="average")
    return 1.0 / scores[list(order)].rank(axis=1, ascending=False, method="first")


def pairwise_above(boot: np.ndarray, names: Sequence[str], higher_is_better: bool = True):
    """P(row's statistic is better than column's) over the resamples; ties count half."""
    b = boot if higher_is_better else -boot
    p = (b[:, :, None] > b[:, None, :]).mean(0) + 0.5 * (b[:, :, None] == b[:, None, :]).mean(0)
    np.fill_diagonal(p, np.nan)
    return pd.DataFrame(p, index=list(names), columns=list(names))


def paper_figures(path: Path | None = None) -> dict[str, Any]:
    """The paper's published numbers, as quoted in results/published/paper.json."""
    return json.loads(Path(path or PUBLISHED_DIR / "paper.json").read_text())


def load_run_model(
    cfg: RunConfig, results_dir: str | Path = RESULTS_DIR, into: RunConfig | None = None
) -> DecoderOnlyLM:
    """The trained model of any run, from its saved weights (loaded with weights_only=True), in a
    model built from `cfg`, or from `into` (the same weights under another evaluation setting)."""
    path = weights_path(Path(results_dir), cfg)
    if not path.exists():
        raise FileNotFoundError(f"no weights for {cfg.name} at {path}; run the sweep (make study) first")
    model = make_model(cfg if into is None else into)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.eval()


def _cached_rows(cache: Path | None, current: dict[tuple, tuple], hash_cols: Sequence[str]):
    """Rows of a cached CSV, minus those for a wanted (task, encoding, seed) whose models changed.

    Each row names its models by config hash (`hash_cols`); a row whose key is in `current` but
    whose hashes differ was computed from other weights (an older grid) and is dropped, to be
    recomputed. Rows for keys not asked about now are kept as they are."""
    if cache is None or not Path(cache).exists():
        return pd.DataFrame()
    done = pd.read_csv(cache, dtype={c: str for c in hash_cols})  # hex digits, never numbers
    if not set(hash_cols) <= set(done.columns):
        return pd.DataFrame()  # written before rows named their models: recompute everything
    keys = zip(done["task"], done["encoding"], done["seed"])
    stale = [k in current and current[k] != tuple(h) for k, h in zip(keys, done[list(hash_cols)].values)]
    if any(stale):
        print(f"{Path(cache).name}: {sum(stale)} rows were computed from other weights; recomputing them")
    return done[[not s for s in stale]].reset_index(drop=True)


def per_model_table(
    compute: Callable[[DecoderOnlyLM, str], Any],
    tasks: Sequence[str],
    encodings: Sequence[str] | None,
    seeds: Sequence[int],
    results_dir: str | Path,
    cache: Path | None,
    run: Callable[[str, str, int], RunConfig] = make_run,
    reference: Callable[[str, str, int], RunConfig] | None = None,
):
    """The rows `compute(model, task)` gives (a DataFrame) for each trained model of the tasks,
    encodings (default: every registered one) and seeds, each row with its task, encoding, seed and
    config hash. The models are the grid's, or those `run(task, encoding, seed)` names (compute
    then gets the run's own task). With `reference`, compute also gets the model it names, as a
    third argument, and rows carry its hash too. Computed once from the saved weights and cached
    as CSV: rows whose models have other weights now are recomputed (`_cached_rows`), rows for
    models not asked about are kept."""
    encodings = encoding_names() if encodings is None else encodings
    configs = {(t, e, s): run(t, e, s) for t in tasks for e in encodings for s in seeds}
    refs = {key: reference(*key) for key in configs} if reference is not None else {}
    current = {key: (cfg.hash, *((refs[key].hash,) if refs else ())) for key, cfg in configs.items()}
    done = _cached_rows(cache, current, ["config_hash", *(["reference_hash"] if refs else [])])
    have = set(zip(done["task"], done["encoding"], done["seed"])) if len(done) else set()
    parts = [done]
    for (task, enc, seed), hashes in current.items():
        if (task, enc, seed) not in have:
            cfg = configs[task, enc, seed]
            models = [load_run_model(c, results_dir) for c in (cfg, *([refs[task, enc, seed]] if refs else []))]
            rows = compute(models[0], cfg.task, *models[1:])
            names = dict(zip(["config_hash", "reference_hash"], hashes))
            parts.append(rows.assign(task=task, encoding=enc, seed=seed, **names))
    table = pd.concat(parts, ignore_index=True)
    if len(parts) > 1 and cache is not None:
        _atomic_write(Path(cache), lambda p: table.to_csv(p, index=False))
    want = table["task"].isin(tasks) & table["encoding"].isin(encodings) & table["seed"].isin(list(seeds))
    return table[want].reset_index(drop=True)


def _sequence_index(segments: Tensor) -> tuple[Tensor, Tensor]:
    """Each token's sequence, numbered across the batch (B, T; padding takes its row's first
    number, so mask it with segments >= 0), and each sequence's length in tokens."""
    per_row = int(segments.max()) + 1 if segments.numel() else 1
    seq = torch.arange(segments.shape[0])[:, None] * per_row + segments.clamp_min(0)
    real = seq[segments >= 0]
    return seq, torch.zeros(segments.shape[0] * per_row, dtype=torch.long).index_add_(0, real, torch.ones_like(real))


def with_blanks(table, blank: str = "—", decimals: int | None = None):
    """`table` for reading: a cell with nothing to show (NaN: no such pair, size or figure) prints
    as `blank` instead of NaN. A float column is written with `decimals` decimals, or (None) with
    the most any of its cells needs (round the table first), one number for the whole column as a
    float column prints (1.00 beside 0.91, not 1.0)."""

    def needed(x: float) -> int:
        text = repr(float(x))
        return 0 if "e" in text or text.endswith(".0") else len(text.split(".")[1])

    out = table.astype(object).where(table.notna(), blank)
    for j, (_, col) in enumerate(table.items()):
        if pd.api.types.is_float_dtype(col) and col.notna().any():
            d = decimals if decimals is not None else max(1, min(6, max(needed(v) for v in col.dropna())))
            out.iloc[:, j] = [blank if pd.isna(v) else f"{v:.{d}f}" for v in col]
    return out


def plot_by_length(
    table,
    value: str,
    ylabel: str,
    title: str,
    path: Path | None = None,
    train_max: int | dict[str, int] = 16,
    scale: float = 1.0,
    band: bool = True,
    line_label: Callable[[str], str] | None = None,
    ylim: tuple[float, float] | None = None,
    colors: dict[str, str] | None = None,
    styles: dict[str, str] | None = None,
    xlabel: str | dict[str, str] = "input length n (symbols)",
    titles: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
    baselines: dict[str, Any] | None = None,
    baseline_label: str = "baseline",
    shared_legend: bool = False,
    xlim: tuple[float, float] | None = None,
):
    """One panel per task (three to a row), one line per encoding against n: the mean over seeds
    of `value` (times `scale`), a min-max band over seeds, and the longest training length marked
    (`train_max`: one for every panel, or one per task). Optional: a panel title per task
    (`titles`, else the task's key), an x label for every panel or one per task (`xlabel`, a
    task missing from the dict gets "size n"), a note written in a panel (`notes`), a baseline per task
    (`baselines`: a Series n -> value, drawn grey), and one legend for the figure instead of one
    per panel (`shared_legend`: every panel then shows the same encodings; it fills the first
    empty panel where the grid has one, else sits below); `xlim` zooms every
    panel to a range of n, with a tick at each integer."""
    tasks = list(dict.fromkeys(table["task"]))
    cols = min(3, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), sharey=True, squeeze=False)
    spare = list(axes.flat[len(tasks) :])
    for ax in spare[1 if shared_legend else 0 :]:
        ax.remove()
    handles: dict[str, Any] = {}
    for ax, task in zip(axes.flat, tasks):
        for enc, g in table[table["task"] == task].groupby("encoding", sort=False):
            stats = g.groupby("n")[value].agg(["mean", "min", "max"]) * scale
            k = g["seed"].nunique()
            name = line_label(enc) if line_label else f"{encoding_title(enc)} ({k} seed{'s' if k != 1 else ''})"
            ls = (styles or {}).get(enc, "--" if "floor" in name else "-")
            color = (colors or {}).get(enc) or encoding_color(enc)
            ax.plot(stats.index, stats["mean"], color=color, ls=ls, label=name)
            if band:
                ax.fill_between(stats.index, stats["min"], stats["max"], color=color, alpha=0.15)
        top = train_max[task] if isinstance(train_max, dict) else train_max
        each = shared_legend and isinstance(train_max, dict)  # one legend, a size per panel
        where = "longest training size (each panel's)" if each else f"longest training n = {top}"
        ax.axvline(top, color="black", ls=":", lw=1, label=where)
        if baselines is not None and task in baselines:
            base = baselines[task] * scale
            ax.plot(base.index, base.to_numpy(), color="gray", ls="-.", lw=1.2, label=baseline_label)
        if notes is not None and task in notes:
            box = dict(boxstyle="round", facecolor="white", edgecolor="gray", alpha=0.9)
            ax.text(0.97, 0.95, notes[task], transform=ax.transAxes, ha="right", va="top", fontsize=9, bbox=box)
        xl = xlabel.get(task, "size n") if isinstance(xlabel, dict) else xlabel
        ax.set(title=f"{(titles or {}).get(task, task)}: {title}", xlabel=xl, ylabel=ylabel)
        if ylim is not None:
            ax.set_ylim(*ylim)
        if xlim is not None:
            ax.set_xlim(*xlim)
            ax.set_xticks(range(math.ceil(xlim[0]), math.floor(xlim[1]) + 1))
        if shared_legend:
            handles |= dict(zip(*reversed(ax.get_legend_handles_labels())))
        else:
            ax.legend(fontsize=8)
    if shared_legend and spare:  # the legend takes the first empty panel
        spare[0].axis("off")
        spare[0].legend(handles.values(), handles.keys(), loc="center", fontsize=11, frameon=False)
        fig.tight_layout()
    elif shared_legend:
        ncol = min(4, len(handles))
        fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=ncol, fontsize=10)
        legend_rows = math.ceil(len(handles) / ncol)  # about 0.27 inch a row, below the x labels
        fig.tight_layout(rect=(0, (0.15 + 0.27 * legend_rows) / fig.get_figheight(), 1, 1))
    else:
        fig.tight_layout()
    save_figure(fig, path)
    return fig


# ---------------------------------------------------------------------------------------------
# 10. Verification against PyTorch, and pictures (notebooks 01 and 02)
# ---------------------------------------------------------------------------------------------
# The original encoder-decoder Transformer, built from the same blocks, and loaders that copy
# PyTorch's own modules' weights into ours, so that outputs can be compared; then the checks
# notebook 02 prints (and the tests assert), and notebook 01's pictures.
class DecoderBlock(Block):
    """The original Transformer's decoder block: self-attention, cross-attention to the encoder's
    output (`memory`), feed-forward; each a residual, post- or pre-LN."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, pre_norm: bool, dropout: float = 0.0):
        super().__init__(d_model, n_heads, d_ff, pre_norm, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.norm_cross = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None = None, mask: Tensor | None = None):
        """x (B, T, d) -> (B, T, d), attending to itself under `mask` and to `memory` under
        `memory_mask`; no attention weights are returned (None)."""
        h, _ = self.self_attn(self._sublayer_input(x, self.norm1), mask)
        x = self._residual(x, h, self.norm1)
        h, _ = self.cross_attn(self._sublayer_input(x, self.norm_cross), memory_mask, memory=memory)
        x = self._residual(x, h, self.norm_cross)
        return self._residual(x, self.ffn(self._sublayer_input(x, self.norm2)), self.norm2), None


class Seq2SeqTransformer(nn.Module):
    """The original encoder-decoder Transformer (Vaswani et al. 2017) from the same blocks.

    Sinusoidal positions added to sqrt(d)-scaled embeddings; the encoder sees all of the source
    (minus padding), the decoder is causal and cross-attends to the encoder's output. Like
    torch.nn.Transformer, both stacks end in a LayerNorm.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 3,
        d_ff: int = 256,
        pre_norm: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.d_model = d_model
        self.src_emb = nn.Embedding(src_vocab, d_model)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_model)
        self.encoder = nn.ModuleList(Block(d_model, n_heads, d_ff, pre_norm, dropout) for _ in range(n_layers))
        self.decoder = nn.ModuleList(DecoderBlock(d_model, n_heads, d_ff, pre_norm, dropout) for _ in range(n_layers))
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.generator = nn.Linear(d_model, tgt_vocab)
        self.drop = nn.Dropout(dropout)

    def _embed(self, emb: nn.Embedding, tokens: Tensor) -> Tensor:
        x = emb(tokens) * math.sqrt(self.d_model)
        return self.drop(x + sinusoidal_table(torch.arange(tokens.shape[1], device=tokens.device), self.d_model))

    def encode(self, src: Tensor) -> Tensor:
        x, mask = self._embed(self.src_emb, src), padding_mask(src)
        for block in self.encoder:
            x, _ = block(x, mask=mask)
        return self.encoder_norm(x)

    def decode(self, tgt: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        x = self._embed(self.tgt_emb, tgt)
        mask = causal_mask(tgt.shape[1], device=tgt.device)
        for block in self.decoder:
            x, _ = block(x, memory=memory, memory_mask=padding_mask(src), mask=mask)
        return self.decoder_norm(x)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        return self.generator(self.decode(tgt, self.encode(src), src))

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, max_len: int, bos: int = BOS, eos: int = EOS) -> Tensor:
        memory = self.encode(src)
        out = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            nxt = self.generator(self.decode(out, memory, src)[:, -1]).argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
            if bool((out == eos).any(dim=1).all()):
                break
        return out


# PyTorch's own modules serve as references: copy their weights into ours, compare outputs.


def load_mha_weights(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """Copy torch.nn.MultiheadAttention's weights into ours (same stacked q, k, v layout)."""
    with torch.no_grad():
        ours.in_proj.weight.copy_(ref.in_proj_weight)
        ours.in_proj.bias.copy_(ref.in_proj_bias)
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        ours.out_proj.bias.copy_(ref.out_proj.bias)


def _load_block(ours: Block, ref: nn.Module) -> None:
    load_mha_weights(ours.self_attn, ref.self_attn)
    norms = [(ours.norm1, ref.norm1), (ours.norm2, ref.norm2)]
    if isinstance(ours, DecoderBlock):  # decoder layer: norm1 self, norm2 cross, norm3 feed-forward
        load_mha_weights(ours.cross_attn, ref.multihead_attn)
        norms = [(ours.norm1, ref.norm1), (ours.norm_cross, ref.norm2), (ours.norm2, ref.norm3)]
    with torch.no_grad():
        for mine, theirs in norms + [(ours.ffn[0], ref.linear1), (ours.ffn[3], ref.linear2)]:
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)


def load_torch_transformer_weights(ours: Seq2SeqTransformer, ref: nn.Transformer) -> None:
    """Copy every weight of torch.nn.Transformer (batch_first, ReLU) into our encoder-decoder."""
    for mine, theirs in zip(ours.encoder, ref.encoder.layers):
        _load_block(mine, theirs)
    for mine, theirs in zip(ours.decoder, ref.decoder.layers):
        _load_block(mine, theirs)
    with torch.no_grad():
        for mine, theirs in [(ours.encoder_norm, ref.encoder.norm), (ours.decoder_norm, ref.decoder.norm)]:
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)


@torch.no_grad()
def torch_transformer_reference(ours: Seq2SeqTransformer, ref: nn.Transformer, src: Tensor, tgt: Tensor) -> Tensor:
    """torch.nn.Transformer's decoder output on our embeddings of (src, tgt), to compare with ours.decode."""
    src_pad = src == PAD
    return ref(
        ours._embed(ours.src_emb, src),
        ours._embed(ours.tgt_emb, tgt),
        tgt_mask=~causal_mask(tgt.shape[1]),
        src_key_padding_mask=src_pad,
        memory_key_padding_mask=src_pad,
    )


@dataclass
class Check:
    """A numerical check: its largest absolute difference against a reference, and a tolerance."""

    name: str
    max_abs_diff: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def row(self) -> dict[str, str]:
        """What is checked and its verdict, the same on every CPU: the tolerance and pass/FAIL.
        The difference itself is left out; its last bits depend on which kernels the CPU runs
        (AVX2, AVX-512, ...), so printing it would make the notebook's output machine-dependent."""
        tol = "exact" if self.tolerance == 0 else f"max |diff| <= {self.tolerance:.0e}"
        return {"check": self.name, "tolerance": tol, "result": "pass" if self.passed else "FAIL"}


def _maxdiff(a: Tensor, b: Tensor) -> float:
    return float((a - b).detach().abs().max())


def check_attention_vs_torch(seed: int = 0) -> list[Check]:
    """Our written-out attention against F.scaled_dot_product_attention, four ways."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, 7, 16, generator=g) for _ in range(3))
    pad = padding_mask(torch.tensor([[5] * 7, [5] * 4 + [PAD] * 3]))
    bias = ENCODINGS["alibi"](ModelConfig(encoding="alibi")).bias(torch.arange(7), torch.arange(7))
    cases = {
        "no mask": (None, None),
        "causal mask": (causal_mask(7), None),
        "padding mask": (pad, None),
        "causal mask + ALiBi bias": (causal_mask(7), bias),
    }
    out = []
    for name, (mask, b) in cases.items():
        ours, _ = scaled_dot_product_attention(q, k, v, mask, b)
        attn_mask = mask if b is None else b.masked_fill(~mask, float("-inf"))
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        out.append(Check(f"attention vs F.scaled_dot_product_attention, {name}", _maxdiff(ours, ref), 1e-5))
    return out


def check_mha_vs_torch(seed: int = 0) -> list[Check]:
    """Our multi-head attention against nn.MultiheadAttention with the same weights."""
    torch.manual_seed(seed)
    ref, ours = nn.MultiheadAttention(64, 4, batch_first=True).eval(), MultiHeadAttention(64, 4).eval()
    load_mha_weights(ours, ref)
    x, mem, mask = torch.randn(3, 10, 64), torch.randn(3, 12, 64), causal_mask(10)
    r, rw = ref(x, x, x, attn_mask=~mask, average_attn_weights=False)
    o, ow = ours(x, mask=mask, need_weights=True)
    rc, _ = ref(x, mem, mem)
    oc, _ = ours(x, memory=mem)
    return [
        Check("multi-head attention vs nn.MultiheadAttention, causal: output", _maxdiff(o, r), 1e-5),
        Check("multi-head attention vs nn.MultiheadAttention, causal: weights", _maxdiff(ow, rw), 1e-5),
        Check("multi-head cross-attention vs nn.MultiheadAttention", _maxdiff(oc, rc), 1e-5),
    ]


def check_seq2seq_vs_torch(pre_norm: bool, seed: int = 0) -> Check:
    """Our encoder-decoder against nn.Transformer with every weight copied across."""
    torch.manual_seed(seed)
    ours = Seq2SeqTransformer(VOCAB_SIZE, VOCAB_SIZE, pre_norm=pre_norm).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ref = nn.Transformer(64, 4, 3, 3, 256, dropout=0.0, batch_first=True, norm_first=pre_norm).eval()
    load_torch_transformer_weights(ours, ref)
    src, tgt = torch.randint(N_SPECIAL, VOCAB_SIZE, (4, 11)), torch.randint(N_SPECIAL, VOCAB_SIZE, (4, 9))
    src[1, 7:] = PAD
    with warnings.catch_warnings():  # PyTorch's notes on its nested-tensor fast path
        warnings.simplefilter("ignore", UserWarning)
        diff = _maxdiff(ours.decode(tgt, ours.encode(src), src), torch_transformer_reference(ours, ref, src, tgt))
    return Check(f"encoder-decoder vs nn.Transformer ({'pre' if pre_norm else 'post'}-LN)", diff, 1e-4)


@torch.no_grad()
def check_masks() -> list[Check]:
    """The causal mask against PyTorch's, and padding: no attention weight lands on a PAD key."""
    ref = ~torch.isinf(nn.Transformer.generate_square_subsequent_mask(12))
    m = DecoderOnlyLM(ModelConfig())
    model_weights = m(torch.randint(N_SPECIAL, VOCAB_SIZE, (2, 12)), return_internals=True)[1].attentions
    above_diagonal = max(float(w.triu(1).abs().max()) for w in model_weights)
    src = torch.tensor([[5, 6, 7, PAD, PAD]])
    _, w = MultiHeadAttention(64, 4)(torch.randn(1, 5, 64), mask=padding_mask(src), need_weights=True)
    return [
        Check(
            "causal mask vs nn.Transformer.generate_square_subsequent_mask", float((causal_mask(12) != ref).sum()), 0.0
        ),
        Check("decoder attention weight above the diagonal (every layer)", above_diagonal, 0.0),
        Check("attention weight on PAD keys under the padding mask", float(w[..., 3:].abs().max()), 0.0),
    ]


@torch.no_grad()
def perturb_weights(model: nn.Module, scale: float = 0.1) -> nn.Module:
    """Every weight moved off its initial value by `scale` x N(0, 1) noise (torch's global
    generator), so that biases and position tables matter in a check; returns the model."""
    for p in model.parameters():
        p.add_(scale * torch.randn_like(p))
    return model


def check_cache(
    encoding: str, batch: int = 8, prompt_len: int = 16, new_tokens: int = 32, seed: int = 0, kind: str = "auto"
) -> Check:
    """Cached (`kind` as in `new_cache`) against uncached greedy generation: tokens must be
    identical, logits within 1e-5."""
    torch.manual_seed(seed)
    m = perturb_weights(DecoderOnlyLM(ModelConfig(encoding=encoding)).eval())
    prompt = torch.randint(N_SPECIAL, VOCAB_SIZE, (batch, prompt_len))
    a, la = generate(m, prompt, new_tokens, use_cache=True, return_logits=True, cache_kind=kind)
    b, lb = generate(m, prompt, new_tokens, use_cache=False, return_logits=True)
    diff = _maxdiff(la, lb) if torch.equal(a, b) else float("inf")
    cache = new_cache(m, batch, 1, kind).kind  # what "auto" chose
    return Check(f"{cache} cache vs uncached generation, {encoding} (tokens identical; logits)", diff, 1e-5)


def check_exact_match(
    model: DecoderOnlyLM, model_name: str, task: str = "reverse", lengths: Sequence[int] = (4, 6, 8, 12), n: int = 128
) -> tuple[Check, int]:
    """Teacher-forced exact match against step-by-step greedy decoding, row by row.
    Returns the check and how many rows were exactly right (of len(lengths) * n)."""
    disagree, right = 0, 0
    for length in lengths:
        batch = single_length_batch(get_task(task), length, n, eval_generator(task, length, 99))
        fast, slow = exact_match_rows(model, batch), greedy_exact_match(model, batch)
        disagree += int((fast != slow).sum())
        right += int(fast.sum())
    return Check(
        f"teacher-forced exact match vs greedy decoding, {model_name} (rows that differ)", float(disagree), 0.0
    ), right


def parameter_counts():
    """Trainable weights of the study's model under each encoding (a pandas table)."""
    rows = []
    for enc in encoding_names():
        m = DecoderOnlyLM(ModelConfig(encoding=enc))
        rows.append(
            {
                "encoding": enc,
                "parameters": m.num_parameters(),
                "of which positional": sum(p.numel() for p in m.pos.parameters()),
            }
        )
    return pd.DataFrame(rows).set_index("encoding")


# What notebooks 01 and 02 show: the checks' table and the encodings' picture.
def checks_table(checks: Sequence[Check]):
    return pd.DataFrame([c.row() for c in checks]).set_index("check")


def plot_encodings(path: Path | None = None):
    """One picture per encoding family: sinusoidal table, RoPE, ALiBi bias, T5 buckets."""
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    im = ax[0, 0].imshow(sinusoidal_table(torch.arange(99), 64).T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    ax[0, 0].set(title="Sinusoidal: table added to the embeddings", xlabel="position", ylabel="dimension")
    fig.colorbar(im, ax=ax[0, 0], label="value")
    q = torch.ones(1, 1, 1, 16)
    distance = torch.arange(0, 99)
    for frac, style in [(1.0, "-"), (0.25, "--")]:
        rot = Rotary(ModelConfig(encoding="rope", rope_fraction=frac))
        scores = [
            (rot.rotary(torch.tensor([int(d)]))(q) * rot.rotary(torch.tensor([0]))(q)).sum().item() / 16
            for d in distance
        ]
        ax[0, 1].plot(distance, scores, style, color=encoding_color("rope"), label=f"RoPE, rotating {frac:.0%} of dims")
    ax[0, 1].set(
        title="RoPE: score of q = k = 1 against distance",
        xlabel="query - key distance",
        ylabel="q.k / dh after rotation",
    )
    ax[0, 1].legend()
    alibi = ENCODINGS["alibi"](ModelConfig(encoding="alibi")).bias(torch.arange(20), torch.arange(20))[0]
    masked = alibi.masked_fill(~causal_mask(20), float("nan"))
    im = ax[1, 0].imshow(masked[0], cmap="viridis")
    ax[1, 0].set(
        title=f"ALiBi: bias of head 1 (slope {alibi_slopes(4)[0]:.2f}) under the causal mask",
        xlabel="key position",
        ylabel="query position",
    )
    for axis in (ax[1, 0].xaxis, ax[1, 0].yaxis):  # positions are integers
        axis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(im, ax=ax[1, 0], label="bias added to the logit")
    d = torch.arange(0, 200)
    ax[1, 1].plot(d, t5_bucket(d), color=encoding_color("t5"), label="T5 bias: 32 buckets, max distance 128")
    ax[1, 1].axvline(16, color="gray", ls=":", label="exact up to 15")
    ax[1, 1].axvline(128, color="gray", ls="--", label="max distance 128")
    ax[1, 1].set(
        title="T5: distance -> bucket (a learned bias per bucket, head)", xlabel="query - key distance", ylabel="bucket"
    )
    ax[1, 1].legend()
    fig.tight_layout()
    save_figure(fig, path)
    return fig


# ---------------------------------------------------------------------------------------------
# 11. The grid: its runs, its tables, figures and claims, and training's speed (notebooks 03 and 04)
# ---------------------------------------------------------------------------------------------
# The grid itself (`grid`) is the core's; here are the analyses notebooks 03 and 04 add to the
# shared ones, the sinusoidal ablation, and the benchmark of a training step.


def per_run_metrics(df, train_max: int = 16, at: Sequence[int] = (16, 17, 18, 20, 24)):
    """One row per run: mean exact match over n = 1..train_max, at each length in `at`, and the
    longest n whose every shorter length is at least 90% (all in %, lengths in tokens)."""
    return reach_summary(df, ["task", "encoding", "seed"], train_max, at)


def reciprocal_ranks(df, test_lengths: Sequence[int] | None = range(17, 33)):
    """One row per (task, seed) column, one column per encoding: 1 / rank of the encoding's mean
    exact match over the test lengths in that column (1 = best; ties share the average rank).
    A column that lacks an encoding (a grid still being trained) is left out: it cannot rank them all."""
    acc = ood_rows(df, test_lengths).groupby(["task", "seed", "encoding"])["exact_match"].mean().unstack("encoding")
    return column_reciprocal_ranks(acc.dropna())


def mean_reciprocal_rank(df, test_lengths: Sequence[int] | None = range(17, 33)):
    """The paper's aggregate: each encoding's reciprocal rank averaged over the (task, seed) columns."""
    return reciprocal_ranks(df, test_lengths).mean().sort_values(ascending=False).rename("mean reciprocal rank")


# Uncertainty: the seeds are a sample, so every ranking is resampled. A bootstrap draws the units
# (seeds, or (task, seed) columns) with replacement and recomputes the statistic; a claim that
# "A ranks above B" is stated as a finding only if it holds in at least the share
# `CLAIM_THRESHOLD` of the resamples.
CLAIM_THRESHOLD = 0.9


def bootstrap_means(units, n_boot: int = 10000, seed: int = 0) -> np.ndarray:
    """(n_boot, columns): column means of `units` (rows = resampling units) over resampled rows."""
    values = np.asarray(units, dtype=float)
    draws = np.random.default_rng(seed).integers(0, len(values), size=(n_boot, len(values)))
    return values[draws].mean(axis=1)


def mrr_units(df, unit: str, test_lengths: Sequence[int] | None = range(17, 33)):
    """The rows a bootstrap of the mean reciprocal rank resamples: unit="column", one row per
    (task, seed) column; unit="seed", one row per seed (its columns on every task, averaged)."""
    rr = reciprocal_ranks(df, test_lengths)
    if unit == "column":
        return rr
    if unit == "seed":
        return rr.groupby(level="seed").mean()
    raise _unknown("bootstrap unit", unit, ["column", "seed"])


def accuracy_units(df, task: str, test_lengths: Sequence[int] | None = range(17, 33)):
    """One row per seed, one column per encoding: mean exact match over the test lengths on `task`
    (the units of a per-task bootstrap)."""
    test = ood_rows(df[df["task"] == task], test_lengths)
    return test.groupby(["seed", "encoding"])["exact_match"].mean().unstack("encoding")


def paper_rankings(path: Path | None = None) -> dict[str, list[str]]:
    """The paper's order of the encodings (best first): per task from its copy and reverse test exact
    match, and over its ten tasks from its mean reciprocal rank."""
    paper = paper_figures(path)
    order = lambda d: sorted(d, key=d.get, reverse=True)  # noqa: E731
    out = {task: order(v) for task, v in paper["ood_exact_match_mean_of_3_seeds"].items()}
    out["ten tasks (MRR)"] = order(paper["mean_reciprocal_rank_no_scratchpad"])
    return out


def training_inputs(cfg: RunConfig, max_len: int) -> dict[int, set[tuple[int, ...]]]:
    """Every input sequence of length <= max_len that a run's training draws, replayed from its
    data seed (the batches' own order of draws: lengths, then each length's inputs, shortest first)."""
    task, g = cfg.make_training_task(), torch.Generator().manual_seed(cfg.seed)
    seen: dict[int, set[tuple[int, ...]]] = {n: set() for n in range(1, max_len + 1)}
    for _ in range(cfg.steps):
        for n, idx in _draw_groups(training_lengths(cfg, g)).items():
            x, _ = task.sample(n, len(idx), g)
            if n <= max_len:
                seen[n].update(map(tuple, x.tolist()))
    return seen


def eval_training_overlap(configs: Sequence[RunConfig], max_len: int = 6):
    """Per length n <= max_len: how many of the evaluation's sequences the runs' training also drew
    (mean over `configs`, in %), beside how many distinct inputs of length n exist."""
    rows = []
    for cfg in configs:
        seen = training_inputs(cfg, max_len)
        for n in range(1, max_len + 1):
            task = cfg.make_task()
            batch = single_length_batch(task, n, cfg.eval_per_length, eval_generator(cfg.task, n, cfg.eval_seed))
            x = batch.tokens[:, 1 : 1 + task.prompt_length(n)]
            hits = sum(tuple(row) in seen[n] for row in x.tolist())
            rows.append(
                {
                    "n": n,
                    "distinct inputs": (task.vocab_size - N_SPECIAL) ** task.prompt_length(n),
                    "distinct inputs drawn in training": len(seen[n]),
                    "evaluation sequences also in training (%)": 100 * hits / len(x),
                }
            )
    return pd.DataFrame(rows).groupby("n").mean()


def learned_rows_with_gradient(cfg: RunConfig) -> list[int]:
    """The rows of the learned position table that receive a gradient from a training batch whose
    sequences all have the longest training length (the rows training can move at all)."""
    model = DecoderOnlyLM(dataclasses.replace(cfg.model, encoding="learned"))
    batch = single_length_batch(cfg.make_task(), cfg.train_max_len, 4, torch.Generator().manual_seed(0))
    batch_loss(model, batch).backward()
    return model.pos.table.weight.grad.abs().sum(1).nonzero().flatten().tolist()


def in_distribution_misses(records: Sequence[dict[str, Any]], bar: float = 0.95):
    """Runs whose mean exact match over the training lengths is below `bar`, listed, not hidden."""
    rows = [
        {"run": r["name"], "in-distribution exact match (%)": round(100 * r["in_distribution_mean"], 1)}
        for r in records
        if r["in_distribution_mean"] < bar
    ]
    return pd.DataFrame(rows, columns=["run", "in-distribution exact match (%)"])


def sinusoidal_ablation(seeds: Sequence[int] = range(3)) -> list[RunConfig]:
    """Notebook 04's ablation: our sinusoidal models fail at n = 17, the baseline's (same model and
    schedule) did not. Each candidate cause alone, on the grid's settings otherwise: token embeddings
    scaled by sqrt(d_model) as in the original Transformer (copy and reverse), and padded instead of
    packed batches (copy only: same loss and gradients up to float order, and 1.7x the compute)."""
    return [make_run(t, "sinusoidal", s, scale_embeddings=True) for s in seeds for t in ("copy", "reverse")] + [
        make_run("copy", "sinusoidal", s, packed=False) for s in seeds
    ]


@dataclass(frozen=True)
class EmbeddingScale:
    scale_embeddings: bool = False  # token embeddings times sqrt(d_model), as Vaswani et al.


def _scale_embeddings(model: nn.Module) -> None:
    if model.config.option("scale_embeddings"):
        model.emb_scale = math.sqrt(model.config.d_model)


register_model_options(ModelOptions(EmbeddingScale, build=_scale_embeddings))


ABLATION_DIR = RESULTS_DIR / "ablations" / "sinusoidal"


def setting_changes(config: dict[str, Any]) -> str:
    """What a run's config changes from the grid's settings for its task, encoding and seed
    ("scale_embeddings=True", "packed=False", ...), or "grid settings"."""
    base = make_run(config["task"], config["model"]["encoding"], config["seed"]).to_dict()
    changes = [f"{k}={v}" for k, v in config.items() if k != "model" and v != base.get(k)]
    changes += [f"{k}={v}" for k, v in config["model"].items() if v != base["model"].get(k)]
    return ", ".join(changes) or "grid settings"


def settings_frame(records: Sequence[dict[str, Any]]):
    """`exact_match_frame` with each run's `setting_changes` in the encoding column, so that the
    grid's tables and plots compare settings of one encoding instead of encodings."""
    frames = [exact_match_frame([r]).assign(encoding=setting_changes(r["config"])) for r in records]
    return pd.concat(frames, ignore_index=True)


SETTING_WORDS = {  # `settings_frame`'s names of a setting, in plain words for a legend
    "grid settings": "the grid's settings",
    "scale_embeddings=True": "embeddings scaled by √d_model",
    "packed=False": "padded batches",
}


def sweep_log(results_dir: str | Path = RESULTS_DIR):
    """Every sweep the command line ran, one row each: when, wall time, runs found and trained."""
    path = Path(results_dir) / "sweeps.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    df = pd.DataFrame(
        rows, columns=["started", "wall_s", "runs", "tasks", "steps", "trained", "workers", "cpus", "training_revision"]
    )
    df["wall_min"] = df["wall_s"] / 60
    return df


# The experiments (`sweep --grid NAME`): the grid, and the ablation apart from it.
register_experiment("main", grid, ".", "03_train_the_grid")
register_experiment("sinusoidal-ablation", sinusoidal_ablation, under_results(ABLATION_DIR), "04_evaluate_lengths")


# The speed of a training step beside Hugging Face's GPT-2 (notebook 03).
BENCH_DIR = RESULTS_DIR / "benchmarks"


def matmul_flops_per_s(n: int = 1024, repeats: int = 5) -> float:
    """This machine's single-thread fp32 FLOP/s on a large square matmul (the practical peak)."""
    with torch_threads(1):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        return 2 * n**3 / _median_time(lambda: a @ b, repeats)


def _hf_gpt2(cfg: ModelConfig, vocab_size: int = VOCAB_SIZE, eos: bool = True):
    """GPT2LMHeadModel with our dimensions; without an end token (eos=False), `generate` never stops early."""
    from transformers import GPT2Config, GPT2LMHeadModel

    conf = GPT2Config(
        vocab_size=vocab_size,
        n_positions=cfg.max_positions,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layers,
        n_head=cfg.n_heads,
        n_inner=cfg.d_ff,
        activation_function="relu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=BOS,
        eos_token_id=EOS if eos else None,
        pad_token_id=PAD,
    )
    return GPT2LMHeadModel(conf)


def bench_training(steps: int = 20, repeats: int = 5, seed: int = 0) -> dict[str, Any]:
    """Our training step against Hugging Face's GPT2LMHeadModel with the same dimensions, on the
    same sequences, one thread, timed in alternation so both see the same machine load.

    Ours runs with learned absolute positions and pre-LN, the closest match to GPT-2. Three
    variants: ours on packed rows (how the study trains), ours and GPT-2 on padded rows.
    """
    with torch_threads(1):
        mcfg = ModelConfig(encoding="learned", pre_norm=True)
        run = make_run("reverse", "learned", seed, pre_norm=True)
        task = get_task("reverse")
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        packed = [training_batch(task, run, g1, packed=True) for _ in range(steps)]
        padded = [training_batch(task, run, g2, packed=False) for _ in range(steps)]
        torch.manual_seed(seed)
        ours, hf = DecoderOnlyLM(mcfg), _hf_gpt2(mcfg)
        opt_ours, opt_hf = make_optimizer(ours, run), make_optimizer(hf, run)  # the same optimizer for both

        def step(model, opt, loss_fn, batch):
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        def hf_loss(model, b: Batch) -> Tensor:
            labels = b.tokens.clone()
            labels[:, 1:][~b.loss_mask] = -100
            labels[:, 0] = -100
            return model(input_ids=b.tokens, attention_mask=(b.segments >= 0).long(), labels=labels).loss

        variants = {
            "ours, packed rows": lambda: [step(ours, opt_ours, batch_loss, b) for b in packed],
            "ours, padded rows": lambda: [step(ours, opt_ours, batch_loss, b) for b in padded],
            "GPT2LMHeadModel, padded rows": lambda: [step(hf, opt_hf, hf_loss, b) for b in padded],
        }
        for fn in variants.values():
            fn()  # warm-up
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(repeats):
            for k, fn in variants.items():
                t0 = time.perf_counter()
                fn()
                times[k].append((time.perf_counter() - t0) / steps)
        ms = {k: 1000 * float(np.median(v)) for k, v in times.items()}
        useful = float(np.mean([training_step_flops(b, mcfg) for b in packed]))
        peak = matmul_flops_per_s()
    return {
        "what": "median ms per training step, batch 64, n uniform in 1..16, one thread",
        "steps_per_repeat": steps,
        "repeats": repeats,
        "ms_per_step": ms,
        "parameters": {"ours": ours.num_parameters(), "GPT2LMHeadModel": sum(p.numel() for p in hf.parameters())},
        "speedup_vs_gpt2_same_padded_batches": ms["GPT2LMHeadModel, padded rows"] / ms["ours, padded rows"],
        "speedup_vs_gpt2_as_trained": ms["GPT2LMHeadModel, padded rows"] / ms["ours, packed rows"],
        "packing_speedup": ms["ours, padded rows"] / ms["ours, packed rows"],
        "useful_gflop_per_step": useful / 1e9,
        "achieved_gflop_per_s": useful / (ms["ours, packed rows"] / 1000) / 1e9,
        "matmul_peak_gflop_per_s": peak / 1e9,
        "fraction_of_matmul_peak": useful / (ms["ours, packed rows"] / 1000) / peak,
        "versions": library_versions() | {"transformers": __import__("transformers").__version__},
    }


# What notebooks 03 and 04 show: tables, figures and claims.
def summary_table(df, train_max: int = 16, at: Sequence[int] = (16, 17, 18, 20, 24)):
    """The baseline's table: mean ± population std over seeds, per task and encoding."""
    runs = per_run_metrics(df, train_max, at)
    cols = [c for c in runs.columns if c not in ("task", "encoding", "seed")]
    out = []
    for (task, enc), g in runs.groupby(["task", "encoding"], sort=False):
        row = {"task": task, "encoding": encoding_title(enc), "seeds": len(g)}
        for c in cols:
            row[c] = f"{g[c].mean():.1f} ± {g[c].std(ddof=0):.1f}"
        out.append(row)
    return pd.DataFrame(out).set_index(["task", "encoding"])


def plot_accuracy_vs_length(df, path: Path | None = None, train_max: int = 16, xlim: tuple[float, float] | None = None):
    """Exact match against n (mean over seeds; band = min to max); `xlim`: a range of n, closer."""
    return plot_by_length(
        df,
        "exact_match",
        "exact match (%, band = min-max over seeds)",
        "exact match against length" + (f", n = {xlim[0]:g}-{xlim[1]:g}" if xlim else ""),
        path,
        train_max,
        scale=100.0,
        ylim=(-2, 102),
        xlim=xlim,
    )


def plot_training_curves(records: Sequence[dict[str, Any]], path: Path | None = None):
    """Training loss against step, one panel per task, per encoding the median over seeds (which
    one failed run does not pull) and their min-max band (log scale). One legend for both panels,
    below them where it hides no curve; the number of seeds is said once, in its title, when every
    encoding has the same (else in each entry)."""
    tasks = list(dict.fromkeys(r["config"]["task"] for r in records))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.6), sharey=True, squeeze=False)
    handles: dict[str, Any] = {}
    counts: dict[str, set[int]] = {}  # encoding -> its numbers of seeds over the panels
    for ax, task in zip(axes[0], tasks):
        by_enc: dict[str, list] = {}
        for r in records:
            if r["config"]["task"] == task:
                by_enc.setdefault(r["config"]["model"]["encoding"], []).append(r["loss_curve"])
        for enc, curves in by_enc.items():
            every = curves[0]["every"]
            losses = np.array([c["mean_loss"] for c in curves])
            steps = np.arange(losses.shape[1]) * every + every
            color = encoding_color(enc)
            (line,) = ax.plot(steps, np.median(losses, axis=0), color=color)
            ax.fill_between(steps, losses.min(axis=0), losses.max(axis=0), color=color, alpha=0.12, lw=0)
            handles.setdefault(enc, line)
            counts.setdefault(enc, set()).add(len(curves))
        ax.set(title=f"{task}: training loss", xlabel="step")
        ax.set(ylabel="cross-entropy on targets (nats)", yscale="log")
    every_k = set().union(*counts.values()) if counts else set()
    if len(every_k) == 1:  # the same number of seeds everywhere: said once
        names, seeds = [encoding_title(e) for e in handles], f"the median of {every_k.pop()} seeds"
    else:
        seeds = "the median of the seeds"
        names = [f"{encoding_title(e)} ({'/'.join(map(str, sorted(counts[e])))} seeds)" for e in handles]
    fig.legend(
        list(handles.values()),
        names,
        loc="lower center",
        ncol=len(handles),
        fontsize=9,
        title=f"line: {seeds}; band: their min to max",
        title_fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight(), 1, 1))  # the legend, two rows, below
    save_figure(fig, path)
    return fig


def bootstrap_summary(units, n_boot: int = 10000, seed: int = 0, higher_is_better: bool = True):
    """Per column of `units`: the mean, its 95% bootstrap interval, and how often it is the best."""
    boot = bootstrap_means(units, n_boot, seed)
    best = (boot if higher_is_better else -boot).argmax(axis=1)
    out = pd.DataFrame(
        {
            "mean": np.asarray(units, dtype=float).mean(0),
            "95% low": np.percentile(boot, 2.5, axis=0),
            "95% high": np.percentile(boot, 97.5, axis=0),
            "P(best)": np.bincount(best, minlength=boot.shape[1]) / len(boot),
        },
        index=list(units.columns),
    )
    return out.sort_values("mean", ascending=not higher_is_better)


def ranking_claims(
    units_by_scheme: dict[str, Any],
    n_boot: int = 10000,
    seed: int = 0,
    higher_is_better: bool = True,
    threshold: float = CLAIM_THRESHOLD,
) -> list[str]:
    """Each neighbouring pair in the order of the means, with the probability under each bootstrap
    scheme (name -> its units, same columns) that the first is ahead. "A > B" only where every
    scheme gives at least `threshold`; else "A ~ B: not distinguishable here"."""
    first_units = next(iter(units_by_scheme.values()))
    names = list(first_units.columns)
    means = np.asarray(first_units, dtype=float).mean(0)
    order = np.argsort(-means if higher_is_better else means, kind="stable")
    probs = {
        k: pairwise_above(bootstrap_means(u[names], n_boot, seed), names, higher_is_better).to_numpy()
        for k, u in units_by_scheme.items()
    }
    out = []
    for a, b in zip(order[:-1], order[1:]):
        first, second = encoding_title(names[a]), encoding_title(names[b])
        shown = ", ".join(f"{k} {p[a, b]:.0%}" for k, p in probs.items())
        sure = min(p[a, b] for p in probs.values()) >= threshold
        out.append(
            f"{first} > {second} ({shown})" if sure else f"{first} ~ {second}: not distinguishable here ({shown})"
        )
    return out


def baseline_comparison(df, path: Path = PUBLISHED_DIR / "baseline.csv"):
    """Our means beside the baseline's for the encodings it shares (exact match, %)."""
    base = pd.read_csv(path, comment="#")
    ours = per_run_metrics(df).groupby(["task", "encoding"]).mean(numeric_only=True)
    rows = []
    for _, b in base.iterrows():
        o = ours.loc[(b["task"], b["encoding"])]
        for col, key in [("n = 1-16", "1_16"), ("n = 17", "17"), ("n = 18", "18"), ("n = 20", "20")]:
            rows.append(
                {
                    "task": b["task"],
                    "encoding": encoding_title(b["encoding"]),
                    "metric": col,
                    "baseline (3 seeds)": b[f"mean_{key}"],
                    "ours": round(o[col], 1),
                }
            )
        rows.append(
            {
                "task": b["task"],
                "encoding": encoding_title(b["encoding"]),
                "metric": "longest n >= 90%",
                "baseline (3 seeds)": b["longest_90"],
                "ours": round(o["longest n >= 90%"], 1),
            }
        )
    return pd.DataFrame(rows).pivot_table(
        index=["task", "encoding"], columns="metric", values=["baseline (3 seeds)", "ours"], sort=False
    )


def paper_comparison(df, test_lengths: Sequence[int] = range(17, 33), path: Path = PUBLISHED_DIR / "paper.json"):
    """Ours beside the paper: mean reciprocal rank and mean exact match over the test lengths
    (the paper tests L+1..2L; here 17..32), for the encodings the paper reports."""
    paper = json.loads(Path(path).read_text())
    mrr = mean_reciprocal_rank(df[df["encoding"].isin(list(paper["mean_reciprocal_rank_no_scratchpad"]))], test_lengths)
    test = df[df["n"].isin(list(test_lengths))].groupby(["task", "encoding"])["exact_match"].mean()
    rows = []
    for enc, paper_mrr in paper["mean_reciprocal_rank_no_scratchpad"].items():
        row = {
            "encoding": encoding_title(enc),
            "MRR, paper (10 tasks)": paper_mrr,
            "MRR, ours (copy, reverse)": round(mrr[enc], 3),
        }
        for task, vals in paper["ood_exact_match_mean_of_3_seeds"].items():
            row[f"{task} test EM, paper"] = vals[enc]
            row[f"{task} test EM, ours"] = round(float(test.loc[(task, enc)]), 3)
        rows.append(row)
    return pd.DataFrame(rows).set_index("encoding")


def plot_settings_with_baseline(
    frame,
    encoding: str,
    path: Path | None = None,
    train_max: int = 16,
    baseline: Path = PUBLISHED_DIR / "baseline.csv",
):
    """Exact match against n per setting (`settings_frame`), with the baseline's means for
    `encoding` as black markers at the lengths it reports."""
    fig = plot_by_length(
        frame,
        "exact_match",
        "exact match (%, band = min-max over seeds)",
        f"{encoding_title(encoding)}, exact match by setting",
        None,
        train_max,
        scale=100.0,
        ylim=(-2, 102),
        line_label=lambda s: (
            f"{encoding_title(encoding)}, {SETTING_WORDS.get(s, s)} "
            f"({frame[frame['encoding'] == s]['seed'].nunique()} seeds)"
        ),
        colors=dict.fromkeys(frame["encoding"], encoding_color(encoding)),  # one encoding: its colour
        styles={s: ("-", "--", ":", "-.")[i % 4] for i, s in enumerate(dict.fromkeys(frame["encoding"]))},
    )
    base = pd.read_csv(baseline, comment="#")
    for ax, task in zip(fig.axes, dict.fromkeys(frame["task"])):
        row = base[(base["task"] == task) & (base["encoding"] == encoding)].iloc[0]
        ns = [16, 17, 18, 20, 24]
        ax.errorbar(
            ns,
            [row[f"mean_{n}"] for n in ns],
            yerr=[row[f"std_{n}"] for n in ns],
            fmt="ko",
            ms=4,
            capsize=3,
            label=f"the baseline ({int(row['seeds'])} seeds, mean ± std)",
        )
        ax.set_xlim(0, 30)
        ax.get_legend().remove()
    # A setting whose curve lies on another's (padded batches on the grid's settings) stays
    # visible: every setting after the first is marked at each n as well, in hollow markers.
    settings = list(dict.fromkeys(frame["encoding"]))
    for ax in fig.axes:
        for line in ax.get_lines():
            for i, s in enumerate(settings[1:], start=1):
                if line.get_label().startswith(f"{encoding_title(encoding)}, {SETTING_WORDS.get(s, s)} ("):
                    line.set(marker=("o", "s", "^", "D")[(i - 1) % 4], ms=5, mfc="none", mew=1, zorder=3 + i)
    handles: dict[str, Any] = {}  # one legend below both panels, where it covers no curve
    for ax in fig.axes:
        handles |= dict(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=math.ceil(len(handles) / 2), fontsize=9)
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight(), 1, 1))
    save_figure(fig, path)
    return fig


def throughput_table(records: Sequence[dict[str, Any]]):
    """Per encoding: mean training time, steps and real tokens per second (one thread per run)."""
    rows = [
        {
            "encoding": encoding_title(r["config"]["model"]["encoding"]),
            "train time (s)": r["train_time_s"],
            "eval time (s)": r["eval_time_s"],
            "steps / s": r["steps_per_s"],
            "tokens / s": r["train_tokens_per_s"],
        }
        for r in records
    ]
    return pd.DataFrame(rows).groupby("encoding", sort=False).mean().round(1)


# ---------------------------------------------------------------------------------------------
# 12. Attention inspection: pointer heads, an explorer, Jensen-Shannon similarity to NoPE (notebook 05)
# ---------------------------------------------------------------------------------------------
ATTENTION_DIR = RESULTS_DIR / "attention"
INSPECTION_SEED = 4321  # the inspection sequences, apart from training and evaluation


def load_model(task: str, encoding: str, seed: int = 0, results_dir: str | Path = RESULTS_DIR) -> DecoderOnlyLM:
    """A trained model of the study's grid, from its saved weights (loaded with weights_only=True)."""
    return load_run_model(make_run(task, encoding, seed), results_dir)


def inspection_batch(
    task: str, n: int, n_examples: int = 64, seed: int = INSPECTION_SEED, config: ModelConfig | None = None
) -> Batch:
    """The inspection sequences of size n (drawn apart from training and evaluation; another
    `seed` draws another set, as the probes' test sequences are), at the positions a model of
    `config` reads (randomized or coupled, if it was trained so)."""
    if not isinstance(n_examples, int) or isinstance(n_examples, bool) or n_examples < 1:
        raise ValueError(f"n_examples must be an integer >= 1; got {n_examples!r}")
    return evaluation_batch(get_task(task), n, n_examples, seed, config)


@torch.no_grad()
def attention_maps(model: DecoderOnlyLM, batch: Batch) -> Tensor:
    """Every layer's attention on the batch's gold sequences: (layers, B, heads, T, T)."""
    _, internals = model(batch.inputs, positions=batch.positions[:, :-1], return_internals=True)
    return torch.stack(internals.attentions)


def answer_sources(task: str, n: int) -> tuple[Tensor, Tensor]:
    """(query index, key index) of each answer token: the query that predicts y_i sits at
    SEP + i - 1 and its source, prompt token j, at index j (BOS is index 0)."""
    t = get_task(task)
    src = t.source_positions(n)
    if src is None:
        raise ValueError(
            f"task {task!r} has no source token per answer token; pointer heads need one "
            f"(tasks that have: {', '.join(inspectable_tasks())})"
        )
    P, A = t.prompt_length(n), t.answer_length(n)
    if len(src) != A or not all(1 <= j <= P for j in src):
        raise ValueError(f"task {task!r} at size {n}: source_positions must give {A} indices in 1..{P}, got {src}")
    return torch.arange(P + 1, P + 1 + A), torch.tensor(src)


def inspectable_tasks() -> list[str]:
    """Registered tasks with a source token per answer token (what pointer heads look for)."""
    return [name for name, cls in TASKS.items() if cls().source_positions(cls.min_size) is not None]


def pointer_scores(model: DecoderOnlyLM, task: str, n: int, n_examples: int = 64) -> Tensor:
    """(layers, heads): mean attention mass on the correct source, over output steps and sequences."""
    att = attention_maps(model, inspection_batch(task, n, n_examples, config=model.config))
    q, k = answer_sources(task, n)
    return att[:, :, :, q, k].mean(dim=(1, 3))


def pointer_head(model: DecoderOnlyLM, task: str, n: int = 16) -> tuple[int, int, float]:
    """The (layer, head) that puts the most attention on the symbol it must output next, at n."""
    scores = pointer_scores(model, task, n)
    layer, head = divmod(int(scores.argmax()), scores.shape[1])
    return layer, head, float(scores[layer, head])


def pointer_score_table(
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seeds: Sequence[int] = range(5),
    lengths: Sequence[int] = range(1, 49),
    choose_at: int = 16,
    results_dir: str | Path = RESULTS_DIR,
    cache: Path | None = ATTENTION_DIR / "pointer_scores.csv",
):
    """On-target score of each model's pointer head (chosen at n = choose_at) at every length.
    Computed once from the saved weights and cached as CSV, each row with its model's config
    hash; rows for the current models are reused. `encodings` defaults to every registered one."""

    def compute(model: DecoderOnlyLM, task: str):
        layer, head, _ = pointer_head(model, task, choose_at)
        scores = [round(float(pointer_scores(model, task, n)[layer, head]), 6) for n in lengths]
        return pd.DataFrame({"n": list(lengths), "layer": layer, "head": head, "on_target": scores})

    table = per_model_table(compute, tasks, encodings, seeds, results_dir, cache)
    return table[table["n"].isin(list(lengths))].reset_index(drop=True)


def _jsd_rows(p: Tensor, q: Tensor) -> Tensor:
    """Jensen-Shannon divergence (bits, in [0, 1]) between attention rows along the last axis."""
    m = 0.5 * (p + q)
    kl = lambda a: torch.special.xlogy(a, a).sum(-1) - torch.special.xlogy(a, m).sum(-1)  # noqa: E731
    return 0.5 * (kl(p) + kl(q)) / math.log(2)


@torch.no_grad()
def jsd_to_reference(model: DecoderOnlyLM, reference: DecoderOnlyLM, task: str, n: int, n_examples: int = 10) -> float:
    """The paper's similarity: per layer, JSD between every head of `model` and every head of
    `reference` (row by row over the causal rows, averaged), minimum over all head pairs, then
    the mean over layers and examples."""
    batch = evaluation_batch(get_task(task), n, n_examples, INSPECTION_SEED + 1)
    a, b = attention_maps(model, batch), attention_maps(reference, batch)  # (L, B, H, T, T)
    pair = _jsd_rows(a[:, :, :, None], b[:, :, None, :]).mean(-1)  # (L, B, H, H): averaged over rows
    return float(pair.flatten(-2).min(-1).values.mean())


def jsd_table(
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seeds: Sequence[int] = range(5),
    lengths: Sequence[int] = range(2, 49, 2),
    results_dir: str | Path = RESULTS_DIR,
    cache: Path | None = ATTENTION_DIR / "jsd_to_nope.csv",
):
    """JSD of each encoding's seed-s model to the NoPE seed-s model at each length; for NoPE
    itself, to the NoPE model of seed s + 1 (the floor: how far two NoPE runs differ). A
    `per_model_table` with the NoPE model as the reference (cached with both models' hashes)."""
    seeds = list(seeds)

    def compared(task: str, enc: str, s: int) -> RunConfig:  # NoPE is compared with the next seed's NoPE
        return make_run(task, enc, seeds[(seeds.index(s) + 1) % len(seeds)] if enc == "nope" else s)

    def compute(model: DecoderOnlyLM, task: str, nope: DecoderOnlyLM):
        return pd.DataFrame(
            {"n": list(lengths), "jsd": [round(jsd_to_reference(model, nope, task, n), 6) for n in lengths]}
        )

    reference = lambda t, e, s: make_run(t, "nope", s)  # noqa: E731
    table = per_model_table(compute, tasks, encodings, seeds, results_dir, cache, compared, reference)
    return table[table["n"].isin(list(lengths))].reset_index(drop=True)


def jsd_units(jsd, task: str, lengths: Sequence[int] = range(18, 33), with_nope: bool = False):
    """One row per seed, one column per encoding: mean JSD to NoPE over `lengths` on `task`."""
    keep = (jsd["task"] == task) & jsd["n"].isin(list(lengths)) & (with_nope | (jsd["encoding"] != "nope"))
    return jsd[keep].groupby(["seed", "encoding"])["jsd"].mean().unstack("encoding")


# What notebook 05 shows: pictures and the explorer.
def draw_attention(
    run: RunConfig,
    layer: int,
    head: int,
    n: int,
    example: int = 0,
    ax=None,
    results_dir: str | Path = RESULTS_DIR,
    name: str | None = None,
    colorbar: bool | None = None,
    legend: bool = True,
) -> dict[str, Any]:
    """Heatmap of one head of `run`'s model (its weights in `results_dir`) on one gold sequence
    (output steps x all positions), on-target cells ringed, with a colour bar of the weights
    (`colorbar`; by default where it draws its own figure) and a legend under the axes, off every
    cell (`legend`; a figure of many panels draws one of its own instead); the title names the model by
    `name` (default: its encoding). Returns what was drawn, including the model's greedy output against
    the target, as token ids and as the task's symbols."""
    model, task = load_run_model(run, results_dir), run.task
    c = model.config
    for what, value, top in (("layer", layer, c.n_layers), ("head", head, c.n_heads), ("example", example, None)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (top is not None and value >= top):
            valid = f"0..{top - 1}" if top is not None else "an integer >= 0"
            raise ValueError(f"{what}={value!r} is out of range; valid: {valid}")
    scored = max(64, example + 1)  # sequences the on-target score averages over
    batch = inspection_batch(task, n, scored, config=c)
    head_maps = attention_maps(model, batch)[layer, :, head]  # (examples, T, T)
    q, k = answer_sources(task, n)
    rows = head_maps[example, q].numpy()
    score = float(head_maps[:, q, k].mean())
    sep = int(q[0])  # the query that predicts y_1 is SEP
    own = _uncached_only(c)
    prompt, at = batch.tokens[example : example + 1, : sep + 1], batch.positions[example : example + 1]
    generated = generate(model, prompt, len(q) + 1, use_cache=not own, positions=at if own else None)[0, sep + 1 :]
    target = batch.tokens[example, sep + 1 :]
    colorbar = ax is None if colorbar is None else colorbar
    if ax is None:
        _, ax = plt.subplots(figsize=(6.8, 4))
    image = ax.imshow(rows, aspect="auto", cmap="magma", vmin=0, vmax=1)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="attention weight")
    ax.scatter(
        k.numpy(), np.arange(len(q)), s=12, facecolors="none", edgecolors="cyan", linewidths=0.7, label="source of y_i"
    )
    ax.axvline(sep, color="white", lw=0.8, ls=":", label="SEP (the prompt ends)")
    if legend:  # under the axes: inside, it would sit on the SEP line or the first answer steps
        dark = {"facecolor": "0.2", "edgecolor": "0.6", "labelcolor": "white"}  # the marks are drawn light
        ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, markerscale=1.6, **dark)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # answer steps are whole
    ax.set(
        title=textwrap.fill(
            f"{name or encoding_title(run.encoding)} {task} L{layer}H{head}, n={n}: on-target {score:.2f}",
            52,
            break_on_hyphens=False,
        ),
        xlabel="key position (BOS, prompt, SEP, answer)",
        ylabel="answer step i (predicting y_i)",
    )
    return {
        "attention": rows,
        "on_target": score,
        "scored_over": scored,
        "generated": generated.tolist(),
        "target": target.tolist(),
        "generated symbols": " ".join(run.make_task().decode(generated.tolist())),
        "target symbols": " ".join(run.make_task().decode(target.tolist())),
        "correct": bool(torch.equal(generated, target)),
        "ax": ax,
    }


def plot_pointer_heads(
    task: str,
    encodings: Sequence[str] | None = None,
    lengths: Sequence[int] = (16, 32),
    path: Path | None = None,
    results_dir: str | Path = RESULTS_DIR,
):
    """For each encoding's seed-0 model, its pointer head (chosen at n = 16) at each length."""
    encodings = encoding_names() if encodings is None else encodings
    fig, axes = plt.subplots(
        len(encodings), len(lengths), figsize=(5.2 * len(lengths), 3.3 * len(encodings)), squeeze=False
    )
    for row, enc in zip(axes, encodings):
        layer, head, _ = pointer_head(load_model(task, enc, 0, results_dir), task, 16)
        for ax, n in zip(row, lengths):
            last = ax is axes[0, -1]  # one colour bar: every panel shares the scale 0-1
            drawn = draw_attention(
                make_run(task, enc, 0), layer, head, n, ax=ax, results_dir=results_dir, colorbar=last, legend=False
            )
    lines = [
        f"{task}: each seed-0 model's pointer head (the head that attends most to the symbol it must output next,"
        f" chosen at n = 16), at {' and '.join(f'n = {n}' for n in lengths)}.",
        "Each heatmap: one sequence. 'On-target' in its title: the head's mean attention weight on the ringed"
        f" cells (where y_i is), over {drawn['scored_over']} sequences.",
    ]
    wrapped = [textwrap.fill(line, width=int(11 * fig.get_figwidth())) for line in lines]
    fig.suptitle("\n".join(wrapped), fontsize=11)
    dark = {"facecolor": "0.2", "edgecolor": "0.6", "labelcolor": "white"}  # the marks are drawn light
    fig.legend(
        *axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=10, markerscale=1.6, **dark
    )
    rows_of_text = sum(w.count("\n") + 1 for w in wrapped)
    top = 1 - (0.1 + 0.16 * rows_of_text) / fig.get_figheight()
    fig.tight_layout(rect=(0, 0.45 / fig.get_figheight(), 1, top))  # the legend below every panel
    save_figure(fig, path, dpi=100)
    return fig


def plot_pointer_scores(table, path: Path | None = None, train_max: int = 16):
    """The pointer head's on-target score against length (mean over seeds; band = min to max)."""
    return plot_by_length(
        table,
        "on_target",
        "mean attention on the right source",
        "pointer head on target",
        path,
        train_max,
        ylim=(-0.02, 1.02),
    )


class AttentionExplorer:
    """Widgets to pick task, encoding, seed, layer, head, length and example; each change redraws
    the heatmap through `draw_attention` and shows greedy output against target. It opens on the
    pointer head of the chosen model and length (notebook 05's definition: the head with the most
    attention on the right source), and the "pointer head" button jumps there after a change."""

    def __init__(
        self,
        seeds: Sequence[int] = range(5),
        results_dir: str | Path = RESULTS_DIR,
        task: str = "reverse",
        encoding: str = "nope",
        n: int = 16,
    ):
        import ipywidgets as w

        self.results_dir = results_dir
        cfg = ModelConfig()
        self.controls = {
            "task": w.Dropdown(options=self.trained_tasks(seeds, results_dir, task), value=task, description="task"),
            "encoding": w.Dropdown(
                options=[(encoding_title(e), e) for e in encoding_names()], value=encoding, description="encoding"
            ),
            "seed": w.Dropdown(options=list(seeds), value=0, description="seed"),
            "layer": w.IntSlider(value=0, min=0, max=cfg.n_layers - 1, description="layer"),
            "head": w.IntSlider(value=0, min=0, max=cfg.n_heads - 1, description="head"),
            "n": w.IntSlider(value=n, min=1, max=48, description="length n"),
            "example": w.IntSlider(value=0, min=0, max=63, description="example"),
        }
        self.jump = w.Button(description="pointer head", tooltip="jump to the pointer head at this length")
        self.jump.on_click(lambda _button: self.to_pointer_head())
        # the heatmap as a PNG in an Image widget and the text under it: each redraw replaces both
        # values at once (an Output widget cleared and refilled from a callback can lose the figure)
        self.image = w.Image(format="png", layout=w.Layout(width="630px"))
        self.caption = w.HTML()
        controls = list(self.controls.values())
        self.widget = w.VBox([w.HBox([*controls[:3], self.jump]), w.HBox(controls[3:]), self.image, self.caption])
        self.widget.add_class("lengen-explorer")
        self.last: dict[str, Any] = {}
        self._quiet = True  # no redraw while the pointer head is being set
        self.to_pointer_head()
        for c in self.controls.values():
            c.observe(lambda _change: None if self._quiet else self.redraw(), names="value")

    @staticmethod
    def trained_tasks(seeds: Sequence[int], results_dir: str | Path, task: str) -> list[str]:
        """The inspectable tasks with a trained grid model of the first seed (and `task`): a task
        such as copy_hints has a source per answer token but no grid models to show."""

        def trained(t: str, e: str) -> bool:
            try:
                return weights_path(Path(results_dir), make_run(t, e, seeds[0])).exists()
            except ValueError:  # no grid run of this task and encoding can be made (too few learned rows)
                return False

        return [t for t in inspectable_tasks() if t == task or any(trained(t, e) for e in encoding_names())]

    def values(self) -> dict[str, Any]:
        return {k: c.value for k, c in self.controls.items()}

    def to_pointer_head(self) -> None:
        """Set layer and head to the pointer head of the chosen model at the chosen length, and redraw."""
        v = self.values()
        model = load_model(v["task"], v["encoding"], v["seed"], self.results_dir)
        layer, head, _ = pointer_head(model, v["task"], v["n"])
        self._quiet = True
        self.controls["layer"].value, self.controls["head"].value = layer, head
        self._quiet = False
        self.redraw()

    def redraw(self) -> None:
        import html
        import io

        from matplotlib.figure import Figure

        v = self.values()
        fig = Figure(figsize=(7, 4.5))  # not pyplot's: nothing is shown or kept open by accident
        ax = fig.add_subplot()
        run = make_run(v["task"], v["encoding"], v["seed"])
        drawn = draw_attention(run, v["layer"], v["head"], v["n"], v["example"], ax=ax, results_dir=self.results_dir)
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=90)
        verdict = "right" if drawn["correct"] else "wrong"
        target, generated = drawn["target symbols"], drawn["generated symbols"]
        text = f"{ax.get_title()}\ntarget    {target}\ngenerated {generated}  ({verdict})"
        self.image.value, self.caption.value = png.getvalue(), f"<pre>{html.escape(text)}</pre>"
        self.last = {**v, **drawn, "title": ax.get_title()}


def plot_jsd(table, path: Path | None = None, train_max: int = 16):
    """Each encoding's JSD to NoPE against length (mean over seeds and examples)."""
    floor = lambda enc: "NoPE vs NoPE of another seed (floor)" if enc == "nope" else encoding_title(enc)  # noqa: E731
    return plot_by_length(
        table,
        "jsd",
        "JSD to NoPE (bits; min over head pairs)",
        "attention distance to NoPE",
        path,
        train_max,
        band=False,
        line_label=floor,
        shared_legend=True,  # one legend below the panels, clear of the lines
    )


# ---------------------------------------------------------------------------------------------
# 13. Decoding with the caches against recomputing every step: the benchmark (notebook 06)
# ---------------------------------------------------------------------------------------------


KV_METHODS = ("ours, input cache", "ours, KV cache", "ours, uncached", "GPT-2, cached", "GPT-2, uncached")


def bench_kv_cache(
    batches: Sequence[int] = (1, 64),
    new_tokens: Sequence[int] = (32, 64, 128),
    prompt_len: int = 16,
    repeats: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Greedy generation time: ours with each cache (`new_cache`) and without, and Hugging Face's
    GPT2LMHeadModel.generate with and without its cache, same dimensions, one thread.

    Ours uses learned absolute positions and pre-LN, GPT-2's own choices. Both decode greedily for
    exactly the number of new tokens asked (GPT-2 is built without an end token, so nothing stops
    it early and no logits processor runs). Each configuration is timed `repeats` times in
    alternation across the methods; the median is reported.
    """
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    with torch_threads(1):
        torch.manual_seed(seed)
        mcfg = ModelConfig(encoding="learned", pre_norm=True, max_positions=prompt_len + max(new_tokens))
        ours, hf = DecoderOnlyLM(mcfg).eval(), _hf_gpt2(mcfg, eos=False).eval()

        def hf_generate(prompt: Tensor, n: int, use_cache: bool) -> Tensor:
            gen = GenerationConfig(max_new_tokens=n, do_sample=False, use_cache=use_cache, pad_token_id=PAD)
            with torch.no_grad():
                return hf.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=gen)

        methods = dict(
            zip(
                KV_METHODS,
                (
                    lambda p, n: generate(ours, p, n, cache_kind="inputs"),
                    lambda p, n: generate(ours, p, n, cache_kind="kv"),
                    lambda p, n: generate(ours, p, n, use_cache=False),
                    lambda p, n: hf_generate(p, n, True),
                    lambda p, n: hf_generate(p, n, False),
                ),
            )
        )
        rows = []
        for b in batches:
            prompt = torch.randint(N_SPECIAL, VOCAB_SIZE, (b, prompt_len), generator=torch.Generator().manual_seed(b))
            for n in new_tokens:
                times: dict[str, list[float]] = {k: [] for k in methods}
                for fn in methods.values():
                    fn(prompt, 4)  # warm-up
                for _ in range(repeats):
                    for k, fn in methods.items():
                        t0 = time.perf_counter()
                        out = fn(prompt, n)
                        times[k].append(time.perf_counter() - t0)
                        if out.shape != (b, prompt_len + n):
                            raise RuntimeError(f"{k} returned {tuple(out.shape)}, expected {(b, prompt_len + n)}")
                rows.append(
                    {
                        "batch": b,
                        "new_tokens": n,
                        **{k: float(np.median(v)) for k, v in times.items()},
                        "repeat_seconds": times,
                    }
                )  # round i of every method ran back to back
        cache_bytes = {kind: new_cache(ours, 64, prompt_len + 128, kind).nbytes for kind in CACHE_KINDS}
    return {
        "what": f"median seconds of greedy generation after a {prompt_len}-token prompt, one thread",
        "repeats": repeats,
        "rows": rows,
        "cache_bytes_batch64_144_positions": cache_bytes,
        "versions": library_versions() | {"transformers": __import__("transformers").__version__},
    }


def bench_kv_runs(runs: int = 3, repeats: int = 5) -> dict[str, Any]:
    """`bench_kv_cache` `runs` times, each in a fresh Python process, one after another.

    On a shared machine a whole run can be fast or slow (neighbours, where the process's memory
    lands), which the repeats inside one run cannot show; the ratios are computed within each
    run, side by side, and then summarised across runs (`kv_summary`)."""
    if runs == 1:
        return {"runs": [bench_kv_cache(repeats=repeats)]}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            path = Path(tmp) / f"run{i}.json"
            cmd = [
                sys.executable,
                "-m",
                "lengen_helpers",
                "bench-kv",
                "--runs",
                "1",
                "--repeats",
                str(repeats),
                "--out",
                str(path),
            ]
            subprocess.run(cmd, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
            out += json.loads(path.read_text())["runs"]
    return {"runs": out}


# What notebook 06 shows: the speed-ups, their range and a figure.


def kv_ratios(run: dict[str, Any]):
    """One run of the benchmark as a table (seconds) with the speed-ups the targets are stated in."""
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "repeat_seconds"} for r in run["rows"]])
    df = df.set_index(["batch", "new_tokens"])
    for cache in ("input cache", "KV cache"):
        df[f"uncached / {cache}"] = df["ours, uncached"] / df[f"ours, {cache}"]
        df[f"GPT-2 cached / {cache}"] = df["GPT-2, cached"] / df[f"ours, {cache}"]
    return df


def kv_summary(result: dict[str, Any], stat: str = "median"):
    """Every column of `kv_ratios` across the runs of `bench_kv_runs`: "median", "min" or "max"
    of the per-run values (each ratio is taken within its run first)."""
    per_run = pd.concat([kv_ratios(run) for run in result["runs"]], keys=range(len(result["runs"])), names=["run"])
    return per_run.groupby(level=["batch", "new_tokens"]).agg(stat)


def kv_ratio_range(result: dict[str, Any]):
    """Each speed-up of `kv_ratios` as "least to greatest" over the runs of `bench_kv_runs`."""
    least, greatest = kv_summary(result, "min"), kv_summary(result, "max")
    ratios = [c for c in least.columns if " / " in c]
    return least[ratios].map("{:.2f}".format) + " to " + greatest[ratios].map("{:.2f}".format)


def plot_kv_benchmark(result: dict[str, Any], path: Path | None = None):
    df = kv_summary(result).reset_index()
    batches = list(dict.fromkeys(df["batch"]))
    fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 4), squeeze=False)
    # methods, not encodings: ours black and gray, GPT-2 cyan, none an encoding's colour
    styles = dict(zip(KV_METHODS, (("black", "-"), ("C7", "-"), ("black", "--"), ("C9", "-"), ("C9", "--"))))
    for ax, b in zip(axes[0], batches):
        g = df[df["batch"] == b]
        for k, (color, ls) in styles.items():
            ax.plot(g["new_tokens"], g[k], color=color, ls=ls, marker="o", label=k)
        ax.set(
            title=f"batch {b}: greedy generation time",
            xlabel="new tokens (after a 16-token prompt)",
            ylabel=f"seconds (median over {len(result['runs'])} runs, one thread)",
            yscale="log",
            xscale="log",
        )
        ax.set_xticks(list(g["new_tokens"]), [str(x) for x in g["new_tokens"]])
        ax.tick_params(axis="x", which="minor", labelbottom=False)  # only the measured token counts
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


# ---------------------------------------------------------------------------------------------
# 14. The paper's other tasks, and the ranking across them (notebook 07)
# ---------------------------------------------------------------------------------------------
# The paper's arithmetic and algorithmic tasks (notebook 07), at our scale: each draws its prompts
# from a seed, has its own symbols, and is tested against an independent computation in
# tests/test_paper_tasks.py. Sizes up to L = 8 train, L+1 to 2L test, as in the paper.
def _digits(t: Tensor) -> Tensor:
    return t - N_SPECIAL  # token ids of "0".."9" (the first ten symbols) -> digits


def run_digits(count: int, n: int, generator: torch.Generator) -> Tensor:
    """(count, n) digits in runs: each digit repeats the one before it with a probability drawn
    uniformly per row (from nearly always new digits to one digit throughout), else is uniform."""
    repeat = torch.rand(count, 1, generator=generator)
    fresh = torch.randint(0, 10, (count, n), generator=generator)
    stay = torch.rand(count, n, generator=generator) < repeat
    out = fresh.clone()
    for i in range(1, n):
        out[:, i] = torch.where(stay[:, i], out[:, i - 1], fresh[:, i])
    return out


# Mixtures of ways to draw a sum's operands (further values of Addition's option "operands"): each
# takes the size n, the batch size and the generator and returns both operands' digits drawn
# already, (B, n) twice, -1 where an operand draws its own uniformly (`Addition.operand`).
OperandMixture = Callable[[int, int, torch.Generator], tuple[Tensor, Tensor]]
OPERAND_MIXTURES: dict[str, OperandMixture] = {}


@register_task
class Addition(Task):
    """Two numbers, digits spaced: `a1 .. + b1 ..`; the answer is their sum. Size n is the number
    of digits of the longer operand. Two formats (`format`):

    - "equal" (the default): both operands have n digits, leading zeros allowed, and the sum is
      written with n + 1 digits (a leading 0 when nothing carries out).
    - "paper": the paper's, as its data builder draws them: the two digit counts independent
      (every pair of counts whose larger is n equally likely, so training sees every pair of
      counts up to L equally often), no leading zeros (a one-digit operand is 0-9), and the sum
      written without leading zeros. Prompts and answers then vary in length within a size.

    `answer="lsd"` writes the sum least-significant digit first (a deviation from the paper that
    small models learn far more easily, Lee et al. 2023). `operands="runs"` draws half the
    operands as runs of repeated digits (`run_digits`), half uniformly; further values draw both
    operands at once, as registered (`register_operand_mixture`). The paper's "Compute 5 3 7 + 1 2 ?"."""

    name, symbols, train_max_size = "addition", (*"0123456789", "+"), 8
    options = {"format": ("equal", "paper"), "answer": ("msd", "lsd"), "operands": ("uniform", "runs")}

    def prompt_length(self, n: int) -> int:
        return 2 * n + 1

    def answer_length(self, n: int) -> int:
        return n + 1

    def size_weights(self, sizes: Sequence[int]) -> Tensor | None:
        # "paper": uniform over pairs of digit counts, of which 2n - 1 have the larger count n
        return torch.tensor([2.0 * n - 1 for n in sizes]) if self.format["format"] == "paper" else None

    def digit_counts(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Each operand's number of digits, (B,) twice: n and n, or ("paper") a pair whose larger is n."""
        if self.format["format"] == "equal":
            return torch.full((batch_size,), n), torch.full((batch_size,), n)
        pair = torch.randint(0, 2 * n - 1, (batch_size,), generator=generator)  # (n, 1..n) then (1..n-1, n)
        return torch.where(pair < n, n, pair - n + 1), torch.where(pair < n, pair + 1, n)

    def operand(self, n: int, counts: Tensor, generator: torch.Generator, drawn: Tensor | None = None) -> Tensor:
        """(B, n) digits right-aligned: zeros left of each number's `counts` digits; the leading
        digit is 1-9 unless the format allows leading zeros or the number has one digit. `drawn`:
        digits drawn already by a mixture ((B, n), -1 where this operand draws its own)."""
        d = torch.randint(0, 10, (len(counts), n), generator=generator)
        if self.format["operands"] == "runs":
            runs = torch.rand(len(counts), 1, generator=generator) < 0.5
            d = torch.where(runs, run_digits(len(counts), n, generator), d)
        if drawn is not None:
            d = torch.where(drawn >= 0, drawn, d)
        if self.format["format"] == "paper":
            lead = torch.randint(1, 10, (len(counts),), generator=generator)
            column = torch.arange(n)
            d = torch.where(column == n - counts[:, None], torch.where(counts > 1, lead, d[:, -1])[:, None], d)
            d = torch.where(column < n - counts[:, None], 0, d)
        return d

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        la, lb = self.digit_counts(n, batch_size, generator)
        mixture = OPERAND_MIXTURES.get(self.format["operands"])
        drawn = mixture(n, batch_size, generator) if mixture is not None else (None, None)
        return self.write(self.operand(n, la, generator, drawn[0]), self.operand(n, lb, generator, drawn[1]), la, lb)

    def write(self, a: Tensor, b: Tensor, la: Tensor | None = None, lb: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The prompts and answers of the sums a + b, each (B, n) digits right-aligned, most
        significant first; `la`, `lb`: each operand's digit count ((B,); all n if None), written
        without its leading zeros in the "paper" format."""
        (batch_size, n), full = a.shape, torch.full((len(a),), a.shape[1])
        la, lb = full if la is None else la, full if lb is None else lb
        digits, carry = torch.zeros(batch_size, n + 1, dtype=torch.long), torch.zeros(batch_size, dtype=torch.long)
        for i in range(n - 1, -1, -1):  # right to left, with the carry
            total = a[:, i] + b[:, i] + carry
            digits[:, i + 1], carry = total % 10, total // 10
        digits[:, 0] = carry
        column = torch.arange(n + 1)
        if self.format["format"] == "paper":  # no leading zeros (the sum 0 keeps its one digit)
            first = torch.where(digits[:, :-1] > 0, column[:-1], n).min(dim=1).values
            written = column >= first[:, None]
        else:
            written = torch.ones_like(digits, dtype=torch.bool)
        if self.format["answer"] == "lsd":
            digits, written = digits.flip(1), written.flip(1)
        answer = _compact(digits + N_SPECIAL, written)
        plus = torch.full((batch_size, 1), N_SPECIAL + 10)
        prompt = torch.cat([a + N_SPECIAL, plus, b + N_SPECIAL], dim=1)
        place = torch.arange(n)
        shown = torch.cat([place >= n - la[:, None], plus > 0, place >= n - lb[:, None]], dim=1)
        return _compact(prompt, shown), answer


def register_operand_mixture(name: str):
    """Register a mixture (`OperandMixture`) as the value `name` of Addition's option "operands"."""

    def add(mixture: OperandMixture) -> OperandMixture:
        if name in Addition.options["operands"]:
            raise ValueError(f"addition's operands {name!r} exist already: {Addition.options['operands']}")
        Addition.options["operands"] += (name,)
        OPERAND_MIXTURES[name] = mixture
        return mixture

    return add


@register_task
class Sorting(Task):
    """n integers from 0-19, one token each; the answer is the list sorted ascending. (The paper's
    single-token version, "Sort the following list [ .. ].")"""

    name, symbols, train_max_size = "sorting", tuple(str(i) for i in range(20)), 8

    def target(self, x: Tensor) -> Tensor:
        return x.sort(dim=1).values  # token ids follow the numbers' order


@register_task
class Summation(Task):
    """n digits from 1-9; the answer is their sum mod 10, one digit. (The paper writes
    "Compute: 3 + 7 + .. ."; we leave out the plus signs, which carry no information.)"""

    name, symbols, train_max_size = "summation", tuple("0123456789"), 8

    def answer_length(self, n: int) -> int:
        return 1

    def draw_prompts(self, n: int, batch_size: int, generator: torch.Generator) -> Tensor:
        return torch.randint(1, 10, (batch_size, n), generator=generator) + N_SPECIAL

    def target(self, x: Tensor) -> Tensor:
        return (_digits(x).sum(dim=1, keepdim=True) % 10) + N_SPECIAL


@register_task
class Parity(Task):
    """n bits; the answer says whether the number of ones is even. (The paper asks "Is the number
    of 1's even in [ 1, 0, .. ]?" and answers Yes or No.)"""

    name, symbols, train_max_size = "parity", ("0", "1", "even", "odd"), 8

    def answer_length(self, n: int) -> int:
        return 1

    def draw_prompts(self, n: int, batch_size: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, 2, (batch_size, n), generator=generator) + N_SPECIAL

    def target(self, x: Tensor) -> Tensor:
        odd = _digits(x).sum(dim=1, keepdim=True) % 2
        return N_SPECIAL + 2 + odd  # "even" or "odd"


@register_task
class Polynomial(Task):
    """Evaluate n terms c * x^d at x, with c in -3..3, d in 0..3, x in -2..2; the answer is the
    value mod 10, one digit. Prompt: x, then each term as (coefficient, degree) tokens. (The
    paper writes "Evaluate at x = 2 in c * x ** d + .."; ours keeps the same numbers, fewer tokens.)"""

    name, train_max_size = "polynomial", 8
    symbols = (
        *(f"x={v}" for v in range(-2, 3)),
        *(f"{c:+d}" for c in range(-3, 4)),
        *(f"^{d}" for d in range(4)),
        *(str(i) for i in range(10)),
    )

    def prompt_length(self, n: int) -> int:
        return 2 * n + 1

    def answer_length(self, n: int) -> int:
        return 1

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        x = torch.randint(-2, 3, (batch_size, 1), generator=generator)
        c = torch.randint(-3, 4, (batch_size, n), generator=generator)
        d = torch.randint(0, 4, (batch_size, n), generator=generator)
        value = (c * x**d).sum(dim=1, keepdim=True) % 10  # Python's (and torch's) mod: in 0..9
        terms = torch.stack([c + 3 + 5, d + 12], dim=2).flatten(1)  # symbols: 5 x's, 7 coefficients, 4 degrees
        return torch.cat([x + 2, terms], dim=1) + N_SPECIAL, value + 16 + N_SPECIAL


@register_task
class LEGO(Task):
    """A chain of n variables, the first +1 or -1 and each next + or - the one before, written as
    clauses [variable, sign, operand], then a query on a variable in the second half of the chain;
    the answer is its sign. (The paper: "If a = +1, b = - a, .. Then, what is the value of q?" with
    the answer +1 or -1.) Variables are letters, drawn afresh per sequence. Two formats (`format`):
    "shuffled" (the default) writes the clauses in random order and queries variable n // 2 to n;
    "paper" writes them in chain order, as the paper's data builder does unless told to permute
    them (its ranked split is the unpermuted one), and queries from the chain's second half as it
    does: variables ceil(n / 2) + 1 to n (the one variable at n = 1)."""

    name, train_max_size, max_size = "lego", 8, 26
    symbols = (*"abcdefghijklmnopqrstuvwxyz", "+", "-", "1")
    options = {"format": ("shuffled", "paper")}

    def prompt_length(self, n: int) -> int:
        return 3 * n + 1

    def answer_length(self, n: int) -> int:
        return 1

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        plus, minus, one = (N_SPECIAL + 26 + i for i in range(3))
        names = torch.rand(batch_size, 26, generator=generator).argsort(dim=1)[:, :n] + N_SPECIAL  # chain order
        negate = torch.randint(0, 2, (batch_size, n), generator=generator)
        value = torch.cumprod(1 - 2 * negate, dim=1)  # +1 or -1: the root's sign, then each link's
        operand = torch.cat([torch.full((batch_size, 1), one), names[:, :-1]], dim=1)
        clauses = torch.stack([names, torch.where(negate.bool(), minus, plus), operand], dim=2)  # (B, n, 3)
        if self.format["format"] == "shuffled":
            shuffle = torch.rand(batch_size, n, generator=generator).argsort(dim=1)
            clauses = clauses.gather(1, shuffle[:, :, None].expand(-1, -1, 3))
        first = n // 2 if self.format["format"] == "shuffled" else min((n + 1) // 2, n - 1)
        query = torch.randint(first, n, (batch_size, 1), generator=generator)  # the second half of the chain
        clauses = clauses.flatten(1)
        answer = torch.where(value.gather(1, query) > 0, plus, minus)
        return torch.cat([clauses, names.gather(1, query)], dim=1), answer


# SCAN (Lake and Baroni 2018), generated from its phrase-structure grammar and interpreted by its
# rules: every one of its 20,910 commands, grouped by the length of its action sequence.

SCAN_ACTIONS = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
SCAN_TURNS = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}


def scan_interpret(command: str) -> list[str]:
    """SCAN's interpretation: a command (a string of the grammar) -> its action sequence.
    C -> S and S | S after S | S;  S -> V twice | V thrice | V;  V -> D[1] opposite D[2] |
    D[1] around D[2] | D | U;  D -> U left | U right | turn left | turn right;  U -> walk | look | run | jump."""
    words = command.split()
    for conjunction in ("and", "after"):
        if conjunction in words:
            i = words.index(conjunction)
            first, second = scan_interpret(" ".join(words[:i])), scan_interpret(" ".join(words[i + 1 :]))
            return first + second if conjunction == "and" else second + first
    times = {"twice": 2, "thrice": 3}.get(words[-1], 1)
    words = words[:-1] if times > 1 else words
    if len(words) == 1:
        return [SCAN_ACTIONS[words[0]]] * times  # U
    act = [] if words[0] == "turn" else [SCAN_ACTIONS[words[0]]]
    if len(words) == 2:
        return ([SCAN_TURNS[words[1]]] + act) * times  # D: turn, then act
    mode, turn = words[1], SCAN_TURNS[words[2]]
    if mode == "opposite":
        return ([turn, turn] + act) * times  # turn back, then act
    if mode == "around":
        return ([turn] + act) * 4 * times  # four quarter turns, acting after each
    raise ValueError(f"not a SCAN command: {command!r}")


def scan_commands() -> list[str]:
    """Every command the grammar generates (20,910), in a fixed order."""
    doers = [*SCAN_ACTIONS, "turn"]
    v = [
        *SCAN_ACTIONS,
        *(f"{u} {d}" for u in doers for d in SCAN_TURNS),
        *(f"{u} {m} {d}" for u in doers for m in ("opposite", "around") for d in SCAN_TURNS),
    ]
    s = [*v, *(f"{x} {t}" for x in v for t in ("twice", "thrice"))]
    return [*s, *(f"{a} {c} {b}" for c in ("and", "after") for a in s for b in s)]


@register_task
class SCAN(Task):
    """SCAN's length split: a command and its action sequence, the size being the number of actions
    (train on up to 25, test on 26-48, as the paper re-split it, so no test command is ever trained
    on). Commands (1-9 words) are padded with "_" to 9 tokens. Training draws sizes in proportion
    to how many commands they have: uniform over commands, as training on the set of them."""

    name, train_max_size, max_size = "scan", 25, 48
    words = (
        "walk",
        "look",
        "run",
        "jump",
        "turn",
        "left",
        "right",
        "opposite",
        "around",
        "twice",
        "thrice",
        "and",
        "after",
    )
    symbols = (*words, "_", *SCAN_ACTIONS.values(), *SCAN_TURNS.values())
    max_words = 9

    def prompt_length(self, n: int) -> int:
        return self.max_words

    def has_size(self, n: int) -> bool:
        return n in _scan_by_size()

    def size_weights(self, sizes: Sequence[int]) -> Tensor:
        return torch.tensor([float(len(_scan_by_size()[n][0])) for n in sizes])

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompts, answers = _scan_by_size()[n]
        pick = torch.randint(0, len(prompts), (batch_size,), generator=generator)
        return prompts[pick], answers[pick]


@functools.cache
def _scan_by_size() -> dict[int, tuple[Tensor, Tensor]]:
    """Every SCAN command as token ids, grouped by its number of actions: size -> (prompts, answers)."""
    task = SCAN()
    groups: dict[int, tuple[list, list]] = {}
    for command in scan_commands():
        words, actions = command.split(), scan_interpret(command)
        prompt = task.encode(words + ["_"] * (task.max_words - len(words)))
        groups.setdefault(len(actions), ([], []))
        groups[len(actions)][0].append(prompt)
        groups[len(actions)][1].append(task.encode(actions))
    return {n: (torch.stack(p), torch.stack(a)) for n, (p, a) in sorted(groups.items())}


# PCFG SET (Hupkes et al. 2020), at our scale: string functions composed into nested calls in
# prefix notation, "append swap_first_last A1 B1 , repeat C2", and the answer the composition
# evaluates to. The productivity split: train on up to 8 functions, test on more.

PCFG_UNARY: dict[str, Callable[[list[str]], list[str]]] = {
    "copy": lambda x: list(x),
    "reverse": lambda x: x[::-1],
    "shift": lambda x: x[1:] + x[:1],
    "echo": lambda x: x + x[-1:],
    "swap_first_last": lambda x: x[-1:] + x[1:-1] + x[:1] if len(x) > 1 else list(x),
    "repeat": lambda x: x + x,
}
PCFG_BINARY: dict[str, Callable[[list[str], list[str]], list[str]]] = {
    "append": lambda x, y: x + y,
    "prepend": lambda x, y: y + x,
    "remove_first": lambda x, y: list(y),
    "remove_second": lambda x, y: list(x),
}
PCFG_SYMBOLS = tuple(f"{letter}{number}" for number in (1, 2) for letter in "ABCDE")


def pcfg_evaluate(expression: str) -> list[str]:
    """The value of a PCFG SET expression: a function name applies to what follows (a binary one to
    two arguments separated by ","), and a string is a maximal run of symbols."""
    tokens = expression.split()

    def expr(i: int) -> tuple[list[str], int]:
        word = tokens[i] if i < len(tokens) else None
        if word in PCFG_UNARY:
            value, j = expr(i + 1)
            return PCFG_UNARY[word](value), j
        if word in PCFG_BINARY:
            first, j = expr(i + 1)
            if j >= len(tokens) or tokens[j] != ",":
                raise ValueError(f"not a PCFG SET expression (a binary function lacks its ','): {expression!r}")
            second, k = expr(j + 1)
            return PCFG_BINARY[word](first, second), k
        j = i
        while j < len(tokens) and tokens[j] in PCFG_SYMBOLS:
            j += 1
        if j == i:
            raise ValueError(f"not a PCFG SET expression (expected a string at word {i + 1}): {expression!r}")
        return tokens[i:j], j

    value, end = expr(0)
    if end != len(tokens):
        raise ValueError(f"not a PCFG SET expression (words left over after word {end}): {expression!r}")
    return value


def pcfg_expression(n: int, generator: torch.Generator, longest_string: int = 2) -> list[str]:
    """A random PCFG SET expression with exactly n function calls, as words: each call unary or
    binary with equal chance, a binary call's n - 1 inner calls split at random between its two
    arguments, and each string 1 to `longest_string` random symbols."""

    def draw(k: int) -> int:
        return int(torch.randint(0, k, (1,), generator=generator))

    def build(calls: int) -> list[str]:
        if calls == 0:
            return [PCFG_SYMBOLS[draw(len(PCFG_SYMBOLS))] for _ in range(1 + draw(longest_string))]
        if draw(2) == 0:
            return [list(PCFG_UNARY)[draw(len(PCFG_UNARY))], *build(calls - 1)]
        first = draw(calls)  # calls inside the first argument: 0 .. calls - 1
        return [list(PCFG_BINARY)[draw(len(PCFG_BINARY))], *build(first), ",", *build(calls - 1 - first)]

    return build(n)


@register_task
class PCFG(Task):
    """PCFG SET's productivity split at our scale: size n is the number of function calls (train on
    up to 8, test on 9-16). Ten symbols (A1 .. E2) instead of the published 520, strings of 1-2
    symbols, answers of at most 2n + 8 symbols (longer draws are drawn again: `repeat` doubles),
    prompts padded with "_" to the longest an expression of n calls can be (4n + 2 words)."""

    name, train_max_size, max_size = "pcfg", 8, 16
    symbols = (*PCFG_SYMBOLS, *PCFG_UNARY, *PCFG_BINARY, ",", "_")

    def prompt_length(self, n: int) -> int:
        return 4 * n + 2  # n names, at most n commas and n + 1 strings of at most 2 symbols

    def answer_length(self, n: int) -> int:
        return 2 * n + 8

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompts, answers = [], []
        while len(prompts) < batch_size:
            words = pcfg_expression(n, generator)
            value = pcfg_evaluate(" ".join(words))
            if len(value) <= self.answer_length(n):
                prompts.append(self.encode(words + ["_"] * (self.prompt_length(n) - len(words))))
                answers.append(F.pad(self.encode(value), (0, self.answer_length(n) - len(value)), value=PAD))
        return torch.stack(prompts), torch.stack(answers)


PAPER_TASKS = ("addition", "sorting", "summation", "parity", "polynomial", "lego")


def paper_split_runs(
    task: str, encodings: Sequence[str] | None = None, seeds: Sequence[int] = range(3), **overrides: Any
) -> list[RunConfig]:
    """One task's runs as the paper splits it: sizes up to the task's L for training, evaluation
    at every size up to 3L (or the task's largest), seed-major. `task_options` in `overrides`
    set the task's format."""
    t = get_task(task, overrides.get("task_options"))
    top = 3 * t.train_max_size if t.max_size is None else min(3 * t.train_max_size, t.max_size)
    settings = {"train_max_len": t.train_max_size, "eval_max_len": top, **overrides}
    encodings = encoding_names() if encodings is None else encodings
    return [make_run(task, e, s, **settings) for s in seeds for e in encodings]


# A task not learned in distribution at the study's settings (under `learned_in_distribution`'s
# bar for every encoding at 5,000 steps) may get more steps or a bigger model, for the task alone,
# never per encoding. LEGO was retrained with twice the steps (its records sit beside the
# 5,000-step ones, another hash), to no gain; addition, polynomial evaluation and PCFG went to the
# pilot's larger models instead (below).
LONGER_STEPS: dict[str, int] = {"lego": 10_000}


def paper_tasks_runs() -> list[RunConfig]:
    """Every arithmetic and algorithmic task's grid (`sweep --grid paper-tasks`)."""
    return [c for t in PAPER_TASKS for c in paper_split_runs(t)]


# The four tasks not learned at the study's settings, even with twice the steps, get a larger model
# for the task alone (the same for every encoding), in the paper's format where ours differed.
# A pilot chooses it: NoPE and one absolute encoding (sinusoidal), seed 0, two shapes of about the
# same compute per run ("deep": 6 layers, 10,000 steps; "wide": 4 layers at d_model 128, 5,000
# steps), a learning rate tried beside the default where a task is near the goal.
PILOT_SHAPES: dict[str, dict[str, Any]] = {
    "deep": {"n_layers": 6, "steps": 10_000},
    "wide": {"n_layers": 4, "d_model": 128, "d_ff": 512, "steps": 5_000},
}
PAPER_FORMAT: dict[str, dict[str, str]] = {"addition": {"format": "paper"}, "lego": {"format": "paper"}}


def pilot_run(task: str, encoding: str, shape: str, **overrides: Any) -> RunConfig:
    """A pilot run of `task` (in the paper's format where ours differs) with a model `shape`."""
    if shape not in PILOT_SHAPES:
        raise _unknown("pilot shape", shape, PILOT_SHAPES)
    settings = {**PILOT_SHAPES[shape], "task_options": PAPER_FORMAT.get(task, {}), **overrides}
    return paper_split_runs(task, [encoding], [0], **settings)[0]


# The pilot's runs, in the order they were tried: (task, encoding, shape, other settings).
TEN_TASK_PILOT: list[tuple[str, str, str, dict[str, Any]]] = [
    ("polynomial", "nope", "deep", {}),
    ("polynomial", "nope", "wide", {}),
    *[(t, "nope", shape, {}) for t in ("addition", "lego") for shape in ("deep", "wide")],
    ("addition", "sinusoidal", "deep", {}),
    ("polynomial", "sinusoidal", "deep", {}),
    ("addition", "nope", "deep", {"lr": 2e-3}),  # addition is just at the goal with the default
    ("pcfg", "nope", "deep", {}),
    ("lego", "nope", "deep", {"lr": 2e-3}),  # neither shape learns LEGO with the default
    # the addition grid's two weakest seed-0 runs (notebook 07's goal table), the answer least
    # significant digit first
    *[
        ("addition", e, "deep", {"lr": 2e-3, "task_options": {"format": "paper", "answer": "lsd"}})
        for e in ("alibi", "rope")
    ],
]


def ten_task_pilot() -> list[RunConfig]:
    """The pilot's runs, in the order they were tried."""
    return [pilot_run(t, e, shape, **kw) for t, e, shape, kw in TEN_TASK_PILOT]


# The shape the pilot chose for each of those tasks, with any other setting it changed, and its
# grid (`sweep --grid TASK-SHAPE`): the deep shape for both, and for the paper's addition the
# doubled learning rate, which the pilot found nearer the goal (notebook 07 prints its table). The
# answer least significant digit first is no cure for every encoding (it helps RoPE's weakest seed,
# not ALiBi's), so the grid keeps the paper's format.
CHOSEN_SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "polynomial": ("deep", {}),
    "addition": ("deep", {"lr": 2e-3}),
}


def chosen_shape_runs(task: str, seeds: Sequence[int] = range(3)) -> list[RunConfig]:
    """The 6 encodings x 3 seeds of `task` in its chosen shape and the paper's format."""
    if task not in CHOSEN_SHAPES:
        raise _unknown("task with a chosen shape", task, CHOSEN_SHAPES)
    shape, changed = CHOSEN_SHAPES[task]
    settings = {**PILOT_SHAPES[shape], "task_options": PAPER_FORMAT.get(task, {}), **changed}
    return paper_split_runs(task, seeds=seeds, **settings)


def pilot_and_chosen_compute(pilot, copy_run: float):
    """The compute of the pilot (`pilot_table`'s rows) and of each chosen model's grid: runs,
    runs trained, copy runs; and a total row."""
    grids = {f"{t}, chosen model": chosen_shape_runs(t) for t in CHOSEN_SHAPES}
    rows = {"pilot": (len(pilot), int(pilot["in distribution (%)"].notna().sum()), pilot["copy runs"].sum())}
    for name, cfgs in grids.items():
        flops = sum(run_compute_flops(c, sample_steps=100) for c in cfgs)
        rows[name] = (len(cfgs), len(load_available(cfgs)[0]), flops / copy_run)
    spent = pd.DataFrame.from_dict(rows, orient="index", columns=["runs", "trained", "copy runs"])
    spent.loc["total"] = spent.sum()
    return spent


# The runs that stand for each task from here on: the chosen shape's grid where the pilot chose
# one, LEGO's longer grid (neither shape of the pilot learns it), else the task's grid.
def ranked_runs(task: str) -> list[RunConfig]:
    """The 6 encodings x 3 seeds that stand for `task` in notebook 07's tables and rankings."""
    if task in CHOSEN_SHAPES:
        return chosen_shape_runs(task)
    return paper_split_runs(task, steps=LONGER_STEPS[task]) if task == "lego" else paper_split_runs(task)


# LEGO and PCFG are learned by neither shape of the pilot (notebook 07's pilot table; PCFG's
# training loss still falling at 10,000 steps). A second pilot goes towards the paper's 12
# layers: LEGO (the paper's format) at 12 layers, PCFG at 8 (at 12 a PCFG run costs more, as notebook 07
# prints), both 10,000 steps at d_model 64, NoPE and sinusoidal, seed 0 (`sweep --grid lego-pilot
# pcfg-pilot`).
SECOND_PILOT: dict[str, dict[str, Any]] = {
    "lego": {"n_layers": 12, "steps": 10_000},
    "pcfg": {"n_layers": 8, "steps": 10_000},
}


def second_pilot(task: str) -> list[RunConfig]:
    """The second pilot's runs of `task` (LEGO or PCFG): NoPE, then sinusoidal, seed 0."""
    if task not in SECOND_PILOT:
        raise _unknown("task of the second pilot", task, SECOND_PILOT)
    settings = {"task_options": PAPER_FORMAT.get(task, {}), **SECOND_PILOT[task]}
    return paper_split_runs(task, ["nope", "sinusoidal"], [0], **settings)


SECOND_PILOT_GOAL = 0.95  # in distribution (the mean over the training sizes), NoPE and sinusoidal alike


# The paper's own runs do not reach the study's goal in distribution on PCFG (its run records,
# results/published/paper_in_distribution.csv, read by the study's measure: `paper_level`). A task
# the paper ranks at that level joins the ranking here when every one of its runs reaches the
# lowest of the paper's own runs on it. The second pilot's 8-layer PCFG runs clear that bar at
# 10,000 steps (notebook 07), so PCFG's grid is that model (`sweep --grid pcfg-deep`, seed-major:
# every encoding's seed 0 first).
# LEGO's one run whose loss was still falling is the wide shape's: `sweep --grid lego-width`
# trains it for 10,000 steps.
PCFG_SHAPE: dict[str, Any] = {"n_layers": 8, "steps": 10_000}
LEGO_WIDTH: dict[str, Any] = {**PILOT_SHAPES["wide"], "steps": 10_000}


def paper_in_distribution(path: Path | None = None):
    """The in-distribution exact match of the paper's own runs where its run records give it
    (PCFG, SCAN): task, split, encoding ("all" for every run), runs, measure, lowest, median and
    highest (fractions)."""
    return pd.read_csv(path or PUBLISHED_DIR / "paper_in_distribution.csv", comment="#")


def paper_level(task: str, split: str = "md_productivity", path: Path | None = None) -> float | None:
    """The lowest in-distribution exact match of the paper's own runs on `task`, by the study's
    measure (the mean over the training sizes), on the split the paper ranks; None where its
    records give none."""
    pub = paper_in_distribution(path)
    rows = pub[(pub["task"] == task) & (pub["split"] == split) & (pub["encoding"] == "all")]
    rows = rows[rows["measure"] == "mean over sizes"]
    return float(rows["lowest"].iloc[0]) if len(rows) else None


def pcfg_deep_runs(seeds: Sequence[int] = range(3)) -> list[RunConfig]:
    """PCFG's grid on the second pilot's 8-layer model: 6 encodings x 3 seeds, seed-major."""
    return paper_split_runs("pcfg", seeds=seeds, **PCFG_SHAPE)


def lego_width() -> list[RunConfig]:
    """LEGO (the paper's format) on the wide shape for 10,000 steps: NoPE, then sinusoidal, seed 0."""
    return paper_split_runs("lego", ["nope", "sinusoidal"], [0], task_options=PAPER_FORMAT["lego"], **LEGO_WIDTH)


# On addition, runs that stall on a plateau with LayerNorm after each residual sum (the study's
# model) learn when it comes before each sublayer instead, as in the paper's T5 decoder
# (notebook 10). LEGO's chain asks for depth, and deep post-LN stacks are where training stalls:
# `sweep --grid lego-pre-norm` tries the pre-norm model at 6 layers, 10,000 steps, NoPE and
# sinusoidal, seed 0, in the paper's clause order and the shuffled one; `lego-pre-norm-8` the
# same at 8 layers, as 6 missed. A grid would follow only if every run of a depth learned LEGO in
# distribution (`learned_in_distribution`'s bar).
LEGO_PRE_NORM: dict[str, Any] = {"n_layers": 6, "steps": 10_000, "pre_norm": True}


def lego_pre_norm(n_layers: int = 6) -> list[RunConfig]:
    """LEGO on the pre-norm model with `n_layers` layers: NoPE, then sinusoidal, seed 0, in the
    paper's clause order, then the shuffled one."""
    settings = {**LEGO_PRE_NORM, "n_layers": n_layers}
    return [
        c
        for order in ("paper", "shuffled")
        for c in paper_split_runs("lego", ["nope", "sinusoidal"], [0], task_options={"format": order}, **settings)
    ]


def lego_chain_position(prompt: Tensor, n: int) -> int:
    """The queried variable's place in its chain (1 = the root, whose clause reads `= +1` or
    `= -1`), from a LEGO prompt of n clauses and its query, in either format: the hops from
    the root to it, following each clause's operand."""
    clauses = prompt[: 3 * n].view(n, 3).tolist()
    clause_of = {name: (name, sign, operand) for name, sign, operand in clauses}
    name, hops = int(prompt[3 * n]), 1
    while (operand := clause_of[name][2]) in clause_of:
        name, hops = operand, hops + 1
    return hops


def pcfg_depth(words: Sequence[str]) -> int:
    """How deeply a PCFG SET expression (its words, padding "_" allowed) nests its function calls:
    0 for a bare string, 1 for one call on strings, one more for each call inside an argument."""
    words = [w for w in words if w != "_"]

    def expr(i: int) -> tuple[int, int]:  # (depth, the word after the expression)
        if i >= len(words):
            raise ValueError(f"not a PCFG SET expression (expected a string at word {i + 1}): {' '.join(words)!r}")
        if words[i] in PCFG_UNARY:
            depth, j = expr(i + 1)
            return depth + 1, j
        if words[i] in PCFG_BINARY:
            first, j = expr(i + 1)
            second, k = expr(j + 1)  # words[j] is the ","
            return max(first, second) + 1, k
        j = i
        while j < len(words) and words[j] in PCFG_SYMBOLS:
            j += 1
        if j == i:
            raise ValueError(f"not a PCFG SET expression (expected a string at word {i + 1}): {' '.join(words)!r}")
        return 0, j

    return expr(0)[0]


def exact_match_by_group(
    model: DecoderOnlyLM, cfg: RunConfig, sizes: Iterable[int], group: Callable[[Tensor, int], int], count: int = 1024
):
    """Exact match (%, teacher-forced, which equals greedy decoding) of a trained model on its
    task's evaluation sequences, per size and per `group(prompt, n)` of each prompt (its tokens
    after BOS): a frame of size x group (NaN where no sequence falls), and each cell's count."""
    task, rows = cfg.make_task(), []
    for n in sizes:
        batch = evaluation_batch(task, n, count, cfg.eval_seed, cfg.model)
        with evaluating(model), torch.no_grad():
            right = exact_match_rows(model, batch)
        prompts = batch.inputs[:, 1 : 1 + task.prompt_length(n)]
        rows += [{"size": n, "group": group(p, n), "right": bool(r)} for p, r in zip(prompts, right)]
    df = pd.DataFrame(rows)
    score = 100 * df.pivot_table(index="size", columns="group", values="right", aggfunc="mean")
    return score, df.pivot_table(index="size", columns="group", values="right", aggfunc="size")


def lego_by_chain_position(model: DecoderOnlyLM, cfg: RunConfig, sizes: Iterable[int] = (4, 6, 8), count: int = 1024):
    """LEGO exact match (%) per size and per queried variable's place in its chain (1 = root)."""
    return exact_match_by_group(model, cfg, sizes, lego_chain_position, count)


def pcfg_by_depth(model: DecoderOnlyLM, cfg: RunConfig, sizes: Iterable[int] = (2, 4, 6, 8), count: int = 1024):
    """PCFG exact match (%) per size (function calls) and per nesting depth of the expression."""
    task = cfg.make_task()
    return exact_match_by_group(model, cfg, sizes, lambda p, n: pcfg_depth(task.decode(p.tolist())), count)


TASK_OPTION_WORDS = {"paper": "the paper's format", "lsd": "answer reversed"}


TASK_NAMES = {"lego": "LEGO", "pcfg": "PCFG SET", "scan": "SCAN"}  # the names their papers give them


# What a task's size n counts, for axis labels.
SIZE_UNITS: dict[str, str] = {
    "copy": "symbols",
    "reverse": "symbols",
    "addition": "digits",
    "sorting": "integers",
    "summation": "digits",
    "parity": "bits",
    "polynomial": "terms",
    "lego": "variables",
    "scan": "actions",
    "pcfg": "function calls",
}


def majority_answer_share(key: str, sizes: Iterable[int], count: int = 4096, seed: int = 99):
    """The exact match of a model that ignores its input and writes the most common answer: per
    size, the share of `count` drawn sequences whose answer is the commonest one (0-1)."""
    task, out = task_of_key(key), {}
    for n in sizes:
        batch = single_length_batch(task, n, count, eval_generator(f"majority/{key}", n, seed))
        sep = batch.tokens == SEP
        answers = [tuple(row[int(s.nonzero()[0]) + 1 :].tolist()) for row, s in zip(batch.tokens, sep)]
        out[int(n)] = Counter(answers).most_common(1)[0][1] / count
    return pd.Series(out, name="majority answer")


# Ranking across tasks, two ways (notebook 07). The study's statistic: six encodings, each task's
# test sizes L+1..2L averaged, ties sharing their rank, each task weighted equally. The paper's
# (its aggregate notebook): five encodings (no learned table), each (split, seed) column's pooled
# test accuracy, ties broken by the row order (pandas' method="first"), 17 splits of which copy has
# five, reverse three and sorting two: `PAPER_SPLITS` says how many of its splits each of our
# tasks stands for. Uncertainty resamples tasks, then seeds within each task (a task's seeds
# belong together; seeds of different tasks are unrelated runs).
PAPER_SPLITS = {
    "copy": 5, "reverse": 3, "sorting": 2, "addition": 1, "summation": 1, "parity": 1,
    "polynomial": 1, "lego": 1, "scan": 1, "pcfg": 1,
}  # fmt: skip
PAPER_ROW_ORDER = ("rope", "alibi", "t5", "sinusoidal", "nope")  # its table's rows: ties favour the first


def ood_scores(df, pooled: bool = False):
    """One row per (task, seed), one column per encoding: exact match out of distribution, over
    each task's test sizes L+1..2L. The mean over sizes (the study's), or `pooled`: weighted as the
    paper's test files pool them (`Task.size_weights`: SCAN by its commands per size, the paper's
    addition by its pairs of digit counts; uniform otherwise)."""
    test = ood_rows(df, None)
    parts = []
    for key, part in test.groupby("task"):
        sizes = sorted(part["n"].unique())
        w = task_of_key(key).size_weights(sizes) if pooled else None
        weight = dict(zip(sizes, np.ones(len(sizes)) if w is None else w.numpy()))
        part = part.assign(w=part["n"].map(weight))
        part = part.assign(wx=part["w"] * part["exact_match"])
        g = part.groupby(["task", "seed", "encoding"])
        parts.append((g["wx"].sum() / g["w"].sum()).unstack("encoding"))
    out = pd.concat(parts) if parts else pd.DataFrame()
    return out[[e for e in ENCODINGS if e in out.columns]]


def _task_weights(rr, splits: dict[str, int] | None) -> np.ndarray:
    tasks = rr.index.get_level_values("task").unique()
    if splits is None:
        return np.ones(len(tasks))
    missing = [t for t in tasks if t.split(".")[0] not in splits]
    if missing:
        raise ValueError(f"no paper splits known for tasks {missing}; known: {', '.join(splits)}")
    return np.array([float(splits[t.split(".")[0]]) for t in tasks])


def weighted_mrr(rr, splits: dict[str, int] | None = None):
    """Mean reciprocal rank from per-(task, seed) reciprocal ranks: seeds averaged within a task,
    then tasks averaged, each weighted equally or (`splits`) by the paper's splits it stands for."""
    per_task = rr.groupby(level="task", sort=False).mean()
    w = _task_weights(rr, splits)
    return (per_task.mul(w, axis=0).sum() / w.sum()).sort_values(ascending=False).rename("mean reciprocal rank")


def study_mrr(scores):
    """The study's ranking statistic: six encodings, ties averaged, each task weighted equally."""
    return weighted_mrr(column_reciprocal_ranks(scores))


def paper_mrr(scores, order: Sequence[str] = PAPER_ROW_ORDER, splits: dict[str, int] | None = PAPER_SPLITS):
    """The paper's statistic on `scores` (pooled, `ood_scores(pooled=True)`): five encodings,
    ties broken by `order`, each task standing for its number of the paper's splits."""
    return weighted_mrr(column_reciprocal_ranks(scores, order), splits)


def paper_mrr_over_orders(scores, splits: dict[str, int] | None = PAPER_SPLITS):
    """The paper's statistic under every one of the 120 row orders (its ties are broken by row
    order): each encoding's value at the paper's order, and its lowest and highest."""
    runs = pd.DataFrame([paper_mrr(scores, o, splits) for o in itertools.permutations(PAPER_ROW_ORDER)])
    out = pd.DataFrame({"paper's order": paper_mrr(scores, PAPER_ROW_ORDER, splits)})
    return out.assign(lowest=runs.min(), highest=runs.max()).sort_values("paper's order", ascending=False)


def hierarchical_bootstrap(rr, splits: dict[str, int] | None = None, n_boot: int = 10000, seed: int = 0) -> np.ndarray:
    """(n_boot, encodings): the mean reciprocal rank (`weighted_mrr`) over resamples that draw the
    tasks with replacement, then each drawn task's seeds with replacement."""
    rng = np.random.default_rng(seed)
    blocks = [g.to_numpy(dtype=float) for _, g in rr.groupby(level="task", sort=False)]
    w = _task_weights(rr, splits)
    out = np.empty((n_boot, rr.shape[1]))
    for i in range(n_boot):
        tasks = rng.integers(0, len(blocks), len(blocks))
        means = np.stack([blocks[t][rng.integers(0, len(blocks[t]), len(blocks[t]))].mean(0) for t in tasks])
        out[i] = (means * w[tasks, None]).sum(0) / w[tasks].sum()
    return out


def paper_mrr_check(path: Path | None = None):
    """The paper's published mean reciprocal rank against the columns its notebook shows
    (results/published/paper_mrr_columns.json): the shown accuracies ranked by its rule, plus the
    shown reciprocal ranks, leave for its other columns a sum of reciprocal ranks per encoding that
    must lie between (columns) / 5 and (columns), and that adds up over the encodings to
    (columns) x (1 + 1/2 + .. + 1/5) if each column ranks five encodings without shared ranks."""
    pub = json.loads(Path(path or PUBLISHED_DIR / "paper_mrr_columns.json").read_text())
    order, total = pub["row_order"], sum(len(v) for v in pub["splits"].values()) * len(pub["seeds"])
    acc = pd.DataFrame(
        {(k, i): {e: v[e][i] for e in order} for k, v in pub["accuracy_shown"].items() for i in range(3)}
    )
    shown = pd.DataFrame(
        {(k, i): {e: v[e][i] for e in order} for k, v in pub["reciprocal_rank_shown"].items() for i in range(3)}
    )
    ranked = column_reciprocal_ranks(acc.T, order).T
    known = ranked.sum(axis=1) + shown.sum(axis=1)
    rest = total - ranked.shape[1] - shown.shape[1]
    implied = total * pd.Series(pub["mean_reciprocal_rank"]) - known
    out = pd.DataFrame({"published MRR": pd.Series(pub["mean_reciprocal_rank"]), "shown columns' sum": known})
    out["other columns' sum"] = implied
    out["within [n/5, n]"] = (implied >= rest / 5 - 1e-3) & (implied <= rest + 1e-3)
    harmonic = rest * sum(1 / r for r in range(1, 6))
    return out.round(3), rest, round(float(implied.sum()), 3), round(harmonic, 3)


def seed_order(scores, task: str) -> str:
    """A task's encodings in one line, in the order of their mean over seeds: ">" between
    neighbours where every seed puts the first ahead, "~" where they do not all agree."""
    s = scores.xs(task, level="task")
    order = list(s.mean().sort_values(ascending=False).index)
    line = encoding_title(order[0])
    for a, b in zip(order[:-1], order[1:]):
        line += f" {'>' if bool((s[a] > s[b]).all()) else '~'} {encoding_title(b)}"
    return line


# Eight tasks and three seeds are thin for a bootstrap over tasks, so an ordering is stated only
# where three kinds of evidence agree: the hierarchical bootstrap, the per-task win count (more
# than half the tasks) and an exact sign-flip test over tasks. Both tests are two-sided: the point
# statistic picks which encoding of a pair is ahead, so a one-sided p in that direction would
# double the error rate the rule states. The family is every pair of encodings in a table (15 for
# six, 10 for five), named before any run was ranked: the bootstrap's p (twice the smaller share
# of resamples on either side) and the sign-flip p are each corrected for the table's pairs by
# Holm's step-down rule, and both must stay at most `FAMILY_ALPHA`, so that the chance of stating
# any false ordering in a table is at most 0.10 per test. Over T tasks the smallest p an exact
# sign-flip test can give is 2 / 2^T (`smallest_corrected_p`), which bounds what a table can state.
# Two checks are shown beside them: whether leaving out any one task flips the ordering, and how
# often it holds when each encoding's seeds are paired with the other encodings' at random (a
# column's runs share only a seed number; they are unrelated runs).
FAMILY_ALPHA = 0.10


def holm_adjusted(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values: the k-th smallest of m is multiplied by m - k + 1 (k from
    1), kept at least as large as every smaller one's, and capped at 1. Rejecting where the
    adjusted p is at most alpha holds the family-wise error rate at alpha."""
    p = np.asarray(p_values, dtype=float)
    adjusted, running = np.empty(len(p)), 0.0
    for k, i in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (len(p) - k) * p[i]))
        adjusted[i] = running
    return adjusted


def per_task_rr(rr):
    """Each task's mean reciprocal rank over its seeds: (tasks, encodings)."""
    return rr.groupby(level="task", sort=False).mean()


def sign_flip_p(differences: Sequence[float], weights: Sequence[float] | None = None, two_sided: bool = False) -> float:
    """Exact sign-flip test over tasks: the share of the 2^T sign assignments whose weighted sum of
    differences is at least the observed one (ties included); `two_sided`: whose sum is at least
    as far from 0 as the observed one, either way."""
    d = np.asarray(differences, dtype=float) * (np.ones(len(differences)) if weights is None else np.asarray(weights))
    sums = np.array(list(itertools.product((1.0, -1.0), repeat=len(d)))) @ d
    if two_sided:
        return float((np.abs(sums) >= abs(d.sum()) - 1e-12).mean())
    return float((sums >= d.sum() - 1e-12).mean())


def bootstrap_two_sided_p(share_ahead: float) -> float:
    """A bootstrap's two-sided p from the share of resamples with A ahead of B: twice the smaller
    of the shares on either side, capped at 1."""
    return min(1.0, 2 * min(share_ahead, 1 - share_ahead))


def smallest_corrected_p(n_tasks: int, n_pairs: int) -> float:
    """The smallest Holm-corrected p a table of `n_pairs` pairs can give with a two-sided exact
    sign-flip test over `n_tasks` tasks: its smallest p, 2 / 2^T (every task's difference the same
    sign), times the pairs (Holm's first step)."""
    if n_tasks < 1 or n_pairs < 1:
        raise ValueError(f"need at least one task and one pair; got {n_tasks} tasks and {n_pairs} pairs")
    return min(1.0, n_pairs * 2.0 / 2**n_tasks)


def reshuffled_seeds(scores, order: Sequence[str] | None = None, splits=None, n: int = 1000, seed: int = 0):
    """(n, encodings) mean reciprocal ranks after pairing each encoding's seeds with the others' at
    random within each task (each encoding's seed column permuted on its own)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        parts = []
        for _, g in scores.groupby(level="task", sort=False):
            values = g.to_numpy().copy()
            for j in range(values.shape[1]):
                values[:, j] = values[rng.permutation(len(values)), j]
            parts.append(pd.DataFrame(values, index=g.index, columns=g.columns))
        rr = column_reciprocal_ranks(pd.concat(parts), order)
        out.append(weighted_mrr(rr, splits)[list(rr.columns)].to_numpy())
    return np.array(out)


def pairwise_evidence(
    scores, order: Sequence[str] | None = None, splits=None, n_boot: int = 10000, n_pairings: int = 200, seed: int = 0
):
    """Every pair of encodings (A ahead of B by the point statistic), with: the mean reciprocal
    ranks, the share of hierarchical resamples with A ahead, the tasks A wins (per-task mean
    reciprocal rank higher), the exact sign-flip p over tasks (two-sided), whether A stays ahead with
    any one task left out, the share of `n_pairings` random seed pairings with A ahead, both tests'
    two-sided p-values corrected for the pairs tested (`holm_adjusted`), and whether the ordering is stated (more than
    half the tasks won, both corrected p-values at most `FAMILY_ALPHA`). `order` and `splits` as
    `paper_mrr` (the paper's statistic) or None (the study's)."""
    rr = column_reciprocal_ranks(scores, order)
    point, names = weighted_mrr(rr, splits), list(rr.columns)
    p = pairwise_above(hierarchical_bootstrap(rr, splits, n_boot, seed), names)
    tasks, w = per_task_rr(rr), _task_weights(rr, splits)
    shuffled = pd.DataFrame(reshuffled_seeds(scores, order, splits, n_pairings, seed), columns=names)
    rows = []
    for a, b in itertools.combinations(point.index, 2):  # a ahead of b by the point statistic
        d = (tasks[a] - tasks[b]).to_numpy()
        left_out = [np.delete(d * w, i).sum() > 0 for i in range(len(d))] if len(d) > 1 else [False]
        row = {
            "pair": f"{encoding_title(a)} > {encoding_title(b)}",
            "MRR A": point[a],
            "MRR B": point[b],
            "bootstrap": p.loc[a, b],
        }
        row |= {"tasks won": f"{int((d > 0).sum())} of {len(d)}", "sign-flip p": sign_flip_p(d, w, two_sided=True)}
        row |= {
            "holds leaving out any one task": all(left_out),
            "random seed pairings": float((shuffled[a] > shuffled[b]).mean()),
        }
        rows.append(row | {"won most tasks": bool((d > 0).sum() > len(d) / 2)})
    out = pd.DataFrame(rows).set_index("pair")
    out["bootstrap p (Holm)"] = holm_adjusted(out["bootstrap"].map(bootstrap_two_sided_p))
    out["sign-flip p (Holm)"] = holm_adjusted(out["sign-flip p"])
    corrected = (out["bootstrap p (Holm)"] <= FAMILY_ALPHA) & (out["sign-flip p (Holm)"] <= FAMILY_ALPHA)
    out["stated"] = out.pop("won most tasks") & corrected
    return out


def mrr_decomposition(df, t5_etc: Sequence[str] = PAPER_ROW_ORDER):
    """From the study's statistic to the paper's on the same runs, one change at a time: every
    encoding's mean reciprocal rank after each step (rows), encodings as columns (the learned
    table's blank once it is dropped)."""
    mean, pooled = ood_scores(df), ood_scores(df, pooled=True)
    five = [e for e in mean.columns if e in t5_etc]
    steps = {
        "the study's statistic (six encodings, mean over sizes, ties shared, tasks alike)": study_mrr(mean),
        "without the learned table (five encodings)": study_mrr(mean[five]),
        "pooled test accuracy": study_mrr(pooled[five]),
        "ties broken by the paper's row order": weighted_mrr(column_reciprocal_ranks(pooled, t5_etc)),
        "each task weighed by the paper's splits it stands for (the paper's statistic)": paper_mrr(pooled, t5_etc),
    }
    return pd.DataFrame(steps).T[list(mean.columns)].rename(columns=encoding_title)


def both_statistics(frames: Mapping[str, Any]):
    """Each frame's mean reciprocal rank (label -> `exact_match_frame`) by the study's statistic
    and by the paper's computed on it, side by side (encodings as rows)."""
    columns = {f"study's, {k}": study_mrr(ood_scores(f)) for k, f in frames.items()}
    columns |= {f"paper's on ours, {k}": paper_mrr(ood_scores(f, pooled=True)) for k, f in frames.items()}
    return pd.DataFrame(columns)


def evidence_both(frame) -> dict[str, Any]:
    """`pairwise_evidence` of one frame by each statistic: {"study's": ..., "paper's": ...}."""
    return {
        "study's": pairwise_evidence(ood_scores(frame)),
        "paper's": pairwise_evidence(ood_scores(frame, pooled=True), PAPER_ROW_ORDER, PAPER_SPLITS),
    }


def between(evidence, a: str, b: str):
    """The row of `pairwise_evidence` (or `evidence_table`) for encodings `a` and `b`, whichever
    is ahead."""
    pairs = [f"{encoding_title(a)} > {encoding_title(b)}", f"{encoding_title(b)} > {encoding_title(a)}"]
    found = [q for q in pairs if q in evidence.index]
    if not found:
        raise KeyError(f"no pair of {a} and {b}; pairs: {', '.join(evidence.index)}")
    return evidence.loc[found]


def paper_test_accuracy(tasks: Sequence[str]):
    """The paper's test exact match (mean of 3 seeds) for those of `tasks` (task keys) it reports
    in the format it used: (encoding x task). Addition's figure stands beside "addition.paper",
    not beside our own format."""
    paper = paper_figures()
    every = paper["ood_exact_match_mean_of_3_seeds"] | paper["ood_exact_match_other_tasks"]

    def its_format(key: str) -> bool:
        name = task_of_key(key).name
        return key == get_task(name, PAPER_FORMAT.get(name)).key

    return pd.DataFrame(
        {t: every[task_of_key(t).name] for t in tasks if task_of_key(t).name in every and its_format(t)}
    )


register_experiments(  # each: its name (`sweep --grid NAME`), its runs, its folder under results/
    "07_paper_tasks",
    [
        ("paper-tasks", paper_tasks_runs, "."),
        *[(task, functools.partial(paper_split_runs, task), ".") for task in (*PAPER_TASKS, "scan", "pcfg")],
        *[
            (f"{task}-longer", functools.partial(paper_split_runs, task, steps=steps), ".")
            for task, steps in LONGER_STEPS.items()
        ],
        ("ten-task-pilot", ten_task_pilot, "pilots"),
        *[
            (f"{task}-{shape}", functools.partial(chosen_shape_runs, task), ".")
            for task, (shape, _) in CHOSEN_SHAPES.items()
        ],
        *[(f"{task}-pilot", functools.partial(second_pilot, task), "pilots") for task in SECOND_PILOT],
        ("pcfg-deep", pcfg_deep_runs, "."),
        ("lego-width", lego_width, "pilots"),
        ("lego-pre-norm", lego_pre_norm, "pilots"),
        ("lego-pre-norm-8", functools.partial(lego_pre_norm, 8), "pilots"),
    ],
)


# What notebook 07 shows: tables, figures and verdicts.
def pilot_table(copy_run: float, results_dir: str | Path | None = None):
    """The pilot, one row per run in the order tried: task (format), encoding, shape, learning
    rate, steps, compute in copy runs (`copy_run`: one copy run's FLOPs), wall time, and mean exact
    match over the training sizes (%)."""
    results_dir = experiment("ten-task-pilot").results_dir() if results_dir is None else results_dir
    rows = []
    for cfg, (_, _, shape, _) in zip(ten_task_pilot(), TEN_TASK_PILOT):
        rec = record_of(results_dir, cfg)
        rows.append(
            {
                "task": cfg.make_task().key,
                "encoding": cfg.encoding,
                "shape": shape,
                "lr": cfg.lr,
                "steps": cfg.steps,
                "copy runs": run_compute_flops(cfg, sample_steps=100) / copy_run,
                "wall (min)": rec["wall_time_s"] / 60 if rec else float("nan"),
                "in distribution (%)": 100 * rec["in_distribution_mean"] if rec else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def second_pilot_table(copy_run: float, results_dir: str | Path | None = None):
    """The second pilot, one row per run: task (format), encoding, layers, steps, compute in copy
    runs, wall time, exact match (%) at the longest training size and its mean over the training
    sizes, and whether that mean reaches the goal (`SECOND_PILOT_GOAL`; None until trained)."""
    results_dir = experiment("lego-pilot").results_dir() if results_dir is None else results_dir
    rows = []
    for cfg in (c for task in SECOND_PILOT for c in second_pilot(task)):
        rec = record_of(results_dir, cfg)
        rows.append(
            {
                "task": cfg.make_task().key,
                "encoding": cfg.encoding,
                "layers": cfg.model.n_layers,
                "steps": cfg.steps,
                "copy runs": run_compute_flops(cfg, sample_steps=100) / copy_run,
                "wall (min)": rec["wall_time_s"] / 60 if rec else float("nan"),
                f"at {cfg.train_max_len} (%)": 100 * rec["exact_match"][str(cfg.train_max_len)]
                if rec
                else float("nan"),
                "in distribution (%)": 100 * rec["in_distribution_mean"] if rec else float("nan"),
                "goal": bool(rec["in_distribution_mean"] >= SECOND_PILOT_GOAL) if rec else None,
            }
        )
    return pd.DataFrame(rows)


def size_label(key: str) -> str:
    """The x label for a task's sizes: "size n (what n counts)" ("size n" for a task not listed)."""
    unit = SIZE_UNITS.get(task_of_key(key).name)
    return f"size n ({unit})" if unit else "size n"


def task_title(key: str) -> str:
    """A task's key in words for a figure: "addition.paper" -> "addition (the paper's format)"."""
    name, *options = key.split(".")
    name = TASK_NAMES.get(name, name)
    return f"{name} ({', '.join(TASK_OPTION_WORDS.get(o, o) for o in options)})" if options else name


def in_distribution_goal(df, median_bar: float = 0.95, seed_bar: float = 0.90, seeds: int = 3):
    """Per (task, encoding): each seed's mean exact match over the training sizes, then its median
    and lowest over seeds, and whether it meets the goal (median >= `median_bar`, no seed below
    `seed_bar`, `seeds` seeds)."""
    per_seed = training_rows(df).groupby(["task", "encoding", "seed"])["exact_match"].mean()
    g = per_seed.groupby(level=["task", "encoding"])
    median, lowest, count = g.median(), g.min(), g.size()
    meets = (median >= median_bar) & (lowest >= seed_bar) & (count >= seeds)
    return pd.DataFrame(
        {
            "median (%)": (100 * median).round(1),
            "lowest seed (%)": (100 * lowest).round(1),
            "seeds": count,
            "meets goal": meets,
        }
    )


def hierarchical_summary(rr, splits: dict[str, int] | None = None, n_boot: int = 10000, seed: int = 0):
    """Per encoding: the mean reciprocal rank (`weighted_mrr`), its 95% interval over hierarchical
    resamples (tasks, then seeds within each) and the share of resamples in which it is the best."""
    boot = hierarchical_bootstrap(rr, splits, n_boot, seed)
    point = weighted_mrr(rr, splits)[list(rr.columns)]
    out = pd.DataFrame(
        {
            "mean": point.to_numpy(),
            "95% low": np.percentile(boot, 2.5, axis=0),
            "95% high": np.percentile(boot, 97.5, axis=0),
            "P(best)": np.bincount(boot.argmax(axis=1), minlength=boot.shape[1]) / len(boot),
        },
        index=list(rr.columns),
    )
    return out.sort_values("mean", ascending=False)


def evidence_table(evidence):
    """`pairwise_evidence` as a reader scans it: shares in %, the sign-flip p to 3 places, and a
    mark per check ("yes" where it holds)."""
    yes = {True: "yes", False: "no"}
    return pd.DataFrame(
        {
            "MRR A": evidence["MRR A"].round(3),
            "MRR B": evidence["MRR B"].round(3),
            "bootstrap (%)": (100 * evidence["bootstrap"]).round(0).astype(int),
            "tasks won": evidence["tasks won"],
            "sign-flip p": evidence["sign-flip p"].round(3),
            "bootstrap p, Holm": evidence["bootstrap p (Holm)"].round(3),
            "sign-flip p, Holm": evidence["sign-flip p (Holm)"].round(3),
            "holds without any one task": evidence["holds leaving out any one task"].map(yes),
            "random seed pairings (%)": (100 * evidence["random seed pairings"]).round(0).astype(int),
            "stated": evidence["stated"].map(yes),
        }
    )


def stated_orderings(evidence) -> str:
    """The pairs `pairwise_evidence` states, joined; "none" if it states none."""
    return ", ".join(evidence.index[evidence["stated"]]) or "none"


def family_reach(evidence) -> str:
    """What a `pairwise_evidence` table's tests can state at all: its pairs (the family), its
    tasks, and the smallest Holm-corrected p its sign-flip test can give (`smallest_corrected_p`)
    against `FAMILY_ALPHA`."""
    tasks = int(str(evidence["tasks won"].iloc[0]).split(" of ")[1])
    p = smallest_corrected_p(tasks, len(evidence))
    where = "over" if p > FAMILY_ALPHA else "within"
    line = f"{len(evidence)} pairs over {tasks} tasks: the smallest corrected two-sided sign-flip p is {p:.3f}"
    return line + f", {where} {FAMILY_ALPHA:.2f}" + (": no ordering can be stated" if p > FAMILY_ALPHA else "")


def goal_marks(goal):
    """`in_distribution_goal` as one (task x encoding) table: the median over seeds (%), with the
    lowest seed in brackets and a cross where the goal is missed, a tick where it is met."""

    def cell(row) -> str:
        if row["meets goal"]:
            return f"{row['median (%)']:.1f} ✓"
        return f"{row['median (%)']:.1f} ({row['lowest seed (%)']:.1f}) ✗"

    out = goal.apply(cell, axis=1).unstack("encoding")
    return out[[e for e in ENCODINGS if e in out.columns]].rename(columns=encoding_title)


def tasks_meeting_goal(goal, tasks: Sequence[str]) -> list[str]:
    """Those of `tasks` on which every encoding meets the in-distribution goal."""
    return [t for t in tasks if bool(goal.loc[t, "meets goal"].all())]


def flagged_ranks(rr, goal):
    """Each task's mean reciprocal rank over its seeds (`per_task_rr`), to 2 places, marked "*"
    where that (task, encoding) misses the in-distribution goal: there the rank measures a failure
    to learn the task, not to extrapolate it."""
    per_task = per_task_rr(rr)
    missed = set(goal.index[~goal["meets goal"].astype(bool)])
    marks = pd.DataFrame(
        [[" *" if (t, e) in missed else "" for e in per_task.columns] for t in per_task.index],
        index=per_task.index,
        columns=per_task.columns,
    )
    return (per_task.map("{:.2f}".format) + marks).rename(columns=encoding_title)


def runs_against_level(configs: Sequence[RunConfig], level: float, results_dir: str | Path = RESULTS_DIR):
    """One row per run of `configs` (encoding, seed): whether it is trained, its mean exact match
    over the training sizes (%) and whether that reaches `level` (a fraction; None untrained)."""
    rows = []
    for cfg in configs:
        rec = record_of(results_dir, cfg)
        score = 100 * rec["in_distribution_mean"] if rec else float("nan")
        clears = bool(rec["in_distribution_mean"] >= level) if rec else None
        rows.append(
            {"encoding": encoding_title(cfg.model.encoding), "seed": cfg.seed, "trained": rec is not None}
            | {"in distribution (%)": score, "clears": clears}
        )
    return pd.DataFrame(rows)


def shape_words(model: ModelConfig) -> str:
    """A model's shape as the tables of every model tried name it: "6 x 64", or "6 x 64, pre-norm"."""
    return f"{model.n_layers} x {model.d_model}" + (", pre-norm" if model.pre_norm else "")


def shapes_tried(task: str, window: int = 2000, falling: float = STILL_FALLING):
    """Every model tried on `task` (`trained_runs_of`), one row per (format, shape, steps, learning
    rate, encoding) in the order first trained: its experiment, layers x width, seeds, the mean exact
    match over the training sizes (%; median and range over seeds), the training loss at the end
    (median), its change over the last `window` steps (%, median) and how many seeds' loss still
    falls there by more than the fraction `falling`."""
    rows = []
    for name, cfg, rec in trained_runs_of(task):
        end = cfg.steps
        last, before = loss_at(rec, end), loss_at(rec, end - window)
        shape = shape_words(cfg.model)
        rows.append(
            {"format": cfg.make_task().key, "experiment": name, "shape": shape, "steps": end, "learning rate": cfg.lr}
            | {
                "encoding": encoding_title(cfg.model.encoding),
                "seed": cfg.seed,
                "in": 100 * rec["in_distribution_mean"],
                "loss": last,
                "change": 100 * (last / before - 1),
                "falling": still_falling(before, last, falling),
            }
        )
    runs = pd.DataFrame(rows)
    keys = ["format", "shape", "steps", "learning rate", "encoding"]
    out = runs.groupby(keys, sort=False).agg(
        experiment=("experiment", "first"),
        seeds=("seed", "nunique"),
        median=("in", "median"),
        lowest=("in", "min"),
        highest=("in", "max"),
        loss=("loss", "median"),
        change=("change", "median"),
        falling=("falling", "sum"),
    )
    return out.rename(
        columns={
            "median": "in distribution (%, median)",
            "lowest": "lowest (%)",
            "highest": "highest (%)",
            "loss": "final loss (median)",
            "change": f"loss change over the last {window:,} steps (%, median)",
            "falling": f"seeds still falling (> {100 * falling:g}%)",
        }
    ).reset_index()


def sizes_tried(task: str, level: float = 0.9) -> pd.DataFrame:
    """Every model tried on `task` (`trained_runs_of`), one row per (format, shape, steps, learning
    rate, encoding) as `shapes_tried` has them: exact match (%) at each training size, the median
    over its seeds, and the size up to which every size holds `level` (`longest_at_least`, on
    those medians): the longest chain, for LEGO, the models resolve."""
    rows, sizes = [], {}
    for _, cfg, rec in trained_runs_of(task):
        keys = {"format": cfg.make_task().key, "shape": shape_words(cfg.model), "steps": cfg.steps}
        keys |= {"learning rate": cfg.lr, "encoding": encoding_title(cfg.model.encoding), "seed": cfg.seed}
        trained = cfg.make_task().sizes(1, cfg.train_max_len)
        sizes |= dict.fromkeys(trained)
        rows.append(keys | {n: 100 * rec["exact_match"][str(n)] for n in trained})
    runs = pd.DataFrame(rows)
    keys = ["format", "shape", "steps", "learning rate", "encoding"]
    out = runs.groupby(keys, sort=False).agg({"seed": "nunique"} | {n: "median" for n in sorted(sizes)})
    out = out.rename(columns={"seed": "seeds"})
    sizes = sorted(sizes)
    out[f"every size >= {100 * level:g}% to"] = [
        longest_at_least({n: row[n] / 100 for n in sizes}, level) for _, row in out.iterrows()
    ]
    return out.reset_index()


def plot_shapes_tried(
    task: str, encodings: Sequence[str] = ("nope", "sinusoidal"), seed: int = 0, path: Path | None = None
):
    """Training loss against step for every model tried on `task` (`trained_runs_of`), seed
    `seed`: one panel per encoding, one line per (shape, steps, learning rate) in a colour of its
    own, a line style per format, on a log axis; the legend below the panels, its title naming the
    line styles."""
    runs = [(c, r) for _, c, r in trained_runs_of(task) if c.seed == seed and c.model.encoding in encodings]
    models = list(dict.fromkeys((shape_words(c.model), c.steps, c.lr) for c, _ in runs))
    formats = list(dict.fromkeys(c.make_task().key for c, _ in runs))
    colours = dict(zip(models, plt.cm.tab10(np.arange(len(models)) % 10)))
    styles = dict(zip(formats, ("-", "--", ":", "-.")))
    fig, axes = plt.subplots(1, len(encodings), figsize=(6.5 * len(encodings), 4.4), sharey=True, squeeze=False)
    handles: dict[str, Any] = {}
    for ax, enc in zip(axes[0], encodings):
        mine = [(c, r) for c, r in runs if c.model.encoding == enc]
        for cfg, rec in mine:
            curve, model = rec["loss_curve"], (shape_words(cfg.model), cfg.steps, cfg.lr)
            steps = curve["every"] * np.arange(1, len(curve["mean_loss"]) + 1)
            name = f"{model[0]}, {model[1]:,} steps, lr {model[2]:g}"
            fmt = cfg.make_task().key
            (line,) = ax.plot(steps, curve["mean_loss"], color=colours[model], ls=styles[fmt], lw=1.6)
            handles.setdefault(name, Line2D([], [], color=colours[model], lw=2))
        ax.set_yscale("log")
        ax.set(title=f"{task_title(task)}, {encoding_title(enc)}, seed {seed}", xlabel="training step")
        if not mine:
            ax.text(0.5, 0.5, "no run trained", ha="center", transform=ax.transAxes)
    axes[0][0].set_ylabel("training loss per answer token (log scale)")
    names = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dotted"}
    title = "model: layers x width, steps, learning rate; "
    title += ", ".join(f"{names[styles[f]]}: {task_title(f)}" for f in formats)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=3, fontsize=8, title=title)
    fig.tight_layout(rect=(0, 0.06 * (1 + len(handles) // 3), 1, 1))
    save_figure(fig, path)
    return fig


def plot_mrr(
    units,
    paper: dict[str, float] | None = None,
    title: str = "",
    path: Path | None = None,
    summary=None,
    resampled: str = "",
    paper_label: str = "the paper's own runs",
    ylabel: str = "mean reciprocal rank",
    note: str = "",
):
    """Mean reciprocal rank per encoding with its 95% bootstrap interval (`units` as from
    `mrr_units`, resampled as rows; or a ready `summary` with mean and interval columns, such as
    `hierarchical_summary`'s, and what it `resampled`), and the paper's figure for each encoding
    it reports as a marker beside its bar (`paper_label` in the legend), clear of the whisker.
    `note`, such as the orderings a test states, is written under the axes, where a reader sees
    what the intervals alone do not show. Title lines longer than 72 characters wrap to fit the
    figure."""
    summary = bootstrap_summary(units) if summary is None else summary
    resampled = resampled or f"{len(units)} bootstrap units"
    fig, ax = plt.subplots(figsize=(7, 3.8))
    x = np.arange(len(summary))
    err = [summary["mean"] - summary["95% low"], summary["95% high"] - summary["mean"]]
    ax.bar(
        x,
        summary["mean"],
        yerr=err,
        capsize=4,
        color=[encoding_color(e) for e in summary.index],
    )
    # the bars are named by their ticks; the legend names the marks drawn on them
    whisker = Line2D([], [], color="black", marker="_", markersize=10, linestyle="-", linewidth=1)
    handles, labels = [whisker], [f"ours: the bar, whiskers its 95% interval ({resampled})"]
    if paper:
        known = [(i, paper[e]) for i, e in enumerate(summary.index) if e in paper]
        beside = [i + 0.3 for i, _ in known]  # at the bar's edge, not on its whisker
        ax.scatter(beside, [v for _, v in known], color="black", marker="D", zorder=3)
        handles, labels = [ax.collections[-1], *handles], [paper_label, *labels]
    ax.set_xticks(x, [encoding_title(e) for e in summary.index])
    title = title or "Mean reciprocal rank over (task, seed) columns"
    ax.set(
        title="\n".join(textwrap.fill(line, 72) for line in title.split("\n")),  # a long list of tasks wraps
        ylabel=ylabel,
        xlabel="positional encoding",
        ylim=(0, 1.05),
    )
    ax.legend(handles, labels, fontsize=8)
    if note:
        fig.text(0.01, 0.01, textwrap.fill(note, 110), fontsize=8, va="bottom", ha="left")
        fig.tight_layout(rect=(0, 0.04 * (1 + note.count(" ") // 16), 1, 1))
    else:
        fig.tight_layout()
    save_figure(fig, path)
    return fig


def in_distribution_spread(records: Sequence[Mapping[str, Any]]) -> pd.Series:
    """Per encoding, how far its runs' exact match in distribution (the mean over the training
    sizes, %) lie apart: the highest seed's minus the lowest's."""
    rows = [{"encoding": r["config"]["model"]["encoding"], "in": 100 * r["in_distribution_mean"]} for r in records]
    by_encoding = pd.DataFrame(rows).groupby("encoding")["in"]
    return by_encoding.max() - by_encoding.min()


# ---------------------------------------------------------------------------------------------
# 15. How NoPE knows where it is: the paper's theorems as hand-set weights, and probes (notebook 08)
# ---------------------------------------------------------------------------------------------
# A causal decoder without positional encoding can still tell positions apart: attending
# uniformly over its prefix, position t sees t + 1 tokens, and if only the first (BOS) carries a
# value, the average is 1/(t+1) (the paper's Theorem 1). A second layer can then attend by
# relative offset using that recovered position (Theorem 2). `nope_position_model` sets the
# weights of our own pre-LN `DecoderOnlyLM` so that it does both, exactly, for every position
# below `n_positions`, whatever the tokens. Residual stream layout (each feature is written as a
# +/- pair of coordinates, so every vector has mean 0 and LayerNorm only rescales it):
#   token i at (+i, -(V+i)); 1/(t+1) at (2V, 2V+1); cos wt, sin wt at (2V+2, 2V+3) and negated at
#   (2V+4, 2V+5); the token `offset` back at (2V+6+i, 3V+6+i).
PROBES_DIR = RESULTS_DIR / "probes"


@dataclass(frozen=True)
class PositionLayout:
    """Where each feature of the hand-set NoPE model lives in its residual stream."""

    vocab_size: int

    @property
    def d_model(self) -> int:
        return 4 * self.vocab_size + 6

    def token(self, i: int) -> tuple[int, int]:
        return i, self.vocab_size + i

    @property
    def bos_share(self) -> tuple[int, int]:  # 1/(t+1), layer 1's attention output
        return 2 * self.vocab_size, 2 * self.vocab_size + 1

    @property
    def angle(self) -> tuple[int, int, int, int]:  # cos wt, sin wt, -cos wt, -sin wt
        v = 2 * self.vocab_size + 2
        return v, v + 1, v + 2, v + 3

    def copied(self, i: int) -> tuple[int, int]:
        return 2 * self.vocab_size + 6 + i, 3 * self.vocab_size + 6 + i


def _layer_norm_scale(norm_sq: Any, d: int, eps: float) -> Any:
    """LayerNorm of a mean-0 vector with squared norm `norm_sq` (a number or a tensor) multiplies it by this."""
    return (norm_sq / d + eps) ** -0.5


def _hinge_fit(z: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """ReLU units h_i = relu(z_i - z) and a linear readout that pass exactly through
    (z[t], targets[t]) for every t, z strictly decreasing. Returns (unit biases, readout weights
    (outputs, units), readout bias): f(z) = bias + W relu(b - z)."""
    if not bool((z[1:] < z[:-1]).all()):
        raise ValueError("the hinge points must be strictly decreasing")
    w = -z  # increasing
    slopes = (targets[1:] - targets[:-1]) / (w[1:] - w[:-1])[:, None]  # (N-1, outputs)
    coef = torch.cat([slopes[:1], slopes[1:] - slopes[:-1]])  # the change of slope at each point
    return z[:-1], coef.T, targets[0]


@torch.no_grad()
def nope_position_model(
    n_positions: int, offset: int = 1, vocab_size: int = VOCAB_SIZE, margin: float = 30.0
) -> DecoderOnlyLM:
    """A two-layer NoPE `DecoderOnlyLM` (pre-LN, one head) with hand-set weights that predicts, at
    every position t with offset <= t < n_positions, the token `offset` places back.

    Layer 1 (Theorem 1): zero queries and keys make attention uniform over the t + 1 tokens of
    the prefix; only BOS has a value, so position t receives 1/(t+1) (times a constant). Its
    feed-forward layer, one ReLU unit per position, turns that number into (cos wt, sin wt) with
    w = pi / n_positions, exactly at every integer t, and cancels the 1/(t+1) so that every hidden
    vector has the same norm (LayerNorm then only rescales). Layer 2 (Theorem 2): query
    R(-offset w)(cos wt, sin wt) and key (cos wj, sin wj) give the logit
    lam cos(w (j - (t - offset))), largest at j = t - offset, with lam chosen so that the next
    best key scores `margin` lower; its value copies the token, and the output layer reads it.
    Needs BOS at position 0 only, and the causal mask (`nope_position_readout` shows both)."""
    if not isinstance(n_positions, int) or n_positions < 2:
        raise ValueError(f"n_positions must be an integer >= 2; got {n_positions!r}")
    if not isinstance(offset, int) or not 0 <= offset < n_positions:
        raise ValueError(f"offset must be an integer in [0, {n_positions}); got {offset!r}")
    if margin <= 0:
        raise ValueError(f"margin must be > 0; got {margin!r}")
    lay = PositionLayout(vocab_size)
    d, V, N = lay.d_model, vocab_size, n_positions
    cfg = ModelConfig(encoding="nope", d_model=d, n_heads=1, n_layers=2, d_ff=N - 1, pre_norm=True)
    model = DecoderOnlyLM(cfg, vocab_size).double()
    for p in model.parameters():
        p.zero_()
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
    eps = model.blocks[0].norm1.eps
    for i in range(V):  # token i: +1 and -1, mean 0, squared norm 2
        model.tok_emb.weight[i, lay.token(i)[0]], model.tok_emb.weight[i, lay.token(i)[1]] = 1.0, -1.0
    g_tok = _layer_norm_scale(2.0, d, eps)

    # Layer 1 attention: queries and keys 0 (uniform), value = the BOS coordinate, written +/-.
    b1 = model.blocks[0]
    b1.self_attn.in_proj.weight[2 * d, lay.token(BOS)[0]] = 1.0 / g_tok  # value row 0 = [token is BOS]
    b1.self_attn.out_proj.weight[lay.bos_share[0], 0], b1.self_attn.out_proj.weight[lay.bos_share[1], 0] = 1.0, -1.0
    t = torch.arange(N, dtype=torch.float64)
    share = 1.0 / (t + 1)  # what each position receives
    z = share * _layer_norm_scale(2.0 + 2.0 * share**2, d, eps)  # what layer 1's feed-forward sees
    # Layer 1 feed-forward: cos/sin of wt, written +/-, and 1/(t+1) cancelled.
    w = math.pi / N
    c, s = torch.cos(w * t), torch.sin(w * t)
    targets = torch.stack([-share, share, c, s, -c, -s], dim=1)
    knots, coef, bias = _hinge_fit(z, targets)
    up, down = b1.ffn[0], b1.ffn[3]
    up.weight[:, lay.bos_share[0]] = -1.0
    up.bias.copy_(knots)
    cols = [*lay.bos_share, *lay.angle]
    down.weight[cols] = coef
    down.bias[cols] = bias

    # Layer 2 attention: relative offset from the angles; value copies the token.
    b2 = model.blocks[1]
    g = _layer_norm_scale(4.0, d, eps)  # every hidden vector now has squared norm 4
    lam = margin / (1.0 - math.cos(w)) * math.sqrt(d)  # attention divides the logits by sqrt(d)
    ca, sa, _, _ = lay.angle
    W = b2.self_attn.in_proj.weight
    co, so = math.cos(offset * w), math.sin(offset * w)
    W[0, ca], W[0, sa] = lam * co / g, lam * so / g  # query = lam (cos w(t-k), sin w(t-k))
    W[1, ca], W[1, sa] = -lam * so / g, lam * co / g
    W[d + 0, ca], W[d + 1, sa] = 1.0 / g, 1.0 / g  # key = (cos wj, sin wj)
    for i in range(V):
        W[2 * d + i, lay.token(i)[0]] = 1.0 / g  # value i = [token is i]
        b2.self_attn.out_proj.weight[lay.copied(i)[0], i] = 1.0
        b2.self_attn.out_proj.weight[lay.copied(i)[1], i] = -1.0
    for i in range(V):  # the output reads the copied token
        model.lm_head.weight[i, lay.copied(i)[0]] = 1.0
    return model.eval()


@torch.no_grad()
def nope_position_readout(model: DecoderOnlyLM, tokens: Tensor, causal: bool = True) -> Tensor:
    """The position each token's layer-1 hidden state encodes in `nope_position_model`, read back
    as atan2(sin, cos) / w; with causal=False the first layer attends both ways (no mask)."""
    lay = PositionLayout(model.vocab_size)
    x = model.tok_emb.weight[tokens]
    mask = None if not causal else causal_mask(tokens.shape[1], device=tokens.device)
    h, _ = model.blocks[0](x, mask=mask)
    ca, sa, cb, sb = lay.angle
    angle = torch.atan2(h[..., sa] - h[..., sb], h[..., ca] - h[..., cb])
    n_positions = model.config.d_ff + 1
    return angle / (math.pi / n_positions)


@torch.no_grad()
def check_nope_construction(n_positions: int, offset: int = 1, batch: int = 8, dtype=torch.float32, seed: int = 0):
    """Run `nope_position_model` on random token rows (BOS first, then symbols) of length
    n_positions in `dtype`: the largest readout error |t_hat - t|, the least attention on
    t - offset and whether the output is the token `offset` back, at every position."""
    model = nope_position_model(n_positions, offset).to(dtype)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(N_SPECIAL, VOCAB_SIZE, (batch, n_positions), generator=g)
    tokens[:, 0] = BOS
    logits, internals = model(tokens, return_internals=True)
    t = torch.arange(n_positions)
    error = (nope_position_readout(model, tokens) - t).abs().amax(dim=0)
    q = t[offset:]
    on_target = internals.attentions[1][:, 0, q, q - offset].amin(dim=0)
    right = (logits.argmax(-1)[:, offset:] == tokens[:, : n_positions - offset]).all(dim=0)
    return {"readout_error": error, "attention_on_target": on_target, "output_right": right}


# Probes: can a trained model's hidden states tell where a token is? A probe is fitted on the
# positions the training sizes reach and tested at every position the evaluation reaches.


@torch.no_grad()
def hidden_states_by_position(
    model: DecoderOnlyLM, task: str, sizes: Iterable[int], n_examples: int = 32, seed: int = INSPECTION_SEED
) -> tuple[list[Tensor], Tensor, Tensor]:
    """Every layer's hidden state (embeddings first) at every position of `n_examples` sequences
    of each size, drawn from `seed` (the inspection sequences by default): (per layer (rows, d),
    positions (rows,), sizes (rows,)), in float64."""
    per_layer: list[list[Tensor]] = []
    positions, of_size = [], []
    for n in sizes:
        batch = inspection_batch(task, n, n_examples, seed)
        _, internals = model(batch.inputs, return_internals=True)
        B, T = batch.inputs.shape
        if not per_layer:
            per_layer = [[] for _ in internals.hidden_states]
        for store, h in zip(per_layer, internals.hidden_states):
            store.append(h.reshape(B * T, -1).double())
        positions.append(torch.arange(T).repeat(B))
        of_size.append(torch.full((B * T,), n))
    return [torch.cat(s) for s in per_layer], torch.cat(positions), torch.cat(of_size)


class LinearProbe:
    """Ridge regression of the position on standardized features, solved in closed form."""

    def __init__(self, ridge: float = 1e-3):
        self.ridge = ridge

    def fit(self, x: Tensor, y: Tensor) -> LinearProbe:
        self.mean, self.std = x.mean(0), x.std(0).clamp_min(1e-8)
        a = torch.cat([(x - self.mean) / self.std, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
        eye = torch.eye(a.shape[1], dtype=x.dtype)
        eye[-1, -1] = 0.0  # the intercept is not shrunk
        self.w = torch.linalg.solve(a.T @ a + self.ridge * len(x) * eye, a.T @ y.to(x.dtype))
        return self

    def predict(self, x: Tensor) -> Tensor:
        return torch.cat([(x - self.mean) / self.std, torch.ones(len(x), 1, dtype=x.dtype)], dim=1) @ self.w


class MLPProbe:
    """A one-hidden-layer ReLU network regressing the position (full-batch Adam, fixed seed)."""

    def __init__(self, hidden: int = 64, steps: int = 300, lr: float = 1e-2, seed: int = 0):
        self.hidden, self.steps, self.lr, self.seed = hidden, steps, lr, seed

    def fit(self, x: Tensor, y: Tensor) -> MLPProbe:
        self.mean, self.std = x.mean(0), x.std(0).clamp_min(1e-8)
        self.scale = float(y.max().clamp_min(1))
        g = torch.Generator().manual_seed(self.seed)
        d = x.shape[1]
        w1 = (torch.randn(d, self.hidden, generator=g, dtype=x.dtype) / math.sqrt(d)).requires_grad_()
        b1 = torch.zeros(self.hidden, dtype=x.dtype, requires_grad=True)
        w2 = (torch.randn(self.hidden, 1, generator=g, dtype=x.dtype) / math.sqrt(self.hidden)).requires_grad_()
        b2 = torch.zeros(1, dtype=x.dtype, requires_grad=True)
        self.params = [w1, b1, w2, b2]
        opt = torch.optim.Adam(self.params, lr=self.lr)
        xs, target = (x - self.mean) / self.std, (y.to(x.dtype) / self.scale)[:, None]
        with torch.enable_grad():
            for _ in range(self.steps):
                opt.zero_grad()
                loss = F.mse_loss(self._net(xs), target)
                loss.backward()
                opt.step()
        return self

    def _net(self, xs: Tensor) -> Tensor:
        w1, b1, w2, b2 = self.params
        return F.relu(xs @ w1 + b1) @ w2 + b2

    @torch.no_grad()
    def predict(self, x: Tensor) -> Tensor:
        return self._net((x - self.mean) / self.std)[:, 0] * self.scale


PROBES: dict[str, Callable[[], Any]] = {"linear": LinearProbe, "mlp": MLPProbe}
PROBE_WORDS = {"linear": "a ridge regression", "mlp": "a network of one hidden layer of 64 ReLU units"}


PROBE_TEST_SEED = 8765  # the probes' test sequences, apart from the ones they are fitted on


def probe_errors(
    model: DecoderOnlyLM, task: str, train_sizes: Sequence[int], test_sizes: Iterable[int], n_examples: int = 32
):
    """Fit each probe on each layer's hidden states at the training sizes; return, on other
    sequences (`PROBE_TEST_SEED`) of every test size, rows per layer, probe, position, sizes
    ('training' up to the longest training size, else 'longer') and region (prompt: BOS and the
    prompt; answer: SEP onwards): the mean absolute error in positions, the share of tokens read
    to within half a position, and the count."""
    t = get_task(task)
    train_x, train_pos, _ = hidden_states_by_position(model, task, train_sizes, n_examples)
    test_x, test_pos, test_n = hidden_states_by_position(model, task, test_sizes, n_examples, PROBE_TEST_SEED)
    prompt_end = torch.tensor([t.prompt_length(int(n)) for n in test_n])
    region = np.where((test_pos <= prompt_end).numpy(), "prompt", "answer")
    sizes = np.where((test_n <= max(train_sizes)).numpy(), "training", "longer")
    rows = []
    for layer, (xa, xb) in enumerate(zip(train_x, test_x)):
        for name, make in PROBES.items():
            err = (make().fit(xa, train_pos).predict(xb) - test_pos).abs().numpy()
            frame = pd.DataFrame({"position": test_pos.numpy(), "sizes": sizes, "region": region, "err": err})
            agg = frame.groupby(["position", "sizes", "region"])["err"].agg(
                mae="mean", within_half=lambda e: float((e < 0.5).mean()), count="size"
            )
            rows.append(agg.reset_index().assign(layer=layer, probe=name))
    return pd.concat(rows, ignore_index=True)


def position_probe_table(
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seed: int = 0,
    train_sizes: Sequence[int] = range(1, 17),
    test_sizes: Sequence[int] = range(1, 49),
    results_dir: str | Path = RESULTS_DIR,
    cache: Path | None = PROBES_DIR / "position_probes.csv",
):
    """`probe_errors` for each trained model of the grid (seed `seed`), computed once from the
    saved weights and cached as CSV with each model's config hash (rows for other weights are
    recomputed, as for the pointer scores)."""

    def compute(model: DecoderOnlyLM, task: str):
        errors = probe_errors(model, task, train_sizes, test_sizes)
        return errors.assign(mae=errors["mae"].round(4), within_half=errors["within_half"].round(4))

    return per_model_table(compute, tasks, encodings, [seed], results_dir, cache)


@torch.no_grad()
def first_layer_attention(model: DecoderOnlyLM, task: str, sizes: Iterable[int], n_examples: int = 32):
    """The first layer's attention per head and query position, over the inspection sequences of
    each size: the weight on BOS and the entropy (nats) beside log(t + 1), uniform attention's."""
    rows = []
    for n in sizes:
        att = attention_maps(model, inspection_batch(task, n, n_examples, config=model.config))[0]  # (B, H, T, T)
        entropy = -(att * att.clamp_min(1e-30).log()).sum(-1)  # (B, H, T)
        for h in range(att.shape[1]):
            rows.append(
                pd.DataFrame(
                    {
                        "n": n,
                        "head": h,
                        "position": np.arange(att.shape[-1]),
                        "bos_weight": att[:, h, :, 0].mean(0).numpy(),
                        "entropy": entropy[:, h].mean(0).numpy(),
                    }
                )
            )
    frame = pd.concat(rows, ignore_index=True)
    out = frame.groupby(["head", "position"])[["bos_weight", "entropy"]].mean().reset_index()
    out["uniform_entropy"] = np.log(out["position"] + 1.0)
    return out


def first_layer_table(
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seed: int = 0,
    sizes: Sequence[int] = range(1, 49),
    results_dir: str | Path = RESULTS_DIR,
    cache: Path | None = PROBES_DIR / "first_layer_attention.csv",
):
    """`first_layer_attention` for each trained model of the grid (seed `seed`), cached as CSV."""

    def compute(model: DecoderOnlyLM, task: str):
        rows = first_layer_attention(model, task, sizes)
        return rows.round({"bos_weight": 5, "entropy": 5, "uniform_entropy": 5})

    return per_model_table(compute, tasks, encodings, [seed], results_dir, cache)


def exact_match_cliff(df, level: float = 0.9):
    """Per (task, encoding, seed) of an exact-match frame: the largest size n up to which exact
    match stays at or above `level` at every size (`reach_summary`), and the last position
    that size's answer reaches (the query that predicts EOS: prompt + answer + 1)."""
    keys = ["task", "encoding", "seed"]
    out = reach_summary(df.sort_values(keys), keys, threshold=level)
    out = out[keys].assign(cliff_n=out[f"longest n >= {level:.0%}"])

    def last(task: str, n: int) -> int:
        t = task_of_key(task)
        return t.prompt_length(n) + t.answer_length(n) + 1 if n >= 1 else 0

    return out.assign(last_position=[last(t, n) for t, n in zip(out["task"], out["cliff_n"])])


def construction_precision(
    sizes: Sequence[int] = (64, 140, 512, 1024, 2048, 4096),
    offset: int = 1,
    cache: Path | None = PROBES_DIR / "construction_precision.csv",
):
    """`check_nope_construction` in float32 at each size: per size and position, the readout
    error, the attention on t - offset and whether the output is right. Float32 rounding differs
    with a CPU's kernels, so the table is computed once and kept in `cache` (sizes not in it are
    added): the figure drawn from it is the same on every machine."""

    def compute(n: int):
        r = check_nope_construction(n, offset, batch=2)
        return pd.DataFrame(
            {
                "offset": offset,
                "n_positions": n,
                "position": np.arange(n),
                "readout_error": r["readout_error"].double().numpy(),
                "attention_on_target": np.r_[[np.nan] * offset, r["attention_on_target"].double().numpy()],
                "output_right": np.r_[[True] * offset, r["output_right"].numpy()],
            }
        )

    path = None if cache is None else Path(cache)
    table = pd.read_csv(path) if path is not None and path.exists() else pd.DataFrame(columns=["offset", "n_positions"])
    have = set(table.loc[table["offset"] == offset, "n_positions"])
    new = [compute(n) for n in sizes if n not in have]
    if new:
        table = pd.concat([table, *new], ignore_index=True) if len(table) else pd.concat(new, ignore_index=True)
        if path is not None:
            _atomic_write(path, lambda p: table.to_csv(p, index=False))
    keep = (table["offset"] == offset) & table["n_positions"].isin(list(sizes))
    return table[keep].reset_index(drop=True)


# Figures of notebooks 08 and 09 are read alone, beside prose or not: text large enough to read
# at a glance, and layers named from 0 as everywhere else (L0H2: layer 0, head 2; the hidden state
# "after L0" is layer 0's output; the paper's theorems count the same layers from 1).
FIGURE_TEXT = {"title": 13, "label": 12, "tick": 11, "legend": 11}


BOS_FLOOR = 1e-4  # plot_first_layer draws a head's smaller BOS weights here (a log axis has no 0)
UNIFORM_LEVEL = 0.9  # a head whose entropy keeps this share of uniform's over the training positions


def uniform_heads(table, train_last: int = 33, level: float = UNIFORM_LEVEL):
    """Theorem 1's signal in a trained first layer (`first_layer_table`): per (task, encoding), the
    heads whose attention entropy is at least `level` of uniform's at every query position 1 to
    `train_last`, with their mean BOS weight x (t + 1) and entropy / log(t + 1) there."""
    g = table[table["position"].between(1, train_last)]
    g = g.assign(
        bos_x_t1=g["bos_weight"] * (g["position"] + 1),
        entropy_ratio=g["entropy"] / g["uniform_entropy"],
    )
    keys = ["task", "encoding", "head"]
    out = g.groupby(keys, sort=False).agg(
        bos_x_t1=("bos_x_t1", "mean"), entropy_ratio=("entropy_ratio", "mean"), lowest=("entropy_ratio", "min")
    )
    return out[out["lowest"] >= level].drop(columns="lowest").reset_index()


# What notebook 08 shows: tables, figures and verdicts.
def probe_summary(table, bands: Sequence[tuple[int, int]] = ((34, 49), (50, 97))):
    """Per (task, encoding, seed, layer, probe): the mean absolute error (positions) on held-out
    sequences of the training sizes, then on longer sequences at the positions within each band."""
    keys = ["task", "encoding", "seed", "layer", "probe"]
    t = table.assign(abs_sum=table["mae"] * table["count"])
    parts = {}
    pick = {"training sizes": t["sizes"] == "training"}
    for lo, hi in bands:
        pick[f"positions {lo}-{hi}"] = (t["sizes"] == "longer") & t["position"].between(lo, hi)
    for name, rows in pick.items():
        s = t[rows].groupby(keys)[["abs_sum", "count"]].sum()
        parts[name] = s["abs_sum"] / s["count"]
    return pd.DataFrame(parts)


def first_layer_summary(table, bands: dict[str, tuple[int, int]]):
    """Per (task, encoding, head) of `first_layer_table`: the mean over each band of query positions
    of the BOS weight times (t + 1) and of the entropy over log(t + 1) (both 1 for uniform attention)."""
    g = table.assign(
        bos_x_t1=table["bos_weight"] * (table["position"] + 1),
        entropy_ratio=table["entropy"] / table["uniform_entropy"],
    )
    parts = {
        name: g[g["position"].between(lo, hi)]
        .groupby(["task", "encoding", "head"])[["bos_x_t1", "entropy_ratio"]]
        .mean()
        for name, (lo, hi) in bands.items()
    }
    out = pd.concat(parts, axis=1)
    names = {"bos_x_t1": "BOS weight x (t+1)", "entropy_ratio": "entropy / log(t+1)"}
    out.columns = [f"positions {band}: {names[c]}" for band, c in out.columns]
    return out


def _readable(fig: Any) -> None:
    """Set every panel's title, axis labels and tick labels of `fig` to `FIGURE_TEXT`'s sizes."""
    for ax in fig.axes:
        ax.title.set_fontsize(FIGURE_TEXT["title"])
        ax.xaxis.label.set_fontsize(FIGURE_TEXT["label"])
        ax.yaxis.label.set_fontsize(FIGURE_TEXT["label"])
        ax.tick_params(labelsize=FIGURE_TEXT["tick"])


def hidden_state_name(i: int) -> str:
    """The name of hidden state i of `hidden_states_by_position` (the probes' `layer` column):
    0 is the embeddings, i > 0 the output of layer i - 1, layers counted from 0 ("after L0")."""
    return "embeddings" if i == 0 else f"after L{i - 1}"


def condensed_probe_table(summary, decimals: int = 1):
    """`probe_summary` (one seed) for reading: a row per hidden state (`hidden_state_name`) and
    encoding, a column per (task, band, probe), rounded to `decimals`. Encodings whose rows are the
    same at a hidden state once rounded (embeddings that carry no position) share one row, their
    names joined."""
    if "seed" in summary.index.names:
        if summary.index.get_level_values("seed").nunique() > 1:
            raise ValueError("condensed_probe_table reads one seed's probes")
        summary = summary.droplevel("seed")
    long = summary.rename_axis(columns="band").stack().rename("mae").reset_index()
    tasks, bands = list(dict.fromkeys(long["task"])), list(summary.columns)
    probes = list(dict.fromkeys(long["probe"]))
    wide = long.pivot_table(index=["layer", "encoding"], columns=["task", "band", "probe"], values="mae")
    wide = wide.reindex(columns=pd.MultiIndex.from_product([tasks, bands, probes], names=wide.columns.names))
    order = {e: i for i, e in enumerate(encoding_names())}
    wide = wide.round(decimals)
    rows, index = [], []
    for layer in sorted(wide.index.get_level_values("layer").unique()):
        part = wide.xs(layer, level="layer")
        part = part.loc[sorted(part.index, key=lambda e: (order.get(e, len(order)), e))]
        groups: dict[tuple, list[str]] = {}
        for enc, values in part.iterrows():
            groups.setdefault(tuple(values.fillna(np.inf)), []).append(enc)
        for encs in groups.values():
            rows.append(part.loc[encs[0]])
            index.append((hidden_state_name(int(layer)), ", ".join(encoding_title(e) for e in encs)))
    return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["hidden state", "encoding"]))


def plot_construction_precision(table, path: Path | None = None):
    """The largest readout error and the largest share of the second layer's (L1's) attention off
    its target over every position a construction covers, against the number of positions it is
    built for (an exact 0 drawn at the floor, and said so, in a panel that has one)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    table = table.assign(off_target=1 - table["attention_on_target"])
    worst = table.groupby("n_positions")[["readout_error", "off_target"]].max()
    floors = {"readout_error": 1e-9, "off_target": 1e-12}
    panels = (
        (a, "readout_error", "largest |position read back - t| (positions)", "Theorem 1: the position L0 writes"),
        (b, "off_target", "largest 1 - attention on t - 1", "Theorem 2: L1's attention off its target"),
    )
    for ax, column, ylabel, title in panels:
        ax.plot(worst.index, worst[column].clip(lower=floors[column]), color="black", marker="o", label="float32")
        if (worst[column] <= floors[column]).any():  # the floor is drawn, and named, only where a value sits on it
            ax.axhline(floors[column], color="gray", ls="--", lw=0.8, label=f"{floors[column]:g}: exact (0) drawn here")
        ax.set(xscale="log", yscale="log", xlabel="positions the construction is built for", ylabel=ylabel, title=title)
        ax.set_xticks(list(worst.index), [str(n) for n in worst.index])
        ax.minorticks_off()
    a.axhline(0.5, color="black", ls=":", lw=1, label="half a position: the readout rounds wrong")
    b.axhline(0.5, color="black", ls=":", lw=1, label="half its attention off: the target no longer wins")
    for ax, where in ((a, "lower right"), (b, "center left")):  # where no point or line is
        ax.set_ylim(top=5.0)  # the half-way line clear of the frame
        ax.legend(fontsize=FIGURE_TEXT["legend"] - 1, loc=where)
    fig.suptitle("The worst position of each construction, in float32 (layers L0 and L1)", fontsize=14)
    _readable(fig)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def _probe_curves(g, train_last: int) -> tuple[Any, Any]:
    """A probe's mean |error| per position over held-out sequences of the training sizes up to
    `train_last`, and over longer sequences from `train_last` on."""

    def curve(sizes: str):
        s = g[g["sizes"] == sizes].groupby("position")[["abs_sum", "count"]].sum()
        return s["abs_sum"] / s["count"]

    inside, outside = curve("training"), curve("longer")
    return inside[inside.index <= train_last], outside[outside.index >= train_last]


def best_probe_layers(table, probe: str = "mlp") -> dict[tuple[str, str], int]:
    """Per (task, encoding): the hidden state (the `layer` column) whose `probe` reads the position
    best on held-out sequences of the training sizes."""
    t = table[(table["probe"] == probe) & (table["sizes"] == "training")]
    s = t.assign(abs_sum=t["mae"] * t["count"]).groupby(["task", "encoding", "layer"])[["abs_sum", "count"]].sum()
    err = s["abs_sum"] / s["count"]
    return {(task, enc): int(layer) for (task, enc, layer) in err.groupby(level=["task", "encoding"]).idxmin()}


def plot_probe_errors(
    table,
    reach: dict[str, int],
    train_last: int,
    path: Path | None = None,
    probe: str = "mlp",
    by_layer: str | None = "nope",
    level: float = 0.9,
):
    """Probe error against position, one panel per task: each encoding's model at the hidden state
    its probe reads best (`best_probe_layers`), in the encoding's colour, with its exact-match
    cliff (`reach`, keyed 'task/encoding': the last position its answer reaches at the longest n
    whose every size scores at least `level`, `exact_match_cliff`) marked on its line;
    and, if `by_layer` names an encoding, a second row with that encoding's every hidden state, its
    cliff a vertical line. Solid: held-out sequences of the training sizes (positions up to
    `train_last`, shaded: where the probe is fitted); dashed: longer sequences, from `train_last` on."""
    t = table[table["probe"] == probe]
    t = t.assign(abs_sum=t["mae"] * t["count"])
    tasks = list(dict.fromkeys(t["task"]))
    order = {e: i for i, e in enumerate(encoding_names())}
    encodings = sorted(dict.fromkeys(t["encoding"]), key=lambda e: (order.get(e, len(order)), e))
    best = best_probe_layers(table, probe)
    layered = by_layer in encodings
    rows = 2 if layered else 1
    fig, axes = plt.subplots(rows, len(tasks), figsize=(7.2 * len(tasks), 5.2 * rows), squeeze=False, sharey=True)
    cliff_note = f"the cliff: the last position the answer reaches at the longest n with every size at {level:.0%}"

    def frame(ax: Any, title: str) -> None:
        ax.axvspan(0, train_last, color="0.92", zorder=0)
        ax.set(yscale="log", ylim=(1e-2, 2e2), title=title, xlabel="position t")

    for ax, task in zip(axes[0], tasks):
        frame(ax, f"{task}: each model at its best hidden state")
        for enc in encodings:
            g = t[(t["task"] == task) & (t["encoding"] == enc)]
            if (task, enc) not in best:
                continue
            layer = best[(task, enc)]
            inside, outside = _probe_curves(g[g["layer"] == layer], train_last)
            c = encoding_color(enc)
            ax.plot(
                inside.index,
                inside.values,
                color=c,
                lw=1.8,
                label=f"{encoding_title(enc)} ({hidden_state_name(layer)})",
            )
            ax.plot(outside.index, outside.values, color=c, lw=1.8, ls="--")
            cliff = reach.get(f"{task}/{enc}")
            curve = outside if cliff is not None and cliff in outside.index else inside
            if cliff is not None and cliff in curve.index:
                ax.plot([cliff], [curve[cliff]], ls="none", marker="o", ms=9, color=c, mec="black", zorder=5)
        ax.legend(fontsize=FIGURE_TEXT["legend"] - 1, loc="lower right", title="model (hidden state)")
    if layered:
        for ax, task in zip(axes[1], tasks):
            frame(ax, f"{task}, {encoding_title(by_layer)}: every hidden state")
            g = t[(t["task"] == task) & (t["encoding"] == by_layer)]
            for layer, gl in g.groupby("layer"):
                inside, outside = _probe_curves(gl, train_last)
                c = ordinal_color(int(layer))
                ax.plot(inside.index, inside.values, color=c, lw=1.8, label=hidden_state_name(int(layer)))
                ax.plot(outside.index, outside.values, color=c, lw=1.8, ls="--")
            cliff = reach.get(f"{task}/{by_layer}")
            if cliff is not None:
                ax.axvline(cliff, color="black", ls="-.", lw=1.4, label=f"exact-match cliff (position {cliff})")
            ax.legend(fontsize=FIGURE_TEXT["legend"] - 1, loc="lower right")
    for ax in axes.flat:
        ax.set_ylabel("the probe's mean |error| (positions)")
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], color="black", lw=1.8, label=f"held-out sequences of the training sizes (t ≤ {train_last})"),
        Line2D([], [], color="black", lw=1.8, ls="--", label=f"longer sequences (t ≥ {train_last})"),
        Patch(color="0.92", label=f"positions the probe is fitted on (0-{train_last})"),
        Line2D([], [], ls="none", marker="o", ms=9, color="white", mec="black", label=cliff_note),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=FIGURE_TEXT["legend"])
    words = PROBE_WORDS.get(probe, probe)
    fig.suptitle(
        f"Reading the absolute position from the hidden states: a probe ({words}) per hidden state", fontsize=14
    )
    _readable(fig)
    fig.tight_layout(rect=(0, 0.075 if layered else 0.14, 1, 1))
    save_figure(fig, path, dpi=100)
    return fig


def plot_first_layer(table, path: Path | None = None, train_last: int = 33):
    """NoPE's first layer (L0) per head: the weight on BOS times (t + 1), which is 1 for uniform
    attention, and the entropy over log(t + 1), 1 for uniform, against the query position. A head
    that keeps near-uniform attention over the training positions (`uniform_heads`) is drawn
    thick and named, with its numbers; a panel without one says so."""
    from matplotlib.ticker import FuncFormatter

    tasks = list(dict.fromkeys(table["task"]))
    marked = uniform_heads(table, train_last)
    fig, axes = plt.subplots(2, len(tasks), figsize=(7 * len(tasks), 8.5), squeeze=False)
    for j, task in enumerate(tasks):
        g = table[(table["task"] == task) & (table["position"] > 0)]
        enc = g["encoding"].iloc[0]
        mine = marked[(marked["task"] == task) & (marked["encoding"] == enc)].set_index("head")
        floored = False
        for head, gh in g.groupby("head"):
            thick = {"lw": 3.2, "zorder": 4} if head in mine.index else {"lw": 1.4, "alpha": 0.85}
            bos = gh["bos_weight"] * (gh["position"] + 1)
            floored |= bool((bos < BOS_FLOOR).any())
            name = f"L0H{head}"
            axes[0, j].plot(gh["position"], bos.clip(lower=BOS_FLOOR), color=ordinal_color(head), label=name, **thick)
            ratio = gh["entropy"] / gh["uniform_entropy"]
            axes[1, j].plot(gh["position"], ratio, color=ordinal_color(head), label=name, **thick)
            if head in mine.index:
                r = mine.loc[head]
                t_mid = max(1, train_last // 2)  # the arrows point inside the training positions
                at = gh["position"] == t_mid
                note = {
                    "textcoords": "axes fraction",
                    "va": "center",
                    "fontsize": FIGURE_TEXT["legend"],
                    "arrowprops": {"arrowstyle": "->", "color": ordinal_color(head), "lw": 1.5},
                    "bbox": {"boxstyle": "round", "fc": "white", "ec": ordinal_color(head)},
                }
                axes[0, j].annotate(
                    f"{name}: near-uniform attention, BOS weight\n{r['bos_x_t1']:.2f}x uniform's 1/(t + 1) "
                    f"(mean, t = 1-{train_last})",
                    xy=(t_mid, float(bos[at].iloc[0])),
                    xytext=(0.3, 0.9),
                    **note,
                )
                axes[1, j].annotate(
                    f"{name}: {r['entropy_ratio']:.2f} of uniform's entropy (mean, t = 1-{train_last})",
                    xy=(t_mid, float(ratio[at].iloc[0])),
                    xytext=(0.4, 0.3),
                    **note,
                )
        if mine.empty:
            axes[0, j].text(
                0.97,
                0.35,
                f"no head keeps {UNIFORM_LEVEL:g} of uniform's entropy at every t = 1-{train_last}",
                transform=axes[0, j].transAxes,
                ha="right",
                va="bottom",
                fontsize=FIGURE_TEXT["legend"],
                bbox={"boxstyle": "round", "fc": "white", "ec": "0.6"},
            )
        if floored:  # drawn, and named, only where a weight sits below it
            axes[0, j].axhline(
                BOS_FLOOR, color="gray", ls="--", lw=0.8, label=f"{BOS_FLOOR:g}: lower values drawn here"
            )
        axes[0, j].set(
            title=f"{task}, {encoding_title(enc)}, L0: weight on BOS x (t + 1)",
            ylabel="BOS weight x (t + 1) (1 = uniform)",
            yscale="log",
        )
        low, high = axes[0, j].get_ylim()
        if not mine.empty:  # room above the lines for the named head's numbers
            axes[0, j].set_ylim(low, high * (high / low) ** 0.6)
        if high / low < 100:  # under two decades: name 1, 2 and 5 of each, not only the powers of ten
            axes[0, j].yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axes[0, j].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        else:
            axes[0, j].yaxis.set_major_locator(LogLocator(base=10))
        axes[0, j].yaxis.set_minor_formatter(NullFormatter())
        axes[1, j].set(
            title=f"{task}, {encoding_title(enc)}, L0: attention entropy / log(t + 1)", ylabel="entropy / uniform's"
        )
        for ax in axes[:, j]:
            ax.axvline(train_last, color="black", ls=":", lw=1.2, label=f"last training position ({train_last})")
            ax.set_xlabel("query position t")
    handles: dict[str, Any] = {}  # the heads and marks of every panel, once each
    for ax in axes.flat:
        handles |= dict(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=FIGURE_TEXT["legend"])
    _readable(fig)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_figure(fig, path, dpi=100)
    return fig


# ---------------------------------------------------------------------------------------------
# 16. Where the models go wrong, and what moves the cliff: failure anatomy, interventions (notebook 09)
# ---------------------------------------------------------------------------------------------
# Index hints (Zhou et al. 2023; notebook 09): each prompt symbol of a pointer task is preceded by a
# hint token, a run of consecutive hints from a random start among `n_hints`, and each answer symbol
# by the hint of the symbol it reproduces. Training then sees every hint and every step from one
# hint to the next; the answer can point by content (the symbol after the same hint in the prompt)
# and stop by content (the next hint is not in the prompt): neither needs a position.
N_HINTS = 64


class IndexHinted(Task):
    """A pointer task (prompt of n symbols, `source_positions` defined) with index hints: prompt
    [h_s, x_1, h_s+1, x_2, ..], answer [hint of y_1's source, y_1, ..]. Subclass with `base`."""

    base: str = ""
    n_hints: int = N_HINTS

    def __init__(self) -> None:
        super().__init__()
        self.inner = get_task(self.base)
        if self.inner.source_positions(self.inner.min_size) is None or self.inner.prompt_length(2) != 2:
            raise ValueError(f"index hints need a pointer task with n prompt symbols; {self.base!r} is not one")
        self.symbols = (*self.inner.symbols, *(f"h{i}" for i in range(self.n_hints)))
        self.min_size, self.train_max_size = self.inner.min_size, self.inner.train_max_size
        self.max_size = self.n_hints if self.inner.max_size is None else min(self.n_hints, self.inner.max_size)

    def prompt_length(self, n: int) -> int:
        return 2 * self.inner.prompt_length(n)

    def answer_length(self, n: int) -> int:
        return 2 * self.inner.answer_length(n)

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        x, y = self.inner.sample(n, batch_size, generator)
        start = torch.randint(0, self.n_hints - n + 1, (batch_size, 1), generator=generator)
        hints = N_SPECIAL + len(self.inner.symbols) + start + torch.arange(n)  # (B, n) token ids
        source = torch.tensor(self.inner.source_positions(n)) - 1
        return torch.stack([hints, x], -1).flatten(1), torch.stack([hints[:, source], y], -1).flatten(1)

    def source_positions(self, n: int) -> list[int]:
        return [p for s in self.inner.source_positions(n) for p in (2 * s - 1, 2 * s)]


@register_task
class HintedCopy(IndexHinted):
    name, base = "copy_hints", "copy"


@register_task
class HintedReverse(IndexHinted):
    name, base = "reverse_hints", "reverse"


@dataclass
class PositionInterventions:
    """The model settings of the two position schemes below (`ModelOptions`)."""

    random_positions: int = ranged(0, 0)  # P > 0: positions are a sorted random sample from [0, P) (Ruoss et al.)
    position_coupling: bool = False  # answer queries read their source's position (Cho et al.)


def _check_position_interventions(config: ModelConfig) -> None:
    if config.encoding == "learned" and config.option("random_positions") > config.max_positions:
        raise ValueError(
            f"random_positions={config.option('random_positions')} draws positions past the learned table's "
            f"max_positions={config.max_positions}; set max_positions >= random_positions"
        )


register_model_options(ModelOptions(PositionInterventions, check=_check_position_interventions))


def randomize_positions(batch: Batch, n_positions: int, generator: torch.Generator) -> Batch:
    """Ruoss et al. 2023's randomized positions: each sequence's positions 0..L-1 become a sorted
    random sample of L distinct positions from [0, n_positions), so that training at short lengths
    still visits every position an encoding can be asked about (notebook 09)."""
    seg, offset = batch.segments, batch.positions.expand_as(batch.segments)
    seq, lengths = _sequence_index(seg)
    seq = seq[seg >= 0]
    longest = int(lengths.max())
    if longest > n_positions:
        raise ValueError(f"a sequence of {longest} tokens cannot take distinct positions from [0, {n_positions})")
    # the top-L of i.i.d. keys is a uniform L-subset; columns past a sequence's length sort last
    keys = torch.rand(len(lengths), n_positions, generator=generator)
    picked = keys.topk(longest, dim=1).indices
    picked = torch.where(torch.arange(longest) < lengths[:, None], picked, n_positions + torch.arange(longest))
    positions = torch.zeros_like(batch.segments)
    positions[seg >= 0] = picked.sort(dim=1).values[seq, offset[seg >= 0]]
    return Batch(batch.tokens, positions, batch.segments, batch.loss_mask)


def coupled_sources(task: Task, n: int) -> list[int] | None:
    """For position coupling: per query of the answer (SEP, y_1, .., y_n), the index in
    [BOS, prompt, ..] of the token whose position it reads: the source of the token it predicts
    (`Task.source_positions`), and for EOS one step past the last source (copy: SEP's index;
    reverse: BOS). None if the answer does not walk the prompt one token at a time."""
    src, two = task.source_positions(n), task.source_positions(2)
    if src is None or two is None or abs(two[1] - two[0]) != 1:
        return None
    step = two[1] - two[0]
    if any(b - a != step for a, b in zip(src, src[1:])):
        return None
    return [*src, src[-1] + step]


# A task whose answer does not walk its prompt may be coupled otherwise: a later chapter registers,
# for the tasks it knows, the positions their answers take (`register_coupling`).
COUPLINGS: list[Callable[[Task], Callable[[Batch, Tensor], Batch] | None]] = []


def register_coupling(
    coupling: Callable[[Task], Callable[[Batch, Tensor], Batch] | None],
) -> Callable[[Task], Callable[[Batch, Tensor], Batch] | None]:
    """Add a way of coupling positions: `coupling(task)` is a function of (batch, offsets) giving
    the coupled batch for a task it takes, None for the rest. Returns `coupling`."""
    COUPLINGS.append(coupling)
    return coupling


def couple_positions(batch: Batch, offsets: Tensor, task: Task) -> Batch:
    """Position coupling (Cho et al. 2024): each query of the answer (SEP, y_1, .., y_n) takes the
    position of the prompt token whose copy it predicts (`coupled_sources`), so that pointing
    is attending to one's own position, at any length; the prompt keeps its positions. `offsets`
    are each token's index in its sequence (the positions before any randomizing). A task a
    registered coupling takes (`register_coupling`) is coupled its way."""
    for coupling in COUPLINGS:
        couple = coupling(task)
        if couple is not None:
            return couple(batch, offsets)
    return couple_walk(batch, offsets, task)


def couple_walk(batch: Batch, offsets: Tensor, task: Task) -> Batch:
    """`couple_positions` for a task whose answer walks its prompt (`coupled_sources`)."""
    seg, positions = batch.segments, batch.positions.clone()
    B, T = seg.shape
    row = torch.arange(B)[:, None].expand(B, T)
    start = torch.arange(T)[None, :] - offsets  # the column where each token's sequence starts
    seq, lengths = _sequence_index(seg)
    length = lengths[seq]  # each token's sequence length
    for n in task.sizes(task.min_size, task.max_size or (T - 3)):
        L_n = task.sequence_length(n)
        if L_n > T:
            break
        sources = coupled_sources(task, n)
        if sources is None:
            raise ValueError(
                f"task {task.key!r} cannot couple positions: its answer does not walk its prompt, and no "
                "registered coupling takes it (`register_coupling`)"
            )
        first = task.prompt_length(n) + 1  # SEP's index: the first query of the answer
        mask = (seg >= 0) & (length == L_n) & (offsets >= first) & (offsets <= first + task.answer_length(n))
        source = torch.tensor(sources)[offsets[mask] - first]
        positions[mask] = batch.positions[row[mask], start[mask] + source]
    return Batch(batch.tokens, positions, batch.segments, batch.loss_mask)


# The two position schemes above, registered for the model to read (`model_positions`).
register_position_scheme(
    PositionScheme(
        "randomized",
        active=lambda config: bool(config.option("random_positions")),
        apply=lambda config, batch, offsets, task, generator: randomize_positions(
            batch, config.option("random_positions"), generator
        ),
    )
)
register_position_scheme(
    PositionScheme(
        "coupled",
        active=lambda config: config.option("position_coupling"),
        apply=lambda config, batch, offsets, task, generator: couple_positions(batch, offsets, task),
    )
)


# Training interventions on the length-generalization cliff (notebook 09), each a way to make a
# run from (task, encoding, seed); with none of them, a run is the grid's own.
def random_positions_for(task: Task, eval_max_len: int = RunConfig.eval_max_len) -> int:
    """P for randomized positions: three times the task's longest test sequence, rounded up to a
    multiple of 64 (copy and reverse at n = 48 have 99 tokens: P = 320; with hints 195: P = 640)."""
    return -(-3 * task.sequence_length(eval_max_len) // 64) * 64


def intervention_run(intervention: str, task: str, encoding: str, seed: int = 0) -> RunConfig:
    """The run of `task` and `encoding` under a named training intervention (`INTERVENTIONS`)."""
    if intervention not in INTERVENTIONS:
        raise _unknown("intervention", intervention, INTERVENTIONS)
    return INTERVENTIONS[intervention](task, encoding, seed)


def _position_settings(encoding: str, task: Task, random: bool = False) -> dict[str, int]:
    """Randomized positions for the task if `random`, and a learned table with a row for every
    position the run can read (the longest test sequence, or all P)."""
    out = {"random_positions": random_positions_for(task)} if random else {}
    rows = out.get("random_positions", task.sequence_length(RunConfig.eval_max_len))
    return {**out, "max_positions": rows} if encoding == "learned" else out


INTERVENTIONS: dict[str, Callable[[str, str, int], RunConfig]] = {
    "none": make_run,
    # Ruoss et al. 2023: positions sampled from [0, P) in training and evaluation alike
    "random positions": lambda t, e, s: make_run(t, e, s, **_position_settings(e, get_task(t), random=True)),
    # the stop decision never trained: scored with the length given
    "no EOS in loss": lambda t, e, s: make_run(t, e, s, train_eos=False),
    # Zhou et al. 2023: the same task with index hints (a task of its own: `IndexHinted`)
    "index hints": lambda t, e, s: make_run(f"{t}_hints", e, s, **_position_settings(e, get_task(f"{t}_hints"))),
    # both: with positions random, a count of positions cannot stand in for the hints
    "hints + random positions": lambda t, e, s: make_run(
        f"{t}_hints", e, s, **_position_settings(e, get_task(f"{t}_hints"), random=True)
    ),
    # Cho et al. 2024: each answer query reads its source's position (for RoPE: notebook 09 says why)
    "coupled positions": lambda t, e, s: make_run(t, e, s, position_coupling=True),
    # both: every offset a test can ask about is trained, so attending to one's own position holds
    "coupled + random positions": lambda t, e, s: make_run(
        t, e, s, position_coupling=True, **_position_settings(e, get_task(t), random=True)
    ),
}


def intervention_of(cfg: RunConfig) -> str | None:
    """The name of the intervention (`INTERVENTIONS`) that makes this run, or None if none does."""
    task = TASKS[cfg.task]
    base = task.base if issubclass(task, IndexHinted) else cfg.task
    return next((name for name, make in INTERVENTIONS.items() if make(base, cfg.encoding, cfg.seed) == cfg), None)


def cliff_interventions() -> list[RunConfig]:
    """Notebook 09's training runs, in the order they were tried: the seed-0 run of every
    (intervention, encoding) tried, on copy and reverse, then seeds 1 and 2 of the one that held."""
    seed0 = [
        *[("index hints", e) for e in ("nope", "alibi")],
        *[("no EOS in loss", e) for e in ("nope", "alibi")],
        *[("random positions", e) for e in ("sinusoidal", "learned", "rope", "alibi", "t5")],
        ("hints + random positions", "alibi"),  # added after ALiBi with hints alone still stopped at n = 16
        ("coupled positions", "rope"),  # added after the three above held no length to n = 20
        ("coupled + random positions", "rope"),  # added after coupled RoPE alone failed copy at n = 20
        # it held where the others fell: does it need RoPE's signed offsets?
        *[("coupled + random positions", e) for e in ("learned", "alibi")],
    ]
    more = [("coupled + random positions", "rope", s) for s in (1, 2)]  # its spread over seeds
    return [intervention_run(i, t, e, 0) for i, e in seed0 for t in ("copy", "reverse")] + [
        intervention_run(i, t, e, s) for i, e, s in more for t in ("copy", "reverse")
    ]


def intervention_dir(intervention: str, results_dir: str | Path = RESULTS_DIR) -> Path:
    """Where an intervention's runs are kept: the grid's folder for "none", else the sweep's own."""
    if intervention not in INTERVENTIONS:
        raise _unknown("intervention", intervention, INTERVENTIONS)
    return Path(results_dir) if intervention == "none" else experiment("cliff").results_dir(results_dir)


ANATOMY_DIR = RESULTS_DIR / "anatomy"


@torch.no_grad()
def failure_anatomy(
    model: DecoderOnlyLM, task: str, n: int, n_per_length: int = 256, seed: int = RunConfig.eval_seed
) -> dict[str, float]:
    """How a model fails at size n, on the evaluation sequences, in one teacher-forced pass:

    exact_match   the study's metric: every answer symbol and EOS is the argmax
    length_given  the same with the length given: EOS is never predicted at a symbol's step, and
                  written after the last symbol (equal to greedy decoding with EOS suppressed
                  until the answer is complete, then forced)
    token_accuracy  the share of answer symbols that are the argmax given the true prefix
    eos_right     the share of rows whose EOS step predicts EOS
    early_eos, wrong_symbol, missed_eos  the shares of rows whose first error is EOS at a
                  symbol's step, a wrong symbol, or a missing EOS after a right answer
    first_error_step  the mean answer step (0 = the first answer token) of the first error, over
                  the failing rows (NaN if none fails)
    """
    t = get_task(task)
    t.check_size(n)
    batch = evaluation_batch(t, n, n_per_length, seed, model.config)
    with evaluating(model):
        logits = model(batch.inputs, positions=batch.positions[:, :-1])
    target, scored = batch.targets, batch.loss_mask
    symbol, stop = scored & (target != EOS), scored & (target == EOS)
    pred = logits.argmax(-1)
    right = pred == target
    given = logits.index_fill(-1, torch.tensor([EOS]), float("-inf")).argmax(-1)  # EOS ruled out
    exact = exact_from_logits(logits, batch)
    wrong = scored & ~right
    first = wrong.float().argmax(dim=1)  # the first wrong column (0 where none)
    fail = ~exact
    at_first = pred.gather(1, first[:, None])[:, 0]
    first_is_stop = stop.gather(1, first[:, None])[:, 0]
    start = scored.float().argmax(dim=1)  # the first scored column: the first answer token
    steps = (first - start)[fail].double()
    return {
        "exact_match": float(exact.double().mean()),
        "length_given": float(((given == target) | ~symbol).all(dim=1).double().mean()),
        "token_accuracy": float(right[symbol].double().mean()),
        "eos_right": float(right[stop].double().mean()),
        "early_eos": float((fail & ~first_is_stop & (at_first == EOS)).double().mean()),
        "wrong_symbol": float((fail & ~first_is_stop & (at_first != EOS)).double().mean()),
        "missed_eos": float((fail & first_is_stop).double().mean()),
        "first_error_step": float(steps.mean()) if len(steps) else float("nan"),
    }


def anatomy_rows(model: DecoderOnlyLM, task: str, lengths: Iterable[int]):
    """`failure_anatomy` at each length, one row each (rounded to 6 digits, as the caches keep them)."""
    return pd.DataFrame([{"n": n, **failure_anatomy(model, task, n)} for n in lengths]).round(6)


def failure_table(
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seeds: Sequence[int] = (0,),
    lengths: Sequence[int] = range(1, 49),
    results_dir: str | Path = RESULTS_DIR,
    cache: Path | None = ANATOMY_DIR / "failures.csv",
):
    """`failure_anatomy` of each trained grid model at every length, computed once from the saved
    weights and cached as CSV with each model's config hash (as the pointer scores are)."""
    compute = functools.partial(anatomy_rows, lengths=lengths)
    table = per_model_table(compute, tasks, encodings, seeds, results_dir, cache)
    return table[table["n"].isin(list(lengths))].reset_index(drop=True)


# Attention-logit scaling at inference, on the committed grid models (no retraining): attached
# from outside the model, through each attention's `hook_scores` (`scaled_attention`).
def attention_scale(keys: Tensor, attention_temperature: float = 1.0, log_length_scaling: int = 0) -> Tensor:
    """The factor on the content logits q.k / sqrt(dh) (never on a relative bias) of a query that
    sees `keys` keys: 1 / attention_temperature, times max(1, log(keys) / log(N)) with
    log_length_scaling = N (Chiang and Cholak 2022; kept at 1 within N keys, so a model sees its
    training lengths unchanged). 0 turns the log-length factor off."""
    if not attention_temperature > 0:
        raise ValueError(f"attention_temperature must be a number > 0; got {attention_temperature!r}")
    if log_length_scaling == 1 or log_length_scaling < 0:
        raise ValueError(f"log_length_scaling must be 0 (off) or at least 2 (log 1 = 0); got {log_length_scaling!r}")
    scale = torch.full(keys.shape, 1.0 / attention_temperature, dtype=torch.float64)
    if log_length_scaling:
        scale = scale * (keys.double().log() / math.log(log_length_scaling)).clamp_min(1.0)
    return scale


@contextlib.contextmanager
def scaled_attention(model: DecoderOnlyLM, attention_temperature: float = 1.0, log_length_scaling: int = 0):
    """Within the block, every self-attention of `model` scales its content logits by
    `attention_scale` for the keys each query sees (causal: the last Tq queries of Tk keys see
    Tk - Tq + 1, .., Tk), in the forward pass and in cached decoding alike; the weights and the
    config are untouched, and leaving the block removes the hooks."""
    attention_scale(torch.ones(1), attention_temperature, log_length_scaling)  # refuses bad settings now

    def scale(scores: Tensor) -> Tensor:
        tq, tk = scores.shape[-2:]
        keys = torch.arange(tk - tq + 1, tk + 1, device=scores.device)
        return scores * attention_scale(keys, attention_temperature, log_length_scaling).to(scores.dtype)[:, None]

    with hooked((block.self_attn.hook_scores, scale) for block in model.blocks):
        yield model


SCALINGS: dict[str, dict[str, Any]] = {
    "none": {},
    "temperature 0.5": {"attention_temperature": 0.5},
    "temperature 0.75": {"attention_temperature": 0.75},
    "temperature 0.9": {"attention_temperature": 0.9},
    "temperature 1.5": {"attention_temperature": 1.5},
    "log-length (N = 34)": {"log_length_scaling": 34},  # 34 keys: the longest training input (n = 16)
}


def scaling_table(
    scalings: dict[str, dict[str, Any]] = SCALINGS,
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seed: int = 0,
    lengths: Sequence[int] = range(1, 33),
    results_dir: str | Path = RESULTS_DIR,
    cache_dir: Path | None = ANATOMY_DIR / "scaling",
):
    """`failure_anatomy` of each seed-`seed` grid model under each scaling (named, with its
    fields) at each length. Each scaling's rows are a `per_model_table`, cached in a CSV named by
    its fields, so a new scaling computes only its own rows."""
    parts = []
    for name, fields in scalings.items():

        def compute(model: DecoderOnlyLM, task: str, fields: dict[str, Any] = fields):
            with scaled_attention(model, **fields):
                return anatomy_rows(model, task, lengths)

        spec = ",".join(f"{k}={v}" for k, v in sorted(fields.items())) or "none"
        cache = None if cache_dir is None else Path(cache_dir) / f"{spec}.csv"
        parts.append(per_model_table(compute, tasks, encodings, [seed], results_dir, cache).assign(setting=name))
    table = pd.concat(parts, ignore_index=True)
    return table[table["n"].isin(list(lengths))].reset_index(drop=True)


# Training interventions (`INTERVENTIONS`, above): the failure anatomy of every trained run of
# each, beside the grid's own models ("none"), cached per intervention.
INTERVENTIONS_DIR = RESULTS_DIR / "interventions"


def seed_spread(summary, column: str):
    """One column of `intervention_summary` across seeds, per (intervention, task, encoding):
    "mean (min-max, k seeds)" as text, for a table a reader scans."""

    def spread(v) -> str:
        return f"{v.mean():.0f} ({v.min():.0f}-{v.max():.0f}, {len(v)})" if len(v) > 1 else f"{v.iloc[0]:.0f} (1)"

    keys = ["intervention", "task", "encoding"]
    return summary.groupby(keys, sort=False)[column].agg(spread).unstack("task")


ZERO_STEP = 1.5  # plot_interventions draws lines at 0% at every n this many points apart, below 0


# The experiment (`sweep --grid cliff`): the interventions above, as `cliff_interventions` lists them.
register_experiment("cliff", cliff_interventions, under_results(INTERVENTIONS_DIR), "09_what_moves_the_cliff")


# What notebook 09 shows: tables, figures and verdicts.
def plot_stop_vs_pointer(table, path: Path | None = None, train_max: int = 16):
    """Per task: exact match (solid) and exact match with the length given (dashed) against n, one
    colour per encoding: the gap between them is what the stop decision costs."""
    tasks = list(dict.fromkeys(table["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.3), sharey=True, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for enc, g in table[table["task"] == task].groupby("encoding", sort=False):
            g = g.sort_values("n")
            ax.plot(g["n"], 100 * g["exact_match"], color=encoding_color(enc), label=f"{encoding_title(enc)}")
            ax.plot(g["n"], 100 * g["length_given"], color=encoding_color(enc), ls="--", lw=1)
        ax.plot([], [], color="gray", ls="--", lw=1, label="dashed: length given")
        ax.axvline(train_max, color="black", ls=":", lw=1, label=f"longest training n = {train_max}")
        ax.set(
            title=f"{task}: exact match, and with the length given (seed 0)",
            xlabel="input length n (symbols)",
            ylabel="exact match (%)",
            xlim=(train_max - 4, 32),
        )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # lengths are integers
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def scaling_summary(table, test: tuple[int, int] = (17, 24), threshold: float = 0.9, train_max: int = 16):
    """Per (task, encoding, setting) of `scaling_table` (`reach_summary`), in %: mean exact match over
    the training lengths measured, over the `test` lengths, and the longest n up to which every
    length keeps `threshold`; each also with the length given."""
    keys = ["task", "encoding", "setting"]
    return reach_summary(table, keys, train_max, (), test, threshold, ("exact_match", "length_given")).set_index(keys)


def intervention_table(
    interventions: Sequence[str] = tuple(INTERVENTIONS),
    tasks: Sequence[str] = ("copy", "reverse"),
    encodings: Sequence[str] | None = None,
    seeds: Sequence[int] = range(3),
    lengths: Sequence[int] = range(1, 49),
    results_dir: str | Path = RESULTS_DIR,
    cache_dir: Path | None = ANATOMY_DIR,
    scaling: dict[str, Any] | None = None,
):
    """`failure_anatomy` at each length of every trained run of each intervention (runs without a
    record are skipped: a partly trained sweep reports what it has), with an `intervention` column.
    The grid's models ("none") share `failure_table`'s cache; the others have one each. With
    `scaling` (settings of `SCALINGS`: `scaled_attention`), the models are measured under it, in
    caches of their own."""
    scaling = scaling or {}
    suffix = "".join(f",{k}={v}" for k, v in sorted(scaling.items()))

    def compute(model: DecoderOnlyLM, task: str):
        with scaled_attention(model, **scaling):
            return anatomy_rows(model, task, lengths)

    encodings = encoding_names() if encodings is None else encodings
    parts = []
    for name in interventions:
        folder = intervention_dir(name, results_dir)
        run = functools.partial(intervention_run, name)
        cache = None
        if cache_dir is not None:
            slug = "_".join("".join(c if c.isalnum() else " " for c in name.lower()).split())
            plain = "failures.csv" if name == "none" and not scaling else f"interventions/{slug}{suffix}.csv"
            cache = Path(cache_dir) / plain
        for t, e, s in itertools.product(tasks, encodings, seeds):
            if record_path(folder, run(t, e, s)).exists():
                rows = per_model_table(compute, [t], [e], [s], folder, cache, run)
                parts.append(rows[rows["n"].isin(list(lengths))].assign(intervention=name))
    if not parts:
        raise FileNotFoundError(f"no trained runs of {list(interventions)} in {results_dir}; run the sweep first")
    return pd.concat(parts, ignore_index=True)


def intervention_summary(table, threshold: float = 0.9, train_max: int = 16, at: int = 32):
    """Per (intervention, task, encoding, seed) of `intervention_table` (`reach_summary`), in %:
    mean exact match over the training lengths, exact match at n = `at`, and the longest n up to
    which every length keeps `threshold`; each also with the length given."""
    keys = ["intervention", "task", "encoding", "seed"]
    return reach_summary(table, keys, train_max, (at,), None, threshold, ("exact_match", "length_given"))


def plot_interventions(table, path: Path | None = None, train_max: int = 16, length_given: bool = False):
    """Exact match against n (mean over the seeds trained), one panel per (intervention, task):
    the intervention's models solid, the same encodings' grid models dotted (and, if
    `length_given`, the intervention's models with the length given, dashed); the longest
    training n dash-dotted, twice that a broad grey line; n from half the training length on,
    where the curves part. Lines at 0% at every n would hide one another: each is drawn
    `ZERO_STEP` points below the last, and the panel names them. One legend below every panel;
    each panel's title says its seeds."""
    tasks = list(dict.fromkeys(table["task"]))
    others = [i for i in dict.fromkeys(table["intervention"]) if i != "none"]
    fig, axes = plt.subplots(
        len(others), len(tasks), figsize=(6.5 * len(tasks), 3.6 * len(others) + 1.2), squeeze=False
    )
    mean = table.groupby(["intervention", "task", "encoding", "n"], sort=False)[["exact_match", "length_given"]].mean()
    shown: list[str] = []  # the encodings drawn anywhere, in the order first drawn
    for row, name in zip(axes, others):
        for ax, task in zip(row, tasks):
            mine = table[(table["intervention"] == name) & (table["task"] == task)]
            encs = list(dict.fromkeys(mine["encoding"]))
            zeros: list[str] = []  # the lines at 0% at every n, in the order drawn

            def draw(x, y, what: str, ax: Any = ax, zeros: list[str] = zeros, **style) -> None:
                y = 100 * np.asarray(y, dtype=float)
                if np.all(y == 0):
                    zeros.append(what)
                    y = y - ZERO_STEP * len(zeros)
                ax.plot(x, y, **style)

            for enc in encs:
                g, c = mean.loc[(name, task, enc)], encoding_color(enc)
                shown += [enc] * (enc not in shown)
                draw(g.index, g["exact_match"], f"{encoding_title(enc)}, exact match", color=c, lw=2, zorder=3)
                if length_given:
                    draw(g.index, g["length_given"], f"{encoding_title(enc)}, length given", color=c, ls="--", lw=1.4)
                if ("none", task, enc) in mean.index:
                    grid = mean.loc[("none", task, enc)]
                    draw(grid.index, grid["exact_match"], f"{encoding_title(enc)}, grid model", color=c, ls=":", lw=1.8)
            ax.axvline(train_max, color="black", ls="-.", lw=1.2)
            ax.axvline(2 * train_max, color="0.6", lw=3, alpha=0.6)
            seeds = mine.groupby("encoding", sort=False)["seed"].nunique()
            said = (
                ", ".join(f"{encoding_title(e)} {k}" for e, k in seeds.items())
                if seeds.nunique() > 1
                else f"{seeds.iloc[0]}"
            )
            if zeros:
                ax.text(
                    0.97,
                    0.55,
                    f"0% at every n, drawn {ZERO_STEP:g} points\napart below 0:\n" + "\n".join(zeros),
                    transform=ax.transAxes,
                    ha="right",
                    va="center",
                    fontsize=FIGURE_TEXT["legend"] - 1,
                    bbox={"boxstyle": "round", "fc": "white", "ec": "0.6"},
                )
            bottom = -3 - ZERO_STEP * len(zeros)
            title = f"{task}: {name} ({said} seed{'s' * (said != '1')})"
            ax.set(title=title, xlabel="input length n (symbols)", ylabel="exact match (%)")
            ax.set_ylim(bottom, 108)
            ax.set_xlim(train_max / 2, int(table["n"].max()) + 1)
    order = {e: i for i, e in enumerate(encoding_names())}
    handles = [
        Line2D([], [], color=encoding_color(e), lw=2, label=encoding_title(e)) for e in sorted(shown, key=order.get)
    ]
    if length_given:
        handles.append(Line2D([], [], color="gray", ls="--", lw=1.4, label="length given"))
    handles += [
        Line2D([], [], color="gray", ls=":", lw=1.8, label="grid model (no intervention)"),
        Line2D([], [], color="black", ls="-.", lw=1.2, label=f"longest training n ({train_max})"),
        Line2D([], [], color="0.6", lw=3, alpha=0.6, label=f"twice that ({2 * train_max})"),
    ]
    fig.legend(
        handles=handles, loc="lower center", ncol=min(5, len(handles)), fontsize=FIGURE_TEXT["legend"], handlelength=3
    )
    _readable(fig)
    rows_of_legend = math.ceil(len(handles) / 5)
    fig.tight_layout(rect=(0, (0.3 + 0.3 * rows_of_legend) / fig.get_figheight(), 1, 1))
    save_figure(fig, path)
    return fig


CLIFF_GOAL = {"n = 1-16": 95.0, "n = 32": 90.0}  # exact match (%) on copy and on reverse, each seed alone


def cliff_goal(summary: pd.DataFrame) -> pd.DataFrame:
    """Per trained (intervention, encoding, seed) of `intervention_summary`: whether it meets
    `CLIFF_GOAL` on copy and on reverse, by the study's metric (EOS included) and with the
    length given."""
    by_run = summary.set_index(["intervention", "encoding", "seed", "task"])
    met = {}
    for metric, suffix in [("EOS included", ""), ("length given", ", length given")]:
        ok = pd.Series(True, index=by_run.index)
        for column, floor in CLIFF_GOAL.items():
            ok &= by_run[column + suffix] >= floor
        met[metric] = ok.unstack("task").all(axis=1)
    return pd.DataFrame(met)


def cliff_goal_report(goal: pd.DataFrame) -> str:
    """`cliff_goal` in words: per metric, how many runs meet it, and the seeds of each
    (intervention, encoding) that do."""
    lines = []
    for metric, ok in goal.items():
        met = ok[ok].reset_index()
        lines.append(
            f"{metric}: {len(met)} of {len(ok)} trained (intervention, encoding, seed) meet it on copy and reverse:"
        )
        for (name, enc), g in met.groupby(["intervention", "encoding"], sort=False):
            lines.append(f"  {name}, {encoding_title(enc)}: seeds {sorted(g['seed'])}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# 17. Scratchpads: the answer after its steps (notebook 10)
# ---------------------------------------------------------------------------------------------
# The paper's scratchpad (its unified scratchpad processor): the target becomes the steps of the
# computation, then the answer. A step has up to five components, each behind its marker and each
# one that can be left out: the step's input ("in"), its computation ("comp"), its output ("out"),
# the updated intermediate variables ("[ .. ]", such as the carry) and the input that remains
# ("re"). Steps are separated by "#"; "thus" ends the scratchpad and the answer follows. A run asks
# for one with the task option scratchpad="icovr" (any of those letters, in that order); "none",
# the default, is the task as it always was. Exact match is scored on the final answer, decoded
# greedily after the model's own steps (the paper's metric), and separately on the whole target.
SCRATCHPAD_MARKERS = {"i": "in", "c": "comp", "o": "out", "v": "[", "r": "re"}  # component -> its marker
VARIABLES_END, STEP_SEPARATOR, SCRATCHPAD_END = "]", "#", "thus"


@dataclass
class Step:
    """One step of a scratchpad; each component a list of symbol names."""

    input: list[str]
    computation: list[str]
    output: list[str]
    variables: list[str]
    remaining: list[str]

    def tokens(self, components: str) -> list[str]:
        """The step as written with `components` (letters of "icovr"), each behind its marker."""
        part = {"i": self.input, "c": self.computation, "o": self.output, "r": self.remaining}
        part["v"] = [*self.variables, VARIABLES_END]
        return [name for c in components for name in (SCRATCHPAD_MARKERS[c], *part[c])]


def write_scratchpad(steps: Sequence[Step], components: str) -> list[str]:
    """The scratchpad: each step with `components`, "#" between steps, "thus" at the end."""
    out: list[str] = []
    for i, step in enumerate(steps):
        out += [STEP_SEPARATOR] * (i > 0) + step.tokens(components)
    return [*out, SCRATCHPAD_END]


def scratchpad_values(components: str) -> tuple[str, ...]:
    """A task's valid scratchpad options: "none" (the default), then every non-empty subset of its
    components, largest first ("icovr", "icov", .., "r")."""
    subsets = (s for k in range(len(components), 0, -1) for s in itertools.combinations(components, k))
    return ("none", *("".join(s) for s in subsets))


@dataclass(frozen=True)
class StepWriter:
    """How a task writes its steps: `steps(prompt) -> [Step]` on the prompt's symbol names, the
    components its steps have, the symbols they use beyond the task's own, and `longest(n,
    components)`: a prompt of size n whose scratchpad is the longest (it bounds the answer)."""

    steps: Callable[[list[str]], list[Step]]
    components: str
    symbols: tuple[str, ...]
    longest: Callable[[int, str], list[str]]


STEP_WRITERS: dict[str, StepWriter] = {}


def writes_steps(
    task: str, symbols: Sequence[str], longest: Callable[[int, str], list[str]], components: str = "icovr"
):
    """Register the decorated `steps` as how `task` writes its scratchpad; the task gains the
    option scratchpad (`scratchpad_values(components)`)."""

    def register(steps: Callable[[list[str]], list[Step]]) -> Callable[[list[str]], list[Step]]:
        STEP_WRITERS[task] = StepWriter(steps, components, tuple(symbols), longest)
        add_task_option(task, "scratchpad", scratchpad_values(components))  # `addition.paper.scratchpad-o`
        return steps

    return register


class WithScratchpad(Task):
    """A task whose answer follows its steps: `get_task` returns one (`with_steps`, a registered
    task wrapper) when the option scratchpad is not "none". Its prompts are the task's own, drawn
    by the same calls (the same training and test prompts as without a scratchpad); its answer is
    [steps.., "thus", the task's answer]."""

    def __init__(self, inner: Task) -> None:
        self.inner, self.writer, self.components = inner, STEP_WRITERS[inner.name], inner.format["scratchpad"]
        self.name, self.options, self.format = inner.name, inner.options, inner.format
        self.added_options = inner.added_options
        self.min_size, self.max_size, self.train_max_size = inner.min_size, inner.max_size, inner.train_max_size
        markers = (*SCRATCHPAD_MARKERS.values(), VARIABLES_END, STEP_SEPARATOR, SCRATCHPAD_END)
        self.symbols = (
            *inner.symbols,
            *(s for s in dict.fromkeys((*markers, *self.writer.symbols)) if s not in inner.symbols),
        )
        self.ids = {name: i for i, name in enumerate(SPECIAL_TOKENS + self.symbols)}
        self._longest: dict[int, int] = {}

    @property
    def prompt_key(self) -> str:
        return get_task(self.name, {k: v for k, v in self.format.items() if k != "scratchpad"}).key

    def prompt_length(self, n: int) -> int:
        return self.inner.prompt_length(n)

    def scratchpad(self, prompt: list[str]) -> list[str]:
        """The scratchpad of one prompt (symbol names, without padding)."""
        return write_scratchpad(self.writer.steps(prompt), self.components)

    def answer_length(self, n: int) -> int:
        """The longest scratchpad at size n, then the longest answer: the answers' common width."""
        if n not in self._longest:
            self._longest[n] = len(self.scratchpad(self.writer.longest(n, self.components)))
        return self._longest[n] + self.inner.answer_length(n)

    def size_weights(self, sizes: Sequence[int]) -> Tensor | None:
        return self.inner.size_weights(sizes)

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompt, answer = self.inner.sample(n, batch_size, generator)
        out = torch.full((batch_size, self.answer_length(n)), PAD, dtype=torch.long)
        for b in range(batch_size):
            row = [self.ids[s] for s in self.scratchpad(self.decode(prompt[b][prompt[b] != PAD]))]
            row += answer[b][answer[b] != PAD].tolist()
            if len(row) > out.shape[1]:  # the writer's `longest` is wrong: never truncate an answer
                raise RuntimeError(
                    f"{self.key} at size {n}: a target of {len(row)} tokens, past the bound {out.shape[1]}"
                )
            out[b, : len(row)] = torch.tensor(row)
        return prompt, out

    def source_positions(self, n: int) -> list[int] | None:
        return None

    def score_run(
        self, model: DecoderOnlyLM, lengths: Sequence[int], n_per_length: int, seed: int
    ) -> tuple[dict[int, float], dict[str, Any]]:
        """Exact match of the final answer after the model's own steps, and the record's
        "scratchpad" entry: each of `scratchpad_metrics`' scores per size. A model the caches cannot
        decode (positions of its own, a window) is scored on the whole answer, steps and all,
        teacher-forced: what greedy decoding that writes every token right scores."""
        if _uncached_only(model.config):
            return exact_match_by_length(model, self, lengths, n_per_length, seed), {}
        extra = scratchpad_metrics(model, self, lengths, n_per_length, seed)
        em = extra.pop("exact_match")
        if not extra:
            return em, {}
        return em, {"scratchpad": {k: {str(n): v for n, v in by_n.items()} for k, by_n in extra.items()}}


@register_task_wrapper
def with_steps(task: Task) -> Task:
    """The task with its steps before the answer, where its option scratchpad asks for them."""
    return WithScratchpad(task) if task.format.get("scratchpad", "none") != "none" else task


def _number(digits: Sequence[int]) -> list[str]:
    """Digits as the paper's `re` writes a number: no leading zeros ("0" if all are), none if empty."""
    return list(str(int("".join(map(str, digits))))) if len(digits) else []


def _signed(v: int) -> list[str]:
    """An integer's symbols: "-" then its digits if negative."""
    return ["-", *str(-v)] if v < 0 else list(str(v))


@writes_steps("addition", (",", "=", "carry", ":"), lambda n, c: [*"9" * n, "+", *"9" * n])
def addition_steps(prompt: list[str]) -> list[Step]:
    """One step per column, least significant first (the shorter number zero-padded), and one more
    for a carry out: `in 7 , 8 comp 7 + 8 + carry = 1 5 + 0 = 1 5 out 5 [ carry : 1 ] re 5 + 6`."""
    plus = prompt.index("+")
    a, b = [int(d) for d in prompt[:plus]], [int(d) for d in prompt[plus + 1 :]]
    width = max(len(a), len(b))
    a, b = [0] * (width - len(a)) + a, [0] * (width - len(b)) + b
    steps, carry = [], 0
    for k in range(width - 1, -1, -1):
        x, y = a[k], b[k]
        total = x + y + carry
        computation = [str(x), "+", str(y), "+", "carry", "=", *str(x + y), "+", str(carry), "=", *str(total)]
        carry = total // 10
        remaining = [*_number(a[:k]), "+", *_number(b[:k])]
        steps.append(Step([str(x), ",", str(y)], computation, [str(total % 10)], ["carry", ":", str(carry)], remaining))
    if carry:
        computation = ["0", "+", "0", "+", "carry", "=", "0", "+", "1", "=", "1"]
        steps.append(Step(["0", ",", "0"], computation, ["1"], ["carry", ":", "0"], ["+"]))
    return steps


@writes_steps("summation", ("+", "=", "sum", ":"), lambda n, c: ["9"] * n)
def summation_steps(prompt: list[str]) -> list[Step]:
    """One step per number, a running sum mod 10: `in 8 comp 8 + sum = 8 + 3 = out 1 1 [ sum : 1 1 = 1 ] re 6`."""
    steps, total = [], 0
    for k, v in enumerate(prompt):
        s = int(v) + total
        variables = ["sum", ":", *str(s), "=", str(s % 10)]
        steps.append(Step([v], [v, "+", "sum", "=", v, "+", str(total), "="], list(str(s)), variables, prompt[k + 1 :]))
        total = s % 10
    return steps


@writes_steps("parity", ("xor", "par", "=", ":"), lambda n, c: ["1"] * n)
def parity_steps(prompt: list[str]) -> list[Step]:
    """One step per bit, the running parity: `in 1 comp 1 xor par = 1 xor 0 out 1 [ par : 1 ] re 0 1`."""
    steps, parity = [], 0
    for k, bit in enumerate(prompt):
        new = int(bit) ^ parity
        computation = [bit, "xor", "par", "=", bit, "xor", str(parity)]
        steps.append(Step([bit], computation, [str(new)], ["par", ":", str(new)], prompt[k + 1 :]))
        parity = new
    return steps


@writes_steps("sorting", ("minimum",), lambda n, c: ["0"] * n, components="icor")
def sorting_steps(prompt: list[str]) -> list[Step]:
    """Selection sort, one step per place: the number there, the minimum of the unsorted rest
    swapped in, what remains unsorted: `in 7 comp minimum out 3 re 7 5`."""
    values, steps = [int(v) for v in prompt], []
    for i in range(len(values)):
        front, m = values[i], min(range(i, len(values)), key=lambda j: values[j])  # the first minimum
        values[i], values[m] = values[m], values[i]
        steps.append(Step([str(front)], ["minimum"], [str(values[i])], [], [str(v) for v in values[i + 1 :]]))
    return steps


def _polynomial_longest(n: int, components: str) -> list[str]:
    """n copies of the term whose step is longest (a step's length depends on x and its term only)."""

    def length(x: int, c: int, d: int) -> int:
        return len(write_scratchpad(polynomial_steps([f"x={x}", f"{c:+d}", f"^{d}"]), components))

    x, c, d = max(itertools.product(range(-2, 3), range(-3, 4), range(4)), key=lambda t: length(*t))
    return [f"x={x}", *[f"{c:+d}", f"^{d}"] * n]


@writes_steps("polynomial", ("-", "*", "**", "=", "sum", ":", "+"), _polynomial_longest)
def polynomial_steps(prompt: list[str]) -> list[Step]:
    """One step per term, a running sum mod 10:
    `in -1 ^2 comp - 1 * 2 ** 2 = - 1 * 4 out - 4 [ sum : 3 + - 4 = 9 ] re +2 ^0`."""
    x, steps, total = int(prompt[0][2:]), [], 0
    terms = [prompt[i : i + 2] for i in range(1, len(prompt), 2)]
    for k, (coefficient, degree) in enumerate(terms):
        c, d = int(coefficient), int(degree[1:])
        value, new = c * x**d, (total + c * x**d) % 10
        computation = [*_signed(c), "*", *_signed(x), "**", str(d), "=", *_signed(c), "*", *_signed(x**d)]
        variables = ["sum", ":", str(total), "+", *_signed(value), "=", str(new)]
        steps.append(Step([coefficient, degree], computation, _signed(value), variables, sum(terms[k + 1 :], [])))
        total = new
    return steps


def _lego_longest(n: int, components: str) -> list[str]:
    """A chain a = +1, b = +a, .. in order, querying its last variable: every step is written."""
    names = [chr(ord("a") + i) for i in range(n)]
    return [*(t for i, v in enumerate(names) for t in (v, "+", names[i - 1] if i else "1")), names[-1]]


@writes_steps("lego", ("=",), _lego_longest, components="icor")
def lego_steps(prompt: list[str]) -> list[Step]:
    """The chain resolved from its root to the queried variable, in chain order whatever the
    clauses' order; what remains is the clauses not yet resolved, as written:
    `in b comp - a = - + 1 out - 1 re c + b d - c` (the root's step has an empty computation)."""
    clauses, query = [prompt[i : i + 3] for i in range(0, len(prompt) - 1, 3)], prompt[-1]
    after = {operand: clause for clause in clauses for operand in clause[2:]}  # each link, by what it reads
    value, remaining, steps, operand = {"1": 1}, list(clauses), [], "1"
    while True:
        clause = after[operand]
        variable, sign = clause[0], clause[1]
        value[variable] = value[operand] * (1 if sign == "+" else -1)
        computation = [] if operand == "1" else [sign, operand, "=", sign, "+" if value[operand] > 0 else "-", "1"]
        remaining.remove(clause)
        output = ["+" if value[variable] > 0 else "-", "1"]
        steps.append(Step([variable], computation, output, [], sum(remaining, [])))
        if variable == query:
            return steps
        operand = variable


def final_answer(tokens: Sequence[int], end: int) -> list[int] | None:
    """The answer a generated target gives: what follows its last scratchpad end (token id `end`)
    up to EOS; None if it never ends its scratchpad or never stops."""
    tokens = list(tokens)
    if EOS not in tokens or end not in tokens[: tokens.index(EOS)]:
        return None
    stop = tokens.index(EOS)
    start = max(i for i in range(stop) if tokens[i] == end) + 1
    return tokens[start:stop]


def target_parts(target: Sequence[int], task: WithScratchpad) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """Where a target (answer tokens after SEP, EOS included) has each step and its answer: spans
    (start, stop) of each step with the separator that ends it, and of the answer with its EOS."""
    target, separator, end = list(target), task.ids[STEP_SEPARATOR], task.ids[SCRATCHPAD_END]
    cut = target.index(end) + 1
    ends = [i + 1 for i, t in enumerate(target[:cut]) if t in (separator, end)]
    return list(zip([0, *ends[:-1]], ends)), (cut, target.index(EOS) + 1)


def score_scratchpad(right: Tensor, batch: Batch, task: WithScratchpad) -> dict[str, Tensor]:
    """Teacher-forced scores per row from `right` (B, T - 1), whether each target token is the
    argmax given the true prefix: the whole target right, the fraction of its steps right (every
    token of the step and its separator), and the answer right given the true steps."""
    out: dict[str, list[float]] = {"scratchpad_exact_match": [], "step_accuracy": [], "answer_given_steps": []}
    for b in range(batch.tokens.shape[0]):
        sep = int((batch.tokens[b] == SEP).nonzero()[0])
        ok = right[b, sep:].tolist()  # ok[i]: target token i (the token at sep + 1 + i) is right
        steps, (a, z) = target_parts(batch.tokens[b, sep + 1 :].tolist(), task)
        out["scratchpad_exact_match"].append(float(all(ok[:z])))
        out["step_accuracy"].append(float(np.mean([all(ok[i:j]) for i, j in steps])))
        out["answer_given_steps"].append(float(all(ok[a:z])))
    return {k: torch.tensor(v) for k, v in out.items()}


def answer_exact_match(
    model: DecoderOnlyLM, batch: Batch, task: WithScratchpad, max_new_tokens: int, whole: Tensor | None = None
) -> Tensor:
    """(B,) bool: greedy decoding from [BOS, prompt, SEP] writes its own steps, then the right
    final answer (the paper's metric). Rows are decoded in groups of one prompt length. A row
    whose whole target is the argmax given the true prefix (`whole`, teacher-forced) is right
    without decoding: greedy decoding then writes exactly that target."""
    sep = (batch.tokens == SEP).int().argmax(dim=1)
    hits = torch.zeros(len(sep), dtype=torch.bool) if whole is None else whole.bool().clone()
    for p in sep[~hits].unique().tolist():
        rows = ((sep == p) & ~hits).nonzero()[:, 0]
        generated = generate(model, batch.tokens[rows, : p + 1], max_new_tokens, stop_at_eos=True)[:, p + 1 :]
        for r, g in zip(rows.tolist(), generated.tolist()):
            truth = final_answer(batch.tokens[r, p + 1 :].tolist(), task.ids[SCRATCHPAD_END])
            hits[r] = final_answer(g, task.ids[SCRATCHPAD_END]) == truth
    return hits


def scratchpad_metrics(
    model: DecoderOnlyLM,
    task: WithScratchpad,
    lengths: Iterable[int],
    n_per_length: int = 256,
    seed: int = 1234,
    batch_size: int = 256,
) -> dict[str, dict[int, float]]:
    """Per size n: `exact_match` of the final answer after the model's own steps (greedy, with the
    cache), and teacher-forced: the whole target, the fraction of steps right, the answer given
    the true steps. The prompts are those the task draws without a scratchpad (`prompt_key`)."""
    if _uncached_only(model.config):
        raise ValueError(
            "scratchpad evaluation decodes with a cache at positions 0, 1, .. over every earlier key; train "
            "without random_positions, position_coupling, digit_places and attention_window"
        )
    metrics: dict[str, dict[int, float]] = {"exact_match": {}}
    with evaluating(model):
        for n in lengths:
            task.check_size(n)
            batch = evaluation_batch(task, n, n_per_length, seed)
            scores: dict[str, list[Tensor]] = {}
            for i in range(0, n_per_length, batch_size):
                part = _slice_batch(batch, i, i + batch_size)
                logits = model(part.inputs, positions=part.positions[:, :-1])
                row = score_scratchpad((logits.argmax(-1) == part.targets) | ~part.loss_mask, part, task)
                whole = row["scratchpad_exact_match"]
                row["exact_match"] = answer_exact_match(model, part, task, task.answer_length(n) + 1, whole)
                for k, v in row.items():
                    scores.setdefault(k, []).append(v.float())
            for k, v in scores.items():
                metrics.setdefault(k, {})[int(n)] = float(torch.cat(v).mean())
    return metrics


# What a scratchpad run costs decides the experiments: the target of a full scratchpad is about
# ten times the answer (315 tokens for 8-digit addition), so the pilot first asks how few steps of
# the study's model learn it.
def scratchpad_pilot() -> list[RunConfig]:
    """The pilot, in the order tried: the paper's addition, NoPE, seed 0, scored to 16 digits (the
    paper's 2L): the full scratchpad with the study's model at 2,000 steps (0% everywhere, the loss
    still falling), then at 5,000; and the step outputs alone ("o", a tenth of the full format's
    compute) with the model and steps chosen for addition in notebook 07 (`CHOSEN_SHAPES`)."""
    full = {"format": "paper", "scratchpad": "icovr"}
    study = [
        make_run("addition", "nope", 0, task_options=full, train_max_len=8, eval_max_len=16, steps=s)
        for s in (2_000, 5_000)
    ]
    shape, changed = CHOSEN_SHAPES["addition"]
    chosen = {**PILOT_SHAPES[shape], **changed, "task_options": {"format": "paper", "scratchpad": "o"}}
    return [*study, make_run("addition", "nope", 0, train_max_len=8, eval_max_len=16, **chosen)]


# Experiment 1: the paper's addition with the step outputs ("o") on addition's chosen model and
# steps, every encoding, three seeds, scored to 16 digits (the paper's 2L); its control is the
# addition grid of the same model and steps without a scratchpad. The pilot's outputs-only run is
# this grid's NoPE seed 0 (the same config, so the same record).
def scratchpad_addition(seeds: Sequence[int] = range(3)) -> list[RunConfig]:
    """Addition with the step outputs, 6 encodings x 3 seeds, seed-major, on its chosen model."""
    shape, changed = CHOSEN_SHAPES["addition"]
    options = {"format": "paper", "scratchpad": "o"}
    return paper_split_runs(
        "addition", seeds=seeds, eval_max_len=16, task_options=options, **PILOT_SHAPES[shape], **changed
    )


SCRATCHPAD_DIR = RESULTS_DIR / "scratchpads"


# Each task's scratchpad runs train on the model and steps of its grid: addition and polynomial
# evaluation on their chosen model (notebook 07), the other tasks on the study's.
def scratchpad_run(task: str, components: str, encoding: str = "nope", seed: int = 0, **overrides: Any) -> RunConfig:
    """A run of `task` with the scratchpad `components` on its grid's model and steps, scored to
    2L (the paper's test range; 3L would not fit the model's positions); "none" is its grid's own
    run, scored to 3L."""
    if task in CHOSEN_SHAPES:
        shape, changed = CHOSEN_SHAPES[task]
        settings = {**PILOT_SHAPES[shape], **changed}
    else:
        settings = {}
    if components == "none":
        return paper_split_runs(
            task, [encoding], [seed], task_options=PAPER_FORMAT.get(task, {}), **settings | overrides
        )[0]
    options = {**PAPER_FORMAT.get(task, {}), "scratchpad": components}
    top = 2 * get_task(task).train_max_size
    return paper_split_runs(task, [encoding], [seed], eval_max_len=top, task_options=options, **settings | overrides)[0]


def format_tokens(task: str, formats: Sequence[str], n: int, count: int = 256, seed: int = 0):
    """Mean tokens per sequence of `task` (in the paper's format where ours differs) at size n,
    per scratchpad format ("none": the answer alone): the prompt and the target (answer tokens
    and EOS), over `count` draws."""
    rows = {}
    for f in formats:
        t = get_task(task, {**PAPER_FORMAT.get(task, {}), "scratchpad": f})
        prompt, target = t.sample(n, count, torch.Generator().manual_seed(seed))
        rows[f] = {"prompt": float((prompt != PAD).sum(1).float().mean())}
        rows[f]["target"] = float((target != PAD).sum(1).float().mean())
    return pd.DataFrame(rows).T


SCRATCHPAD_COST_FORMATS: dict[str, tuple[str, ...]] = {
    "addition": ("none", "o", "co", "ov", "icovr"),
    "summation": ("none", "o", "co", "ov", "icovr"),
    "parity": ("none", "o", "co", "ov", "icovr"),
    "sorting": ("none", "o", "co", "icor"),  # no intermediate variables
    "polynomial": ("none", "o", "co", "ov", "icovr"),
}


def scratchpad_costs(copy_run: float, formats: Mapping[str, Sequence[str]] = SCRATCHPAD_COST_FORMATS):
    """Copy runs per run (`run_compute_flops`) of each task with each scratchpad format, on its
    grid's model and steps: rows tasks, columns formats (blank where a task has no such format)."""
    rows = {
        task: {f: run_compute_flops(scratchpad_run(task, f), sample_steps=20) / copy_run for f in fs}
        for task, fs in formats.items()
    }
    columns = list(dict.fromkeys(f for fs in formats.values() for f in fs))
    return pd.DataFrame.from_dict(rows, orient="index")[columns]


# Experiment 2: the other tasks with the step outputs, NoPE and T5, seed 0, each against its grid's
# run of the same seed; and one richer format, the paper's smallest ("co"), for NoPE where it fits
# (polynomial evaluation's costs 27 copy runs a run). Experiment 3: addition, NoPE, seed 0, one
# component added to the step outputs at a time, computation first ("co", the paper's smallest
# format), then the intermediate variables ("ov"). The paper leaves components out of the full
# format; the full one does not fit here, so they are added to the smallest.
SCRATCHPAD_TASKS = ("summation", "parity", "sorting", "polynomial")
SCRATCHPAD_COMPONENTS = ("co", "ov")


def scratchpad_tasks() -> list[RunConfig]:
    """Experiment 2: each other task with the step outputs (NoPE, T5), then "co" (NoPE)."""
    runs = [scratchpad_run(t, "o", e) for t in SCRATCHPAD_TASKS for e in ("nope", "t5")]
    return runs + [scratchpad_run(t, "co") for t in SCRATCHPAD_TASKS if t != "polynomial"]


def scratchpad_components() -> list[RunConfig]:
    """Experiment 3: addition, NoPE, seed 0, with "co" then "ov"."""
    return [scratchpad_run("addition", f) for f in SCRATCHPAD_COMPONENTS]


# Experiment 1 at a lower learning rate: addition's learning rate (2e-3) was chosen for the answer alone, and
# at it no RoPE run with the step outputs learned addition. The round trains both arms again
# at 1e-3 on the paper's five encodings, pair by pair, both arms in this chapter's folder (the
# answer alone at 1e-3 is the ten-task pilot's deep shape at its default rate: the same config).
SCRATCHPAD_SECOND_LR = 1e-3
PAPER_ENCODINGS = ("nope", "sinusoidal", "rope", "alibi", "t5")


def scratchpad_lower_lr(seeds: Sequence[int] = range(3)) -> list[RunConfig]:
    """Experiment 1 at lr 1e-3: for each seed and each of the paper's five encodings, the step
    outputs ("o"), then its control (the answer alone), on addition's chosen model and steps."""
    shape, changed = CHOSEN_SHAPES["addition"]
    settings = {**PILOT_SHAPES[shape], **changed, "lr": SCRATCHPAD_SECOND_LR}
    runs = []
    for seed in seeds:
        for enc in PAPER_ENCODINGS:
            steps = {"format": "paper", "scratchpad": "o"}
            runs += paper_split_runs("addition", [enc], [seed], eval_max_len=16, task_options=steps, **settings)
            runs += paper_split_runs("addition", [enc], [seed], task_options={"format": "paper"}, **settings)
    return runs


# Experiment 1 on the pre-norm model: the study's model puts LayerNorm after each residual sum
# (post-LN, the baseline's); the paper's T5 decoder normalizes what enters each sublayer. Deep
# post-LN stacks train slowly and unevenly, and at both rates above many arms of experiment 1 stall
# on a loss plateau that more steps do not leave. This round changes that one setting, at addition's
# chosen rate, every other setting and the seeds as in experiment 1; both arms train in this
# chapter's folder. The pilot comes first: the arms that missed at both rates.
PRE_NORM_SETTINGS: dict[str, Any] = {"pre_norm": True}
EXPERIMENT_1_ARMS = {"o": "step outputs", "none": "answer alone"}  # each arm's components, in words
PRE_NORM_PILOT = (("o", "nope", 2), ("o", "rope", 2), ("o", "t5", 2), ("o", "alibi", 0))
PRE_NORM_PILOT += tuple(("none", "alibi", s) for s in range(3))


def pre_norm_arm(components: str, encoding: str, seed: int, steps: int = 10_000) -> RunConfig:
    """One arm of experiment 1 on the pre-norm model: the step outputs (`components` "o") or the
    answer alone ("none"), addition's chosen model and rate with normalization before each
    sublayer, `steps` steps."""
    if components not in EXPERIMENT_1_ARMS:
        raise ValueError(
            f"experiment 1's arms are 'o' (the step outputs) and 'none' (the answer alone); got {components!r}"
        )
    shape, changed = CHOSEN_SHAPES["addition"]
    settings = {**PILOT_SHAPES[shape], **changed, **PRE_NORM_SETTINGS, "steps": steps}
    options = {"format": "paper"} | ({"scratchpad": components} if components != "none" else {})
    top = {"eval_max_len": 16} if components != "none" else {}
    return paper_split_runs("addition", [encoding], [seed], task_options=options, **top, **settings)[0]


def scratchpad_pre_norm_pilot() -> list[RunConfig]:
    """The pre-norm pilot: the step outputs of NoPE, RoPE and T5 seed 2 and of ALiBi seed 0, and
    ALiBi's answer alone on every seed (the arms that missed at both post-LN rates)."""
    return [pre_norm_arm(*arm) for arm in PRE_NORM_PILOT]


def scratchpad_pre_norm(seeds: Sequence[int] = range(3)) -> list[RunConfig]:
    """Experiment 1 on the pre-norm model: for each seed and each of the paper's five encodings,
    the step outputs, then the answer alone (the pilot's runs are among them, the same configs)."""
    return [pre_norm_arm(arm, enc, seed) for seed in seeds for enc in PAPER_ENCODINGS for arm in ("o", "none")]


# An arm on the pre-norm model still under the learned bar (`learned_bar`) at 10,000 steps whose
# loss is still falling there (down by more than `STILL_FALLING` over its last 2,000 steps) trains
# again for 20,000, as the paper trains longer where a run needs it. The list follows from the
# records.
PRE_NORM_LONGER_STEPS = 20_000


def scratchpad_pre_norm_longer(results_dir: str | Path = SCRATCHPAD_DIR, learned_bar: float = 0.9) -> list[RunConfig]:
    """The 20,000-step runs of the pre-norm arms that qualify (above), in the grid's order."""
    runs = []
    for cfg in scratchpad_pre_norm():
        path = record_path(Path(results_dir), cfg)
        if not path.exists():
            continue
        rec = read_record(path)
        inside = _pooled_split(cfg, rec, cfg.eval_per_length)[0]
        end = cfg.steps
        falling = still_falling(loss_at(rec, end - 2_000), loss_at(rec, end))
        if inside < learned_bar and falling:
            arm = cfg.task_options.get("scratchpad", "none")
            runs.append(pre_norm_arm(arm, cfg.model.encoding, cfg.seed, PRE_NORM_LONGER_STEPS))
    return runs


# Each arm of experiment 1 takes the setting that validation picks, as the paper's runs did (each
# kept its best checkpoint by in-distribution validation): among the settings tried for the arm,
# the one whose saved model scores best in distribution on a validation draw kept apart from the
# test sums. The draw is the task's own at each training size under another seed, less every
# sequence whose prompt the test draw at that size holds; where no sequence is left (the smallest
# sizes hold few distinct sums) the size is left out.
VALIDATION_SEED = 4242
VALIDATION_CACHE = SCRATCHPAD_DIR / "validation.csv"
VALIDATION_CACHE_COLUMNS = ["config_hash", "seed", "count", "name", "exact_match"]


def _prompt_rows(batch: Batch) -> list[tuple[int, ...]]:
    """Each row's prompt (its tokens up to and including SEP), as a tuple."""
    sep = (batch.tokens == SEP).int().argmax(dim=1).tolist()
    return [tuple(row[: p + 1]) for row, p in zip(batch.tokens.tolist(), sep)]


def validation_batch(task: Task, n: int, count: int, test_seed: int, seed: int = VALIDATION_SEED) -> Batch:
    """`count` sequences of size n drawn with `seed`, less those whose prompt the test draw
    (`test_seed`, `count` sequences) at n holds: a validation draw kept apart from the test."""
    if seed == test_seed:
        raise ValueError(f"the validation seed must differ from the test's ({test_seed})")
    test = set(_prompt_rows(evaluation_batch(task, n, count, test_seed)))
    batch = evaluation_batch(task, n, count, seed)
    keep = torch.tensor([p not in test for p in _prompt_rows(batch)], dtype=torch.bool)
    return Batch(batch.tokens[keep], batch.positions[keep], batch.segments[keep], batch.loss_mask[keep])


def validation_kept(cfg: RunConfig, count: int = 256, seed: int = VALIDATION_SEED) -> dict[int, int]:
    """Per training size of `cfg`, how many of the validation draw's `count` sequences are kept
    once those whose prompt the test draw holds are taken out (`validation_batch`)."""
    task = cfg.make_task()
    sizes = task.sizes(cfg.train_min_len, cfg.train_max_len)
    return {n: len(validation_batch(task, n, count, cfg.eval_seed, seed).tokens) for n in sizes}


def validation_exact_match(
    cfg: RunConfig,
    results_dir: str | Path,
    count: int = 256,
    seed: int = VALIDATION_SEED,
    cache: Path | None = VALIDATION_CACHE,
) -> float:
    """In-distribution exact match of `cfg`'s saved model on the validation draw
    (`validation_batch`): the mean over the training sizes that keep a sequence of the share
    right, the final answer after the model's own steps where it writes steps (the records'
    metric). Read from `cache` where it holds the score, else computed and added to it."""
    known = read_keyed_cache(cache, VALIDATION_CACHE_COLUMNS, "validation")
    key = (cfg.hash, str(seed), str(count), cfg.name)
    if key in known:
        return float(known[key])
    model, task = load_run_model(cfg, results_dir), cfg.make_task()
    shares = []
    with evaluating(model):
        for n in task.sizes(cfg.train_min_len, cfg.train_max_len):
            batch = validation_batch(task, n, count, cfg.eval_seed, seed)
            if not len(batch.tokens):
                continue
            logits = model(batch.inputs, positions=batch.positions[:, :-1])
            whole = exact_from_logits(logits, batch)
            if isinstance(task, WithScratchpad):
                whole = answer_exact_match(model, batch, task, task.answer_length(n) + 1, whole)
            shares.append(float(whole.float().mean()))
    score = float(np.mean(shares))
    if cache is not None:
        write_keyed_cache(cache, VALIDATION_CACHE_COLUMNS, known | {key: repr(score)})
    return score


def arm_settings(components: str, encoding: str, seed: int) -> dict[str, tuple[RunConfig, Path]]:
    """Every setting tried for one arm of experiment 1 (`components` "o", the step outputs, or
    "none", the answer alone), as {setting: (its run, the folder its record is in)}: post-LN at
    addition's chosen rate and at the lower one, and on the pre-norm model at 10,000 and 20,000
    steps (`PRE_NORM_LONGER_STEPS`). A setting whose run is not trained is listed all the same."""
    shape, changed = CHOSEN_SHAPES["addition"]
    chosen_lr, lower_lr = scratchpad_rates()
    options = {"format": "paper"} | ({"scratchpad": components} if components != "none" else {})
    top = {"eval_max_len": 16} if components != "none" else {}
    post = {**PILOT_SHAPES[shape], **changed, "task_options": options, **top}
    first = paper_split_runs("addition", [encoding], [seed], **post)[0]
    lower = paper_split_runs("addition", [encoding], [seed], **(post | {"lr": lower_lr}))[0]
    return {
        f"post-LN, lr {chosen_lr:g}": (first, SCRATCHPAD_DIR if components != "none" else RESULTS_DIR),
        f"post-LN, lr {lower_lr:g}": (lower, SCRATCHPAD_DIR),
        f"pre-norm, lr {chosen_lr:g}": (pre_norm_arm(components, encoding, seed), SCRATCHPAD_DIR),
        f"pre-norm, lr {chosen_lr:g}, {PRE_NORM_LONGER_STEPS:,} steps": (
            pre_norm_arm(components, encoding, seed, PRE_NORM_LONGER_STEPS),
            SCRATCHPAD_DIR,
        ),
    }


def chosen_setting(components: str, encoding: str, seed: int, **validation: Any) -> dict[str, Any]:
    """One arm's validation scores (%) per trained setting (`arm_settings`), and the setting it
    takes: the best by validation (the first listed of equals), its run, the folder its record is
    in, and the record. None where no setting is trained."""
    scores, runs = {}, {}
    for name, (cfg, folder) in arm_settings(components, encoding, seed).items():
        if record_path(folder, cfg).exists():
            scores[name], runs[name] = 100 * validation_exact_match(cfg, folder, **validation), (cfg, folder)
    if not scores:
        return {"scores": {}, "setting": None, "run": None, "folder": None, "record": None}
    best = max(scores, key=lambda k: scores[k])  # max keeps the first of equals
    cfg, folder = runs[best]
    record = read_record(record_path(folder, cfg))
    return {"scores": scores, "setting": best, "run": cfg, "folder": folder, "record": record}


def scratchpad_compute(copy_run: float, results_dir: str | Path = SCRATCHPAD_DIR):
    """Per experiment (the pilot, then 1-3, then 1 on the pre-norm model: its pilot, the rest of its
    grid, its 20,000-step runs): runs, runs trained, the copy runs of those trained,
    wall time (hours, this machine's, with other training beside it, as the records time it), and
    how many trained runs resumed from a checkpoint: a resumed run's record times only the steps
    after the checkpoint (`resumed_wall_missing` estimates the rest)."""
    plans = {"pilot": scratchpad_pilot(), "1: addition, every encoding": scratchpad_addition()[1:]}
    pilot_runs = {c.hash for c in ten_task_pilot()}  # the answer alone at 1e-3 it trained: its compute
    plans["1 at lr 1e-3: both arms"] = [c for c in scratchpad_lower_lr() if c.hash not in pilot_runs]
    plans |= {"2: the other tasks": scratchpad_tasks(), "3: which component": scratchpad_components()}
    pilot_pre = scratchpad_pre_norm_pilot()
    plans["1 pre-norm: the pilot"] = pilot_pre
    plans["1 pre-norm: the grid"] = [c for c in scratchpad_pre_norm() if c.hash not in {p.hash for p in pilot_pre}]
    plans["1 pre-norm: 20,000 steps"] = scratchpad_pre_norm_longer(results_dir)
    rows = []
    for name, cfgs in plans.items():
        cost = [run_compute_flops(c, sample_steps=20) / copy_run for c in cfgs]
        records = [read_record(p) if p.exists() else None for p in (record_path(Path(results_dir), c) for c in cfgs)]
        trained = [r is not None for r in records]
        rows.append({"experiment": name, "runs": len(cfgs), "trained": sum(trained)})
        rows[-1] |= {"copy runs": sum(c for c, d in zip(cost, trained) if d)}
        rows[-1] |= {"wall (h)": sum(r["wall_time_s"] for r in records if r) / 3600}
        rows[-1] |= {"resumed": sum(bool(r and r.get("resumed_from_step")) for r in records)}
    table = pd.DataFrame(rows).set_index("experiment")
    table.loc["total"] = table.sum()
    return table


def resumed_wall_missing(results_dir: str | Path = SCRATCHPAD_DIR) -> pd.DataFrame:
    """The runs that resumed from a checkpoint: from which step, the wall time their record holds
    (hours: the steps after it and the evaluation), and an estimate of the hours before it, at the
    run's own recorded training speed (training time per step after resuming, times the steps
    before)."""
    rows = []
    for path in sorted((Path(results_dir) / "runs").glob("*.json")):
        rec = read_record(path)
        start, steps = rec.get("resumed_from_step") or 0, rec["config"]["steps"]
        if start:
            per_step = rec["train_time_s"] / (steps - start)
            rows.append({"run": rec["name"], "resumed from step": start, "steps": steps})
            rows[-1] |= {
                "wall recorded (h)": rec["wall_time_s"] / 3600,
                "before, estimated (h)": per_step * start / 3600,
            }
    return pd.DataFrame(rows).set_index("run")


def paper_scratchpad_addition(path: Path | None = None):
    """The paper's addition with and without its scratchpad formats, as its code's notebook prints
    them (results/published/paper_scratchpad_addition.csv): exact match out of distribution
    (pooled), formats as rows ("none" first), encodings as columns, the mean of the seeds printed,
    and how many seeds that is per format."""
    pub = pd.read_csv(path or PUBLISHED_DIR / "paper_scratchpad_addition.csv", comment="#")
    table = pub.pivot_table(index="format", columns="encoding", values="ood_exact_match", aggfunc="mean")
    seeds = pub.groupby("format")["seed"].nunique().rename("seeds printed")
    order = ["none", *sorted(f for f in table.index if f != "none")]
    columns = [e for e in encoding_names() if e in table.columns]
    return table.loc[order, columns].rename(columns=encoding_title).join(seeds)


# Experiment 1 against its control: each scratchpad run beside the run of the same encoding and seed
# that writes the answer alone, on the same model, steps and prompts (`chosen_shape_runs("addition")`).
def scratchpad_pairs(results_dir: str | Path = SCRATCHPAD_DIR, control_dir: str | Path = RESULTS_DIR):
    """(scratchpad run, its control run, scratchpad record or None, control record or None) for each
    run of experiment 1, seed-major."""
    controls = {(c.encoding, c.seed): c for c in chosen_shape_runs("addition")}
    out = []
    for cfg in scratchpad_addition():
        control = controls[cfg.encoding, cfg.seed]
        paths = record_path(Path(results_dir), cfg), record_path(Path(control_dir), control)
        out.append((cfg, control, *(read_record(p) if p.exists() else None for p in paths)))
    return out


def _pooled(exact_match: Mapping[str, float], sizes: Sequence[int], weights: Tensor | None, per: int):
    """(exact match pooled over `sizes` as the paper's test files pool them, each size weighed by
    its test examples there (`Task.size_weights`, None: alike), and the variance of that estimate
    from `per` sums a size)."""
    w = np.ones(len(sizes)) if weights is None else weights.numpy()
    w = w / w.sum()
    p = np.array([exact_match[str(n)] for n in sizes])
    return float(w @ p), float((w**2 * p * (1 - p)).sum() / per)


def _pooled_split(cfg: RunConfig, rec: dict, per: int) -> tuple[float, float, float]:
    """(in distribution, out of distribution, the latter's variance) of `rec`'s exact match, pooled
    by `_pooled` over `cfg`'s training sizes and the sizes after them up to its `eval_max_len`."""
    task = cfg.make_task()
    inside = task.sizes(cfg.train_min_len, cfg.train_max_len)
    outside = task.sizes(cfg.train_max_len + 1, cfg.eval_max_len)
    ood, var = _pooled(rec["exact_match"], outside, task.size_weights(outside), per)
    return _pooled(rec["exact_match"], inside, task.size_weights(inside), per)[0], ood, var


def _effect_row(cfg: RunConfig, control: RunConfig, rec: dict, ctl: dict, learned_bar: float) -> dict[str, Any]:
    """Exact match (%) in distribution (the training sizes) and out of it (the sizes after them,
    up to the scratchpad run's top), each pooled as the paper pools its test examples
    (`Task.size_weights`), with the scratchpad and without; the difference, its standard error
    (independent binomials, each run's sums a size) and whether the scratchpad helps: out of
    distribution higher by more than two standard errors; and whether each run learned the task
    in distribution (at least `learned_bar`)."""
    row: dict[str, Any] = {"encoding": cfg.encoding, "seed": cfg.seed}
    var = 0.0
    for name, r, per in (("with", rec, cfg.eval_per_length), ("without", ctl, control.eval_per_length)):
        ind, ood, v = _pooled_split(cfg, r, per)  # the control scored over the scratchpad run's sizes
        row[f"in distribution {name} (%)"], row[f"OOD {name} (%)"], var = 100 * ind, 100 * ood, var + v
    row["OOD difference (points)"] = row["OOD with (%)"] - row["OOD without (%)"]
    row["standard error (points)"] = 100 * math.sqrt(var)
    row["helps"] = row["OOD difference (points)"] > 2 * row["standard error (points)"]
    row["learned with it"] = row["in distribution with (%)"] >= 100 * learned_bar
    row["learned without it"] = row["in distribution without (%)"] >= 100 * learned_bar
    return row


EFFECT_COLUMNS = ["encoding", "seed", "in distribution with (%)", "in distribution without (%)", "OOD with (%)"]
EFFECT_COLUMNS += ["OOD without (%)", "OOD difference (points)", "standard error (points)", "helps", "learned with it"]


def scratchpad_effect(
    results_dir: str | Path = SCRATCHPAD_DIR, control_dir: str | Path = RESULTS_DIR, learned_bar: float = 0.9
):
    """One row per trained run of experiment 1 (`_effect_row`): addition with the step outputs
    against the answer alone, in distribution 1-8 digits, out of it 9-16, a size weighing by its
    pairs of digit counts (2n - 1) as in the paper's test files."""
    rows = [
        _effect_row(cfg, control, rec, ctl, learned_bar)
        for cfg, control, rec, ctl in scratchpad_pairs(results_dir, control_dir)
        if rec is not None and ctl is not None
    ]
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)


# Experiment 2 against its controls: each other task's scratchpad run beside its grid's run of the
# same encoding and seed (notebook 07's), which writes the answer alone.
def scratchpad_task_effect(
    results_dir: str | Path = SCRATCHPAD_DIR, control_dir: str | Path = RESULTS_DIR, learned_bar: float = 0.9
):
    """One row per run of experiment 2 (trained or not): task, format, encoding, seed, whether it
    is trained, the `_effect_row` columns where it is, and the verdict in words: "helps", "no
    measurable gain", "hurts" (lower by more than two standard errors), "not learned with it" or
    "control not learned" (neither of these two is ranked), or "not trained yet". Out of
    distribution is L+1 to 2L, the paper's test range."""
    rows = []
    for cfg in scratchpad_tasks():
        control = scratchpad_run(cfg.task, "none", cfg.encoding, cfg.seed)
        head = {"task": cfg.task, "format": cfg.task_options["scratchpad"]}
        paths = record_path(Path(results_dir), cfg), record_path(Path(control_dir), control)
        if not all(p.exists() for p in paths):
            rows.append(head | {"encoding": cfg.encoding, "seed": cfg.seed, "verdict": "not trained yet"})
            continue
        row = head | _effect_row(cfg, control, *(read_record(p) for p in paths), learned_bar)
        if not row["learned with it"]:
            row["verdict"] = "not learned with it"
        elif not row["learned without it"]:
            row["verdict"] = "control not learned"
        else:
            hurts = row["OOD difference (points)"] < -2 * row["standard error (points)"]
            row["verdict"] = "helps" if row["helps"] else "hurts" if hurts else "no measurable gain"
        rows.append(row)
    columns = ["task", "format", *EFFECT_COLUMNS, "verdict"]
    return pd.DataFrame(rows).reindex(columns=columns)


# Experiment 1, judged from its seeds: a pair is compared only where both arms learn addition in
# distribution (`learned_bar`); an effect is the spread of the compared pairs' differences over
# seeds (per encoding), and across encodings an exact two-sided sign-flip test over every compared
# pair (p at most `SCRATCHPAD_ALPHA`). A claim holds here only where both agree, and a claim for
# every encoding is testable only where each has `SCRATCHPAD_MIN_PAIRS` compared pairs. Test
# sampling (the standard error of one run's 256 sums a size) is shown, not judged.
SCRATCHPAD_ALPHA = 0.05
SCRATCHPAD_MIN_PAIRS = 2


def scratchpad_rates() -> tuple[float, float]:
    """Experiment 1's learning rates: addition's chosen one (its controls are notebook 07's grid)
    and the lower one (both arms trained in this chapter's folder)."""
    return CHOSEN_SHAPES["addition"][1]["lr"], SCRATCHPAD_SECOND_LR


def rate_pairs(lr: float, results_dir: str | Path = SCRATCHPAD_DIR, control_dir: str | Path = RESULTS_DIR):
    """(scratchpad run, control run, their records or None) of experiment 1 at learning rate `lr`,
    seed-major, encodings in the order trained."""
    chosen, lower = scratchpad_rates()
    if lr == chosen:
        return scratchpad_pairs(results_dir, control_dir)
    if lr != lower:
        raise ValueError(f"experiment 1 was trained at learning rates {chosen:g} and {lower:g}; got {lr:g}")
    runs, out = scratchpad_lower_lr(), []
    for cfg, control in zip(runs[0::2], runs[1::2]):
        paths = record_path(Path(results_dir), cfg), record_path(Path(results_dir), control)
        out.append((cfg, control, *(read_record(p) if p.exists() else None for p in paths)))
    return out


def pair_status(row: Mapping[str, Any]) -> str:
    """Whether an experiment 1 pair is compared: "compared" (both arms at least 90% in
    distribution), else which arm did not learn addition."""
    if row["learned with it"] and row["learned without it"]:
        return "compared"
    if row["learned with it"]:
        return "control not learned"
    return "scratchpad arm not learned" if row["learned without it"] else "neither learned"


def seed_effects(pairs, encodings: Sequence[str] = PAPER_ENCODINGS):
    """Per encoding, from `rate_pair_table` rows of one learning rate: the pairs compared, their
    out-of-distribution differences over seeds (points, with the step outputs minus without:
    each seed's, the lowest and highest, and how many are above 0)."""
    rows = []
    for enc in encodings:
        got = pairs[(pairs["encoding"] == enc) & (pairs["status"] == "compared")]
        d = got["OOD difference (points)"]
        row = {"encoding": encoding_title(enc), "pairs compared": len(got)}
        row["differences by seed"] = ", ".join(f"s{s} {v:+.1f}" for s, v in zip(got["seed"], d)) or "none"
        row |= {"lowest": d.min() if len(d) else float("nan"), "highest": d.max() if len(d) else float("nan")}
        rows.append(row | {"above 0": f"{int((d > 0).sum())} of {len(d)}"})
    return pd.DataFrame(rows).set_index("encoding")


def learned_at_each_rate(pairs, learned_bar: float = 0.9):
    """Per arm, on the pairs trained at every rate in `pairs` (`rate_pair_table` rows): how many
    runs learn addition in distribution (at least `learned_bar`) at each rate, how many only at
    the first rate listed and only at the second, and an exact two-sided sign test on those
    discordant runs (each seed's run at one rate against the same seed's at the other)."""
    rates = list(dict.fromkeys(pairs["learning rate"]))
    if len(rates) != 2:
        raise ValueError(f"learned_at_each_rate compares two learning rates; got {rates}")
    trained = pairs[pairs["status"] != "not trained yet"]
    keys = ["encoding", "seed"]
    both = trained.groupby(keys).filter(lambda g: g["learning rate"].nunique() == 2)
    rows = []
    for arm, column in (("step outputs", "in distribution with (%)"), ("answer alone", "in distribution without (%)")):
        wide = both.pivot_table(index=keys, columns="learning rate", values=column) >= 100 * learned_bar
        first, second = wide[rates[0]], wide[rates[1]]
        only_first, only_second = int((first & ~second).sum()), int((~first & second).sum())
        n = only_first + only_second
        p = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(only_first, only_second) + 1)) / 2**n) if n else 1.0
        rows.append({"arm": arm, "pairs": len(wide)} | {f"learned at {lr:g}": int(wide[lr].sum()) for lr in rates})
        rows[-1] |= {f"only at {rates[0]:g}": only_first, f"only at {rates[1]:g}": only_second, "sign test p": p}
    return pd.DataFrame(rows).set_index("arm")


def rate_loss_curves(
    rates: Sequence[float] | None = None,
    results_dir: str | Path = SCRATCHPAD_DIR,
    control_dir: str | Path = RESULTS_DIR,
):
    """Long table of experiment 1's training losses at each rate: learning rate, arm ("step
    outputs" or "answer alone"), encoding, seed, step and the mean loss per target token over the
    steps up to it (each record's `loss_curve`)."""
    rows = []
    for lr in rates or scratchpad_rates():
        for cfg, _, rec, ctl in rate_pairs(lr, results_dir, control_dir):
            for arm, r in (("step outputs", rec), ("answer alone", ctl)):
                if r is None:
                    continue
                curve = r["loss_curve"]
                for i, loss in enumerate(curve["mean_loss"]):
                    rows.append(
                        {"learning rate": lr, "arm": arm, "encoding": cfg.encoding, "seed": cfg.seed}
                        | {"step": (i + 1) * curve["every"], "loss": loss}
                    )
    return pd.DataFrame(rows, columns=["learning rate", "arm", "encoding", "seed", "step", "loss"])


def plateau_exit(curves, level: float = 0.05):
    """Per run of `rate_loss_curves`: the first step at which its loss is below `level` per token
    (None where it never is), as a table: (learning rate, arm, encoding) rows, seeds as columns."""
    below = curves[curves["loss"] < level].groupby(["learning rate", "arm", "encoding", "seed"])["step"].min()
    runs = curves.groupby(["learning rate", "arm", "encoding", "seed"])["step"].max().rename("last")
    return below.reindex(runs.index).astype("Int64").unstack("seed")


def late_loss_change(curves, pairs, window: int = 2000, falling: float = STILL_FALLING, learned_bar: float = 0.9):
    """Per arm of `pairs` (`rate_pair_table` rows) that did not learn addition in distribution
    (under `learned_bar`): its loss per target token `window` steps before the end of training and
    at the end (`rate_loss_curves`), the relative change between them, and whether it is still
    falling (down by more than the fraction `falling` over those last steps, while the cosine
    schedule brings the learning rate towards 0)."""
    by_run = curves.set_index(["learning rate", "arm", "encoding", "seed", "step"])["loss"].sort_index()
    rows = []
    for _, p in pairs[pairs["status"] != "not trained yet"].iterrows():
        for arm, column in (
            ("step outputs", "in distribution with (%)"),
            ("answer alone", "in distribution without (%)"),
        ):
            if p[column] >= 100 * learned_bar:
                continue
            loss = by_run.loc[(p["learning rate"], arm, p["encoding"], p["seed"])]
            end = int(loss.index.max())
            before, last = float(loss.loc[end - window]), float(loss.loc[end])
            rows.append(
                {"learning rate": p["learning rate"], "arm": arm, "encoding": p["encoding"], "seed": p["seed"]}
                | {"in distribution (%)": p[column], f"loss at {end - window:,}": before, f"loss at {end:,}": last}
                | {"change (%)": 100 * (last / before - 1), "still falling": still_falling(before, last, falling)}
            )
    return pd.DataFrame(rows)


def scratchpad_curves(
    results_dir: str | Path = SCRATCHPAD_DIR,
    control_dir: str | Path = RESULTS_DIR,
    top: int = 16,
    lr: float | None = None,
):
    """Long table of experiment 1 and its control at learning rate `lr` (default addition's
    chosen one): encoding, seed, scratchpad ("o" or "none"), n, exact match (0-1), and for the
    scratchpad runs the teacher-forced step accuracy and answer given the true steps; sizes up to
    `top`, pairs whose both runs are trained."""
    rows = []
    for cfg, _, rec, ctl in rate_pairs(scratchpad_rates()[0] if lr is None else lr, results_dir, control_dir):
        if rec is None or ctl is None:
            continue
        for name, r in (("o", rec), ("none", ctl)):
            for n in range(1, top + 1):
                row = {"encoding": cfg.encoding, "seed": cfg.seed, "scratchpad": name, "n": n}
                row["exact_match"] = r["exact_match"][str(n)]
                for k in ("step_accuracy", "answer_given_steps"):
                    row[k] = r["scratchpad"][k][str(n)] if name == "o" else float("nan")
                rows.append(row)
    return pd.DataFrame(
        rows, columns=["encoding", "seed", "scratchpad", "n", "exact_match", "step_accuracy", "answer_given_steps"]
    )


def step_or_answer(curves, sizes: Sequence[int] = range(9, 17), runs: Iterable[tuple[str, int]] | None = None):
    """Where the scratchpad runs fail past the training range, per encoding (mean of the seeds
    trained, or of those in `runs`: (encoding, seed) pairs) and size: exact match (greedy, own
    steps), the teacher-forced fraction of steps right and the answer right given the true steps,
    in %."""
    got = curves[(curves["scratchpad"] == "o") & curves["n"].isin(list(sizes))]
    if runs is not None:
        keep = set(runs)
        got = got[[(e, s) in keep for e, s in zip(got["encoding"], got["seed"])]]
    table = got.groupby(["encoding", "n"], sort=False)[["exact_match", "step_accuracy", "answer_given_steps"]].mean()
    table = (100 * table).rename(
        columns={
            "exact_match": "exact match (%)",
            "step_accuracy": "steps right (%)",
            "answer_given_steps": "answer given true steps (%)",
        }
    )
    return table.rename(index=encoding_title, level="encoding")


def step_or_answer_at_rates(
    pairs,
    sizes: Sequence[int] = range(9, 17),
    results_dir: str | Path = SCRATCHPAD_DIR,
    control_dir: str | Path = RESULTS_DIR,
):
    """`step_or_answer` at each learning rate of `pairs` (`rate_pair_table` rows), over the runs
    whose step outputs are learned in distribution (status "compared" or "control not learned"):
    rows (learning rate, encoding, n), rates in the order of `pairs`."""
    parts = {}
    for lr, g in pairs.groupby("learning rate", sort=False):
        learned = g[g["status"].isin(["compared", "control not learned"])]
        if len(learned):
            runs = list(zip(learned["encoding"], learned["seed"]))
            parts[lr] = step_or_answer(scratchpad_curves(results_dir, control_dir, lr=lr), sizes, runs)
    if not parts:
        raise ValueError("no run in `pairs` learned the step outputs in distribution")
    return pd.concat(parts, names=["learning rate"])


def step_or_answer_by_size(table, sizes: Sequence[int] | None = None):
    """`step_or_answer`'s long table (rows: encoding, or learning rate and encoding, then n) wide:
    one row per encoding (or rate and encoding), each measure a header over one column per size
    (`sizes`, default every size in the table), rows in the table's order."""
    got = table if sizes is None else table[table.index.get_level_values("n").isin(list(sizes))]
    order = list(dict.fromkeys(got.index.droplevel("n")))
    wide = got.unstack("n").reindex(order)
    return wide.rename_axis(columns=[None, "n (digits)"])


@torch.no_grad()
def step_attention(
    model: DecoderOnlyLM, task: WithScratchpad, n: int, n_examples: int = 64, seed: int = INSPECTION_SEED
):
    """Where each head looks while writing a step of addition's step outputs ("o"): for every step
    that adds a column of the prompt, the query that predicts the step's digit (the "out" marker)
    and the mean attention mass it puts on that column's operand digits (one or two: the paper's
    operands have their own digit counts), beside uniform attention's mass on them. One row per
    (layer, head), over the inspection sequences of size n."""
    if task.name != "addition" or task.components != "o":
        raise ValueError(f"step_attention reads addition with the step outputs alone; got {task.key}")
    batch = evaluation_batch(task, n, n_examples, seed, model.config)
    att = attention_maps(model, batch)  # (layers, B, H, T, T)
    out_id, plus = task.ids[SCRATCHPAD_MARKERS["o"]], task.ids["+"]
    mass, uniform = [], []
    for b, row in enumerate(batch.tokens.tolist()):
        p, sep = row.index(plus), row.index(SEP)
        la, lb = p - 1, sep - p - 1  # digits of each operand (BOS is index 0)
        outs = [i for i in range(sep, len(row)) if row[i] == out_id]
        for k, q in enumerate(outs):
            keys = [j for j, ok in ((p - 1 - k, k < la), (sep - 1 - k, k < lb)) if ok]
            if keys:  # the carry's own step reads no column
                mass.append(att[:, b, :, q, keys].sum(-1))
                uniform.append(len(keys) / (q + 1))
    m = torch.stack(mass).mean(0)  # (layers, heads)
    rows = [
        {
            "layer": layer,
            "head": head,
            "on the column's digits": float(m[layer, head]),
            "uniform": float(np.mean(uniform)),
        }
        for layer in range(m.shape[0])
        for head in range(m.shape[1])
    ]
    return pd.DataFrame(rows)


# Our scoring against the paper's parser. Ours: the answer is what follows the last "thus" up to
# EOS, and a generation without either is wrong. The paper's parser (its code) reads the text after
# the first end marker, up to a second one or the end, and parses it as an integer: it forgives a
# missing end, text after a second marker and a leading zero. An answer that is not a number
# (parity's "even" and "odd") is compared as text.
LIST_ANSWERS = {"sorting"}  # tasks whose answer is a list of numbers, not one number


def lenient_answer(
    tokens: Sequence[int], end: int, symbols: Mapping[int, str], as_list: bool = False
) -> int | str | tuple[int | str, ...] | None:
    """The paper's reading of a generation: the tokens after the first `end` (token id), up to the
    next `end`, EOS or the generation's end, written out (`symbols`: token id -> its text) and read
    as an integer where the text is one (a sign and leading zeros forgiven), else as the text
    itself; with `as_list`, one item a token (sorting's answer). None where there is no `end`,
    nothing follows it, or a token has no symbol: None is never a right answer."""
    tokens = list(tokens)
    if end not in tokens:
        return None
    rest = tokens[tokens.index(end) + 1 :]
    stops = [i for i, t in enumerate(rest) if t in (end, EOS, PAD)]
    rest = rest[: stops[0]] if stops else rest
    if not rest or any(t not in symbols for t in rest):
        return None
    if as_list:
        return tuple(_as_number(symbols[t]) for t in rest)
    return _as_number("".join(symbols[t] for t in rest))


def _as_number(text: str) -> int | str:
    """`text` as an integer where it is one ("-08" -> -8), else as it is."""
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else text


def lenient_right(generated: Sequence[int], truth: Sequence[int], end: int, symbols: Mapping[int, str], as_list=False):
    """Whether the paper's parser reads the generation as the true answer (`truth`: the answer's
    tokens, as `final_answer` returns them); a generation it cannot read is wrong."""
    got = lenient_answer(generated, end, symbols, as_list)
    return got is not None and got == lenient_answer([end, *truth], end, symbols, as_list)


def scoring_comparison(
    model: DecoderOnlyLM,
    task: WithScratchpad,
    sizes: Iterable[int],
    n_per_length: int = 256,
    seed: int = RunConfig.eval_seed,
):
    """Per size: the fraction of sums right by our scoring (`final_answer`, exact tokens) and by the
    paper's parser (`lenient_answer`), greedy from the evaluation prompts with the model's own
    steps, and how many sums the two scorings judge differently."""
    end, as_list = task.ids[SCRATCHPAD_END], task.name in LIST_ANSWERS
    symbols = {i: t for t, i in task.ids.items() if i not in (PAD, BOS, SEP, EOS)}
    rows = []
    with evaluating(model):
        for n in sizes:
            batch = evaluation_batch(task, n, n_per_length, seed)
            sep = (batch.tokens == SEP).int().argmax(dim=1)
            # a target right teacher-forced is what greedy decoding writes: right by both readings
            strict = exact_match_rows(model, batch)
            lenient = strict.clone()
            for p in sep[~strict].unique().tolist():
                rows_p = ((sep == p) & ~strict).nonzero()[:, 0]
                # twice the tokens the records' scoring decodes (the paper's parser reads past a missed
                # end), within the positions the model can represent (a learned table's rows)
                limit, room = model.pos.max_length, 2 * task.answer_length(n)
                room = room if limit is None else min(room, limit - p)
                gen = generate(model, batch.tokens[rows_p, : p + 1], room, stop_at_eos=True)
                for r, g in zip(rows_p.tolist(), gen[:, p + 1 :].tolist()):
                    truth = final_answer(batch.tokens[r, p + 1 :].tolist(), end)
                    strict[r] = final_answer(g, end) == truth
                    lenient[r] = lenient_right(g, truth, end, symbols, as_list)
            rows.append({"n": n, "ours": float(strict.float().mean()), "paper's parser": float(lenient.float().mean())})
            rows[-1]["sums judged differently"] = int((strict != lenient).sum())
    return pd.DataFrame(rows)


def scoring_table(
    results_dir: str | Path = SCRATCHPAD_DIR, cache: Path | None = SCRATCHPAD_DIR / "scoring.csv", top: int = 16
):
    """`scoring_comparison` at sizes 1-`top` for every trained run of experiment 1, computed once
    from the saved weights and cached as CSV with each model's config hash."""
    parts = []
    for cfg, _, rec, _ in scratchpad_pairs(results_dir):
        if rec is None:
            continue

        def compute(model: DecoderOnlyLM, _task: str, cfg: RunConfig = cfg):
            return scoring_comparison(model, cfg.make_task(), range(1, top + 1), cfg.eval_per_length, cfg.eval_seed)

        run = lambda t, e, s, cfg=cfg: cfg  # noqa: E731
        parts.append(per_model_table(compute, ["addition"], [cfg.encoding], [cfg.seed], results_dir, cache, run=run))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def steps_past_target(
    model: DecoderOnlyLM, task: WithScratchpad, sizes: Iterable[int], count: int = 64, seed: int = RunConfig.eval_seed
):
    """Per size: how many steps greedy decoding writes against the target's, given twice the
    target's room (`count` evaluation prompts, drawn as exact match draws them): the share of
    generations with more steps than the target, the fewest and most extra steps, and the share
    that stop (EOS) within one token past the longest target, the room the records' exact match
    decodes."""
    rows = []
    with evaluating(model):
        for n in sizes:
            batch = evaluation_batch(task, n, count, seed)
            sep, mark = (batch.tokens == SEP).int().argmax(dim=1), task.ids[STEP_SEPARATOR]
            extra, fits = [], []
            for p in sep.unique().tolist():  # prompts of one length decode together
                rows_p = batch.tokens[sep == p]
                gen = generate(model, rows_p[:, : p + 1], 2 * task.answer_length(n), stop_at_eos=True)
                for g, t in zip(gen[:, p + 1 :].tolist(), rows_p[:, p + 1 :].tolist()):
                    stop = g.index(EOS) + 1 if EOS in g else len(g)
                    extra.append(g[:stop].count(mark) - t.count(mark))
                    fits.append(EOS in g[: task.answer_length(n) + 1])
            rows.append({"n": n, "more steps than the target": float(np.mean([e > 0 for e in extra]))})
            rows[-1] |= {
                "fewest extra": min(extra),
                "most extra": max(extra),
                "stops within the records' room": float(np.mean(fits)),
            }
    return pd.DataFrame(rows).set_index("n")


def other_scoring_table(
    results_dir: str | Path = SCRATCHPAD_DIR, cache: Path | None = SCRATCHPAD_DIR / "scoring_other.csv", top: int = 16
):
    """`scoring_comparison` at sizes 1-`top` for every trained run of experiments 2 and 3 (the
    other tasks; addition's added components), cached as `scoring_table` caches experiment 1's; the
    `task` column holds the run's task key (task and format), since formats share an encoding and
    seed."""
    parts = []
    for cfg in [*scratchpad_tasks(), *scratchpad_components()]:
        if not record_path(Path(results_dir), cfg).exists():
            continue

        def compute(model: DecoderOnlyLM, _task: str, cfg: RunConfig = cfg):
            return scoring_comparison(model, cfg.make_task(), range(1, top + 1), cfg.eval_per_length, cfg.eval_seed)

        run = lambda t, e, s, cfg=cfg: cfg  # noqa: E731
        key = cfg.make_task().key
        parts.append(per_model_table(compute, [key], [cfg.encoding], [cfg.seed], results_dir, cache, run=run))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _records_read_as(scoring, column: str, cfgs: Iterable[RunConfig], results_dir: Path, into: Path, key) -> None:
    """Copies of the records of `cfgs` in `into`, with exact match at the sizes `scoring` holds
    replaced by its `column` ("ours" or "paper's parser"; `key(cfg)`: the run's value in scoring's
    `task` column). The records themselves are left as they are."""
    for cfg in cfgs:
        source = record_path(results_dir, cfg)
        mine = scoring[(scoring["task"] == key(cfg)) & (scoring["encoding"] == cfg.encoding)]
        mine = mine[mine["seed"] == cfg.seed]
        if not source.exists():
            continue
        if not len(mine):
            raise ValueError(f"{cfg.name} is trained but has no scoring rows: recompute the scoring table first")
        rec = read_record(source)
        rec["exact_match"] = rec["exact_match"] | {str(int(n)): float(v) for n, v in zip(mine["n"], mine[column])}
        target = record_path(into, cfg)
        target.parent.mkdir(parents=True, exist_ok=True)
        _atomic_json(target, rec)


# each reading of experiments 2 and 3, and the scoring table's column it reads (None: the records)
OTHER_READINGS = {"ours, as recorded": None, "ours, more room": "ours", "paper's parser": "paper's parser"}


def scoring_ood(scoring, cfg: RunConfig, column: str = "ours") -> float:
    """A run's out-of-distribution exact match (%) by one reading of `scoring` (`scoring_table`,
    `other_scoring_table`: rows named by the task, or by its key where formats share a task),
    pooled over its sizes past training as its records are pooled."""
    mine = scoring[scoring["task"].isin([cfg.task, cfg.make_task().key]) & (scoring["encoding"] == cfg.encoding)]
    mine = mine[mine["seed"] == cfg.seed]
    sizes = sorted(int(n) for n in mine["n"] if n > cfg.train_max_len)
    em = {str(int(n)): v for n, v in zip(mine["n"], mine[column])}
    return 100 * _pooled(em, sizes, cfg.make_task().size_weights(sizes), cfg.eval_per_length)[0]


register_experiments(  # each: its name (`sweep --grid NAME`), its runs, its folder under results/
    "10_scratchpads",
    [
        ("scratchpad-pilot", scratchpad_pilot, under_results(SCRATCHPAD_DIR)),
        ("scratchpad-addition", scratchpad_addition, under_results(SCRATCHPAD_DIR)),
        ("scratchpad-tasks", scratchpad_tasks, under_results(SCRATCHPAD_DIR)),
        ("scratchpad-components", scratchpad_components, under_results(SCRATCHPAD_DIR)),
        ("scratchpad-lower-lr", scratchpad_lower_lr, under_results(SCRATCHPAD_DIR)),
        ("scratchpad-pre-norm-pilot", scratchpad_pre_norm_pilot, under_results(SCRATCHPAD_DIR)),
        ("scratchpad-pre-norm", scratchpad_pre_norm, under_results(SCRATCHPAD_DIR)),
        ("scratchpad-pre-norm-longer", scratchpad_pre_norm_longer, under_results(SCRATCHPAD_DIR)),
    ],
)


# What notebook 10 shows: tables, figures and verdicts.
def scratchpad_example(task: str, components: str, n: int, seed: int = 0, options: dict[str, str] | None = None):
    """One prompt of `task` at size n (the first of `seed`'s draws) and its target with the
    scratchpad `components` ("none" for the task's own answer), each as its symbols."""
    t = get_task(task, {**(options or {}), "scratchpad": components})
    prompt, target = t.sample(n, 1, torch.Generator().manual_seed(seed))
    text = {name: " ".join(t.decode(row[row != PAD])) for name, row in (("prompt", prompt[0]), ("target", target[0]))}
    return pd.Series({"task": task, "format": components, "size": n, **text})


def scratchpad_pilot_table(copy_run: float, results_dir: str | Path = SCRATCHPAD_DIR):
    """The pilot's runs, in the order tried: format, layers, steps, learning rate, exact match (%)
    in distribution (the mean over sizes, and pooled as experiment 1 pools it: `_pooled_split`)
    and at 9, 10, 12 and 16 digits, the final training loss, copy runs, wall time."""
    rows = []
    for cfg in scratchpad_pilot():
        rec = record_of(results_dir, cfg)
        em = rec["exact_match"] if rec else {}
        row = {"format": cfg.task_options["scratchpad"], "layers": cfg.model.n_layers, "steps": cfg.steps, "lr": cfg.lr}
        row["in distribution (%)"] = 100 * rec["in_distribution_mean"] if rec else float("nan")
        row["pooled (%)"] = 100 * _pooled_split(cfg, rec, cfg.eval_per_length)[0] if rec else float("nan")
        row |= {f"{n} digits (%)": 100 * em[str(n)] if rec else float("nan") for n in (9, 10, 12, 16)}
        row["final loss"] = rec["loss_curve"]["mean_loss"][-1] if rec else float("nan")
        row["copy runs"] = run_compute_flops(cfg, sample_steps=20) / copy_run
        row["wall (min)"] = rec["wall_time_s"] / 60 if rec else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


# Experiment 3: addition, NoPE, seed 0, from the step outputs one component added at a time.
def scratchpad_format_table(
    results_dir: str | Path = SCRATCHPAD_DIR, control_dir: str | Path = RESULTS_DIR, learned_bar: float = 0.9
):
    """Addition, NoPE, seed 0, per format ("none", "o", then `SCRATCHPAD_COMPONENTS`): whether
    trained, exact match (%) in distribution and out of it (pooled as in `scratchpad_effect`), the
    out-of-distribution difference from "o" with its standard error, and whether that difference
    exceeds two of them (the format matters)."""
    formats = ["none", "o", *SCRATCHPAD_COMPONENTS]
    cfgs = {f: scratchpad_run("addition", f) for f in formats}
    dirs = {f: control_dir if f == "none" else results_dir for f in formats}
    recs = {f: read_record(p) if (p := record_path(Path(dirs[f]), c)).exists() else None for f, c in cfgs.items()}
    pooled = {f: _pooled_split(cfgs["o"], r, cfgs[f].eval_per_length) for f, r in recs.items() if r is not None}
    rows = []
    for f in formats:
        row: dict[str, Any] = {"format": f, "trained": f in pooled}
        if f in pooled:
            ind, ood, var = pooled[f]
            row |= {"in distribution (%)": 100 * ind, "OOD (%)": 100 * ood}
            row["learned"] = ind >= learned_bar
            if f not in ("o", "none") and "o" in pooled:
                row["OOD vs o (points)"] = 100 * (ood - pooled["o"][1])
                row["standard error (points)"] = 100 * math.sqrt(var + pooled["o"][2])
                row["differs from o"] = abs(row["OOD vs o (points)"]) > 2 * row["standard error (points)"]
        rows.append(row)
    columns = ["format", "trained", "in distribution (%)", "OOD (%)", "learned", "OOD vs o (points)"]
    return (
        pd.DataFrame(rows).reindex(columns=columns + ["standard error (points)", "differs from o"]).set_index("format")
    )


def scratchpad_claims(chosen, pairs, task_effect, formats, encodings: Sequence[str] = PAPER_ENCODINGS):
    """The paper's three scratchpad claims, each judged from the tables above it ("holds here",
    "does not hold here", "not testable here for ...", "not distinguishable here", or "not trained
    yet"), with the numbers that decide it. `chosen`: `chosen_pair_table` (the first claim is
    judged on the paper's five encodings by `claim_every_encoding`, each arm at the setting
    validation picks); `pairs`: `rate_pair_table` rows of one learning rate or more;
    `task_effect`: `scratchpad_task_effect`; `formats`: `scratchpad_format_table`, whose one-seed
    differences are set against how far the learned step-output runs' seeds of one encoding lie
    apart at one rate (`pairs`)."""
    rows = []
    # 1. Addition, every encoding: pairs where both arms learned, judged from their seeds.
    trained = chosen[(chosen["status"] != "not trained yet") & chosen["encoding"].isin(encodings)]
    if trained.empty:
        here, why = "not trained yet", "no pair trained"
    else:
        here, why = claim_every_encoding(chosen, encodings)
        why = "each arm at the setting validation picks: " + why
    rows.append({"claim": "a scratchpad helps addition, for every encoding", "here": here, "numbers": why})
    # 2. Not on the other tasks: only runs learned with and without the scratchpad are ranked.
    ranked = task_effect[task_effect["verdict"].isin(["helps", "no measurable gain", "hurts"])]
    helped = ranked[ranked["verdict"] == "helps"]
    trained = task_effect[task_effect["verdict"] != "not trained yet"]
    if ranked.empty:
        here = "not trained yet" if trained.empty else "not distinguishable here"
    else:
        here = "does not hold here" if len(helped) else "holds here"
    name = lambda r: f"{r['task']} {r['format']} {encoding_title(r['encoding'])}"  # noqa: E731
    why = f"{len(trained)} of {len(task_effect)} runs trained, {len(ranked)} learned with and without it (at least 90%)"
    why += f"; helps: {', '.join(name(r) for _, r in helped.iterrows())}" if len(helped) else "; helps none"
    if ranked["seed"].nunique() == 1 and here in ("holds here", "does not hold here"):
        here += " (one seed: a hypothesis)"
    rows.append({"claim": "not on the other tasks (seed 0)", "here": here, "numbers": why})
    # 3. The format matters: one seed per format, set against the spread of seeds of one format.
    added = formats.drop(index=["none", "o"])
    compared = added[added["OOD vs o (points)"].notna()]
    learned = pairs[pairs["status"].isin(["compared", "control not learned"])]
    by = learned.groupby(["learning rate", "encoding"])
    spreads = by["OOD with (%)"].agg(lambda v: v.max() - v.min())[by.size() > 1]
    if compared.empty:
        here = "not trained yet"
    elif spreads.empty:
        here = "not distinguishable here"
    else:
        here = (
            "holds here" if (compared["OOD vs o (points)"].abs() > spreads.max()).any() else "not distinguishable here"
        )
    why = "; ".join(f"{f}: {r['OOD vs o (points)']:+.1f} points against o (one seed)" for f, r in compared.iterrows())
    why = why or f"{len(added)} formats planned, none trained"
    if here == "holds here":
        here += " (one seed a format: a hypothesis)"
    if len(spreads):
        apart = ", ".join(f"{encoding_title(e)} {v:.1f} at {lr:g}" for (lr, e), v in spreads.items())
        why += f"; o's learned seeds of one encoding at one rate lie apart by (points): {apart}"
    rows.append({"claim": "its format matters (NoPE, seed 0)", "here": here, "numbers": why})
    return pd.DataFrame(rows).set_index("claim")


def rate_pair_table(
    rates: Sequence[float] | None = None,
    results_dir: str | Path = SCRATCHPAD_DIR,
    control_dir: str | Path = RESULTS_DIR,
    learned_bar: float = 0.9,
):
    """One row per pair of experiment 1 at each rate, trained or not: learning rate, the
    `_effect_row` columns (in distribution and out of it, with and without the step outputs) and
    the pair's status (`pair_status`, or "not trained yet")."""
    rows = []
    for lr in rates or scratchpad_rates():
        for cfg, control, rec, ctl in rate_pairs(lr, results_dir, control_dir):
            head = {"learning rate": lr}
            if rec is None or ctl is None:
                rows.append(head | {"encoding": cfg.encoding, "seed": cfg.seed, "status": "not trained yet"})
                continue
            row = head | _effect_row(cfg, control, rec, ctl, learned_bar)
            rows.append(row | {"status": pair_status(row)})
    columns = ["learning rate", *EFFECT_COLUMNS[:-2], "status"]
    return pd.DataFrame(rows).reindex(columns=columns)


def claim_every_encoding(
    pairs,
    encodings: Sequence[str] = PAPER_ENCODINGS,
    alpha: float = SCRATCHPAD_ALPHA,
    min_pairs: int = SCRATCHPAD_MIN_PAIRS,
):
    """The paper's claim that the step outputs help addition for every encoding, judged on the
    compared pairs of `encodings` (rows of one setting per pair: `rate_pair_table` at one rate, or
    `chosen_pair_table`), with the exact two-sided sign-flip test over every compared pair:
    "does not hold here" where an encoding's `min_pairs` or more compared pairs are all at or
    below 0, or the test gives p at most `alpha` with the differences' sum below 0; else "not
    testable here for ..." naming the encodings with fewer than `min_pairs` compared pairs; else
    "holds here" where every encoding's compared differences are all above 0 and the test gives p
    at most `alpha`; else "not distinguishable here". Returns (verdict, numbers)."""
    compared = pairs[(pairs["status"] == "compared") & pairs["encoding"].isin(encodings)]
    d = compared["OOD difference (points)"].to_numpy()
    per = {e: compared.loc[compared["encoding"] == e, "OOD difference (points)"] for e in encodings}
    short = [encoding_title(e) for e, v in per.items() if len(v) < min_pairs]
    if not len(d):
        return f"not testable here for {', '.join(short)}", "no pair compared"
    p = sign_flip_p(d, two_sided=True)
    against = [encoding_title(e) for e, v in per.items() if len(v) >= min_pairs and (v <= 0).all()]
    numbers = f"{len(d)} pairs compared, {int((d > 0).sum())} above 0; sign-flip p {p:.3f} (two-sided)"
    numbers += f"; all at or below 0: {', '.join(against)}" if against else ""
    numbers += f"; fewer than {min_pairs} pairs compared: {', '.join(short)}" if short else ""
    if against or (p <= alpha and d.sum() < 0):
        return "does not hold here", numbers
    if short:
        return f"not testable here for {', '.join(short)}", numbers
    if all((v > 0).all() for v in per.values()) and p <= alpha:
        return "holds here", numbers
    return "not distinguishable here", numbers


def chosen_pair_table(
    encodings: Sequence[str] = PAPER_ENCODINGS,
    seeds: Sequence[int] = range(3),
    learned_bar: float = 0.9,
    **validation: Any,
):
    """One row per pair of experiment 1 (seed-major), each arm at the setting validation picks
    (`chosen_setting`): encoding, seed, each arm's setting, the `_effect_row` columns of the two
    chosen runs (scored on the test draw) and the pair's status (`pair_status`, or "not trained
    yet" where an arm has no setting trained)."""
    rows = []
    for seed in seeds:
        for enc in encodings:
            step, alone = (chosen_setting(arm, enc, seed, **validation) for arm in ("o", "none"))
            head = {"encoding": enc, "seed": seed, "setting with": step["setting"], "setting without": alone["setting"]}
            if step["run"] is None or alone["run"] is None:
                rows.append(head | {"status": "not trained yet"})
                continue
            row = _effect_row(step["run"], alone["run"], step["record"], alone["record"], learned_bar)
            rows.append(head | row | {"status": pair_status(row)})
    columns = ["encoding", "seed", "setting with", "setting without", *EFFECT_COLUMNS[2:-2], "status"]
    return pd.DataFrame(rows).reindex(columns=columns)


def arm_choice_table(encodings: Sequence[str] = PAPER_ENCODINGS, seeds: Sequence[int] = range(3), **validation: Any):
    """Per arm of experiment 1, its validation exact match (%) under every setting tried
    (`arm_settings`; blank where not trained) and the setting it takes (`chosen_setting`)."""
    rows = []
    for seed in seeds:
        for enc in encodings:
            for arm in ("o", "none"):
                chosen = chosen_setting(arm, enc, seed, **validation)
                row = {"arm": EXPERIMENT_1_ARMS[arm], "encoding": encoding_title(enc)}
                row |= {"seed": seed} | {
                    name: chosen["scores"].get(name, float("nan")) for name in arm_settings(arm, enc, seed)
                }
                rows.append(row | {"chosen": chosen["setting"]})
    return pd.DataFrame(rows).set_index(["arm", "encoding", "seed"])


def stalled_arms(chosen, window: int = 2000, falling: float = STILL_FALLING, learned_bar: float = 0.9):
    """For each pair of `chosen` (`chosen_pair_table`) not compared, each arm under `learned_bar` in
    distribution at its chosen setting, under every setting trained for it: its exact match in
    distribution (%, the test draw, pooled), its loss per target token `window` steps before the
    end of training and at the end, and whether it is still falling there (down by more than the
    fraction `falling`)."""
    rows = []
    missed = chosen[~chosen["status"].isin(["compared", "not trained yet"])]
    for _, pair in missed.iterrows():
        for arm, column in (("o", "in distribution with (%)"), ("none", "in distribution without (%)")):
            if pair[column] >= 100 * learned_bar:
                continue
            for name, (cfg, folder) in arm_settings(arm, pair["encoding"], pair["seed"]).items():
                path = record_path(folder, cfg)
                if not path.exists():
                    continue
                rec = read_record(path)
                before, end = loss_at(rec, cfg.steps - window), loss_at(rec, cfg.steps)
                row = {"encoding": encoding_title(pair["encoding"]), "seed": pair["seed"]}
                row |= {"arm": EXPERIMENT_1_ARMS[arm], "setting": name}
                row |= {"in distribution (%)": 100 * _pooled_split(cfg, rec, cfg.eval_per_length)[0]}
                row |= {f"loss {window:,} steps before the end": before, "loss at the end": end}
                rows.append(row | {"still falling": still_falling(before, end, falling)})
    columns = ["encoding", "seed", "arm", "setting", "in distribution (%)"]
    columns += [f"loss {window:,} steps before the end", "loss at the end", "still falling"]
    return pd.DataFrame(rows, columns=columns)


def arm_settings_table(arms: Sequence[tuple[str, str, int]], exit_level: float = 0.05):
    """Per arm of experiment 1 (`arms`: (components, encoding, seed), "o" or "none"), its
    in-distribution exact match (%, pooled as the paper pools its test examples) under every
    setting tried (`arm_settings`; blank where not trained), and on the pre-norm model at 10,000
    steps the first step at which its training loss falls below `exit_level` per target token
    (blank where it never does) and its loss at the end."""
    rows = []
    for components, encoding, seed in arms:
        row: dict[str, Any] = {"arm": EXPERIMENT_1_ARMS[components]}
        row |= {"encoding": encoding_title(encoding), "seed": seed}
        for name, (cfg, folder) in arm_settings(components, encoding, seed).items():
            path = record_path(folder, cfg)
            rec = read_record(path) if path.exists() else None
            row[f"{name} (%)"] = 100 * _pooled_split(cfg, rec, cfg.eval_per_length)[0] if rec else float("nan")
            if name == f"pre-norm, lr {scratchpad_rates()[0]:g}":
                curve = rec["loss_curve"] if rec else {"every": 1, "mean_loss": []}
                below = [(i + 1) * curve["every"] for i, v in enumerate(curve["mean_loss"]) if v < exit_level]
                row["pre-norm: loss under 0.05 from step"] = below[0] if below else float("nan")
                row["pre-norm: final loss"] = curve["mean_loss"][-1] if curve["mean_loss"] else float("nan")
        rows.append(row)
    table = pd.DataFrame(rows).set_index(["arm", "encoding", "seed"])
    return table.astype({"pre-norm: loss under 0.05 from step": "Int64"})


def plot_rate_curves(curves, path: Path | None = None):
    """Experiment 1's training losses (`rate_loss_curves`): one panel per arm, one line per
    learning rate, the median over the runs trained (their number in the legend) and a band from
    the lowest to the highest run, on a log axis."""
    arms = ["answer alone", "step outputs"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    for ax, arm in zip(axes, arms):
        for i, (lr, g) in enumerate(curves[curves["arm"] == arm].groupby("learning rate", sort=True)):
            wide = g.pivot_table(index="step", columns=["encoding", "seed"], values="loss")
            color = ordinal_color(i)
            ax.plot(wide.index, wide.median(axis=1), color=color, lw=2, label=f"lr {lr:g} ({wide.shape[1]} runs)")
            ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=color, alpha=0.15, lw=0)
        ax.set_yscale("log")
        ax.set(title=f"{arm}: training loss", xlabel="training step", ylabel="loss per target token (log)")
        ax.legend(title="median; band: lowest to highest run", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def final_carry_split(cfg: RunConfig, folder: str | Path, sizes: Iterable[int] | None = None):
    """Where an addition run that writes the answer alone misses: its saved model's exact match on
    the test draw at each of `sizes` (None: its training sizes), apart for the sums whose answer
    has a digit more than their longer operand (a final carry out) and the others. One row per
    (kind of sum, size): how many sums of the draw it holds and the share right (%)."""
    if cfg.task != "addition" or cfg.task_options.get("scratchpad", "none") != "none":
        raise ValueError(f"final_carry_split reads addition's answer alone; got {cfg.name}")
    model, task = load_run_model(cfg, folder), cfg.make_task()
    rows = []
    with evaluating(model):
        for n in task.sizes(cfg.train_min_len, cfg.train_max_len) if sizes is None else sizes:
            batch = evaluation_batch(task, n, cfg.eval_per_length, cfg.eval_seed, model.config)
            right = exact_match_rows(model, batch).tolist()
            carry = []
            for row in batch.tokens.tolist():
                sep, end = row.index(SEP), row.index(EOS)
                prompt = task.decode(row[1:sep])
                longer = max(prompt.index("+"), len(prompt) - prompt.index("+") - 1)
                carry.append(end - sep - 1 > longer)
            for kind, flag in (("final carry out", True), ("no final carry out", False)):
                got = [r for r, c in zip(right, carry) if c == flag]
                rows.append({"sums": kind, "n": n, "count": len(got)})
                rows[-1]["exact match (%)"] = 100 * float(np.mean(got)) if got else float("nan")
    return pd.DataFrame(rows)


def plot_chosen_pairs(chosen, path: Path | None = None):
    """Experiment 1 with each arm at its chosen setting (`chosen_pair_table`): per encoding, each
    seed's out-of-distribution difference (points, the step outputs minus the answer alone) with
    two standard errors of test sampling; compared pairs filled, pairs with an arm not learned
    hollow (their difference says nothing about extrapolation)."""
    encodings = list(dict.fromkeys(chosen["encoding"]))
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.axhline(0, color="grey", lw=0.8)
    for x, enc in enumerate(encodings):
        g = chosen[(chosen["encoding"] == enc) & (chosen["status"] != "not trained yet")]
        for _, r in g.iterrows():
            compared = r["status"] == "compared"
            xs, y = x + 0.12 * (r["seed"] - 1), r["OOD difference (points)"]
            ax.errorbar(xs, y, yerr=2 * r["standard error (points)"], color=encoding_color(enc), capsize=2, lw=1)
            face = encoding_color(enc) if compared else "white"
            ax.plot(xs, y, "o", ms=7, mfc=face, mec=encoding_color(enc), zorder=3)
    ax.plot([], [], "o", color="black", label="both arms learned (compared)")
    ax.plot([], [], "o", mfc="white", mec="black", label="an arm not learned")
    ax.set_xticks(range(len(encodings)), [encoding_title(e) for e in encodings])
    ax.set(xlabel="encoding (seeds 0, 1, 2 left to right)", ylabel="OOD exact match, with minus without (points)")
    ax.set_title("Step outputs against the answer alone, each arm at its chosen setting")
    ax.legend(fontsize=9, loc="best")
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def plot_scratchpad_lengths(curves, paper_nope: float | None = None, path: Path | None = None, train_max: int = 8):
    """Exact match against digits, one panel per encoding: with the step outputs (solid) and
    without (dashed), each the mean of the seeds trained (their number in the legend below);
    `paper_nope`, the paper's NoPE without a scratchpad, as one mark at its mean over the test
    sizes with a bar over the sizes it averages, in NoPE's panel."""
    encodings = [e for e in encoding_names() if e in set(curves["encoding"])]
    cols = min(3, len(encodings))
    rows = math.ceil(len(encodings) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows + 0.9), sharey=True, squeeze=False)
    top = int(curves["n"].max())
    seeds: dict[str, int] = {}
    for ax, enc in zip(axes.flat, encodings):
        for name, style in (("o", "-"), ("none", "--")):
            g = curves[(curves["encoding"] == enc) & (curves["scratchpad"] == name)]
            if len(g):
                seeds[name] = max(seeds.get(name, 0), g["seed"].nunique())
                m = g.groupby("n")["exact_match"].mean()
                ax.plot(m.index, 100 * m, style, color=encoding_color(enc), lw=1.8)
        if enc == "nope" and paper_nope is not None:
            middle, half = (train_max + 1 + 2 * train_max) / 2, (train_max - 1) / 2
            ax.errorbar(middle, 100 * paper_nope, xerr=half, fmt="D", color="black", ms=5, capsize=3)
        ax.axvline(train_max, color="gray", ls=":", lw=1, label=f"longest training size ({train_max} digits)")
        ax.set(title=encoding_title(enc), ylim=(-3, 105), xticks=range(2, top + 1, 2))
    for ax in axes.flat[len(encodings) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("exact match (%)")
    for ax in axes[-1]:
        ax.set_xlabel("digits (the longer operand)")
    n = " / ".join(str(v) for v in dict.fromkeys(seeds.values()))
    handles = [
        Line2D([], [], color="black", lw=1.8, label="with the step outputs"),
        Line2D([], [], color="black", lw=1.8, ls="--", label="the answer alone"),
    ]
    if paper_nope is not None and "nope" in encodings:
        handles.append(
            Line2D(
                [],
                [],
                color="black",
                marker="D",
                ls="",
                label=f"the paper's NoPE, answer alone: its mean over {train_max + 1}-{2 * train_max}",
            )
        )
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9)
    fig.suptitle(f"Addition with and without the step outputs: exact match against size (mean of {n} seeds)")
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight(), 1, 1))
    save_figure(fig, path)
    return fig


def other_scoring_verdicts(
    scoring, scoring_exp1, results_dir: str | Path = SCRATCHPAD_DIR, control_dir: str | Path = RESULTS_DIR
):
    """Experiments 2 and 3's verdicts under three readings of the generations (`OTHER_READINGS`):
    the records' (ours: up to one token past the longest target), ours with the room
    `scoring_comparison` gives (twice that), and the paper's parser on those same generations.
    The same functions (`scratchpad_task_effect`, `scratchpad_format_table`) judge copies of the
    records whose exact match is each reading's (`other_scoring_table`; experiment 3's reference,
    the step outputs alone, from experiment 1's `scoring_table`); the controls are read as
    recorded. One row per trained run; a run a reading makes unranked (not learned) differs.
    "parser differs" compares the two readings of the same generations, "differs from the
    records" the paper's reading with ours as recorded."""
    results_dir = Path(results_dir)
    reference = scratchpad_run("addition", "o")
    tasks, formats = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (reading, column) in enumerate(OTHER_READINGS.items()):
            folder = results_dir if column is None else Path(tmp) / str(i)
            if column is not None:
                cfgs = [*scratchpad_tasks(), *scratchpad_components()]
                _records_read_as(scoring, column, cfgs, results_dir, folder, lambda c: c.make_task().key)
                _records_read_as(scoring_exp1, column, [reference], results_dir, folder, lambda c: c.task)
            tasks[reading] = scratchpad_task_effect(folder, control_dir).set_index(
                ["task", "format", "encoding", "seed"]
            )
            formats[reading] = scratchpad_format_table(folder, control_dir)
    recorded = next(iter(OTHER_READINGS))
    rows = []
    for (t, f, e, s), v in tasks[recorded]["verdict"].items():
        if v != "not trained yet":
            row = {"experiment": 2, "run": f"{t} {f} {encoding_title(e)} s{s}"}
            rows.append(row | {r: tasks[r].loc[(t, f, e, s), "verdict"] for r in OTHER_READINGS})
    for f in SCRATCHPAD_COMPONENTS:
        if formats[recorded].loc[f, "trained"]:
            words = {r: "differs from o" if t.loc[f, "differs from o"] else "same as o" for r, t in formats.items()}
            rows.append({"experiment": 3, "run": f"addition {f} NoPE s0"} | words)
    table = pd.DataFrame(rows)
    ours, room, paper = (table[r] for r in OTHER_READINGS)
    return table.assign(**{"parser differs": room != paper, "differs from the records": ours != paper})


def scoring_verdicts(
    scoring, results_dir: str | Path = SCRATCHPAD_DIR, control_dir: str | Path = RESULTS_DIR, train_max: int = 8
):
    """Per run in `scoring` (`scoring_table`): its out-of-distribution exact match (%) by our
    scoring and by the paper's parser, pooled as in `scratchpad_effect`, and the verdict "helps" by
    each against the control (the same rule: more than two standard errors above it), and whether
    the two verdicts differ."""
    rows = []
    for cfg, _, _, ctl in scratchpad_pairs(results_dir, control_dir):
        mine = scoring[(scoring["encoding"] == cfg.encoding) & (scoring["seed"] == cfg.seed)]
        if ctl is None or not len(mine):
            continue
        sizes = sorted(int(n) for n in mine["n"] if n > train_max)
        weights, per = cfg.make_task().size_weights(sizes), cfg.eval_per_length
        q, q_var = _pooled(ctl["exact_match"], sizes, weights, per)
        row: dict[str, Any] = {"encoding": encoding_title(cfg.encoding), "seed": cfg.seed}
        verdicts = []
        for name in ("ours", "paper's parser"):
            p, p_var = _pooled(dict(zip(mine["n"].astype(str), mine[name])), sizes, weights, per)
            row[f"OOD, {name} (%)"] = 100 * p
            verdicts.append(bool(p - q > 2 * math.sqrt(p_var + q_var)))
        row |= {"helps, ours": verdicts[0], "helps, paper's parser": verdicts[1]}
        rows.append(row | {"verdict differs": verdicts[0] != verdicts[1]})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# 18. Addition that generalizes: digit places as positions (notebook 11)
# ---------------------------------------------------------------------------------------------
# Position coupling (Cho et al. 2024) and Abacus embeddings (McLeish et al. 2024) give every digit
# the position of its place in its number, so that the two operand digits of a column and the
# answer digit they make share one position at any length. Here a model with digit_places=P reads,
# for each token, its place from the task's layout (`PLACE_LAYOUTS`): operand digits their
# significance (1 = units), each query of the answer the place of the digit it predicts (as in
# notebook 09's coupling, the query that predicts a digit sits where that digit's operands sit),
# the other tokens 0; then one random offset per sequence, drawn so that every position stays below
# P. Training at 8 digits thus visits every position a 64-digit test reads. With the learned
# encoding this is an Abacus embedding on a model with no other position signal; with RoPE, ALiBi
# or T5 the relative distances between a column's digits are 0 and 1 at every length. The layout
# depends on the size of the prompt and on the decoding step only, never on the answer.
@dataclass
class DigitPlaceSettings:
    """The model settings of this chapter (`ModelOptions`): digit places, the window over them, the
    marker, and the ALiBi and T5 variants for positions that do not only count up."""

    digit_places: int = ranged(0, 0)  # P > 0: positions are digit places, offset at random below P
    attention_window: int = ranged(0, 0)  # W > 0: a query sees only keys within W positions of its own
    top_marker: bool = False  # with digit_places: + at the place above the operands' top digit, not 0
    alibi_symmetric: bool = False  # ALiBi's penalty on |q - k|: a key at a later place as far as one before
    t5_bidirectional: bool = False  # T5 buckets keys at later positions apart (its encoder's way), not as distance 0


class SymmetricALiBi(ALiBi):
    """ALiBi whose penalty grows with |q - k|: with digit places a key may sit at a later position
    than its query, and is then as far as a key that many places before."""

    def distance(self, distance: Tensor) -> Tensor:
        return distance.abs()


class BidirectionalT5Bias(T5Bias):
    """T5's encoder buckets: half the buckets for keys at later positions (digit places), a
    quarter of all of them exact on each side."""

    exact_share = 4

    def buckets(self, distance: Tensor) -> Tensor:
        n, top = self.cfg.t5_num_buckets, self.cfg.t5_max_distance
        return torch.where(distance < 0, n // 2, 0) + t5_bucket(distance.abs(), n // 2, top)


def window_mask(positions: Tensor, window: int) -> Tensor:
    """(B, 1, T, T) or (T, T) boolean: True where the key's position is within `window` of the
    query's, on either side (with digit places: keys within `window` places of the query's column)."""
    near = (positions[..., :, None] - positions[..., None, :]).abs() <= window
    return near[:, None] if positions.dim() == 2 else near


def _check_digit_places(config: ModelConfig) -> None:
    if config.option("t5_bidirectional") and config.encoding != "t5":
        raise ValueError(f"t5_bidirectional changes T5's buckets; the encoding is {config.encoding!r}")
    if config.option("alibi_symmetric") and config.encoding != "alibi":
        raise ValueError(f"alibi_symmetric changes ALiBi's bias; the encoding is {config.encoding!r}")
    if config.option("digit_places") and (config.option("random_positions") or config.option("position_coupling")):
        raise ValueError("digit_places replaces every position: use it without random_positions and position_coupling")
    if config.option("top_marker") and not config.option("digit_places"):
        raise ValueError("top_marker places the + of a digit-places layout; set digit_places too")
    if config.encoding == "learned" and config.option("digit_places") > config.max_positions:
        raise ValueError(
            f"digit_places={config.option('digit_places')} draws positions past the learned table's "
            f"max_positions={config.max_positions}; set max_positions >= digit_places"
        )


def _digit_place_encoding(config: ModelConfig) -> type[PositionalEncoding] | None:
    if config.option("alibi_symmetric"):
        return SymmetricALiBi
    return BidirectionalT5Bias if config.option("t5_bidirectional") else None


def _window(config: ModelConfig) -> Callable[[Tensor], Tensor] | None:
    return (
        functools.partial(window_mask, window=config.option("attention_window"))
        if config.option("attention_window")
        else None
    )


register_model_options(
    ModelOptions(DigitPlaceSettings, check=_check_digit_places, encoding=_digit_place_encoding, attention_mask=_window)
)


@dataclass(frozen=True)
class PositionInit:
    position_init_std: float = ranged(0.02, 0, above=True)  # a trained position table's initial spread


def _check_position_init(config: ModelConfig) -> None:
    if config.option("position_init_std") != 0.02 and config.encoding not in ("learned", "t5"):
        raise ValueError(
            f"position_init_std sets a trained position table's initial spread (learned, t5); "
            f"the encoding is {config.encoding!r}"
        )


def _init_positions(model: nn.Module) -> None:
    if model.config.option("position_init_std") != 0.02:  # learned rows or T5 biases, drawn again at another spread
        nn.init.normal_(model.pos.table.weight, std=model.config.option("position_init_std"))


register_model_options(ModelOptions(PositionInit, check=_check_position_init, build=_init_positions))

PLACE_LAYOUTS: dict[str, Callable[[Task, int, ModelConfig | None], list[int]]] = {}


def addition_places(task: Task, n: int, config: ModelConfig | None = None) -> list[int]:
    """The places of [BOS, a (n digits), +, b (n digits), SEP, answer (n + 1 digits), EOS] at size n:
    operand digits by significance, written most significant first; the queries SEP, y_1, ..
    each the significance of the digit they predict (least significant first if answer="lsd"),
    the query predicting EOS one past the answer's top place; BOS and EOS at 0 and n + 3, and +
    at 0, or with the option `top_marker` at n + 1, the place above the operands' top digit."""
    if task.format["format"] != "equal":
        raise ValueError("digit places need both operands written with n digits (addition format 'equal')")
    operand = list(range(n, 0, -1))
    answer = list(range(1, n + 2)) if task.format["answer"] == "lsd" else list(range(n + 1, 0, -1))
    plus = n + 1 if config is not None and config.option("top_marker") else 0
    return [0, *operand, plus, *operand, *answer, n + 2, n + 3]


PLACE_LAYOUTS["addition"] = addition_places


def place_layout(task: Task, n: int, config: ModelConfig | None = None) -> list[int]:
    """Each token's place at size n (one per token of [BOS, prompt, SEP, answer, EOS]) for a
    model of `config` (the layout's own options, such as `top_marker`; off if None)."""
    if task.name not in PLACE_LAYOUTS or isinstance(task, WithScratchpad):
        raise ValueError(f"task {task.key!r} has no digit places; tasks with them: {', '.join(sorted(PLACE_LAYOUTS))}")
    layout = PLACE_LAYOUTS[task.name](task, n, config)
    if len(layout) != task.sequence_length(n):
        raise RuntimeError(f"{task.key}: a layout of {len(layout)} places for {task.sequence_length(n)} tokens")
    return layout


def place_room(task: Task, n: int, n_positions: int, places: list[int] | None = None) -> int:
    """How many offsets size n can take below `n_positions` (at least 1, else a ValueError);
    `places`: size n's layout, if the caller has it already."""
    top = max(place_layout(task, n) if places is None else places)
    if n_positions - top < 1:
        raise ValueError(
            f"digit_places={n_positions} is too small for {task.key} at size {n}: its places reach "
            f"{top}; set digit_places > {top}"
        )
    return n_positions - top


def place_positions(
    batch: Batch, offsets: Tensor, task: Task, config: ModelConfig, generator: torch.Generator
) -> Batch:
    """Every token at its place (`place_layout`) plus one offset per sequence, uniform over those
    that keep its places below the option `digit_places`. `offsets` are each token's index in its sequence."""
    n_positions = config.option("digit_places")
    seg, positions = batch.segments, batch.positions.clone()
    seq, lengths = _sequence_index(seg)
    draw = torch.rand(len(lengths), generator=generator)  # one per sequence
    length = lengths[seq]
    size_of = {}  # sequence length -> size, for every size the batch's rows can hold
    for n in task.sizes(task.min_size, task.max_size or seg.shape[1]):
        if task.sequence_length(n) > seg.shape[1]:
            break
        size_of[task.sequence_length(n)] = n
    for m in lengths.unique().tolist():  # only the lengths present: a batch of one size is one pass
        if m in size_of:
            mask = (seg >= 0) & (length == m)
            places = place_layout(task, size_of[m], config)
            shift = (draw[seq[mask]] * place_room(task, size_of[m], n_positions, places)).long()
            positions[mask] = torch.tensor(places)[offsets[mask]] + shift
    return Batch(batch.tokens, positions, batch.segments, batch.loss_mask)


def _check_place_room(config: ModelConfig, task: Task, n: int) -> None:
    place_room(task, n, config.option("digit_places"), place_layout(task, n, config))


register_position_scheme(
    PositionScheme(
        "digit places",
        active=lambda config: bool(config.option("digit_places")),
        apply=lambda config, batch, offsets, task, generator: place_positions(batch, offsets, task, config, generator),
        check_room=_check_place_room,
    )
)


# The ingredients, combined into arms (each a set of overrides of the addition run): the answer
# least significant digit first ("lsd"; the operands are always written with n digits each, zero
# padded: the "equal" format), and digit places as positions. Trained on 1-8 digits, tested on
# every size to 64.
ADDITION_PLACES = 100  # P: above the 67 places a 64-digit sum reaches, so every test position is trained
ADDITION_ARMS: dict[str, dict[str, Any]] = {
    "msd": {},
    "lsd": {"task_options": {"answer": "lsd"}},
    "msd+places": {"digit_places": ADDITION_PLACES},
    "lsd+places": {"task_options": {"answer": "lsd"}, "digit_places": ADDITION_PLACES},
    "msd+places+window": {"digit_places": ADDITION_PLACES, "attention_window": 2},
    "lsd+window": {"task_options": {"answer": "lsd"}, "attention_window": 2},
    "lsd+places+window": {"task_options": {"answer": "lsd"}, "digit_places": ADDITION_PLACES, "attention_window": 2},
}


def addition_run(arm: str, encoding: str, seed: int = 0, **overrides: Any) -> RunConfig:
    """An addition run of `arm` (`ADDITION_ARMS`): trained on 1-8 digits, scored on 1-64."""
    if arm not in ADDITION_ARMS:
        raise _unknown("addition arm", arm, ADDITION_ARMS)
    settings = {"train_max_len": 8, "eval_max_len": 64, **ADDITION_ARMS[arm], **overrides}
    if encoding == "learned" and settings.get("digit_places"):
        settings.setdefault("max_positions", settings["digit_places"])
    return make_run("addition", encoding, seed, **settings)


def addition_pilot() -> list[RunConfig]:
    """The pilot, in the order tried: the study's model and steps, seed 0."""
    tried = [("lsd+places", "rope", {}), ("lsd+places", "learned", {}), ("lsd", "rope", {}), ("lsd", "nope", {})]
    tried += [("lsd+places", "alibi", {}), ("lsd+places", "t5", {})]  # RoPE's run fell past 9 digits: the others
    tried += [("lsd+places", "learned", {"steps": 10_000})]  # the learned table was still on a plateau at 5,000
    tried += [("lsd+places", "sinusoidal", {})]
    tried += [("lsd+places", "learned", {"d_model": 128, "d_ff": 512})]  # the learned table, wider
    tried += [("lsd+places", "alibi", {"alibi_symmetric": True})]  # ALiBi boosts keys at higher places: penalize |d|
    # direction-aware and bounded: every distance of 6 or more shares its side's last bucket, trained at 7-8 digits
    bidirectional = {"t5_bidirectional": True, "t5_num_buckets": 16, "t5_max_distance": 6}
    tried += [("lsd+places", "t5", bidirectional)]
    # the two untrained position signals, with gradients four times less noisy (Cho et al. use batch 1,000);
    # T5 at batch 256 was stopped early, its loss still on the plateau, once the higher rate below learned
    tried += [("lsd+places", "learned", {"batch_size": 256})]
    # the learned table starts at std 0.02 beside token embeddings at std 1: start it on their scale
    tried += [("lsd+places", "learned", {"position_init_std": 1.0})]  # worse: the loss never leaves its plateau
    # Adam moves a bias by at most lr per step: under cosine decay from 1e-3, about 2.5 logits in
    # 5,000 steps, too little to single out a place. Three times the rate lets T5's biases grow
    tried += [("lsd+places", "t5", {**bidirectional, "lr": 3e-3})]
    # it fails past the training sizes, more with length (notebook 11's pilot): with more far keys,
    # their share of attention grows. A window of 2 places (the column, the one below, and
    # the EOS query's view of the top digits) shows no query more keys at 64 digits than at 8
    tried += [("lsd+places+window", "rope", {}), ("lsd+places+window", "t5", {**bidirectional, "lr": 3e-3})]
    return [addition_run(arm, encoding, **kw) for arm, encoding, kw in tried]


# The configuration that met the goal in the pilot, on three seeds; then the ablation: each
# ingredient taken away or changed in turn (the window's width, the answer's order, the encoding),
# one seed each. Without places or without the window, the pilot's runs already stand.
ADDITION_BEST = ("lsd+places+window", "rope")
ADDITION_ABLATION: list[tuple[str, str, str, dict[str, Any]]] = [
    ("answer most significant digit first", "msd+places+window", "rope", {}),
    ("window of 1 place", "lsd+places+window", "rope", {"attention_window": 1}),
    ("window of 4 places", "lsd+places+window", "rope", {"attention_window": 4}),
    ("NoPE", "lsd+places+window", "nope", {}),
    ("learned (Abacus-style)", "lsd+places+window", "learned", {}),
    ("sinusoidal", "lsd+places+window", "sinusoidal", {}),
    ("ALiBi", "lsd+places+window", "alibi", {}),
    ("no places: the window over token positions", "lsd+window", "rope", {}),
    ("most significant first, without the window", "msd+places", "rope", {}),
]


def addition_study() -> list[RunConfig]:
    """The best configuration on seeds 0-2, then the ablation (`ADDITION_ABLATION`, seed 0)."""
    best = [addition_run(*ADDITION_BEST, seed=s) for s in range(3)]
    return best + [addition_run(arm, encoding, **kw) for _, arm, encoding, kw in ADDITION_ABLATION]


ADDITION_GOAL: dict[str, float] = {"in distribution": 0.99, "16 digits": 0.95, "32 digits": 0.90}  # every seed
ADDITION_DIR = RESULTS_DIR / "addition"


def addition_ingredients(cfg: RunConfig) -> str:
    """The ingredients of an addition run: answer order, places, window."""
    arm = cfg.task_options.get("answer", "msd")
    if cfg.model.option("digit_places"):
        arm += " + places"
    if cfg.model.option("attention_window"):
        arm += f" + window {cfg.model.option('attention_window')}"
    return arm


def addition_settings(cfg: RunConfig) -> str:
    """What else an addition run changes from the study's model and training ("" for nothing)."""
    base, model = RunConfig(), cfg.model  # the study's run: its model, steps, batch and rate
    out = [
        f"{name} {getattr(cfg, name):g}"
        for name in ("steps", "batch_size", "lr")
        if getattr(cfg, name) != getattr(base, name)
    ]
    out += [f"d_model {model.d_model}"] if model.d_model != base.model.d_model else []
    out += [f"{model.n_layers} layers"] if model.n_layers != base.model.n_layers else []
    out += (
        [f"table init std {model.option('position_init_std'):g}"] if model.option("position_init_std") != 0.02 else []
    )
    out += ["symmetric"] if model.option("alibi_symmetric") else []
    out += [f"P {model.option('digit_places')}"] if model.option("digit_places") not in (0, ADDITION_PLACES) else []
    out += ["+ above the top digit"] if model.option("top_marker") else []
    out += [f"trained with {k}={v}" for k, v in cfg.train_task_options.items()]
    if model.option("t5_bidirectional"):
        out += [f"bidirectional ({model.t5_num_buckets} buckets, far from {model.t5_max_distance})"]
    return ", ".join(out)


def longest_held(exact: dict[str, float], level: float = 0.9) -> int:
    """`longest_at_least` on a record's exact match (keyed by the size as a string)."""
    return longest_at_least({int(n): v for n, v in exact.items()}, level)


def addition_runs(results_dir: str | Path = ADDITION_DIR) -> list[tuple[str, RunConfig, dict[str, Any] | None]]:
    """(stage, config, record or None) for the pilot in the order tried, then the study's seeds
    and ablation, the structured sums' pilot, seeds and ablation, then the exactness tries, the
    exact configuration's seeds, the digit-set mixture's (`DIGIT_SETS`) and the same with a window
    of 1 place (`DIGIT_SETS_WINDOW_1`); a configuration in two stands once, where it was first trained."""
    seen, out = set(), []
    study = addition_study()
    stages = [("pilot", c) for c in addition_pilot()] + [("seeds", c) for c in study[:3]]
    stages += [("ablation", c) for c in study[3:]]
    structured, pilot, ablation = structured_study(), structured_pilot(), structured_steps_ablation()
    stages += [("structured pilot", c) for c in pilot]
    stages += [("structured seeds", c) for c in structured[len(pilot) : len(structured) - len(ablation)]]
    stages += [("structured ablation", c) for c in ablation]
    stages += [("exactness tries", c) for c in exactness_tries()]
    stages += [("exact seeds", exact_run(seed=s)) for s in range(3)]
    stages += [("digit-set seeds", exact_run(seed=s, **DIGIT_SETS)) for s in range(3)]
    stages += [("window-1 seeds", exact_run(seed=s, **DIGIT_SETS_WINDOW_1)) for s in range(3)]
    for stage, cfg in stages:
        if cfg.hash in seen:
            continue
        seen.add(cfg.hash)
        out.append((stage, cfg, record_of(results_dir, cfg)))
    return out


def addition_curves(results_dir: str | Path = ADDITION_DIR):
    """Long table: stage, arm, encoding, settings, seed, n (digits), exact match (0-1)."""
    rows = []
    for stage, cfg, rec in addition_runs(results_dir):
        if rec is None:
            continue
        head = {
            "stage": stage,
            "arm": addition_ingredients(cfg),
            "encoding": cfg.encoding,
            "settings": addition_settings(cfg),
        }
        rows += [{**head, "seed": cfg.seed, "n": int(n), "exact_match": v} for n, v in rec["exact_match"].items()]
    return pd.DataFrame(rows)


def cited_addition(path: Path | None = None):
    """Later work's addition results at their own scales (results/published/addition_cited.csv)."""
    return pd.read_csv(path or PUBLISHED_DIR / "addition_cited.csv", comment="#").set_index("study")


def answer_token_accuracy(model: DecoderOnlyLM, task: Task, n: int, count: int = 256, seed: int = 1234):
    """Teacher-forced accuracy (0-1) of each answer token at size n (the answer's digits in the
    order written, then EOS), on the evaluation sums: where in the answer a model goes wrong."""
    batch = evaluation_batch(task, n, count, seed, model.config)
    with evaluating(model):
        logits = model(batch.inputs, positions=batch.positions[:, :-1])
    right = logits.argmax(-1) == batch.targets
    columns = batch.loss_mask[0].nonzero().flatten()
    names = [f"digit {i}" for i in range(1, len(columns))] + ["EOS"]
    return pd.Series(right[:, columns].float().mean(0).numpy(), index=names)


def place_inputs(task: Task, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The T - 1 inputs of a digit-places task at size n: each one's place, and masks of the
    operand digits and of the answer (SEP, y_1 ..); then the answer queries (SEP, y_1 .. y_n: they
    predict the n + 1 digits), as indices into the inputs."""
    index = torch.arange(task.sequence_length(n) - 1)
    places = torch.tensor(place_layout(task, n))[index]
    operand = ((index >= 1) & (index <= n)) | ((index >= n + 2) & (index <= 2 * n + 1))
    return places, operand, index >= 2 * n + 2, torch.arange(2 * n + 2, 2 * n + 2 + n + 1)


def column_targets(task: Task, n: int) -> tuple[Tensor, dict[str, Tensor]]:
    """The answer queries of a digit-places task at size n (`place_inputs`) and, per target, a
    (queries, keys) mask over the T - 1 inputs: the two operand digits of the column each query
    predicts, the two of the column below (the carry's), the answer so far (its own token
    included), and everything else."""
    places, operand, answer, queries = place_inputs(task, n)
    place, keys = places[queries][:, None], places[None, :]
    masks = {
        "its column": operand & (keys == place),
        "the column below": operand & (keys == place - 1),
        "the answer so far": answer.expand(len(queries), -1),
    }
    masks["elsewhere"] = ~(masks["its column"] | masks["the column below"] | masks["the answer so far"])
    return queries, masks


def column_attention(model: DecoderOnlyLM, task: Task, n: int, count: int = 64, seed: int = 1234):
    """Where each answer query of a digit-places model looks at size n, per layer and head: the
    mean attention weight on each target of `column_targets`. Rows: layer, head, target, weight."""
    queries, masks = column_targets(task, n)
    batch = evaluation_batch(task, n, count, seed, model.config)
    with evaluating(model):
        _, internals = model(batch.inputs, positions=batch.positions[:, :-1], return_internals=True)
    rows = []
    for layer, weights in enumerate(internals.attentions):
        w = weights[:, :, queries].mean(0)  # (H, queries, keys)
        for head in range(w.shape[0]):
            for target, m in masks.items():
                weight = float((w[head] * m).sum(-1).mean())
                rows.append({"layer": layer, "head": head, "target": target, "weight": weight})
    return pd.DataFrame(rows)


def place_attention(
    model: DecoderOnlyLM, task: Task, n: int, column: int, seed: int = 1234, reach: int = 2
) -> pd.DataFrame:
    """Where the query that writes the answer digit of `column` (0: the units) attends, in one sum
    of n digits, per layer and head: the weight on the operand digits and on the answer digits at
    each place from `reach` below its column's to `reach` above, and on every other token.
    Rows: layer, head, kind ("operands", "answer", "other"), offset (key's place - the column's;
    None for "other"), weight (summing to 1 per layer and head)."""
    if not 0 <= column <= n:
        raise ValueError(f"column={column} is out of range; an {n}-digit sum has answer columns 0..{n}")
    places, operand, answer, queries = place_inputs(task, n)
    query = int(queries[column])  # the queries predict the columns from the units up
    batch = evaluation_batch(task, n, 1, seed, model.config)
    with evaluating(model):
        _, internals = model(batch.inputs, positions=batch.positions[:, :-1], return_internals=True)
    offset = places - places[query]
    rows = []
    for layer, weights in enumerate(internals.attentions):
        w = weights[0, :, query]  # (H, keys)
        for head in range(w.shape[0]):
            placed = torch.zeros(len(places), dtype=torch.bool)
            for kind, is_kind in (("operands", operand), ("answer", answer)):
                for d in range(-reach, reach + 1):
                    keys = is_kind & (offset == d)
                    placed |= keys
                    weight = float(w[head, keys].sum())
                    rows.append({"layer": layer, "head": head, "kind": kind, "offset": d, "weight": weight})
            rest = float(w[head, ~placed].sum())
            rows.append({"layer": layer, "head": head, "kind": "other", "offset": None, "weight": rest})
    return pd.DataFrame(rows)


# Sums a uniform sampler almost never draws: at n digits, 0 + 0 is one sum in 10^(2n). Each family
# draws the operands of its sums, (B, n) digits each, most significant first; `StructuredAddition`
# writes them as addition in a run's format, so they are scored as every sum is (greedy, from the
# prompt alone: `exact_match_by_length`), on prompts of their own (the family names its seed).
# Every equal-format addition run trained from here on records them (`families`: family -> size ->
# exact match, at `family_sizes`).


@dataclass(frozen=True)
class SumFamily:
    name: str
    says: str  # what every sum of the family is
    draw: Callable[[int, int, torch.Generator], tuple[Tensor, Tensor]]  # (n, count, generator) -> a, b


SUM_FAMILIES: dict[str, SumFamily] = {}


def register_sum_family(name: str, says: str):
    """Decorator: register `draw(n, count, generator) -> (a, b)` as the family `name`."""

    def add(draw: Callable[[int, int, torch.Generator], tuple[Tensor, Tensor]]):
        SUM_FAMILIES[name] = SumFamily(name, says, draw)
        return draw

    return add


def _uniform(low: Tensor | int, high: Tensor | int, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Integers uniform in [low, high] (inclusive; tensors broadcast)."""
    low, high = torch.as_tensor(low), torch.as_tensor(high)
    return low + (torch.rand(shape, generator=generator) * (high - low + 1)).long()


def _swap_half(a: Tensor, b: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Each row's operands swapped with probability 1/2 (which operand is the special one)."""
    swap = (torch.rand(len(a), generator=generator) < 0.5)[:, None]
    return torch.where(swap, b, a), torch.where(swap, a, b)


@register_sum_family("all zeros", "0..0 + 0..0")
def _all_zeros(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    return torch.zeros(count, n, dtype=torch.long), torch.zeros(count, n, dtype=torch.long)


@register_sum_family("all nines", "9..9 + 9..9")
def _all_nines(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    return torch.full((count, n), 9), torch.full((count, n), 9)


@register_sum_family("one digit repeated", "dd..d + ee..e, d and e uniform 0-9")
def _repeated(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    return _uniform(0, 9, (count, 1), g).expand(count, n), _uniform(0, 9, (count, 1), g).expand(count, n)


@register_sum_family("nines plus one", "9..9 + 0..01 (either order): one carry through every column")
def _nines_plus_one(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    one = torch.zeros(count, n, dtype=torch.long)
    one[:, -1] = 1
    return _swap_half(torch.full((count, n), 9), one, g)


@register_sum_family("one operand zero", "uniform digits + 0..0 (either order)")
def _one_zero(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    return _swap_half(_uniform(0, 9, (count, n), g), torch.zeros(count, n, dtype=torch.long), g)


def _short(n: int, count: int, g: torch.Generator) -> Tensor:
    """Numbers of at most max(1, n // 4) digits (uniform count), zero padded to n."""
    digits = _uniform(1, max(1, n // 4), (count, 1), g)
    return torch.where(torch.arange(n) >= n - digits, _uniform(0, 9, (count, n), g), 0)


@register_sum_family("much shorter operand", "n digits (the first 1-9) + at most n/4 digits, zero padded")
def _much_shorter(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    long = _uniform(0, 9, (count, n), g)
    long[:, 0] = _uniform(1, 9, (count,), g)
    return _swap_half(long, _short(n, count, g), g)


@register_sum_family("both short", "two numbers of at most n/4 digits, zero padded: the answer's top digits 0")
def _both_short(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    return _short(n, count, g), _short(n, count, g)


@register_sum_family("long carry", "every column sums to 9 but the units, which carry: 1 carried through all")
def _long_carry(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    a = _uniform(0, 9, (count, n), g)
    a[:, -1] = _uniform(1, 9, (count,), g)
    b = 9 - a
    b[:, -1] = _uniform(10 - a[:, -1], 9, (count,), g)
    return a, b


@register_sum_family("carry everywhere", "every column's two digits sum to 10 or more")
def _carry_everywhere(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    a = _uniform(1, 9, (count, n), g)
    return a, _uniform(10 - a, 9, (count, n), g)


@register_sum_family("no carry", "every column's two digits sum to 9 or less")
def _no_carry(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    a = _uniform(0, 9, (count, n), g)
    return a, _uniform(0, 9 - a, (count, n), g)


@register_sum_family("zeros and nines", "every digit of both operands 0 or 9: half the columns pass a carry on")
def _zeros_and_nines(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    return 9 * _uniform(0, 1, (count, n), g), 9 * _uniform(0, 1, (count, n), g)


def _digit_pair(count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Two distinct digits per row, (count, 1) each, low < high: each of the 45 pairs equally often."""
    low = _uniform(0, 8, (count, 1), g)
    return low, _uniform(low + 1, 9, (count, 1), g)


def _from_pair(pair: tuple[Tensor, Tensor], n: int, g: torch.Generator) -> Tensor:
    """(count, n) digits, each its row's low or high digit of `pair`, equally often."""
    low, high = pair
    return torch.where(_uniform(0, 1, (len(low), n), g).bool(), high, low)


@register_sum_family("two digits", "every digit of both operands one of two, a pair drawn per sum from the 45")
def _two_digits(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    pair = _digit_pair(count, g)
    return _from_pair(pair, n, g), _from_pair(pair, n, g)


@register_sum_family("one carry among zeros", "0..0d0..0 + 0..0e0..0, d + e >= 10 in one column")
def _carry_among_zeros(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    where = _uniform(0, n - 1, (count, 1), g) == torch.arange(n)
    d = _uniform(1, 9, (count, 1), g)
    e = _uniform(10 - d, 9, (count, 1), g)
    return torch.where(where, d, 0), torch.where(where, e, 0)


@register_sum_family("one carry into nines", "9..9 + 0..0d0..0, d >= 1: a carry from one column up through nines")
def _carry_into_nines(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    where = _uniform(0, n - 1, (count, 1), g) == torch.arange(n)
    return _swap_half(torch.full((count, n), 9), torch.where(where, _uniform(1, 9, (count, 1), g), 0), g)


@register_sum_family("skewed digits", "each digit one value drawn per sum with probability 0.8, else uniform")
def _skewed(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    def draw() -> Tensor:
        common = _uniform(0, 9, (count, 1), g)
        return torch.where(torch.rand((count, n), generator=g) < 0.8, common, _uniform(0, 9, (count, n), g))

    return draw(), draw()


@register_sum_family("equal operands", "a + a, uniform digits")
def _equal_operands(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    a = _uniform(0, 9, (count, n), g)
    return a, a.clone()


@register_sum_family("a pair per operand", "every digit of a one of two, of b one of two; each operand's pair its own")
def _pair_per_operand(n: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    a = _from_pair(_digit_pair(count, g), n, g)
    return a, _from_pair(_digit_pair(count, g), n, g)


class StructuredAddition(Addition):
    """Addition whose operands one family draws (`SUM_FAMILIES`), in the format "equal" (both
    operands written with n digits); its evaluation prompts are its own (`prompt_key`)."""

    def __init__(self, family: str, **options: str) -> None:
        super().__init__(**options)
        if self.format["format"] != "equal":
            raise ValueError("structured sums write both operands with n digits: addition format 'equal' only")
        if family not in SUM_FAMILIES:
            raise _unknown("sum family", family, SUM_FAMILIES)
        self.family = SUM_FAMILIES[family]

    @property
    def prompt_key(self) -> str:
        return f"{self.key}/{self.family.name}"

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.write(*self.family.draw(n, batch_size, generator))


FAMILY_DENSE_TO = 64  # families are scored at every size to here, then every 16th


def family_sizes(max_size: int) -> list[int]:
    """The sizes the families are scored at, up to `max_size`: every one to 64, then every 16th."""
    return [n for n in range(1, max_size + 1) if n <= FAMILY_DENSE_TO or n % 16 == 0]


def family_exact_match(
    model: DecoderOnlyLM,
    task: Task,
    sizes: Iterable[int],
    families: Iterable[str] | None = None,
    n_per_size: int = 256,
    seed: int = 1234,
) -> dict[str, dict[str, float]]:
    """Exact match (0-1) of each family (all registered if None) at each size: family -> size
    (a string, as in records) -> exact match, on the sums of `task`'s format."""
    if isinstance(task, WithScratchpad) or task.name != "addition":
        raise ValueError(f"structured sums are addition's, without a scratchpad; the task is {task.key!r}")
    out = {}
    for name in SUM_FAMILIES if families is None else families:
        family = StructuredAddition(name, **task.format)
        em = exact_match_by_length(model, family, sizes, n_per_size, seed)
        out[name] = {str(n): v for n, v in em.items()}
    return out


def _families_entry(config: RunConfig, model: DecoderOnlyLM) -> dict[str, dict[str, float]] | None:
    """A record's `families`: for equal-format addition without a scratchpad, else None."""
    task = config.make_task()
    if config.task != "addition" or isinstance(task, WithScratchpad) or task.format["format"] != "equal":
        return None
    sizes = family_sizes(config.eval_max_len)
    return family_exact_match(model, task, sizes, n_per_size=config.eval_per_length, seed=config.eval_seed)


register_record_entry("families", _families_entry)


def add_families(configs: Sequence[RunConfig], results_dir: str | Path = ADDITION_DIR) -> list[str]:
    """Score the families a run's record lacks (all of them for runs trained before records kept
    families; those registered since for the others), from its saved weights, and add them to its
    record; a family a record has is never scored again or changed. Returns the names of the runs
    scored."""
    scored = []
    for cfg in configs:
        path = record_path(Path(results_dir), cfg)
        rec = read_record(path)  # raises on a missing or corrupt record
        have = rec.get("families", {})
        missing = [f for f in SUM_FAMILIES if f not in have]
        if not missing:
            continue
        task = cfg.make_task()
        if cfg.task != "addition" or isinstance(task, WithScratchpad) or task.format["format"] != "equal":
            raise ValueError(f"{cfg.name}: structured sums are scored for equal-format addition runs only")
        model, sizes = load_run_model(cfg, results_dir), family_sizes(cfg.eval_max_len)
        new = family_exact_match(model, task, sizes, missing, cfg.eval_per_length, cfg.eval_seed)
        _atomic_json(path, rec | {"families": have | new})
        scored.append(cfg.name)
    return scored


def answer_query_states(
    model: DecoderOnlyLM, task: Task, n: int, family: str = "all zeros", count: int = 16, seed: int = 1234
):
    """Why a family fails, query by query: for each answer query at size n (SEP, y_1 .. y_n+1:
    they predict the n + 1 digits, then EOS) on the family's sums, what it predicts (and its
    target in the first sum), the share of sums whose teacher-forced argmax is right, how many
    distinct tokens the first layer shows it (keys of nonzero weight), and how close its
    last-layer state comes to the state of a query that must answer otherwise (another target):
    the smallest distance, relative to the norm of its own state, over those queries (NaN if
    there are none), the largest over the sums. Where every key two queries can reach is one
    token, attention averages equal values whatever its weights: their states coincide, and so
    do their outputs, so at 0 both cannot be right."""
    family_task = StructuredAddition(family, **task.format)
    batch = evaluation_batch(family_task, n, count, seed, model.config)
    with evaluating(model):
        logits, internals = model(batch.inputs, positions=batch.positions[:, :-1], return_internals=True)
    queries = torch.arange(2 * n + 2, 3 * n + 4)
    state = internals.hidden_states[-1][:, queries]  # (B, queries, d)
    gap = torch.cdist(state, state) / state.norm(dim=-1, keepdim=True)  # (B, q, q'), relative to q's norm
    targets = batch.targets[:, queries]
    other = targets[:, :, None] != targets[:, None, :]
    closest = torch.where(other, gap, torch.inf).min(-1).values.max(0).values
    right = (logits.argmax(-1) == batch.targets)[:, queries].float().mean(0)
    seen = internals.attentions[0][:, :, queries] > 0  # (B, H, queries, keys)
    keys = batch.inputs[:, None, None, :].expand_as(seen)
    distinct = [len(keys[:, :, q][seen[:, :, q]].unique()) for q in range(len(queries))]
    order = "lsd" if task.format["answer"] == "lsd" else "msd"
    places = list(range(1, n + 2)) if order == "lsd" else list(range(n + 1, 0, -1))
    return pd.DataFrame(
        {
            "predicts": [f"digit {p}" for p in places] + ["EOS"],
            "target (first sum)": family_task.decode(batch.targets[0, queries].tolist()),
            "right (%)": 100 * right.numpy(),
            "tokens it sees": distinct,
            "closest state that must answer otherwise": torch.where(closest.isinf(), torch.nan, closest).numpy(),
        }
    )


def family_errors(model: DecoderOnlyLM, task: Task, n: int, family: str, count: int = 256, seed: int = 1234):
    """How a family's sums go wrong at size n: each sum's first wrong answer token under teacher
    forcing (which greedy decoding would write first), counted by (what it should be, what the
    model writes); the count of sums right is the "right" row. Drawn as evaluation draws them."""
    family_task = StructuredAddition(family, **task.format)
    batch = evaluation_batch(family_task, n, count, seed, model.config)
    with evaluating(model), torch.no_grad():
        predicted = model(batch.inputs, positions=batch.positions[:, :-1]).argmax(-1)
    wrong = (predicted != batch.targets) & batch.loss_mask
    names = family_task.decode(range(family_task.vocab_size))
    rows = []
    for i in range(count):
        if not wrong[i].any():
            rows.append(("right", "right"))
            continue
        t = int(wrong[i].nonzero()[0])
        rows.append((names[int(batch.targets[i, t])], names[int(predicted[i, t])]))
    df = pd.DataFrame(rows, columns=["should be", "writes"])
    return df.value_counts().rename("sums").reset_index()


# The carry rule, column by column. Under teacher forcing each answer digit is the model's decision
# for one column given the true digits before it: the column's own two digits decide whether it
# makes a carry (they sum to 10 or more), passes one on (exactly 9: its digit and its carry out
# hang on the carry in) or stops it (8 or less); the carry in is the column below's carry out.
# A sum is right only if every column is, so a small error on one kind compounds on sums made of it.
COLUMN_KINDS = ("makes a carry", "passes it on", "stops it", "the top digit")


def column_kinds(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Per sum and answer column, units first ((B, n + 1), the last the top digit, the carry out):
    the column's kind (an index into `COLUMN_KINDS`) and its carry in (0 or 1)."""
    total = (a + b).flip(1)  # units first
    kind = torch.where(total >= 10, 0, torch.where(total == 9, 1, 2))
    carry, carry_in = torch.zeros(len(a), dtype=torch.long), []
    for i in range(a.shape[1]):
        carry_in.append(carry)
        carry = (total[:, i] + carry) // 10
    carry_in.append(carry)
    top = torch.full((len(a), 1), COLUMN_KINDS.index("the top digit"))
    return torch.cat([kind, top], dim=1), torch.stack(carry_in, dim=1)


def _column_batch(task: Task, n: int, sums: Task | None, count: int, seed: int, config: ModelConfig) -> Batch:
    """The sums `column_decisions` reads (checked to be equal-format addition in `task`'s format)."""
    sums = task if sums is None else sums
    if task.name != "addition" or task.format["format"] != "equal" or sums.format != task.format:
        raise ValueError(f"column decisions are read from equal-format addition in the run's format; got {sums.key!r}")
    return evaluation_batch(sums, n, count, seed, config)


def column_right(model: DecoderOnlyLM, task: Task, batch: Batch, n: int) -> Tensor:
    """(count, n + 1) bool, units first: whether the model's digit of each answer column is right
    given the true answer before it (teacher-forced)."""
    with evaluating(model), torch.no_grad():
        predicted = model(batch.inputs, positions=batch.positions[:, :-1]).argmax(-1)
    queries = torch.arange(2 * n + 2, 2 * n + 2 + n + 1)  # SEP and the answer's digits predict the n + 1 digits
    right = predicted[:, queries] == batch.targets[:, queries]
    return right if task.format["answer"] == "lsd" else right.flip(1)  # written most significant first: units last


def column_frame(batch: Batch, n: int, right: Tensor) -> pd.DataFrame:
    """The rows of `column_decisions` from its sums and whether each digit is right ((count, n + 1), units first)."""
    count = len(right)
    a, b = batch.tokens[:, 1 : n + 1] - N_SPECIAL, batch.tokens[:, n + 2 : 2 * n + 2] - N_SPECIAL
    kind, carry_in = column_kinds(a, b)
    below = torch.cat([torch.full((count, 1), -1), kind[:, :-1]], dim=1)
    column = torch.arange(n + 1).expand(count, -1)
    rows = torch.arange(count)[:, None].expand(-1, n + 1)
    names = np.array([*COLUMN_KINDS, "none (units)"])
    digit = lambda x: torch.cat([x.flip(1), torch.full((count, 1), -1)], dim=1).flatten().numpy()  # noqa: E731
    return pd.DataFrame(
        {
            "sum": rows.flatten().numpy(),
            "column": column.flatten().numpy(),
            "kind": names[kind.flatten().numpy()],
            "carry in": carry_in.flatten().numpy(),
            "below": names[below.flatten().numpy()],
            "a": digit(a),  # the column's digits (-1: the top digit's column has none)
            "b": digit(b),
            "right": right.flatten().numpy().astype(bool),
        }
    )


def column_decisions(
    model: DecoderOnlyLM, task: Task, n: int, sums: Task | None = None, count: int = 256, seed: int = 1234
) -> pd.DataFrame:
    """Each answer digit of `count` sums of size n as a row: the sum, its column (0 = units), the
    column's kind and carry in, the kind of the column below (none for the units), and whether
    the model's digit is right given the true answer before it (teacher-forced, as greedy
    decoding meets it until its first error). `sums`: the task that draws them, in `task`'s
    format (a `StructuredAddition` for a family; None: `task`'s own, uniform digits)."""
    batch = _column_batch(task, n, sums, count, seed, model.config)
    return column_frame(batch, n, column_right(model, task, batch, n))


COLUMNS_CACHE_COLUMNS = ["config_hash", "prompts", "n", "sums", "seed", "wrong"]


def run_column_decisions(
    cfg: RunConfig,
    n: int,
    sums: Task | None = None,
    count: int = 256,
    seed: int = 1234,
    results_dir: str | Path = ADDITION_DIR,
    cache: Path | None = ADDITION_DIR / "columns.csv",
) -> pd.DataFrame:
    """`column_decisions` of a run's saved weights. What the weights decide is read from `cache`
    where it holds it (keyed by the run's hash, the sums' prompts, n, the number of sums and the
    seed: the wrong digits, as indices into the (sum, column) grid); else computed and added to
    it. The sums themselves are drawn again: they depend only on the key."""
    task = cfg.make_task()
    batch = _column_batch(task, n, sums, count, seed, cfg.model)
    key = (cfg.hash, (task if sums is None else sums).prompt_key, str(n), str(count), str(seed))
    known = read_keyed_cache(cache, COLUMNS_CACHE_COLUMNS, "column-decisions")
    if key in known:
        right = torch.ones(count * (n + 1), dtype=torch.bool)
        right[[int(i) for i in known[key].split()]] = False
        return column_frame(batch, n, right.view(count, n + 1))
    right = column_right(load_run_model(cfg, results_dir), task, batch, n)
    if cache is not None:
        wrong = " ".join(str(i) for i in torch.nonzero(~right.flatten()).flatten().tolist())
        write_keyed_cache(cache, COLUMNS_CACHE_COLUMNS, known | {key: wrong})
    return column_frame(batch, n, right)


# The best configuration was scored on random sums; on the families above it fails (notebook 11),
# and the pilot below looks for a configuration right on every one, trained as before (1-8
# digits) and scored to 128 digits, so with P = 160 places (a 128-digit sum reaches place 131).
STRUCTURED_PLACES = 160


def structured_run(seed: int = 0, **overrides: Any) -> RunConfig:
    """The best configuration (`ADDITION_BEST`) with room for 128 digits, scored to 128 (unless
    `overrides` set `digit_places` and `eval_max_len`)."""
    settings = {"digit_places": STRUCTURED_PLACES, "eval_max_len": 128} | overrides
    return addition_run(*ADDITION_BEST, seed=seed, **settings)


def structured_pilot() -> list[RunConfig]:
    """The pilot for the structured sums, in the order tried (seed 0)."""
    # on 0 + 0 the queries at the top of the answer see only zeros, and so have one state (notebook
    # 11): the + token at the place above the operands' top digit is a key they see at different distances
    tried: list[dict[str, Any]] = [{"top_marker": True}]
    # one operand zero and a shorter operand degrade with length without sharing a state: views
    # that uniform digits almost never show (five columns of zeros). Training draws half its
    # operands in runs of one digit (a deviation; the carry families stay out of it)
    tried += [{"top_marker": True, "train_task_options": {"operands": "runs"}}]
    tried += [{}]  # the best configuration as it was, with room for 128 digits: the reference at 128
    return [structured_run(**kw) for kw in tried]


# The pilot's first choice, the marker alone, trained on seeds 1 and 2 as well: seed 1 stayed on
# a plateau and seed 2 fails the padded families (one operand zero, a much shorter operand, both
# short) past the training sizes (notebook 11 shows both)
STRUCTURED_FIRST: dict[str, Any] = {"top_marker": True}
# so the second choice: the marker, operands in runs (the pilot's best seed 0) and twice the steps
STRUCTURED_BEST: dict[str, Any] = {"top_marker": True, "train_task_options": {"operands": "runs"}, "steps": 10_000}


def structured_steps_ablation() -> list[RunConfig]:
    """The second choice at the first choice's 5,000 steps, on seeds 1 and 2 (seed 0 is the
    pilot's second arm): which of its two changes, operands in runs or twice the steps, brought
    those seeds to the goal."""
    return [structured_run(seed=s, **(STRUCTURED_BEST | {"steps": 5_000})) for s in (1, 2)]


def structured_study() -> list[RunConfig]:
    """The pilot (`structured_pilot`), the first choice on seeds 1 and 2, the second choice
    (`STRUCTURED_BEST`) on seeds 0, 1 and 2, then its steps ablation (`structured_steps_ablation`)."""
    first = [structured_run(seed=s, **STRUCTURED_FIRST) for s in (1, 2)]
    best = [structured_run(seed=s, **STRUCTURED_BEST) for s in (0, 1, 2)]
    return structured_pilot() + first + best + structured_steps_ablation()


STRUCTURED_GOAL = {"every size to 64": 0.99, "128 digits": 0.95}  # every seed, random sums and every family


def column_decisions_by_draw(
    configs: Sequence[RunConfig], draws: Mapping[str, str | None], n: int, results_dir: str | Path = ADDITION_DIR
) -> dict[tuple[str, str], Any]:
    """`column_decisions` at n digits for each run (its saved weights, through the cache of
    `run_column_decisions`) and each draw (name -> a family, or None for uniform digits), keyed
    (draw, "seed s")."""
    out = {}
    for cfg in configs:
        task = cfg.make_task()
        for name, family in draws.items():
            sums = StructuredAddition(family, **task.format) if family else None
            out[name, f"seed {cfg.seed}"] = run_column_decisions(cfg, n, sums, results_dir=results_dir)
    return out


def sparse_digits(zero: Tensor, n: int, generator: torch.Generator) -> Tensor:
    """(count, n) digits, each 0 with its row's probability `zero` ((count, 1)), else uniform 0-9."""
    digits = torch.randint(0, 10, (len(zero), n), generator=generator)
    return torch.where(torch.rand(len(zero), n, generator=generator) < zero, 0, digits)


def set_digits(count: int, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Two (count, n) digit tensors drawn from one small set of digits per row: 2 or 3 distinct
    digits, equally often, each digit of both operands uniform over the row's set."""
    size = torch.randint(2, 4, (count, 1), generator=generator)
    order = torch.rand(count, 10, generator=generator).argsort(dim=1)  # a shuffle of 0-9 per row: its first digits
    pick = lambda: order.gather(1, (torch.rand(count, n, generator=generator) * size).long())  # noqa: E731
    return pick(), pick()


def mixture_operands(n: int, batch_size: int, generator: torch.Generator, sets: bool) -> tuple[Tensor, Tensor]:
    """Each sum's operands drawn one of three ways, equally often: uniform digits, each operand in
    runs (`run_digits`), or sparse (`sparse_digits`: each digit 0 with one probability per sum,
    uniform from 0 to 1); with `sets`, a fourth way, as often: both operands' digits from a small
    digit set drawn per sum (`set_digits`). Every way is drawn for every sum, in this order, and
    each sum keeps its own; the streams of committed runs depend on that order."""
    way = torch.randint(0, 4 if sets else 3, (batch_size, 1), generator=generator)
    zero = torch.rand(batch_size, 1, generator=generator)  # one share of zeros for both operands
    drawn = [torch.where(way == 1, run_digits(batch_size, n, generator), -1) for _ in "ab"]
    drawn = [torch.where(way == 2, sparse_digits(zero, n, generator), d) for d in drawn]
    if sets:
        drawn = [torch.where(way == 3, s, d) for s, d in zip(set_digits(batch_size, n, generator), drawn)]
    return drawn[0], drawn[1]


@register_operand_mixture("mixed")
def mixed_operands(n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Uniform, in runs or sparse, a third of the sums each (`mixture_operands`)."""
    return mixture_operands(n, batch_size, generator, sets=False)


@register_operand_mixture("mixed-sets")
def mixed_set_operands(n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """The three ways of "mixed" and a fourth, a quarter of the sums each: digits from a small set,
    which shows long chains of columns that all carry, all pass a carry on, or alternate, as
    uniform digits almost never do."""
    return mixture_operands(n, batch_size, generator, sets=True)


def carry_into_zeros(a: Tensor, b: Tensor) -> float:
    """The share of columns of the sums a + b ((B, n) digits each, most significant first) whose
    two digits are 0 + 0 and whose carry in is 1: the view where the chosen model drops carries."""
    carry, hits = torch.zeros(len(a), dtype=torch.long), 0
    for i in range(a.shape[1] - 1, -1, -1):
        hits += int(((a[:, i] + b[:, i] == 0) & (carry == 1)).sum())
        carry = (a[:, i] + b[:, i] + carry) // 10
    return hits / a.numel()


def training_operands(n: int, count: int, seed: int) -> dict[str, tuple[Tensor, Tensor]]:
    """For each training distribution of addition's operands (`Addition.options["operands"]`),
    `count` n-digit sums as the training task draws them, from one seed: (a, b) digits, (count,
    n) each, most significant first."""
    out = {}
    for operands in Addition.options["operands"]:
        x, _ = get_task("addition", {"answer": "lsd", "operands": operands}).sample(
            n, count, torch.Generator().manual_seed(seed)
        )
        out[operands] = _digits(x[:, :n]), _digits(x[:, n + 1 :])
    return out


def training_carry_views(n: int = 8, count: int = 20_000, seed: int = 0) -> pd.Series:
    """For each training distribution of addition's operands (`Addition.options["operands"]`),
    how often a column of `count` n-digit sums is 0 + 0 with a carry in (`carry_into_zeros`)."""
    out = {operands: carry_into_zeros(a, b) for operands, (a, b) in training_operands(n, count, seed).items()}
    return pd.Series(out, name=f"columns of 0 + 0 a carry reaches ({n} digits)")


def training_chain_views(n: int = 8, count: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """For each training distribution of addition's operands, the share (%) of `count` n-digit
    sums whose every column makes a carry (its two digits sum to 10 or more), whose columns pass a
    carry on (sum to exactly 9) in at least half the columns, and whose digits, both operands
    together, take at most 3 values: the long chains that two-valued digit sets are made of."""
    rows = {}
    for operands, (a, b) in training_operands(n, count, seed).items():
        values = torch.zeros(count, 10, dtype=torch.long).scatter_(1, torch.cat([a, b], dim=1), 1).sum(dim=1)
        rows[operands] = {
            "every column carries (%)": 100 * float(((a + b) >= 10).all(dim=1).float().mean()),
            "half the columns pass a carry on (%)": 100 * float((((a + b) == 9).sum(dim=1) >= n / 2).float().mean()),
            "at most 3 digit values (%)": 100 * float((values <= 3).float().mean()),
        }
    return pd.DataFrame(rows).T.rename_axis(f"training sums ({n} digits)")


# Towards an exact carry rule: the chosen configuration misses on sums no sampler favours (every
# digit 0 or 9, one carry among zeros). Each change is tried on seed 0 first (the seed that fails
# most on zeros and nines), in the order tried: twice the steps, then one layer more; then the
# training mixture: the wrong digits sit where a carry reaches a column of 0 + 0, which uniform
# digits and runs rarely show (`training_carry_views` counts how rarely; notebook 11 prints it), so a
# third of the training sums are sparse, a third in runs, a third uniform.
EXACTNESS_TRIES: tuple[dict[str, Any], ...] = (
    {"steps": 20_000},
    {"n_layers": 4},
    {"train_task_options": {"operands": "mixed"}},
)


def exactness_tries(seed: int = 0) -> list[RunConfig]:
    """The chosen configuration (`STRUCTURED_BEST`) with each change of `EXACTNESS_TRIES`."""
    return [structured_run(seed=seed, **(STRUCTURED_BEST | change)) for change in EXACTNESS_TRIES]


# Beyond every sampler, one digit set at a time: every digit of both operands one of two given
# digits, for each of the 45 pairs (the family "two digits" draws a pair per sum; sparse sums hold
# mostly zeros). Scored from the saved weights and cached with each run's hash.
DIGIT_PAIRS: tuple[tuple[int, int], ...] = tuple(itertools.combinations(range(10), 2))


class DigitSetAddition(Addition):
    """Addition whose operands draw every digit uniformly from `digits` (format "equal"); its
    evaluation prompts are its own (`prompt_key`)."""

    def __init__(self, digits: Sequence[int], **options: str) -> None:
        super().__init__(**options)
        if self.format["format"] != "equal":
            raise ValueError("digit-set sums write both operands with n digits: addition format 'equal' only")
        if not digits or any(not isinstance(d, int) or not 0 <= d <= 9 for d in digits):
            raise ValueError(f"digits must be integers from 0 to 9; got {digits!r}")
        self.digits = torch.tensor(sorted(set(digits)))

    @property
    def prompt_key(self) -> str:
        return f"{self.key}/digits {''.join(str(int(d)) for d in self.digits)}"

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        pick = lambda: self.digits[torch.randint(0, len(self.digits), (batch_size, n), generator=generator)]  # noqa: E731
        return self.write(pick(), pick())


def digit_pair_scores(
    configs: Sequence[RunConfig],
    sizes: Sequence[int] = (8, 64, 128, 256),
    results_dir: str | Path = ADDITION_DIR,
    cache: Path | None = ADDITION_DIR / "digit_pairs.csv",
    n_per_size: int = 256,
) -> pd.DataFrame:
    """Exact match (0-1) of each trained run (of `configs`) on the sums of each digit pair
    (`DIGIT_PAIRS`) at each size its digit places hold: one row per (run, pair, size), with the
    run's hash. Rows are read from `cache` where it has them for the run's current hash, and the
    rest computed from the saved weights and added to it."""
    readable = cache is not None and Path(cache).exists()
    done = pd.read_csv(cache, dtype={"config_hash": str, "pair": str}) if readable else None
    rows = []
    for cfg in configs:
        if not record_path(Path(results_dir), cfg).exists():
            continue
        have = done[done["config_hash"] == cfg.hash] if done is not None else pd.DataFrame()
        wanted = [n for n in sizes if n <= cfg.eval_max_len]
        if len(have) == len(DIGIT_PAIRS) * len(wanted):
            rows += have.to_dict("records")
            continue
        model, task = load_run_model(cfg, results_dir), cfg.make_task()
        for pair in DIGIT_PAIRS:
            em = exact_match_by_length(model, DigitSetAddition(pair, **task.format), wanted, n_per_size, cfg.eval_seed)
            rows += [
                {"seed": cfg.seed, "config_hash": cfg.hash, "pair": f"{pair[0]}{pair[1]}", "n": n, "exact_match": v}
                for n, v in em.items()
            ]
    out = pd.DataFrame(rows, columns=["seed", "config_hash", "pair", "n", "exact_match"])
    if cache is not None and len(out):
        kept = done[~done["config_hash"].isin(out["config_hash"])] if done is not None else None
        merged = pd.concat([kept, out], ignore_index=True) if kept is not None else out
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(Path(cache), lambda p: merged.to_csv(p, index=False))
    return out


class PlantedAddition(Addition):
    """Addition of uniform digits with a few given columns planted at one random place per sum
    (format "equal"): `columns`, the top column first, each (digit of a, digit of b). With
    `equal`, b is a copy of a (the planted columns must then hold equal digits): a number added to
    itself with the view planted in it. Its evaluation prompts are its own (`prompt_key`)."""

    def __init__(self, columns: Sequence[tuple[int, int]], equal: bool = False, **options: str) -> None:
        super().__init__(**options)
        if self.format["format"] != "equal":
            raise ValueError("planted sums write both operands with n digits: addition format 'equal' only")
        if not columns or any(len(c) != 2 or not all(isinstance(d, int) and 0 <= d <= 9 for d in c) for c in columns):
            raise ValueError(f"columns must be pairs of digits from 0 to 9, the top column first; got {columns!r}")
        if equal and any(x != y for x, y in columns):
            raise ValueError(f"a number added to itself has equal digits in every column; got {columns!r}")
        self.columns, self.equal = torch.tensor(columns).T, equal  # (2, k): a's digits, b's digits

    @property
    def prompt_key(self) -> str:
        a, b = ("".join(str(int(d)) for d in row) for row in self.columns)
        return f"{self.key}/planted {a} + {b}{' in a + a' if self.equal else ''}"

    def sample(self, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        k = self.columns.shape[1]
        if n < k:
            raise ValueError(f"{k} planted columns need sums of at least {k} digits; got n = {n}")
        a = torch.randint(0, 10, (batch_size, n), generator=generator)
        b = a.clone() if self.equal else torch.randint(0, 10, (batch_size, n), generator=generator)
        at = torch.randint(0, n - k + 1, (batch_size, 1), generator=generator) + torch.arange(k)
        a.scatter_(1, at, self.columns[0].expand(batch_size, -1))
        b.scatter_(1, at, self.columns[1].expand(batch_size, -1))
        return self.write(a, b)


PLANTED_CACHE_COLUMNS = ["config_hash", "prompts", "n", "sums", "exact_match"]


def planted_scores(
    configs: Sequence[RunConfig],
    plants: Mapping[str, tuple[Sequence[tuple[int, int]], bool]],
    sizes: Sequence[int],
    results_dir: str | Path = ADDITION_DIR,
    n_per_size: int = 512,
    cache: Path | None = ADDITION_DIR / "planted.csv",
) -> pd.DataFrame:
    """Exact match (0-1) of each run of `configs` (from its saved weights) on each plant (name ->
    (columns, equal), as `PlantedAddition` takes them) at each size: rows the plants, columns
    (size, "seed s"). Scores are read from `cache` where it holds them (keyed by the run's hash,
    the plant's prompts, the size and the number of sums); the rest are computed and added to it."""
    known = read_keyed_cache(cache, PLANTED_CACHE_COLUMNS, "planted-scores")
    out, new = {}, {}
    for cfg in configs:
        model, task = None, cfg.make_task()
        for name, (columns, equal) in plants.items():
            planted = PlantedAddition(columns, equal, **task.format)
            keys = {n: (cfg.hash, planted.prompt_key, str(n), str(n_per_size)) for n in sizes}
            em = {n: float(known[k]) for n, k in keys.items() if k in known}
            missing = [n for n in sizes if n not in em]
            if missing:
                model = model if model is not None else load_run_model(cfg, results_dir)
                em |= exact_match_by_length(model, planted, missing, n_per_size, cfg.eval_seed)
                new |= {keys[n]: repr(float(em[n])) for n in missing}
            out |= {(name, n, f"seed {cfg.seed}"): em[n] for n in sizes}
    if cache is not None and new:
        write_keyed_cache(cache, PLANTED_CACHE_COLUMNS, known | new)
    table = pd.Series(out).unstack([1, 2])
    return table.reindex(index=list(plants), columns=pd.MultiIndex.from_tuples(list(dict.fromkeys(k[1:] for k in out))))


# Of the tries, the mixture held every family on seed 0 (notebook 11's table), so it is the configuration for
# every seed, trained with room for 256 digits (32 times the longest training size: places to
# 259, so P = 320, twice the ratio as before) and scored to 256.
EXACT_BEST: dict[str, Any] = STRUCTURED_BEST | {"train_task_options": {"operands": "mixed"}}
EXACT_PLACES, EXACT_MAX = 320, 256


def exact_run(seed: int = 0, **overrides: Any) -> RunConfig:
    """The exact configuration (`EXACT_BEST`) with room for `EXACT_MAX` digits, scored to there."""
    return structured_run(
        seed=seed, **(EXACT_BEST | {"digit_places": EXACT_PLACES, "eval_max_len": EXACT_MAX} | overrides)
    )


# At 256 digits the mixture missed on digit pairs (notebook 11's table: pairs whose columns
# alternate between passing a carry on and stopping it, or whose every column carries), sums that
# uniform digits show almost never at any length. A fourth way of drawing the
# training sums, from a small digit set per sum ("mixed-sets"), shows such columns in long chains;
# tried on seed 0 first, with room for 256 digits as before. It favours what it draws: sums of two
# or three digit values are no longer beyond every sampler, at the training sizes. On seed 0 it
# did better than the mixture alone (notebook 11's tables), so it is kept and trained on seeds 1
# and 2.
DIGIT_SETS: dict[str, Any] = {"train_task_options": {"operands": "mixed-sets"}}

# Seed 0's wrong digits on a number added to itself sit in one view, a column whose carry in
# depends on the column two below; planted in random sums, that view alone is wrong at times
# while the same column sums from other digits are not (`planted_scores`; notebook 11). The carry rule
# needs only the column below and the model's own previous digit; a window of 2 places also shows
# a query the column two below, whose digits then sway its answer. The next try narrows the window
# to 1 place, which did as well as two on the chosen configuration (notebook 11's ablation), on seed 0.
DIGIT_SETS_WINDOW_1: dict[str, Any] = {**DIGIT_SETS, "attention_window": 1}

# The views planted in random sums (`planted_scores`), each the top column first: seed 0's view,
# in a number added to itself and in random sums; then one column changed at a time (the digits
# two below summing to 10 as before, the column below making a carry as before, or 6 + 6 two
# below), the second view found, and the same column sums from other digits.
CARRY_PLANTS: dict[str, tuple[tuple[tuple[int, int], ...], bool]] = {
    "9+9 | 8+8 | 5+5, in a + a": (((9, 9), (8, 8), (5, 5)), True),
    "9+9 | 8+8 | 5+5": (((9, 9), (8, 8), (5, 5)), False),
    "9+9 | 8+8 | 4+6": (((9, 9), (8, 8), (4, 6)), False),
    "9+9 | 7+9 | 5+5": (((9, 9), (7, 9), (5, 5)), False),
    "9+9 | 8+8 | 6+6": (((9, 9), (8, 8), (6, 6)), False),
    "3+3 | 9+9 | 5+5": (((3, 3), (9, 9), (5, 5)), False),
    "9+9 | 7+9 | 4+6": (((9, 9), (7, 9), (4, 6)), False),
}


# A window model reads, at any length, only keys within its window of the query's place, and with
# a relative encoding what it computes from them depends only on their distances, which inside the
# window are those of training. So its saved weights can be scored with room for more digit places
# than it was trained with: only `digit_places` bounds the sizes it can be given. Where that would
# change what the model computes, it is refused: absolute positions (a sinusoid or a learned table
# at places never trained), no window (a query then reads keys at distances never trained), or a
# window as wide as the places trained.
ABSOLUTE_ENCODINGS = ("sinusoidal", "learned")


def with_more_places(cfg: RunConfig, places: int, eval_max_len: int | None = None) -> RunConfig:
    """`cfg` with room for `places` digit places (scored to `eval_max_len` digits, default the
    most they hold): the same weights give the same computation at every size (above)."""
    m = cfg.model
    trained, window = m.option("digit_places"), m.option("attention_window")
    if not trained:
        raise ValueError(f"{cfg.name} was trained without digit places; more places apply to digit-place runs only")
    if not window or window >= trained:
        raise ValueError(
            f"{cfg.name} has attention_window={window} over {trained} places: without a window "
            "narrower than the places trained, a query reads keys at distances never trained"
        )
    if m.encoding in ABSOLUTE_ENCODINGS:
        raise ValueError(
            f"{cfg.name} encodes absolute positions ({m.encoding}): places past {trained} were never trained; "
            f"valid: {', '.join(e for e in ENCODINGS if e not in ABSOLUTE_ENCODINGS)}"
        )
    if not isinstance(places, int) or places < trained:
        raise ValueError(f"places={places!r} is out of range; valid: an integer >= the {trained} trained")
    top = places - 4 if eval_max_len is None else eval_max_len  # size n's places reach n + 3, below `places`
    more = dataclasses.replace(m, options=m.options | {"digit_places": places})
    return dataclasses.replace(cfg, model=more, eval_max_len=top)


def load_with_more_places(cfg: RunConfig, places: int, results_dir: str | Path = ADDITION_DIR) -> DecoderOnlyLM:
    """`cfg`'s saved weights (under its own hash) in a model with room for `places` digit places
    (`with_more_places`)."""
    return load_run_model(cfg, results_dir, into=with_more_places(cfg, places))


FAR_CACHE = ADDITION_DIR / "far.csv"
FAR_COUNT = 32  # sums scored per run, draw and size: each sum at 1,000 digits and more is costly
FAR_CACHE_COLUMNS = ["config_hash", "places", "draw", "n", "count", "measure", "value"]


def far_draw(task: Task, draw: str) -> Task:
    """The sums of one draw in `task`'s format: "random" (the task's own), a family
    (`SUM_FAMILIES`) or a digit pair as two digits ("09": every digit of both operands 0 or 9)."""
    if draw == "random":
        return task
    if draw in SUM_FAMILIES:
        return StructuredAddition(draw, **task.format)
    pair = tuple(int(c) for c in draw) if re.fullmatch(r"\d\d", draw) else None
    if pair not in DIGIT_PAIRS:
        raise ValueError(
            f"unknown draw {draw!r}; valid: 'random', a family ({', '.join(SUM_FAMILIES)}) or a digit pair '01'..'89'"
        )
    return DigitSetAddition(pair, **task.format)


def far_scores(
    configs: Sequence[RunConfig],
    places: int,
    sizes: Sequence[int],
    draws: Sequence[str],
    count: int = FAR_COUNT,
    results_dir: str | Path = ADDITION_DIR,
    cache: Path | None = FAR_CACHE,
    batch_size: int = 8,
) -> pd.DataFrame:
    """Exact match (0-1) of each run's saved weights with room for `places` digit places
    (`load_with_more_places`) on `count` sums of each draw (`far_draw`) at each size, and the
    seconds a sum took to score on this machine (the full attention over every key, masked to the
    window: its cost grows with the square of the length): one row per (seed, draw, n). Read from
    `cache` where it holds them (keyed by the run's hash, the places, the draw, the size and the
    count), else computed and added to it."""
    known = read_keyed_cache(cache, FAR_CACHE_COLUMNS, "far-scores")
    rows, new = [], {}
    for cfg in configs:
        model, task = None, with_more_places(cfg, places).make_task()
        for draw in draws:
            for n in sizes:
                key = (cfg.hash, str(places), draw, str(n), str(count))
                if (*key, "exact_match") not in known:
                    model = model if model is not None else load_with_more_places(cfg, places, results_dir)
                    t0 = time.perf_counter()
                    em = exact_match_by_length(model, far_draw(task, draw), [n], count, cfg.eval_seed, batch_size)[n]
                    seconds = (time.perf_counter() - t0) / count
                    new |= {(*key, "exact_match"): repr(float(em)), (*key, "seconds per sum"): repr(seconds)}
                    if cache is not None:  # each cell as it is scored: a stop loses none
                        write_keyed_cache(cache, FAR_CACHE_COLUMNS, known | new)
                got = known | new
                rows.append({"seed": cfg.seed, "draw": draw, "n": n})
                rows[-1] |= {m: float(got[(*key, m)]) for m in ("exact_match", "seconds per sum")}
    return pd.DataFrame(rows, columns=["seed", "draw", "n", "exact_match", "seconds per sum"])


# The sizes past training's places scored for notebook 11, each with its draws: every draw at 512
# and 1,000 digits; at 2,000 (each sum 250 times the longest trained, the costliest to score)
# random sums and the families where earlier configurations missed: digits only 0 or 9, a number
# added to itself, two digit values, and a carry dropped among zeros.
FAR_PLACES = 2100
EVERY_DRAW = ("random", *SUM_FAMILIES, *(f"{a}{b}" for a, b in DIGIT_PAIRS))
HARDEST_DRAWS = ("random", "zeros and nines", "equal operands", "two digits", "one carry among zeros")
FAR_DRAWS: dict[int, tuple[str, ...]] = {512: EVERY_DRAW, 1000: EVERY_DRAW, 2000: HARDEST_DRAWS}


def far_study(
    configs: Sequence[RunConfig], draws: Mapping[int, Sequence[str]] = FAR_DRAWS, places: int = FAR_PLACES
) -> pd.DataFrame:
    """`far_scores` of each run at each size of `draws` (size -> the draws scored there)."""
    return pd.concat([far_scores(configs, places, [n], list(d)) for n, d in draws.items()], ignore_index=True)


FAR_COST_CACHE = ADDITION_DIR / "far_cost.csv"
FAR_COST_COLUMNS = ["config_hash", "places", "n", "count", "measure", "value"]


def window_share(task: Task, n: int, window: int) -> float:
    """Of the attention scores a causal model computes at size n (each query against every key up
    to it), the share its window of `window` places leaves unmasked: what decoding that skipped
    the keys no query can see would compute."""
    places = torch.tensor(place_layout(task, n))[:-1]  # the inputs: every token but the last
    causal = causal_mask(len(places))
    return float((causal & window_mask(places, window)).sum() / causal.sum())


def far_cost(
    cfg: RunConfig,
    places: int,
    sizes: Sequence[int],
    count: int = 8,
    repeats: int = 3,
    results_dir: str | Path = ADDITION_DIR,
    cache: Path | None = FAR_COST_CACHE,
) -> pd.DataFrame:
    """Seconds per sum to score `cfg`'s saved weights with room for `places` digit places
    (`load_with_more_places`) on `count` random sums at each size, measured one size after the
    other in one run so that every size meets the same machine (the full attention, masked to the
    window); with the growth from the size before, the exponent k in time ~ digits^k (1 linear, 2
    quadratic), and the share of the scores the window leaves unmasked (`window_share`). Read from
    `cache` when it holds every size; else every size is measured again, side by side (the median
    of `repeats` timings each)."""
    if list(sizes) != sorted(set(sizes)) or min(sizes) < 1:
        raise ValueError(f"sizes={list(sizes)} must be distinct and increasing, from 1 digit up")
    known = read_keyed_cache(cache, FAR_COST_COLUMNS, "far-cost")
    keys = {n: (cfg.hash, str(places), str(n), str(count), "seconds per sum") for n in sizes}
    if not all(k in known for k in keys.values()):
        model = load_with_more_places(cfg, places, results_dir)
        task = with_more_places(cfg, places).make_task()
        exact_match_by_length(model, task, [min(sizes)], count, cfg.eval_seed)  # a first call's set-up, untimed
        for n, key in keys.items():
            score = functools.partial(exact_match_by_length, model, task, [n], count, cfg.eval_seed, batch_size=count)
            known[key] = repr(_median_time(score, repeats) / count)
        if cache is not None:
            write_keyed_cache(cache, FAR_COST_COLUMNS, known)
    task = cfg.make_task()
    seconds = np.array([float(known[keys[n]]) for n in sizes])
    ratios = [(seconds[i] / seconds[i - 1], sizes[i] / sizes[i - 1]) for i in range(1, len(sizes))]
    growth = [None] + [float(np.log(t) / np.log(n)) for t, n in ratios]
    return pd.DataFrame(
        {
            "seconds per sum": seconds,
            "growth exponent": growth,
            "scores the window can see (%)": [
                100 * window_share(task, n, cfg.model.option("attention_window")) for n in sizes
            ],
        },
        index=pd.Index(list(sizes), name="digits"),
    )


def exactness_study() -> list[RunConfig]:
    """The tries on seed 0 (`exactness_tries`), the configuration chosen from them on seeds 0-2,
    then the digit-set mixture (`DIGIT_SETS`) on seed 0, then on seeds 1 and 2, then the same with
    a window of 1 place (`DIGIT_SETS_WINDOW_1`) on seed 0, then on seeds 1 and 2."""
    chosen = [exact_run(seed=s) for s in range(3)]
    sets = [exact_run(seed=s, **DIGIT_SETS) for s in range(3)]
    return exactness_tries() + chosen + sets + [exact_run(seed=s, **DIGIT_SETS_WINDOW_1) for s in range(3)]


# The ten families the structured-sum configuration was chosen on; the tables and the goal judge
# these unless told otherwise. The families registered after them test sums no sampler favours
# (`FURTHER_FAMILIES`).
TEN_FAMILIES = tuple(SUM_FAMILIES)[:10]
FURTHER_FAMILIES = tuple(SUM_FAMILIES)[10:]


def family_scores(rec: dict[str, Any], families: Sequence[str] = TEN_FAMILIES) -> dict[str, dict[int, float]]:
    """A record's exact match per size on random sums (its `exact_match`), then on each of
    `families`."""
    missing = [f for f in families if f not in rec.get("families", {})]
    if missing:
        raise ValueError(f"{rec['name']} has no scores for {', '.join(missing)}; add them with add_families")
    scores = {"random": rec["exact_match"], **{f: rec["families"][f] for f in families}}
    return {family: {int(n): v for n, v in em.items()} for family, em in scores.items()}


def ten_task_addition_curves(results_dir: str | Path = RESULTS_DIR):
    """Exact match against digits for the ten-task grid's addition runs (the paper's format, deep
    shape) that have landed: encoding, seed, n, exact_match."""
    chosen = experiment("addition-deep")
    records, _ = load_available(chosen.runs(), chosen.results_dir(results_dir))
    return exact_match_frame(records)[["encoding", "seed", "n", "exact_match"]]


ARM_WORDS = {"lsd": "answer reversed", "msd": "answer in order", "places": "digit places"}
ADDITION_SETTING_WORDS = {
    "lr 0.003": "learning rate 3e-3",
    "bidirectional (16 buckets, far from 6)": "bidirectional buckets",
    "symmetric": "symmetric bias",
    "table init std 1": "table started at std 1",
    "batch_size 256": "batch 256",
    "d_model 128": "d 128",
    "steps 10000": "10,000 steps",
    "P 160": "160 places",
    "trained with operands=runs": "half the training operands in runs",
    "steps 20000": "20,000 steps",
    "P 320": "320 places",
    "trained with operands=mixed": "trained on the mixture (uniform, runs, sparse)",
}


def arm_legend(arm: str, encoding: str, settings: str = "") -> str:
    """An addition arm's legend entry in plain words: "lsd + places + window 2", RoPE -> "RoPE:
    answer reversed, digit places, window of 2"; changed settings in brackets."""
    words = [ARM_WORDS.get(p, p.replace("window ", "window of ")) for p in arm.split(" + ")]
    for name, plain in ADDITION_SETTING_WORDS.items():
        settings = settings.replace(name, plain)
    return f"{encoding_title(encoding)}: {', '.join(words)}" + (f" ({settings})" if settings else "")


register_experiments(  # each: its name (`sweep --grid NAME`), its runs, its folder under results/
    "11_addition_that_generalizes",
    [
        ("addition-pilot", addition_pilot, under_results(ADDITION_DIR)),
        ("addition-places", addition_study, under_results(ADDITION_DIR)),
        ("addition-structured", structured_study, under_results(ADDITION_DIR)),
        ("addition-exact", exactness_study, under_results(ADDITION_DIR)),
    ],
)


# What notebook 11 shows: tables, figures and verdicts.
def addition_table(copy_run: float, results_dir: str | Path = ADDITION_DIR):
    """One row per addition run: its ingredients, exact match (%) in distribution (1-8 digits)
    and at 9, 12, 16, 32, 64 and 128 digits (256 sums each; NaN where a run was not scored so
    far), the longest n held at 90% or more at every size up to it, its training loss at the end
    (the mean over its last `loss_curve` interval), its compute in copy runs and its wall time."""
    rows = []
    for stage, cfg, rec in addition_runs(results_dir):
        em = rec["exact_match"] if rec else {}
        row = {"stage": stage, "arm": addition_ingredients(cfg), "encoding": cfg.encoding}
        row |= {"settings": addition_settings(cfg), "seed": cfg.seed}
        row["in distribution (%)"] = 100 * rec["in_distribution_mean"] if rec else float("nan")
        row |= {f"{n} digits (%)": 100 * em.get(str(n), float("nan")) for n in (9, 12, 16, 32, 64, 128)}
        row["holds to (digits)"] = longest_held(em) if rec else float("nan")
        row["final loss"] = rec["loss_curve"]["mean_loss"][-1] if rec else float("nan")
        row["copy runs"] = run_compute_flops(cfg, sample_steps=20) / copy_run
        row["wall (min)"] = rec["wall_time_s"] / 60 if rec else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def addition_view(rows, costs: bool = False, name_best: bool = True):
    """Rows of `addition_table` for reading, narrow: each run named in words (with `name_best`,
    the best configuration's runs as such; an ablation run by what it changes,
    `ADDITION_ABLATION`; any other by `arm_legend`, its seed if not 0, less the ingredients every
    row shares, which the index's name states), exact match (%) under one header with the sizes
    below it, the longest size held and the final loss; `costs` adds compute (copy runs) and wall
    time (min). Numbers to one decimal, the loss to three. `addition_table` has every column."""
    best = (addition_ingredients(addition_run(*ADDITION_BEST)), ADDITION_BEST[1], "")
    words = {}
    for what, a, e, kw in ADDITION_ABLATION:
        cfg = addition_run(a, e, **kw)
        words[(addition_ingredients(cfg), e, addition_settings(cfg))] = what
    shared = set.intersection(*(set(a.split(" + ")) for a in rows["arm"])) if len(rows) else set()

    def name(r) -> str:
        key = (r["arm"], r["encoding"], r["settings"])
        if name_best and key == best:
            return f"the best configuration, seed {r['seed']}"
        if r["stage"] == "ablation" and key in words:
            return words[key]
        rest = " + ".join(p for p in r["arm"].split(" + ") if p not in shared)
        named = arm_legend(rest, r["encoding"], r["settings"]) if rest else encoding_title(r["encoding"])
        if not rest and r["settings"]:
            named += f" ({arm_legend('', r['encoding'], r['settings']).split(' (', 1)[1]}"
        return named + (f", seed {r['seed']}" if r["seed"] else "")

    first = rows["arm"].iloc[0].split(" + ") if len(rows) else []
    every = ", ".join(ARM_WORDS.get(p, p) for p in first if p in shared)
    sizes = {"in distribution (%)": "1-8"} | {f"{n} digits (%)": str(n) for n in (9, 12, 16, 32, 64)}
    header = pd.MultiIndex.from_product([["exact match (%)"], sizes.values()])
    out = rows[list(sizes)].round(1).set_axis(header, axis=1)
    out[("holds to", "digits")] = rows["holds to (digits)"]
    out[("final", "loss")] = rows["final loss"].round(3)
    if costs:
        out[("copy", "runs")] = rows["copy runs"].round(1)
        out[("wall", "min")] = rows["wall (min)"].round(1)
    index_name = f"run (every one: {every})" if every else "run"
    return out.set_axis(pd.Index([name(r) for _, r in rows.iterrows()], name=index_name), axis=0)


def addition_goal(results_dir: str | Path = ADDITION_DIR):
    """The goal (`ADDITION_GOAL`) per seed of the best configuration: exact match (%) in
    distribution, at 16 and at 32 digits, whether each meets its floor, and the longest n held at
    90% or more (tried to 64)."""
    rows = []
    for cfg in addition_study()[:3]:
        path = record_path(Path(results_dir), cfg)
        if not path.exists():
            rows.append({"seed": cfg.seed, "trained": False})
            continue
        rec = read_record(path)
        got = {"in distribution": rec["in_distribution_mean"], "16 digits": rec["exact_match"]["16"]}
        got["32 digits"] = rec["exact_match"]["32"]
        row: dict[str, Any] = {"seed": cfg.seed, "trained": True}
        for name, floor in ADDITION_GOAL.items():
            row[f"{name} (%)"] = 100 * got[name]
            row[f"{name} >= {100 * floor:g}%"] = got[name] >= floor
        row["holds to (digits)"] = longest_held(rec["exact_match"])
        rows.append(row)
    return pd.DataFrame(rows).set_index("seed")


def places_example(cfg: RunConfig, n: int = 3, seed: int = 0):
    """One sequence of an addition run as the model reads it: each token, its place, and the
    position after the sequence's random offset (the first of `count` = 1 evaluation draws)."""
    task = cfg.make_task()
    batch = evaluation_batch(task, n, 1, seed, cfg.model)
    keep = batch.tokens[0] != PAD  # a format whose sums vary in length pads the row: drop the padding
    tokens = task.decode(batch.tokens[0][keep].tolist())
    frame = {"token": tokens, "position": batch.positions[0][keep].tolist()}
    if cfg.model.option("digit_places"):
        frame["place"] = place_layout(task, n, cfg.model)
    return pd.DataFrame(frame).T


def family_example(family: str, n: int, seed: int = 0) -> str:
    """One sum of `family` at n digits, written as a reader would: "0 0 0 + 0 0 0 = 0 0 0 0"."""
    fam = SUM_FAMILIES[family] if family in SUM_FAMILIES else None
    if fam is None:
        raise _unknown("sum family", family, SUM_FAMILIES)
    a, b = (row[0].tolist() for row in fam.draw(n, 1, torch.Generator().manual_seed(seed)))
    total = str(int("".join(map(str, a))) + int("".join(map(str, b)))).zfill(n + 1)
    return f"{' '.join(map(str, a))} + {' '.join(map(str, b))} = {' '.join(total)}"


def column_error_table(decisions: Mapping[str, Any], by: Sequence[str] = ("kind", "carry in")):
    """Per kind of column (`by`: columns of `column_decisions`), for each named frame of
    decisions (e.g. one per seed): the share of its digits wrong (%) and how many digits there
    are, as one table: rows the kinds, columns (name, "wrong (%)") and (name, "digits")."""
    parts = {}
    for name, d in decisions.items():
        g = d.groupby(list(by))["right"]
        parts[name] = pd.DataFrame({"wrong (%)": 100 * (1 - g.mean()), "digits": g.size()})
    return pd.concat(parts, axis=1)


def column_tables_by_draw(decisions: Mapping[tuple[str, str], Any]) -> dict[str, pd.DataFrame]:
    """`column_error_table` over the seeds for each draw of `column_decisions_by_draw`'s output
    (keyed (draw, "seed s")), by draw, in the order the draws come."""
    draws = dict.fromkeys(draw for draw, _ in decisions)
    return {n: column_error_table({s: d for (m, s), d in decisions.items() if m == n}) for n in draws}


def wrong_by_draw(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The share of digits wrong (%) of each draw's table (`column_tables_by_draw`), side by side:
    rows the kinds of column, columns (draw, seed)."""
    return pd.concat({n: t.xs("wrong (%)", axis=1, level=1) for n, t in tables.items()}, axis=1)


def wrong_digit_views(decisions: Any, below: int = 2) -> pd.DataFrame:
    """Where the wrong digits of `column_decisions` sit: each view (the column's two digits, a + b,
    and those of the `below` columns under it, "-" under the units), with its carry in, and how
    many digits are wrong in it, most first."""
    digits = decisions.set_index(["sum", "column"])[["a", "b"]]
    wrong = decisions[~decisions["right"]]
    views = {"carry in": wrong["carry in"].to_numpy()}
    for i in range(below + 1):
        at = pd.MultiIndex.from_arrays([wrong["sum"], wrong["column"] - i])
        pair = digits.reindex(at)  # NaN under the units; -1 in the top column, the carry out's
        views["the column" if i == 0 else f"{i} below"] = [
            "-" if np.isnan(x) else "top" if x < 0 else f"{int(x)} + {int(y)}" for x, y in zip(pair["a"], pair["b"])
        ]
    order = ["the column", *[f"{i} below" for i in range(1, below + 1)], "carry in"]
    table = pd.DataFrame(views, columns=order)
    return (
        table.value_counts().rename("wrong digits").reset_index()
        if len(table)
        else table.assign(**{"wrong digits": []})
    )


def plot_column_errors(tables: Mapping[str, Any], path: Path | None = None, title: str | None = None):
    """One panel per kind of draw (`tables`: name -> `column_error_table` over seeds), bars of the
    share of digits wrong (%) per kind of column and carry in, one bar per seed (the palette's
    colours no encoding takes), on a log axis. A short line marks, per kind, what one wrong digit
    would be (100 / the digits of that kind scored): the resolution, and where the axis starts
    from; a seed with no digit wrong is a cross on it, and a panel with no wrong digit says so.
    `title`: the figure's, naming the model, the size and the sums scored."""
    fig, axes = plt.subplots(1, len(tables), figsize=(6.5 * len(tables), 5.2), sharey=True, squeeze=False)
    resolution = min(100 / t.xs("digits", axis=1, level=1).to_numpy().max() for t in tables.values())
    for ax, (name, table) in zip(axes[0], tables.items()):
        wrong, digits = (table.xs(k, axis=1, level=1) for k in ("wrong (%)", "digits"))
        x = np.arange(len(wrong))
        width = 0.8 / wrong.shape[1]
        for i, seed in enumerate(wrong.columns):
            at = x + (i - (wrong.shape[1] - 1) / 2) * width
            some = wrong[seed].to_numpy() > 0
            one = 100 / digits[seed].to_numpy()
            ax.bar(at[some], wrong[seed].to_numpy()[some], width, label=seed, color=ordinal_color(i))
            ax.plot(at[~some], one[~some], "x", color=ordinal_color(i), ms=5)
        one_digit = 100 / digits.max(axis=1).to_numpy()
        ax.hlines(one_digit, x - 0.45, x + 0.45, color="black", lw=0.8)
        if not (wrong.to_numpy() > 0).any():
            ax.text(0.5, 0.6, "no digit wrong on any seed", ha="center", transform=ax.transAxes, fontsize=11)
        ax.set_xticks(x, [f"{kind}, carry in {c}" for kind, c in wrong.index], rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylim(resolution / 2, 100)
        ax.set(title=f"{name}: digits wrong by kind of column", xlabel="the column's kind and its carry in")
    axes[0][0].set_ylabel("digits wrong (%, log scale)")
    seeds = list(tables.values())[0].xs("wrong (%)", axis=1, level=1).columns
    handles = [Patch(facecolor=ordinal_color(i), label=s) for i, s in enumerate(seeds)]
    handles.append(Line2D([], [], color="black", lw=0.8, label="one wrong digit (the resolution)"))
    handles.append(Line2D([], [], marker="x", ls="", color="black", label="that seed: none wrong"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    save_figure(fig, path)
    return fig


def family_table(
    runs: dict[str, list[RunConfig]],
    sizes: Sequence[int] = (1, 2, 3, 4, 6, 8, 16, 32, 64),
    level: float = 0.99,
    results_dir: str | Path = ADDITION_DIR,
    families: Sequence[str] = TEN_FAMILIES,
):
    """Family x size: exact match (%) of each configuration (label -> its seeds' runs), the worst
    of its seeds, at `sizes`; and the first size scored at which a seed falls below `level`
    (NaN if none). Runs without a record are left out; "seeds" counts those in."""
    rows = []
    for label_, configs in runs.items():
        records = [read_record(p) for c in configs if (p := record_path(Path(results_dir), c)).exists()]
        if not records:
            continue
        scores = [family_scores(r, families) for r in records]
        for family in scores[0]:
            worst = {n: min(s[family][n] for s in scores) for n in scores[0][family]}
            row: dict[str, Any] = {"configuration": label_, "family": family, "seeds": len(records)}
            row |= {f"{n}": 100 * worst[n] if n in worst else float("nan") for n in sizes}
            below = [n for n, v in sorted(worst.items()) if v < level]
            row[f"first size < {100 * level:g}%"] = below[0] if below else float("nan")
            rows.append(row)
    if not rows:
        raise ValueError(f"no run of {', '.join(runs)} has a record in {results_dir}; train them with the sweep first")
    return pd.DataFrame(rows).set_index(["configuration", "family"])


def family_lowest(
    runs: dict[str, list[RunConfig]], results_dir: str | Path = ADDITION_DIR, families: Sequence[str] = TEN_FAMILIES
):
    """Family x configuration: the lowest exact match (%) over every size scored and every seed
    (label -> its seeds' runs), and the size where it is lowest (the first such; "none" where every
    size is at 100%)."""
    sizes = family_sizes(max(c.eval_max_len for configs in runs.values() for c in configs))
    table = family_table(runs, sizes=sizes, results_dir=results_dir, families=families)[[str(n) for n in sizes]]
    at = table.idxmin(axis=1).astype(int).astype(object).where(table.min(axis=1) < 100, "none")
    out = pd.DataFrame({"lowest (%)": table.min(axis=1), "at (digits)": at})
    return out.unstack("configuration").swaplevel(axis=1)[list(runs)].reindex(table.index.unique("family"))


def _scored_runs(
    configs: Sequence[RunConfig], results_dir: str | Path, by: str, families: Sequence[str]
) -> Iterator[tuple[Any, dict[str, dict[int, float]] | None]]:
    """(key, `family_scores` of its record, or None untrained) per run: the key its seed
    (`by="seed"`) or what it changes (`addition_settings`)."""
    for cfg in configs:
        rec, key = record_of(results_dir, cfg), cfg.seed if by == "seed" else addition_settings(cfg)
        yield key, family_scores(rec, families) if rec is not None else None


def structured_goal(
    configs: Sequence[RunConfig],
    results_dir: str | Path = ADDITION_DIR,
    by: str = "seed",
    families: Sequence[str] = TEN_FAMILIES,
):
    """The goal (`STRUCTURED_GOAL`) per run, indexed by its seed (`by="seed"`) or by what it
    changes (`by="settings"`, `addition_settings`): the lowest exact match (%) over random sums
    and every family at the sizes to 64, the same at 128 digits, whether each meets its floor,
    and the family and size of the lowest."""
    rows = []
    for key, scores in _scored_runs(configs, results_dir, by, families):
        if scores is None:
            rows.append({by: key, "trained": False})
            continue
        to_64 = min(v for em in scores.values() for n, v in em.items() if n <= 64)
        at_128 = min(em[128] for em in scores.values()) if all(128 in em for em in scores.values()) else float("nan")
        row: dict[str, Any] = {by: key, "trained": True}
        for name, got in (("every size to 64", to_64), ("128 digits", at_128)):
            row[f"{name}: lowest (%)"] = 100 * got
            row[f"{name} >= {100 * STRUCTURED_GOAL[name]:g}%"] = bool(got >= STRUCTURED_GOAL[name])
        family, n = min(
            ((f, n) for f, em in scores.items() for n in em if n <= 64), key=lambda fn: scores[fn[0]][fn[1]]
        )
        row["lowest to 64 at"] = f"{family}, {n} digits"
        rows.append(row)
    return pd.DataFrame(rows).set_index(by)


EXACT_GOAL = 0.99  # every seed, random sums and every family, at every size scored (1 to 256)


def exactness_goal(
    configs: Sequence[RunConfig],
    results_dir: str | Path = ADDITION_DIR,
    by: str = "seed",
    families: Sequence[str] = tuple(SUM_FAMILIES),
):
    """Per run (indexed by its seed, or by what it changes with `by="settings"`): the largest size
    scored, the lowest exact match (%) over random sums and every family at every size scored,
    where it lies, whether it meets `EXACT_GOAL`, and how many (family, size) cells fall short."""
    rows = []
    for key, scores in _scored_runs(configs, results_dir, by, families):
        if scores is None:
            rows.append({by: key, "trained": False})
            continue
        cells = [(v, f, n) for f, em in scores.items() for n, v in em.items()]
        low, family, n = min(cells, key=lambda c: c[0])
        rows.append(
            {
                by: key,
                "trained": True,
                "scored to (digits)": max(n for _, _, n in cells),
                "lowest (%)": 100 * low,
                "lowest at": f"{family}, {n} digits" if low < 1 else "none below 100%",
                f">= {100 * EXACT_GOAL:g}% everywhere": bool(low >= EXACT_GOAL),
                "cells short of it": sum(v < EXACT_GOAL for v, _, _ in cells),
            }
        )
    return pd.DataFrame(rows).set_index(by)


@dataclass(frozen=True)
class ExactnessVerdict:
    """One configuration's seeds judged against `EXACT_GOAL` (`exactness_verdict`): the goal's
    table, and what the notebook reads from it."""

    configs: list[RunConfig]
    goal: pd.DataFrame
    results_dir: Path

    @property
    def trained(self) -> list[RunConfig]:
        """The seeds with a record, in order."""
        return [c for c, done in zip(self.configs, self.goal["trained"]) if done]

    @property
    def all_trained(self) -> bool:
        return len(self.trained) == len(self.configs)

    @property
    def met(self) -> bool:
        """Every seed trained and at least `EXACT_GOAL` in every cell scored."""
        return self.all_trained and bool(self.goal[f">= {100 * EXACT_GOAL:g}% everywhere"].all())

    def statement(self) -> str:
        return (
            f"At least {100 * EXACT_GOAL:g}% at every size scored, on random sums and every family, "
            f"on all {len(self.configs)} seeds: {self.met}"
        )

    def families(self, label: str, sizes: Sequence[int]) -> pd.DataFrame:
        """`family_table` of the trained seeds over every registered family, rounded for reading."""
        table = family_table({label: self.trained}, sizes, results_dir=self.results_dir, families=tuple(SUM_FAMILIES))
        return with_blanks(table.round(1), decimals=1)

    def lowest(self, n: int) -> float:
        """The lowest exact match (%) at `n` digits over random sums, every family and the trained seeds."""
        scores = [family_scores(read_record(record_path(self.results_dir, c)), SUM_FAMILIES) for c in self.trained]
        at_n = [em[n] for fams in scores for em in fams.values() if n in em]
        if not at_n:
            raise ValueError(f"no trained seed was scored at {n} digits")
        return 100 * min(at_n)


def exactness_verdict(configs: Sequence[RunConfig], results_dir: str | Path = ADDITION_DIR) -> ExactnessVerdict:
    """`exactness_goal` of one configuration's seeds, with the verdict read from it."""
    return ExactnessVerdict(list(configs), exactness_goal(configs, results_dir), Path(results_dir))


def digit_pair_table(scores: pd.DataFrame, level: float = EXACT_GOAL) -> pd.DataFrame:
    """From `digit_pair_scores`: per size, the lowest exact match (%) over the 45 pairs and the
    seeds, the pair where it lies, and how many (pair, seed) cells fall under `level`."""
    rows = []
    for n, g in scores.groupby("n"):
        worst = g.loc[g["exact_match"].idxmin()]
        rows.append(
            {
                "digits": n,
                "seeds": g["seed"].nunique(),
                "lowest (%)": 100 * worst["exact_match"],
                "at pair": f"{{{worst['pair'][0]}, {worst['pair'][1]}}} (seed {worst['seed']})",
                f"cells under {100 * level:g}%": int((g["exact_match"] < level).sum()),
                "cells": len(g),
            }
        )
    return pd.DataFrame(rows).set_index("digits")


def far_table(scores: pd.DataFrame) -> pd.DataFrame:
    """From `far_scores`: per size and seed, exact match (%) on random sums, the lowest family and
    the lowest digit pair (over those scored there, counted beside), and the sums scored."""
    rows = []
    for (n, seed), g in scores.groupby(["n", "seed"]):
        families, pairs = g[g["draw"].isin(list(SUM_FAMILIES))], g[g["draw"].str.fullmatch(r"\d\d")]
        random = g.loc[g["draw"] == "random", "exact_match"]
        rows.append(
            {
                "digits": n,
                "seed": seed,
                "random (%)": 100 * random.min() if len(random) else None,
                "families": len(families),
                "lowest family (%)": 100 * families["exact_match"].min() if len(families) else None,
                "pairs": len(pairs),
                "lowest pair (%)": 100 * pairs["exact_match"].min() if len(pairs) else None,
            }
        )
    return pd.DataFrame(rows).set_index(["digits", "seed"])


def far_by_draw(scores: pd.DataFrame, n: int, draws: Sequence[str]) -> pd.DataFrame:
    """From `far_scores`: exact match (%) at size n, one row per draw of `draws` (in that order),
    one column per seed."""
    at_n = scores[(scores["n"] == n) & scores["draw"].isin(list(draws))]
    if at_n.empty:
        raise ValueError(
            f"no draw of {list(draws)[:3]}.. was scored at {n} digits; sizes scored: {sorted(set(scores['n']))}"
        )
    table = 100 * at_n.pivot(index="draw", columns="seed", values="exact_match")
    return table.reindex([d for d in draws if d in table.index]).rename_axis(index=f"{n:,} digits")


def plot_place_attention(table: pd.DataFrame, n: int, column: int, path: Path | None = None, label: str = ""):
    """Heat map from `place_attention`: rows layer and head, columns the operand digits and the
    answer digits at each place offset from the query's column, then every other token."""
    digits = table[table["kind"] != "other"].copy()
    digits["key"] = digits["kind"] + " " + digits["offset"].astype(int).map("{:+d}".format)
    wide = digits.pivot_table(index=["layer", "head"], columns="key", values="weight", sort=False)
    wide["other tokens"] = table[table["kind"] == "other"].set_index(["layer", "head"])["weight"]
    fig, ax = plt.subplots(figsize=(9.5, 6.5))
    image = ax.imshow(wide.to_numpy(), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    for (i, j), v in np.ndenumerate(wide.to_numpy()):
        if v >= 0.05:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6.5, color="white" if v > 0.6 else "black")
    ax.set_xticks(range(wide.shape[1]), wide.columns, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(wide)), [f"L{layer}H{head}" for layer, head in wide.index], fontsize=8)
    ax.set(
        title=f"One answer digit's attention: column {column} of a {n:,}-digit sum{label}",
        xlabel="key: operand or answer digit, at its place minus the query's",
        ylabel="layer and head",
    )
    fig.colorbar(image, ax=ax, label="attention weight", shrink=0.8)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def plot_structured(
    runs: dict[str, list[RunConfig]],
    path: Path | None = None,
    results_dir: str | Path = ADDITION_DIR,
    note: str | None = None,
    families: Sequence[str] = TEN_FAMILIES,
):
    """Exact match against digits for each configuration (label -> its seeds' runs), each in a
    colour of its own (`ordinal_color`: configurations are settings, not encodings) and a line
    style: left on random sums (mean of the seeds, band their range), its y axis zoomed to where
    they lie (said in its label) when all lie high; right the worst of `families` at each size
    scored (the lowest over the families and seeds), on 0-100%. The last configuration is the
    headline: drawn thicker, on top of the others, and first in the legend. `note`: a title for
    the legend (what a label's terms mean)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    styles = ("--", "-.", ":", "-")
    lowest, drawn, last = 100.0, 0, len(runs) - 1
    for i, (name, configs) in enumerate(runs.items()):
        records = [read_record(p) for c in configs if (p := record_path(Path(results_dir), c)).exists()]
        if not records:
            continue
        scores = [family_scores(r, families) for r in records]
        headline = i == last
        color, style = ordinal_color(i), "-" if headline else styles[i % (len(styles) - 1)]
        line = {"color": color, "ls": style, "lw": 3 if headline else 1.6, "zorder": 4 if headline else 2}
        random = pd.DataFrame([s["random"] for s in scores])
        tag = f"{name} ({len(records)} seed{'s' if len(records) > 1 else ''})"
        left.plot(random.columns, 100 * random.mean(), label=tag, **line)
        left.fill_between(random.columns, 100 * random.min(), 100 * random.max(), color=color, alpha=0.15)
        lowest = min(lowest, 100 * float(random.min().min()))
        worst = pd.concat([pd.DataFrame([s[f] for s in scores]).min() for f in scores[0] if f != "random"], axis=1)
        drawn = max(drawn, worst.shape[1])
        right.plot(worst.index, 100 * worst.min(axis=1), marker=".", label=tag, **line)
    top = max(c.eval_max_len for configs in runs.values() for c in configs)
    ticks = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n <= top]
    floor = min(math.floor(lowest), 99) if lowest >= 50 else None  # all high: zoom to where they lie
    zoom = f" (y axis from {floor}%)" if floor is not None else ""
    titles = (
        (left, f"Random sums: exact match against digits{zoom}"),
        (right, f"The worst of the {drawn} structured families" if drawn else "The worst structured family"),
    )
    for ax, title in titles:
        ax.axvline(8, color="gray", ls=":", lw=1, label="longest training size (8 digits)")
        ax.set(title=title, xlabel="digits per operand", xscale="log", ylim=(-3, 105))
        ax.set_xticks(ticks, [str(n) for n in ticks])
        ax.minorticks_off()
    if floor is not None:
        left.set_ylim(floor - 0.05 * (100 - floor), 100 + 0.05 * (100 - floor))
    left.set_ylabel("exact match (%, band = min-max over seeds)")
    right.set_ylabel("lowest exact match (%, families and seeds)")
    handles, labels = left.get_legend_handles_labels()  # the same configurations on both sides
    if len(runs) > 1 and labels[-2].startswith(list(runs)[-1]):  # the headline first (the last line before the rule)
        handles, labels = [handles[-2], *handles[:-2], handles[-1]], [labels[-2], *labels[:-2], labels[-1]]
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=9, title=note, title_fontsize=9)
    rows = math.ceil(len(labels) / 3) + (note is not None)
    fig.tight_layout(rect=(0, (0.15 + 0.27 * rows) / fig.get_figheight(), 1, 1))
    save_figure(fig, path)
    return fig


def addition_length_panels(curves: pd.DataFrame, train_max: int = 8) -> dict[str, pd.DataFrame]:
    """What `plot_addition_lengths` draws, chosen from `addition_curves`: "best", the chapter's
    first recipe (`ADDITION_BEST`, every seed); "pilot", the pilot's other arms that learned in
    distribution (mean over 1-`train_max` digits at least 90%); "encodings", the ablation's runs
    of the best's recipe with another encoding; "ingredients", its runs of the best's encoding
    with one ingredient changed, each with a column "what" in words (`ADDITION_ABLATION`)."""
    arm, enc = ADDITION_BEST
    best_arm = addition_ingredients(addition_run(arm, enc))
    is_best = (curves["arm"] == best_arm) & (curves["encoding"] == enc) & (curves["settings"] == "")
    pilot = curves[(curves["stage"] == "pilot") & ~is_best]
    inside = pilot[pilot["n"] <= train_max].groupby(["arm", "encoding", "settings"], sort=False)["exact_match"].mean()
    learned = inside[inside >= 0.9].index
    pilot = pilot[pilot.set_index(["arm", "encoding", "settings"]).index.isin(learned)]
    ablation = curves[curves["stage"] == "ablation"]
    recipe = (ablation["encoding"] != enc) & (ablation["arm"] == best_arm) & (ablation["settings"] == "")
    words = {}  # an ablation run's (arm, encoding, settings) -> what it changes, in words
    for what, a, e, kw in ADDITION_ABLATION:
        cfg = addition_run(a, e, **kw)
        words[(addition_ingredients(cfg), e, addition_settings(cfg))] = what
    ingredients = ablation[~recipe]
    named = [
        words.get(k, arm_legend(*k)) for k in zip(ingredients["arm"], ingredients["encoding"], ingredients["settings"])
    ]
    return {
        "best": curves[is_best],
        "pilot": pilot,
        "encodings": ablation[recipe],
        "ingredients": ingredients.assign(what=named),
    }


def plot_addition_lengths(
    panels: Mapping[str, pd.DataFrame], grid, paper_nope: float, path: Path | None = None, train_max: int = 8
):
    """Exact match against digits (1-64), in four panels (`addition_length_panels` chooses what
    each draws), each with the chapter's first recipe (mean of its seeds, the band their range)
    drawn light for reference, under the other lines, and a legend of its own lines only: (a)
    the pilot's other arms that learned in distribution (dotted: no window); (b) the ten-task
    grid's addition, the mean over its seeds per encoding, with the paper's NoPE figure as one
    mark at its mean over the test sizes; (c) the ablation's other encodings with the best's
    recipe; (d) the ablation's changes of one ingredient with the best's encoding, named in
    words and drawn in colours no encoding takes (they are not encodings), one colour each. (a)
    and (d) name their lines beside them; one legend below the panels names what every panel
    shares and the encodings' colours, which (b) and (c) use."""
    arm, enc = ADDITION_BEST
    best_arm = addition_ingredients(addition_run(arm, enc))
    fig, axes = plt.subplots(2, 2, figsize=(16, 10), sharey=True)
    (ax_pilot, ax_grid), (ax_enc, ax_ingredient) = axes
    best = panels["best"].groupby("n")["exact_match"]
    seeds = panels["best"]["seed"].nunique()
    shared = []
    for ax in axes.flat:
        shared = [  # light and underneath: a line that follows it, as the window of 1 does, stays seen
            ax.plot(best.mean().index, 100 * best.mean(), color=encoding_color(enc), lw=5, alpha=0.35, zorder=1)[0],
            ax.axvline(train_max, color="gray", ls=":", lw=1),
        ]
        ax.fill_between(best.min().index, 100 * best.min(), 100 * best.max(), color=encoding_color(enc), alpha=0.2)
    shared_labels = [
        f"the first recipe, {arm_legend(best_arm, enc)} ({seeds} seeds), in every panel",
        f"longest training size ({train_max} digits)",
    ]
    learned = [(a, e, st, g) for (a, e, st), g in panels["pilot"].groupby(["arm", "encoding", "settings"], sort=False)]
    # the ingredients every arm drawn shares go to the title; each entry names the rest
    common = set.intersection(*(set(a.split(" + ")) for a, *_ in learned)) if learned else set()
    for a, e, st, g in learned:
        rest = " + ".join(p for p in a.split(" + ") if p not in common)
        entry = arm_legend(rest, e, st) if rest else arm_legend("", e, st).replace(": ", "", 1)
        style = "-" if "window" in a else ":"  # the window: solid
        ax_pilot.plot(g["n"], 100 * g["exact_match"], color=encoding_color(e), ls=style, lw=1.6, label=entry)
    first = next((a for a, *_ in learned), "")
    shared_words = ", ".join(ARM_WORDS.get(p, p) for p in first.split(" + ") if p in common)
    drawn_encodings = set()
    for e, g in grid.groupby("encoding", sort=False):
        m = g.groupby("n")["exact_match"].mean()
        ax_grid.plot(m.index, 100 * m, color=encoding_color(e), ls="--", lw=1.4)
        drawn_encodings.add(e)
    middle, half = (train_max + 1 + 2 * train_max) / 2, (train_max - 1) / 2  # one mark: a mean over sizes
    ax_grid.errorbar(middle, 100 * paper_nope, xerr=half, fmt="D", color="black", ms=5, capsize=3)
    ax_grid.annotate(
        f"the paper's NoPE: its mean\nover {train_max + 1}-{2 * train_max} digits",
        (middle, 100 * paper_nope),
        xytext=(0, 14),
        textcoords="offset points",
        ha="center",
        fontsize=9,
    )
    for e, g in panels["encodings"].groupby("encoding", sort=False):  # the recipe kept, the encoding changed
        ax_enc.plot(g["n"], 100 * g["exact_match"], color=encoding_color(e), lw=1.6)
        drawn_encodings.add(e)
    styles = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
    changes = panels["ingredients"].groupby(["arm", "encoding", "settings"], sort=False)
    for changed, (_, g) in enumerate(changes):  # the encoding kept, one ingredient changed: no encoding's colour
        style, color = styles[changed % len(styles)], ordinal_color(changed)
        ax_ingredient.plot(
            g["n"],
            100 * g["exact_match"],
            color=color,
            ls=style,
            lw=1.8,
            marker="o^sDv"[changed % 5],
            ms=4,
            markevery=0.08,
            zorder=3,
            label=g["what"].iloc[0],
        )  # fmt: skip  (markers: a line on the first recipe's, as the window of 1 is, stays visible)
    titles = {
        ax_pilot: "(a) The pilot's arms that learned in distribution" + (f": {shared_words}" if shared_words else ""),
        ax_grid: "(b) The ten-task grid's addition: the paper's format (mean of its seeds)",
        ax_enc: "(c) Ablation, seed 0: the same recipe, another encoding",
        ax_ingredient: f"(d) Ablation, seed 0: {encoding_title(enc)}, one ingredient changed",
    }
    for ax, title in titles.items():
        ax.set(title=title, xlabel="digits per operand", ylabel="exact match (%)", xscale="log", ylim=(-3, 108))
        ax.set_xticks([1, 2, 4, 8, 16, 32, 64], ["1", "2", "4", "8", "16", "32", "64"])
        ax.minorticks_off()
    for ax in (ax_pilot, ax_ingredient):  # their lines need words: a legend beside each, over no line
        handles, labels = ax.get_legend_handles_labels()
        labels = [textwrap.fill(t, 30) for t in labels]
        title = "dotted: no window" if ax is ax_pilot else None
        ax.legend(handles, labels, fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1), title=title)
    # (b) and (c) draw encodings only: their colours are named once, below, with what every panel shares
    for e in [e for e in encoding_names() if e in drawn_encodings]:
        shared.append(Line2D([], [], color=encoding_color(e), lw=1.6))
        shared_labels.append(f"{encoding_title(e)} (dashed in (b))")
    fig.legend(shared, shared_labels, loc="lower center", ncol=4, fontsize=10)
    fig.tight_layout(rect=(0, 0.95 / fig.get_figheight(), 1, 1))
    save_figure(fig, path)
    return fig


def plot_column_attention(table, n: int, path: Path | None = None):
    """Stacked bars per (layer, head): where the answer queries' attention goes at size n. The
    targets are no encodings: they take the colours no encoding takes (`ordinal_color`)."""
    wide = table.pivot_table(index=["layer", "head"], columns="target", values="weight", sort=False)
    fig, ax = plt.subplots(figsize=(9.5, 3.8))
    bottom = np.zeros(len(wide))
    for i, target in enumerate(["its column", "the column below", "the answer so far", "elsewhere"]):
        ax.bar(range(len(wide)), wide[target], bottom=bottom, label=target, color=ordinal_color(i))
        bottom += wide[target].to_numpy()
    ax.set_xticks(range(len(wide)), [f"L{layer}H{head}" for layer, head in wide.index])
    ax.set(
        title=f"Where each answer digit's query attends, {n}-digit sums (seed 0)",
        xlabel="layer and head",
        ylabel="mean attention weight",
        ylim=(0, 1.02),
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def addition_beside_cited(
    goal: pd.DataFrame,
    goal_structured: pd.DataFrame,
    verdicts: Mapping[str, tuple[str, ExactnessVerdict]],
    far: pd.DataFrame,
) -> pd.DataFrame:
    """The cited works' addition results (`cited_addition`) with this study's rows beneath, each at
    its longest size and as each is scored: the worst seed of the places-and-window runs at 64
    digits (`addition_goal`), of the structured sums at 128 (`structured_goal`), of each
    configuration in `verdicts` ({row: (method, verdict)}) at 256, and of the window of 1 place
    scored with more places (`far`, `far_study`'s scores) at 1,000 and 2,000; a row only where
    every seed is trained. "ratio": the test size over the longest training size."""
    columns = ["method", "train_digits", "test_digits", "exact_match", "bound", "model", "tested_on"]
    cited = cited_addition()[columns].astype({"exact_match": float})
    m = exact_run(0).model
    shape = f"{m.n_layers} layers, {m.n_heads} heads, d {m.d_model}"
    if goal["trained"].all():
        at64 = [read_record(record_path(ADDITION_DIR, c))["exact_match"]["64"] for c in addition_study()[:3]]
        cited.loc["this study"] = ["places + a window over places, RoPE", "1-8", 64, round(100 * min(at64), 1),
                                   "worst of 3 seeds", shape, "256 random sums"]  # fmt: skip
    if goal_structured["trained"].all():
        cited.loc["this study, structured sums"] = [
            "the same, + above the top digit, operands in runs", "1-8", 128,
            round(goal_structured["128 digits: lowest (%)"].min(), 1), "worst of 3 seeds", shape,
            f"256 sums of each of {1 + len(TEN_FAMILIES)} kinds",
        ]  # fmt: skip
    for row, (method, verdict) in verdicts.items():
        if verdict.all_trained:
            cited.loc[f"this study, {row}"] = [method, "1-8", 256, round(verdict.lowest(256), 1), "worst of 3 seeds",
                                               shape, f"256 sums of each of {1 + len(SUM_FAMILIES)} kinds"]  # fmt: skip
    lowest = far.groupby("n")["exact_match"].min()
    for n in (1000, 2000):
        cited.loc[f"this study, window of 1, {n:,} digits"] = [
            "the same, scored with more places", "1-8", n, round(100 * lowest[n], 1), "worst of 3 seeds", shape,
            f"{FAR_COUNT} sums of each of {len(FAR_DRAWS[n])} kinds, room for {FAR_PLACES:,} places",
        ]  # fmt: skip
    cited["ratio"] = (cited["test_digits"] / cited["train_digits"].str.split("-").str[1].astype(int)).round(2)
    return cited


# ---------------------------------------------------------------------------------------------
# 19. One recipe: aligned positions and a local window, from copy to parity (notebook 12)
# ---------------------------------------------------------------------------------------------
# Notebook 09's coupled positions and notebook 11's digit places and window share one idea: each
# output step sits at the position of the input it reads, and sees only a few positions around
# it, so nothing it computes depends on the length. Here that idea is one configuration for any
# task whose steps each read one input token: position coupling, generalized. A task whose answer
# walks its prompt (copy, reverse) is coupled as notebook 09's are; a task that writes its steps
# first (a scratchpad's step outputs: the parity or the sum so far) puts every token of step s at
# the position of input s, and the answer at the last input's (`align_steps`). With RoPE the
# scores read only the difference of two positions, and the window keeps every difference within
# W: the differences a query meets at any length are those it met in training, so no randomized
# offset is needed.


def align_steps(batch: Batch, offsets: Tensor, task: WithScratchpad) -> Batch:
    """Each answer token of a scratchpad task at the position of the input its step reads: a token
    of step s (1 + the step separators before it in the answer) at input s's, and the answer, after
    the last step, at the last input's. A token's position depends only on the tokens before it,
    so greedy decoding can give each its position as it is written. `offsets`: each token's index
    in its sequence; the prompt keeps its positions."""
    seg, tokens = batch.segments, batch.tokens
    B, T = seg.shape
    real = seg >= 0
    seq, _ = _sequence_index(seg)
    sep_at = torch.zeros(int(seq.max()) + 1, dtype=torch.long)
    is_sep = real & (tokens == SEP)
    sep_at[seq[is_sep]] = offsets[is_sep]
    answer = real & (offsets > sep_at[seq])
    separator = answer & (tokens == int(task.encode([STEP_SEPARATOR])[0]))
    before = separator.long().cumsum(1) - separator.long()  # separators before each token, in its row
    start_count = torch.zeros_like(sep_at)
    start_count[seq[is_sep]] = before[is_sep]  # those of earlier sequences in the row
    inputs = sep_at[seq] - 1  # the sequence's prompt length
    step = (1 + before - start_count[seq]).clamp(max=inputs).clamp(min=1)
    row = torch.arange(B)[:, None].expand(B, T)
    source = torch.arange(T)[None, :] - offsets + step  # the column of input `step` of the token's sequence
    positions = batch.positions.clone()
    positions[answer] = batch.positions[row[answer], source[answer]]
    return Batch(batch.tokens, positions, batch.segments, batch.loss_mask)


# Position coupling, generalized: a scratchpad task's steps coupled to the inputs they read.
register_coupling(lambda task: functools.partial(align_steps, task=task) if isinstance(task, WithScratchpad) else None)


# Where the answer ends. RoPE puts positions into the attention weights only, never into the
# values: a query whose window holds one symbol repeated reads the same thing wherever it is.
# Copy's coupling puts the query that predicts EOS one past the last input, where no other token
# sits, so when the last inputs repeat one symbol, the end looks like the middle. Reverse's end
# sits at BOS, a token no other position holds. `end="bos"` (an option of copy) puts copy's end
# there too.
add_task_option("copy", "end", ("sep", "bos"))
TASK_OPTION_WORDS["end-bos"] = "its end at BOS"


def end_at_bos(batch: Batch, offsets: Tensor, task: Task) -> Batch:
    """Copy coupled (`couple_walk`), but the query that predicts EOS (the answer's last token) at
    BOS's position."""
    coupled = couple_walk(batch, offsets, task)
    seg, positions = batch.segments, coupled.positions.clone()
    seq, lengths = _sequence_index(seg)
    B, T = seg.shape
    last = (seg >= 0) & (offsets == lengths[seq] - 2)  # EOS closes a sequence: the token before it
    start = (torch.arange(T)[None, :] - offsets).expand(B, T)
    positions[last] = batch.positions[torch.arange(B)[:, None].expand(B, T)[last], start[last]]
    return Batch(batch.tokens, positions, batch.segments, batch.loss_mask)


register_coupling(lambda task: functools.partial(end_at_bos, task=task) if task.format.get("end") == "bos" else None)


# The recipe, one configuration for every task: RoPE, aligned positions, a window of one position
# (a step reads its own input and the step before it), the study's model and training otherwise.
RECIPE: dict[str, Any] = {"position_coupling": True, "attention_window": 1}
RECIPE_TASKS: dict[str, dict[str, str]] = {  # each task, in the format whose steps the recipe aligns
    "copy": {"end": "bos"},
    "reverse": {},
    "parity": {"scratchpad": "o"},
    "summation": {"scratchpad": "o"},
}
RECIPE_LIMIT = {"sorting": {"scratchpad": "o"}}  # each step needs the least of every input left: no window sees it
RECIPE_SCALE = 10  # scored at every size up to 10 times the longest training size


def recipe_run(task: str, seed: int = 0, **overrides: Any) -> RunConfig:
    """The recipe (`RECIPE`) on `task` (`RECIPE_TASKS`, or its limit, `RECIPE_LIMIT`), trained on
    the task's sizes (copy and reverse 1-16, the paper's tasks 1-8) and scored during training to
    three times the longest, as the grid is."""
    formats = RECIPE_TASKS | RECIPE_LIMIT
    if task not in formats:
        raise _unknown("recipe task", task, formats)
    top = get_task(task).train_max_size
    settings = {"task_options": formats[task], "train_max_len": top, "eval_max_len": 3 * top}
    return make_run(task, "rope", seed, **(settings | RECIPE | overrides))


def recipe_first_copy() -> RunConfig:
    """Copy as notebook 09 couples it, its end one past the last input: the recipe's first try."""
    return recipe_run("copy", task_options={})


def recipe_study(seeds: Sequence[int] = (0, 1, 2)) -> list[RunConfig]:
    """The recipe on every task of `RECIPE_TASKS`, seed by seed (all of seed 0 first); after seed
    0, what was tried once: its limit (`RECIPE_LIMIT`) and copy's first try (`recipe_first_copy`)."""
    runs = [recipe_run(task, seed) for seed in seeds for task in RECIPE_TASKS]
    once = [*(recipe_run(task, 0) for task in RECIPE_LIMIT), recipe_first_copy()] if 0 in seeds else []
    return runs[: len(RECIPE_TASKS)] + once + runs[len(RECIPE_TASKS) :]


RECIPE_DIR = RESULTS_DIR / "recipe"
register_experiment("one-recipe", recipe_study, under_results(RECIPE_DIR), "12_one_recipe")


def given_prompts_batch(task: Task, prompts: Tensor, config: ModelConfig) -> Batch:
    """Sequences of `task` (in its format) on the given prompts ((B, n) token ids) instead of drawn
    ones, at the positions a model of `config` reads: inputs no sampler favours."""
    fixed = task_of_key(task.key)  # a fresh task, made to draw the given prompts
    inner = fixed.inner if isinstance(fixed, WithScratchpad) else fixed  # a scratchpad draws its task's
    inner.draw_prompts = lambda n, batch_size, generator: prompts  # type: ignore[method-assign]
    g = torch.Generator().manual_seed(0)
    batch = single_length_batch(fixed, prompts.shape[1], len(prompts), g)
    return model_positions(config, batch, g, fixed)


def _repeated(task: Task, n: int) -> Tensor:
    return torch.arange(N_SPECIAL, task.vocab_size)[:, None].expand(-1, n)


def _alternating(task: Task, n: int) -> Tensor:
    pairs = [(a, b) for a in range(N_SPECIAL, task.vocab_size) for b in range(N_SPECIAL, task.vocab_size) if a != b]
    return torch.tensor([[(a, b)[i % 2] for i in range(n)] for a, b in pairs])


def _bits(ones: Callable[[int], Tensor]) -> Callable[[Task, int], Tensor]:
    return lambda task, n: N_SPECIAL + ones(n).long()


def _digits_of(d: int) -> Callable[[Task, int], Tensor]:
    return lambda task, n: torch.full((1, n), N_SPECIAL + d)


# Inputs no sampler favours, per task: (B, n) prompts at size n.
HARD_INPUTS: dict[str, dict[str, Callable[[Task, int], Tensor]]] = {
    "copy": {"one symbol repeated (each of 20)": _repeated, "two symbols alternating (each pair)": _alternating},
    "reverse": {"one symbol repeated (each of 20)": _repeated, "two symbols alternating (each pair)": _alternating},
    "parity": {
        "all zeros": _bits(lambda n: torch.zeros(1, n)),
        "all ones": _bits(lambda n: torch.ones(1, n)),
        "a single one (at each place)": _bits(lambda n: torch.eye(n)),
    },
    "summation": {"all nines": _digits_of(9), "all ones": _digits_of(1)},
}


RECIPE_COUNT = 128  # random prompts scored per size (one wrong: 99.2%)
RECIPE_CACHE = RECIPE_DIR / "far.csv"
RECIPE_CACHE_COLUMNS = ["hash", "draw", "n", "count", "exact_match"]


def recipe_sizes(task: str) -> dict[str, list[int]]:
    """The sizes a recipe run is scored at: every size up to `RECIPE_SCALE` times the longest
    training size on random prompts, and the longest, twice, five and ten times it on each
    hard input (`HARD_INPUTS`)."""
    top = get_task(task).train_max_size
    return {"random": list(range(1, RECIPE_SCALE * top + 1)), "hard": [top, 2 * top, 5 * top, RECIPE_SCALE * top]}


def recipe_scores(
    configs: Sequence[RunConfig],
    results_dir: str | Path = RECIPE_DIR,
    count: int = RECIPE_COUNT,
    cache: Path | None = RECIPE_CACHE,
) -> pd.DataFrame:
    """Exact match (0-1) of the whole answer, per trained run, draw ("random", or a hard input's
    name) and size (`recipe_sizes`), with how many prompts it scored: one row per (task in its
    format, seed, draw, n); a run not trained yet has none. Read from `cache` where it holds them, else
    computed (teacher-forced, at the positions the model reads) and added to it."""
    known = read_keyed_cache(cache, RECIPE_CACHE_COLUMNS, "recipe-scores")
    rows = []
    for cfg in configs:
        path = record_path(results_dir, cfg)
        if not path.exists():
            continue
        model, task = None, cfg.make_task()
        sizes = recipe_sizes(cfg.task)
        hard = HARD_INPUTS.get(cfg.task, {})  # the limit has none
        cells = [("random", n) for n in sizes["random"]] + [(d, n) for d in hard for n in sizes["hard"]]
        for draw, n in cells:
            prompts = None if draw == "random" else hard[draw](task, n)
            scored = count if prompts is None else len(prompts)
            key = (cfg.hash, draw, str(n), str(scored))
            if key not in known:
                model = model if model is not None else load_run_model(cfg, results_dir)
                if prompts is None:
                    em = exact_match_by_length(model, task, [n], count, cfg.eval_seed)[n]
                else:
                    batch = given_prompts_batch(task, prompts, cfg.model)
                    with evaluating(model):
                        parts = [
                            exact_match_rows(model, _slice_batch(batch, i, i + 256)) for i in range(0, scored, 256)
                        ]
                    em = float(torch.cat(parts).float().mean())
                known[key] = repr(float(em))
                if cache is not None:  # each cell as it is scored: a stop loses none
                    write_keyed_cache(cache, RECIPE_CACHE_COLUMNS, known)
            got = float(known[key])
            rows.append({"task": task.key, "seed": cfg.seed, "draw": draw, "n": n, "exact_match": got, "count": scored})
    return pd.DataFrame(rows, columns=["task", "seed", "draw", "n", "exact_match", "count"])


# What notebook 12 shows: the runs, exact match far past training, the hard inputs, the goal.
RECIPE_GOAL = 0.99  # exact match at every size up to RECIPE_SCALE times the training maximum, every seed


def plot_aligned_reads(n: int = 6, tasks: Sequence[str] = ("copy", "reverse", "parity"), path: Path | None = None):
    """What each answer query of the recipe can read (`RECIPE`), one panel per task at size n: a
    row per query of the answer, a column per token before it, filled where the causal mask and
    the window over aligned positions let it attend; each token labelled with its position."""
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.2 * len(tasks), 5.6))
    for ax, name in zip(np.atleast_1d(axes), tasks):
        cfg = recipe_run(name)
        task = cfg.make_task()
        g = torch.Generator().manual_seed(0)
        batch = model_positions(cfg.model, single_length_batch(task, n, 1, g), g, task)
        tokens, positions = task.decode(batch.tokens[0].tolist()), batch.positions[0]
        keys = len(tokens) - 1  # EOS is no query
        mask = torch.tril(torch.ones(keys, keys, dtype=torch.bool)) & window_mask(
            positions[:keys], RECIPE["attention_window"]
        )
        first = tokens.index("<sep>")
        ax.imshow(mask[first:].float(), cmap="Blues", vmin=0, vmax=1.4, aspect="auto")
        words = [f"{t} @{int(p)}" for t, p in zip(tokens, positions.tolist())]
        ax.set_xticks(range(keys), words[:keys], rotation=90, fontsize=7)
        ax.set_yticks(
            range(keys - first), [f"{w} -> {tokens[i + 1]}" for i, w in enumerate(words[first:keys], first)], fontsize=7
        )
        ax.set(
            title=f"{task_title(task.key)}, size {n}",
            xlabel="key (token @ position)",
            ylabel="query -> the token it predicts",
        )
    fig.suptitle(f"What each answer query reads: aligned positions, a window of {RECIPE['attention_window']} position")
    fig.tight_layout()
    save_figure(fig, path)
    return fig


def recipe_runs(copy_run: float, results_dir: str | Path = RECIPE_DIR) -> pd.DataFrame:
    """Per recipe run (task, seed): whether trained, its compute in copy runs, exact match in
    distribution (%, the mean over the training sizes), its last training loss, and the wall time
    its record holds (minutes, this machine's, with other training beside it)."""
    rows = []
    for cfg in recipe_study():
        path = record_path(Path(results_dir), cfg)
        rec = read_record(path) if path.exists() else None
        row = {"task": task_title(cfg.make_task().key), "seed": cfg.seed, "trained": rec is not None}
        row |= {"copy runs": run_compute_flops(cfg, sample_steps=50) / copy_run}
        if rec is not None:
            row |= {"in distribution (%)": 100 * rec["in_distribution_mean"], "last loss": loss_at(rec, cfg.steps)}
            row |= {"wall (min)": rec["wall_time_s"] / 60}
        rows.append(row)
    return pd.DataFrame(rows).set_index(["task", "seed"])


def recipe_goal(scores: pd.DataFrame) -> pd.DataFrame:
    """Per task and seed of `recipe_scores`: the lowest exact match (%) over every size on random
    prompts and the size where it is lowest (the first), the longest size reached with every size
    up to it at `RECIPE_GOAL`, the lowest on the hard inputs, and whether the goal is met (every
    random size and every hard input at `RECIPE_GOAL`)."""
    rows = []
    for (task, seed), g in scores.groupby(["task", "seed"], sort=False):
        random, hard = g[g["draw"] == "random"].sort_values("n"), g[g["draw"] != "random"]
        low = random.loc[random["exact_match"].idxmin()]
        below = random[random["exact_match"] < RECIPE_GOAL]["n"]
        reach = int(below.min()) - 1 if len(below) else int(random["n"].max())
        rows.append({"task": task, "seed": seed, "sizes to": int(random["n"].max())})
        rows[-1] |= {"random: lowest (%)": 100 * low["exact_match"], "at size": int(low["n"]), "holds to": reach}
        rows[-1] |= {"hard: lowest (%)": 100 * hard["exact_match"].min()}
        rows[-1] |= {"goal": bool(len(below) == 0 and (hard["exact_match"] >= RECIPE_GOAL).all())}
    return pd.DataFrame(rows).set_index(["task", "seed"])


def recipe_hard_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Exact match (%) on each hard input, per task, draw and size: the lowest seed's, with the
    prompts each scored."""
    hard = scores[scores["draw"] != "random"].assign(task=lambda f: f["task"].map(task_title))
    table = hard.groupby(["task", "draw", "n"], sort=False).agg(
        lowest=("exact_match", "min"), prompts=("count", "first")
    )
    table["lowest"] *= 100
    table["prompts"] = table["prompts"].astype("Int64")
    return table.rename(columns={"lowest": "lowest seed (%)"}).unstack("n").sort_index(axis=1)


def longest_repeat(prompts: Tensor) -> Tensor:
    """(B,): the longest stretch of one symbol repeated in each prompt (B, n)."""
    same = torch.cat([torch.zeros(len(prompts), 1, dtype=torch.bool), prompts[:, 1:] == prompts[:, :-1]], dim=1)
    longest = torch.ones(len(prompts), dtype=torch.long)
    current = torch.ones(len(prompts), dtype=torch.long)
    for j in range(1, prompts.shape[1]):
        current = torch.where(same[:, j], current + 1, torch.ones_like(current))
        longest = torch.maximum(longest, current)
    return longest


def copy_misses(
    cfg: RunConfig, sizes: Sequence[int], repeats: Sequence[int] = (3, 4), count: int = RECIPE_COUNT
) -> pd.DataFrame:
    """Per size, on the random prompts `recipe_scores` scores: how many of a copy run's answers
    are wrong, and for each k in `repeats`, how many of the prompts, and of the wrong ones, hold one
    symbol repeated at least k times in a row (a window that sees one symbol reads the same anywhere)."""
    model, task = load_run_model(cfg, RECIPE_DIR), cfg.make_task()
    rows = []
    with evaluating(model):
        for n in sizes:
            batch = evaluation_batch(task, n, count, cfg.eval_seed, cfg.model)
            wrong = ~exact_match_rows(model, batch)
            longest = longest_repeat(batch.tokens[:, 1 : n + 1])  # BOS is column 0
            rows.append({"n": n, "prompts": count, "wrong": int(wrong.sum())})
            for k in repeats:
                rows[-1] |= {f"with a run of {k}": int((longest >= k).sum())}
                rows[-1] |= {f"wrong, with a run of {k}": int((wrong & (longest >= k)).sum())}
    return pd.DataFrame(rows).set_index("n")


def recipe_cited(path: Path | None = None) -> pd.DataFrame:
    """The works this chapter's recipe draws on, as each reports its own scale
    (results/published/recipe_cited.csv, with its sources)."""
    return pd.read_csv(path or PUBLISHED_DIR / "recipe_cited.csv", comment="#").set_index("study")


def plot_recipe_lengths(scores: pd.DataFrame, path: Path | None = None):
    """Exact match (%) against size on random prompts, one panel per task (in its format), a line
    per seed, the seeds drawn thick to thin so that lines that coincide stay seen; the longest
    training size dashed, `RECIPE_GOAL` dotted."""
    tasks = list(dict.fromkeys(scores["task"]))
    cols = min(3, max(1, len(tasks)))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows + 0.8), sharey=True, squeeze=False)
    styles = [{"lw": 5, "alpha": 0.45}, {"lw": 2.4, "ls": "--"}, {"lw": 1.2, "ls": ":"}]
    for ax, task in zip(axes.flat, tasks):
        random = scores[(scores["task"] == task) & (scores["draw"] == "random")]
        for seed, g in random.groupby("seed"):
            style = styles[seed % len(styles)]
            ax.plot(g["n"], 100 * g["exact_match"], color=ordinal_color(seed), label=f"seed {seed}", **style)
        top = task_of_key(task).train_max_size
        ax.axvline(top, color="black", ls="--", lw=1, label="longest training size")
        ax.axhline(100 * RECIPE_GOAL, color="gray", ls=":", lw=1, label=f"{100 * RECIPE_GOAL:g}%")
        ax.set(title=f"{task_title(task)}: trained to {top}", xlabel="size n", ylim=(-3, 103))
    for ax in axes.flat[len(tasks) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("exact match, whole answer (%)")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    by_label = dict(zip(labels, handles))
    fig.legend(by_label.values(), by_label.keys(), loc="lower center", ncol=len(by_label), fontsize=9)
    per_size = "/".join(str(c) for c in sorted(set(scores.loc[scores["draw"] == "random", "count"])))
    fig.suptitle(f"Exact match to {RECIPE_SCALE}x the longest training size, random prompts ({per_size} a size)")
    fig.tight_layout(rect=(0, 0.7 / fig.get_figheight(), 1, 1))
    save_figure(fig, path)
    return fig


# ---------------------------------------------------------------------------------------------
# 20. Command line
# ---------------------------------------------------------------------------------------------
def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= low, or argparse's one-line error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is out of range; valid: an integer >= {low}")
        return value

    return parse


def _folder(text: str) -> Path:
    """An argparse type: a folder that exists, or can be made, and can be written to."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    existing = next((q for q in (path, *path.parents) if q.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text} cannot be written to (its nearest existing folder is {existing})")
    return path


@dataclass(frozen=True)
class Command:
    """A subcommand of `python -m lengen_helpers`: its help line, the function that adds its
    arguments to its parser, and the one that runs it (given the parser, for usage errors)."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.ArgumentParser, argparse.Namespace], None]


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None]):
    """Register the decorated function as subcommand `name` (`COMMANDS`)."""

    def register(run: Callable[[argparse.ArgumentParser, argparse.Namespace], None]):
        COMMANDS[name] = Command(help, arguments, run)
        return run

    return register


def _train_arguments(tr: argparse.ArgumentParser) -> None:
    tr.add_argument("--task", required=True, choices=sorted(TASKS))
    tr.add_argument("--encoding", required=True, choices=sorted(ENCODINGS))
    tr.add_argument("--seed", type=_int_at_least(0), default=0)
    tr.add_argument(
        "--steps",
        type=_int_at_least(0),
        default=RunConfig.steps,
        help="training steps (0: an untrained baseline); the warm-up is 250 steps, or all of them if fewer",
    )
    tr.add_argument("--results", type=_folder, default=RESULTS_DIR)


@command("train", "train and evaluate one run, saving its record (and weights)", _train_arguments)
def _train_command(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    try:  # a setting out of range is a usage error, reported before any work
        cfg = make_run(
            args.task, args.encoding, args.seed, steps=args.steps, warmup_steps=min(RunConfig.warmup_steps, args.steps)
        )
    except ValueError as e:
        p.error(str(e))
    rec = run_and_save(cfg, args.results, progress=True)
    first_test = str(cfg.train_max_len + 1)
    untrained = " (an untrained baseline: 0 steps)" if cfg.steps == 0 else ""
    print(
        f"{cfg.name}{untrained}: in-distribution {rec['in_distribution_mean']:.3f}, "
        f"n={first_test} {rec['exact_match'].get(first_test, float('nan')):.3f}, {rec['wall_time_s']:.0f} s "
        f"-> {record_path(args.results, cfg)}"
    )


def _sweep_arguments(sw: argparse.ArgumentParser) -> None:
    sw.add_argument(
        "--grid",
        nargs="+",
        choices=sorted(EXPERIMENTS),
        default=["main"],
        help="named sets of runs, each kept in its own folder under --results (default: the main "
        "grid, shaped by --tasks, --encodings, --seeds, --steps); sets that share a folder share "
        "one pool of workers, in the order given",
    )
    sw.add_argument("--tasks", nargs="+", default=["copy", "reverse"], choices=sorted(TASKS))
    sw.add_argument(
        "--encodings", nargs="+", default=None, choices=sorted(ENCODINGS), help="default: every registered encoding"
    )
    sw.add_argument("--seeds", nargs="+", type=_int_at_least(0), default=list(range(5)))
    sw.add_argument("--steps", type=_int_at_least(0), default=RunConfig.steps)
    sw.add_argument("--workers", type=_int_at_least(1), default=None, help="processes (default: one per core)")
    sw.add_argument("--results", type=_folder, default=RESULTS_DIR)
    sw.add_argument("--scheduler", default=None, help="a Dask scheduler address, to run on a cluster")


def _results_argument(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--results", type=_folder, default=RESULTS_DIR)


@command("sweep", "run the grid's missing runs (resumable)", _sweep_arguments)
def _sweep_command(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    warmup = min(RunConfig.warmup_steps, args.steps)
    by_folder: dict[Path, list[RunConfig]] = {}
    try:
        for name in dict.fromkeys(args.grid):
            chosen = EXPERIMENTS[name]
            configs = (
                grid(args.tasks, args.encodings, args.seeds, steps=args.steps, warmup_steps=warmup)
                if name == "main"
                else chosen.runs()
            )
            by_folder.setdefault(chosen.results_dir(args.results), []).extend(configs)
    except ValueError as e:
        p.error(str(e))
    for results, configs in by_folder.items():
        configs = list({c.hash: c for c in configs}.values())  # a run listed by two sets trains once
        t0 = time.perf_counter()
        todo = sum(not record_path(results, c).exists() for c in configs)
        if args.scheduler:
            from distributed import Client

            with Client(args.scheduler) as client:
                recs = sweep(configs, results, executor=client.get_executor())
        else:
            recs = sweep(configs, results, max_workers=args.workers)
        print(
            f"{len(recs)} runs in {results}, {todo} trained now ({time.perf_counter() - t0:.0f} s wall; "
            f"logged in {results / 'sweeps.jsonl'})"
        )


def _bench_train_arguments(bt: argparse.ArgumentParser) -> None:
    bt.add_argument("--steps", type=_int_at_least(1), default=20)
    bt.add_argument("--repeats", type=_int_at_least(1), default=5)
    bt.add_argument("--out", type=Path, default=BENCH_DIR / "training.json")


@command(
    "experiments",
    "every named set of runs (`sweep --grid NAME`): runs, models, steps, folder, notebook",
    _results_argument,
)
def _experiments_command(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_colwidth", 40):
        print(experiments_table(args.results).to_string())


@command("bench-train", "our training step vs GPT2LMHeadModel, and FLOP/s vs matmul peak", _bench_train_arguments)
def _bench_train_command(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    res = bench_training(args.steps, args.repeats)
    for k, v in res["ms_per_step"].items():
        print(f"{k:32s} {v:7.1f} ms/step")
    print(f"GPT2LMHeadModel / ours on the same padded batches: {res['speedup_vs_gpt2_same_padded_batches']:.2f}x")
    print(f"GPT2LMHeadModel (padded) / ours (packed, as trained): {res['speedup_vs_gpt2_as_trained']:.2f}x")
    print(
        f"useful {res['achieved_gflop_per_s']:.1f} GFLOP/s = {res['fraction_of_matmul_peak']:.0%} of "
        f"this machine's {res['matmul_peak_gflop_per_s']:.1f} GFLOP/s single-thread matmul"
    )
    _atomic_json(args.out, res)


def _bench_kv_arguments(bk: argparse.ArgumentParser) -> None:
    bk.add_argument("--runs", type=_int_at_least(1), default=3, help="independent runs, each in a fresh process")
    bk.add_argument("--repeats", type=_int_at_least(1), default=5, help="rounds inside each run")
    bk.add_argument("--out", type=Path, default=BENCH_DIR / "kv_cache.json")


@command("bench-kv", "greedy generation: cached vs uncached, ours vs GPT2LMHeadModel.generate", _bench_kv_arguments)
def _bench_kv_command(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    res = bench_kv_runs(args.runs, args.repeats)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.float_format", "{:.3f}".format):
        # one row per method or ratio, one column per (batch, new tokens)
        print(f"median over {len(res['runs'])} runs (each the median of {args.repeats} rounds):")
        print(kv_summary(res).T)
        print("\neach ratio, least to greatest over the runs:")
        print(kv_ratio_range(res).T)
    for kind, nbytes in res["runs"][0]["cache_bytes_batch64_144_positions"].items():
        print(f"{kind} cache, batch 64 x 144 positions: {nbytes:,} bytes ({nbytes / 2**20:.2f} MiB), allocated once")
    _atomic_json(args.out, res)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m lengen_helpers COMMAND ...`: one of `COMMANDS`."""
    p = argparse.ArgumentParser(prog="python -m lengen_helpers", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, c in COMMANDS.items():
        c.arguments(sub.add_parser(name, help=c.help))
    args = p.parse_args(argv)
    COMMANDS[args.cmd].run(p, args)


if __name__ == "__main__":
    # re-import so that pickled functions belong to `lengen_helpers`, not `__main__`
    import lengen_helpers

    lengen_helpers.main()
