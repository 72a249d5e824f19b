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
# # 09 · What moves the cliff (first part: where the models go wrong, and inference-only fixes)
#
# Every model of the grid is at 0% exact match by n = 23, 1.4 times the training length
# (notebook 04). This chapter asks why the cliff sits where it does and what moves it. **This is
# its first part**: the anatomy of the failures, and two interventions that need no retraining
# (attention-logit scaling, and decoding with the length given), on the committed seed-0 models.
# The training interventions (randomized positions, training without the stop decision, ...)
# are not run yet; they will follow in this notebook.
#
# Everything here is computed once from the saved weights, on the evaluation sequences (256 per
# length, the grid's evaluation seed), and cached in `results/anatomy/`.

# %%
import matplotlib.pyplot as plt
import pandas as pd

import lengen_helpers as L

pd.set_option("display.width", 200)

# %% [markdown]
# ## Where the models go wrong: the stop decision, apart from the pointer
#
# `L.failure_anatomy` runs one teacher-forced pass per length and separates:
# - **exact match** (today's metric: every symbol and EOS right),
# - **exact match with the length given**: EOS is never chosen where a symbol is due, and is
#   written after the last symbol (equal to greedy decoding with EOS suppressed until the answer
#   is complete, then forced; tested),
# - **token accuracy** (the share of answer symbols right given the true prefix),
# - and the **first error** of each failing row: EOS too early, a wrong symbol, or a missing EOS.

# %%
anatomy = L.failure_table()  # copy and reverse, every encoding, seed 0, n = 1..48 (cached)
fig = L.plot_stop_vs_pointer(anatomy, L.FIGURES_DIR / "09_stop_vs_pointer.png")
plt.show()

# %%
near = anatomy[anatomy["n"].isin([17, 18, 20, 24])]
cols = ["exact_match", "length_given", "token_accuracy"]
(100 * near.pivot_table(index=["task", "encoding"], columns="n", values=cols, sort=False)).rename(
    index=L.label, level="encoding").round(0)

# %% [markdown]
# The kind of each failing row's first error, as shares of all rows (%): EOS too early (the
# stop decision), a wrong symbol (the pointer), a missing EOS after a right answer.

# %%
kinds = ["early_eos", "wrong_symbol", "missed_eos"]
(100 * near.pivot_table(index=["task", "encoding"], columns="n", values=kinds, sort=False)).rename(
    index=L.label, level="encoding").round(0)

# %% [markdown]
# ## Interventions at inference only: attention-logit scaling
#
# The same weights under two options of the module's `ModelConfig` (each a config field, off by
# default; with it off the model is exactly the trained one, tested):
# - `attention_temperature`: every content logit q·k/√d_h divided by a fixed temperature
#   (0.5, 0.75 and 0.9 sharpen, 1.5 flattens);
# - `log_length_scaling = N`: a query that sees k keys multiplies its content logits by
#   max(1, log k / log N) (Chiang and Cholak 2022's log-length scaling, kept at 1 up to N keys so
#   that the training lengths are untouched; Wang et al. 2024 tie NoPE's failure to attention
#   spreading over more keys). N = 34, the keys the longest training input's last query sees.
#
# A relative bias (ALiBi, T5) is added unscaled. Measured at n = 1-32, seed 0, on copy and
# reverse; exact match in %, and the same with the length given.

# %%
scaling = L.scaling_table()  # every encoding under each setting of L.SCALINGS (cached)
summary = L.scaling_summary(scaling)
settings = list(L.SCALINGS)
by_setting = lambda column: summary[column].unstack("setting")[settings].rename(index=L.label, level="encoding")  # noqa: E731
print("longest n such that every n' <= n keeps 90% exact match:")
by_setting("longest n >= 90%")

# %%
print("mean exact match over the training lengths n = 1-16 (%): what each setting costs in distribution")
by_setting("mean 1-16").round(0)

# %%
print("mean exact match over n = 17-24 (%): past the training length")
by_setting("mean 17-24").round(0)

# %%
best = summary.reset_index()
best = best[best["setting"] != "none"].sort_values("mean 17-24", ascending=False).head(5)
print("the five best (task, encoding, setting) by mean exact match over n = 17-24:")
best.set_index(["task", "encoding", "setting"]).rename(index=L.label, level="encoding").round(1)

# %%
keys = 2 * 24 + 2  # the last query of an n = 24 copy or reverse input sees this many keys
factor = L.query_scale(L.ModelConfig(log_length_scaling=34), L.torch.arange(keys))[0, 0, -1, 0]
print(f"log-length factor (N = 34) on the last query at n = 24 ({keys} keys): {float(factor):.2f}; "
      f"temperature 0.9 multiplies every logit by {1 / 0.9:.2f}, 0.75 by {1 / 0.75:.2f}")

# %% [markdown]
# ## What this part says
#
# **Part of the cliff is the stop decision, and for ALiBi on copy nearly all of it at first.** At
# n = 17, ALiBi's copy model writes the whole answer right in 98% of rows when told the length,
# but stops too early in 96% of them, so its exact match is 4%. NoPE's copy model at n = 18 goes
# from 49% to 91% with the length given (44% of its rows stop too early). On reverse the same
# happens later and harder: at n = 24 the first error of every NoPE row is an early EOS.
# Sinusoidal and RoPE fail the other way: their first error is a wrong symbol (the pointer) in
# 73-100% of rows at once, at n = 17; the learned table stops early at n = 17 on copy, then points
# wrong from n = 18.
#
# **The stop decision is not the whole cliff.** With the length given, every model is at or
# below 15% by n = 20 (the first table): the pointer goes a few lengths after the stop decision
# does. For the models as trained, giving the length moves the cliff by one length at most
# ("longest n ≥ 90%" with and without it, in the last table).
#
# **Sharper attention moves it a little, and only a mild sharpening is free.** A temperature of
# 0.9 (logits × 1.11) keeps every length up to 16 at or near 100% for NoPE, ALiBi, T5 and the
# learned table, and moves NoPE's and ALiBi's cliff from 16-17 to 18-19 (mean exact match over
# n = 17-24: NoPE on reverse from 31% to 57%, on copy from 19% to 40%). It breaks RoPE in
# distribution (62% and 18% over n = 1-16), and sinusoidal on reverse (77%). Sharper still
# (0.75) helps some models further out (NoPE on reverse: 64% over 17-24) but costs the training
# lengths; 0.5 breaks every model, and 1.5 all but one (learned, on reverse). That a
# uniform sharpening helps past the training length but hurts inside it says the attention a
# model needs sharpens with length, as Wang et al. argue for NoPE. Log-length scaling is the
# length-dependent version, but clamped to leave the training lengths alone it is too weak to
# matter here: its factor has only reached 1.11 at n = 24, and it changes no model's reach.
#
# **The goal is not met by inference-time changes.** No setting holds 90% exact match at
# n = 32 (2x) on copy or reverse; the longest reach is n = 19. The training interventions
# (randomized positions, training without the stop decision or with index hints, and one more)
# are the next part of this chapter; they are not run yet.
