"""Answers the upstream plane gives without asking upstream (docs/architecture.md, "What
is cached" and "When the Hub is down"):

- EntryNotFound for a path that a commit's complete file list (cache/filesets.py), or a
  paths-info answer at that commit, does not have: what the Hub answers, byte for byte
  as far as pulsys can know it (fake_hub_routes.route_resolve is the reference);
- the answer to a request that upstream cannot answer now and the cache cannot answer
  truthfully: DOWN_STATUS, a status no Hugging Face client retries.
"""

import json
from urllib.parse import parse_qs

from pulsys.model.entry import CANNED, Entry

# X-Error-Message of the Hub's 404 for a file that is not at a commit (hf-protocol.md §4.1)
ENTRY_NOT_FOUND = "Entry not found"
# The status of pulsys's own answer when upstream is unreachable or answers 5xx and
# nothing cached answers the request. huggingface_hub retries a HEAD /resolve that got
# 408, 429, 500, 502, 503 or 504 five times with 1-8 s pauses (2.4: utils/_http.py
# _DEFAULT_RETRY_ON_STATUS_CODES, used by file_download.hf_hub_download when no local
# copy exists; 0.36.2: utils/_http.py http_backoff retry_on_status_codes=(500, 502, 503,
# 504) under file_download._request_wrapper), and datasets retries 504 and 429 while
# streaming (utils/file_utils.py SERVER_UNAVAILABLE_CODE, RATE_LIMIT_CODE). 599 is a
# server error (RFC 9110 §15.6: unknown 5xx codes are treated as 500 by clients that do
# not know them) that none of them retries: the client falls back to its own cache at
# once, or fails with "cannot reach the Hub". The full reasoning: architecture.md.
DOWN_STATUS = 599
DOWN_CODE = "UpstreamUnavailable"
MAX_PATHS = 1000          # negative entries learned from one paths-info answer, at most


def error_entry(key, status, code, message, extra=()):
    """A CANNED answer shaped like the Hub's errors: JSON {"error": message} and the
    X-Error-* headers clients classify errors by (hf-protocol.md §4.3)."""
    headers = (("Content-Type", "application/json; charset=utf-8"),
               ("X-Error-Code", code), ("X-Error-Message", message)) + tuple(extra)
    return Entry(CANNED, key, status=status, headers=headers,
                 body=json.dumps({"error": message}).encode())


def entry_not_found(key, commit):
    """The Hub's 404 for a file that is not at `commit` (its X-Repo-Commit is what
    hf_hub_download writes .no_exist markers from)."""
    return error_entry(key, 404, "EntryNotFound", ENTRY_NOT_FOUND, (("X-Repo-Commit", commit),))


def upstream_down(netloc, why):
    return error_entry("", DOWN_STATUS, DOWN_CODE,
                       "upstream %s unavailable (%s) and pulsys has no cached answer for this "
                       "request" % (netloc, why))


def rate_limited(left, retry_after):
    """Upstream rate-limits this cache for `left` more seconds and nothing cached answers:
    a 429 of pulsys's own, asking the client to wait as long (upstream/ratelimit.py)."""
    return error_entry("", 429, "RateLimited",
                       "the Hub is rate-limiting this cache for %s more seconds and pulsys has no "
                       "cached answer for this request; retry then" % retry_after,
                       (("Retry-After", retry_after),))


def offline(path):
    """--offline and nothing cached answers: the same status, not retried either."""
    return error_entry("", DOWN_STATUS, DOWN_CODE,
                       "pulsys is offline (--offline) and has no cached copy of %s" % path)


def _valid_path(p):
    if not p or "\x00" in p or "\\" in p:
        return False
    for part in p.split("/"):
        if part in ("", ".", ".."):
            return False
    return all(c >= " " and not "\x7f" <= c <= "\x9f" for c in p)


def paths_not_found(content_type, request_body, answer_body):
    """Paths a paths-info request asked for that its answer does not list: not at that
    revision, neither as a file nor as a folder (the Hub leaves out paths that do not
    exist). Form bodies (`paths=a&paths=b`, huggingface_hub) and JSON bodies ({"paths":
    [...]}) as the Hub takes them; [] when either body cannot be read."""
    try:
        if "json" in (content_type or ""):
            asked = json.loads(request_body or b"{}").get("paths", [])
        else:
            asked = parse_qs(request_body.decode("utf-8"), keep_blank_values=True).get("paths", [])
        found = {item["path"] for item in json.loads(answer_body)}
    except (ValueError, AttributeError, TypeError, KeyError):
        return []
    if isinstance(asked, str):
        asked = [asked]
    if not isinstance(asked, list):
        return []
    out = []
    for p in asked:
        p = p.strip("/") if isinstance(p, str) else ""
        if _valid_path(p) and p not in found and p not in out:
            out.append(p)
            if len(out) >= MAX_PATHS:
                break
    return out
