"""Every notebook is an executed .ipynb paired with an identical percent-format .py."""

import json
import re
from pathlib import Path

import jupytext
import pytest
from jupytext.config import find_jupytext_configuration_file, load_jupytext_configuration_file

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_every_chapter_is_a_numbered_pair_of_notebook_and_script():
    folder = NOTEBOOKS[0].parent
    scripts = sorted(p.stem for p in folder.glob("*.py"))
    assert scripts == [nb.stem for nb in NOTEBOOKS], "every .ipynb has its .py and every .py its .ipynb"
    numbers = [int(nb.stem.split("_")[0]) for nb in NOTEBOOKS]
    assert numbers == list(range(1, len(NOTEBOOKS) + 1)), f"chapters numbered 01, 02, ... in order: {numbers}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_ipynb_and_py_are_in_sync(nb):
    pair = nb.with_suffix(".py")
    assert pair.exists(), f"{nb.name} has no paired {pair.name}"
    # the script as `jupytext --sync` writes it, under the project's jupytext.toml
    config = load_jupytext_configuration_file(find_jupytext_configuration_file(str(nb.parent)))
    out = jupytext.writes(jupytext.read(nb), fmt="py:percent", config=config)
    assert out.strip() == pair.read_text().strip(), f"{nb.name} and {pair.name} differ: run `make sync`"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_script_records_the_jupytext_version_that_wrote_it(nb):
    # a version in the header changes whenever pip resolves another jupytext, so `make study`
    # would leave a fresh clone's scripts modified; jupytext.toml filters it out
    header = nb.with_suffix(".py").read_text().split("# ---", 2)[1]
    assert not re.search(r"(?m)^#\s+jupytext_version:", header), f"{nb.stem}.py records a jupytext version"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_executed(nb):
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    assert cells and all(c.get("execution_count") for c in cells), f"{nb.name} has unexecuted cells"
    lax = [c for c in cells if "NBVAL_IGNORE_OUTPUT" in "".join(c["source"])]
    assert len(lax) <= len(cells) // 2, f"{nb.name}: too many cells ignore their output"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_output_shows_a_missing_value_as_nan(nb):
    # a cell with nothing to show says so in words ("—", "none"), never pandas' NaN or <NA>
    for i, cell in enumerate(c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"):
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            text += "".join(out.get("data", {}).get("text/html", ""))
            assert not re.search(r"<NA>|&lt;NA&gt;|\bNaN\b", text), f"{nb.name}, code cell {i + 1}: a NaN or <NA>"
