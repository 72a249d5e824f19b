"""Every notebook is an executed .ipynb paired with an identical percent-format .py."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_every_chapter_is_a_numbered_pair_of_notebook_and_script():
    folder = NOTEBOOKS[0].parent
    scripts = sorted(p.stem for p in folder.glob("*.py"))
    assert scripts == [nb.stem for nb in NOTEBOOKS], "every .ipynb has its .py and every .py its .ipynb"
    numbers = [int(nb.stem.split("_")[0]) for nb in NOTEBOOKS]
    assert numbers == list(range(1, len(NOTEBOOKS) + 1)), f"chapters numbered 01, 02, ... in order: {numbers}"


@pytest.mark.slow  # starts a jupytext process per notebook
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_ipynb_and_py_are_in_sync(nb):
    pair = nb.with_suffix(".py")
    assert pair.exists(), f"{nb.name} has no paired {pair.name}"
    out = subprocess.run(
        [sys.executable, "-m", "jupytext", "--to", "py:percent", "-o", "-", str(nb)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # the header names the jupytext version that wrote the file: a fresh install may be newer
    same = lambda text: re.sub(r"(?m)^#\s+jupytext_version: .*$", "", text).strip()  # noqa: E731
    assert same(out) == same(pair.read_text()), f"{nb.name} and {pair.name} differ: run `make sync`"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_executed(nb):
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    assert cells and all(c.get("execution_count") for c in cells), f"{nb.name} has unexecuted cells"
    lax = [c for c in cells if "NBVAL_IGNORE_OUTPUT" in "".join(c["source"])]
    assert len(lax) <= len(cells) // 2, f"{nb.name}: too many cells ignore their output"
