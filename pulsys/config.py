"""Settings: one declaration per option (flag, env var, default, parser, help line).

Config only validates and describes. It never binds sockets, prints or exits: the CLI
turns a ConfigError into one line and exit code 2, and app.py acts on a Config.
"""

import ipaddress
import os
import re
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


def _db_url(text):
    """'' (the default SQLite file), sqlite:///PATH or postgres(ql)://..."""
    text = text.strip()
    scheme, sep, rest = text.partition(":")
    if not text:
        return ""
    if sep and scheme.lower() == "sqlite" and rest.lstrip("/"):
        return text
    if sep and scheme.lower() in ("postgres", "postgresql") and rest.startswith("//"):
        return text
    shown = urllib.parse.urlsplit(text)._replace(netloc="...").geturl() if "@" in text else text
    raise ConfigError("--db %r: expected sqlite:///PATH or postgres://USER@HOST[:PORT]/DB" % shown)


def _optional_url(text):
    return _url(text) if text.strip() else ""


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


def _s3_url(text):
    """'' or s3://BUCKET[/PREFIX] -> () or (bucket, prefix without slashes at either end)."""
    text = text.strip()
    if not text:
        return ()
    scheme, sep, rest = text.partition("://")
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if scheme.lower() != "s3" or not sep or not _BUCKET.match(bucket) or ".." in bucket:
        raise ConfigError("--shared-store %r: expected s3://BUCKET[/PREFIX] (bucket: 3-63 characters "
                          "a-z 0-9 . -)" % text)
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ConfigError("--shared-store %r: the prefix has an empty, '.' or '..' part" % text)
    return bucket, prefix


def _node_id(text):
    # up to 253 characters: a Kubernetes node name (a DNS subdomain, RFC 1123) fits, which
    # deploy/k8s gives each node of the DaemonSet from spec.nodeName
    text = text.strip()
    if text and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", text):
        raise ConfigError("--node-id %r: expected 1-253 characters A-Z a-z 0-9 . _ -" % text)
    return text


def usable_cpus():
    """The CPUs this process may run on: its affinity mask (taskset, a cpuset), capped by
    a cgroup v2 CPU quota (cpu.max "QUOTA PERIOD": what `docker run --cpus` and a pod's
    limits.cpu set; os.cpu_count() sees neither), rounded up."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


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


def _network_mbps(text):
    if text == "auto":
        return -1.0
    try:
        v = float(text)
    except ValueError:
        raise ConfigError("--network-mbps %r: expected auto or MB/s (0 skips the check)" % text) from None
    if v < 0:
        raise ConfigError("--network-mbps must be >= 0")
    return v


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


def _seconds(what):
    """A timeout: a number of seconds > 0 (a reactor checks timeouts once a second)."""
    parse = _positive_float(what)

    def check(text):
        v = parse(text)
        if v <= 0:
            raise ConfigError("%s must be > 0" % what)
        return v
    return check


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


_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
               "gb": 10**9, "t": 10**12, "tb": 10**12, "p": 10**15, "pb": 10**15,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50}


def parse_size(text, what="size"):
    """'500G' (10^9), '10GiB' (2^30), '1.5T', '1048576' -> bytes. IEC: an 'i' means 1024."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m and _SIZE_UNITS.get(m.group(2).lower())
    if not unit:
        raise ConfigError("%s %r: expected bytes or a size such as 500G, 10GiB, 750MB" % (what, text))
    return int(float(m.group(1)) * unit) if "." in m.group(1) else int(m.group(1)) * unit


def _auto_int(what, lo, hi):
    """An integer in [lo, hi], or "auto" (None: the caller's default)."""
    parse = _int_range(what, lo, hi)

    def p(text):
        return None if str(text).strip().lower() == "auto" else parse(text)
    return p


def _size(what):
    return lambda text: parse_size(text, what)


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
            "pulsys's own token for upstream: every request with --upstream-auth service; pre-warm "
            "jobs and the shared tier with client", metavar="TOKEN"),
    Setting("hf_token_file", "--hf-token-file", str, "",
            "a file holding --hf-token (a Kubernetes secret or systemd credential mounted as a file; "
            "its first line is read at start)", metavar="FILE"),
    Setting("upstream_auth", "--upstream-auth", _choice("--upstream-auth", ("service", "client")),
            "service", "who the Hub sees: service (pulsys's --hf-token for everyone; client "
            "credentials are never forwarded) or client (each client's own token, what HF_TOKEN "
            "sends, or with --auth required the Hub token the client's pulsys key carries: the Hub "
            "decides per client who reads gated and private repos)",
            choices=("service", "client")),
    Setting("access_ttl", "--access-ttl", _positive_float("--access-ttl"), "60",
            "with --upstream-auth client: seconds the Hub's answer whether a token may read a repo "
            "is remembered (yes and no alike); a revoked access stops within it", metavar="SECONDS"),
    Setting("token_secret_file", "--token-secret-file", str, "",
            "with --upstream-auth client --auth required: the file of the secret that seals the Hub "
            "tokens keys carry in the admin store; with --xet facade: what its CAS tokens and xorb "
            "URLs are signed with (made, mode 0600, when absent; every node sharing one --db or "
            "fleet needs the same file; default: token-secret in the cache dir)", metavar="FILE"),
    Setting("allow_upstream_host", "--allow-upstream-host", _allow_hosts, (),
            "extra host[:port] that upstream redirects may be followed to (repeatable; comma-separated "
            "in env); an IP address here also allows connecting to that private or loopback address",
            kind="multi", metavar="HOST[:PORT]"),
    Setting("xet", "--xet", _choice("--xet", ("strip", "facade")), "strip",
            "what hf_xet clients get: strip (every Xet signal removed, so they download over plain "
            "HTTP through the cache) or facade (pulsys is their Xet CAS: reconstructions and xorb "
            "ranges cached, files over 50 GB served; docs/decisions/0019-xet-facade.md)",
            choices=("strip", "facade")),
    Setting("public_base_url", "--public-base-url", _optional_url, "",
            "URL clients reach pulsys at, used in rewritten Link headers (default: from the request's Host)",
            metavar="URL"),
    Setting("admin_listen", "--admin-listen", _admin_listen, "127.0.0.1:8081",
            "admin address for /healthz and /debug/vars ('off' disables)", metavar="HOST:PORT"),
    Setting("auth", "--auth", _choice("--auth", ("off", "required")), "required",
            "client API keys on the data plane: required (Authorization: Bearer hf_pulsys..., what "
            "HF_TOKEN sends; a first start creates an admin key and prints it) or off (anyone who "
            "can connect may download)", choices=("off", "required")),
    Setting("db", "--db", _db_url, "",
            "the admin store (API keys, audit log, pre-warm jobs): sqlite:///PATH or "
            "postgres://USER[:PASSWORD]@HOST[:PORT]/DB (default: sqlite in the cache dir)", metavar="URL"),
    Setting("shared_store", "--shared-store", _s3_url, "",
            "the fleet's shared tier: an S3-compatible bucket read on a local miss before the Hub, "
            "written with every verified blob and metadata (s3://BUCKET[/PREFIX]; endpoint, region "
            "and credentials from the standard AWS settings: AWS_ENDPOINT_URL, AWS_REGION, "
            "AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)", metavar="s3://BUCKET[/PREFIX]"),
    Setting("shared_store_endpoint", "--shared-store-endpoint", _optional_url, "",
            "URL of an S3-compatible server for --shared-store (MinIO, Ceph, ...; default: "
            "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS S3); pulsys may always connect to it",
            metavar="URL"),
    Setting("shared_store_region", "--shared-store-region", str, "",
            "region of the --shared-store bucket (default: AWS_REGION / AWS_DEFAULT_REGION)",
            metavar="REGION"),
    Setting("node_id", "--node-id", _node_id, "",
            "this node's name in a fleet: in logs, /debug/vars and on the objects it uploads to "
            "--shared-store (default: the host name)", metavar="NAME"),
    Setting("history_interval", "--history-interval", _seconds("--history-interval"), "10",
            "seconds between samples of the counters for the throughput history (the console's "
            "charts, /api/v1/history); buckets are 1 and 15 minutes wide whatever it is",
            metavar="SECONDS"),
    Setting("log_format", "--log-format", _choice("--log-format", ("console", "json")), "console",
            "log output format", choices=("console", "json")),
    Setting("log_level", "--log-level", _choice("--log-level", ("debug", "info", "warning", "error")),
            "info", "minimum log level", choices=("debug", "info", "warning", "error")),
    Setting("access_log", "--access-log", _bool, "on",
            "log one event per request (on/off)", metavar="on|off"),
    Setting("revision_ttl", "--revision-ttl", _positive_float("--revision-ttl"), "60",
            "seconds a branch/tag -> commit mapping and mutable metadata stay fresh", metavar="SECONDS"),
    Setting("max_negative_entries", "--max-negative-entries",
            _int_range("--max-negative-entries", 0, 1 << 30), "100000",
            "most negative answers (4xx such as EntryNotFound) kept in the cache; past it the least "
            "recently used are dropped (0: none are kept)", metavar="N"),
    Setting("offline", "--offline", _bool, False,
            "serve only from cache; misses get 599 at once", kind="flag"),
    Setting("listeners", "--listeners", _int_range("--listeners", 1, 1024), str(usable_cpus()),
            "number of listening sockets (SO_REUSEPORT), one reactor each; with N > 1 each reactor "
            "runs in its own worker process (default: the CPUs pulsys may use: its CPU affinity, "
            "capped by a container's cgroup CPU quota)", metavar="N"),
    Setting("fill_threads", "--fill-threads", _int_range("--fill-threads", 1, 1024), "32",
            "threads that talk to upstream and write the cache", metavar="N"),
    Setting("fill_read_ahead", "--fill-read-ahead", _int_range("--fill-read-ahead", 1, 256), "8",
            "upstream connections a large file's fill opens by itself, ahead of any reader: the "
            "file is fetched in 8 MiB pieces by this many at once, so a single-stream client is "
            "not held to the CDN's per-connection pace (1: no read-ahead)", metavar="N"),
    Setting("fill_fetchers_per_file", "--fill-fetchers-per-file", _int_range("--fill-fetchers-per-file", 1, 256),
            "64", "most upstream connections one file's fill uses at once, read-ahead included: a "
            "client reading many parts of a cold file at once (hf_transfer: 100 ranges) gets a "
            "connection where each part waits, up to this (1: one connection per file)", metavar="N"),
    Setting("fill_fetchers", "--fill-fetchers", _auto_int("--fill-fetchers", 0, 4096), "auto",
            "most extra upstream connections (beyond one per fill) all fills use at once, each on "
            "a thread of its own (auto: twice --fill-fetchers-per-file; 0: one connection per "
            "fill)", metavar="N|auto"),
    Setting("upstream_timeout", "--upstream-timeout", _positive_float("--upstream-timeout"), "30",
            "connect and read timeout for upstream requests; a file body that stalls this long "
            "is asked for again from its last byte", metavar="SECONDS"),
    Setting("fill_retries", "--fill-retries", _int_range("--fill-retries", 0, 100), "5",
            "times a broken upstream file body (drop, reset, stall, 5xx) is resumed with Range "
            "before the fill fails; an attempt that brings 1 MiB starts the count again", metavar="N"),
    Setting("iouring", "--iouring", _choice("--iouring", ("auto", "on", "off")), "auto",
            "io_uring reactor: --iouring demands it (error if unavailable), --no-iouring forces the "
            "portable backend; by default it is used when the startup probe passes",
            kind="tristate"),
    Setting("sendfile", "--sendfile", _choice("--sendfile", ("auto", "linux", "darwin", "portable")),
            "auto", "how file bodies are sent: auto, linux (MSG_MORE + sendfile), darwin (sendfile "
            "with sf_hdtr), portable (pread + write)", choices=("auto", "linux", "darwin", "portable")),
    Setting("cache_max_bytes", "--cache-max-bytes", _size("--cache-max-bytes"), "0",
            "most blob bytes the cache may hold, fills in progress included: 500G (10^9), 10GiB "
            "(2^30) or plain bytes; 0 = unlimited", metavar="SIZE"),
    Setting("evict", "--evict", _choice("--evict", ("lru", "none")), "lru",
            "when --cache-max-bytes is reached: lru evicts the least recently served blobs, none "
            "answers new fills with 507", choices=("lru", "none")),
    Setting("network_mbps", "--network-mbps", _network_mbps, "auto",
            "network speed in MB/s that the cache dir's fsync'd write speed is checked against at "
            "start, warning when it is far slower (auto: the fastest NIC in /sys/class/net, skipped "
            "when none reports a speed; 0: no check)", metavar="MBPS"),
    Setting("max_connections", "--max-connections", _int_range("--max-connections", 1, 1 << 20), "10000",
            "open client connections per reactor before new ones are refused", metavar="N"),
    Setting("max_connections_per_ip", "--max-connections-per-ip",
            _int_range("--max-connections-per-ip", 0, 1 << 20), "1000",
            "open client connections per reactor from one client address; more are answered 503 "
            "and closed at accept (0 = no limit)", metavar="N"),
    Setting("header_timeout", "--header-timeout", _seconds("--header-timeout"), "30",
            "seconds a client has to send a whole request head (and a POST body) once it has "
            "started; dripping bytes does not extend it", metavar="SECONDS"),
    Setting("idle_timeout", "--idle-timeout", _seconds("--idle-timeout"), "75",
            "seconds a keep-alive connection may wait for its next request", metavar="SECONDS"),
    Setting("send_timeout", "--send-timeout", _seconds("--send-timeout"), "60",
            "seconds a response may make no progress because the client does not read",
            metavar="SECONDS"),
)


@dataclass(frozen=True)
class Config:
    listen: tuple = ("127.0.0.1", 8080)
    upstream: str = "https://huggingface.co"
    cache_dir: str = ""
    hf_token: str = ""
    upstream_auth: str = "service"
    access_ttl: float = 60.0
    token_secret_file: str = ""
    allow_upstream_host: tuple = ()
    public_base_url: str = ""
    xet: str = "strip"
    admin_listen: tuple = ("127.0.0.1", 8081)
    auth: str = "required"
    db: str = ""
    log_format: str = "console"
    log_level: str = "info"
    access_log: bool = True
    revision_ttl: float = 60.0
    max_negative_entries: int = 100000
    offline: bool = False
    listeners: int = 1
    fill_threads: int = 32
    fill_read_ahead: int = 8
    fill_fetchers_per_file: int = 64
    fill_fetchers: int = None
    upstream_timeout: float = 30.0
    fill_retries: int = 5
    iouring: str = "auto"
    sendfile: str = "auto"
    network_mbps: float = -1.0
    max_connections: int = 10000
    max_connections_per_ip: int = 1000
    header_timeout: float = 30.0
    idle_timeout: float = 75.0
    send_timeout: float = 60.0
    cache_max_bytes: int = 0
    evict: str = "lru"
    shared_store: tuple = ()
    shared_store_endpoint: str = ""
    shared_store_region: str = ""
    node_id: str = ""
    history_interval: float = 10.0
    extra: dict = field(default_factory=dict)

    @property
    def upstream_netloc(self):
        return urllib.parse.urlsplit(self.upstream).netloc.lower()

    def reactor_limits(self):
        """Keyword arguments every reactor takes from the settings (reactor/base.py)."""
        return {"max_connections": self.max_connections, "max_per_ip": self.max_connections_per_ip,
                "header_timeout": self.header_timeout, "idle_timeout": self.idle_timeout,
                "send_timeout": self.send_timeout}

    def extra_fetchers(self):
        """--fill-fetchers, with auto resolved: twice --fill-fetchers-per-file."""
        return 2 * self.fill_fetchers_per_file if self.fill_fetchers is None else self.fill_fetchers

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
    out["db"] = db_url(out["db"], out["cache_dir"])
    out["token_secret_file"] = token_secret_file(out["token_secret_file"], out["cache_dir"])
    path = out.pop("hf_token_file")
    if path:
        if out["hf_token"]:
            raise ConfigError("--hf-token and --hf-token-file both given: keep one")
        out["hf_token"] = _read_token(path)
    return Config(**out)


def _read_token(path):
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("--hf-token-file %s: %s" % (path, getattr(e, "strerror", None) or e)) from None
    if not token or not token.isprintable() or " " in token:
        raise ConfigError("--hf-token-file %s: its first line is no token" % path)
    return token


def token_secret_file(text, cache_dir):
    """--token-secret-file as given, or the default: token-secret in the cache dir."""
    return os.path.abspath(os.path.expanduser(text)) if text else os.path.join(cache_dir, "token-secret")


def db_url(text, cache_dir):
    """--db as given (validated), or the default: a SQLite file in the cache dir."""
    return _db_url(text or "") or "sqlite://" + os.path.join(cache_dir, "pulsys.sqlite3")
