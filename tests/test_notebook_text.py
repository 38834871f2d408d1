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


def _commands(path: Path) -> list[str]:
    """The ``paper-repro ...`` command lines in a notebook's text (continuation lines joined)."""
    text = "\n".join(markdown_lines(path)).replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if line.startswith("paper-repro ")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_text_promises_nothing_to_come_and_its_commands_parse(path):
    import shlex

    from paper_repro.cli import build_parser

    assert not [line for line in markdown_lines(path) if "to come" in line.lower()]
    for command in _commands(path):
        build_parser().parse_args(shlex.split(command)[1:])      # exits (SystemExit) on an unknown option


def test_the_simulate_command_of_notebook_09_runs_on_its_own_network(tmp_path, monkeypatch, capsys):
    """The network the notebook defines, saved as my_package/models.py, simulated as its text says."""
    import json
    import shlex

    from paper_repro.cli import main

    path = next(p for p in NOTEBOOKS if p.stem == "09_your_model")
    [command] = [c for c in _commands(path) if c.startswith("paper-repro simulate ")]
    cell = next(c for c in path.read_text().split("# %%") if "def my_cnn(" in c)
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text("import torch.nn as nn\n" + cell.split("\n", 1)[1])
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "sim.json"
    assert main([*shlex.split(command)[1:], "--reps", "1", "--json", str(out)]) == 0, capsys.readouterr().err
    records = {r["schedule"]: r for r in json.loads(out.read_text())}
    assert list(records) == ["local", "local/M", "1f1b", "1f1b-recompute"] and all(r["stages"] == 4 and r["micro_batch"] == 32
                                                     for r in records.values())
    assert records["local"]["comm_bytes_per_sample"]["backward"] == 0 < records["1f1b"]["comm_bytes_per_sample"]["backward"]
