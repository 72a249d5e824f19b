"""Our attention, multi-head attention and encoder-decoder against PyTorch's references."""

import pytest
import torch

import lengen_helpers as L


def test_attention_matches_torch_sdpa():
    """Notebook 02's check: no mask, causal, padding, causal + ALiBi bias."""
    checks = L.check_attention_vs_torch()
    assert len(checks) == 4 and all(c.passed for c in checks), [c.row() for c in checks]


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding"])
def test_attention_weights_sum_to_one_and_are_zero_where_masked(mask_kind):
    q, k, v = (torch.randn(2, 4, 7, 16) for _ in range(3))
    mask = {
        "none": None,
        "causal": L.causal_mask(7),
        "padding": L.padding_mask(torch.tensor([[5] * 7, [5] * 4 + [L.PAD] * 3])),
    }[mask_kind]
    _, weights = L.scaled_dot_product_attention(q, k, v, mask, torch.randn(1, 4, 7, 7))  # any bias
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 7))
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_causal_mask_shapes_and_cache_offset():
    assert torch.equal(L.causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    # the last 2 queries of 4 positions (what a cached step sees)
    assert torch.equal(L.causal_mask(2, 4), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


def test_padding_mask_hides_pad_keys():
    m = L.padding_mask(torch.tensor([[4, 5, L.PAD]]))
    assert m.shape == (1, 1, 1, 3) and m.flatten().tolist() == [True, True, False]


def test_fast_path_equals_written_out_path():
    mha = L.MultiHeadAttention(32, 4).eval()
    x = torch.randn(3, 9, 32)
    mask, bias = L.causal_mask(9), torch.randn(1, 4, 9, 9)
    fast, none = mha(x, mask=mask, bias=bias)
    slow, w = mha(x, mask=mask, bias=bias, need_weights=True)
    assert none is None and w.shape == (3, 4, 9, 9)
    assert (fast - slow).abs().max() < 1e-5


def test_multihead_attention_matches_torch_multiheadattention():
    """Notebook 02's check: causal self-attention (outputs and weights) and cross-attention."""
    checks = L.check_mha_vs_torch()
    assert len(checks) == 3 and all(c.passed for c in checks), [c.row() for c in checks]


@pytest.mark.parametrize("pre_norm", [False, True])
def test_seq2seq_matches_torch_transformer(pre_norm):
    check = L.check_seq2seq_vs_torch(pre_norm)
    assert check.passed, check.row()


def test_masks_match_torch_and_hide_what_they_should():
    checks = L.check_masks()
    assert all(c.passed for c in checks), [c.row() for c in checks]


def test_seq2seq_greedy_decode_shapes():
    m = L.Seq2SeqTransformer(L.VOCAB_SIZE, L.VOCAB_SIZE).eval()
    out = m.greedy_decode(torch.randint(4, 24, (2, 5)), max_len=7)
    assert out.shape[0] == 2 and out[:, 0].eq(L.BOS).all() and out.shape[1] <= 8


def test_mha_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="not divisible"):
        L.MultiHeadAttention(30, 4)


def test_check_rows_print_the_verdict_and_tolerance_not_the_float_noise():
    # two machines whose kernels differ in the last bits must print the same row
    a, b = L.Check("x", 3e-7, 1e-5).row(), L.Check("x", 0.0, 1e-5).row()
    assert a == b == {"check": "x", "tolerance": "max |diff| <= 1e-05", "result": "pass"}
    assert L.Check("x", 2e-5, 1e-5).row()["result"] == "FAIL"
    assert L.Check("rows that differ", 0.0, 0.0).row()["tolerance"] == "exact"
