"""Figures a reader can read: legends that hide no curve and name each line once, lines drawn
where the prose puts them, categories that are not encodings kept out of the encodings' colours."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
from matplotlib.colors import to_rgba
from support import curve, fake_record
from test_sum_families import write_scored

import lengen_helpers as L


def test_scratchpad_lengths_marks_the_longest_training_size_where_the_other_figures_do():
    curves = pd.DataFrame(
        [
            {"encoding": "nope", "seed": 0, "scratchpad": pad, "n": n, "exact_match": 1.0 if n <= 8 else 0.0}
            for pad in ("o", "none")
            for n in range(1, 17)
        ]
    )
    fig = L.plot_scratchpad_lengths(curves, 0.1)
    (ax,) = fig.axes
    line = next(x for x in ax.get_lines() if x.get_label().startswith("longest training size"))
    assert list(line.get_xdata()) == [8, 8]  # at the size itself, as figures 07 and 11 draw it
    assert line.get_label() == "longest training size (8 digits)"
    plt.close(fig)


def test_scratchpad_lengths_draw_a_panel_per_encoding_and_the_paper_as_one_mark():
    curves = pd.DataFrame(
        [
            {"encoding": e, "seed": s, "scratchpad": pad, "n": n, "exact_match": 1.0 if n <= 8 else 0.0}
            for e in ("nope", "rope", "alibi")
            for s in range(3)
            for pad in ("o", "none")
            for n in range(1, 17)
        ]
    )
    fig = L.plot_scratchpad_lengths(curves, 0.085)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["NoPE", "RoPE", "ALiBi"]  # the registry's order
    for ax in shown:  # two lines an encoding, told apart by style; no flat line over every size
        curves_drawn = [x for x in ax.get_lines() if len(x.get_xdata()) == 16]
        assert sorted(x.get_linestyle() for x in curves_drawn) == ["-", "--"]
        assert len(ax.containers) == (ax.get_title() == "NoPE")  # the paper's one mark, in NoPE's panel only
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 3 and "mean of 3 seeds" in fig._suptitle.get_text()
    plt.close(fig)


def test_training_curves_say_the_seeds_once_in_one_legend_below_the_panels():
    recs = [fake_record(t, e, s, curve(16)) for t in ("copy", "reverse") for e in ("nope", "rope") for s in range(3)]
    fig = L.plot_training_curves(recs)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1  # over no panel
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["NoPE", "RoPE"]
    assert "median of 3 seeds" in legend.get_title().get_text()
    fig.canvas.draw()
    box = legend.get_window_extent()
    assert all(box.y1 < ax.get_window_extent().y0 for ax in fig.axes)  # below the panels
    uneven = L.plot_training_curves(recs[:-1])  # RoPE on reverse: 2 seeds, said in its entry
    assert [t.get_text() for t in uneven.legends[0].get_texts()] == ["NoPE (3 seeds)", "RoPE (2/3 seeds)"]
    plt.close("all")


@pytest.mark.results
def test_sinusoidal_ablation_legend_sits_below_and_every_entry_is_visible():
    sin = [fake_record("copy", "sinusoidal", s, curve(16)) for s in (0, 1)]
    padded = [fake_record("copy", "sinusoidal", s, curve(16)) for s in (0, 1)]  # the same curve
    for r in padded:
        r["config"]["packed"] = False
    frame = L.settings_frame(sin + padded)
    assert frame["encoding"].nunique() == 2, "the padded runs are a setting of their own"
    fig = L.plot_settings_with_baseline(frame, "sinusoidal")
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    fig.canvas.draw()
    assert fig.legends[0].get_window_extent().y1 < fig.axes[0].get_window_extent().y0
    lines = [x for x in fig.axes[0].get_lines() if x.get_label().startswith("Sinusoidal")]
    assert lines[0].get_marker() in ("None", "", None) and lines[1].get_marker() == "o"  # on the first: marked
    plt.close(fig)


def test_with_blanks_keeps_a_columns_decimals_when_asked():
    table = pd.DataFrame({"p": [float("nan"), 1.0, 0.914], "name": ["a", "b", "c"]}).round(2)
    shown = L.with_blanks(table, decimals=2)
    assert shown["p"].tolist() == ["—", "1.00", "0.91"] and shown["name"].tolist() == ["a", "b", "c"]
    assert L.with_blanks(table)["p"].tolist() == ["—", "1.00", "0.91"]  # without: the most any cell needs


def test_pointer_heads_say_what_the_score_is_and_name_every_line(tmp_path):
    torch.manual_seed(0)
    for enc in ("nope", "rope"):  # untrained weights where the grid's would be
        cfg = L.make_run("reverse", enc, 0)
        path = L.weights_path(tmp_path, cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(L.DecoderOnlyLM(cfg.model).state_dict(), path)
    fig = L.plot_pointer_heads("reverse", ["nope", "rope"], lengths=(8,), results_dir=tmp_path)
    title = fig._suptitle.get_text()
    assert "score over" not in title and "mean attention weight" in " ".join(title.split())
    assert "over 64 sequences" in " ".join(title.split())
    (legend,) = fig.legends  # one legend for every panel, none over a heatmap
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert [t.get_text() for t in legend.get_texts()] == ["source of y_i", "SEP (the prompt ends)"]
    assert all(t.get_fontsize() >= 9 for t in legend.get_texts())
    fig.canvas.draw()
    assert legend.get_window_extent().y1 < min(ax.get_window_extent().y0 for ax in fig.axes)  # below them
    for ax in fig.axes[:2]:
        assert ax.get_title().endswith(f"on-target {float(ax.get_title().split()[-1]):.2f}")
    plt.close(fig)


def test_one_attention_map_keeps_its_legend_off_the_heatmap(tmp_path):
    torch.manual_seed(0)
    cfg = L.make_run("reverse", "nope", 0)
    path = L.weights_path(tmp_path, cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(L.DecoderOnlyLM(cfg.model).state_dict(), path)
    _, ax = plt.subplots(figsize=(5.2, 3.3))  # a panel's size in the pointer-head figures
    L.draw_attention(cfg, layer=0, head=0, n=16, results_dir=tmp_path, ax=ax)
    ax.figure.canvas.draw()
    ax.figure.tight_layout()
    ax.figure.canvas.draw()
    legend, frame = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.y1 < frame.y0  # under the heatmap: over it, it hid the first answer steps and SEP
    assert ax.figure.bbox.contains(legend.x0, legend.y0)  # and still in the figure
    plt.close(ax.figure)


def test_structured_sums_zoom_where_random_sums_lie_and_say_so(tmp_path):
    runs = {"before (P = 100)": [L.addition_run(*L.ADDITION_BEST, seed=s) for s in range(2)]}
    for s, cfg in enumerate(runs["before (P = 100)"]):
        em = {n: 1.0 if n % 7 else 0.984 + 0.002 * s for n in range(1, 65)}  # lowest 98.4%
        write_scored(tmp_path, cfg, em, {"all zeros": {n: 0.0 for n in em}, "no carry": em})
    fig = L.plot_structured(runs, results_dir=tmp_path, note="P: the number of digit places")
    left, right = fig.axes
    low, high = left.get_ylim()
    assert 97 < low < 98 and 100 < high < 100.2 and "(y axis from 98%)" in left.get_title()
    assert right.get_ylim()[0] < 0 and "exact match" in right.get_ylabel()  # the families: 0-100%
    assert right.get_title() == f"The worst of the {len(L.TEN_FAMILIES)} structured families"  # the ten judged
    assert fig.legends[0].get_title().get_text() == "P: the number of digit places"
    plt.close(fig)


def test_structured_sums_tell_arms_apart_by_colour_and_draw_the_headline_on_top(tmp_path):
    runs = {}
    for i, name in enumerate(("mixture", "digit sets", "window of 1")):
        cfg = L.addition_run(*L.ADDITION_BEST, seed=0, steps=1000 + i)  # three configurations of one encoding
        em = {n: 1.0 for n in range(1, 65)}
        write_scored(tmp_path, cfg, em, {"all zeros": em, "no carry": em})
        runs[name] = [cfg]
    fig = L.plot_structured(runs, results_dir=tmp_path)
    for ax in fig.axes:
        lines = [x for x in ax.get_lines() if not x.get_label().startswith("longest")]
        assert len({to_rgba(x.get_color()) for x in lines}) == 3  # not one encoding's colour for every arm
        assert lines[-1].get_zorder() > max(x.get_zorder() for x in lines[:-1])  # the headline on top
        assert lines[-1].get_linewidth() > lines[0].get_linewidth()
    assert fig.legends[0].get_texts()[0].get_text().startswith("window of 1")  # and first in the legend
    plt.close(fig)


def test_column_attention_keeps_its_targets_out_of_the_encodings_colours():
    targets = ["its column", "the column below", "the answer so far", "elsewhere"]
    table = pd.DataFrame([{"layer": 0, "head": h, "target": t, "weight": 0.25} for h in range(2) for t in targets])
    fig = L.plot_column_attention(table, 32)
    (ax,) = fig.axes
    taken = {to_rgba(L.encoding_color(e)) for e in L.encoding_names()}
    colours = [to_rgba(h.get_facecolor()) for h in ax.get_legend().legend_handles]
    assert len(set(colours)) == 4 and not set(colours) & taken
    assert colours == [to_rgba(L.ordinal_color(i)) for i in range(4)]
    plt.close(fig)


@pytest.mark.results
def test_addition_lengths_legends_are_short_and_tell_their_lines_apart():
    paper_nope = L.paper_figures()["ood_exact_match_other_tasks"]["addition"]["nope"]
    fig = L.plot_addition_lengths(
        L.addition_length_panels(L.addition_curves()), L.ten_task_addition_curves(), paper_nope
    )
    assert len(fig.axes) == 4 and len(fig.legends) == 1  # what every panel shares: said once, below
    assert fig.axes[1].get_legend() is None and fig.axes[2].get_legend() is None  # encodings: named below
    below = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(below) <= 8 and any(t.startswith("NoPE") for t in below)
    fig.canvas.draw()
    for ax in fig.axes:
        if ax.get_legend() is None:
            continue
        legend = ax.get_legend()
        entries = legend.legend_handles
        assert 1 <= len(entries) <= 8, f"{ax.get_title()!r}: {len(entries)} entries"
        looks = [(to_rgba(h.get_color()), str(h.get_linestyle()), h.get_marker(), h.get_linewidth()) for h in entries]
        assert len(set(looks)) == len(looks), f"{ax.get_title()!r}: two entries drawn alike"
        assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # beside the panel, over no line
        reference, *rest = ax.get_lines()  # drawn first in every panel
        others = [x for x in rest if not x.get_label().startswith("_")]  # the panel's own lines
        assert reference.get_zorder() < min(x.get_zorder() for x in others)  # the first recipe under the rest
    ingredients = fig.axes[3].get_legend().legend_handles
    colours = [to_rgba(h.get_color()) for h in ingredients]
    assert len(set(colours)) == len(colours)  # one colour per change, not one pink for two
    assert "the best" not in " ".join(t.get_text() for t in fig.legends[0].get_texts())
    plt.close(fig)


def test_step_or_answer_by_size_is_one_row_per_encoding_a_column_per_size():
    long = pd.DataFrame(
        [
            {"encoding": e, "n": n, "exact match (%)": 1.0 * n, "steps right (%)": 2.0 * n}
            for e in ("ALiBi", "NoPE")
            for n in range(9, 17)
        ]
    ).set_index(["encoding", "n"])
    wide = L.step_or_answer_by_size(long, sizes=range(9, 13))
    assert wide.index.tolist() == ["ALiBi", "NoPE"]  # the table's order, not sorted
    assert wide.columns.tolist() == [(m, n) for m in ("exact match (%)", "steps right (%)") for n in range(9, 13)]
    assert wide.loc["NoPE", ("steps right (%)", 12)] == 24.0
    assert L.step_or_answer_by_size(long).shape == (2, 16)  # every size by default


@pytest.mark.results
def test_addition_view_names_runs_in_words_and_fits_120_columns():
    table = L.addition_table(1.0)
    keep = table["stage"].isin(["seeds", "ablation"]) | ((table["encoding"] == "rope") & (table["settings"] == ""))
    view = L.addition_view(table[keep])
    assert "window of 1 place" in view.index and "the best configuration, seed 1" in view.index
    assert view[("exact match (%)", "64")].tolist() == table[keep]["64 digits (%)"].round(1).tolist()
    with pd.option_context("display.max_colwidth", None, "display.width", 1000, "display.max_columns", None):
        assert max(len(line) for line in view.to_string().splitlines()) <= 120
    pilot = L.addition_view(table[table["stage"] == "pilot"], costs=True, name_best=False)
    assert pilot.index.name == "run (every one: answer reversed)" and "RoPE: digit places" in pilot.index
    assert ("copy", "runs") in pilot.columns and ("wall", "min") in pilot.columns
