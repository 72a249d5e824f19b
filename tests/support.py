"""Helpers the test modules share (not a test module: no test imports from another test)."""

import re
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

import lengen_helpers as L

TINY = dict(steps=40, train_max_len=4, eval_max_len=6, eval_per_length=8, warmup_steps=5)


def tiny(task="copy", encoding="nope", seed=0, **kw) -> L.RunConfig:
    """A run small enough to train in a test (about a second)."""
    return L.make_run(task, encoding, seed, **{**TINY, **kw})


def fake_record(task, encoding, seed, em: dict[int, float]) -> dict:
    """A run record with the given exact match per length (no training)."""
    cfg = L.make_run(task, encoding, seed)
    return {
        "name": cfg.name,
        "config": cfg.to_dict(),
        "config_hash": cfg.hash,
        "exact_match": {str(n): v for n, v in em.items()},
        "in_distribution_mean": sum(em[n] for n in range(1, 17)) / 16,
        "loss_curve": {"every": 1, "mean_loss": [1.0]},
    }


def curve(cut: int, tail: float = 0.0) -> dict[int, float]:
    """Exact match 1 up to `cut`, then `tail`, at n = 1..48."""
    return {n: 1.0 if n <= cut else tail for n in range(1, 49)}


def perturbed_model(encoding: str, pre_norm: bool = False) -> L.DecoderOnlyLM:
    """An untrained model with every weight nudged off its init, so biases and tables matter."""
    return L.perturb_weights(L.DecoderOnlyLM(L.ModelConfig(encoding=encoding, pre_norm=pre_norm)).eval())


class Inline:
    """A minimal concurrent.futures-style executor that runs each call at once."""

    def submit(self, fn, *args):
        f = Future()
        f.set_result(fn(*args))
        return f


def run_doc_example(heading: str, page: str = "docs/extending.md") -> dict:
    """Run the first Python block under a heading of a documentation page as written (bar its
    training line, `L.sweep(`); returns the names it defines."""
    text = (Path(L.__file__).parent / page).read_text()
    section = text.split(f"## {heading}\n")[1].split("\n## ")[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec("\n".join(line for line in code.splitlines() if "L.sweep(" not in line), namespace)
    return namespace


def nudged_model(task: str, encoding: str, scale: float = 0.3) -> L.DecoderOnlyLM:
    """An untrained model for `task` with weights nudged well off their init, so that on tasks
    with few answer symbols some rows come out right and others wrong (in eval mode)."""
    torch.manual_seed(0)
    return L.perturb_weights(
        L.DecoderOnlyLM(L.ModelConfig(encoding=encoding), L.get_task(task).vocab_size).eval(), scale
    )


def with_config(model: L.DecoderOnlyLM, **fields: Any) -> L.DecoderOnlyLM:
    """The same weights under a config with some fields changed (randomized positions, say)."""
    other = L.DecoderOnlyLM(L.ModelConfig.from_dict(model.config.to_dict() | fields), model.vocab_size)
    other.load_state_dict(model.state_dict())
    return other.eval()


def tool(name: str):
    """A repository tool under tools/ (not part of the study, so not in the module), imported."""
    import importlib.util

    path = Path(L.__file__).parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tools_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
