"""Attention-logit scaling at inference: a temperature and log-length scaling, attached from outside."""

import math

import pytest
import torch
from support import perturbed_model, with_config

import lengen_helpers as L


def plain_and_scaled(encoding: str, length: int, **scaling):
    """A nudged model, a batch of `length` tokens, and its logits without and with the scaling."""
    model = perturbed_model(encoding)
    x = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (2, length))
    with torch.no_grad():
        plain = model(x)
        with L.scaled_attention(model, **scaling):
            assert all(b.self_attn.hook_scores.active for b in model.blocks)
            scaled = model(x)
    return model, x, plain, scaled


def test_scaling_attaches_from_outside_and_leaves_no_trace():
    model, x, before, during = plain_and_scaled("alibi", 12, attention_temperature=0.5)
    with torch.no_grad():
        after = model(x)
    assert torch.equal(before, after) and not torch.allclose(before, during, atol=1e-3)
    assert not any(b.self_attn.hook_scores.active for b in model.blocks)
    assert "attention_temperature" not in L.ModelConfig.__dataclass_fields__  # not a model setting
    old = L.make_run("copy", "nope", 0).to_dict()
    old["model"] |= {"attention_temperature": 0.5}
    with pytest.raises(ValueError, match="no model setting 'attention_temperature'; valid: encoding, d_model"):
        L.RunConfig.from_dict(old)


@pytest.mark.parametrize("encoding", ["nope", "rope", "alibi", "t5"])
def test_temperature_scales_the_content_logits_only(encoding):
    model = perturbed_model(encoding)
    x = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (2, 12))
    by_hand = with_config(model)  # the same weights
    with torch.no_grad():
        d = model.config.d_model
        for b in by_hand.blocks:  # doubling W_q and b_q doubles q.k and leaves the bias alone
            b.self_attn.in_proj.weight[:d] *= 2
            b.self_attn.in_proj.bias[:d] *= 2
        with L.scaled_attention(model, attention_temperature=0.5):
            hot = model(x)
        assert torch.allclose(hot, by_hand(x), atol=1e-5)
        assert not torch.allclose(hot, model(x), atol=1e-3)


def test_log_length_scaling_leaves_the_first_n_positions_alone_and_sharpens_after():
    _, _, plain, sharp = plain_and_scaled("nope", 30, log_length_scaling=10)
    assert torch.allclose(plain[:, :10], sharp[:, :10], atol=1e-6)  # 10 keys or fewer: factor 1
    assert (plain[:, 10:] - sharp[:, 10:]).abs().amax(dim=(0, 2)).min() > 1e-4
    factor = L.attention_scale(torch.arange(1, 31), log_length_scaling=10)
    assert factor[29] == pytest.approx(math.log(30) / math.log(10)) and (factor[:10] == 1).all()
    assert L.attention_scale(torch.arange(1, 4), attention_temperature=0.5).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("encoding", ["nope", "rope", "alibi"])
@pytest.mark.parametrize("kind", ["kv", "inputs"])
def test_cached_decoding_applies_the_same_scaling(encoding, kind):
    if kind == "inputs" and encoding == "rope":
        pytest.skip("an input cache cannot serve rotated keys")
    model = perturbed_model(encoding)
    prompt = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (3, 5))
    with L.scaled_attention(model, attention_temperature=0.7, log_length_scaling=6):
        out, logits = L.generate(model, prompt, 10, use_cache=True, return_logits=True, cache_kind=kind)
        with torch.no_grad():
            full = model(out[:, :-1])[:, 4:]
    assert torch.allclose(logits, full, atol=1e-4)
    plain = L.generate(model, prompt, 10, use_cache=True, return_logits=True, cache_kind=kind)[1]
    assert not torch.allclose(plain, logits, atol=1e-3)  # the scaling did act on the cached steps


def test_bad_scalings_are_refused():
    model = perturbed_model("nope")
    with pytest.raises(ValueError, match="log_length_scaling must be 0 .off. or at least 2"):
        with L.scaled_attention(model, log_length_scaling=1):
            pass
    with pytest.raises(ValueError, match="attention_temperature must be a number > 0; got 0"):
        with L.scaled_attention(model, attention_temperature=0):
            pass
    assert not any(b.self_attn.hook_scores.active for b in model.blocks)


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
    assert out["n = 14-16"] == 100 and out["n = 17-20"] == 50 and out["n = 17-20, length given"] == 100
    assert out["longest n >= 90%"] == 18 and out["longest n >= 90%, length given"] == 20
