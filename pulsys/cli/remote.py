"""The admin listener of a running pulsys, for `pulsys prefetch` and `pulsys stats`:
--server URL and --token KEY (or PULSYS_ADMIN_URL, PULSYS_ADMIN_TOKEN), as `pulsys keys
--server` uses them. Failures are Failed(code, one line): 2 for bad input or a refusal
(4xx), 1 when the server cannot be reached or fails (5xx)."""

import json
import urllib.error
import urllib.parse
import urllib.request


class Failed(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def add_arguments(p):
    p.add_argument("--server", metavar="URL", help="admin listener of a running pulsys, e.g. "
                   "http://127.0.0.1:8081 [env PULSYS_ADMIN_URL]")
    p.add_argument("--token", metavar="KEY", help="an admin key [env PULSYS_ADMIN_TOKEN]")


class AdminClient:
    def __init__(self, args, environ, timeout=30):
        self.base = (args.server or environ.get("PULSYS_ADMIN_URL", "")).rstrip("/")
        self.token = args.token or environ.get("PULSYS_ADMIN_TOKEN")
        self.timeout = timeout
        if not self.base:
            raise Failed(2, "which server? --server http://HOST:ADMIN_PORT or PULSYS_ADMIN_URL")
        if not self.base.startswith(("http://", "https://")):
            raise Failed(2, "--server %r: expected http://HOST:PORT of the admin listener" % self.base)
        if not self.token:
            raise Failed(2, "--server needs an admin key: --token KEY or PULSYS_ADMIN_TOKEN")

    def call(self, method, path, doc=None):
        data = json.dumps(doc).encode() if doc is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + self.token,
                                              "Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                msg = json.loads(e.read())["error"]
            except (ValueError, KeyError, TypeError):
                msg = "HTTP %d" % e.code
            raise Failed(2 if e.code < 500 else 1, "%s (HTTP %d)" % (msg, e.code)) from None
        except (urllib.error.URLError, OSError) as e:
            raise Failed(1, "cannot reach %s: %s" % (self.base, getattr(e, "reason", e))) from None
        except ValueError:
            raise Failed(1, "%s did not answer JSON; is it a pulsys admin listener?" % self.base) from None


def quote(s):
    return urllib.parse.quote(s, safe="")



def human_bytes(n):
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1000
