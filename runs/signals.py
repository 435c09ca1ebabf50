"""Signals the journal sends after commit; the agents app listens to re-dispatch runs."""

from django.dispatch import Signal

# sent with run_id and reason when a run can be picked up by a worker again
# (the reaper interrupted it, or a supervisor resolved its review)
run_resumable = Signal()
