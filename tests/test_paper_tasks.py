"""The paper's arithmetic and algorithmic tasks: every answer checked by an independent
computation on the decoded text, sizes in range, formats parsed back, and exact match computed
teacher-forced equal to greedy decoding for each."""

import pytest
import torch
from support import nudged_model

import lengen_helpers as L

PAPER_TASKS = ["addition", "sorting", "summation", "parity", "polynomial", "lego"]


def drawn(name: str, n: int, batch: int = 200, seed: int = 0):
    """(task, decoded prompts, decoded answers) for `batch` sequences of size n."""
    task = L.get_task(name)
    tokens, scored = L.make_sequences(task, n, batch, torch.Generator().manual_seed(seed))
    P, A = task.prompt_length(n), task.answer_length(n)
    assert tokens.shape == (batch, P + A + 3) and scored[:, P + 2 :].all() and not scored[:, : P + 2].any()
    assert (tokens[:, 0] == L.BOS).all() and (tokens[:, P + 1] == L.SEP).all() and (tokens[:, -1] == L.EOS).all()
    assert int(tokens[:, 1 : P + 1].min()) >= L.N_SPECIAL and int(tokens.max()) < task.vocab_size
    prompts = [task.decode(row[1 : P + 1]) for row in tokens]
    answers = [task.decode(row[P + 2 : P + 2 + A]) for row in tokens]
    return task, prompts, answers


@pytest.mark.parametrize("n", [1, 2, 5, 8, 16, 24])
def test_addition_is_integer_addition(n):
    _, prompts, answers = drawn("addition", n)
    for p, a in zip(prompts, answers):
        assert p[n] == "+" and len(p) == 2 * n + 1 and len(a) == n + 1
        x, y = int("".join(p[:n])), int("".join(p[n + 1 :]))
        assert int("".join(a)) == x + y and "".join(a) == str(x + y).zfill(n + 1)


@pytest.mark.parametrize("n", [1, 3, 8, 16])
def test_sorting_is_pythons_sorted(n):
    _, prompts, answers = drawn("sorting", n)
    for p, a in zip(prompts, answers):
        assert [int(v) for v in a] == sorted(int(v) for v in p) and all(0 <= int(v) <= 19 for v in p)


@pytest.mark.parametrize("n", [1, 4, 8, 16])
def test_summation_is_the_sum_mod_10_of_digits_1_to_9(n):
    _, prompts, answers = drawn("summation", n)
    for p, (a,) in zip(prompts, answers):
        assert all(1 <= int(v) <= 9 for v in p) and int(a) == sum(int(v) for v in p) % 10


@pytest.mark.parametrize("n", [1, 5, 8, 16])
def test_parity_says_whether_the_ones_are_even(n):
    _, prompts, answers = drawn("parity", n)
    assert {a for (a,) in answers} == {"even", "odd"} or n == 1
    for p, (a,) in zip(prompts, answers):
        assert set(p) <= {"0", "1"} and a == ("even" if p.count("1") % 2 == 0 else "odd")


@pytest.mark.parametrize("n", [1, 3, 8, 16])
def test_polynomial_evaluation_mod_10(n):
    _, prompts, answers = drawn("polynomial", n)
    for p, (a,) in zip(prompts, answers):
        x = int(p[0].removeprefix("x="))
        terms = [(int(c), int(d.removeprefix("^"))) for c, d in zip(p[1::2], p[2::2])]
        assert -2 <= x <= 2 and len(terms) == n and all(-3 <= c <= 3 and 0 <= d <= 3 for c, d in terms)
        assert int(a) == sum(c * x**d for c, d in terms) % 10


@pytest.mark.parametrize("n", [1, 2, 5, 8, 16, 26])
def test_lego_answers_the_queried_variable_s_sign(n):
    _, prompts, answers = drawn("lego", n)
    for p, (a,) in zip(prompts, answers):
        clauses, query = [p[i : i + 3] for i in range(0, 3 * n, 3)], p[-1]
        value, parent = {}, {v: (sign, operand) for v, sign, operand in clauses}
        assert len(parent) == n and sum(op == "1" for _, op in parent.values()) == 1  # n distinct variables, one root

        def resolve(v, parent=parent, value=value):
            if v not in value:
                sign, operand = parent[v]
                value[v] = (1 if sign == "+" else -1) * (1 if operand == "1" else resolve(operand))
            return value[v]

        assert a == ("+" if resolve(query) > 0 else "-")
        depth, v = 0, query  # the query sits in the second half of the chain: at least n // 2 links from the root
        while parent[v][1] != "1":
            v, depth = parent[v][1], depth + 1
        assert n // 2 <= depth < n


def test_lego_clauses_are_shuffled_and_the_queries_spread_over_the_second_half():
    _, prompts, _ = drawn("lego", 8, batch=400)
    root_first = sum(p[2] == "1" for p in prompts)
    assert 20 < root_first < 100  # the root clause is first in about 1 of 8 prompts, not always


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_sizes_outside_the_range_are_refused_with_the_range(name):
    task = L.get_task(name)
    with pytest.raises(ValueError, match=f"task '{name}' has sizes 1 .*got size 0"):
        L.make_sequences(task, 0, 2, torch.Generator())
    if name == "lego":
        with pytest.raises(ValueError, match="task 'lego' has sizes 1 to 26; got size 27"):
            L.make_sequences(task, 27, 2, torch.Generator())


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_formats_parse_back_and_the_evaluation_is_seeded(name):
    task = L.get_task(name)
    a = L.single_length_batch(task, 5, 16, L.eval_generator(name, 5, 1234))
    b = L.single_length_batch(task, 5, 16, L.eval_generator(name, 5, 1234))
    assert torch.equal(a.tokens, b.tokens)  # the same test set for every model
    assert torch.equal(task.encode(task.decode(a.tokens[0])), a.tokens[0])
    assert task.train_max_size == 8 and L.RunConfig(task=name, train_max_len=8, eval_max_len=24)


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_teacher_forced_exact_match_equals_greedy_decoding(name):
    """With weights nudged off their init so that some rows are right (one-token answers from a
    few symbols) and others wrong."""
    model = nudged_model(name, "alibi")
    check, _ = L.check_exact_match(model, name, task=name, lengths=(1, 3, 8), n=64)
    assert check.passed, check.row()
