"""pulsys nodes as separate processes on their own loopback addresses, and nginx in front
of them with the documented docs/fleet/nginx-pulsys.conf."""

import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from tests.conftest import ProcServer, ROOT

NODE_HOSTS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
LB_HOST = "127.0.0.10"
NGINX_SNIPPET = os.path.join(ROOT, "docs", "fleet", "nginx-pulsys.conf")


def start_nodes(tmp_path, hub, bucket, s3_url, names=("a", "b", "c"), per_node=None, **settings):
    """One `python -m pulsys` per name (in parallel), each on its own loopback address with
    its own cache dir, all on one bucket; per_node: {name: settings of that node only}.
    -> {name: ProcServer}."""
    os.makedirs(str(tmp_path), exist_ok=True)
    def one(i_name):
        i, name = i_name
        values = {"upstream": hub.url, "allow_upstream_host": [hub.cdn_netloc], "cache_dir": str(tmp_path / name),
                  "listeners": "1", "auth": "off", "access_log": "off", "node_id": "node-" + name,
                  "shared_store": "s3://%s/fleet" % bucket, "shared_store_endpoint": s3_url}
        values.update(settings)
        values.update((per_node or {}).get(name, {}))
        host = NODE_HOSTS[i]
        return name, ProcServer(values, str(tmp_path / ("%s.log" % name)), argv=[
            sys.executable, "-m", "pulsys", "--listen", host + ":0", "--admin-listen", host + ":0"])
    with concurrent.futures.ThreadPoolExecutor(len(names)) as ex:
        futures = [ex.submit(one, x) for x in enumerate(names)]
        done = [f.result() for f in futures]
    return dict(done)


def vars_of(node):
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            node.admin_url + "/debug/vars", timeout=10) as r:
        return json.loads(r.read())


def wait_uploaded(node, blobs, timeout=30.0):
    """Until the node has uploaded `blobs` blobs and has nothing left to upload."""
    deadline = time.monotonic() + timeout
    while True:
        v = vars_of(node)
        if v["shared_uploads"] >= blobs and v["shared_uploads_pending"] == 0:
            return v
        assert time.monotonic() < deadline, "uploads not done: %r" % {k: v[k] for k in v if k.startswith("shared")}
        time.sleep(0.05)


def render_nginx(nodes, listen):
    """The documented snippet with this test's node addresses and listen address, inside a
    minimal main configuration."""
    with open(NGINX_SNIPPET) as f:
        snippet = f.read()
    servers = "".join("    server %s:%d max_fails=1 fail_timeout=10s;\n" % n.address for n in nodes)
    snippet, n_servers = re.subn(r"(    server \S+ max_fails=1 fail_timeout=10s;\n)+", servers, snippet)
    snippet, n_listen = re.subn(r"\blisten 80;", "listen %s;" % listen, snippet)
    assert (n_servers, n_listen) == (1, 1), "docs/fleet/nginx-pulsys.conf changed shape; update render_nginx"
    return snippet


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Nginx:
    """nginx (Debian package, installed here when root) on LB_HOST:port, in front of nodes."""

    def __init__(self, nodes, workdir, port):
        from tests.bench.test_bench_scripts import ensure_nginx
        self.binary = ensure_nginx()
        if not self.binary:
            raise RuntimeError("nginx is not installed and cannot be installed here (Debian package "
                               "nginx; needs root and apt-get)")
        self.dir = str(workdir)
        os.makedirs(self.dir, exist_ok=True)
        self.port = port
        with open(os.path.join(self.dir, "pulsys.conf"), "w") as f:
            f.write(render_nginx(nodes, "%s:%d" % (LB_HOST, self.port)))
        temp = "".join("    %s_temp_path %s/%s;\n" % (k, self.dir, k)
                       for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write("%sworker_processes 1;\ndaemon off;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n"
                    "events { worker_connections 4096; }\nhttp {\n    access_log off;\n%s"
                    "    include %s/pulsys.conf;\n}\n" % ("user root;\n" if os.geteuid() == 0 else "",
                                                          self.dir, self.dir, temp, self.dir))
        self.proc = subprocess.Popen([self.binary, "-c", conf, "-p", self.dir + "/", "-e", self.dir + "/error.log"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((LB_HOST, self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("nginx did not start: " + self.error_log()[-2000:])
                time.sleep(0.05)
        self.url = "http://%s:%d" % (LB_HOST, self.port)

    def error_log(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)     # fast shutdown of master and its worker
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
