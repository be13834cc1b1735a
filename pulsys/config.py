"""Settings: one declaration per option (flag, env var, default, parser, help line).

Config only validates and describes. It never binds sockets, prints or exits: the CLI
turns a ConfigError into one line and exit code 2, and app.py acts on a Config.
"""

import ipaddress
import os
import urllib.parse
from dataclasses import dataclass, field

from pulsys.errors import ConfigError

# Hosts the Hub redirects file bodies to (hf-protocol.md §3; Go original key.go list).
HUB_CDN_HOSTS = (
    "cdn-lfs.huggingface.co", "cdn-lfs.hf.co", "cdn-lfs-us-1.hf.co", "cdn-lfs-us-2.hf.co",
    "cdn-lfs-eu-1.hf.co", "lfs.huggingface.co", "cas-bridge.xethub.hf.co",
    "us.aws.cdn.hf.co", "eu.aws.cdn.hf.co", "ap.aws.cdn.hf.co", "huggingface.co", "hf.co",
)


def parse_hostport(text, what="address", default_port=None):
    """'HOST:PORT', '[v6]:PORT' or ':PORT' -> (host, port)."""
    text = text.strip()
    host, sep, port_s = text.rpartition(":")
    if not sep:
        if default_port is None:
            raise ConfigError("%s %r: expected HOST:PORT" % (what, text))
        host, port_s = text, str(default_port)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        host = "0.0.0.0"
    if not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ConfigError("%s %r: port must be a number 0-65535" % (what, text))
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError("%s %r: bad IPv6 address" % (what, text)) from None
    return host, int(port_s)


def _listen(text):
    return parse_hostport(text, "listen address")


def _admin_listen(text):
    if text.strip().lower() in ("", "off", "none"):
        return None
    return parse_hostport(text, "admin listen address")


def _url(text):
    u = urllib.parse.urlsplit(text.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ConfigError("URL %r: expected http(s)://host[:port]" % text)
    try:
        u.port
    except ValueError:
        raise ConfigError("URL %r: bad port" % text) from None
    return text.strip().rstrip("/")


def _optional_url(text):
    return _url(text) if text.strip() else ""


def _allow_hosts(values):
    out = []
    for raw in values:
        for item in raw.split(","):
            item = item.strip().lower()
            if not item:
                continue
            if "/" in item or "@" in item or " " in item:
                raise ConfigError("upstream host %r: expected HOST or HOST:PORT" % item)
            if item.rpartition(":")[2].isdigit() and not item.startswith("["):
                parse_hostport(item, "upstream host")
            out.append(item)
    return tuple(out)


def _positive_float(what):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise ConfigError("%s %r: expected a number of seconds" % (what, text)) from None
        if v < 0:
            raise ConfigError("%s must be >= 0" % what)
        return v
    return parse


def _int_range(what, lo, hi):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise ConfigError("%s %r: expected an integer" % (what, text)) from None
        if not lo <= v <= hi:
            raise ConfigError("%s must be between %d and %d" % (what, lo, hi))
        return v
    return parse


def _choice(what, choices):
    def parse(text):
        v = text.strip().lower()
        if v not in choices:
            raise ConfigError("%s %r: choose one of %s" % (what, text, ", ".join(choices)))
        return v
    return parse


def _bool(text):
    v = str(text).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError("boolean %r: use 1/0, true/false, yes/no or on/off" % text)


def default_cache_dir(environ):
    home = environ.get("HOME") or os.path.expanduser("~")
    base = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "pulsys")


@dataclass(frozen=True)
class Setting:
    name: str
    flag: str
    parse: object
    default: object
    help: str
    kind: str = "value"        # value | flag (boolean switch) | multi (repeatable) | tristate (--x / --no-x)
    metavar: str = None
    choices: tuple = None

    @property
    def env(self):
        return "PULSYS_" + self.name.upper()


SETTINGS = (
    Setting("listen", "--listen", _listen, "127.0.0.1:8080",
            "data-plane address HOST:PORT that clients use as HF_ENDPOINT", metavar="HOST:PORT"),
    Setting("upstream", "--upstream", _url, "https://huggingface.co",
            "the Hub to pull from", metavar="URL"),
    Setting("cache_dir", "--cache-dir", str, None,
            "where blobs and metadata are stored (default: $XDG_CACHE_HOME/pulsys or ~/.cache/pulsys)",
            metavar="DIR"),
    Setting("hf_token", "--hf-token", str, "",
            "pulsys's own token for upstream; client credentials are never forwarded", metavar="TOKEN"),
    Setting("allow_upstream_host", "--allow-upstream-host", _allow_hosts, (),
            "extra host[:port] that upstream redirects may be followed to (repeatable; comma-separated in env)",
            kind="multi", metavar="HOST[:PORT]"),
    Setting("public_base_url", "--public-base-url", _optional_url, "",
            "URL clients reach pulsys at, used in rewritten Link headers (default: from the request's Host)",
            metavar="URL"),
    Setting("admin_listen", "--admin-listen", _admin_listen, "127.0.0.1:8081",
            "admin address for /healthz and /debug/vars ('off' disables)", metavar="HOST:PORT"),
    Setting("auth", "--auth", _choice("--auth", ("off", "required")), "off",
            "client authentication on the data plane", choices=("off", "required")),
    Setting("log_format", "--log-format", _choice("--log-format", ("console", "json")), "console",
            "log output format", choices=("console", "json")),
    Setting("log_level", "--log-level", _choice("--log-level", ("debug", "info", "warning", "error")),
            "info", "minimum log level", choices=("debug", "info", "warning", "error")),
    Setting("access_log", "--access-log", _bool, "on",
            "log one event per request (on/off)", metavar="on|off"),
    Setting("revision_ttl", "--revision-ttl", _positive_float("--revision-ttl"), "60",
            "seconds a branch/tag -> commit mapping and mutable metadata stay fresh", metavar="SECONDS"),
    Setting("offline", "--offline", _bool, False,
            "serve only from cache; misses get 504", kind="flag"),
    Setting("listeners", "--listeners", _int_range("--listeners", 1, 1024), str(os.cpu_count() or 1),
            "number of listening sockets (SO_REUSEPORT), one reactor each; with N > 1 each reactor "
            "runs in its own worker process (default: the number of CPUs)", metavar="N"),
    Setting("fill_threads", "--fill-threads", _int_range("--fill-threads", 1, 1024), "32",
            "threads that talk to upstream and write the cache", metavar="N"),
    Setting("upstream_timeout", "--upstream-timeout", _positive_float("--upstream-timeout"), "30",
            "connect and read timeout for upstream requests", metavar="SECONDS"),
    Setting("iouring", "--iouring", _choice("--iouring", ("auto", "on", "off")), "auto",
            "io_uring reactor: --iouring demands it (error if unavailable), --no-iouring forces the "
            "portable backend; by default it is used when the startup probe passes",
            kind="tristate"),
    Setting("sendfile", "--sendfile", _choice("--sendfile", ("auto", "linux", "darwin", "portable")),
            "auto", "how file bodies are sent: auto, linux (MSG_MORE + sendfile), darwin (sendfile "
            "with sf_hdtr), portable (pread + write)", choices=("auto", "linux", "darwin", "portable")),
    Setting("max_connections", "--max-connections", _int_range("--max-connections", 1, 1 << 20), "10000",
            "open client connections per reactor before new ones are refused", metavar="N"),
)


@dataclass(frozen=True)
class Config:
    listen: tuple = ("127.0.0.1", 8080)
    upstream: str = "https://huggingface.co"
    cache_dir: str = ""
    hf_token: str = ""
    allow_upstream_host: tuple = ()
    public_base_url: str = ""
    admin_listen: tuple = ("127.0.0.1", 8081)
    auth: str = "off"
    log_format: str = "console"
    log_level: str = "info"
    access_log: bool = True
    revision_ttl: float = 60.0
    offline: bool = False
    listeners: int = 1
    fill_threads: int = 32
    upstream_timeout: float = 30.0
    iouring: str = "auto"
    sendfile: str = "auto"
    max_connections: int = 10000
    extra: dict = field(default_factory=dict)

    @property
    def upstream_netloc(self):
        return urllib.parse.urlsplit(self.upstream).netloc.lower()

    def allowed_redirect_hosts(self):
        """Hosts (or host:port) that upstream redirects may lead to."""
        return frozenset((self.upstream_netloc,) + HUB_CDN_HOSTS + self.allow_upstream_host)


def build_config(values, environ):
    """values: {setting name: raw text or None (not given)} -> Config. Raises ConfigError."""
    out = {}
    for s in SETTINGS:
        raw = values.get(s.name)
        if raw is None or raw == [] :
            env = environ.get(s.env)
            if env is not None:
                raw = [env] if s.kind == "multi" else env
        if raw is None or raw == []:
            raw = s.default
        if s.name == "cache_dir":
            out[s.name] = os.path.abspath(os.path.expanduser(raw)) if raw else default_cache_dir(environ)
            continue
        if s.kind == "flag" and isinstance(raw, bool):
            out[s.name] = raw
            continue
        if s.kind == "multi":
            out[s.name] = s.parse(raw if isinstance(raw, (list, tuple)) else [raw])
            continue
        out[s.name] = s.parse(raw)
    if out["auth"] == "required":
        raise ConfigError("--auth required needs the admin plane (API keys), which this build does not have yet; use --auth off")
    return Config(**out)
