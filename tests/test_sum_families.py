"""Structured sums (section 18, notebook 11): each family draws the sums it says, is scored as every
sum is, and lands in the records of equal-format addition runs."""

import hashlib
import json

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
from support import tiny

import lengen_helpers as L

SIZES = (1, 2, 3, 5, 8, 13, 40)


def sums(family: str, n: int, answer: str = "lsd", count: int = 64) -> list[tuple[str, str, int]]:
    """(a, b, answer) of `count` sums the family draws at size n: operands as written, the answer
    read as a number."""
    task = L.StructuredAddition(family, answer=answer)
    batch = L.evaluation_batch(task, n, count, seed=7)
    out = []
    for row in batch.tokens.tolist():
        text = "".join(task.decode(row[1:-1]))
        a, rest = text.split("+")
        b, written = rest.split("<sep>")
        assert len(a) == len(b) == n and len(written) == n + 1
        out.append((a, b, int(written[::-1] if answer == "lsd" else written)))
    return out


def column_sums(a: str, b: str) -> list[int]:
    return [int(x) + int(y) for x, y in zip(a, b)]  # most significant first


@pytest.mark.parametrize("family", list(L.SUM_FAMILIES))
@pytest.mark.parametrize("answer", ["lsd", "msd"])
def test_every_family_writes_true_sums_in_the_runs_format(family, answer):
    for n in SIZES:
        for a, b, total in sums(family, n, answer):
            assert total == int(a) + int(b)


PROPERTIES = {
    "all zeros": lambda a, b, n: a == b == "0" * n,
    "all nines": lambda a, b, n: a == b == "9" * n,
    "one digit repeated": lambda a, b, n: len(set(a)) == len(set(b)) == 1,
    "nines plus one": lambda a, b, n: {a, b} == {"9" * n, "0" * (n - 1) + "1"} or (n == 1 and {a, b} == {"9", "1"}),
    "one operand zero": lambda a, b, n: "0" * n in (a, b),
    "much shorter operand": lambda a, b, n: (
        max(len(a.lstrip("0")), len(b.lstrip("0"))) == n
        and min(len(a.lstrip("0")), len(b.lstrip("0"))) <= max(1, n // 4)
    ),
    "both short": lambda a, b, n: max(len(a.lstrip("0")), len(b.lstrip("0"))) <= max(1, n // 4),
    "long carry": lambda a, b, n: column_sums(a, b)[-1] >= 10 and all(s == 9 for s in column_sums(a, b)[:-1]),
    "carry everywhere": lambda a, b, n: all(s >= 10 for s in column_sums(a, b)),
    "no carry": lambda a, b, n: all(s <= 9 for s in column_sums(a, b)),
    "zeros and nines": lambda a, b, n: set(a + b) <= {"0", "9"},
    "two digits": lambda a, b, n: len(set(a + b)) <= 2,
    "one carry among zeros": lambda a, b, n: (
        sum(s > 0 for s in column_sums(a, b)) == 1 and max(column_sums(a, b)) >= 10 and a.count("0") == n - 1
    ),
    "one carry into nines": lambda a, b, n: (
        "9" * n in (a, b) and sum(c != "0" for c in (b if a == "9" * n else a)) == 1
    ),
    "skewed digits": lambda a, b, n: True,  # a tendency, checked by its counts below
    "equal operands": lambda a, b, n: a == b,
    "a pair per operand": lambda a, b, n: len(set(a)) <= 2 and len(set(b)) <= 2,
}


@pytest.mark.parametrize("family", list(L.SUM_FAMILIES))
def test_every_family_draws_only_the_sums_it_says(family):
    assert set(PROPERTIES) == set(L.SUM_FAMILIES)  # a new family brings its check here
    for n in SIZES:
        drawn = sums(family, n)
        assert all(PROPERTIES[family](a, b, n) for a, b, _ in drawn), family


def test_families_that_draw_vary_and_either_operand_can_be_the_special_one():
    assert len({(a, b) for a, b, _ in sums("one digit repeated", 5)}) > 20
    special = {  # the operand the family fixes or shortens, at 8 digits
        "one operand zero": lambda x: x == "0" * 8,
        "nines plus one": lambda x: x == "00000001",
        "much shorter operand": lambda x: len(x.lstrip("0")) <= 2,
    }
    for family, is_special in special.items():
        assert {is_special(a) for a, _, _ in sums(family, 8)} == {True, False}, family
    carried = [a[-1] + b[-1] for a, b, _ in sums("long carry", 13)]
    assert len(set(carried)) > 10  # the units pair itself is drawn, not fixed


def test_a_family_has_prompts_of_its_own_and_the_same_ones_every_time():
    keys = {L.StructuredAddition(f, answer="lsd").prompt_key for f in L.SUM_FAMILIES}
    assert len(keys) == len(L.SUM_FAMILIES)
    first, again = (L.evaluation_batch(L.StructuredAddition("no carry"), 6, 16, 1234) for _ in range(2))
    assert torch.equal(first.tokens, again.tokens)


def test_bad_families_and_formats_are_named():
    with pytest.raises(ValueError, match="unknown sum family 'zeros'.*all zeros"):
        L.StructuredAddition("zeros")
    with pytest.raises(ValueError, match="format 'equal' only"):
        L.StructuredAddition("all zeros", format="paper")
    with pytest.raises(ValueError, match="addition's, without a scratchpad"):
        L.family_exact_match(L.DecoderOnlyLM(L.ModelConfig()), L.get_task("copy"), [3])


def test_family_sizes_are_every_size_to_64_then_every_16th():
    assert L.family_sizes(8) == list(range(1, 9))
    assert L.family_sizes(128) == [*range(1, 65), 80, 96, 112, 128]


def test_family_exact_match_is_exact_match_on_the_familys_prompts():
    model = L.perturb_weights(L.DecoderOnlyLM(L.ModelConfig(encoding="rope"), vocab_size=15).eval())
    task = L.get_task("addition", {"answer": "lsd"})
    got = L.family_exact_match(model, task, [2, 3], families=["no carry"], n_per_size=16)
    want = L.exact_match_by_length(model, L.StructuredAddition("no carry", answer="lsd"), [2, 3], 16)
    assert got == {"no carry": {str(n): v for n, v in want.items()}}


def small_addition(**kw) -> L.RunConfig:
    model = dict(d_model=16, n_heads=2, n_layers=1, d_ff=32)
    return tiny("addition", "rope", task_options={"answer": "lsd"}, steps=3, warmup_steps=1, **model, **kw)


def test_an_equal_format_addition_record_keeps_its_families_and_others_do_not():
    _, record = L.train_run(small_addition(), progress=False)
    assert set(record["families"]) == set(L.SUM_FAMILIES)
    assert all(set(em) == {str(n) for n in range(1, 7)} for em in record["families"].values())
    assert all(0 <= v <= 1 for em in record["families"].values() for v in em.values())
    paper = tiny("addition", "rope", task_options={"format": "paper"}, steps=3, warmup_steps=1)
    assert "families" not in L.train_run(paper, progress=False)[1]
    assert "families" not in L.train_run(tiny(steps=3, warmup_steps=1), progress=False)[1]


def test_add_families_scores_saved_runs_once_and_refuses_other_tasks(tmp_path):
    cfg = small_addition()
    copy = tiny(steps=3, warmup_steps=1)
    L.sweep([cfg, copy], results_dir=tmp_path, progress=False)
    path = L.record_path(tmp_path, cfg)
    without = json.loads(path.read_text())
    kept = without.pop("families")
    path.write_text(json.dumps(without))
    assert L.add_families([cfg], tmp_path) == [cfg.name]
    rec = L.read_record(path)
    assert rec["families"] == kept  # the same scores as at training: the saved weights, the same prompts
    assert {k: v for k, v in rec.items() if k != "families"} == without
    assert L.add_families([cfg], tmp_path) == []  # already there: left as it is
    # a family registered since is scored alone; the others are kept as they were, not recomputed
    partial = json.loads(path.read_text())
    dropped = partial["families"].pop("zeros and nines")
    partial["families"]["all zeros"] = {n: -1.0 for n in partial["families"]["all zeros"]}  # a marker
    path.write_text(json.dumps(partial))
    assert L.add_families([cfg], tmp_path) == [cfg.name]
    after = L.read_record(path)["families"]
    assert after["zeros and nines"] == dropped and set(after["all zeros"].values()) == {-1.0}
    with pytest.raises(ValueError, match="equal-format addition runs only"):
        L.add_families([copy], tmp_path)


def test_record_entries_may_not_replace_what_every_record_has():
    with pytest.raises(ValueError, match="reserved"):
        L.register_record_entry("exact_match", lambda config, model: None)


def test_queries_that_reach_only_zeros_share_one_state_whatever_the_weights():
    cfg = L.ModelConfig(encoding="rope", options={"digit_places": 40, "attention_window": 2})
    model = L.perturb_weights(L.DecoderOnlyLM(cfg, 15).eval())
    task = L.get_task("addition", {"answer": "lsd"})
    states = L.answer_query_states(model, task, 12, "all zeros", count=4)
    assert states["predicts"].tolist() == [f"digit {p}" for p in range(1, 14)] + ["EOS"]
    assert states["target (first sum)"].tolist() == ["0"] * 13 + ["</s>"]
    # three layers with a window of 2: from digit 8 up, every key within reach is a 0 (BOS and + sit at place 0)
    top = states[states["predicts"].isin([*(f"digit {p}" for p in range(8, 14)), "EOS"])]
    assert (top["tokens it sees"] == 1).all() and (top["closest state that must answer otherwise"] < 1e-5).all()
    low = states[states["predicts"].isin(["digit 1", "digit 2"])]
    assert (low["tokens it sees"] > 1).all() and (low["closest state that must answer otherwise"] > 1e-3).all()
    varied = L.answer_query_states(model, task, 12, "no carry", count=4)
    assert (varied["closest state that must answer otherwise"].dropna() > 1e-3).all()


def test_the_top_marker_gives_the_top_queries_states_apart_on_zeros():
    cfg = L.ModelConfig(encoding="rope", options={"digit_places": 40, "attention_window": 2, "top_marker": True})
    model = L.perturb_weights(L.DecoderOnlyLM(cfg, 15).eval())
    states = L.answer_query_states(model, L.get_task("addition", {"answer": "lsd"}), 12, "all zeros", count=4)
    top = states[states["predicts"].isin(["digit 12", "digit 13", "EOS"])]
    assert (top["tokens it sees"] == 2).all()  # 0 and the + above the operands
    assert top["closest state that must answer otherwise"].min() > 1e-3


def write_scored(tmp_path, cfg: L.RunConfig, floor: dict[int, float], family_floor: dict[str, dict[int, float]]):
    """A record of `cfg` with the given exact match on random sums and on each family (no training)."""
    rec = {
        "name": cfg.name,
        "config": cfg.to_dict(),
        "config_hash": cfg.hash,
        "training_revision": L.TRAINING_REVISION,
        "exact_match": {str(n): v for n, v in floor.items()},
        "loss_curve": {"every": 1, "mean_loss": [1.0]},
        # the ten families the tables judge, each perfect unless given
        "families": {f: {str(n): v for n, v in {**floor, **family_floor.get(f, {})}.items()} for f in L.TEN_FAMILIES}
        | {f: {str(n): v for n, v in em.items()} for f, em in family_floor.items()},
    }
    L._atomic_json(L.record_path(tmp_path, cfg), rec)


def test_family_table_and_goal_take_the_worst_seed_and_the_first_size_below_the_level(tmp_path):
    sizes = [*range(1, 65), 128]
    seeds = [L.structured_run(seed=s) for s in range(2)]
    perfect = {n: 1.0 for n in sizes}
    write_scored(tmp_path, seeds[0], perfect, {"all zeros": perfect, "no carry": perfect})
    dent = {**perfect, 5: 0.98, 128: 0.96}
    write_scored(tmp_path, seeds[1], perfect, {"all zeros": dent, "no carry": perfect})
    table = L.family_table({"best": seeds}, sizes=(4, 5, 128), results_dir=tmp_path)
    assert table.loc[("best", "all zeros"), "5"] == pytest.approx(98.0)
    assert table.loc[("best", "all zeros"), "first size < 99%"] == 5
    assert table.loc[("best", "no carry"), "seeds"] == 2 and pd.isna(
        table.loc[("best", "no carry"), "first size < 99%"]
    )
    goal = L.structured_goal([*seeds, L.structured_run(seed=2)], results_dir=tmp_path)
    assert goal.loc[0, "every size to 64 >= 99%"] and not goal.loc[1, "every size to 64 >= 99%"]
    assert goal.loc[1, "128 digits >= 95%"] and goal.loc[1, "128 digits: lowest (%)"] == pytest.approx(96.0)
    assert not goal.loc[2, "trained"]
    assert goal.loc[1, "lowest to 64 at"] == "all zeros, 5 digits"
    by_settings = L.structured_goal(seeds[1:], results_dir=tmp_path, by="settings")
    assert by_settings.index.tolist() == [L.addition_settings(seeds[1])]


def test_family_lowest_takes_the_worst_size_and_seed_and_names_no_size_at_100(tmp_path):
    sizes = [*range(1, 65), 80, 96, 112, 128]
    seeds = [L.structured_run(seed=s) for s in range(2)]
    perfect = {n: 1.0 for n in sizes}
    write_scored(tmp_path, seeds[0], perfect, {"all zeros": {**perfect, 96: 0.9}, "no carry": perfect})
    write_scored(tmp_path, seeds[1], perfect, {"all zeros": {**perfect, 7: 0.5, 9: 0.5}, "no carry": perfect})
    lowest = L.family_lowest({"best": seeds, "one seed": seeds[:1]}, results_dir=tmp_path)
    assert list(lowest.columns.get_level_values(0).unique()) == ["best", "one seed"]
    assert lowest.loc["all zeros", ("best", "lowest (%)")] == pytest.approx(50.0)
    assert lowest.loc["all zeros", ("best", "at (digits)")] == 7  # the first of the two lowest
    assert lowest.loc["all zeros", ("one seed", "at (digits)")] == 96  # a size past 64, scored
    assert lowest.loc["no carry", ("best", "at (digits)")] == "none"  # every size at 100%: no size, no <NA>
    assert "<NA>" not in lowest.to_string() and "NaN" not in lowest.to_string()
    with pytest.raises(ValueError, match="has a record"):
        L.family_lowest({"untrained": [L.structured_run(seed=5)]}, results_dir=tmp_path)


def test_a_record_without_families_is_named():
    with pytest.raises(ValueError, match="addition-x has no scores for all zeros, .*; add them with add_families"):
        L.family_scores({"name": "addition-x", "exact_match": {"1": 1.0}})
    with pytest.raises(ValueError, match="no scores for zeros and nines; add them"):
        L.family_scores({"name": "x", "exact_match": {}, "families": {}}, families=["zeros and nines"])


def test_plot_structured_draws_each_configuration_in_a_colour_of_its_own(tmp_path):
    sizes = [*range(1, 65), 128]
    runs = {"before": [L.addition_run(*L.ADDITION_BEST, seed=s) for s in range(2)], "after": L.structured_study()[:1]}
    for cfg in runs["before"]:
        em = {n: 1.0 for n in range(1, 65)}
        write_scored(tmp_path, cfg, em, {"all zeros": {**em, 8: 0.0}, "no carry": em})
    full = {n: 1.0 for n in sizes}
    write_scored(tmp_path, runs["after"][0], full, {"all zeros": full, "no carry": full})
    fig = L.plot_structured(runs, results_dir=tmp_path)
    left, right = fig.axes
    assert [t.get_text() for t in fig.legends[0].get_texts()][:2] == ["after (1 seed)", "before (2 seeds)"]
    assert left.get_legend() is None and right.get_legend() is None  # one legend, below both
    worst_before = right.get_lines()[0].get_ydata()
    assert min(worst_before) == 0.0 and len(worst_before) == 64  # the zeros' dent at 8 digits, to 64
    assert max(right.get_lines()[1].get_xdata()) == 128
    colours = [line.get_color() for line in left.get_lines()[:2]]  # both RoPE: told apart all the same
    assert colours == [L.ordinal_color(0), L.ordinal_color(1)] and L.encoding_color("rope") not in colours
    plt.close(fig)


def test_run_operands_are_runs_of_repeated_digits_and_still_true_sums():
    task = L.get_task("addition", {"answer": "lsd", "operands": "runs"})
    x, y = task.sample(8, 512, torch.Generator().manual_seed(3))
    n = 8
    a, b = x[:, :n] - L.N_SPECIAL, x[:, n + 1 :] - L.N_SPECIAL
    value = lambda d: sum(int(v) * 10**i for i, v in enumerate(reversed(d)))  # noqa: E731
    for row_a, row_b, row_y in zip(a.tolist(), b.tolist(), (y - L.N_SPECIAL).tolist()):
        assert value(row_y[::-1]) == value(row_a) + value(row_b)
    constant = lambda d: (d == d[:, :1]).all(1).float().mean()  # noqa: E731
    uniform = L.get_task("addition", {"answer": "lsd"}).sample(8, 512, torch.Generator().manual_seed(3))[0]
    assert constant(a) > 0.05 and constant(uniform[:, :n]) == 0  # one digit throughout: common, not 1 in 10^7
    assert 0.3 < (a[:, 1:] == a[:, :-1]).float().mean() < 0.7  # half the operands uniform, half in runs


def test_carry_into_zeros_counts_zero_columns_a_carry_reaches():
    a = torch.tensor([[0, 0, 9, 5], [0, 0, 0, 0]])
    b = torch.tensor([[0, 0, 0, 5], [0, 0, 0, 0]])  # 0095 + 0005: 5 + 5 carries, through 9 + 0, into one 0 + 0
    assert L.carry_into_zeros(a, b) == 1 / 8


def test_sparse_digits_are_zero_at_each_rows_own_rate():
    zero = torch.tensor([[0.0], [1.0], [0.5], [0.9]]).repeat_interleave(500, dim=0)
    d = L.sparse_digits(zero, 400, torch.Generator().manual_seed(5))
    assert d.shape == (2000, 400) and d.min() >= 0 and d.max() <= 9
    share = (d == 0).float().mean(dim=1).view(4, 500).mean(dim=1)  # zeros: the rate, plus 1/10 of the rest
    assert torch.allclose(share, torch.tensor([0.1, 1.0, 0.55, 0.91]), atol=0.01)


def true_lsd_sums(operands: str, n: int, count: int, seed: int):
    """The operands (a, b) of `count` n-digit training sums drawn with `operands`, after checking
    that the first 500 answers (least significant digit first) are their true sums."""
    task = L.get_task("addition", {"answer": "lsd", "operands": operands})
    x, y = task.sample(n, count, torch.Generator().manual_seed(seed))
    a, b = x[:, :n] - L.N_SPECIAL, x[:, n + 1 :] - L.N_SPECIAL
    value = lambda d: sum(int(v) * 10**i for i, v in enumerate(reversed(d)))  # noqa: E731
    for row_a, row_b, row_y in zip(a[:500].tolist(), b[:500].tolist(), (y[:500] - L.N_SPECIAL).tolist()):
        assert value(row_y[::-1]) == value(row_a) + value(row_b)
    return a, b


def test_mixed_operands_are_true_sums_drawn_three_ways_with_carries_into_zeros_more_often():
    n = 8
    drawn = {}
    for operands in ("uniform", "runs", "mixed"):
        a, b = true_lsd_sums(operands, n, 6000, seed=3)
        drawn[operands] = (a, b)
    a, b = drawn["mixed"]
    assert 0.2 < (a[:, 1:] == a[:, :-1]).float().mean() < 0.5  # a third in runs, a third sparse, a third uniform
    assert 0.15 < (a == 0).float().mean() < 0.35  # uniform: 0.1; sparse rows add zeros
    # what the mixture is for: a carry reaching a column of 0 + 0
    rate = {k: L.carry_into_zeros(*ab) for k, ab in drawn.items()}
    assert rate["mixed"] > 1.5 * rate["uniform"] > 1.5 * rate["runs"]


def test_set_digits_draw_each_row_from_two_or_three_digits():
    a, b = L.set_digits(4000, 16, torch.Generator().manual_seed(0))
    distinct = torch.tensor([len(set(ra) | set(rb)) for ra, rb in zip(a.tolist(), b.tolist())])
    assert distinct.min() >= 1 and distinct.max() <= 3
    assert 0.4 < (distinct == 2).float().mean() < 0.6 and 0.4 < (distinct == 3).float().mean() < 0.6
    assert set(a.unique().tolist()) == set(range(10))  # every digit belongs to some set


def test_mixed_sets_are_true_sums_that_show_long_chains_of_carries_more_often():
    n, chains = 8, {}
    for operands in ("uniform", "mixed", "mixed-sets"):
        a, b = true_lsd_sums(operands, n, 8000, seed=1)
        chains[operands] = float(((a + b) >= 10).all(dim=1).float().mean())  # every column makes a carry
    assert chains["mixed-sets"] > 2 * chains["mixed"] > 10 * chains["uniform"]


# The training streams committed records were drawn from: a fingerprint of the sums each operand
# sampler draws from one seed. A change here changes what those records' configs would train on.
STREAM_PRINTS = {
    ("equal", "lsd", "uniform", 8): "2c477f9362",
    ("equal", "lsd", "runs", 8): "f943bfad4b",
    ("equal", "lsd", "mixed", 8): "9d8b296345",
    ("paper", "lsd", "mixed", 3): "e6d44ffd0f",
    ("equal", "lsd", "mixed-sets", 8): "d839955322",
}


@pytest.mark.parametrize("key", list(STREAM_PRINTS))
def test_operand_samplers_draw_the_streams_the_records_were_trained_on(key):
    fmt, answer, operands, n = key
    task = L.get_task("addition", {"format": fmt, "answer": answer, "operands": operands})
    x, y = task.sample(n, 64, torch.Generator().manual_seed(n))
    assert hashlib.sha1(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()[:10] == STREAM_PRINTS[key]


# What each family draws at 12 digits from seed 12: the prompts its committed scores were made on.
FAMILY_PRINTS = {
    "all zeros": "7cb41fea50",
    "all nines": "514950242e",
    "one digit repeated": "d17fb97081",
    "nines plus one": "8aa6ff48a9",
    "one operand zero": "2b6cb8758d",
    "much shorter operand": "466c325a71",
    "both short": "84c77208ac",
    "long carry": "bb1f530f38",
    "carry everywhere": "c956900280",
    "no carry": "69ec8c1486",
    "zeros and nines": "b22df93bed",
    "two digits": "38073dbc39",
    "one carry among zeros": "0597924ace",
    "one carry into nines": "6665efb33a",
    "skewed digits": "9b347cb35b",
    "equal operands": "f7a046fd9a",
    "a pair per operand": "aa01f6df82",
}


def test_every_family_draws_the_sums_its_committed_scores_were_made_on():
    assert set(FAMILY_PRINTS) == set(L.SUM_FAMILIES)
    for name, family in L.SUM_FAMILIES.items():
        a, b = family.draw(12, 64, torch.Generator().manual_seed(12))
        assert hashlib.sha1(a.numpy().tobytes() + b.numpy().tobytes()).hexdigest()[:10] == FAMILY_PRINTS[name], name


def test_an_operand_mixture_registers_as_a_value_of_the_option_and_names_clash():
    assert {"mixed", "mixed-sets"} <= set(L.Addition.options["operands"]) == {"uniform", "runs", *L.OPERAND_MIXTURES}
    with pytest.raises(ValueError, match="operands 'mixed' exist already"):
        L.register_operand_mixture("mixed")(lambda n, b, g: (None, None))
    with pytest.raises(ValueError, match="operands='sets' is not valid.*mixed-sets"):
        L.get_task("addition", {"operands": "sets"})


def test_train_task_options_change_training_only_and_earlier_runs_keep_their_hashes():
    base = L.structured_run(top_marker=True)
    runs = L.structured_run(top_marker=True, train_task_options={"operands": "runs"})
    assert runs.hash != base.hash and runs.name == base.name
    assert runs.make_task().key == "addition.lsd" and runs.make_training_task().key == "addition.lsd.runs"
    assert "train_task_options" not in str(L._hashed_fields(base.to_dict()))
    same = L.structured_run(top_marker=True, train_task_options={"operands": "uniform"})
    assert same.train_task_options == {} and same.hash == base.hash  # the test's own option: nothing changes
    g = torch.Generator().manual_seed(0)
    drawn = L.training_batch(runs.make_training_task(), runs, g).tokens
    assert drawn.shape[0] >= 1
    with pytest.raises(ValueError, match="option operands='zeros' is not valid.*mixed"):
        L.structured_run(train_task_options={"operands": "zeros"})


def test_a_run_trained_on_runs_draws_them_and_is_scored_on_uniform_sums():
    cfg = small_addition(train_task_options={"operands": "runs"})
    plain = small_addition()
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    mixed = L.training_batch(cfg.make_training_task(), cfg, g1)
    uniform = L.training_batch(plain.make_training_task(), plain, g2)
    assert not torch.equal(mixed.tokens, uniform.tokens)
    scored, scored_plain = (L.evaluation_batch(c.make_task(), 5, 64, 1234, c.model) for c in (cfg, plain))
    assert torch.equal(scored.tokens, scored_plain.tokens)  # the test sums: uniform, the same for both
    assert (scored.tokens[:, 1:6] == scored.tokens[:, 1:2]).all(1).float().mean() < 0.01


def test_family_errors_count_each_sums_first_wrong_token_and_the_right_ones():
    cfg = L.structured_run(top_marker=True)
    torch.manual_seed(0)
    model = L.perturb_weights(L.make_model(cfg), 0.05).eval()
    task = cfg.make_task()
    errors = L.family_errors(model, task, 6, "no carry", count=64)
    assert errors["sums"].sum() == 64
    batch = L.evaluation_batch(L.StructuredAddition("no carry", **task.format), 6, 64, 1234, cfg.model)
    with torch.no_grad():
        right = int(L.exact_match_rows(model, batch).sum())
    assert errors.set_index(["should be", "writes"])["sums"].get(("right", "right"), 0) == right
    wrong = errors[errors["should be"] != "right"]
    assert (wrong["should be"] != wrong["writes"]).all()
    assert set(wrong["should be"]) <= set("0123456789") | {"</s>"}


@pytest.mark.parametrize("family", list(L.SUM_FAMILIES))
def test_family_example_writes_a_true_sum_of_the_family_at_its_size(family):
    for n in (1, 4, 9):
        a, rest = L.family_example(family, n).split(" + ")
        b, total = rest.split(" = ")
        a, b, total = (s.replace(" ", "") for s in (a, b, total))
        assert len(a) == len(b) == n and len(total) == n + 1  # equal format: operands and answer padded
        assert int(a) + int(b) == int(total)
        draw = L.SUM_FAMILIES[family].draw(n, 1, torch.Generator().manual_seed(0))
        assert [a, b] == ["".join(map(str, row[0].tolist())) for row in draw]  # the family's own draw
    with pytest.raises(ValueError, match="sum family"):
        L.family_example("all fives", 3)


def test_the_steps_ablation_is_the_second_choice_at_the_first_choices_steps(tmp_path):
    ablation = L.structured_steps_ablation()
    best = {c.seed: c for c in L.structured_study() if c.steps == L.STRUCTURED_BEST["steps"]}
    for cfg in ablation:
        assert cfg.steps == 5_000 and cfg.seed in (1, 2)
        assert cfg.to_dict() | {"steps": best[cfg.seed].steps} == best[cfg.seed].to_dict()  # only the steps differ
    seed0 = L.structured_run(seed=0, **(L.STRUCTURED_BEST | {"steps": 5_000}))
    assert seed0.hash == L.structured_pilot()[1].hash  # seed 0 is the pilot's second arm: trained once
    stages = {cfg.hash: stage for stage, cfg, _ in L.addition_runs(tmp_path)}
    assert [stages[c.hash] for c in ablation] == ["structured ablation"] * 2
    assert stages[seed0.hash] == "structured pilot"


def test_column_kinds_by_hand():
    # 905 + 095 (most significant first): units 5 + 5 = 10 makes a carry; tens 0 + 9 = 9 passes it
    # on with a carry in; hundreds 9 + 0 likewise; the top digit is the carry out, 1
    kind, carry_in = L.column_kinds(torch.tensor([[9, 0, 5]]), torch.tensor([[0, 9, 5]]))
    names = [L.COLUMN_KINDS[k] for k in kind[0].tolist()]
    assert names == ["makes a carry", "passes it on", "passes it on", "the top digit"]
    assert carry_in[0].tolist() == [0, 1, 1, 1]
    kind, carry_in = L.column_kinds(torch.tensor([[1, 4]]), torch.tensor([[0, 4]]))  # 14 + 04: no carry
    assert [L.COLUMN_KINDS[k] for k in kind[0].tolist()] == ["stops it", "stops it", "the top digit"]
    assert carry_in[0].tolist() == [0, 0, 0]


@pytest.mark.parametrize("answer", ["lsd", "msd"])
def test_column_decisions_read_each_digit_of_its_own_column(answer):
    """Each row's column is checked against the written answer: the digit the task writes for
    that column is (its two digits + its carry in) mod 10, so the operands, the columns and the
    carries are read where they are."""
    task = L.get_task("addition", {"format": "equal", "answer": answer})
    sums_task = L.StructuredAddition("zeros and nines", **task.format)
    model = L.DecoderOnlyLM(L.ModelConfig(encoding="nope", n_layers=1, d_model=16, n_heads=2, d_ff=32), task.vocab_size)
    n, count = 6, 32
    d = L.column_decisions(model, task, n, sums_task, count=count, seed=3)
    assert len(d) == count * (n + 1) and set(d["kind"]) <= set(L.COLUMN_KINDS)
    batch = L.evaluation_batch(sums_task, n, count, 3)
    a, b = batch.tokens[:, 1 : n + 1] - L.N_SPECIAL, batch.tokens[:, n + 2 : 2 * n + 2] - L.N_SPECIAL
    written = batch.tokens[:, 2 * n + 3 : 3 * n + 4] - L.N_SPECIAL  # after BOS, a, +, b and SEP
    units_first = written if answer == "lsd" else written.flip(1)
    padded = torch.cat([(a + b).flip(1), torch.zeros(count, 1, dtype=torch.long)], dim=1)
    for _, r in d.sample(40, random_state=0).iterrows():
        total = int(padded[r["sum"], r["column"]]) + r["carry in"]
        assert int(units_first[r["sum"], r["column"]]) == total % 10
        if r["column"] < n:  # the column's own digits, as written
            assert (r["a"], r["b"]) == (int(a[r["sum"], n - 1 - r["column"]]), int(b[r["sum"], n - 1 - r["column"]]))
    assert (d.loc[d["column"] == n, ["a", "b"]] == -1).all().all()  # the top digit's column holds none
    table = L.column_error_table({"s0": d})
    with pytest.raises(ValueError, match="in the run's format"):
        L.column_decisions(
            model, task, n, L.StructuredAddition("zeros and nines", answer="msd" if answer == "lsd" else "lsd")
        )
    assert table[("s0", "digits")].sum() == len(d) and table[("s0", "wrong (%)")].between(0, 100).all()


def test_the_column_error_figure_draws_a_bar_per_seed_and_a_cross_where_none_is_wrong():
    index = pd.MultiIndex.from_tuples([("makes a carry", 0), ("stops it", 1)], names=["kind", "carry in"])
    table = pd.concat(
        {
            f"seed {s}": pd.DataFrame({"wrong (%)": [w, 0.0], "digits": [10, 10]}, index=index)
            for s, w in ((0, 5.0), (1, 0.0))
        },
        axis=1,
    )
    clean = table.copy()
    clean[("seed 0", "wrong (%)")] = 0.0
    fig = L.plot_column_errors({"digits 0 and 9": table, "uniform": clean}, title="the model, 8 digits, 10 sums")
    ax, empty = fig.axes
    assert len(ax.patches) == 1  # seed 0's one bar above 0
    crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert sum(len(line.get_xdata()) for line in crosses) == 3  # seed 0's 0 and both of seed 1's
    assert all(y == pytest.approx(10.0) for line in crosses for y in line.get_ydata())  # at one wrong digit of 10
    assert ax.get_ylim()[0] == pytest.approx(5.0)  # the axis starts at half the resolution, not at a fixed floor
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["seed 0", "seed 1", "one wrong digit (the resolution)", "that seed: none wrong"]
    assert not empty.patches and "no digit wrong on any seed" in [t.get_text() for t in empty.texts]
    assert fig._suptitle.get_text() == "the model, 8 digits, 10 sums"
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)


def test_the_two_valued_and_skewed_families_cover_what_they_say():
    # every pair of digits can be drawn, and only two digits in a sum
    pairs = {tuple(sorted(set(a + b))) for a, b, _ in sums("two digits", 8, count=2048)}
    assert all(len(p) == 2 for p in pairs) and len(pairs) == 45
    assert {d for a, b, _ in sums("zeros and nines", 8) for d in a + b} == {"0", "9"}
    # skewed: one digit takes most of each operand (0.8 + 0.2 / 10 expected), and which one varies
    shares = [max(a.count(d) for d in set(a)) / 40 for a, _, _ in sums("skewed digits", 40, count=256)]
    assert 0.7 < sum(shares) / len(shares) < 0.9
    assert len({max(set(a), key=a.count) for a, _, _ in sums("skewed digits", 40)}) == 10
    # the isolated carry sits at every column
    where = {a.find(next(c for c in a if c != "0")) for a, _, _ in sums("one carry among zeros", 6, count=256)}
    assert where == set(range(6))


def test_digit_set_sums_draw_only_their_digits_and_are_true_sums():
    value = lambda d: sum(int(v) * 10**i for i, v in enumerate(reversed(d)))  # noqa: E731
    for pair in [(0, 9), (3, 4), (1, 8)]:
        task = L.DigitSetAddition(pair, answer="lsd")
        x, y = task.sample(12, 200, torch.Generator().manual_seed(1))
        a, b = x[:, :12] - L.N_SPECIAL, x[:, 13:] - L.N_SPECIAL
        assert set(torch.cat([a, b]).unique().tolist()) == set(pair)  # both digits, nothing else
        for row_a, row_b, row_y in zip(a.tolist(), b.tolist(), (y - L.N_SPECIAL).tolist()):
            assert value(row_y[::-1]) == value(row_a) + value(row_b)
    assert L.DigitSetAddition((9, 0)).prompt_key != L.DigitSetAddition((0, 8)).prompt_key
    assert len(L.DIGIT_PAIRS) == 45 and (0, 9) in L.DIGIT_PAIRS
    with pytest.raises(ValueError, match="digits must be integers from 0 to 9"):
        L.DigitSetAddition((0, 10))
    with pytest.raises(ValueError, match="format 'equal' only"):
        L.DigitSetAddition((0, 9), format="paper")


def test_planted_sums_hold_their_columns_at_one_place_and_are_true_sums():
    value = lambda d: sum(int(v) * 10**i for i, v in enumerate(reversed(d)))  # noqa: E731
    columns = [(9, 9), (8, 8), (5, 5)]
    for equal in (False, True):
        task = L.PlantedAddition(columns, equal, answer="lsd")
        n = 10
        x, y = task.sample(n, 300, torch.Generator().manual_seed(2))
        a, b = x[:, :n] - L.N_SPECIAL, x[:, n + 1 :] - L.N_SPECIAL
        starts = set()
        for row_a, row_b, row_y in zip(a.tolist(), b.tolist(), (y - L.N_SPECIAL).tolist()):
            assert value(row_y[::-1]) == value(row_a) + value(row_b)
            at = [i for i in range(n - 2) if row_a[i : i + 3] == [9, 8, 5] and row_b[i : i + 3] == [9, 8, 5]]
            assert at, (row_a, row_b)
            starts.add(at[0])
        assert starts == set(range(n - 2))  # every place, the top and the units included
        assert torch.equal(a, b) == equal
    assert L.PlantedAddition(columns).prompt_key != L.PlantedAddition(columns, equal=True).prompt_key
    assert L.PlantedAddition([(4, 6)]).prompt_key != L.PlantedAddition([(6, 4)]).prompt_key
    with pytest.raises(ValueError, match="pairs of digits from 0 to 9"):
        L.PlantedAddition([(9, 10)])
    with pytest.raises(ValueError, match="added to itself has equal digits"):
        L.PlantedAddition([(4, 6)], equal=True)
    with pytest.raises(ValueError, match="3 planted columns need sums of at least 3 digits; got n = 2"):
        L.PlantedAddition(columns).sample(2, 4, torch.Generator())
    with pytest.raises(ValueError, match="format 'equal' only"):
        L.PlantedAddition(columns, format="paper")


def test_wrong_digit_views_name_each_wrong_digit_by_its_column_and_those_below():
    # one sum, 3 digits, units first: columns 0, 1, 2 and the top (3); wrong at 2 and at the top
    d = pd.DataFrame(
        {
            "sum": [0] * 4 + [1] * 4,
            "column": [0, 1, 2, 3] * 2,
            "carry in": [0, 1, 1, 1, 0, 0, 0, 0],
            "a": [5, 8, 9, -1, 1, 1, 1, -1],
            "b": [5, 8, 9, -1, 1, 1, 1, -1],
            "right": [True, True, False, False, True, False, True, True],
        }
    )
    views = L.wrong_digit_views(d)
    assert views.columns.tolist() == ["the column", "1 below", "2 below", "carry in", "wrong digits"]
    rows = {tuple(r[:-1]): r[-1] for r in views.itertuples(index=False)}
    assert rows == {
        ("9 + 9", "8 + 8", "5 + 5", 1): 1,
        ("top", "9 + 9", "8 + 8", 1): 1,
        ("1 + 1", "1 + 1", "-", 0): 1,  # column 1 has one column below it, then none
    }
    assert L.wrong_digit_views(d.assign(right=True))["wrong digits"].sum() == 0


def test_planted_scores_score_each_run_plant_and_size(tmp_path, monkeypatch):
    cfgs = [L.structured_run(seed=s, eval_max_len=16) for s in range(2)]
    monkeypatch.setattr(L, "load_run_model", lambda cfg, results_dir: cfg.seed)
    seen = []

    def fake(model, task, sizes, n_per_size, seed):
        seen.append((model, task.prompt_key))
        return {n: 0.5 + model / 4 for n in sizes}

    monkeypatch.setattr(L, "exact_match_by_length", fake)
    plants = {"x": ([(9, 9)], True), "y": ([(4, 6)], False)}
    out = L.planted_scores(cfgs, plants, [4, 8], tmp_path, cache=None)
    assert out.loc["x", (8, "seed 1")] == 0.75 and out.loc["y", (4, "seed 0")] == 0.5
    assert out.shape == (2, 4) and len(seen) == 4 and len({k for _, k in seen}) == 2


def test_planted_scores_read_what_the_cache_holds_and_compute_the_rest(tmp_path, monkeypatch):
    cfgs = [L.structured_run(seed=s, eval_max_len=16) for s in range(2)]
    monkeypatch.setattr(L, "load_run_model", lambda cfg, results_dir: cfg.seed)
    seen = []

    def fake(model, task, sizes, n_per_size, seed):
        seen.append((model, task.prompt_key, tuple(sizes)))
        return {n: 0.5 + model / 4 + n / 100 for n in sizes}

    monkeypatch.setattr(L, "exact_match_by_length", fake)
    cache, plants = tmp_path / "planted.csv", {"x": ([(9, 9)], True)}
    first = L.planted_scores(cfgs[:1], plants, [4, 8], tmp_path, cache=cache)
    assert len(seen) == 1 and len(pd.read_csv(cache)) == 2
    both = L.planted_scores(cfgs, plants, [4, 8, 12], tmp_path, cache=cache)
    assert seen[1:] == [(0, seen[0][1], (12,)), (1, seen[0][1], (4, 8, 12))]  # only what the cache lacks
    assert both.loc["x", (8, "seed 0")] == first.loc["x", (8, "seed 0")] == pytest.approx(0.58)
    assert len(pd.read_csv(cache)) == 6
    L.planted_scores(cfgs, plants, [4, 8], tmp_path, n_per_size=64, cache=cache)
    assert len(seen) == 5  # another number of sums is another score
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a planted-scores cache"):
        L.planted_scores(cfgs, plants, [4], tmp_path, cache=tmp_path / "other.csv")


def test_digit_pair_scores_compute_what_the_cache_lacks_and_keep_the_rest(tmp_path, monkeypatch):
    cfgs = [L.structured_run(seed=s) for s in range(2)]
    for cfg in cfgs:
        L._atomic_json(L.record_path(tmp_path, cfg), {"config": cfg.to_dict()})
    seen = []
    monkeypatch.setattr(L, "load_run_model", lambda cfg, results_dir: cfg.seed)
    monkeypatch.setattr(
        L,
        "exact_match_by_length",
        lambda model, task, sizes, n, seed: (
            seen.append((model, task.prompt_key)) or {n: 0.5 + model / 4 for n in sizes}
        ),
    )
    cache = tmp_path / "pairs.csv"
    first = L.digit_pair_scores(cfgs[:1], sizes=(8, 64, 256), results_dir=tmp_path, cache=cache)
    assert len(first) == 45 * 2 and set(first["n"]) == {8, 64}  # 256 digits lie past its places: not scored
    assert len(seen) == 45 and seen[0][1].endswith("digits 01")
    both = L.digit_pair_scores(cfgs, sizes=(8, 64, 256), results_dir=tmp_path, cache=cache)
    assert len(seen) == 90  # seed 0 read from the cache, seed 1 computed
    assert both.groupby("seed")["exact_match"].first().tolist() == [0.5, 0.75]
    assert both["pair"].iloc[0] == "01" and len(pd.read_csv(cache)) == 180


def test_exactness_goal_takes_the_lowest_cell_over_random_sums_and_every_family(tmp_path):
    sizes = [*range(1, 65), 128, 256]
    cfgs = [L.exact_run(seed=s) for s in range(2)]
    perfect = {n: 1.0 for n in sizes}
    write_scored(tmp_path, cfgs[0], perfect, {"zeros and nines": perfect})
    write_scored(tmp_path, cfgs[1], {**perfect, 200: 1.0}, {"zeros and nines": {**perfect, 9: 0.985, 256: 0.97}})
    families = [*L.TEN_FAMILIES, "zeros and nines"]
    goal = L.exactness_goal([*cfgs, L.exact_run(seed=2)], results_dir=tmp_path, families=families)
    assert goal.loc[0, ">= 99% everywhere"] and goal.loc[0, "cells short of it"] == 0
    assert goal.loc[0, "lowest at"] == "none below 100%"
    assert (
        goal.loc[1, "lowest (%)"] == pytest.approx(97.0) and goal.loc[1, "lowest at"] == "zeros and nines, 256 digits"
    )
    assert not goal.loc[1, ">= 99% everywhere"] and goal.loc[1, "cells short of it"] == 2
    assert goal.loc[1, "scored to (digits)"] == 256 and not goal.loc[2, "trained"]


def test_exactness_verdict_reads_the_goal_the_trained_seeds_and_the_lowest_cell_at_a_size(tmp_path):
    sizes = [1, 8, 64, 256]
    cfgs = [L.exact_run(seed=s) for s in range(3)]
    perfect = {n: 1.0 for n in sizes}
    every = {f: perfect for f in L.SUM_FAMILIES}
    write_scored(tmp_path, cfgs[0], perfect, every)
    write_scored(tmp_path, cfgs[1], perfect, every | {"zeros and nines": {**perfect, 8: 0.995, 256: 0.98}})
    part = L.exactness_verdict(cfgs, tmp_path)  # seed 2 untrained
    assert part.trained == cfgs[:2] and not part.all_trained and not part.met
    assert part.statement().endswith("on all 3 seeds: False")
    assert part.lowest(256) == pytest.approx(98.0) and part.lowest(8) == pytest.approx(99.5)
    with pytest.raises(ValueError, match="scored at 9 digits"):
        part.lowest(9)
    table = part.families("w", (8, 256))
    assert table.loc[("w", "zeros and nines"), "256"] == "98.0" and table.loc[("w", "random"), "seeds"] == 2
    write_scored(tmp_path, cfgs[2], perfect, every)
    assert not L.exactness_verdict(cfgs, tmp_path).met  # all trained, seed 1 under 99% at 256
    write_scored(tmp_path, cfgs[1], perfect, every)
    whole = L.exactness_verdict(cfgs, tmp_path)
    assert whole.met and whole.statement().endswith("on all 3 seeds: True") and whole.lowest(256) == 100.0


def test_digit_pair_table_finds_the_worst_pair_and_counts_the_cells_short():
    scores = pd.DataFrame(
        [
            {"seed": s, "config_hash": "h", "pair": p, "n": n, "exact_match": 1.0 - (s == 1) * (p == "09") * n / 1000}
            for s in (0, 1)
            for p in ("01", "09")
            for n in (8, 64)
        ]
    )
    table = L.digit_pair_table(scores)
    assert table.loc[64, "lowest (%)"] == pytest.approx(93.6) and table.loc[64, "at pair"] == "{0, 9} (seed 1)"
    assert table.loc[8, "cells under 99%"] == 0 and table.loc[64, "cells under 99%"] == 1
    assert table.loc[64, "cells"] == 4 and table.loc[64, "seeds"] == 2


def test_training_carry_views_count_the_view_each_sampler_gives():
    views = L.training_carry_views(count=4000)
    assert list(views.index) == ["uniform", "runs", "mixed", "mixed-sets"]
    assert views["mixed"] > 1.5 * views["uniform"] > 0  # what the mixture is for
    assert 0.002 < views["uniform"] < 0.007  # 0 + 0 is 1 in 100 columns; a carry comes into about half


def test_column_decisions_by_draw_key_each_run_and_draw(monkeypatch):
    cfgs = [L.structured_run(seed=s) for s in (0, 2)]

    def fake(cfg, n, sums, results_dir):
        return (cfg.seed, n, sums and sums.family.name)

    monkeypatch.setattr(L, "run_column_decisions", fake)
    out = L.column_decisions_by_draw(cfgs, {"zeros and nines": "zeros and nines", "uniform": None}, 12)
    assert out == {
        ("zeros and nines", "seed 0"): (0, 12, "zeros and nines"),
        ("uniform", "seed 0"): (0, 12, None),
        ("zeros and nines", "seed 2"): (2, 12, "zeros and nines"),
        ("uniform", "seed 2"): (2, 12, None),
    }


def test_run_column_decisions_read_the_weights_decisions_from_the_cache(tmp_path, monkeypatch):
    """A cached entry gives the same frame as the weights; only a new key loads them; a foreign
    CSV is refused."""
    cfg = L.structured_run(seed=0, eval_max_len=16)
    task = cfg.make_task()
    torch.manual_seed(0)
    model = L.make_model(cfg)  # untrained: many digits wrong, a few right
    loads = []
    monkeypatch.setattr(L, "load_run_model", lambda c, results_dir: loads.append(c.seed) or model)
    cache, sums = tmp_path / "columns.csv", L.StructuredAddition("zeros and nines", **task.format)
    first = L.run_column_decisions(cfg, 6, sums, count=16, seed=3, results_dir=tmp_path, cache=cache)
    expected = L.column_decisions(model, task, 6, sums, count=16, seed=3)
    pd.testing.assert_frame_equal(first, expected)
    assert 0 < (~first["right"]).sum() < len(first)  # the cache must hold both kinds of digit
    again = L.run_column_decisions(cfg, 6, sums, count=16, seed=3, results_dir=tmp_path, cache=cache)
    pd.testing.assert_frame_equal(again, expected)
    assert loads == [0]  # read back, not recomputed
    L.run_column_decisions(cfg, 6, None, count=16, seed=3, results_dir=tmp_path, cache=cache)
    L.run_column_decisions(cfg, 7, sums, count=16, seed=3, results_dir=tmp_path, cache=cache)
    assert loads == [0, 0, 0] and len(pd.read_csv(cache)) == 3  # another draw, another size: new entries
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a column-decisions cache"):
        L.run_column_decisions(cfg, 6, sums, count=16, results_dir=tmp_path, cache=tmp_path / "other.csv")


def test_training_chain_views_count_long_chains_per_sampler():
    views = L.training_chain_views(count=4000)
    assert list(views.index) == ["uniform", "runs", "mixed", "mixed-sets"]
    assert views.loc["uniform", "at most 3 digit values (%)"] == 0  # 16 uniform digits: about 1 in 10^7
    assert views.loc["mixed-sets", "at most 3 digit values (%)"] > 25  # a quarter from sets, plus runs
    assert (views.loc["mixed-sets"] > views.loc["mixed"]).all()
    assert 0 < views.loc["uniform", "every column carries (%)"] < 0.5  # 0.45 ** 8 = 0.17%


def test_a_pair_per_operand_draws_each_operands_pair_apart():
    drawn = sums("a pair per operand", 12, count=2048)
    pairs = [(frozenset(a), frozenset(b)) for a, b, _ in drawn]
    assert sum(pa != pb for pa, pb in pairs) > 0.9 * len(pairs)  # the same pair 1 time in 45
    assert len({p for pair in pairs for p in pair if len(p) == 2}) == 45  # every pair of digits drawn
    assert sum(len(pa | pb) == 4 for pa, pb in pairs) > 0.5 * len(pairs)  # four values: beyond any set of three


def test_the_digit_set_runs_are_a_stage_of_their_own_and_differ_from_the_mixture_in_training_only(tmp_path):
    stages = {cfg.hash: stage for stage, cfg, _ in L.addition_runs(tmp_path)}
    sets = [L.exact_run(seed=s, **L.DIGIT_SETS) for s in range(3)]
    assert [stages[c.hash] for c in sets] == ["digit-set seeds"] * 3
    for s, cfg in enumerate(sets):
        plain = L.exact_run(seed=s)
        assert cfg.make_task().key == plain.make_task().key  # scored on the same sums
        assert cfg.make_training_task().key == "addition.lsd.mixed-sets" != plain.make_training_task().key
        assert cfg.to_dict() | {"train_task_options": plain.train_task_options} == plain.to_dict()


def test_column_tables_by_draw_split_the_decisions_by_draw_and_set_the_wrong_shares_side_by_side():
    def frame(right):
        return pd.DataFrame({"kind": ["makes a carry", "stops it"] * 2, "carry in": [0, 1] * 2, "right": right})

    decisions = {
        ("zeros and nines", "seed 0"): frame([True, False, True, True]),
        ("zeros and nines", "seed 1"): frame([True] * 4),
        ("uniform digits", "seed 0"): frame([False, True, True, True]),
    }
    tables = L.column_tables_by_draw(decisions)
    assert list(tables) == ["zeros and nines", "uniform digits"]
    assert list(tables["zeros and nines"].columns.get_level_values(0).unique()) == ["seed 0", "seed 1"]
    wrong = L.wrong_by_draw(tables)
    assert wrong[("zeros and nines", "seed 0")].tolist() == [0.0, 50.0]
    assert wrong[("uniform digits", "seed 0")].tolist() == [50.0, 0.0]
    assert wrong[("zeros and nines", "seed 1")].tolist() == [0.0, 0.0]


def test_the_window_1_runs_are_a_stage_of_their_own_and_differ_from_the_digit_sets_in_the_window_only(tmp_path):
    stages = {cfg.hash: stage for stage, cfg, _ in L.addition_runs(tmp_path)}
    narrow = [L.exact_run(seed=s, **L.DIGIT_SETS_WINDOW_1) for s in range(3)]
    assert [stages[c.hash] for c in narrow] == ["window-1 seeds"] * 3
    assert narrow == L.exactness_study()[-3:]
    for s, cfg in enumerate(narrow):
        sets = L.exact_run(seed=s, **L.DIGIT_SETS)
        assert cfg.model.options["attention_window"] == 1 and sets.model.options["attention_window"] == 2
        assert cfg.make_training_task().key == sets.make_training_task().key == "addition.lsd.mixed-sets"
        assert cfg.to_dict()["model"] | {"attention_window": 2} == sets.to_dict()["model"]
        assert {k: v for k, v in cfg.to_dict().items() if k != "model"} == {
            k: v for k, v in sets.to_dict().items() if k != "model"
        }


def test_addition_beside_cited_adds_a_row_only_where_every_seed_is_trained_each_at_its_worst_seed():
    class Verdict:
        def __init__(self, trained: bool, low: float):
            self.all_trained, self.low = trained, low

        def lowest(self, n: int) -> float:
            return self.low

    goal = pd.DataFrame({"trained": [True, True, False]})  # one seed missing: no "this study" row
    structured = pd.DataFrame({"trained": [True] * 3, "128 digits: lowest (%)": [100.0, 97.25, 99.0]})
    verdicts = {"mine": ("my method", Verdict(True, 98.44)), "not yet": ("other", Verdict(False, 100.0))}
    far = pd.DataFrame({"n": [1000, 1000, 2000], "exact_match": [1.0, 0.96875, 1.0]})
    table = L.addition_beside_cited(goal, structured, verdicts, far)
    cited = L.cited_addition()
    assert list(table.index[: len(cited)]) == list(cited.index)
    assert list(table.index[len(cited) :]) == [
        "this study, structured sums",
        "this study, mine",
        "this study, window of 1, 1,000 digits",
        "this study, window of 1, 2,000 digits",
    ]
    ours = table.loc["this study, window of 1, 1,000 digits"]
    assert ours["exact_match"] == 96.9 and ours["ratio"] == 125 and table.loc["this study, mine", "exact_match"] == 98.4
    assert table.loc["this study, structured sums", "exact_match"] == 97.2  # round half to even, as printed
