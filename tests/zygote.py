"""A fork server ("zygote") for the tests that run the ``world`` script many times.

Each ``world`` process spends most of its ~0.5 s importing (typer, pydantic, rich, wasmtime and
this project's ``air``, ``kernel`` and ``world``). The zygote imports those once, then forks a
child per command: the child is still a real, separate process with the caller's argv,
environment, working directory, umask, signal dispositions and stdio, and it runs the console
script (``.venv/bin/world``) itself, so only the imports are shared.

The parts:

* the server (``python tests/zygote.py serve SOCKET SCRIPT``, started by ``Zygote.start``):
  single-threaded (forking from a threaded process is unsafe), it preloads ``PRELOAD`` and the
  modules of ``air``, ``kernel`` and ``world``, ``gc.freeze()``-s them, and listens on a unix
  socket (bound under another name and renamed once it listens, so that it is there only when
  it answers). A selectors loop accepts a request, forks, sends the child's pid, and reaps
  children with ``os.waitpid(-1, WNOHANG)`` when SIGCHLD writes to its wakeup fd, sending each
  one's wait status back on its connection. A connection that closes first (its shim was
  killed) has its child killed too, as the process it stands for would have died. It exits when
  its stdin (a pipe from the test process) closes, so it never outlives the suite.
* the shim (``SHIM``, written as ``BIN/world`` by ``Zygote.start``): a ``python -IS`` script
  that sends ``argv``, ``os.environb``, the umask, the signals it inherited ignored, its signal
  mask and its resource limits, with fds 0, 1, 2 and its working directory (an ``O_PATH`` fd)
  attached as ``SCM_RIGHTS``; then waits for the status and exits with it (a child killed by
  signal N kills the shim with N, so the caller sees what the real script would have given;
  128+N if that signal does not end it). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
  it receives (unless it inherited them ignored) go to the child. No socket, a refused
  connection or a server that answers "exec" (below): it ``os.execv``-s the real script, so a
  test never fails because of the zygote.
* the child: closes the server's sockets and fds, ``dup2``-s the three fds onto 0, 1, 2,
  ``fchdir``-s, sets the umask, replaces ``os.environ`` wholesale (``putenv``/``unsetenv``
  too), re-reads what was taken from the zygote's environment and can be taken again
  (``time.tzset()``, ``tempfile.tempdir``, sysconfig's user base), resets every signal to what a fresh
  interpreter would have (SIGINT ``default_int_handler``, or ignored if the shim's was;
  SIGPIPE and SIGXFSZ ignored; others default or ignored as the shim's were; handlers that C
  code installed, such as wasmtime's, are left alone) and the signal mask, re-creates
  ``sys.stdin``/``stdout``/``stderr`` as Python's start-up does (buffering and line buffering
  follow the new fds), sets ``sys.argv``/``sys.orig_argv`` as the script's, and runs the script
  with ``runpy.run_path(SCRIPT, run_name="__main__")``. Then what ``Py_FinalizeEx`` does that
  shows: non-daemon threads joined, ``atexit`` callbacks, stdout and stderr flushed (a failed
  flush is exit 120), and ``os._exit`` with the code ``SystemExit`` carried (``None`` 0, an
  int itself, anything else printed to stderr and 1). Any other exception: its traceback (from
  the script's frame on, as the real one prints it) and 1; an uncaught ``KeyboardInterrupt``
  ends the child by SIGINT, as CPython does.

Not imported in the zygote: ``cli.*``. ``cli.common`` makes rich ``Console`` objects at import,
and a ``Console`` reads ``TERM``, ``COLUMNS``, ``NO_COLOR``, ``FORCE_COLOR`` and more when it is
made (rich reads nothing at import: the audit below); ``cli`` costs ~15 ms of imports, so the
child imports it with its own environment. What is left in a child (~0.1 s in all, against
~0.5 s for the script) is mostly typer building the click commands from the functions'
annotations, each run.

Fidelity audit. ``grep -rn "os.environ|getenv|environb" air kernel world cli``: ``air`` and
``kernel`` read no environment; ``world`` reads ``WORLD_NATIVE`` (``world._runner``) and a
secret's variable (``world.effects._secrets``, ``os.environb``), ``cli`` ``WORLD_DEBUG`` and
``WORLD_PROGRESS``, all when called, so in the child after its environment is in place. The
third-party and standard modules were audited by recording every read while preloading
(``os._Environ`` wrapped: ``os.getenv``, ``os.environ[...]``, ``in`` and copies are all seen;
``python tests/zygote.py audit`` prints them, with the reading module). At import, they read:
typer (``rich_utils``: ``TERMINAL_WIDTH``, ``FORCE_COLOR``, ``PY_COLORS``, ``GITHUB_ACTIONS``,
``_TYPER_FORCE_DISABLE_TERMINAL``; ``core``: ``TYPER_USE_RICH``), gettext for typer's strings
(``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``), ``MSGPACK_PUREPYTHON``,
``PYDANTIC_DISABLE_PLUGINS`` (pydantic's plugin loader, at the first model class),
``PYTHONTZPATH`` (zoneinfo), and sysconfig's ``PYTHONUSERBASE``, ``_PYTHON_PROJECT_BASE``,
``_PYTHON_SYSCONFIGDATA_NAME`` and ``HOME`` (the user base). The server guards each variable
the preload read, with every one the interpreter reads at start-up (``PYTHON*``, ``LANG``,
``LANGUAGE``, ``LC_*``, ``LD_*``, ``MALLOC_*``, ``GLIBC_TUNABLES``) and the prefixes native code
may read once and keep (``PYDANTIC_*``, ``WASMTIME_*``, ``RUST_*``; C-level reads are not
recorded): a request whose value differs from the zygote's gets "exec", so does one whose
resource limits differ (``world`` reads ``RLIMIT_AS`` to pick its engine). ``HOME`` is not
guarded (``test_docs`` gives each block its own): the child recomputes sysconfig's user base
instead (``REREAD``). What the suite varies (``COLUMNS``, ``NO_COLOR``, ``TERM``, ``HOME``,
``TMPDIR``, ``WORLD_*``) is read after the fork, so those commands fork.

What a forked child does not have of its own: the hash seed (random per process, the
zygote's is shared by its children), a parent (the zygote, not the shim: ``os.getppid()``),
process group and session (the zygote's: a terminal's Ctrl-C reaches the zygote's children
directly, and again through the shim), nice value, CPU affinity and cgroup; the script's
``__main__`` has ``runpy``'s ``__loader__``/``__spec__``, and a traceback starts at the
script's frame as the real one does. The stdio encoding and error handler are the zygote's,
which the guarded ``LANG``/``LC_*``/``PYTHONIOENCODING`` choose.

Turned off by ``WORLD_TEST_ZYGOTE=0``: the fixture gives the venv's own ``bin`` then.
"""

from __future__ import annotations

import contextlib
import gc
import io
import marshal
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent
WORLD_SCRIPT = VENV_BIN / "world"
HERE = Path(__file__).resolve()

PRELOAD = (
    "typer",
    "typer.main",
    "typer.core",
    "typer.rich_utils",
    "typer._adapters",
    "typer.completion",
    "click",
    "rich",
    "rich.console",
    "rich.table",
    "rich.panel",
    "rich.progress",
    "rich.markdown",
    "rich.syntax",
    "rich.traceback",
    "rich._emoji_codes",
    "typer._click.decorators",
    "typer._click._textwrap",
    "encodings.ascii",
    "pydantic",
    "pydantic_core",
    "wasmtime",
    "cbor2",
    "blake3",
    "msgpack",
    "httpx",
    "importlib.metadata",
    "runpy",
    "shlex",
    "json",
    "uuid",
    "tempfile",
    "subprocess",
)
"""Third-party and standard modules the commands import; then every module of ``PACKAGES``."""

PACKAGES = ("air", "kernel", "world")
SKIP = ("world.cluster.ray",)
"""Not preloaded: Ray is imported on first use (and starts threads), by ``world cluster up``."""

GUARD_PREFIXES = (
    b"PYTHON",
    b"LC_",
    b"LD_",
    b"MALLOC_",
    b"PYDANTIC_",
    b"WASMTIME_",
    b"RUST_",
)
GUARD_NAMES = frozenset({b"LANG", b"LANGUAGE", b"GLIBC_TUNABLES"})
"""Variables that, when a request's differ from the zygote's, make it an exec (with those the
preload read, but ``REREAD``: ``Server``)."""
REREAD = frozenset({b"HOME"})
READ_WHEN_USED = frozenset({b"PYTHONBREAKPOINT"})
"""``PYTHON*`` variables the interpreter reads when they are used, not at start-up, so a child
that takes the request's environment has them right: ``breakpoint()`` reads
``PYTHONBREAKPOINT`` on each call. Ray sets it in the process that starts it (a test worker that
ran a Ray test), which made every later command in that worker run the real script."""
"""Read by the preload but read again in the child (``_reread_environment``): not guarded."""

FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
ENV_SWITCH = "WORLD_TEST_ZYGOTE"

SHIM = '''#!{python} -IS
"""``world`` through the test zygote ({zygote}); the real script if it does not answer."""
import marshal, os, resource, signal, socket, sys

SOCKET = {socket!r}
WORLD = {world!r}


def real():
    os.execv(WORLD, [WORLD, *sys.argv[1:]])


def lost():
    os.write(2, b"world (zygote shim): the zygote went away before the command ended\\n")
    os._exit(1)


def main():
    ignored = [s for s in signal.valid_signals() if signal.getsignal(s) == signal.SIG_IGN]
    mask = [int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])]
    limits = {{n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")}}
    umask = os.umask(0o22)
    os.umask(umask)
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(SOCKET)
    except OSError:
        real()
    child = []
    pending = []

    def forward(signum, _frame):
        if child:
            try:
                os.kill(child[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    for name in {forwarded!r}:
        number = getattr(signal, name)
        if number not in ignored:
            signal.signal(number, forward)
    request = {{
        "argv": sys.argv, "env": dict(os.environb), "umask": umask, "ignored": [int(s) for s in ignored],
        "mask": mask, "limits": limits,
    }}
    payload = marshal.dumps(request)
    data = len(payload).to_bytes(8, "little") + payload
    try:
        sent = socket.send_fds(conn, [data], [0, 1, 2, here])
        conn.sendall(data[sent:])
        head = conn.recv(5)
    except OSError:
        head = b""
    if not head or head[:1] == b"E":
        for name in {forwarded!r}:
            number = getattr(signal, name)
            if number not in ignored:
                signal.signal(number, signal.SIG_DFL)
        for signum in pending:
            os.kill(os.getpid(), signum)
        real()
    while len(head) < 5:
        more = conn.recv(5 - len(head))
        if not more:
            lost()
        head += more
    child.append(int.from_bytes(head[1:], "little"))
    for signum in pending:
        forward(signum, None)
    status = b""
    while len(status) < 5:
        more = conn.recv(5 - len(status))
        if not more:
            lost()
        status += more
    code = os.waitstatus_to_exitcode(int.from_bytes(status[1:], "little"))
    if code < 0:
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL: it cannot be caught, so it is the default already
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


main()
'''


def script_python(script: Path) -> str:
    """The interpreter of ``script``'s ``#!`` line (the one the real script runs on)."""
    with script.open("rb") as f:
        first = f.readline().decode("utf-8", "replace").strip()
    if first.startswith("#!") and len(first[2:].split()) == 1:
        return first[2:].strip()
    return sys.executable


# --- the server ------------------------------------------------------------------------------


def _record_environment_reads() -> tuple[set[bytes], dict[bytes, set[str]], Any]:
    """Wrap ``os._Environ`` so that every read is recorded (name, reading module); returns the
    names, who read them, and the undo."""
    names: set[bytes] = set()
    readers: dict[bytes, set[str]] = {}
    cls: Any = os._Environ
    getitem, iterate = cls.__getitem__, cls.__iter__

    def note(name: bytes) -> None:
        names.add(name)
        frame = sys._getframe(2)
        while frame is not None and frame.f_globals.get("__name__") in (
            "os",
            "_collections_abc",
            "collections.abc",
            "posixpath",
            "genericpath",
            __name__,
        ):
            frame = frame.f_back  # type: ignore[assignment]
        who = frame.f_globals.get("__name__", "?") if frame is not None else "?"
        readers.setdefault(name, set()).add(str(who))

    def recording_getitem(self: Any, key: Any) -> Any:
        with contextlib.suppress(TypeError, UnicodeError):
            note(self.encodekey(key))
        return getitem(self, key)

    def recording_iter(self: Any) -> Any:
        note(b"*")
        return iterate(self)

    cls.__getitem__, cls.__iter__ = recording_getitem, recording_iter

    def undo() -> None:
        cls.__getitem__, cls.__iter__ = getitem, iterate

    return names, readers, undo


def preload() -> tuple[set[bytes], dict[bytes, set[str]], list[str]]:
    """Import ``PRELOAD`` and the modules of ``PACKAGES``; the environment they read at import,
    who read it, and the modules that failed to import."""
    import importlib
    import pkgutil

    names, readers, undo = _record_environment_reads()
    failed: list[str] = []
    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                failed.append(name)
        for package in PACKAGES:
            top = importlib.import_module(package)
            for info in pkgutil.walk_packages(top.__path__, f"{package}."):
                if info.name.startswith(SKIP):
                    continue
                try:
                    importlib.import_module(info.name)
                except ImportError:
                    failed.append(info.name)
    finally:
        undo()
    return names, readers, failed


def _limits() -> dict[str, tuple[int, int]]:
    import resource

    return {
        n: resource.getrlimit(getattr(resource, n))
        for n in dir(resource)
        if n.startswith("RLIMIT_")
    }


STRICT_LIMITS = frozenset(("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_RSS", "RLIMIT_MEMLOCK"))
"""Limits a request must share with the zygote: a child's address space is the warm zygote's,
so a lower memory cap would bite sooner than in a fresh process (``world`` reads ``RLIMIT_AS``
to pick its engine). The others (open files, which Ray raises in the test process it runs in,
stack, core, ...) the child takes from the request (``_set_limits``), as a fresh process would
inherit them."""


def _within(hard: int, zygote_hard: int) -> bool:
    """Whether a hard limit can be set by lowering the zygote's (``RLIM_INFINITY`` is -1)."""
    import resource

    if zygote_hard == resource.RLIM_INFINITY:
        return True
    return hard != resource.RLIM_INFINITY and hard <= zygote_hard


def _set_limits(limits: dict[str, tuple[int, int]]) -> None:
    import resource

    for name, wanted in limits.items():
        which = getattr(resource, name)
        if resource.getrlimit(which) != wanted:
            resource.setrlimit(which, wanted)


def _guarded(name: bytes, read: set[bytes]) -> bool:
    if name in READ_WHEN_USED:
        return False
    if name in GUARD_NAMES or name.startswith(GUARD_PREFIXES):
        return True
    return name in read and name not in REREAD


class Server:
    """The fork server's state and loop (``serve``)."""

    def __init__(self, sock_path: str, script: str) -> None:
        self.script = script
        self.env = dict(os.environb)
        sys.path[0] = os.path.dirname(os.path.realpath(script))  # what the script's run has
        read, _readers, _failed = preload()
        if b"*" in read:
            raise SystemExit("a preloaded module copied the whole environment: no zygote")
        self.read = read
        self.limits = _limits()
        threads = os.listdir("/proc/self/task")
        if len(threads) != 1:
            raise SystemExit(f"the preload started threads ({len(threads)}): no zygote")
        # A signal that reaches a child before it has its own dispositions (``_signals``) ends
        # it, as one in a fresh interpreter's start-up would; the zygote goes with a Ctrl-C too.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda _s, _f: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket | None] = {}
        self.by_conn: dict[socket.socket, int] = {}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = f"{sock_path}.{os.getpid()}"
        self.listener.bind(staging)
        self.listener.listen(128)
        self.listener.setblocking(False)
        os.rename(staging, sock_path)  # there only once it answers
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.selector.register(0, selectors.EVENT_READ, "lifeline")
        sys.stdout.flush()
        sys.stderr.flush()
        gc.collect()
        gc.freeze()

    def loop(self) -> None:
        while True:
            for key, _events in self.selector.select():
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
                elif key.data == "lifeline":
                    if not os.read(0, 512):
                        return
                else:
                    self._hung_up(key.fileobj)  # type: ignore[arg-type]
            self._reap()

    def _accept(self) -> None:
        try:
            conn, _addr = self.listener.accept()
        except BlockingIOError:
            return
        fds: list[int] = []
        pid = 0
        try:
            conn.setblocking(True)
            conn.settimeout(10)
            data = _receive(conn, fds)
            request: dict[str, Any] = marshal.loads(data)
            why = self._refusal(request, fds)
            if why is not None:
                _log(f"exec {request['argv'][1:2]}: {why}")
                conn.sendall(b"E" + why.encode())
                conn.close()
                return
            pid = os.fork()
            if pid == 0:
                self._child(conn, request, fds)  # never returns
            self.children[pid] = conn
            self.by_conn[conn] = pid
            conn.sendall(b"P" + pid.to_bytes(4, "little"))
        except Exception as exc:  # a bad request, or a shim gone already: not the server's end
            _log(f"dropped a request: {exc!r}")
            if pid:
                self.by_conn.pop(conn, None)
                self.children[pid] = None  # reaped when it ends
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        _log(f"fork {pid} {request['argv'][1:2]}")
        self.selector.register(conn, selectors.EVENT_READ, "conn")

    def _refusal(self, request: dict[str, Any], fds: list[int]) -> str | None:
        """Why this request must run the real script, or ``None``."""
        if len(fds) != 4:
            return f"{len(fds)} fds"
        env: dict[bytes, bytes] = request["env"]
        for name in set(env) | set(self.env):
            if env.get(name) != self.env.get(name) and _guarded(name, self.read):
                return f"{name.decode(errors='replace')} differs"
        limits = {n: tuple(v) for n, v in request["limits"].items()}
        if set(limits) != set(self.limits):
            return "resource limits differ"
        for name, (soft, hard) in limits.items():
            if name in STRICT_LIMITS and (soft, hard) != self.limits[name]:
                return f"{name} differs"  # the child's memory is the zygote's: no lower cap
            if not _within(hard, self.limits[name][1]):
                return f"{name}'s hard limit is above the zygote's"  # cannot be raised
        return None

    def _hung_up(self, conn: socket.socket) -> None:
        """The shim went away (killed): so does its command, as the real process would."""
        try:
            more = conn.recv(1)
        except OSError:
            more = b""
        if more:
            return
        pid = self.by_conn.pop(conn)
        self.selector.unregister(conn)
        conn.close()
        if self.children.get(pid) is conn:
            self.children[pid] = None
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(b"S" + status.to_bytes(4, "little"))
                self.by_conn.pop(conn, None)
                self.selector.unregister(conn)
                conn.close()

    # --- in the child ---

    def _child(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        code = 1
        try:
            self._become(conn, request, fds)
            code = run_script(self.script)
        except BaseException:
            import traceback

            with contextlib.suppress(BaseException):
                os.write(2, ("zygote child: " + traceback.format_exc()).encode())
        finally:
            os._exit(code)

    def _become(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        signal.set_wakeup_fd(-1)
        self.selector.close()
        self.listener.close()
        conn.close()
        for other in self.by_conn:
            other.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        _signals(set(request["ignored"]), set(request["mask"]))
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.fchdir(fds[3])
        for fd in fds:
            if fd > 2:
                os.close(fd)
        fds.clear()
        os.umask(request["umask"])
        _set_limits({n: tuple(v) for n, v in request["limits"].items()})
        os.environb.clear()
        os.environb.update(request["env"])
        _reread_environment()
        args = [self.script, *request["argv"][1:]]
        sys.argv = args
        sys.orig_argv = [script_python(Path(self.script)), *args]
        _stdio()


def _reread_environment() -> None:
    """What start-up or the preload took from the zygote's environment and keeps: the time
    zone (``time``), the temporary folder (``tempfile``, on first use), the user base
    (``sysconfig``, from ``HOME``; zoneinfo's import computes it)."""
    time.tzset()
    tempfile.tempdir = None
    config = sys.modules.get("sysconfig")
    if config is not None:
        base: Any = config
        base._HAS_USER_BASE = base._getuserbase() is not None
        if base._CONFIG_VARS is not None and "userbase" in base._CONFIG_VARS:
            base._CONFIG_VARS["userbase"] = base._getuserbase()


def _log(line: str) -> None:
    """A line in the zygote's log (its stderr: ``Zygote.log_path``)."""
    with contextlib.suppress(OSError):
        os.write(2, f"{line}\n".encode(errors="replace"))


def _receive(conn: socket.socket, fds: list[int]) -> bytes:
    """A request's bytes: 8 bytes of length, then that much marshal. The fds come with the first
    part, into ``fds`` (the caller closes them)."""
    data, received, _flags, _addr = socket.recv_fds(conn, 65536, 8)
    fds.extend(received)
    while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], "little"):
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError("the request was cut short")
        data += more
    return data[8:]


def _signals(ignored: set[int], mask: set[int]) -> None:
    """Dispositions as a fresh interpreter started by the shim's parent would have them."""
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            current = signal.getsignal(number)
        except (OSError, ValueError):
            continue
        if current is None:
            continue  # a handler that C code installed (wasmtime's traps): the script's too
        if number == signal.SIGINT:
            wanted: Any = signal.SIG_IGN if number in ignored else signal.default_int_handler
        elif number in (signal.SIGPIPE, signal.SIGXFSZ):
            wanted = signal.SIG_IGN  # Python's start-up ignores these
        else:
            wanted = signal.SIG_IGN if number in ignored else signal.SIG_DFL
        if current != wanted:
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, wanted)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


_OLD_STDIO: list[object] = []


def _stdio() -> None:
    """``sys.stdin``/``stdout``/``stderr`` for the new fds 0, 1, 2, made as CPython's
    ``create_stdio`` makes them (encoding and errors are the zygote's: the variables that choose
    them are guarded)."""
    buffered = not getattr(sys.stdout, "write_through", False)
    for fd, name, write in ((0, "stdin", False), (1, "stdout", True), (2, "stderr", True)):
        old: Any = getattr(sys, name)
        _OLD_STDIO.append(old)  # never finalised: their fds are the new ones
        buffering = 0 if (write and not buffered) else -1
        buf: Any = open(fd, "wb" if write else "rb", buffering, closefd=False)  # noqa: SIM115
        raw = buf if buffering == 0 else buf.raw
        raw.name = f"<{name}>"
        stream = io.TextIOWrapper(
            buf,
            encoding=old.encoding if old is not None else None,
            errors=old.errors if old is not None else None,
            newline="\n",
            line_buffering=buffered and (raw.isatty() or fd == 2),
            write_through=not buffered,
        )
        stream.mode = "w" if write else "r"  # type: ignore[misc]
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{code}\n")
    return 1


def run_script(script: str) -> int:
    """Run the console script as ``python SCRIPT`` would, and finalise as CPython does; its
    exit code (after an uncaught ``KeyboardInterrupt``, the process ends by SIGINT here)."""
    import runpy

    interrupted = False
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next  # from the script's frame on, as the real traceback starts
        sys.excepthook(type(exc), exc.with_traceback(tb or exc.__traceback__), exc.__traceback__)
        code = 1
    code = _finalise(code)
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _finalise(code: int) -> int:
    import atexit
    import threading

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception as exc:
            code = 120  # what CPython exits with when flushing stdio fails at the end
            with contextlib.suppress(Exception):
                os.write(2, f"Exception ignored in: {stream!r}\n{exc!r}\n".encode())
    return code


def serve(sock_path: str, script: str) -> None:
    Server(sock_path, script).loop()


def audit() -> None:
    """Print the environment the preload reads at import, and who reads it."""
    _names, readers, failed = preload()
    for name, who in sorted(readers.items()):
        print(f"{name.decode(errors='replace')}: {', '.join(sorted(who))}")
    if failed:
        print("not importable:", ", ".join(failed))


# --- the test side ---------------------------------------------------------------------------


class Zygote:
    """A zygote for this test process: ``bin`` holds its shim ``world``."""

    def __init__(self, root: Path, script: Path = WORLD_SCRIPT) -> None:
        self.root = root
        self.socket = root / "zygote.sock"
        self.bin = root / "bin"
        self.bin.mkdir()
        self.script = script
        shim = self.bin / "world"
        shim.write_text(
            SHIM.format(
                python=sys.executable,
                zygote=HERE,
                socket=str(self.socket),
                world=str(script),
                forwarded=FORWARDED,
            )
        )
        shim.chmod(0o755)
        self.log_path = root / "zygote.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str] | None = None) -> Zygote:
        """Start the server, in ``env`` (this process's by default)."""
        command = [script_python(self.script), str(HERE), "serve", str(self.socket)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, str(self.script)], stdin=subprocess.PIPE, stdout=log, stderr=log, env=env
            )
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until it answers (the shims do not wait: they run the real script meanwhile)."""
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the zygote exited: {self.log_path.read_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no zygote after {timeout} s: {self.log_path.read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        assert process.stdin is not None
        with contextlib.suppress(OSError):
            process.stdin.close()  # its lifeline: it exits
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


@contextlib.contextmanager
def running(script: Path = WORLD_SCRIPT, env: dict[str, str] | None = None) -> Iterator[Zygote]:
    """A zygote in a short temporary folder (a unix socket's path has ~107 bytes)."""
    import shutil

    root = Path(tempfile.mkdtemp(prefix="wz-", dir="/tmp"))
    zygote: Zygote | None = None
    try:
        zygote = Zygote(root, script).start(env)
        yield zygote
    finally:
        if zygote is not None:
            zygote.stop()
            kept = os.environ.get("WORLD_TEST_ZYGOTE_LOGS")  # a folder to keep its log in
            if kept:
                with contextlib.suppress(OSError):
                    shutil.copy(zygote.log_path, Path(kept) / f"zygote-{os.getpid()}.log")
        shutil.rmtree(root, ignore_errors=True)


def _main(argv: list[str]) -> None:
    if argv[:1] == ["serve"] and len(argv) == 3:
        serve(argv[1], argv[2])
    elif argv == ["audit"]:
        audit()
    else:
        raise SystemExit("usage: zygote.py serve SOCKET SCRIPT | zygote.py audit")


if __name__ == "__main__":
    _main(sys.argv[1:])
else:
    import pytest

    @pytest.fixture(scope="session")
    def world_bin() -> Iterator[Path]:
        """The folder whose ``world`` the subprocess tests run: a zygote's shim (one zygote per
        test process, started on first use; until it answers, the shim runs the real script),
        or the venv's ``bin`` when ``WORLD_TEST_ZYGOTE=0``. Only ``world`` is there."""
        if not enabled():
            yield VENV_BIN
            return
        with running() as zygote:
            yield zygote.bin
