"""Benchmark helpers (small smoke runs, FLOP counting) and that every figure is labelled."""

import json
import math
import re
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch
from support import curve, fake_record, tool

import lengen_helpers as L


def test_training_step_flops_counts_real_tokens_and_causal_attention():
    cfg = L.ModelConfig(d_model=8, n_heads=2, n_layers=1, d_ff=16)
    b = L.single_length_batch(L.get_task("copy"), 1, 1, torch.Generator().manual_seed(0))  # 5 tokens, 4 inputs
    dense = 2 * (4 * 8 * 8 + 2 * 8 * 16) + 2 * 8 * L.VOCAB_SIZE
    attention = 2 * 8 * 4 * 5  # one layer, one sequence of 4 inputs
    assert L.training_step_flops(b, cfg) == 3 * (4 * dense + attention)
    packed = L.packed_training_batch(L.get_task("copy"), [1, 1], torch.Generator().manual_seed(0))
    assert L.training_step_flops(packed, cfg) == 2 * L.training_step_flops(b, cfg)  # padding is not useful work


def test_run_compute_flops_reads_the_cache_and_adds_what_it_lacks(tmp_path, monkeypatch):
    cache = tmp_path / "compute.csv"
    monkeypatch.setattr(L, "COMPUTE_CACHE", cache)
    cfg, other = L.make_run("copy", "nope", 0, steps=50), L.make_run("reverse", "alibi", 1, steps=50)
    first = L.run_compute_flops(cfg, sample_steps=5)
    L.run_compute_flops(other, sample_steps=5)
    monkeypatch.setattr(L, "training_batch", lambda *a: pytest.fail("a cached estimate drew batches"))
    assert L.run_compute_flops(cfg, sample_steps=5) == first  # read back exactly
    rows = cache.read_text().splitlines()
    assert rows[0] == "config_hash,sample_steps,name,flops" and len(rows) == 3
    assert rows[1].startswith(f"{cfg.hash},5,{cfg.name},")
    with pytest.raises(pytest.fail.Exception, match="drew batches"):
        L.run_compute_flops(cfg, sample_steps=6)  # another number of batches is another estimate
    cache.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a compute cache"):
        L.run_compute_flops(cfg, sample_steps=5)


def test_the_committed_compute_estimates_equal_fresh_ones():
    """The cache is keyed by the run's config; a change to how compute is counted or batches are
    drawn would leave stale estimates in it: a few are drawn afresh and compared."""
    committed = pd.read_csv(L.RESULTS_DIR / "compute.csv", dtype={"config_hash": str})
    wanted = {
        (L.make_run("copy", "nope", 0).hash, L.COPY_RUN_SAMPLE_STEPS): L.make_run("copy", "nope", 0),
        (L.pcfg_deep_runs()[0].hash, 20): L.pcfg_deep_runs()[0],
        (L.scratchpad_run("parity", "o", "t5").hash, 20): L.scratchpad_run("parity", "o", "t5"),
    }
    held = {(r.config_hash, r.sample_steps): r.flops for r in committed.itertuples()}
    assert set(wanted) <= set(held), "the committed cache lacks estimates the notebooks print"
    for (h, steps), cfg in wanted.items():
        assert held[h, steps] == L.run_compute_flops(cfg, sample_steps=steps)  # afresh: the tests' cache is off


def test_the_copy_run_unit_is_one_cached_estimate_every_notebook_uses(monkeypatch):
    calls = []
    monkeypatch.setattr(L, "run_compute_flops", lambda cfg, sample_steps: calls.append((cfg, sample_steps)) or 7.0)
    L.copy_run_flops.cache_clear()
    try:
        assert L.copy_run_flops() == L.copy_run_flops() == 7.0 and len(calls) == 1  # computed once
        ((cfg, sample_steps),) = calls
        assert (cfg.task, cfg.encoding, cfg.seed, cfg.steps) == ("copy", "nope", 0, 5000)
        assert sample_steps == L.COPY_RUN_SAMPLE_STEPS
    finally:
        L.copy_run_flops.cache_clear()
    notebooks = sorted((Path(L.__file__).parent / "notebooks").glob("*.py"))
    units = {nb.name: line.strip() for nb in notebooks for line in nb.read_text().splitlines() if "copy_run =" in line}
    assert units and set(units.values()) == {"copy_run = L.copy_run_flops()"}, units


@pytest.mark.slow
def test_bench_training_smoke():
    r = L.bench_training(steps=2, repeats=1)
    assert set(r["ms_per_step"]) == {"ours, packed rows", "ours, padded rows", "GPT2LMHeadModel, padded rows"}
    assert all(v > 0 for v in r["ms_per_step"].values())
    assert 0 < r["fraction_of_matmul_peak"] < 2 and r["useful_gflop_per_step"] > 0


def test_bench_kv_cache_smoke_and_ratios():
    r = L.bench_kv_cache(batches=(2,), new_tokens=(3,), repeats=1)
    t = L.kv_ratios(r)
    assert t.index.tolist() == [(2, 3)]
    row = t.loc[(2, 3)]
    assert all(row[k] > 0 for k in L.KV_METHODS) and all(row[c] > 0 for c in t.columns if " / " in c)
    assert all(len(r["rows"][0]["repeat_seconds"][k]) == 1 for k in L.KV_METHODS)
    assert r["cache_bytes_batch64_144_positions"] == {
        "kv": 2 * 3 * 64 * 4 * 144 * 16 * 4,
        "inputs": 3 * 64 * 144 * 64 * 4,
    }


def test_kv_ratios_divide_the_timings_each_way_named():
    # hand-given seconds whose four speed-ups all differ, so a swapped numerator, denominator or
    # column gives a number the test does not expect
    seconds = {
        "ours, input cache": 0.5,
        "ours, KV cache": 0.25,
        "ours, uncached": 3.0,
        "GPT-2, cached": 1.0,
        "GPT-2, uncached": 5.0,
    }
    slower = {k: 2 * v for k, v in seconds.items()} | {"ours, uncached": 12.0}
    run = {
        "rows": [
            {"batch": 1, "new_tokens": 8, **seconds, "repeat_seconds": {k: [v] for k, v in seconds.items()}},
            {"batch": 64, "new_tokens": 8, **slower, "repeat_seconds": {k: [v] for k, v in slower.items()}},
        ]
    }
    t = L.kv_ratios(run)
    assert t.loc[(1, 8)][list(L.KV_METHODS)].tolist() == [0.5, 0.25, 3.0, 1.0, 5.0]  # the seconds, unchanged
    assert t.loc[(1, 8), "uncached / input cache"] == pytest.approx(6.0)  # 3.0 s / 0.5 s
    assert t.loc[(1, 8), "uncached / KV cache"] == pytest.approx(12.0)  # 3.0 s / 0.25 s
    assert t.loc[(1, 8), "GPT-2 cached / input cache"] == pytest.approx(2.0)  # 1.0 s / 0.5 s
    assert t.loc[(1, 8), "GPT-2 cached / KV cache"] == pytest.approx(4.0)  # 1.0 s / 0.25 s
    assert t.loc[(64, 8), "uncached / input cache"] == pytest.approx(12.0)  # 12 s / 1 s: each row its own
    assert t.loc[(64, 8), "GPT-2 cached / KV cache"] == pytest.approx(4.0)  # 2 s / 0.5 s
    assert "repeat_seconds" not in t.columns


def assert_labelled(fig):
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title(), "every panel has a title"
        assert ax.get_xlabel() and ax.get_ylabel(), f"panel {ax.get_title()!r} labels both axes"


@pytest.mark.results
def test_figures_are_labelled(tmp_path):
    recs = [fake_record(t, e, s, curve(16 + s)) for t in ("copy", "reverse") for e in ("nope", "rope") for s in (0, 1)]
    df = L.exact_match_frame(recs)
    figs = [L.plot_encodings(), L.plot_accuracy_vs_length(df), L.plot_training_curves(recs)]
    for f in figs[1:]:  # a legend in each panel, or one for the whole figure
        assert all(ax.get_legend() is not None for ax in f.axes) or len(f.legends) == 1
    kv = {
        "runs": [
            {
                "rows": [
                    {"batch": 1, "new_tokens": n, **{k: float(i + 1) for i, k in enumerate(L.KV_METHODS)}}
                    for n in (32, 64)
                ]
            }
        ]
    }
    figs.append(L.plot_kv_benchmark(kv))
    import pandas as pd

    pointer = pd.DataFrame([{"task": "copy", "encoding": "nope", "seed": 0, "n": n, "on_target": 0.5} for n in (1, 2)])
    figs.append(L.plot_pointer_scores(pointer))
    jsd = pd.DataFrame(
        [{"task": "copy", "encoding": e, "seed": 0, "n": n, "jsd": 0.1} for e in ("nope", "t5") for n in (2, 4)]
    )
    figs.append(L.plot_jsd(jsd))
    units = pd.DataFrame({"nope": [1.0, 0.5], "rope": [0.5, 1.0]})
    figs.append(L.plot_mrr(units, {"nope": 0.687, "rope": 0.33}))
    sin = [fake_record("copy", "sinusoidal", s, curve(16)) for s in (0, 1)]
    figs.append(L.plot_settings_with_baseline(L.settings_frame(sin), "sinusoidal"))
    for f in figs:
        assert_labelled(f)


def kv_row(batch, new_tokens, ours, gpt2):
    seconds = dict.fromkeys(L.KV_METHODS, 1.0) | {"ours, input cache": ours, "GPT-2, cached": gpt2}
    return {"batch": batch, "new_tokens": new_tokens, **seconds, "repeat_seconds": {k: [v] for k, v in seconds.items()}}


def test_kv_summary_takes_ratios_within_runs_then_across():
    # run 0: ours 1 s, GPT-2 4 s (4x); run 1: ours 4 s, GPT-2 4 s (1x); run 2: ours 2 s, GPT-2 6 s (3x)
    runs = [{"rows": [kv_row(64, 128, o, g)]} for o, g in ((1.0, 4.0), (4.0, 4.0), (2.0, 6.0))]
    result = {"runs": runs}
    col = "GPT-2 cached / input cache"
    assert L.kv_summary(result).loc[(64, 128), col] == 3.0  # median of 4, 1, 3; not 4 / 2 from median times
    assert L.kv_summary(result, "min").loc[(64, 128), col] == 1.0
    assert L.kv_summary(result, "max").loc[(64, 128), col] == 4.0
    assert L.kv_summary(result).loc[(64, 128), "ours, input cache"] == 2.0
    assert L.kv_ratio_range(result).loc[(64, 128), col] == "1.00 to 4.00"


def test_bench_kv_runs_in_fresh_processes(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, cwd, check, stdout):
        calls.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.write_text(json.dumps({"runs": [{"rows": [kv_row(1, 1, 1.0, float(len(calls)))]}]}))

    import subprocess

    monkeypatch.setattr(subprocess, "run", fake_run)
    result = L.bench_kv_runs(runs=3, repeats=2)
    assert len(calls) == 3 and all(c[:4] == [sys.executable, "-m", "lengen_helpers", "bench-kv"] for c in calls)
    assert all(c[c.index("--runs") + 1] == "1" and c[c.index("--repeats") + 1] == "2" for c in calls)
    assert [r["rows"][0]["GPT-2, cached"] for r in result["runs"]] == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_bench_ab_times_two_versions_side_by_side():
    # the module against a copy of itself: every case is timed on both sides, and the table reads it
    ab = tool("bench_ab")
    res = ab.bench_ab(L.__file__, repeats=2, steps=1)
    assert set(res["cases"]) == {
        "training, 1 steps",
        *(f"generation, batch {b}, {k}" for b in (1, 64) for k in ("input cache", "KV cache", "uncached")),
    }
    for case in res["cases"].values():
        assert case["this"] > 0 and case["other"] > 0 and case["ratio"] > 0
    table = ab.ab_table(res)
    assert list(table.columns) == ["this (ms)", "other (ms)", "this / other", "25%", "75%"] and len(table) == 7


def test_tidy_notebook_names_widget_models_the_same_on_every_run(tmp_path):
    import json
    import uuid

    def executed() -> str:  # a notebook as Jupyter saves it: random model ids, state keys sorted
        box, slider, layout = (uuid.uuid4().hex for _ in range(3))
        state = {
            box: {"model_name": "VBoxModel", "state": {"children": [f"IPY_MODEL_{slider}"]}},
            slider: {"model_name": "IntSliderModel", "state": {"layout": f"IPY_MODEL_{layout}", "value": 3}},
            layout: {"model_name": "LayoutModel", "state": {}},
        }
        nb = {
            "cells": [{"outputs": [{"data": {"application/vnd.jupyter.widget-view+json": {"model_id": box}}}]}],
            "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}},
        }
        return json.dumps(nb, sort_keys=True, indent=1)

    texts = []
    for run in range(2):
        path = tmp_path / str(run) / "05.ipynb"
        path.parent.mkdir()
        path.write_text(executed())
        assert tool("tidy_notebooks").tidy_notebook(path) == 3
        texts.append(path.read_text())
        assert (
            tool("tidy_notebooks").tidy_notebook(path) == 3 and path.read_text() == texts[-1]
        )  # a second tidy changes nothing
    assert texts[0] == texts[1]  # two runs, two sets of random ids: the same file
    nb = json.loads(texts[0])
    state = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    root = nb["cells"][0]["outputs"][0]["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
    child = state[root]["state"]["children"][0].removeprefix("IPY_MODEL_")
    assert state[child]["model_name"] == "IntSliderModel"  # references follow the renaming


def test_plot_mrr_wraps_a_long_title_to_fit_the_figure():
    units = pd.DataFrame({"nope": [1.0, 0.5], "rope": [0.5, 1.0]})
    tasks = ", ".join(["addition.paper", "copy", "parity", "polynomial", "reverse", "scan", "sorting", "summation"])
    fig = L.plot_mrr(units, title=f"Mean reciprocal rank over the learned tasks\n({tasks}; 3 seeds each)")
    lines = fig.axes[0].get_title().split("\n")
    assert len(lines) == 3 and max(map(len, lines)) <= 72
    assert " ".join(lines[1:]) == f"({tasks}; 3 seeds each)"  # wrapped at spaces, nothing lost
    plt.close(fig)


def test_tidy_merges_a_cell_s_split_stream_outputs_and_keeps_the_rest(tmp_path):
    import json

    def executed(split: bool) -> str:  # the same printed text, flushed as one output or as two
        text = [["a\n", "b\n"], ["c\n"]] if split else [["a\n", "b\n", "c\n"]]
        outputs = [{"name": "stdout", "output_type": "stream", "text": t} for t in text]
        outputs += [{"name": "stderr", "output_type": "stream", "text": ["w\n"]}]
        outputs += [{"name": "stdout", "output_type": "stream", "text": ["d\n"]}]
        return json.dumps(
            {"cells": [{"cell_type": "code", "outputs": outputs}], "metadata": {}}, sort_keys=True, indent=1
        )

    tidy = tool("tidy_notebooks")
    files = []
    for split in (True, False):
        path = tmp_path / f"{split}.ipynb"
        path.write_text(executed(split))
        tidy.tidy_notebook(path)
        files.append(path.read_text())
    assert files[0] == files[1]
    outputs = json.loads(files[0])["cells"][0]["outputs"]
    assert [(o["name"], "".join(o["text"])) for o in outputs] == [
        ("stdout", "a\nb\nc\n"),
        ("stderr", "w\n"),
        ("stdout", "d\n"),
    ]


def encoding_named(text: str) -> str | None:
    """The encoding whose display name a legend entry names, if any."""
    for enc in L.encoding_names():
        if re.search(rf"(?<![\w-]){re.escape(L.encoding_title(enc))}(?![\w-])", text):
            return enc
    return None


def assert_one_colour_per_encoding(fig):
    """Every line that names an encoding is in that encoding's colour; no other line takes one."""
    palette = {to_rgba(L.encoding_color(e)): e for e in L.encoding_names()}
    for ax in fig.axes:
        for line in ax.get_lines():
            name, colour = line.get_label(), to_rgba(line.get_color())
            if name.startswith("_"):  # unlabelled: a band's edge, a reference line's helper
                continue
            enc = encoding_named(name)
            if enc is not None:
                assert colour == to_rgba(L.encoding_color(enc)), f"{name!r} is not in {L.encoding_title(enc)}'s colour"
            else:
                assert colour not in palette, f"{name!r} names no encoding but takes {palette[colour]}'s colour"


def test_the_colour_check_catches_a_line_in_another_encodings_colour():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], color=L.encoding_color("nope"), label="RoPE (3 seeds)")
    with pytest.raises(AssertionError, match="RoPE's colour"):
        assert_one_colour_per_encoding(fig)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], color=L.encoding_color("alibi"), label="GPT-2, cached")
    with pytest.raises(AssertionError, match="takes alibi's colour"):
        assert_one_colour_per_encoding(fig)
    plt.close("all")


@pytest.mark.results
def test_figures_keep_one_colour_per_encoding():
    recs = [
        fake_record(t, e, s, curve(16 + s)) for t in ("copy", "reverse") for e in L.encoding_names() for s in (0, 1)
    ]
    kv = {"runs": [{"rows": [{"batch": 1, "new_tokens": n, **dict.fromkeys(L.KV_METHODS, 1.0)} for n in (32, 64)]}]}
    sin = [fake_record("copy", "sinusoidal", s, curve(16)) for s in (0, 1)]
    figs = [L.plot_accuracy_vs_length(L.exact_match_frame(recs)), L.plot_kv_benchmark(kv)]
    figs.append(L.plot_settings_with_baseline(L.settings_frame(sin), "sinusoidal"))
    figs.append(L.plot_scratchpad_lengths(L.scratchpad_curves(), 0.085))
    paper_nope = L.paper_figures()["ood_exact_match_other_tasks"]["addition"]["nope"]
    figs.append(
        L.plot_addition_lengths(L.addition_length_panels(L.addition_curves()), L.ten_task_addition_curves(), paper_nope)
    )
    for fig in figs:
        assert_one_colour_per_encoding(fig)
    plt.close("all")


def test_plot_by_length_shares_one_legend_and_draws_notes_and_baselines():
    table = pd.DataFrame(
        [
            {"task": t, "encoding": e, "seed": s, "n": n, "exact_match": 1.0 if n <= 8 else 0.5}
            for t in ("parity", "addition.paper")
            for e in ("nope", "rope")
            for s in range(2)
            for n in range(1, 17)
        ]
    )
    base = pd.Series({n: 0.5 for n in range(1, 17)})
    fig = L.plot_by_length(
        table, "exact_match", "exact match (%)", "exact match", train_max=8, scale=100.0,
        titles={"addition.paper": L.task_title("addition.paper")}, notes={"parity": "not learned"},
        baselines={"parity": base}, baseline_label="the commonest answer", shared_legend=True,
    )  # fmt: skip
    assert [ax.get_legend() for ax in fig.axes] == [None, None] and len(fig.legends) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [
        "NoPE (2 seeds)",
        "RoPE (2 seeds)",
        "longest training n = 8",
        "the commonest answer",
    ]
    assert [ax.get_title() for ax in fig.axes] == ["parity: exact match", "addition (the paper's format): exact match"]
    assert "not learned" in [t.get_text() for t in fig.axes[0].texts] and not fig.axes[1].texts
    plt.close(fig)


def test_the_commonest_answer_share_is_chance_where_answers_are_few():
    parity = L.majority_answer_share("parity", [3, 9], count=2048)
    assert parity.index.tolist() == [3, 9] and ((parity > 0.45) & (parity < 0.56)).all()
    assert L.majority_answer_share("copy", [3], count=512).iloc[0] < 0.02  # 8,000 answers
    assert L.task_title("copy") == "copy" and L.task_title("addition.lsd") == "addition (answer reversed)"


def test_plot_mrr_legend_names_the_marks_not_a_bar_colour():
    units = pd.DataFrame({"nope": [1.0, 0.5], "rope": [0.5, 1.0]})
    fig = L.plot_mrr(units, {"nope": 0.7}, paper_label="the paper's own runs (ten tasks)")
    legend = fig.axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["the paper's own runs (ten tasks)", "ours: the bar, whiskers its 95% interval (2 bootstrap units)"]
    assert not any(isinstance(h, Patch) for h in legend.legend_handles)  # no swatch standing for every colour
    plt.close(fig)


def test_notebook_08_figures_carry_one_legend_each_and_labelled_panels():
    rows = [(n, t) for n in (64, 128) for t in range(1, n)]
    precision = pd.DataFrame(
        [{"n_positions": n, "position": t, "readout_error": 1e-6 * t, "attention_on_target": 1.0} for n, t in rows]
    )
    fig = L.plot_construction_precision(precision)
    assert all(ax.get_legend() is not None for ax in fig.axes)
    assert_labelled(fig)
    readout, off = fig.axes[0].get_lines()[0], fig.axes[1].get_lines()[0]
    assert list(readout.get_xdata()) == [64, 128]  # one point per construction: its worst position
    assert list(readout.get_ydata()) == pytest.approx([63e-6, 127e-6])
    assert list(off.get_ydata()) == [1e-12, 1e-12]  # exact, drawn at the floor
    probes = pd.DataFrame(
        [
            {"probe": "mlp", "task": t, "encoding": e, "layer": k, "sizes": s, "position": p, "mae": 1.0, "count": 2}
            for t in ("copy", "reverse") for e in ("nope", "rope") for k in range(3)
            for s in ("training", "longer") for p in range(5)
        ]
    )  # fmt: skip
    fig = L.plot_probe_errors(probes, {"copy/nope": 3}, train_last=3)
    assert len(fig.legends) == 1 and all(ax.get_legend() is not None for ax in fig.axes)
    assert_labelled(fig)
    keys = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(k.startswith("longer sequences") for k in keys) and any("cliff" in k for k in keys)
    assert len(fig.axes) == 4  # a panel per task of every model, then a panel per task of NoPE's layers
    nope_layers = [t.get_text() for t in fig.axes[2].get_legend().get_texts()]
    assert nope_layers == ["embeddings", "after L0", "after L1", "exact-match cliff (position 3)"]
    first = pd.DataFrame(
        [
            {"task": t, "encoding": "nope", "position": p, "head": h, "bos_weight": 0.5, "entropy": 1.0,
             "uniform_entropy": 2.0}
            for t in ("copy", "reverse") for p in range(4) for h in range(2)
        ]
    )  # fmt: skip
    fig = L.plot_first_layer(first, train_last=2)
    assert len(fig.legends) == 1 and [t.get_text() for t in fig.legends[0].get_texts()][:2] == ["L0H0", "L0H1"]
    assert_labelled(fig)
    plt.close("all")


def test_probe_figure_draws_each_model_at_its_best_hidden_state_with_its_cliff_marked():
    probes = pd.DataFrame(
        [
            {"probe": "mlp", "task": "copy", "encoding": e, "layer": k, "sizes": s, "position": p, "count": 1,
             "mae": (0.1 if (e, k) in {("nope", 1), ("rope", 2)} else 1.0) * (10 if s == "longer" else 1)}
            for e in ("nope", "rope") for k in range(3) for s in ("training", "longer") for p in range(8)
        ]
    )  # fmt: skip
    assert L.best_probe_layers(probes) == {("copy", "nope"): 1, ("copy", "rope"): 2}
    fig = L.plot_probe_errors(probes, {"copy/nope": 5, "copy/rope": 3}, train_last=3)
    top = fig.axes[0]
    assert [t.get_text() for t in top.get_legend().get_texts()] == ["NoPE (after L0)", "RoPE (after L1)"]
    cliffs = [line for line in top.get_lines() if line.get_marker() == "o"]
    assert [(list(c.get_xdata()), list(c.get_ydata())) for c in cliffs] == [([5], [1.0]), ([3], [1.0])]
    assert not [line for line in top.get_lines() if list(line.get_xdata()) == [3, 3]]  # no vertical line on top
    styles = {tuple(line.get_xdata()): line.get_linestyle() for line in top.get_lines() if line.get_marker() != "o"}
    assert styles[(0, 1, 2, 3)] == "-" and styles[(3, 4, 5, 6, 7)] == "--"  # inside solid, longer dashed
    assert all(ax.title.get_fontsize() >= 13 and ax.xaxis.label.get_fontsize() >= 12 for ax in fig.axes)
    assert [L.hidden_state_name(i) for i in range(3)] == ["embeddings", "after L0", "after L1"]
    plt.close(fig)


def test_first_layer_figure_names_the_near_uniform_head_from_the_data():
    def row(task, h, t):
        uniform = h == 2 and task == "copy"  # uniform but for 1.4x on BOS: Theorem 1's head
        bos, entropy = (1.4 / (t + 1), 0.97) if uniform else (0.5, 0.6)
        return {"task": task, "encoding": "nope", "head": h, "position": t, "uniform_entropy": math.log(t + 1),
                "bos_weight": bos, "entropy": entropy * math.log(t + 1)}  # fmt: skip

    first = pd.DataFrame([row(task, h, t) for task in ("copy", "reverse") for h in range(4) for t in range(40)])
    heads = L.uniform_heads(first, train_last=33)
    assert heads[["task", "head"]].values.tolist() == [["copy", 2]]
    assert heads["bos_x_t1"].iloc[0] == pytest.approx(1.4) and heads["entropy_ratio"].iloc[0] == pytest.approx(0.97)
    fig = L.plot_first_layer(first, train_last=33)
    copy_bos, reverse_bos = fig.axes[0], fig.axes[1]
    widths = {line.get_label(): line.get_linewidth() for line in copy_bos.get_lines()}
    assert widths["L0H2"] > 2 * widths["L0H0"]  # the head is drawn thick
    notes = [t.get_text() for t in copy_bos.texts]
    assert len(notes) == 1 and notes[0].startswith("L0H2") and "1.40x" in notes[0]
    assert [t.get_text() for t in reverse_bos.texts][0].startswith("no head keeps 0.9")
    keys = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any("lower values drawn here" in k for k in keys)  # no weight under the floor: no floor drawn
    plt.close(fig)


def test_construction_figure_names_a_floor_only_where_a_value_sits_on_it():
    precision = pd.DataFrame(
        [
            {"n_positions": n, "position": t, "readout_error": 1e-6 * t, "attention_on_target": 1.0}
            for n in (64, 128)
            for t in range(n)
        ]
    )
    fig = L.plot_construction_precision(precision)
    readout, attention = ([t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes)
    assert not any("exact (0)" in k for k in readout) and "1e-12: exact (0) drawn here" in attention
    assert "L0" in fig.axes[0].get_title() and "L1" in fig.axes[1].get_title()  # layers named from 0
    plt.close(fig)


def test_condensed_probe_table_merges_rows_that_read_the_same():
    rows = [
        {"task": t, "encoding": e, "seed": 0, "layer": k, "probe": p, "training sizes": v, "positions 34-49": 2 * v}
        for t in ("copy", "reverse") for e in ("rope", "nope", "sinusoidal") for k in range(2)
        for p in ("linear", "mlp")
        for v in [6.31 if k == 0 and e != "sinusoidal" else k + {"rope": 0.3, "nope": 0.5, "sinusoidal": 0.7}[e]]
    ]  # fmt: skip
    summary = pd.DataFrame(rows).set_index(["task", "encoding", "seed", "layer", "probe"])
    table = L.condensed_probe_table(summary)
    assert table.index.tolist() == [
        ("embeddings", "NoPE, RoPE"),
        ("embeddings", "Sinusoidal"),
        ("after L0", "NoPE"),
        ("after L0", "Sinusoidal"),
        ("after L0", "RoPE"),
    ]
    assert table.loc[("embeddings", "NoPE, RoPE"), ("reverse", "positions 34-49", "mlp")] == 12.6
    assert list(table.columns.get_level_values("task")) == ["copy"] * 4 + ["reverse"] * 4


def test_a_shared_legend_fills_the_first_empty_panel_and_tasks_are_named_as_their_papers_do():
    tasks = ("parity", "lego", "pcfg", "scan")  # two rows of three: two empty panels
    table = pd.DataFrame(
        [
            {"task": t, "encoding": e, "seed": 0, "n": n, "exact_match": 0.5}
            for t in tasks
            for e in ("nope", "t5")
            for n in (1, 2)
        ]
    )
    fig = L.plot_by_length(
        table, "exact_match", "exact match (%)", "exact match", train_max=1,
        titles={t: L.task_title(t) for t in tasks}, shared_legend=True,
    )  # fmt: skip
    assert len(fig.axes) == 5 and not fig.legends  # four panels and the legend's
    legend_ax = fig.axes[-1]
    assert not legend_ax.axison and [t.get_text() for t in legend_ax.get_legend().get_texts()][:2] == [
        "NoPE (1 seed)",
        "T5 bias (1 seed)",
    ]
    assert [ax.get_title().split(":")[0] for ax in fig.axes[:4]] == ["parity", "LEGO", "PCFG SET", "SCAN"]
    assert L.task_title("lego.paper") == "LEGO (the paper's format)"
    plt.close(fig)


def test_figures_of_layers_heads_and_constructions_take_no_encodings_colour():
    probes = pd.DataFrame(
        [
            {"probe": "mlp", "task": "copy", "encoding": e, "layer": k, "sizes": s, "position": p,
             "mae": 1.0, "count": 2}
            for e in ("nope", "rope") for k in range(4) for s in ("training", "longer") for p in range(5)
        ]
    )  # fmt: skip
    heads = pd.DataFrame(
        [
            {"task": "copy", "encoding": "nope", "head": h, "position": t, "bos_weight": 0.0 if h == 1 else 1 / (t + 1),
             "entropy": 1.0, "uniform_entropy": 2.0}
            for h in range(4) for t in range(1, 40)
        ]
    )  # fmt: skip
    precision = pd.DataFrame(
        [
            {"n_positions": n, "position": t, "readout_error": 1e-6, "attention_on_target": 1.0}
            for n in (8, 16)
            for t in range(n)
        ]
    )
    first = L.plot_first_layer(heads)
    figs = [L.plot_probe_errors(probes, {"copy/nope": 3}, train_last=3), first, L.plot_encodings()]
    figs.append(L.plot_construction_precision(precision))
    for fig in figs:
        assert_one_colour_per_encoding(fig)
    zero_head = [line for line in first.axes[0].get_lines() if line.get_label() == "L0H1"][0]
    assert min(zero_head.get_ydata()) == L.BOS_FLOOR  # a weight of 0 is drawn at the floor, not lost
    plt.close("all")


def test_plot_by_length_labels_each_panel_with_its_own_unit():
    rows = [
        {"task": t, "encoding": "nope", "seed": 0, "n": n, "exact_match": 1.0}
        for t in ("copy", "parity")
        for n in (1, 2)
    ]
    df = pd.DataFrame(rows)
    fig = L.plot_by_length(
        df, "exact_match", "exact match", "t", xlabel={t: L.size_label(t) for t in ("copy", "parity")}
    )
    assert [ax.get_xlabel() for ax in fig.axes] == ["size n (symbols)", "size n (bits)"]
    assert L.size_label("addition.paper") == "size n (digits)" and L.size_label("pcfg") == "size n (function calls)"
    plt.close(fig)


def test_plot_mrr_puts_the_paper_beside_the_whisker_and_says_what_the_tests_state():
    units = pd.DataFrame({"nope": [1.0, 0.5], "rope": [0.5, 1.0]})
    note = "Stated: NoPE > RoPE; every other pair not distinguishable here"
    fig = L.plot_mrr(units, {"nope": 0.7, "rope": 0.3}, note=note)
    (marks,) = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]  # the scatter
    assert [x for x, _ in marks.get_offsets()] == pytest.approx([0.3, 1.3])  # beside each bar, off its whisker
    (text,) = fig.texts
    assert text.get_text() == note
    fig.canvas.draw()
    assert text.get_window_extent().y1 < fig.axes[0].xaxis.label.get_window_extent().y0  # under the axis label
    plt.close(fig)
