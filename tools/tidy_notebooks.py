"""Make executed notebooks the same file on every run (make study runs it after each notebook).

    python tools/tidy_notebooks.py notebooks/05_inspect_attention.ipynb [...]

Jupyter names each widget model by a random UUID on every run, and splits a cell's printed text
into stream outputs as the kernel happened to flush it; without this, an unchanged study would
re-execute to changed files. A repository tool, not part of the study.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path


def merge_streams(outputs: list[dict]) -> list[dict]:
    """Consecutive stream outputs of the same stream (stdout, stderr) as one output, text joined:
    how the kernel split them depends on when it flushed, not on what the cell printed."""

    def text(out: dict) -> str:
        return "".join(out["text"]) if isinstance(out["text"], list) else out["text"]

    def stream(out: dict | None) -> str | None:
        return out.get("name") if out is not None and out.get("output_type") == "stream" else None

    merged: list[dict] = []
    for out in outputs:
        last = merged[-1] if merged else None
        if stream(out) is not None and stream(out) == stream(last):
            joined = text(last) + text(out)
            last["text"] = joined.splitlines(keepends=True) if isinstance(last["text"], list) else joined
        else:
            merged.append(dict(out))
    return merged


def tidy_notebook(path: str | Path) -> int:
    """Merge split stream outputs (`merge_streams`) and give an executed notebook's widget models
    stable names. The models are numbered in a fixed order (those the outputs show, in cell order, each followed by
    the models it refers to; then any others by their content) and renamed by a hash of the
    notebook's name and that number. Returns how many ids were renamed."""
    path = Path(path)
    before = path.read_text()
    nb = json.loads(before)
    for cell in nb["cells"]:
        if "outputs" in cell:
            cell["outputs"] = merge_streams(cell["outputs"])
    text = json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    widgets = nb.get("metadata", {}).get("widgets", {})
    state = widgets.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    ident = re.compile("[0-9a-f]{32}")
    order: list[str] = []

    def visit(model: str) -> None:
        if model in state and model not in order:
            order.append(model)
            for ref in re.findall("IPY_MODEL_([0-9a-f]{32})", json.dumps(state[model], sort_keys=True)):
                visit(ref)

    for model in re.findall('"model_id": "([0-9a-f]{32})"', json.dumps(nb["cells"], sort_keys=True)):
        visit(model)
    for model in sorted(state, key=lambda m: ident.sub("_", json.dumps(state[m], sort_keys=True))):
        visit(model)
    stable = {old: hashlib.sha256(f"{path.name}/{i}".encode()).hexdigest()[:32] for i, old in enumerate(order)}
    if stable:  # renamed, then written as Jupyter writes a notebook (keys sorted, one-space indent)
        renamed = json.loads(re.sub("|".join(stable), lambda m: stable[m.group(0)], text))
        text = json.dumps(renamed, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    if text != before:
        path.write_text(text)
    return len(stable)


def main(argv: list[str] | None = None) -> None:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        sys.exit("usage: python tools/tidy_notebooks.py NOTEBOOK.ipynb [...]")
    for path in paths:
        print(f"{path}: {tidy_notebook(path)} widget ids made stable")


if __name__ == "__main__":
    main()
