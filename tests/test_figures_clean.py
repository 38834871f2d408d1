"""Running the notebooks leaves a clean git tree: every figure a notebook writes in the quick
profile is either committed and reproducible (the same bytes on every run), or drawn from
wall-clock measurements and then ignored by git (never committed). The names are read from the
notebooks' ``save_figure`` calls; ``.ci/run`` checks the other half (after ``make test`` has
run every notebook, ``git status -- figures`` must be clean)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from paper_repro.notebooks import RUN_PER_VALUE

ROOT = Path(__file__).resolve().parent.parent
# drawn from time measurements: pipeline throughput and busy time, and the memory per stage of
# a stage cut chosen by measured time
TIMING_DEPENDENT = {"04_pipeline_throughput_quick.png", "04_pipeline_busy_quick.png", "04_pipeline_memory_quick.png",
                    "10_race_quick.png"}

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="needs a git checkout")


def quick_figure_patterns() -> dict[str, str]:
    """{notebook: regex of a figure file name it writes in the quick profile}."""
    out = {}
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        for name in re.findall(r"save_figure\(\s*fig,\s*f?\"([^\"]+)\"", nb.read_text()):
            name = name.replace("{profile}", "quick").replace("{tag}", "quick")  # 04: tag = profile when run here
            pattern = re.sub(r"\\\{[^}]*\\\}", "[a-z0-9]+", re.escape(name))
            out[f"{nb.stem}: {name}"] = pattern + r"\.png"
        # notebook 01 names its figures through paper_repro.studies.Study.figure, once for each
        # study the batch runs it for (notebooks.RUN_PER_VALUE)
        text = nb.read_text()
        studies = RUN_PER_VALUE.get(nb.stem, (None, {"quick": ()}))[1]["quick"]
        for what in re.findall(r"save_figure\(\s*fig,\s*S\.figure\(\"([^\"]+)\"\)", text):
            for study in studies:
                name = f"{nb.stem[:2]}_{study}_{what}_quick"
                out[f"{nb.stem}: {name}"] = re.escape(name) + r"\.png"
    return out


def _git(*args) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_the_notebooks_name_their_figures():
    patterns = quick_figure_patterns()
    assert len(patterns) >= 20 and any(k.startswith("04_") for k in patterns), patterns


def test_every_quick_figure_is_either_committed_or_ignored():
    tracked = set(_git("ls-files", "figures").split())
    present = {f"figures/{p.name}" for p in (ROOT / "figures").glob("*_quick.png")}
    for where, pattern in quick_figure_patterns().items():
        names = {f for f in tracked | present if re.fullmatch("figures/" + pattern, f)}
        for f in names:
            ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", f], cwd=ROOT).returncode == 0
            if Path(f).name in TIMING_DEPENDENT:
                assert ignored and f not in tracked, f"{where}: {f} depends on timing: ignore it, do not commit it"
            else:
                assert not ignored, f"{where}: {f} is ignored but reproducible: commit it"
                assert f in tracked, f"{where}: {f} is neither committed nor ignored: a run leaves it untracked"
    for name in TIMING_DEPENDENT:
        assert subprocess.run(["git", "check-ignore", "-q", "--no-index", f"figures/{name}"], cwd=ROOT).returncode == 0
        assert f"figures/{name}" not in tracked


def test_the_committed_figures_name_the_machine_that_drew_them():
    """``make check-figures`` compares bytes only on the CPU model and torch version that
    ``figures/MACHINE`` names (the quick runs differ in the last bits across CPU models)."""
    import torch

    from paper_repro.hardware import cpu_model, figure_machine
    assert "figures/MACHINE" in _git("ls-files", "figures").split()
    drawn = (ROOT / "figures" / "MACHINE").read_text().strip()
    assert re.fullmatch(r".+; torch \d+\.\d+\S*", drawn), drawn
    assert cpu_model() and figure_machine() == f"{cpu_model()}; torch {torch.__version__}"
