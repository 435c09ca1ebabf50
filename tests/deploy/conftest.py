"""The deployment tests' shared podman session and image (built once per test process)."""

from collections.abc import Iterator

import pytest

from tests.deploy.podman import IMAGE, Podman, image_build, podman_session


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    """Podman with this machine's settings and the local Debian base (skips where it cannot
    run); the timings it measured are printed at the end (`-s`)."""
    with podman_session() as session:
        yield session
        for what, seconds in session.timings.items():
            print(f"\n[deploy] {what}: {seconds:.1f} s")


@pytest.fixture(scope="session")
def ledger_image(podman: Podman) -> str:
    """The repository's Containerfile built on the local base (layers of the last build reused)."""
    image_build(podman)
    return IMAGE
