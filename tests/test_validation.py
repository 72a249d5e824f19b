"""Every bad setting gets a clear error before any compute is spent: config fields out of range,
bad arguments to the model, the evaluation and inspection, and bad command lines."""

import dataclasses
import hashlib
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import tiny

import lengen_helpers as L

# (what is called, the error it must give): every bad input a reader may give, and each field's bounds
CONFIG_CASES = [
    (
        lambda: L.make_run("copy", "nope", batch_size=0),
        r"RunConfig.batch_size=0 is out of range; valid: an integer >= 1",
    ),
    (lambda: L.make_run("copy", "nope", lr=-1.0), r"RunConfig.lr=-1.0 is out of range; valid: a number > 0"),
    (lambda: L.make_run("copy", "nope", lr=float("nan")), r"RunConfig.lr=nan is out of range"),
    (lambda: L.make_run("copy", "nope", eval_per_length=0), r"RunConfig.eval_per_length=0 .* >= 1"),
    (
        lambda: L.make_run("copy", "nope", steps=100, warmup_steps=250),
        r"RunConfig.warmup_steps=250 .* <= steps \(100\)",
    ),
    (lambda: L.make_run("copy", "nope", steps=-5), r"RunConfig.steps=-5 is out of range; valid: an integer >= 0"),
    (lambda: L.make_run("copy", "nope", seed=-1), r"RunConfig.seed=-1 .* >= 0"),
    (lambda: L.make_run("copy", "nope", seed=1.5), r"RunConfig.seed=1.5 .* an integer"),
    (lambda: L.make_run("copy", "nope", weight_decay=-0.1), r"RunConfig.weight_decay=-0.1 .* >= 0"),
    (lambda: L.make_run("copy", "nope", grad_clip=0.0), r"RunConfig.grad_clip=0.0 .* > 0"),
    (lambda: L.make_run("copy", "nope", packed="yes"), r"RunConfig.packed='yes' .* True or False"),
    (lambda: L.make_run("copy", "nope", train_min_len=0), r"RunConfig.train_min_len=0 .* >= 1"),
    (
        lambda: L.make_run("copy", "nope", train_max_len=20, eval_max_len=18),
        r"train_max_len \(20\) <= eval_max_len \(18\)",
    ),
    (
        lambda: L.make_run("lego", "nope", eval_max_len=30, train_max_len=8),
        r"eval_max_len=30 .* task 'lego' has sizes up to 26",
    ),
    (lambda: L.ModelConfig(n_layers=0), r"ModelConfig.n_layers=0 is out of range; valid: an integer >= 1"),
    (lambda: L.ModelConfig(d_model=0, n_heads=1), r"ModelConfig.d_model=0 is out of range; valid: an integer >= 1"),
    (lambda: L.ModelConfig(n_heads=0), r"ModelConfig.n_heads=0 .* >= 1"),
    (lambda: L.ModelConfig(d_ff=0), r"ModelConfig.d_ff=0 .* >= 1"),
    (lambda: L.ModelConfig(dropout=1.0), r"ModelConfig.dropout=1.0 .* >= 0 and < 1"),
    (lambda: L.ModelConfig(max_positions=0), r"ModelConfig.max_positions=0 .* >= 1"),
    (lambda: L.ModelConfig(rope_fraction=0.0), r"ModelConfig.rope_fraction=0.0 .* > 0 and <= 1"),
    (lambda: L.ModelConfig(rope_base=1.0), r"ModelConfig.rope_base=1.0 .* > 1"),
    (lambda: L.ModelConfig(t5_num_buckets=1), r"ModelConfig.t5_num_buckets=1 .* >= 2"),
    (
        lambda: L.ModelConfig(encoding="t5", t5_num_buckets=32, t5_max_distance=16),
        r"t5_max_distance=16 must exceed 16, the distances the exact buckets cover \(1/2",
    ),
    (lambda: L.ModelConfig(pre_norm=1), r"ModelConfig.pre_norm=1 .* True or False"),
    (lambda: L.ModelConfig(d_model=64, n_heads=5), r"d_model=64 is not divisible by n_heads=5"),
]


@pytest.mark.parametrize("call, message", CONFIG_CASES, ids=[m[:40] for _, m in CONFIG_CASES])
def test_config_out_of_range_names_the_field_value_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.slow
def test_zero_steps_is_a_recorded_untrained_baseline():
    model, rec = L.train_run(tiny(steps=0, warmup_steps=0), progress=False)
    assert rec["untrained_baseline"] is True and rec["loss_curve"]["mean_loss"] == []
    assert L.train_run(tiny(steps=2, warmup_steps=1), progress=False)[1]["untrained_baseline"] is False


@pytest.fixture(scope="module")
def model():
    return L.DecoderOnlyLM(L.ModelConfig(encoding="learned", max_positions=40)).eval()


CALL_CASES = [
    (
        lambda m: m(torch.zeros(2, 0, dtype=torch.long)),
        r"at least one sequence of at least one token; got shape \(2, 0\)",
    ),
    (lambda m: m(torch.zeros(0, 3, dtype=torch.long)), r"at least one sequence .* got shape \(0, 3\)"),
    (
        lambda m: m(torch.zeros(5, dtype=torch.long)),
        r"integer tensor of shape \(batch, length\); got torch.int64 \(5,\)",
    ),
    (lambda m: m(torch.zeros(2, 3)), r"integer tensor of shape \(batch, length\); got torch.float32"),
    (lambda m: m(torch.full((1, 3), 99)), r"token ids must lie in \[0, 24\)"),
    (
        lambda m: m(torch.zeros(2, 3, dtype=torch.long), positions=torch.arange(4)),
        r"positions must be .* \(2, 3\) or \(3,\)",
    ),
    (
        lambda m: m(torch.zeros(2, 3, dtype=torch.long), segments=torch.zeros(2, 3)),
        r"segments must be an integer tensor",
    ),
    (lambda m: L.generate(m, torch.full((1, 3), 5), -1), r"max_new_tokens must be an integer >= 0; got -1"),
    (lambda m: L.generate(m, torch.full((1, 3), 5), 2.5), r"max_new_tokens must be an integer >= 0; got 2.5"),
    (lambda m: L.generate(m, torch.full((1, 30), 5), 20), r"need 49 positions, past the learned encoding's 40"),
    (lambda m: L.exact_match_by_length(m, "copy", [0]), r"task 'copy' has sizes 1 and up; got size 0"),
    (lambda m: L.exact_match_by_length(m, "copy", [3], n_per_length=0), r"n_per_length must be an integer >= 1"),
    (lambda m: L.exact_match_by_length(m, "copy", [2.5]), r"lengths must be integers; got 2.5"),
    (lambda m: L.exact_match_by_length(m, "lego", [27]), r"task 'lego' has sizes 1 to 26; got size 27"),
    (lambda m: L.pointer_scores(m, "copy", 0), r"task 'copy' has sizes 1 and up; got size 0"),
    (lambda m: L.pointer_scores(m, "copy", 4, n_examples=0), r"n_examples must be an integer >= 1"),
    (lambda m: L.answer_sources("sorting", 4), r"task 'sorting' has no source token per answer token"),
]


@pytest.mark.parametrize("call, message", CALL_CASES, ids=[m[:40] for _, m in CALL_CASES])
def test_bad_arguments_to_the_model_evaluation_and_inspection_are_named(model, call, message):
    with pytest.raises(ValueError, match=message):
        call(model)


def test_zero_new_tokens_returns_the_prompt(model):
    prompt = torch.full((2, 3), 5)
    assert torch.equal(L.generate(model, prompt, 0), prompt)


def test_draw_attention_checks_layer_head_and_example(tmp_path):
    cfg = L.make_run("reverse", "nope", 0)
    L.weights_path(tmp_path, cfg).parent.mkdir(parents=True)
    torch.save(L.make_model(cfg).state_dict(), L.weights_path(tmp_path, cfg))
    for kw, message in [
        (dict(layer=3), r"layer=3 is out of range; valid: 0..2"),
        (dict(head=-1), r"head=-1 .* 0..3"),
        (dict(example=-2), r"example=-2 .* an integer >= 0"),
    ]:
        args = dict(layer=0, head=0, n=5) | kw
        with pytest.raises(ValueError, match=message):
            L.draw_attention(cfg, results_dir=tmp_path, **args)


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode() + (p.read_bytes() if p.is_file() else b"/"))
    return h.hexdigest()


CLI_CASES = [
    (
        ["train", "--task", "copy", "--encoding", "nope", "--steps", "-5"],
        "argument --steps: -5 is out of range; valid: an integer >= 0",
    ),
    (["train", "--task", "copy", "--encoding", "nope", "--seed", "x"], "argument --seed: 'x' is not an integer"),
    (["train", "--task", "copy", "--encoding", "xpos"], "argument --encoding: invalid choice: 'xpos'"),
    (["sweep", "--workers", "0"], "argument --workers: 0 is out of range; valid: an integer >= 1"),
    (["sweep", "--seeds", "0", "-1"], "argument --seeds: -1 is out of range"),
    (["bench-kv", "--runs", "0"], "argument --runs: 0 is out of range"),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", CLI_CASES, ids=[" ".join(a[:3]) for a, _ in CLI_CASES])
def test_the_command_line_rejects_bad_arguments_in_one_line_before_any_work(argv, message, tmp_path, capsys):
    results = tmp_path / "results"
    L.run_and_save(tiny(steps=2, warmup_steps=1), results, save_weights=False)  # something already computed
    before = _tree_digest(results)
    with pytest.raises(SystemExit) as exit_:
        L.main([*argv, "--results", str(results)] if argv[0] != "bench-kv" else argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert _tree_digest(results) == before  # nothing computed was lost or changed


def test_a_results_path_that_is_a_file_is_reported_at_once(tmp_path, capsys):
    not_a_folder = tmp_path / "results.txt"
    not_a_folder.write_text("mine")
    for argv in (["train", "--task", "copy", "--encoding", "nope"], ["sweep"]):
        with pytest.raises(SystemExit):
            L.main([*argv, "--results", str(not_a_folder)])
        assert f"argument --results: {not_a_folder} is not a folder" in capsys.readouterr().err
    assert not_a_folder.read_text() == "mine"


# Property-based: configs drawn from the stated ranges construct and train one step; a value drawn
# outside a field's range gets a ValueError that names the field.

small_models = st.builds(
    lambda heads, per_head, layers, d_ff, dropout, pre_norm, encoding, fraction: dict(
        encoding=encoding,
        n_heads=heads,
        d_model=heads * per_head,
        n_layers=layers,
        d_ff=d_ff,
        dropout=dropout,
        pre_norm=pre_norm,
        rope_fraction=fraction,
    ),
    heads=st.integers(1, 3),
    per_head=st.sampled_from([2, 4, 8]),
    layers=st.integers(1, 2),
    d_ff=st.integers(1, 32),
    dropout=st.floats(0, 0.9),
    pre_norm=st.booleans(),
    encoding=st.sampled_from(L.encoding_names()),
    fraction=st.just(1.0),
)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=small_models,
    steps=st.integers(1, 2),
    batch=st.integers(1, 8),
    lr=st.floats(1e-5, 1.0),
    wd=st.floats(0, 0.5),
    clip=st.floats(0.1, 10),
    lens=st.tuples(st.integers(1, 3), st.integers(0, 2)),
    packed=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_configs_drawn_from_the_stated_ranges_construct_and_train_a_step(
    model, steps, batch, lr, wd, clip, lens, packed, seed
):
    low, extra = lens
    cfg = L.make_run(
        "copy",
        model.pop("encoding"),
        seed,
        steps=steps,
        warmup_steps=steps,
        batch_size=batch,
        lr=lr,
        weight_decay=wd,
        grad_clip=clip,
        train_min_len=low,
        train_max_len=low + extra,
        eval_max_len=low + extra,
        eval_per_length=2,
        packed=packed,
        **model,
    )
    _, rec = L.train_run(cfg, progress=False)
    assert len(rec["loss_curve"]["mean_loss"]) == steps and set(rec["exact_match"]) == {
        str(n) for n in range(1, low + extra + 1)
    }


def _fields_with_ranges():
    for cls in (L.ModelConfig, L.RunConfig):
        for f in dataclasses.fields(cls):
            if "range" in f.metadata:
                yield cls, f


RANGED = list(_fields_with_ranges())


@st.composite
def out_of_range(draw):
    cls, f = draw(st.sampled_from(RANGED))
    low, high, above, below = f.metadata["range"]
    kind = f.type
    options = []
    gap = st.integers(1, 10**6) if kind == "int" else st.floats(1e-6, 1e6)  # strictly past a closed end
    if low is not None:
        options.append(low - draw(st.floats(0, 1e6) if above else gap))
    if high is not None:
        options.append(high + draw(st.floats(0, 1e6) if below else gap))
    if kind == "int":
        options.append(draw(st.floats(0.1, 0.9)) + draw(st.integers(1, 100)))  # not an integer
    options.append(draw(st.sampled_from([float("nan"), float("inf"), "12", None])))
    return cls, f.name, draw(st.sampled_from(options))


@settings(max_examples=200, deadline=None)
@given(case=out_of_range())
def test_a_value_outside_a_field_s_range_is_refused_by_name(case):
    cls, name, value = case
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.{name}="):
        if cls is L.ModelConfig:
            L.ModelConfig(**{name: value})
        else:
            L.RunConfig(**{name: value})
