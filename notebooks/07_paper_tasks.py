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
# The paper ranks the encodings over ten tasks; notebooks 03-05 covered two. Here are the other
# eight, at our scale: **addition, sorting, summation, parity, polynomial evaluation and LEGO**,
# and the two compositional tasks, **SCAN** and **PCFG SET**, generated here from their grammars
# (there is no network to download them). Each is a registered task in `lengen_helpers.py` with a
# seeded generator whose answers the tests check against an independent computation (Python
# integers, `sorted`, SCAN's interpretation rules, ...). As in the paper, each is trained on sizes
# up to its L and tested from L+1 to 2L (shown to 3L where the sequences fit): L = 8 for the
# arithmetic tasks and for PCFG (size = the number of function calls), L = 25 for SCAN (size =
# the number of actions, tested on 26-48). The protocol is the grid's: 256 sequences per size
# from a fixed evaluation seed, exact match of the whole answer and EOS, computed in one
# teacher-forced pass (equal to greedy decoding, tested per task). Six encodings × 3 seeds per
# task, the study's model and 5,000 steps (`python -m lengen_helpers sweep --grid TASK`); a task
# not learned at those settings was retrained with more steps for that task alone (below).
# Everything below is computed from the records in `results/runs/`.

# %%
import matplotlib.pyplot as plt
import pandas as pd

import lengen_helpers as L

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 90)

# %% [markdown]
# ## The tasks, one example each
#
# Where our format differs from the paper's (its public code, McGill-NLP/length-generalization; the
# figures we quote from it are in `results/published/`), the task's docstring says so: ours are
# token sequences without the paper's English wrapping, and addition writes both operands and the
# answer with a fixed number of digits per size.

# %%
TASKS = (*L.PAPER_TASKS, "scan", "pcfg")
examples = []
for name in TASKS:
    task = L.get_task(name)
    n = 4 if task.has_size(4) else task.train_max_size
    tokens, _ = L.make_sequences(task, n, 1, L.eval_generator(name, n, L.RunConfig.eval_seed))
    P, row = task.prompt_length(n), tokens[0].tolist()
    prompt, answer = row[1 : P + 1], [t for t in row[P + 2 :] if t not in (L.EOS, L.PAD)]
    examples.append({"task": name, "size": n, "prompt": " ".join(task.decode(prompt)).rstrip(" _"),
                     "answer": " ".join(task.decode(answer)),
                     "symbols": len(task.symbols), "L": task.train_max_size,
                     "tokens at L": task.sequence_length(task.train_max_size)})
pd.DataFrame(examples).set_index("task")

# %% [markdown]
# ## What has been trained
#
# Every task at the study's settings (5,000 steps), and, for the tasks that were not learned at
# them (next section), the same grid with twice the steps (`L.LONGER_STEPS`; `sweep --grid
# TASK-longer`). The study's rule: a task that is not learned may get more steps or a larger
# model, for all its encodings alike, never for one encoding alone.

# %%
configs = {name: L.task_grid(name) for name in TASKS}
longer = {name: L.task_grid(name, steps=steps) for name, steps in L.LONGER_STEPS.items()}
records, records_longer = {}, {}
for name, cfgs in [*configs.items(), *longer.items()]:
    into = records if cfgs is configs.get(name) else records_longer
    into[name], missing = L.load_available(cfgs)
    absent = f"; missing: {', '.join(missing)}" if missing else ""
    print(f"{name:10s} {cfgs[0].steps:6,d} steps: {len(into[name]):2d} of {len(cfgs)} runs{absent}")
df = L.exact_match_frame([r for rs in records.values() for r in rs])
df_longer = L.exact_match_frame([r for rs in records_longer.values() for r in rs])

# %% [markdown]
# Compute, in copy runs (one copy run: the compute of one 5,000-step copy run of the study's
# model, FLOPs as the module counts them, padding included), against the compute each task was
# allowed, its budget (twice 18 copy runs for the six arithmetic and algorithmic tasks, 2.5 times
# for SCAN and PCFG); and the wall time of each task's sweep as `results/sweeps.jsonl` logged it
# (the sweeps ran on machines of 2 and 16 cores, the `cpus` column, so their wall times do not
# compare).

# %%
copy_run = L.run_compute_flops(L.make_run("copy", "nope", 0), sample_steps=100)
flops = lambda cfgs: sum(L.run_compute_flops(c, sample_steps=100) for c in cfgs) / copy_run  # noqa: E731
budget = {name: 45.0 if name in ("scan", "pcfg") else 36.0 for name in TASKS}
spent = pd.DataFrame({"5,000 steps": {n: flops(c) for n, c in configs.items()},
                      "more steps": {n: flops(c) for n, c in longer.items()}, "budget": budget})
print("compute per task, 18 runs each (copy runs):")
spent.round(1)

# %%
log = L.sweep_log()
one_task = log["tasks"].map(lambda ts: isinstance(ts, list) and len(ts) == 1 and ts[0] in TASKS)
log[one_task][["started", "tasks", "steps", "wall_min", "runs", "trained", "workers", "cpus"]].round(1)

# %% [markdown]
# ## Is each task learned at all?
#
# The bar: a task is learned if some encoding reaches 90% mean exact match (over seeds) at
# the training sizes (1 to L). A task that no encoding learns says nothing about length
# generalization, and is left out of the headline ranking. First at the study's settings, then
# with more steps for the tasks that failed the bar. Where a task's longer grid is complete, its
# runs stand for the task from here on (stated in each table).

# %%
learned_5k = L.learned_in_distribution(df)
learned_more = L.learned_in_distribution(df_longer) if len(df_longer) else learned_5k.iloc[:0]
pd.concat({"5,000 steps": learned_5k, "more steps": learned_more}, axis=1)

# %%
complete = [name for name, cfgs in longer.items() if len(records_longer[name]) == len(cfgs)]
chosen = pd.concat([df[~df["task"].isin(complete)], df_longer[df_longer["task"].isin(complete)]], ignore_index=True)
learned = L.learned_in_distribution(chosen)
print("the ranking uses the longer grid for:", ", ".join(complete) or "no task (none complete)")
learned

# %%
fig = L.plot_by_length(chosen, "exact_match", "exact match (%, band = min-max over seeds)", "exact match against size",
                       L.FIGURES_DIR / "07_paper_tasks_exact_match.png", scale=100.0, ylim=(-2, 102),
                       train_max={t: L.get_task(t).train_max_size for t in TASKS},
                       xlabel="size n (digits, symbols, terms, variables, calls; SCAN: actions)")
plt.show()

# %% [markdown]
# How each arithmetic task's accuracy falls with size: the mean over seeds of the best encoding
# at each size (%), for the sizes the discussion below refers to, at each number of steps.

# %%
by_size = lambda frame: (frame[frame["task"].isin(L.PAPER_TASKS)].groupby(["task", "encoding", "n"])["exact_match"]  # noqa: E731
                         .mean().groupby(["task", "n"]).max().unstack("n")[[1, 2, 4, 8, 9, 12, 16]])
(100 * pd.concat({"5,000 steps": by_size(df), "more steps": by_size(df_longer)} if len(df_longer)
                 else {"5,000 steps": by_size(df)})).round(0)

# %% [markdown]
# **Four of the eight tasks are learned at the study's settings and four are not** (the tables
# above). Sorting, summation, parity and SCAN reach 90% at the training sizes with at least one
# encoding. Addition, polynomial evaluation, LEGO and PCFG do not (the by-size table: best
# encoding per size): addition is always right at size 1 and falls with every digit after it (the
# answer is written most significant digit first, without a scratchpad, which the paper also found
# hard), to 0% at every test size; polynomial evaluation falls with every added term towards the
# 10% of guessing a digit; LEGO is solved for chains of one or two variables and falls towards
# 50%, guessing a sign, beyond; PCFG reaches at best 54.5% over its training sizes. Parity is
# learned in distribution but falls towards 50%, guessing between two words, a few sizes past it.
#
# A task not learned may get a larger model or more steps, for that task alone and within its
# compute budget (the compute table). PCFG's grid already costs 42.0 of its 45 copy
# runs, so it has no room. LEGO was retrained with twice the steps (10,000; 33.2 of its 36 copy
# runs): it changed nothing, the best encoding stays at 78.3% over sizes 1-8 with the same
# plateau by size (chains of one or two variables solved, longer ones guessed), so steps are not
# what it lacks at this model size; a larger model is untried. Its 10,000-step runs stand for it
# from here on (it is still left out of the headline). Addition and polynomial evaluation were
# not retrained for lack of time, though their longer grids (33.1 and 25.5 copy runs) fit their
# budgets: `python -m lengen_helpers sweep --grid addition-longer` (or `polynomial-longer`) runs
# them. Tasks that are not learned cannot rank the encodings, and the headline below leaves them
# out.
#
# ## The ranking across tasks, two ways
#
# **The study's statistic**: six encodings ranked in every (task, seed) column by their mean exact
# match over the task's test sizes (L+1 to 2L), ties sharing their average rank; the reciprocal
# ranks are averaged over each task's seeds, then over tasks, each task weighing the same.
#
# **The paper's statistic, computed its way on our runs** (its aggregate notebook; the rule and
# the columns it shows are in `results/published/paper_mrr_columns.json`): five encodings (it
# trained no learned table), each column's *pooled* test accuracy (every test example alike: for
# SCAN and the paper's addition format, sizes weigh by how many test examples they hold), ties
# broken by the order of its table's rows (RoPE, ALiBi, T5, sinusoidal, NoPE: a tie goes to the
# row listed first, so NoPE loses every tie), over 17 (dataset, split) columns per seed. Copy has
# five split variants there, reverse three and sorting two; we have one of each, so each of our
# tasks stands for its number of the paper's splits (below). Because ties are broken by row order,
# the statistic depends on that order: its range over all 120 orders is given beside it.
#
# **Uncertainty**: a hierarchical bootstrap draws the tasks with replacement, then each drawn
# task's seeds with replacement (a task's seeds belong together; seeds of different tasks are
# unrelated runs). A ranking is stated where it holds in at least 90% of resamples, "not
# distinguishable here" otherwise. Copy and reverse use seeds 0-2, as the other tasks; a
# (task, seed) column that lacks an encoding's run is left out.

# %%
grid = L.exact_match_frame(L.load_grid(L.grid(seeds=range(3))))
every = pd.concat([grid, chosen], ignore_index=True)
headline = every[every["task"].isin(["copy", "reverse", *learned.index[learned["learned"]]])]
print("headline tasks:", ", ".join(sorted(headline["task"].unique())))
frames = {"learned tasks (headline)": headline, "every task with records": every}
study = {k: L.ood_scores(f) for k, f in frames.items()}
pooled = {k: L.ood_scores(f, pooled=True) for k, f in frames.items()}
paper = pd.Series(L.paper_figures()["mean_reciprocal_rank_no_scratchpad"])
table = pd.DataFrame({**{f"study's, {k}": L.study_mrr(v) for k, v in study.items()},
                      **{f"paper's on ours, {k}": L.paper_mrr(v) for k, v in pooled.items()},
                      "paper (its 17 splits)": paper}).sort_values("study's, learned tasks (headline)", ascending=False)
table.rename(index=L.label).round(3)

# %% [markdown]
# How our tasks map onto the paper's 17 splits (the weight of each task in the paper's statistic),
# and the paper's statistic under every order of its rows: its value at the paper's order and the
# lowest and highest over the 120 orders (headline tasks, then every task).

# %%
splits = pd.Series(L.PAPER_SPLITS, name="paper's splits it stands for")
print(", ".join(f"{t}: {n}" for t, n in splits.items()), f"(total {splits.sum()})")
pd.concat({k: L.paper_mrr_over_orders(v) for k, v in pooled.items()}, axis=1).rename(index=L.label).round(3)

# %% [markdown]
# The paper's published figures checked against its statistic as we read it: its notebook shows 18
# of its 51 columns (9 as accuracies, ranked here by its rule, and 9 as reciprocal ranks). The
# other 33 columns must then hold, per encoding, a sum of reciprocal ranks between 33/5 and 33,
# and over the five encodings 33 × (1 + 1/2 + 1/3 + 1/4 + 1/5) if each column ranks all five
# without shared ranks.

# %%
check, rest, implied, expected = L.paper_mrr_check()
within = bool(check["within [n/5, n]"].all())
print(f"other columns: {rest}; their sums of reciprocal ranks add up to {implied} (a strict ranking of five "
      f"in each gives {expected}); every encoding's sum within [{rest}/5, {rest}]: {within}")
check.rename(index=L.label)

# %% [markdown]
# Which rankings hold, by the hierarchical bootstrap (10,000 resamples), for each statistic:

# %%
for what in frames:
    rr_study = L.column_reciprocal_ranks(study[what])
    rr_paper = L.column_reciprocal_ranks(pooled[what], L.PAPER_ROW_ORDER)
    print(f"{what}, the study's statistic:")
    print("  " + "\n  ".join(L.hierarchical_claims(rr_study)))
    print(f"{what}, the paper's statistic (its row order):")
    print("  " + "\n  ".join(L.hierarchical_claims(rr_paper, L.PAPER_SPLITS)))

# %%
tasks = ", ".join(sorted(headline["task"].unique()))
rr = L.column_reciprocal_ranks(study["learned tasks (headline)"])
fig = L.plot_mrr(rr, L.paper_figures()["mean_reciprocal_rank_no_scratchpad"],
                 f"The study's mean reciprocal rank over the learned tasks\n({tasks}; 3 seeds each)",
                 L.FIGURES_DIR / "07_mrr_learned_tasks.png", summary=L.hierarchical_summary(rr),
                 resampled="tasks, then seeds, resampled")
plt.show()

# %% [markdown]
# ## Per task, beside the paper
#
# Mean exact match over the test sizes (L+1 to 2L: 9-16, SCAN 26-48, 17-32 for copy and
# reverse), mean over 3 seeds, and the paper's figure where it gives one (copy, reverse, addition
# without scratchpad, SCAN and PCFG).

# %%
per_task = L.ood_rows(every, None).groupby(["task", "encoding"])["exact_match"].mean().unstack("task")
pd.concat({"ours": per_task, "paper": L.paper_test_accuracy(per_task.columns)}, axis=1).rename(index=L.label).round(3)

# %% [markdown]
# **What the rankings say.** Over the learned tasks (copy, reverse, sorting, summation, parity
# and SCAN; 3 seeds each), both statistics put NoPE first: 0.782 by the study's and 0.816 by the
# paper's computed on our runs, ahead of ALiBi in 92% and 96% of hierarchical resamples. Below it,
# **ALiBi and T5 are not distinguishable here** by either statistic (88% and 62%), so the earlier
# reading "ALiBi > T5" does not survive resampling tasks as well as seeds. By the paper's
# statistic T5 > RoPE (90%) and RoPE > sinusoidal (99%); the second owes something to the
# statistic's tie rule, which hands RoPE, first in the paper's table, every tie at zero (over the
# 120 row orders RoPE's value ranges 0.270-0.286 and sinusoidal's 0.226-0.243, the table above).
# By the study's statistic, with ties shared, T5, RoPE and the absolute encodings are not
# distinguishable from their neighbours.
#
# **Against the paper** (NoPE .687 > T5 .549 > ALiBi .502 > Rotary .330 > APE .215, over its 17
# splits): we agree that NoPE is first and that RoPE and the absolute encoding are last; T5 sits
# below ALiBi in our point estimates, which is not distinguishable here. Like for like, the
# paper's statistic on our runs raises T5 from 0.360 to 0.463 (pooled accuracy, five encodings,
# copy standing for five of the paper's splits: T5 is close to NoPE on copy), so part of the gap
# to the paper's .549 is the statistic and the rest is the models and the tasks (six learned
# tasks of ten here; a far smaller model). The paper's published figures are consistent with its
# statistic as we read it (the check above: its 33 unshown columns rank five encodings without
# shared ranks). Over every task with records, the four not learned included, the order of the
# points is the same, and NoPE ~ ALiBi by the study's statistic (89%).
#
# The tasks differ widely (the per-task table above): on sorting NoPE keeps almost all of its
# accuracy up to twice the training size, ahead of the next encoding (T5) in all 3 seeds; on
# SCAN NoPE is first, ahead of the next (ALiBi) in all 3 seeds, but the paper's T5 (0.799),
# level with its NoPE (0.797), is far weaker here; on parity the order is different again. Per
# task, with 3 seeds, an ordering is stated only where every seed agrees:

# %%
for name in ["copy", "reverse", *learned.index[learned["learned"]]]:
    t = L.get_task(name)
    top = min(2 * t.train_max_size, t.max_size or 2 * t.train_max_size)
    print(f"{name}, test sizes {t.train_max_size + 1}-{top}, neighbours in the order of the mean over 3 seeds:")
    print("  " + "\n  ".join(L.in_every_seed(study["every task with records"], name)))

