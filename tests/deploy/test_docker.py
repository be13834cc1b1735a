"""deploy/docker/Dockerfile: what it sets is pulsys's, its ports and health check are the
ones pulsys listens on, and its entry command, run outside a container with temporary
directories for the volumes, serves a file from the fake Hub byte for byte. The image
itself is not built here (no Docker daemon, no base images)."""

import os
import subprocess

import pytest

from pulsys.db.database import sqlite_path
from pulsys.testing.fake_hub import FakeHub, sha256_hex
from tests.deploy.deployed import (DEPLOY, VENV_BIN, Started, clean_env, config_of, download,
                                   free_port, parse_dockerfile, substitute)

DOCKERFILE = os.path.join(DEPLOY, "docker", "Dockerfile")
BODY = os.urandom(3 * 1024 * 1024 + 5)


@pytest.fixture
def image():
    return parse_dockerfile(DOCKERFILE)


def test_what_the_image_sets_is_pulsys_and_its_ports_are_the_ones_it_listens_on(image):
    config = config_of(image["entrypoint"][1:] + image["cmd"], image["env"])
    listening = {config.listen[1], config.admin_listen[1]}
    assert set(image["expose"]) == listening
    assert config.listen[0] == config.admin_listen[0] == "0.0.0.0"      # reachable from outside
    probe = " ".join(image["healthcheck"])
    assert "'/healthz'" in probe and "'127.0.0.1', %d" % config.admin_listen[1] in probe
    # the cache and the admin store live on the volumes, not in the container's layer
    assert sorted(image["volumes"]) == sorted([config.cache_dir, os.path.dirname(sqlite_path(config.db))])
    assert os.path.dirname(config.token_secret_file) in image["volumes"]
    assert image["user"].split(":")[0] == "pulsys" and image["uid"] > 0


def test_the_entry_command_serves_a_file_and_answers_the_health_check(image, tmp_path):
    hub = FakeHub().start()
    try:
        hub.add_repo("org/model", files={"model.safetensors": BODY, "config.json": b"{}\n"})
        data, admin = free_port(), free_port()
        # the volumes and the image's venv become this machine's; the ports free ones here
        mapping = {"/opt/pulsys/bin": VENV_BIN, "0.0.0.0": "127.0.0.1", "8080": str(data),
                   "8081": str(admin)}
        for volume in image["volumes"]:
            mapping[volume] = str(tmp_path / volume.strip("/").replace("/", "-"))
            os.makedirs(mapping[volume])
        env = clean_env(str(tmp_path))
        env.update(substitute(image["env"], mapping))
        # what an operator adds with -e: the upstream (here the fake Hub)
        env.update(PULSYS_UPSTREAM=hub.url, PULSYS_ALLOW_UPSTREAM_HOST=hub.cdn_netloc, PULSYS_NETWORK_MBPS="0")
        argv = substitute(image["entrypoint"] + image["cmd"], mapping)
        srv = Started(argv, env, str(tmp_path), "http://127.0.0.1:%d" % admin)
        try:
            assert srv.healthz == 200
            probe = subprocess.run(substitute(image["healthcheck"], mapping), env=env, timeout=30)
            assert probe.returncode == 0
            key = srv.first_key()          # `docker logs` shows it on a first start
            status, body = download("http://127.0.0.1:%d/org/model/resolve/main/model.safetensors" % data, key)
            assert status == 200 and body == BODY
            assert hub.body_fetches(sha256_hex(BODY)) == 1
            cache = mapping["/var/cache/pulsys"]
            assert sum(len(f) for _, _, f in os.walk(cache)) > 0       # the bytes are on the cache volume
            assert os.path.exists(os.path.join(mapping["/var/lib/pulsys"], "pulsys.sqlite3"))
        finally:
            assert srv.stop() == 0, srv.output()
        probe = subprocess.run(substitute(image["healthcheck"], mapping), env=env, timeout=30)
        assert probe.returncode != 0                                    # the check can fail
    finally:
        hub.stop()
