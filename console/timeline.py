"""A run's timeline, read from its steps and events: what the transcript draws as server-side SVG.

Steps are bars from intent to outcome on one time axis; lease epochs are bands; a lost lease
(the reaper's `lease_expired`, a recovery lease whose previous holder never handed over, or a
replacement's lease whose recovery sent the run to review) is the crash point, and a lease after
the first (a recovery, or a resume after review) is marked with how many steps it replayed. Steps a
recovery replayed from the journal, and steps a fork copied from its original, are marked "not
redone"; steps whose idempotency key the tool side answered from its store are marked as gateway
replays. Waiting for a person (needs_review until the run resumed or ended) is a band too.

Pure functions of rows: no queries here (the selector reads the rows, the template tag draws).
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runs.vocabulary import EventType

# The SVG is drawn at its own size (one viewBox unit is one CSS pixel; the card scrolls it when
# the window is narrower), so the font sizes below are what a reader sees.
LABEL = 210  # left gutter for step names
WIDTH = 840  # the plot area
RIGHT = 150  # right margin: notes after the last bars, labels of marks near the end
ROW = 18  # one step's row
BAR = 10
FONT = 12  # step names, mark labels (px)
SMALL = 11  # ticks, band labels, notes (px)
CHAR = 0.62  # a character's width in ems, a generous estimate for system-ui (bold included)
LABEL_ROW = 16  # one row of mark labels above the plot
# a run that may still move (a worker holds it, or may take it): its axis runs to now; any other
# run (waiting for a person, stopped by its budget, finished) ends at its last event
MOVING_STATUSES = frozenset({"pending", "running", "interrupted"})


@dataclass(frozen=True)
class PlacedLabel:
    x: float  # the text's anchor point
    anchor: str  # start | end (SVG text-anchor)
    row: int  # 0: the first row
    text: str  # cut with "…" when the whole label does not fit
    left: float  # the extent the text is estimated to cover
    right: float


def text_width(text: str, size: float) -> float:
    return len(text) * size * CHAR


def text_fit(text: str, room: float, size: float) -> str:
    """`text`, or as much of it as fits in `room` px followed by "…" ("" when not even that)."""
    if text_width(text, size) <= room:
        return text
    keep = math.floor(room / (size * CHAR)) - 1
    return text[:keep].rstrip() + "…" if keep >= 3 else ""


def labels_layout(
    labels: Sequence[tuple[float, str]],
    *,
    left: float,
    right: float,
    size: float = FONT,
    gap: float = 10.0,
) -> list[PlacedLabel]:
    """Labels pinned to x positions, laid out in rows so that none overlaps another: each goes
    in the first row where it touches no label placed before it (left to right). A label starts
    at its x, or ends there when it would run past `right`; one wider than left..right is cut."""
    rows: list[list[tuple[float, float]]] = []
    placed: dict[int, PlacedLabel] = {}
    for i in sorted(range(len(labels)), key=lambda k: labels[k][0]):
        x, text = labels[i]
        text = text_fit(text, right - left, size)
        width = text_width(text, size)
        anchor, x0 = "start", x
        if x0 + width > right:
            anchor, x0 = "end", x - width
            if x0 < left:  # neither way fits: start at the left edge
                anchor, x0 = "start", left
        x0 = max(x0, left)
        x1 = x0 + width
        free = (
            n for n, row in enumerate(rows) if all(x1 + gap <= a or b + gap <= x0 for a, b in row)
        )
        row_no = next(free, len(rows))
        if row_no == len(rows):
            rows.append([])
        rows[row_no].append((x0, x1))
        at = x0 if anchor == "start" else x0 + width
        placed[i] = PlacedLabel(at, anchor, row_no, text, x0, x1)
    return [placed[i] for i in range(len(labels))]


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


# what a lease and its recovery write, not the holder's own work
RECOVERY_BOOKKEEPING = frozenset(
    {
        EventType.LEASE_ACQUIRED,
        EventType.LEASE_EXPIRED,
        EventType.STEP_INTERRUPTED,
        EventType.STEP_UNKNOWN,
        EventType.NEEDS_REVIEW,
    }
)


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
    moving = run.status in MOVING_STATUSES and run.finished_at is None
    start_candidates = [run.created_at, *(s.intent_at for s in steps)]
    start = min(start_candidates)
    # a stopped run's axis ends at its last event: hours of waiting would crush its steps
    end_candidates = [now if moving else (run.finished_at or start), *(e.at for e in events[-1:])]
    end_candidates += [s.outcome_at for s in steps if s.outcome_at]
    end_candidates += [s.intent_at for s in steps]
    end = max(end_candidates)
    if end <= start:
        end = start + timedelta(seconds=1)
    tl = Timeline(start=start, end=end)
    live_end = end  # what is still open (a lease, a wait for review) is drawn to the axis' end

    # epochs, crash points and recoveries, reviews, cancel and forks, from the events
    names = {s.index: s.name for s in steps}
    replayed_below = 0
    replay_window: tuple[datetime, int] | None = None
    epoch_open: tuple[datetime, str] | None = None
    review_open: datetime | None = None
    last_event_at: datetime | None = None  # the last thing a holder journalled
    leased_before = False
    holder_lost_marked = False
    for e in events:
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.type == EventType.LEASE_ACQUIRED:
            if epoch_open:
                tl.bands.append(Band("epoch", epoch_open[0], e.at, epoch_open[1]))
            replayable = int(p.get("replayable_steps") or 0)
            if p.get("recovery"):
                if p.get("previous_worker") and last_event_at is not None:
                    # the holder never handed over: the crash is after its last journalled write
                    tl.marks.append(
                        Mark("crash", last_event_at, f"worker {p.get('previous_worker')} lost")
                    )
                tl.marks.append(
                    Mark("recovery", e.at, f"recovered by {p.get('worker')}: {replayable} replayed")
                )
            elif leased_before and replayable:
                # resumed after a review: the new holder replays the journal just the same
                tl.marks.append(
                    Mark("recovery", e.at, f"resumed by {p.get('worker')}: {replayable} replayed")
                )
            if leased_before and replayable:
                replayed_below = max(replayed_below, replayable)
                replay_window = (e.at, replayable)
            leased_before = True
            holder_lost_marked = False
            epoch_open = (e.at, f"epoch {p.get('epoch')} · {p.get('worker')}")
        elif e.type == EventType.LEASE_EXPIRED:
            if epoch_open:
                tl.bands.append(Band("epoch", epoch_open[0], e.at, epoch_open[1]))
                epoch_open = None
            tl.marks.append(
                Mark("crash", e.at, f"lease lost at step {p.get('at_step')} ({p.get('worker')})")
            )
            holder_lost_marked = True
        elif e.type == EventType.NEEDS_REVIEW:
            if epoch_open:
                tl.bands.append(Band("epoch", epoch_open[0], e.at, epoch_open[1]))
                epoch_open = None
            review_open = review_open or e.at
            # a replacement's lease whose recovery ended in review (its payload names the epoch
            # it fenced): no recovery lease follows, so the crash is marked here
            if "epoch" in p and not holder_lost_marked and last_event_at is not None:
                inside = [f"{names.get(i, '?')} (step {i})" for i in p.get("steps") or []]
                where = f" inside {', '.join(inside)}" if inside else ""
                tl.marks.append(Mark("crash", last_event_at, f"worker lost{where}"))
                holder_lost_marked = True
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
        if e.type not in RECOVERY_BOOKKEEPING:
            last_event_at = e.at
    if epoch_open:
        tl.bands.append(Band("epoch", epoch_open[0], live_end, epoch_open[1]))
    if review_open:
        tl.bands.append(Band("review", review_open, live_end, "waiting for review, still"))

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
    plot_right = LABEL + WIDTH
    view_width = plot_right + RIGHT
    mark_labels = labels_layout(
        [(tl.x(m.at), _mark_text(m)) for m in tl.marks], left=4, right=view_width - 4
    )
    marks_h = LABEL_ROW * (max((p.row for p in mark_labels), default=-1) + 1)
    band_label_y = marks_h + SMALL + 3
    top = band_label_y + 9
    bottom = top + ROW * max(len(tl.bars), 1)
    bars = []
    for row, b in enumerate(tl.bars):
        x0 = tl.x(b.start)
        x1 = tl.x(b.end or tl.end)
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
        note = ""
        if b.replayed:
            note = "↺ not redone"
        elif b.copied:
            note = "⧉ copied"
        elif b.gateway_replays:
            note = f"gateway replay ×{b.gateway_replays}"
        after = max(x1, x0 + 2) + 4
        note_anchor = "start"
        if note and after + text_width(note, SMALL) > view_width - 4:  # before the bar instead
            after, note_anchor = x0 - 4, "end"
        bars.append(
            {
                "bar": b,
                "x": _n(round(x0, 1)),
                "width": _n(round(max(x1 - x0, 2.0), 1)),
                "y": _n(y + (ROW - BAR) / 2),
                "text_y": _n(y + ROW - 5),
                "label": text_fit(f"{b.index} {b.name}", LABEL - 12, FONT),
                "tip": tip,
                "open": b.end is None,
                "note": note,
                "note_anchor": note_anchor,
                "after_x": _n(round(after, 1)),
            }
        )
    bands = []
    for i, band in enumerate(tl.bands):
        x0, x1 = tl.x(band.start), tl.x(band.end)
        bands.append(
            {
                "band": band,
                "x": round(x0, 1),
                "width": round(max(x1 - x0, 1.0), 1),
                "label_x": round(x0 + 3, 1),
                "label": text_fit(band.label, max(x1 - x0, 1.0) - 6, SMALL),
                "even": i % 2 == 0,
            }
        )
    marks = [
        {
            "mark": m,
            "x": round(tl.x(m.at), 1),
            "label": placed.text,
            "label_x": round(placed.x, 1),
            "anchor": placed.anchor,
            "label_y": LABEL_ROW * placed.row + FONT,
        }
        for m, placed in zip(tl.marks, mark_labels, strict=True)
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
        "height": bottom + 26,
        "view_width": view_width,
        "plot_left": LABEL,
        "plot_right": plot_right,
        "axis_y": bottom + 17,
        "band_y": top - 6,
        "band_h": bottom - top + 6,
        "band_label_y": band_label_y,
        "mark_y1": marks_h + 2,
        "name_x": LABEL - 6,
    }


def _mark_text(mark: Mark) -> str:
    return {"crash": "✕ ", "recovery": "↻ "}.get(mark.kind, "") + mark.label


def _tick(seconds: float) -> str:
    if seconds < 10:
        return f"+{seconds:.2f}s"
    if seconds < 600:
        return f"+{seconds:.0f}s"
    return f"+{seconds / 60:.0f}m"
