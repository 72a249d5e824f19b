"""Task formats (`Task.options`, `RunConfig.task_options`): the paper's addition and LEGO, the
answer least-significant digit first; with every option at its default a task is the one the grid trained."""

import collections

import pytest
import torch

import lengen_helpers as L


def rows(task, n, count=256, seed=0):
    tokens, scored = L.make_sequences(task, n, count, torch.Generator().manual_seed(seed))
    return [(task.decode(t), s) for t, s in zip(tokens, scored)]


def split(words):
    """[<s>, prompt.., <sep>, answer.., </s>, <pad>..] -> (prompt words, answer words)."""
    sep, eos = words.index("<sep>"), words.index("</s>")
    assert all(w == "<pad>" for w in words[eos + 1 :])
    return words[1:sep], words[sep + 1 : eos]


def test_default_options_are_today_s_task_and_hash():
    plain = L.make_run("addition", "nope", 0, train_max_len=8, eval_max_len=24)
    named = L.make_run("addition", "nope", 0, train_max_len=8, eval_max_len=24, task_options={"format": "equal"})
    assert named.task_options == {} and named.hash == plain.hash and named.name == "addition-nope-s0"
    paper = L.make_run("addition", "nope", 0, train_max_len=8, eval_max_len=24, task_options={"format": "paper"})
    assert paper.hash != plain.hash and paper.name == "addition.paper-nope-s0"
    assert L.RunConfig.from_dict(paper.to_dict()).hash == paper.hash
    assert L.get_task("addition").key == "addition" and L.get_task("lego", {"format": "paper"}).key == "lego.paper"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"digits": "paper"}, r"task 'addition' has no option 'digits'; its options: answer, format"),
        ({"format": "wide"}, r"option format='wide' is not valid; valid values: 'equal', 'paper'"),
    ],
)
def test_bad_options_name_the_valid_ones(options, message):
    with pytest.raises(ValueError, match=message):
        L.make_run("addition", "nope", 0, train_max_len=8, eval_max_len=24, task_options=options)
    with pytest.raises(ValueError, match="task 'copy' has no option 'format'; its options: end"):
        L.get_task("copy", {"format": "paper"})


@pytest.mark.parametrize("answer", ["msd", "lsd"])
@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_paper_addition_is_two_numbers_without_leading_zeros_and_their_sum(n, answer):
    task = L.get_task("addition", {"format": "paper", "answer": answer})
    counts = collections.Counter()
    for words, scored in rows(task, n):
        prompt, out = split(words)
        plus = prompt.index("+")
        a, b = prompt[:plus], prompt[plus + 1 :]
        assert max(len(a), len(b)) == n and min(len(a), len(b)) >= 1
        assert all(len(x) == 1 or x[0] != "0" for x in (a, b))  # no leading zeros
        written = "".join(out if answer == "msd" else out[::-1])
        assert written == str(int("".join(a)) + int("".join(b)))  # the sum, no leading zeros
        assert int(scored.sum()) == len(out) + 1  # the answer and EOS are scored, nothing else
        counts[len(a), len(b)] += 1
    assert set(counts) == {(i, j) for i in range(1, n + 1) for j in range(1, n + 1) if max(i, j) == n}


def test_paper_addition_draws_every_pair_of_digit_counts_equally_often():
    task = L.get_task("addition", {"format": "paper"})
    la, lb = task.digit_counts(4, 70_000, torch.Generator().manual_seed(0))
    share = collections.Counter(zip(la.tolist(), lb.tolist()))
    assert len(share) == 7 and all(abs(c / 70_000 - 1 / 7) < 0.01 for c in share.values())
    weights = task.size_weights([1, 2, 8])  # training: uniform over the 64 pairs of counts up to 8
    assert weights.tolist() == [1.0, 3.0, 15.0]
    assert L.get_task("addition").size_weights([1, 2]) is None


def test_equal_addition_least_significant_first_reverses_today_s_answer():
    today, lsd = L.get_task("addition"), L.get_task("addition", {"answer": "lsd"})
    for (w1, _), (w2, _) in zip(rows(today, 6, 32), rows(lsd, 6, 32)):
        p1, a1 = split(w1)
        p2, a2 = split(w2)
        assert p1 == p2 and a2 == a1[::-1] and len(a1) == 7


@pytest.mark.parametrize("n", [1, 4, 5, 9])
def test_paper_lego_writes_the_chain_in_order_and_queries_its_second_half(n):
    task = L.get_task("lego", {"format": "paper"})
    queried = set()
    for words, _ in rows(task, n):
        prompt, answer = split(words)
        clauses, query = [prompt[i : i + 3] for i in range(0, 3 * n, 3)], prompt[-1]
        assert clauses[0][2] == "1" and all(c[2] == p[0] for p, c in zip(clauses, clauses[1:]))  # chain order
        value, values = 1, {}
        for name, sign, _ in clauses:
            value = value if sign == "+" else -value
            values[name] = value
        assert answer == ["+" if values[query] > 0 else "-"]
        queried.add([c[0] for c in clauses].index(query))
    first = 0 if n == 1 else (n + 1) // 2  # the paper: the second half, from ceil(n / 2) + 1 (1-based)
    assert queried == set(range(first, n))


def test_a_prompt_may_only_end_in_pad():
    class Holey(L.Task):
        name = "holey"

        def sample(self, n, batch_size, generator):
            x = torch.full((batch_size, n), L.N_SPECIAL)
            x[:, 0] = L.PAD
            return x, torch.full((batch_size, n), L.N_SPECIAL)

    with pytest.raises(ValueError, match="PAD may only end a prompt, not interrupt it"):
        L.make_sequences(Holey(), 3, 2, torch.Generator())


def test_a_run_in_another_format_trains_and_is_scored_in_it():
    cfg = L.make_run(
        "addition", "nope", 0, task_options={"format": "paper"}, train_max_len=3, eval_max_len=4, steps=0,
        eval_per_length=8, d_model=16, n_heads=2, n_layers=1, d_ff=32,
    )  # fmt: skip
    model, record = L.train_run(cfg, progress=False)
    assert record["name"] == "addition.paper-nope-s0" and record["config"]["task_options"] == {"format": "paper"}
    # the record's exact match is the model's on the paper-format test set, not on the default format's
    assert record["exact_match"]["4"] == L.exact_match_by_length(model, cfg.make_task(), [4], 8)[4]
    g = L.eval_generator("addition.paper", 4, cfg.eval_seed)
    batch = L.single_length_batch(cfg.make_task(), 4, 8, g)
    assert record["exact_match"]["4"] == float(L.exact_match_rows(model, batch).float().mean())


def test_the_pilot_runs_each_task_in_the_paper_s_format_with_a_named_shape():
    runs = L.ten_task_pilot()
    assert len({c.hash for c in runs}) == len(runs)
    addition = L.pilot_run("addition", "nope", "deep")
    assert addition.task_options == {"format": "paper"} and addition.model.n_layers == 6 and addition.steps == 10_000
    assert L.pilot_run("polynomial", "nope", "wide").model.d_model == 128
    with pytest.raises(ValueError, match="unknown pilot shape 'tall'; valid choices: deep, wide"):
        L.pilot_run("lego", "nope", "tall")


def test_a_chosen_grid_holds_the_pilot_s_runs_of_its_shape():
    grid = L.chosen_shape_runs("polynomial")
    assert len(grid) == 18 and {c.model.n_layers for c in grid} == {6} and {c.steps for c in grid} == {10_000}
    pilot = {c.hash for c in L.ten_task_pilot()}
    assert sum(c.hash in pilot for c in grid) == 2  # NoPE and sinusoidal, seed 0: trained once, used twice
    assert "polynomial-deep" in L.EXPERIMENTS and "addition-deep" in L.EXPERIMENTS
    addition = L.chosen_shape_runs("addition")
    assert {c.lr for c in addition} == {2e-3} and {c.task_options["format"] for c in addition} == {"paper"}
    assert sum(c.hash in pilot for c in addition) == 1  # the pilot's NoPE run at 2e-3
    with pytest.raises(ValueError, match="unknown task with a chosen shape 'copy'"):
        L.chosen_shape_runs("copy")


def test_an_option_added_from_outside_is_written_name_value_and_read_back():
    @L.register_task
    class Echo(L.Task):
        name = "echo"
        options = {"order": ("forward", "back")}

        def target(self, x):
            return list(x)

    L.add_task_option("echo", "marks", ("none", "a", "b"))
    task = L.get_task("echo", {"order": "back", "marks": "a"})
    assert task.key == "echo.back.marks-a"  # "a" alone could be any option's value
    assert L.task_of_key(task.key).format == task.format and L.get_task("echo").key == "echo"
    with pytest.raises(ValueError, match="has an option 'marks' already"):
        L.add_task_option("echo", "marks", ("none",))
    with pytest.raises(ValueError, match="unknown task 'ech'; valid choices: .*echo"):
        L.add_task_option("ech", "marks", ("none",))
    assert L.get_task("addition", {"scratchpad": "o"}).key == "addition.scratchpad-o"
