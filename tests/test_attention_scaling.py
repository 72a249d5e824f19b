"""Attention-logit scaling at inference (issue 15): a temperature and log-length scaling."""

import math

import pytest
import torch
from support import perturbed_model

import lengen_helpers as L

scaled = L.with_config  # the same weights under a config with the given scaling fields


def test_scaling_off_is_todays_model_and_todays_hash():
    assert L.query_scale(L.ModelConfig(), torch.arange(5)) is None
    cfg = L.make_run("copy", "nope", 0)
    assert cfg.hash == L.make_run("copy", "nope", 0, attention_temperature=1.0, log_length_scaling=0).hash
    on = L.make_run("copy", "nope", 0, attention_temperature=0.5)
    assert on.hash != cfg.hash  # records of a scaled model are keyed apart


@pytest.mark.parametrize("encoding", ["nope", "rope", "alibi", "t5"])
def test_temperature_scales_the_content_logits_only(encoding):
    model = perturbed_model(encoding)
    x = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (2, 12))
    hot = scaled(model, attention_temperature=0.5)
    by_hand = scaled(model)
    with torch.no_grad():
        d = model.config.d_model
        for b in by_hand.blocks:  # doubling W_q and b_q doubles q.k and leaves the bias alone
            b.self_attn.in_proj.weight[:d] *= 2
            b.self_attn.in_proj.bias[:d] *= 2
        assert torch.allclose(hot(x), by_hand(x), atol=1e-5)
        assert not torch.allclose(hot(x), model(x), atol=1e-3)


def test_log_length_scaling_leaves_the_first_n_positions_alone_and_sharpens_after():
    model = perturbed_model("nope")
    x = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (2, 30))
    log = scaled(model, log_length_scaling=10)
    with torch.no_grad():
        plain, sharp = model(x), log(x)
    assert torch.equal(plain[:, :10], sharp[:, :10])  # 10 keys or fewer: factor 1, the same sums
    assert (plain[:, 10:] - sharp[:, 10:]).abs().amax(dim=(0, 2)).min() > 1e-4
    factor = L.query_scale(log.config, torch.arange(30))[0, 0, :, 0]
    assert factor[29] == pytest.approx(math.log(30) / math.log(10)) and (factor[:10] == 1).all()


@pytest.mark.parametrize("encoding", ["nope", "rope", "alibi"])
@pytest.mark.parametrize("kind", ["kv", "inputs"])
def test_cached_decoding_applies_the_same_scaling(encoding, kind):
    if kind == "inputs" and encoding == "rope":
        pytest.skip("an input cache cannot serve rotated keys")
    model = scaled(perturbed_model(encoding), attention_temperature=0.7, log_length_scaling=6)
    prompt = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (3, 5))
    out, logits = model.generate(prompt, 10, use_cache=True, return_logits=True, cache_kind=kind)
    with torch.no_grad():
        full = model(out[:, :-1])[:, 4:]
    assert torch.allclose(logits, full, atol=1e-4)


def test_log_length_scaling_of_one_is_refused():
    with pytest.raises(ValueError, match="log_length_scaling"):
        L.ModelConfig(log_length_scaling=1)
    with pytest.raises(ValueError, match="attention_temperature"):
        L.ModelConfig(attention_temperature=0)


def test_scaling_table_rows_and_cache(tmp_path, monkeypatch):
    cfg = L.make_run("copy", "nope", 0)
    L.weights_path(tmp_path, cfg).parent.mkdir(parents=True)
    torch.save(L.DecoderOnlyLM(cfg.model).state_dict(), L.weights_path(tmp_path, cfg))
    kw = dict(tasks=("copy",), encodings=("nope",), lengths=[3, 4], results_dir=tmp_path, cache_dir=tmp_path / "s")
    settings = {"none": {}, "hot": {"attention_temperature": 0.5}}
    table = L.scaling_table(settings, **kw)
    assert len(table) == 4 and set(table["setting"]) == {"none", "hot"}
    plain = table[table.setting == "none"].set_index("n")["exact_match"]
    model = L.load_model("copy", "nope", 0, tmp_path)
    assert plain[3] == round(L.failure_anatomy(model, "copy", 3)["exact_match"], 6)  # "none" is the model as trained
    monkeypatch.setattr(L, "load_run_model", lambda *a, **k: pytest.fail("recomputed a cached setting"))
    assert L.scaling_table(settings, **kw).equals(table)


def test_scaling_summary_reads_in_distribution_window_and_reach():
    import pandas as pd

    rows = [
        {"task": "copy", "encoding": "nope", "setting": "s", "n": n,
         "exact_match": 1.0 if n <= 18 else 0.0, "length_given": 1.0 if n <= 20 else 0.5}
        for n in range(14, 25)
    ]  # fmt: skip
    out = L.scaling_summary(pd.DataFrame(rows), test=(17, 20)).loc[("copy", "nope", "s")]
    assert out["mean 14-16"] == 100 and out["mean 17-20"] == 50 and out["mean 17-20, length given"] == 100
    assert out["longest n >= 90%"] == 18 and out["longest n >= 90%, length given"] == 20
