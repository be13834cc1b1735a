"""The fleet's shared tier: one S3-compatible bucket that every node reads before the Hub
and writes behind it (--shared-store s3://BUCKET/PREFIX; docs/fleet.md, ADR 0010).

    <prefix>/blobs/sha256/<hex>         LFS bodies, named by their sha256
    <prefix>/blobs/sha1/<hex>           regular files, named by their git blob sha1
    <prefix>/meta/<sha256 of key>.json  one Entry or revision mapping (JSON, as pulsys
                                        kept them under v1/meta/ before its LMDB index),
                                        with their fetched_at

Reading (pool threads). On a local miss the Upstream service asks here before the Hub:
the metadata document for the key (for a branch or tag: the revision mapping, then the
entry at its commit), taken when it is fresh by its fetched_at and --revision-ttl, as
the local index judges its own records; the service publishes what it takes. For a
body, a HEAD on the blob's object; when it is there, the service runs a fill
(upstream/fill.py) with this tier as its `origin`: pieces are GETs of a presigned URL,
with the same Range pieces, resume and whole-file verification as a body from the Hub,
so a wrong object in the bucket is never committed, and is deleted (fill_ended).

Writing (two background threads of its own, never a reactor or fill thread). Every
metadata document the service saves, and every blob a fill from the Hub commits, is
queued; blobs go up with boto3's managed transfer (multipart above 64 MiB) from a hard
link under tmp/, so an eviction during the upload does not cut it short. Blob keys are
content addresses, so two nodes uploading one blob write the same bytes.
"""

import collections
import functools
import hashlib
import json
import os
import threading
import time
import urllib.parse

from pulsys import metrics as M
from pulsys.errors import CacheCorrupt
from pulsys.model import target as T
from pulsys.model.entry import CANNED, FILE, Entry
from pulsys.model.key import rev_key
from pulsys.upstream.fill import Origin
from pulsys.upstream.service import blob_id_for

PRESIGN_SECONDS = 3600      # a presigned URL's life; a fill that outlives it presigns again (403)
MAX_DOC = 64 << 20          # a metadata document larger than this is not read (API listings are the big ones)
MULTIPART_AT = 64 << 20     # blobs from this size up are uploaded in parts
PART = 16 << 20             # part size, grown for huge blobs (S3 allows 10,000 parts)
MAX_PARTS = 9000
QUEUE_MAX = 100000          # queued uploads per kind; more are dropped (counted in shared_errors)
AVOID_SECONDS = 60.0        # after a fill from the bucket failed, that blob comes from the Hub this long
KNOWN_MAX = 200000          # immutable metadata keys remembered as already in the bucket


class SharedStoreError(Exception):
    """--shared-store cannot be used (bucket missing, credentials refused, endpoint down)."""


def open_tier(config, store, counters, node_id, log, http):
    """A SharedTier for config.shared_store, after checking that the bucket answers.
    http: the requests session fills from the bucket fetch presigned URLs with.
    Endpoint, region and credentials come from the flags, else from boto3's standard
    settings (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)."""
    import boto3
    import botocore.config
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = config.shared_store
    where = "s3://%s/%s" % (bucket, prefix) if prefix else "s3://%s" % bucket
    try:
        session = boto3.session.Session(region_name=config.shared_store_region or None)
        endpoint = config.shared_store_endpoint or None
        cfg = botocore.config.Config(
            connect_timeout=min(5.0, config.upstream_timeout), read_timeout=config.upstream_timeout,
            retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=32,
            signature_version="s3v4")
        client = session.client("s3", endpoint_url=endpoint, config=cfg)
        host = urllib.parse.urlsplit(client.meta.endpoint_url).hostname or ""
        if not host.endswith(".amazonaws.com"):
            # S3-compatible servers (MinIO, Ceph, moto) are addressed by path, AWS by host name
            client = session.client("s3", endpoint_url=endpoint,
                                    config=cfg.merge(botocore.config.Config(s3={"addressing_style": "path"})))
        client.head_bucket(Bucket=bucket)
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        raise SharedStoreError("--shared-store %s: the bucket answered %s (%s)" % (
            where, code or "an error", "no such bucket" if code in ("404", "NoSuchBucket") else
            "check the credentials and the bucket's policy" if code in ("403", "AccessDenied")
            else e)) from None
    except (BotoCoreError, ValueError) as e:
        raise SharedStoreError("--shared-store %s: %s" % (where, e)) from None
    return SharedTier(client, bucket, prefix, store, counters, node_id, log,
                      TransferConfig, (ClientError, BotoCoreError, OSError), http,
                      config.revision_ttl, (config.upstream_timeout, config.upstream_timeout))


class SharedTier:
    def __init__(self, client, bucket, prefix, store, counters, node_id, log, transfer_config,
                 errors, http, ttl, timeout):
        self.s3 = client
        self.http = http                 # a requests session: presigned GETs of fills
        self.ttl = ttl                   # --revision-ttl: how long a branch's document is fresh
        self.timeout = timeout
        self.bucket = bucket
        self.prefix = prefix + "/" if prefix else ""
        self.where = "s3://%s/%s" % (bucket, prefix) if prefix else "s3://%s" % bucket
        # the origin fills connect to: presigned URLs may name the bucket in the host (AWS)
        u = urllib.parse.urlsplit(self.presign(self.prefix + "blobs/"))
        self.endpoint = "%s://%s" % (u.scheme, u.netloc)
        self.store = store
        self.c = counters
        self.node_id = node_id
        self.log = log
        self.transfer_config = transfer_config
        self.errors = errors             # what a boto3 call may raise
        self.lock = threading.Condition()
        self.meta_q = collections.OrderedDict()   # key -> (doc, digest if immutable); newer replaces
        self.blob_q = collections.deque()         # (blob id, size)
        self.busy = 0                   # uploads in progress
        self.stopping = False
        self.from_bucket = set()        # blob ids filled from the bucket: not uploaded back
        self.avoid = {}                 # blob id -> monotonic time until which the bucket copy is skipped
        self.known = collections.OrderedDict()    # key -> digest of the immutable entry the bucket has
        self.threads = [threading.Thread(target=self._uploader, args=(q,), daemon=True,
                                         name="pulsys-shared-%s" % q) for q in ("meta", "blob")]
        # the bucket as a fill's origin: pieces are GETs of the presigned URL (no Hub
        # token, counted in shared_requests, bytes in shared_body_bytes), no redirect is
        # followed, and a copy that fails verification is not fetched from the bucket
        # again: fill_ended deletes it and the next request goes to the Hub
        self.origin = Origin(self._request, _no_redirects, body_counter=M.SHARED_BODY_BYTES,
                             refetches=False, on_end=self.fill_ended)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self):
        for t in self.threads:
            t.start()

    def close(self):
        """Stop uploading; what is still queued is not uploaded (a later fill of the blob, on
        any node, uploads it). Waits up to 5 s for an upload in progress."""
        with self.lock:
            self.stopping = True
            left = len(self.meta_q) + len(self.blob_q)
            self.meta_q.clear()
            self.blob_q.clear()
            self.lock.notify_all()
        for t in self.threads:
            if t.is_alive():
                t.join(5)
        if left:
            self.log.warning("shared store uploads dropped at shutdown", count=left)

    def stats(self):
        with self.lock:
            pending = len(self.meta_q) + len(self.blob_q) + self.busy
        return {"shared_store": self.where, "shared_uploads_pending": pending}

    # -- names -------------------------------------------------------------------------

    def blob_key(self, blob_id):
        """The object of a content-addressed blob, or None (an etag that names no content)."""
        algo, _, hexd = blob_id.partition("/")
        if algo not in ("sha256", "sha1") or not hexd:
            return None
        return "%sblobs/%s/%s" % (self.prefix, algo, hexd)

    def meta_key(self, key):
        return "%smeta/%s.json" % (self.prefix, hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest())

    def presign(self, object_key):
        """A GET URL for the object (signed here, no request)."""
        return self.s3.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": object_key},
                                              ExpiresIn=PRESIGN_SECONDS)

    # -- reading -----------------------------------------------------------------------

    def _error(self, what, e):
        self.c[M.SHARED_ERRORS] += 1
        self.log.warning("shared store " + what + " failed", store=self.where, error=str(e) or type(e).__name__)

    @staticmethod
    def _missing(e):
        code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
        return code in ("404", "NoSuchKey", "NotFound")

    def _get_doc(self, key):
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=self.meta_key(key))
            with obj["Body"] as body:
                data = body.read(MAX_DOC + 1)
        except self.errors as e:
            if not self._missing(e):
                self._error("read", e)
            return None
        try:
            doc = json.loads(data) if len(data) <= MAX_DOC else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            self._error("read", ValueError("%s is not a pulsys metadata document" % self.meta_key(key)))
            return None
        return doc

    def _left(self, doc, now_wall):
        """Seconds the document stays fresh (None: forever); <= 0 when stale."""
        if doc.get("immutable"):
            return None
        return float(doc["fetched_at"]) + self.ttl - now_wall

    def entry(self, key, body_url, now_wall, now_mono):
        """The bucket's fresh Entry for `key`, or None. The caller publishes it."""
        doc = self._get_doc(key)
        if doc is None:
            return None
        try:
            ed = doc["entry"]
            if doc.get("type") != "entry" or ed["key"] != key or ed["kind"] not in (FILE, CANNED):
                raise ValueError("not the entry for this key")
            if ed["kind"] == FILE and blob_id_for(ed["etag"]) != ed["blob_id"]:
                raise ValueError("blob id does not match the etag")
            left = self._left(doc, now_wall)
            if left is not None and left <= 0:
                return None
            e = Entry.from_json(ed, None, 0.0 if left is None else now_mono + left)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._error("read", ValueError("%s: %s" % (self.meta_key(key), exc)))
            return None
        if body_url and e.kind == CANNED and 300 <= e.status < 400:
            return None          # a redirect that would lead back here (cache/index.py lookup)
        if left is None:
            self._know(e.key, _digest(e.to_json()))
        self.c[M.SHARED_META_HITS] += 1
        return e

    def commit(self, t, now_wall):
        """The bucket's fresh commit for t's branch or tag: (commit, fetched_at, seconds
        it stays fresh), or None. The caller sets it in the index."""
        key = rev_key(t.rtype, t.repo, t.rev)
        doc = self._get_doc(key)
        if doc is None:
            return None
        try:
            commit, fetched = doc["commit"], float(doc["fetched_at"])
            if doc.get("type") != "rev" or doc["key"] != key or not T.is_commit(commit):
                raise ValueError("not the revision mapping for this key")
        except (KeyError, TypeError, ValueError) as exc:
            self._error("read", ValueError("%s: %s" % (self.meta_key(key), exc)))
            return None
        left = fetched + self.ttl - now_wall
        if left <= 0:
            return None
        self.c[M.SHARED_META_HITS] += 1
        return commit, fetched, left

    def has_blob(self, blob_id, size):
        key = self.blob_key(blob_id)
        if key is None:
            return False
        until = self.avoid.get(blob_id)
        if until is not None:
            if until > time.monotonic():
                return False
            self.avoid.pop(blob_id, None)
        return self._exists(key, size)

    def _exists(self, key, size):
        try:
            h = self.s3.head_object(Bucket=self.bucket, Key=key)
        except self.errors as e:
            if not self._missing(e):
                self._error("lookup", e)
            return False
        return h.get("ContentLength") == size

    # -- filling from the bucket (pool threads) -----------------------------------------

    def start_fill(self, blob_id):
        """A fill of this blob from the bucket begins (its origin is self.origin): -> its
        presigned URL and the function that presigns a new one when that one expires."""
        key = self.blob_key(blob_id)
        with self.lock:
            self.from_bucket.add(blob_id)
        self.c[M.SHARED_FILLS] += 1
        return self.presign(key), functools.partial(self.presign, key)

    def _request(self, method, url, headers):
        self.c[M.SHARED_REQUESTS] += 1
        return self.http.request(method, url, headers=headers, stream=True, allow_redirects=False,
                                    timeout=self.timeout)

    def fill_ended(self, fill):
        """A fill from the bucket ended (any thread). When it failed, that blob comes from
        the Hub for a while; a copy that failed verification is deleted."""
        with self.lock:
            self.from_bucket.discard(fill.blob_id)
        if fill.error is None:
            return
        self.avoid[fill.blob_id] = time.monotonic() + AVOID_SECONDS
        if isinstance(fill.error, CacheCorrupt):
            self.c[M.SHARED_CORRUPT] += 1
            key = self.blob_key(fill.blob_id)
            self.log.warning("shared store object is not the blob it names; deleting it",
                             store=self.where, key=key, error=str(fill.error))
            try:
                self.s3.delete_object(Bucket=self.bucket, Key=key)
            except self.errors as e:
                self._error("delete", e)

    # -- writing -----------------------------------------------------------------------

    def _know(self, key, digest):
        with self.lock:
            self.known[key] = digest
            if len(self.known) > KNOWN_MAX:
                self.known.popitem(last=False)

    def _queue(self, q, item, key=None):
        with self.lock:
            if self.stopping:
                return
            if key is not None:
                q[key] = item
            else:
                q.append(item)
            if len(q) > QUEUE_MAX:
                dropped = q.popitem(last=False) if key is not None else q.popleft()
                self.c[M.SHARED_ERRORS] += 1
                self.log.warning("shared store upload queue full; dropped one", item=str(dropped)[:200])
            self.lock.notify_all()

    def entry_saved(self, entry, fetched_at, immutable):
        """The service saved this entry's metadata (pool thread): upload the same document,
        unless the bucket has this very entry for good (a key at a commit is saved again
        when its blob lands, and may change kind: the Hub's 307 first, the file later)."""
        ed = entry.to_json()
        digest = _digest(ed) if immutable else None
        if digest is not None and self.known.get(entry.key) == digest:
            return
        doc = {"type": "entry", "fetched_at": fetched_at, "immutable": immutable, "entry": ed}
        self._queue(self.meta_q, (doc, digest), entry.key)

    def rev_saved(self, key, rtype, repo, rev, commit, fetched_at):
        doc = {"type": "rev", "key": key, "rtype": rtype, "repo": repo, "rev": rev, "commit": commit,
               "fetched_at": fetched_at}
        self._queue(self.meta_q, (doc, None), key)

    def blob_committed(self, blob_id, size):
        """A fill committed a blob (a fill thread; the service's Committer calls it): queue
        it for upload when it came from the Hub."""
        with self.lock:
            if blob_id in self.from_bucket:
                self.from_bucket.discard(blob_id)
                return
        if self.blob_key(blob_id) is not None:
            self._queue(self.blob_q, (blob_id, size))

    def _uploader(self, which):
        q = self.meta_q if which == "meta" else self.blob_q
        while True:
            with self.lock:
                while not (q or self.stopping):
                    self.lock.wait()
                if self.stopping:
                    return
                item = q.popitem(last=False) if which == "meta" else q.popleft()
                self.busy += 1
            try:
                if which == "meta":
                    self._put_meta(item[0], *item[1])
                else:
                    self._put_blob(*item)
            except self.errors as e:
                self._error("upload", e)
            except Exception:         # a bug here must not end the uploader
                self.c[M.SHARED_ERRORS] += 1
                self.log.exception("shared store upload failed", item=str(item)[:200])
            finally:
                with self.lock:
                    self.busy -= 1

    def _put_meta(self, key, doc, digest):
        data = json.dumps(doc, separators=(",", ":")).encode()
        self.s3.put_object(Bucket=self.bucket, Key=self.meta_key(key), Body=data,
                           ContentType="application/json", Metadata={"pulsys-node": self.node_id})
        self.c[M.SHARED_META_UPLOADS] += 1
        if digest is not None:
            self._know(key, digest)

    def _put_blob(self, blob_id, size):
        key = self.blob_key(blob_id)
        if self._exists(key, size):
            return                      # another node uploaded it
        link = self.store.new_part_path() + ".upload"
        try:
            os.link(self.store.blob_path(blob_id), link)
        except FileNotFoundError:
            return                      # evicted before its turn came
        try:
            if os.path.getsize(link) != size:
                return
            cfg = self.transfer_config(multipart_threshold=MULTIPART_AT, max_concurrency=4,
                                       multipart_chunksize=max(PART, -(-size // MAX_PARTS)))
            self.s3.upload_file(link, self.bucket, key, Config=cfg, ExtraArgs={
                "ContentType": "application/octet-stream", "Metadata": {"pulsys-node": self.node_id}})
        finally:
            self.store.discard(link)
        self.c[M.SHARED_UPLOADS] += 1
        self.c[M.SHARED_UPLOAD_BYTES] += size


def _digest(entry_json):
    return hashlib.sha256(json.dumps(entry_json, sort_keys=True).encode()).digest()


def _no_redirects(url):
    return False
