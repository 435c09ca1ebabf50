"""`python -S launch.py SOCKET MODULE ARGS...`: runs `python -m MODULE ARGS...` (or, for a MODULE
ending in .py, `python MODULE ARGS...`) as a child forked by a preloaded interpreter
(preloaded.py) listening on SOCKET, with this process's stdin, stdout, stderr, environment and
working directory, and exits as that child exits (killed by the same signal). SIGTERM and SIGINT
sent to this process are passed on to the child. The child finds this process's parent, the
program that started it, in LAUNCHED_BY_PID (its own parent is the preloaded interpreter).
Standard library only, and no site-packages (-S): it starts in a few tens of milliseconds.
"""

import json
import os
import signal
import socket
import sys

path, module, *args = sys.argv[1:]
server = socket.socket(socket.AF_UNIX)
server.connect(path)
target = {"script": module} if module.endswith(".py") else {"module": module}
env = {**os.environ, "LAUNCHED_BY_PID": str(os.getppid())}
request = {**target, "args": args, "env": env, "cwd": os.getcwd()}
socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
answers = server.makefile()
pid = json.loads(answers.readline())["pid"]
for passed_on in (signal.SIGTERM, signal.SIGINT):
    signal.signal(passed_on, lambda signum, _frame: os.kill(pid, signum))
line = answers.readline()
returncode = json.loads(line)["returncode"] if line else 1
if returncode < 0:
    signal.signal(-returncode, signal.SIG_DFL)
    os.kill(os.getpid(), -returncode)
sys.exit(returncode)
