"""`podman run IMAGE --help` prints the entrypoint's own help: its comment block, every line of it
and nothing of the code below (test_image.py asks the built image the same)."""

import subprocess

from tests.processes import ROOT


def test_the_entrypoints_help_is_its_comment_block_and_nothing_else() -> None:
    entrypoint = ROOT / "scripts" / "container-entrypoint"
    told = subprocess.run(
        ["sh", str(entrypoint), "--help"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    comments = []
    for line in entrypoint.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        comments.append(line.removeprefix("#").removeprefix(" "))
    assert told == comments
    assert "set -eu" not in told
