"""Progress bars in notebooks render as widgets: ipywidgets is installed, so tqdm.auto inside a
kernel draws a widget instead of warning ``TqdmWarning: IProgress not found``."""
import json

import nbformat
import papermill as pm
from nbformat.v4 import new_code_cell, new_notebook


def test_tqdm_auto_draws_a_widget_in_a_kernel(tmp_path):
    nb = new_notebook(cells=[new_code_cell("from tqdm.auto import tqdm\nfor _ in tqdm(range(3)):\n    pass")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    src, out = tmp_path / "bar.ipynb", tmp_path / "bar_out.ipynb"
    nbformat.write(nb, str(src))
    pm.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    outputs = json.loads(out.read_text())["cells"][0]["outputs"]
    text = json.dumps(outputs)
    assert "IProgress not found" not in text and "TqdmWarning" not in text, text
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), text
