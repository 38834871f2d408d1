"""The regime figures draw what the efficiency tables hold."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from paper_repro import analysis as ef  # noqa: E402
from paper_repro.plots import efficiency as scaling  # noqa: E402


def _ttt():
    rows = []
    for seed in (0, 1):
        for method, crit in (("backprop", 4.0), ("greedy", 1.0)):
            for b in (16, 32, 64):
                for lr in (0.1, 0.3):
                    s = (100 * (1 + 32 / b)) * (1 + 0.1 * seed) * (1 if lr == 0.1 else 1.5)
                    rows.append({"method": method, "batch_size": b, "lr": lr, "seed": seed, "target": 1.0,
                                 "reached": True, "step": s, "examples": s * b, "compute": s * b,
                                 "time": s * crit})
    return pd.DataFrame(rows)


def test_steps_vs_batch_one_line_per_method_with_perfect_scaling():
    svb = ef.steps_vs_batch(_ttt())
    fig = scaling.plot_steps_vs_batch(svb, "t")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"backprop", "greedy"}
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == 2  # one perfect-scaling line per method


def test_frontiers_and_speedup_band_draw_steps():
    ttt = _ttt()
    configs = ef.over_seeds(ttt)
    fig = scaling.plot_frontiers(configs, ef.staircase(configs), "t")
    assert fig.axes[0].get_title() == "target 1"
    sp = ef.speedup(configs)
    fig = scaling.plot_speedup_band(sp, list(ef.per_seed_curves(ttt).values()), "t")
    assert len(fig.axes[0].collections) >= 1  # the band over seeds
    ys = fig.axes[0].get_lines()[0].get_ydata()
    assert np.allclose(ys, sp["speedup"].to_numpy())


def test_empty_tables_say_so():
    fig = scaling.plot_steps_vs_batch(ef.steps_vs_batch(_ttt().assign(reached=False, step=np.nan,
                                                                      time=np.nan)), "t")
    assert "no run reached" in fig.axes[0].texts[0].get_text()


def test_log_axes_label_only_minor_ticks_that_cannot_collide():
    import matplotlib.pyplot as plt

    from paper_repro.plots.common import _two_or_five, clean_log_ticks
    assert [_two_or_five(v) for v in (2e9, 3e9, 5e9, 0.5, 20.0, 40.0)] == [
        r"$\mathdefault{2\times10^{9}}$", "", r"$\mathdefault{5\times10^{9}}$", "0.5", "20", ""]
    fig, (short, long) = plt.subplots(1, 2)
    short.plot([1.9e9, 1.2e10], [1, 2]); short.set_xscale("log")
    long.plot([1e8, 1.5e10], [1, 2]); long.set_xscale("log")
    for ax in (short, long):
        clean_log_ticks(ax)
    fig.canvas.draw()

    def shown(ax):
        lo, hi = ax.get_xlim()
        fmt = ax.xaxis.get_minor_formatter()
        return [fmt(x) for x in ax.xaxis.get_minorticklocs() if lo <= x <= hi and fmt(x)]
    assert shown(short) == [r"$\mathdefault{2\times10^{9}}$", r"$\mathdefault{5\times10^{9}}$"]
    assert shown(long) == []
    plt.close(fig)


def test_speedup_vs_modules_draws_a_seed_range_that_misses_its_median_point():
    frame = pd.DataFrame([dict(depth=d, method="greedy", target=1.0, critical_path_ratio=1.5 * d,
                               high_compute_speedup=0.5 * d, high_compute_speedup_lo=0.55 * d,
                               high_compute_speedup_hi=0.6 * d, max_speedup=d) for d in (4, 8, 16)])
    fig = scaling.plot_speedup_vs_modules(frame, "t")
    ax = fig.axes[0]
    segments = ax.collections[0].get_segments()
    assert [tuple(seg[:, 1]) for seg in segments] == [(0.55 * d, 0.6 * d) for d in (4, 8, 16)]
    assert list(ax.lines[0].get_ydata()) == [2.0, 4.0, 8.0]
