"""Hugging Face URL classification: RequestHead -> Target. Pure.

The shapes come from hf-protocol.md §1-§2: file URLs are
`/{prefix}{repo_id}/resolve/{quote(revision, safe="")}/{quote(path)}` with prefix "",
"datasets/" or "spaces/", and repo ids of one segment ("gpt2") or two ("org/name").
Revisions arrive percent-encoded (`refs%2Fpr%2F1`); paths keep literal "/".
"""

import re
from urllib.parse import quote, unquote

from pulsys.model import target as T

_PREFIX_TYPES = {"datasets": "dataset", "spaces": "space", "models": "model"}
_API_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_LOCAL_PATHS = {"/healthz": "healthz", "/api/agent-harnesses": "agent-harnesses"}
# RFC 9110 §9 and RFC 5789 (PATCH): the methods HTTP defines. Any other method is 501
# (RFC 9110 §9.1, "unrecognized or not implemented"); a defined one that a route does
# not take is 405 with an Allow header (RFC 9110 §15.5.6).
_KNOWN_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE",
                            "PATCH"))
_GET_HEAD = "GET, HEAD"
# Hub repo id segments, as huggingface_hub validates them (utils/_validators.py
# REPO_ID_REGEX, ASCII): letters, digits, "_", "-", "."; starting and ending with a
# letter, digit or "_"; no "--" or "..".
_REPO_SEGMENT = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?")


def _reject(status, message, allow=""):
    t = T.Target(T.REJECT, status=status, message=message)
    t.allow = allow
    return t


def _not_allowed(allow, message="method not allowed"):
    return _reject(405, message, allow)


def _decode(seg):
    """Percent-decode one path segment; None if it is unsafe to use. A decoded "/" (from
    %2F) is allowed only between non-empty parts that are not "." or "..", so no decoded
    name can climb a directory, start at the root, or name the same file as another
    spelling of itself with extra slashes."""
    s = unquote(seg, errors="strict") if "%" in seg else seg
    if not s or s in (".", "..") or "\x00" in s or "\\" in s:
        return None
    if s.isprintable() and "/" not in s:
        return s        # no control character (all are non-printable): the common case, in C
    for ch in s:
        if ch < " " or "\x7f" <= ch <= "\x9f":
            return None
    if "/" in s:
        for part in s.split("/"):
            if part in ("", ".", ".."):
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
    if not 1 <= len(parts) <= 2:
        return False
    for p in parts:
        if _REPO_SEGMENT.fullmatch(p) is None or "--" in p or ".." in p:
            return False
    return True


def _raw_path_ok(segs):
    """A path pulsys passes upstream unparsed (API_OTHER): no segment that decodes to "."
    or "..", a NUL, a backslash or a control character. `requests` turns %2E back into "."
    (requote_uri) and urllib3 then removes dot segments (RFC 3986 §5.2.4), so
    /api/x/%2e%2e/y would reach upstream as /api/y."""
    for seg in segs:
        if "%" in seg:
            seg = unquote(seg, errors="replace")
        if seg in (".", "..") or "\x00" in seg or "\\" in seg:
            return False
        for ch in seg:
            if ch < " " or "\x7f" <= ch <= "\x9f":
                return False
    return True


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
    return T.Target(T.RESOLVE, rtype, repo_s, rev, path_s, query, None)   # upstream path: lazy


def _route_resolve_cache(segs, query):
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
            if repo is None or path is None or not _repo_ok(repo):
                return _reject(400, "bad repository or file path")
            # upstream gets the canonical spelling of what the key names, never the
            # client's: an encoding upstream reads differently must not be cached there
            repo_s, path_s = "/".join(repo), "/".join(path)
            t = T.Target(T.RESOLVE, rtype, repo_s, rest[n], path_s, query,
                         "/api/resolve-cache/%s/%s/%s/%s" % (segs[2], repo_s, rest[n], quote(path_s)))
            t.body_url = True
            return t
    return _reject(404, "unknown resolve-cache URL")


def _route_api(method, segs, raw_path, query):
    # segs[0] == "api"
    if len(segs) >= 2 and segs[1] == "resolve-cache":
        if method not in ("GET", "HEAD"):
            return _not_allowed(_GET_HEAD)
        return _route_resolve_cache(segs, query)
    if len(segs) >= 3 and segs[1] in _API_TYPES:
        rtype = _API_TYPES[segs[1]]
        rest = segs[2:]
        for op, kind in (("revision", T.API_INFO), ("tree", T.API_TREE), ("paths-info", T.API_PATHS_INFO),
                         ("xet-read-token", T.XET_TOKEN)):
            for n in (2, 1):
                if len(rest) > n + 1 and rest[n] == op:
                    try:
                        repo, rev = _decode_all(rest[:n]), _decode(rest[n + 1])
                        sub = _decode_all(rest[n + 2:])
                    except UnicodeDecodeError:
                        return _reject(400, "path is not valid UTF-8 after percent-decoding")
                    if repo is None or rev is None or sub is None or not _repo_ok(repo):
                        return _reject(400, "bad repository, revision or path")
                    if kind == T.API_PATHS_INFO:
                        if sub:
                            return _reject(404, "paths-info takes no path after the revision")
                        if method != "POST":
                            return _not_allowed("POST", "paths-info takes POST")
                    elif method not in ("GET", "HEAD"):
                        return _not_allowed(_GET_HEAD)
                    if (kind == T.API_INFO or kind == T.XET_TOKEN) and sub:
                        break
                    repo_s, sub_s = "/".join(repo), "/".join(sub)
                    # canonical upstream path, as for resolve-cache above
                    up = "/api/%s/%s/%s/%s" % (segs[1], repo_s, op, quote(rev, safe=""))
                    if sub_s:
                        up += "/" + quote(sub_s)
                    return T.Target(kind, rtype, repo_s, rev, sub_s, query, up)
        if 1 <= len(rest) <= 2 and method in ("GET", "HEAD"):
            try:
                repo = _decode_all(rest)
            except UnicodeDecodeError:
                repo = None
            if repo is None or not _repo_ok(repo):
                return _reject(400, "bad repository id")
            # repo info without a revision is the info of "main"
            repo_s = "/".join(repo)
            return T.Target(T.API_INFO, rtype, repo_s, "", "", query, "/api/%s/%s" % (segs[1], repo_s))
    if method not in ("GET", "HEAD"):
        return _not_allowed(_GET_HEAD, "pulsys proxies only GET and HEAD for this API route")
    if not _raw_path_ok(segs):
        return _reject(400, "bad API path")
    return T.Target(T.API_OTHER, query=query, upstream_path=raw_path)


_HEX64 = re.compile(r"[0-9a-f]{64}")
_CHUNKS = re.compile(r"(\d{1,9})-(\d{1,9})")


def _route_cas(method, segs, query):
    """/cas/...: pulsys's own Xet CAS (--xet facade; ADR 0019)."""
    if len(segs) == 4 and segs[1] in ("v1", "v2") and segs[2] == "reconstructions":
        if method != "GET":
            return _not_allowed("GET")
        if _HEX64.fullmatch(segs[3]) is None:
            return _reject(404, "a reconstruction is asked by its file's 64-hex Xet hash")
        return T.Target(T.XET_RECON, "xet", "", segs[1][1], segs[3], query, "/" + "/".join(segs[1:]))
    if len(segs) == 4 and segs[1] == "xorbs":
        if method not in ("GET", "HEAD"):
            return _not_allowed(_GET_HEAD)
        m = _CHUNKS.fullmatch(segs[3])
        if _HEX64.fullmatch(segs[2]) is None or m is None or int(m.group(1)) >= int(m.group(2)):
            return _reject(404, "a xorb range is /cas/xorbs/{64-hex hash}/{first}-{end}")
        return T.Target(T.XET_XORB, "xet", segs[2], "", segs[3], query, "/" + "/".join(segs))
    return _reject(404, "unknown CAS route")


def route(head):
    """Classify one request. Never raises; bad input gives a REJECT target."""
    method, raw_path, query = head.method, head.path, head.query
    if method not in _KNOWN_METHODS:
        return _reject(501, "method not implemented")
    local = _LOCAL_PATHS.get(raw_path)
    if local is not None:
        if method not in ("GET", "HEAD"):
            return _not_allowed(_GET_HEAD)
        return T.Target(T.LOCAL, path=local)
    segs = raw_path[1:].split("/")
    if segs and segs[0] == "api":
        return _route_api(method, segs, raw_path, query)
    if segs[0] == "cas":
        return _route_cas(method, segs, query)
    if raw_path == "/v1/telemetry":
        if method != "POST":
            return _not_allowed("POST")
        return T.Target(T.XET_TELEMETRY, upstream_path=raw_path)
    t = _route_resolve(segs, query)
    if t is None:
        return _reject(404, "pulsys serves /{repo}/resolve/{revision}/{file} and /api/ routes only")
    if t.kind == T.RESOLVE and method not in ("GET", "HEAD"):
        return _not_allowed(_GET_HEAD)
    return t
