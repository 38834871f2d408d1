"""The timing engine: a dependency-driven discrete-event simulation of one pipeline.

Every processor runs its actions in the order its schedule gives (:mod:`.schedules`). An
action starts when its processor is free **and** its inputs have arrived:

* ``F`` of piece ``v`` needs ``F`` of piece ``v-1`` on the same micro-batch, plus the link time
  when the two pieces sit on different processors;
* ``B`` / ``I`` of piece ``v`` needs its own ``F`` and the ``B`` / ``I`` of piece ``v+1`` (the
  gradient of its output), plus the link time back;
* ``W`` needs the ``I`` of the same piece and micro-batch.

After its last action of a step every processor steps its optimizer. Steps follow one another
with no barrier, as in the real runs (a processor starts the next step as soon as its inputs
allow). A message takes ``latency + bytes / bandwidth`` seconds; links are full duplex and not
shared, and a processor does not compute while it sends (sends are asynchronous).

The first processor also draws the input (``Costs.data`` per micro-batch, a ``DATA`` action):
the backprop schedules take a whole step's batch, which ``bench pipeline`` draws before the
step (the next processor waits for it), the local schedule one micro-batch before its forward.

The local schedule has no backward messages and no flush: stage ``s`` runs forward and backward
of its own modules on micro-batch ``i`` as soon as ``i`` has arrived and it has finished ``i-1``;
its activation is sent after the forward, and a stage waits before that send while
``max_in_flight`` earlier sends are still unreceived (the next stage takes micro-batch ``j``
when it starts on ``j-1``: it double-buffers). The optimizer steps every ``update_every``
micro-batches.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .schedules import LOCAL_SCHEDULES, Order, base_schedule, torch_order


@dataclass
class Link:
    """A message takes ``latency + bytes / bandwidth`` seconds (bandwidth in bytes per second)."""
    latency: float = 0.0
    bandwidth: float = float("inf")

    def __post_init__(self):
        if not self.latency >= 0:
            raise ValueError(f"link latency must be >= 0 seconds, got {self.latency!r}")
        if not self.bandwidth > 0:
            raise ValueError(f"link bandwidth must be > 0 bytes/s, got {self.bandwidth!r}")

    def time(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth


@dataclass
class Costs:
    """Seconds per micro-batch for each piece of the net, for one schedule family.

    ``forward[v]``, ``backward_input[v]`` and ``backward_weight[v]`` are piece ``v``'s forward,
    input-gradient and weight-gradient time (a whole backward is their sum); ``optimizer[v]`` is
    one optimizer step of its parameters; ``send_bytes[v]`` the bytes piece ``v`` sends to
    ``v+1`` per micro-batch (the gradient coming back has the same size); ``data`` the seconds
    the first processor takes to draw one micro-batch of input.
    """
    forward: list[float]
    backward_input: list[float]
    backward_weight: list[float]
    optimizer: list[float] = field(default_factory=list)
    send_bytes: list[float] = field(default_factory=list)
    data: float = 0.0

    def __post_init__(self):
        n = len(self.forward)
        self.optimizer = list(self.optimizer) or [0.0] * n
        self.send_bytes = list(self.send_bytes) or [0.0] * max(n - 1, 0)
        if len(self.backward_input) != n or len(self.backward_weight) != n or len(self.optimizer) != n:
            raise ValueError(f"costs of {n} pieces need {n} values each, got backward_input="
                             f"{len(self.backward_input)}, backward_weight={len(self.backward_weight)}, "
                             f"optimizer={len(self.optimizer)}")
        if len(self.send_bytes) != n - 1:
            raise ValueError(f"send_bytes needs {n - 1} values (one per boundary), got {len(self.send_bytes)}")
        if not self.data >= 0:
            raise ValueError(f"data time must be >= 0 seconds per micro-batch, got {self.data!r}")

    @property
    def pieces(self) -> int:
        return len(self.forward)

    def backward(self, v: int) -> float:
        return self.backward_input[v] + self.backward_weight[v]


@dataclass
class Interval:
    rank: int
    start: float
    end: float
    kind: str               # F | B | I | W | FB (local: forward+backward) | OPT | DATA
    stage: int
    micro_batch: int        # global index over all simulated steps (-1 for OPT and a step's DATA)
    step: int


@dataclass
class Result:
    schedule: str
    stages: int
    micro_batch: int
    micro_batches: int
    makespan_s: float               # the first step alone, from its first action to its last optimizer step
    samples_per_s: float            # over the timed steps (see _summarise)
    busy_fraction_per_stage: list[float]     # computing / window, timed steps
    intervals: list[Interval]

    @property
    def busy_per_stage(self) -> list[float]:
        """The former name of ``busy_fraction_per_stage``."""
        return self.busy_fraction_per_stage

    @property
    def bubble_fraction(self) -> float:
        return 1.0 - sum(self.busy_fraction_per_stage) / len(self.busy_fraction_per_stage)

    def to_dict(self) -> dict:
        """The record's keys, named as in ``estimate``'s and ``bench pipeline``'s records;
        ``busy_per_stage`` repeats ``busy_fraction_per_stage`` under its former name (deprecated,
        removed in the next release)."""
        return {"schedule": self.schedule, "stages": self.stages, "micro_batch": self.micro_batch,
                "micro_batches": self.micro_batches, "samples_per_s": self.samples_per_s,
                "makespan_s": self.makespan_s, "bubble_fraction": self.bubble_fraction,
                "busy_fraction_per_stage": self.busy_fraction_per_stage,
                "busy_per_stage": self.busy_fraction_per_stage}


def simulate(schedule: str, costs: Costs, micro_batches: int, micro_batch: int = 1, *, link: Link | None = None,
             steps: int = 1, warmup_steps: int = 0, update_every: int = 1, max_in_flight: int = 2) -> Result:
    """Simulate ``warmup_steps + steps`` steps of ``schedule`` with per-piece ``costs``.

    Pieces are stages for GPipe, 1F1B and local; interleaved and V schedules hold
    ``costs.pieces / stages`` pieces per processor. ``micro_batch`` only scales samples/s.
    ``update_every`` applies to ``local`` (``local/M`` steps once per step)."""
    base, recompute = base_schedule(schedule)
    for key, value in (("micro_batches", micro_batches), ("micro_batch", micro_batch), ("steps", steps),
                       ("update_every", update_every), ("max_in_flight", max_in_flight)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    if not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a non-negative integer, got {warmup_steps!r}")
    link = link or Link()
    total_steps = warmup_steps + steps
    if base in LOCAL_SCHEDULES:
        every = micro_batches if base == "local/M" else update_every
        intervals = _run_local(costs, micro_batches * total_steps, micro_batches, every, max_in_flight, link)
        ranks = costs.pieces
    else:
        per_rank = 2 if base not in ("gpipe", "1f1b") else 1
        if costs.pieces % per_rank:
            raise ValueError(f"schedule {schedule!r} holds {per_rank} pieces per processor; "
                             f"got {costs.pieces} pieces")
        ranks = costs.pieces // per_rank
        order = torch_order(schedule, ranks, micro_batches)
        intervals = _run_order(order, costs, total_steps, recompute, link)
    return _summarise(schedule, ranks, micro_batch, micro_batches, intervals, warmup_steps, total_steps)


def _run_order(order: Order, costs: Costs, total_steps: int, recompute: bool, link: Link) -> list[Interval]:
    """Play ``order``'s actions for ``total_steps`` steps: every rank runs its queue in order,
    each action as soon as its inputs have arrived; the intervals every rank was busy."""
    # One function: its closures (arrival, ready, duration) read the event state the loop
    # below writes (done, free), which is the whole simulation; apart they would pass it around.
    M, N = order.micro_batches, order.num_stages
    rank_of = order.stage_rank
    queues = []
    for r, ops in enumerate(order.actions):
        # the step's batch drawn first (by the rank holding piece 0), one optimizer step per
        # step after the rank's last action of that step
        q = []
        for k in range(total_steps):
            if costs.data and r == rank_of[0]:
                q.append(("DATA", -1, -1, k))
            q.extend((a.kind, a.stage, a.micro_batch + k * M, k) for a in ops)
            q.append(("OPT", -1, -1, k))
        queues.append(q)
    opt_per_rank = [sum(costs.optimizer[v] for v in range(N) if rank_of[v] == r) for r in range(order.ranks)]
    done: dict[tuple, float] = {}
    free = [0.0] * order.ranks
    pos = [0] * order.ranks
    intervals: list[Interval] = []

    def arrival(kind: str, v: int, mb: int, src: int) -> float | None:
        end = done.get((kind, src, mb))
        if end is None:
            return None
        if rank_of[src] == rank_of[v]:
            return end
        return end + link.time(costs.send_bytes[min(v, src)])

    def ready(kind: str, v: int, mb: int) -> float | None:
        if kind in ("OPT", "DATA"):
            return 0.0
        if kind == "F":
            return 0.0 if v == 0 else arrival("F", v, mb, v - 1)
        if kind == "W":
            return done.get(("I", v, mb))
        own = done.get(("F", v, mb))
        if own is None or v == N - 1:
            return own
        downstream = arrival("I", v, mb, v + 1)
        if downstream is None:
            downstream = arrival("B", v, mb, v + 1)
        return None if downstream is None else max(own, downstream)

    def duration(kind: str, v: int, r: int) -> float:
        if kind == "OPT":
            return opt_per_rank[r]
        if kind == "DATA":
            return M * costs.data
        if kind == "F":
            return costs.forward[v]
        extra = costs.forward[v] if recompute and kind in ("B", "I") else 0.0
        if kind == "B":
            return costs.backward(v) + extra
        return (costs.backward_input[v] if kind == "I" else costs.backward_weight[v]) + extra

    remaining = sum(len(q) for q in queues)
    while remaining:
        progressed = False
        for r, q in enumerate(queues):
            while pos[r] < len(q):
                kind, v, mb, k = q[pos[r]]
                t = ready(kind, v, mb)
                if t is None:
                    break
                start = max(free[r], t)
                end = start + duration(kind, v, r)
                if kind not in ("OPT", "DATA"):
                    done[(kind, v, mb)] = end
                intervals.append(Interval(r, start, end, kind, v, mb, k))
                free[r] = end
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: q[pos[r]] for r, q in enumerate(queues) if pos[r] < len(q)}
            raise RuntimeError(f"schedule {order.schedule!r} cannot progress; next actions: {stuck}")
    return intervals


def _run_local(costs: Costs, total: int, M: int, every: int, max_in_flight: int, link: Link) -> list[Interval]:
    S = costs.pieces
    start = [[0.0] * total for _ in range(S)]
    sent = [[0.0] * total for _ in range(S)]
    intervals: list[Interval] = []
    free = [0.0] * S
    for i in range(total):
        for s in range(S):
            t = free[s]
            if s > 0:
                t = max(t, sent[s - 1][i] + link.time(costs.send_bytes[s - 1]))
            elif costs.data:
                intervals.append(Interval(s, t, t + costs.data, "DATA", s, i, i // M))
                t += costs.data
            start[s][i] = t
            fwd_end = t + costs.forward[s]
            send_at = fwd_end
            j = i - max_in_flight
            if s < S - 1 and j >= 0:    # earlier sends still unreceived: wait until s+1 takes micro-batch j
                taken = start[s + 1][j - 1] if j >= 1 else 0.0
                send_at = max(send_at, taken)
            sent[s][i] = send_at
            end = send_at + costs.backward(s)
            intervals.append(Interval(s, t, end, "FB", s, i, i // M))
            if send_at > fwd_end:       # blocked on the send: not computing
                intervals[-1] = Interval(s, t, fwd_end, "F", s, i, i // M)
                intervals.append(Interval(s, send_at, end, "B", s, i, i // M))
            if (i + 1) % every == 0:
                intervals.append(Interval(s, end, end + costs.optimizer[s], "OPT", s, -1, i // M))
                end += costs.optimizer[s]
            free[s] = end
    return intervals


def _summarise(schedule, ranks, B, M, intervals, warmup, total_steps) -> Result:
    first = [iv for iv in intervals if iv.step == 0]
    makespan = max(iv.end for iv in first) - min(iv.start for iv in first)
    # the timed window: from the moment every processor has finished the warm-up steps to the
    # moment every processor has finished the last step (one step alone: its makespan)
    step_end = [0.0] * total_steps
    for iv in intervals:
        step_end[iv.step] = max(step_end[iv.step], iv.end)
    t0 = step_end[warmup - 1] if warmup else 0.0
    window = step_end[-1] - t0
    steps = total_steps - warmup
    busy = [0.0] * ranks
    for iv in intervals:
        lo, hi = max(iv.start, t0), min(iv.end, step_end[-1])
        if hi > lo:
            busy[iv.rank] += hi - lo
    samples_per_s = steps * M * B / window if window > 0 else float("inf")
    busy_frac = [b / window if window > 0 else 1.0 for b in busy]
    return Result(schedule, ranks, B, M, makespan, samples_per_s, busy_frac, intervals)
