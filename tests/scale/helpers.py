"""Scale helpers: PgBouncer in front of the test server, a supervisor signing in to a served
dashboard over real HTTP, a load balancer for web nodes."""

import contextlib
import itertools
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.conftest import ROOT, free_port, stop_process
from tests.database import APP_PASSWORD, APP_ROLE

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


@contextlib.contextmanager
def pgbouncer(*, pool_size: int, upstream_port: int = 5432) -> Iterator[int]:
    """Debian's PgBouncer in transaction pooling mode in front of the PostgreSQL server on
    127.0.0.1:`upstream_port`, on a free port (yielded); `pool_size` server connections per
    database and user."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="ledger-pgbouncer-"))
    folder.chmod(0o755)
    # the suite's role (tests/database.py), with the password PgBouncer logs in upstream with
    (folder / "userlist.txt").write_text(f'"{APP_ROLE}" "{APP_PASSWORD}"\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={upstream_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'userlist.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    # PgBouncer refuses to run as root; as root, drop to the postgres user
    user = ["-u", "postgres"] if os.geteuid() == 0 else []
    (ROOT / ".pytest_cache").mkdir(exist_ok=True)
    log = open(ROOT / ".pytest_cache" / f"pgbouncer-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [PGBOUNCER, *user, str(folder / "pgbouncer.ini")], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port)):
                    break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        stop_process(proc)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def log_in(browser: httpx.Client, base: str, username: str, password: str) -> None:
    page = browser.get(f"{base}/login/")
    assert page.status_code == 200, page.text[:300]
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf is not None, "the login page carries a CSRF token"
    signed_in = browser.post(
        f"{base}/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf.group(1)},
        headers={"Referer": f"{base}/login/"},
    )
    assert signed_in.status_code in (200, 302), signed_in.text[:300]
    assert "sessionid" in browser.cookies, "signed in"


class RoundRobinBalancer:
    """The load balancer in front of the web nodes: a TCP proxy on a free port that hands each new
    connection to the next node in turn and skips a node that refuses the connection (a dead one),
    the way any L4 balancer with passive health checks does. Counts connections per node.
    """

    def __init__(self, urls: list[str]) -> None:
        self.nodes = [(u.split("//")[1].split(":")[0], int(u.rsplit(":", 1)[1])) for u in urls]
        self.urls = urls
        self.served: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def served_once_down(self, url: str, timeout: float = 10) -> dict[str, int]:
        """The connection counts once the node at `url` refuses connections. A SIGKILLed group
        keeps its listening socket, and goes on accepting, until its last process has exited, so
        counts read straight after the kill can still grow for the dead node.
        """
        index = self.urls.index(url)
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, f"{url} still accepts connections"
            try:
                socket.create_connection(self.nodes[index], timeout=1).close()
            except OSError:
                break
            time.sleep(0.02)
        with self._lock:
            return dict(self.served)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        first = next(self._turn)
        for i in range(len(self.nodes)):
            n = (first + i) % len(self.nodes)
            try:
                upstream = socket.create_connection(self.nodes[n], timeout=2)
            except OSError:
                with self._lock:
                    self.refused[self.urls[n]] += 1
                continue
            upstream.settimeout(None)
            with self._lock:
                self.served[self.urls[n]] += 1
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
            _pipe(client, upstream)
            return
        client.close()  # no node answers


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes one way until either side ends; then close both (a reset reaches the client)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
