"""The single cache-key normalisation.

Every plane that stores or looks up something calls cache_key(); nothing else builds
keys. A key never contains credentials or the query of a signed CDN URL (those change
per request, hf-protocol.md §7.4), so two clients asking for the same bytes meet at the
same key whatever token or URL signature they carried.
"""


def cache_key(kind, rtype, repo, rev, path="", extra=""):
    """Key for one cacheable thing.

    kind: a target kind (RESOLVE, API_INFO, API_TREE, API_PATHS_INFO) or REV for a
    revision -> commit mapping. rev is the decoded revision; path the decoded file path;
    extra a normalised query or body digest for API listings.
    """
    return "%d|%s|%s|%s|%s|%s" % (kind, rtype, _field(repo), _field(rev), _field(path), _field(extra))


def _field(s):
    """Fields joined with "|" must not contain it, or two targets could share a key (a
    revision "a|b" with file "c", and revision "a" with file "b|c": git ref names and
    file names may both contain "|"). Escaping "%" first keeps the mapping one-to-one;
    fields without either character, i.e. nearly all, are unchanged."""
    if "|" in s or "%" in s:
        return s.replace("%", "%25").replace("|", "%7C")
    return s


def repo_prefix(kind, rtype, repo):
    """The start every key of `kind` in that repo shares (prefix scans of the index)."""
    return "%d|%s|%s|" % (kind, rtype, _field(repo))


REV = 100  # kind used for revision -> commit mappings


def target_key(t, rev=None):
    """cache_key for a routed Target (optionally with the revision replaced by a commit)."""
    return cache_key(t.kind, t.rtype, t.repo, t.rev if rev is None else rev, t.path)


def rev_key(rtype, repo, rev):
    return cache_key(REV, rtype, repo, rev)


def split_key(key):
    """The fields of a cache_key, unescaped: (kind, rtype, repo, rev, path, extra), or
    None when `key` is not one."""
    parts = key.split("|")
    if len(parts) != 6 or not parts[0].isdigit():
        return None
    fields = [p.replace("%7C", "|").replace("%25", "%") if "%" in p else p for p in parts[1:]]
    return (int(parts[0]),) + tuple(fields)
