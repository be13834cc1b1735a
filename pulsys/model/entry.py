"""Entry: everything needed to answer a cached request without asking upstream.

Two kinds:
  FILE    a file's metadata (size, etag, commit, HF headers) and, once the bytes are on
          disk and verified, the path of its blob. A FILE entry without a blob answers
          HEAD (hf_hub_download's metadata request) but not GET.
  CANNED  a complete small response kept in memory: a relative redirect the Hub sent,
          or a negative answer such as EntryNotFound at a commit.

Entries are immutable once published: a fill publishes a new Entry object instead of
mutating one a reactor may be reading. `expires` is a monotonic deadline (0 = never).
"""

FILE = 1
CANNED = 2


class Entry:
    __slots__ = ("kind", "key", "size", "etag", "commit", "lfs", "blob_id", "blob_path",
                 "content_type", "content_disposition", "status", "headers", "body",
                 "expires", "heads", "body_mem", "restart_resumes", "head_only")

    def __init__(self, kind, key, size=0, etag="", commit="", lfs=False, blob_id="",
                 blob_path=None, content_type="", content_disposition="", status=200,
                 headers=(), body=b"", expires=0.0):
        self.kind = kind
        self.key = key
        self.size = size                  # FILE: body length in bytes
        self.etag = etag                  # FILE: bare etag (git sha1 or sha256 hex), no quotes
        self.commit = commit              # FILE: X-Repo-Commit
        self.lfs = lfs                    # FILE: send X-Linked-Etag / X-Linked-Size
        self.blob_id = blob_id            # FILE: "sha256/<hex>" or "sha1/<hex>"
        self.blob_path = blob_path        # FILE: absolute path of the verified blob, or None
        self.content_type = content_type
        self.content_disposition = content_disposition
        self.status = status              # CANNED: status code
        self.headers = headers            # CANNED: ((name, value), ...) as received upstream;
        #                                   FILE: extra head lines (--xet facade's Xet signals)
        self.body = body                  # CANNED: body bytes
        self.expires = expires
        self.heads = None                 # pre-rendered heads, set by http1.heads.prepare()
        self.body_mem = None              # FILE: the body itself when small (Store.small_body)
        # FILE: a fill of this blob failed verification after its bytes could be streamed,
        # so a client may hold a wrong prefix: open-ended resumes get the whole body (ADR 0012)
        self.restart_resumes = False
        # CANNED: the answer to a HEAD (a 4xx), so without the body the Hub sends to a GET:
        # it answers HEAD only, and a GET of the same target asks upstream (plan_warm)
        self.head_only = False

    def with_blob(self, blob_path):
        e = Entry(self.kind, self.key, self.size, self.etag, self.commit, self.lfs, self.blob_id,
                  blob_path, self.content_type, self.content_disposition, self.status,
                  self.headers, self.body, self.expires)
        e.restart_resumes = self.restart_resumes
        e.head_only = self.head_only
        return e

    def with_expiry(self, expires):
        e = self.with_blob(self.blob_path)
        e.expires = expires
        e.body_mem = self.body_mem
        return e

    def to_json(self):
        return {"kind": self.kind, "key": self.key, "size": self.size, "etag": self.etag,
                "commit": self.commit, "lfs": self.lfs, "blob_id": self.blob_id,
                "content_type": self.content_type, "content_disposition": self.content_disposition,
                "status": self.status, "headers": [list(h) for h in self.headers],
                "body": self.body.decode("latin-1"), "head_only": self.head_only}

    @classmethod
    def from_json(cls, d, blob_path, expires):
        e = cls(d["kind"], d["key"], d["size"], d["etag"], d["commit"], d["lfs"], d["blob_id"],
                blob_path, d["content_type"], d["content_disposition"], d["status"],
                tuple(tuple(h) for h in d["headers"]), d["body"].encode("latin-1"), expires)
        e.head_only = bool(d.get("head_only"))     # absent in documents written before it
        return e

    def __repr__(self):
        return "Entry(%s %s size=%d blob=%s)" % ("FILE" if self.kind == FILE else "CANNED",
                                                 self.key, self.size, self.blob_path)
