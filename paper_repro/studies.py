"""One compute-efficiency study, end to end, as notebook 01 runs it: the profile's grid, its
sweep (resumed, or only read), the records and every analysis table, with figure titles.

    S = studies.compute_study("mlp", "quick")
    plots.efficiency.plot_steps_vs_batch(S.tables.steps_vs_batch, S.title("Steps to target vs batch size"))
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import analysis, methods, settings, sweep
from .hardware import hardware_label
from .plots.labels import figure_title, grid_labels

# every study's figures come from notebook 01: 01_<study>_<what>_<profile>.png
NOTEBOOK_NUMBER = "01"


@dataclass
class Study:
    study: str
    profile: str
    device: str
    grid: sweep.Grid
    root: Path
    records: pd.DataFrame
    rule: str
    targets: list
    sensitivity_rules: list
    tables: analysis.StudyTables
    labels: tuple = field(default=("", ""))
    beyond_grid: int = 0         # runs in the store that the grid does not list (not in ``records``)

    def title(self, what: str) -> str:
        """A figure title: ``what``, then model, data set, profile and hardware."""
        model, data = self.labels
        return figure_title(what, model=model, dataset=data, profile=self.profile, device=self.device)

    def figure(self, what: str) -> str:
        """The figure's file name: ``01_<study>_<what>_<profile>``."""
        return f"{NOTEBOOK_NUMBER}_{self.study}_{what}_{self.profile}"

    def problems(self) -> list[str]:
        """What is wrong with the numbers behind the figures (empty: nothing). Backprop must reach
        every target; each steps-vs-batch point (a median over seeds) must lie within its seeds'
        range, its examples be its steps x its batch size, and along a curve the steps must never
        grow with the batch size by more than 10% of the curve's largest value; the critical
        batch must be ``E_min / S_min`` of those points; every speedup must be positive."""
        svb, crit, head = self.tables.steps_vs_batch, self.tables.critical, self.tables.headline
        crit = crit.set_index(["method", "target"])
        out = []
        if set(svb[svb.method == "backprop"].target) != set(self.targets):
            out.append(f"backprop does not reach every target {self.targets}")
        if not svb.step.between(svb.step_min, svb.step_max).all():
            out.append("a steps-vs-batch median lies outside its seeds' range")
        if (svb.examples - svb.step * svb.batch_size).abs().max() >= 1e-6:
            out.append("examples are not steps x batch size")
        for key, g in svb.sort_values("batch_size").groupby(["method", "target"]):
            if not (g.step.diff().dropna() <= 0.1 * g.step.max()).all():
                out.append(f"steps grow with the batch size for {key}")
        lowest = svb.groupby(["method", "target"]).agg(S_min=("step", "min"), E_min=("examples", "min"))
        if (crit[["S_min", "E_min"]] - lowest.loc[crit.index]).abs().max().max() >= 1e-6:
            out.append("S_min / E_min are not the minima of the steps-vs-batch points")
        if (crit.critical_batch - crit.E_min / crit.S_min).abs().max() >= 1e-6:
            out.append("critical batch is not E_min / S_min")
        if not ((head.max_speedup > 0).all() and (head.high_compute_speedup > 0).all()):
            out.append("a speedup is not positive")
        return out

    def sensitivity(self) -> pd.DataFrame:
        """The headline under every reading rule of ``sensitivity_rules`` (:func:`analysis.sensitivity`)."""
        return analysis.sensitivity(self.records, self.targets, self.sensitivity_rules)

    def regime(self) -> pd.DataFrame:
        """Backprop's steps at the second-largest batch over the largest, per rule and target
        (:func:`analysis.regime_by_rule`)."""
        return analysis.regime_by_rule(self.records, self.targets, self.sensitivity_rules)

    def verdict(self, within: float = 1.25) -> pd.DataFrame:
        """Per (method, target), every reading a verdict on the headline needs
        (:func:`analysis.verdict_table`): the high-compute speedup with the configurations behind
        it and how far the baseline's frontier is held flat past its last run; the speedup at
        the largest compute both frontiers reach with runs of their own; the maximum over
        compute with the batch sizes it compares and whether they are in backprop's
        high-compute regime (doubling the batch cuts its steps by less than ``within``)."""
        return analysis.verdict_table(self.tables, within=within)

    def step_ratio(self) -> pd.DataFrame:
        """Per (method, target, batch size): the method's steps to the target over backprop's
        (:func:`analysis.step_ratio_table`)."""
        return analysis.step_ratio_table(self.tables.steps_vs_batch)

    def lr_edges(self) -> pd.DataFrame:
        """At the lowest target, the (method, batch size) whose best learning rate is the grid's
        smallest or largest there (:func:`analysis.lr_at_edge`): where to extend the grid."""
        svb = self.tables.steps_vs_batch
        return analysis.lr_at_edge(svb[svb.target == min(self.targets)], self.grid.lrs_for).reset_index(drop=True)

    def claims(self, paper: float | None = None, claim: str | None = None) -> pd.DataFrame:
        """The paper's ``claim`` (its factor ``paper``, None: it states none) beside this
        measurement at the lowest target, with the profile, rule, model, data, hardware, runs
        and seeds it comes from. Without ``claim``: the paper's claim for this study's
        architecture (:data:`settings.PAPER_CLAIMS`)."""
        if claim is None:
            paper, claim = settings.PAPER_CLAIMS[self.study]
        return analysis.claims_table(self.tables.headline, paper, claim).assign(
            profile=self.profile, rule=self.rule, model=self.labels[0], data=self.labels[1],
            hardware=hardware_label(self.device), runs=self.records.point_id.nunique(),
            seeds=self.records.seed.nunique())

    def save(self, **tables: pd.DataFrame) -> None:
        """Keep the headline, critical-batch and steps-vs-batch tables, and ``tables``, as CSV
        files beside the store's points (cpu/full only: the quick profile's store is temporary)."""
        if self.profile != "quick":
            analysis.save_tables(self.root, dict(headline=self.tables.headline, critical_batch=self.tables.critical,
                                                 steps_vs_batch=self.tables.steps_vs_batch, **tables))

    def summary(self) -> str:
        df = self.records
        diverged = int((df.groupby("point_id").status.first() == "diverged").sum())
        beyond = (f" ({self.beyond_grid} more in the store, beyond the grid, not read)"
                  if self.beyond_grid else "")
        return (f"{df.point_id.nunique()} of {len(self.grid.points())} runs{beyond}, {len(df)} steps recorded, "
                f"{diverged} diverged; rule {self.rule!r}, targets {self.targets}")


def _sweep_records(grid: sweep.Grid, profile: str, *, results_dir, data_dir, device, workers,
                   train_missing, reuse=()) -> tuple[Path, pd.DataFrame, int]:
    """Run (or resume, or only read) ``grid``'s store and return it, the records of the grid's
    points and how many runs it holds beyond them (a grid narrowed after they ran, e.g. a
    learning rate or batch size dropped: they stay in the store as a record, but a study reads
    only its own design, the same for every method). The quick profile always trains afresh in
    a temporary store. ``reuse``: grids whose stores' points of the same id are copied instead
    of trained (``sweep.run_sweep``)."""
    if profile == "quick":
        root = Path(tempfile.mkdtemp()) / grid.name
    else:
        root = Path(results_dir) / sweep.store_name(grid, data_dir)
    if train_missing or profile == "quick":
        print(sweep.run_sweep(grid, root, workers=workers, device=device, data_dir=data_dir,
                              threads=None if device.startswith("cuda") else 1, progress=profile != "quick",
                              reuse=[Path(results_dir) / sweep.store_name(g, data_dir) for g in reuse]))
    df = sweep.load_results(root)
    in_grid = df.point_id.isin({p["point_id"] for p in grid.points()})
    return root, df[in_grid].reset_index(drop=True), df.point_id[~in_grid].nunique()


def compute_study(study: str, profile: str = "quick", *, results_dir="results", data_dir=None, device="cpu",
                  workers: int = 1, rule: str | None = None, targets=None, train_missing: bool = True,
                  allow_cpu: bool = False) -> Study:
    """Run (or resume) the sweep of ``study`` at ``profile`` and analyse it.

    The quick profile always trains afresh in a temporary store; cpu/full resume their store
    ``results_dir/<store name>``, or with ``train_missing=False`` only read what it holds.
    ``rule`` and ``targets`` default to the profile's (``settings.analysis_settings``; targets
    picked from the data when the profile fixes none). The full profile trains for GPU-hours:
    on a CPU it starts only with ``allow_cpu=True``."""
    if profile == "full" and train_missing and not str(device).startswith("cuda") and not allow_cpu:
        raise ValueError(f"the full profile of {study!r} trains for GPU-hours, and device is {device!r}: set "
                         "device='cuda', or allow_cpu=True to train it on the CPU on purpose, or "
                         "train_missing=False to read a store")
    grid = settings.compute_grid(study, profile)
    root, df, beyond = _sweep_records(grid, profile, results_dir=results_dir, data_dir=data_dir, device=device,
                                      workers=workers, train_missing=train_missing)
    reading = settings.analysis_settings(study, profile)
    rule = rule or reading["rule"]
    targets = targets or reading["targets"] or analysis.suggest_targets(df, n=3, rule=rule)
    corpus = grid.data_kwargs.get("corpus") or "pydoc"
    data_name = ({"pydoc": "pydoc text", "stdlib": "Python stdlib source"}[corpus]
                 if grid.dataset == "text" and data_dir is None else data_dir)
    return Study(study=study, profile=profile, device=device, grid=grid, root=root, records=df, rule=rule,
                 targets=list(targets), sensitivity_rules=reading["rules"],
                 tables=analysis.study_tables(df, targets, rule), labels=grid_labels(grid, data_name),
                 beyond_grid=beyond)


@dataclass
class ModulesStudy:
    profile: str
    device: str
    table: pd.DataFrame          # one row per (depth, method, target)
    labels: tuple = field(default=("", ""))
    missing: list = field(default_factory=list)  # stores not there yet (only reading): one line each
    lr_edges: pd.DataFrame = field(default_factory=pd.DataFrame)  # as Study.lr_edges, with a depth column
    regime: pd.DataFrame = field(default_factory=pd.DataFrame)    # as Study.regime, with a depth column
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)     # every depth's steps_vs_batch, with a depth column

    def regime_by_depth(self) -> pd.DataFrame:
        """Per depth: whether backprop is in the high-compute regime under every reading rule
        and at every target (``in_regime``), with the largest ``per_doubling`` over them."""
        if self.regime.empty:
            return pd.DataFrame(columns=["depth", "largest_batch", "per_doubling_max", "in_regime"])
        return (self.regime.groupby("depth")
                .agg(largest_batch=("largest_batch", "max"), per_doubling_min=("per_doubling", "min"),
                     per_doubling_max=("per_doubling", "max"), in_regime=("in_regime", "all"))
                .reset_index())

    def title(self, what: str) -> str:
        model, data = self.labels
        return figure_title(what, model=model, dataset=data, profile=self.profile, device=self.device)


def modules_study(profile: str = "quick", *, series: str = settings.MODULES_STUDY, results_dir="results",
                  data_dir=None, device="cpu", workers: int = 1, rule: str | None = None, targets=None,
                  train_missing: bool = True) -> ModulesStudy:
    """Speedup at the high-compute end against the number of blocks (greedy's local modules) of
    the depth series ``series`` (:data:`paper_repro.settings.DEPTH_SERIES`: ``mlp-modules``,
    ``transformer-lm-modules``): the sweeps of :func:`paper_repro.settings.module_grids` (run, resumed or only read, as
    :func:`compute_study`), each analysed alone. ``table`` has one row per (depth, method,
    target): ``high_compute_speedup`` with its range over seeds (``_lo``, ``_hi``),
    ``max_speedup``, ``critical_path_ratio`` (backprop's critical path over the method's: the
    bound at equal steps), ``num_modules``, ``backprop_in_regime`` (at that depth and target,
    under every reading rule, :func:`analysis.regime_by_rule`) and ``same_run_as``: for a method
    of the series that a depth does not sweep because its local modules there are a swept
    method's (chunked-2 on two blocks is greedy), that method, whose run the row reads; None
    for a method's own runs. ``lr_edges``: per depth, at the lowest target, the
    (method, batch size) whose best learning rate is the grid's smallest or largest
    (:func:`analysis.lr_at_edge`). ``regime``: per depth, :func:`analysis.regime_by_rule` under
    every reading rule of the profile (its two largest batches need not be one doubling apart:
    ``per_doubling`` reads the cut per doubling). With ``train_missing=False`` a depth whose store does not
    exist yet is left out and named in ``missing``."""
    reading = settings.analysis_settings(series, profile)
    rule = rule or reading["rule"]
    grids = settings.module_grids(profile, series)
    sources = settings.module_sources(profile, series)
    series_methods = list(dict.fromkeys(m for g in grids.values() for m in g.methods))
    rows, missing, edges, regimes, steps = [], [], [], [], []
    for depth, grid in grids.items():
        store = Path(results_dir) / sweep.store_name(grid, data_dir)
        if profile != "quick" and not train_missing and not store.is_dir():
            missing.append(f"depth {depth}: no store {store} yet (paper-repro sweep {series} --profile {profile})")
            continue
        _, df, _ = _sweep_records(grid, profile, results_dir=results_dir, data_dir=data_dir, device=device,
                                  workers=workers, train_missing=train_missing, reuse=sources)
        if targets is None:  # the settings' targets, or picked from the first depth's data
            targets = list(reading["targets"] or analysis.suggest_targets(df, n=3, rule=rule))
        costs = analysis.cost_table(df)
        tables = analysis.study_tables(df, targets, rule)
        headline, svb = tables.headline, tables.steps_vs_batch
        edges.append(analysis.lr_at_edge(svb[svb.target == min(targets)], grid.lrs_for).assign(depth=depth))
        steps.append(svb.assign(depth=depth))
        regime = analysis.regime_by_rule(df, targets, reading["rules"]).assign(depth=depth)
        regimes.append(regime)
        in_regime = regime.groupby("target").in_regime.all()
        same = _same_runs(grid.methods, series_methods, depth)
        for _, h in headline.iterrows():
            for method in [h["method"], *[m for m, run in same.items() if run == h["method"]]]:
                rows.append(dict(depth=depth, method=method, target=h["target"], same_run_as=same.get(method),
                                 backprop_in_regime=bool(in_regime.get(h["target"], False)),
                                 num_modules=int(costs.loc[h["method"], "num_modules"]),
                                 critical_path_ratio=float(costs.loc[h["method"], "critical_path_vs_backprop"]),
                                 **{k: h.get(k) for k in ("high_compute_speedup", "high_compute_speedup_lo",
                                                          "high_compute_speedup_hi", "max_speedup")}))
    first = next(iter(grids.values()))
    model, data = grid_labels(first, data_dir)
    depths = ", ".join(map(str, grids))
    if first.model == "mlp":
        norm = " with LayerNorm" if first.model_kwargs.get("layer_norm") else ""
        model = f"MLP of width {first.model_kwargs.get('width')}{norm}, depth {depths}"
    else:
        model = f"Transformer of d={first.model_kwargs.get('d_model')}, layers {depths}"
    edges = pd.concat(edges, ignore_index=True) if edges else pd.DataFrame()
    regimes = pd.concat(regimes, ignore_index=True) if regimes else pd.DataFrame()
    steps = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
    return ModulesStudy(profile=profile, device=device, table=pd.DataFrame(rows), labels=(model, data),
                        missing=missing, lr_edges=edges, regime=regimes, steps=steps)


def _same_runs(swept: list[str], wanted: list[str], n_blocks: int) -> dict[str, str]:
    """``{method: swept method}`` for each method of ``wanted`` a depth does not sweep whose
    local modules on ``n_blocks`` blocks are a swept method's (chunked-2 on two blocks is
    greedy): the same training run, read once and reported under both names."""
    modules = {s: methods.module_blocks(s, n_blocks) for s in swept}
    same = {}
    for m in (m for m in wanted if m not in swept):
        runs = [s for s in swept if modules[s] == methods.module_blocks(m, n_blocks)]
        if runs:
            same[m] = runs[0]
    return same


def lr_edge_lines(grid: sweep.Grid, ttt: pd.DataFrame) -> list[str]:
    """Where ``grid`` should be extended, in words, from the runs of ``ttt``
    (:func:`analysis.time_to_target` at one target): each (method, batch size) whose best learning
    rate (fewest median steps over seeds, :func:`analysis.steps_vs_batch`) is the smallest or
    largest the grid sweeps there (:func:`analysis.lr_at_edge`), with how many of those rates have
    runs so far. Empty: every best is inside its grid."""
    run = ttt.groupby(["method", "batch_size"]).lr.unique()
    lines = []
    for r in analysis.lr_at_edge(analysis.steps_vs_batch(ttt), grid.lrs_for).itertuples():
        n_run = sum(any(math.isclose(lr, float(d)) for d in run.get((r.method, r.batch_size), [])) for lr in r.swept)
        swept = ", ".join(f"{lr:g}" for lr in r.swept)
        where = "the only rate swept" if r.edge == "only" else f"the {r.edge} of {swept}"
        beyond = {"highest": "a higher one", "lowest": "a lower one", "only": "rates either side"}[r.edge]
        so_far = f" ({n_run} of {len(r.swept)} run so far)" if n_run < len(r.swept) else ""
        lines.append(f"{r.method} at batch {r.batch_size}: best learning rate {r.lr:g} ({r.step:.0f} steps to loss "
                     f"{r.target:g}) is {where}{so_far}: add {beyond} (extra_lrs "
                     f"{{'{r.method}@{r.batch_size}': [...]}})")
    return lines


def lr_edge_report(study: str, profile: str, *, results_dir="results", data_dir=None) -> list[str]:
    """:func:`lr_edge_lines` for every store of a built-in ``study`` (a compute study, or each
    depth of a depth series) at the lowest target its reading settings name (or that
    :func:`analysis.suggest_targets` picks from the runs), from the runs saved so far: nothing
    is trained."""
    reading = settings.analysis_settings(study, profile)
    grids = (settings.module_grids(profile, study) if study in settings.DEPTH_SERIES
             else {None: settings.compute_grid(study, profile)})
    lines = []
    for depth, grid in grids.items():
        where = "" if depth is None else f"depth {depth}: "
        root = Path(results_dir) / sweep.store_name(grid, data_dir)
        saved = root.is_dir() and sweep.finished_ids(root)
        df = sweep.load_results(root) if saved else pd.DataFrame(columns=["point_id"])
        df = df[df.point_id.isin({p["point_id"] for p in grid.points()})]
        if df.empty:
            lines.append(f"{where}no runs of the grid saved yet")
            continue
        target = min(reading["targets"] or analysis.suggest_targets(df, n=3, rule=reading["rule"]))
        ttt = analysis.time_to_target(df, [target], reading["rule"])
        edges = lr_edge_lines(grid, ttt)
        if edges:
            lines += [where + line for line in edges]
        elif not ttt.reached.any():
            lines.append(f"{where}no run reaches loss {target:g} yet")
        else:
            lines.append(f"{where}every best learning rate at loss {target:g} is inside its grid so far")
    return lines
