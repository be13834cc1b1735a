"""One ranged GET for a piece of a blob, following redirects to allowed hosts only.

The Hub's CDN and /api/resolve-cache honour a single `Range` and answer 206 with
`Content-Range: bytes a-b/SIZE` (hf-protocol.md §4.1, §4.2). A 206 for other bytes, or
for a file of another size than the Hub announced, is refused; a 200 (range ignored) is
usable only for a piece that starts at byte 0.
"""

import re
import urllib.parse

from pulsys.errors import CacheCorrupt, UpstreamError

MAX_REDIRECTS = 5
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


class Transient(UpstreamError):
    """Worth another try: a 5xx, 429 or 408 answer, a body cut short."""


class Forbidden(UpstreamError):
    """403: a signed CDN URL expired (hf-protocol.md §4.2); a new one may work."""


def open_range(request, allowed, url, start, end, size):
    """GET `url` for bytes [start, end) of a `size`-byte blob. -> a streaming response
    whose body begins at byte `start`. request(method, url, headers) sends one request
    without following redirects; allowed(url) says whether a redirect may be followed."""
    for _ in range(MAX_REDIRECTS + 1):
        resp = request("GET", url, {"Range": "bytes=%d-%d" % (start, end - 1)})
        st, h = resp.status_code, resp.headers
        if 300 <= st < 400 and h.get("Location"):
            resp.close()
            url = urllib.parse.urljoin(url, h["Location"])
            if not allowed(url):
                raise UpstreamError("body redirected to a host that is not allowed")
            continue
        if st == 206:
            m = _CONTENT_RANGE.match(h.get("Content-Range", ""))
            if m is None or int(m.group(1)) != start:
                resp.close()
                raise UpstreamError("asked for bytes from %d, upstream sent Content-Range %r"
                                    % (start, h.get("Content-Range")))
            if m.group(3) != "*" and int(m.group(3)) != size:
                resp.close()
                raise CacheCorrupt("upstream says the file has %s bytes, the Hub announced %d"
                                   % (m.group(3), size))
            return resp
        if st == 200 and start == 0:
            return resp
        resp.close()
        if st >= 500 or st in (408, 429):
            raise Transient("upstream answered %d" % st)
        if st == 403:
            raise Forbidden("upstream answered 403 to a request for bytes %d-%d" % (start, end - 1))
        raise UpstreamError("upstream answered %d to a request for bytes %d-%d" % (st, start, end - 1))
    raise UpstreamError("too many redirects for a file body")
