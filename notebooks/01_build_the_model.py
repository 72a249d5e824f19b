# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Build the model
#
# This study asks one question at laptop scale: a decoder-only Transformer is trained to copy or
# reverse sequences of at most 16 symbols. **How well does it handle longer ones, depending on how
# it encodes position?** It replicates Kazemnejad et al., *The Impact of Positional Encoding on
# Length Generalization in Transformers* (NeurIPS 2023), with a ~150k-weight model instead of
# their ~110M, and starts from an earlier small replication whose settings and tables are our
# baseline.
#
# This notebook meets the pieces in the order the data flows through them: the token format, the
# positional encodings, attention, the model, and one forward pass. All code lives in
# `lengen_helpers.py`, section by section; the notebook calls it.

# %%
import matplotlib.pyplot as plt
import torch

import lengen_helpers as L

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. Sequences
#
# A vocabulary of 20 symbols plus four specials (`PAD=0, BOS=1, SEP=2, EOS=3`). An example of
# input length *n* is `[BOS, x1..xn, SEP, y1..yn, EOS]`: copy has `y = x`, reverse has
# `y = reversed(x)`. The loss covers only `y1..yn` and `EOS`: `loss_mask[t]` marks the inputs whose
# *next* token is one of those.

# %%
batch = L.single_length_batch(L.get_task("reverse"), n=5, batch_size=2, generator=torch.Generator().manual_seed(0))
print("tokens   ", batch.tokens[0].tolist())
print("loss mask", batch.loss_mask[0].int().tolist(), "(over the inputs tokens[:-1])")
print("tasks:", sorted(L.TASKS), "| vocabulary size:", L.VOCAB_SIZE)

# %% [markdown]
# Every task is a subclass of one base, `Task`: it names its symbols and the sizes it can draw,
# says how long the prompt and the answer are at size n, and draws (prompt, answer) pairs, either
# by `target` (the answer to n random symbols) or by overriding `sample`; a trained run is scored
# by greedy exact match unless the task overrides `score_run`. A new task registers itself with
# `@register_task`:

# %%
L.show_source(L.Task)

# %% [markdown]
# Training draws each of the 64 sequences of a batch with its own length, uniform in 1..16. To
# spend little compute on padding, `packed_training_batch` packs several sequences into one row
# (first-fit-decreasing, rows as long as the longest sequence); positions restart at every
# sequence and attention is masked so sequences never see each other. The loss and gradients
# equal those of the same batch padded one sequence per row (a unit test checks this).

# %%
g = torch.Generator().manual_seed(1)
lengths = torch.randint(1, 17, (64,), generator=g).tolist()
packed = L.packed_training_batch(L.get_task("copy"), lengths, torch.Generator().manual_seed(2))
padded = L.padded_training_batch(L.get_task("copy"), lengths, torch.Generator().manual_seed(2))
real = int((packed.segments >= 0).sum())
for name, b in [("padded", padded), ("packed", packed)]:
    print(f"{name}: {tuple(b.tokens.shape)} = {b.tokens.numel()} slots for {real} real tokens, "
          f"{1 - real / b.tokens.numel():.0%} padding")
print("one packed row, segments:", packed.segments[-1].tolist())

# %% [markdown]
# ## 2. Six positional encodings
#
# Each encoding is one small class in a registry and overrides one of three hooks: **add** a
# vector to the token embeddings (sinusoidal, learned), **rotate** queries and keys (RoPE), or
# add a **bias** to the attention logits (ALiBi, T5). NoPE overrides nothing: only the causal
# mask tells positions apart.

# %%
print(L.encoding_names())
for name, cls in L.ENCODINGS.items():
    print(f"{name:11s} {cls.__doc__.splitlines()[0] if cls.__doc__ else ''}")

# %% [markdown]
# The base class every encoding extends, with the three hooks, each doing nothing until an
# encoding overrides it:

# %%
L.show_source(L.PositionalEncoding)

# %% [markdown]
# Sinusoidal is Vaswani et al.'s fixed table (sin half and cos half, base 10000), the paper's "APE".
# Learned is a trained table of 128 rows; rows past the longest training sequence (35 tokens)
# never receive a gradient. RoPE turns each pair of query and key dimensions by an angle
# proportional to position, so scores depend only on the distance; the fraction of each head's
# dimensions rotated is a parameter (the paper rotated 25%). ALiBi subtracts `slope × distance`
# with one geometric slope per head. T5 looks up one learned scalar per (distance bucket, head),
# with 16 exact buckets then log-spaced ones up to distance 128, shared by every layer.

# %%
fig = L.plot_encodings(L.FIGURES_DIR / "01_encodings.png")
plt.show()

# %% [markdown]
# Each encoding is one short class. ALiBi, as the module writes it: its head slopes, and a bias
# of `-slope × distance` on every logit, shared by every layer.

# %%
L.show_source(L.ALiBi)

# %% [markdown]
# ## 3. Attention
#
# `scaled_dot_product_attention` is written out: `softmax(q kᵀ / √dₕ + bias, masked) v`. Shapes:
# queries `(batch, heads, Tq, dₕ)`, keys and values `(batch, heads, Tk, dₕ)`. When the weights are
# not requested, `MultiHeadAttention` takes PyTorch's fused kernel instead; notebook 02 checks the
# two paths (and PyTorch's own modules) against each other.

# %%
L.show_source(L.scaled_dot_product_attention)

# %% [markdown]
# A layer of attention projects its input to queries, keys and values, splits them into heads,
# lets the encoding act where it acts (RoPE rotates queries and keys; ALiBi and T5 add a bias to the
# logits; the absolute encodings acted before, on the embeddings), and merges the heads again:

# %%
L.show_source(L.MultiHeadAttention.forward)

# %% [markdown]
# On random queries, keys and values, with the causal mask (each position sees itself and the
# positions before it):

# %%
q, k, v = torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16)
out, weights = L.scaled_dot_product_attention(q, k, v, mask=L.causal_mask(6))
print("out", tuple(out.shape), "| weights", tuple(weights.shape))
print("causal mask:\n", L.causal_mask(4).int())

# %% [markdown]
# ## 4. The model
#
# `DecoderOnlyLM(ModelConfig(...))`: token embedding, the chosen encoding, three blocks of
# self-attention and a ReLU feed-forward (post-LN by default, pre-LN selectable), and a linear
# head over the vocabulary. A block is attention then the feed-forward, each with its residual and
# its LayerNorm:

# %%
L.show_source(L.Block.forward)

# %% [markdown]
# The study's model is the default config:

# %%
L.ModelConfig()

# %%
L.parameter_counts()

# %% [markdown]
# The positional weights are a small share: the learned table (128 × 64) and T5's table
# (32 buckets × 4 heads); sinusoidal, RoPE and ALiBi have none.
#
# ## 5. One forward pass
#
# The forward pass returns logits; on request also every layer's attention weights and hidden
# states, which notebooks 05 and later inspect. The model's forward pass, from token ids to logits:

# %%
L.show_source(L.DecoderOnlyLM.forward)

# %%
model = L.DecoderOnlyLM(L.ModelConfig(encoding="rope")).eval()
logits, internals = model(batch.inputs, return_internals=True)
print("inputs      ", tuple(batch.inputs.shape))
print("logits      ", tuple(logits.shape))
print("attentions  ", len(internals.attentions), "layers x", tuple(internals.attentions[0].shape))
hidden = internals.hidden_states
print("hidden      ", len(hidden), "(embeddings + 3 layers) x", tuple(hidden[0].shape))
print("untrained prediction:", logits[0].argmax(-1).tolist())

# %% [markdown]
# Greedy generation keeps a cache, preallocated once, and feeds only the newest token at each
# step; RoPE, ALiBi, T5 and the absolute tables are offset by the cache length. The cache holds each
# attention layer's input, from which keys and values are linear maps (for RoPE, whose keys are
# rotated after that map, it holds the keys and values themselves; notebook 06 compares the two).

# %%
prompt = batch.tokens[:, :7]  # [BOS, x1..x5, SEP]
print(L.generate(model, prompt, max_new_tokens=6).tolist())
