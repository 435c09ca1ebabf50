"""docs/deploy.md's recipe for building behind a TLS-inspecting proxy, run as written: its base
trusts the CA certificates the host keeps in /usr/local/share/ca-certificates, and the image is
built on it with `--build-arg BASE=`. What the test substitutes: the recipe's `FROM` (no image
registry answers on the test machines) is the suite's local Debian base with the host's
certificates taken out again (it is made with them); the last line, the image's build on such a
base, is test_image.py's build."""

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.deploy.podman import BASE_IMAGE, HOST_CA_FOLDER, Podman, builds_one_at_a_time
from tests.doc_examples import doc_example

pytestmark = pytest.mark.slow

RECIPE = doc_example("docs/deploy.md", "### Behind a TLS-inspecting proxy", lang="bash")
REGISTRY_BASE = "docker.io/library/debian:trixie-slim"


def test_the_docs_recipe_makes_a_base_that_trusts_the_hosts_ca(podman: Podman) -> None:
    certificates = sorted(HOST_CA_FOLDER.glob("*.crt"))
    if not certificates:
        pytest.skip(f"no CA certificates in {HOST_CA_FOLDER} to trust")
    lines = [line for line in RECIPE.code.splitlines() if line.strip()]
    assert len(lines) == 3, "three lines, as the page says"
    make_base, build_base, build_image = lines
    assert REGISTRY_BASE in make_base
    base_tag = shlex.split(build_base)[shlex.split(build_base).index("-t") + 1]
    assert shlex.split(build_image)[:3] == ["podman", "build", "-t"]
    assert f"BASE={base_tag}" in build_image and build_image.endswith(" .")

    untrusting = "localhost/ledger-test-base-without-host-ca:trixie"
    without_host_ca = [
        f"FROM {BASE_IMAGE}",
        "RUN rm -f /usr/local/share/ca-certificates/*.crt && update-ca-certificates --fresh",
    ]
    with builds_one_at_a_time():
        subprocess.run(
            ["podman", "build", "-t", untrusting, "-f", "-"],
            input="\n".join(without_host_ca) + "\n",
            env=podman.env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        assert not trusted(podman, untrusting, certificates)
        for line in (make_base.replace(REGISTRY_BASE, untrusting), build_base):
            done = subprocess.run(
                ["bash", "-c", line], env=podman.env, capture_output=True, text=True, timeout=900
            )
            assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    try:
        assert trusted(podman, base_tag, certificates) == {c.name for c in certificates}
    finally:
        podman("rmi", base_tag, untrusting, check=False)


def trusted(podman: Podman, image: str, certificates: list[Path]) -> set[str]:
    """Which of `certificates` the image's system store (what pip reads) holds."""
    bundle = podman("run", "--rm", image, "cat", "/etc/ssl/certs/ca-certificates.crt").stdout
    held = "".join(bundle.splitlines())
    bodies = {
        c.name: "".join(line for line in c.read_text().splitlines() if "-----" not in line)
        for c in certificates
    }
    return {name for name, body in bodies.items() if body in held}
