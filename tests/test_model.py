"""DecoderOnlyLM: cached generation, packing, inspection, and bad input."""

import pytest
import torch
from support import perturbed_model

import lengen_helpers as L

CACHE_CASES = [
    (enc, kind) for enc in L.encoding_names() for kind in ("kv", "inputs") if (enc, kind) != ("rope", "inputs")
]


@pytest.mark.parametrize("encoding, kind", CACHE_CASES)
@pytest.mark.parametrize("batch, prompt_len", [(1, 1), (1, 16), (64, 5), (64, 16)])
def test_cached_and_uncached_generation_agree(encoding, kind, batch, prompt_len):
    """Notebook 02's and 06's check: identical tokens, logits within 1e-5."""
    check = L.check_cache(encoding, batch=batch, prompt_len=prompt_len, new_tokens=24, kind=kind)
    assert check.passed, check.row()


def test_generation_keeps_the_prompt():
    m = perturbed_model("alibi")
    prompt = torch.randint(4, L.VOCAB_SIZE, (3, 5))
    assert torch.equal(L.generate(m, prompt, 4)[:, :5], prompt)


@pytest.mark.parametrize("encoding, kind", CACHE_CASES)
def test_a_filled_cache_then_single_steps_give_the_full_forward(encoding, kind):
    """A cache filled from one forward pass over a prompt, then fed one token at a time, sees
    exactly what the full forward sees, pre- and post-LN."""
    for pre_norm in (False, True):
        m = perturbed_model(encoding, pre_norm)
        x = torch.randint(4, L.VOCAB_SIZE, (3, 12))
        full = m(x)
        cache = L.new_cache(m, 3, 12, kind)
        parts = [L.prefill(m, x[:, :9], cache)[:, None]]
        parts += [L.decode_step(m, x[:, t], cache)[:, None] for t in range(9, 12)]
        assert cache.length == 12
        assert (torch.cat(parts, dim=1) - full[:, 8:]).abs().max() < 1e-5
        with pytest.raises(ValueError, match="prefill fills an empty cache; this one holds 12 positions"):
            L.prefill(m, x[:, :2], cache)


@pytest.mark.parametrize(
    "kind, nbytes",
    [
        ("kv", 2 * 3 * 64 * 4 * 144 * 16 * 4),  # k and v, layers, batch, heads, positions, dh, fp32
        ("inputs", 3 * 64 * 144 * 64 * 4),
    ],
)  # layers, batch, positions, d_model, fp32
def test_cache_is_allocated_once_and_sized(kind, nbytes):
    m = perturbed_model("alibi")
    cache = L.new_cache(m, 64, 144, kind)
    tensors = [cache.k, cache.v] if kind == "kv" else [cache.h]
    pointers = [t.data_ptr() for t in tensors]
    L.prefill(m, torch.randint(4, 24, (64, 16)), cache)
    for _ in range(5):
        L.decode_step(m, torch.randint(4, 24, (64,)), cache)
    assert cache.length == 21 and [t.data_ptr() for t in tensors] == pointers
    assert cache.nbytes == nbytes
    full = L.new_cache(m, 64, 144, kind)
    with pytest.raises(ValueError, match="holds 144 positions"):
        L.prefill(m, torch.randint(4, 24, (64, 200)), full)


def test_cache_kind_follows_the_encoding():
    assert isinstance(L.new_cache(perturbed_model("nope"), 2, 8), L.InputCache)
    assert isinstance(L.new_cache(perturbed_model("t5"), 2, 8), L.InputCache)
    assert isinstance(L.new_cache(perturbed_model("rope"), 2, 8), L.KVCache)  # rotated keys: not from inputs
    rope = perturbed_model("rope")
    with pytest.raises(ValueError, match="rotates keys"):
        L.new_cache(rope, 2, 8, "inputs")
    wrong = L.InputCache(3, 2, 8, 64, [L.input_maps(b.self_attn) for b in rope.blocks])
    with pytest.raises(ValueError, match="cannot serve rotated keys"):
        L.prefill(rope, torch.randint(4, 24, (2, 3)), wrong)
    with pytest.raises(ValueError, match="cannot serve rotated keys"):
        L.decode_step(rope, torch.randint(4, 24, (2,)), wrong)
    with pytest.raises(ValueError, match="needs 3 sets of maps, got 2"):
        L.InputCache(3, 2, 8, 64, wrong.maps[:2])
    with pytest.raises(ValueError, match="unknown cache kind 'fp16'; valid choices: auto, inputs, kv"):
        L.new_cache(rope, 2, 8, "fp16")


def test_an_encoding_that_rotates_keys_gets_a_kv_cache():
    class Quarter(L.PositionalEncoding):  # rotates nothing, but overrides the hook: treated as rotating
        name = "quarter-turn"

        def rotary(self, positions):
            return lambda t: t

    assert Quarter(L.ModelConfig()).rotates_keys and not L.NoPE(L.ModelConfig()).rotates_keys
    m = perturbed_model("nope")
    m.pos = Quarter(m.config)
    assert isinstance(L.new_cache(m, 2, 8), L.KVCache)


def test_the_model_is_plain():
    """The forward pass takes no cache and no experiment setting: decoding and interventions
    attach from outside, through hook points."""
    import inspect

    params = list(inspect.signature(L.DecoderOnlyLM.forward).parameters)
    assert params == ["self", "idx", "positions", "segments", "return_internals"]
    assert list(inspect.signature(L.Block.forward).parameters)[:6] == [
        "self", "x", "mask", "bias", "rotate", "need_weights"
    ]  # fmt: skip
    source = inspect.getsource(L.DecoderOnlyLM)
    assert len(source.splitlines()) <= 90 and "cache" not in source


def loss_and_grads(m: L.DecoderOnlyLM, batch: L.Batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    m.zero_grad()
    loss = L.batch_loss(m, batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]


@pytest.mark.parametrize("encoding", L.encoding_names())
def test_packed_batch_gives_the_padded_loss_and_gradients(encoding):
    m = perturbed_model(encoding, pre_norm=encoding == "rope").train()
    task, lengths = L.get_task("reverse"), [3, 16, 1, 8, 9, 12, 2, 5, 16, 7]
    packed = L.packed_training_batch(task, lengths, torch.Generator().manual_seed(1))
    padded = L.padded_training_batch(task, lengths, torch.Generator().manual_seed(1))
    assert packed.tokens.shape[0] < padded.tokens.shape[0]  # fewer rows: padding compute saved
    assert packed.loss_mask.sum() == padded.loss_mask.sum() == sum(n + 1 for n in lengths)
    (l1, g1), (l2, g2) = loss_and_grads(m, packed), loss_and_grads(m, padded)
    assert abs(l1 - l2) < 1e-5
    assert max((a - b).abs().max().item() for a, b in zip(g1, g2)) < 1e-5


def test_internals_expose_every_layer():
    m = perturbed_model("alibi")
    x = torch.randint(4, 24, (2, 9))
    logits, internals = m(x, return_internals=True)
    assert logits.shape == (2, 9, L.VOCAB_SIZE)
    assert len(internals.attentions) == 3 and internals.attentions[0].shape == (2, 4, 9, 9)
    assert len(internals.hidden_states) == 4 and internals.hidden_states[-1].shape == (2, 9, 64)
    assert torch.allclose(internals.attentions[1].sum(-1), torch.ones(2, 4, 9), atol=1e-5)
    assert (internals.attentions[0].triu(1) == 0).all()  # causal


def test_default_model_matches_the_study_settings():
    c = L.ModelConfig()
    assert (c.d_model, c.n_heads, c.n_layers, c.d_ff, c.pre_norm, c.dropout) == (64, 4, 3, 256, False, 0.0)
    n = L.DecoderOnlyLM(c).num_parameters()
    assert 140_000 < n < 160_000  # about 150k, as in the baseline


def test_token_ids_outside_the_vocabulary_are_refused():
    m = L.DecoderOnlyLM(L.ModelConfig())
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 24\)"):
        m(torch.tensor([[1, 2, 24]]))
    with pytest.raises(ValueError, match="token ids"):
        m(torch.tensor([[-1, 2]]))


def test_d_model_not_divisible_by_heads_is_refused():
    with pytest.raises(ValueError, match="d_model=66 is not divisible by n_heads=4"):
        L.ModelConfig(d_model=66)


@pytest.mark.parametrize("encoding", ["alibi", "t5"])
def test_packed_rows_share_one_relative_bias_exactly(encoding, monkeypatch):
    """The (T, T) bias shared by packed rows equals the per-row bias wherever attention is allowed."""
    m = perturbed_model(encoding).train()
    batch = L.packed_training_batch(L.get_task("copy"), [3, 16, 1, 8, 9, 12, 2, 5], torch.Generator().manual_seed(2))
    assert L._counts_up_within(batch.positions, batch.segments)
    l1, g1 = loss_and_grads(m, batch)
    monkeypatch.setattr(L, "_counts_up_within", lambda positions, segments: False)  # one bias per row
    l2, g2 = loss_and_grads(m, batch)
    assert abs(l1 - l2) < 1e-6
    assert max((a - b).abs().max().item() for a, b in zip(g1, g2)) < 1e-6


def test_positions_that_skip_are_not_given_the_shared_bias():
    """Packed rows whose positions jump inside a sequence get their own bias from the positions."""
    m = perturbed_model("alibi")
    tokens = torch.randint(4, L.VOCAB_SIZE, (1, 6))
    segments = torch.tensor([[0, 0, 0, 1, 1, 1]])
    skipping = torch.tensor([[0, 2, 4, 0, 1, 2]])  # the first sequence counts in steps of two
    assert not L._counts_up_within(skipping, segments)
    assert L._counts_up_within(torch.tensor([[0, 1, 2, 0, 1, 2]]), segments)
    alone = m(tokens[:, :3], positions=skipping[:, :3])  # the first sequence on its own
    packed = m(tokens, positions=skipping, segments=segments)
    assert torch.allclose(packed[:, :3], alone, atol=1e-6)


def test_scaled_embeddings_are_the_table_times_sqrt_d_and_decode_the_same_cached():
    torch.manual_seed(0)
    scaled = L.DecoderOnlyLM(L.ModelConfig(encoding="sinusoidal", options={"scale_embeddings": True})).eval()
    plain = L.DecoderOnlyLM(L.ModelConfig(encoding="sinusoidal")).eval()
    plain.load_state_dict(scaled.state_dict())
    with torch.no_grad():
        plain.tok_emb.weight.mul_(8.0)  # sqrt(64)
    idx = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (3, 9))
    assert torch.allclose(scaled(idx), plain(idx), atol=1e-5)
    assert not torch.allclose(scaled(idx), L.DecoderOnlyLM(L.ModelConfig(encoding="sinusoidal")).eval()(idx), atol=1e-3)
    a, la = L.generate(scaled, idx, 6, use_cache=True, return_logits=True)
    b, lb = L.generate(scaled, idx, 6, use_cache=False, return_logits=True)
    assert torch.equal(a, b) and torch.allclose(la, lb, atol=1e-5)


def test_the_decoding_steps_read_weights_and_hooks_once_per_generation():
    m = perturbed_model("t5")
    prompt = torch.randint(4, L.VOCAB_SIZE, (2, 5))
    cache = L.new_cache(m, 2, 8)
    L.prefill(m, prompt, cache)
    assert len(cache.layers) == len(m.blocks)
    first = cache.layers[0]
    assert first.qkv[0] is m.blocks[0].self_attn.in_proj.weight and first.down[1] is m.blocks[0].ffn[3].bias
    assert all(w.hook_scores is None for w in cache.layers)  # nothing attached: no hook is called
    with L.scaled_attention(m, attention_temperature=0.5):
        hooked = L.new_cache(m, 2, 8)
        L.prefill(m, prompt, hooked)
        assert all(w.hook_scores is b.self_attn.hook_scores for w, b in zip(hooked.layers, m.blocks))
        cached = L.decode_step(m, prompt[:, 0], hooked)
        full = m(torch.cat([prompt, prompt[:, :1]], dim=1))[:, -1]
    assert (cached - full).abs().max() < 1e-5  # the hook scaled the step as it scaled the forward pass
