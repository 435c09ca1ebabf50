"""Ports for the servers these suites start: the first free one in a slice of 8200-8299."""

import socket


def port_in_range(first: int, last: int) -> int:
    """A port in [first, last] nothing listens on now (two sessions at once do not collide)."""
    for port in range(first, last + 1):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{last}")
