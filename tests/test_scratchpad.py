"""Scratchpads (section 17, notebook 10): the paper's five components, each task's steps checked
on hand-worked examples and recomputed on every generated scratchpad, the bound on their length,
and the scores (final answer by greedy decoding with the cache; whole target; steps)."""

import pytest
import torch
from support import tiny as tiny_run

import lengen_helpers as L

SCRATCHPAD_TASKS = ("addition", "summation", "parity", "sorting", "polynomial", "lego")
MARKERS = {"in": "i", "comp": "c", "out": "o", "[": "v", "re": "r"}

# Hand-worked full scratchpads, written from the paper's examples (its processors' output for the
# same prompts) in our symbols: one token per digit, our prompts' own tokens in `in` and `re`.
HAND_WORKED = {
    ("addition", "paper", "5 7 + 6 8"): "in 7 , 8 comp 7 + 8 + carry = 1 5 + 0 = 1 5 out 5 [ carry : 1 ] re 5 + 6 "
    "# in 5 , 6 comp 5 + 6 + carry = 1 1 + 1 = 1 2 out 2 [ carry : 1 ] re + "
    "# in 0 , 0 comp 0 + 0 + carry = 0 + 1 = 1 out 1 [ carry : 0 ] re + thus",
    ("addition", "paper", "5 3 7 + 1 2"): "in 7 , 2 comp 7 + 2 + carry = 9 + 0 = 9 out 9 [ carry : 0 ] re 5 3 + 1 "
    "# in 3 , 1 comp 3 + 1 + carry = 4 + 0 = 4 out 4 [ carry : 0 ] re 5 + 0 "
    "# in 5 , 0 comp 5 + 0 + carry = 5 + 0 = 5 out 5 [ carry : 0 ] re + thus",
    ("summation", None, "3 8 6"): "in 3 comp 3 + sum = 3 + 0 = out 3 [ sum : 3 = 3 ] re 8 6 "
    "# in 8 comp 8 + sum = 8 + 3 = out 1 1 [ sum : 1 1 = 1 ] re 6 "
    "# in 6 comp 6 + sum = 6 + 1 = out 7 [ sum : 7 = 7 ] re thus",
    ("parity", None, "1 0 1 1"): "in 1 comp 1 xor par = 1 xor 0 out 1 [ par : 1 ] re 0 1 1 "
    "# in 0 comp 0 xor par = 0 xor 1 out 1 [ par : 1 ] re 1 1 "
    "# in 1 comp 1 xor par = 1 xor 1 out 0 [ par : 0 ] re 1 "
    "# in 1 comp 1 xor par = 1 xor 0 out 1 [ par : 1 ] re thus",
    ("sorting", None, "11 7 15"): "in 11 comp minimum out 7 re 11 15 # in 11 comp minimum out 11 re 15 "
    "# in 15 comp minimum out 15 re thus",
    (
        "polynomial",
        None,
        "x=2 +2 ^1 -1 ^0 +3 ^2",
    ): "in +2 ^1 comp 2 * 2 ** 1 = 2 * 2 out 4 [ sum : 0 + 4 = 4 ] re -1 ^0 +3 ^2 "
    "# in -1 ^0 comp - 1 * 2 ** 0 = - 1 * 1 out - 1 [ sum : 4 + - 1 = 3 ] re +3 ^2 "
    "# in +3 ^2 comp 3 * 2 ** 2 = 3 * 4 out 1 2 [ sum : 3 + 1 2 = 5 ] re thus",
    ("lego", "paper", "a + 1 b - a c + b d - c c"): "in a comp out + 1 re b - a c + b d - c "
    "# in b comp - a = - + 1 out - 1 re c + b d - c # in c comp + b = + - 1 out - 1 re d - c thus",
    ("lego", None, "c + b a + 1 d - c b - a c"): "in a comp out + 1 re c + b d - c b - a "
    "# in b comp - a = - + 1 out - 1 re c + b d - c # in c comp + b = + - 1 out - 1 re d - c thus",
}


def scratchpad_task(name: str, fmt: str | None = None, components: str | None = None) -> L.WithScratchpad:
    options = {"scratchpad": components or L.STEP_WRITERS[name].components}
    return L.get_task(name, {**options, **({"format": fmt} if fmt else {})})


def only(full: list[str], components: str) -> list[str]:
    """A full scratchpad cut down to `components`, by reading its markers (not the module's code)."""
    kept = []
    for step in " ".join(full[:-1]).split(" # "):  # the last token is "thus"
        out, keep = [], False
        for token in step.split():
            keep = MARKERS[token] in components if token in MARKERS else keep
            out += [token] * keep
        kept.append(out)
    return [t for i, s in enumerate(kept) for t in ["#"] * (i > 0) + s] + ["thus"]


@pytest.mark.parametrize(("task_name", "fmt", "prompt"), list(HAND_WORKED))
def test_hand_worked_scratchpads_for_every_component_set(task_name, fmt, prompt):
    full = HAND_WORKED[task_name, fmt, prompt].split()
    values = L.scratchpad_values(L.STEP_WRITERS[task_name].components)
    assert len(values) == 2 ** len(L.STEP_WRITERS[task_name].components)  # "none" and every non-empty subset
    for components in values[1:]:
        task = scratchpad_task(task_name, fmt, components)
        assert task.scratchpad(prompt.split()) == only(full, components), components


def test_the_component_sets_are_the_papers():
    assert L.scratchpad_values("icovr")[:2] == ("none", "icovr") and "co" in L.scratchpad_values("icovr")
    for name in ("sorting", "lego"):  # the paper writes no intermediate variables for these two
        assert L.STEP_WRITERS[name].components == "icor"
        with pytest.raises(ValueError, match="scratchpad='icovr' is not valid"):
            L.get_task(name, {"scratchpad": "icovr"})
    with pytest.raises(ValueError, match="no option 'scratchpad'"):
        L.get_task("copy", {"scratchpad": "icovr"})


def test_no_scratchpad_is_todays_task():
    for name in SCRATCHPAD_TASKS:
        plain, none = L.get_task(name), L.get_task(name, {"scratchpad": "none"})
        assert type(none) is type(plain) and none.key == plain.key == name and none.symbols == plain.symbols
        a = plain.sample(5, 8, torch.Generator().manual_seed(0))
        b = none.sample(5, 8, torch.Generator().manual_seed(0))
        assert all(torch.equal(x, y) for x, y in zip(a, b))
        cfg = L.RunConfig(task=name, task_options={"scratchpad": "none"}, eval_max_len=24)
        assert cfg.task_options == {} and cfg.hash == L.RunConfig(task=name, eval_max_len=24).hash


def test_records_are_keyed_apart_and_prompts_shared():
    task = scratchpad_task("addition", "paper")
    assert task.key == "addition.paper.scratchpad-icovr" and task.prompt_key == "addition.paper"
    assert L.task_of_key(task.key).format == task.format
    cfg = L.RunConfig(task="addition", task_options={"format": "paper", "scratchpad": "icovr"}, eval_max_len=24)
    assert cfg.name == "addition.paper.scratchpad-icovr-nope-s0"
    assert cfg.hash != L.RunConfig(task="addition", task_options={"format": "paper"}, eval_max_len=24).hash
    plain = L.get_task("addition", {"format": "paper"})
    a, b = L.evaluation_batch(task, 6, 16, 1234), L.evaluation_batch(plain, 6, 16, 1234)
    prompt = lambda batch: [row[: row.index(L.SEP)] for row in batch.tokens.tolist()]  # noqa: E731
    assert prompt(a) == prompt(b)  # the same test prompts, with and without the scratchpad


def parse(names: list[str]) -> tuple[list[dict[str, list[str]]], list[str]]:
    """A full target -> its steps (component letter -> tokens) and the answer after "thus"."""
    end = names.index("thus")
    steps, step, part = [], {}, None
    for token in names[:end] + ["#"]:
        if token == "#":
            steps.append(step)
            step, part = {}, None
        elif token in MARKERS:
            part = MARKERS[token]
            step[part] = []
        elif token == "]" and part == "v":
            part = None
        else:
            step[part].append(token)
    return steps, names[end + 1 :]


def signed(tokens: list[str]) -> int:
    return -int("".join(tokens[1:])) if tokens[0] == "-" else int("".join(tokens))


def check_addition(prompt, steps, answer, task):
    plus = prompt.index("+")
    a, b = prompt[:plus], prompt[plus + 1 :]
    width = max(len(a), len(b))
    a, b = ["0"] * (width - len(a)) + a, ["0"] * (width - len(b)) + b
    carry, digits = 0, []
    for k, s in enumerate(steps):
        x, y = (a[-1 - k], b[-1 - k]) if k < width else ("0", "0")
        assert s["i"] == [x, ",", y]
        c = s["c"]
        eq = [i for i, t in enumerate(c) if t == "="]
        assert c[:6] == [x, "+", y, "+", "carry", "="] and c[eq[1] - 2 : eq[1]] == ["+", str(carry)]
        assert int("".join(c[6 : eq[1] - 2])) == int(x) + int(y)
        total = int("".join(c[eq[1] + 1 :]))
        assert total == int(x) + int(y) + carry and s["o"] == [str(total % 10)]
        carry = total // 10
        assert s["v"] == ["carry", ":", str(carry)]
        left = width - 1 - k  # digits left of this column
        rest = [[] if left <= 0 else list(str(int("".join(d[:left])))) for d in (a, b)]
        assert s["r"] == rest[0] + ["+"] + rest[1]
        digits.append(s["o"][0])
    assert carry == 0 and len(steps) in (width, width + 1) and (len(steps) == width or digits[-1] == "1")
    total = str(int("".join(reversed(digits))))
    written = answer[::-1] if task.format["answer"] == "lsd" else answer
    if task.format["format"] == "equal":
        total = total.zfill(width + 1)
    assert "".join(written) == total == str(int("".join(a)) + int("".join(b))).zfill(len(total))


def check_summation(prompt, steps, answer, task):
    total = 0
    for k, s in enumerate(steps):
        v = prompt[k]
        assert s["i"] == [v] and s["c"] == [v, "+", "sum", "=", v, "+", str(total), "="]
        assert s["o"] == list(str(int(v) + total)) and s["r"] == prompt[k + 1 :]
        total = (int(v) + total) % 10
        assert s["v"] == ["sum", ":", *s["o"], "=", str(total)]
    assert len(steps) == len(prompt) and answer == [str(total)] == [str(sum(map(int, prompt)) % 10)]


def check_parity(prompt, steps, answer, task):
    p = 0
    for k, s in enumerate(steps):
        bit = prompt[k]
        assert s["i"] == [bit] and s["c"] == [bit, "xor", "par", "=", bit, "xor", str(p)]
        p ^= int(bit)
        assert s["o"] == [str(p)] and s["v"] == ["par", ":", str(p)] and s["r"] == prompt[k + 1 :]
    assert len(steps) == len(prompt) and answer == [["even", "odd"][p]] == [["even", "odd"][prompt.count("1") % 2]]


def check_sorting(prompt, steps, answer, task):
    unsorted = [int(v) for v in prompt]
    for s in steps:
        assert s["i"] == [str(unsorted[0])] and s["c"] == ["minimum"] and "v" not in s
        assert int(s["o"][0]) == min(unsorted)
        unsorted.remove(min(unsorted))
        assert sorted(int(v) for v in s["r"]) == sorted(unsorted)
        unsorted = [int(v) for v in s["r"]]
    outputs = [s["o"][0] for s in steps]
    assert outputs == answer == sorted(prompt, key=int)


def check_polynomial(prompt, steps, answer, task):
    x, terms, total = int(prompt[0][2:]), [prompt[i : i + 2] for i in range(1, len(prompt), 2)], 0
    for k, s in enumerate(steps):
        c, d = int(terms[k][0]), int(terms[k][1][1:])
        assert s["i"] == terms[k] and s["r"] == sum(terms[k + 1 :], [])
        comp = " ".join(s["c"])
        left, right = comp.split(" = ")
        assert left.replace(" ", "") == f"{c}*{x}**{d}".replace("+", "")
        assert right.replace(" ", "") == f"{c}*{x**d}"
        value = signed(s["o"])
        assert value == c * x**d
        sv = " ".join(s["v"])
        assert sv.startswith(f"sum : {total} + ") and sv.endswith(f"= {(total + value) % 10}")
        total = (total + value) % 10
    assert answer == [str(total)] == [str(sum(int(c) * x ** int(d[1:]) for c, d in terms) % 10)]


def check_lego(prompt, steps, answer, task):
    clauses, query = [prompt[i : i + 3] for i in range(0, len(prompt) - 1, 3)], prompt[-1]
    value, resolved = {"1": 1}, []
    for s in steps:
        (variable,) = s["i"]
        clause = next(c for c in clauses if c[0] == variable)
        _, sign, operand = clause
        assert operand in value  # a step resolves a variable whose operand is known
        value[variable] = value[operand] * (1 if sign == "+" else -1)
        sym = lambda v: "+" if v > 0 else "-"  # noqa: E731
        assert s["c"] == ([] if operand == "1" else [sign, operand, "=", sign, sym(value[operand]), "1"])
        assert s["o"] == [sym(value[variable]), "1"] and "v" not in s
        resolved.append(variable)
        assert s["r"] == [t for c in clauses if c[0] not in resolved for t in c]
    assert resolved[-1] == query and answer == [("+" if value[query] > 0 else "-")]


CHECKS = {
    "addition": check_addition,
    "summation": check_summation,
    "parity": check_parity,
    "sorting": check_sorting,
    "polynomial": check_polynomial,
    "lego": check_lego,
}
FORMATS = [("addition", "equal"), ("addition", "paper"), ("summation", None), ("parity", None), ("sorting", None)]
FORMATS += [("polynomial", None), ("lego", "shuffled"), ("lego", "paper")]


@pytest.mark.parametrize(("task_name", "fmt"), FORMATS)
def test_every_step_of_every_generated_scratchpad_is_correct(task_name, fmt):
    task = scratchpad_task(task_name, fmt)
    g = torch.Generator().manual_seed(7)
    for n in task.sizes(1, 3 * task.train_max_size):
        prompts, answers = task.sample(n, 24, g)
        for p, a in zip(prompts, answers):
            steps, answer = parse(task.decode(a[a != L.PAD]))
            CHECKS[task_name](task.decode(p[p != L.PAD]), steps, answer, task)
    lsd = L.get_task("addition", {"answer": "lsd", "scratchpad": "icovr"})
    for p, a in zip(*lsd.sample(6, 16, g)):
        check_addition(lsd.decode(p[p != L.PAD]), *parse(lsd.decode(a[a != L.PAD])), lsd)


SIZE_ONE = {  # every prompt of size 1
    "addition": [[str(a), "+", str(b)] for a in range(10) for b in range(10)],
    "summation": [[str(v)] for v in range(1, 10)],
    "parity": [["0"], ["1"]],
    "sorting": [[str(v)] for v in range(20)],
    "polynomial": [[f"x={x}", f"{c:+d}", f"^{d}"] for x in range(-2, 3) for c in range(-3, 4) for d in range(4)],
    "lego": [["a", s, "1", "a"] for s in "+-"],
}


@pytest.mark.parametrize(("task_name", "fmt"), FORMATS)
def test_the_answer_width_bounds_every_scratchpad(task_name, fmt):
    sets = ("icovr", "co", "o", "r", "ic") if L.STEP_WRITERS[task_name].components == "icovr" else ("icor", "o", "ir")
    for components in sets:
        task = scratchpad_task(task_name, fmt, components)
        g = torch.Generator().manual_seed(3)
        for n in (1, 2, 5, task.train_max_size, 3 * task.train_max_size):
            _, answers = task.sample(n, 64, g)
            assert int((answers != L.PAD).sum(1).max()) <= task.answer_length(n)
        # at size 1 the bound is exactly the longest scratchpad of all prompts, then the answer
        longest = max(len(task.scratchpad(p)) for p in SIZE_ONE[task_name])
        assert task.answer_length(1) == longest + task.inner.answer_length(1), components


def test_step_writers_are_registered_for_the_paper_tasks():
    assert set(L.STEP_WRITERS) == set(SCRATCHPAD_TASKS)
    for name in SCRATCHPAD_TASKS:
        task = scratchpad_task(name)
        assert len(set(task.symbols)) == len(task.symbols)  # markers and step symbols added once each
        assert task.symbols[: len(task.inner.symbols)] == task.inner.symbols  # the task's own ids unchanged


def test_final_answer_reads_after_the_last_scratchpad_end():
    task = scratchpad_task("summation")
    ids = lambda s: [task.ids[t] for t in s.split()]  # noqa: E731
    end = task.ids["thus"]
    assert L.final_answer(ids("in 3 comp thus 7") + [L.EOS, L.PAD], end) == ids("7")
    assert L.final_answer(ids("in 3 thus 5 thus 7") + [L.EOS], end) == ids("7")
    assert L.final_answer(ids("in 3 comp 7") + [L.EOS], end) is None  # never ends its scratchpad
    assert L.final_answer(ids("in 3 thus 7 7 7"), end) is None  # never stops


def test_teacher_forced_scores_split_steps_and_answer():
    task = scratchpad_task("parity")
    batch = L.evaluation_batch(task, 3, 4, 1234)
    right = torch.ones(batch.tokens.shape[0], batch.tokens.shape[1] - 1, dtype=torch.bool)
    sep = int((batch.tokens[0] == L.SEP).nonzero()[0])
    right[0, sep + 2] = False  # row 0: a token of the first step is wrong
    thus = int((batch.tokens[1] == task.ids["thus"]).nonzero()[0])
    right[1, thus] = False  # row 1: the answer is wrong (the token after "thus")
    s = L.score_scratchpad(right, batch, task)
    assert s["scratchpad_exact_match"].tolist() == [0, 0, 1, 1]
    assert s["step_accuracy"].tolist() == pytest.approx([2 / 3, 1, 1, 1])
    assert s["answer_given_steps"].tolist() == [1, 0, 1, 1]


def tiny(encoding: str, max_positions: int = 128) -> L.DecoderOnlyLM:
    torch.manual_seed(0)
    task = scratchpad_task("addition", "paper")
    config = L.ModelConfig(encoding=encoding, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_positions=max_positions)
    return L.DecoderOnlyLM(config, task.vocab_size)


@pytest.mark.parametrize("encoding", ["learned", "rope", "t5"])
def test_cached_decoding_at_the_longest_test_size(encoding):
    task = scratchpad_task("addition", "paper")
    n = 3 * task.train_max_size  # 24 digits: the longest the study tests
    model = tiny(encoding, max_positions=task.sequence_length(n))
    with torch.no_grad():
        model.lm_head.bias[L.EOS] = -1e4  # never stops: decodes to the last position the target can take
    batch = L.evaluation_batch(task, n, 2, 1234)
    sep = int((batch.tokens[0] == L.SEP).nonzero()[0])
    steps = task.answer_length(n) + 1
    out = L.generate(model, batch.tokens[:1, : sep + 1], steps, stop_at_eos=True)
    assert out.shape[1] == sep + 1 + steps <= task.sequence_length(n)  # every row ran to the end
    with L.evaluating(model):
        logits = model(out[:, :-1])
    assert torch.equal(logits[0, sep:].argmax(-1), out[0, sep + 1 :])  # each decoded token the forward's argmax
    if encoding == "learned":  # the scores at the longest size, within the learned table
        metrics = L.scratchpad_metrics(model, task, [n], n_per_length=2)
        assert set(metrics) == {"exact_match", "scratchpad_exact_match", "step_accuracy", "answer_given_steps"}
        assert all(v[n] == 0 for v in metrics.values())  # a model that never stops is never right


def test_a_learned_table_too_short_for_the_scratchpad_is_refused():
    with pytest.raises(ValueError, match="needs .* positions .* max_positions=128"):
        L.RunConfig(
            task="addition",
            task_options={"scratchpad": "icovr"},
            eval_max_len=24,
            model=L.ModelConfig(encoding="learned"),
        )


@pytest.mark.slow
def test_a_scratchpad_run_records_the_answer_and_its_steps(tmp_path):
    small = dict(d_model=16, n_heads=2, n_layers=1, d_ff=32, steps=3, warmup_steps=1, eval_per_length=4)
    cfg = tiny_run("parity", task_options={"scratchpad": "icovr"}, **small)
    _, record = L.train_run(cfg, progress=False)
    assert record["name"] == "parity.scratchpad-icovr-nope-s0"
    assert set(record["exact_match"]) == {str(n) for n in range(1, 7)}
    assert set(record["scratchpad"]) == {"scratchpad_exact_match", "step_accuracy", "answer_given_steps"}
    for by_n in record["scratchpad"].values():
        assert set(by_n) == set(record["exact_match"]) and all(0 <= v <= 1 for v in by_n.values())
