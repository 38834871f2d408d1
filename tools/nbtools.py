"""Small helpers for the notebook builders in this folder (nbformat, no outputs kept)."""
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str, tags=None):
    return new_code_cell(text.strip(), metadata={"tags": tags} if tags else {})


def write(name: str, cells) -> Path:
    nb = notebook(cells)
    path = NB_DIR / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def notebook(cells):
    """A Python 3 notebook of ``cells`` (not written)."""
    return new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
