"""Admin API routes for what the cache holds: GET /api/v1/stats, GET /api/v1/repos and
DELETE /api/v1/repos/{type}/{org}/{name} (a purge, audit-logged). docs/admin.md."""

import re
import time

from pulsys.admin.errors import bad_request, not_found
from pulsys.admin.jobs_api import check_repo
from pulsys.db import audit

REPO_TYPES = ("model", "dataset", "space")


def stats(api, req):
    v = api.vars_fn()
    hits, misses = v.get("cache_hits", 0), v.get("cache_misses", 0)
    served, upstream = v.get("bytes_served", 0), v.get("upstream_body_bytes", 0)
    repos = api.downloads.by_repo() if api.downloads is not None else {}
    return 200, {
        "bytes_used": v.get("cache_bytes", 0), "quota_bytes": v.get("cache_max_bytes", 0),
        "entries": v.get("index_entries", 0), "blobs": v.get("cache_blobs", 0),
        "hits": hits, "misses": misses,
        "hit_ratio": round(hits / (hits + misses), 4) if hits + misses else 0.0,
        "bytes_served": served, "upstream_body_bytes": upstream,
        # what clients got that was not fetched from upstream for them (since start)
        "upstream_bytes_saved": max(0, served - upstream),
        "fills_in_flight": v.get("fills_in_flight", 0), "uptime_seconds": v.get("uptime_seconds", 0),
        # --xet facade (upstream/xet.py): CAS tokens minted, xorb ranges answered from the
        # cache and fetched upstream (and their bytes), plain-file bytes assembled from them,
        # ranges kept without chunk hashes (their xorb's footer not to be had)
        "xet": {k: v.get("xet_" + k, 0) for k in ("tokens", "xorb_hits", "xorb_fills", "xorb_bytes_fetched",
                                                    "assembled_bytes", "unverified_ranges")},
        "repos": sorted(({"type": t, "repo": r, "downloads": n, "bytes_served": b}
                         for (t, r), (n, b) in repos.items()),
                        key=lambda d: (-d["downloads"], d["type"], d["repo"])),
    }


def list_repos(api, req):
    return 200, api.cache.repos()


def purge_repo(api, req):
    rtype, repo = req.match.group(1), req.match.group(2)
    if rtype not in REPO_TYPES:
        raise bad_request("repo type %r: choose one of %s" % (rtype, ", ".join(REPO_TYPES)))
    check_repo(repo)
    result = api.cache.purge(rtype, repo)
    if result is None:
        raise not_found("%s %s is not in the cache" % (rtype, repo))
    now = time.time()
    with api.keys.db.transaction() as tx:
        audit.append(tx, req.actor, "repo.purge", "%s/%s" % (rtype, repo), result, now)
    return 200, result


STATS_ROUTES = (
    ("GET", re.compile(r"/api/v1/stats"), stats, "admin"),
    ("GET", re.compile(r"/api/v1/repos"), list_repos, "admin"),
    ("DELETE", re.compile(r"/api/v1/repos/([^/]+)/(.+)"), purge_repo, "admin"),
)
