"""A run's timeline, read from its steps and events: what the transcript draws as server-side SVG.

Steps are bars from intent to outcome on one time axis; lease epochs are bands; a lost lease
(the reaper's `lease_expired`, or a recovery lease whose previous holder never handed over) is
the crash point, and the recovery lease is marked with how many steps it replayed. Steps a
recovery replayed from the journal, and steps a fork copied from its original, are marked "not
redone"; steps whose idempotency key the tool side answered from its store are marked as gateway
replays. Waiting for a person (needs_review until the run resumed or ended) is a band too.

Pure functions of rows: no queries here (the selector reads the rows, the template tag draws).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runs.vocabulary import EventType

WIDTH = 1000  # viewBox units of the plot area
LABEL = 190  # left gutter for step names
ROW = 12  # one step's row
BAR = 8
HEAD = 44  # top area: marks and epoch bands' labels


@dataclass(frozen=True)
class Bar:
    index: int
    name: str
    kind: str
    effect: str
    state: str
    start: datetime
    end: datetime | None  # None: no outcome yet
    tokens: int
    replayed: bool  # replayed from the journal by a recovery: not redone
    copied: bool  # copied from the original by a fork: never executed here
    gateway_replays: int  # duplicate invokes the tool side answered from its store
    executions: int


@dataclass(frozen=True)
class Band:
    kind: str  # epoch | review
    start: datetime
    end: datetime
    label: str


@dataclass(frozen=True)
class Mark:
    kind: str  # crash | recovery | cancel | fork
    at: datetime
    label: str


@dataclass
class Timeline:
    start: datetime
    end: datetime
    bars: list[Bar] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @property
    def replayed_count(self) -> int:
        return sum(1 for b in self.bars if b.replayed)

    @property
    def copied_count(self) -> int:
        return sum(1 for b in self.bars if b.copied)

    @property
    def crashes(self) -> list[Mark]:
        return [m for m in self.marks if m.kind == "crash"]

    def x(self, at: datetime) -> float:
        span = (self.end - self.start).total_seconds() or 1.0
        return LABEL + WIDTH * max(0.0, min(1.0, (at - self.start).total_seconds() / span))

    @property
    def height(self) -> int:
        return HEAD + ROW * max(len(self.bars), 1) + 22


def timeline_build(
    *,
    run: Any,
    steps: Iterable[Any],
    events: Iterable[Any],
    now: datetime,
    key_replays: Mapping[str, int] | None = None,
) -> Timeline:
    """steps: Step rows in index order; events: Event rows in seq order."""
    steps = list(steps)
    events = list(events)
    key_replays = key_replays or {}
    end_candidates = [run.finished_at or now, *(e.at for e in events[-1:])]
    end_candidates += [s.outcome_at for s in steps if s.outcome_at]
    start_candidates = [run.created_at, *(s.intent_at for s in steps)]
    start = min(start_candidates)
    end = max(end_candidates)
    if end <= start:
        end = start + timedelta(seconds=1)
    tl = Timeline(start=start, end=end)
    live_end = run.finished_at or now

    # epochs, crash points and recoveries, reviews, cancel and forks, from the events
    replayed_below = 0
    replay_window: tuple[datetime, int] | None = None
    epoch_open: tuple[datetime, str] | None = None
    review_open: datetime | None = None
    last_event_at: datetime | None = None
    for e in events:
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.type == EventType.LEASE_ACQUIRED:
            if epoch_open:
                tl.bands.append(Band("epoch", epoch_open[0], e.at, epoch_open[1]))
            if p.get("recovery"):
                if p.get("previous_worker") and last_event_at is not None:
                    # the holder never handed over: the crash is after its last journalled write
                    tl.marks.append(
                        Mark("crash", last_event_at, f"worker {p.get('previous_worker')} lost")
                    )
                replayable = int(p.get("replayable_steps") or 0)
                tl.marks.append(
                    Mark("recovery", e.at, f"recovered by {p.get('worker')}: {replayable} replayed")
                )
                replayed_below = max(replayed_below, replayable)
                replay_window = (e.at, replayable)
            epoch_open = (e.at, f"epoch {p.get('epoch')} · {p.get('worker')}")
        elif e.type == EventType.LEASE_EXPIRED:
            if epoch_open:
                tl.bands.append(Band("epoch", epoch_open[0], e.at, epoch_open[1]))
                epoch_open = None
            tl.marks.append(
                Mark("crash", e.at, f"lease lost at step {p.get('at_step')} ({p.get('worker')})")
            )
        elif e.type == EventType.NEEDS_REVIEW:
            if epoch_open:
                tl.bands.append(Band("epoch", epoch_open[0], e.at, epoch_open[1]))
                epoch_open = None
            review_open = review_open or e.at
        elif (
            e.type in (EventType.RUN_RESUMED, EventType.RUN_ABANDONED, EventType.RUN_CANCELLED)
            and review_open
        ):
            tl.bands.append(Band("review", review_open, e.at, "waiting for review"))
            review_open = None
        if e.type == EventType.RUN_CANCELLED:
            tl.marks.append(Mark("cancel", e.at, f"cancelled by {p.get('by')}"))
        elif e.type == EventType.RUN_FORKED:
            tl.marks.append(Mark("fork", e.at, f"forked at step {p.get('index')}"))
        final = e.type in (
            EventType.RUN_COMPLETED,
            EventType.RUN_FAILED,
            EventType.RUN_ABANDONED,
            EventType.RUN_CANCELLED,
        )
        if final and epoch_open:
            tl.bands.append(Band("epoch", epoch_open[0], e.at, epoch_open[1]))
            epoch_open = None
        if e.type not in (EventType.LEASE_ACQUIRED, EventType.LEASE_EXPIRED):
            last_event_at = e.at
    if epoch_open:
        tl.bands.append(Band("epoch", epoch_open[0], live_end, epoch_open[1]))
    if review_open:
        tl.bands.append(Band("review", review_open, live_end, "waiting for review"))

    previous_end: datetime | None = None
    for s in steps:
        start_at = s.intent_at
        if s.outcome_at == s.intent_at and previous_end is not None and previous_end < start_at:
            # a read step journalled in one call after it ran: it ran since the previous outcome
            start_at = previous_end
        previous_end = s.outcome_at or previous_end
        done_before_recovery = (
            replay_window is not None
            and s.outcome_at is not None
            and s.outcome_at <= replay_window[0]
        )
        copied = getattr(s, "executions", 1) == 0
        tl.bars.append(
            Bar(
                index=s.index,
                name=s.name,
                kind=s.kind,
                effect=s.effect,
                state=s.state,
                start=start_at,
                end=s.outcome_at,
                tokens=int(s.usage_input_tokens) + int(s.usage_output_tokens),
                replayed=(s.index < replayed_below and done_before_recovery and not copied),
                copied=copied,
                gateway_replays=int(key_replays.get(s.idempotency_key, 0)),
                executions=int(getattr(s, "executions", 1)),
            )
        )
    return tl


def _seconds(delta: timedelta) -> str:
    s = delta.total_seconds()
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _n(value: float) -> str:
    """A coordinate as the template would print it, formatted once here: a 200-step timeline
    has a thousand of them, and the template engine's number localisation was most of its time."""
    return str(value)


def timeline_geometry(tl: Timeline, *, now: datetime) -> dict[str, Any]:
    """Coordinates for the SVG template: every number computed here, none in the template."""
    top = HEAD
    bottom = HEAD + ROW * max(len(tl.bars), 1)
    bars = []
    for row, b in enumerate(tl.bars):
        x0 = tl.x(b.start)
        x1 = tl.x(b.end or now)
        y = top + row * ROW
        tip = f"#{b.index} {b.name} ({b.kind}, {b.effect}): {b.state}"
        if b.end is not None:
            tip += f", {_seconds(b.end - b.start)}"
        if b.tokens:
            tip += f", {b.tokens} tokens"
        if b.replayed:
            tip += " · replayed from the journal, not redone"
        if b.copied:
            tip += " · copied from the original run, never executed here"
        if b.gateway_replays:
            tip += f" · {b.gateway_replays} gateway replay(s), not redone"
        if b.executions > 1:
            tip += f" · {b.executions} executions"
        bars.append(
            {
                "bar": b,
                "x": _n(round(x0, 1)),
                "width": _n(round(max(x1 - x0, 2.0), 1)),
                "y": _n(y + (ROW - BAR) / 2),
                "text_y": _n(y + ROW - 3),
                "label": f"{b.index} {b.name}"[:30],
                "tip": tip,
                "open": b.end is None,
                "after_x": _n(round(max(x1, x0 + 2) + 3, 1)),
            }
        )
    bands = [
        {
            "band": band,
            "x": round(tl.x(band.start), 1),
            "width": round(max(tl.x(band.end) - tl.x(band.start), 1.0), 1),
            "label_x": round(tl.x(band.start) + 3, 1),
            "even": i % 2 == 0,
        }
        for i, band in enumerate(tl.bands)
    ]
    marks = [
        {"mark": m, "x": round(tl.x(m.at), 1), "label_y": 12 + 11 * (i % 2)}
        for i, m in enumerate(tl.marks)
    ]
    ticks = []
    span = (tl.end - tl.start).total_seconds()
    for i in range(6):
        offset = span * i / 5
        ticks.append({"x": round(LABEL + WIDTH * i / 5, 1), "text": _tick(offset)})
    return {
        "tl": tl,
        "bars": bars,
        "bands": bands,
        "marks": marks,
        "ticks": ticks,
        "top": top,
        "bottom": bottom,
        "height": bottom + 22,
        "view_width": LABEL + WIDTH + 10,
        "plot_left": LABEL,
        "plot_right": LABEL + WIDTH,
        "axis_y": bottom + 14,
        "band_y": top - 8,
        "band_h": bottom - top + 8,
        "band_label_y": top - 10,
        "mark_y1": top - 4,
        "name_x": LABEL - 6,
    }


def _tick(seconds: float) -> str:
    if seconds < 10:
        return f"+{seconds:.2f}s"
    if seconds < 600:
        return f"+{seconds:.0f}s"
    return f"+{seconds / 60:.0f}m"
