"""Kept for the tests that import it: ports now come from the OS (tests/processes.py)."""

from tests.processes import free_port


def port_in_range(first: int = 0, last: int = 0) -> int:
    """A free port (chosen by the OS; the range is no longer needed to keep sessions apart)."""
    return free_port()
