"""Notebook text is for readers of the study: it never mentions how the project is run."""
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.py"))
# words about the project's own process, not the study
# (the repository's own docs/paper.md is fine: it is part of the study)
PROCESS_WORDS = re.compile(r"\b(issue|issues|session|sessions|foundation|ticket|TODO|FIXME|the lead|developer|H\d{2})\b"
                           r"|(?<![\w/])(?i:paper)\.md", re.IGNORECASE)


def markdown_lines(path: Path) -> list[str]:
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("# %%"):
            inside = line.startswith("# %% [markdown]")
            continue
        if inside and line.startswith("#"):
            lines.append(line[1:].strip())
    return lines


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 9


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_process_words_in_notebook_text(path):
    bad = [line for line in markdown_lines(path) if PROCESS_WORDS.search(line)]
    assert not bad, f"{path.name}: " + " | ".join(bad)


def test_the_checker_finds_process_words(tmp_path):
    nb = tmp_path / "00_x.py"
    nb.write_text("# %% [markdown]\n# The foundation issue asks for this.\n# See docs/paper.md.\n# As PAPER.md says.\n"
                  "\n# %%\nissue = 1\n")
    found = [line for line in markdown_lines(nb) if PROCESS_WORDS.search(line)]
    assert found == ["The foundation issue asks for this.", "As PAPER.md says."]
