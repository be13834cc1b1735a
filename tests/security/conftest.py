"""Fixtures of the security suite: a pulsys on each reactor backend this machine has, in
front of the fake Hub, and raw client sockets from chosen loopback addresses."""

import socket

import pytest

from pulsys.platform import PlatformFacts

_FACTS = PlatformFacts.probe()
BACKENDS = [pytest.param("on", id="uring", marks=pytest.mark.skipif(
                not _FACTS.uring_ok, reason="io_uring: %s" % _FACTS.uring_error)),
            pytest.param("off", id="selector")]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def serve(hub, make_server, backend):
    """serve(**settings) -> an in-process pulsys (one listener) on `backend`."""
    def make(**settings):
        settings.setdefault("auth", "off")
        return make_server(hub, iouring=backend, **settings)
    return make


@pytest.fixture
def sockets():
    """connect(address, source="127.0.0.1") -> a connected socket, closed after the test."""
    opened = []

    def connect(address, source="127.0.0.1", timeout=10.0, rcvbuf=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        opened.append(s)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.bind((source, 0))
        s.settimeout(timeout)
        s.connect(address)
        return s
    yield connect
    for s in opened:
        s.close()
