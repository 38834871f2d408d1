"""One colour per method and per schedule in every figure, whatever subset a figure draws."""
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from paper_repro import analysis as ef  # noqa: E402
from paper_repro import settings  # noqa: E402
from paper_repro.plots import colors, efficiency, pipeline, simulate  # noqa: E402

PLOTS = Path(__file__).resolve().parents[1] / "paper_repro" / "plots"


def _ttt(methods):
    rows = []
    for seed in (0, 1):
        for k, method in enumerate(methods):
            for b in (16, 32, 64):
                s = 100 * (1 + 32 / b) * (1 + 0.1 * seed) * (1 + 0.2 * k)
                rows.append({"method": method, "batch_size": b, "lr": 0.1, "seed": seed, "target": 1.0,
                             "reached": True, "step": s, "examples": s * b, "compute": s * b,
                             "time": s / (1 + k)})
    return pd.DataFrame(rows)


def _legend_colors(fig) -> dict:
    """{legend label: colour of its handle} of every legend in ``fig``."""
    out = {}
    for legend in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
        if legend is None:
            continue
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            color = handle.get_color() if hasattr(handle, "get_color") else handle.get_facecolor()
            if hasattr(color, "__len__") and not isinstance(color, str) and len(color) and hasattr(color[0], "__len__"):
                color = color[0]
            out[text.get_text()] = to_hex(color)
    return out


def test_greedy_has_one_colour_in_figures_of_different_method_subsets():
    two = efficiency.plot_steps_vs_batch(ef.steps_vs_batch(_ttt(["backprop", "greedy"])), "t")
    five = efficiency.plot_steps_vs_batch(
        ef.steps_vs_batch(_ttt(["backprop", "chunked-2", "chunked-3", "greedy", "overlapping"])), "t")
    c2, c5 = _legend_colors(two), _legend_colors(five)
    assert c2["greedy"] == c5["greedy"] == colors.method_color("greedy")
    assert c2["backprop"] == c5["backprop"] == colors.method_color("backprop")
    assert len({c5[m] for m in ("backprop", "chunked-2", "chunked-3", "greedy", "overlapping")}) == 5
    # and in another kind of figure, drawn from a third subset
    configs = ef.over_seeds(_ttt(["greedy", "backprop", "overlapping"]))
    pareto = _legend_colors(efficiency.plot_frontiers(configs, ef.staircase(configs), "t"))
    assert pareto["greedy"] == c2["greedy"]


def test_a_schedule_has_one_colour_in_the_simulator_and_benchmark_figures():
    runs = [{"schedule": s, "micro_batch": mb, "stages": 2, "samples_per_s": 10.0 * mb,
             "busy_fraction_per_stage": [0.9, 0.8], "peak_mem_bytes_per_stage": [2 ** 20, 2 ** 21],
             "comm_bytes_per_sample": {"forward": 100, "backward": 100 * (s != "local")}}
            for s in ("local", "zbv", "1f1b-recompute") for mb in (2, 4)]
    bench = _legend_colors(pipeline.plot_throughput(runs, "t"))
    mem = pd.DataFrame([{"schedule": s, "stages": 2, "stage": st, "micro_batch": mb, "peak_bytes": 2 ** 30}
                        for s in ("1f1b-recompute", "gpipe") for st in (0, 1) for mb in (2, 4)])
    sim = _legend_colors(simulate.plot_memory(mem, "t"))
    assert bench["1f1b-recompute"] == sim["1f1b-recompute"] == colors.schedule_color("1f1b-recompute")
    assert colors.schedule_color("local") != colors.schedule_color("1f1b")
    # a name listed nowhere gets the same colour every time, from the name alone
    assert colors.method_color("chunked@2,5") == colors.method_color("chunked@2,5")
    assert colors.schedule_color("someday-schedule") == colors.schedule_color("someday-schedule")


def test_no_plot_colours_methods_or_schedules_by_their_position():
    hits = [f"{p.name}:{i}: {line.strip()}" for p in sorted(PLOTS.glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if "color_palette(n_colors" in line]
    assert not hits, hits
    for p in sorted(PLOTS.glob("*.py")):
        text = p.read_text()
        if p.name != "colors.py" and re.search(r"hue=\"(method|schedule|baseline)\"", text):
            assert "palette=" in text, p.name   # every hue over methods or schedules passes the fixed colours


def test_every_race_strategy_has_its_own_colour():
    strategies = settings.race_settings("cpu").strategies
    colours = [colors.strategy_color(s.schedule, s.method) for s in strategies]
    assert len(set(colours)) == len(strategies), dict(zip([s.name for s in strategies], colours))
