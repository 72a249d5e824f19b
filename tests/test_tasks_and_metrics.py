"""Task formats, exact match (teacher-forced against greedy generation)."""

import pytest
import torch

import lengen_helpers as L


def test_sequence_format_and_loss_mask():
    g = torch.Generator().manual_seed(0)
    b = L.single_length_batch(L.get_task("reverse"), 4, 3, g)
    t = b.tokens[0]
    assert t.shape == (11,) and t[0] == L.BOS and t[5] == L.SEP and t[10] == L.EOS
    assert torch.equal(t[6:10], t[1:5].flip(0))
    assert ((t[1:5] >= L.N_SPECIAL) & (t[1:5] < L.VOCAB_SIZE)).all()
    # the loss covers the inputs whose next token is y1..y4 or EOS: indices 5..9
    assert b.loss_mask[0].nonzero().flatten().tolist() == [5, 6, 7, 8, 9]
    c = L.single_length_batch(L.get_task("copy"), 4, 1, torch.Generator().manual_seed(1)).tokens[0]
    assert torch.equal(c[6:10], c[1:5])


def test_unknown_task_lists_valid_names():
    with pytest.raises(
        ValueError,
        match="unknown task 'sort'; valid choices: addition, copy, copy_hints, lego, parity, pcfg, polynomial, "
        "reverse, reverse_hints, scan, sorting, summation",
    ):
        L.get_task("sort")
    with pytest.raises(ValueError, match="unknown task"):
        L.make_run("sort", "nope")


def test_packed_rows_never_mix_sequences_and_restart_positions():
    b = L.packed_training_batch(L.get_task("copy"), [16, 1, 1, 2, 5, 16], torch.Generator().manual_seed(0))
    assert b.tokens.shape[1] == 35  # rows as long as the longest sequence
    for row, pos, seg in zip(b.tokens, b.positions, b.segments):
        for s in seg.unique():
            if s < 0:
                assert (row[seg == s] == L.PAD).all()
                continue
            assert torch.equal(pos[seg == s], torch.arange(int((seg == s).sum())))
            assert row[seg == s][0] == L.BOS and row[seg == s][-1] == L.EOS


def briefly_trained(task: str, steps: int) -> L.DecoderOnlyLM:
    cfg = L.make_run(task, "nope", 0, steps=steps, train_max_len=6, eval_max_len=6, eval_per_length=8, warmup_steps=20)
    model, _ = L.train_run(cfg, progress=False)
    return model.eval()


@pytest.mark.parametrize("steps", [0, pytest.param(300, marks=pytest.mark.slow)])  # 0: untrained, no steps
def test_teacher_forced_exact_match_equals_greedy_generation(steps):
    """Notebook 02's check, on an untrained model (all rows wrong) and a partly trained one (a mix
    of right and wrong rows, where a wrong early token could in principle be 'repaired' later)."""
    torch.manual_seed(0)
    model = briefly_trained("reverse", steps) if steps else L.DecoderOnlyLM(L.ModelConfig())
    check, right = L.check_exact_match(model, f"{steps} steps", "reverse", lengths=(3, 5, 6, 8), n=128)
    assert check.passed, check.row()
    assert 0 < right < 4 * 128 or steps == 0, "the partly trained model should get some rows right and some wrong"


def test_exact_match_by_length_uses_the_same_sequences_for_every_model():
    a = L.single_length_batch(L.get_task("copy"), 7, 4, L.eval_generator("copy", 7, 1234))
    b = L.single_length_batch(L.get_task("copy"), 7, 4, L.eval_generator("copy", 7, 1234))
    c = L.single_length_batch(L.get_task("copy"), 7, 4, L.eval_generator("copy", 7, 99))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_exact_match_by_length_counts_a_perfect_oracle_as_one():
    class Oracle(L.DecoderOnlyLM):
        """Predicts the true next token: logits peaked on a stored copy of the batch."""

        def forward(self, idx, positions=None, **kw):
            out = torch.full((*idx.shape, L.VOCAB_SIZE), -10.0)
            nxt = self.truth[:, 1 : idx.shape[1] + 1]
            return out.scatter(-1, nxt[..., None], 10.0)

    oracle = Oracle(L.ModelConfig())
    batch = L.single_length_batch(L.get_task("copy"), 5, 256, L.eval_generator("copy", 5, 1234))
    oracle.truth = batch.tokens
    assert L.exact_match_by_length(oracle, "copy", [5], 256, 1234) == {5: 1.0}
    oracle.truth = batch.tokens.clone()
    oracle.truth[:3, -1] = L.PAD  # three rows miss EOS
    assert L.exact_match_by_length(oracle, "copy", [5], 256, 1234) == {5: 253 / 256}


def test_first_fit_decreasing_places_every_item_without_overlap():
    sizes = [5, 35, 3, 3, 20, 12, 35, 7, 1]
    place = L.first_fit_decreasing(sizes, 35)
    used: dict[int, set[int]] = {}
    for size, (row, offset, _) in zip(sizes, place):
        cells = set(range(offset, offset + size))
        assert offset + size <= 35 and not (cells & used.get(row, set()))
        used.setdefault(row, set()).update(cells)
    assert len(used) == 4  # 121 cells need at least ceil(121 / 35) = 4 rows; FFD finds 4
    for row in used:  # items are numbered 0, 1, .. within each row, in the order they were placed
        assert sorted(i for r, _, i in place if r == row) == list(range(sum(r == row for r, _, _ in place)))


def test_evaluating_records_no_gradients_and_restores_the_mode():
    model = L.DecoderOnlyLM(L.ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32)).train()
    with L.evaluating(model):
        assert not model.training and not torch.is_grad_enabled()
        assert not model(torch.tensor([[L.BOS, 5, 6]])).requires_grad
    assert model.training and torch.is_grad_enabled()
