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
# # 02 · Verify the attention
#
# Before training anything, check the model against references that are known to be right.
# Every row below is computed here, now: our code against PyTorch's own implementations with the
# same weights, the masks against PyTorch's, cached generation against uncached generation for all
# six encodings, and the fast exact-match metric against slow step-by-step greedy decoding.
#
# Each check prints what it checks, the tolerance it is held to (the largest absolute difference
# allowed, or `exact`), and `pass` or `FAIL`. The differences themselves are not printed: their
# last digits depend on which kernels the CPU runs (AVX2, AVX-512, ...), and this notebook's output
# must be the same on every reader's machine (CI also runs it with other kernels forced). The
# same properties are unit tests in `tests/`.

# %%
import pandas as pd
import torch

import lengen_helpers as L

pd.set_option("display.max_colwidth", None)
checks: list[L.Check] = []

# %% [markdown]
# ## 1. Scaled dot-product attention
#
# Ours is written out with tensor operations; the reference is
# `torch.nn.functional.scaled_dot_product_attention`. Four cases: no mask, the causal mask, a
# padding mask (the second sequence ends in three `PAD`s), and the causal mask plus an ALiBi bias.

# %%
checks += L.check_attention_vs_torch()
L.checks_table(checks)

# %% [markdown]
# ## 2. Multi-head attention
#
# `torch.nn.MultiheadAttention` stacks its query, key and value maps in one `in_proj_weight`, as
# ours does, so its weights copy across directly. Self-attention with a causal mask (outputs and
# per-head weights) and cross-attention.

# %%
checks += L.check_mha_vs_torch()
L.checks_table(checks[-3:])

# %% [markdown]
# ## 3. The encoder-decoder Transformer
#
# `Seq2SeqTransformer` rebuilds Vaswani et al.'s model from the same attention and blocks. Its
# every weight is copied into a `torch.nn.Transformer` of the same shape (3 + 3 layers, d_model 64,
# 4 heads, d_ff 256), both are fed the same embedded source (with padding) and target, and the
# decoder outputs compared, for post-LN (the original) and pre-LN.

# %%
checks += [L.check_seq2seq_vs_torch(pre_norm=False), L.check_seq2seq_vs_torch(pre_norm=True)]
L.checks_table(checks[-2:])

# %% [markdown]
# ## 4. Masks
#
# Our causal mask against `nn.Transformer.generate_square_subsequent_mask` (the count of cells that
# differ), the largest attention weight above the diagonal in any layer of the decoder-only model,
# and the largest weight that lands on a `PAD` key.

# %%
checks += L.check_masks()
L.checks_table(checks[-3:])

# %% [markdown]
# ## 5. Cached against uncached generation
#
# Greedy generation with the preallocated cache feeds one token per step; without it the whole
# sequence is re-run. Each encoding gets the cache `new_cache` chooses for it: the layer inputs,
# or keys and values for RoPE (notebook 06 checks both kinds wherever they apply). For each
# encoding, a model nudged off its initialisation (so tables
# and biases matter) generates 32 tokens after a 16-token prompt for 8 sequences, both ways.
# The tokens must be identical and the step logits within 1e-5.

# %%
checks += [L.check_cache(encoding) for encoding in L.encoding_names()]
L.checks_table(checks[-6:])

# %% [markdown]
# ## 6. Exact match: one teacher-forced pass against greedy decoding
#
# The study scores a sequence as right when every output symbol and `EOS` is correct under greedy
# decoding. It computes this in one teacher-forced pass: a row counts only if every target token
# is the argmax given the true prefix. The two agree: if every step's argmax is the true token,
# greedy decoding follows the true prefix; at the first wrong argmax, both fail. Here both are
# computed for 512 reverse sequences (lengths 4, 6, 8, 12), on an untrained model (every row
# wrong) and on a briefly trained one (300 steps on lengths up to 6), which gets some rows right
# and some wrong: the rows where a shortcut would show.

# %%
_ = torch.manual_seed(0)
untrained = L.DecoderOnlyLM(L.ModelConfig()).eval()
brief = L.make_run("reverse", "nope", seed=0, steps=300, warmup_steps=20, train_max_len=6,
                   eval_max_len=6, eval_per_length=8)
trained, _ = L.train_run(brief, progress=False)
results = {label: L.check_exact_match(m, label) for label, m in [("untrained", untrained), ("300 steps", trained)]}
for label, (check, right) in results.items():
    mix = "a mix of right and wrong" if 0 < right < 512 else f"{right} of 512 right"
    print(f"{label:10s}: {mix}; rows where the two methods differ: {int(check.max_abs_diff)}")
checks += [check for check, _ in results.values()]

# %% [markdown]
# ## All checks

# %%
table = L.checks_table(checks)
print(f"{sum(c.passed for c in checks)} of {len(checks)} checks pass")
table
