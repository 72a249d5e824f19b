"""Analysis tables, mean reciprocal rank, pointer heads, JSD, and the attention explorer."""

import html
import math

import pandas as pd
import pytest
import torch
from support import curve, fake_record

import lengen_helpers as L


def test_longest_at_least():
    assert L.longest_at_least({1: 1, 2: 0.95, 3: 0.89, 4: 1}) == 2  # stops at the first miss
    assert L.longest_at_least({1: 0.5, 2: 1}) == 0
    assert L.longest_at_least(curve(48)) == 48


def test_summary_table_means_and_population_std():
    recs = [fake_record("copy", "nope", s, curve(c)) for s, c in [(0, 17), (1, 19)]]
    t = L.summary_table(L.exact_match_frame(recs))
    row = t.loc[("copy", "NoPE")]
    assert row["seeds"] == 2 and row["n = 1-16"] == "100.0 ± 0.0"
    assert row["n = 18"] == "50.0 ± 50.0"  # seeds at 0% and 100%: population std 50
    assert row["longest n >= 90%"] == "18.0 ± 1.0"


def test_mean_reciprocal_rank_as_the_paper_computes_it():
    # two (task, seed) columns; in the first a > b > c, in the second b > a = c (tie: rank 2.5 each)
    recs = [
        fake_record("copy", "nope", 0, curve(30)),
        fake_record("copy", "rope", 0, curve(20)),
        fake_record("copy", "alibi", 0, curve(16)),
        fake_record("copy", "nope", 1, curve(20)),
        fake_record("copy", "rope", 1, curve(30)),
        fake_record("copy", "alibi", 1, curve(20)),
    ]
    mrr = L.mean_reciprocal_rank(L.exact_match_frame(recs), range(17, 33))
    assert mrr["nope"] == pytest.approx((1 + 1 / 2.5) / 2)
    assert mrr["rope"] == pytest.approx((1 / 2 + 1) / 2)
    assert mrr["alibi"] == pytest.approx((1 / 3 + 1 / 2.5) / 2)
    assert list(mrr.index) == ["rope", "nope", "alibi"]


def test_in_distribution_misses_are_listed():
    recs = [
        fake_record("reverse", "nope", 1, {n: 0.9 for n in range(1, 49)}),
        fake_record("copy", "nope", 0, curve(48)),
    ]
    m = L.in_distribution_misses(recs)
    assert m["run"].tolist() == ["reverse-nope-s1"] and m.iloc[0, 1] == 90.0


def test_load_grid_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"60 of 60 runs have no record .*copy-nope-s0"):
        L.load_records(results_dir=tmp_path)


@pytest.mark.results
def test_baseline_and_paper_tables_read_the_published_numbers():
    recs = [fake_record(t, e, 0, curve(17)) for t in ("copy", "reverse") for e in L.encoding_names()]
    df = L.exact_match_frame(recs)
    base = L.baseline_comparison(df)
    assert base.loc[("copy", "NoPE"), ("baseline (3 seeds)", "n = 18")] == 81.1
    assert base.loc[("copy", "NoPE"), ("ours", "n = 17")] == 100.0
    paper = L.paper_comparison(df)
    assert paper.loc["NoPE", "MRR, paper (10 tasks)"] == 0.687 and "Learned" not in paper.index


def test_on_target_indices():
    q, k = L.answer_sources("copy", 3)  # [BOS x1 x2 x3 SEP y1 y2 y3]: SEP predicts y1 <- x1
    assert q.tolist() == [4, 5, 6] and k.tolist() == [1, 2, 3]
    assert L.answer_sources("reverse", 3)[1].tolist() == [3, 2, 1]


class PointerOracle(L.DecoderOnlyLM):
    """Attention that is exactly a pointer in layer 1, head 2: all mass on the source."""

    def forward(self, idx, positions=None, segments=None, cache=None, return_internals=False):
        B, T = idx.shape
        n = (T - 2) // 2
        att = torch.zeros(3, B, 4, T, T)
        att[..., 0] = 1.0  # everything else looks at BOS
        q, k = L.answer_sources(self.task, n)
        att[1, :, 2, q, :] = 0.0
        att[1, :, 2, q, k] = 1.0
        return torch.zeros(B, T, L.VOCAB_SIZE), L.Internals(list(att), [])


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_pointer_head_is_found_and_scored(task):
    m = PointerOracle(L.ModelConfig())
    m.task = task
    assert L.pointer_head(m, task, 16) == (1, 2, 1.0)
    assert L.pointer_scores(m, task, 9)[0, 0] == 0.0


def test_jensen_shannon_divergence():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]])
    d = L._jsd_rows(p, q)
    assert d[0] == 0 and d[1] == pytest.approx(1.0)
    assert torch.allclose(L._jsd_rows(q, p), d)
    m = L.DecoderOnlyLM(L.ModelConfig(encoding="alibi")).eval()
    assert L.jsd_to_reference(m, m, "copy", 5) == pytest.approx(0.0, abs=1e-6)
    other = L.DecoderOnlyLM(L.ModelConfig(encoding="rope")).eval()
    assert 0 < L.jsd_to_reference(m, other, "copy", 5) <= 1


@pytest.fixture
def grid_weights(tmp_path):
    """Untrained weights saved where the grid's would be, for two models."""
    torch.manual_seed(0)
    for enc in ("nope", "rope"):
        cfg = L.make_run("reverse", enc, 0)
        path = L.weights_path(tmp_path, cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(L.DecoderOnlyLM(cfg.model).state_dict(), path)
    return tmp_path


def test_load_model_reports_missing_weights(tmp_path):
    with pytest.raises(FileNotFoundError, match="no weights for copy-t5-s3"):
        L.load_model("copy", "t5", 3, tmp_path)


def test_explorer_redraws_when_controls_change(grid_weights):
    pytest.importorskip("ipywidgets")
    ex = L.AttentionExplorer(seeds=[0], results_dir=grid_weights)
    assert ex.last["encoding"] == "nope" and ex.last["attention"].shape == (16, 34)
    assert ex.controls["encoding"].label == "NoPE"  # display names, internal values
    ex.controls["n"].value = 7
    assert ex.last["n"] == 7 and ex.last["attention"].shape == (7, 16)
    ex.controls["encoding"].value = "rope"
    ex.controls["head"].value = 3
    direct = L.draw_attention(L.make_run("reverse", "rope", 0), ex.last["layer"], 3, 7, results_dir=grid_weights)
    assert ex.last["encoding"] == "rope" and ex.last["head"] == 3
    assert (ex.last["attention"] == direct["attention"]).all()
    assert len(ex.last["generated"]) == len(ex.last["target"]) == 8  # n symbols and EOS
    assert math.isclose(ex.last["on_target"], direct["on_target"])
    assert direct["target symbols"] == " ".join(L.get_task("reverse").decode(direct["target"]))
    assert html.escape(direct["target symbols"]) in ex.caption.value and direct["target symbols"].endswith("</s>")
    assert len(direct["ax"].figure.axes) == 2  # its own figure: the heatmap and its colour bar


def test_explorer_opens_on_the_pointer_head_and_jumps_back_to_it(grid_weights):
    pytest.importorskip("ipywidgets")
    ex = L.AttentionExplorer(seeds=[0], results_dir=grid_weights, n=9)
    model = L.load_model("reverse", "nope", 0, grid_weights)
    layer, head, score = L.pointer_head(model, "reverse", 9)
    assert (ex.last["layer"], ex.last["head"]) == (layer, head) and math.isclose(
        ex.last["on_target"], score, abs_tol=1e-6
    )
    ex.controls["head"].value = (head + 1) % 4
    ex.controls["encoding"].value = "rope"
    ex.jump.click()
    rope_layer, rope_head, _ = L.pointer_head(L.load_model("reverse", "rope", 0, grid_weights), "reverse", 9)
    assert (ex.last["encoding"], ex.last["layer"], ex.last["head"]) == ("rope", rope_layer, rope_head)


@pytest.fixture
def two_seed_weights(tmp_path):
    """Untrained weights for copy with NoPE and ALiBi, seeds 0 and 1, where the grid's would be."""
    for enc in ("nope", "alibi"):
        for seed in (0, 1):
            cfg = L.make_run("copy", enc, seed)
            L.weights_path(tmp_path, cfg).parent.mkdir(parents=True, exist_ok=True)
            torch.save(L.DecoderOnlyLM(cfg.model).state_dict(), L.weights_path(tmp_path, cfg))
    return tmp_path


@pytest.mark.parametrize("table", ["pointer", "jsd"])
def test_attention_tables_reuse_cached_rows_only_for_the_same_weights(two_seed_weights, monkeypatch, table):
    cache = two_seed_weights / f"{table}.csv"
    kw = dict(
        tasks=("copy",),
        encodings=("nope", "alibi"),
        seeds=[0, 1],
        lengths=[2, 4],
        results_dir=two_seed_weights,
        cache=cache,
    )
    make = L.pointer_score_table if table == "pointer" else L.jsd_table
    first = make(**kw)
    assert len(first) == 2 * 2 * 2 and first["config_hash"].str.len().eq(12).all()

    loads = []
    real_load = L.load_run_model
    spy = lambda cfg, *a, **k: loads.append((cfg.task, cfg.encoding, cfg.seed)) or real_load(cfg, *a, **k)  # noqa: E731
    monkeypatch.setattr(L, "load_run_model", spy)
    again = make(**kw)
    assert loads == [] and again.equals(first)  # all served from the cache

    stale = pd.read_csv(cache, dtype=str)
    stale.loc[(stale.encoding == "alibi") & (stale.seed == "1"), "config_hash"] = "000000000000"  # other weights
    stale.to_csv(cache, index=False)
    redone = make(**kw)
    assert ("copy", "alibi", 1) in loads and ("copy", "alibi", 0) not in loads  # only the stale model is recomputed
    key = ["encoding", "seed", "n"]
    assert (
        redone.sort_values(key)
        .reset_index(drop=True)[first.columns]
        .equals(first.sort_values(key).reset_index(drop=True))
    )

    stale.loc[stale.encoding == "alibi", "config_hash"] = "000000000000"
    stale.to_csv(cache, index=False)
    make(**(kw | {"encodings": ("alibi",)}))  # asks about ALiBi only: NoPE's rows stay in the cache
    kept = pd.read_csv(cache, dtype=str)
    assert (kept.encoding == "nope").sum() == (first.encoding == "nope").sum() and len(kept) == len(first)


def test_bootstrap_resamples_units_and_is_reproducible():
    units = pd.DataFrame({"a": [1.0, 0.0, 1.0, 0.0], "b": [0.5, 0.5, 0.5, 0.5]})
    boot = L.bootstrap_means(units, n_boot=500, seed=3)
    assert boot.shape == (500, 2) and (boot[:, 1] == 0.5).all()  # a constant column never moves
    assert set(boot[:, 0].round(2)) <= {0.0, 0.25, 0.5, 0.75, 1.0} and boot[:, 0].std() > 0
    assert (L.bootstrap_means(units, 500, seed=3) == boot).all()


def test_ranking_claims_state_a_ranking_only_where_it_holds_in_90_percent():
    sure = pd.DataFrame({"nope": [0.9, 0.8, 0.95, 0.85, 0.9], "rope": [0.1, 0.2, 0.0, 0.1, 0.15]})
    assert L.ranking_claims({"seeds": sure}) == ["NoPE > RoPE (seeds 100%)"]
    coin = pd.DataFrame({"nope": [0.9, 0.1, 0.9, 0.1, 0.5], "rope": [0.1, 0.9, 0.1, 0.9, 0.52]})
    (claim,) = L.ranking_claims({"seeds": coin, "columns": coin})
    assert claim.startswith("RoPE ~ NoPE: not distinguishable here")
    # the lower-is-better direction (distances): the smaller mean comes first
    assert L.ranking_claims({"s": sure}, higher_is_better=False)[0].startswith("RoPE > NoPE")
    p = L.pairwise_above(L.bootstrap_means(sure, 200), ["nope", "rope"])
    assert p.loc["nope", "rope"] == 1.0 and p.loc["rope", "nope"] == 0.0


def test_mrr_units_by_seed_average_a_seed_s_columns():
    recs = [
        fake_record(t, e, s, curve(c))
        for t in ("copy", "reverse")
        for s in (0, 1)
        for e, c in [("nope", 20 + s), ("rope", 17)]
    ]
    df = L.exact_match_frame(recs)
    cols, seeds = L.mrr_units(df, "column"), L.mrr_units(df, "seed")
    assert cols.shape == (4, 2) and seeds.shape == (2, 2)
    assert seeds.mean().to_dict() == cols.mean().to_dict() == L.mean_reciprocal_rank(df).to_dict()
    with pytest.raises(ValueError, match="unknown bootstrap unit 'task'; valid choices: column, seed"):
        L.mrr_units(df, "task")


def test_training_inputs_replay_the_batches_a_run_draws():
    cfg = L.make_run("reverse", "nope", 2, steps=30)
    replay = L.training_inputs(cfg, max_len=3)
    g, drawn = torch.Generator().manual_seed(cfg.seed), {n: set() for n in (1, 2, 3)}
    for _ in range(cfg.steps):  # the real batches: read each sequence's input back out of its row
        b = L.training_batch(L.get_task(cfg.task), cfg, g)
        for row, seg in zip(b.tokens, b.segments):
            for s in seg.unique().tolist():
                if s >= 0:
                    tokens = row[seg == s]
                    n = (len(tokens) - 3) // 2
                    if n <= 3:
                        drawn[n].add(tuple(tokens[1 : n + 1].tolist()))
    assert replay == drawn and all(replay[n] for n in (1, 2, 3))


def test_eval_training_overlap_counts_every_short_input():
    table = L.eval_training_overlap([L.make_run("copy", "nope", 0, steps=200)], max_len=3)
    assert table.loc[1, "evaluation sequences also in training (%)"] == 100.0  # 20 inputs, all drawn
    assert table.loc[3, "distinct inputs"] == 8000
    assert 0 < table.loc[3, "evaluation sequences also in training (%)"] < 100


def test_the_learned_table_gets_gradient_up_to_the_last_input_position():
    # the longest training sequence [BOS, x1..x16, SEP, y1..y16, EOS] has 35 tokens; inputs are all
    # but the last, so rows 0..33 are trained and 34 onwards never get a gradient
    assert L.learned_rows_with_gradient(L.make_run("copy", "learned", 0)) == list(range(34))
    assert L.learned_rows_with_gradient(L.make_run("copy", "learned", 0, train_max_len=5)) == list(range(12))


@pytest.mark.results
def test_paper_rankings_per_task_and_over_ten_tasks():
    r = L.paper_rankings()
    assert r["copy"][0] == "t5" and r["reverse"][:2] == ["t5", "nope"]  # T5 first on both of our tasks
    assert r["ten tasks (MRR)"] == ["nope", "t5", "alibi", "rope", "sinusoidal"]


def test_setting_changes_name_what_a_run_changes_from_the_grid():
    assert L.setting_changes(L.make_run("copy", "sinusoidal", 1).to_dict()) == "grid settings"
    assert (
        L.setting_changes(L.make_run("copy", "sinusoidal", 1, packed=False, lr=2e-3).to_dict())
        == "lr=0.002, packed=False"
    )
    assert (
        L.setting_changes(L.make_run("reverse", "rope", 0, scale_embeddings=True).to_dict()) == "scale_embeddings=True"
    )
    recs = [fake_record("copy", "sinusoidal", 0, curve(16)), fake_record("copy", "sinusoidal", 0, curve(18))]
    recs[1]["config"]["model"]["scale_embeddings"] = True
    frame = L.settings_frame(recs)
    assert sorted(frame["encoding"].unique()) == ["grid settings", "scale_embeddings=True"]
    assert L.per_run_metrics(frame).set_index("encoding")["longest n >= 90%"].to_dict() == {
        "grid settings": 16,
        "scale_embeddings=True": 18,
    }


def test_each_task_is_ranked_at_its_own_test_sizes_and_incomplete_columns_are_left_out():
    def rec(task, encoding, seed, em):
        r = fake_record(task, encoding, seed, em)
        r["config"] = L.paper_split_runs(task, [encoding], [seed])[0].to_dict() if task != "copy" else r["config"]
        return r

    # on addition (L = 8, tested at 9-16) rope beats nope; on copy (tested at 17-32) nope beats rope
    recs = [
        rec("addition", "nope", 0, curve(8)),
        rec("addition", "rope", 0, curve(12)),
        rec("copy", "nope", 0, curve(20)),
        rec("copy", "rope", 0, curve(16)),
        rec("copy", "nope", 1, curve(20)),
    ]
    df = L.exact_match_frame(recs)
    assert set(L.ood_rows(df, None).query("task == 'addition'")["n"]) == set(range(9, 17))
    rr = L.reciprocal_ranks(df, None)
    assert list(rr.index) == [("addition", 0), ("copy", 0)]  # copy seed 1 lacks rope: left out
    assert rr.loc[("addition", 0), "rope"] == 1.0 and rr.loc[("copy", 0), "nope"] == 1.0
    learned = L.learned_in_distribution(df)
    assert learned["learned"].all() and learned.loc["addition", "best in-distribution exact match (%)"] == 100.0
    recs, missing = L.load_available(L.paper_split_runs("parity", ["nope"], [7]), results_dir="/nonexistent")
    assert recs == [] and missing == ["parity-nope-s7"]


def test_exact_match_frame_of_no_records_has_the_columns():
    empty = L.exact_match_frame([])
    assert list(empty.columns) == ["task", "encoding", "seed", "n", "exact_match"] and empty.empty
    assert L.learned_in_distribution(empty).empty and empty["exact_match"].dtype == float
