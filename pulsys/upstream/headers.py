"""What crosses from upstream responses to clients, and the rewrites (hf-protocol.md §7).

Kept: the Hub's metadata and error headers (X-Repo-Commit, X-Linked-*, ETag, X-Error-*,
rate-limit hints, relative Location). Dropped: hop-by-hop headers, cookies, every Xet
signal (X-Xet-*, Link rel="xet-auth" / "xet-reconstruction-info"), so clients with
hf_xet installed still download over HTTP through the cache (§5).
"""

import json
import re

PASS = ("content-type", "etag", "x-repo-commit", "x-linked-etag", "x-linked-size",
        "x-error-code", "x-error-message", "retry-after", "ratelimit", "ratelimit-policy",
        "content-disposition", "last-modified", "accept-ranges")

_LINK_SPLIT = re.compile(r',\s*(?=<)')
_LINK_RE = re.compile(r'^\s*<([^>]*)>(.*)$', re.S)
_REL_RE = re.compile(r';\s*rel\s*=\s*"?([^";]+)"?', re.I)


def _rewrite_url(url, upstream, base):
    if base and url.startswith(upstream + "/"):
        return base + url[len(upstream):]
    return url


def filter_link(value, upstream, base):
    """Drop xet-* relations; point upstream URLs (rel="next" pagination) at pulsys."""
    kept = []
    for part in _LINK_SPLIT.split(value):
        m = _LINK_RE.match(part)
        if not m:
            continue
        rel = _REL_RE.search(m.group(2))
        if rel and rel.group(1).strip().lower().startswith("xet-"):
            continue
        kept.append("<%s>%s" % (_rewrite_url(m.group(1), upstream, base), m.group(2)))
    return ", ".join(kept)


def client_headers(resp_headers, upstream, base=None, keep_link=True):
    """((name, value), ...) to send to the client, from an upstream response's headers.

    Link values are rewritten only when `base` is given; cached responses keep the
    upstream form and are rewritten when served (so a Host header cannot poison them).
    Location is kept verbatim when relative; an absolute one on the upstream origin is
    made relative (same-origin redirects break huggingface_hub 2.x, §7.7)."""
    out = []
    for name, value in resp_headers.items():
        ln = name.lower()
        if ln in PASS:
            out.append((name, value))
        elif ln == "location":
            if value.startswith(upstream + "/"):
                value = value[len(upstream):]
            out.append(("Location", value))
        elif ln == "link" and keep_link:
            v = filter_link(value, upstream, base) if base else filter_link(value, upstream, None)
            if v:
                out.append(("Link", v))
    return tuple(out)


def rewrite_links(headers, upstream, base):
    if not base:
        return headers
    return tuple((n, filter_link(v, upstream, base)) if n.lower() == "link" else (n, v)
                 for n, v in headers)


def strip_xet_json(body):
    """Remove every "xetHash" key from a JSON document (tree / paths-info / info).
    Returns the body unchanged when there is none, so bytes pass through untouched."""
    if b'"xetHash"' not in body:
        return body
    try:
        doc = json.loads(body)
    except ValueError:
        return body

    def walk(x):
        if isinstance(x, dict):
            x.pop("xetHash", None)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(doc)
    return json.dumps(doc, separators=(",", ":")).encode()


def bare_etag(value):
    """ETag / X-Linked-Etag header value -> bare hex (W/ and quotes removed)."""
    if not value:
        return ""
    v = value.strip()
    if v.startswith("W/"):
        v = v[2:]
    return v.strip('"')
