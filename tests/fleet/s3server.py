"""A real S3-compatible server for the tests: moto's standalone server (PyPI `moto[server]`,
a test extra) as a subprocess on its own loopback address, stopped by its PID."""

import signal
import socket
import subprocess
import sys
import time
import uuid

HOST = "127.0.0.5"
START_TIMEOUT = 30.0
# Credentials for the test server only. boto3 reads them from the environment, as it does
# in production; AWS_EC2_METADATA_DISABLED keeps it from asking an instance-metadata
# address when something is missing.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "pulsys-test", "AWS_SECRET_ACCESS_KEY": "pulsys-test-secret",
           "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def _free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, log_path):
        self.proc, self.port, self.log_path = None, None, log_path

    @classmethod
    def start(cls, log_path):
        srv = cls(log_path)
        for _ in range(3):        # a port taken between _free_port and bind: try another
            if srv._launch():
                return srv
        raise RuntimeError("moto server did not start:\n" + srv.log_text()[-3000:])

    def _launch(self):
        self.port = _free_port(HOST)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.05)
        self.stop()
        return False

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    @property
    def url(self):
        return "http://%s:%d" % (HOST, self.port)

    def client(self):
        import boto3
        import botocore.config
        return boto3.client("s3", endpoint_url=self.url, region_name=AWS_ENV["AWS_REGION"],
                            aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
                            config=botocore.config.Config(s3={"addressing_style": "path"}))

    def new_bucket(self):
        name = "fleet-" + uuid.uuid4().hex[:12]
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self):
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
