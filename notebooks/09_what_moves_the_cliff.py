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
# # 09 · What moves the cliff
#
# Every model of the grid is at 0% exact match by n = 23, 1.4 times the training length
# (notebook 04). This chapter asks why the cliff sits where it does and what moves it. First the
# anatomy of the failures; then two interventions that need no retraining (attention-logit
# scaling, and decoding with the length given), on the committed seed-0 models; then four
# interventions in training (randomized positions, no stop decision in the loss, index hints,
# coupled positions), alone and combined, each run beside the grid's models. One combination,
# RoPE with coupled and randomized positions, holds copy and reverse to three times the
# training length.
#
# Everything here is computed once from the saved weights, on the evaluation sequences (256 per
# length, the grid's evaluation seed), and cached in `results/anatomy/`.

# %%
import math

import matplotlib.pyplot as plt
import pandas as pd

import lengen_helpers as L

pd.set_option("display.width", 200)

# %% [markdown]
# ## Where the models go wrong: the stop decision, apart from the pointer
#
# `L.failure_anatomy` runs one teacher-forced pass per length and separates:
# - **exact match** (the study's metric: every symbol and EOS right),
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
    index=L.encoding_title, level="encoding").round(0)

# %% [markdown]
# The kind of each failing row's first error, as shares of all rows (%): EOS too early (the
# stop decision), a wrong symbol (the pointer), a missing EOS after a right answer.

# %%
kinds = ["early_eos", "wrong_symbol", "missed_eos"]
(100 * near.pivot_table(index=["task", "encoding"], columns="n", values=kinds, sort=False)).rename(
    index=L.encoding_title, level="encoding").round(0)

# %% [markdown]
# ## Interventions at inference only: attention-logit scaling
#
# The same weights, with the content logits rescaled from outside the model: `scaled_attention`
# attaches a hook to each attention's `hook_scores` point for as long as its block runs, in the
# forward pass and in cached decoding alike, and leaves no trace after it (tested):
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
by_setting = lambda column: summary[column].unstack("setting")[settings].rename(  # noqa: E731
    index=L.encoding_title, level="encoding")
print("longest n such that every n' <= n keeps 90% exact match:")
by_setting("longest n >= 90%")

# %%
print("mean exact match over the training lengths n = 1-16 (%): what each setting costs in distribution")
by_setting("n = 1-16").round(0)

# %%
print("mean exact match over n = 17-24 (%): past the training length")
by_setting("n = 17-24").round(0)

# %%
best = summary.reset_index()
best = best[best["setting"] != "none"].sort_values("n = 17-24", ascending=False).head(5)
print("the five best (task, encoding, setting) by mean exact match over n = 17-24:")
best.set_index(["task", "encoding", "setting"]).rename(index=L.encoding_title, level="encoding").round(1)

# %%
keys = 2 * 24 + 2  # the last query of an n = 24 copy or reverse input sees this many keys
factor = L.attention_scale(L.torch.tensor([keys]), log_length_scaling=34)[0]
print(f"log-length factor (N = 34) on the last query at n = 24 ({keys} keys): {float(factor):.2f}; "
      f"temperature 0.9 multiplies every logit by {1 / 0.9:.2f}, 0.75 by {1 / 0.75:.2f}")

# %% [markdown]
# ## What inference alone does
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
# does. For the models as trained, giving the length moves the cliff little: with it no model keeps
# 90% at n = 20 (15% at most), and the largest gains in the first table are at n = 17-18 (ALiBi
# copy from 4% to 98% at 17, NoPE copy from 49% to 91% at 18).
#
# **Sharper attention moves it a little, and only a mild sharpening is free.** A temperature of
# 0.9 (logits × 1.11) keeps every length up to 16 at or near 100% for NoPE, ALiBi, T5 and the
# learned table, and moves NoPE's and ALiBi's cliff from 16-17 to 18-19 (mean exact match over
# n = 17-24: NoPE on reverse from 31% to 57%, on copy from 19% to 40%). These are the seed-0
# models only: how far the temperature moves other seeds was not measured. It breaks RoPE in
# distribution (62% and 18% over n = 1-16), and sinusoidal on reverse (77%). Sharper still
# (0.75) helps some models further out (NoPE on reverse: 64% over 17-24) but costs the training
# lengths; 0.5 breaks every model, and 1.5 all but one (learned, on reverse). That a
# uniform sharpening helps past the training length but hurts inside it suggests that the
# attention a model needs sharpens with length, as Wang et al. argue for NoPE. Log-length scaling is the
# length-dependent version, but clamped to leave the training lengths alone it is too weak to
# matter here: its factor has only reached 1.11 at n = 24, and it changes no model's reach.
#
# **The goal is not met by inference-time changes.** No setting holds 90% exact match at
# n = 32 (2x) on copy or reverse; the longest reach is n = 19 (seed 0). So the models must be
# trained differently.

# %% [markdown]
# ## Interventions in training
#
# Four ways to train the study's model otherwise, each an option of the module and a config
# field (off by default: the grid's runs keep their configs and hashes, tested), named in
# `L.INTERVENTIONS`:
# - **random positions** (the model option `random_positions=P`; Ruoss et al. 2023): in training
#   and in evaluation alike, a sequence of L tokens reads a sorted random sample of L distinct
#   positions from [0, P), P three times the longest test sequence rounded up to 64 (copy at
#   n = 48 has 99 tokens: P = 320). Every position and distance an encoding is asked about at
#   test time is then trained. For the five encodings that read positions.
# - **no EOS in the loss** (`RunConfig.train_eos = False`): the stop decision is never trained,
#   so the model is scored with the length given. It asks how far the pointer alone goes when
#   training spends nothing on stopping. For NoPE and ALiBi, first and second in the grid's
#   ranking (notebook 04: NoPE ahead of every encoding; ALiBi and T5 not distinguishable).
# - **index hints** (tasks `copy_hints` and `reverse_hints`; Zhou et al. 2023): each prompt
#   symbol is preceded by a hint token, consecutive hints from a random start among 64, and each
#   answer symbol by its source's hint. Hints make the stop decision easy, and the pointer too:
#   the next answer symbol is the one after the same hint in the prompt, and the answer ends
#   when the next hint is not in the prompt. Neither needs a position, and every hint, and
#   every step from one hint to the next, is trained. For NoPE and ALiBi; then, because ALiBi
#   with hints still held no length past 16, **hints with random positions** (P = 640), where a
#   count of positions can no longer stand in for the hints.
# - **coupled positions** (the model option `position_coupling`; Cho et al. 2024), a fourth, chosen
#   because the three above held no length to n = 20. Each query of the answer (SEP, then each
#   answer token) reads the position of the prompt token whose copy it must write, and the query
#   that must write EOS reads one past the last source (copy: SEP's own position, where no prompt
#   token is; reverse: BOS's). So coupling also hands the model the step at which to stop: the EOS
#   query sits at a position the prompt marks. The reason for choosing it: the failure anatomy shows
#   the pointer to be the half of the cliff that the other interventions leave, and coupling turns
#   it into attending to one's own position, which is the same operation at every length for a
#   relative encoding. RoPE, because its logits depend on the signed offset: ALiBi's and T5's biases
#   treat a key at a later position than the query as if it were at distance 0 or nearer, which
#   coupling creates (the prompt token being copied sits at the query's position, later prompt
#   tokens above it).
#
# The runs (`python -m lengen_helpers sweep --grid cliff`), their compute in copy runs (one copy
# run: the compute of one 5,000-step copy run of the study's model) and their wall time:

# %%
copy_run = L.copy_run_flops()
runs = pd.DataFrame([{"intervention": L.intervention_of(c), "task": c.task, "encoding": L.encoding_title(c.encoding),
                      "copy runs": L.run_compute_flops(c, sample_steps=100) / copy_run}
                     for c in L.experiment("cliff").runs()])
print(f"{len(runs)} runs, {runs['copy runs'].sum():.1f} copy runs of compute; "
      f"random positions from [0, P), P = {L.random_positions_for(L.get_task('copy'))} (copy, reverse), "
      f"{L.random_positions_for(L.get_task('copy_hints'))} (with hints)")
runs.groupby(["intervention", "task"], sort=False).agg(
    encodings=("encoding", lambda e: ", ".join(dict.fromkeys(e))), runs=("encoding", "size"),
    copy_runs=("copy runs", "sum")).round(1)

# %%
# NBVAL_IGNORE_OUTPUT
# trains only what results/interventions lacks (with a progress bar); under CI it only reads, and names what
# is missing
records = L.sweep(L.experiment("cliff").runs(), L.INTERVENTIONS_DIR, train=not L.IN_CI)

# %%
wall = pd.DataFrame([{"intervention": L.intervention_of(L.RunConfig.from_dict(r["config"])),
                      "wall time (min)": r["wall_time_s"] / 60} for r in records])
print(f"{len(records)} runs trained; wall time per run, two to four runs at once "
      f"on 2 cores (min):")
wall.groupby("intervention", sort=False)["wall time (min)"].agg(["count", "mean", "sum"]).round(1)

# %% [markdown]
# Each trained run is measured as the grid's models were above (`L.intervention_table`: the
# failure anatomy at n = 1-48, cached in `results/anatomy/interventions/`), beside the grid's
# own models of seeds 0-2 ("none"). Exact match against n from n = 8, the mean over the seeds
# trained (each panel says how many); the dotted line is the grid's model of the same encoding
# (the length given is in the tables below). Lines at 0% at every n would hide one another: they
# are drawn 1.5 points apart just below 0, and each panel names them:

# %%
table = L.intervention_table()  # copy and reverse, every encoding, seeds 0-2, where a run exists
summary = L.intervention_summary(table)
fig = L.plot_interventions(table, L.FIGURES_DIR / "09_interventions.png")
plt.show()

# %% [markdown]
# Per (intervention, encoding), over its seeds: the mean exact match over the training lengths
# n = 1-16, the longest n up to which every length keeps 90%, and exact match at n = 32 (2x);
# each as "mean (min-max, number of seeds)", in % (lengths in symbols).

# %%
spread = lambda cols: pd.concat({c: L.seed_spread(summary, c) for c in cols}, axis=1).rename(  # noqa: E731
    index=L.encoding_title, level="encoding")
print("the study's metric (EOS included):")
spread(["n = 1-16", "longest n >= 90%", "n = 32"])

# %%
print("with the length given:")
spread(["n = 1-16, length given", "longest n >= 90%, length given", "n = 32, length given"])

# %% [markdown]
# ## The goal: 90% at n = 32 on copy and on reverse
#
# The question put to the interventions: is there a configuration that holds at least 90% exact match at
# n = 32 (twice the longest training input) on both copy and reverse, with at least 95% in
# distribution (mean over n = 1-16), by the study's metric (EOS included), and separately with
# the length given. Checked per
# trained (intervention, encoding, seed):

# %%
print(L.cliff_goal_report(L.cliff_goal(summary)))

# %% [markdown]
# How far each configuration holds, per seed: the longest n up to which every length keeps 90%
# exact match (the grid evaluates to n = 48, three times the training length); "—" where that
# seed was not trained.

# %%
reach = summary.pivot_table(index=["intervention", "encoding"], columns=["task", "seed"], values="longest n >= 90%",
                            sort=False)
L.with_blanks(reach.astype("Int64")).rename(index=L.encoding_title, level="encoding")

# %% [markdown]
# **One configuration meets the goal, on every seed: RoPE with coupled and randomized positions.**
# All three seeds are at 100% in distribution and at n = 32 on copy and on reverse, by the study's
# metric and with the length given, and hold 90% through n = 48, the longest length the study
# evaluates (three times the training length). The two are not independent results here: coupling
# puts the EOS query at SEP's position (copy) or BOS's (reverse), so it already tells the model
# where the answer ends, much as giving the length does. Coupled positions depend only on the prompt
# and on the answer step (step i reads the position of the prompt token it copies), so greedy
# decoding can assign them without knowing the answer; but they do hand the model the task's
# alignment between answer and prompt, which the other interventions leave it to find. No other
# configuration keeps 90% past n = 20; most that learned their task hold to n = 16-20, as the
# grid's models do (16-18), with exceptions printed above (one grid NoPE seed on reverse holds to
# 6; without EOS in the loss the study's metric is 0 by design). Apart from the grid and the winning
# configuration, each (intervention, encoding) was trained on seed 0 only: its reach is one
# seed's, without a spread.
#
# ## Why random positions alone do not help here
#
# Randomized positions move the cliff by three lengths at most (one seed each; copy: 17-19 against
# the grid's 16-17; reverse: 17-18 against 16-17, and sinusoidal loses the training lengths). What
# the models get wrong first at n = 18-24, as a share of all rows (%), for the seed-0 models of the
# grid ("none") and with random positions:

# %%
encs = ["sinusoidal", "learned", "rope", "alibi", "t5"]
rp = table[table["intervention"].isin(["none", "random positions"]) & (table["seed"] == 0)
           & table["encoding"].isin(encs) & table["n"].isin([18, 20, 24])]
(100 * rp.pivot_table(index=["task", "encoding", "intervention"], columns="n", values=["early_eos", "wrong_symbol"],
                      sort=False)).rename(index=L.encoding_title, level="encoding").round(0)

# %% [markdown]
# Both halves of the cliff remain. On copy, random positions take ALiBi's early stops away (92%
# of rows at n = 18, then 8%) but give T5 more (17%, then 73%), and by n = 24 nearly every row
# of every encoding goes wrong at a symbol (88-100%). On reverse the learned table, RoPE and T5
# now stop too early at n = 24 (65-100% of rows), where the grid's models pointed wrong. We
# hypothesise that the reason is in what random positions remove: a position's value no longer
# says how far into the sequence a token is, so "the i-th prompt symbol" and "n symbols written"
# would have to be found by counting tokens, as NoPE must, and these models' reach (17-19) is
# about NoPE's. That reading rests on one seed per encoding and on reach alone; no counting
# mechanism was measured.
#
# Combined with the inference-time fixes of the first part: the same models with the length
# given (already in the tables above) and under a temperature of 0.9, which helped the grid's
# models most:

# %%
hot = L.intervention_table(["random positions"], encodings=encs, seeds=[0], scaling={"attention_temperature": 0.9})
rp_hot = pd.concat({"plain": summary[(summary["intervention"] == "random positions")].set_index(["task", "encoding"]),
                    "temperature 0.9": L.intervention_summary(hot).set_index(["task", "encoding"])}, axis=1)
rp_hot.loc[:, (slice(None), ["n = 1-16", "longest n >= 90%", "longest n >= 90%, length given"])].rename(
    index=L.encoding_title, level="encoding").round(0)

# %% [markdown]
# Giving the length adds at most one length (the two "longest n" columns); the temperature adds
# at most two: T5 on reverse reaches 19 (from 17), the learned table and RoPE on reverse 19 (from
# 18), the learned table on copy 19 (from 18). ALiBi and sinusoidal lose lengths inside the
# training range under the temperature, and RoPE on copy loses reach (18 to 15). One seed each.
#
# ## The other interventions
#
# **No EOS in the loss** leaves the pointer where it was: with the length given, NoPE and ALiBi
# trained without the stop decision reach 17-18, as the grid's models do with the length given.
# Taking the stop decision out of training frees nothing the pointer can use here.
#
# **Index hints** are learned by ALiBi (100% in distribution) but do not move its cliff (16, or
# 17-18 with the length given): its exact match falls past n = 16 as before (whether by stopping
# early or by pointing wrong was not broken down for these runs). One seed
# suggests that the model kept addressing by position rather than through the hints (which
# tokens its heads read was not measured). With random positions
# (P = 640) as well, ALiBi learns reverse (17) but not copy (2% in distribution). NoPE with
# index hints learned nothing of the symbols: its training loss settled where the
# hints and EOS are right and every symbol is a guess among 20. With n uniform in 1-16, that is
# ln 20 times the symbols' share of the answer tokens:

# %%
symbols = sum(range(1, 17)) / sum(2 * n + 1 for n in range(1, 17))  # n symbols among 2n hints and symbols + EOS
for task in ["copy", "reverse"]:
    rec = L.read_record(L.record_path(L.INTERVENTIONS_DIR, L.intervention_run("index hints", task, "nope", 0)))
    print(f"{task} with hints, NoPE: final training loss {rec['loss_curve']['mean_loss'][-1]:.3f}; "
          f"symbols at chance, all else right: {math.log(20) * symbols:.3f}")

# %% [markdown]
# Finding "the symbol after this hint" needs a head that attends to the previous token, which
# ALiBi gets from its bias and NoPE must build from its 1/(t+1) signal; with prompts of up to 32
# hint and symbol tokens it did not, in 5,000 steps (a reading of the loss, not a measured
# mechanism).
#
# **Coupled positions without random positions** (RoPE) hold reverse to n = 20 (41% at n = 32)
# and copy to 18 (its attention was not measured: that the coupling alone lets the pointer
# "attend to one's own position" is a reading of the design), but the offsets and positions met at
# n = 32 were never trained. **With learned positions or ALiBi**,
# coupling and random positions together reach 18-20. For RoPE, "the key at my own position" is
# one pattern at every offset (a query and a key at the same position meet unrotated); ALiBi
# biases a query toward keys at later positions than its own, which coupling puts in the prompt,
# and a learned table would have to learn equality over 320 rows (both readings of the design,
# not measured here).
#
# ## The attention of the best configuration at n = 32
#
# The configuration whose worst (task, seed) holds longest, its seed-0 models, drawn with
# notebook 05's tools: for each task the head that puts the most attention on the symbol to
# write next at n = 32 (`L.pointer_head`), on one inspection sequence of n = 32, with the
# on-target cells ringed. Heads are named by layer and head, both counted from 0 (L2H0: layer 2,
# head 0), as in notebook 05.

# %%
worst = summary.groupby(["intervention", "encoding"], sort=False)["longest n >= 90%"].min()
best_name, best_enc = worst.idxmax()
print(f"best: {best_name}, {L.encoding_title(best_enc)} (every task and seed holds to n = {worst.max()} at least)")
fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
for ax, task in zip(axes, ["copy", "reverse"]):
    run = L.intervention_run(best_name, task, best_enc, 0)
    model = L.load_run_model(run, L.INTERVENTIONS_DIR)
    layer, head, _ = L.pointer_head(model, task, 32)
    drawn = L.draw_attention(run, layer, head, 32, ax=ax, results_dir=L.INTERVENTIONS_DIR,
                             name=f"{L.encoding_title(best_enc)} ({best_name})", colorbar=ax is axes[-1])
    scores = {n: float(L.pointer_scores(model, task, n)[layer, head]) for n in (16, 32, 48)}
    on = ", ".join(f"n = {n}: {v:.2f}" for n, v in scores.items())
    print(f"{task}: L{layer}H{head}; attention on target {on}; this row right: {drawn['correct']}")
fig.tight_layout()
fig.savefig(L.FIGURES_DIR / "09_best_attention_n32.png", dpi=110)
plt.show()

# %% [markdown]
# Both pointer heads stay on their target at twice and three times the training length (0.98-0.99
# of their attention): the heatmaps are a clean diagonal (copy) and anti-diagonal (reverse) over
# all 32 answer steps.
#
# ## Why the cliff sits where it does
#
# Most models of the grid, and most interventions that leave the model to locate "the i-th
# prompt symbol" and "the end of the answer" by itself, fail between n = 16 and n = 20; the
# exceptions printed above fail sooner, none later. That range holds whatever the encoding, with
# positions randomized (so that every position value and offset is trained), without the stop
# decision in training, with hints that make both decisions a content match, and with attention
# sharpened at inference. We hypothesise that where
# these models fail is set by how they address: by a position value learned up to the training
# length (the absolute encodings, and the relative ones, whose offsets past 34 were never seen),
# or by a count of tokens that holds a few lengths past the training ones (NoPE, and every
# encoding under random positions). This is a reading of the failures, most of them from one
# seed per configuration, not a measured mechanism; how ALiBi addressed with hints was not
# examined.
#
# What moves the cliff here is removing the need to address by length at all: with coupled
# positions each answer step reads its source's position and attends to its own position, one
# operation at every length for RoPE; with random positions as well, every offset it meets at
# test time was trained. That configuration holds 90% on copy and reverse to n = 48 on all
# three seeds, while each part alone holds to 18-20. The price is that the alignment between
# answer and prompt, and with it the step at which to stop, is given, not learned: it meets the
# goal above for copy and reverse, and could serve tasks whose answer walks its prompt; it says
# nothing about tasks without such a map.
# These results are for the study's model (3 layers, d = 64) at 5,000 steps; a larger model or
# longer training may find other routes, and the paper's claim that NoPE generalizes best is
# about its task mix, not about this intervention.
