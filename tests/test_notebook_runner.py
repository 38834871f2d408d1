"""The Papermill batch runner on tiny notebooks made here (a real kernel runs them)."""

import json
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from paper_repro.cli import build_parser
from paper_repro import notebooks
from paper_repro.notebooks import PROFILES, check_parameters, notebook_runs, run_notebooks

PARAMS = 'profile = "quick"\nfigures_dir = "../figures"'
WRITE_PNG = """
import os, struct, zlib
def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
# a 2x2 grey PNG written byte by byte: no plotting library needed in the kernel
png = (b"\\x89PNG\\r\\n\\x1a\\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
       + _chunk(b"IDAT", zlib.compress(b"\\x00\\x80\\x80" * 2)) + _chunk(b"IEND", b""))
os.makedirs(figures_dir, exist_ok=True)
with open(os.path.join(figures_dir, f"tiny_{profile}.png"), "wb") as f:
    f.write(png)
print("PROFILE_IS", profile)
import sys
print("PREFIX_IS", sys.prefix)
"""


def _write_nb(path, *sources):
    cells = [new_code_cell(PARAMS, metadata={"tags": ["parameters"]})]
    cells += [new_code_cell(src) for src in sources]
    nb = new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, str(path))


def _stream_text(nb_path):
    nb = json.loads(nb_path.read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")


@pytest.fixture
def dirs(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    return nbs, tmp_path / "out", tmp_path / "figs"


def test_runs_notebook_injects_parameters_and_writes_figure(dirs):
    nbs, out, figs = dirs
    _write_nb(nbs / "01_tiny.ipynb", WRITE_PNG)
    results = run_notebooks(profile="cpu", out_dir=out, figures_dir=figs, notebooks_dir=nbs,
                            timeout=120)
    assert [(name, status) for name, _, status in results] == [("01_tiny", "ok")]
    assert results[0][1] > 0
    executed = out / "01_tiny.ipynb"
    assert executed.exists()
    # the injected value, not the default "quick", reached the kernel
    text = _stream_text(executed)
    assert "PROFILE_IS cpu" in text
    # the kernel is this interpreter's environment (the venv), not some other python
    assert f"PREFIX_IS {sys.prefix}\n" in text
    fig = figs / "tiny_cpu.png"
    assert fig.exists() and fig.read_bytes().startswith(b"\x89PNG")
    assert not (figs / "tiny_quick.png").exists()


def test_unknown_profile_names_value_and_choices(dirs):
    nbs, out, figs = dirs
    _write_nb(nbs / "01_tiny.ipynb", "x = 1")
    with pytest.raises(ValueError, match="'huge'") as err:
        run_notebooks(profile="huge", out_dir=out, figures_dir=figs, notebooks_dir=nbs)
    for valid in PROFILES:
        assert valid in str(err.value)
    assert not out.exists()  # nothing ran


def test_unknown_only_names_value_and_lists_available(dirs):
    nbs, out, figs = dirs
    _write_nb(nbs / "01_tiny.ipynb", "x = 1")
    _write_nb(nbs / "02_other.ipynb", "x = 2")
    with pytest.raises(ValueError, match="'nope'") as err:
        run_notebooks(only="nope", out_dir=out, figures_dir=figs, notebooks_dir=nbs)
    assert "01_tiny" in str(err.value) and "02_other" in str(err.value)


def test_only_selects_by_substring(dirs):
    nbs, out, figs = dirs
    _write_nb(nbs / "01_tiny.ipynb", "x = 1")
    _write_nb(nbs / "02_other.ipynb", "x = 2")
    results = run_notebooks(only="other", out_dir=out, figures_dir=figs, notebooks_dir=nbs,
                            timeout=120)
    assert [r[0] for r in results] == ["02_other"]
    assert (out / "02_other.ipynb").exists() and not (out / "01_tiny.ipynb").exists()


def test_failing_notebook_is_named_and_batch_continues(dirs):
    nbs, out, figs = dirs
    _write_nb(nbs / "01_broken.ipynb", "raise KeyError('boom_marker')")
    _write_nb(nbs / "02_fine.ipynb", WRITE_PNG)
    with pytest.raises(RuntimeError, match="01_broken") as err:
        run_notebooks(out_dir=out, figures_dir=figs, notebooks_dir=nbs, timeout=120)
    assert "KeyError" in str(err.value) and "02_fine" not in str(err.value)
    assert [(n, s) for n, _, s in err.value.results] == [("01_broken", "failed"), ("02_fine", "ok")]
    assert (out / "01_broken.ipynb").exists()  # the executed copy keeps the traceback
    assert (figs / "tiny_quick.png").exists()  # the notebook after the failure still ran


def test_a_notebook_runs_once_per_value_of_its_parameter_unless_one_is_given(dirs, monkeypatch):
    nbs, out, figs = dirs
    cells = [new_code_cell(PARAMS + '\nstudy = "a"', metadata={"tags": ["parameters"]}),
             new_code_cell("print('STUDY_IS', study)")]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), str(nbs / "01_per_study.ipynb"))
    _write_nb(nbs / "02_once.ipynb", "print('ONCE')")
    monkeypatch.setattr(notebooks, "RUN_PER_VALUE", {"01_per_study": ("study", {"quick": ("b", "c")})})
    results = run_notebooks(out_dir=out, figures_dir=figs, notebooks_dir=nbs, timeout=120, progress=False)
    assert [(n, s) for n, _, s in results] == [("01_per_study[b]", "ok"), ("01_per_study[c]", "ok"),
                                               ("02_once", "ok")]
    assert "STUDY_IS b" in _stream_text(out / "01_per_study_b.ipynb")
    assert "STUDY_IS c" in _stream_text(out / "01_per_study_c.ipynb")
    # the caller's own value runs once, under the notebook's name; a run name's own parameters win
    paths = sorted(nbs.glob("*.ipynb"))
    assert [(n, own) for _, n, own in notebook_runs(paths, "quick", {"01_per_study": {"study": "x"}})] == [
        ("01_per_study", {}), ("02_once", {})]
    results = run_notebooks(out_dir=out, figures_dir=figs, notebooks_dir=nbs, timeout=120, progress=False,
                            only="01", per_notebook={"01_per_study": {"study": "x"}})
    assert [n for n, _, _ in results] == ["01_per_study"]
    assert "STUDY_IS x" in _stream_text(out / "01_per_study.ipynb")


def test_cli_registers_notebooks_run():
    parser = build_parser()
    args = parser.parse_args(["notebooks", "run", "--profile", "full", "--only", "fig2",
                              "--out", "o", "--figures", "f"])
    assert (args.profile, args.only, args.out, args.figures) == ("full", ["fig2"], "o", "f")
    assert callable(args.func)
    assert parser.parse_args(["notebooks", "run"]).profile == "quick"
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["notebooks", "run", "--profile", "huge"])
    assert exc.value.code == 2


def test_check_parameters_names_bad_values():
    types = dict(profile=str, steps=int, data_dir=(str, type(None)))
    check_parameters(dict(profile="quick", steps=3, data_dir=None), types)
    with pytest.raises(ValueError, match=r"steps='abc' has type str; expected int"):
        check_parameters(dict(profile="quick", steps="abc", data_dir=None), types)
    with pytest.raises(ValueError, match="expected int"):
        check_parameters(dict(profile="quick", steps=True, data_dir=None), types)
    with pytest.raises(ValueError, match="expected str or None"):
        check_parameters(dict(profile="quick", steps=1, data_dir=3), types)
    with pytest.raises(ValueError, match="'paper'"):
        check_parameters(dict(profile="paper", steps=1, data_dir=None), types)
    with pytest.raises(ValueError, match="missing"):
        check_parameters(dict(profile="quick"), types)
