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
# # 07 · The paper's other tasks, and the ranking across them
#
# The paper ranks the encodings over ten tasks; notebooks 03-05 covered two. Here are six more,
# at our scale: **addition, sorting, summation, parity, polynomial evaluation and LEGO**, each a
# registered task in `lengen_helpers.py` with a seeded generator whose answers the tests check
# against an independent computation (Python integers, `sorted`, ...). As in the paper, each is
# trained on sizes up to L = 8 and tested on sizes 9-16 (shown to 24), with the grid's protocol:
# 256 sequences per size from a fixed evaluation seed, exact match of the whole answer and EOS,
# computed in one teacher-forced pass (equal to greedy decoding, tested per task). Six encodings ×
# 3 seeds per task, the study's model and 5,000 steps (`python -m lengen_helpers sweep --grid
# paper-tasks`). Everything below is computed from the records in `results/runs/`.

# %%
import matplotlib.pyplot as plt
import pandas as pd

import lengen_helpers as L

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 90)

# %% [markdown]
# ## The tasks, one example each
#
# Where our format differs from the paper's (`../shared/reference/paper-code-notes.md`), the
# task's docstring says so: ours are token sequences without the paper's English wrapping, and
# addition writes both operands and the answer with a fixed number of digits per size.

# %%
examples = []
for name in L.PAPER_TASKS:
    task = L.get_task(name)
    tokens, _ = L.make_sequences(task, 4, 1, L.eval_generator(name, 4, L.RunConfig.eval_seed))
    P = task.prompt_length(4)
    words = task.decode(tokens[0])
    examples.append({"task": name, "prompt (size 4)": " ".join(words[1 : P + 1]), "answer": " ".join(words[P + 2 : -1]),
                     "symbols": len(task.symbols), "tokens at size 8": task.sequence_length(8)})
pd.DataFrame(examples).set_index("task")

# %% [markdown]
# ## What has been trained

# %%
configs = {name: L.task_grid(name) for name in L.PAPER_TASKS}
records, missing = {}, {}
for name, cfgs in configs.items():
    records[name], missing[name] = L.load_available(cfgs)
    absent = f"; missing: {', '.join(missing[name])}" if missing[name] else ""
    print(f"{name:10s} {len(records[name]):2d} of {len(cfgs)} runs{absent}")
df = L.exact_match_frame([r for rs in records.values() for r in rs])

# %% [markdown]
# Compute, in copy runs (one 5,000-step copy run of the study's model, FLOPs as the module counts
# them, padding included), against the budget of twice 18 copy runs per task, and the wall time of
# each task's sweep as `results/sweeps.jsonl` logged it (the machine and workers differ: some
# sweeps ran on a lent 16-core machine, others here on 2 cores):

# %%
copy_run = L.run_compute_flops(L.make_run("copy", "nope", 0), sample_steps=100)
spent = {name: sum(L.run_compute_flops(c, sample_steps=100) for c in cfgs) / copy_run for name, cfgs in configs.items()}
print("compute per task (copy runs, all 18 runs):", ", ".join(f"{k} {v:.1f}" for k, v in spent.items()), "(budget 36)")
log = L.sweep_log()
one_task = log["tasks"].map(lambda ts: isinstance(ts, list) and len(ts) == 1 and ts[0] in L.PAPER_TASKS)
log[one_task][["started", "tasks", "wall_min", "runs", "trained", "workers", "cpus"]].round(1)

# %% [markdown]
# ## Is each task learned at all?
#
# The bar: a task is learned if some encoding reaches 90% mean exact match (over seeds) at
# the training sizes 1-8. A task that no encoding learns says nothing about length
# generalization, and is left out of the ranking.

# %%
learned = L.learned_in_distribution(df)
learned

# %%
fig = L.plot_by_length(df, "exact_match", "exact match (%, band = min-max over seeds)", "exact match against size",
                       L.FIGURES_DIR / "07_paper_tasks_exact_match.png", train_max=8, scale=100.0, ylim=(-2, 102),
                       xlabel="size n (digits, symbols, terms or variables)")
plt.show()

# %% [markdown]
# How each task's accuracy falls with size: the mean over seeds of the best encoding at each size
# (%), for the sizes the discussion below refers to.

# %%
best_by_size = df.groupby(["task", "encoding", "n"])["exact_match"].mean().groupby(["task", "n"]).max().unstack("n")
(100 * best_by_size[[1, 2, 4, 8, 9, 12, 16]]).round(0)

# %% [markdown]
# **Three of the six tasks are learned at the study's settings and three are not** (the table
# above the figure). Sorting, summation and parity reach 90% at the training sizes with at least
# one encoding. Addition, polynomial evaluation and LEGO do not (the table just above, best
# encoding per size): addition is always right at size 1 and falls with every digit after it (the
# answer is written most significant digit first, without a scratchpad, which the paper also found
# hard), to 0% at every test size; polynomial evaluation falls with every added term towards the
# 10% of guessing a digit; LEGO is solved for chains of one or two variables and falls towards
# 50%, guessing a sign, beyond. Parity is learned in distribution but falls towards 50%, guessing
# between two words, a few sizes past it. For these three
# the study's model and 5,000 steps, enough for copy and reverse, are not enough; the issue allows
# a larger model or more steps for such a task only, within twice the compute of 18 copy runs, and
# that is the next step. Until then they cannot rank the encodings, and the headline below leaves
# them out.
#
# ## The ranking across tasks
#
# The paper's mean reciprocal rank over (task, seed) columns, each task at its own test sizes
# (L+1 to 2L), with copy and reverse on the same three seeds. It is shown over every task with
# records, and over the learned tasks alone (the headline), with a bootstrap over seeds and over
# columns as in notebook 04. A (task, seed) column that lacks an encoding's run is left out.

# %%
grid = L.exact_match_frame(L.load_grid(L.grid(seeds=range(3))))
every = pd.concat([grid, df], ignore_index=True)
headline = every[every["task"].isin(["copy", "reverse", *learned.index[learned["learned"]]])]
paper = pd.Series(L.paper_figures()["mean_reciprocal_rank_no_scratchpad"])
table = pd.DataFrame({"paper (10 tasks)": paper,
                      "ours, every task with records": L.mean_reciprocal_rank(every, None),
                      "ours, learned tasks (headline)": L.mean_reciprocal_rank(headline, None)})
print("headline tasks:", ", ".join(sorted(headline["task"].unique())))
table.rename(index=L.label).round(3)

# %%
for what, frame in {"every task with records": every, "learned tasks": headline}.items():
    schemes = {"seeds": L.mrr_units(frame, "seed", None), "columns": L.mrr_units(frame, "column", None)}
    print(f"{what}:")
    print("  " + "\n  ".join(L.ranking_claims(schemes)))

# %%
tasks = ", ".join(sorted(headline["task"].unique()))
fig = L.plot_mrr(L.mrr_units(headline, "column", None), L.paper_figures()["mean_reciprocal_rank_no_scratchpad"],
                 f"Mean reciprocal rank over the learned tasks\n({tasks}; 3 seeds each)",
                 L.FIGURES_DIR / "07_mrr_learned_tasks.png")
plt.show()

# %% [markdown]
# ## Per task, beside the paper
#
# Mean exact match over the test sizes (9-16; 17-32 for copy and reverse), mean over 3 seeds, and
# the paper's figure where it gives one (copy, reverse, and addition without scratchpad).

# %%
per_task = L.test_rows(every, None).groupby(["task", "encoding"])["exact_match"].mean().unstack("task")
pd.concat({"ours": per_task, "paper": L.paper_test_accuracy(per_task.columns)}, axis=1).rename(index=L.label).round(3)

# %% [markdown]
# **What the ranking says.** Over the tasks that are learned (copy, reverse, sorting, summation,
# parity; 3 seeds each), NoPE has the highest mean reciprocal rank, but it is **not
# distinguishable here** from ALiBi under the column bootstrap (the claims printed above); ALiBi
# ranks above T5 in at least 95% of resamples under both schemes, which **disagrees with the
# paper's ten-task order** (NoPE > T5 > ALiBi > Rotary > APE), as it did on copy and reverse alone
# (notebook 04). RoPE and the absolute encodings are at the bottom, as in the paper, but not
# distinguishable from one another here (nor RoPE from T5). The tasks differ
# widely: on sorting NoPE keeps almost all of its accuracy up to twice the training size, far
# ahead of every other encoding, while on parity the order is different again (the per-task table
# and the claims per task below). Our headline covers five tasks against the paper's ten, three
# seeds, and a far smaller model; it is the paper's statistic, not its setting.

# %%
for name in learned.index[learned["learned"]]:
    print(f"{name}, test sizes 9-16, bootstrap over seeds:")
    print("  " + "\n  ".join(L.ranking_claims({"seeds": L.accuracy_units(df, name, None)})))

