"""The scratchpad study (section 17, notebook 10): its runs and their controls, the effect and its
verdicts, the paper's reading of a generation against ours, and where a step's query looks."""

import dataclasses
import json

import pandas as pd
import pytest
import torch

import lengen_helpers as L


@pytest.mark.results
def test_experiment_one_holds_the_pilots_run_and_pairs_each_run_with_its_grid_control():
    runs = L.scratchpad_addition()
    assert len(runs) == 18 and len({c.hash for c in runs}) == 18
    assert [c.seed for c in runs] == sorted(c.seed for c in runs)  # seed-major
    assert runs[0].hash == L.scratchpad_pilot()[-1].hash  # the pilot's outputs-only run: one record
    controls = {c.hash for c in L.chosen_shape_runs("addition")}
    for cfg, control, _, _ in L.scratchpad_pairs():
        assert control.hash in controls and (control.encoding, control.seed) == (cfg.encoding, cfg.seed)
        assert control.task_options == {"format": "paper"} and cfg.task_options["scratchpad"] == "o"
        assert (control.steps, control.lr, control.model.n_layers) == (cfg.steps, cfg.lr, cfg.model.n_layers)


@pytest.mark.results
@pytest.mark.parametrize("task", L.SCRATCHPAD_TASKS)
def test_a_scratchpad_run_is_its_grid_run_with_the_scratchpad(task):
    plain, pad = L.scratchpad_run(task, "none", "t5", 1), L.scratchpad_run(task, "o", "t5", 1)
    grid = L.chosen_shape_runs(task, [1]) if task in L.CHOSEN_SHAPES else L.paper_split_runs(task, seeds=[1])
    assert plain.hash in {c.hash for c in grid}
    assert L.record_path(L.RESULTS_DIR, plain).exists()  # the control is trained and committed
    assert pad.task_options["scratchpad"] == "o" and pad.eval_max_len == 16
    assert dataclass_fields(pad, "task_options", "eval_max_len") == dataclass_fields(
        plain, "task_options", "eval_max_len"
    )


def dataclass_fields(cfg, *leave_out):
    d = cfg.to_dict()
    return {k: v for k, v in d.items() if k not in leave_out}


def test_the_experiments_fit_their_compute_and_train_nothing_twice():
    runs = [*L.scratchpad_pilot(), *L.scratchpad_addition()[1:], *L.scratchpad_tasks(), *L.scratchpad_components()]
    assert len({c.hash for c in runs}) == len(runs)
    assert {c.task_options["scratchpad"] for c in L.scratchpad_components()} == {"co", "ov"}
    assert {c.encoding for c in L.scratchpad_tasks()} == {"nope", "t5"}


def write_record(folder, cfg, em, extra=None):
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    record = {"name": cfg.name, "config": cfg.to_dict(), "config_hash": cfg.hash, "exact_match": em}
    record |= {
        "training_revision": L.TRAINING_REVISION,
        "loss_curve": {"every": 1, "mean_loss": [1.0]},
        **(extra or {}),
    }
    L.record_path(folder, cfg).write_text(json.dumps(record))


def test_the_effect_pools_the_test_sizes_and_helps_only_beyond_two_standard_errors(tmp_path):
    pad, ctl = tmp_path / "pad", tmp_path / "ctl"
    pairs = L.scratchpad_pairs(pad, ctl)
    steps = {
        "step_accuracy": {str(n): 0.5 for n in range(1, 17)},
        "answer_given_steps": {str(n): 1.0 for n in range(1, 17)},
    }
    # NoPE seed 0: 40% at 9-10 and 0 beyond with the scratchpad (10% pooled); 0.5% pooled without
    write_record(
        pad, pairs[0][0], {str(n): 1.0 if n <= 8 else 0.4 * (n <= 10) for n in range(1, 17)}, {"scratchpad": steps}
    )
    write_record(ctl, pairs[0][1], {str(n): 0.9 if n <= 8 else 0.04 * (n == 9) for n in range(1, 25)})
    # sinusoidal seed 0: a difference of 0.2 points, far inside two standard errors
    write_record(pad, pairs[1][0], {str(n): 1.0 if n <= 8 else 0.502 for n in range(1, 17)}, {"scratchpad": steps})
    write_record(ctl, pairs[1][1], {str(n): 1.0 if n <= 8 else 0.5 for n in range(1, 25)})
    effect = L.scratchpad_effect(pad, ctl).set_index("encoding")
    w = [2 * n - 1 for n in range(9, 17)]  # the paper's test pairs of digit counts whose larger is n
    assert effect.loc["nope", "OOD with (%)"] == pytest.approx(100 * 0.4 * (w[0] + w[1]) / sum(w))
    assert effect.loc["nope", "OOD without (%)"] == pytest.approx(100 * 0.04 * w[0] / sum(w))
    assert effect.loc["nope", "in distribution without (%)"] == pytest.approx(90.0)
    assert effect.loc["nope", "helps"] and not effect.loc["sinusoidal", "helps"]
    var = sum(x**2 for x in w) / sum(w) ** 2 * (0.502 * 0.498 + 0.25) / 256
    assert effect.loc["sinusoidal", "standard error (points)"] == pytest.approx(100 * var**0.5)
    table = L.step_or_answer(L.scratchpad_curves(pad, ctl))
    assert table.loc[("NoPE", 9), "steps right (%)"] == pytest.approx(50.0) and len(table) == 16
    assert L.step_or_answer(L.scratchpad_curves(pad, ctl), runs=[("nope", 5)]).empty  # no such run: none kept
    kept = L.step_or_answer(L.scratchpad_curves(pad, ctl), runs=[("nope", s) for s in range(3)])
    assert kept.equals(table.loc[["NoPE"]]) and "Sinusoidal" in table.index.get_level_values("encoding")


def test_the_papers_parser_forgives_what_ours_does_not():
    task = L.get_task("addition", {"format": "paper", "scratchpad": "o"})
    end, digits = task.ids["thus"], {task.ids[str(d)]: str(d) for d in range(10)}
    ids = lambda text: [task.ids[s] for s in text.split()]  # noqa: E731
    body = ids("out 2 # out 1 thus")
    cases = {  # generation -> (ours, the paper's parser), for the truth 1 2
        "ends as trained": (body + ids("1 2") + [L.EOS], (True, True)),
        "no EOS": (body + ids("1 2"), (False, True)),
        "a second end marker, text after it": (body + ids("1 2 thus 7") + [L.EOS], (False, True)),
        "a leading zero": (body + ids("0 1 2") + [L.EOS], (False, True)),
        "a wrong digit": (body + ids("1 3") + [L.EOS], (False, False)),
        "no end marker": (ids("out 2 # out 1 # 1 2") + [L.EOS], (False, False)),
    }
    truth = ids("1 2")
    for name, (gen, (ours, paper)) in cases.items():
        assert (L.final_answer(gen, end) == truth) is ours, name
        assert (L.lenient_answer(gen, end, digits) == 12) is paper, name
    assert L.lenient_answer(body + [task.ids["+"], L.EOS], end, digits) is None  # not a number


def test_scoring_comparison_reads_the_same_generations_both_ways(monkeypatch):
    torch.manual_seed(0)
    task = L.get_task("addition", {"format": "paper", "scratchpad": "o"})
    model = L.DecoderOnlyLM(L.ModelConfig(encoding="nope", n_layers=1), task.vocab_size).eval()

    def truth_without_eos(model, prompt, max_new_tokens, **kw):  # every sum right, but never stopping
        batch = L.evaluation_batch(task, 2, 16, 7)
        p = prompt.shape[1]
        rows = [r for r in batch.tokens if int((r == L.SEP).int().argmax()) == p - 1]
        gen = [[t for t in r[p:].tolist() if t not in (L.EOS, L.PAD)] for r in rows]
        width = max(len(g) for g in gen)  # rows of one prompt length may differ in answer length
        return torch.tensor([prompt[i].tolist() + g + [L.PAD] * (width - len(g)) for i, g in enumerate(gen)])

    monkeypatch.setattr(L, "generate", truth_without_eos)
    table = L.scoring_comparison(model, task, [2], n_per_length=16, seed=7).iloc[0]
    assert table["ours"] == 0.0 and table["paper's parser"] == 1.0 and table["sums judged differently"] == 16


def test_step_attention_reads_the_columns_each_step_adds(monkeypatch):
    task = L.get_task("addition", {"format": "paper", "scratchpad": "o"})
    model = L.DecoderOnlyLM(L.ModelConfig(encoding="nope", n_layers=2, n_heads=2), task.vocab_size).eval()
    batch = L.evaluation_batch(task, 4, 8, L.INSPECTION_SEED)

    def on_the_column(model, batch):  # head 1 of layer 1 puts all its weight on the right digits
        B, T = batch.inputs.shape
        att = torch.full((2, B, 2, T, T), 1.0 / T)
        att[1, :, 1] = 0
        out, plus = task.ids["out"], task.ids["+"]
        for b, row in enumerate(batch.tokens.tolist()):
            p, sep = row.index(plus), row.index(L.SEP)
            steps = [i for i in range(sep, len(row)) if row[i] == out]
            for k, q in enumerate(steps):
                keys = [j for j, ok in ((p - 1 - k, k < p - 1), (sep - 1 - k, k < sep - p - 1)) if ok]
                att[1, b, 1, q, keys or [0]] = 1.0 / len(keys or [0])
        return att

    monkeypatch.setattr(L, "attention_maps", on_the_column)
    got = L.step_attention(model, task, 4, n_examples=8).set_index(["layer", "head"])
    assert got.loc[(1, 1), "on the column's digits"] == pytest.approx(1.0)
    assert got.loc[(0, 0), "on the column's digits"] < 0.5 and len(got) == 4
    with pytest.raises(ValueError, match="step outputs alone"):
        L.step_attention(model, L.get_task("addition", {"format": "paper", "scratchpad": "co"}), 4)
    assert batch.tokens.shape[0] == 8


def test_the_other_tasks_rank_only_runs_learned_with_and_without_the_scratchpad(tmp_path):
    pad, ctl = tmp_path / "pad", tmp_path / "ctl"
    runs = {(c.task, c.task_options["scratchpad"], c.encoding): c for c in L.scratchpad_tasks()}
    top = {t: L.scratchpad_run(t, "o").eval_max_len for t in L.SCRATCHPAD_TASKS}
    train_max = {t: L.scratchpad_run(t, "o").train_max_len for t in L.SCRATCHPAD_TASKS}

    def em(task, inside, outside):
        return {str(n): inside if n <= train_max[task] else outside for n in range(1, 3 * top[task])}

    cases = {  # (task, format, encoding): (with it in / out, without it in / out)
        ("parity", "o", "nope"): ((1.0, 0.6), (1.0, 0.5)),  # helps: 10 points, far beyond two errors
        ("parity", "o", "t5"): ((1.0, 0.501), (1.0, 0.5)),  # inside two standard errors
        ("sorting", "o", "nope"): ((0.5, 0.9), (1.0, 0.0)),  # not learned with it: never "helps"
        ("summation", "o", "nope"): ((1.0, 0.9), (0.4, 0.0)),  # the control not learned
        ("summation", "o", "t5"): ((1.0, 0.2), (1.0, 0.4)),  # lower by far more than two errors
    }
    for key, ((wi, wo), (ci, co)) in cases.items():
        cfg = runs[key]
        write_record(pad, cfg, em(key[0], wi, wo))
        write_record(ctl, L.scratchpad_run(cfg.task, "none", cfg.encoding, cfg.seed), em(key[0], ci, co))
    table = L.scratchpad_task_effect(pad, ctl).set_index(["task", "format", "encoding"])
    assert len(table) == len(runs)
    verdicts = table["verdict"].to_dict()
    assert verdicts[("parity", "o", "nope")] == "helps"
    assert verdicts[("parity", "o", "t5")] == "no measurable gain"
    assert verdicts[("sorting", "o", "nope")] == "not learned with it"
    assert verdicts[("summation", "o", "nope")] == "control not learned"
    assert verdicts[("summation", "o", "t5")] == "hurts"
    assert verdicts[("polynomial", "o", "t5")] == "not trained yet"
    assert table.loc[("parity", "o", "nope"), "OOD with (%)"] == pytest.approx(60.0)  # L+1..2L, alike
    assert table.loc[("parity", "o", "nope"), "in distribution without (%)"] == pytest.approx(100.0)


def test_the_format_table_compares_each_added_component_with_the_step_outputs(tmp_path):
    pad, ctl = tmp_path / "pad", tmp_path / "ctl"
    w = [2 * n - 1 for n in range(9, 17)]
    write_record(pad, L.scratchpad_run("addition", "o"), {str(n): 1.0 if n <= 8 else 0.1 for n in range(1, 17)})
    write_record(pad, L.scratchpad_run("addition", "co"), {str(n): 1.0 if n <= 8 else 0.3 for n in range(1, 17)})
    write_record(ctl, L.scratchpad_run("addition", "none"), {str(n): 0.9 if n <= 8 else 0.0 for n in range(1, 25)})
    table = L.scratchpad_format_table(pad, ctl)
    assert table["trained"].tolist() == [True, True, True, False]  # none, o, co, ov
    assert table.loc["co", "OOD vs o (points)"] == pytest.approx(20.0)
    se = 100 * (sum(x**2 for x in w) / sum(w) ** 2 * (0.3 * 0.7 + 0.1 * 0.9) / 256) ** 0.5
    assert table.loc["co", "standard error (points)"] == pytest.approx(se)
    assert bool(table.loc["co", "differs from o"]) and pd.isna(table.loc["ov", "OOD (%)"])
    assert table.loc["none", "in distribution (%)"] == pytest.approx(90.0)


def test_each_claim_is_judged_from_its_table():
    five = L.PAPER_ENCODINGS
    every = pair_rows({(e, s): (True, True, 1.0 + s) for e in five for s in range(3)})
    every["OOD with (%)"] = [5.0 + 0.5 * s for e in five for s in range(3)]  # seeds 1 point apart at most
    tasks = pd.DataFrame(
        [
            {"task": "parity", "format": "o", "encoding": "nope", "seed": 0, "verdict": "no measurable gain"},
            {"task": "sorting", "format": "o", "encoding": "t5", "seed": 0, "verdict": "not learned with it"},
        ]
    )
    formats = pd.DataFrame(
        {"OOD vs o (points)": [None, None, 5.0, 0.1], "standard error (points)": [None, None, 1.0, 1.0]},
        index=pd.Index(["none", "o", "co", "ov"], name="format"),
    )
    claims = L.scratchpad_claims(every, every, tasks, formats)
    # the second and third rest on one seed: said with the verdict, not only in the prose
    one_seed = ["holds here (one seed: a hypothesis)", "holds here (one seed a format: a hypothesis)"]
    assert claims["here"].tolist() == ["holds here", *one_seed]
    assert "lie apart by (points): ALiBi 1.0 at 0.002, NoPE 1.0 at 0.002" in claims.iloc[2]["numbers"]
    # one encoding's compared seeds all at or below 0: the first claim fails; a task that helps: the
    # second; a format's one seed inside the seeds' spread: the third is not distinguishable
    no_gain = every.assign(**{"OOD difference (points)": [-1.0 if e == "t5" else 1.0 for e in five for _ in range(3)]})
    helps = tasks.assign(verdict=["helps", "not learned with it"])
    claims = L.scratchpad_claims(
        no_gain, no_gain, helps, formats.assign(**{"OOD vs o (points)": [None, None, 0.8, -0.5]})
    )
    assert claims["here"].tolist() == [
        "does not hold here",
        "does not hold here (one seed: a hypothesis)",
        "not distinguishable here",
    ]
    assert "all at or below 0: T5 bias" in claims.loc["a scratchpad helps addition, for every encoding", "numbers"]
    # nothing trained: nothing claimed
    untrained = every.assign(status="not trained yet")
    none = L.scratchpad_claims(untrained, untrained, tasks.assign(verdict="not trained yet"), formats.iloc[:2])
    assert none["here"].tolist() == ["not trained yet"] * 3


def test_the_papers_parser_reads_words_signs_and_lists_and_never_counts_an_unread_answer_right():
    def check(task_name, options, truth, cases, as_list=False):
        task = L.get_task(task_name, options)
        end = task.ids["thus"]
        symbols = {i: t for t, i in task.ids.items() if i not in (L.PAD, L.BOS, L.SEP, L.EOS)}
        ids = lambda text: [task.ids[s] for s in text.split()]  # noqa: E731
        for text, right in cases.items():
            gen = ids(text) + [L.EOS]
            assert L.lenient_right(gen, ids(truth), end, symbols, as_list) is right, (task_name, text)

    # parity's answer is a word: the same word is right, the other wrong, nothing after the end wrong
    check(
        "parity", {"scratchpad": "o"}, "even", {"out 0 thus even": True, "out 0 thus odd": False, "out 0 thus": False}
    )
    check("parity", {"scratchpad": "o"}, "odd", {"out 1 thus odd thus even": True, "out 1 # out 0": False})
    # polynomial's answer is a digit (the value mod 10); its steps may be negative: a sign is read,
    # a leading zero forgiven
    poly = {"out - 2 thus 0 8": True, "out - 2 thus - 8": False, "out - 2 thus 8 0": False}
    check("polynomial", {"scratchpad": "o"}, "8", poly)
    # sorting's answer is a list, one number a token: the same digits split otherwise are wrong
    lists = {"out 4 thus 4 13 19": True, "out 4 thus 4 19 13": False, "out 4 thus 4 1 3 19": False}
    check("sorting", {"scratchpad": "o"}, "4 13 19", lists, True)


def test_the_other_experiments_verdicts_under_each_reading(tmp_path):
    pad, ctl = tmp_path / "pad", tmp_path / "ctl"
    sizes = range(1, 17)

    def em(train_max, inside, outside, top=16):
        return {str(n): inside if n <= train_max else outside for n in range(1, top + 1)}

    def rows(cfg, key, ours, paper):  # scoring rows of one run: our reading and the parser's, per size
        return pd.DataFrame(
            {"n": list(sizes), "ours": [ours[str(n)] for n in sizes], "paper's parser": [paper[str(n)] for n in sizes]}
        ).assign(task=key, encoding=cfg.encoding, seed=cfg.seed)

    parts = []
    # out of distribution: as recorded, with more room by our reading, and by the parser's (control: 0.5)
    for enc, recorded, room, parser in (("nope", 0.6, 0.6, 0.5), ("t5", 0.5, 0.6, 0.6)):
        cfg = L.scratchpad_run("parity", "o", enc)
        mx = cfg.train_max_len
        write_record(pad, cfg, em(mx, 1.0, recorded))
        write_record(ctl, L.scratchpad_run("parity", "none", enc), em(mx, 1.0, 0.5, 3 * 16))
        parts.append(rows(cfg, cfg.make_task().key, em(mx, 1.0, room), em(mx, 1.0, parser)))
    # experiment 3: co beats o by our reading; by the parser's, o reads 0.3 too
    o, co = L.scratchpad_run("addition", "o"), L.scratchpad_run("addition", "co")
    write_record(pad, o, em(8, 1.0, 0.1))
    write_record(pad, co, em(8, 1.0, 0.3))
    write_record(ctl, L.scratchpad_run("addition", "none"), em(8, 0.9, 0.0, 24))
    parts.append(rows(co, co.make_task().key, em(8, 1.0, 0.3), em(8, 1.0, 0.3)))
    exp1 = rows(o, "addition", em(8, 1.0, 0.1), em(8, 1.0, 0.3))
    table = L.other_scoring_verdicts(pd.concat(parts, ignore_index=True), exp1, pad, ctl).set_index("run")
    recorded, room, parser = L.OTHER_READINGS
    nope, t5, co = "parity o NoPE s0", "parity o T5 bias s0", "addition co NoPE s0"
    assert table.loc[nope, [recorded, room, parser]].tolist() == ["helps", "helps", "no measurable gain"]
    assert table.loc[t5, [recorded, room, parser]].tolist() == ["no measurable gain", "helps", "helps"]
    assert table.loc[co, [recorded, room, parser]].tolist() == ["differs from o", "differs from o", "same as o"]
    assert table["parser differs"].tolist() == [True, False, True]  # the same generations, read two ways
    assert table["differs from the records"].tolist() == [True, True, True]
    assert len(table) == 3  # untrained runs are left out
    assert L.read_record(L.record_path(pad, o))["exact_match"]["9"] == 0.1  # the records are left as they were
    with pytest.raises(ValueError, match="no scoring rows"):  # a trained run the scoring table lacks
        L.other_scoring_verdicts(parts[0], exp1, pad, ctl)


def test_resumed_runs_are_estimated_at_their_own_speed(tmp_path):
    cfg = L.scratchpad_run("addition", "o")
    timed = {"resumed_from_step": cfg.steps // 4, "wall_time_s": 4500.0, "train_time_s": 3600.0}  # + evaluation
    write_record(tmp_path, cfg, {"1": 1.0}, timed)
    write_record(tmp_path, L.scratchpad_run("addition", "co"), {"1": 1.0}, {"wall_time_s": 60.0})
    table = L.resumed_wall_missing(tmp_path)
    assert list(table.index) == [cfg.name]  # the run trained straight through is not listed
    assert table.loc[cfg.name, "before, estimated (h)"] == pytest.approx(1 / 3)  # a quarter of the steps' training
    assert table.loc[cfg.name, "wall recorded (h)"] == pytest.approx(1.25)


@pytest.mark.parametrize("encoding", ["nope", "learned"])
def test_scoring_gives_twice_the_target_within_the_positions_a_model_represents(monkeypatch, encoding):
    task = L.get_task("addition", {"format": "paper", "scratchpad": "co"})
    rows = task.prompt_length(12) + task.answer_length(12) + 8  # the target fits, twice it does not
    model = L.DecoderOnlyLM(L.ModelConfig(encoding=encoding, n_layers=1, max_positions=rows), task.vocab_size)
    model.eval()
    rooms = []

    def nothing(model, prompt, max_new_tokens, **kw):  # writes EOS at once: every sum wrong
        L._check_generation(model, prompt, max_new_tokens, True, None)  # a room generate accepts
        rooms.append((prompt.shape[1], max_new_tokens))
        return torch.cat([prompt, torch.full((prompt.shape[0], 1), L.EOS)], dim=1)

    monkeypatch.setattr(L, "generate", nothing)
    L.scoring_comparison(model, task, [12], n_per_length=8, seed=7)
    want = 2 * task.answer_length(12)
    assert rooms and want > rows  # past the learned table: the table's rows bound it
    for prompt, room in rooms:  # positions 0 .. prompt + room - 2 are fed back
        assert room == (want if encoding == "nope" else rows - prompt + 1)


def test_step_overrun_counts_the_steps_written_past_the_target(monkeypatch):
    task = L.get_task("parity", {"scratchpad": "o"})
    model = L.DecoderOnlyLM(L.ModelConfig(encoding="nope", n_layers=1), task.vocab_size).eval()
    batch = L.evaluation_batch(task, 6, 8, 7)
    thus, extra = task.ids["thus"], [task.ids[s] for s in "# out 0".split()]

    def one_step_more(model, prompt, max_new_tokens, **kw):  # every row: its target with a step added
        p = prompt.shape[1]
        rows = []
        for r in batch.tokens[:, p:].tolist():
            target = r[: r.index(L.EOS) + 1]
            rows.append(target[: target.index(thus)] + extra + target[target.index(thus) :])
        assert max_new_tokens == 2 * task.answer_length(6) and all(len(r) <= max_new_tokens for r in rows)
        return torch.cat([prompt, torch.tensor(rows)], dim=1)

    monkeypatch.setattr(L, "generate", one_step_more)
    row = L.steps_past_target(model, task, [6], count=8, seed=7).loc[6]
    assert row["more steps than the target"] == 1.0 and row["fewest extra"] == row["most extra"] == 1
    assert row["stops within the records' room"] == 0.0  # three tokens more than the longest target

    def the_target(model, prompt, max_new_tokens, **kw):  # every row: its target, EOS last in the room
        rows = [r[: r.index(L.EOS) + 1] for r in batch.tokens[:, prompt.shape[1] :].tolist()]
        assert all(len(r) == task.answer_length(6) + 1 for r in rows)  # EOS on the records' room's last token
        return torch.cat([prompt, torch.tensor(rows)], dim=1)

    monkeypatch.setattr(L, "generate", the_target)
    row = L.steps_past_target(model, task, [6], count=8, seed=7).loc[6]
    assert row["more steps than the target"] == 0.0 and row["most extra"] == 0
    assert row["stops within the records' room"] == 1.0


def test_the_compute_table_counts_trained_runs_and_those_resumed(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "run_compute_flops", lambda cfg, sample_steps: 2.0)  # every run: 2 copy runs
    pilot = L.scratchpad_pilot()
    write_record(tmp_path, pilot[0], {"1": 1.0}, {"wall_time_s": 3600.0, "resumed_from_step": 500})
    write_record(tmp_path, pilot[1], {"1": 1.0}, {"wall_time_s": 1800.0})
    table = L.scratchpad_compute(1.0, tmp_path)
    row = table.loc["pilot"]
    assert (row["runs"], row["trained"], row["copy runs"]) == (len(pilot), 2, 4.0)  # the trained runs' cost
    assert (row["wall (h)"], row["resumed"]) == (1.5, 1)
    assert table.loc["total", "trained"] == 2 and table.loc["total", "resumed"] == 1
    # the lower rate's round leaves out the two answer-alone runs the ten-task pilot trained (and counts)
    assert table.loc["1 at lr 1e-3: both arms", "runs"] == 28
    # the pre-norm grid leaves out the pilot's seven arms, which its own row counts
    assert table.loc["1 pre-norm: the pilot", "runs"] == 7 and table.loc["1 pre-norm: the grid", "runs"] == 23
    assert table.loc["1 pre-norm: 20,000 steps", "runs"] == 0  # no record yet: none is under 90% and falling


def test_scoring_ood_pools_one_reading_as_the_records_are_pooled():
    cfg = L.scratchpad_run("addition", "o")
    rows = pd.DataFrame({"n": range(1, 17)}).assign(task="addition", encoding=cfg.encoding, seed=cfg.seed)
    scoring = rows.assign(ours=[1.0 if n <= 8 else 0.5 * (n == 9) for n in range(1, 17)], **{"paper's parser": 1.0})
    w = [2 * n - 1 for n in range(9, 17)]  # the paper's test pairs of digit counts whose larger is n
    assert L.scoring_ood(scoring, cfg) == pytest.approx(100 * 0.5 * w[0] / sum(w))
    assert L.scoring_ood(scoring, cfg, "paper's parser") == pytest.approx(100.0)


@pytest.mark.results
def test_the_lower_rate_pairs_each_step_output_run_with_its_answer_alone_run():
    runs = L.scratchpad_lower_lr()
    assert len(runs) == 30 and len({c.hash for c in runs}) == 30
    for pad, plain in zip(runs[0::2], runs[1::2]):
        assert pad.task_options["scratchpad"] == "o" and plain.task_options == {"format": "paper"}
        assert (pad.encoding, pad.seed, pad.lr, pad.steps) == (plain.encoding, plain.seed, 1e-3, 10_000)
        assert pad.encoding in L.PAPER_ENCODINGS
    chosen, lower = L.scratchpad_rates()
    assert (chosen, lower) == (2e-3, 1e-3) and len(L.rate_pairs(lower)) == 15
    with pytest.raises(ValueError, match="learning rates 0.002 and 0.001"):
        L.rate_pairs(3e-3)


def pair_rows(rows):
    """{(encoding, seed): (learned with, learned without, OOD difference)} -> `rate_pair_table` rows."""
    out = []
    for (enc, seed), (with_, without, d) in rows.items():
        row = {"learning rate": 2e-3, "encoding": enc, "seed": seed, "learned with it": with_}
        row["learned without it"] = without
        out.append(row | {"OOD difference (points)": d, "status": L.pair_status(row)})
    return pd.DataFrame(out)


def test_a_pair_is_compared_only_where_both_arms_learned():
    row = {"learned with it": True, "learned without it": False}
    assert L.pair_status(row) == "control not learned"
    assert L.pair_status(row | {"learned without it": True}) == "compared"
    assert L.pair_status({"learned with it": False, "learned without it": True}) == "scratchpad arm not learned"
    assert L.pair_status({"learned with it": False, "learned without it": False}) == "neither learned"


def test_the_claim_for_every_encoding_needs_every_encoding_and_the_sign_flip_test():
    five = L.PAPER_ENCODINGS
    helped = pair_rows({(e, s): (True, True, 1.0 + s) for e in five for s in range(3)})
    verdict, numbers = L.claim_every_encoding(helped)
    assert verdict == "holds here" and "15 pairs compared, 15 above 0" in numbers
    effects = L.seed_effects(helped)
    assert effects.loc["NoPE", "differences by seed"] == "s0 +1.0, s1 +2.0, s2 +3.0"
    assert effects.loc["NoPE", "above 0"] == "3 of 3"
    # a control not learned removes the pair; an encoding with fewer than two compared pairs
    # leaves the claim untested, and is named
    missing = pair_rows({(e, s): (True, e != "rope" and (e != "t5" or s == 0), 1.0) for e in five for s in range(3)})
    verdict, numbers = L.claim_every_encoding(missing)
    assert verdict == "not testable here for RoPE, T5 bias"
    assert "fewer than 2 pairs compared: RoPE, T5 bias" in numbers
    assert L.claim_every_encoding(missing, min_pairs=1)[0] == "not testable here for RoPE"
    # one encoding with every compared seed at or below 0 does not hold, whatever the others do
    against = pair_rows({(e, s): (True, True, -1.0 if e == "alibi" else 2.0) for e in five for s in range(3)})
    verdict, numbers = L.claim_every_encoding(against)
    assert verdict == "does not hold here" and "all at or below 0: ALiBi" in numbers
    # the test is two-sided: five pairs all above 0 give p = 2/32, six give 2/64
    five_up = pair_rows({(e, s): (True, True, 1.0) for e in five[:2] for s in range(3)}).iloc[:5]
    assert L.claim_every_encoding(five_up, encodings=five[:2])[0] == "not distinguishable here"
    six_up = pair_rows({(e, s): (True, True, 1.0) for e in five[:2] for s in range(3)})
    verdict, numbers = L.claim_every_encoding(six_up, encodings=five[:2])
    assert verdict == "holds here" and "sign-flip p 0.031 (two-sided)" in numbers
    # significantly below 0 overall, though no encoding is below 0 on every seed: does not hold
    down = pair_rows({(e, s): (True, True, -1.0 if s else 0.5) for e in five for s in range(3)})
    assert L.claim_every_encoding(down)[0] == "does not hold here"


def test_the_plateau_exit_is_the_first_step_below_the_level():
    curves = pd.DataFrame(
        [
            {"learning rate": 1e-3, "arm": "step outputs", "encoding": "rope", "seed": s, "step": step, "loss": loss}
            for s, losses in ((0, [0.3, 0.2, 0.04, 0.01]), (1, [0.3, 0.2, 0.2, 0.2]))
            for step, loss in zip((100, 200, 300, 400), losses)
        ]
    )
    exit_ = L.plateau_exit(curves)
    assert exit_.loc[(1e-3, "step outputs", "rope"), 0] == 300 and pd.isna(exit_.loc[(1e-3, "step outputs", "rope"), 1])


def test_late_loss_change_reads_only_the_arms_that_did_not_learn_and_flags_a_falling_loss():
    losses = {
        ("step outputs", 0): [0.3, 0.2, 0.1],
        ("answer alone", 0): [0.3, 0.1, 0.05],
        ("answer alone", 1): [0.3, 0.2, 0.19],
    }
    curves = pd.DataFrame(
        [
            {"learning rate": 1e-3, "arm": arm, "encoding": "rope", "seed": s, "step": step, "loss": loss}
            for (arm, s), values in losses.items()
            for step, loss in zip((100, 200, 300), values)
        ]
    )
    pairs = pd.DataFrame(
        [
            {"learning rate": 1e-3, "encoding": "rope", "seed": 0, "status": "control not learned"}
            | {"in distribution with (%)": 99.0, "in distribution without (%)": 80.0},
            {"learning rate": 1e-3, "encoding": "rope", "seed": 1, "status": "neither learned"}
            | {"in distribution with (%)": 50.0, "in distribution without (%)": 60.0},
            {"learning rate": 1e-3, "encoding": "rope", "seed": 2, "status": "not trained yet"},
        ]
    )
    pairs.loc[1, "in distribution with (%)"] = 95.0  # seed 1's step outputs learned: only its control is read
    late = L.late_loss_change(curves, pairs, window=100)
    assert list(zip(late["arm"], late["seed"])) == [("answer alone", 0), ("answer alone", 1)]
    assert late["loss at 200"].tolist() == [0.1, 0.2] and late["loss at 300"].tolist() == [0.05, 0.19]
    assert late["change (%)"].round(1).tolist() == [-50.0, -5.0]
    assert late["still falling"].tolist() == [True, False]  # the default: down by more than 10%


def test_the_rate_curves_draw_a_median_and_band_per_rate_and_arm():
    import matplotlib.pyplot as plt

    rows = [
        {"learning rate": lr, "arm": arm, "encoding": "rope", "seed": s, "step": step, "loss": 1.0 / step + s}
        for lr in (1e-3, 2e-3)
        for arm in ("answer alone", "step outputs")
        for s in range(2)
        for step in (100, 200, 300)
    ]
    fig = L.plot_rate_curves(pd.DataFrame(rows))
    left, right = fig.axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["lr 0.001 (2 runs)", "lr 0.002 (2 runs)"]
    assert list(left.get_lines()[0].get_ydata()) == pytest.approx([0.5 + 1 / 100, 0.5 + 1 / 200, 0.5 + 1 / 300])
    assert left.get_title() == "answer alone: training loss" and right.get_xlabel() == "training step"
    plt.close(fig)


def test_step_or_answer_at_rates_keeps_each_rates_runs_whose_step_outputs_were_learned(tmp_path):
    pad, ctl = tmp_path / "pad", tmp_path / "ctl"
    chosen, lower = L.scratchpad_rates()
    steps = lambda right: {  # noqa: E731
        "scratchpad": {
            "step_accuracy": {str(n): right for n in range(1, 17)},
            "answer_given_steps": {str(n): 1.0 for n in range(1, 17)},
        }
    }
    learned = {str(n): 1.0 if n <= 8 else 0.1 for n in range(1, 17)}
    missed = {str(n): 0.3 for n in range(1, 17)}
    # at the chosen rate NoPE seed 0 learns the step outputs (steps 60% right), its control does not
    cfg, control, _, _ = L.rate_pairs(chosen, pad, ctl)[0]
    write_record(pad, cfg, learned, steps(0.6))
    write_record(ctl, control, missed)
    # at the lower rate RoPE seed 0 learns them (steps 90% right); NoPE seed 0 does not (left out)
    lower_pairs = {(c.encoding, c.seed): (c, k) for c, k, _, _ in L.rate_pairs(lower, pad, ctl)}
    for enc, em, right in (("rope", learned, 0.9), ("nope", missed, 0.2)):
        cfg, control = lower_pairs[(enc, 0)]
        write_record(pad, cfg, em, steps(right))
        write_record(pad, control, learned)
    pairs = L.rate_pair_table(results_dir=pad, control_dir=ctl)
    table = L.step_or_answer_at_rates(pairs, sizes=range(9, 11), results_dir=pad, control_dir=ctl)
    assert table.index.names == ["learning rate", "encoding", "n"]
    assert table["steps right (%)"].to_dict() == {
        (chosen, "NoPE", 9): 60.0,
        (chosen, "NoPE", 10): 60.0,
        (lower, "RoPE", 9): 90.0,
        (lower, "RoPE", 10): 90.0,
    }
    wide = L.step_or_answer_by_size(table)
    assert wide.index.tolist() == [(chosen, "NoPE"), (lower, "RoPE")]
    with pytest.raises(ValueError, match="no run"):
        L.step_or_answer_at_rates(pairs[pairs["status"] == "neither learned"], results_dir=pad, control_dir=ctl)


def test_the_pre_norm_round_changes_only_the_normalization_and_holds_its_pilot():
    grid, pilot = L.scratchpad_pre_norm(), L.scratchpad_pre_norm_pilot()
    assert len(grid) == 30 and len({c.hash for c in grid}) == 30
    assert {c.hash for c in pilot} <= {c.hash for c in grid} and len(pilot) == 7
    post = {(c.task_options.get("scratchpad", "none"), c.encoding, c.seed): c for c in L.scratchpad_addition()}
    post |= {(c.task_options.get("scratchpad", "none"), c.encoding, c.seed): c for c in L.chosen_shape_runs("addition")}
    for cfg in grid:
        assert cfg.model.pre_norm and (cfg.lr, cfg.steps) == (2e-3, 10_000)
        before = post[cfg.task_options.get("scratchpad", "none"), cfg.encoding, cfg.seed]
        assert not before.model.pre_norm and cfg.hash != before.hash
        same = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, pre_norm=False))
        assert same.hash == before.hash  # the one setting changed
    assert L.pre_norm_arm("o", "alibi", 0, steps=20_000).steps == 20_000
    with pytest.raises(ValueError, match="'o' .* and 'none'"):
        L.pre_norm_arm("co", "nope", 0)
    assert {"scratchpad-pre-norm", "scratchpad-pre-norm-pilot"} <= set(L.EXPERIMENTS)


def test_the_validation_draw_is_kept_apart_from_the_test_sums():
    task = L.get_task("addition", {"format": "paper"})
    for n in (1, 2, 8):
        test = set(L._prompt_rows(L.evaluation_batch(task, n, 256, 1234)))
        held = L._prompt_rows(L.validation_batch(task, n, 256, 1234))
        assert not set(held) & test  # no validation prompt is a test prompt
        if n == 8:
            assert len(held) > 250  # 8-digit sums rarely repeat: nearly the whole draw is kept
    assert len(L.validation_batch(task, 1, 256, 1234).tokens) < 256  # 1-digit sums repeat: some are dropped
    with pytest.raises(ValueError, match="must differ from the test's"):
        L.validation_batch(task, 3, 8, 1234, seed=1234)


def test_each_arm_takes_the_setting_validation_picks(tmp_path, monkeypatch):
    calls = []

    def scored(cfg, folder, count=256, seed=L.VALIDATION_SEED, cache=None):
        calls.append(cfg.hash)
        return {True: 0.9, False: 0.5}[cfg.model.pre_norm]

    settings = L.arm_settings("o", "alibi", 0)
    assert list(settings) == [
        "post-LN, lr 0.002",
        "post-LN, lr 0.001",
        "pre-norm, lr 0.002",
        "pre-norm, lr 0.002, 20,000 steps",
    ]
    folders = {}
    for name, (cfg, _) in settings.items():
        folders[name] = tmp_path / name.replace(" ", "_")
        if "20,000" not in name:  # the longer run not trained: left out, not an error
            rec = {"name": cfg.name, "config": cfg.to_dict(), "config_hash": cfg.hash, "exact_match": {}}
            rec |= {"training_revision": L.TRAINING_REVISION, "loss_curve": {"every": 1, "mean_loss": [1.0]}}
            L._atomic_json(L.record_path(folders[name], cfg), rec)
    monkeypatch.setattr(L, "arm_settings", lambda *a: {k: (c, folders[k]) for k, (c, _) in settings.items()})
    monkeypatch.setattr(L, "validation_exact_match", scored)
    chosen = L.chosen_setting("o", "alibi", 0)
    assert chosen["setting"] == "pre-norm, lr 0.002" and len(chosen["scores"]) == 3
    assert chosen["scores"]["post-LN, lr 0.001"] == pytest.approx(50.0) and chosen["run"].model.pre_norm
    monkeypatch.setattr(L, "validation_exact_match", lambda *a, **k: 0.7)  # all equal: the first listed
    assert L.chosen_setting("o", "alibi", 0)["setting"] == "post-LN, lr 0.002"


def test_validation_scores_are_read_from_the_cache_and_a_foreign_file_is_refused(tmp_path, monkeypatch):
    cfg = L.make_run("copy", "nope", 0, steps=0)
    cache = tmp_path / "validation.csv"
    L.write_keyed_cache(
        cache, L.VALIDATION_CACHE_COLUMNS, {(cfg.hash, str(L.VALIDATION_SEED), "256", cfg.name): "0.25"}
    )
    monkeypatch.setattr(L, "load_run_model", lambda *a: pytest.fail("a cached score loads no weights"))
    assert L.validation_exact_match(cfg, tmp_path, cache=cache) == 0.25
    cache.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a validation cache"):
        L.validation_exact_match(cfg, tmp_path, cache=cache)


def test_validation_scores_a_saved_model_on_the_training_sizes(tmp_path):
    torch.manual_seed(0)
    cfg = L.make_run("copy", "nope", 0, steps=0, train_max_len=4)
    path = L.weights_path(tmp_path, cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(L.DecoderOnlyLM(cfg.model).state_dict(), path)
    cache = tmp_path / "v.csv"
    score = L.validation_exact_match(cfg, tmp_path, count=16, cache=cache)
    assert 0.0 <= score <= 1.0 and len(L.read_keyed_cache(cache, L.VALIDATION_CACHE_COLUMNS, "validation")) == 1


def test_learned_counts_at_two_rates_are_compared_on_the_same_pairs_with_a_sign_test():
    rows = []
    for lr in (2e-3, 1e-3):
        for s in range(6):  # the step outputs learn on seeds 0-4 at 2e-3, on seed 5 only at 1e-3
            with_ = (s < 5) if lr == 2e-3 else s == 5
            rows.append({"learning rate": lr, "encoding": "nope", "seed": s, "status": "compared"})
            rows[-1] |= {"in distribution with (%)": 95.0 if with_ else 50.0, "in distribution without (%)": 95.0}
    rows.append(rows[-1] | {"learning rate": 2e-3, "seed": 9})  # a seed trained at one rate only: left out
    table = L.learned_at_each_rate(pd.DataFrame(rows))
    step = table.loc["step outputs"]
    assert (step["pairs"], step["learned at 0.002"], step["learned at 0.001"]) == (6, 5, 1)
    assert (step["only at 0.002"], step["only at 0.001"]) == (5, 1)
    assert step["sign test p"] == pytest.approx(2 * (1 + 6) / 64)  # two-sided: 1 or fewer of 6 discordant
    assert table.loc["answer alone", "sign test p"] == 1.0  # no discordant run
    with pytest.raises(ValueError, match="two learning rates"):
        L.learned_at_each_rate(pd.DataFrame(rows).query("`learning rate` == 0.002"))


def test_the_settings_table_shows_each_setting_tried_and_the_pre_norm_exit(tmp_path, monkeypatch):
    settings = L.arm_settings("o", "nope", 2)
    folders = {name: tmp_path / str(i) for i, name in enumerate(settings)}
    for name, (cfg, _) in settings.items():
        if "20,000" in name:
            continue  # not trained: blank
        high = {"post-LN, lr 0.002": 0.2, "post-LN, lr 0.001": 0.3}.get(name, 1.0)
        curve = [0.5, 0.2, 0.04, 0.01] if name.startswith("pre-norm") else [0.5, 0.4, 0.3, 0.3]
        rec = {
            "name": cfg.name,
            "config": cfg.to_dict(),
            "config_hash": cfg.hash,
            "training_revision": L.TRAINING_REVISION,
        }
        rec |= {"exact_match": {str(n): high for n in range(1, 17)}, "loss_curve": {"every": 100, "mean_loss": curve}}
        L._atomic_json(L.record_path(folders[name], cfg), rec)
    monkeypatch.setattr(L, "arm_settings", lambda *a: {k: (c, folders[k]) for k, (c, _) in settings.items()})
    table = L.arm_settings_table([("o", "nope", 2)])
    row = table.loc[("step outputs", "NoPE", 2)]
    assert row["post-LN, lr 0.002 (%)"] == pytest.approx(20.0) and row["pre-norm, lr 0.002 (%)"] == pytest.approx(100.0)
    assert pd.isna(row["pre-norm, lr 0.002, 20,000 steps (%)"])
    assert row["pre-norm: loss under 0.05 from step"] == 300 and row["pre-norm: final loss"] == pytest.approx(0.01)


def test_only_pre_norm_arms_short_of_the_bar_and_still_falling_train_longer(tmp_path):
    grid = L.scratchpad_pre_norm()
    falling = {"every": 1000, "mean_loss": [1.0] * 7 + [0.5, 0.4, 0.3]}  # -40% over the last 2,000 steps
    flat = {"every": 1000, "mean_loss": [1.0] * 7 + [0.5, 0.5, 0.49]}  # -2%
    cases = [(grid[0], 0.8, falling), (grid[1], 0.8, flat), (grid[2], 0.99, falling)]  # the third learned
    for cfg, score, curve in cases:
        rec = {
            "name": cfg.name,
            "config": cfg.to_dict(),
            "config_hash": cfg.hash,
            "training_revision": L.TRAINING_REVISION,
        }
        rec |= {"exact_match": {str(n): score for n in range(1, 25)}, "loss_curve": curve}
        L._atomic_json(L.record_path(tmp_path, cfg), rec)
    longer = L.scratchpad_pre_norm_longer(tmp_path)
    assert [c.hash for c in longer] == [L.pre_norm_arm("o", grid[0].model.encoding, grid[0].seed, 20_000).hash]
    assert longer[0].steps == 20_000 and longer[0].model.pre_norm
    assert "scratchpad-pre-norm-longer" in L.EXPERIMENTS


def test_each_pair_is_compared_at_the_settings_validation_picks_for_its_arms(monkeypatch):
    enc, seed = "nope", 0
    settings = {arm: L.arm_settings(arm, enc, seed) for arm in ("o", "none")}
    scores = {"o": (0.5, 0.6), "none": (0.95, 0.92)}  # (in distribution, out of it) of each chosen run

    def chosen(arm, encoding, s, **validation):
        if s == 1:  # seed 1: nothing trained for the answer alone
            return {"scores": {}, "setting": None, "run": None, "record": None}
        name = "pre-norm, lr 0.002" if arm == "o" else "post-LN, lr 0.001"
        cfg = settings[arm][name][0]
        inside, outside = scores[arm]
        rec = {"exact_match": {str(n): inside if n <= 8 else outside for n in range(1, 17)}}
        return {"scores": {name: 90.0}, "setting": name, "run": cfg, "record": rec}

    monkeypatch.setattr(L, "chosen_setting", chosen)
    table = L.chosen_pair_table(encodings=[enc], seeds=[0, 1])
    first = table.iloc[0]
    assert (first["setting with"], first["setting without"]) == ("pre-norm, lr 0.002", "post-LN, lr 0.001")
    assert first["in distribution with (%)"] == pytest.approx(50.0) and first["OOD without (%)"] == pytest.approx(92.0)
    assert first["status"] == "scratchpad arm not learned"
    assert table.iloc[1]["status"] == "not trained yet"
    # both arms learned at their chosen settings: compared
    scores["o"] = (0.99, 0.3)
    assert L.chosen_pair_table(encodings=[enc], seeds=[0]).iloc[0]["status"] == "compared"


def test_the_choice_table_shows_every_setting_tried_and_the_one_taken(monkeypatch):
    def chosen(arm, encoding, seed, **validation):
        scores = {"post-LN, lr 0.002": 40.0, "pre-norm, lr 0.002": 99.0 if arm == "o" else 20.0}
        best = max(scores, key=lambda k: scores[k])
        return {"scores": scores, "setting": best, "run": None, "record": None}

    monkeypatch.setattr(L, "chosen_setting", chosen)
    table = L.arm_choice_table(encodings=["rope"], seeds=[2])
    assert table.loc[("step outputs", "RoPE", 2), "chosen"] == "pre-norm, lr 0.002"
    assert table.loc[("answer alone", "RoPE", 2), "chosen"] == "post-LN, lr 0.002"
    assert table.loc[("answer alone", "RoPE", 2), "pre-norm, lr 0.002"] == 20.0
    assert pd.isna(table.loc[("answer alone", "RoPE", 2), "post-LN, lr 0.001"])  # not trained: blank


def test_a_pair_not_compared_shows_each_setting_of_its_missed_arm_and_where_its_loss_stalls(tmp_path, monkeypatch):
    settings = L.arm_settings("none", "alibi", 0)
    folders = {name: tmp_path / str(i) for i, name in enumerate(settings)}
    for name, (cfg, _) in settings.items():
        if name == "post-LN, lr 0.001":
            continue  # not trained: no row
        falling = name.startswith("pre-norm")
        losses = [1.0] * (cfg.steps // 1000 - 3) + ([0.9, 0.5, 0.3] if falling else [0.5, 0.5, 0.49])
        rec = {"name": cfg.name, "config": cfg.to_dict(), "config_hash": cfg.hash}
        rec |= {"exact_match": {str(n): 0.7 for n in range(1, 25)}, "loss_curve": {"every": 1000, "mean_loss": losses}}
        rec |= {"training_revision": L.TRAINING_REVISION}
        L._atomic_json(L.record_path(folders[name], cfg), rec)
    monkeypatch.setattr(L, "arm_settings", lambda *a: {k: (c, folders[k]) for k, (c, _) in settings.items()})
    pairs = pd.DataFrame(
        [
            {"encoding": "alibi", "seed": 0, "status": "scratchpad arm not learned"}
            | {"in distribution with (%)": 99.0, "in distribution without (%)": 70.0},
            {"encoding": "alibi", "seed": 1, "status": "compared"}  # compared: no row
            | {"in distribution with (%)": 99.0, "in distribution without (%)": 99.0},
        ]
    )
    table = L.stalled_arms(pairs)
    assert table["setting"].tolist() == ["post-LN, lr 0.002", "pre-norm, lr 0.002", "pre-norm, lr 0.002, 20,000 steps"]
    assert set(table["arm"]) == {"answer alone"} and table["in distribution (%)"].round(1).eq(70.0).all()
    assert table["still falling"].tolist() == [False, True, True]
    assert table["loss at the end"].tolist() == [0.49, 0.3, 0.3]


def test_the_chosen_pairs_figure_fills_only_compared_pairs():
    rows = [
        {"encoding": "nope", "seed": 0, "status": "compared", "OOD difference (points)": 2.0},
        {"encoding": "nope", "seed": 1, "status": "control not learned", "OOD difference (points)": 9.0},
        {"encoding": "rope", "seed": 0, "status": "not trained yet", "OOD difference (points)": float("nan")},
    ]
    fig = L.plot_chosen_pairs(pd.DataFrame(rows).assign(**{"standard error (points)": 0.5}))
    ax = fig.axes[0]
    marks = [line for line in ax.lines if line.get_marker() == "o" and len(line.get_xdata())]
    assert [float(m.get_ydata()[0]) for m in marks] == [2.0, 9.0]  # the untrained pair draws nothing
    assert [m.get_markerfacecolor() for m in marks][1] == "white" and marks[0].get_markerfacecolor() != "white"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["NoPE", "RoPE"]
    L.plt.close(fig)


def test_every_trained_setting_of_experiment_1_has_its_committed_validation_score():
    # notebook 10 reads these; a run landed without its score would be scored while the notebook runs
    known = L.read_keyed_cache(L.VALIDATION_CACHE, L.VALIDATION_CACHE_COLUMNS, "validation")
    missing = [
        cfg.name
        for seed in range(3)
        for enc in L.PAPER_ENCODINGS
        for arm in ("o", "none")
        for cfg, folder in L.arm_settings(arm, enc, seed).values()
        if L.record_path(folder, cfg).exists() and (cfg.hash, str(L.VALIDATION_SEED), "256", cfg.name) not in known
    ]
    assert not missing, f"no validation score committed for {missing}: run L.chosen_setting for their arms"


def test_the_final_carry_split_finds_the_sums_whose_answer_is_longer_than_either_operand(monkeypatch):
    cfg = L.pre_norm_arm("none", "rope", 0)
    task = cfg.make_task()
    model = L.DecoderOnlyLM(cfg.model)
    monkeypatch.setattr(L, "load_run_model", lambda *a: model)

    def carries(batch):  # worked out from the numbers themselves
        out = []
        for row in batch.tokens.tolist():
            a, b = "".join(task.decode(row[1 : row.index(L.SEP)])).split("+")
            out.append(len(str(int(a) + int(b))) > max(len(a), len(b)))
        return torch.tensor(out)

    monkeypatch.setattr(L, "exact_match_rows", lambda m, batch: ~carries(batch))  # right unless a carry out
    table = L.final_carry_split(cfg, "unused", [1, 3]).set_index(["sums", "n"])
    assert table.loc[("final carry out", 3), "exact match (%)"] == 0.0
    assert table.loc[("no final carry out", 3), "exact match (%)"] == 100.0
    assert table.xs(3, level="n")["count"].sum() == cfg.eval_per_length
    batch = L.evaluation_batch(task, 3, cfg.eval_per_length, cfg.eval_seed, cfg.model)
    assert table.loc[("final carry out", 3), "count"] == int(carries(batch).sum()) > 0
    with pytest.raises(ValueError, match="answer alone"):
        L.final_carry_split(L.pre_norm_arm("o", "rope", 0), "unused", [3])


def test_validation_keeps_at_each_training_size_the_sums_the_test_draw_lacks():
    cfg = L.pre_norm_arm("none", "nope", 0)
    kept = L.validation_kept(cfg)
    assert list(kept) == list(range(1, 9))  # the training sizes
    assert kept[1] < kept[2] < 256 and kept[8] == 256  # 100 one-digit sums, nearly all in the test draw
    task = cfg.make_task()
    assert kept[3] == len(L.validation_batch(task, 3, 256, cfg.eval_seed).tokens)
