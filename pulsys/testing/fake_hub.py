"""A fake Hugging Face Hub: two loopback origins that behave like the real Hub.

The Hub origin (`url`) answers `/resolve` (307 to `/api/resolve-cache` for
regular files, 302 to a signed CDN URL for LFS files), the metadata API and the
Hub's error headers; the CDN origin (`cdn_url`, a different origin on purpose,
hf-protocol.md §3) serves LFS bytes behind expiring signatures. Everything
follows the team's protocol notes (shared/docs/hf-protocol.md), so real huggingface_hub clients
(2.4.0, 0.36.2 + hf_transfer) run against it, directly or through pulsys.

    hub = FakeHub().start()
    sha = hub.add_repo("org/name", files={"config.json": b"{}", "model.safetensors": b"..."})
    ...  # HF_ENDPOINT=hub.url
    hub.stop()

It also counts every request and every blob byte it sends, and injects faults
(`hub.faults`, see fake_hub_faults). Stdlib only; imports nothing else from
pulsys (import-linter contract "testing-independent"). Binds loopback only.
Every thread it starts ends in `stop()`.
"""

import errno
import hashlib
import ipaddress
import os
import socket
import socketserver
import sys
import threading
import time
import traceback
from http.server import ThreadingHTTPServer
from typing import NamedTuple
from urllib.parse import unquote

from pulsys.testing.fake_hub_cdn import CdnHandler, CdnSigner, XorbHandler
from pulsys.testing.fake_hub_faults import Faults
from pulsys.testing.fake_hub_routes import HubHandler
from pulsys.testing.fake_hub_store import RepoStore, git_blob_sha1, sha256_hex
from pulsys.testing.fake_hub_xet import XetStore, XorbSigner

__all__ = ["FakeHub", "Faults", "RequestRecord", "git_blob_sha1", "sha256_hex"]


class RequestRecord(NamedTuple):
    server: str  # "hub" or "cdn"
    method: str
    path: str  # raw, as on the wire (percent-encoding kept), without the query
    query: str  # raw query string, "" if none
    range: object  # the Range header or None
    headers: dict  # lower-case names


def _check_loopback(host):
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError("the fake hub binds loopback addresses only, got %r" % (host,))


class _Server(ThreadingHTTPServer):
    """A threaded HTTP/1.1 server that remembers its connections so stop() can end them."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024

    def __init__(self, address, handler, hub):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.hub = hub
        self._conn_lock = threading.Lock()
        self._conns = {}  # socket -> handler thread
        super().__init__(address, handler)

    def server_bind(self):
        # HTTPServer.server_bind would call socket.getfqdn(), a reverse DNS lookup that can stall.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request, client_address):
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name="fake-hub-%s-conn" % self.RequestHandlerClass.server_label, daemon=True)
        with self._conn_lock:
            self._conns[request] = thread
        thread.start()

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._conn_lock:
                self._conns.pop(request, None)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError) or (isinstance(exc, ValueError) and "closed file" in str(exc)):
            return  # the peer left, or a fault closed the socket: nothing to report
        self.hub._errors.append(traceback.format_exc())
        super().handle_error(request, client_address)

    def end_connections(self):
        """Shut down every open connection (wakes idle keep-alive readers); returns their threads."""
        with self._conn_lock:
            conns = list(self._conns.items())
        for sock, _ in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return [thread for _, thread in conns]


class FakeHub:
    def __init__(self, host="127.0.0.1", cdn_host="127.0.0.2", port=0, cdn_port=0, tree_page_size=1000,
                 xet=True, token=None, *, cdn_url_ttl=3600, clock=time.time, record_requests=True,
                 xorb_host="127.0.0.4"):
        """cdn_url_ttl: seconds a signed CDN URL stays valid. clock: wall clock for URL expiry and
        commit dates. record_requests=False keeps `requests`/`count()` empty (long benchmarks
        would otherwise grow the log without bound); byte counters work either way."""
        _check_loopback(host)
        _check_loopback(cdn_host)
        if tree_page_size < 1:
            raise ValueError("tree_page_size must be >= 1")
        self.host, self.cdn_host, self.port, self.cdn_port = host, cdn_host, port, cdn_port
        _check_loopback(xorb_host)
        self.xorb_host = xorb_host   # where xorb bytes are served (the Hub's are on a host of their own)
        self.tree_page_size = tree_page_size
        self.xet = bool(xet)
        # regular files: 307 to /api/resolve-cache/... (True), or 200 with the body at
        # /resolve itself (False); the Hub does both (hf-protocol.md §4.1)
        self.regular_redirect = True
        self.token = token
        self.cdn_url_ttl = cdn_url_ttl  # may be changed at any time; applies to URLs signed afterwards
        self.record_requests = record_requests
        self.faults = Faults()
        self._clock = clock
        self._monotonic = time.monotonic
        self._store = RepoStore(clock)
        self._signer = CdnSigner(os.urandom(32), clock)
        # Xet (fake_hub_xet.py): the CAS behind the CDN host; tokens the token route issued
        self._xet = XetStore()
        self._xorb_signer = XorbSigner(os.urandom(32), clock)
        self._xet_tokens = {}       # token -> (repo type, repo id, expires)
        self.xet_token_ttl = 3600   # seconds; may be changed at any time
        self.xorb_url_ttl = 3600    # seconds a signed xorb URL stays valid
        # False: the xorb host answers a suffix Range (bytes=-N, how a xorb's footer is
        # read) with 416, as a CDN that does not serve them would
        self.xorb_suffix_ranges = True
        # the bridge (plain HTTP of a Xet file) refuses files larger than this, as the Hub's
        # does above 50 GB (xet-protocol.md §1); None: no limit
        self.bridge_limit = None
        self._xorb_bytes = 0
        self._lock = threading.Lock()
        self._records = []
        self._bytes = {}
        self._fetches = {}
        self._bodies_now = {}       # blob key -> bodies being sent now, and the most at once
        self._bodies_most = {}
        self._errors = []
        self._users = {}            # token -> {"name": ..., "repos": {(type, id), ...}} (add_user)
        self._stop_event = threading.Event()
        self._servers = []
        self._threads = []
        self._state = "new"

    # -- content -------------------------------------------------------------

    def add_repo(self, repo_id, files=None, repo_type="model", lfs=None, private=False, gated=False):
        """Create a repo whose "main" holds `files`; returns that commit's sha.

        lfs: None = by suffix or size >= 10 MiB (fake_hub_store.LFS_SUFFIXES), else the set of LFS paths.
        gated: False, True (= "auto") or "manual".
        """
        return self._store.add_repo(repo_id, files, repo_type, _lfs_set(lfs), private, gated)

    # -- users -------------------------------------------------------------------

    def add_user(self, token, name=None):
        """A user whose bearer `token` is valid and who may read the public repos, and the
        private and gated ones granted to it (grant). With FakeHub(token=T), T stays the
        owner of everything; any token neither T nor a user's is invalid."""
        with self._lock:
            self._users[token] = {"name": name or "user-" + hashlib.sha1(token.encode()).hexdigest()[:8],
                                  "repos": set()}

    def grant(self, token, repo_id, repo_type="model"):
        """The user may read this repo: a member of a private repo's org, or a user whose
        request for a gated repo was accepted."""
        with self._lock:
            self._users[token]["repos"].add((repo_type, repo_id))

    def revoke(self, token, repo_id, repo_type="model"):
        """Take that access back; the user's next request is refused as the Hub refuses it."""
        with self._lock:
            self._users[token]["repos"].discard((repo_type, repo_id))

    def user(self, token):
        """(name, {(type, id), ...}) of a user added with add_user, else None."""
        with self._lock:
            u = self._users.get(token)
            return (u["name"], set(u["repos"])) if u is not None else None

    def commit(self, repo_id, files, repo_type="model", branch="main", lfs=None):
        """A new commit on `branch` (created from main if new): `files` replace or extend the
        branch's tree, a None value deletes that path. Moves the branch; returns the sha."""
        return self._store.commit(repo_id, files, repo_type, branch, _lfs_set(lfs))

    def set_ref(self, repo_id, ref, sha, repo_type="model"):
        """Point a tag, branch ("refs/heads/x" or an existing branch name) or "refs/pr/N" at `sha`."""
        self._store.set_ref(repo_id, ref, sha, repo_type)

    def rename_repo(self, old_id, new_id, repo_type="model"):
        """Move a repo; the old id then answers 307 with a relative Location (§4.1)."""
        self._store.rename(old_id, new_id, repo_type)

    # -- lifecycle -----------------------------------------------------------

    def start(self):
        with self._lock:
            if self._state != "new":
                raise RuntimeError("a FakeHub starts once")
            self._state = "starting"
        hub_server = _Server((self.host, self.port), HubHandler, self)
        try:
            cdn_server = self._bind_cdn(hub_server.server_address[1])
        except BaseException:
            hub_server.server_close()
            raise
        try:
            xorb_server = _Server((self.xorb_host, 0), XorbHandler, self)
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                hub_server.server_close()
                cdn_server.server_close()
                raise
            self.xorb_host = self.cdn_host          # only Linux routes all of 127/8 to loopback
            xorb_server = _Server((self.xorb_host, 0), XorbHandler, self)
        self._servers = [hub_server, cdn_server, xorb_server]
        for server in self._servers:
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                      name="fake-hub-%s" % server.RequestHandlerClass.server_label, daemon=True)
            thread.start()
            self._threads.append(thread)
        with self._lock:
            self._state = "running"
        return self

    def _bind_cdn(self, hub_port):
        try:
            return _Server((self.cdn_host, self.cdn_port), CdnHandler, self)
        except OSError as exc:
            # Only Linux routes all of 127/8 to loopback; macOS has just 127.0.0.1.
            if exc.errno != errno.EADDRNOTAVAIL or self.cdn_host == self.host:
                raise
        self.cdn_host = self.host
        return _Server((self.host, 0 if self.cdn_port == hub_port else self.cdn_port), CdnHandler, self)

    def stop(self):
        """Close every listener and every open connection, cut hangs and throttles short,
        and join every thread the hub started. Safe to call twice, or before start()."""
        with self._lock:
            if self._state != "running":
                self._state = "stopped"
                return
            self._state = "stopped"
        self._stop_event.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        workers = [t for server in self._servers for t in server.end_connections()]
        for thread in self._threads + workers:
            thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return "http://" + self._netloc(0)

    @property
    def cdn_url(self):
        return "http://" + self.cdn_netloc

    @property
    def cdn_netloc(self):
        return self._netloc(1)

    @property
    def xorb_url(self):
        """The origin of xorb bytes (signed URLs from the CAS's reconstructions)."""
        return "http://" + self._netloc(2)

    def _netloc(self, index):
        if not self._servers:
            raise RuntimeError("FakeHub not started")
        host, port = self._servers[index].server_address[:2]
        return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)

    # -- counters --------------------------------------------------------------

    @property
    def requests(self):
        """Snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._records)

    @property
    def server_errors(self):
        """Tracebacks of unexpected exceptions in handlers (a bug in the fake); [] normally."""
        return list(self._errors)

    def count(self, method=None, path_contains=None, server=None):
        """Requests matching all given filters; `path_contains` matches the raw or the decoded path."""
        n = 0
        for r in self.requests:
            if method is not None and r.method != method.upper():
                continue
            if server is not None and r.server != server:
                continue
            if path_contains is not None and path_contains not in r.path and path_contains not in unquote(r.path):
                continue
            n += 1
        return n

    def body_bytes(self, blob_id):
        """Body bytes sent of one blob (by sha256, git sha1 or tree oid), over every route."""
        key = self._store.canonical_id(blob_id)
        with self._lock:
            return self._bytes.get(key, 0)

    def body_fetches(self, blob_id):
        """GET responses that carried at least one body byte of that blob."""
        key = self._store.canonical_id(blob_id)
        with self._lock:
            return self._fetches.get(key, 0)

    def most_concurrent_bodies(self, blob_id):
        """The most bodies of one blob sent at the same time (upstream connections a
        client of this hub had open on it at once)."""
        key = self._store.canonical_id(blob_id)
        with self._lock:
            return self._bodies_most.get(key, 0)

    def xorb_bytes(self):
        """Xorb bytes the CAS sent (every xorb, every client)."""
        with self._lock:
            return self._xorb_bytes

    def xet_store(self, file_hash):
        """The XetStore holding the file with this Xet hash (built on first use), or None."""
        if file_hash not in self._xet.files:
            blob = self._store.blob_by_xet(file_hash)
            if blob is None:
                return None
            self._xet.add(file_hash, blob.data)
        return self._xet

    def _xet_token_issued(self, token, repo, expires):
        with self._lock:
            self._xet_tokens[token] = (repo.type, repo.id, expires)

    def _xet_token_reads(self, token, file_hash):
        """May a CAS request with this token read this file? -> None, or why not."""
        with self._lock:
            t = self._xet_tokens.get(token)
        if t is None:
            return "unknown token"
        if t[2] < self._clock():
            return "token expired"
        if not self._store.repo_has_xet(t[0], t[1], file_hash):
            return "token is not for this file's repo"
        return None

    def _count_xorb(self, n):
        with self._lock:
            self._xorb_bytes += n

    def total_body_bytes(self):
        with self._lock:
            return sum(self._bytes.values())

    def reset_counters(self):
        with self._lock:
            self._records.clear()
            self._bytes.clear()
            self._fetches.clear()
            self._bodies_most.clear()
            self._xorb_bytes = 0

    # -- called by the handlers --------------------------------------------------

    def _record(self, server, method, path, query, headers):
        if not self.record_requests:
            return
        lower = {name.lower(): value for name, value in headers.items()}
        record = RequestRecord(server, method, path, query, lower.get("range"), lower)
        with self._lock:
            self._records.append(record)

    def _uncount_fetch(self, blob_key):
        with self._lock:
            self._fetches[blob_key] -= 1

    def _sending(self, blob_key, n):
        with self._lock:
            now = self._bodies_now[blob_key] = self._bodies_now.get(blob_key, 0) + n
            if now > self._bodies_most.get(blob_key, 0):
                self._bodies_most[blob_key] = now

    def _count_body(self, blob_key, nbytes, new_fetch):
        with self._lock:
            self._bytes[blob_key] = self._bytes.get(blob_key, 0) + nbytes
            if new_fetch:
                self._fetches[blob_key] = self._fetches.get(blob_key, 0) + 1


def _lfs_set(lfs):
    return None if lfs is None else frozenset(lfs)
