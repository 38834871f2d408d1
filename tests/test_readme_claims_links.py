"""Each row of the README's claims table links to its own section of docs/results.md."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_every_claim_row_links_to_its_own_existing_section():
    readme = (ROOT / "README.md").read_text()
    results = (ROOT / "docs" / "results.md").read_text()
    anchors = {_anchor(h) for h in re.findall(r"^## (.+)$", results, re.M)}
    links = re.findall(r"^\| \[[^\]]+\]\(docs/results\.md#([^)]+)\)", readme, re.M)
    assert len(links) >= 10
    assert not [a for a in links if a not in anchors], "a claim row links to a section that does not exist"
    assert len(set(links)) == len(links), "two claim rows link to the same section"


def test_profiles_are_explained_before_the_claims_table():
    readme = (ROOT / "README.md").read_text()
    assert readme.index("**profiles**") < readme.index("| Claim | Paper |")
