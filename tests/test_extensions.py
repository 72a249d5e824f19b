"""The extension story: a new encoding or task, defined anywhere, runs through the sweep, the
evaluation, the figures and the explorer with no other edit."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import matplotlib.pyplot as plt
import pytest
import torch
from support import curve, fake_record, tiny

import lengen_helpers as L


class Halved(L.PositionalEncoding):
    """A user's encoding: the sinusoidal table at half strength."""

    name = "halved"

    def embed(self, x, positions):
        return x + 0.5 * L.sinusoidal_table(positions, x.shape[-1])


class Double(L.Task):
    """A user's task with its own vocabulary (5 symbols) and an answer twice as long as the prompt:
    each symbol written twice."""

    name = "double"
    symbols = ("a", "b", "c", "d", "e")

    def answer_length(self, n):
        return 2 * n

    def target(self, x):
        return x.repeat_interleave(2, dim=1)

    def source_positions(self, n):
        return [i // 2 + 1 for i in range(2 * n)]


def test_a_registered_encoding_joins_the_grid_labels_colours_and_explorer_options():
    L.register_encoding(Halved)
    assert L.encoding_names()[-1] == "halved" and L.encoding_names()[:6] == (
        "nope",
        "sinusoidal",
        "learned",
        "rope",
        "alibi",
        "t5",
    )
    assert {c.encoding for c in L.grid(seeds=[0])} == set(L.encoding_names())
    assert (
        L.encoding_title("halved") == "halved"
        and L.encoding_title("t5") == "T5 bias"
        and L.encoding_title("not-one") == "not-one"
    )
    assert L.encoding_color("halved") == "C6" and L.encoding_color("learned") == "C5"  # none shared
    assert len({L.encoding_color(e) for e in L.encoding_names()}) == len(L.encoding_names())
    records = [fake_record("copy", e, 0, curve(17)) for e in L.encoding_names()]
    fig = L.plot_accuracy_vs_length(L.exact_match_frame(records))
    assert "halved (1 seed)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    plt.close(fig)
    with pytest.raises(ValueError, match="needs a `name`"):
        L.register_encoding(type("Nameless", (L.PositionalEncoding,), {}))


@pytest.mark.slow
def test_a_task_with_its_own_vocabulary_and_answer_length_trains_packs_and_evaluates(tmp_path):
    L.register_task(Double)
    task = L.get_task("double")
    assert task.vocab_size == L.N_SPECIAL + 5 and task.sequence_length(4) == 4 + 8 + 3
    tokens, scored = L.make_sequences(task, 3, 2, torch.Generator().manual_seed(0))
    assert tokens.shape == (2, 12) and task.decode(tokens[0])[:1] == ["<s>"] and tokens[:, 1:4].max() < task.vocab_size
    assert torch.equal(tokens[:, 5:11], tokens[:, 1:4].repeat_interleave(2, dim=1))
    assert scored.tolist() == [[False] * 5 + [True] * 7] * 2  # the answer (6 tokens) and EOS, in every row

    cfg = tiny("double", "learned", train_max_len=3, eval_max_len=5)
    packed = L.training_batch(task, cfg, torch.Generator().manual_seed(1))
    padded = L.training_batch(task, cfg, torch.Generator().manual_seed(1), packed=False)
    model = L.make_model(cfg)
    assert model.lm_head.out_features == task.vocab_size
    assert torch.allclose(L.batch_loss(model, packed), L.batch_loss(model, padded), atol=1e-6)
    assert int(packed.loss_mask.sum()) == int(padded.loss_mask.sum())

    rec = L.sweep([cfg], tmp_path, max_workers=1, progress=False)[0]
    assert set(rec["exact_match"]) == {"1", "2", "3", "4", "5"}
    trained = L.make_model(cfg)
    trained.load_state_dict(torch.load(L.weights_path(tmp_path, cfg), weights_only=True))
    check, _ = L.check_exact_match(trained.eval(), "double", task="double", lengths=(2, 4), n=32)
    assert check.passed  # one teacher-forced pass equals greedy decoding for this task too


class Evens(L.Task):
    """A user's task whose answers vary in length within a size: the prompt's symbols that are even."""

    name = "evens"

    def target(self, x):
        keep = (x - L.N_SPECIAL) % 2 == 0
        order = torch.argsort((~keep).int(), dim=1, stable=True)  # kept symbols first, in order
        return torch.where(keep.gather(1, order), x.gather(1, order), L.PAD)  # then PAD


def test_answers_of_several_lengths_end_in_eos_and_are_scored_up_to_it():
    L.register_task(Evens)
    task = L.get_task("evens")
    tokens, scored = L.make_sequences(task, 4, 64, torch.Generator().manual_seed(0))
    for row, mask in zip(tokens, scored):
        prompt = [int(t) for t in row[1:5]]
        answer = [t for t in prompt if (t - L.N_SPECIAL) % 2 == 0]
        end = 6 + len(answer)  # index of EOS
        assert row[6:end].tolist() == answer and row[end] == L.EOS and (row[end + 1 :] == L.PAD).all()
        assert mask.nonzero().flatten().tolist() == list(range(6, end + 1))  # the answer and EOS only
    assert len({int(m.sum()) for m in scored}) > 1  # the lengths do vary
    cfg = L.make_run("evens", "alibi", 0, train_max_len=6, eval_max_len=8)
    packed = L.training_batch(task, cfg, torch.Generator().manual_seed(1))
    padded = L.training_batch(task, cfg, torch.Generator().manual_seed(1), packed=False)
    model = L.make_model(cfg)
    assert torch.allclose(L.batch_loss(model, packed), L.batch_loss(model, padded), atol=1e-6)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    check, _ = L.check_exact_match(model.eval(), "evens", task="evens", lengths=(1, 3, 6), n=64)
    assert check.passed, check.row()


def test_a_pad_inside_an_answer_is_refused():
    class Holes(Evens):
        name = "holes"

        def target(self, x):
            y = x.clone()
            y[:, 0] = L.PAD
            return y

    with pytest.raises(ValueError, match="task 'holes' at size 3: PAD may only end an answer"):
        L.make_sequences(Holes(), 3, 2, torch.Generator())


def test_the_learned_table_check_counts_the_task_s_own_sequence_length():
    L.register_task(Double)
    L.make_run("double", "learned", eval_max_len=41)  # 41 + 82 + 3 = 126 positions: fits in 128
    with pytest.raises(ValueError, match="eval_max_len=42 needs 129 positions for task 'double'.*max_positions=128"):
        L.make_run("double", "learned", eval_max_len=42)


def test_inspection_and_the_explorer_follow_the_task_s_own_answer(tmp_path):
    pytest.importorskip("ipywidgets")
    L.register_task(Double)
    assert "double" in L.inspectable_tasks() and "copy" in L.inspectable_tasks()
    q, k = L.answer_sources("double", 3)
    assert q.tolist() == [4, 5, 6, 7, 8, 9] and k.tolist() == [1, 1, 2, 2, 3, 3]  # SEP at 4
    cfg = L.make_run("double", "nope", 0)  # the explorer shows the grid's settings: save weights there
    L.weights_path(tmp_path, cfg).parent.mkdir(parents=True)
    torch.save(L.make_model(cfg).state_dict(), L.weights_path(tmp_path, cfg))
    ex = L.AttentionExplorer(seeds=[0], results_dir=tmp_path, task="double")
    assert "double" in ex.controls["task"].options
    ex.controls["n"].value = 5
    assert ex.last["attention"].shape == (10, 17)  # 10 answer steps over the 17 inputs of [BOS, 5, SEP, 10, EOS]
    assert len(ex.last["generated"]) == len(ex.last["target"]) == 11
    assert 0 <= ex.last["on_target"] <= 1


def test_a_task_that_returns_the_wrong_shape_is_named():
    class Short(Double):
        name = "short"

        def target(self, x):
            return x  # says 2n, gives n

    with pytest.raises(ValueError, match="task 'short' at size 3 must give prompts \\(2, 3\\) and answers \\(2, 6\\)"):
        L.make_sequences(Short(), 3, 2, torch.Generator())


MAIN_CLASS = """
import lengen_helpers as L

@L.register_encoding
class Quarter(L.PositionalEncoding):
    name = "quarter"

    def embed(self, x, positions):
        return x + 0.25 * L.sinusoidal_table(positions, x.shape[-1])
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_sweep_sends_classes_defined_in_main_to_fresh_worker_processes(tmp_path, method):
    namespace = {"__name__": "__main__"}  # as a notebook cell or a script's __main__ defines it
    exec(MAIN_CLASS, namespace)
    assert namespace["Quarter"].__module__ == "__main__" and "quarter" in L.ENCODINGS
    cfg = tiny("copy", "quarter", steps=3, warmup_steps=1)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(method)) as pool:
        (rec,) = L.sweep([cfg], tmp_path, executor=pool, progress=False)
    assert rec["config"]["model"]["encoding"] == "quarter"
    assert L.extension_classes([tiny()]) is None  # the study's own classes need nothing sent
