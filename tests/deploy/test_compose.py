"""deploy/compose.yaml, parsed and interpolated as compose does: pulsys's environment is
its settings with values it accepts, on top of the image's; the ports it publishes are
the ones it listens on; its database URL, bucket and credentials match the Postgres and
MinIO services beside it. Compose itself is not run here (no Docker daemon)."""

import os
import re
import urllib.parse

import pytest
import yaml

from pulsys.config import SETTINGS
from tests.deploy.deployed import DEPLOY, config_of, parse_dockerfile

COMPOSE = os.path.join(DEPLOY, "compose.yaml")
IMAGE = parse_dockerfile(os.path.join(DEPLOY, "docker", "Dockerfile"))


def interpolate(value, env):
    """${VAR}, ${VAR:-default} and ${VAR:?message}, as compose reads them."""
    def one(m):
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        assert op != ":?", "compose needs %s: %s" % (name, arg)
        return arg if op == ":-" else ""
    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


def documented_shared_env():
    """The variables the file's own header sets for --profile shared."""
    with open(COMPOSE) as f:
        m = re.search(r"^#\s+((?:\w+=\S+ )+)docker compose .*--profile shared", f.read(), re.M)
    return dict(kv.split("=", 1) for kv in m.group(1).split())


def services(env):
    with open(COMPOSE) as f:
        doc = yaml.safe_load(f)

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return interpolate(x, env) if isinstance(x, str) else x
    return walk(doc)["services"], doc


@pytest.mark.parametrize("env", [{}, documented_shared_env()], ids=["default", "shared-profile"])
def test_pulsys_environment_is_its_settings_and_matches_the_services_beside_it(env):
    svcs, doc = services(env)
    pulsys = svcs["pulsys"]
    environment = dict(IMAGE["env"], **pulsys["environment"])
    config = config_of(IMAGE["entrypoint"][1:] + IMAGE["cmd"] + pulsys.get("command", []), environment)
    # published ports: container side is what pulsys listens on
    published = {int(p.rsplit(":", 1)[1]) for p in pulsys["ports"]}
    assert published == {config.listen[1], config.admin_listen[1]}
    # no healthcheck of its own: the image's probes the admin port this environment sets
    assert "healthcheck" not in pulsys
    assert "'127.0.0.1', %d" % config.admin_listen[1] in " ".join(IMAGE["healthcheck"])
    assert sorted(v.split(":", 1)[1] for v in pulsys["volumes"]) == sorted(IMAGE["volumes"])
    # the admin store is the Postgres service, with its user, password and database
    db = urllib.parse.urlsplit(config.db)
    pg = svcs["postgres"]["environment"]
    assert (db.scheme, db.hostname, db.port) == ("postgres", "postgres", 5432)
    assert (db.username, db.password, db.path) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], "/" + pg["POSTGRES_DB"])
    assert "postgres" in pulsys["depends_on"]
    if not env:
        assert config.shared_store == ()
        return
    # the shared tier: the MinIO service, the bucket the one-shot service makes, its credentials
    minio = svcs["minio"]
    assert minio["profiles"] == svcs["bucket"]["profiles"] == ["shared"] and "profiles" not in pulsys
    endpoint = urllib.parse.urlsplit(config.shared_store_endpoint)
    assert (endpoint.hostname, endpoint.port) == ("minio", 9000)          # MinIO's S3 port
    assert (environment["AWS_ACCESS_KEY_ID"], environment["AWS_SECRET_ACCESS_KEY"]) == (
        minio["environment"]["MINIO_ROOT_USER"], minio["environment"]["MINIO_ROOT_PASSWORD"])
    made = svcs["bucket"]["entrypoint"][-1]
    assert made == "local/" + config.shared_store[0]
    mc_host = urllib.parse.urlsplit(svcs["bucket"]["environment"]["MC_HOST_local"])
    assert (mc_host.username, mc_host.password, mc_host.hostname) == (
        environment["AWS_ACCESS_KEY_ID"], environment["AWS_SECRET_ACCESS_KEY"], "minio")
    assert pulsys["depends_on"]["bucket"] == {"condition": "service_completed_successfully", "required": False}
    assert set(doc["volumes"]) >= {v.split(":", 1)[0] for s in svcs.values() for v in s.get("volumes", [])}


def test_a_variable_pulsys_does_not_have_is_refused():
    name = "PULSYS_NO_SUCH_SETTING"
    assert name not in {s.env for s in SETTINGS}
    with pytest.raises(AssertionError, match=name):
        config_of([], {name: "1"})
