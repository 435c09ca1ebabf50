"""The console in a real browser (Debian Chromium via Playwright, a live server): what it shows."""

from typing import Any

import pytest

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, SUPERVISORS
from runs.constants import RunStatus
from runs.models import Run, Step
from tests.console.browser import shot
from tests.console.factories import (
    evicted_at_step_12,
    journalled_run,
    recovered_then_maybe_sent,
)
from tests.console.test_overview import fleet_of_1000
from tests.review.browser import signed_in
from tests.review.factories import user_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def test_the_evicted_at_step_12_runs_timeline_shows_the_crash_and_13_replayed_steps(
    browser: Any, review_server: str
) -> None:
    user_in(SUPERVISORS, "sam")
    run = evicted_at_step_12()
    page = signed_in(browser, review_server, "sam")
    page.goto(f"{review_server}/runs/{run.pk}/")
    timeline = page.locator("#timeline")
    assert timeline.get_attribute("data-replayed") == "13"
    assert page.locator("svg.timeline g.tl-step").count() == 20
    assert page.locator("svg.timeline g.tl-step[data-replayed]").count() == 13
    replayed = page.locator("svg.timeline g.tl-step[data-replayed]")
    assert [replayed.nth(i).get_attribute("data-index") for i in range(13)] == [
        str(i) for i in range(13)
    ]
    crash = page.locator("svg.timeline g.tl-crash")
    assert crash.count() == 1 and "pod-1 lost" in (crash.text_content() or "")
    recovery = page.locator("svg.timeline g.tl-recovery")
    assert "13 replayed" in (recovery.text_content() or "")
    assert page.locator("svg.timeline g.tl-band.tl-epoch").count() == 2
    assert "13 steps replayed, not redone" in page.locator(".tl-summary").inner_text()
    page.locator("#conversation summary").click()
    assert "You resolve support tickets." in page.locator("#convo-0").inner_text()
    assert "tickets.comment(" in page.locator("#convo-1").inner_text()
    shot(page, "console-timeline", selector="#timeline")


# every text of the timeline as the reader sees it: its font size in screen pixels and its box
TIMELINE_TEXTS = """() => {
  const svg = document.querySelector('svg.timeline');
  const scale = svg.getScreenCTM().a;
  const frame = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim());
  return {
    frame: {left: frame.left, right: frame.right, top: frame.top, bottom: frame.bottom},
    texts: texts.map(t => {
      const box = t.getBoundingClientRect();
      return {
        text: t.textContent, cls: t.getAttribute('class') || t.parentNode.getAttribute('class'),
        px: parseFloat(getComputedStyle(t).fontSize) * scale,
        left: box.left, right: box.right, top: box.top, bottom: box.bottom,
      };
    }),
  };
}"""


def test_a_stopped_runs_timeline_ends_at_its_last_event_with_readable_labels_apart(
    browser: Any, review_server: str
) -> None:
    user_in(SUPERVISORS, "sam")
    run = recovered_then_maybe_sent(hours_ago=3)  # waiting for a person for three hours
    page = signed_in(browser, review_server, "sam")
    page.goto(f"{review_server}/runs/{run.pk}/")
    ticks = page.locator("svg.timeline .tl-tick").all_text_contents()
    assert ticks[-1].endswith("s") and not ticks[-1].endswith("m"), ticks  # about 25 s, not 3 h
    drawn = page.evaluate(TIMELINE_TEXTS)
    small = [(t["text"], round(t["px"], 1)) for t in drawn["texts"] if t["px"] < 11]
    assert small == [], "every label is at least 11 px on screen"
    frame = drawn["frame"]
    clipped = [
        t["text"]
        for t in drawn["texts"]
        if t["left"] < frame["left"] - 0.5 or t["right"] > frame["right"] + 0.5
    ]
    assert clipped == [], "no label runs off the picture"
    marks = [t for t in drawn["texts"] if "tl-mark" in (t["cls"] or "")]
    assert len(marks) == 3  # the crash, the recovery 50 ms later, the lease lost at the end
    overlaps = [
        (a["text"], b["text"])
        for i, a in enumerate(marks)
        for b in marks[i + 1 :]
        if a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    ]
    assert overlaps == [], "no mark's label over another's"
    shot(page, "console-timeline-stopped", selector="#timeline")


def test_the_overview_renders_with_data_from_1000_runs(browser: Any, review_server: str) -> None:
    user_in(SUPERVISORS, "sam")
    fleet_of_1000()
    page = signed_in(browser, review_server, "sam")
    page.click("nav >> text=Overview")
    page.wait_for_url(f"{review_server}/console/")
    assert page.locator("#total-runs").inner_text() == "1000"
    assert page.locator("#chart-runs svg rect").count() >= 20
    assert page.locator("#chart-tokens svg polyline").count() == 4
    assert page.locator("#chart-recoveries svg rect.series-recoveries").count() == 1
    assert "49" in page.locator("#queue-waiting").inner_text()
    shot(page, "console-overview")


def test_an_admin_bulk_cancels_20_runs_after_seeing_the_count(
    browser: Any, review_server: str
) -> None:
    user_in(ADMINS, "ada")
    runs = [journalled_run(1, agent="nightly")[0] for _ in range(20)]
    journalled_run(1, agent="daily")  # not selected
    page = signed_in(browser, review_server, "ada")
    page.fill("input[name=agent]", "nightly")
    page.click("form.filters button[type=submit]")
    page.click("#bulk-link")
    page.wait_for_url("**/console/bulk/**")
    assert page.locator("#bulk-count").inner_text() == "20"
    assert page.locator("#bulk-submit").inner_text() == "Cancel 20 runs"
    page.click("#bulk-submit")  # the note is required: the browser stops the post
    assert not Run.objects.filter(status=RunStatus.CANCELLED).exists()
    page.fill("#bulk-note", "Nightly batch started twice; cancelling the duplicates.")
    shot(page, "console-bulk-cancel")
    page.click("#bulk-submit")
    page.locator(".message", has_text="Cancelled 20 runs.").wait_for()
    assert page.locator("#bulk-count").inner_text() == "0"
    assert Run.objects.filter(pk__in=[r.pk for r in runs], status="cancelled").count() == 20
    assert Run.objects.get(agent="daily").status == RunStatus.RUNNING
    assert AuditEntry.objects.filter(action="run.cancel", actor_name="ada").count() == 20


def test_an_admin_cancels_then_forks_a_run_and_sees_its_lineage(
    browser: Any, review_server: str
) -> None:
    user_in(ADMINS, "ada")
    run, _ = journalled_run(6)
    page = signed_in(browser, review_server, "ada")
    page.goto(f"{review_server}/runs/{run.pk}/")
    page.fill("#cancel-note", "Stopped: the customer called.")
    page.click("#cancel-run")
    page.locator("#run-status", has_text="cancelled").wait_for()
    assert page.locator("#cancel-run").count() == 0
    page.fill("#fork-index", "5")
    page.fill("#fork-note", "Continue from step 5 without redoing the comments.")
    page.click("#fork-run")
    # step 5 commented in the original: the fork's plan asks what to do with tickets.comment
    page.locator("#fork-writes").wait_for()
    assert "tickets.comment" in page.locator("#fork-writes").inner_text()
    page.check("#write-1-hold")
    page.click("#fork-confirm")
    page.locator("#forked-from").wait_for()
    fork = Run.objects.get(forked_from=run)
    assert page.url.endswith(f"/runs/{fork.pk}/")
    assert page.locator("#timeline").get_attribute("data-copied") == "5"
    assert page.locator("svg.timeline g.tl-step[data-copied]").count() == 5
    shot(page, "console-fork")
    page.click("#forked-from a")
    page.locator("#run-actions li.fork").wait_for()
    assert fork.pk.hex[:8] in page.locator("#run-actions li.fork").inner_text().replace("-", "")
    assert Step.objects.filter(run=fork, executions=0).count() == 5
