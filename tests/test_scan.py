"""SCAN, generated from its grammar: the interpreter against hand-worked examples from the
grammar's definition (Lake and Baroni 2018), the size of the command space, and the length split."""

import pytest
import torch
from support import nudged_model

import lengen_helpers as L

J, W, R, K = "I_JUMP", "I_WALK", "I_RUN", "I_LOOK"
LT, RT = "I_TURN_LEFT", "I_TURN_RIGHT"


@pytest.mark.parametrize(
    "command, actions",
    [
        ("jump", [J]),
        ("jump left", [LT, J]),
        ("jump around right", [RT, J] * 4),
        ("turn left twice", [LT, LT]),
        ("jump thrice", [J, J, J]),
        ("jump opposite left and walk thrice", [LT, LT, J, W, W, W]),
        ("jump opposite left after walk around left", [LT, W] * 4 + [LT, LT, J]),
        ("turn opposite right", [RT, RT]),
        ("turn around left", [LT] * 4),
        ("look right thrice after run twice", [R, R, RT, K, RT, K, RT, K]),
        ("walk around right thrice and jump around left thrice", [RT, W] * 12 + [LT, J] * 12),  # the longest: 48
    ],
)
def test_the_interpreter_on_hand_worked_examples(command, actions):
    assert L.scan_interpret(command) == actions


def test_the_command_space_has_the_published_size_and_lengths():
    commands = L.scan_commands()
    assert len(commands) == len(set(commands)) == 20910
    lengths = [len(L.scan_interpret(c)) for c in commands]
    assert min(lengths) == 1 and max(lengths) == 48
    assert max(len(c.split()) for c in commands) == L.SCAN.max_words == 9
    with pytest.raises(ValueError, match="not a SCAN command"):
        L.scan_interpret("walk sideways left")


def test_the_length_split_keeps_every_test_command_out_of_training():
    task = L.get_task("scan")
    by_size = L._scan_by_size()
    train = {tuple(p.tolist()) for n in task.sizes(1, 25) for p in by_size[n][0]}
    test = {tuple(p.tolist()) for n in task.sizes(26, 48) for p in by_size[n][0]}
    assert not train & test and len(train) + len(test) == 20910
    assert task.sizes(20, 30) == [20, 21, 22, 24, 25, 26, 27, 28, 30]  # some lengths have no command
    with pytest.raises(ValueError, match=r"task 'scan' has sizes 1 to 48 \(not every size between\); got size 23"):
        L.make_sequences(task, 23, 2, torch.Generator())
    cfg = L.paper_split_runs("scan", ["nope"], [0])[0]
    assert (cfg.train_max_len, cfg.eval_max_len) == (25, 48)
    drawn = L.training_lengths(
        L.make_run("scan", "nope", 0, train_max_len=25, eval_max_len=48, batch_size=4000),
        torch.Generator().manual_seed(0),
    )
    assert set(drawn) <= set(task.sizes(1, 25)) and 23 not in drawn
    # uniform over commands: size 10 has 1,696 commands, size 1 only 6
    assert drawn.count(10) > 20 * max(1, drawn.count(1))


def test_sampled_sequences_parse_back_to_their_interpretation():
    task = L.get_task("scan")
    for n in (1, 11, 26, 48):
        tokens, scored = L.make_sequences(task, n, 50, torch.Generator().manual_seed(n))
        assert tokens.shape == (50, 9 + n + 3) and scored[:, 11:].all()
        for row in tokens:
            words = [w for w in task.decode(row[1:10]) if w != "_"]
            assert task.decode(row[11 : 11 + n]) == L.scan_interpret(" ".join(words))


def test_teacher_forced_exact_match_equals_greedy_decoding_on_scan():
    model = nudged_model("scan", "t5")
    check, _ = L.check_exact_match(model, "scan", task="scan", lengths=(1, 2, 4), n=64)
    assert check.passed, check.row()
