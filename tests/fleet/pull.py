"""A model pull as huggingface_hub's snapshot_download does it (hf-protocol.md §2.2):
revision -> commit, the tree (following rel="next" links verbatim), then per file a
HEAD at the commit (following the Hub's relative 307 for regular files) and a GET."""

import hashlib
import random
import urllib.parse

import requests


def check(r):
    """Raise, saying who answered what, unless r is a success."""
    if not r.ok:
        raise IOError("%s %s -> %d from %s: %s %r" % (r.request.method, r.url, r.status_code,
                      r.headers.get("X-Pulsys-Node", "?"), r.headers.get("X-Error-Message", ""), r.content[:200]))
    return r


def session(key=None):
    s = requests.Session()
    s.trust_env = False            # loopback only, never a proxy from the environment
    s.headers["Accept-Encoding"] = "identity"
    if key:
        s.headers["Authorization"] = "Bearer " + key
    return s


def tree(s, base, repo, sha):
    """-> ([file paths], [the rel=next URLs followed])"""
    url = "%s/api/models/%s/tree/%s?recursive=true&expand=false" % (base, repo, sha)
    paths, links = [], []
    while url:
        r = s.get(url, timeout=30)
        check(r)
        paths += [e["path"] for e in r.json() if e["type"] == "file"]
        url = r.links.get("next", {}).get("url")
        if url:
            links.append(url)
    return paths, links


def pull(base, repo, key=None, shuffle=None):
    """-> {path: (sha256 of the body, X-Pulsys-Node of the GET or None)}, plus the tree's
    next links. Raises on any HTTP error or a body shorter or longer than announced."""
    s = session(key)
    r = s.get("%s/api/models/%s/revision/main" % (base, repo), timeout=30)
    check(r)
    sha = r.json()["sha"]
    paths, links = tree(s, base, repo, sha)
    if shuffle is not None:
        random.Random(shuffle).shuffle(paths)
    got = {}
    for path in paths:
        url = "%s/%s/resolve/%s/%s" % (base, repo, sha, urllib.parse.quote(path))
        h = s.head(url, allow_redirects=True, timeout=60)
        check(h)
        size = int(h.headers.get("X-Linked-Size") or h.headers["Content-Length"])
        r = s.get(h.url, stream=True, timeout=60)
        check(r)
        digest, n = hashlib.sha256(), 0
        for chunk in r.iter_content(1 << 20):
            digest.update(chunk)
            n += len(chunk)
        if n != size:
            raise IOError("%s: %d bytes, HEAD announced %d" % (path, n, size))
        got[path] = (digest.hexdigest(), r.headers.get("X-Pulsys-Node"))
    return got, links
