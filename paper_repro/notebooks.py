"""Run the figure notebooks as a batch with Papermill.

Every notebook in ``notebooks/`` has a cell tagged ``parameters`` that holds the
quick profile, e.g.::

    profile = "quick"            # quick | cpu | full
    figures_dir = "../figures"

``run_notebooks`` executes each notebook with ``profile`` and an absolute
``figures_dir`` injected, writes the executed copy to ``out_dir`` and keeps going
when one fails; at the end it raises a RuntimeError naming every failure, so the
``paper-repro notebooks run`` command (:mod:`paper_repro.cli`) exits non-zero.
Ctrl-C or SIGTERM stops the batch: the running kernel and every process it started are
stopped, and :class:`NotebooksInterrupted` lists the notebooks that finished.
:func:`check_parameters` is what each notebook's first cell calls on its parameters, and
:func:`notebook_path` places a relative path (``figures_dir = "../figures"``) next to the
notebooks whatever the kernel's working directory.

The kernel is ``python3``. In a virtual environment jupyter_client resolves it to
the interpreter running this code (ipykernel's own kernelspec says ``python``,
which jupyter_client replaces by ``sys.executable``), so the notebooks see the
same packages as the caller.
"""

from __future__ import annotations

import ast
import json
import logging
import sys
import threading
import time
from pathlib import Path

import psutil
from tqdm.auto import tqdm

from . import kernel_log, signals
from .names import PROFILES

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
# Notebooks that a batch runs once per value of one of their parameters, unless the caller sets
# that parameter: {notebook stem: (parameter, {profile: values})}. Notebook 01 draws every compute
# study; the deep MLP (mlp-deep) and the Transformer LM (transformer-lm) are run by name.
COMPUTE_NOTEBOOK = "01_compute_efficiency"
RUN_PER_VALUE = {COMPUTE_NOTEBOOK: ("study", {"quick": ("mlp", "transformer", "resnet"),
                                                     "cpu": ("mlp", "transformer", "resnet"),
                                                     "full": ("mlp", "transformer", "resnet")})}
# arguments of every kernel: its log leaves out ipykernel's warning about unencrypted TCP, and
# matplotlib draws with the inline backend whatever MPLBACKEND says (a Docker image or a shell may
# set Agg), so the executed copies embed every figure; the inline backend changes no rcParams, so
# the files the notebooks save are the same bytes as under Agg
KERNEL_ARGUMENTS = [f"--IPKernelApp.logging_config={json.dumps(kernel_log.LOGGING_CONFIG)}", "--matplotlib=inline"]


def check_parameters(values: dict, types: dict) -> None:
    """Check a notebook's parameters (as Papermill injected them) against ``types``
    (``{name: type or tuple of types}``); ``profile`` must also be a known profile.

    Papermill passes ``-p steps abc`` as the string ``'abc'``: this turns such a mistake into
    one clear ``ValueError`` naming the parameter, the value and the expected type, before
    any training starts."""
    for name, expected in types.items():
        if name not in values:
            raise ValueError(f"notebook parameter {name!r} is missing")
        value = values[name]
        expected = expected if isinstance(expected, tuple) else (expected,)
        ok = isinstance(value, expected) and not (isinstance(value, bool) and bool not in expected)
        if not ok:
            names = " or ".join("None" if t is type(None) else t.__name__ for t in expected)
            raise ValueError(f"notebook parameter {name}={value!r} has type {type(value).__name__}; "
                             f"expected {names}")
    if "profile" in values and values["profile"] not in PROFILES:
        raise ValueError(f"unknown profile {values['profile']!r}; valid: {', '.join(PROFILES)}")


def notebook_path(path: str | None) -> str | None:
    """``path`` from a notebook's parameters cell, made absolute: an absolute path unchanged, a
    relative one (``"../figures"``) taken from this repository's ``notebooks/`` folder, where
    JupyterLab runs the notebooks, rather than from the current directory (Papermill's kernel
    starts in the caller's). Outside a source checkout (no ``notebooks/`` folder next to the
    package), from the current directory. None stays None."""
    if path is None:
        return None
    p = Path(path).expanduser()
    base = NOTEBOOKS_DIR if NOTEBOOKS_DIR.is_dir() else Path.cwd()
    return str(p if p.is_absolute() else (base / p).resolve())


class NotebooksInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during :func:`run_notebooks`; ``results`` lists the notebooks that
    ended before it, as ``(name, seconds, status)``."""

    def __init__(self, message: str, results: list):
        super().__init__(message)
        self.results = results


def stop_children(grace: float = 5.0) -> int:
    """Stop every descendant of this process (a notebook's kernel and what it started, such as
    pipeline stages in their own sessions): SIGTERM, then SIGKILL after ``grace`` seconds.
    Returns how many there were."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(children, timeout=grace)
    for child in alive:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return len(children)


def notebook_parameters(pm, path: Path, base: dict, *extra: dict | None) -> dict:
    """``base`` plus each of ``extra``'s entries that the notebook at ``path`` declares in its
    ``parameters`` cell (Papermill's inspection of that cell)."""
    declared = set(pm.inspect_notebook(str(path)))
    out = dict(base)
    for more in extra:
        out.update({k: v for k, v in (more or {}).items() if k in declared})
    return out


def declared_parameters(pm, paths) -> dict[str, list[str]]:
    """``{parameter: [notebooks that declare it]}`` over the notebooks at ``paths``."""
    declared: dict[str, list[str]] = {}
    for path in paths:
        for name in pm.inspect_notebook(str(path)):
            declared.setdefault(name, []).append(Path(path).stem)
    return declared


def check_parameter_names(paths, names) -> None:
    """ValueError naming the first of ``names`` that none of the notebooks at ``paths``
    declares in its ``parameters`` cell (a misspelt ``-p``), with the ones they declare."""
    declared: dict[str, list[str]] = {}
    for path in paths:
        for name in parameter_names(path):
            declared.setdefault(name, []).append(Path(path).stem)
    for name in names:
        if name not in declared:
            which = f"notebook {Path(paths[0]).stem}" if len(paths) == 1 else f"any of the {len(paths)} notebooks"
            raise ValueError(f"unknown notebook parameter {name!r}: not declared by {which}; "
                             f"valid: {', '.join(sorted(declared)) or '(none)'}")


def _code_cells(path) -> list:
    """The code cells of the notebook at ``path`` (read as JSON: no Papermill, no kernel)."""
    try:
        nb = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read notebook {path}: {err}") from None
    return [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def parameter_names(path) -> list[str]:
    """The names the cell tagged ``parameters`` of the notebook at ``path`` assigns (what
    Papermill's inspection finds), read without Papermill."""
    for cell in _code_cells(path):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            names = []
            for node in ast.parse(_source(cell)).body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                    if isinstance(node, ast.AnnAssign) else []
                names += [t.id for t in targets if isinstance(t, ast.Name)]
            return names
    return []


# what a notebook's check_parameters call may name as a type
_TYPE_NAMES = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict, "tuple": tuple,
               "type": type, "None": None}


def declared_types(path) -> dict:
    """``{parameter: type or tuple of types}`` as the notebook at ``path`` checks them: the second
    argument of its ``check_parameters(dict(...), dict(name=type, ...))`` call ({} without one)."""
    for cell in _code_cells(path):
        source = _source(cell)
        if "check_parameters(" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check_parameters"
                    and len(node.args) == 2 and isinstance(node.args[1], ast.Call)):
                return {kw.arg: eval(compile(ast.Expression(kw.value), str(path), "eval"),  # noqa: S307
                                     {"__builtins__": {}}, _TYPE_NAMES)
                        for kw in node.args[1].keywords if kw.arg is not None}
    return {}


def check_parameter_values(paths, parameters: dict) -> None:
    """ValueError (naming the notebook, the parameter, the value and the type it checks for) when
    a value in ``parameters`` has a type that a notebook at ``paths`` declaring it refuses in its
    first cell: found before any kernel starts. Unknown names are :func:`check_parameter_names`'s."""
    for path in paths:
        types = declared_types(path)
        for name, value in parameters.items():
            if name in types:
                try:
                    check_parameters({name: value}, {name: types[name]})
                except ValueError as err:
                    raise ValueError(f"{err} (notebook {Path(path).stem})") from None


def _execute(pm, path: Path, out_path: Path, params: dict, timeout) -> None:
    """``pm.execute_notebook`` in a worker thread, so that Ctrl-C and SIGTERM reach this (main)
    thread (the notebook client would otherwise take them over, shut the kernel down and let
    the batch carry on). On either, the kernel and its processes are stopped and the
    interrupt re-raised."""
    error: list[BaseException] = []

    def target():
        try:
            pm.execute_notebook(str(path), str(out_path), parameters=params, kernel_name="python3",
                                cwd=str(path.parent), progress_bar=False, execution_timeout=timeout,
                                extra_arguments=KERNEL_ARGUMENTS)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            error.append(e)

    worker = threading.Thread(target=target, name=f"papermill {path.stem}", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        logging.getLogger("papermill").disabled = True  # the client's "kernel died" is expected now
        stop_children()
        worker.join(10)
        raise
    if error:
        raise error[0]


def list_notebooks(notebooks_dir=NOTEBOOKS_DIR):
    """The notebooks in ``notebooks_dir``, sorted by name (checkpoints excluded)."""
    notebooks_dir = Path(notebooks_dir)
    if not notebooks_dir.is_dir():
        raise ValueError(f"notebooks_dir {str(notebooks_dir)!r} is not a directory")
    return sorted(p for p in notebooks_dir.glob("*.ipynb") if not p.name.startswith("."))


def select_notebooks(paths, only=None):
    """Filter ``paths`` by ``only``: a name or a list of names, each matching a
    notebook's stem exactly or as a substring. An unmatched name is a ValueError."""
    if only is None:
        return list(paths)
    names = [only] if isinstance(only, str) else list(only)
    chosen = []
    for name in names:
        stem = Path(name).stem if name.endswith(".ipynb") else name
        exact = [p for p in paths if p.stem == stem]
        matches = exact or [p for p in paths if stem in p.stem]
        if not matches:
            available = ", ".join(p.stem for p in paths) or "(none)"
            raise ValueError(f"unknown notebook {name!r}; available notebooks: {available}")
        chosen += [p for p in matches if p not in chosen]
    return sorted(chosen)


def notebook_runs(paths, profile: str, given: dict | None = None) -> list[tuple[Path, str, dict]]:
    """The runs a batch makes of the notebooks at ``paths``: ``(notebook, run name, its own
    parameters)``, one per notebook, except that a notebook of :data:`RUN_PER_VALUE` runs once
    per value of its parameter at ``profile`` (named ``<stem>[<value>]``) unless ``given`` (the
    caller's parameters for it) sets that parameter."""
    runs = []
    for path in paths:
        name, values = RUN_PER_VALUE.get(path.stem, (None, {}))
        if name is None or name in (given or {}).get(path.stem, {}):
            runs.append((path, path.stem, {}))
        else:
            runs += [(path, f"{path.stem}[{v}]", {name: v}) for v in values[profile]]
    return runs


def run_notebooks(profile="quick", only=None, out_dir="out/notebooks", figures_dir="figures",
                  timeout=None, notebooks_dir=NOTEBOOKS_DIR, parameters=None, per_notebook=None,
                  progress=True):
    """Execute the notebooks with Papermill.

    profile: 'quick' | 'cpu' | 'full', injected as the notebook parameter ``profile``.
    only: a notebook name (stem or substring) or a list of them; None runs all.
    out_dir: where the executed copies go (same file names; ``<stem>_<value>.ipynb`` for a
    notebook run once per value of a parameter, :func:`notebook_runs`).
    figures_dir: injected as an absolute path; notebooks save their figures there.
    timeout: per-cell execution timeout in seconds (None: no limit).
    notebooks_dir: where the ``*.ipynb`` files are (default: the repo's notebooks/).
    parameters: ``{name: value}`` injected into every notebook that declares that parameter.
    per_notebook: ``{notebook stem or run name: {name: value}}`` injected into that notebook or
    run (after ``parameters``), again only where the notebook declares the parameter.
    progress: show a progress bar over the notebooks.

    Relative ``out_dir`` / ``figures_dir`` are taken from the current directory.
    Returns a list of (run name, seconds, status) with status 'ok' or 'failed'.
    Raises RuntimeError after the last notebook if any failed, :class:`NotebooksInterrupted`
    on Ctrl-C or SIGTERM (after stopping the kernel and its processes).
    """
    import papermill as pm  # a heavy import, needed only here: `paper-repro --help` stays fast

    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    paths = select_notebooks(list_notebooks(notebooks_dir), only)
    if not paths:
        print(f"no notebooks found in {notebooks_dir}", file=sys.stderr)
        return []
    out_dir, figures_dir = Path(out_dir).resolve(), Path(figures_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    figures_dir.mkdir(parents=True, exist_ok=True)
    params = {"profile": profile, "figures_dir": str(figures_dir)}

    given = {p.stem: {**(parameters or {}), **(per_notebook or {}).get(p.stem, {})} for p in paths}
    runs = notebook_runs(paths, profile, given)
    results, failures = [], []
    bar = tqdm(runs, desc=f"notebooks ({profile})", unit="nb", disable=not progress)
    with signals.sigterm_as_interrupt():
        try:
            for path, name, own in bar:
                bar.set_postfix_str(name)
                out_path = out_dir / (name.replace("[", "_").rstrip("]") + ".ipynb")
                t0 = time.perf_counter()
                try:
                    _execute(pm, path, out_path, notebook_parameters(pm, path, params, own, parameters,
                                                                     (per_notebook or {}).get(path.stem),
                                                                     (per_notebook or {}).get(name)), timeout)
                    status = "ok"
                except Exception as e:  # one bad notebook must not stop the batch
                    status = "failed"
                    reason = getattr(e, "ename", type(e).__name__)
                    lines = str(getattr(e, "evalue", e)).strip().splitlines()
                    evalue = lines[0] if lines else ""
                    failures.append(f"{name}: {reason}: {evalue} (executed copy: {out_path})")
                    tqdm.write(f"FAILED {name}: {reason}: {evalue}", file=sys.stderr)
                results.append((name, time.perf_counter() - t0, status))
        except KeyboardInterrupt as stop:
            raise NotebooksInterrupted(
                f"stopped while running {name}, whose kernel and processes are stopped; "
                f"{len(results)} of {len(runs)} notebooks had ended (their figures are in {figures_dir})",
                results) from stop
        finally:
            bar.close()

    if failures:
        err = RuntimeError(f"{len(failures)} of {len(runs)} notebook runs failed:\n  "
                           + "\n  ".join(failures))
        err.results = results
        raise err
    return results
