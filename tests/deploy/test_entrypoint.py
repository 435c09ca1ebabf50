"""`podman run IMAGE --help`, `scripts/demo --help` and `scripts/test --help` print their script's
own help: its comment block, every line of it and nothing of the code below (a fixed line range
printed `set -eu` once the block changed length; test_image.py asks the built image too)."""

import subprocess

import pytest

from tests.processes import ROOT


@pytest.mark.parametrize("script", ["scripts/container-entrypoint", "scripts/demo", "scripts/test"])
def test_a_scripts_help_is_its_comment_block_and_nothing_else(script: str) -> None:
    path = ROOT / script
    told = subprocess.run(
        ["bash" if script != "scripts/container-entrypoint" else "sh", str(path), "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    comments = []
    for line in path.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        comments.append(line.removeprefix("#").removeprefix(" "))
    assert told == comments
    assert not any(line.startswith("set -e") for line in told)
