"""The timeline's drawing rules: a stopped run's axis ends at its last event, and labels are laid
out so that none overlaps another or runs off the picture (the browser test checks the same on
the page, with real fonts)."""

from datetime import timedelta

import pytest

from console.timeline import (
    FONT,
    labels_layout,
    text_width,
    timeline_build,
    timeline_geometry,
)
from runs import clock
from runs.models import Event, Step
from tests.console.factories import journalled_run, recovered_then_maybe_sent


def overlapping(placed: list) -> list[tuple[str, str]]:
    return [
        (a.text, b.text)
        for i, a in enumerate(placed)
        for b in placed[i + 1 :]
        if a.row == b.row and a.left < b.right and b.left < a.right
    ]


def test_labels_at_almost_the_same_x_go_in_rows_and_none_overlaps() -> None:
    labels = [
        (500.0, "✕ worker pod-5 lost"),
        (500.4, "↻ recovered by pod-5: 11 replayed"),
        (503.0, "✕ lease lost at step 12 (pod-5)"),
        (900.0, "forked at step 3"),
    ]
    placed = labels_layout(labels, left=4, right=1196)
    assert overlapping(placed) == []
    assert sorted(p.row for p in placed[:3]) == [0, 1, 2]
    assert placed[3].row == 0  # far enough from the others: back in the first row
    assert [p.text for p in placed] == [text for _, text in labels]  # nothing cut


def test_a_label_at_the_right_edge_ends_there_instead_of_being_clipped() -> None:
    [placed] = labels_layout([(1190.0, "↻ recovered by pod-5: 11 replayed")], left=4, right=1196)
    assert placed.anchor == "end"
    assert placed.right <= 1196 and placed.left >= 4
    assert placed.text == "↻ recovered by pod-5: 11 replayed"


def test_a_label_wider_than_the_picture_is_cut_with_an_ellipsis() -> None:
    [placed] = labels_layout([(10.0, "x" * 400)], left=4, right=300)
    assert placed.text.endswith("…")
    assert placed.right <= 300
    assert text_width(placed.text, FONT) <= 296


@pytest.mark.django_db
def test_a_stopped_runs_axis_ends_at_its_last_event_not_hours_later_at_now() -> None:
    run = recovered_then_maybe_sent(hours_ago=3)
    steps = list(Step.objects.filter(run=run).order_by("index"))
    events = list(Event.objects.filter(run=run).order_by("seq"))
    now = clock.now()
    tl = timeline_build(run=run, steps=steps, events=events, now=now)
    assert tl.end == events[-1].at
    assert tl.end - tl.start < timedelta(minutes=1)
    [review] = [b for b in tl.bands if b.kind == "review"]
    assert review.end == tl.end and "still" in review.label
    geometry = timeline_geometry(tl, now=now)
    assert geometry["ticks"][-1]["text"].endswith("s")  # seconds, not "+180m"
    # crash, recovery and the lease lost at the end: labels in rows, none over another
    marks = geometry["marks"]
    assert len(marks) == 3
    assert len({m["label_y"] for m in marks[:2]}) == 2


@pytest.mark.django_db
def test_a_running_runs_axis_still_runs_to_now() -> None:
    run, _ = journalled_run(3)
    steps = list(Step.objects.filter(run=run).order_by("index"))
    events = list(Event.objects.filter(run=run).order_by("seq"))
    later = clock.now() + timedelta(minutes=10)
    tl = timeline_build(run=run, steps=steps, events=events, now=later)
    assert tl.end == later
