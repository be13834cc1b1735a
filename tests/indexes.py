"""Indexes for tests: a writer's Index (and reactors' IndexViews) over an LMDB
environment in a directory the test owns."""

import os
import tempfile

from pulsys.cache.index import Index
from pulsys.cache.index_view import IndexView
from pulsys.cache.indexdb import IndexDB
from pulsys.cache.store import Store


class _Blobs:
    blob_path = Store.blob_path

    def __init__(self, root):
        self.blobs = os.path.join(root, "blobs")


def blob_path_under(root):
    """Store.blob_path for a cache whose v1 directory is `root`."""
    return _Blobs(root).blob_path


def new_index(root=None, ttl=0.0):
    """An empty Index in `root` (a new temporary directory when None)."""
    root = root or tempfile.mkdtemp(prefix="pulsys-index-")
    return Index(IndexDB(str(root), writer=True), blob_path_under(str(root)), ttl)


def view_of(index, **kw):
    return IndexView(index.db, index.blob_path, index.ttl, **kw)
