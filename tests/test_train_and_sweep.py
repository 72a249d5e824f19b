"""Training (determinism, resume, NaN guard) and the sweep (skip, stale, corrupt, Dask)."""

import json
import math
from pathlib import Path

import pytest
import torch
from support import Inline, tiny, tool

import lengen_helpers as L


def test_run_config_defaults_are_the_study_settings():
    c = L.RunConfig()
    assert (c.train_min_len, c.train_max_len, c.batch_size, c.steps, c.lr, c.grad_clip) == (1, 16, 64, 5000, 1e-3, 1.0)
    assert (c.eval_max_len, c.eval_per_length) == (48, 256)


def test_lr_schedule_warms_up_then_decays_to_zero():
    c = L.RunConfig(steps=1000, warmup_steps=100)
    assert L.lr_at(0, c) == pytest.approx(1e-5) and L.lr_at(99, c) == pytest.approx(1e-3)
    assert L.lr_at(550, c) == pytest.approx(0.5e-3) and L.lr_at(1000, c) == pytest.approx(0.0)


@pytest.mark.slow
def test_training_is_deterministic_for_a_seed():
    _, a = L.train_run(tiny(), progress=False)
    _, b = L.train_run(tiny(), progress=False)
    _, c = L.train_run(tiny(seed=1), progress=False)
    assert a["loss_curve"] == b["loss_curve"] and a["exact_match"] == b["exact_match"]
    assert a["loss_curve"] != c["loss_curve"]


@pytest.mark.slow
def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path):
    cfg = tiny("reverse", "rope")
    straight, rec = L.train_run(cfg, progress=False)
    ckpt = tmp_path / "ck.pt"

    class Stop(Exception):
        pass

    # train with checkpoints every 10 steps; "kill" it while it writes the step-30 checkpoint
    real_save = torch.save

    def save_then_maybe_stop(obj, f, *a, **k):
        real_save(obj, f, *a, **k)
        if isinstance(obj, dict) and obj.get("step") == 30:
            raise Stop

    torch.save = save_then_maybe_stop
    try:
        with pytest.raises(Stop):
            L.train_run(cfg, checkpoint=ckpt, checkpoint_every=10, progress=False)
    finally:
        torch.save = real_save
    assert torch.load(ckpt, weights_only=False)["step"] == 20  # the half-written one never replaced it
    assert list(tmp_path.iterdir()) == [ckpt]  # and left no temporary file behind
    resumed, rec2 = L.train_run(cfg, checkpoint=ckpt, checkpoint_every=10, progress=False)
    assert rec2["resumed_from_step"] == 20
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(p, q)
    assert rec2["exact_match"] == rec["exact_match"] and rec2["loss_curve"] == rec["loss_curve"]


@pytest.mark.slow
def test_checkpoint_of_another_config_is_refused(tmp_path):
    ckpt = tmp_path / "ck.pt"
    torch.save({"config_hash": "something-else"}, ckpt)
    with pytest.raises(ValueError, match="belongs to another config"):
        L.train_run(tiny(), checkpoint=ckpt, progress=False)


@pytest.mark.slow
def test_diverging_loss_stops_the_run_with_its_name(monkeypatch):
    real, calls = L.batch_loss, []

    def diverges_at_step_7(model, batch):
        calls.append(1)
        loss = real(model, batch)
        return loss * float("inf") if len(calls) == 8 else loss

    monkeypatch.setattr(L, "batch_loss", diverges_at_step_7)
    with pytest.raises(FloatingPointError, match=r"run copy-nope-s0 \(\w+\): loss became inf at step 7"):
        L.train_run(tiny(), progress=False)


@pytest.mark.slow
def test_record_contents():
    _, rec = L.train_run(tiny(), progress=False)
    assert rec["config_hash"] == tiny().hash and rec["name"] == "copy-nope-s0"
    assert set(rec["exact_match"]) == {str(n) for n in range(1, 7)}
    assert rec["versions"]["torch"] == torch.__version__
    assert len(rec["loss_curve"]["mean_loss"]) == 40 // rec["loss_curve"]["every"]
    assert rec["train_tokens_per_s"] > 0 and not math.isnan(rec["in_distribution_mean"])
    json.dumps(rec)


def test_config_hash_changes_with_any_setting():
    assert tiny().hash != tiny(lr=2e-3).hash != tiny(d_model=32).hash
    assert L.RunConfig.from_dict(tiny().to_dict()).hash == tiny().hash


@pytest.mark.slow
def test_sweep_runs_only_what_is_missing_and_never_serves_a_stale_record(tmp_path, monkeypatch):
    configs = [tiny(seed=0), tiny("reverse", "alibi", seed=1)]
    recs = L.sweep(configs, tmp_path, max_workers=1, progress=False)
    assert [r["config_hash"] for r in recs] == [c.hash for c in configs]
    assert all(L.weights_path(tmp_path, c).exists() for c in configs)  # weights kept for inspection
    assert not list((tmp_path / "checkpoints").glob("*.pt"))
    state = torch.load(L.weights_path(tmp_path, configs[0]), weights_only=True)
    L.DecoderOnlyLM(configs[0].model).load_state_dict(state)

    calls = []
    monkeypatch.setattr(L, "run_and_save", lambda cfg, *args: calls.append(cfg) or pytest.fail("re-ran a done run"))
    again = L.sweep(configs, tmp_path, executor=Inline(), progress=False)
    assert again == recs and calls == []

    monkeypatch.undo()
    changed = tiny(seed=0, lr=3e-3)  # same name, other setting: must train, not reuse
    new = L.sweep([changed], tmp_path, max_workers=1, progress=False)
    assert new[0]["config_hash"] == changed.hash != recs[0]["config_hash"]


def test_sweep_without_training_names_the_missing_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="2 runs have no record .*copy-nope-s0, copy-nope-s1"):
        L.sweep([tiny(seed=0), tiny(seed=1)], tmp_path, train=False)


@pytest.mark.slow
def test_corrupt_record_is_reported_kept_and_rerun(tmp_path, capsys):
    cfg = tiny()
    path = L.record_path(tmp_path, cfg)
    path.parent.mkdir(parents=True)
    path.write_text('{"config": {"task": "co')  # a half-written file
    rec = L.sweep([cfg], tmp_path, executor=Inline(), progress=False)[0]
    assert rec["config_hash"] == cfg.hash
    err = capsys.readouterr().err
    assert path.name in err and "not valid JSON" in err
    kept = list(path.parent.glob("*.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text() == '{"config": {"task": "co'
    assert L.read_record(path)["config_hash"] == cfg.hash


def test_read_record_refuses_a_record_whose_config_is_not_valid(tmp_path):
    p = tmp_path / "r.json"
    bad = tiny().to_dict() | {"task": "sort"}
    rec = {"config": bad, "config_hash": "x", "training_revision": L.TRAINING_REVISION, "exact_match": {}}
    p.write_text(json.dumps(rec | {"loss_curve": {}}))
    with pytest.raises(L.CorruptRecord, match="not a valid RunConfig .*unknown task 'sort'"):
        L.read_record(p)


def test_read_record_names_what_is_missing(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"config": tiny().to_dict(), "config_hash": tiny().hash}))
    with pytest.raises(L.CorruptRecord, match="missing training_revision, exact_match, loss_curve"):
        L.read_record(p)


@pytest.mark.slow
def test_sweep_on_a_dask_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    configs = [tiny(seed=s) for s in (0, 1)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            recs = L.sweep(configs, tmp_path, executor=client.get_executor(), progress=False)
    assert [r["config_hash"] for r in recs] == [c.hash for c in configs]
    _, local = L.train_run(configs[1], progress=False)
    assert recs[1]["exact_match"] == local["exact_match"]  # same result as a local run


@pytest.mark.slow
def test_command_line_trains_one_run(tmp_path, capsys):
    L.main(
        ["train", "--task", "copy", "--encoding", "alibi", "--seed", "0", "--steps", "20", "--results", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert "copy-alibi-s0" in out
    (path,) = (tmp_path / "runs").glob("copy-alibi-s0-*.json")
    assert L.read_record(path)["config"]["steps"] == 20


@pytest.mark.slow
def test_a_new_training_revision_changes_every_hash_and_old_records_stay_readable(tmp_path, monkeypatch):
    old = tiny()
    old_hash, old_path = old.hash, L.record_path(tmp_path, old)
    rec = L.run_and_save(old, tmp_path, save_weights=False)
    assert rec["training_revision"] == L.TRAINING_REVISION
    monkeypatch.setattr(L, "TRAINING_REVISION", L.TRAINING_REVISION + 1)
    new = tiny()
    assert new.hash != old_hash and new.to_dict() == old.to_dict()  # same settings, newer code
    assert L.read_record(old_path)["config_hash"] == old_hash  # still valid, not called corrupt
    with pytest.raises(FileNotFoundError, match="copy-nope-s0"):  # the old record is not served
        L.sweep([new], tmp_path, train=False, progress=False)


def test_the_migration_writes_every_setting_and_keeps_each_hash(tmp_path, capsys):
    migrate = tool("migrate_records")
    cfg = tiny()
    old = cfg.to_dict()
    del old["packed"], old["model"]["digit_places"]  # as written before the two settings existed
    rec = {"name": cfg.name, "config": old, "config_hash": cfg.hash, "training_revision": L.TRAINING_REVISION}
    path = L.record_path(tmp_path, cfg)
    L._atomic_json(path, rec | {"exact_match": {"1": 1.0}, "loss_curve": {}})
    assert migrate.main(tmp_path) == 0 and "1 of 1 records rewritten" in capsys.readouterr().out
    new = L.read_record(path)
    assert new["config"] == cfg.to_dict() and new["exact_match"] == {"1": 1.0}  # the rest as it was
    migrate.main(tmp_path)
    assert "0 of 1 records rewritten" in capsys.readouterr().out  # run again: nothing to do
    wrong = L.record_path(tmp_path, tiny(seed=1))
    L._atomic_json(wrong, rec | {"config": tiny(seed=1, steps=7).to_dict(), "exact_match": {}, "loss_curve": {}})
    with pytest.raises(ValueError, match="would not keep hash"):
        migrate.main(tmp_path)
    assert L.read_record(path) == new  # a refusal writes nothing


@pytest.mark.results
def test_fields_added_after_the_grid_keep_the_grid_s_hashes_at_their_defaults():
    # the committed grid was trained before `packed` and `scale_embeddings` existed: its name holds
    committed = L.read_record(L.RESULTS_DIR / "runs" / "copy-nope-s0-35698c6d50e8.json")
    assert committed["config"]["packed"] is True and committed["config"]["model"]["scale_embeddings"] is False
    assert L.make_run("copy", "nope", 0).hash == committed["config_hash"] == "35698c6d50e8"
    base = tiny()
    others = (
        tiny(packed=False),
        tiny(scale_embeddings=True),
        tiny(random_positions=64),
        tiny(position_coupling=True),
        tiny(train_eos=False),
    )
    for changed in others:  # any other value names a new run
        assert changed.hash != base.hash
        assert L.RunConfig.from_dict(changed.to_dict()).hash == changed.hash


@pytest.mark.slow
def test_padded_training_is_the_packed_run_up_to_float_order(monkeypatch):
    padded_calls = []
    real = L.padded_training_batch
    monkeypatch.setattr(L, "padded_training_batch", lambda *a: padded_calls.append(1) or real(*a))
    _, packed = L.train_run(tiny(steps=15), progress=False)
    assert padded_calls == []
    _, padded = L.train_run(tiny(steps=15, packed=False), progress=False)
    assert len(padded_calls) == 15
    # the same sequences, the same loss and gradients: the curves agree to float noise
    a, b = packed["loss_curve"]["mean_loss"], padded["loss_curve"]["mean_loss"]
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4


@pytest.mark.slow
def test_sweep_logs_its_wall_time_only_when_it_trained(tmp_path):
    cfg = tiny(steps=5)
    L.sweep([cfg], tmp_path, executor=Inline(), progress=False)
    L.sweep([cfg], tmp_path, executor=Inline(), progress=False)  # nothing to do: no line
    (line,) = (tmp_path / "sweeps.jsonl").read_text().splitlines()
    log = json.loads(line)
    assert (log["runs"], log["trained"], log["steps"], log["executor"], log["training_revision"]) == (
        1,
        1,
        [5],
        "Inline",
        L.TRAINING_REVISION,
    )
    assert log["wall_s"] >= 0 and L.sweep_log(tmp_path)["trained"].tolist() == [1]


@pytest.mark.slow
def test_command_line_sweeps_a_named_grid_into_its_own_folder(tmp_path, monkeypatch, capsys):
    runs = lambda: [tiny(steps=5, scale_embeddings=True)]  # noqa: E731
    monkeypatch.setitem(L.EXPERIMENTS, "tiny-ablation", L.Experiment("tiny-ablation", runs, "ablations/tiny", "04"))
    L.main(["sweep", "--grid", "tiny-ablation", "--workers", "1", "--results", str(tmp_path)])
    (path,) = (tmp_path / "ablations" / "tiny" / "runs").glob("copy-nope-s0-*.json")
    assert L.read_record(path)["config"]["model"]["scale_embeddings"] is True
    assert (tmp_path / "ablations" / "tiny" / "sweeps.jsonl").exists() and not (tmp_path / "runs").exists()
    assert "1 trained now" in capsys.readouterr().out


def test_named_grids_that_share_a_folder_share_one_pool_and_train_a_shared_run_once(tmp_path, monkeypatch):
    a, b, c = tiny(steps=5, seed=0), tiny(steps=5, seed=1), tiny(steps=5, seed=2)
    monkeypatch.setitem(L.EXPERIMENTS, "set-a", L.Experiment("set-a", lambda: [a, b], "shared", "10"))
    monkeypatch.setitem(L.EXPERIMENTS, "set-b", L.Experiment("set-b", lambda: [b, c], "shared", "10"))
    monkeypatch.setitem(L.EXPERIMENTS, "set-c", L.Experiment("set-c", lambda: [a], "elsewhere", "10"))
    calls = []
    monkeypatch.setattr(L, "sweep", lambda configs, results, **kw: calls.append((results, configs)) or configs)
    L.main(["sweep", "--grid", "set-a", "set-b", "set-c", "--results", str(tmp_path)])
    assert [(r.name, [x.seed for x in cs]) for r, cs in calls] == [("shared", [0, 1, 2]), ("elsewhere", [0])]


def test_the_experiments_table_lists_every_set_with_its_runs_and_records(tmp_path, monkeypatch, capsys):
    a, b = tiny(steps=5, seed=0), tiny(steps=7, seed=1, lr=2e-3)
    monkeypatch.setattr(L, "EXPERIMENTS", {})
    L.register_experiment("set-a", lambda: [a, b], "shared", "10")
    L.register_experiment("grid", lambda: [a], ".", "03")
    L._atomic_json(L.record_path(tmp_path / "shared", a), {})  # one of set-a's runs has a record
    table = L.experiments_table(tmp_path)
    assert table.index.tolist() == ["set-a", "grid"]
    row = table.loc["set-a"]
    assert (row["runs"], row["recorded"], row["seeds"], row["steps"], row["learning rate"]) == (
        2,
        1,
        "0, 1",
        "5, 7",
        "0.001, 0.002",
    )
    assert (row["folder"], row["notebook"]) == ("results/shared", "10") and table.loc["grid", "folder"] == "results"
    assert table.loc["grid", "recorded"] == 0 and row["model"] == f"{a.model.n_layers}x{a.model.d_model}"
    L.main(["experiments", "--results", str(tmp_path)])
    assert "set-a" in capsys.readouterr().out


def test_the_sinusoidal_ablation_changes_one_setting_per_run_within_its_budget():
    configs = L.sinusoidal_ablation()
    base = L.make_run("copy", "sinusoidal", 0).to_dict()
    for cfg in configs:
        d = cfg.to_dict()
        diff = {k for k in d if k not in ("task", "seed", "model") and d[k] != base[k]}
        diff |= {f"model.{k}" for k in d["model"] if d["model"][k] != base["model"][k]}
        assert diff in ({"packed"}, {"model.scale_embeddings"}), diff
    copy_run = L.run_compute_flops(L.make_run("copy", "sinusoidal", 0), sample_steps=30)
    spent = sum(L.run_compute_flops(c, sample_steps=30) for c in configs)
    assert spent <= 12 * copy_run  # the ablation's budget: the compute of 12 copy runs


def test_atomic_writes_leave_ordinary_readable_files(tmp_path):
    path = tmp_path / "sub" / "record.json"
    L._atomic_json(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert path.stat().st_mode & 0o044  # readable by group/others (mkstemp alone would make it 0600)
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]  # no temporary file left behind


def test_settings_marked_when_set_are_hashed_only_where_set():
    named = L._named_when_set()
    assert {"packed", "train_eos", "task_options", "train_task_options", "model.scale_embeddings"} <= set(named)
    assert "steps" not in named and "model.d_model" not in named  # the first grid's settings: always hashed
    base = L.make_run("copy", "nope", 0)
    assert "packed" not in L._hashed_fields(base.to_dict()) and "steps" in L._hashed_fields(base.to_dict())
    assert L.make_run("copy", "nope", 0, packed=True).hash == base.hash
    assert L.make_run("copy", "nope", 0, packed=False).hash != base.hash
    assert L.make_run("copy", "nope", 0, scale_embeddings=True).hash != base.hash


@pytest.mark.results
def test_every_committed_record_loads_with_its_hash():
    paths = sorted(L.RESULTS_DIR.glob("**/runs/*.json"))
    assert len(paths) > 200  # the grids, the ablation, the interventions and the pilots
    for path in paths:
        record = L.read_record(path)  # raises CorruptRecord if its config no longer gives its hash
        cfg = L.RunConfig.from_dict(record["config"])
        assert path.name == f"{cfg.name}-{record['config_hash']}.json"
        assert record["config"] == cfg.to_dict(), f"{path.name}: run tools/migrate_records.py"  # every setting


def test_every_experiment_names_its_folder_and_a_notebook_that_exists():
    notebooks = {p.stem for p in (Path(L.__file__).parent / "notebooks").glob("*.ipynb")}
    assert {"main", "cliff", "scratchpad-addition", "addition-places", "ten-task-pilot"} <= set(L.EXPERIMENTS)
    for name, e in L.EXPERIMENTS.items():
        assert e.name == name and e.notebook in notebooks, (name, e.notebook)
        assert e.results_dir("/r") == Path("/r") / e.folder
    assert L.experiment("cliff").results_dir() == L.INTERVENTIONS_DIR
    assert L.experiment("scratchpad-lower-lr").results_dir() == L.SCRATCHPAD_DIR
    assert L.experiment("addition-structured").results_dir() == L.ADDITION_DIR
    # each chapter registers its own experiments, in its section: the registry follows the notebooks' order
    assert [e.notebook for e in L.EXPERIMENTS.values()] == sorted(e.notebook for e in L.EXPERIMENTS.values())
    with pytest.raises(ValueError, match="unknown experiment 'clif'"):
        L.experiment("clif")
    with pytest.raises(ValueError, match="registered already"):
        L.register_experiment("cliff", list, "x", "09_what_moves_the_cliff")


def test_record_of_is_none_for_an_untrained_run_and_checks_a_trained_one(tmp_path):
    cfg = tiny()
    assert L.record_of(tmp_path, cfg) is None
    path = L.record_path(tmp_path, cfg)
    path.parent.mkdir(parents=True)
    path.write_text('{"config": {"task": "co')
    with pytest.raises(L.CorruptRecord, match="not valid JSON"):
        L.record_of(tmp_path, cfg)
    rec = {"config": cfg.to_dict(), "config_hash": cfg.hash, "training_revision": L.TRAINING_REVISION}
    path.write_text(json.dumps(rec | {"exact_match": {"1": 1.0}, "loss_curve": {}}))
    assert L.record_of(str(tmp_path), cfg)["exact_match"] == {"1": 1.0}
