"""Platform facts, probed once at startup and passed around (replaceable in tests).

Only this package looks at the operating system's capabilities; everything else gets
a PlatformFacts value.
"""

import os
import signal
import socket
import subprocess
import sys
import threading


class PlatformFacts:
    __slots__ = ("system", "kernel", "has_sendfile", "has_msg_more", "has_tcp_cork",
                 "has_reuseport", "sendfile_headers", "uring_ok", "uring_error")

    def __init__(self, system, kernel, has_sendfile, has_msg_more, has_tcp_cork, has_reuseport,
                 sendfile_headers, uring_ok=False, uring_error="not probed"):
        self.system = system
        self.kernel = kernel
        self.has_sendfile = has_sendfile
        self.has_msg_more = has_msg_more
        self.has_tcp_cork = has_tcp_cork
        self.has_reuseport = has_reuseport
        self.sendfile_headers = sendfile_headers
        self.uring_ok = uring_ok          # a ring was set up and every op pulsys uses is supported
        self.uring_error = uring_error    # why not, for the one-line message of --iouring

    @classmethod
    def probe(cls):
        uring_ok, uring_error = _probe_uring()
        return cls(
            system=sys.platform,
            kernel=os.uname().release,
            has_sendfile=hasattr(os, "sendfile"),
            has_msg_more=hasattr(socket, "MSG_MORE"),
            has_tcp_cork=hasattr(socket, "TCP_CORK"),
            has_reuseport=hasattr(socket, "SO_REUSEPORT"),
            # os.sendfile(headers=) wraps sf_hdtr on macOS/FreeBSD only (CPython os docs)
            sendfile_headers=sys.platform == "darwin" or sys.platform.startswith("freebsd"),
            uring_ok=uring_ok, uring_error=uring_error,
        )

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


_PROBED = None
_PROBE_LOCK = threading.Lock()


def _probe_uring():
    """(ok, reason): really set up a ring and check the ops the uring reactor uses.
    The probe runs in a child process first: a binding that kills its process must cost
    the io_uring backend, not the server. Seen on an AMD EPYC without AVX-512: the
    liburing 2026.3.x wheels execute `vmovups %zmm0` in Ring.__new__ and die of SIGILL."""
    global _PROBED
    with _PROBE_LOCK:
        if _PROBED is None:
            _PROBED = _probe_uring_once()
    return _PROBED


def probe_soon():
    """Start the probe in a thread: its child process (~0.1 s, an interpreter start) then
    runs while the caller does other start-up work; PlatformFacts.probe() waits for it."""
    threading.Thread(target=_probe_uring, name="pulsys-probe", daemon=True).start()


def _probe_uring_once():
    if not sys.platform.startswith("linux"):
        return False, "io_uring is Linux only"
    try:
        from pulsys.platform import uring
    except ImportError as e:
        return False, "the liburing package is not importable (%s); pip install liburing" % e
    crashed = _probe_in_child()
    if crashed:
        return False, crashed
    return uring.probe()


_PROBE_CODE = "from pulsys.platform import uring; uring.probe()"


def _probe_in_child(code=_PROBE_CODE):
    """'' when a child process survives the probe, else why it did not."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        rc = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode
    except (OSError, subprocess.SubprocessError) as e:
        return "the io_uring probe process could not run: %s" % e
    if rc >= 0:
        return ""
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = "signal %d" % -rc
    hint = (": the liburing wheel uses CPU instructions this machine lacks"
            if -rc == signal.SIGILL else "")
    return "the liburing binding killed its probe process with %s%s" % (name, hint)


def choose_sender(facts, requested="auto"):
    """Pure: the head+body send path for these facts. 'linux' (send MSG_MORE +
    sendfile), 'darwin' (one sendfile with sf_hdtr headers), or 'portable'."""
    if requested != "auto":
        return requested
    if facts.system.startswith("linux") and facts.has_sendfile and facts.has_msg_more:
        return "linux"
    if facts.system == "darwin" and facts.sendfile_headers:
        return "darwin"
    return "portable"


def load_sender(facts, name=None):
    """-> (name, module) for choose_sender's choice; the only place that imports one."""
    name = choose_sender(facts, name or "auto")
    if name == "linux":
        from pulsys.platform import sendfile_linux as m
    elif name == "darwin":
        from pulsys.platform import sendfile_darwin as m
    else:
        from pulsys.platform import sendfile_portable as m
    return name, m
