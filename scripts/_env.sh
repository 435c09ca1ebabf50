# Shared set-up for scripts/demo and scripts/test: a Python >= 3.12 virtualenv with the server's
# dependencies and the worker SDK (sdk/, editable) installed. The server's own apps are not
# installed: they run from this folder.
# Sourced, not run. Idempotent: a second call reuses the virtualenv and installs nothing.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3 python3.12 python3.13 python3.14 \
        "$HOME"/.pyenv/versions/3.12*/bin/python3 "$HOME"/.pyenv/versions/3.13*/bin/python3 \
        /usr/local/bin/python3.12 /usr/local/bin/python3.13 /opt/homebrew/bin/python3.12 /opt/homebrew/bin/python3.13; do
        [ -n "$candidate" ] || continue
        if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
            command -v "$candidate" 2>/dev/null || echo "$candidate"
            return 0
        fi
    done
    return 1
}

ensure_venv() {
    local extras="$1" stamp want
    if [ ! -x "$VENV/bin/python" ]; then
        local py
        py="$(find_python)" || {
            echo "Agent Ledger needs Python 3.12 or newer (Django 6 does); none was found." >&2
            echo "Install one, or point PYTHON=/path/to/python3.12 at it." >&2
            exit 1
        }
        echo "==> creating virtualenv with $py"
        "$py" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
    fi
    stamp="$VENV/.installed-$extras"
    want="$(cat "$ROOT/pyproject.toml" "$ROOT/sdk/pyproject.toml" "$ROOT/sdk/VERSION" | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "==> installing the project [$extras] into .venv"
        "$VENV/bin/python" -m pip install --quiet -e "$ROOT/sdk" "$ROOT[$extras]"
        echo "$want" >"$stamp"
    fi
}

port_open() {
    (exec 3<>"/dev/tcp/$1/$2") >/dev/null 2>&1
}

# What the tests need from Debian, as program:package: chromium (the browser tests), pgbouncer
# (transaction pooling), and podman, runc, mmdebstrap and podman-compose (the image and compose
# tests: tests/deploy builds the Containerfile on a Debian base made with mmdebstrap)
TEST_DEBIAN_NEEDS="/usr/bin/chromium:chromium /usr/sbin/pgbouncer:pgbouncer podman:podman runc:runc
    mmdebstrap:mmdebstrap podman-compose:podman-compose"

# the Debian packages of TEST_DEBIAN_NEEDS whose program is not here, one a line
debian_packages_missing() {
    local need
    for need in $TEST_DEBIAN_NEEDS; do
        command -v "${need%%:*}" >/dev/null || echo "${need#*:}"
    done
}
