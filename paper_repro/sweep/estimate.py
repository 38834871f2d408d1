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
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .grid import Grid


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


def time_estimate(grid: Grid, pilot: pd.DataFrame) -> pd.DataFrame:
    """One row per point of ``grid``: ``point_id``, ``method``, ``batch_size``,
    ``expected_s`` and ``bound_s`` (see the module docstring). A method the pilot did not
    run is estimated from the pilot's slowest method."""
    rates = pilot_rates(pilot, grid.stop_loss)
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


def estimate_line(grid: Grid, pilot: pd.DataFrame, workers: int = 1) -> str:
    """One line for the console: the grid's expected and worst-case hours on ``workers``."""
    est = time_estimate(grid, pilot)
    hours = lambda s: s / 3600 / max(1, workers)  # noqa: E731
    return (f"grid {grid.name}: {len(est)} points, about {hours(est.expected_s.sum()):.1f} h expected and at most "
            f"{hours(est.bound_s.sum()):.1f} h (every run at its step cap) on {workers} worker(s), "
            f"from the pilot's seconds per example and examples to loss {grid.stop_loss}")
