"""Section 16: where a model goes wrong (the stop decision apart from the pointer)."""

import math

import pytest
import torch
from torch import nn

import lengen_helpers as L


class Copier(nn.Module):
    """A stand-in model for copy that predicts the true next token, except where told: at answer
    step `step` it predicts `instead` (EOS, a wrong symbol, or a symbol at the EOS step), with
    the true token second."""

    def __init__(self, n: int, step: int | None = None, instead: str = "eos"):
        super().__init__()
        self.n, self.step, self.instead = n, step, instead
        self.training = False
        self.config = L.ModelConfig()  # read for its positions (0, 1, ..: not randomized)

    def forward(self, idx, positions=None):
        B, T = idx.shape
        n = self.n
        nxt = torch.full((B, T), L.PAD)
        nxt[:, n + 1 : 2 * n + 1] = idx[:, 1 : n + 1]  # after SEP and each copied symbol: the next symbol
        nxt[:, 2 * n + 1] = L.EOS
        pred = nxt.clone()
        if self.step is not None:
            col = n + 1 + self.step
            if self.instead == "eos":
                pred[:, col] = L.EOS
            elif self.instead == "symbol":
                pred[:, col] = torch.where(nxt[:, col] == L.N_SPECIAL, L.N_SPECIAL + 1, L.N_SPECIAL)
        one_hot = lambda t: nn.functional.one_hot(t, L.VOCAB_SIZE).float()  # noqa: E731
        return 10.0 * one_hot(pred) + 5.0 * one_hot(nxt)  # the true token second where it is not first


@pytest.mark.parametrize(
    "step, instead, kind",
    [(None, "", None), (3, "eos", "early_eos"), (0, "symbol", "wrong_symbol"), (6, "symbol", "missed_eos")],
)
def test_failure_anatomy_names_the_first_error(step, instead, kind):
    a = L.failure_anatomy(Copier(6, step, instead), "copy", 6, n_per_length=16)
    kinds = {"early_eos": 0.0, "wrong_symbol": 0.0, "missed_eos": 0.0}
    if kind is None:
        assert a["exact_match"] == 1.0 and math.isnan(a["first_error_step"])
    else:
        kinds[kind] = 1.0
        assert a["exact_match"] == 0.0 and a["first_error_step"] == step
    assert {k: a[k] for k in kinds} == kinds
    assert a["length_given"] == (0.0 if kind == "wrong_symbol" else 1.0)  # only a wrong symbol survives a given length
    assert a["eos_right"] == (0.0 if kind == "missed_eos" else 1.0)
    assert a["token_accuracy"] == (1 - 1 / 6 if kind in ("early_eos", "wrong_symbol") else 1.0)


@pytest.mark.results
def test_failure_anatomy_exact_match_is_the_records():
    cfg = L.make_run("copy", "nope", 0)
    model = L.load_model("copy", "nope", 0)
    record = L.load_records([cfg])[0]
    for n in (17, 20):
        assert L.failure_anatomy(model, "copy", n)["exact_match"] == record["exact_match"][str(n)]


@pytest.mark.results
def test_length_given_equals_greedy_decoding_with_eos_suppressed_then_forced():
    model = L.load_model("reverse", "alibi", 0)
    for n in (12, 18):
        batch = L.single_length_batch(L.get_task("reverse"), n, 64, L.eval_generator("reverse", n, 1234))
        seq = batch.tokens[:, : n + 2]  # BOS, prompt, SEP
        with torch.no_grad():
            for _ in range(n):
                logits = model(seq)[:, -1]
                logits[:, L.EOS] = float("-inf")
                seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
        greedy = (seq[:, n + 2 :] == batch.tokens[:, n + 2 : 2 * n + 2]).all(dim=1).double().mean()
        assert L.failure_anatomy(model, "reverse", n, n_per_length=64)["length_given"] == float(greedy)
