"""`pulsys verify`: re-hash every blob of a cache directory while no server uses it.

A blob's name is its content hash: sha256 of the bytes (LFS), or the git blob sha1,
i.e. sha1 of b"blob <size>\\0" + bytes (regular files): the names the Hub gives them as
X-Linked-Etag and ETag, and the digests fills verify before committing. "other/" blobs
are named after an ETag that is no content hash and cannot be checked.

What is bad is moved, never deleted, to v1/quarantine/ (blobs/<algo>/<name> and
meta/<aa>/<name>, with a numeric suffix when the name is taken):
  - a blob whose bytes do not match its name, or whose name is not a hash;
  - a metadata file that is not a document pulsys wrote (torn, garbage), or an entry
    whose size disagrees with its (verified) blob.
Entries whose blob was quarantined stay: with the blob gone they load as metadata only,
so HEAD still answers and the next GET refetches and re-verifies the file.
"""

import hashlib
import json
import os
import re

CHUNK = 1 << 20
_NAME = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "sha1": re.compile(r"^[0-9a-f]{40}$"),
         "other": re.compile(r"^[0-9a-f]{64}$")}


def content_hasher(algo, size):
    """The hash a blob named `<algo>/<hex>` must match, or None (unverifiable)."""
    if algo == "sha256":
        return hashlib.sha256()
    if algo == "sha1":
        return hashlib.sha1(b"blob %d\0" % size)
    return None


def check_blob(path, algo, name):
    """-> (reason or None, bytes hashed). Reason says why the blob is bad."""
    if algo not in _NAME or not _NAME[algo].match(name):
        return "name is not a %s content hash" % algo, 0
    if os.path.basename(os.path.dirname(path)) != name[:2]:
        return "stored under the wrong directory", 0
    size = os.path.getsize(path)
    h = content_hasher(algo, size)
    if h is None:
        return None, 0
    n = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
    if n != size:
        return "changed while being read", n
    if h.hexdigest() != name:
        return "content does not match its name", n
    return None, n


def _walk_blobs(store):
    """(algo, path, name) of every file under blobs/<algo>/<aa>/, in a stable order."""
    for algo in sorted(os.listdir(store.blobs)):
        top = os.path.join(store.blobs, algo)
        if not os.path.isdir(top):
            continue
        for sub in sorted(os.listdir(top)):
            d = os.path.join(top, sub)
            if os.path.isdir(d):
                for name in sorted(os.listdir(d)):
                    yield algo, os.path.join(d, name), name


def _quarantine(store, path, *parts):
    dest = os.path.join(store.root, "quarantine", *parts)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    final, i = dest, 1
    while os.path.exists(final):
        final, i = "%s.%d" % (dest, i), i + 1
    os.replace(path, final)
    return os.path.relpath(final, os.path.dirname(store.root))


def _check_meta(doc):
    """Raise ValueError/KeyError/TypeError when `doc` is not a document pulsys writes."""
    float(doc["fetched_at"])
    if doc["type"] == "rev":
        if not re.match(r"^[0-9a-f]{40}$", doc["commit"]):
            raise ValueError("bad commit")
        for k in ("rtype", "repo", "rev"):
            if not isinstance(doc[k], str):
                raise TypeError(k)
        return None
    if doc["type"] != "entry":
        raise ValueError("unknown type")
    e = doc["entry"]
    for k in ("key", "etag", "commit", "blob_id", "content_type", "content_disposition", "body"):
        if not isinstance(e[k], str):
            raise TypeError(k)
    for k in ("kind", "size", "status"):
        if not isinstance(e[k], int):
            raise TypeError(k)
    if not isinstance(doc["immutable"], bool) or not isinstance(e["headers"], list):
        raise TypeError("immutable or headers")
    return e


def verify(store):
    """Check every blob and metadata file of `store` (held exclusively by the caller).
    Returns a report dict; report["problems"] counts what was quarantined."""
    rep = {"cache_dir": os.path.dirname(store.root), "blobs_checked": 0, "bytes_hashed": 0,
           "unverifiable": 0, "bad_blobs": [], "metadata_files": 0, "bad_metadata": [],
           "entries_to_refetch": 0, "partial_files": len(os.listdir(store.tmp))}
    sizes = {}
    for algo, path, name in _walk_blobs(store):
        blob_id = algo + "/" + name
        try:
            why, n = check_blob(path, algo, name)
        except OSError as e:
            why, n = "unreadable: %s" % (e.strerror or e), 0
        rep["blobs_checked"] += 1
        rep["bytes_hashed"] += n
        if why is None:
            sizes[blob_id] = os.path.getsize(path)
            if content_hasher(algo, 0) is None:
                rep["unverifiable"] += 1
            continue
        rep["bad_blobs"].append({"blob": blob_id, "reason": why,
                                 "moved_to": _quarantine(store, path, "blobs", algo, name)})
    bad_ids = {b["blob"] for b in rep["bad_blobs"]}
    for sub in sorted(os.listdir(store.meta)):
        d = os.path.join(store.meta, sub)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith(".json"):
                continue
            path = os.path.join(d, name)
            rep["metadata_files"] += 1
            try:
                with open(path, "rb") as f:
                    e = _check_meta(json.loads(f.read()))
                blob_id = e and e["blob_id"]
                if blob_id in bad_ids:
                    rep["entries_to_refetch"] += 1
                elif blob_id in sizes and sizes[blob_id] != e["size"]:
                    raise ValueError("size %d but its blob has %d bytes" % (e["size"], sizes[blob_id]))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                rep["bad_metadata"].append({"path": os.path.relpath(path, os.path.dirname(store.root)),
                                            "reason": "%s: %s" % (type(exc).__name__, exc),
                                            "moved_to": _quarantine(store, path, "meta", sub, name)})
    rep["problems"] = len(rep["bad_blobs"]) + len(rep["bad_metadata"])
    return rep


def render(rep):
    """The human summary of a report: a few lines."""
    lines = ["pulsys verify: %s" % rep["cache_dir"],
             "blobs checked: %d (%d bytes hashed, %d without a content hash to check)"
             % (rep["blobs_checked"], rep["bytes_hashed"], rep["unverifiable"]),
             "metadata files checked: %d" % rep["metadata_files"]]
    for b in rep["bad_blobs"]:
        lines.append("bad blob %s: %s; moved to %s" % (b["blob"], b["reason"], b["moved_to"]))
    for m in rep["bad_metadata"]:
        lines.append("bad metadata %s: %s; moved to %s" % (m["path"], m["reason"], m["moved_to"]))
    if rep["entries_to_refetch"]:
        lines.append("entries whose blob was quarantined: %d (HEAD still answers; the next GET "
                     "refetches)" % rep["entries_to_refetch"])
    if rep["partial_files"]:
        lines.append("partial fills left in v1/tmp: %d (removed when a server starts)" % rep["partial_files"])
    lines.append("result: %s" % ("ok" if not rep["problems"] else
                                 "%d problem(s) found and quarantined" % rep["problems"]))
    return "\n".join(lines)
