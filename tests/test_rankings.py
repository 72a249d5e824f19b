"""Ranking across tasks (notebook 07): the study's statistic and the paper's, each worked by hand,
the paper's checked against its published columns, and the hierarchical bootstrap."""

import itertools

import numpy as np
import pandas as pd
import pytest

import lengen_helpers as L


def scores(table):
    """{(task, seed): {encoding: score}} -> the (task, seed) x encoding frame `ood_scores` gives."""
    df = pd.DataFrame.from_dict(table, orient="index")
    df.index = pd.MultiIndex.from_tuples(df.index, names=["task", "seed"])
    df.columns.name = "encoding"
    return df


def frame(rows):
    """Long exact-match rows (task, encoding, seed, n, exact_match)."""
    return pd.DataFrame(rows, columns=["task", "encoding", "seed", "n", "exact_match"])


def test_the_study_s_statistic_by_hand():
    s = scores(
        {
            ("copy", 0): {"nope": 0.5, "rope": 0.1, "alibi": 0.1},  # ranks 1, 2.5, 2.5
            ("copy", 1): {"nope": 0.2, "rope": 0.3, "alibi": 0.0},  # ranks 2, 1, 3
            ("parity", 0): {"nope": 0.0, "rope": 0.0, "alibi": 0.0},  # all tied: rank 2 each
        }
    )
    mrr = L.study_mrr(s)
    # per task: copy averages its two seeds, parity has one; then the two tasks weigh the same
    assert mrr["nope"] == pytest.approx(((1 + 1 / 2) / 2 + 1 / 2) / 2)
    assert mrr["rope"] == pytest.approx(((1 / 2.5 + 1) / 2 + 1 / 2) / 2)
    assert mrr["alibi"] == pytest.approx(((1 / 2.5 + 1 / 3) / 2 + 1 / 2) / 2)


def test_the_paper_s_statistic_by_hand_breaks_ties_by_row_order_and_weighs_splits():
    five = dict.fromkeys(L.PAPER_ROW_ORDER, 0.0)
    s = scores(
        {
            ("copy", 0): {**five, "nope": 0.4, "t5": 0.4, "learned": 0.9},  # learned is not ranked
            ("parity", 0): five,  # all tied: the row order decides
        }
    )
    rr = L.column_reciprocal_ranks(s, L.PAPER_ROW_ORDER)
    assert list(rr.columns) == list(L.PAPER_ROW_ORDER)
    # copy: t5 and nope tie at the top, t5 (row 3) before nope (row 5); then rope, alibi, sinusoidal
    assert rr.loc[("copy", 0)].to_dict() == pytest.approx(
        {"t5": 1, "nope": 1 / 2, "rope": 1 / 3, "alibi": 1 / 4, "sinusoidal": 1 / 5}
    )
    assert rr.loc[("parity", 0)].to_dict() == pytest.approx(
        {"rope": 1, "alibi": 1 / 2, "t5": 1 / 3, "sinusoidal": 1 / 4, "nope": 1 / 5}
    )
    mrr = L.paper_mrr(s)  # copy stands for five of the paper's splits, parity for one
    assert mrr["nope"] == pytest.approx((5 * (1 / 2) + 1 / 5) / 6)
    assert mrr["rope"] == pytest.approx((5 * (1 / 3) + 1) / 6)
    assert L.paper_mrr(s, splits=None)["nope"] == pytest.approx((1 / 2 + 1 / 5) / 2)
    orders = L.paper_mrr_over_orders(s)
    assert orders.loc["nope", "highest"] == pytest.approx(1.0)  # nope first in the order wins both ties
    assert orders.loc["nope", "lowest"] == pytest.approx((5 * (1 / 2) + 1 / 5) / 6)
    assert orders.loc["nope", "paper's order"] == pytest.approx(mrr["nope"])


def test_pooled_scores_weigh_sizes_as_the_paper_s_test_files_do():
    rows = [("addition.paper", "nope", 0, n, float(n == 16)) for n in range(1, 25)]
    df = frame(rows)
    mean, pooled = L.ood_scores(df), L.ood_scores(df, pooled=True)
    assert mean.loc[("addition.paper", 0), "nope"] == pytest.approx(1 / 8)  # sizes 9-16 alike
    weights = [2 * n - 1 for n in range(9, 17)]  # pairs of digit counts whose larger is n
    assert pooled.loc[("addition.paper", 0), "nope"] == pytest.approx(31 / sum(weights))
    plain = frame([("copy", "nope", 0, n, float(n == 17)) for n in range(1, 49)])
    assert L.ood_scores(plain, pooled=True).loc[("copy", 0), "nope"] == pytest.approx(1 / 16)


@pytest.mark.results
def test_the_paper_s_published_ranking_is_consistent_with_its_statistic_as_we_read_it():
    table, rest, implied, harmonic = L.paper_mrr_check()
    assert rest == 51 - 18  # 17 splits x 3 seeds, 18 of them shown
    assert table["within [n/5, n]"].all()
    assert implied == pytest.approx(harmonic, abs=0.01)  # each column ranks five, no shared ranks
    # the shown addition columns ranked by the rule: ALiBi, T5, NoPE, sinusoidal, RoPE in seed 1
    pub = L.paper_figures(L.PUBLISHED_DIR / "paper_mrr_columns.json")["accuracy_shown"]["addition len_tr8_ts16"]
    first_seed = scores({("addition", 0): {e: v[0] for e, v in pub.items()}})
    rr = L.column_reciprocal_ranks(first_seed, L.PAPER_ROW_ORDER).loc[("addition", 0)]
    assert rr.sort_values(ascending=False).index.tolist() == ["alibi", "t5", "nope", "sinusoidal", "rope"]


def test_the_hierarchical_bootstrap_resamples_tasks_then_seeds_within_them():
    # task a: nope best in every seed; task b: rope best in every seed
    rr = scores(
        {
            **{("a", s): {"nope": 1.0, "rope": 0.5} for s in range(3)},
            **{("b", s): {"nope": 0.5, "rope": 1.0} for s in range(4)},
        }
    )
    boot = L.hierarchical_bootstrap(rr, n_boot=400, seed=1)
    # seeds of one task are alike, so a resample's MRR depends only on which tasks it drew
    assert set(np.round(boot[:, 0], 6)) == {0.5, 0.75, 1.0}
    # a task's seeds are never paired with another's: with unequal seeds, seeds drawn across tasks would mix
    noisy = scores(
        {**{("a", s): {"nope": float(s), "rope": 0.0} for s in range(3)}, ("b", 0): {"nope": 10.0, "rope": 0.0}}
    )
    values = set(np.round(L.hierarchical_bootstrap(noisy, n_boot=2000, seed=0)[:, 0], 6))
    possible = {
        round((x + y) / 2, 6)
        for x, y in itertools.product([np.mean(c) for c in itertools.product(range(3), repeat=3)] + [10.0], repeat=2)
    }
    assert values <= possible and 10.0 in values and 0.0 in values


def test_task_keys_name_their_format():
    expected = {"format": "paper", "answer": "lsd", "scratchpad": "none", "operands": "uniform"}
    assert L.task_of_key("addition.paper.lsd").format == expected
    assert L.task_of_key("copy").key == "copy"
    with pytest.raises(ValueError, match="'wide' is no option value of task 'addition'"):
        L.task_of_key("addition.wide")


def test_hierarchical_summary_gives_each_encoding_its_mean_interval_and_chance_of_being_best():
    rr = scores({(t, s): {"nope": 1.0, "rope": 0.5 if t != "c" else 1.0} for t in "abc" for s in range(3)})
    out = L.hierarchical_summary(rr, n_boot=500)
    assert out["mean"].to_dict() == pytest.approx(L.weighted_mrr(rr).to_dict())
    assert (out["95% low"] <= out["mean"]).all() and (out["mean"] <= out["95% high"]).all()
    assert out["P(best)"].sum() == pytest.approx(1.0) and out.index[0] == "nope"


def test_the_in_distribution_goal_is_a_median_over_seeds_with_no_seed_below_the_floor():
    rows = []
    # polynomial (L = 8): nope seeds at 1.0, 0.96, 0.91 (meets); rope 1.0, 1.0, 0.85 (one seed under 90%)
    for enc, means in {"nope": (1.0, 0.96, 0.91), "rope": (1.0, 1.0, 0.85), "t5": (0.94, 0.94, 1.0)}.items():
        for seed, m in enumerate(means):
            rows += [
                {"task": "polynomial", "encoding": enc, "seed": seed, "n": n, "exact_match": m} for n in range(1, 9)
            ]
            rows.append(
                {"task": "polynomial", "encoding": enc, "seed": seed, "n": 12, "exact_match": 0.0}
            )  # a test size
    rows += [{"task": "sorting", "encoding": "nope", "seed": s, "n": 3, "exact_match": 1.0} for s in range(2)]
    goal = L.in_distribution_goal(pd.DataFrame(rows))
    assert goal.loc[("polynomial", "nope")].tolist() == [96.0, 91.0, 3, True]
    assert goal.loc[("polynomial", "rope")].tolist() == [100.0, 85.0, 3, False]
    assert goal.loc[("polynomial", "t5"), "meets goal"] == False  # noqa: E712 (median 94%)
    assert goal.loc[("sorting", "nope"), "meets goal"] == False  # noqa: E712 (two seeds only)


def test_each_task_has_one_standing_grid_of_six_encodings_and_three_seeds():
    for task in (*L.PAPER_TASKS, "scan", "pcfg"):
        grid = L.ranked_runs(task)
        assert len(grid) == 18 and {c.encoding for c in grid} == set(L.encoding_names())
    assert L.ranked_runs("addition") == L.chosen_shape_runs("addition")
    assert L.ranked_runs("addition")[0].make_task().key == "addition.paper"
    assert L.ranked_runs("lego")[0].steps == L.LONGER_STEPS["lego"]


def test_the_pilot_table_lists_every_run_tried_with_its_compute(monkeypatch):
    monkeypatch.setattr(L, "run_compute_flops", lambda cfg, sample_steps=100: 2.0 * cfg.steps)
    table = L.pilot_table(copy_run=1000.0, results_dir="/nonexistent")
    assert len(table) == len(L.ten_task_pilot())
    assert table["copy runs"].tolist() == [2.0 * c.steps / 1000.0 for c in L.ten_task_pilot()]
    assert set(table["shape"]) == set(L.PILOT_SHAPES) and table["in distribution (%)"].isna().all()


@pytest.mark.results
def test_the_paper_s_figures_stand_beside_our_runs_in_its_own_format_only():
    table = L.paper_test_accuracy(["copy", "addition", "addition.paper", "sorting", "scan"])
    assert list(table.columns) == ["copy", "addition.paper", "scan"]  # our own addition format is not the paper's
    assert table.loc["nope", "addition.paper"] == L.paper_figures()["ood_exact_match_other_tasks"]["addition"]["nope"]


def test_the_pilot_and_chosen_compute_adds_the_pilot_to_the_chosen_grids(monkeypatch):
    monkeypatch.setattr(L, "run_compute_flops", lambda cfg, sample_steps=100: 3.0)
    monkeypatch.setattr(L, "load_available", lambda cfgs, results_dir=None: (cfgs[:2], []))
    pilot = pd.DataFrame({"copy runs": [1.0, 2.0], "in distribution (%)": [90.0, float("nan")]})
    spent = L.pilot_and_chosen_compute(pilot, copy_run=1.5)
    assert spent.loc["pilot"].tolist() == [2, 1, 3.0]
    for t in L.CHOSEN_SHAPES:
        assert spent.loc[f"{t}, chosen model"].tolist() == [18, 2, 18 * 3.0 / 1.5]
    assert spent.loc["total", "copy runs"] == 3.0 + len(L.CHOSEN_SHAPES) * 36.0


def test_the_sign_flip_test_counts_sign_assignments_by_hand():
    assert L.sign_flip_p([1.0] * 8) == pytest.approx(1 / 256)  # only the observed signs reach the sum
    # sum 6 is reached by the observed signs, by flipping the -1 (8), and by flipping the -1 and
    # any one of the seven +1s (6): 1 + 1 + 7 of 256 assignments
    assert L.sign_flip_p([1.0] * 7 + [-1.0]) == pytest.approx(9 / 256)
    assert L.sign_flip_p([1.0, -1.0]) == pytest.approx(3 / 4)  # sums 0, 2, -2, 0: three reach 0
    assert L.sign_flip_p([1.0, 1.0], weights=[3.0, 1.0]) == pytest.approx(1 / 4)
    # two-sided: the assignments whose sum is as far from 0 either way, so twice the one-sided
    # share where the distribution is symmetric and the observed sum not 0
    assert L.sign_flip_p([1.0] * 8, two_sided=True) == pytest.approx(2 / 256)
    assert L.sign_flip_p([1.0] * 7 + [-1.0], two_sided=True) == pytest.approx(18 / 256)
    assert L.sign_flip_p([-1.0] * 7 + [1.0], two_sided=True) == pytest.approx(18 / 256)  # direction does not matter
    assert L.sign_flip_p([1.0, -1.0], two_sided=True) == 1.0  # every sum is at least 0 from 0


def test_two_sided_bootstrap_p_and_the_smallest_p_a_table_can_reach():
    assert L.bootstrap_two_sided_p(0.98) == pytest.approx(0.04)
    assert L.bootstrap_two_sided_p(0.03) == pytest.approx(0.06)  # the other side counts the same way
    assert L.bootstrap_two_sided_p(0.5) == 1.0 and L.bootstrap_two_sided_p(1.0) == 0.0
    assert L.smallest_corrected_p(8, 15) == pytest.approx(15 * 2 / 256)  # 0.117: over 0.10
    assert L.smallest_corrected_p(9, 15) == pytest.approx(15 * 2 / 512)
    assert L.smallest_corrected_p(4, 10) == 1.0  # capped
    assert L.smallest_corrected_p(8, 15) > L.FAMILY_ALPHA > L.smallest_corrected_p(8, 10)
    with pytest.raises(ValueError, match="at least one task"):
        L.smallest_corrected_p(0, 3)


def test_over_eight_tasks_no_ordering_of_six_encodings_can_be_stated():
    """Six encodings in the same strict order on every task of 8: every pair wins 8 of 8, yet the
    smallest two-sided p, 2/256, times 15 pairs is over 0.10, so nothing is stated; with a ninth
    task the same table states all 15."""
    order = ["nope", "alibi", "t5", "rope", "sinusoidal", "learned"]
    row = {e: 1.0 - i / 10 for i, e in enumerate(order)}
    eight = {(f"t{t}", s): row for t in range(8) for s in range(3)}
    ev = L.pairwise_evidence(scores(eight), n_boot=500, n_pairings=10)
    assert (ev["tasks won"] == "8 of 8").all() and ev["sign-flip p"].eq(2 / 256).all()
    assert not ev["stated"].any()
    assert L.family_reach(ev) == (
        "15 pairs over 8 tasks: the smallest corrected two-sided sign-flip p is 0.117, over 0.10: "
        "no ordering can be stated"
    )
    nine = eight | {("t8", s): row for s in range(3)}
    ev9 = L.pairwise_evidence(scores(nine), n_boot=500, n_pairings=10)
    assert ev9["stated"].all()
    assert (
        L.family_reach(ev9)
        == "15 pairs over 9 tasks: the smallest corrected two-sided sign-flip p is 0.059, within 0.10"
    )


def test_pairwise_evidence_states_only_what_every_test_supports():
    tasks = [f"t{i}" for i in range(8)]
    table = {}
    for i, t in enumerate(tasks):
        for seed in range(3):  # a ahead of b on seven tasks, behind on one; c last everywhere
            table[t, seed] = {"nope": 0.9 if i < 7 else 0.1, "alibi": 0.5, "rope": 0.0}
    ev = L.pairwise_evidence(scores(table), n_boot=2000, n_pairings=100)
    assert set(ev.index) == {"NoPE > ALiBi", "NoPE > RoPE", "ALiBi > RoPE"}  # every pair, not neighbours
    assert ev.loc["NoPE > ALiBi", "tasks won"] == "7 of 8" and ev.loc["ALiBi > RoPE", "tasks won"] == "8 of 8"
    assert ev.loc["ALiBi > RoPE", "sign-flip p"] == pytest.approx(2 / 256) and ev.loc["ALiBi > RoPE", "stated"]
    assert ev.loc["NoPE > ALiBi", "holds leaving out any one task"]
    assert ev.loc["NoPE > ALiBi", "random seed pairings"] == 1.0  # no spread over seeds to re-pair
    # one task alone: the win count is 1 of 1 but no test over tasks can reach 90%
    one = L.pairwise_evidence(scores({k: v for k, v in table.items() if k[0] == "t0"}), n_boot=500, n_pairings=20)
    assert not one["stated"].any()


def test_holm_adjusted_p_values_by_hand():
    # sorted 0.01, 0.02, 0.04 of three: times 3, 2, 1 -> 0.03, 0.04, 0.04 (kept at least the one before)
    assert L.holm_adjusted([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert L.holm_adjusted([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert L.holm_adjusted([0.03]) == pytest.approx([0.03])  # one test: nothing to correct


def test_orderings_are_corrected_for_the_number_of_pairs_tested():
    """Planted: four encodings above ALiBi and T5 on every task of 9 (each of those 8 pairs wins
    9 of 9, two-sided sign-flip p 2/512), in a random order among themselves; ALiBi just above T5
    on eight tasks and just below on the ninth, by the same margin (two-sided p = 20/512, which
    one test at 0.10 would state). Over the 15 pairs, Holm keeps the 8 and drops ALiBi > T5."""
    rng = np.random.default_rng(0)
    top = ["nope", "rope", "sinusoidal", "learned"]
    table = {}
    for t in range(9):
        for seed in range(3):
            row = dict(zip(top, 1 + rng.random(len(top))))
            table[f"t{t}", seed] = row | ({"alibi": 0.5, "t5": 0.4} if t < 8 else {"alibi": 0.4, "t5": 0.5})
    ev = L.pairwise_evidence(scores(table), n_boot=2000, n_pairings=20)
    assert len(ev) == 15
    above = ev.loc[[f"{L.encoding_title(a)} > {L.encoding_title(b)}" for a in top for b in ("alibi", "t5")]]
    assert (above["tasks won"] == "9 of 9").all() and above["stated"].all()
    planted = ev.loc["ALiBi > T5 bias"]
    assert planted["tasks won"] == "8 of 9" and planted["sign-flip p"] == pytest.approx(20 / 512)
    assert planted["bootstrap"] >= 0.95  # a single two-sided test at 0.10 would state it
    assert planted["sign-flip p (Holm)"] > L.FAMILY_ALPHA and not planted["stated"]


def test_the_decomposition_runs_from_the_study_s_statistic_to_the_paper_s():
    rows = []
    for task, n in (("copy", 20), ("sorting", 12)):
        for seed in range(2):
            for e, v in zip(L.encoding_names(), (0.9, 0.1, 0.5, 0.2, 0.7, 0.6)):
                rows.append((task, e, seed, n, v if seed == 0 else v / 2))
    df = frame(rows)
    steps = L.mrr_decomposition(df)
    assert steps.iloc[0].to_dict() == pytest.approx(L.study_mrr(L.ood_scores(df)).rename(L.encoding_title).to_dict())
    assert steps.iloc[-1].dropna().to_dict() == pytest.approx(
        L.paper_mrr(L.ood_scores(df, pooled=True)).rename(L.encoding_title).to_dict()
    )
    assert np.isnan(steps.iloc[1][L.encoding_title("learned")])  # dropped from the second step on


def test_both_statistics_and_their_evidence_sit_side_by_side_per_frame():
    rows = []
    for task, n in (("copy", 20), ("sorting", 12), ("parity", 12)):
        for seed in range(2):
            for e, v in zip(L.encoding_names(), (0.9, 0.1, 0.5, 0.2, 0.7, 0.6)):
                rows.append((task, e, seed, n, v if task != "parity" else 1 - v))
    three = frame(rows)
    two = three[three["task"] != "parity"]
    table = L.both_statistics({"two": two, "three": three})
    assert list(table.columns) == ["study's, two", "study's, three", "paper's on ours, two", "paper's on ours, three"]
    assert table["study's, two"]["nope"] == pytest.approx(1.0)  # first on both tasks
    assert table["study's, three"].to_dict() == pytest.approx(L.study_mrr(L.ood_scores(three)).to_dict())
    assert table["paper's on ours, three"].dropna().to_dict() == pytest.approx(
        L.paper_mrr(L.ood_scores(three, pooled=True)).to_dict()
    )
    assert np.isnan(table.loc["learned", "paper's on ours, two"])  # the paper trained no learned table
    ev = L.evidence_both(two)
    assert set(ev) == {"study's", "paper's"} and len(ev["study's"]) == 15 and len(ev["paper's"]) == 10


def goal_frame(cells):
    """{(task, encoding): (median %, lowest %, meets)} -> the frame `in_distribution_goal` gives."""
    index = pd.MultiIndex.from_tuples(cells, names=["task", "encoding"])
    rows = [{"median (%)": m, "lowest seed (%)": lo, "seeds": 3, "meets goal": ok} for m, lo, ok in cells.values()]
    return pd.DataFrame(rows, index=index)


def test_the_goal_table_marks_each_cell_and_gives_the_lowest_seed_where_short():
    goal = goal_frame(
        {
            ("copy", "nope"): (100.0, 99.0, True),
            ("copy", "rope"): (93.4, 88.1, False),
            ("sorting", "nope"): (96.0, 91.0, True),
            ("sorting", "rope"): (99.0, 98.0, True),
        }
    )
    marks = L.goal_marks(goal)
    assert marks.loc["copy", "NoPE"] == "100.0 ✓" and marks.loc["copy", "RoPE"] == "93.4 (88.1) ✗"
    assert list(marks.columns) == ["NoPE", "RoPE"]  # the study's encoding order
    assert L.tasks_meeting_goal(goal, ["copy", "sorting"]) == ["sorting"]


def test_ranks_are_flagged_where_the_pair_misses_the_goal():
    rr = L.column_reciprocal_ranks(
        scores({("copy", 0): {"nope": 0.9, "rope": 0.1}, ("copy", 1): {"nope": 0.1, "rope": 0.9}})
    )
    goal = goal_frame({("copy", "nope"): (100.0, 99.0, True), ("copy", "rope"): (93.4, 88.1, False)})
    flagged = L.flagged_ranks(rr, goal)
    assert flagged.loc["copy", "NoPE"] == "0.75" and flagged.loc["copy", "RoPE"] == "0.75 *"


def test_the_evidence_table_says_each_check_in_words_and_lists_what_is_stated():
    tasks = [f"t{i}" for i in range(8)]
    table = {
        (t, s): {"nope": 0.9, "alibi": 0.5 if i else 0.95, "rope": 0.0} for i, t in enumerate(tasks) for s in range(2)
    }
    ev = L.pairwise_evidence(scores(table), n_boot=500, n_pairings=20)
    shown = L.evidence_table(ev)
    assert shown.loc["ALiBi > RoPE", "stated"] == "yes" and shown.loc["ALiBi > RoPE", "bootstrap (%)"] == 100
    assert L.stated_orderings(ev) == ", ".join(ev.index[ev["stated"]])
    assert L.stated_orderings(ev.assign(stated=False)) == "none"


def test_between_finds_a_pair_whichever_encoding_is_ahead():
    ev = pd.DataFrame({"stated": [True]}, index=["T5 bias > ALiBi"])
    assert list(L.between(ev, "alibi", "t5").index) == ["T5 bias > ALiBi"]
    with pytest.raises(KeyError, match="no pair of nope and rope"):
        L.between(ev, "nope", "rope")


def test_seed_order_writes_the_mean_order_with_a_mark_per_neighbouring_pair():
    s = scores(
        {("copy", k): {"nope": 0.9, "t5": [0.5, 0.6, 0.95][k], "rope": [0.1, 0.2, 0.3][k]} for k in range(3)}
    )  # t5's mean 0.683 < nope's 0.9; nope ahead in 2 seeds; t5 ahead of rope in all
    assert L.seed_order(s, "copy") == "NoPE ~ T5 bias > RoPE"


def test_with_blanks_prints_a_dash_where_a_table_has_nothing():
    table = pd.DataFrame({"a": [1.5, np.nan], "b": [np.nan, 2.0]}, index=["x", "y"])
    shown = L.with_blanks(table)
    assert shown.loc["x", "a"] == "1.5" and shown.loc["y", "b"] == "2.0"
    assert shown.loc["x", "b"] == "—" and shown.loc["y", "a"] == "—"
    assert "NaN" not in shown.to_string() and L.with_blanks(table, "none").loc["x", "b"] == "none"
    # a column prints every cell with the decimals the most precise one needs, as pandas does
    assert list(L.with_blanks(pd.DataFrame({"c": [0.51, 0.827, np.nan]}))["c"]) == ["0.510", "0.827", "—"]
