"""Notebook 01 draws every compute study: nbval runs it with its default study (mlp); here it runs
at the quick profile for the others that `make figures` runs, check cell included, writing the
same figures/ files `make figures` writes (so `make check-figures` covers them after `make test`)."""
import json
import time

import papermill as pm
import pytest

from paper_repro.notebooks import COMPUTE_NOTEBOOK, KERNEL_ARGUMENTS, NOTEBOOKS_DIR, RUN_PER_VALUE

NOTEBOOK = NOTEBOOKS_DIR / f"{COMPUTE_NOTEBOOK}.ipynb"
PARAMETER, PER_PROFILE = RUN_PER_VALUE[COMPUTE_NOTEBOOK]


def test_the_batch_runs_every_quick_study_and_nbval_the_default_one():
    defaults = pm.inspect_notebook(str(NOTEBOOK))
    assert PARAMETER == "study" and defaults[PARAMETER]["default"] == '"mlp"'
    assert "mlp" in PER_PROFILE["quick"] and len(set(PER_PROFILE["quick"])) == len(PER_PROFILE["quick"])


@pytest.mark.parametrize("study", [s for s in PER_PROFILE["quick"] if s != "mlp"])
def test_notebook_01_runs_each_quick_study_to_its_checks(study, tmp_path):
    out = tmp_path / f"{study}.ipynb"
    started = time.time()
    pm.execute_notebook(str(NOTEBOOK), str(out), parameters={"study": study}, kernel_name="python3",
                        cwd=str(NOTEBOOKS_DIR), progress_bar=False, execution_timeout=300,
                        extra_arguments=KERNEL_ARGUMENTS)
    cells = json.loads(out.read_text())["cells"]
    errors = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    # every figure is written again under the study's name, and the claims cell states its architecture's claim
    figures = NOTEBOOKS_DIR.parent / "figures"
    for what in ("loss", "steps_vs_batch", "pareto", "speedup"):
        path = figures / f"01_{study}_{what}_quick.png"
        assert path.is_file() and path.stat().st_mtime >= started - 1, path
    text = "".join(json.dumps(o.get("data", {})) for c in cells if c["cell_type"] == "code"
                   for o in c.get("outputs", []))
    assert {"transformer": "Transformer: fewer", "resnet": "ResNet: fewer"}[study] in text
