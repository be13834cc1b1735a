"""deploy/k8s/front/pulsys-front.sh, the front Deployment's command, run here with the
nginx of this machine: it resolves the nodes' name (here `localhost`, in a cluster the
headless Service), writes their server lines into the documented configuration, starts
nginx, and a file comes through nginx and a pulsys node byte for byte. The re-resolve and
reload loop runs too but sees no change (one name, one address, no cluster DNS)."""

import os
import signal
import subprocess
import time
import urllib.request

import pytest

from pulsys.testing.fake_hub import sha256_hex
from tests.deploy.deployed import DEPLOY, free_port

FRONT = os.path.join(DEPLOY, "k8s", "front")
BODY = os.urandom(1024 * 1024 + 7)


def nginx_binary():
    from tests.bench.test_bench_scripts import ensure_nginx
    return ensure_nginx()


def main_conf(workdir, include):
    """What the nginx image's own nginx.conf gives the front: an http context that includes
    conf.d (here the rendered file), temp paths it may write."""
    temp = "".join("    %s_temp_path %s/%s;\n" % (k, workdir, k)
                   for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    path = os.path.join(workdir, "nginx.conf")
    with open(path, "w") as f:
        f.write("%sworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n"
                "events { worker_connections 256; }\nhttp {\n    access_log off;\n%s    include %s;\n}\n"
                % ("user root;\n" if os.geteuid() == 0 else "", workdir, workdir, temp, include))
    return path


def get(url):
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=30) as r:
        return r.status, r.headers, r.read()


def test_the_front_script_routes_a_download_to_a_node(hub, make_server, tmp_path):
    binary = nginx_binary()
    if not binary:
        pytest.skip("nginx is not installed and cannot be installed here (Debian package nginx; "
                    "needs root and apt-get)")
    hub.add_repo("org/model", files={"model.safetensors": BODY})
    node = make_server(hub)
    workdir = str(tmp_path)
    rendered = os.path.join(workdir, "pulsys.conf")
    port = free_port()
    env = {"PATH": os.environ["PATH"], "PULSYS_NODES": "localhost", "PULSYS_NODE_PORT": str(node.address[1]),
           "PULSYS_FRONT_LISTEN": "127.0.0.1:%d" % port, "PULSYS_FRONT_INTERVAL": "1",
           "PULSYS_FRONT_TEMPLATE": os.path.join(FRONT, "nginx-pulsys.conf"), "PULSYS_FRONT_CONF": rendered,
           "NGINX": "%s -c %s -p %s/ -e %s/error.log" % (binary, main_conf(workdir, rendered), workdir, workdir)}
    with open(os.path.join(workdir, "front.log"), "wb") as log:
        proc = subprocess.Popen(["/bin/sh", os.path.join(FRONT, "pulsys-front.sh")], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                status, headers, body = get("http://127.0.0.1:%d/org/model/resolve/main/model.safetensors" % port)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, open(
                    os.path.join(workdir, "front.log")).read()
                time.sleep(0.1)
        assert status == 200 and body == BODY
        assert headers["X-Pulsys-Node"] == "127.0.0.1:%d" % node.address[1]
        assert hub.body_fetches(sha256_hex(BODY)) == 1
        with open(rendered) as f:
            servers = [line.split()[1] for line in f if line.startswith("    server ")]
        assert servers == ["127.0.0.1:%d" % node.address[1]]
    finally:
        proc.send_signal(signal.SIGTERM)       # the pod's stop: nginx quits, then the script
        rc = proc.wait(30)
    assert rc == 0
