"""Time lengen_helpers against another version of it, side by side in one process.

    python tools/bench_ab.py --other /path/to/old/lengen_helpers.py [--repeats 15] [--out results/benchmarks/ab.json]

A repository tool for checking that a change keeps the study's code as fast as before; not part of
the study itself. Below 1 in the printed ratios: this version is faster.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import lengen_helpers as L  # noqa: E402


def load_version(path: str | Path, name: str = "lengen_other") -> Any:
    """Another version of this module (a file), imported under another name beside this one."""
    spec = importlib.util.spec_from_file_location(name, Path(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def bench_ab(other: str | Path, repeats: int = 15, steps: int = 10) -> dict[str, Any]:
    """lengen_helpers against another version of it (`other`, a file), timed side by side in one
    process: each repeat times one and then the other (in turn first), on the same weights, batch
    and prompts, so a neighbour's load on a shared machine falls on both alike. Training: `steps`
    training steps of the study's copy model (packed batch). Generation: greedy decoding of 64
    new tokens after a 16-token prompt at batch 1 and 64, with each cache and without. Returns
    each side's median seconds and the median over repeats of this / other (below 1: this is
    faster), one thread."""
    versions = {"this": L, "other": load_version(other)}
    cases: dict[str, dict[str, Callable[[], Any]]] = {}
    for side, M in versions.items():
        torch.manual_seed(0)
        cfg = M.make_run("copy", "nope", 0)
        model, task = M.make_model(cfg), M.get_task("copy")
        opt = M.make_optimizer(model, cfg)
        batch = M.training_batch(task, cfg, torch.Generator().manual_seed(0))

        def train(model=model, opt=opt, batch=batch, M=M) -> None:
            for _ in range(steps):
                loss = M.batch_loss(model, batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        cases.setdefault(f"training, {steps} steps", {})[side] = train
        model_eval = M.make_model(cfg).eval()
        for b in (1, 64):
            prompt = torch.randint(L.N_SPECIAL, L.VOCAB_SIZE, (b, 16), generator=torch.Generator().manual_seed(b))
            for kind, kw in (("input cache", {"cache_kind": "inputs"}), ("KV cache", {"cache_kind": "kv"}),
                             ("uncached", {"use_cache": False})):  # fmt: skip
                call = lambda M=M, m=model_eval, p=prompt, kw=kw: M.generate(m, p, 64, **kw)  # noqa: E731
                cases.setdefault(f"generation, batch {b}, {kind}", {})[side] = call
    out: dict[str, Any] = {"what": "seconds, median over repeats, one thread; ratio: this / other",
                           "repeats": repeats, "other": str(other), "cases": {}}  # fmt: skip
    with L.torch_threads(1):
        for name, fns in cases.items():
            for fn in fns.values():
                fn()  # warm-up
            times: dict[str, list[float]] = {"this": [], "other": []}
            for r in range(repeats):
                for side in ("this", "other") if r % 2 == 0 else ("other", "this"):
                    t0 = time.perf_counter()
                    fns[side]()
                    times[side].append(time.perf_counter() - t0)
            ratios = np.array(times["this"]) / np.array(times["other"])
            out["cases"][name] = {
                "this": float(np.median(times["this"])),
                "other": float(np.median(times["other"])),
                "ratio": float(np.median(ratios)),
                "ratio 25-75%": [float(np.percentile(ratios, 25)), float(np.percentile(ratios, 75))],
            }
    return out


def ab_table(result: dict[str, Any]):
    """`bench_ab`'s result as a table: each case's medians (ms) and this / other."""
    rows = [
        {
            "case": k,
            "this (ms)": 1e3 * v["this"],
            "other (ms)": 1e3 * v["other"],
            "this / other": v["ratio"],
            "25%": v["ratio 25-75%"][0],
            "75%": v["ratio 25-75%"][1],
        }  # fmt: skip
        for k, v in result["cases"].items()
    ]
    return pd.DataFrame(rows).set_index("case")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--other", type=Path, required=True, help="the other version's lengen_helpers.py")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out", type=Path, default=L.BENCH_DIR / "ab.json")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1; got {args.repeats}")
    res = bench_ab(args.other, args.repeats)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(f"lengen_helpers against {args.other}, {args.repeats} alternating repeats, one thread:")
        print(ab_table(res))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
