"""Hugging Face URL classification: RequestHead -> Target. Pure.

The shapes come from hf-protocol.md §1-§2: file URLs are
`/{prefix}{repo_id}/resolve/{quote(revision, safe="")}/{quote(path)}` with prefix "",
"datasets/" or "spaces/", and repo ids of one segment ("gpt2") or two ("org/name").
Revisions arrive percent-encoded (`refs%2Fpr%2F1`); paths keep literal "/".
"""

from urllib.parse import quote, unquote

from pulsys.model import target as T

_PREFIX_TYPES = {"datasets": "dataset", "spaces": "space", "models": "model"}
_API_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_LOCAL_PATHS = {"/healthz": "healthz", "/api/agent-harnesses": "agent-harnesses"}


def _reject(status, message):
    return T.Target(T.REJECT, status=status, message=message)


def _decode(seg):
    """Percent-decode one path segment; None if it is unsafe to use."""
    s = unquote(seg, errors="strict") if "%" in seg else seg
    if not s or s in (".", "..") or "\x00" in s or "\\" in s:
        return None
    for ch in s:
        if ch < " " or ch == "\x7f":
            return None
    return s


def _decode_all(segs):
    out = []
    for seg in segs:
        d = _decode(seg)
        if d is None:
            return None
        out.append(d)
    return out


def _repo_ok(parts):
    return 1 <= len(parts) <= 2 and all("/" not in p for p in parts)


def upstream_resolve_path(rtype, repo, rev, path):
    return "/%s%s/resolve/%s/%s" % (T.URL_PREFIX[rtype], repo, quote(rev, safe=""), quote(path))


def _route_resolve(segs, query):
    rtype = "model"
    if segs and segs[0] in _PREFIX_TYPES and len(segs) > 3 and "resolve" in segs[2:4]:
        rtype = _PREFIX_TYPES[segs[0]]
        segs = segs[1:]
    if len(segs) >= 5 and segs[2] == "resolve":
        repo_raw, rest = segs[:2], segs[3:]
    elif len(segs) >= 4 and segs[1] == "resolve":
        repo_raw, rest = segs[:1], segs[2:]
    else:
        return None
    try:
        repo = _decode_all(repo_raw)
        rev = _decode(rest[0])
        path = _decode_all(rest[1:])
    except UnicodeDecodeError:
        return _reject(400, "path is not valid UTF-8 after percent-decoding")
    if repo is None or rev is None or path is None or not _repo_ok(repo):
        return _reject(400, "bad repository, revision or file path")
    repo_s, path_s = "/".join(repo), "/".join(path)
    return T.Target(T.RESOLVE, rtype, repo_s, rev, path_s, query,
                    upstream_resolve_path(rtype, repo_s, rev, path_s))


def _route_resolve_cache(segs, raw_path, query):
    # /api/resolve-cache/{type}s/{repo...}/{sha}/{path...}: the Hub's regular-file body URL
    if len(segs) < 6 or segs[2] not in _API_TYPES:
        return _reject(404, "unknown resolve-cache URL")
    rtype = _API_TYPES[segs[2]]
    rest = segs[3:]
    # the commit sha separates repo id (1 or 2 segments) from the file path
    for n in (2, 1):
        if len(rest) > n + 1 and T.is_commit(rest[n]):
            try:
                repo, path = _decode_all(rest[:n]), _decode_all(rest[n + 1:])
            except UnicodeDecodeError:
                return _reject(400, "path is not valid UTF-8 after percent-decoding")
            if repo is None or path is None:
                return _reject(400, "bad repository or file path")
            t = T.Target(T.RESOLVE, rtype, "/".join(repo), rest[n], "/".join(path), query, raw_path)
            t.body_url = True
            return t
    return _reject(404, "unknown resolve-cache URL")


def _route_api(method, segs, raw_path, query):
    # segs[0] == "api"
    if len(segs) >= 2 and segs[1] == "resolve-cache":
        if method not in ("GET", "HEAD"):
            return _reject(405, "method not allowed")
        return _route_resolve_cache(segs, raw_path, query)
    if len(segs) >= 3 and segs[1] in _API_TYPES:
        rtype = _API_TYPES[segs[1]]
        rest = segs[2:]
        for op, kind in (("revision", T.API_INFO), ("tree", T.API_TREE), ("paths-info", T.API_PATHS_INFO)):
            for n in (2, 1):
                if len(rest) > n + 1 and rest[n] == op:
                    try:
                        repo, rev = _decode_all(rest[:n]), _decode(rest[n + 1])
                        sub = _decode_all(rest[n + 2:])
                    except UnicodeDecodeError:
                        return _reject(400, "path is not valid UTF-8 after percent-decoding")
                    if repo is None or rev is None or sub is None:
                        return _reject(400, "bad repository, revision or path")
                    if kind == T.API_PATHS_INFO:
                        if method != "POST" or sub:
                            return _reject(405 if sub == [] else 404, "paths-info takes POST")
                    elif method not in ("GET", "HEAD"):
                        return _reject(405, "method not allowed")
                    if kind == T.API_INFO and sub:
                        break
                    return T.Target(kind, rtype, "/".join(repo), rev, "/".join(sub), query, raw_path)
        if 1 <= len(rest) <= 2 and method in ("GET", "HEAD"):
            repo = _decode_all(rest)
            if repo is None:
                return _reject(400, "bad repository id")
            # repo info without a revision is the info of "main"
            return T.Target(T.API_INFO, rtype, "/".join(repo), "", "", query, raw_path)
    if method not in ("GET", "HEAD"):
        return _reject(405, "pulsys proxies only GET and HEAD for this API route")
    return T.Target(T.API_OTHER, query=query, upstream_path=raw_path)


def route(head):
    """Classify one request. Never raises; bad input gives a REJECT target."""
    method, raw_path, query = head.method, head.path, head.query
    local = _LOCAL_PATHS.get(raw_path)
    if local is not None and method in ("GET", "HEAD"):
        return T.Target(T.LOCAL, path=local)
    segs = raw_path[1:].split("/")
    if segs and segs[0] == "api":
        return _route_api(method, segs, raw_path, query)
    t = _route_resolve(segs, query)
    if t is None:
        return _reject(404, "pulsys serves /{repo}/resolve/{revision}/{file} and /api/ routes only")
    if t.kind == T.RESOLVE and method not in ("GET", "HEAD"):
        return _reject(405, "method not allowed")
    return t
