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
# # 03 · Train the grid
#
# Six encodings × two tasks × five seeds = 60 models, each trained on input lengths 1-16 and then
# evaluated at every length 1-48 (three times the longest training length) by exact match under
# greedy decoding. The settings are those of the baseline, an earlier three-seed replication of
# the paper at this scale, so that its table can be set beside ours (notebook 04).
#
# Training happens in the resumable sweep (`python -m lengen_helpers sweep`, or `make study`),
# which writes one JSON record per run to `results/runs/` and every run's weights to
# `results/weights/`. This notebook calls the same sweep: with the committed results present it
# finds every run done and trains nothing.

# %%
import json

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

import lengen_helpers as L

# %% [markdown]
# ## Settings

# %%
run = L.RunConfig().to_dict()  # every setting, as a record holds it
model = run.pop("model")
settings = pd.DataFrame({"setting": list(run) + [f"model.{k}" for k in model],
                         "value": [str(v) for v in list(run.values()) + list(model.values())]}).set_index("setting")
settings

# %% [markdown]
# A training step, as every run takes it: the learning rate of its schedule (`L.lr_at`: linear
# warm-up, then cosine decay to zero), a fresh batch (`L.training_batch`, packed rows), the loss
# on the answer tokens and EOS (`L.batch_loss`), the gradient clipped to norm 1, and AdamW:

# %%
L.show_source(L._train_steps)

# %% [markdown]
# The three pieces it calls, each as the module writes it: the schedule, the batch, the loss.

# %%
display(L.show_source(L.lr_at), L.show_source(L.training_batch))
L.show_source(L.batch_loss)

# %% [markdown]
# Notes on the settings the baseline left open: the warm-up is 250 steps (5%), AdamW's weight
# decay is 0.01, linear maps start at N(0, 0.02) and token embeddings at N(0, 1), so that content
# and the sinusoidal table (entries in [-1, 1]) start on the same scale. Attention logits are
# scaled by 1/√dₕ for every encoding (the paper's T5-style code does not scale them). The learned
# table has 128 rows, enough for the longest evaluated sequence (2 · 48 + 3 = 99 tokens). Which
# rows can training move? The longest training sequence, [BOS, x1..x16, SEP, y1..y16, EOS], has 35
# tokens, and the model reads all but the last; a gradient on one batch of them says which rows
# receive any:

# %%
rows = L.learned_rows_with_gradient(L.make_run("copy", "learned", 0))
print(f"rows with a gradient: {rows[0]}..{rows[-1]} ({len(rows)} rows); rows {rows[-1] + 1} onwards are never trained")

# %% [markdown]
#
# Each batch draws 64 lengths independently and uniformly from 1-16, as in the baseline, and packs
# the sequences into rows without padding (notebook 01); the loss is the mean over all target
# tokens of the batch, identical to a padded batch.
#
# ## The grid

# %%
configs = L.grid(tasks=("copy", "reverse"), encodings=L.encoding_names(), seeds=range(5))
print(len(configs), "runs:", ", ".join(c.name for c in configs[:3]), "...")

# %%
# NBVAL_IGNORE_OUTPUT
# trains only what results/ lacks (with a progress bar); under CI it only reads, and names what is missing
records = L.sweep(configs, L.RESULTS_DIR, train=not L.IN_CI)

# %%
print(f"{len(records)} records, {sum(r['resumed_from_step'] > 0 for r in records)} resumed from a checkpoint")
print(f"weights saved: {sum(L.weights_path(L.RESULTS_DIR, c).exists() for c in configs)} of {len(configs)} "
      "(notebook 05 inspects them)")

# %% [markdown]
# ## Training curves
#
# Training loss (cross-entropy on the target tokens, averaged over windows of 50 steps) per
# encoding: the median of its five seeds, which one failed run does not pull up, and their
# min-max band.

# %%
fig = L.plot_training_curves(records, L.FIGURES_DIR / "03_training_curves.png")
plt.show()

# %% [markdown]
# ## Throughput
#
# Per run, one process with one thread; the sweep runs one process per core (the grid was
# trained with two processes on two cores, as the sweep log below shows). Times are as recorded
# by each run, on a machine shared with other work, so treat them as approximate.

# %%
L.throughput_table(records)

# %% [markdown]
# ## The grid's wall time
#
# Each sweep that trains something, from the command line or from a notebook, appends a line to
# its results folder's `sweeps.jsonl`: when it started, its wall time, how many runs it found and
# how many it trained, and for which tasks (the table shows this grid's sweeps). The first row
# ran slower training code (88 minutes for 54 of the 60 runs); the grid was then trained again
# in full with the present code (a run's name includes a hash of its settings and of the training
# code's version, so no record of the slower code was reused). What a reader re-running the grid
# on a laptop can expect is the last full sweep's wall time, printed below.

# %%
log = L.sweep_log()
log = log[log["tasks"].map(lambda ts: not isinstance(ts, list) or ts == ["copy", "reverse"])]  # this grid's sweeps
log[["started", "wall_min", "runs", "trained", "workers", "cpus"]].round(1)

# %%
full = log[log.trained == len(configs)].iloc[-1]
print(f"the last sweep that trained all {len(configs)} runs: {full.wall_min:.0f} min of wall time with "
      f"{full.workers} processes on {full.cpus} cores, evaluation included")

# %% [markdown]
# ## Is our training step fast?
#
# `python -m lengen_helpers bench-train` times, in one run and in alternation, our training step
# against Hugging Face's `GPT2LMHeadModel` configured with the same dimensions (3 layers, d_model
# 64, 4 heads, d_ff 256, ReLU, learned positions, pre-LN, no dropout) on the same sequences, one
# thread each. It also counts the useful FLOPs of a step (matmuls over real tokens and causal
# attention per sequence, forward and backward) and compares the achieved rate with this
# machine's single-thread rate on a large square matmul. Below: the committed measurement.

# %%
bench = json.loads((L.BENCH_DIR / "training.json").read_text())
pd.Series(bench["ms_per_step"], name="median ms per step").round(1).to_frame()

# %%
print(f"GPT2LMHeadModel / ours, same padded batches:   {bench['speedup_vs_gpt2_same_padded_batches']:.2f}x")
print(f"GPT2LMHeadModel / ours as trained (packed):    {bench['speedup_vs_gpt2_as_trained']:.2f}x")
print(f"packing alone:                                 {bench['packing_speedup']:.2f}x")
print(f"useful throughput: {bench['achieved_gflop_per_s']:.1f} GFLOP/s, "
      f"{bench['fraction_of_matmul_peak']:.0%} of the {bench['matmul_peak_gflop_per_s']:.1f} GFLOP/s "
      "of a 1024 x 1024 single-thread matmul")
