"""Section 15: the hand-set NoPE model that recovers position (Theorems 1 and 2), and the probes."""

import math

import pytest
import torch

import lengen_helpers as L


@pytest.mark.parametrize("offset", [1, 3])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-9), (torch.float32, 1e-3)])
def test_the_construction_recovers_every_position_and_attends_by_offset(offset, dtype, tol):
    n = 4 * 35  # four times the longest training sequence of copy and reverse
    r = L.check_nope_construction(n, offset, dtype=dtype)
    assert float(r["readout_error"].max()) < tol  # every position t is read back as t
    assert float(r["attention_on_target"].min()) > 0.999  # layer 2 attends to t - offset
    assert bool(r["output_right"].all())  # and outputs the token offset places back


def test_the_construction_loses_position_without_bos_or_without_the_causal_mask():
    model = L.nope_position_model(64)
    tokens = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (4, 64))
    t = torch.arange(64).double()
    with_bos = tokens.clone()
    with_bos[:, 0] = L.BOS
    assert (L.nope_position_readout(model, with_bos) - t).abs().max() < 1e-9
    for read in (L.nope_position_readout(model, tokens), L.nope_position_readout(model, with_bos, causal=False)):
        assert (read - read[:, :1]).abs().max() < 1e-9  # every position reads the same: position is lost


@pytest.mark.parametrize("encoding", ["nope", "rope", "alibi", "t5", "sinusoidal"])
def test_without_bos_a_repeated_token_gives_every_position_the_same_state_unless_position_is_added(encoding):
    """On a row of one repeated token, attention that only reweights values (NoPE, and the
    relative encodings too, since every value is the same) gives every position the same hidden
    state at every layer; an absolute encoding, or a BOS in front, tells them apart."""
    model = L.DecoderOnlyLM(L.ModelConfig(encoding=encoding)).eval()
    same = torch.full((1, 20), L.N_SPECIAL)
    with_bos = same.clone()
    with_bos[0, 0] = L.BOS
    with torch.no_grad():
        _, plain = model(same, return_internals=True)
        _, marked = model(with_bos, return_internals=True)
    spread = lambda h: float((h[0] - h[0, -1]).abs().max())  # noqa: E731
    if encoding == "sinusoidal":
        assert spread(plain.hidden_states[-1]) > 1e-3
    else:
        assert all(spread(h) < 1e-5 for h in plain.hidden_states)
    assert spread(marked.hidden_states[1][:, 1:]) > 1e-3


def test_hinge_fit_passes_through_every_point_and_refuses_unordered_points():
    z = torch.tensor([1.0, 0.5, 0.3, 0.2, 0.15], dtype=torch.float64)
    y = torch.tensor([[0.0, 1.0], [2.0, -1.0], [1.0, 4.0], [5.0, 0.0], [-3.0, 2.0]], dtype=torch.float64)
    knots, coef, bias = L._hinge_fit(z, y)
    f = bias + torch.relu(knots[None, :] - z[:, None]) @ coef.T
    assert torch.allclose(f, y, atol=1e-12)
    with pytest.raises(ValueError, match="strictly decreasing"):
        L._hinge_fit(z.flip(0), y)


@pytest.mark.parametrize("bad", [dict(n_positions=1), dict(n_positions=8, offset=8), dict(n_positions=8, margin=0)])
def test_construction_refuses_bad_arguments(bad):
    with pytest.raises(ValueError, match="must be"):
        L.nope_position_model(**bad)


def test_the_construction_degrades_with_length_as_its_sharpness_requires():
    """Neighbouring positions' 1/(t+1) differ by about 1/t^2, so the feed-forward layer's slopes
    grow as t^2 and amplify float32 rounding: the readout error grows with n (exact in float64)."""
    small = L.check_nope_construction(64, 1, batch=2)["readout_error"].max()
    large = L.check_nope_construction(1024, 1, batch=2)["readout_error"].max()
    assert large > 10 * small
    assert math.isclose(
        float(L.check_nope_construction(64, 1, dtype=torch.float64)["readout_error"].max()), 0, abs_tol=1e-9
    )


@pytest.mark.slow
def test_probes_read_a_linear_position_signal_and_extrapolate_it():
    g = torch.Generator().manual_seed(0)
    pos = torch.arange(40).repeat(5).double()
    x = torch.randn(200, 8, generator=g, dtype=torch.float64)
    x[:, 3] = 0.1 * pos + 2.0  # one feature is the position, the rest noise
    probe = L.LinearProbe(ridge=1e-8).fit(x[pos < 20], pos[pos < 20])
    assert (probe.predict(x) - pos).abs().max() < 1e-3  # extrapolates to positions it never saw
    mlp = L.MLPProbe(steps=400).fit(x[pos < 20], pos[pos < 20])
    assert (mlp.predict(x[pos < 20]) - pos[pos < 20]).abs().mean() < 1.0


@pytest.fixture
def nope_weights(tmp_path):
    cfg = L.make_run("copy", "nope", 0)
    L.weights_path(tmp_path, cfg).parent.mkdir(parents=True)
    torch.save(L.DecoderOnlyLM(cfg.model).state_dict(), L.weights_path(tmp_path, cfg))
    return tmp_path


@pytest.mark.slow
def test_probe_table_rows_cover_every_test_token_and_are_cached(nope_weights, monkeypatch):
    kw = dict(
        tasks=("copy",),
        encodings=("nope",),
        train_sizes=[1, 2, 3],
        test_sizes=[3, 5],
        results_dir=nope_weights,
        cache=nope_weights / "probes.csv",
    )
    table = L.position_probe_table(**kw)
    n_layers = L.ModelConfig().n_layers
    assert set(table["layer"]) == set(range(n_layers + 1)) and set(table["probe"]) == {"linear", "mlp"}
    one = table[(table.layer == 0) & (table.probe == "linear")]
    counts = one.groupby("sizes")["count"].sum()  # every input token of every test sequence
    assert counts["training"] == 32 * (2 * 3 + 2) and counts["longer"] == 32 * (2 * 5 + 2)
    longer = one[one.sizes == "longer"]
    assert set(longer[longer.position <= 5]["region"]) == {"prompt"}
    assert set(longer[longer.position > 5]["region"]) == {"answer"}
    assert table["within_half"].between(0, 1).all() and (table["mae"] >= 0).all()
    summary = L.probe_summary(table, bands=((6, 11),))
    assert list(summary.columns) == ["training sizes", "positions 6-11"] and len(summary) == 2 * (n_layers + 1)
    monkeypatch.setattr(L, "load_model", lambda *a, **k: pytest.fail("recomputed a cached model"))
    assert L.position_probe_table(**kw)[table.columns].equals(table)


def test_probes_are_tested_on_sequences_they_were_not_fitted_on():
    model = L.DecoderOnlyLM(L.ModelConfig()).eval()
    fit, _, _ = L.hidden_states_by_position(model, "copy", [4], 8)
    test, _, _ = L.hidden_states_by_position(model, "copy", [4], 8, L.PROBE_TEST_SEED)
    assert not torch.equal(fit[0], test[0])


def test_first_layer_table_gives_a_distribution_per_query(nope_weights):
    table = L.first_layer_table(tasks=("copy",), encodings=("nope",), sizes=[3], results_dir=nope_weights, cache=None)
    assert len(table) == 4 * (2 * 3 + 2)  # heads x positions
    assert table["bos_weight"].between(0, 1).all()
    assert (table["entropy"] <= table["uniform_entropy"] + 1e-5).all()  # no distribution beats uniform
    first = table[table.position == 0]
    assert (first["bos_weight"] - 1).abs().max() < 1e-6 and first["entropy"].abs().max() < 1e-5
