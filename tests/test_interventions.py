"""Training interventions on the length-generalization cliff (notebook 09): index hints,
randomized positions, training without EOS in the loss, and the tables that report them."""

import pandas as pd
import pytest
import torch
from support import TINY, perturbed_model, with_config

import lengen_helpers as L


def draw(seed=0):
    return torch.Generator().manual_seed(seed)


# ---- index hints -------------------------------------------------------------------------------


@pytest.mark.parametrize("name, base", [("copy_hints", "copy"), ("reverse_hints", "reverse")])
def test_index_hints_wrap_the_base_task(name, base):
    task, inner = L.get_task(name), L.get_task(base)
    n = 7
    prompt, answer = task.sample(n, 50, draw())
    x, y = inner.sample(n, 50, draw())  # the same draw comes first: the same symbols
    assert torch.equal(prompt[:, 1::2], x) and torch.equal(answer[:, 1::2], y)
    hints = prompt[:, 0::2] - (L.N_SPECIAL + len(inner.symbols))
    assert ((hints >= 0) & (hints < L.N_HINTS)).all()
    assert (hints[:, 1:] - hints[:, :-1] == 1).all()  # consecutive, from a random start
    assert hints[:, 0].unique().numel() > 10
    # every answer token is the prompt token its source position names (hints included)
    src = torch.tensor(task.source_positions(n)) - 1
    assert torch.equal(prompt[:, src], answer)
    assert task.vocab_size == inner.vocab_size + L.N_HINTS and task.max_size == L.N_HINTS
    assert task.sequence_length(n) == 4 * n + 3


def test_index_hints_reach_every_hint_in_training_and_refuse_sizes_past_them():
    task = L.get_task("copy_hints")
    prompt, _ = task.sample(16, 2000, draw())
    assert prompt[:, 0::2].unique().numel() == L.N_HINTS  # every hint (and step between them) is trained
    with pytest.raises(ValueError, match="sizes 1 to 64"):
        L.make_sequences(task, L.N_HINTS + 1, 1, draw())
    assert task.decode(task.encode(["h0", "s3", "h63"])) == ["h0", "s3", "h63"]


def test_index_hints_need_a_pointer_task(monkeypatch):
    class HintedSorting(L.IndexHinted):
        name, base = "sorting_hints", "sorting"  # no source position per answer token

    with pytest.raises(ValueError, match="pointer task"):
        HintedSorting()


# ---- randomized positions ----------------------------------------------------------------------


def test_random_positions_are_a_sorted_sample_per_sequence():
    batch = L.packed_training_batch(L.get_task("copy"), [3, 5, 2, 7, 1, 16, 16], draw())
    out = L.randomize_positions(batch, 100, draw(1))
    assert torch.equal(out.tokens, batch.tokens) and torch.equal(out.loss_mask, batch.loss_mask)
    seg = batch.segments
    assert (out.positions[seg < 0] == 0).all()
    for b in range(seg.shape[0]):
        for s in seg[b].unique().tolist():
            if s < 0:
                continue
            p = out.positions[b][seg[b] == s]
            assert (p[1:] > p[:-1]).all() and p.min() >= 0 and p.max() < 100  # sorted and distinct
    # deterministic for a generator state, different for another
    assert torch.equal(out.positions, L.randomize_positions(batch, 100, draw(1)).positions)
    assert not torch.equal(out.positions, L.randomize_positions(batch, 100, draw(2)).positions)


def test_random_positions_cover_the_whole_range_uniformly():
    batch = L.single_length_batch(L.get_task("copy"), 4, 4000, draw())  # 11 tokens a row
    pos = L.randomize_positions(batch, 40, draw(3)).positions
    counts = torch.bincount(pos.flatten(), minlength=40).float()
    assert (counts > 0).all()
    assert counts.std() / counts.mean() < 0.1  # each position in 11/40 of rows, give or take


def test_random_positions_refuse_a_sequence_longer_than_the_range():
    batch = L.single_length_batch(L.get_task("copy"), 16, 2, draw())  # 35 tokens
    with pytest.raises(ValueError, match="35 tokens cannot take distinct positions from \\[0, 20\\)"):
        L.randomize_positions(batch, 20, draw())


def test_random_positions_off_is_todays_model_and_hash():
    cfg = L.make_run("copy", "rope", 0)
    assert cfg.hash == L.make_run("copy", "rope", 0, random_positions=0, train_eos=True).hash
    assert L.make_run("copy", "rope", 0, random_positions=320).hash != cfg.hash
    assert L.make_run("copy", "rope", 0, train_eos=False).hash != cfg.hash
    batch = L.single_length_batch(L.get_task("copy"), 5, 3, draw())
    assert L.model_positions(L.ModelConfig(), batch, draw(), L.get_task("copy")) is batch
    # training batches with the options off: exactly the plain run's, drawing the same random numbers
    g1, g2 = draw(4), draw(4)
    today = L.packed_training_batch(L.get_task("copy"), L.training_lengths(cfg, g1), g1)
    now = L.training_batch(L.get_task("copy"), cfg, g2)
    for a, b in zip(
        (today.tokens, today.positions, today.segments, today.loss_mask),
        (now.tokens, now.positions, now.segments, now.loss_mask),
    ):
        assert torch.equal(a, b)
    assert torch.equal(g1.get_state(), g2.get_state())


def test_random_positions_config_checks_the_learned_table():
    with pytest.raises(ValueError, match="max_positions >= random_positions"):
        L.ModelConfig(encoding="learned", options={"random_positions": 320})
    L.ModelConfig(encoding="learned", max_positions=320, options={"random_positions": 320})
    with pytest.raises(ValueError, match="random_positions"):
        L.ModelConfig(options={"random_positions": -1})


def test_training_and_evaluation_read_random_positions(monkeypatch):
    cfg = L.make_run("copy", "alibi", 0, random_positions=200)
    batch = L.training_batch(L.get_task("copy"), cfg, draw())
    assert not L._counts_up_within(batch.positions, batch.segments)
    assert int(batch.positions.max()) > 40
    model = with_config(perturbed_model("alibi"), random_positions=200)
    seen = []
    real = L.DecoderOnlyLM.forward
    monkeypatch.setattr(
        L.DecoderOnlyLM,
        "forward",
        lambda self, idx, positions=None, **kw: seen.append(positions) or real(self, idx, positions, **kw),
    )
    L.exact_match_by_length(model, "copy", [6], n_per_length=4)
    L.failure_anatomy(model, "copy", 6, n_per_length=4)
    assert len(seen) == 2 and torch.equal(seen[0], seen[1])  # the same evaluation draw, both ways
    assert not torch.equal(seen[0][0], torch.arange(seen[0].shape[1]))
    with pytest.raises(ValueError, match="teacher-forced"):
        L.generate(model, torch.tensor([[L.BOS, 5, 6, L.SEP]]), 3)


# ---- no EOS in the loss ------------------------------------------------------------------------


def test_no_eos_in_the_loss_drops_exactly_the_eos_targets():
    on, off = L.make_run("copy", "nope", 0), L.make_run("copy", "nope", 0, train_eos=False)
    a = L.training_batch(L.get_task("copy"), on, draw(5))
    b = L.training_batch(L.get_task("copy"), off, draw(5))
    assert torch.equal(a.tokens, b.tokens)
    eos = a.targets == L.EOS
    assert (a.loss_mask & eos).sum() == 64  # one EOS per sequence is scored by default
    assert not (b.loss_mask & eos).any()
    assert torch.equal(b.loss_mask, a.loss_mask & ~eos)


# ---- interventions and their tables ------------------------------------------------------------


def test_interventions_name_runs_apart_from_the_grid():
    grid = L.make_run("copy", "alibi", 1)
    assert L.intervention_run("none", "copy", "alibi", 1) == grid
    runs = {name: L.intervention_run(name, "copy", "alibi", 1) for name in L.INTERVENTIONS if name != "none"}
    assert len({r.hash for r in runs.values()} | {grid.hash}) == len(runs) + 1
    assert runs["index hints"].task == "copy_hints"
    assert L.intervention_run("random positions", "copy", "learned", 0).model.max_positions == 320  # 3 x 99, up to 64s
    both = L.intervention_run("hints + random positions", "reverse", "learned", 0)
    assert (
        both.task == "reverse_hints" and both.model.option("random_positions") == both.model.max_positions == 640
    )  # 3 x 195
    with pytest.raises(ValueError, match="unknown intervention 'dropout'.*random positions"):
        L.intervention_run("dropout", "copy", "nope")
    cliff = L.cliff_interventions()
    assert len({c.hash for c in cliff}) == len(cliff)


@pytest.mark.slow
def test_intervention_table_computes_once_and_reads_its_cache(tmp_path, monkeypatch):
    tiny = lambda **kw: lambda t, e, s: L.make_run(t, e, s, **{**TINY, **kw})  # noqa: E731
    monkeypatch.setitem(L.INTERVENTIONS, "none", tiny())
    monkeypatch.setitem(L.INTERVENTIONS, "no EOS in loss", tiny(train_eos=False))
    monkeypatch.setitem(L.INTERVENTIONS, "index hints", lambda t, e, s: L.make_run(f"{t}_hints", e, s, **TINY))
    for name in ("none", "no EOS in loss", "index hints"):
        L.run_and_save(L.intervention_run(name, "copy", "nope", 0), L.intervention_dir(name, tmp_path))
    kw = dict(tasks=["copy"], encodings=["nope", "alibi"], seeds=[0], lengths=range(1, 5), results_dir=tmp_path)
    names = ["none", "no EOS in loss", "index hints", "random positions"]
    table = L.intervention_table(names, cache_dir=tmp_path / "anatomy", **kw)
    # alibi and random positions were never trained: skipped, not an error
    assert sorted(set(table["intervention"])) == ["index hints", "no EOS in loss", "none"]
    assert len(table) == 3 * 4 and set(table["encoding"]) == {"nope"} and set(table["task"]) == {"copy"}
    assert (tmp_path / "anatomy" / "interventions" / "index_hints.csv").exists()
    temperatures = []  # the scaling each measured model runs under, read off its hooks
    anatomy = L.failure_anatomy

    def spy(m, *a):
        hook = m.blocks[0].self_attn.hook_scores
        temperatures.append(round(1 / float(hook(torch.ones(1, 1, 1, 1))), 6) if hook.active else 1.0)
        return anatomy(m, *a)

    monkeypatch.setattr(L, "failure_anatomy", spy)
    hot = L.intervention_table(
        ["no EOS in loss"], cache_dir=tmp_path / "anatomy", scaling={"attention_temperature": 0.9}, **kw
    )
    assert set(temperatures) == {0.9} and len(hot) == 4
    assert (tmp_path / "anatomy" / "interventions" / "no_eos_in_loss,attention_temperature=0.9.csv").exists()
    monkeypatch.setattr(L, "load_run_model", lambda *a, **k: pytest.fail("the cache should serve"))
    again = L.intervention_table(names, cache_dir=tmp_path / "anatomy", **kw)
    pd.testing.assert_frame_equal(table, again)
    with pytest.raises(FileNotFoundError, match="no trained runs"):
        L.intervention_table(["random positions"], cache_dir=None, **kw)


def test_intervention_summary_and_spread():
    def rows(intervention, seed, em, given):
        return [
            dict(
                intervention=intervention,
                task="copy",
                encoding="nope",
                seed=seed,
                n=n,
                exact_match=em(n),
                length_given=given(n),
            )
            for n in range(1, 41)
        ]

    table = pd.DataFrame(
        rows("hints", 0, lambda n: 1.0 if n <= 33 else 0.5, lambda n: 1.0)
        + rows("hints", 1, lambda n: 0.96 if n <= 20 else 0.0, lambda n: 1.0 if n <= 30 else 0.0)
    )
    s = L.intervention_summary(table).set_index("seed")
    assert s.loc[0, "longest n >= 90%"] == 33 and s.loc[0, "longest n >= 90%, length given"] == 40
    assert s.loc[1, "longest n >= 90%"] == 20 and s.loc[1, "longest n >= 90%, length given"] == 30
    assert s.loc[0, "n = 32"] == 100 and s.loc[1, "n = 32"] == 0
    assert s.loc[1, "n = 1-16"] == pytest.approx(96)
    spread = L.seed_spread(s.reset_index(), "longest n >= 90%")
    assert spread.loc[("hints", "nope"), "copy"] == "26 (20-33, 2)"


@pytest.mark.slow
@pytest.mark.parametrize("intervention", ["index hints", "random positions", "coupled positions"])
def test_draw_attention_serves_intervention_models(tmp_path, monkeypatch, intervention):
    import matplotlib

    matplotlib.use("Agg")
    make = L.INTERVENTIONS[intervention]
    monkeypatch.setitem(
        L.INTERVENTIONS, intervention, lambda t, e, s: make(t, e, s).__class__(**{**make(t, e, s).to_dict(), **TINY})
    )
    cfg = L.intervention_run(intervention, "reverse", "alibi", 0)
    L.run_and_save(cfg, L.intervention_dir(intervention, tmp_path))
    folder = L.intervention_dir(intervention, tmp_path)
    drawn = L.draw_attention(cfg, layer=1, head=2, n=5, results_dir=folder, name=f"ALiBi ({intervention})")
    assert " ".join(drawn["ax"].get_title().split()).startswith(
        f"ALiBi ({intervention}) {cfg.task} L1H2, n=5: on-target"
    )
    answer = L.get_task(cfg.task).answer_length(5) + 1  # the answer and EOS
    assert len(drawn["generated"]) == len(drawn["target"]) == answer
    assert drawn["attention"].shape == (
        L.get_task(cfg.task).answer_length(5),
        L.get_task(cfg.task).sequence_length(5) - 1,
    )
    assert 0 <= drawn["on_target"] <= 1


def test_intervention_of_names_the_intervention_of_a_run():
    for name in L.INTERVENTIONS:
        assert L.intervention_of(L.intervention_run(name, "reverse", "learned", 2)) == name
    assert L.intervention_of(L.make_run("copy", "nope", 0, scale_embeddings=True)) is None
    assert {L.intervention_of(c) for c in L.cliff_interventions()} == set(L.INTERVENTIONS) - {"none"}


# ---- position coupling -------------------------------------------------------------------------


def check_coupled(batch, coupled, task, natural):
    """Every sequence's answer queries read the natural position of their coupled source; the
    prompt, BOS and the final EOS keep theirs."""
    for b in range(batch.tokens.shape[0]):
        for s in batch.segments[b].unique().tolist():
            if s < 0:
                continue
            cols = (batch.segments[b] == s).nonzero()[:, 0]
            n = (len(cols) - 3) // 2
            nat, got = natural[b, cols], coupled.positions[b, cols]
            first = task.prompt_length(n) + 1
            assert torch.equal(got[:first], nat[:first]) and got[-1] == nat[-1]
            assert torch.equal(got[first:-1], nat[torch.tensor(L.coupled_sources(task, n))])


@pytest.mark.parametrize("name", ["copy", "reverse"])
@pytest.mark.parametrize("random", [False, True])
def test_coupled_positions_point_each_answer_query_at_its_source(name, random):
    task = L.get_task(name)
    batch = L.packed_training_batch(task, [1, 2, 5, 9, 16, 16, 3], draw())
    config = L.ModelConfig(
        encoding="rope", options={"position_coupling": True, "random_positions": 100 if random else 0}
    )
    coupled = L.model_positions(config, batch, draw(7), task)
    natural = L.randomize_positions(batch, 100, draw(7)).positions if random else batch.positions
    check_coupled(batch, coupled, task, natural)
    assert torch.equal(coupled.tokens, batch.tokens) and torch.equal(coupled.loss_mask, batch.loss_mask)


def test_coupled_sources_walk_the_prompt_and_stop_one_past_it():
    assert L.coupled_sources(L.get_task("copy"), 3) == [1, 2, 3, 4]  # EOS reads SEP's own index: no prompt token
    assert L.coupled_sources(L.get_task("reverse"), 3) == [3, 2, 1, 0]  # EOS reads BOS's
    assert L.coupled_sources(L.get_task("reverse"), 1) == [1, 0] and L.coupled_sources(L.get_task("copy"), 1) == [1, 2]
    assert L.coupled_sources(L.get_task("copy_hints"), 2) == [1, 2, 3, 4, 5]  # hints walk the prompt too
    assert (
        L.coupled_sources(L.get_task("reverse_hints"), 2) is None
        and L.coupled_sources(L.get_task("sorting"), 3) is None
    )
    batch = L.single_length_batch(L.get_task("reverse_hints"), 3, 2, draw())
    with pytest.raises(ValueError, match="'reverse_hints' cannot couple positions"):
        L.couple_positions(batch, batch.positions, L.get_task("reverse_hints"))


def test_coupling_off_is_todays_model_and_refuses_generate():
    cfg = L.make_run("reverse", "rope", 0)
    assert cfg.hash == L.make_run("reverse", "rope", 0, position_coupling=False).hash
    assert L.make_run("reverse", "rope", 0, position_coupling=True).hash != cfg.hash
    model = with_config(perturbed_model("rope"), position_coupling=True)
    with pytest.raises(ValueError, match="position_coupling"):
        L.generate(model, torch.tensor([[L.BOS, 5, 6, L.SEP]]), 3)


def test_inspection_reads_the_positions_a_model_was_trained_at():
    plain = L.inspection_batch("reverse", 9, 8)
    same = L.inspection_batch("reverse", 9, 8, config=L.ModelConfig(encoding="rope"))
    assert torch.equal(plain.positions, same.positions) and torch.equal(plain.tokens, same.tokens)
    config = L.ModelConfig(encoding="rope", options={"position_coupling": True, "random_positions": 100})
    coupled = L.inspection_batch("reverse", 9, 8, config=config)
    assert torch.equal(coupled.tokens, plain.tokens)
    src = torch.tensor(L.coupled_sources(L.get_task("reverse"), 9))
    assert torch.equal(coupled.positions[:, 10:20], coupled.positions[:, src])  # SEP .. y_9 read their sources'


def test_generate_decodes_at_given_positions_uncached():
    model = with_config(perturbed_model("rope"), position_coupling=True)
    prompt = torch.tensor([[L.BOS, 5, 6, 7, L.SEP]] * 2)
    positions = torch.tensor([[0, 1, 2, 3, 1, 2, 3, 4], [0, 9, 12, 20, 9, 12, 20, 31]])
    out = L.generate(model, prompt, 4, use_cache=False, positions=positions)
    by_hand = prompt
    with torch.no_grad():
        for _ in range(4):  # greedy, re-running the sequence at the given positions
            nxt = model(by_hand, positions=positions[:, : by_hand.shape[1]])[:, -1].argmax(-1, keepdim=True)
            by_hand = torch.cat([by_hand, nxt], dim=1)
    assert torch.equal(out, by_hand)
    plain = perturbed_model("rope")  # positions 0, 1, .. given: the same as the cached decoding
    assert torch.equal(
        L.generate(plain, prompt, 4, use_cache=False, positions=torch.arange(8).expand(2, 8)),
        L.generate(plain, prompt, 4),
    )
    with pytest.raises(ValueError, match="use_cache=False"):
        L.generate(model, prompt, 4, positions=positions)
    with pytest.raises(ValueError, match=r"shape \(2, >= 8\)"):
        L.generate(model, prompt, 4, use_cache=False, positions=positions[:, :6])


@pytest.mark.results
def test_the_explorer_offers_only_tasks_with_trained_grid_models(tmp_path):
    assert L.AttentionExplorer.trained_tasks([0], tmp_path, "copy") == ["copy"]  # the task asked for, always
    path = L.weights_path(tmp_path, L.make_run("reverse", "t5", 0))
    path.parent.mkdir(parents=True)
    torch.save(L.make_model(L.make_run("reverse", "t5", 0)).state_dict(), path)
    assert L.AttentionExplorer.trained_tasks([0], tmp_path, "copy") == ["copy", "reverse"]
    assert L.AttentionExplorer.trained_tasks([1], tmp_path, "copy") == ["copy"]
    assert L.AttentionExplorer.trained_tasks([0], L.RESULTS_DIR, "reverse") == ["copy", "reverse"]  # no hinted grid


def test_plot_interventions_gives_every_line_its_own_style_and_shows_lines_at_zero():
    import matplotlib.pyplot as plt

    def rows(intervention, encoding, em):
        return [
            dict(intervention=intervention, task=task, encoding=encoding, seed=0, n=n, exact_match=em(n),
                 length_given=1.0 if n <= 16 else 0.0)
            for task in ("copy", "reverse") for n in range(1, 25)
        ]  # fmt: skip

    table = pd.DataFrame(
        rows("none", "nope", lambda n: 1.0 if n <= 16 else 0.0)
        + rows("none", "alibi", lambda n: 1.0 if n <= 16 else 0.0)
        + rows("no EOS in loss", "nope", lambda n: 0.0)
        + rows("no EOS in loss", "alibi", lambda n: 0.0)
    )
    fig = L.plot_interventions(table, train_max=16, length_given=True)
    ax = fig.axes[0]
    (legend,) = fig.legends  # one legend for every panel
    assert all(a.get_legend() is None for a in fig.axes)
    styles = {
        t.get_text(): (h.get_linestyle(), h.get_color()) for t, h in zip(legend.get_texts(), legend.legend_handles)
    }
    keys = ["length given", "grid model (no intervention)", "longest training n (16)", "twice that (32)"]
    assert len({styles[k] for k in keys}) == len(keys)  # no two marks drawn alike
    assert len({styles[k][0] for k in keys[:3]}) == 3  # dashed, dotted, dash-dotted
    assert [t.get_text() for t in legend.get_texts()][:2] == ["NoPE", "ALiBi"]  # the encodings, once each
    assert ax.get_xlim()[0] == 8  # from half the training length, where the curves part
    plain = L.plot_interventions(table, train_max=16)  # by default one message: the exact match
    assert "length given" not in [t.get_text() for t in plain.legends[0].get_texts()]
    assert not any(line.get_linestyle() == "--" for line in plain.axes[0].get_lines())
    at_zero = sorted({float(line.get_ydata()[0]) for line in ax.get_lines() if len(line.get_ydata()) > 2})
    assert at_zero[:2] == [-2 * L.ZERO_STEP, -L.ZERO_STEP]  # the two lines at 0 drawn apart
    note = next(t.get_text() for t in ax.texts if t.get_text().startswith("0% at every n"))
    assert "NoPE, exact match" in note and "ALiBi, exact match" in note
    assert ax.get_ylim()[0] < -2 * L.ZERO_STEP and ax.title.get_fontsize() >= 13
    plt.close("all")


def test_cliff_goal_needs_both_tasks_and_both_floors_per_seed_and_reports_the_seeds_that_meet_it():
    def row(intervention, seed, task, inside, at, given=None):
        given = (inside, at) if given is None else given
        keys = {"intervention": intervention, "encoding": "rope", "seed": seed, "task": task}
        return keys | {
            "n = 1-16": inside,
            "n = 32": at,
            "n = 1-16, length given": given[0],
            "n = 32, length given": given[1],
        }

    summary = pd.DataFrame([
        row("coupled", 0, "copy", 100, 100), row("coupled", 0, "reverse", 100, 95),
        row("coupled", 1, "copy", 100, 100), row("coupled", 1, "reverse", 100, 89.9, given=(100, 90)),  # misses at 2x
        row("random", 0, "copy", 94.9, 100), row("random", 0, "reverse", 100, 100),  # misses in distribution
    ])  # fmt: skip
    goal = L.cliff_goal(summary)
    assert goal["EOS included"].to_dict() == {("coupled", "rope", 0): True, ("coupled", "rope", 1): False,
                                              ("random", "rope", 0): False}  # fmt: skip
    assert goal["length given"].sum() == 2
    assert L.cliff_goal_report(goal).splitlines() == [
        "EOS included: 1 of 3 trained (intervention, encoding, seed) meet it on copy and reverse:",
        "  coupled, RoPE: seeds [0]",
        "length given: 2 of 3 trained (intervention, encoding, seed) meet it on copy and reverse:",
        "  coupled, RoPE: seeds [0, 1]",
    ]
