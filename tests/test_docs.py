"""The README and docs/ pages: their links resolve, the README links every page and stays short,
and no page or notebook speaks of how the study was built rather than of the study."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")

# Words about how the study was made, which a reader has no use for: plans and allowances,
# rounds of work, the sessions it was built in.
BUILD_WORDS = re.compile(
    r"\bbudgets?\b|\ballowances?\b|\bsessions?\b|\bissues? \d|during development|second round|built to meet|"
    r"\bwas allowed\b|\b(?:copy runs|compute) allowed\b|\bleft in the\b|\bgoal of \d+ minutes\b|"
    r"\b\d+-minute goal\b|\bcompute target\b|\bstated target\b|\bwas built for\b|\bearlier versions?\b",
    re.I,
)


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links files that do not exist: {missing}"


def test_the_readme_links_every_docs_page_and_stays_short():
    readme = ROOT / "README.md"
    linked = {(readme.parent / t).resolve() for t in relative_links(readme)}
    assert set(PAGES[1:]) <= linked, f"not linked from the README: {sorted(set(PAGES[1:]) - linked)}"
    lines = readme.read_text().splitlines()
    assert len(lines) <= 150, f"the README has {len(lines)} lines; details belong in docs/"
    assert lines.index("## Quick start") < 50  # the first screen: summary, figures, quick start


def build_words(text: str) -> list[str]:
    return [m.group(0) for m in BUILD_WORDS.finditer(text)]


def test_the_build_word_check_finds_what_it_looks_for():
    assert build_words("within the budget of 400 copy runs, left in the plan") == ["budget", "left in the"]
    assert build_words("the 20x it was built to meet; the 100 copy runs allowed") == [
        "built to meet",
        "copy runs allowed",
    ]
    assert build_words("within the grid's 90-minute goal; an earlier version of the step") == [
        "90-minute goal",
        "earlier version",
    ]
    assert build_words("timed against earlier versions of the code") == ["earlier versions"]
    assert build_words("a ranking is allowed to tie; the second layer") == []


@pytest.mark.parametrize("path", [*PAGES, *sorted((ROOT / "notebooks").glob("*.py"))], ids=lambda p: p.name)
def test_no_page_or_notebook_speaks_of_how_the_study_was_built(path):
    assert not build_words(path.read_text()), f"{path.name}: {build_words(path.read_text())}"


def notebook_text(path: Path) -> str:
    """A notebook's markdown and the text its cells print (not its images)."""
    out = []
    for cell in json.loads(path.read_text())["cells"]:
        out.append("".join(cell["source"]) if cell["cell_type"] == "markdown" else "")
        for o in cell.get("outputs", []):
            out.append("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_no_notebook_prints_how_the_study_was_built(path):
    assert not build_words(notebook_text(path)), f"{path.name}: {build_words(notebook_text(path))}"


def test_the_compute_table_adds_up_to_the_total_it_states():
    text = (ROOT / "docs" / "results.md").read_text()
    table = text.split("## Compute, notebook by notebook", 1)[1]
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ")]
    number = re.compile(r"^[\d,]+(?:\.\d+)?$")
    totals = [(int(r[2].strip()), float(r[3].strip().replace(",", ""))) for r in rows if number.match(r[3].strip())]
    stated = re.search(r"add up to ([\d,]+) runs and ([\d,.]+) copy runs", table)
    assert totals and stated, "the compute table or its stated total is missing"
    assert sum(r for r, _ in totals) == int(stated[1].replace(",", ""))
    assert round(sum(c for _, c in totals), 1) == float(stated[2].replace(",", ""))
