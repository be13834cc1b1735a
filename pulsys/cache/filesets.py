"""Complete file lists of commits, learned from cached API answers.

A commit is immutable, so once pulsys holds a listing of every file at one, any other
path at that commit is a 404 EntryNotFound that needs no upstream request (hf-protocol.md
§9: clients probe optional files that are mostly absent). Only listings known to be
complete count:

- a repo info (`/api/{type}s/{id}[/revision/{rev}]`) with `siblings`: the files at its
  `sha`. huggingface_hub trusts `siblings` only when it holds 1 to 50,000 names
  (_snapshot_download.py, VERY_LARGE_REPO_THRESHOLD, 0.36.2), and so does this;
- a recursive tree of the root at a commit (`/tree/{commit}?recursive=true`), once every
  page of it is cached: from the page without a cursor, along each page's
  `Link: rel="next"`, to a page without one. A tree of a folder, or not recursive, lists
  only part of the commit and never counts.

Paths-info answers cover only the paths they were asked; the upstream service turns
those into negative entries of their own. The lists are rebuilt at start from the cached
documents (`learn_all`). Pool threads write (whole frozensets, one dict store each);
anyone may read. Imports only model.
"""

import json
import re
from urllib.parse import urlsplit

from pulsys.model import target as T
from pulsys.model.entry import CANNED
from pulsys.model.key import cache_key, split_key

SIBLINGS_MAX = 50000
TREE_PARAMS = frozenset(("recursive", "expand", "cursor"))   # anything else may filter the list
MAX_PAGES = 100000
_NEXT = re.compile(r'<([^>]*)>\s*;[^,]*rel\s*=\s*"?next"?', re.I)


def _true(v):
    return v.lower() in ("1", "true")


def first_page_query(query):
    """The query of the first page of the recursive root tree `query` belongs to (its
    cursor removed, the rest in order), or None when it is not such a listing."""
    kept, recursive = [], False
    for part in query.split("&") if query else ():
        name, _, value = part.partition("=")
        if name not in TREE_PARAMS:
            return None
        if name == "cursor":
            continue
        if name == "recursive":
            recursive = _true(value)
        kept.append(part)
    return "&".join(kept) if recursive else None


def next_query(headers):
    """The query of the next page named by a cached answer's Link header; "" when there
    is no next page, None when it names one without a query (nothing to look up)."""
    for name, value in headers:
        if name.lower() == "link":
            m = _NEXT.search(value)
            if m:
                return urlsplit(m.group(1)).query or None
    return ""


def _json(entry):
    if entry is None or entry.kind != CANNED or entry.status != 200:
        return None
    try:
        return json.loads(entry.body)
    except ValueError:
        return None


class FileSets:
    def __init__(self):
        self._names = {}    # (rtype, repo, commit) -> frozenset of its file and folder paths

    def __len__(self):
        return len(self._names)

    def add(self, rtype, repo, commit, files):
        names = set()
        for f in files:
            names.add(f)
            parts = f.split("/")
            for i in range(1, len(parts)):
                names.add("/".join(parts[:i]))
        self._names[(rtype, repo, commit)] = frozenset(names)

    def knows(self, rtype, repo, commit):
        return (rtype, repo, commit) in self._names

    def missing(self, rtype, repo, commit, path):
        """True when the complete list of that commit has neither a file nor a folder `path`."""
        names = self._names.get((rtype, repo, commit))
        return names is not None and path not in names

    # -- learning from cached API answers ---------------------------------------------

    def learn(self, key, entry, get):
        """`entry` is cached under `key`; get(key) -> a cached Entry or None (the index)."""
        f = split_key(key)
        if f is None:
            return
        kind, rtype, repo, rev, path, extra = f
        if kind == T.API_INFO:
            self._learn_info(rtype, repo, entry)
        elif kind == T.API_TREE and not path and T.is_commit(rev) and not self.knows(rtype, repo, rev):
            first = first_page_query(extra)
            if first is not None:
                self._learn_tree(rtype, repo, rev, first, get)

    def learn_all(self, index):
        """At start: every cached info, and every recursive root tree from its first page
        (index: cache.index.Index; two prefix scans of its keys)."""
        for kind in (T.API_INFO, T.API_TREE):
            for e in index.entries("%d|" % kind):
                if e.kind != CANNED or e.status != 200:
                    continue
                f = split_key(e.key)
                if f is not None and (f[0] == T.API_INFO or "cursor=" not in f[5]):
                    self.learn(e.key, e, index.get)

    def _learn_info(self, rtype, repo, entry):
        doc = _json(entry)
        if not isinstance(doc, dict):
            return
        sha, siblings = doc.get("sha"), doc.get("siblings")
        if not isinstance(sha, str) or not T.is_commit(sha) or not isinstance(siblings, list) \
                or not 0 < len(siblings) <= SIBLINGS_MAX:
            return
        files = [s.get("rfilename") for s in siblings if isinstance(s, dict)]
        if len(files) == len(siblings) and all(isinstance(n, str) and n for n in files):
            self.add(rtype, repo, sha, files)

    def _learn_tree(self, rtype, repo, commit, query, get):
        pages, seen = [], set()
        while True:           # every page there? (headers only: cheap for long listings)
            e = get(cache_key(T.API_TREE, rtype, repo, commit, "", query))
            if e is None or e.kind != CANNED or e.status != 200 or query in seen \
                    or len(pages) >= MAX_PAGES:
                return
            seen.add(query)
            pages.append(e)
            query = next_query(e.headers)
            if query is None:
                return
            if query == "":
                break
        files = []
        for e in pages:
            doc = _json(e)
            if not isinstance(doc, list):
                return
            for item in doc:
                if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                    return
                files.append(item["path"])
        self.add(rtype, repo, commit, files)
