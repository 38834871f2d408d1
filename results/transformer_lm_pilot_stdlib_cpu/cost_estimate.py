"""What the Transformer LM study costs, from this pilot: the headline grid and a depth series.

    .venv/bin/python results/transformer_lm_pilot_stdlib_cpu/cost_estimate.py [--target 2.1] [--measure]

Per point: the windows to the grid's lowest target (its ``stop_loss``) that the pilot's run of the
same method needed at that batch size (interpolated in log batch size, as
``paper_repro.sweep.estimate`` does; a pilot run that never reached it counts as the point's step
cap; a method the pilot did not run takes the larger of backprop's and greedy's windows), times
1 + ``stop_overshoot``, clipped to the point's step cap; times seconds per
window on one idle core; times the training-subset evaluations' share. Every learning rate is
assumed to train like the pilot's 3e-3 (a slower one costs more, up to its step cap: ``bound``).

Seconds per window: backprop's at depth 4 as timed on one idle core of the 2-core development
machine (AMD EPYC, one torch thread, 5 steps after a warm-up, nothing else running: the table
below), the other methods and depths scaled by their forward + backward FLOPs per window
(``paper_repro.cost.step_cost``; greedy's measured/FLOP ratio agreed within 6%). The pilot's own
wall times are not used: other jobs shared the machine during it. ``--measure`` times backprop here
instead (``sweep.measure_rates``; only meaningful on an idle machine).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import pandas as pd
import torch

from paper_repro import cost, methods, models, settings, sweep

STORE = Path(__file__).resolve().parent
# backprop, depth 4, d=64, 64-byte windows: seconds per window on one idle core (batch -> s)
IDLE_BACKPROP = {8: 0.00635, 64: 0.00493, 256: 0.00559}
DEPTHS = (2, 8)                  # the depth series beside the headline's 4 layers
DEPTH_METHODS = ["backprop", "greedy", "chunked-2"]


def flops_per_window(n_layers: int, method: str, kw: dict) -> float:
    net = models.transformer_lm(vocab_size=256, seq_len=64, **dict(kw, n_layers=n_layers))
    x = torch.randint(256, (2, 64))
    return cost.step_cost(methods.build(net, method), x, x).total_flops


def rates_for(grid: sweep.Grid, pilot: pd.DataFrame, backprop_s: dict) -> pd.DataFrame:
    """sweep.time_estimate's rates for ``grid``: windows to its stop loss from the pilot,
    seconds per window from ``backprop_s`` (depth 4) scaled by FLOPs."""
    reach = sweep.estimate.pilot_rates(pilot, grid.stop_loss)
    base = flops_per_window(4, "backprop", grid.model_kwargs)
    rows = []
    for method in grid.methods:
        scale = flops_per_window(grid.model_kwargs["n_layers"], method, grid.model_kwargs) / base
        if method in set(reach.method):
            known = reach[reach.method == method]
        else:  # per batch, the larger of the pilot methods' windows (unreached: NaN sorts last)
            known = (reach.fillna({"examples_to_stop": math.inf}).groupby("batch_size", as_index=False)
                     .examples_to_stop.max().replace(math.inf, math.nan))
        for b in grid.batch_sizes:
            s = sweep.estimate._interp_log(list(backprop_s), list(backprop_s.values()), b) * scale
            # a pilot run that never reached the stop loss counts as the headline's step cap at its batch
            ex = sweep.estimate._interp_log(known.batch_size, [
                e if not math.isnan(e) else grid.steps_for(int(k)) * int(k)
                for k, e in zip(known.batch_size, known.examples_to_stop)], b)
            rows.append(dict(method=method, batch_size=b, s_per_example=s, examples_to_stop=ex))
    return pd.DataFrame(rows)


def estimate(grid: sweep.Grid, pilot: pd.DataFrame, backprop_s: dict) -> pd.DataFrame:
    est = sweep.time_estimate(grid, rates=rates_for(grid, pilot, backprop_s))
    evals = 1 + grid.train_eval_examples / (3 * grid.eval_every_examples)  # a forward pass is ~1/3 of a step
    return est.assign(expected_s=est.expected_s * evals, bound_s=est.bound_s * evals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=None, help="stop loss (default: the cpu grid's)")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes (default: the cpu grid's)")
    ap.add_argument("--measure", action="store_true", help="time backprop here instead of the idle table")
    args = ap.parse_args()
    pilot = sweep.load_results(STORE)
    grid = settings.compute_grid("transformer-lm", "cpu")
    if args.target is not None:
        grid = dataclasses.replace(grid, stop_loss=args.target)
    if args.batches is not None:
        grid = dataclasses.replace(grid, batch_sizes=[int(b) for b in args.batches.split(",")])
    backprop_s = IDLE_BACKPROP
    if args.measure:
        r = sweep.measure_rates(dataclasses.replace(grid, methods=["backprop"]), batch_sizes=list(IDLE_BACKPROP))
        backprop_s = dict(zip(r.batch_size, r.s_per_example))
    print(f"seconds per window, backprop, depth 4: {backprop_s}")
    pilot_grid = settings.compute_grid("transformer-lm-pilot", "cpu")
    pilot_cost = estimate(dataclasses.replace(pilot_grid, stop_loss=None), pilot, backprop_s).bound_s.sum()
    rows = [dict(part="pilot", points=len(pilot_grid.points()), expected_h=pilot_cost / 3600,
                 bound_h=pilot_cost / 3600)]
    head = estimate(grid, pilot, backprop_s)
    rows.append(dict(part=f"headline ({grid.name})", points=len(head), expected_h=head.expected_s.sum() / 3600,
                     bound_h=head.bound_s.sum() / 3600))
    for depth in DEPTHS:
        g = dataclasses.replace(grid, name=f"depth{depth}", model_kwargs=dict(grid.model_kwargs, n_layers=depth),
                                methods=DEPTH_METHODS, batch_sizes=grid.batch_sizes[-3:])
        e = estimate(g, pilot, backprop_s)
        rows.append(dict(part=f"depth {depth}: {', '.join(DEPTH_METHODS)} x batch {g.batch_sizes} x "
                              f"{len(g.lrs)} lrs x {len(g.seeds)} seeds", points=len(e),
                         expected_h=e.expected_s.sum() / 3600, bound_h=e.bound_s.sum() / 3600))
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_colwidth", 90):
        print(table.round(2).to_string(index=False))
    print(f"whole study: about {table.expected_h.sum():.1f} worker-hours expected (idle core), at most "
          f"{table.bound_h.sum():.1f} (every run at its step cap); target {grid.stop_loss}, "
          f"+{grid.stop_overshoot:.0%} windows past it")
    by = head.groupby(["method", "batch_size"]).expected_s.sum().unstack() / 60
    print("headline, expected minutes per (method, batch) over its learning rates and seeds:")
    print(by.round(1).to_string())


if __name__ == "__main__":
    main()
