"""deploy/k8s/, parsed: the DaemonSet's environment (ConfigMap, the example Secret, its own
entries) is pulsys's settings with values it accepts; its container ports, probes and
Services name the ports pulsys listens on; the cache volume is where pulsys writes; the
front's nginx configuration is docs/fleet/nginx-pulsys.conf and points at the nodes'
port. Nothing is applied to a cluster here; `kubectl kustomize` builds it when present."""

import os
import shutil
import subprocess

import pytest
import yaml

from tests.deploy.deployed import DEPLOY, ROOT, config_of, parse_dockerfile

K8S = os.path.join(DEPLOY, "k8s")


def docs():
    out = {}
    for name in os.listdir(K8S):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            with open(os.path.join(K8S, name)) as f:
                for d in yaml.safe_load_all(f):
                    out[(d["kind"], d["metadata"]["name"])] = d
    return out


def only(items, **match):
    found = [i for i in items if all(i.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (match, items)
    return found[0]


def node_env(objs, pod, container):
    """The environment the kubelet gives the pulsys container; field references get the
    values a node would give them."""
    env = {}
    for src in container["envFrom"]:
        if "configMapRef" in src:
            env.update(objs[("ConfigMap", src["configMapRef"]["name"])]["data"])
        else:
            env.update(objs[("Secret", src["secretRef"]["name"])]["stringData"])
    for e in container["env"]:
        ref = e.get("valueFrom", {})
        if "fieldRef" in ref:
            assert ref["fieldRef"]["fieldPath"] == "spec.nodeName"
            env[e["name"]] = "ip-10-0-3-17.eu-west-1.compute.internal"
        elif "resourceFieldRef" in ref:
            r = ref["resourceFieldRef"]
            env[e["name"]] = str(container["resources"][r["resource"].split(".")[0]][r["resource"].split(".")[1]])
        else:
            env[e["name"]] = e["value"]
    return env


@pytest.fixture(scope="module")
def objs():
    return docs()


@pytest.fixture(scope="module")
def node(objs):
    ds = objs[("DaemonSet", "pulsys")]
    pod = ds["spec"]["template"]["spec"]
    c = only(pod["containers"], name="pulsys")
    return ds, pod, c, config_of([], node_env(objs, pod, c))


def port_number(container, port):
    return port if isinstance(port, int) else only(container["ports"], name=port)["containerPort"]


def test_node_ports_and_probes_are_the_ones_pulsys_listens_on(node):
    ds, pod, c, config = node
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": config.listen[1], "admin": config.admin_listen[1]}
    assert config.listen[0] == config.admin_listen[0] == "0.0.0.0"     # the kubelet probes the pod's address
    probes = {k: c[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == "/healthz"
    for probe in probes.values():      # /readyz is on the admin listener only
        assert port_number(c, probe["port"]) == config.admin_listen[1]
    assert config.listeners == int(c["resources"]["limits"]["cpu"])
    assert config.node_id.startswith("ip-10-0-3-17")


def test_the_cache_is_the_nodes_disk_and_owned_by_the_images_user(node):
    ds, pod, c, config = node
    mount = only(c["volumeMounts"], mountPath=config.cache_dir)
    volume = only(pod["volumes"], name=mount["name"])
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"
    uid = parse_dockerfile(os.path.join(DEPLOY, "docker", "Dockerfile"))["uid"]
    assert pod["securityContext"]["runAsUser"] == uid
    init = only(pod["initContainers"], name="own-cache")
    assert init["command"] == ["chown", "%d:%d" % (uid, uid), config.cache_dir]
    assert only(init["volumeMounts"], name=mount["name"])["mountPath"] == config.cache_dir
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert only(c["volumeMounts"], mountPath="/tmp")    # workers.py's counter file
    # a fleet shares one admin store and one bucket (docs/fleet.md)
    assert config.db.startswith("postgres://") and config.shared_store


def test_services_reach_the_named_ports(objs, node):
    ds, pod, c, config = node
    nodes = objs[("Service", "pulsys-nodes")]
    assert nodes["spec"]["selector"] == ds["spec"]["template"]["metadata"]["labels"]
    assert nodes["spec"]["clusterIP"] == "None"          # one address per pod, for the front
    for p in nodes["spec"]["ports"]:
        assert p["port"] == port_number(c, p["targetPort"])
    front = objs[("Deployment", "pulsys-front")]["spec"]["template"]
    fc = only(front["spec"]["containers"], name="nginx")
    fenv = {e["name"]: e["value"] for e in fc["env"]}
    assert fenv["PULSYS_NODES"] == "pulsys-nodes"
    assert int(fenv["PULSYS_NODE_PORT"]) == config.listen[1] == only(nodes["spec"]["ports"], name="http")["port"]
    svc = objs[("Service", "pulsys")]
    assert svc["spec"]["selector"] == front["metadata"]["labels"]
    assert port_number(fc, only(svc["spec"]["ports"], name="http")["targetPort"]) == int(fenv["PULSYS_FRONT_LISTEN"])
    # clients follow pagination links to the front's Service, port 80
    assert config.public_base_url.startswith("http://%s.%s.svc" % (svc["metadata"]["name"], "pulsys"))
    assert only(svc["spec"]["ports"], name="http")["port"] == 80


def test_the_fronts_nginx_configuration_is_the_documented_one():
    with open(os.path.join(K8S, "front", "nginx-pulsys.conf"), "rb") as a, \
            open(os.path.join(ROOT, "docs", "fleet", "nginx-pulsys.conf"), "rb") as b:
        assert a.read() == b.read()


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl is not installed")
def test_kustomize_builds_every_manifest(objs):
    p = subprocess.run(["kubectl", "kustomize", K8S], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    built = {(d["kind"], d["metadata"]["name"].rsplit("-", 1)[0] if d["kind"] == "ConfigMap"
              and d["metadata"]["name"].startswith("pulsys-front-") else d["metadata"]["name"])
             for d in yaml.safe_load_all(p.stdout)}
    assert built == (set(objs) - {("Secret", "pulsys-secrets")}) | {("ConfigMap", "pulsys-front")}
