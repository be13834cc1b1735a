"""Fixtures for fleet tests: one S3-compatible server for the session (a fresh bucket per
test), the AWS settings the nodes read, nodes that are stopped by PID at the end."""

import hashlib

import pytest

from tests.fleet.s3server import AWS_ENV, S3Server


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    srv = S3Server.start(str(tmp_path_factory.mktemp("s3") / "moto.log"))
    yield srv
    srv.stop()


@pytest.fixture
def aws_env(monkeypatch):
    """The standard AWS settings, as an operator sets them; processes started by the test
    inherit them."""
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def stop_after():
    """stop_after(server or dict of servers): SIGTERM each at the end of the test, by PID."""
    servers = []

    def add(x):
        servers.extend(x.values() if isinstance(x, dict) else [x])
        return x
    yield add
    for s in servers:
        s.stop()
    for s in servers:
        if hasattr(s, "shutdown"):
            s.shutdown()


def sha256(data):
    return hashlib.sha256(data).hexdigest()
