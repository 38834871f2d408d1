"""Every notebook is a Jupytext pair: ``notebooks/NN_name.ipynb`` (opened in JupyterLab, run by
Papermill and nbval) and ``notebooks/NN_name.py`` (percent format, the reviewed source).

The checks below fail when the two files of a pair say different things, when a file has no
partner, when a notebook's ``parameters`` cell is missing or misplaced, when an ``.ipynb`` carries
outputs, or when its cell ids are missing or repeated. The last tests copy a pair into a
temporary folder, break it on purpose and check that the checks notice.
"""

import json
import shutil
from pathlib import Path

import jupytext
import pytest
from jupytext.cli import jupytext as jupytext_cli
from jupytext.config import find_jupytext_configuration_file, load_jupytext_config

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO / "notebooks"
CONFIG = REPO / "jupytext.toml"
PY_FORMAT = "py:percent"


def _sync_hint(ipynb: Path) -> str:
    return f"run `jupytext --sync {ipynb.parent.name}/{ipynb.name}`"


def unpaired(nb_dir: Path) -> list[str]:
    """Names of notebook files in ``nb_dir`` whose partner (.ipynb <-> .py) is missing."""
    stems = {p.stem for p in nb_dir.glob("*.ipynb")}
    sources = {p.stem for p in nb_dir.glob("*.py")}
    return ([f"{s}.ipynb has no {s}.py" for s in sorted(stems - sources)]
            + [f"{s}.py has no {s}.ipynb" for s in sorted(sources - stems)])


def pair_problems(ipynb: Path) -> list[str]:
    """What differs between ``ipynb`` and its ``.py`` partner: cell count, then per cell its
    type, source and tags (both files read with jupytext)."""
    nb = jupytext.read(ipynb)
    py = jupytext.read(ipynb.with_suffix(".py"), fmt=PY_FORMAT)
    name = ipynb.stem
    if len(nb.cells) != len(py.cells):
        return [f"{name}: {len(nb.cells)} cells in the .ipynb, {len(py.cells)} in the .py; "
                + _sync_hint(ipynb)]
    problems = []
    for i, (a, b) in enumerate(zip(nb.cells, py.cells)):
        for what, x, y in (("type", a.cell_type, b.cell_type), ("source", a.source, b.source),
                           ("tag list", a.metadata.get("tags", []), b.metadata.get("tags", []))):
            if x != y:
                problems.append(f"{name}: cell {i}: the {what} differs between .ipynb and .py "
                                f"({x!r:.60} vs {y!r:.60}); " + _sync_hint(ipynb))
    return problems


def ipynb_problems(ipynb: Path) -> list[str]:
    """Problems of the ``.ipynb`` file itself, read as plain JSON: outputs or execution counts
    left in, cell ids missing or repeated, and anything but exactly one ``parameters`` cell
    as the first code cell."""
    cells = json.loads(ipynb.read_text())["cells"]
    name = ipynb.stem
    problems = []
    for i, cell in enumerate(cells):
        if cell.get("outputs") or cell.get("execution_count") is not None:
            problems.append(f"{name}: cell {i} has outputs or an execution count "
                            "(clear them before committing)")
        if not cell.get("id"):
            problems.append(f"{name}: cell {i} has no id")
    ids = [c["id"] for c in cells if c.get("id")]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        problems.append(f"{name}: repeated cell ids {repeated}")
    tagged = [i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    if len(tagged) != 1 or not code or tagged[0] != code[0]:
        problems.append(f"{name}: the parameters tag is on cells {tagged}; it must be on exactly "
                        f"one cell, the first code cell ({code[:1]})")
    return problems


def all_problems(nb_dir: Path) -> list[str]:
    problems = unpaired(nb_dir)
    for ipynb in sorted(nb_dir.glob("*.ipynb")):
        problems += ipynb_problems(ipynb)
        if ipynb.with_suffix(".py").exists():
            problems += pair_problems(ipynb)
    return problems


NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 8, [p.name for p in NOTEBOOKS]


def test_every_notebook_has_its_py_and_every_py_its_notebook():
    assert unpaired(NOTEBOOKS_DIR) == []


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.stem)
def test_pair_is_in_sync(ipynb):
    assert pair_problems(ipynb) == []


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.stem)
def test_ipynb_is_clean_with_ids_and_one_parameters_cell(ipynb):
    assert ipynb_problems(ipynb) == []


def test_notebooks_find_the_repo_config_pairing_ipynb_with_percent_py():
    nb = str(NOTEBOOKS_DIR / "00_quickstart.ipynb")
    assert Path(find_jupytext_configuration_file(nb)) == CONFIG
    assert load_jupytext_config(nb).formats == ["ipynb,py:percent"]


def _copy_pair(ipynb: Path, dest: Path) -> Path:
    shutil.copy(CONFIG, dest / CONFIG.name)
    shutil.copy(ipynb, dest / ipynb.name)
    shutil.copy(ipynb.with_suffix(".py"), dest / ipynb.with_suffix(".py").name)
    return dest / ipynb.name


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.stem)
def test_sync_rewrites_neither_file(ipynb, tmp_path):
    """`jupytext --sync` on a committed pair, from either side, gives back the same bytes:
    the pair is in sync to the character and the cell ids survive a re-sync."""
    nb, py = _copy_pair(ipynb, tmp_path), tmp_path / ipynb.with_suffix(".py").name
    before = nb.read_bytes(), py.read_bytes()
    for newer in (py, nb, py):  # the newer file of the pair is the one jupytext reads
        newer.touch()
        jupytext_cli(["--sync", "--quiet", str(nb)])
        assert (nb.read_bytes(), py.read_bytes()) == before, f"sync from {newer.name} changed the pair"


# The checks notice a broken copy.

@pytest.fixture
def quickstart(tmp_path):
    nb = _copy_pair(NOTEBOOKS_DIR / "00_quickstart.ipynb", tmp_path)
    assert all_problems(tmp_path) == []
    return nb


def _edit_json(path: Path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


def test_drift_in_py_source_is_caught(quickstart):
    py = quickstart.with_suffix(".py")
    py.write_text(py.read_text().replace('seed = 0', 'seed = 1'))
    problems = all_problems(quickstart.parent)
    assert len(problems) == 1 and "cell 1: the source differs" in problems[0], problems


def test_drift_in_ipynb_markdown_is_caught(quickstart):
    _edit_json(quickstart, lambda d: d["cells"][0]["source"].append("\nOne more sentence."))
    problems = all_problems(quickstart.parent)
    assert len(problems) == 1 and "cell 0: the source differs" in problems[0], problems


def test_added_cell_is_caught(quickstart):
    py = quickstart.with_suffix(".py")
    cells = len(json.loads(quickstart.read_text())["cells"])
    py.write_text(py.read_text() + "\n# %%\nprint('extra')\n")
    assert any(f"{cells} cells in the .ipynb, {cells + 1} in the .py" in p for p in all_problems(quickstart.parent))


def test_lost_tag_is_caught_in_both_files(quickstart):
    py = quickstart.with_suffix(".py")
    py.write_text(py.read_text().replace('# %% tags=["parameters"]', "# %%"))
    assert any("cell 1: the tag list differs" in p for p in all_problems(quickstart.parent))
    _edit_json(quickstart, lambda d: d["cells"][1]["metadata"].pop("tags"))
    problems = all_problems(quickstart.parent)
    assert any("parameters tag is on cells []" in p for p in problems), problems


def test_parameters_tag_on_a_later_cell_is_caught(quickstart):
    def move(d):
        d["cells"][1]["metadata"].pop("tags")
        d["cells"][2]["metadata"]["tags"] = ["parameters"]
    _edit_json(quickstart, move)
    problems = ipynb_problems(quickstart)
    assert problems == ["00_quickstart: the parameters tag is on cells [2]; it must be on exactly "
                        "one cell, the first code cell ([1])"]


def test_outputs_missing_and_repeated_ids_are_caught(quickstart):
    def damage(d):
        d["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}]
        d["cells"][2]["execution_count"] = 1
        d["cells"][3]["id"] = d["cells"][4]["id"]
        del d["cells"][5]["id"]
    _edit_json(quickstart, damage)
    problems = ipynb_problems(quickstart)
    assert any("cell 2 has outputs" in p for p in problems), problems
    assert any("repeated cell ids" in p for p in problems), problems
    assert any("cell 5 has no id" in p for p in problems), problems


def test_missing_partner_is_caught(quickstart):
    quickstart.with_suffix(".py").rename(quickstart.with_name("99_orphan.py"))
    assert unpaired(quickstart.parent) == ["00_quickstart.ipynb has no 00_quickstart.py",
                                           "99_orphan.py has no 99_orphan.ipynb"]
