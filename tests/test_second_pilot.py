"""LEGO and PCFG's second pilot: where a model fails, per queried variable's place in its chain
(LEGO) and per nesting depth (PCFG), checked on hand-built prompts and against exact match."""

import json

import matplotlib.pyplot as plt
import pytest
import torch

import lengen_helpers as L


def lego_prompt(task: L.Task, clauses: list[tuple[str, str, str]], query: str) -> torch.Tensor:
    return task.encode([w for clause in clauses for w in clause] + [query])


@pytest.mark.parametrize(
    "clauses, query, place",
    [
        ([("a", "+", "1"), ("b", "-", "a"), ("c", "+", "b"), ("d", "-", "c")], "a", 1),
        ([("a", "+", "1"), ("b", "-", "a"), ("c", "+", "b"), ("d", "-", "c")], "d", 4),
        ([("c", "+", "b"), ("a", "-", "1"), ("d", "-", "c"), ("b", "+", "a")], "c", 3),  # shuffled
        ([("c", "+", "b"), ("a", "-", "1"), ("d", "-", "c"), ("b", "+", "a")], "d", 4),
    ],
)
def test_lego_chain_position_follows_the_operands_to_the_root(clauses, query, place):
    task = L.get_task("lego")
    assert L.lego_chain_position(lego_prompt(task, clauses, query), len(clauses)) == place


@pytest.mark.parametrize("fmt", ["paper", "shuffled"])
def test_lego_chain_position_on_drawn_prompts_matches_how_they_were_drawn(fmt):
    task = L.get_task("lego", {"format": fmt})
    prompts, _ = task.sample(8, 256, torch.Generator().manual_seed(0))
    places = {L.lego_chain_position(p, 8) for p in prompts}
    low = (8 + 1) // 2 + 1 if fmt == "paper" else 8 // 2 + 1  # the second half of the chain, 1-based
    assert places == set(range(low, 9))
    if fmt == "paper":  # chain order: the queried variable's clause is at its place
        for p in prompts[:32]:
            clause = [int(p[3 * i]) for i in range(8)].index(int(p[24]))
            assert L.lego_chain_position(p, 8) == clause + 1


@pytest.mark.parametrize(
    "expression, depth",
    [
        ("A1 B1", 0),
        ("copy A1 B1", 1),
        ("append A1 , B1 C1", 1),
        ("append swap_first_last A1 B1 C1 , repeat D1", 2),
        ("echo append A1 , prepend B1 , C1", 3),
        ("shift reverse append A2 B2 , remove_first C2 , D2 E2", 4),
        ("append A1 , repeat reverse B1 _ _ _", 3),
    ],
)
def test_pcfg_depth_counts_nested_calls(expression, depth):
    assert L.pcfg_depth(expression.split()) == depth


def test_pcfg_depth_is_between_one_and_the_calls_of_each_drawn_expression():
    g = torch.Generator().manual_seed(1)
    for n in (1, 3, 8):
        depths = {L.pcfg_depth(L.pcfg_expression(n, g)) for _ in range(200)}
        assert min(depths) >= 1 and max(depths) <= n and (n == 1 or len(depths) > 1)
    with pytest.raises(ValueError, match="expected a string"):
        L.pcfg_depth("append A1 ,".split() + ["copy"])


@pytest.mark.results
@pytest.mark.parametrize("task, by", [("lego", L.lego_by_chain_position), ("pcfg", L.pcfg_by_depth)])
def test_the_groups_partition_the_evaluation_and_agree_with_exact_match(task, by):
    # the first pilot's trained model (committed weights): right on some sequences, wrong on others
    cfg = next(c for c in L.ten_task_pilot() if c.make_task().name == task)
    model = L.load_run_model(cfg, L.experiment("ten-task-pilot").results_dir())
    sizes = (4, 6)
    score, count = by(model, cfg, sizes=sizes, count=64)
    assert (count.sum(axis=1) == 64).all()
    for n in sizes:
        batch = L.evaluation_batch(cfg.make_task(), n, 64, cfg.eval_seed, cfg.model)
        with torch.no_grad():
            overall = 100 * L.exact_match_rows(model, batch).float().mean().item()
        assert 0 < overall < 100  # a mix, so that the groups' split is tested
        assert (score.loc[n] * count.loc[n]).sum() / 64 == pytest.approx(overall)


def test_second_pilot_table_reads_each_record_and_marks_the_goal(tmp_path):
    lego_nope, lego_sin = L.second_pilot("lego")
    for cfg, mean in ((lego_nope, 0.97), (lego_sin, 0.90)):
        em = {str(n): mean for n in range(1, cfg.eval_max_len + 1)}
        record = {"name": cfg.name, "config": cfg.to_dict(), "config_hash": cfg.hash, "exact_match": em}
        record |= {"loss_curve": {"every": 1, "mean_loss": [1.0]}, "training_revision": L.TRAINING_REVISION}
        path = L.record_path(tmp_path, cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record | {"in_distribution_mean": mean, "wall_time_s": 60.0}))
    table = L.second_pilot_table(copy_run=1e12, results_dir=tmp_path).set_index(["task", "encoding"])
    assert table.loc[("lego.paper", "nope"), "goal"] is True
    assert table.loc[("lego.paper", "sinusoidal"), "goal"] is False
    assert table.loc[("lego.paper", "sinusoidal"), "in distribution (%)"] == pytest.approx(90.0)
    assert table.loc[("pcfg", "nope"), "goal"] is None  # not trained: no verdict
    assert table["layers"].tolist() == [12, 12, 8, 8]
    with pytest.raises(ValueError, match="valid choices"):
        L.second_pilot("scan")


@pytest.mark.results
def test_pcfg_s_bar_is_the_lowest_of_the_papers_own_runs_by_the_study_s_measure(tmp_path):
    assert L.paper_level("pcfg") == pytest.approx(0.830)
    assert L.paper_level("scan") is None  # its records give it pooled only
    table = tmp_path / "published.csv"
    table.write_text(
        "# a comment\ntask,split,encoding,runs,measure,lowest,median,highest\n"
        "pcfg,md_productivity,all,15,mean over sizes,0.5,,0.9\npcfg,md_productivity,all,15,pooled,0.7,0.8,0.9\n"
    )
    assert L.paper_level("pcfg", path=table) == 0.5  # the study's measure, not the pooled one


def test_the_pcfg_grid_holds_the_second_pilots_runs_and_lego_width_is_the_wide_shape_longer():
    grid = L.pcfg_deep_runs()
    assert len(grid) == 18 and [c.seed for c in grid[:6]] == [0] * 6  # every encoding's seed 0 first
    assert {c.hash for c in L.second_pilot("pcfg")} <= {c.hash for c in grid}
    assert all((c.model.n_layers, c.steps) == (8, 10_000) for c in grid)
    lego = L.lego_width()
    assert [c.encoding for c in lego] == ["nope", "sinusoidal"] and all(c.seed == 0 for c in lego)
    assert all((c.model.n_layers, c.model.d_model, c.steps) == (4, 128, 10_000) for c in lego)
    assert lego[0].task_options == {"format": "paper"}


def test_the_lego_pre_norm_pilot_is_six_pre_norm_layers_in_both_clause_orders():
    runs = L.lego_pre_norm()
    assert [(c.encoding, c.make_task().format["format"]) for c in runs] == [
        ("nope", "paper"),
        ("sinusoidal", "paper"),
        ("nope", "shuffled"),
        ("sinusoidal", "shuffled"),
    ]
    assert all((c.model.n_layers, c.model.pre_norm, c.steps, c.seed) == (6, True, 10_000, 0) for c in runs)
    assert {c.hash for c in runs}.isdisjoint(c.hash for c in L.experiment("lego-width").runs())
    assert [c.hash for c in L.experiment("lego-pre-norm").runs()] == [c.hash for c in runs]
    deeper = L.experiment("lego-pre-norm-8").runs()
    assert [c.model.n_layers for c in deeper] == [8] * 4 and [c.seed for c in deeper] == [0] * 4


def test_trained_runs_of_a_task_and_the_shapes_tried_read_every_experiment(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "EXPERIMENTS", {})
    monkeypatch.setattr(L, "RESULTS_DIR", tmp_path)
    small = [L.make_run("lego", e, s, steps=4000, eval_max_len=24) for e in ("nope", "rope") for s in (0, 1)]
    deep = [L.make_run("lego", "nope", 0, steps=6000, n_layers=6, pre_norm=True, eval_max_len=24)]
    L.register_experiment("small", lambda: small, ".", "07_paper_tasks")
    L.register_experiment("deep", lambda: [*deep, small[0]], "deep", "07_paper_tasks")
    falling = {"every": 1000, "mean_loss": [1.0, 0.8, 0.6, 0.5, 0.4, 0.3]}  # -40% over its last 2,000 steps
    for cfg, folder in [*((c, tmp_path) for c in small[:3]), (deep[0], tmp_path / "deep")]:
        curve = falling if cfg.model.n_layers == 6 else {"every": 1000, "mean_loss": [1.0, 0.5, 0.5, 0.5]}
        rec = {"name": cfg.name, "config": cfg.to_dict(), "config_hash": cfg.hash, "training_revision": 2}
        held = 2 + cfg.seed + 3 * (cfg.model.n_layers == 6)  # every size >= 90% to here
        exact = {str(n): 1.0 if n <= held else 0.5 for n in range(1, cfg.train_max_len + 1)}
        rec |= {"in_distribution_mean": 0.8 + 0.01 * cfg.seed, "loss_curve": curve, "exact_match": exact}
        L._atomic_json(L.record_path(folder, cfg), rec)
    runs = L.trained_runs_of("lego")
    assert [(e, c.hash) for e, c, _ in runs] == [("small", c.hash) for c in small[:3]] + [("deep", deep[0].hash)]
    assert L.trained_runs_of("copy") == []
    table = L.shapes_tried("lego")
    assert list(table["shape"]) == ["3 x 64", "3 x 64", "6 x 64, pre-norm"] and list(table["seeds"]) == [2, 1, 1]
    assert table.loc[0, "in distribution (%, median)"] == pytest.approx(80.5) and table.loc[0, "lowest (%)"] == 80
    assert list(table["seeds still falling (> 10%)"]) == [0, 0, 1]
    assert table.loc[2, "loss change over the last 2,000 steps (%, median)"] == pytest.approx(-40.0)
    sizes = L.sizes_tried("lego")
    assert list(sizes["shape"]) == list(table["shape"]) and list(sizes["seeds"]) == [2, 1, 1]
    assert sizes.loc[0, 3] == 75.0 and sizes.loc[0, 4] == 50.0  # medians over seeds 0 and 1: (50 + 100) / 2 at 3
    assert list(sizes["every size >= 90% to"]) == [2, 2, 5]
    with pytest.raises(ValueError, match="no interval ends at 2500"):
        L.loss_at(runs[0][2], 2500)
    fig = L.plot_shapes_tried("lego", path=tmp_path / "f.png")
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 0] and (tmp_path / "f.png").exists()
    assert len(fig.legends[0].get_texts()) == 2  # one entry per (shape, steps, rate)
    small_line, deep_line = fig.axes[0].get_lines()
    assert tuple(small_line.get_color()) != tuple(
        deep_line.get_color()
    )  # each model a hue of its own, not shades of one
    assert "solid: LEGO" in fig.legends[0].get_title().get_text()  # the title names the line styles
    plt.close(fig)


def test_runs_against_a_level_mark_untrained_runs_and_the_ones_short_of_it(tmp_path):
    cfgs = [L.make_run("pcfg", e, 0, eval_max_len=16) for e in ("nope", "rope", "t5")]
    for cfg, score in zip(cfgs[:2], (0.85, 0.80)):
        rec = {"name": cfg.name, "config": cfg.to_dict(), "config_hash": cfg.hash, "training_revision": 2}
        rec |= {"in_distribution_mean": score, "exact_match": {}, "loss_curve": {"every": 1, "mean_loss": [1.0]}}
        L._atomic_json(L.record_path(tmp_path, cfg), rec)
    table = L.runs_against_level(cfgs, 0.83, results_dir=tmp_path)
    assert list(table["trained"]) == [True, True, False] and list(table["clears"]) == [True, False, None]
    assert table.loc[0, "in distribution (%)"] == pytest.approx(85.0) and table["in distribution (%)"].isna()[2]


def test_still_falling_means_down_by_more_than_the_stated_fraction():
    assert L.STILL_FALLING == 0.1
    assert L.still_falling(1.0, 0.85) and not L.still_falling(1.0, 0.95)
    assert not L.still_falling(1.0, 0.9)  # exactly a tenth down: not more than it
    assert not L.still_falling(1.0, 1.2)  # rising
    assert L.still_falling(1.0, 0.95, falling=0.02)


def test_in_distribution_spread_is_each_encoding_s_highest_seed_minus_its_lowest():
    def record(encoding: str, mean: float) -> dict:
        return {"config": {"model": {"encoding": encoding}}, "in_distribution_mean": mean}

    records = [record("nope", 0.80), record("nope", 0.875), record("nope", 0.85), record("rope", 0.5)]
    spread = L.in_distribution_spread(records)
    assert spread.round(6).to_dict() == {"nope": 7.5, "rope": 0.0}
