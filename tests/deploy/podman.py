"""Podman for the deployment tests: this machine's quirks in one place, the base image, the build.

What this machine needs, and a test says so rather than hides it (issue 35's facts):
- no image registry answers, so the base is made here: `mmdebstrap --variant=minbase` of Debian
  trixie, imported as `localhost/ledger-base:trixie` (kept between runs: reused when present).
  This host's egress goes through a TLS-inspecting proxy whose CA certificates are in
  /usr/local/share/ca-certificates; the base carries them (else pip in the build could not reach
  the package index). The Containerfile is the one a user builds: only `BASE` differs.
- containers run with `--runtime runc` (crun refuses this host's hybrid cgroups) and a
  containers.conf with `default_ulimits = []` (CONTAINERS_CONF, a file in a temp folder);
  containers of the image tests share the host's network (`--network host`).

Where this machine cannot run them, the tests skip, saying why; with TEST_DEPLOY_REQUIRED=1 (what
.ci/run sets: CI must prove the image, and scripts/test installs what they need) that is a failure.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from tests.processes import ROOT

BASE_IMAGE = "localhost/ledger-base:trixie"
IMAGE = "localhost/agent-ledger:test"  # the tests' build, kept as the next build's layer cache
HOST_CA_FOLDER = Path("/usr/local/share/ca-certificates")
CONTAINERS_CONF = """[containers]
default_ulimits = []

[engine]
runtime = "runc"
"""


@dataclass
class Podman:
    conf_dir: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.conf_dir / "containers.conf")}

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 600, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", "--runtime", "runc", *args],
            env=self.env,
            cwd=cwd or ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def image_exists(self, name: str) -> bool:
        return self("image", "exists", name, check=False).returncode == 0

    def image_id(self, name: str) -> str:
        return self("image", "inspect", name, "--format", "{{.Id}}", check=False).stdout.strip()

    def build(self, tag: str, *args: str) -> None:
        """`podman build --tag TAG ARGS` on the host's network; the image the tag named before
        is removed when the build replaced it (its layers stay as the next build's cache)."""
        before = self.image_id(tag)
        self("build", "--network", "host", "--tag", tag, *args, timeout=1800)
        if before and before != self.image_id(tag):
            self("rmi", before, check=False)

    def remove_containers(self, *names: str) -> None:
        for name in names:
            self("rm", "--force", "--time", "0", name, check=False, timeout=120)

    @contextmanager
    def container(self, name: str, *run_args: str) -> Iterator[str]:
        """`podman run -d --name NAME ...` for the block; removed afterwards, logs kept in
        .pytest_cache/NAME.log."""
        self("run", "--detach", "--name", name, *run_args)
        try:
            yield name
        finally:
            logs = self("logs", name, check=False)
            log_path = ROOT / ".pytest_cache" / f"{name}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(logs.stdout + logs.stderr)
            self.remove_containers(name)


def cannot_run(reason: str) -> NoReturn:
    """Skip with `reason`, or fail with it where the deployment tests must run (CI)."""
    if os.environ.get("TEST_DEPLOY_REQUIRED", "") == "1":
        pytest.fail(f"TEST_DEPLOY_REQUIRED=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def skip_reason() -> str | None:
    """Why this machine cannot run the container tests, or None when it can."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc)"
    if shutil.which("runc") is None:
        return "runc is not installed (crun cannot run containers on hybrid cgroups)"
    return None


@contextmanager
def podman_session() -> Iterator[Podman]:
    reason = skip_reason()
    if reason:
        cannot_run(reason)
    with tempfile.TemporaryDirectory(prefix="ledger-podman-") as folder:
        conf_dir = Path(folder)
        (conf_dir / "containers.conf").write_text(CONTAINERS_CONF)
        podman = Podman(conf_dir)
        with builds_one_at_a_time():
            base_ensure(podman)
        tried = podman("run", "--rm", "--network", "host", BASE_IMAGE, "true", check=False)
        if tried.returncode != 0:
            cannot_run(f"podman cannot run a container here: {tried.stderr.strip()[-500:]}")
        yield podman


def base_ensure(podman: Podman) -> None:
    """The Debian base image, made with mmdebstrap unless it is already there."""
    if podman.image_exists(BASE_IMAGE):
        return
    if shutil.which("mmdebstrap") is None:
        cannot_run(f"no {BASE_IMAGE} and no mmdebstrap to make it (apt-get install mmdebstrap)")
    hooks: list[str] = []
    if any(HOST_CA_FOLDER.glob("*.crt")):
        hooks = [
            "--customize-hook",
            f'cp {HOST_CA_FOLDER}/*.crt "$1/usr/local/share/ca-certificates/"'
            ' && chroot "$1" update-ca-certificates',
        ]
    with tempfile.TemporaryDirectory(prefix="ledger-base-") as folder:
        tar = Path(folder) / "base.tar"
        started = time.monotonic()
        command = ["mmdebstrap", "--variant=minbase", "--include=ca-certificates", *hooks]
        made = subprocess.run(
            [*command, "trixie", str(tar)],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if made.returncode != 0 and os.geteuid() != 0:
            cannot_run(f"mmdebstrap cannot make the base as this user: {made.stderr[-500:]}")
        assert made.returncode == 0, f"mmdebstrap failed:\n{made.stderr[-3000:]}"
        podman("import", str(tar), BASE_IMAGE, timeout=600)
        podman.timings["base image (mmdebstrap + import)"] = time.monotonic() - started


@contextmanager
def builds_one_at_a_time() -> Iterator[None]:
    """One base or image build at a time on this machine: the suite's pytest processes share
    podman's storage, so the second waits and then finds the base made and the layers cached,
    instead of making both twice at once (and replacing the tag under the other's feet)."""
    lock = Path(tempfile.gettempdir()) / "intentledger-tests-podman-build.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def image_build(podman: Podman, tag: str = IMAGE) -> None:
    """`podman build` of the repository's Containerfile on the local base; the layers of the
    previous build (and the pip cache mount) are reused."""
    started = time.monotonic()
    with builds_one_at_a_time():
        podman.build(tag, "--build-arg", f"BASE={BASE_IMAGE}", "--file", "Containerfile", ".")
    podman.timings["image build"] = time.monotonic() - started


def image_size(podman: Podman, tag: str = IMAGE) -> int:
    return int(podman("image", "inspect", tag, "--format", "{{.Size}}").stdout.strip())


@contextmanager
def sdk_only_virtualenv(folder: Path) -> Iterator[Path]:
    """A fresh virtualenv with nothing of ours but the SDK, installed from ./sdk (not editable);
    yields its python."""
    import sys

    venv = folder / "sdk-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # pip builds in the source folder (build/, *.egg-info): a copy, so the checkout stays as it is
    source = folder / "sdk-source"
    shutil.copytree(
        ROOT / "sdk", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(source)],
        check=True,
        timeout=600,
        cwd=folder,  # not the checkout: nothing of the server is importable from the cwd
    )
    try:
        yield python
    finally:
        with suppress(OSError):
            shutil.rmtree(venv)
