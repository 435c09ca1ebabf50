"""CI proves the deployment: on a fresh machine scripts/test installs what the image and compose
tests need (as it installs chromium for the browser tests), and where they must run (.ci/run sets
TEST_DEPLOY_REQUIRED=1) a machine that cannot run them fails the run instead of skipping them."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy import podman as deploy_podman
from tests.processes import ROOT

DEPLOYMENT_PACKAGES = {"podman", "runc", "mmdebstrap", "podman-compose"}


def packages_scripts_test_would_install(path: Path) -> set[str]:
    """What scripts/test asks apt-get for on a machine whose PATH is `path` (nothing but the two
    programs the sourced scripts/_env.sh itself calls)."""
    for program in ("dirname", "cat"):
        found = shutil.which(program)
        assert found is not None
        (path / program).symlink_to(found)
    listed = subprocess.run(
        ["/bin/bash", "-c", "source scripts/_env.sh && debian_packages_missing"],
        cwd=ROOT,
        env={"PATH": str(path)},
        capture_output=True,
        text=True,
        check=True,
    )
    return set(listed.stdout.split())


def test_on_a_machine_without_podman_scripts_test_installs_what_the_image_tests_need(
    tmp_path: Path,
) -> None:
    assert packages_scripts_test_would_install(tmp_path) >= DEPLOYMENT_PACKAGES
    script = (ROOT / "scripts" / "test").read_text()
    assert "debian_packages_missing" in script and "apt-get install" in script


def test_ci_requires_the_deployment_tests_to_run() -> None:
    assert 'TEST_DEPLOY_REQUIRED="${TEST_DEPLOY_REQUIRED:-1}"' in (ROOT / ".ci" / "run").read_text()


def test_where_the_deployment_tests_must_run_a_machine_without_podman_fails_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman, no runc
    monkeypatch.setenv("TEST_DEPLOY_REQUIRED", "1")
    assert outcome_without_podman() == (
        "Failed",
        "TEST_DEPLOY_REQUIRED=1 but podman is not installed",
    )
    monkeypatch.setenv("TEST_DEPLOY_REQUIRED", "0")  # a developer's machine: a skip, saying why
    assert outcome_without_podman() == ("Skipped", "podman is not installed")


def outcome_without_podman() -> tuple[str, str]:
    """How the deployment tests' podman session ends here: its outcome's kind and first words."""
    outcomes = (pytest.fail.Exception, pytest.skip.Exception)
    with pytest.raises(outcomes) as raised, deploy_podman.podman_session():
        pass
    return type(raised.value).__name__, str(raised.value.msg).split(" (")[0]
