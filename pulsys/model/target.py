"""Target: what a request asks for, as the router understood it.

Plain data shared by the reactor (warm lookups), the upstream plane (what to fetch) and
the cache (keys). Built by route.route(); never by hand outside tests.
"""

from urllib.parse import quote

# kinds
RESOLVE = 1        # GET/HEAD a file: /{repo}/resolve/{rev}/{path} or /api/resolve-cache/...
API_INFO = 2       # GET /api/{type}s/{repo}[/revision/{rev}]
API_TREE = 3       # GET /api/{type}s/{repo}/tree/{rev}[/{path}]
API_PATHS_INFO = 4  # POST /api/{type}s/{repo}/paths-info/{rev}
API_OTHER = 5      # any other GET/HEAD under /api/: proxied, not cached
LOCAL = 6          # answered by pulsys itself (path in .path: "healthz", "agent-harnesses")
REJECT = 7         # .status and .message say why
# --xet facade (upstream/xet.py; the pool answers these in strip mode too: 404, or the
# token route proxied as any other API call)
XET_TOKEN = 8      # GET /api/{type}s/{repo}/xet-read-token/{rev}: repo, rev
XET_RECON = 9      # GET /cas/v{1,2}/reconstructions/{hash}: rev = "1" | "2", path = file hash
XET_XORB = 10      # GET /cas/xorbs/{xorb}/{first}-{end}?e=..&s=..: repo = xorb hash, path = "first-end"
XET_TELEMETRY = 11  # POST /v1/telemetry (hf_xet sends it to the CAS host without its path)

KIND_NAMES = {RESOLVE: "resolve", API_INFO: "api-info", API_TREE: "api-tree",
              API_PATHS_INFO: "paths-info", API_OTHER: "api", LOCAL: "local", REJECT: "reject",
              XET_TOKEN: "xet-token", XET_RECON: "xet-reconstruction", XET_XORB: "xet-xorb",
              XET_TELEMETRY: "xet-telemetry"}

REPO_TYPES = ("model", "dataset", "space")
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}


class Target:
    __slots__ = ("kind", "rtype", "repo", "rev", "path", "query", "_upstream",
                 "status", "message", "allow", "key", "rkey", "ckey", "body_url", "seen")

    def __init__(self, kind, rtype="", repo="", rev="", path="", query="", upstream_path="",
                 status=0, message=""):
        self.kind = kind
        self.rtype = rtype            # "model" | "dataset" | "space"
        self.repo = repo              # "org/name" or "name", decoded
        self.rev = rev                # decoded revision ("main", "refs/pr/1", 40-hex sha) or ""
        self.path = path              # decoded file path inside the repo, or "" (LOCAL: what to answer)
        self.query = query            # raw query the client sent (kept for upstream where it matters)
        # percent-encoded path to ask upstream for; None: the /resolve/ path of the target,
        # rendered when first asked (a warm hit never asks: quote() is ~2 us a call)
        self._upstream = upstream_path
        self.status = status          # REJECT only
        self.message = message        # REJECT only
        self.allow = ""               # REJECT 405 only: the Allow header (RFC 9110 §15.5.6)
        self.body_url = False         # RESOLVE via /api/resolve-cache/: a body URL, never a redirect
        self.key = None               # cache key, filled in by the first index lookup
        self.rkey = None              # revision-mapping key, likewise
        self.ckey = None              # (commit, cache key at that commit), likewise
        self.seen = None              # (index gen, Entry, fresh until): a reactor's last hit on it

    @property
    def upstream_path(self):
        up = self._upstream
        if up is None:
            up = self._upstream = "/%s%s/resolve/%s/%s" % (
                URL_PREFIX[self.rtype], self.repo, quote(self.rev, safe=""), quote(self.path))
        return up

    @upstream_path.setter
    def upstream_path(self, value):
        self._upstream = value

    def __getstate__(self):
        """Pickled (a Job to the parent) without `seen`: an Entry there is this process's."""
        return None, {n: getattr(self, n) for n in self.__slots__ if n != "seen"}

    def __setstate__(self, state):
        self.seen = None
        for n, v in state[1].items():
            setattr(self, n, v)

    def __repr__(self):
        return "Target(%s %s %s@%s %r)" % (KIND_NAMES.get(self.kind), self.rtype, self.repo,
                                           self.rev, self.path or self.message)


def is_commit(rev):
    """A 40-hex lowercase git sha: immutable."""
    if len(rev) != 40:
        return False
    for c in rev:
        if c not in "0123456789abcdef":
            return False
    return True
