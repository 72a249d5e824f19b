"""The teaching core (module sections 1-8) names nothing defined after it: a chapter extends it by
registering (a task, a task wrapper, an encoding, a position scheme), never by editing it."""

import ast
import re
from pathlib import Path

import torch

import lengen_helpers as L

SOURCE = Path(L.__file__).read_text()


def late_references(source: str) -> list[str]:
    """'line:definition -> name' for each name that a top-level definition of sections 1-8 uses
    and that only a later section defines."""
    lines = source.splitlines()
    core_end = next(i for i, line in enumerate(lines, 1) if re.match(r"# 9\. ", line))
    tree = ast.parse(source)
    first: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first.setdefault(node.name, node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        first.setdefault(name.id, node.lineno)
    found = []
    for node in tree.body:
        if node.lineno >= core_end:
            break
        for name in ast.walk(node):
            if isinstance(name, ast.Name) and first.get(name.id, 0) > core_end:
                found.append(f"{node.lineno}:{getattr(node, 'name', type(node).__name__)} -> {name.id}")
    return sorted(set(found))


def test_the_core_names_nothing_defined_after_it():
    assert late_references(SOURCE) == []


def test_the_check_finds_a_reference_planted_into_a_chapter():
    planted = SOURCE.replace(
        "    for wrap in TASK_WRAPPERS:\n", "    WithScratchpad  # planted\n    for wrap in TASK_WRAPPERS:\n", 1
    )
    assert planted != SOURCE
    assert [r.split(" -> ")[1] for r in late_references(planted)] == ["WithScratchpad"]


def test_a_position_scheme_registered_from_outside_sets_the_positions(monkeypatch):
    monkeypatch.setattr(L, "POSITION_SCHEMES", list(L.POSITION_SCHEMES))
    shift = L.PositionScheme(
        "shift by 5",
        active=lambda config: config.encoding == "rope",
        apply=lambda config, batch, offsets, task, gen: L.Batch(
            batch.tokens, offsets + 5, batch.segments, batch.loss_mask
        ),
    )
    L.register_position_scheme(shift)
    task, gen = L.get_task("copy"), torch.Generator().manual_seed(0)
    batch = L.padded_training_batch(task, [3, 4], gen)
    moved = L.model_positions(L.ModelConfig(encoding="rope"), batch, gen, task)
    assert torch.equal(moved.positions, batch.positions.expand_as(batch.segments) + 5)
    assert torch.equal(L.model_positions(L.ModelConfig(encoding="nope"), batch, gen, task).positions, batch.positions)
    assert L._own_positions(L.ModelConfig(encoding="rope")) and not L._own_positions(L.ModelConfig(encoding="nope"))
    try:
        L.register_position_scheme(shift)
    except ValueError as e:
        assert "registered already" in str(e)
    else:
        raise AssertionError("a second scheme of the same name was accepted")


def test_a_scheme_s_room_check_replaces_the_learned_table_s_length_check(monkeypatch):
    monkeypatch.setattr(L, "POSITION_SCHEMES", list(L.POSITION_SCHEMES))
    model = L.ModelConfig(encoding="learned", max_positions=40)
    try:
        L.RunConfig(task="copy", model=model, eval_max_len=48)
    except ValueError as e:
        assert "max_positions=40" in str(e)
    else:
        raise AssertionError("the learned table accepted lengths past its positions")
    seen = []
    L.register_position_scheme(
        L.PositionScheme(
            "fixed",
            active=lambda c: c.encoding == "learned",
            apply=lambda c, b, o, t, g: b,
            check_room=lambda config, task, n: seen.append(n),
        )
    )
    L.RunConfig(task="copy", model=model, eval_max_len=48)
    assert seen == [48]


def test_a_task_wrapper_registered_from_outside_wraps_every_task(monkeypatch):
    monkeypatch.setattr(L, "TASK_WRAPPERS", list(L.TASK_WRAPPERS))

    class Tagged(L.Copy):
        pass

    L.register_task_wrapper(lambda task: Tagged() if task.name == "copy" else task)
    assert type(L.get_task("copy")) is Tagged and type(L.get_task("reverse")) is L.Reverse


def test_a_task_s_scoring_hook_decides_what_its_record_keeps(monkeypatch):
    monkeypatch.setattr(
        L.Copy, "score_run", lambda self, model, lengths, n, seed: ({k: 0.5 for k in lengths}, {"mine": {"1": 1.0}})
    )
    cfg = L.RunConfig(
        task="copy", model=L.ModelConfig(encoding="nope"), steps=0, train_max_len=2, eval_max_len=2, eval_per_length=4
    )
    _, record = L._train_run(cfg, None, 0, False)
    assert record["mine"] == {"1": 1.0} and set(record["exact_match"].values()) == {0.5}
