"""One recipe (section 19, notebook 12): aligned positions and a window of one position, the same
configuration for copy, reverse and the scratchpad tasks' step outputs."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch

import lengen_helpers as L


def positions_of(task: L.Task, batch: L.Batch) -> L.Batch:
    offsets = batch.positions.expand_as(batch.segments)
    return L.couple_positions(batch, offsets, task)


def test_each_step_sits_at_the_input_it_reads_and_the_answer_at_the_last():
    task = L.get_task("summation", {"scratchpad": "o"})
    batch = L.single_length_batch(task, 5, 64, torch.Generator().manual_seed(0))
    aligned = positions_of(task, batch)
    for b in range(64):
        names = task.decode(batch.tokens[b].tolist())
        sep = names.index("<sep>")
        assert torch.equal(aligned.positions[b, : sep + 1], batch.positions[b, : sep + 1])  # the prompt keeps its own
        step = 1
        for name, position in zip(names[sep + 1 :], aligned.positions[b, sep + 1 :].tolist()):
            if name in ("<pad>", "</s>"):
                break
            assert position == min(step, 5), (names, aligned.positions[b].tolist())
            step += name == "#"
        assert step == 5  # four separators between five steps; "thus" and the answer at the last input's


def test_packed_sequences_take_the_positions_they_take_alone():
    task = L.get_task("parity", {"scratchpad": "o"})
    g = torch.Generator().manual_seed(1)
    packed = L.packed_training_batch(task, [3, 8, 1, 5, 8, 2], g)
    aligned = positions_of(task, packed)
    seq, _ = L._sequence_index(packed.segments)
    for s in seq[packed.segments >= 0].unique():
        mine = (seq == s) & (packed.segments >= 0)
        row = int(mine.nonzero()[0, 0])
        alone = L.Batch(packed.tokens[row][mine[row]][None], packed.positions[row][mine[row]][None],
                        torch.zeros(1, int(mine[row].sum()), dtype=torch.long), packed.loss_mask[:1, :0])  # fmt: skip
        assert torch.equal(positions_of(task, alone).positions[0], aligned.positions[row][mine[row]])


def test_a_token_s_position_depends_only_on_the_tokens_before_it():
    task = L.get_task("parity", {"scratchpad": "o"})
    batch = L.single_length_batch(task, 6, 8, torch.Generator().manual_seed(2))
    before = positions_of(task, batch).positions
    sep = int((batch.tokens[0] == L.SEP).nonzero()[0, 0])
    for t in range(sep + 1, batch.tokens.shape[1]):
        changed = batch.tokens.clone()
        changed[:, t:] = int(task.encode(["#"])[0])  # everything from t on rewritten as separators
        after = positions_of(task, L.Batch(changed, batch.positions, batch.segments, batch.loss_mask)).positions
        assert torch.equal(after[:, : t + 1], before[:, : t + 1])  # what greedy decoding can give each as written


def test_copy_is_coupled_as_before_and_a_task_no_coupling_takes_is_refused():
    task = L.get_task("copy")
    batch = L.single_length_batch(task, 7, 4, torch.Generator().manual_seed(0))
    coupled = positions_of(task, batch).positions[0].tolist()
    assert coupled == [0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7, 8, 16]  # SEP and y_i at x_(i+1)'s; y_7 at SEP's
    task = L.get_task("addition")
    batch = L.single_length_batch(task, 3, 2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"'addition' cannot couple positions.*no registered coupling takes it"):
        positions_of(task, batch)


def test_the_recipe_is_one_configuration_and_refuses_what_it_is_not():
    runs = L.recipe_study(seeds=(0,))
    assert [c.task for c in runs] == [*L.RECIPE_TASKS, "sorting", "copy"] and len(L.recipe_study()) == 3 * 4 + 2
    assert runs[0].task_options == {"end": "bos"} and runs[-1].task_options == {}  # copy's first try: end at SEP's
    runs = runs[:4]
    assert {(c.encoding, c.model.option("position_coupling"), c.model.option("attention_window")) for c in runs} == {
        ("rope", True, 1)
    }
    assert [c.train_max_len for c in runs] == [16, 16, 8, 8] and runs[2].task_options == {"scratchpad": "o"}
    assert [c.eval_max_len for c in runs] == [48, 48, 24, 24]
    with pytest.raises(ValueError, match="unknown recipe task 'lego'; valid choices: copy, parity, reverse, sorting"):
        L.recipe_run("lego")


def test_an_answer_query_reads_the_same_at_any_length_and_offset():
    torch.manual_seed(0)
    cfg = L.recipe_run("copy")
    model = L.perturb_weights(L.make_model(cfg)).eval()  # untrained: the claim is the architecture's
    task = cfg.make_task()
    g = torch.Generator().manual_seed(3)
    core = torch.randint(L.N_SPECIAL, task.vocab_size, (12,), generator=g)
    short = core
    long = torch.cat([torch.randint(L.N_SPECIAL, task.vocab_size, (30,), generator=g), core,
                      torch.randint(L.N_SPECIAL, task.vocab_size, (40,), generator=g)])  # fmt: skip

    def logits(prompt: torch.Tensor, query: int) -> torch.Tensor:
        """The logits of the answer query that predicts prompt symbol `query` (1-based)."""
        n = len(prompt)
        tokens = torch.cat([torch.tensor([L.BOS]), prompt, torch.tensor([L.SEP]), prompt, torch.tensor([L.EOS])])
        batch = L.Batch(tokens[None], torch.arange(len(tokens))[None], torch.zeros(1, len(tokens), dtype=torch.long),
                        torch.ones(1, len(tokens) - 1, dtype=torch.bool))  # fmt: skip
        batch = L.model_positions(cfg.model, batch, g, task)
        with torch.no_grad():
            out = model(batch.inputs, positions=batch.positions[:, :-1])
        return out[0, n + query]  # the query at index n + query predicts answer symbol `query`

    # query 7 of the short prompt and query 37 of the long one see the same symbols at the same
    # distances (3 layers of a window of 1 reach 3 positions): only their offsets and lengths differ
    assert torch.allclose(logits(short, 7), logits(long, 37), atol=1e-4)
    assert not torch.allclose(logits(short, 7), logits(short, 8), atol=1e-4)  # it does read its neighbourhood


def test_a_scratchpad_run_the_caches_cannot_decode_is_scored_on_its_whole_answer():
    torch.manual_seed(0)
    cfg = L.recipe_run("parity")
    model = L.perturb_weights(L.make_model(cfg)).eval()
    task = cfg.make_task()
    em, extra = task.score_run(model, [1, 2], 8, 0)
    assert extra == {} and em == L.exact_match_by_length(model, task, [1, 2], 8, 0)


def test_hard_inputs_are_the_inputs_they_name_and_score_as_any_batch():
    cfg = L.recipe_run("parity")
    task = cfg.make_task()
    single = L.HARD_INPUTS["parity"]["a single one (at each place)"](task, 5)
    batch = L.given_prompts_batch(task, single, cfg.model)
    names = [task.decode(row.tolist()) for row in batch.tokens]
    assert [row[1:6] for row in names] == [["1" if i == j else "0" for j in range(5)] for i in range(5)]
    assert all(row[-3:] == ["thus", "odd", "</s>"] for row in names)  # one 1: odd, the steps written by the task
    copy = L.recipe_run("copy").make_task()
    assert L.HARD_INPUTS["copy"]["two symbols alternating (each pair)"](copy, 4).shape == (20 * 19, 4)
    nines = L.given_prompts_batch(
        L.get_task("summation"), L.HARD_INPUTS["summation"]["all nines"](None, 11), L.ModelConfig()
    )
    assert L.get_task("summation").decode(nines.tokens[0].tolist())[-2] == "9"  # 99 mod 10
    assert set(L.HARD_INPUTS) == set(L.RECIPE_TASKS)


def test_the_picture_of_what_each_query_reads_has_a_panel_per_task():
    fig = L.plot_aligned_reads(4, ("copy", "parity"))
    assert [ax.get_title() for ax in fig.axes] == ["copy (its end at BOS), size 4", "parity (scratchpad-o), size 4"]
    plt.close(fig)


def test_recipe_scores_every_size_to_ten_times_and_each_hard_input_once_then_reads_its_cache(tmp_path):
    tiny = {"steps": 2, "warmup_steps": 1, "batch_size": 4, "eval_per_length": 2, "d_model": 16, "n_heads": 2,
            "n_layers": 1, "d_ff": 16}  # fmt: skip
    cfg = L.recipe_run("parity", **tiny)
    untrained = L.recipe_run("parity", seed=1, **tiny)
    L.sweep([cfg], results_dir=tmp_path, max_workers=1, progress=False)
    cache = tmp_path / "far.csv"
    scores = L.recipe_scores([cfg, untrained], tmp_path, count=2, cache=cache)
    assert set(scores["seed"]) == {0}  # a run not trained has no rows
    random = scores[scores["draw"] == "random"]
    assert list(random["n"]) == list(range(1, 81)) and set(random["count"]) == {2}
    single = scores[scores["draw"] == "a single one (at each place)"]
    assert list(single["n"]) == [8, 16, 40, 80] and list(single["count"]) == [8, 16, 40, 80]
    assert scores["exact_match"].between(0, 1).all()
    L.weights_path(tmp_path, cfg).unlink()  # the cache alone answers now
    assert L.recipe_scores([cfg], tmp_path, count=2, cache=cache).equals(scores)


def test_recipe_goal_needs_every_size_and_every_hard_input_at_the_goal_and_says_how_far_each_seed_holds():
    def rows(seed, random, hard):
        out = [{"task": "parity", "seed": seed, "draw": "random", "n": n, "exact_match": v, "count": 128}
               for n, v in enumerate(random, 1)]  # fmt: skip
        return out + [{"task": "parity", "seed": seed, "draw": "all ones", "n": 8, "exact_match": hard, "count": 1}]

    scores = pd.DataFrame(rows(0, [1.0, 1.0, 1.0], 1.0) + rows(1, [1.0, 0.98, 1.0], 1.0) + rows(2, [1.0] * 3, 0.0))
    goal = L.recipe_goal(scores)
    assert goal["goal"].tolist() == [True, False, False]
    assert goal.loc[("parity", 1), "holds to"] == 1 and goal.loc[("parity", 1), "at size"] == 2
    assert goal.loc[("parity", 0), "holds to"] == 3 and goal.loc[("parity", 2), "hard: lowest (%)"] == 0
    hard = L.recipe_hard_table(scores)
    assert hard.loc[("parity", "all ones"), ("lowest seed (%)", 8)] == 0
    fig = L.plot_recipe_lengths(scores)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == ["parity: trained to 8"]
    assert len(fig.axes[0].lines) == 3 + 2
    plt.close(fig)


def test_with_one_symbol_repeated_copy_s_end_is_invisible_unless_it_sits_at_bos():
    """RoPE puts positions into the weights only: a window of one repeated symbol reads the same
    everywhere, so the query that must predict EOS reads as a middle one, unless a distinct token
    (BOS) sits at its position. Any weights: the claim is the architecture's."""
    torch.manual_seed(0)
    for end, same in (("sep", True), ("bos", False)):
        cfg = L.make_run("copy", "rope", 0, task_options={"end": end}, **L.RECIPE)
        model = L.perturb_weights(L.make_model(cfg)).eval()
        task = cfg.make_task()
        prompts = L.HARD_INPUTS["copy"]["one symbol repeated (each of 20)"](task, 24)[:1]
        batch = L.given_prompts_batch(task, prompts, cfg.model)
        with torch.no_grad():
            logits = model(batch.inputs, positions=batch.positions[:, :-1])[0]
        middle, last = logits[25 + 11], logits[25 + 24]  # SEP at 25: the queries predicting y_12 and EOS
        assert torch.allclose(middle, last, atol=1e-5) == same, end
    assert L.make_run("copy", "rope", 0, task_options={"end": "sep"}).hash == L.make_run("copy", "rope", 0).hash


def test_longest_repeat_counts_the_longest_stretch_of_one_symbol():
    prompts = torch.tensor([[1, 2, 3, 4], [5, 5, 6, 6], [7, 7, 7, 8], [9, 9, 9, 9]])
    assert L.longest_repeat(prompts).tolist() == [1, 2, 3, 4]
