# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Benchmark the KV cache
#
# Greedy decoding re-runs the model once per new token. Without a cache, each step processes the
# whole sequence so far, and the total work grows with the square of the length. With a key-value
# cache, each step feeds only the newest token and attends over the stored keys and values.
#
# Ours preallocates the cache once for all layers (`KVCache`), writes each step's keys and values
# in place and attends over a view of the filled prefix: no re-allocation or concatenation of the
# cache, and no Python work per sequence in the batch. RoPE, ALiBi, T5 and the absolute tables are
# offset by the cache length. The prompt goes through the model's `forward` once; every later
# token goes through `DecoderOnlyLM.step`, the same maths for one token per row written with plain
# function calls (`Block.step`, `MultiHeadAttention.step`), because at one token per row a
# decoding step costs more in calls than in arithmetic.

# %%
import json

import matplotlib.pyplot as plt
import pandas as pd
import torch

import lengen_helpers as L

pd.set_option("display.width", 200)

# %% [markdown]
# ## Cached and uncached decoding agree
#
# For every encoding, at batch sizes 1 and 64 and with prompts of 1, 7 and 16 tokens, a model
# nudged off its initialisation generates 32 tokens both ways. The tokens must be identical and the
# step logits within 1e-5.

# %%
checks = [L.check_cache(enc, batch=b, prompt_len=p) for enc in L.POSITIONAL_ENCODINGS for b in (1, 64) for p in (1, 7, 16)]
print(f"{sum(c.passed for c in checks)} of {len(checks)} (encoding, batch, prompt) cases: identical tokens, logits within 1e-5")
assert all(c.passed for c in checks)

# %% [markdown]
# ## The cache's memory
#
# For the study's model (3 layers, 4 heads of 16 dimensions, fp32) at batch 64 and 16 + 128
# positions, keys and values of every layer in one allocation, made once before decoding starts:

# %%
model = L.DecoderOnlyLM(L.ModelConfig(max_positions=144)).eval()
cache = model.new_cache(batch=64, max_len=16 + 128)
print(f"{tuple(cache.k.shape)} keys + the same for values = {cache.nbytes:,} bytes ({cache.nbytes / 2**20:.2f} MiB)")

# %% [markdown]
# ## Timing: ours against Hugging Face
#
# `python -m lengen_helpers bench-kv` times greedy generation after a 16-token prompt, for batch
# {1, 64} × new tokens {32, 64, 128}, one thread, median of three repeats, four ways in
# alternation: ours with and without the cache, and `transformers`' `GPT2LMHeadModel.generate`
# (same dimensions: 3 layers, d_model 64, 4 heads, d_ff 256, ReLU, learned positions, pre-LN;
# greedy; with and without its cache). Ours uses the same architecture for the comparison. The
# committed measurement (`results/benchmarks/kv_cache.json`):

# %%
bench = json.loads((L.BENCH_DIR / "kv_cache.json").read_text())
table = L.kv_ratios(bench)
table.round(3)

# %%
fig = L.plot_kv_benchmark(bench, L.FIGURES_DIR / "06_kv_cache.png")
plt.show()

# %%
b64, b1 = table.loc[(64, 128)], table.loc[(1, 128)]
targets = [("batch 64, 128 tokens: ours cached vs ours uncached", b64["cached vs uncached (ours)"], 20),
           ("batch 64, 128 tokens: ours cached vs GPT-2 cached", b64["ours vs GPT-2, both cached"], 2),
           ("batch 1, 128 tokens: ours cached vs GPT-2 cached", b1["ours vs GPT-2, both cached"], 2)]
for what, ratio, target in targets:
    print(f"{what}: {ratio:.1f}x faster (target {target}x: {'met' if ratio >= target else 'MISSED'})")

# %% [markdown]
# **Against the targets.** The cache does what it should against our own uncached decoding: the
# gap grows with the number of tokens, since uncached work grows with the square of the length, and
# at batch 64 and 128 tokens it clears the 20x target. Against Hugging Face, ours is more than
# twice as fast at batch 1, where both are dominated by per-step overhead and `generate` does more
# work per step. At batch 64 it is faster but **misses the 2x target** (the ratio above).
#
# Where the batch-64 time goes (profiled by hand with `torch.profiler` during development, one
# thread; these figures are not recomputed here): a step costs about 1.1 ms at 17 cached
# positions and grows to about 2.2 ms at 144. The growing part is the attention reading the cache,
# about 100 KB per position per step over three layers, at roughly 9 GB/s on one core here; GPT-2
# also copies its whole cache (`torch.cat`) every step before reading it, which is the margin we
# win. The fixed part is mostly the two attention matrix products per layer over 64 × 4 separate
# one-row matrices, then the 13 small linear maps. We tried and measured, without gain: keys stored
# transposed, a positions-major cache (so the filled part is one block), PyTorch's fused attention
# kernel for the single query, elementwise products instead of batched matrix products, and
# `torch.compile` of the step (several times slower here). A
# lower-precision cache would halve the traffic but would break the bit-for-bit agreement with
# uncached decoding that the checks above demand, so it is not used.
#
# ## Timing it here, now
#
# One configuration re-measured on this machine as the notebook runs (its numbers vary from run
# to run, so the cell's output is not checked).

# %%
# NBVAL_IGNORE_OUTPUT
live = L.bench_kv_cache(batches=(64,), new_tokens=(32,), repeats=3)
L.kv_ratios(live).round(3)
