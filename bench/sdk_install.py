"""What an agent author's install costs: the SDK's wheel alone against the old single distribution.

    python -m bench.sdk_install [--runs 2] [--old 0028820^]

Builds the SDK's wheel from a copy of sdk/, and the old `agent-ledger` distribution (the whole
server, which the README used to tell agent authors to install) from `git archive` of the commit
`--old` names. Each configuration is installed into fresh virtualenvs of this interpreter's base
Python (`venv --without-pip`; this environment's pip installs with `--python`, with the machine's
pip configuration and cache): once to warm the cache, then `--runs` times, timed. The installed
size is the disk usage (du) of the virtualenv's site-packages less a bare virtualenv's (the
compiled .pyc files pip writes included). Each install is then asked for
`from agents import Agent` from a neutral folder, and for Django. Writes bench/SDK_INSTALL.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import BENCH, ROOT, git_revision, machine_description

OUT = BENCH / "SDK_INSTALL.md"
OLD_DEFAULT = "0028820^"  # the commit before the SDK became its own distribution
PROBE = """
import importlib.util, json, sys
try:
    from agents import Agent
    agents = "ok: " + Agent.__module__
except Exception as exc:
    agents = f"{type(exc).__name__}: {exc}".replace(sys.prefix, "<venv>")
print(json.dumps({"agents": agents, "django": importlib.util.find_spec("django") is not None}))
"""


@dataclass
class Install:
    label: str
    requirement: str
    seconds: list[float] = field(default_factory=list)
    size: int = 0
    files: int = 0
    distributions: int = 0
    agents: str = ""
    django: bool = False
    source_tree: Path | None = None  # built from source: its build folders go before each install


def sh(args: list[str | Path], cwd: Path) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, env=_env(), check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{args} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def _env() -> dict[str, str]:
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def base_python() -> Path:
    return (
        Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    )


def disk_usage(folder: Path) -> tuple[int, int]:
    """(bytes on disk, files) under `folder`, as du counts them (hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = files = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            files += name in filenames
    return total, files


def site_packages(venv: Path) -> Path:
    (found,) = (venv / "lib").glob("python3.*/site-packages")
    return found


def fresh_venv(where: Path) -> Path:
    sh([base_python(), "-m", "venv", "--without-pip", where], where.parent)
    return where / "bin" / "python"


def pip_install(python: Path, requirement: str, cwd: Path) -> float:
    started = time.perf_counter()
    sh([sys.executable, "-m", "pip", "--python", python, "install", "-q", requirement], cwd)
    return time.perf_counter() - started


def wheel_of(source: Path, out: Path, pattern: str) -> tuple[Path, float]:
    """The wheel pip builds from `source` (no dependencies), and the seconds it took."""
    started = time.perf_counter()
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, source], source.parent)
    seconds = time.perf_counter() - started
    (built,) = out.glob(pattern)
    for folder in (source / "build", *source.glob("*.egg-info"), *source.glob("src/*.egg-info")):
        shutil.rmtree(folder, ignore_errors=True)
    return built, seconds


def measure(install: Install, work: Path, runs: int, bare: int) -> None:
    for n in range(runs + 1):  # the first warms pip's cache and the local wheel builds
        venv = work / f"venv-{n}"
        if install.source_tree is not None:
            shutil.rmtree(install.source_tree / "build", ignore_errors=True)
            for info in install.source_tree.glob("*.egg-info"):
                shutil.rmtree(info)
        python = fresh_venv(venv)
        seconds = pip_install(python, install.requirement, work)
        if n:
            install.seconds.append(seconds)
        if n == runs:
            size, files = disk_usage(site_packages(venv))
            install.size, install.files = size - bare, files
            listed = sh(
                [sys.executable, "-m", "pip", "--python", python, "list", "--format=json"], work
            )
            install.distributions = len(json.loads(listed))
            neutral = work / "neutral"
            neutral.mkdir(exist_ok=True)
            probe = json.loads(sh([python, "-c", PROBE], neutral))
            install.agents, install.django = probe["agents"], probe["django"]
        shutil.rmtree(venv)
        print(f"    {install.label}: {seconds:.1f} s{' (warm-up)' if not n else ''}", flush=True)


def old_tree(commit: str, work: Path) -> Path:
    tree = work / "old"
    tree.mkdir()
    archive = work / "old.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", commit], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def report(
    installs: list[Install],
    wheels: dict[str, tuple[int, float]],
    old: str,
    runs: int,
    before: dict[str, object],
) -> str:
    old_sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", old], capture_output=True, text=True
    ).stdout.strip()
    pip_version = sh([sys.executable, "-m", "pip", "--version"], ROOT).split()[1]
    lines = [
        "# SDK install: what an agent author's `pip install` costs",
        "",
        "Generated by `python -m bench.sdk_install` (see its docstring for the method); do not edit",
        'by hand. "Old" is the single `agent-ledger` distribution an agent author installed before',
        f'the SDK was its own (commit {old_sha}, built from `git archive`); "new" is the `intentledger`',
        "wheel built from sdk/. Each install goes into a fresh virtualenv after one warm-up install of",
        "the same configuration; the installed size is the disk usage of site-packages less a bare",
        "virtualenv's, with the .pyc files pip compiles.",
        "",
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {git_revision()}",
        "",
        f"Python {before['python']} (`venv --without-pip`), pip {pip_version}, {before['cores']} cores "
        f"({before['cpu']}); load average {before['loadavg_at_start']} at the start, "
        f"{[round(x, 2) for x in os.getloadavg()]} at the end. Other engineers' test suites shared "
        "the machine: read the seconds as this run's, not as a constant.",
        "",
        "| wheel | size | seconds to build (`pip wheel --no-deps`) |",
        "|---|---|---|",
        *(
            f"| `{name}` | {size / 1000:.1f} kB | {built:.1f} |"
            for name, (size, built) in wheels.items()
        ),
        "",
        f"| install | seconds ({runs} runs) | installed size | files | distributions | `from agents import Agent` | Django installed |",
        "|---|---|---|---|---|---|---|",
    ]
    for i in installs:
        seconds = ", ".join(f"{s:.1f}" for s in i.seconds)
        median = statistics.median(i.seconds)
        lines.append(
            f"| {i.label} | {median:.1f} (each: {seconds}) | {mb(i.size)} | {i.files} | "
            f"{i.distributions} | {i.agents} | {'yes' if i.django else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sdk_install", description=__doc__)
    parser.add_argument("--runs", type=int, default=2, help="timed installs per configuration")
    parser.add_argument("--old", default=OLD_DEFAULT, help="the commit of the old distribution")
    args = parser.parse_args(argv)
    before = machine_description()
    work = Path(tempfile.mkdtemp(prefix="sdk-install-"))
    try:
        sdk = work / "sdk"
        shutil.copytree(
            ROOT / "sdk",
            sdk,
            ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
        )
        new_wheel, new_built = wheel_of(sdk, work / "dist-new", "intentledger-*.whl")
        old = old_tree(args.old, work)
        old_wheel, old_built = wheel_of(old, work / "dist-old", "agent_ledger-*.whl")
        wheels = {
            new_wheel.name: (new_wheel.stat().st_size, new_built),
            old_wheel.name: (old_wheel.stat().st_size, old_built),
        }
        bare_venv = work / "bare"
        fresh_venv(bare_venv)
        bare, _ = disk_usage(site_packages(bare_venv))
        installs = [
            Install("new: `intentledger` wheel", str(new_wheel)),
            Install("new: `intentledger[openai-agents]` wheel", f"{new_wheel}[openai-agents]"),
            Install("new: `intentledger[all]` wheel", f"{new_wheel}[all]"),
            Install("old: `agent-ledger` wheel", str(old_wheel)),
            Install("old: `agent-ledger[openai-agents]` wheel", f"{old_wheel}[openai-agents]"),
            Install(
                "old: `agent-ledger[openai-agents]` from the checkout (the README's way)",
                f"{old}[openai-agents]",
                source_tree=old,
            ),
        ]
        for install in installs:
            print(f"==> {install.label}", flush=True)
            measure(install, work, args.runs, bare)
        OUT.write_text(report(installs, wheels, args.old, args.runs, before), encoding="utf-8")
        print(OUT.read_text(encoding="utf-8"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
