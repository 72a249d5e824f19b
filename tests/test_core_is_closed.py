"""The teaching core (module sections 1-8) names nothing defined after it: a chapter extends it by
registering (a task, a task wrapper, an encoding, a position scheme, model options), never by
editing it."""

import ast
import dataclasses
import functools
import io
import re
import tokenize
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import snapshot_registries
from support import run_doc_example

import lengen_helpers as L

SOURCE = Path(L.__file__).read_text()
ROOT = Path(L.__file__).parent


def first_definitions(tree: ast.Module) -> dict[str, int]:
    """Each name the module defines at its top level (a function, a class, an assigned name), with
    the line of its first definition."""
    first: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first.setdefault(node.name, node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        first.setdefault(name.id, node.lineno)
    return first


def late_references(source: str) -> list[str]:
    """'line:where -> name' for each thing in sections 1-8 that belongs to a later section: a name
    that a top-level definition uses and only a later section defines; an attribute of that name;
    a model option a chapter registers (`ModelOptions`), read as an attribute or by `option`; and, in
    a comment or a string (the module's own docstring, its table of contents, aside), a backticked
    name of either kind or a mention of a later section."""
    lines = source.splitlines()
    core_end = next(i for i, line in enumerate(lines, 1) if re.match(r"# 9\. ", line))
    tree = ast.parse(source)
    first = first_definitions(tree)
    later = {name for name, line in first.items() if line > core_end}
    chapter = later | set(L.model_option_defaults())

    def in_text(text: str) -> list[str]:
        named = [w for w in re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)", text) if w in chapter]
        return named + re.findall(r"\bsections? (?:9|[12]\d)\b", text)

    found = []
    for node in tree.body[1:]:  # the module docstring lists every section
        if node.lineno >= core_end:
            break
        where = getattr(node, "name", type(node).__name__)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in later:
                found.append(f"{node.lineno}:{where} -> {sub.id}")
            elif isinstance(sub, ast.Attribute) and sub.attr in chapter:
                found.append(f"{sub.lineno}:{where} -> .{sub.attr}")
            elif (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr == "option"
                and any(isinstance(a, ast.Constant) and a.value in chapter for a in sub.args)
            ):
                found.append(f"{sub.lineno}:{where} -> option({sub.args[0].value!r})")
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                found += [f"{sub.lineno}:{where} (text) -> {w}" for w in in_text(sub.value)]
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.start[0] < core_end:
            found += [f"{tok.start[0]}:comment -> {w}" for w in in_text(tok.string)]
    return sorted(set(found))


def test_the_core_names_nothing_defined_after_it():
    assert late_references(SOURCE) == []


def test_the_check_finds_a_reference_planted_into_a_chapter():
    planted = SOURCE.replace(
        "    for wrap in TASK_WRAPPERS:\n", "    WithScratchpad  # planted\n    for wrap in TASK_WRAPPERS:\n", 1
    )
    assert planted != SOURCE
    assert [r.split(" -> ")[1] for r in late_references(planted)] == ["WithScratchpad"]


def test_the_check_finds_a_chapter_setting_read_in_the_core():
    planted = SOURCE.replace(
        "        for limit in attention_masks(self.config):\n",
        "        if self.config.option('digit_places'):\n            pass\n"
        "        for limit in attention_masks(self.config):\n",
        1,
    )
    assert planted != SOURCE
    assert [r.split(" -> ")[1] for r in late_references(planted)] == ["option('digit_places')"]


def test_the_check_finds_a_comment_or_docstring_about_a_later_section():
    planted = SOURCE.replace(
        "TASKS: dict[str, type[Task]] = {}\n", "TASKS: dict[str, type[Task]] = {}  # see section 15\n", 1
    )
    assert [r.split(" -> ")[1] for r in late_references(planted)] == ["section 15"]
    planted = SOURCE.replace('"""Greedy decoding:', '"""Greedy decoding (as `scratchpad_metrics` reads it):', 1)
    assert [r.split(" -> ")[1] for r in late_references(planted)] == ["scratchpad_metrics"]


def presentation_parts(source: str) -> list[tuple[int, set[str]]]:
    """Each chapter's part of tables, figures and verdicts (from its line "# What notebook ... show"
    to the next section's banner): its first line and the names of the definitions it holds."""
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines, 1) if re.match(r"# What notebooks? [\d ,and]+ shows?:", line)]
    banners = [i for i, line in enumerate(lines, 1) if re.match(r"# \d+\. ", line)]
    defs = [n for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    parts = []
    for start in starts:
        end = min([b for b in banners if b > start], default=len(lines) + 1)
        parts.append((start, {n.name for n in defs if start < n.lineno < end}))
    return parts


def presentation_references(source: str) -> list[str]:
    """'line:where -> name' for each name that a definition above a chapter's part of tables,
    figures and verdicts uses and only that part defines: a chapter's mechanism and its runs (and
    everything before them) never call what its notebook shows."""
    used = [
        (node, {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}) for node in ast.parse(source).body[1:]
    ]
    found = []
    for start, shown in presentation_parts(source):
        for node, names in used:
            if node.lineno >= start:
                break
            where = getattr(node, "name", type(node).__name__)
            found += [f"{node.lineno}:{where} -> {name}" for name in sorted(names & shown)]
    return found


def test_the_mechanisms_call_nothing_of_what_the_notebooks_show():
    assert presentation_references(SOURCE) == []
    parts = presentation_parts(SOURCE)
    shown = set().union(*(names for _, names in parts))
    assert len(parts) == 10  # notebooks 01-02, 03-04, 05, 06, 07, 08, 09, 10, 11 and 12
    assert {"AttentionExplorer", "scratchpad_claims", "structured_goal", "plot_mrr", "checks_table"} <= shown
    assert not {"bootstrap_means", "scratchpad_metrics", "family_exact_match", "train_run", "plot_by_length"} & shown
    planted = SOURCE.replace(
        "def carry_into_zeros(a: Tensor, b: Tensor) -> float:\n",
        "def carry_into_zeros(a: Tensor, b: Tensor) -> float:\n    plot_structured  # planted\n",
        1,
    )
    assert planted != SOURCE
    assert [r.split(" -> ")[1] for r in presentation_references(planted)] == ["plot_structured"]


def test_the_model_config_holds_only_the_model_s_own_settings():
    own = {f.name for f in dataclasses.fields(L.ModelConfig)} - {"options"}
    assert not own & set(L.model_option_defaults())
    chapters = {"digit_places", "attention_window", "random_positions", "position_coupling"}
    assert chapters | {"scale_embeddings", "position_init_std"} <= set(L.model_option_defaults())
    assert own == {
        *("encoding", "d_model", "n_heads", "n_layers", "d_ff", "pre_norm", "dropout", "max_positions"),
        *("rope_fraction", "rope_base", "t5_num_buckets", "t5_max_distance"),
    }


def test_a_registered_build_hook_changes_the_model_once_built():

    @dataclasses.dataclass(frozen=True)
    class Zeroed:
        zero_head: bool = False

    def build(model):
        if model.config.option("zero_head"):
            torch.nn.init.zeros_(model.lm_head.weight)

    L.register_model_options(L.ModelOptions(Zeroed, build=build))
    assert L.DecoderOnlyLM(L.ModelConfig(options={"zero_head": True})).lm_head.weight.abs().sum() == 0
    assert L.DecoderOnlyLM(L.ModelConfig()).lm_head.weight.abs().sum() > 0
    scaled = L.DecoderOnlyLM(L.ModelConfig(d_model=16, n_heads=2, options={"scale_embeddings": True}))
    assert scaled.emb_scale == 4.0 and L.DecoderOnlyLM(L.ModelConfig()).emb_scale == 1.0


def test_a_position_scheme_registered_from_outside_sets_the_positions():
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


def test_a_scheme_s_room_check_replaces_the_learned_table_s_length_check():
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


def test_a_task_wrapper_registered_from_outside_wraps_every_task():

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


def test_model_config_is_a_plain_dataclass_whose_options_are_read_by_name():
    assert "__getattr__" not in vars(L.ModelConfig) and L.ModelConfig.__dataclass_params__.init  # its own __init__
    cfg = L.ModelConfig(encoding="rope", options={"digit_places": 40, "attention_window": 0})
    assert cfg.options == {"digit_places": 40}  # an option at its default is dropped: one config, one hash
    assert cfg.option("digit_places") == 40 and cfg.option("attention_window") == 0
    with pytest.raises(AttributeError):
        cfg.digit_places  # noqa: B018
    with pytest.raises(ValueError, match=r"unknown model option 'digit_place'.*digit_places"):
        cfg.option("digit_place")
    assert L.ModelConfig.from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["digit_places"] == 40
    assert dataclasses.replace(cfg, options=cfg.options | {"digit_places": 80}).option("digit_places") == 80


def test_model_options_registered_from_outside_validate_hash_vary_the_encoding_and_mask():

    @dataclasses.dataclass
    class Mine:
        blind_spot: int = L.ranged(0, 0)  # > 0: a query never sees the key that many positions back

    class LouderALiBi(L.ALiBi):
        def distance(self, distance):
            return 2 * distance

    def check(config):
        if config.option("blind_spot") and config.encoding == "learned":
            raise ValueError("blind_spot is not for the learned table")

    def blind(config):
        spot = config.option("blind_spot")
        return (lambda p: (p[..., :, None] - p[..., None, :]) != spot) if spot else None

    louder = lambda c: LouderALiBi if c.option("blind_spot") and c.encoding == "alibi" else None  # noqa: E731
    L.register_model_options(L.ModelOptions(Mine, check=check, encoding=louder, attention_mask=blind))
    plain, mine = L.make_run("copy", "alibi", 0), L.make_run("copy", "alibi", 0, blind_spot=1)
    assert plain.hash == L.make_run("copy", "alibi", 0, blind_spot=0).hash  # at its default: the same run
    assert mine.hash != plain.hash and mine.model.option("blind_spot") == 1 and plain.model.option("blind_spot") == 0
    assert mine.to_dict()["model"]["blind_spot"] == 1 and L.RunConfig.from_dict(mine.to_dict()) == mine
    with pytest.raises(ValueError, match=r"Mine.blind_spot=-1 is out of range"):
        L.ModelConfig(options={"blind_spot": -1})
    with pytest.raises(ValueError, match="not for the learned table"):
        L.ModelConfig(encoding="learned", options={"blind_spot": 1})
    with pytest.raises(ValueError, match=r"no model setting 'blind_spott'; valid: .*blind_spot"):
        L.ModelConfig(options={"blind_spott": 1})
    with pytest.raises(ValueError, match="registered already"):
        L.register_model_options(L.ModelOptions(Mine))
    model = L.DecoderOnlyLM(mine.model, 12).eval()
    assert type(model.pos) is LouderALiBi
    _, internals = model(torch.tensor([[1, 2, 3, 4]]), return_internals=True)
    weights = internals.attentions[0][0, 0]
    assert weights[2, 1] == 0 and weights[3, 2] == 0 and weights[2, 0] > 0  # one position back: never seen
    assert L._uncached_only(mine.model) and not L._uncached_only(plain.model)


def test_the_documented_model_setting_works_as_written():
    cfg = run_doc_example("Adding a model setting")["configs"][0]
    assert cfg.model.option("recent_keys") == 8 and cfg.hash != L.make_run("copy", "nope", seed=0).hash
    model = L.DecoderOnlyLM(cfg.model, 12).eval()
    _, internals = model(torch.arange(1, 11)[None], return_internals=True)
    seen = internals.attentions[0][0, 0] > 0
    assert seen[9].tolist() == [False, False] + [True] * 8 and seen[3].tolist() == [True] * 4 + [False] * 6
    assert L._uncached_only(cfg.model)


def test_one_snapshot_puts_back_every_registry_a_test_adds_to():
    restore = snapshot_registries()
    before = {name: list(value) for name, value in vars(L).items() if name.isupper() and type(value) in (dict, list)}

    @L.register_task
    class Echo(L.Copy):
        name = "echo"

    L.register_position_scheme(L.PositionScheme("never", active=lambda c: False, apply=lambda *a: a[1]))
    L.register_experiment("planted", lambda: [], ".", "03_train_the_grid")
    L.register_sum_family("planted", "nothing")(lambda n, count, g: (None, None))
    assert "echo" in L.TASKS and "planted" in L.EXPERIMENTS and "planted" in L.SUM_FAMILIES
    restore()
    after = {name: list(value) for name, value in vars(L).items() if name.isupper() and type(value) in (dict, list)}
    assert after == before and "echo" not in L.TASKS and len(L.POSITION_SCHEMES) == len(before["POSITION_SCHEMES"])


def section_of(source: str) -> Callable[[int], int]:
    """The module section (its banner's number, `# N. Title`) that holds a line."""
    starts = [
        (i, int(m.group(1))) for i, line in enumerate(source.splitlines(), 1) if (m := re.match(r"# (\d+)\. ", line))
    ]
    return lambda line: max([n for start, n in starts if start <= line], default=0)


def forward_references(source: str) -> list[str]:
    """'line:where (section) -> name (section)' for each name a top-level definition uses that
    only a later section defines: read top to bottom, the module never sends a reader ahead. Type
    annotations and the definition's own local names aside."""
    tree, section = ast.parse(source), section_of(source)
    first = first_definitions(tree)
    found = []
    for node in tree.body[1:]:
        here, where = section(node.lineno), getattr(node, "name", type(node).__name__)
        annotations = set()
        for sub in ast.walk(node):
            for note in (getattr(sub, "annotation", None), getattr(sub, "returns", None)):
                annotations |= {id(x) for x in ast.walk(note)} if note is not None else set()
        local = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)}
        local |= {sub.arg for sub in ast.walk(node) if isinstance(sub, ast.arg)}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and id(sub) not in annotations and sub.id in first and sub.id not in local:
                there = section(first[sub.id])
                if there > here:
                    found.append(f"{node.lineno}:{where} ({here}) -> {sub.id} ({there})")
    return sorted(set(found))


@functools.lru_cache(maxsize=4)
def defined_sections(source: str) -> tuple[dict[str, int], Callable[[int], int]]:
    """The module's first definitions (name -> line) and its section of a line, parsed once."""
    return first_definitions(ast.parse(source)), section_of(source)


def notebook_sections(source: str, notebook: Path) -> dict[int, list[str]]:
    """The module sections past the core (9 on) that a notebook draws on: for each, the names of
    its definitions that the notebook uses (`L.name`)."""
    first, section = defined_sections(source)
    drawn: dict[int, list[str]] = {}
    for name in sorted(set(re.findall(r"\bL\.(\w+)", notebook.read_text()))):
        if name in first and section(first[name]) > 8:
            drawn.setdefault(section(first[name]), []).append(name)
    return drawn


def draw_problems(source: str, number: int) -> list[str]:
    """What is wrong with the sections chapter notebook `number` draws on: it must use its own
    section, and beyond it only the shared part (9) and at most one earlier chapter."""
    banners = {int(m[2]): int(m[1]) for m in re.finditer(r"^# (\d+)\. .*\(notebook (\d\d)\)$", source, re.M)}
    own = banners[number]
    drawn = notebook_sections(source, next((ROOT / "notebooks").glob(f"{number:02d}_*.py")))
    problems = [] if own in drawn else [f"notebook {number:02d} uses nothing of its own section {own}"]
    problems += [f"notebook {number:02d} draws on later section {s}: {drawn[s]}" for s in drawn if s > own]
    if len(set(drawn) - {own, 9}) > 1:
        problems.append(f"notebook {number:02d} draws on {len(set(drawn) - {own, 9})} earlier chapters: {drawn}")
    return problems


def test_each_chapter_notebook_draws_on_its_own_section_the_shared_part_and_at_most_one_more():
    assert [p for number in range(7, 13) for p in draw_problems(SOURCE, number)] == []
    later = SOURCE.replace("def plot_mrr(", "def _moved(", 1) + "\n\ndef plot_mrr(): ...\n"  # into the last section
    last = max(int(m) for m in re.findall(r"^# (\d+)\. ", SOURCE, re.M))
    assert draw_problems(later, 7) == [f"notebook 07 draws on later section {last}: ['plot_mrr']"]
    apart = SOURCE.replace("def pointer_scores(", "def _moved(", 1).replace(
        "# 14. The paper's other tasks", "def pointer_scores(): ...\n\n\n# 14. The paper's other tasks", 1
    )  # notebook 09 would then draw on two earlier chapters (05's and 07's)
    assert len(draw_problems(apart, 9)) == 1 and "2 earlier chapters" in draw_problems(apart, 9)[0]


def test_no_definition_names_anything_defined_in_a_later_section():
    assert forward_references(SOURCE) == []


def test_the_order_check_finds_a_reference_planted_ahead_of_its_definition():
    planted = SOURCE.replace(
        "    def vocab_size(self) -> int:\n", "    def vocab_size(self) -> int:\n        far_study  # planted\n", 1
    )
    assert planted != SOURCE
    far_study_line = SOURCE[: SOURCE.index("\ndef far_study(")].count("\n") + 2
    assert [r.split(" -> ")[1] for r in forward_references(planted)] == [
        f"far_study ({section_of(SOURCE)(far_study_line)})"
    ]
    local = SOURCE.replace(
        "    def vocab_size(self) -> int:\n",
        "    def vocab_size(self) -> int:\n        far_study = 1  # a local name\n",
        1,
    )
    assert forward_references(local) == []
