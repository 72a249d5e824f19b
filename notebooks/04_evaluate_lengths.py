# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Evaluate every length
#
# Each of the 60 models was scored at every input length n = 1-48 on the same 256 sequences per
# length (drawn from a fixed evaluation seed, apart from the training seeds), by exact match: a
# sequence counts only if every output symbol and `EOS` are right under greedy decoding.
# Everything below is computed from the committed records in `results/runs/`.

# %%
import matplotlib.pyplot as plt
import pandas as pd

import lengen_helpers as L

pd.set_option("display.width", 200)
records = L.load_grid()
df = L.exact_match_frame(records)
print(f"{len(records)} runs: {df['task'].nunique()} tasks x {df['encoding'].nunique()} encodings x "
      f"{df['seed'].nunique()} seeds, lengths {df['n'].min()}-{df['n'].max()}")

# %% [markdown]
# ## The summary table
#
# In the seed write-up's form: exact match (%) as mean ± population standard deviation over the
# seeds, averaged over the training lengths n = 1-16, then at single lengths; the last column is
# the longest n whose every shorter length scores at least 90% (in symbols, mean ± std over seeds).

# %%
summary = L.summary_table(df)
summary.loc["copy"]

# %%
summary.loc["reverse"]

# %% [markdown]
# ## Accuracy against length

# %%
fig = L.plot_accuracy_vs_length(df, L.FIGURES_DIR / "04_exact_match_vs_length.png")
plt.show()

# %% [markdown]
# ## The in-distribution bar
#
# Every run should reach 95% mean exact match over n = 1-16. Runs that miss it are listed here;
# none was re-run or dropped.

# %%
misses = L.in_distribution_misses(records, bar=0.95)
print(f"{len(misses)} of {len(records)} runs below 95% in distribution")
misses

# %% [markdown]
# ## Against the baseline
#
# The seed write-up trained the same model with the same settings and three seeds (we use five), on
# four of our six encodings. Its numbers are quoted in `results/published/baseline_seed_writeup.csv`.

# %%
L.baseline_comparison(df).round(1)

# %% [markdown]
# ## Against the paper
#
# The paper trains ~110M-weight models on n ≤ 20 and tests on 21-40; it ranks encodings by the mean
# reciprocal rank over (task, seed) columns of test accuracy, over ten tasks. We compute the same
# statistic over our two tasks and five seeds, with test lengths 17-32 (L+1 to 2L; ties share the
# average rank), and show the paper's copy and reverse test exact match beside our mean over 17-32.
# The paper has no learned-table models, so that encoding is left out here.

# %%
L.paper_comparison(df)

# %%
print("Our mean reciprocal rank, all six encodings, test lengths 17-32:")
print(L.mean_reciprocal_rank(df, range(17, 33)).round(3).to_string())

# %% [markdown]
# ## What the numbers say
#
# DISCUSSION_PLACEHOLDER
