"""Relative paths in a notebook's parameters start at the notebooks folder, whatever the kernel's
working directory (Papermill starts it in the caller's)."""
import os
from pathlib import Path

from paper_repro.notebooks import NOTEBOOKS_DIR, notebook_path

ROOT = Path(__file__).resolve().parent.parent


def test_relative_paths_start_at_the_notebooks_folder_whatever_the_cwd(tmp_path, monkeypatch):
    assert NOTEBOOKS_DIR == ROOT / "notebooks"
    for cwd in (tmp_path, ROOT, ROOT / "notebooks"):
        monkeypatch.chdir(cwd)
        assert notebook_path("../figures") == str(ROOT / "figures")
        assert notebook_path("../results/similarity") == str(ROOT / "results" / "similarity")


def test_absolute_paths_and_none_are_unchanged(tmp_path):
    assert notebook_path(str(tmp_path / "figs")) == str(tmp_path / "figs")
    assert notebook_path(None) is None
    assert notebook_path("~/figs") == os.path.expanduser("~/figs")
