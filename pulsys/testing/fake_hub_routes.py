"""The fake Hub origin: /resolve, /api/resolve-cache and the /api routes.

Shapes follow hf-protocol.md: redirects §3, resolve answers and error headers
§4.1, API answers §4.3, Xet signals §5. Checks run in the Hub's order: bad
token, renamed repo, missing/private repo, gated content, revision, entry.

Tokens: with `FakeHub(token=T)`, T may read every private and gated repo. Users
added with `hub.add_user(token)` read the public repos and the private and gated
ones `hub.grant(token, repo)` gave them (until `hub.revoke`). Any other bearer is
rejected as invalid, unless `token=None`: then every bearer is a valid user that
owns nothing (private -> 404, gated -> 403).
"""

import base64
import hashlib
import json
import os
from urllib.parse import parse_qs, quote, unquote

from pulsys.testing.fake_hub_store import is_sha, iso_time, paths_info, tree_listing
from pulsys.testing.fake_hub_wire import FakeHandler, content_disposition, parse_range

ANON, USER, OWNER, INVALID = "anonymous", "user", "owner", "invalid"
TYPE_SEGMENTS = ("models", "datasets", "spaces")
ACTIONS = frozenset({"revision", "tree", "paths-info", "xet-read-token", "refs"})
TEXT_TYPES = {
    ".json": "application/json", ".md": "text/markdown", ".txt": "text/plain", ".py": "text/x-python",
    ".yaml": "text/yaml", ".yml": "text/yaml", ".csv": "text/csv", ".jsonl": "application/jsonl",
    ".toml": "text/plain", ".cfg": "text/plain", ".ini": "text/plain", ".html": "text/html",
    ".js": "text/javascript", ".css": "text/css", ".xml": "application/xml", ".gitattributes": "text/plain",
}
NOT_FOUND_PAGE = {"error": "Sorry, we can't find the page you are looking for."}


def _text_type(path):
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return TEXT_TYPES.get(name[dot:].lower()) if dot >= 0 else None


def _flag(params, name):
    return params.get(name, ["false"])[-1].lower() in ("1", "true")


def _etag_matches(if_none_match, etag):
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or any(t.removeprefix("W/").strip('"') == etag for t in tags)


def _encode_cursor(offset):
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode().rstrip("=")


def _decode_cursor(cursor):
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    offset = json.loads(raw)["offset"]
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(cursor)
    return offset


class HubHandler(FakeHandler):
    server_label = "hub"

    def route(self):
        if self.raw_path.startswith("/api/"):
            self.route_api()
        else:
            self.route_resolve()

    # -- shared checks ---------------------------------------------------

    def auth(self):
        header = self.headers.get("Authorization")
        if not header:
            return ANON
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return INVALID
        token = token.strip()
        if self.hub.token is not None and token == self.hub.token:
            return OWNER
        if self.hub.token is None or self.hub.user(token) is not None:
            return USER
        return INVALID

    def bearer(self):
        """The token after the Authorization header's scheme ("" when none)."""
        return (self.headers.get("Authorization") or "").partition(" ")[2].strip()

    def granted(self, repo):
        """The request's bearer is a user that was granted this repo (FakeHub.grant)."""
        u = self.hub.user(self.bearer())
        return u is not None and (repo.type, repo.id) in u[1]

    def error(self, status, code, message, extra=()):
        headers = ([("X-Error-Code", code)] if code else []) + [("X-Error-Message", message), *extra]
        self.send_json(status, {"error": message}, headers)

    def split_repo(self, repo_type, segs, fits):
        """How many leading segments form the repo id (1 or 2), preferring a known repo; None if no route."""
        candidates = [n for n in (2, 1) if len(segs) >= n and fits(segs[n:])]
        for n in candidates:
            repo_id = "/".join(segs[:n])
            store = self.hub._store
            if store.lookup(repo_type, repo_id) or store.renamed_to(repo_type, repo_id):
                return n
        return candidates[0] if candidates else None

    def open_repo(self, repo_type, repo_id, before, after, content):
        """The Repo if this request may see it; otherwise answers (401/404/403/307) and returns None."""
        auth = self.auth()
        if auth is INVALID:
            self.error(401, None, "Invalid credentials in Authorization header")
            return None
        repo = self.hub._store.lookup(repo_type, repo_id)
        if repo is None:
            new_id = self.hub._store.renamed_to(repo_type, repo_id)
            if new_id:
                location = before + new_id + after + ("?" + self.raw_query if self.raw_query else "")
                self.send_simple(307, [("Location", location), ("Content-Type", "text/plain; charset=utf-8")],
                                 b"Temporary Redirect. Redirecting to " + location.encode())
                return None
        if repo is None or (repo.private and auth is not OWNER and not self.granted(repo)):
            self.error(401 if auth is ANON else 404, "RepoNotFound", "Repository not found")
            return None
        if content and repo.gated and auth is not OWNER and not self.granted(repo):
            if auth is ANON:
                self.error(401, "GatedRepo", "Access to %s %s is restricted. You must have access to it and be "
                           "authenticated to access it. Please log in." % (repo_type, repo.id))
            else:
                self.error(403, "GatedRepo", "Access to %s %s is restricted and you are not in the authorized "
                           "list. Visit %s/%s to ask for access." % (repo_type, repo.id, self.hub.url, repo.id))
            return None
        return repo

    def open_commit(self, repo, rev):
        commit = self.hub._store.resolve(repo, rev)
        if commit is None:
            self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
        return commit

    # -- /{prefix}{repo}/resolve/{rev}/{path} ------------------------------

    def route_resolve(self):
        segs = self.raw_path.split("/")[1:]
        repo_type, before = "model", "/"
        if segs and segs[0] in TYPE_SEGMENTS[1:]:
            repo_type, before = segs[0][:-1], "/" + segs[0] + "/"
            segs = segs[1:]
        n = self.split_repo(repo_type, segs, lambda rest: len(rest) >= 3 and rest[0] == "resolve")
        if n is None or self.command not in ("GET", "HEAD"):
            self.send_json(404, NOT_FOUND_PAGE)
            return
        repo_id, rest = "/".join(segs[:n]), segs[n:]
        repo = self.open_repo(repo_type, repo_id, before, "/" + "/".join(rest), content=True)
        if repo is None:
            return
        rev, path = unquote(rest[1]), unquote("/".join(rest[2:]))
        commit = self.open_commit(repo, rev)
        if commit is None:
            return
        blob = commit.files.get(path)
        if blob is None:
            self.error(404, "EntryNotFound", "Entry not found", [("X-Repo-Commit", commit.sha)])
        elif blob.lfs:
            self.redirect_to_cdn(repo, commit, path, blob)
        elif not self.hub.regular_redirect:
            self.send_regular(commit, path, blob)   # the Hub may answer at /resolve itself (§4.1)
        else:
            original = "%s%s/resolve/%s/%s" % (before, repo.id, rev, path)
            location = "/api/resolve-cache/%ss/%s/%s/%s?%s=&etag=%%22%s%%22" % (
                repo.type, repo.id, commit.sha, quote(path), quote(original, safe=""), blob.git_sha1)
            self.send_simple(307, [("Location", location), ("X-Repo-Commit", commit.sha),
                                   ("Content-Type", "text/plain; charset=utf-8")],
                             b"Temporary Redirect. Redirecting to " + location.encode())

    def redirect_to_cdn(self, repo, commit, path, blob):
        hub = self.hub
        location = hub._signer.sign(hub.cdn_url, "%s/%s" % (repo.type, repo.id), blob, path.rsplit("/", 1)[-1],
                                    hub.cdn_url_ttl)
        headers = [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Location", location),
            ("X-Repo-Commit", commit.sha),
            ("X-Linked-Etag", '"%s"' % blob.sha256),
            ("X-Linked-Size", str(blob.size)),
            ("ETag", '"%s"' % blob.sha256),
        ]
        if hub.xet:
            token_route = "/api/%ss/%s/xet-read-token/%s" % (repo.type, repo.id, commit.sha)
            headers += [
                ("X-Xet-Hash", blob.xet_hash),
                ("X-Xet-Refresh-Route", token_route),
                ("Link", '<%s%s>; rel="xet-auth", <%s/v1/reconstructions/%s>; rel="xet-reconstruction-info"'
                 % (hub.url, token_route, hub.cdn_url, blob.xet_hash)),
            ]
        self.send_simple(302, headers, b"Found. Redirecting to " + location.encode())

    # -- /api/resolve-cache/{type}s/{repo}/{sha}/{path} -------------------

    def route_resolve_cache(self, segs):
        if not segs or segs[0] not in TYPE_SEGMENTS or self.command not in ("GET", "HEAD"):
            self.send_json(404, NOT_FOUND_PAGE)
            return
        repo_type, before, segs = segs[0][:-1], "/api/resolve-cache/%s/" % segs[0], segs[1:]
        n = self.split_repo(repo_type, segs, lambda rest: len(rest) >= 2 and is_sha(rest[0]))
        if n is None:
            self.send_json(404, NOT_FOUND_PAGE)
            return
        rest = segs[n:]
        repo = self.open_repo(repo_type, "/".join(segs[:n]), before, "/" + "/".join(rest), content=True)
        commit = repo and self.open_commit(repo, rest[0])
        if commit is None:
            return
        path = unquote("/".join(rest[1:]))
        blob = commit.files.get(path)
        if blob is None:
            self.error(404, "EntryNotFound", "Entry not found", [("X-Repo-Commit", commit.sha)])
            return
        self.send_regular(commit, path, blob)

    def send_regular(self, commit, path, blob):
        """A regular file's body with its metadata (200, 206, 304 or 416)."""
        text_type = _text_type(path)
        headers = [
            ("Content-Type", "%s; charset=utf-8" % text_type if text_type else "application/octet-stream"),
            ("ETag", '"%s"' % blob.etag),
            ("X-Repo-Commit", commit.sha),
            ("Accept-Ranges", "bytes"),
            ("Content-Disposition", content_disposition(path.rsplit("/", 1)[-1])),
            ("Vary", "Origin, Accept-Encoding"),
        ]
        inm = self.headers.get("If-None-Match")
        span = parse_range(self.headers.get("Range"), blob.size)
        if inm and _etag_matches(inm, blob.etag):
            self.send_head(304, headers)
        elif span == "unsatisfiable":
            self.send_simple(416, headers + [("Content-Range", "bytes */%d" % blob.size)])
        elif span:
            start, end = span
            self.send_blob(206, headers + [("Content-Range", "bytes %d-%d/%d" % (start, end, blob.size))],
                           memoryview(blob.data)[start:end + 1], blob.sha256)
        elif (self.command == "GET" and text_type and "Range" not in self.headers
              and "gzip" in self.headers.get("Accept-Encoding", "").lower()):
            self.send_blob(200, headers + [("Content-Encoding", "gzip")], blob.gzipped(), blob.sha256,
                           chunked=True)
        else:
            self.send_blob(200, headers, blob.data, blob.sha256)

    # -- /api/... -----------------------------------------------------------

    def route_api(self):
        segs = self.raw_path.split("/")[2:]
        head = segs[0]
        if head == "resolve-cache":
            self.route_resolve_cache(segs[1:])
        elif head in TYPE_SEGMENTS and len(segs) > 1:
            self.route_repo_api(head[:-1], segs[1:])
        elif self.raw_path == "/api/agent-harnesses" and self.command in ("GET", "HEAD"):
            # huggingface_hub 2.4's `hf` CLI reads .get() on this document at import
            self.send_json(200, {"standardEnvVars": [], "harnesses": {}})
        elif self.raw_path == "/api/whoami-v2" and self.command in ("GET", "HEAD"):
            self.whoami()
        elif head == "telemetry":
            self.send_simple(200, [("Content-Type", "text/plain; charset=utf-8")])
        else:
            self.send_json(404, NOT_FOUND_PAGE)

    def whoami(self):
        auth = self.auth()
        if auth is ANON:
            self.error(401, None, "Invalid username or password.")
        elif auth is INVALID:
            self.error(401, None, "Invalid credentials in Authorization header")
        else:
            u = self.hub.user(self.bearer())
            self.send_json(200, {"type": "user", "id": "0" * 24, "name": u[0] if u else "fake-user",
                                 "fullname": "Fake User",
                                 "orgs": [], "auth": {"type": "access_token",
                                                      "accessToken": {"displayName": "fake", "role": "read"}}})

    def route_repo_api(self, repo_type, segs):
        n = self.split_repo(repo_type, segs, lambda rest: not rest or rest[0] in ACTIONS)
        action = segs[n] if n is not None and len(segs) > n else None
        wanted = "POST" if action == "paths-info" else ("GET", "HEAD")
        if n is None or self.command not in wanted or (action not in (None, "refs") and len(segs) < n + 2):
            self.send_json(404, NOT_FOUND_PAGE)
            return
        rest = segs[n:]
        repo = self.open_repo(repo_type, "/".join(segs[:n]), "/api/%ss/" % repo_type,
                              "/" + "/".join(rest) if rest else "", content=action == "xet-read-token")
        if repo is None:
            return
        if action == "refs":
            self.api_refs(repo)
            return
        rev = "main" if action is None else unquote(rest[1] if action == "tree" else "/".join(rest[1:]))
        commit = self.open_commit(repo, rev)
        if commit is None:
            return
        if action in (None, "revision"):
            self.api_info(repo, commit)
        elif action == "tree":
            self.api_tree(commit, rev, unquote("/".join(rest[2:])).strip("/"))
        elif action == "paths-info":
            self.api_paths_info(commit)
        else:
            self.xet_read_token(repo)

    def api_info(self, repo, commit):
        blobs = _flag(parse_qs(self.raw_query), "blobs")
        siblings = []
        for path in sorted(commit.files):
            blob = commit.files[path]
            sibling = {"rfilename": path}
            if blobs:
                sibling.update(size=blob.size, blobId=blob.oid)
                if blob.lfs:
                    sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": len(blob.pointer)}
            siblings.append(sibling)
        info = {
            "_id": hashlib.sha1(("%s/%s" % (repo.type, repo.id)).encode()).hexdigest()[:24],
            "id": repo.id,
            "sha": commit.sha,
            "lastModified": iso_time(commit.date),
            "createdAt": iso_time(repo.created),
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "xetEnabled": self.hub.xet,
            "siblings": siblings,
            "usedStorage": sum(b.size for b in commit.files.values()),
        }
        if "/" in repo.id:
            info["author"] = repo.id.split("/")[0]
        if repo.type == "model":
            info["modelId"] = repo.id
        elif repo.type == "space":
            info["sdk"] = "static"
        self.send_json(200, info)

    def api_refs(self, repo):
        refs = self.hub._store.refs(repo)

        def group(prefix, short=True):
            return [{"name": name[len(prefix):] if short else name, "ref": name, "targetCommit": sha}
                    for name, sha in sorted(refs.items()) if name.startswith(prefix)]

        out = {"branches": group("refs/heads/"), "converts": group("refs/convert/"), "tags": group("refs/tags/")}
        if _flag(parse_qs(self.raw_query), "include_prs"):
            out["pullRequests"] = group("refs/pr/", short=False)
        self.send_json(200, out)

    def api_tree(self, commit, rev, path):
        params = parse_qs(self.raw_query)
        entries = tree_listing(commit, path, _flag(params, "recursive"), self.hub.xet, _flag(params, "expand"))
        if entries is None:
            self.error(404, "EntryNotFound", '%s does not exist on "%s"' % (path, rev),
                       [("X-Repo-Commit", commit.sha)])
            return
        try:
            offset = _decode_cursor(params["cursor"][-1]) if "cursor" in params else 0
        except ValueError:
            self.send_json(400, {"error": "Invalid cursor"})
            return
        size = self.hub.tree_page_size
        headers = []
        if offset + size < len(entries):
            kept = [p for p in self.raw_query.split("&") if p and not p.startswith("cursor=")]
            kept.append("cursor=" + _encode_cursor(offset + size))
            headers.append(("Link", '<%s%s?%s>; rel="next"' % (self.hub.url, self.raw_path, "&".join(kept))))
        self.send_json(200, entries[offset:offset + size], headers)

    def api_paths_info(self, commit):
        if "json" in self.headers.get("Content-Type", ""):
            try:
                form = json.loads(self.body or b"{}")
            except ValueError:
                self.send_json(400, {"error": "Invalid JSON body"})
                return
            paths, expand = form.get("paths", []), bool(form.get("expand"))
        else:
            form = parse_qs(self.body.decode("utf-8", "replace"), keep_blank_values=True)
            paths, expand = form.get("paths", []), _flag(form, "expand")
        if isinstance(paths, str):
            paths = [paths]
        self.send_json(200, paths_info(commit, paths, self.hub.xet, expand))

    def xet_read_token(self, repo):
        """A CAS token for this repo (xet-protocol.md §2): headers for huggingface_hub, JSON
        for hf_xet's own refresh. The CAS answers it only for that repo's files."""
        expires = int(self.hub._clock() + self.hub.xet_token_ttl)
        token = "fake-xet-" + hashlib.sha256(os.urandom(16)).hexdigest()[:40]
        self.hub._xet_token_issued(token, repo, expires)
        self.send_json(200, {"casUrl": self.hub.cdn_url, "accessToken": token, "exp": expires},
                       [("X-Xet-Cas-Url", self.hub.cdn_url), ("X-Xet-Access-Token", token),
                        ("X-Xet-Token-Expiration", str(expires))])
