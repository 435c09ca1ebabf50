"""What a checkout makes that is neither source nor image: `dist/` (the SDK's wheels, `pip wheel
-w dist ./sdk` as the README says) and Celery beat's schedule file (the README's own-database
block starts beat in the checkout) are ignored by git and left out of the image's build context."""

import fnmatch

import pytest

from tests.processes import ROOT

MADE_IN_A_CHECKOUT = ("dist/intentledger-1.0-py3-none-any.whl", "celerybeat-schedule.dat")


def ignores(ignore_file: str, path: str) -> bool:
    """Whether a pattern of `ignore_file` (.gitignore, .dockerignore: these use no negations and
    no anchored folders) matches `path` or a folder above it; read as a file, not through git, so
    an exported checkout without its history is checked too."""
    patterns = [
        line.strip().rstrip("/").removeprefix("**/")
        for line in (ROOT / ignore_file).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(prefix, pattern) for pattern in patterns for prefix in prefixes)


@pytest.mark.parametrize("path", MADE_IN_A_CHECKOUT)
def test_what_a_checkout_makes_is_ignored_by_git_and_kept_out_of_the_image(path: str) -> None:
    assert ignores(".gitignore", path), f"git would show {path}"
    assert ignores(".dockerignore", path), f"the image's build context would hold {path}"
