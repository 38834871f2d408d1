"""One set of versions: requirements.lock is what make, CI, Docker and conda install.

Each install file is parsed and checked against the lock: a library named anywhere with a
version must carry the lock's version, torch's supported range in pyproject.toml must be
exactly the locked minor release, and the environment running these tests must be the
locked one. Every checker is also fed a planted disagreement, so a parser that silently
finds nothing cannot pass.
"""
import fnmatch
import re
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
LOCK = "requirements.lock"
CONDA_TO_PIP = {"pytorch": "torch"}
RANGED = ("torch", "torchvision")  # supported range in pyproject.toml = the locked minor release
TOOLS = {"uv"}  # `make lock`'s resolver, installed into a throwaway venv, not the project's


# -- parsers ----------------------------------------------------------------------------------
def parse_lock(text: str) -> dict[str, str]:
    """{canonical name: version} of a pip lock (``name==version`` lines, comments ignored)."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if not m:
            raise ValueError(f"lock line {line!r} is not name==version")
        pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def pinned_words(words) -> dict[str, str]:
    """{name: version} of the ``name==version`` / conda ``name=version`` words among ``words``."""
    out = {}
    for w in words:
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?={1,2}([^\s=<>!,;]+)", w.strip())
        if m:
            name = canonicalize_name(m.group(1))
            out[CONDA_TO_PIP.get(name, name)] = m.group(2)
    return out


def pip_installs(text: str) -> list[list[str]]:
    """The argument lists of every ``pip install`` in shell/Dockerfile/Makefile text."""
    text = text.replace("\\\n", " ")
    found = []
    for command in re.split(r"&&|;|\n|\|\|", text):
        words = command.split()
        if "install" in words and any(re.search(r"(^|/)pip3?$", w) or w == "pip" for w in words[:words.index("install")]):
            found.append(words[words.index("install") + 1:])
    return found


# -- checkers: each returns a list of problems, one line each ----------------------------------
def check_pyproject(project: dict, lock: dict) -> list[str]:
    problems = []
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    for r in map(Requirement, reqs):
        name = canonicalize_name(r.name)
        if name not in lock:
            problems.append(f"pyproject.toml needs {r.name} but {LOCK} does not pin it")
        elif not r.specifier.contains(lock[name], prereleases=True):
            problems.append(f"pyproject.toml allows {r.name}{r.specifier}, {LOCK} pins {lock[name]}")
    specs = {canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in reqs}
    for name in RANGED:
        if name in lock and name in specs:
            problems += _minor_range_problems(name, specs[name], Version(lock[name]))
    return problems


def _minor_range_problems(name: str, spec: SpecifierSet, locked: Version) -> list[str]:
    """The range must hold every patch release of the locked minor and nothing else."""
    major, minor = locked.major, locked.minor
    inside = [f"{major}.{minor}.0", str(locked), f"{major}.{minor}.99"]
    outside = [f"{major}.{minor + 1}.0", f"{major + 1}.0.0"] + ([f"{major}.{minor - 1}.99"] if minor else [])
    bad = [v for v in inside if not spec.contains(v)] + [v for v in outside if spec.contains(v)]
    if bad:
        return [f"pyproject.toml's {name}{spec} is not the tested range {major}.{minor}.* "
                f"(locked {locked}); it gets {', '.join(bad)} wrong"]
    return []


def check_install_text(source: str, text: str, lock: dict) -> list[str]:
    """Every ``pip install`` in ``text`` installs the lock or the project without its
    dependencies, and every pinned name in it carries the lock's version."""
    problems = []
    installs = pip_installs(text)
    if not any(LOCK in args for args in installs):
        problems.append(f"{source} never runs pip install -r {LOCK}")
    for args in installs:
        if "-e" in args and "--no-deps" not in args and "-r" not in args:
            problems.append(f"{source}: pip install {' '.join(args)} resolves the project's "
                            f"dependencies again; use --no-deps after -r {LOCK}")
        problems += _pin_problems(source, pinned_words(args), lock)
    return problems


def _pin_problems(source: str, pins: dict, lock: dict) -> list[str]:
    problems = []
    for name, version in pins.items():
        if name == "python" or name in TOOLS:
            continue
        if name not in lock:
            problems.append(f"{source} pins {name}=={version}, which {LOCK} lacks")
        elif version != lock[name]:
            problems.append(f"{source} pins {name}=={version}, {LOCK} has {lock[name]}")
    return problems


def _minor(version: str) -> str:
    """'3.11.7' -> '3.11'."""
    return ".".join(version.split(".")[:2])


def check_dockerfile(text: str, lock: dict, python: str) -> list[str]:
    problems = check_install_text("Dockerfile", text, lock)
    for image in re.findall(r"^FROM\s+(\S+)", text, re.M):
        repo, _, tag = image.partition(":")
        if repo.endswith("pytorch/pytorch"):
            torch_version = tag.split("-")[0]
            if torch_version != lock.get("torch"):
                problems.append(f"Dockerfile base image {image} ships torch {torch_version}, "
                                f"{LOCK} has {lock.get('torch')}")
        elif repo in ("python", "library/python") and _minor(tag.split("-")[0]) != _minor(python):
            problems.append(f"Dockerfile base image {image} is not Python {_minor(python)}, "
                            f"the Python {LOCK} was resolved for")
    return problems


def check_conda(env: dict, lock: dict, python: str) -> list[str]:
    problems, pins, pip_lines = [], {}, []
    for dep in env.get("dependencies", []):
        if isinstance(dep, dict):
            pip_lines += dep.get("pip", [])
        else:
            pins.update(pinned_words([dep]))
            name = CONDA_TO_PIP.get(canonicalize_name(re.split(r"[=<>! ]", dep)[0]), dep)
            if name not in ("python", "pip") and not pinned_words([dep]):
                problems.append(f"environment.yml names {dep} without a version; take it from {LOCK}")
    if f"-r {LOCK}" not in pip_lines:
        problems.append(f"environment.yml's pip section does not install -r {LOCK}")
    if "python" in pins and _minor(pins["python"]) != _minor(python):
        problems.append(f"environment.yml asks for python={pins['python']}, {LOCK} was resolved "
                        f"for Python {python}")
    problems += _pin_problems("environment.yml", pinned_words(pip_lines), lock)
    problems += _pin_problems("environment.yml", {k: v for k, v in pins.items() if k != "pip"}, lock)
    return problems


# -- the real files -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lock():
    return parse_lock((ROOT / LOCK).read_text())


@pytest.fixture(scope="module")
def python_version():
    """The Python the lock was resolved for, as `make lock` passes it to the resolver."""
    m = re.search(r"--python-version\s+(\d+\.\d+(?:\.\d+)?)", (ROOT / "Makefile").read_text())
    assert m, "the Makefile's lock target names no --python-version"
    return m.group(1)


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_lock_pins_torch_and_the_libraries(lock):
    for name in ("torch", "torchvision", "numpy", "pandas", "matplotlib", "papermill", "jupyterlab",
                 "pytest", "nbval"):
        assert name in lock, f"{LOCK} lacks {name}"
    assert len(lock) > 50  # the whole closure, not just the direct dependencies


def test_pyproject_agrees_with_lock(lock):
    assert check_pyproject(_pyproject(), lock) == []


def test_dockerfile_agrees_with_lock(lock, python_version):
    assert check_dockerfile((ROOT / "Dockerfile").read_text(), lock, python_version) == []


def test_environment_yml_agrees_with_lock(lock, python_version):
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert check_conda(env, lock, python_version) == []


def test_makefile_installs_the_lock(lock):
    text = (ROOT / "Makefile").read_text()
    assert check_install_text("Makefile", text, lock) == []
    stamp_rule = re.search(r"^\$\(STAMP\):(.*)$", text, re.M)
    assert stamp_rule and LOCK in stamp_rule.group(1), "the venv is not rebuilt when the lock changes"
    assert re.search(r"^lock:", text, re.M), "no `make lock` target"


def test_running_environment_is_the_locked_one(lock):
    """The interpreter running the tests has every locked library at the locked version."""
    wrong = []
    for name, version in lock.items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have is None or Version(have) != Version(version):
            wrong.append(f"{name}: locked {version}, installed {have}")
    assert not wrong, "rebuild the venv (make venv):\n" + "\n".join(wrong)


def test_lock_is_closed_under_dependencies(lock):
    """Every requirement of every locked library (markers evaluated here) is itself locked."""
    env = default_environment()
    missing = []
    for name in list(lock) + ["paper-repro"]:
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # reported by the test above
        for r in map(Requirement, requires):
            if r.marker is None or r.marker.evaluate({**env, "extra": "test"}):
                if "extra" in str(r.marker or "") and name != "paper-repro":
                    continue  # another library's optional extra
                if canonicalize_name(r.name) not in lock:
                    missing.append(f"{name} needs {r}")
    assert not missing, missing


# -- the checkers catch planted disagreements ------------------------------------------------------
PLANTED_LOCK = {"torch": "2.14.1", "torchvision": "0.29.1", "numpy": "2.4.6"}


def test_checkers_catch_a_mismatched_dockerfile():
    text = ("FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n"
            "RUN pip install --no-cache-dir torch==2.5.1 numpy==2.4.6 && pip install -e .\n")
    problems = check_dockerfile(text, PLANTED_LOCK, "3.11.7")
    assert any("ships torch 2.5.1" in p for p in problems)
    assert any("torch==2.5.1, requirements.lock has 2.14.1" in p for p in problems)
    assert any("never runs pip install -r" in p for p in problems)
    assert any("resolves the project's dependencies again" in p for p in problems)
    assert not any("numpy" in p for p in problems)
    assert check_dockerfile("FROM python:3.10-slim\nRUN pip install -r requirements.lock\n",
                            PLANTED_LOCK, "3.11.7") == [
        "Dockerfile base image python:3.10-slim is not Python 3.11, the Python requirements.lock "
        "was resolved for"]


def test_checkers_catch_a_mismatched_conda_env():
    env = yaml.safe_load("dependencies: [python=3.10, pytorch=2.5.1, seaborn, pip, "
                         "{pip: [-e ., numpy==2.0.0]}]")
    problems = check_conda(env, PLANTED_LOCK, "3.11.7")
    assert any("torch==2.5.1, requirements.lock has 2.14.1" in p for p in problems)
    assert any("numpy==2.0.0" in p for p in problems)
    assert any("seaborn without a version" in p for p in problems)
    assert any("does not install -r requirements.lock" in p for p in problems)
    assert any("python=3.10" in p for p in problems)


def test_checkers_catch_a_pyproject_range_wider_than_tested():
    project = {"dependencies": ["torch>=2.4,<=2.14.1", "torchvision>=0.29,<0.30", "numpy", "scipy"]}
    problems = check_pyproject(project, PLANTED_LOCK)
    assert any("torch" in p and "is not the tested range 2.14.*" in p for p in problems)
    assert not any("torchvision" in p for p in problems)
    assert any("needs scipy" in p for p in problems)
    assert check_pyproject({"dependencies": ["numpy<2"]}, PLANTED_LOCK) == [
        "pyproject.toml allows numpy<2, requirements.lock pins 2.4.6"]


def test_lock_parser_rejects_anything_but_exact_pins():
    assert parse_lock("# c\nTorch==2.14.1  # via x\n\nscikit_learn==1.9.1\n") == {
        "torch": "2.14.1", "scikit-learn": "1.9.1"}
    with pytest.raises(ValueError, match="numpy>=2"):
        parse_lock("numpy>=2\n")


def test_dockerignore_keeps_what_the_image_needs():
    """The build context keeps the lock, the project's metadata, code and notebooks; the folders
    that are mounted at run time stay out."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [line.rstrip("/") for line in lines if line and not line.startswith("#")]

    def ignored(path):
        return any(fnmatch.fnmatch(path, p) or path.startswith(p + "/") for p in patterns)

    needed = [LOCK, "pyproject.toml", "README.md", "paper_repro/__init__.py", "paper_repro/distributed/run.py",
              "notebooks/00_quickstart.ipynb"]
    assert [p for p in needed if ignored(p)] == []
    assert all(ignored(p) for p in ("results/x", "figures/x.png", "out/notebooks/x.ipynb", "data/x", ".venv"))
    dockerfile = (ROOT / "Dockerfile").read_text()
    for volume in ("/app/results", "/app/figures", "/app/out"):
        assert volume in dockerfile
