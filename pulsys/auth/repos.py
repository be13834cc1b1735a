"""Repos a key may read, when its admin limited it (docs/admin.md, "Keys limited to
repos"). Pure: no I/O.

A pattern is `[TYPE/]OWNER/NAME` or `[TYPE/]NAME`, where TYPE is `models`, `datasets`
or `spaces` (the Hub's URL prefixes) and OWNER and NAME may use the shell wildcards
`*` and `?` (fnmatch, case-sensitive as repo ids are): `acme/*` is every repo of acme,
of every type; `datasets/acme/*` only its datasets; `meta-llama/Llama-3*` some models
and datasets of meta-llama. A key with patterns reads only repos one of them matches;
anything else answers as the Hub does for a repo the caller cannot see (404
RepoNotFound), so the key learns nothing of what exists.
"""

import fnmatch
import re

TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
MAX_PATTERNS = 100
MAX_LEN = 200
_PART = re.compile(r"[A-Za-z0-9_.\-*?]+")


def compile_patterns(patterns):
    """Check patterns as an admin gave them. -> a tuple of (repo type or None, glob), in
    the order given, or raises ValueError saying what is wrong."""
    if not isinstance(patterns, (list, tuple)) or not patterns:
        raise ValueError("repos must be a non-empty list of patterns like acme/* or datasets/acme/*")
    if len(patterns) > MAX_PATTERNS:
        raise ValueError("at most %d repo patterns per key" % MAX_PATTERNS)
    out = []
    for p in patterns:
        if not isinstance(p, str) or not p.strip() or len(p) > MAX_LEN:
            raise ValueError("repo pattern %r: expected [TYPE/]OWNER/NAME of at most %d characters"
                             % (p, MAX_LEN))
        parts = p.strip().split("/")
        rtype = None
        if len(parts) > 1 and parts[0] in TYPES:
            rtype = TYPES[parts.pop(0)]
        if not 1 <= len(parts) <= 2 or not all(_PART.fullmatch(x) for x in parts):
            raise ValueError("repo pattern %r: expected [models/|datasets/|spaces/]OWNER/NAME, "
                             "with letters, digits, _ - . and the wildcards * ?" % p)
        out.append((rtype, "/".join(parts)))
    return tuple(out)


def text_of(compiled):
    """The patterns as an admin writes them (what the store keeps and lists show)."""
    inv = {v: k for k, v in TYPES.items()}
    return [(inv[t] + "/" if t else "") + glob for t, glob in compiled]


def allows(compiled, rtype, repo):
    """True when one of the compiled patterns matches repo `repo` of type `rtype`."""
    for t, glob in compiled:
        if (t is None or t == rtype) and fnmatch.fnmatchcase(repo, glob):
            return True
    return False
