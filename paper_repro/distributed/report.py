"""Tables, target checks, profiles and figures for the pipeline benchmark records."""
from __future__ import annotations

import math

MB = 1e6

# The notebook's profiles: quick = 2 CPU processes in about a minute; cpu = the README's run
# (results/pipeline/resnet18w16_cpu2.json); full = ResNet-34 at 224x224 on 4 GPUs.
PROFILES = {
    "quick": dict(model="resnet18", model_kwargs={"width": 8}, image_size=16, stages=2,
                  micro_batch=[8, 32], micro_batches=8, steps=2, warmup_steps=1, device="cpu"),
    "cpu": dict(model="resnet18", model_kwargs={"width": 16}, image_size=32, stages=2,
                micro_batch=[8, 16, 32], micro_batches=16, steps=3, warmup_steps=1, device="cpu",
                repeats=3, local_update_every=(1, 16)),
    "full": dict(model="resnet34", model_kwargs={}, image_size=224, num_classes=1000, stages=4,
                 micro_batch=[4, 8, 16, 32], micro_batches=16, steps=10, warmup_steps=2, device="cuda",
                 repeats=2, local_update_every=(1, 16)),
}


def profile_settings(profile: str) -> dict:
    """Settings of the notebook profile ``quick`` | ``cpu`` | ``full``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    return dict(PROFILES[profile])


def label(record: dict) -> str:
    """The schedule's name in tables and figures; ``local/N`` = local, optimizer step every N micro-batches."""
    u = record.get("update_every", 1)
    return record["schedule"] if record["schedule"] != "local" or u == 1 else f"local/{u}"


def configs_for(settings: dict, schedules=("local", "gpipe", "1f1b", "1f1b-recompute", "ddp"), **overrides):
    """Configs for every micro-batch size in ``settings`` x schedule (see ``run.expand``);
    ``settings`` may also hold ``repeats`` and ``local_update_every``."""
    from .run import expand

    settings = {**settings, **overrides}
    sizes = settings.pop("micro_batch")
    repeats = settings.pop("repeats", 1)
    update_every = settings.pop("local_update_every", (1,))
    return expand(settings, schedules, sizes, update_every, repeats)


def median_records(records: list[dict]) -> list[dict]:
    """One record per (schedule, micro-batch size): the median throughput and busy fractions over
    repeats (``repeats`` and ``samples_per_s_runs`` say how many and what they were); bytes and
    memory do not change between repeats."""
    import statistics

    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((label(r), r["micro_batch"]), []).append(r)
    out = []
    for runs in groups.values():
        first = dict(runs[0])
        first["samples_per_s_runs"] = [r["samples_per_s"] for r in runs]
        first["samples_per_s"] = statistics.median(first["samples_per_s_runs"])
        first["busy_fraction_per_stage"] = [statistics.median(r["busy_fraction_per_stage"][s] for r in runs)
                                            for s in range(first["stages"])]
        first["repeats"] = len(runs)
        out.append(first)
    return out


def _kb(x) -> str:
    return "-" if x is None else f"{x / 1e3:.4g}"


def format_table(records: list[dict]) -> str:
    """One line per run: throughput, busy fraction per stage, bytes per sample, peak memory per stage."""
    head = (f"{'schedule':<15} {'mb':>4} {'samples/s':>10} {'busy per stage':>18} {'fwd kB/sample':>14} "
            f"{'bwd kB/sample':>14} {'peak MB per stage':>24}")
    lines = [head, "-" * len(head)]
    for r in records:
        sps = r.get("samples_per_s")
        busy = r.get("busy_fraction_per_stage")
        mem = r.get("peak_mem_bytes_per_stage")
        comm = r["comm_bytes_per_sample"]
        lines.append(
            f"{label(r):<15} {r['micro_batch']:>4} {('-' if sps is None else f'{sps:.1f}'):>10} "
            f"{('-' if not busy else ' '.join(f'{b:.2f}' for b in busy)):>18} {_kb(comm['forward']):>14} "
            f"{_kb(comm['backward']):>14} {('-' if not mem else ' '.join(f'{m / MB:.3g}' for m in mem)):>24}")
    return "\n".join(lines)


def targets(records: list[dict]) -> list[dict]:
    """The issue's targets, per micro-batch size, from runs measured side by side."""
    by_mb: dict[int, dict[str, dict]] = {}
    for r in records:
        by_mb.setdefault(r["micro_batch"], {})[label(r)] = r
    rows = []
    for mb, runs in sorted(by_mb.items()):
        for name in sorted(n for n in runs if n.startswith("local/")):  # same optimizer steps as the baselines
            sps = runs[name]["samples_per_s"]
            if "1f1b-recompute" in runs:
                ratio = sps / runs["1f1b-recompute"]["samples_per_s"]
                rows.append(dict(micro_batch=mb, target=f"throughput {name} / 1F1B+recompute", goal=">= 1.30",
                                 value=ratio, met=ratio >= 1.3))
            plain = [runs[s]["samples_per_s"] for s in ("gpipe", "1f1b") if s in runs]
            if plain:
                ratio = sps / max(plain)
                rows.append(dict(micro_batch=mb, target=f"throughput {name} / best(GPipe, 1F1B)", goal=">= 1.00",
                                 value=ratio, met=ratio >= 1.0))
        local = runs.get("local")
        if local is None:
            continue
        sps = local["samples_per_s"]
        if "1f1b-recompute" in runs:
            ratio = sps / runs["1f1b-recompute"]["samples_per_s"]
            rows.append(dict(micro_batch=mb, target="throughput local / 1F1B+recompute", goal=">= 1.30",
                             value=ratio, met=ratio >= 1.3))
        plain = [runs[s]["samples_per_s"] for s in ("gpipe", "1f1b") if s in runs]
        if plain:
            ratio = sps / max(plain)
            rows.append(dict(micro_batch=mb, target="throughput local / best(GPipe, 1F1B)", goal=">= 1.00",
                             value=ratio, met=ratio >= 1.0))
        busy = min(local["busy_fraction_per_stage"])
        rows.append(dict(micro_batch=mb, target="busy fraction of the least busy local stage", goal=">= 0.90",
                         value=busy, met=busy >= 0.9))
        bp = next((runs[s] for s in ("1f1b", "gpipe", "1f1b-recompute") if s in runs), None)
        if bp is not None:
            ours = sum(local["comm_bytes_per_sample"].values())
            theirs = sum(bp["comm_bytes_per_sample"].values())
            ratio = ours / theirs
            rows.append(dict(micro_batch=mb, target="comm bytes local / pipelined backprop", goal="= 0.50",
                             value=ratio, met=abs(ratio - 0.5) < 0.005))
        if "1f1b-recompute" in runs:
            mine, theirs = local["peak_mem_bytes_per_stage"], runs["1f1b-recompute"]["peak_mem_bytes_per_stage"]
            worst = max(a / b for a, b in zip(mine, theirs))
            rows.append(dict(micro_batch=mb, target="peak memory local / 1F1B+recompute (worst stage)",
                             goal="<= 1.00", value=worst, met=worst <= 1.0))
    return rows


def markdown_table(records: list[dict]) -> str:
    """The run table as Markdown (for the README)."""
    lines = ["| schedule | micro-batch | samples/s (median; runs) | busy per stage | fwd kB/sample | "
             "bwd kB/sample | peak MB per stage |", "|---|---:|---|---|---:|---:|---|"]
    for r in records:
        runs = r.get("samples_per_s_runs") or [r["samples_per_s"]]
        comm = r["comm_bytes_per_sample"]
        lines.append(f"| {label(r)} | {r['micro_batch']} | **{r['samples_per_s']:.1f}** "
                     f"({', '.join(f'{v:.0f}' for v in runs)}) | "
                     f"{' / '.join(f'{b:.2f}' for b in r['busy_fraction_per_stage'])} | {comm['forward'] / 1e3:.2f} | "
                     f"{comm['backward'] / 1e3:.2f} | "
                     f"{' / '.join(f'{m / MB:.1f}' for m in r['peak_mem_bytes_per_stage'])} |")
    return "\n".join(lines)


def markdown_targets(rows: list[dict]) -> str:
    lines = ["| micro-batch | target | goal | measured | |", "|---:|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['micro_batch']} | {r['target']} | {r['goal']} | {r['value']:.3f} | "
                     f"{'met' if r['met'] else '**missed**'} |")
    return "\n".join(lines)


def format_targets(rows: list[dict]) -> str:
    lines = [f"{'mb':>4}  {'target':<50} {'goal':>8} {'measured':>9}  result"]
    for r in rows:
        lines.append(f"{r['micro_batch']:>4}  {r['target']:<50} {r['goal']:>8} {r['value']:>9.3f}  "
                     f"{'met' if r['met'] else 'MISSED'}")
    return "\n".join(lines)


def to_frame(records: list[dict]):
    """A tidy DataFrame: one row per (run, stage)."""
    import pandas as pd

    rows = []
    for r in records:
        mems = r.get("peak_mem_bytes_per_stage") or [math.nan] * r["stages"]
        busy = r.get("busy_fraction_per_stage") or [math.nan] * r["stages"]
        for s in range(r["stages"]):
            rows.append({"schedule": label(r), "micro_batch": r["micro_batch"], "stage": s,
                         "samples_per_s": r.get("samples_per_s"), "busy_fraction": busy[s],
                         "peak_mem_MB": mems[s] / MB,
                         "fwd_MB_per_sample": r["comm_bytes_per_sample"]["forward"] / MB,
                         "bwd_MB_per_sample": r["comm_bytes_per_sample"]["backward"] / MB})
    return pd.DataFrame(rows)


def comm_frame(records: list[dict]):
    """The communication table (one row per schedule) with the paper's figures beside ours."""
    import pandas as pd

    paper = {"local": 43.2, "gpipe": 86.4, "1f1b": 86.4, "1f1b-recompute": 86.4}
    rows = []
    for r in records:
        c = r["comm_bytes_per_sample"]
        B, M = r["micro_batch"], r["micro_batches"]
        rows.append({"schedule": r["schedule"], "dtype": r["dtype"], "micro_batch": B,
                     "split (blocks per stage)": " | ".join(f"{b[0]}-{b[-1]}" for b in r["split"]["blocks"]),
                     "fwd MB/sample": c["forward"] / MB, "bwd MB/sample": c["backward"] / MB,
                     "total MB/micro-batch": (c["forward"] + c["backward"]) * B / MB,
                     "total MB/step": (c["forward"] + c["backward"]) * B * M / MB,
                     "paper MB (setup unknown)": paper.get(r["schedule"], math.nan)})
    return pd.DataFrame(rows)


def model_label(model: str, model_kwargs: dict, image_size: int | None = None) -> str:
    """``MLP 8x1024``, ``ResNet-18 (width 16), 32x32 inputs``, ..."""
    kw = model_kwargs or {}
    if model == "mlp":
        name = f"MLP {kw.get('depth', 4)}x{kw.get('width', 256)}"
    elif model.startswith("resnet"):
        name = f"ResNet-{model[6:]}" + (f" (width {kw['width']})" if "width" in kw else "")
    else:
        name = f"Transformer {kw}" if kw else "Transformer"
    return name + (f", {image_size}x{image_size} inputs" if image_size and model != "transformer" else "")


def _micro_batch_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(sizes), [str(v) for v in sorted(sizes)])
    ax.minorticks_off()
    ax.set_xlabel("micro-batch size (samples)")


def plot_throughput(records: list[dict], title: str):
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = to_frame(records).drop_duplicates(["schedule", "micro_batch"])
    fig, ax = plt.subplots(figsize=(7.5, 4))
    sns.lineplot(df, x="micro_batch", y="samples_per_s", hue="schedule", style="schedule", markers=True,
                 ax=ax)
    ax.set(ylabel="throughput (samples/s)", title=title, ylim=(0, None))
    _micro_batch_axis(ax, df.micro_batch.unique())
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    return fig


def plot_memory(records: list[dict], title: str):
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = to_frame(records)
    stages = sorted(df.stage.unique())
    fig, axes = plt.subplots(1, len(stages), figsize=(4.5 * len(stages), 4), sharey=True, squeeze=False)
    for ax, s in zip(axes[0], stages):
        sns.lineplot(df[df.stage == s], x="micro_batch", y="peak_mem_MB", hue="schedule", style="schedule",
                     markers=True, ax=ax, legend=s == stages[-1])
        ax.set(ylabel="peak memory (MB, log scale)", title=f"stage {s}", yscale="log")
        _micro_batch_axis(ax, df.micro_batch.unique())
    sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_busy(records: list[dict], title: str):
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = to_frame(records)
    sizes = sorted(df.micro_batch.unique())
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 4), sharey=True, squeeze=False)
    for ax, b in zip(axes[0], sizes):
        sns.barplot(df[df.micro_batch == b], x="schedule", y="busy_fraction", hue="stage", ax=ax, errorbar=None,
                    legend=b == sizes[-1])
        if b == sizes[-1]:
            sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1), title="stage")
        ax.axhline(0.9, color="k", ls="--", lw=1)
        ax.set(ylim=(0, 1.05), ylabel="busy fraction (steady state)", title=f"micro-batch {b}", xlabel="")
        ax.tick_params(axis="x", rotation=45)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
