"""A Python that has imported an agent framework once and forks a process for each agent run.

Importing the OpenAI Agents SDK (MCP's types with it), LangGraph or Pydantic AI takes one to two
seconds of CPU, and the framework tests start an agent process two or three times each. This
process (`python tests/integrations/preloaded.py MODULE...`) imports the framework's modules, then
for each request on stdin forks: the child takes the request's environment, working directory,
stdout and stderr files and runs the agent script as `__main__`, as `python SCRIPT` or
`python -m MODULE` would. It is a process of its own (its own pid; SIGKILL ends it mid-step as it
would end a fresh interpreter); only the framework's import is shared, never a module of ours, so
each agent reads its environment afresh. The test gets the child's exit status
(`subprocess`'s: -9 for SIGKILL).

Protocol, one JSON object a line: the test sends {"script" | "module", "env", "cwd", "stdout",
"stderr"}; this process answers {"pid"} when the child is forked and {"returncode"} when it ends.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, Any


def _run_child(request: dict[str, Any]) -> int:
    """In the forked child: become the agent process the request describes; its exit code."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "stdout" in request:  # else the child has the launcher's stdin, stdout and stderr
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
    try:
        if "module" in request:  # python -m MODULE: the working directory first on sys.path
            sys.path[0] = os.getcwd()
            sys.argv = [request["module"], *request.get("args", [])]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:  # python SCRIPT: the script's folder first on sys.path
            sys.path[0] = str(Path(request["script"]).parent)
            sys.argv = [request["script"], *request.get("args", [])]
            runpy.run_path(request["script"], run_name="__main__")
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _preload(modules: list[str]) -> None:
    """Import the framework's modules, then tell the test this interpreter is ready."""
    for module in modules:
        importlib.import_module(module)
    print(json.dumps({"ready": True}), flush=True)


def _fork(child: Callable[..., int], *args: Any) -> int:
    """Fork; the child runs `child(*args)` and exits with its code (1 if it raised). The child's
    pid."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child(*args)
        finally:
            os._exit(code)
    return pid


def _launched(
    listener: socket.socket, launcher: socket.socket, fds: list[int], message: bytes
) -> int:
    """The child of a launch: the launcher's stdin, stdout and stderr, then the agent."""
    listener.close()
    launcher.close()
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    return _run_child(json.loads(message))


def serve(modules: list[str]) -> None:
    _preload(modules)
    for line in sys.stdin:
        request = json.loads(line)
        pid = _fork(_run_child, request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


def serve_socket(path: str, modules: list[str]) -> None:
    """The same over a Unix socket, for a program that starts its agent itself (an MCP client
    starting `intentledger mcp proxy`): it starts `launch.py` instead, which hands this process
    its stdin, stdout and stderr (SCM_RIGHTS) and exits as the forked child exits."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    _preload(modules)
    children: dict[int, socket.socket] = {}  # pid -> the launcher's connection
    while True:
        ready = select.select([listener, sys.stdin], [], [], 0.05)[0]
        if sys.stdin in ready and not sys.stdin.readline():  # the test closed our stdin: stop
            return
        if listener in ready:
            connection, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            pid = _fork(_launched, listener, connection, fds, message)
            for fd in fds:
                os.close(fd)
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            children[pid] = connection
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                connection = children.pop(pid)
                with suppress(OSError):
                    answer = {"returncode": os.waitstatus_to_exitcode(status)}
                    connection.sendall(json.dumps(answer).encode() + b"\n")
                connection.close()


class PreloadedPython:
    """The test's side: one preloaded interpreter, started on first use, stopped by `stop()`."""

    def __init__(
        self, modules: list[str], *, env: dict[str, str], cwd: Path, socket_path: Path | None = None
    ) -> None:
        self.socket_path = socket_path
        serve_on = ["--socket", str(socket_path)] if socket_path else []
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *serve_on, *modules],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._answer(180).get("ready"), "the preloaded interpreter did not start"

    def _answer(self, timeout: float, pid: int | None = None) -> dict[str, Any]:
        stdout: IO[str] = self.proc.stdout  # type: ignore[assignment]
        deadline = time.monotonic() + timeout
        while not select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            if time.monotonic() >= deadline:
                if pid is not None:  # as subprocess.run's timeout: kill the child, then raise
                    os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(str(self.proc.args), timeout)
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the preloaded interpreter exited ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(
        self, target: dict[str, str], *, env: dict[str, str], cwd: Path, work: Path, timeout: float
    ) -> tuple[int, str, str]:
        """Runs the agent (`{"script": path}` or `{"module": name}`) in a forked child; its exit
        code, stdout and stderr (as `subprocess.run(..., capture_output=True, text=True)`)."""
        stdout, stderr = work / "agent.stdout", work / "agent.stderr"
        request = {**target, "env": env, "cwd": str(cwd), "stdout": str(stdout)}
        request["stderr"] = str(stderr)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = int(self._answer(30)["pid"])
        returncode = int(self._answer(timeout, pid)["returncode"])
        return returncode, stdout.read_text(errors="replace"), stderr.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.socket_path is not None:
            with suppress(OSError):
                self.socket_path.unlink()
                self.socket_path.parent.rmdir()

    def launch_argv(self, module: str, *args: str) -> list[str]:
        """The command that runs `python -m MODULE ARGS...` (`python MODULE ARGS...` for a path
        ending in .py) as a child of this interpreter."""
        launcher = Path(__file__).with_name("launch.py")
        return [sys.executable, "-S", str(launcher), str(self.socket_path), module, *args]


if __name__ == "__main__":
    if sys.argv[1] == "--socket":
        serve_socket(sys.argv[2], sys.argv[3:])
    else:
        serve(sys.argv[1:])
