"""Which part of the setting sets the levels of the gradient cosine: an ablation, one change at a time.

The base setting is the gradient-similarity study's (:class:`~paper_repro.settings.types.GradientSettings`,
study ``gradient`` of :mod:`paper_repro.settings`): a greedy MLP of ``depth`` blocks of ``width``,
Adam, the cosine of each block's local update with its backprop gradient measured on the
training mini-batch. Each :class:`~paper_repro.settings.types.AblationVariant` of
``S.ablation.variants`` changes some of it (every change is described there). Two need more
words: with ``trajectory="backprop"`` the greedy auxiliary heads train alongside on the
(detached) block outputs, so that the local update can still be measured along a backprop
trajectory; with ``heads="deep"`` each auxiliary head has as many Linear + ReLU layers as there
are hidden blocks after it, then the classifier; with ``last_block="classifier"`` the net's
output head is the identity, so block ``depth - 1`` is followed by one linear layer, exactly
like its auxiliary head.

:func:`run_ablation` saves one unit per variant x seed (resumable) and the tables
``ablation_cosine.csv`` (every recorded step), ``ablation_layers.csv`` (per variant and layer:
mean over the last 20% of steps, sd over seeds, the paper's range) and ``ablation_summary.csv``
(one row per variant with its distance from the paper's ranges).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from .. import methods, models
from .. import train as train_mod
from ..blocknet import BlockNet
from ..settings.types import AblationVariant, GradientSettings
from .gradients import gradient_cosine
from .store import UnitStore
from .method_runs import PAPER_GREEDY_COSINE, gradient_claims, load_data


@dataclass(frozen=True)
class AblationRun(GradientSettings):
    """What one variant trains with (:func:`variant_settings`): the base settings with no
    ``ablation`` of their own, ``seeds`` the ablation's (or the variant's), and the five
    settings the variants change beyond them, at the base's values unless the variant sets them."""
    optimizer: str = "adam"
    probe_examples: int | None = None
    trajectory: str = "greedy"
    heads: str = "linear"
    last_block: str = "block"


def ablation_net(depth: int, width: int, in_dim: int, num_classes: int, heads: str = "linear",
                 last_block: str = "block") -> BlockNet:
    """The MLP of the ablation: ``depth`` blocks, with linear or ``"deep"`` auxiliary heads, and
    either a hidden last block (``"block"``, the net's head a linear classifier) or the
    classifier itself as the last block (``"classifier"``, the net's head the identity)."""
    if heads not in ("linear", "deep"):
        raise ValueError(f"heads must be 'linear' or 'deep', got {heads!r}")
    if last_block not in ("block", "classifier"):
        raise ValueError(f"last_block must be 'block' or 'classifier', got {last_block!r}")
    hidden = depth - (last_block == "classifier")
    if hidden < 1:
        raise ValueError(f"depth {depth} leaves no hidden block (last_block={last_block!r})")
    blocks = list(models.mlp(depth=hidden, width=width, in_dim=in_dim, num_classes=num_classes).blocks)
    if last_block == "classifier":
        blocks.append(nn.Linear(width, num_classes))
    last = len(blocks) - 1

    def head(i: int) -> nn.Module:
        if i == last:
            return nn.Identity() if last_block == "classifier" else nn.Linear(width, num_classes)
        after = hidden - 1 - i if heads == "deep" else 0   # hidden blocks after block i
        layers: list[nn.Module] = []
        for _ in range(after):
            layers += [nn.Linear(width, width), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(width, num_classes)) if layers else nn.Linear(width, num_classes)

    return BlockNet(blocks, head, name=f"mlp{depth}x{width}-{heads}-{last_block}")


class CosineProbe:
    """``train.train`` callback: the greedy learner's per-block gradient cosine at step 1 and every
    ``every`` steps, on the training batch or on a fixed ``probe`` batch ``(x, y)``.

    With ``head_optimizer`` (a backprop trajectory), the greedy auxiliary heads are first
    trained one step on the detached block outputs of the training batch, at every step."""

    def __init__(self, greedy: methods.Learner, every: int, probe=None, head_optimizer=None):
        self.greedy, self.every, self.probe, self.head_optimizer = greedy, every, probe, head_optimizer
        self.rows: list[dict] = []

    def __call__(self, step, learner, x, y):
        if self.head_optimizer is not None:
            with torch.no_grad():
                feats = self.greedy.net.features(x)
            loss = sum(self.greedy.net.loss(h(f), y) for h, f in zip(self.greedy.heads[:-1], feats[:-1]))
            self.head_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.head_optimizer.step()
        if step == 1 or step % self.every == 0:
            px, py = self.probe if self.probe is not None else (x, y)
            for i, c in enumerate(gradient_cosine(self.greedy, px, py)):
                self.rows.append({"step": step, "layer": i + 1, "cosine": c})


def variant_settings(S: GradientSettings, variant: AblationVariant) -> AblationRun:
    """The base settings ``S`` with ``variant``'s changes applied."""
    base = {f.name: getattr(S, f.name) for f in dataclasses.fields(S) if f.name != "ablation"}
    return AblationRun(**{**base, "seeds": _ablation(S).seeds, **variant.changes()})


def _ablation(S: GradientSettings):
    if S.ablation is None:
        raise ValueError("these gradient-similarity settings have no ablation (the full profile runs none)")
    return S.ablation


def ablation_unit(V: AblationRun, seed: int, data, device: str = "cpu") -> tuple[pd.DataFrame, dict]:
    """Train one variant ``V`` (from :func:`variant_settings`) with ``seed``: the cosine rows and a summary."""
    if V.trajectory not in ("greedy", "backprop"):
        raise ValueError(f"trajectory must be 'greedy' or 'backprop', got {V.trajectory!r}")
    torch.manual_seed(seed)
    net = ablation_net(V.depth, V.width, math.prod(data.input_shape), data.num_classes, V.heads,
                       V.last_block).to(device)
    greedy = methods.build(net, "greedy")
    learner = greedy if V.trajectory == "greedy" else methods.build(net, "backprop")
    head_opt = None
    if V.trajectory == "backprop":  # the auxiliary heads (all but the shared last one) learn alongside
        head_opt = torch.optim.Adam([p for h in greedy.heads[:-1] for p in h.parameters()], lr=V.lr)
    probe = None
    if V.probe_examples:
        idx = train_mod.train_eval_indices(data, V.probe_examples)
        px, py = data.batch("train", idx)
        probe = (px.to(device), py.to(device))
    cb = CosineProbe(greedy, V.every, probe, head_opt)
    cfg = train_mod.TrainConfig(model=None, method=None, dataset=V.dataset, steps=V.steps,
                                batch_size=V.batch_size, optimizer=V.optimizer, lr=V.lr, seed=seed,
                                eval_every=0, eval_examples=1000, device=device, progress=False)
    result = train_mod.train(cfg, data=data, callback=cb, learner=learner)
    if result.status != "finished":
        raise RuntimeError(f"ablation variant diverged with seed {seed}; lower its lr ({V.lr})")
    s = result.summary()
    return pd.DataFrame(cb.rows), {"final_loss": s["final_loss"], "test_acc": s["eval_acc"],
                                   "wall_time_s": s["wall_time_s"]}


def paper_distance(measured: dict[int, float]) -> float:
    """Mean over the paper's five layers (aligned from the top, as in :func:`gradient_claims`) of
    how far the measured cosine lies outside the paper's range (0 inside)."""
    n = max(measured)
    dist = []
    for layer, value in measured.items():
        paper_layer = 5 - (n - layer)
        if paper_layer in PAPER_GREEDY_COSINE:
            lo, hi = PAPER_GREEDY_COSINE[paper_layer]
            dist.append(max(lo - value, 0.0, value - hi))
    return float(np.mean(dist))


def summarise_ablation(S: GradientSettings, root: str | Path) -> dict[str, pd.DataFrame]:
    """Rebuild the ablation tables from every saved unit."""
    store = UnitStore(root)
    frames, layers, summary = [], [], []
    for variant in _ablation(S).variants:
        V = variant_settings(S, variant)
        units = [store.load(f"{variant.name}_s{seed}") for seed in V.seeds if store.done(f"{variant.name}_s{seed}")]
        if not units:
            continue
        df = pd.concat([pd.DataFrame(u["rows"]).assign(seed=u["seed"]) for u in units], ignore_index=True)
        frames.append(df.assign(variant=variant.name))
        claims = gradient_claims(df.assign(method="greedy"))
        layers.append(claims.assign(variant=variant.name))
        measured = dict(zip(claims.layer, claims.measured))
        summary.append({"variant": variant.name, "change": variant.change, "seeds": len(units),
                        **{f"layer_{k}": v for k, v in measured.items()},
                        "distance_to_paper": round(paper_distance(measured), 3),
                        "layers_compared": min(len(measured), len(PAPER_GREEDY_COSINE)),
                        "final_loss": round(float(np.mean([u["final_loss"] for u in units])), 3),
                        "test_acc": round(float(np.mean([u["test_acc"] for u in units])), 3)})
    if not frames:
        raise ValueError(f"no ablation units saved in {root}")
    tables = {"ablation_cosine": pd.concat(frames, ignore_index=True)[["variant", "seed", "step", "layer", "cosine"]],
              "ablation_layers": pd.concat(layers, ignore_index=True)[["variant", *claims.columns]],
              "ablation_summary": _layers_in_order(pd.DataFrame(summary))}
    for name, t in tables.items():
        store.write_table(name, t)
    return tables


def _unit_settings(V: AblationRun) -> dict:
    """What a saved unit records of its settings (and must match to be resumed)."""
    saved = dataclasses.asdict(V)
    del saved["ablation"]  # always None here; not part of what a unit records
    return json.loads(json.dumps(saved))


def _layers_in_order(df: pd.DataFrame) -> pd.DataFrame:
    """``layer_1 .. layer_N`` together after ``seeds``, whatever depth each variant has."""
    layer_cols = sorted((c for c in df.columns if c.startswith("layer_")), key=lambda c: int(c.split("_")[1]))
    front = ["variant", "change", "seeds"]
    return df[front + layer_cols + [c for c in df.columns if c not in front and c not in layer_cols]]


def run_ablation(S: GradientSettings, data_dir, root: str | Path, device: str = "cpu", log=print,
                 seeds: list[int] | None = None) -> dict[str, pd.DataFrame]:
    """Every seed x variant of ``S.ablation`` (all variants of the first seed first), one saved
    unit each (resumable); ``seeds`` restricts this call to some seeds. Returns the tables."""
    store = UnitStore(root)
    loaded: dict[str, object] = {}
    variants = [(v, variant_settings(S, v)) for v in _ablation(S).variants]
    all_seeds = sorted({seed for _, V in variants for seed in V.seeds})
    for seed, (variant, V) in ((s, vv) for s in all_seeds for vv in variants):
        if seed in V.seeds and (seeds is None or seed in seeds):
            name = f"{variant.name}_s{seed}"
            if store.done(name):
                if store.load(name)["settings"] != _unit_settings(V):
                    raise ValueError(f"unit {name} in {root} was saved with other settings; use another folder "
                                     "or delete that unit")
                log(f"[{time.strftime('%H:%M:%S')}] ablation {name}: done before, skipped")
                continue
            key = repr(sorted(V.data_kwargs.items()))
            if key not in loaded:
                loaded[key] = load_data(V, data_dir)
            t0 = time.perf_counter()
            rows, info = ablation_unit(V, seed, loaded[key], device)
            store.save(name, {"variant": variant.name, "seed": seed, **info, "settings": _unit_settings(V),
                              "rows": rows})
            last = rows[rows.step == rows.step.max()].cosine.round(2).tolist()
            log(f"[{time.strftime('%H:%M:%S')}] ablation {name}: last cosines {last}, "
                f"{time.perf_counter() - t0:.0f} s")
    return summarise_ablation(S, root)

