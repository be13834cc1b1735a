"""Platform facts, probed once at startup and passed around (replaceable in tests).

Only this package looks at the operating system's capabilities; everything else gets
a PlatformFacts value.
"""

import os
import socket
import sys


class PlatformFacts:
    __slots__ = ("system", "kernel", "has_sendfile", "has_msg_more", "has_tcp_cork",
                 "has_reuseport", "sendfile_headers")

    def __init__(self, system, kernel, has_sendfile, has_msg_more, has_tcp_cork, has_reuseport,
                 sendfile_headers):
        self.system = system
        self.kernel = kernel
        self.has_sendfile = has_sendfile
        self.has_msg_more = has_msg_more
        self.has_tcp_cork = has_tcp_cork
        self.has_reuseport = has_reuseport
        self.sendfile_headers = sendfile_headers

    @classmethod
    def probe(cls):
        return cls(
            system=sys.platform,
            kernel=os.uname().release,
            has_sendfile=hasattr(os, "sendfile"),
            has_msg_more=hasattr(socket, "MSG_MORE"),
            has_tcp_cork=hasattr(socket, "TCP_CORK"),
            has_reuseport=hasattr(socket, "SO_REUSEPORT"),
            # os.sendfile(headers=) wraps sf_hdtr on macOS/FreeBSD only (CPython os docs)
            sendfile_headers=sys.platform == "darwin" or sys.platform.startswith("freebsd"),
        )

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


def load_sender(facts, name=None):
    """The head+body sender module for these facts: 'linux' (MSG_MORE + sendfile) or
    'portable' (pread + write). `name` forces one. The only place that chooses."""
    if name is None:
        name = "linux" if facts.system.startswith("linux") and facts.has_sendfile else "portable"
    if name == "linux":
        from pulsys.platform import sendfile_linux as m
    else:
        from pulsys.platform import sendfile_portable as m
    return name, m
