"""PCFG SET, generated from its grammar: each function and nested calls against hand-worked
results (Hupkes et al. 2020's definitions), the generator's sizes, and the productivity split."""

import pytest
import torch
from support import nudged_model

import lengen_helpers as L


@pytest.mark.parametrize(
    "expression, value",
    [
        ("copy A1 B1", "A1 B1"),
        ("reverse A1 B1 C1", "C1 B1 A1"),
        ("shift A1 B1 C1", "B1 C1 A1"),
        ("echo A1 B1", "A1 B1 B1"),
        ("swap_first_last A1 B1 C1", "C1 B1 A1"),
        ("swap_first_last A1", "A1"),
        ("repeat A1 B1", "A1 B1 A1 B1"),
        ("append A1 , B1 C1", "A1 B1 C1"),
        ("prepend A1 , B1 C1", "B1 C1 A1"),
        ("remove_first A1 , B1", "B1"),
        ("remove_second A1 , B1", "A1"),
        ("append swap_first_last A1 B1 C1 , repeat D1", "C1 B1 A1 D1 D1"),
        ("repeat remove_second A1 B1 , C1", "A1 B1 A1 B1"),
        ("echo append A1 , prepend B1 , C1", "A1 C1 B1 B1"),
        ("shift reverse append A2 B2 , remove_first C2 , D2 E2", "D2 B2 A2 E2"),
    ],
)
def test_functions_and_nested_calls_on_hand_worked_examples(expression, value):
    assert L.pcfg_evaluate(expression) == value.split()


@pytest.mark.parametrize("bad", ["append A1 B1", "A1 , B1", "repeat", "copy A1 )", ""])
def test_what_is_not_an_expression_is_named(bad):
    with pytest.raises((ValueError, KeyError)):
        L.pcfg_evaluate(bad)


@pytest.mark.parametrize("n", [1, 3, 8, 12, 16])
def test_generated_sequences_have_n_calls_and_parse_back_to_their_answer(n):
    task = L.get_task("pcfg")
    tokens, scored = L.make_sequences(task, n, 100, torch.Generator().manual_seed(n))
    P = task.prompt_length(n)
    assert tokens.shape == (100, P + task.answer_length(n) + 3)
    for row, mask in zip(tokens, scored):
        words = [w for w in task.decode(row[1 : P + 1]) if w != "_"]
        assert sum(w in L.PCFG_UNARY or w in L.PCFG_BINARY for w in words) == n
        answer = task.decode(row[P + 2 :])
        end = answer.index("</s>")
        assert answer[:end] == L.pcfg_evaluate(" ".join(words)) and 1 <= end <= 2 * n + 8
        assert int(mask.sum()) == end + 1  # the answer and EOS are scored, the PAD after is not


def test_the_productivity_split_and_the_sizes():
    task = L.get_task("pcfg")
    cfg = L.paper_split_runs("pcfg", ["nope"], [0])[0]
    assert (cfg.train_max_len, cfg.eval_max_len) == (8, 16) and task.sequence_length(16) <= 128
    with pytest.raises(ValueError, match="task 'pcfg' has sizes 1 to 16; got size 17"):
        L.make_sequences(task, 17, 1, torch.Generator())


def test_teacher_forced_exact_match_equals_greedy_decoding_on_pcfg():
    model = nudged_model("pcfg", "rope")
    check, _ = L.check_exact_match(model, "pcfg", task="pcfg", lengths=(1, 2, 5), n=32)
    assert check.passed, check.row()
