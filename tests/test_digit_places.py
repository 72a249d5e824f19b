"""Digit places as positions (section 18, notebook 11): the layout couples each column's digits with
the answer query that predicts its digit, offsets keep every position trained, and positions never
depend on the answer."""

import dataclasses

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
from support import tiny

import lengen_helpers as L


def lsd_addition() -> L.Task:
    return L.get_task("addition", {"answer": "lsd"})


def places_config(encoding: str = "rope", places: int = 72, **model) -> L.ModelConfig:
    return L.ModelConfig.from_dict({"encoding": encoding, "digit_places": places, **model})


@pytest.mark.parametrize("answer", ["lsd", "msd"])
def test_each_answer_query_sits_at_the_place_of_the_digits_it_sums(answer):
    task = L.get_task("addition", {"answer": answer})
    n = 5
    layout = L.place_layout(task, n)
    a, b = layout[1 : n + 1], layout[n + 2 : 2 * n + 2]
    assert a == b == [5, 4, 3, 2, 1]  # significance, written most significant first
    queries = layout[2 * n + 2 : 2 * n + 2 + n + 1]  # SEP, y_1 .. y_n: each predicts the next answer digit
    significance = list(range(1, n + 2)) if answer == "lsd" else list(range(n + 1, 0, -1))
    assert queries == significance
    assert layout[-2:] == [n + 2, n + 3]  # the query predicting EOS, then EOS


def test_the_layout_matches_the_digits_in_real_batches():
    task = lsd_addition()
    g = torch.Generator().manual_seed(0)
    batch = L.model_positions(places_config(), L.packed_training_batch(task, [3, 5, 8, 8, 2], g), g, task)
    for row in range(batch.tokens.shape[0]):
        seg = batch.segments[row]
        for s in seg[seg >= 0].unique():
            tokens, pos = batch.tokens[row][seg == s], batch.positions[row][seg == s]
            n = (len(tokens) - 5) // 3
            shift = int(pos[0])  # BOS sits at place 0
            a, b = tokens[1 : n + 1] - L.N_SPECIAL, tokens[n + 2 : 2 * n + 2] - L.N_SPECIAL
            answer = tokens[2 * n + 3 : 3 * n + 4] - L.N_SPECIAL  # least significant first
            total = sum(int(d) * 10**i for i, d in enumerate(reversed(a.tolist()))) + sum(
                int(d) * 10**i for i, d in enumerate(reversed(b.tolist()))
            )
            assert [int(d) for d in answer] == [total // 10**i % 10 for i in range(n + 1)]
            for i in range(n + 1):  # the query predicting answer digit i (significance i + 1)
                query = 2 * n + 2 + i
                assert int(pos[query]) - shift == i + 1
                if i < n:  # its operand digits share the place
                    assert int(pos[n - i]) == int(pos[2 * n + 1 - i]) == int(pos[query])


def test_offsets_keep_positions_below_p_and_visit_every_test_position():
    task, P = lsd_addition(), 72
    cfg = L.RunConfig(
        task="addition", task_options={"answer": "lsd"}, model=places_config(places=P), train_max_len=8, eval_max_len=64
    )
    g = torch.Generator().manual_seed(1)
    seen = set()
    for _ in range(40):
        batch = L.training_batch(task, cfg, g)
        pos = batch.positions[batch.segments >= 0]
        assert int(pos.max()) < P and int(pos.min()) >= 0
        seen |= set(pos.tolist())
    test = L.evaluation_batch(task, 64, 8, 1234, cfg.model)
    assert set(test.positions.flatten().tolist()) <= seen  # every position the 64-digit test reads was trained


def test_positions_depend_on_the_prompt_and_step_never_on_the_answer():
    task = lsd_addition()
    batch = L.single_length_batch(task, 6, 16, torch.Generator().manual_seed(2))
    other = batch.tokens.clone()
    answer = slice(2 * 6 + 3, 3 * 6 + 4)
    other[:, answer] = torch.randint(L.N_SPECIAL, L.N_SPECIAL + 10, other[:, answer].shape)
    swapped = L.Batch(other, batch.positions, batch.segments, batch.loss_mask)
    cfg = places_config()
    a = L.model_positions(cfg, batch, torch.Generator().manual_seed(3), task)
    b = L.model_positions(cfg, swapped, torch.Generator().manual_seed(3), task)
    assert torch.equal(a.positions, b.positions)


def test_with_digit_places_off_nothing_changes():
    cfg = L.RunConfig(task="addition", task_options={"answer": "lsd"}, eval_max_len=24)
    assert "digit_places" not in str(L._hashed_fields(cfg.to_dict()))
    task, g = lsd_addition(), torch.Generator().manual_seed(4)
    batch = L.packed_training_batch(task, [3, 4], g)
    assert L.model_positions(cfg.model, batch, g, task) is batch


def test_bad_digit_places_are_named():
    with pytest.raises(ValueError, match="format 'equal'"):
        L.RunConfig(task="addition", task_options={"format": "paper"}, model=places_config(), eval_max_len=24)
    with pytest.raises(ValueError, match="digit_places=40 is too small .* set digit_places > 67"):
        L.RunConfig(task="addition", model=places_config(places=40), eval_max_len=64)
    with pytest.raises(ValueError, match="task 'copy' has no digit places; tasks with them: addition"):
        L.RunConfig(task="copy", model=places_config())
    with pytest.raises(ValueError, match="without random_positions and position_coupling"):
        places_config(random_positions=128)
    with pytest.raises(ValueError, match="max_positions >= digit_places"):
        places_config("learned", places=200)
    model = L.DecoderOnlyLM(places_config(), lsd_addition().vocab_size)
    with pytest.raises(ValueError, match=r"a scheme sets \(digit places: digit_places=\d+.*\) reads others"):
        L.generate(model, torch.tensor([[L.BOS, 5, L.SEP]]), 3)


@pytest.mark.slow
def test_a_digit_places_run_trains_short_and_is_scored_to_64_digits():
    places = dict(digit_places=72, max_positions=72, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    cfg = tiny(
        "addition",
        "learned",
        task_options={"answer": "lsd"},
        steps=3,
        warmup_steps=1,
        train_max_len=8,
        eval_max_len=64,
        **places,
    )
    _, record = L.train_run(cfg, progress=False)
    assert set(record["exact_match"]) == {str(n) for n in range(1, 65)}
    assert record["name"] == "addition.lsd-learned-s0"


def test_symmetric_alibi_penalizes_keys_at_later_positions_and_changes_nothing_else():
    q, k = torch.tensor([[3, 3, 3]]), torch.tensor([[1, 3, 6]])
    plain = L.make_encoding(L.ModelConfig(encoding="alibi"))
    both = L.make_encoding(L.ModelConfig(encoding="alibi", options={"alibi_symmetric": True}))
    slope = float(plain.slopes[0])
    assert plain.bias(q[0], k[0])[0, 0, 0].tolist() == pytest.approx([-2 * slope, 0, 3 * slope])  # boosted
    assert both.bias(q[0], k[0])[0, 0, 0].tolist() == pytest.approx([-2 * slope, 0, -3 * slope])
    causal = torch.arange(6)
    assert torch.equal(plain.bias(causal, causal).tril(), both.bias(causal, causal).tril())  # keys before: the same
    with pytest.raises(ValueError, match="alibi_symmetric changes ALiBi's bias; the encoding is 'rope'"):
        L.ModelConfig(encoding="rope", options={"alibi_symmetric": True})


def test_bidirectional_t5_buckets_keys_at_later_positions_apart_and_bounds_far_ones():
    cfg = L.ModelConfig(encoding="t5", t5_num_buckets=16, t5_max_distance=6, options={"t5_bidirectional": True})
    t5 = L.make_encoding(cfg)
    with torch.no_grad():
        t5.table.weight.copy_(torch.arange(16.0)[:, None].expand(16, cfg.n_heads))  # bias = bucket number
    q, k = torch.tensor([10] * 7), torch.tensor([10, 9, 7, 3, 11, 13, 40])
    buckets = t5.bias(q, k)[0, 0, 0].tolist()
    assert buckets[:4] == [0, 1, 3, 7]  # keys before: 0-3 exact, 7 = the last bucket of that side (distance >= 6)
    assert buckets[4:] == [9, 11, 15]  # keys after: 8 + the same buckets, 30 places away in the last one too
    assert L.t5_bucket(torch.tensor([6, 50]), 8, 6).tolist() == [7, 7]
    with pytest.raises(ValueError, match="t5_max_distance=4 must exceed 4, the distances the exact buckets cover"):
        L.ModelConfig(encoding="t5", t5_num_buckets=16, t5_max_distance=4, options={"t5_bidirectional": True})
    with pytest.raises(ValueError, match="t5_bidirectional changes T5's buckets; the encoding is 'nope'"):
        L.ModelConfig(options={"t5_bidirectional": True})


@pytest.mark.parametrize("encoding", ["learned", "t5"])
def test_position_init_std_sets_the_trained_tables_spread_and_changes_nothing_else(encoding):
    def model(**kw):
        torch.manual_seed(0)
        return L.DecoderOnlyLM(L.ModelConfig.from_dict({"encoding": encoding, **kw}), 12)

    default, explicit, wide = model(), model(position_init_std=0.02), model(position_init_std=1.0)
    for name, tensor in default.state_dict().items():  # the default draws exactly what it always drew
        assert torch.equal(tensor, explicit.state_dict()[name]), name
    assert float(default.pos.table.weight.detach().std()) == pytest.approx(0.02, rel=0.3)
    assert float(wide.pos.table.weight.detach().std()) == pytest.approx(1.0, rel=0.3)  # the token embeddings' scale
    assert torch.equal(default.tok_emb.weight, wide.tok_emb.weight)  # drawn after everything else
    assert "position_init_std" not in str(
        L._hashed_fields(L.RunConfig(model=L.ModelConfig(encoding=encoding)).to_dict())
    )
    with pytest.raises(ValueError, match="position_init_std sets a trained position table's .* the encoding is 'rope'"):
        L.ModelConfig(encoding="rope", options={"position_init_std": 1.0})


def test_window_mask_keeps_keys_within_w_positions_on_either_side():
    positions = torch.tensor([[5, 6, 7, 5, 6, 9]])
    near = L.window_mask(positions, 1)[0, 0]
    assert near[3].tolist() == [True, True, False, True, True, False]  # position 5 sees 5 and 6, never 7 or 9
    assert near[5].tolist() == [False] * 5 + [True]
    assert L.window_mask(torch.arange(4), 0).equal(torch.eye(4, dtype=torch.bool))


@pytest.mark.parametrize("encoding", ["rope", "t5", "nope"])
def test_a_windowed_query_reads_nothing_beyond_its_window(encoding):
    torch.manual_seed(0)
    cfg = L.ModelConfig(encoding=encoding, n_layers=1, options={"attention_window": 2})
    model = L.DecoderOnlyLM(cfg, 12).eval()
    idx = torch.randint(3, 12, (1, 10))
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 3, 4]])  # the last two queries sit back at 3 and 4
    far, near = idx.clone(), idx.clone()
    far[0, 7], near[0, 5] = (idx[0, 7] + 1 - 3) % 9 + 3, (idx[0, 5] + 1 - 3) % 9 + 3  # position 7, then 5
    with torch.no_grad():
        base, moved_far, moved_near = (model(x, positions)[0, 8] for x in (idx, far, near))
    assert torch.equal(base, moved_far)  # 7 is 4 away from the query at 3
    assert not torch.allclose(base, moved_near)  # 5 is 2 away: inside
    wide = L.DecoderOnlyLM(dataclasses.replace(cfg, options=cfg.options | {"attention_window": 50}), 12).eval()
    plain = L.DecoderOnlyLM(dataclasses.replace(cfg, options=cfg.options | {"attention_window": 0}), 12).eval()
    plain.load_state_dict(wide.state_dict())
    with torch.no_grad():  # a window wider than every distance changes nothing
        assert torch.allclose(wide(idx, positions), plain(idx, positions), atol=1e-6)


def test_windowed_models_decode_uncached_and_earlier_runs_keep_their_names():
    model = L.DecoderOnlyLM(L.ModelConfig(encoding="rope", options={"attention_window": 3}), 12)
    prompt = torch.tensor([[L.BOS, 5, 6, L.SEP]])
    with pytest.raises(ValueError, match=r"masked \(attention_window=3\) decodes uncached"):
        L.generate(model, prompt, 3)
    with pytest.raises(ValueError, match=r"masked \(attention_window=3\) decodes uncached"):
        L.new_cache(model, 1, 8)
    assert L.generate(model, prompt, 3, use_cache=False).shape == (1, 7)
    assert "attention_window" not in str(L._hashed_fields(L.RunConfig().to_dict()))
    assert L.addition_run("lsd+places+window", "rope").model.option("attention_window") == 2


def test_longest_held_is_the_first_size_below_the_level_minus_one():
    assert L.longest_held({"1": 1.0, "2": 0.95, "3": 0.5, "4": 1.0}) == 2
    assert L.longest_held({"1": 0.5, "2": 1.0}) == 0
    assert L.longest_held({"1": 0.9, "2": 0.9}, level=0.9) == 2


def test_addition_arms_and_settings_name_what_a_run_changes():
    best = L.addition_run("lsd+places+window", "rope")
    assert (L.addition_ingredients(best), L.addition_settings(best)) == ("lsd + places + window 2", "")
    other = L.addition_run("msd", "t5", lr=3e-3, t5_bidirectional=True, t5_num_buckets=16, t5_max_distance=6)
    assert L.addition_ingredients(other) == "msd"
    assert L.addition_settings(other) == "lr 0.003, bidirectional (16 buckets, far from 6)"
    stages = [stage for stage, _, _ in L.addition_runs("/nonexistent")]
    assert stages.count("seeds") == 2  # seed 0 of the best configuration is the pilot's run, counted once


def test_column_targets_on_a_two_digit_sum():
    # inputs [BOS, a2, a1, +, b2, b1, SEP, y1, y2, y3] at places 0 2 1 0 2 1 1 2 3 4 (EOS is never an input)
    queries, masks = L.column_targets(lsd_addition(), 2)
    assert queries.tolist() == [6, 7, 8]  # SEP predicts y1 (place 1), y1 predicts y2, y2 predicts y3
    assert masks["its column"].nonzero().tolist() == [[0, 2], [0, 5], [1, 1], [1, 4]]  # the carry digit: none
    assert masks["the column below"].nonzero().tolist() == [[1, 2], [1, 5], [2, 1], [2, 4]]
    assert masks["the answer so far"][0].nonzero().flatten().tolist() == [6, 7, 8, 9]  # the causal mask: SEP sees 6
    total = sum(m.int() for m in masks.values())
    assert total.eq(1).all()  # every key in exactly one target


def test_column_attention_weights_add_to_one_per_head():
    torch.manual_seed(0)
    cfg = places_config(n_layers=2, attention_window=2)
    table = L.column_attention(L.DecoderOnlyLM(cfg, lsd_addition().vocab_size), lsd_addition(), 5, count=4)
    sums = table.groupby(["layer", "head"])["weight"].sum()
    assert len(sums) == 2 * cfg.n_heads and sums.to_numpy() == pytest.approx(1.0)


def test_places_example_shows_one_offset_over_the_layout():
    example = L.places_example(L.addition_run("lsd+places+window", "rope"), n=2)
    assert example.loc["token"].tolist()[:4] == ["<s>", example.loc["token"][1], example.loc["token"][2], "+"]
    offsets = {p - q for p, q in zip(example.loc["position"], example.loc["place"])}
    assert len(offsets) == 1 and example.loc["place"].tolist() == L.place_layout(lsd_addition(), 2)
    paper = L.places_example(L.make_run("addition", "nope", task_options={"format": "paper"}, eval_max_len=16))
    assert paper.loc["token"].tolist()[-1] == "</s>" and "<pad>" not in paper.loc["token"].tolist()


def test_answer_token_accuracy_names_each_digit_then_eos_and_bounds_exact_match():
    torch.manual_seed(0)
    model = L.DecoderOnlyLM(places_config(n_layers=1), lsd_addition().vocab_size)
    acc = L.answer_token_accuracy(model, lsd_addition(), 3, count=32)
    assert acc.index.tolist() == ["digit 1", "digit 2", "digit 3", "digit 4", "EOS"]
    exact = L.exact_match_by_length(model, lsd_addition(), [3], n_per_length=32)[3]
    assert ((acc >= 0) & (acc <= 1)).all() and exact <= acc.min()


def test_cited_addition_results_are_read_with_their_source():
    cited = L.cited_addition()
    assert list(cited.index) == ["Cho et al. 2024", "McLeish et al. 2024", "Zhou et al. 2024", "Patriota 2024"]
    assert cited["paper"].str.len().min() > 20 and cited["model"].notna().all() and cited["tested_on"].notna().all()
    stated = cited["bound"] != "reported"  # a figure not read is left blank, never filled in
    assert cited.loc[stated, "exact_match"].between(0, 100).all() and cited.loc[~stated, "exact_match"].isna().all()


def test_top_marker_puts_plus_above_the_operands_top_digit_and_moves_nothing_else():
    task, n = lsd_addition(), 5
    plain, marked = L.place_layout(task, n), L.place_layout(task, n, places_config(top_marker=True))
    assert marked[n + 1] == n + 1 and plain[n + 1] == 0  # the + token, after operand a
    assert marked[: n + 1] + marked[n + 2 :] == plain[: n + 1] + plain[n + 2 :]
    g = torch.Generator().manual_seed(5)
    cfg = places_config(top_marker=True)
    batch = L.model_positions(cfg, L.single_length_batch(task, n, 32, g), g, task)
    assert torch.equal(batch.positions[:, n + 1] - batch.positions[:, 0], torch.full((32,), n + 1))
    assert int(batch.positions.max()) < cfg.option("digit_places")
    with pytest.raises(ValueError, match="top_marker places the \\+ of a digit-places layout"):
        L.ModelConfig(encoding="rope", options={"top_marker": True})
    assert "top_marker" not in str(L._hashed_fields(L.addition_run(*L.ADDITION_BEST).to_dict()))


def test_more_places_are_refused_where_they_would_change_what_the_model_computes():
    narrow = L.exact_run(0, **L.DIGIT_SETS_WINDOW_1)
    wider = L.with_more_places(narrow, 2100)
    assert wider.model.option("digit_places") == 2100 and wider.eval_max_len == 2096  # size n's places reach n + 3
    assert (
        wider.model.option("attention_window") == narrow.model.option("attention_window") and wider.seed == narrow.seed
    )
    with pytest.raises(ValueError, match="absolute positions"):
        L.with_more_places(
            dataclasses.replace(narrow, model=dataclasses.replace(narrow.model, encoding="sinusoidal")), 640
        )
    no_window = L.exact_run(0, attention_window=0)
    with pytest.raises(ValueError, match="attention_window=0 over 320 places"):
        L.with_more_places(no_window, 640)
    assert (
        L.with_more_places(L.exact_run(0), 640).model.option("attention_window") == 2
    )  # the window of 2 may have more
    with pytest.raises(ValueError, match="out of range; valid: an integer >= the 320 trained"):
        L.with_more_places(narrow, 100)
    with pytest.raises(ValueError, match="without digit places"):
        L.with_more_places(L.make_run("addition", "rope", 0), 640)


def test_a_window_model_computes_the_same_when_its_places_are_shifted():
    """Why more places change nothing: with a relative encoding and a window, moving every
    position of a sequence by the same amount leaves the logits as they were."""
    torch.manual_seed(0)
    cfg = L.with_more_places(L.exact_run(0, **L.DIGIT_SETS_WINDOW_1), 2100)
    model = L.make_model(cfg).eval()
    task = cfg.make_task()
    batch = L.evaluation_batch(task, 12, 4, 1234, cfg.model)
    with torch.no_grad():
        here = model(batch.inputs, positions=batch.positions[:, :-1])
        there = model(batch.inputs, positions=batch.positions[:, :-1] + 1500)
    assert torch.allclose(here, there, atol=1e-4)


def test_far_draws_name_random_sums_a_family_or_a_digit_pair():
    task = L.with_more_places(L.exact_run(0, **L.DIGIT_SETS_WINDOW_1), 640).make_task()
    assert L.far_draw(task, "random") is task
    assert isinstance(L.far_draw(task, "zeros and nines"), L.StructuredAddition)
    pair = L.far_draw(task, "09")
    assert isinstance(pair, L.DigitSetAddition) and pair.format == task.format
    for bad in ("90", "00", "zeros", "1"):  # a pair is two different digits, smaller first
        with pytest.raises(ValueError, match="unknown draw"):
            L.far_draw(task, bad)


def saved_window_model(folder) -> L.RunConfig:
    """The window-1 configuration, its untrained weights saved under `folder` as a run's are."""
    torch.manual_seed(0)
    cfg = L.exact_run(0, **L.DIGIT_SETS_WINDOW_1)
    path = L.weights_path(folder, cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(L.make_model(cfg).state_dict(), path)
    return cfg


def test_far_scores_score_saved_weights_with_more_places_and_cache_each_cell(tmp_path, monkeypatch):
    cfg = saved_window_model(tmp_path)
    cache = tmp_path / "far.csv"
    got = L.far_scores([cfg], 400, [4, 360], ["random", "09"], count=2, results_dir=tmp_path, cache=cache)
    assert got[["draw", "n"]].values.tolist() == [["random", 4], ["random", 360], ["09", 4], ["09", 360]]
    assert got["exact_match"].between(0, 1).all() and (got["seconds per sum"] > 0).all()
    assert len(L.read_keyed_cache(cache, L.FAR_CACHE_COLUMNS, "far-scores")) == 8  # two measures a cell
    monkeypatch.setattr(L, "load_with_more_places", lambda *a: pytest.fail("a cached cell loads no weights"))
    again = L.far_scores([cfg], 400, [4, 360], ["random", "09"], count=2, results_dir=tmp_path, cache=cache)
    pd.testing.assert_frame_equal(again, got)


def test_window_share_counts_the_causal_scores_within_the_window():
    task = lsd_addition()
    # inputs at places 0 2 1 0 2 1 1 2 3 4 (the two-digit sum above): 55 causal scores
    places = torch.tensor(L.place_layout(task, 2))[:-1]
    within = sum(1 for q in range(10) for k in range(q + 1) if abs(int(places[q]) - int(places[k])) <= 1)
    assert L.window_share(task, 2, 1) == pytest.approx(within / 55)
    assert L.window_share(task, 2, 10) == 1.0  # a window wider than every place sees every key
    shares = [L.window_share(task, n, 1) for n in (8, 64, 512)]
    assert shares == sorted(shares, reverse=True) and shares[-1] < 0.01  # the dense scores grow as n^2


def test_place_attention_adds_to_one_and_a_window_of_one_reads_three_places():
    torch.manual_seed(0)
    cfg = places_config(n_layers=2, attention_window=1)
    model = L.DecoderOnlyLM(cfg, lsd_addition().vocab_size)
    table = L.place_attention(model, lsd_addition(), 12, column=6)
    sums = table.groupby(["layer", "head"])["weight"].sum()
    assert len(sums) == 2 * cfg.n_heads and sums.to_numpy() == pytest.approx(1.0)
    far = table[(table["kind"] == "other") | (table["offset"].abs() > 1)]
    assert (far["weight"] == 0).all()  # BOS and + sit at place 0, far below column 6's
    near = table[(table["kind"] == "operands") & (table["offset"].abs() <= 1)]
    assert (near.groupby("offset")["weight"].sum() > 0).all()  # an untrained model spreads over all three
    with pytest.raises(ValueError, match="answer columns 0..12"):
        L.place_attention(model, lsd_addition(), 12, column=13)


def test_far_table_takes_the_lowest_family_and_pair_per_size_and_seed():
    scores = pd.DataFrame(
        [
            (0, "random", 512, 1.0),
            (0, "zeros and nines", 512, 0.75),
            (0, "all zeros", 512, 1.0),
            (0, "09", 512, 0.5),
            (1, "random", 512, 0.25),
            (0, "random", 1000, 1.0),
        ],
        columns=["seed", "draw", "n", "exact_match"],
    )
    by_draw = L.far_by_draw(scores, 512, ["random", "zeros and nines", "two digits"])
    assert by_draw.index.tolist() == ["random", "zeros and nines"]  # two digits was not scored
    assert by_draw.loc["random"].tolist() == [100.0, 25.0] and by_draw.columns.tolist() == [0, 1]
    with pytest.raises(ValueError, match="sizes scored: \\[512, 1000\\]"):
        L.far_by_draw(scores, 2000, ["random"])
    table = L.far_table(scores)
    assert table.loc[(512, 0)].tolist() == [100.0, 2, 75.0, 1, 50.0]
    assert table.loc[(512, 1), "random (%)"] == 25.0 and table.loc[(512, 1), "families"] == 0
    assert pd.isna(table.loc[(1000, 0), "lowest family (%)"])


def test_far_cost_times_every_size_side_by_side_and_caches_them(tmp_path, monkeypatch):
    cfg = saved_window_model(tmp_path)
    cache = tmp_path / "far_cost.csv"
    cost = L.far_cost(cfg, 400, [4, 8], count=2, repeats=1, results_dir=tmp_path, cache=cache)
    assert cost.index.tolist() == [4, 8] and (cost["seconds per sum"] > 0).all()
    assert pd.isna(cost["growth exponent"].iloc[0]) and cost["growth exponent"].notna().iloc[1]
    assert cost["scores the window can see (%)"].iloc[1] < cost["scores the window can see (%)"].iloc[0]
    monkeypatch.setattr(L, "load_with_more_places", lambda *a: pytest.fail("cached sizes load no weights"))
    pd.testing.assert_frame_equal(L.far_cost(cfg, 400, [4, 8], count=2, results_dir=tmp_path, cache=cache), cost)
    with pytest.raises(ValueError, match="distinct and increasing"):
        L.far_cost(cfg, 400, [8, 4], count=2, results_dir=tmp_path, cache=cache)


def test_addition_length_panels_choose_what_the_figure_draws():
    def rows(stage, arm, encoding, inside, seed=0, settings=""):
        head = {"stage": stage, "arm": arm, "encoding": encoding, "settings": settings, "seed": seed}
        return [head | {"n": n, "exact_match": inside if n <= 8 else 0.0} for n in (1, 8, 16)]

    arm, enc = L.ADDITION_BEST
    best = L.addition_ingredients(L.addition_run(arm, enc))
    curves = pd.DataFrame(
        rows("pilot", best, enc, 1.0)
        + rows("pilot", best, enc, 1.0, seed=1)
        + rows("pilot", "lsd + places", "rope", 0.95)  # learned in distribution: drawn
        + rows("pilot", "lsd", "nope", 0.5)  # not learned: left out
        + rows("ablation", best, "alibi", 0.3)  # the recipe, another encoding
        + rows("ablation", "lsd + places", enc, 0.8)  # the encoding, one ingredient changed
    )
    panels = L.addition_length_panels(curves)
    assert sorted(panels["best"]["seed"].unique()) == [0, 1]
    assert set(zip(panels["pilot"]["arm"], panels["pilot"]["encoding"])) == {("lsd + places", "rope")}
    assert set(panels["encodings"]["encoding"]) == {"alibi"}
    assert set(panels["ingredients"]["encoding"]) == {enc} and panels["ingredients"]["what"].notna().all()
    plt.close(L.plot_addition_lengths(panels, curves.iloc[:0].assign(encoding=[]), 0.5))
