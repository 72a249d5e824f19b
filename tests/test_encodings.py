"""The six positional encodings: their definitions, the registry, and bad input."""

import math

import pytest
import torch
from support import run_doc_example

import lengen_helpers as L


def test_registry_holds_the_six_encodings_in_order():
    assert L.encoding_names() == ("nope", "sinusoidal", "learned", "rope", "alibi", "t5")
    assert [L.encoding_title(e) for e in L.encoding_names()] == [
        "NoPE",
        "Sinusoidal",
        "Learned",
        "RoPE",
        "ALiBi",
        "T5 bias",
    ]


def test_unknown_encoding_lists_valid_names():
    with pytest.raises(ValueError, match="unknown positional encoding 'xpos'.*alibi.*t5"):
        L.ModelConfig(encoding="xpos")


def test_sinusoidal_table_values():
    pe = L.sinusoidal_table(torch.arange(50), 8)
    pos, i = 7, 1  # sin half then cos half, frequency 10000^(-2i/d)
    w = 10000 ** (-2 * i / 8)
    assert math.isclose(pe[pos, i].item(), math.sin(pos * w), abs_tol=1e-6)
    assert math.isclose(pe[pos, 4 + i].item(), math.cos(pos * w), abs_tol=1e-6)
    assert torch.equal(pe[0, :4], torch.zeros(4)) and torch.equal(pe[0, 4:], torch.ones(4))


def rope(fraction=1.0, d_model=64, n_heads=4):
    return L.ENCODINGS["rope"](L.ModelConfig(encoding="rope", d_model=d_model, n_heads=n_heads, rope_fraction=fraction))


def test_rope_scores_depend_only_on_relative_position():
    enc = rope()
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        return (enc.rotary(torch.tensor([m]))(q) * enc.rotary(torch.tensor([n]))(k)).sum().item()

    assert math.isclose(score(9, 4), score(25, 20), rel_tol=1e-4, abs_tol=1e-5)
    assert not math.isclose(score(9, 4), score(9, 5), rel_tol=1e-3)


def test_rope_preserves_norm_and_rotates_interleaved_pairs():
    enc = rope()
    t = torch.randn(2, 4, 5, 16)
    r = enc.rotary(torch.arange(5))(t)
    assert torch.allclose(r.norm(dim=-1), t.norm(dim=-1), atol=1e-5)
    # GPT-J style: dims (0, 1) form the first pair, turned by angle = position (frequency 1)
    x0, x1 = t[0, 0, 3, 0], t[0, 0, 3, 1]
    assert torch.allclose(r[0, 0, 3, 0], x0 * math.cos(3) - x1 * math.sin(3), atol=1e-5)
    assert torch.allclose(r[0, 0, 3, 1], x0 * math.sin(3) + x1 * math.cos(3), atol=1e-5)


def test_rope_fraction_rotates_only_the_leading_dims():
    enc = rope(fraction=0.25)  # 4 of 16 dims, as in the paper
    t = torch.randn(1, 1, 6, 16)
    r = enc.rotary(torch.arange(6))(t)
    assert torch.equal(r[..., 4:], t[..., 4:])
    assert not torch.allclose(r[..., :4], t[..., :4])


def test_rope_fraction_leaving_odd_dims_is_refused():
    with pytest.raises(ValueError, match="positive even number"):
        L.ModelConfig(encoding="rope", d_model=48, n_heads=4, rope_fraction=0.25)  # 3 of 12 dims


@pytest.mark.parametrize(
    "n, expected",
    [
        (4, [2**-2, 2**-4, 2**-6, 2**-8]),
        (8, [2 ** -(i + 1) for i in range(8)]),
        (6, [2 ** -(8 / 4 * (i + 1)) for i in range(4)] + [2**-1, 2**-3]),  # 4 heads, then odd ones of 8
    ],
)
def test_alibi_slopes(n, expected):
    assert torch.allclose(L.alibi_slopes(n), torch.tensor(expected))


def test_alibi_bias_is_minus_slope_times_distance():
    enc = L.ENCODINGS["alibi"](L.ModelConfig(encoding="alibi"))
    b = enc.bias(torch.arange(5), torch.arange(5))
    assert b.shape == (1, 4, 5, 5)
    assert math.isclose(b[0, 0, 4, 1].item(), -0.25 * 3)
    assert (b[0, :, range(5), range(5)] == 0).all()


def test_t5_buckets():
    d = torch.arange(0, 300)
    b = L.t5_bucket(d, 32, 128)
    assert torch.equal(b[:16], torch.arange(16))  # exact for distances 0..15
    assert (b[16:128].diff() >= 0).all() and b[16] == 16 and b[100] < 31  # log-spaced, monotone
    assert b[32] == 16 + int(math.log(32 / 16) / math.log(128 / 16) * 16)  # = 21
    assert (b[128:] == 31).all()  # 128 and beyond share the last bucket
    assert L.t5_bucket(torch.tensor([-5])).item() == 0  # future keys (masked anyway) -> bucket 0


def test_t5_table_is_shared_by_all_layers():
    m = L.DecoderOnlyLM(L.ModelConfig(encoding="t5", n_layers=3))
    tables = [n for n, _ in m.named_parameters() if "table" in n]
    assert tables == ["pos.table.weight"]
    assert m.pos.table.weight.shape == (32, 4)


def test_learned_table_refuses_positions_past_its_size():
    m = L.DecoderOnlyLM(L.ModelConfig(encoding="learned", max_positions=20))
    m(torch.randint(4, 24, (1, 20)))
    with pytest.raises(ValueError, match="max_positions=20"):
        m(torch.randint(4, 24, (1, 21)))


def test_learned_run_config_must_cover_the_evaluated_lengths():
    with pytest.raises(ValueError, match="needs 99 positions"):
        L.make_run("copy", "learned", max_positions=64)


def test_nope_model_is_permutation_equivariant_without_the_causal_mask_but_not_with_it():
    """With NoPE only the causal mask tells positions apart: without it, permuting the tokens
    permutes the outputs; with it, outputs change (beyond the first token the permutation moves)."""
    m = L.DecoderOnlyLM(L.ModelConfig(encoding="nope")).eval()
    x = torch.randint(4, 24, (1, 6))
    perm = torch.tensor([0, 1, 3, 2, 5, 4])

    def blocks(tokens, mask):
        h = m.pos.embed(m.tok_emb(tokens), torch.arange(tokens.shape[1]))
        for block in m.blocks:
            h, _ = block(h, mask=mask)
        return h

    assert torch.allclose(blocks(x[:, perm], None), blocks(x, None)[:, perm], atol=1e-5)
    causal = L.causal_mask(6)
    permuted, plain = blocks(x[:, perm], causal), blocks(x, causal)
    assert torch.allclose(permuted[:, :2], plain[:, :2], atol=1e-6)  # rows before the first swap: the same prefix
    assert not torch.allclose(permuted, plain[:, perm], atol=1e-3)  # not equivariant under the mask


def test_a_seventh_encoding_is_one_class_and_one_registry_entry():
    @L.register_encoding
    class Scaled(L.PositionalEncoding):
        name = "scaled-test"

        def embed(self, x, positions):
            return x * 0 + positions[..., None].float()  # an absurd encoding, but a legal one

    try:
        m = L.DecoderOnlyLM(L.ModelConfig(encoding="scaled-test"))
        assert m(torch.randint(4, 24, (2, 5))).shape == (2, 5, L.VOCAB_SIZE)
    finally:
        del L.ENCODINGS["scaled-test"]


def test_the_documented_example_encoding_works_everywhere(monkeypatch):
    """The 'Adding a positional encoding' example of docs/extending.md runs as written (bar the
    training line), and the new encoding packs, caches and may opt into the shared relative bias."""
    model = run_doc_example("Adding a positional encoding")["model"].eval()
    prompt = torch.randint(4, L.VOCAB_SIZE, (3, 7))
    assert torch.equal(L.generate(model, prompt, 10), L.generate(model, prompt, 10, use_cache=False))
    batch = L.packed_training_batch(L.get_task("copy"), [3, 9, 2, 12], torch.Generator().manual_seed(0))
    general = L.batch_loss(model, batch)
    monkeypatch.setattr(type(model.pos), "relative", True)
    assert torch.allclose(L.batch_loss(model, batch), general, atol=1e-6)


def test_the_documented_example_task_works_as_written():
    namespace = run_doc_example("Adding a task")
    assert [c.name for c in namespace["configs"]] == ["double-nope-s0", "double-rope-s0"]
    task = L.get_task("double")
    batch = L.single_length_batch(task, 3, 4, torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (4, 3 + 6 + 3) and int(batch.tokens[:, 1:4].max()) < 9
    assert L.answer_sources("double", 3)[1].tolist() == [1, 1, 2, 2, 3, 3]
