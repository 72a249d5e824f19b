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
# # 11 · Addition that generalizes
#
# The paper's models do not extrapolate addition (notebook 07: its NoPE model's out-of-distribution
# exact match is printed below, from its result files), and neither do the study's own. Later work
# moved addition far: position coupling (Cho et al. 2024), Abacus embeddings (McLeish et al.
# 2024), reversed answers with index hints and randomized positions (Zhou et al. 2024). This
# chapter does it at laptop scale, for the paper's hardest primitive task.
#
# **The goal.** A configuration trained on operands of at most 8 digits (the paper's training
# range) that holds at least 95% exact match at 16 digits (2×) and at least 90% at 32 digits (4×),
# on all three seeds, with at least 99% in distribution; then the longest length it holds, tried
# up to 64 digits (8×). Exact match is the study's everywhere: the whole answer, greedy, from the
# prompt alone. Every model here is the study's (3 layers, d = 64, 4 heads, 5,000 steps at batch
# 64) unless its row says otherwise; each size is scored on 256 sums of the evaluation seed.

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

import lengen_helpers as L

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 60)
paper_nope = L.paper_figures()["ood_exact_match_other_tasks"]["addition"]["nope"]
print(f"The paper's addition, NoPE: {100 * paper_nope:.1f}% exact match out of distribution (mean of 3 seeds)")

# %% [markdown]
# ## The ingredients, each an option of the module
#
# - **The answer least significant digit first** (`task_options={"answer": "lsd"}`), with both
#   operands written with n digits, zero padded (the `equal` format): each answer digit then needs
#   only its own column and the carry from the column below, both already read.
# - **Digit places as positions** (`digit_places=P`, section 18): every digit sits at its place in
#   its number (1 = units), and the query that predicts an answer digit sits at the place of that
#   digit, so a column's two operand digits and its answer share one position at any length
#   (position coupling; with the learned table, an Abacus embedding). One random offset per
#   sequence, below P = 100, so that every position a 64-digit sum reads is trained at 8 digits.
# - **A window over places** (`attention_window=W`): a query attends only to keys within W
#   positions of its own, which with places means within W columns. This ingredient came last,
#   from the pilot below.
# - **The encoding**: each of the study's six reads the places (NoPE ignores them; the window is
#   then its only position signal).
#
# One 3-digit sum in each format, each its own draw: the paper's (operands of independent digit
# counts, no leading zeros; the ten-task grid's format), ours (both operands n digits, zero
# padded), and ours as the best configuration reads it (answer reversed, places, this draw's
# offset):

# %%
print("The paper's format (the ten-task grid's), positions 0, 1, ..:")
display(L.places_example(L.make_run("addition", "nope", task_options={"format": "paper"}, eval_max_len=16)))
print("Ours, answer most significant digit first, positions 0, 1, ..:")
display(L.places_example(L.addition_run("msd", "rope")))
print("Ours, least significant digit first, digit places, one random offset:")
display(L.places_example(L.addition_run(*L.ADDITION_BEST)))

# %% [markdown]
# ## The pilot, in the order it was tried
#
# Each row is one run (seed 0) unless it says otherwise; the compute is in copy runs (one
# 5,000-step copy run of the study's model), the wall time is this machine's with other training
# beside it.

# %%
copy_run = L.copy_run_flops()
table = L.addition_table(copy_run)
with pd.option_context("display.max_colwidth", None):  # the runs in words, ingredients every run shares named once
    display(L.addition_view(table[table["stage"] == "pilot"], costs=True, name_best=False))

# %% [markdown]
# What the pilot shows, run by run (one seed each: read these as hypotheses):
#
# - **Without places**, RoPE does not learn even the longest training size (8 digits) at this
#   scale, and NoPE learns less. **With places** RoPE learns every training size, and holds a little past
#   them, then falls: at 16 digits a query sees operand digits farther from its own place than any
#   in training, and RoPE's scores at unseen distances are not controlled.
# - **The trained position signals stall.** The learned table and T5's buckets stay on a loss
#   plateau at the study's settings (the final loss is in the table). For the learned table
#   neither twice the width nor twice the steps moves it, a table started at the token
#   embeddings' scale does worse, and batch 256 moves it only part of the way. Bidirectional T5
#   learns once the learning rate is tripled. A hypothesis for why: Adam moves each bias by at
#   most the learning rate per step, so under the study's rate and cosine decay a bias can change
#   by only a few logits in 5,000 steps.
# - **Bidirectional T5 with bounded buckets** (every key 6 or more places away shares its side's
#   last bucket, trained at 7-8 digits) sees no new distance at any length, and still falls.
#   Where its answers go wrong at 16 digits says why:

# %%
t5 = next(
    c for c in L.addition_pilot() if c.encoding == "t5" and c.lr == 3e-3 and not c.model.option("attention_window")
)
accuracy = L.answer_token_accuracy(L.load_run_model(t5, L.ADDITION_DIR), t5.make_task(), 16)
print("Bidirectional T5 (lr 3e-3), 16-digit sums: teacher-forced accuracy (%) of each answer token")
cells = [f"{token.replace('digit ', 'd')}: {100 * v:3.0f}" for token, v in accuracy.items()]
for i in range(0, len(cells), 9):
    print("  " + "  ".join(cells[i : i + 9]))

# %% [markdown]
# The low and middle digits fail at a similar rate, though their columns look exactly as at 8
# digits; only the top few do better, and the EOS decision fails almost always. The hypothesis:
# with more digits, more keys share the far buckets, and their summed attention drowns the
# column's own digits (the dilution notebook 09 met in copy). The window removes those keys:
# with W = 2 a query sees five columns (its own, the two below, the carry's among them, and the
# two above), at 64 digits as at 8.

# %% [markdown]
# ## The goal, per seed
#
# The best configuration, answer least significant digit first + places + a window of 2, with
# RoPE, on three seeds:

# %%
goal = L.addition_goal()
display(goal.round(1))
met = bool(goal["trained"].all() and goal.filter(like=">=").all(axis=None))
print(f"Goal met on all {len(goal)} seeds: {met}")
if goal["trained"].all():
    held = int(goal["holds to (digits)"].min())
    print(f"Longest size held at >= 90% at every size up to it, tried to 64 digits: {held} (worst seed)")

# %%
curves, grid = L.addition_curves(), L.ten_task_addition_curves()
panels = L.addition_length_panels(curves)  # what each panel draws: the pilot's learned arms, the ablation's
fig = L.plot_addition_lengths(panels, grid, paper_nope, L.FIGURES_DIR / "11_addition_lengths.png")
plt.show()

# %% [markdown]
# The best configuration (thick, the band its seeds' range) in every panel, beside: (a) the
# pilot's arms that learned in distribution (dotted: no window; the table above has every run, at
# 9-64 digits); (b) the ten-task grid's addition, each encoding the mean over its 3 seeds: the
# paper's format, a 6-layer model, 10,000 steps at learning rate 2e-3, scored to 24 digits
# (notebook 07); (c) and (d) the ablation below, the same recipe with another encoding, and RoPE
# with one ingredient changed (drawn in colours no encoding takes, since they name no encoding).
#
# ## Which ingredient carries the length
#
# Each row takes one ingredient away from the best configuration or changes it, seed 0 (the
# runs without places and without the window are the pilot's):

# %%
keep = table["stage"].isin(["seeds", "ablation"]) | ((table["encoding"] == "rope") & (table["settings"] == ""))
with pd.option_context("display.max_colwidth", None):  # each run by what it changes; addition_table has all columns
    display(L.addition_view(table[keep]))

# %% [markdown]
# What the ablation says, one seed per row (read as hypotheses):
#
# - **The answer's order matters.** Written most significant digit first, each digit depends on a
#   carry that may come from far below; the model learns less in distribution and falls with
#   length, with the window or without it.
# - **The window's width matters both ways.** One place on either side holds as two do; four fails
#   just past the training sizes. With four, a query far from both ends of a long sum sees nine
#   full columns, which no sum of at most 8 digits shows it; with two, its full window of five
#   columns occurs in training. The window carries the length only while everything a query can
#   see at test time has been seen in training.
# - **Places alone are not enough** (the pilot's row without the window), and **without places**
#   the window covers neighbouring tokens instead of columns, so a query no longer sees its
#   operands and the model does not learn the task: the two work together.
# - **The encoding matters.** With the window only RoPE (here) and bidirectional T5 at the tripled
#   learning rate (the pilot) learn the task. The others ran at the study's learning rate, and
#   their losses were still falling at 5,000 steps: they may learn it with more steps or a higher
#   rate. NoPE's failure fits a simple hypothesis: the window tells near columns from far ones but
#   not the column below from the column above, which the carry needs. The window also costs two
#   encodings what they had without it: ALiBi and the sinusoidal table learn less in
#   distribution with it than without (the pilot's rows against these).

# %% [markdown]
# ## Where the best model looks, at 32 digits
#
# For each query that writes an answer digit: the mean attention weight on the two operand digits
# of its column, on the two of the column below (where the carry comes from), on the answer
# written so far (its own input token, the previous digit, is among them) and on everything else
# in its window. Heads are named by layer and head, both counted from 0 (L2H3: layer 2, head 3).

# %%
best = L.addition_run(*L.ADDITION_BEST, seed=0)
looks = L.column_attention(L.load_run_model(best, L.ADDITION_DIR), best.make_task(), 32)
fig = L.plot_column_attention(looks, 32, L.FIGURES_DIR / "11_column_attention.png")
plt.show()

# %%
wide = looks.pivot_table(index=["layer", "head"], columns="target", values="weight", sort=False)
top = wide.groupby(level="layer").max()
for layer, row in top.iterrows():
    print(
        f"layer {layer}: the head most on its column {100 * row['its column']:.0f}%, "
        f"most on the column below {100 * row['the column below']:.0f}%"
    )

# %% [markdown]
# Does each answer digit attend to its two operand digits and the carry? In this model, largely
# yes, split across layers: the first layer's heads weigh the column below (the carry's column)
# more than their own, most heads of the later layers weigh their own column most, and one
# last-layer head the column below and the answer so far, whose last token (the previous answer
# digit) fixes the carry together with the column below. Two middle-layer heads weigh the rest
# of the window most (the other columns, and BOS and + where they are in reach). That is one seed
# at one size; the division of labour is a hypothesis, not a mechanism shown.

# %% [markdown]
# ## Sums a uniform sampler almost never draws
#
# The goal above is met on random sums: every digit uniform, as training draws them. A reader
# trying the model would soon type 0 + 0, or 999 + 1, which a uniform sampler almost never
# draws at length. Ten families of sums (`L.TEN_FAMILIES`, module section 18), each drawn at any
# size and scored as every sum is (greedy, from the prompt alone, 256 sums a size), at every size
# to 64 and then every 16th. The configuration below was chosen on these ten; seven further
# families (`L.FURTHER_FAMILIES`) test it after the choice, in *Sums no sampler favours*. One
# example each, written most significant digit first (the model writes its answer the other way
# round):

# %%
families = pd.DataFrame([(f.name, f.says) for f in L.SUM_FAMILIES.values()], columns=["family", "its sums"])
families["judged in"] = ["the goal" if f in L.TEN_FAMILIES else "the further families" for f in families["family"]]
families["an example at 6 digits"] = [L.family_example(f, 6) for f in families["family"]]
with pd.option_context("display.max_colwidth", None):
    display(families.set_index("family"))

# %% [markdown]
# The best configuration above, its three seeds on each family (the worst seed at each size; the
# last column is the first size at which a seed falls below 99%):

# %%
before = {"best above (P = 100)": L.addition_study()[:3]}
L.with_blanks(L.family_table(before).round(1), decimals=1)

# %% [markdown]
# The goal's "every size" holds for random sums only. On the worst seed all zeros fails from 3
# digits and all nines from 4, inside the training range; two short numbers (both short) fail
# from 4; one digit repeated and one operand zero sit near 80% at 64 digits. Nines plus one and
# long carry hold at every size, and carry everywhere first dips below 99% at 56 digits, on one
# seed: a carry through every column is not what breaks it.

# %% [markdown]
# ### Why: queries that see one token share one state
#
# With places and a window of 2, an answer query reads the five columns around its own place.
# In 0 + 0, far from both ends of the sum, every key it can reach is a 0: attention then averages
# equal values whatever its weights, so the query's output cannot depend on where it is, and two
# queries that must answer differently (a 0 and the EOS at the top) get one state. RoPE's place
# signal lives in the scores only, and here the scores have nothing to choose between. Measured
# on seed 0 at 16 digits: for each answer query, the tokens its first layer lets it see and how
# close its last-layer state comes to a query's that must answer otherwise (relative to its norm):

# %%
best0 = L.addition_study()[0]
model, task = L.load_run_model(best0, L.ADDITION_DIR), best0.make_task()
states = {f: L.answer_query_states(model, task, 16, f) for f in ("all zeros", "all nines", "no carry")}
zeros = states["all zeros"]
display(zeros.assign(**{"closest state that must answer otherwise": zeros.iloc[:, -1].round(3)}))

# %%
tolerance = 1e-5
for family, table_ in states.items():
    tied = table_["closest state that must answer otherwise"] < tolerance
    wrong = tied & (table_["right (%)"] < 50)
    print(
        f"{family:>9}: {tied.sum():>2} of {len(table_)} queries within {tolerance:g} of a state that must answer "
        f"otherwise, {wrong.sum():>2} of them wrong on most sums; "
        f"tokens seen by those: {sorted(set(table_['tokens it sees'][tied]))}"
    )

# %% [markdown]
# The hypothesis holds on this model: in 0 + 0 every query from digit 4 up sees one token, and
# the states of twelve (digit 7 up, and EOS) lie within 1e-5 of their norm of a state that must
# answer otherwise; digits 5 to 17 are wrong on every sum (the model stops early), the EOS query
# right. In 9..9 + 9..9 the top
# digit ("1", the carry out) shares its state with the 9s below it and is wrong. Sums with no
# carry, whose digits vary, share no state. The tests check the argument on untrained models,
# for any weights: equal keys give equal states (`tests/test_sum_families.py`), and a marker at
# the top of the number breaks the tie.

# %% [markdown]
# ### The fix, tried
#
# Three changes, each an option, off by default, and tested (`tests/test_sum_families.py`):
#
# - **A marker at the top of the number** (`top_marker=True`): the `+` between the operands sits
#   at the place above the operands' top digit, so a query near the top sees a token no zero
#   column shows, at a distance that says how far the top is. A 3-digit sum as it reads it:

# %%
L.places_example(L.structured_run(top_marker=True))

# %% [markdown]
# - **Operands in runs** (`train_task_options={"operands": "runs"}`): training draws half its
#   operands as runs of repeated digits (each digit repeats the one before with a probability
#   drawn per operand, from almost never to always), half uniform, at 1-8 digits as before. This
#   is a deviation: training now holds sums of repeated digits (all zeros and all nines among
#   them) and zero-padded operands, so those families are no longer unseen. Long carry, carry
#   everywhere, no carry and nines plus one are not drawn for: they appear at the rate runs give
#   them by chance.
# - **Twice the steps** (10,000).
#
# Every run below has P = 160 places, so that a 128-digit sum (places up to 131, plus the
# offset) reads only trained positions, and is scored to 128 digits. The pilot, seed 0: per
# family, the lowest exact match over every size scored (1-64, then every 16th to 128) and the
# size where it is lowest:

# %%
marker, marker_runs, plain = L.structured_pilot()
arms = {"P = 160 alone": [plain], "+ above the top digit": [marker]}
arms["+ above the top digit, operands in runs"] = [marker_runs]
L.family_lowest(arms).round(1)

# %% [markdown]
# Where the marker's long carries go wrong, at 64 digits: each sum's first wrong answer token
# (the one greedy decoding writes first), by what it should be and what the model writes:

# %%
L.family_errors(L.load_run_model(marker, L.ADDITION_DIR), marker.make_task(), 64, "long carry")

# %% [markdown]
# The marker alone, the pilot's first choice, on seeds 1 and 2 against the goal (the lowest over
# random sums and every family, at the sizes to 64 and at 128 digits):

# %%
first_runs = [L.structured_run(seed=s, **L.STRUCTURED_FIRST) for s in (1, 2)]
first = L.structured_goal(first_runs)
records_ = [L.read_record(L.record_path(L.ADDITION_DIR, c)) for c in first_runs]
first["final training loss"] = [r["loss_curve"]["mean_loss"][-1] for r in records_]
first.round(1).assign(**{"final training loss": first["final training loss"].round(3)})

# %% [markdown]
# On seed 0 the marker mends what the shared state broke: all zeros, all nines and one digit
# repeated hold 100% at every size to 128, and the padded families at least 99.2%. It costs
# long carry, though: its lowest is 91.8% (at 128 digits), where P = 160 without it never fell
# below 98.4%. The long carries it gets wrong at 64 digits go wrong one way (the table above): a
# column whose digits sum to 9 receives the carry from below and should write 0, and the model
# writes 9, as if no carry came. Operands in runs hold long
# carry to 98.0% and everything else to 99.2% or more, the best arm of the pilot, but below the
# goal. The marker alone on two more seeds says more than the pilot could: seed 1 does not learn
# addition (it scores 0% on random sums from 6 digits on, and its training loss ends at 1.2,
# seed 2's at 0.0), and seed 2 learns it but fails the padded families (the lowest,
# both short, 60.2% at 46 digits). Hence the second choice: operands in runs, and twice the
# steps, for the seed that did not leave its plateau.

# %% [markdown]
# ### The chosen configuration, three seeds
#
# The marker, operands in runs, 10,000 steps (`STRUCTURED_BEST`), each seed against the goal:
# at least 99% on random sums and every family at every size to 64, and at least 95% at 128
# digits (16 times the longest training size):

# %%
chosen = [L.structured_run(seed=s, **L.STRUCTURED_BEST) for s in range(3)]
goal_structured = L.structured_goal(chosen)
display(goal_structured.round(1))
reached = goal_structured["trained"].all() and goal_structured.filter(like=">=").all(axis=None)
print(f"Goal met on all {len(goal_structured)} seeds: {bool(reached)}")

# %%
L.with_blanks(L.family_table({"chosen": chosen}, sizes=(1, 2, 3, 4, 8, 16, 32, 64, 96, 128)).round(1), decimals=1)

# %% [markdown]
# The configuration above and the chosen one, three seeds each: random sums (the mean, with the
# seeds' range), and at each size the lowest score over the ten families and the seeds (the
# configuration above was scored to 64 digits):

# %%
compared = {"the best configuration above (P = 100)": L.addition_study()[:3]}
compared["+ above the top digit, operands in runs, 10,000 steps (P = 160)"] = chosen
places = "P: the number of digit places, the range of positions a digit's place is numbered in"
fig = L.plot_structured(compared, L.FIGURES_DIR / "11_structured_sums.png", note=places)
plt.show()

# %% [markdown]
# **All three seeds meet the goal.** At every size from 1 to 64 digits, on random sums and on
# each of the ten families, the lowest exact match is 99.2% (seed 0, random sums at 33 digits);
# at 128 digits, 16 times the longest training size, the lowest is 98.8% (seed 1, no carry).
# The families that broke the configuration above (all zeros, all nines, both short) hold 100%
# at 128 digits on every seed, and long carry, which the marker alone lost, holds 100% too.
#
# What each change does is measured on one seed each: the marker removes the shared state
# (the test on untrained models says why it must), and operands in runs, at 5,000 steps, hold
# the padded families and most of long carry (the pilot). Training now sees repeated digits and
# zero padding, so the repeated and padded families test length there, not unseen kinds of sum;
# the carry families (long carry, carry everywhere, nines plus one, no carry) are not drawn for,
# and hold as well.
#
# Which of the second choice's two changes, operands in runs or twice the steps, brought seeds 1
# and 2 to the goal: the marker with operands in runs at the first choice's 5,000 steps (seed 0
# at 5,000 steps is the pilot's second arm), against the goal as above:

# %%
at_5000 = [L.structured_pilot()[1], *L.structured_steps_ablation()]
steps = L.structured_goal(at_5000)
steps["final training loss"] = [L.read_record(L.record_path(L.ADDITION_DIR, c))["loss_curve"]["mean_loss"][-1]
                                for c in at_5000]
steps.round(1).assign(**{"final training loss": steps["final training loss"].round(3)})

# %% [markdown]
# At 5,000 steps the marker with operands in runs meets the goal on seeds 1 and 2, seed 1 off
# the plateau the marker alone left it on: operands in runs, not the doubled steps, brought those
# two seeds to the goal. Seed 0 misses it at 5,000 steps by long carry alone (98.4% at 60
# digits), which the doubled steps lift above 99%. One seed each: hypotheses.

# %% [markdown]
# ## Sums no sampler favours, and the carry rule column by column
#
# The ten families above were the ones the configuration was chosen on. Seven further families
# (`L.FURTHER_FAMILIES`) test sums that neither the uniform sampler nor the runs of repeated digits
# favour: every digit 0 or 9; every digit one of two, a pair drawn per sum from the 45; one carry
# among zeros; one carry passed up through nines; digits skewed to one value (0.8 of them); a
# number added to itself; and each operand's digits from a pair of its own (four digit values in
# most sums, beyond the digit-set training of the last section). The chosen configuration's three
# seeds on each, scored as above (the
# lowest seed at each size, %; the last column the first size at which a seed falls below 99%):

# %%
further = L.family_table({"chosen": chosen}, sizes=(1, 2, 4, 8, 16, 32, 64, 128), families=L.FURTHER_FAMILIES)
L.with_blanks(further.droplevel("configuration").drop(index="random").round(1))

# %%
lowest_further = L.family_lowest({"chosen": chosen}, families=L.FURTHER_FAMILIES)["chosen"].drop(index="random")
L.with_blanks(lowest_further.round(1))

# %% [markdown]
# Where do these sums go wrong? A sum is right only if every column is. Under teacher forcing each
# answer digit is the model's decision for one column, given the true digits before it (as greedy
# decoding meets it until its first error). A column's own two digits decide its kind: they make a
# carry (they sum to 10 or more), pass one on (exactly 9: its digit and its carry out hang on the
# carry in) or stop it (8 or less); its carry in is the column below's carry out. Digits from
# {0, 9} make half the columns pass a carry on (9 + 0), a quarter make one (9 + 9) and a quarter
# stop it (0 + 0); uniform digits make one column in ten pass it on. The share of digits wrong per
# kind of column and carry in, at 64 digits, 256 sums of each draw, for each seed:

# %%
draws = {"zeros and nines": "zeros and nines", "uniform digits": None}
decisions = L.column_decisions_by_draw(chosen, draws, 64)
columns = L.column_tables_by_draw(decisions)
L.wrong_by_draw(columns).round(2)

# %%
fig = L.plot_column_errors(columns, L.FIGURES_DIR / "11_column_errors.png",
                           title=f"The chosen configuration, {len(chosen)} seeds: digits wrong (teacher forced) "
                                 "at 64 digits, 256 sums of each draw")
plt.show()

# %% [markdown]
# And by what the window shows below the column (the column below's kind), on the zeros and nines
# (digits wrong, %; the number of digits of each kind is the same for every seed):

# %%
by_below = L.column_error_table({s: d for (n, s), d in decisions.items() if n == "zeros and nines"},
                                by=("kind", "carry in", "below"))
below = by_below.xs("wrong (%)", axis=1, level=1).assign(digits=by_below[("seed 0", "digits")])
below[below.drop(columns="digits").max(axis=1) > 0].round(2)

# %% [markdown]
# **The carry rule is not exact.** With every digit 0 or 9 the worst seed falls below 99% from 5
# digits, inside the training range (92.2% at 8), and to 10.5% at its lowest (seed 0, 112
# digits). One carry among zeros fails from 5 digits on one seed (seed 1, lowest 75.8%; seeds 0
# and 2 hold 100%), a number added to itself from 21 digits (94.1% at 128), two-valued digits
# from 21 (97.7% at its lowest); one carry passed up through nines holds 100%, skewed digits
# 99.6% and a pair per operand 99.2%. So "right on every input" holds for none of the three seeds.
#
# Column by column at 64 digits, no digit of any kind is wrong on uniform digits; on the zeros
# and nines the wrong digits sit mostly where a carry meets a column of 0 + 0 (stops it, carry in
# 1: 4.7%, 2.8% and 1.6% of those digits on seeds 0, 1 and 2) and, on seed 0, where 9 + 9 gets no
# carry in (4.7%). One reading would be that errors enter where a column's carry in cannot be
# seen in the window (its column below sums to 9 and passes on a carry from further down, which
# the model must read from its own previous digit). The table by the column below does not
# support it alone: a 0 + 0 column above a 9 + 9 column, whose carry the window shows, is wrong in
# 4.3%, 5.5% and 2.1% of cases, as often as above a column that passes a carry on. Where the rule
# breaks is measured here; why is not.

# %% [markdown]
# ## Towards an exact carry rule
#
# Each change is tried on seed 0, the seed that fails most on zeros and nines, one at a time
# (`L.EXACTNESS_TRIES`): twice the steps (20,000); a fourth layer; and the training mixture. The
# wrong digits above sit where a carry reaches a column of 0 + 0. How often a column of the
# training sums shows that view, by the distribution training draws from (20,000 sums of 8
# digits, `L.training_carry_views`):

# %%
views = L.training_carry_views()
views.map(lambda v: f"1 column in {1 / v:.0f}").to_frame()

# %% [markdown]
# Operands in runs show it less often than uniform digits. The mixture (`operands="mixed"`) draws
# a third of its training sums uniformly, a third in runs and a third sparse: each digit 0 with
# one probability per sum, drawn uniformly from 0 to 1, else uniform. Sparse sums are a deviation
# of the kind runs are: zeros with a carry among them, which the families *one carry among zeros*
# and *both short* test, are now drawn for at 1-8 digits; digits only 0 or 9 and the other
# two-valued sets are not. Each try against the goal of this section, at least 99% on random sums
# and on all 17 families at every size scored (here to 128 digits), and the lowest per family:

# %%
tried = {"chosen": L.structured_run(seed=0, **L.STRUCTURED_BEST)}
tried |= dict(zip(["20,000 steps", "4 layers", "the mixture"], L.exactness_tries()))
tries_goal = L.exactness_goal(list(tried.values()))
tries_goal.index = list(tried)
display(tries_goal.round(1))
L.with_blanks(L.family_lowest({k: [c] for k, c in tried.items()}, families=tuple(L.SUM_FAMILIES)).round(1))

# %% [markdown]
# Column by column, as above: the share of digits wrong (%) per kind of column and carry in, at
# 64 digits, 256 sums of every digit 0 or 9, for each try:

# %%
try_decisions = {}
for name, cfg in tried.items():
    sums = L.StructuredAddition("zeros and nines", **cfg.make_task().format)
    try_decisions[name] = L.run_column_decisions(cfg, 64, sums)
L.column_error_table(try_decisions).xs("wrong (%)", axis=1, level=1).round(2)

# %% [markdown]
# Twice the steps and a fourth layer each lift every digit 0 or 9 (its lowest from 10.5% to 68.4%
# and 61.3%) without making the rule exact: more cells fall short of 99% with 20,000 steps than
# without (144 against 112; one carry among zeros now falls to 94.1% at 63 digits), and with 4
# layers the carries dropped into a column of 0 + 0 remain (2.95% of those digits wrong at 64
# digits) where the other kinds of error go. Trained on the mixture, every family holds 100% at
# every size scored to 128 digits, and no digit of any kind is wrong at 64 digits; its lowest cell
# is random sums at 37 digits, 99.6% (one sum of 256). The mixture is the change kept; one seed
# each, so which change works is a hypothesis until more seeds are trained.

# %% [markdown]
# ### The mixture on three seeds, to 256 digits
#
# The mixture on seeds 0, 1 and 2 (`L.EXACT_BEST`), trained as before on 1-8 digits, with room
# for 256 digits (32 times the longest training size: a sum's places reach 259, so P = 320, the
# ratio to the longest size scored kept as before) and scored at every size to 256 on random sums
# and every 16th from 64 on the 17 families. Against the goal, at least 99% everywhere on every
# seed:

# %%
verdict_exact = L.exactness_verdict([L.exact_run(seed=s) for s in range(3)])
display(verdict_exact.goal.round(1))
print(verdict_exact.statement())

# %%
sizes_256 = (1, 2, 4, 8, 16, 32, 64, 128, 192, 256)
exact = verdict_exact.trained
verdict_exact.families("the mixture", sizes_256)

# %% [markdown]
# Beyond every sampler: each of the 45 pairs of digits on its own, every digit of both operands
# one of the two (`L.DigitSetAddition`; the family *two digits* draws one pair per sum), 256 sums
# per pair, size and seed, scored from the saved weights (`L.digit_pair_scores`, cached in
# `results/addition/digit_pairs.csv`). Per size, the lowest pair over the seeds:

# %%
pairs = L.digit_pair_scores(exact)
L.digit_pair_table(pairs).round(1)

# %% [markdown]
# Column by column at 256 digits, the three seeds, on every digit 0 or 9 and on uniform digits
# (digits wrong, %):

# %%
exact_columns = L.column_tables_by_draw(L.column_decisions_by_draw(exact, draws, 256))
L.wrong_by_draw(exact_columns).round(2)

# %%
compared_exact = {"the chosen configuration (P = 160)": chosen, "trained on the mixture (P = 320)": exact}
fig = L.plot_structured(compared_exact, L.FIGURES_DIR / "11_exact_sums.png", note=places, families=L.SUM_FAMILIES)
plt.show()

# %% [markdown]
# **Exact on one seed of three.** Seed 2 is right on every sum tested: random sums and all 17
# families at every size scored from 1 to 256 digits, 32 times the longest training size, and
# each of the 45 digit pairs at 8, 64, 128 and 256 digits. The other two seeds are not. Seed 0
# falls with every digit 0 or 9 from 15 digits on (91.8% at 64, 68.8% at 256), where the same
# mixture at P = 160 held it at 100% to 128 digits; at 256 digits its wrong digits are now 9 + 9
# columns with a carry in (1.15% of them), not carries dropped into 0 + 0. Seed 1 holds every
# digit 0 or 9 at 100% but falls on the pair {5, 9}, already inside the training range (98.8% at 8
# digits, 61.7% at 256), on a number added to itself (96.5% at 192 digits), and once each on
# random sums (98.8% at 143 digits) and on a pair per operand (98.8% at 51). Every column of a
# {5, 9} sum makes a carry, yet *carry everywhere* (every column's digits sum to 10 or more, the
# digits otherwise uniform) holds 100% on every seed: the pair is a kind of sum no family drew.
# The goal of this section, at least 99% at every size to 256 on every seed, is met on one seed,
# and so is the weaker one (99% to 64 digits, 95% beyond): seed 1 is under 99% at 17 digits (a
# number added to itself, 98.8%), seed 0 under 95% at 32. Whether the wider range of places
# (P = 320) or the run's chance made seed 0 at P = 320 differ from seed 0 at P = 160 cannot be
# told from one run each.

# %% [markdown]
# ### A fourth way: digits from a small set
#
# Both misses are digit pairs, sums of two digit values, which uniform digits show almost never
# and the mixture seldom: {0, 9} alternates columns that pass a carry on (0 + 9) with columns that
# stop it (0 + 0) and make one (9 + 9); in {5, 9} every column makes a carry. A fourth way of
# drawing the training sums (`operands="mixed-sets"`, `L.DIGIT_SETS`) takes a quarter of them from
# a small digit set per sum: 2 or 3 digit values, each digit of both operands uniform over them
# (`L.set_digits`); the other three quarters are drawn as in the mixture. What each training
# distribution shows at 8 digits (%, 20,000 sums, `L.training_chain_views`):

# %%
L.training_chain_views().round(2)

# %% [markdown]
# It favours what it draws: at 1-8 digits the families *zeros and nines* and *two digits* and the
# 45 digit pairs are now in training, so from here they test length alone. Beyond it stay a pair
# per operand (four digit values in most sums), the families that fix each column's kind (*long
# carry*, *carry everywhere*, *no carry*, *one carry into nines*), *skewed digits* and *equal
# operands*. Tried on seed 0 first, as each change before, with room for 256 digits (P = 320),
# then on seeds 1 and 2; against the same goal:

# %%
verdict_sets = L.exactness_verdict([L.exact_run(seed=s, **L.DIGIT_SETS) for s in range(3)])
display(verdict_sets.goal.round(1))
print(verdict_sets.statement())

# %%
trained_sets = verdict_sets.trained
verdict_sets.families("digit sets", sizes_256)

# %% [markdown]
# The 45 digit pairs, per size the lowest pair over the seeds trained, and column by column at
# 256 digits on every digit 0 or 9 and on uniform digits (digits wrong, %):

# %%
L.digit_pair_table(L.digit_pair_scores(trained_sets)).round(1)

# %%
sets_columns = L.column_tables_by_draw(L.column_decisions_by_draw(trained_sets, draws, 256))
L.wrong_by_draw(sets_columns).round(2)

# %%
compared_sets = {"trained on the mixture (P = 320)": exact, "trained with digit sets (P = 320)": trained_sets}
fig = L.plot_structured(compared_sets, L.FIGURES_DIR / "11_digit_sets.png", note=places, families=L.SUM_FAMILIES)
plt.show()

# %% [markdown]
# **At least 98.4% everywhere on three seeds, 99% on two; right on every sum on none.** Trained
# with digit sets, every seed holds random sums and 16 of the 17 families at 99.6% or more at
# every size scored from 1 to 256 digits: on seed 0, whose every digit 0 or 9 fell to 68.8% with
# the mixture alone, that family and the 45 digit pairs are now at 100% at every size scored, and
# column by column at 256 digits no digit is wrong, on the zeros and nines or on uniform digits,
# on any seed. The pairs and the zeros and nines are in this training at 1-8 digits, so this shows
# the rule carried to 32 times the training length on them, not on sums training never drew;
# beyond what it draws, a pair per operand, *skewed digits* and the families that fix each
# column's kind hold 99.6% or more. The one family under 100% on every seed is a number added to
# itself, in no sampler: 98.4% at 112 digits on seed 0 (4 sums of 256 wrong; that seed's one cell
# under 99%), 99.2% at 224 on seed 1 and at 96 on seed 2. The 99% goal at every size to 256 holds
# on seeds 1 and 2, not on seed 0; the weaker one (99% to 64 digits, 95% beyond) holds on all
# three. "Right on every sum tested" holds for no seed trained with digit sets, and for seed 2 of
# the mixture. One further try per seed, so whether digit sets or chance lift seed 0's zeros and
# nines is a hypothesis that more seeds would test.

# %% [markdown]
# ### Where seed 0 misses, and a narrower window
#
# Seed 0's wrong digits on a number added to itself, column by column: 512 sums at each of 96,
# 112, 128, 192 and 256 digits, teacher-forced (`L.column_decisions`), each wrong digit named by
# its column's two digits, those of the two columns below it, and its carry in
# (`L.wrong_digit_views`; "top" is the carry out's column). What the weights decide column by
# column, here and above, is cached in `results/addition/columns.csv` (`L.run_column_decisions`):

# %%
seed0, a_plus_a_sizes = trained_sets[0], (96, 112, 128, 192, 256)
a_plus_a = L.StructuredAddition("equal operands", **seed0.make_task().format)
views0 = pd.concat(
    [L.wrong_digit_views(L.run_column_decisions(seed0, n, a_plus_a, count=512)) for n in a_plus_a_sizes]
)
views0.groupby(list(views0.columns[:-1]), as_index=False).sum().sort_values("wrong digits", ascending=False)

# %% [markdown]
# Eleven of the twelve wrong digits sit in a column 9 + 9 whose carry in comes from 8 + 8, itself
# carried into from 5 + 5; the twelfth in a column 3 + 3 above 9 + 9 above 5 + 5: in both, 5 + 5
# two columns below. The carry into a column needs only the column below and the model's own
# previous digit; the column two below is in view because the window spans 2 places. Whether that
# view alone is the cause is tested apart from the rest of the sum: each view planted at a random place in
# random sums (`L.PlantedAddition`; `L.CARRY_PLANTS`, the top column first), 512 sums per size,
# exact match (%), the three digit-set seeds (`L.planted_scores`, cached in
# `results/addition/planted.csv`):

# %%
(100 * L.planted_scores(trained_sets, L.CARRY_PLANTS, (16, 64, 128))).round(1)

# %% [markdown]
# On seed 0 the view misses in random sums too (99.0-99.4%), more in a number added to itself
# (97.3-99.4%); with 4 + 6 two below (the same sum, 10), 6 + 6 two below, or 7 + 9 below (the same
# sum, 16) it is right on every sum, so the digits of the columns below sway the answer, not only
# their sums. On seeds 1 and 2 no view is wrong on more than one sum of 512 at any size. A
# window of 1 place (`L.DIGIT_SETS_WINDOW_1`) shows a query its column and the column below, all the
# carry needs, with its own previous digit; it held as two did in the ablation above. Tried on
# seed 0 first, then on seeds 1 and 2, trained and scored as the digit sets were, against the
# same goal:

# %%
verdict_narrow = L.exactness_verdict([L.exact_run(seed=s, **L.DIGIT_SETS_WINDOW_1) for s in range(3)])
display(verdict_narrow.goal.round(1))
print(verdict_narrow.statement())

# %%
trained_narrow = verdict_narrow.trained
verdict_narrow.families("window of 1", sizes_256)

# %% [markdown]
# The 45 digit pairs (the lowest pair over the seeds), the planted views, and column by column at
# 256 digits (digits wrong, %), as for the digit sets:

# %%
L.digit_pair_table(L.digit_pair_scores(trained_narrow)).round(1)

# %%
(100 * L.planted_scores(trained_narrow, L.CARRY_PLANTS, (16, 64, 128))).round(1)

# %%
narrow_columns = L.column_tables_by_draw(L.column_decisions_by_draw(trained_narrow, draws, 256))
L.wrong_by_draw(narrow_columns).round(2)

# %%
compared_narrow = compared_sets | {"digit sets, window of 1 place (P = 320)": trained_narrow}
fig = L.plot_structured(compared_narrow, L.FIGURES_DIR / "11_window_1.png", note=places, families=L.SUM_FAMILIES)
plt.show()

# %% [markdown]
# **Right on every sum scored, on three seeds, to 256 digits.** With a window of 1 place, each
# seed is 100% on random sums and on all 17 families at every size scored from 1 to 256 digits
# (32 times the longest training size), on each of the 45 digit pairs at 8, 64, 128 and 256
# digits, and on every planted view, and column by column at 256 digits no digit is wrong: the
# 99% goal holds on all three seeds, and seed 0's miss is gone. This is what was tested: 256 sums
# per family and size (every size to 64 digits, then every 16th), 256 per digit pair and size,
# 512 per planted view and size. A number added to itself, a pair per operand, skewed digits and
# the families that fix each column's kind stay beyond every sampler; the digit pairs and the
# zeros and nines are in training at 1-8 digits, so on them this shows the rule carried in
# length. That the window, not chance, removed the miss rests on one seed's planted view (wrong
# with 2 places, right with 1): a hypothesis the other seeds, right with either window, cannot
# test.

# %% [markdown]
# ## Any length
#
# With a window of 1 place, the query that writes an answer digit sees only keys within one place
# of its column: the operand digits of its column and of the columns on either side, and the
# answer digits written there. With RoPE, what it computes from them depends only on their
# distances, and inside the window those are the distances of training. Nothing in that
# computation depends on n; only the places the model is given (P = 320 in training) bound the
# sizes it can be asked. So the saved weights are scored with room for 2,100 places
# (`L.load_with_more_places`: the same weights, only `digit_places` raised; `L.with_more_places`
# refuses an absolute encoding, a model without a window and a window as wide as the places
# trained, where more places would change what the model computes). Each seed, 32 sums per draw
# and size (`L.far_scores`, cached in `results/addition/far.csv`): at 512 and 1,000 digits random
# sums, the 17 families and the 45 digit pairs; at 2,000 digits (250 times the longest training
# sum) random sums and the families where earlier configurations missed (`L.HARDEST_DRAWS`).
# Exact match (%) per size and seed, the lowest family and pair beside how many were scored:

# %%
far_narrow = L.far_study(trained_narrow)
display(L.with_blanks(L.far_table(far_narrow).round(1)))
count = L.FAR_COUNT
wrong_far = int(round(((1 - far_narrow["exact_match"]) * count).sum()))
print(f"{count * len(far_narrow):,} sums scored at 512-2,000 digits on {far_narrow['seed'].nunique()} seeds, "
      f"{wrong_far} wrong; none wrong of {count} bounds a cell's error rate at "
      f"{100 * (1 - 0.05 ** (1 / count)):.1f}% (95%, one-sided)")

# %% [markdown]
# At 1,000 digits, random sums and each family (%, per seed):

# %%
L.far_by_draw(far_narrow, 1000, L.EVERY_DRAW[: 1 + len(L.SUM_FAMILIES)]).round(1)

# %% [markdown]
# Where one answer digit looks at 1,000 digits: the query that writes column 500 (seed 0, one
# sum of the evaluation seed), its attention per layer and head on the operand digits and the
# answer digits at each place from two below its column to two above (an answer digit sits one
# place above the column it holds: "answer +0" is the query's own token, the digit just written),
# and on every other token (`L.place_attention`):

# %%
seed0_far = L.with_more_places(trained_narrow[0], L.FAR_PLACES)
far_model = L.load_with_more_places(trained_narrow[0], L.FAR_PLACES)
looks_far = L.place_attention(far_model, seed0_far.make_task(), 1000, 500)
beyond = looks_far[(looks_far["kind"] == "other") | (looks_far["offset"].abs() > 1)]["weight"].max()
print(f"largest weight on any key beyond one place of the column: {beyond:.2g}")
fig = L.plot_place_attention(looks_far, 1000, 500, L.FIGURES_DIR / "11_attention_1000_digits.png", " (seed 0)")
plt.show()

# %% [markdown]
# In every layer and head, the weight beyond one place of the column is zero: the window masks it,
# so this is the mechanism, not a finding. What the figure shows is how the three places are used.
# The first layer's heads spread over the operand digits of the column, the one below and the one
# above, and over the answer digits; most heads of the second and third layers weigh the
# column's own operand digits and the digit just written, and two third-layer heads the operand
# digits of the column below and the answer digit two columns down. One sum and one column on
# one seed: a picture of where the answer reads, not a mechanism shown.
#
# The cost of scoring: the scoring here runs the full attention over every key and masks it to
# the window, so its work grows with the square of the length, though the window leaves only a
# small share of the scores unmasked (below); scoring that skipped the keys no query can see
# would grow linearly. Seconds per sum on this machine, seed 0, 8 random sums at each size timed
# one after the other in one run (the median of 3; `L.far_cost`, cached in
# `results/addition/far_cost.csv`), the growth exponent k from the size before (time ~ digits^k),
# and the share of the attention scores the window can see:

# %%
far_cost = L.far_cost(trained_narrow[0], L.FAR_PLACES, (125, 250, 500, 1000, 2000))
L.with_blanks(far_cost.round({"seconds per sum": 2, "growth exponent": 1, "scores the window can see (%)": 2}))

# %% [markdown]
# The window of 2 places beside it (the digit-set runs, `L.DIGIT_SETS`), scored the same way on
# random sums and the 17 families at 512 and 1,000 digits and on random sums at 2,000: whether the
# column two below, which swayed seed 0's answer on a number added to itself at 112 digits,
# still does at these lengths.

# %%
far_wide = L.far_study(trained_sets, {512: L.EVERY_DRAW[:18], 1000: L.EVERY_DRAW[:18], 2000: ("random",)})
L.with_blanks(L.far_table(far_wide).round(1))

# %% [markdown]
# **Right on every sum scored at any length tried, to 2,000 digits, on three seeds.** With a
# window of 1 place and room for 2,100 places, every window-1 seed is right on all 12,576 sums
# scored: random sums, the 17 families and the 45 digit pairs at 512 and 1,000 digits (125 times
# the longest training size), random sums and the four hardest families at 2,000 (250 times). The
# weights are those trained on 1-8 digits with room for 320 places; only the room changed. This
# is a sample, 32 sums per draw, size and seed: a cell with none wrong bounds its error rate only
# at 8.9% (above), and the sizes between those scored are not scored. Why the length does
# not matter is the window: each answer digit reads three places (the figure) at distances that
# training set, so a 2,000-digit sum is, to every query, a sum of a few columns. The window of 2
# places keeps its seed 0's miss: one sum of 32 wrong on a number added to itself at 1,000
# digits (96.9%), where that seed fell to 98.4% at 112 digits, while every other cell of the
# three seeds is right. The scoring costs under half a second a sum at 1,000 digits here and
# about two at 2,000, growing faster than the length as the full attention's share of the work
# grows (the exponent rises from 0.3 to 2.2); it is the scoring that is quadratic, not the rule.

# %% [markdown]
# ## Compute

# %%
trained = table[table["in distribution (%)"].notna()]  # runs with a record
spent = trained.groupby("stage", sort=False)["copy runs"].agg(["count", "sum"])
spent = spent.rename(columns={"count": "runs", "sum": "copy runs"})
spent.loc["all"] = spent.sum()
display(spent.round(1))
print(f"{spent.loc['all', 'copy runs']:.1f} copy runs in all")

# %% [markdown]
# ## Beside the cited results, at their scales
#
# Exact match (%) at each work's longest test size, as each paper words it ("bound": "over" a
# lower bound, "up to" a best case, "reported" where the figure is not restated here); "ratio" is
# the test size over the longest training size; the model each used and what its longest size was
# scored on. Ours tell each digit its place; position coupling and Abacus embeddings couple or
# learn the places; Patriota 2024 feeds its model one column at a time from an outside loop.

# %%
verdicts = {
    "the mixture": ("the same, trained on the mixture", verdict_exact),
    "digit sets": ("the same, trained with digit sets", verdict_sets),
    "window of 1": ("the same, a window of 1 place", verdict_narrow),
}
cited = L.addition_beside_cited(goal, goal_structured, verdicts, far_narrow)
with pd.option_context("display.max_colwidth", None):
    display(L.with_blanks(cited))

# %% [markdown]
# ## What this does and does not show
#
# - The window builds locality into the model: with a narrow enough window, at 64 digits no query
#   sees more keys than in training, and with places no key sits at a distance it has not met.
#   Length generalization then followed for the windows whose full view occurs in training (one
#   and two places), not for four places, though that model too learned every training size. It
#   is an inductive bias chosen for this task's structure, as position coupling is: it tells
#   nothing about an encoding's length generalization on a task whose dependencies are not local.
# - 256 digits is the longest size trained for, by the mixture's and the digit sets' runs (P =
#   320 places; a sum of n digits uses places up to n + 3, plus its offset); the runs before them
#   stop at 128 (P = 160). Beyond that, only the window models are scored, with their places
#   raised to 2,100 (at 512, 1,000 and 2,000 digits, 32 sums a cell), which the window and a
#   relative encoding allow and `L.with_more_places` refuses elsewhere. The cited works test at
#   100 to 1,000 digits, with their own models and training, so the comparison above is of
#   ratios, not of scale.
# - Every goal holds for the inputs it was judged on: at each size, 256 random sums and 256 of each
#   family (ten, then 17), and for the mixture, the digit sets and the window of 1 place 256 of
#   each of the 45 digit pairs at four sizes; 512 sums per planted view and size.
#   The further families show the chosen configuration does not hold for every input (the table in
#   *Sums no sampler favours*); the mixture holds on every input tested on one seed of three, and
#   the digit pairs found a failure of another seed that no family drew; with digit sets and a
#   window of 1 place every seed holds on every input tested. The chosen configuration
#   trains on operands in runs, so repeated digits and zero padding are in its training
#   distribution (at 1-8 digits); the mixture adds sparse sums, so carries among zeros are too.
#   Two-valued digits, digits only 0 or 9 among them, are drawn for by neither, but by the digit
#   sets (2 or 3 values per sum); a pair per operand and a number added to itself by none.
# - Compute not counted above: the evaluation at every size scored (part of each run's wall time;
#   31-39 minutes a run to 256 digits), the structured families' scoring of the runs before
#   records kept them and the digit pairs' (from the saved weights), and one T5 run at batch 256
#   stopped at step 500 of 5,000 when the higher learning rate learned. The best configuration's
#   seed 0 is counted with the pilot, where it was first run.
# - The positions depend on the prompt's size and the decoding step only, never on the answer
#   (tested in `tests/test_digit_places.py`); the window is a function of the positions.
# - The ablation and the pilot are one seed each: the order of the encodings with the window is
#   an example, not a ranking.
# - The scratchpad is not an arm here: it has its own study (notebook 10), and digit places are
#   defined for the plain answer only (`place_layout` refuses a scratchpad).
