"""Figures show in JupyterLab and in the executed notebooks: the kernels draw with the inline
backend (under `make lab`'s environment, and in Papermill's kernels even when MPLBACKEND=Agg is
set), every figure becomes a PNG output of its cell, and the files the notebooks save are the
same bytes as under Agg (so figures/ does not change)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from paper_repro.notebooks import run_notebooks

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(300)

# run by `make` (with the Makefile's exports and the lab recipe's LAB_ENV): start a python3
# kernel as JupyterLab does and print the backend matplotlib uses in it
KERNEL_BACKEND = """
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
    reply = kc.execute_interactive("import matplotlib, matplotlib.pyplot; print('BACKEND', matplotlib.get_backend())",
                                   timeout=120, output_hook=lambda m: m["msg_type"] == "stream" and print(m["content"]["text"], end=""))
    assert reply["content"]["status"] == "ok", reply
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
"""

FIGURE = """
import pandas as pd
from paper_repro import plots
records = pd.DataFrame({"step": [1, 2, 3, 1, 2, 3], "final_loss": [3.0, 2.0, 1.5, 3.0, 2.5, 2.2],
                        "method": ["backprop"] * 3 + ["greedy"] * 3})
fig = plots.training_curves(records, "final_loss", title=f"figure {NAME} ({profile})", logy=NAME == "b")
plots.save_figure(fig, f"{NAME}_{profile}", figures_dir);
"""


def test_make_lab_kernels_draw_inline_even_when_the_shell_sets_agg(tmp_path):
    probe = tmp_path / "probe.mk"
    script = tmp_path / "backend.py"
    script.write_text(KERNEL_BACKEND)
    probe.write_text(f"probe:\n\t$(LAB_ENV) $(PY) {script}\n")
    env = dict(os.environ, MPLBACKEND="Agg", JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    out = subprocess.run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", str(probe), "probe"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "BACKEND module://matplotlib_inline.backend_inline" in out.stdout, out.stdout + out.stderr[-2000:]
    # the same recipe prefix is what `make lab` runs
    dry = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "env -u MPLBACKEND " in dry.stdout and "jupyter lab notebooks/" in dry.stdout, dry.stdout


def test_executed_notebooks_embed_every_figure_and_save_the_same_bytes_as_agg(tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")   # the worst case: a shell or image that sets Agg
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    cells = [new_code_cell('profile = "quick"\nfigures_dir = "../figures"', metadata={"tags": ["parameters"]}),
             new_code_cell(f"NAME = 'a'\n{FIGURE}"), new_code_cell("print('no figure here')"),
             new_code_cell(f"NAME = 'b'\n{FIGURE}")]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                        "language": "python"}}),
                   str(nbs / "01_two_figures.ipynb"))
    figs = tmp_path / "figs"
    results = run_notebooks(profile="quick", out_dir=tmp_path / "out", figures_dir=figs, notebooks_dir=nbs,
                            timeout=240, progress=False)
    assert [status for _, _, status in results] == ["ok"]
    executed = json.loads((tmp_path / "out" / "01_two_figures.ipynb").read_text())
    pngs = {"".join(c["source"]): sum("image/png" in o.get("data", {}) for o in c.get("outputs", []))
            for c in executed["cells"] if c["cell_type"] == "code"}
    assert sum(pngs.values()) == 2                    # one embedded PNG per figure, none elsewhere
    assert all(n == ("save_figure" in source) for source, n in pngs.items()), pngs
    # the saved files: byte for byte what the same code saves under Agg in this (test) process
    import matplotlib
    import matplotlib.pyplot as plt

    assert matplotlib.get_backend().lower() == "agg"
    agg = tmp_path / "agg"
    for name in ("a", "b"):
        exec(FIGURE, {"NAME": name, "profile": "quick", "figures_dir": str(agg)})
        plt.close("all")
        assert (figs / f"{name}_quick.png").read_bytes() == (agg / f"{name}_quick.png").read_bytes(), name
