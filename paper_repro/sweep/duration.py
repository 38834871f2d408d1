"""How long a grid will take, estimated from a pilot sweep of the same model and data.

From the pilot's records: seconds per training example of every (method, batch size) it ran
(``wall_time / examples`` at its last step, evaluations included), and the examples it needed
to reach the grid's ``stop_loss`` on the training subset. For every point of the grid, both
are interpolated in log batch size between the pilot's batch sizes (the nearest one outside
them), so the estimate of a point is ``seconds per example x examples``:

* ``expected_s``: examples to ``stop_loss`` x (1 + ``stop_overshoot``), clipped to the point's
  step cap, where the pilot's run of that method reached ``stop_loss`` (else the cap). It
  assumes every learning rate of the grid trains like the pilot's;
* ``bound_s``: the examples at the point's step cap, what a run that never reaches
  ``stop_loss`` costs.

Once a sweep has saved points, :func:`remaining_line` estimates what is left of it from those
points alone (seconds per FLOP, so a method not yet run is costed by its FLOPs per example); a
grid with none yet can be costed by the runs of a store of the same model and data (a depth
series' other depth).

Before a pilot exists, :func:`measure_rates` times a few training steps of every (method, batch
size) of a grid on this machine (no evaluations); ``time_estimate(grid, rates=...)`` then gives
the cost at the step caps, and with ``examples_to_stop`` filled in from a guess or a pilot, the
expected cost.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .. import train
from .grid import Grid, example_shape, grid_flops
from .store import finished_ids, load_grid, load_results


def _interp_log(xs, ys, x: float) -> float:
    """``y`` at ``x`` on the line through ``(log xs, log ys)``; the nearest end outside."""
    order = np.argsort(xs)
    lx, ly = np.log(np.asarray(xs, float)[order]), np.log(np.asarray(ys, float)[order])
    return float(np.exp(np.interp(math.log(x), lx, ly)))


def pilot_rates(pilot: pd.DataFrame, stop_loss: float | None) -> pd.DataFrame:
    """Per (method, batch size) of a pilot's records: ``s_per_example`` and
    ``examples_to_stop`` (NaN where the run never reached ``stop_loss``; median over the
    pilot's runs of that method and batch size)."""
    rows = []
    for pid, run in pilot.groupby("point_id"):
        last = run.sort_values("step").iloc[-1]
        reached = run[run["train_eval_loss"] <= stop_loss] if stop_loss is not None else run.iloc[0:0]
        rows.append(dict(method=last["method"], batch_size=int(last["batch_size"]),
                         s_per_example=float(last["wall_time"]) / float(last["examples"]),
                         examples_to_stop=float(reached["examples"].min()) if len(reached) else math.nan))
    return pd.DataFrame(rows).groupby(["method", "batch_size"], as_index=False).median()


def measure_rates(grid: Grid, *, steps: int = 3, batch_sizes=None, data_dir: str | None = None,
                  threads: int | None = 1, data=None) -> pd.DataFrame:
    """Seconds per training example of every method of ``grid`` at each of ``batch_sizes``
    (default: the grid's), timed over ``steps`` optimizer steps after one warm-up step, with
    ``threads`` torch threads (a sweep worker's 1 by default; None: unchanged) and no
    evaluation. Columns: ``method``, ``batch_size``, ``s_per_step``, ``s_per_example`` and
    ``examples_to_stop`` (NaN: unknown), the rates :func:`time_estimate` takes."""
    if data is None:
        data = train.load_data(train.TrainConfig(**grid.points()[0]["config"], data_dir=data_dir))
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    rows = []
    try:
        for method in grid.methods:
            for batch in (batch_sizes or grid.batch_sizes):
                config = dict(next(p["config"] for p in grid.points() if p["config"]["method"] == method),
                              batch_size=int(batch), data_dir=data_dir, progress=False)
                cfg = train.TrainConfig(**config)
                torch.manual_seed(cfg.seed)
                learner = train.build_learner(cfg, data)
                opt = train.make_optimizer(cfg, learner.parameters())
                batches = data.sampler("train", int(batch), torch.Generator().manual_seed(cfg.seed))
                for i in range(steps + 1):
                    if i == 1:
                        t0 = time.perf_counter()
                    x, y = next(batches)
                    opt.zero_grad(set_to_none=True)
                    sum(learner.losses(x, y)).backward()
                    opt.step()
                per_step = (time.perf_counter() - t0) / steps
                rows.append(dict(method=method, batch_size=int(batch), s_per_step=per_step,
                                 s_per_example=per_step / int(batch), examples_to_stop=math.nan))
    finally:
        torch.set_num_threads(saved)
    return pd.DataFrame(rows)


def time_estimate(grid: Grid, pilot: pd.DataFrame | None = None, *, rates: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per point of ``grid``: ``point_id``, ``method``, ``batch_size``,
    ``expected_s`` and ``bound_s`` (see the module docstring), from a ``pilot``'s records or
    from ``rates`` (:func:`measure_rates`' columns). A method the pilot did not run is
    estimated from the pilot's slowest method."""
    if (pilot is None) == (rates is None):
        raise ValueError("give exactly one of pilot (a pilot sweep's records) or rates (measure_rates)")
    rates = pilot_rates(pilot, grid.stop_loss) if rates is None else rates
    slowest = rates.groupby("method").s_per_example.median().idxmax()
    rows = []
    for p in grid.points():
        c = p["config"]
        r = rates[rates.method == c["method"]]
        r = r if len(r) else rates[rates.method == slowest]
        per_example = _interp_log(r.batch_size, r.s_per_example, c["batch_size"])
        cap = c["steps"] * c["batch_size"]
        reach = r.dropna(subset=["examples_to_stop"])
        if len(reach):
            expected = min(cap, _interp_log(reach.batch_size, reach.examples_to_stop, c["batch_size"])
                           * (1 + grid.stop_overshoot))
        else:
            expected = cap
        rows.append(dict(point_id=p["point_id"], method=c["method"], batch_size=c["batch_size"],
                         expected_s=per_example * expected, bound_s=per_example * cap))
    return pd.DataFrame(rows)


def estimate_line(grid: Grid, pilot: pd.DataFrame | None = None, workers: int = 1, *,
                  rates: pd.DataFrame | None = None) -> str:
    """One line for the console: the grid's expected and worst-case hours on ``workers``."""
    est = time_estimate(grid, pilot, rates=rates)
    hours = lambda s: s / 3600 / max(1, workers)  # noqa: E731
    source = "the pilot's" if pilot is not None else "the measured"
    return (f"grid {grid.name}: {len(est)} points, about {hours(est.expected_s.sum()):.1f} h expected and at most "
            f"{hours(est.bound_s.sum()):.1f} h (every run at its step cap) on {workers} worker(s), "
            f"from {source} seconds per example and examples to loss {grid.stop_loss}")


def saved_rates(grid: Grid, records: pd.DataFrame, per_example_flops: dict, run_flops: dict | None = None
                ) -> pd.DataFrame:
    """:func:`time_estimate`'s ``rates`` for every method of ``grid`` from a store's saved runs
    (``records``): seconds per example = the saved runs' median seconds per FLOP at that batch
    size x the method's FLOPs per example (``per_example_flops``; ``run_flops``: those of the
    grid the runs belong to, where it is another, e.g. another depth); examples to ``stop_loss`` =
    the method's own saved runs at that batch size; where it has none that reached it, the
    median over the methods that did, times the method's own median ratio to that median at the
    batch sizes where it has some (examples to a loss grow with the batch size, so a method run
    only at small batches is not taken to need as few at large ones; an estimate, not a bound)."""
    runs = pilot_rates(records, grid.stop_loss)
    runs["s_per_flop"] = runs.s_per_example / runs.method.map(run_flops or per_example_flops)
    by_batch = runs.groupby("batch_size").agg(s_per_flop=("s_per_flop", "median"),
                                              examples_to_stop=("examples_to_stop", "median"))
    rows = []
    for method in grid.methods:
        own = runs[runs.method == method].set_index("batch_size").examples_to_stop.dropna()
        ratio = (own / by_batch.examples_to_stop.reindex(own.index)).median() if len(own) else 1.0
        for batch, r in by_batch.iterrows():
            rows.append(dict(method=method, batch_size=int(batch),
                             s_per_example=r.s_per_flop * per_example_flops[method],
                             examples_to_stop=own.get(batch, r.examples_to_stop * ratio)))
    return pd.DataFrame(rows)


def remaining_estimate(grid: Grid, root, like=()) -> pd.DataFrame | None:
    """:func:`time_estimate`'s rows for the points of ``grid`` still to train into the store at
    ``root`` (not saved there, nor held by a store of ``like`` to be copied), from the store's
    own saved runs (:func:`saved_rates`). ``like``: stores of the same model and data (a depth
    series' sources) whose runs cost the grid, in order, while its own store holds none (their
    seconds per FLOP carry over; their examples to the stop loss are a guess for another
    depth). ``attrs["source"]``: the store the rates came from. None when nothing is left to
    train, when no store has a run to go by, or when the runs evaluate no training subset."""
    ids = {p["point_id"] for p in grid.points()}
    saved = finished_ids(root) & ids
    pending = ids - saved - set().union(*(finished_ids(r) for r in like))
    if not pending:
        return None
    source = root if saved else next((r for r in like if finished_ids(r)), None)
    if source is None:
        return None
    records = load_results(source)
    if saved:
        records = records[records.point_id.isin(saved)]
    if grid.stop_loss is not None and "train_eval_loss" not in records:
        return None
    flops = grid_flops(grid, *example_shape(grid))["per_example"]
    other = grid if saved else load_grid(source)
    run_flops = flops if saved else grid_flops(other, *example_shape(other))["per_example"]
    est = time_estimate(grid, rates=saved_rates(grid, records, flops, run_flops))
    est = est[est.point_id.isin(pending)].reset_index(drop=True)
    est.attrs["source"] = source
    return est


def remaining_line(grid: Grid, root, workers: int = 1, like=()) -> str | None:
    """One line for the console when a sweep resumes: about how long its pending points will take
    on ``workers``, and at most (every run at its step cap) (:func:`remaining_estimate`)."""
    est = remaining_estimate(grid, root, like)
    if est is None:
        return None
    hours = lambda s: s / 3600 / max(1, workers)  # noqa: E731
    runs = ("the saved runs'" if est.attrs["source"] == root
            else f"the runs of {Path(est.attrs['source']).name} (none of this grid saved yet):")
    return (f"about {hours(est.expected_s.sum()):.1f} h left on {workers} worker(s), at most "
            f"{hours(est.bound_s.sum()):.1f} h, from {runs} seconds per FLOP"
            + (f" and examples to loss {grid.stop_loss:g}" if grid.stop_loss is not None else ""))
