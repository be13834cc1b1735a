"""The single cache-key normalisation.

Every plane that stores or looks up something calls cache_key(); nothing else builds
keys. A key never contains credentials or the query of a signed CDN URL (those change
per request, hf-protocol.md §7.4), so two clients asking for the same bytes meet at the
same key whatever token or URL signature they carried.
"""

from pulsys.model import target as T


def cache_key(kind, rtype, repo, rev, path="", extra=""):
    """Key for one cacheable thing.

    kind: a target kind (RESOLVE, API_INFO, API_TREE, API_PATHS_INFO) or REV for a
    revision -> commit mapping. rev is the decoded revision; path the decoded file path;
    extra a normalised query or body digest for API listings.
    """
    return "%d|%s|%s|%s|%s|%s" % (kind, rtype, repo, rev, path, extra)


REV = 100  # kind used for revision -> commit mappings


def target_key(t, rev=None):
    """cache_key for a routed Target (optionally with the revision replaced by a commit)."""
    return cache_key(t.kind, t.rtype, t.repo, t.rev if rev is None else rev, t.path)


def rev_key(rtype, repo, rev):
    return cache_key(REV, rtype, repo, rev)
