"""The fake CDN origin: CloudFront-style signed URLs for LFS blobs (hf-protocol.md §3, §4.2).

A URL is `{cdn}/repos/{xx}/{yy}/{sha256}?response-content-disposition=…&Expires=…
&Policy=…&Signature=…&Key-Pair-Id=…`. The signature is an HMAC over the path and
the raw query bytes before `&Signature=`, so a proxy that re-encodes (`*`→`%2A`,
`+`→`%20`) or reorders the query gets 403, as from the real CDN. Each URL carries
a per-request nonce in its Policy, so no two redirects share a URL.
"""

import base64
import hashlib
import hmac
import itertools
import json
from urllib.parse import parse_qs, quote_plus

from pulsys.testing.fake_hub_wire import FakeHandler, content_disposition, parse_range

_SIG = "&Signature="
_KEY_PAIR_ID = "K3FAKEHUBKEYPAIR"


def _cloudfront_b64(raw):
    return base64.b64encode(raw).decode().replace("+", "-").replace("=", "_").replace("/", "~")


def _xml_error(code, message):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>'
            % (code, message)).encode()


class CdnSigner:
    def __init__(self, secret, clock):
        self._secret = secret
        self._clock = clock
        self._nonce = itertools.count(1)

    def sign(self, cdn_url, repo_key, blob, filename, ttl):
        digest = hashlib.sha256(repo_key.encode()).hexdigest()
        path = "/repos/%s/%s/%s" % (digest[:2], digest[2:4], blob.sha256)
        expires = int(self._clock() + ttl)
        policy = json.dumps({
            "Statement": [{"Resource": cdn_url + path + "*",
                           "Condition": {"DateLessThan": {"AWS:EpochTime": expires}}}],
            "Nonce": next(self._nonce),
        }, separators=(",", ":"))
        # quote_plus with "*" safe gives the live CDN's spelling: `+` for spaces, a literal `*`.
        query = "response-content-disposition=%s&Expires=%d&Policy=%s" % (
            quote_plus(content_disposition(filename), safe="*"), expires, _cloudfront_b64(policy.encode()))
        return "%s%s?%s%s%s&Key-Pair-Id=%s" % (cdn_url, path, query, _SIG, self._signature(path, query),
                                               _KEY_PAIR_ID)

    def check(self, raw_path, raw_query):
        """None if the URL is authentic and unexpired, else the 403 message."""
        cut = raw_query.find(_SIG)
        if cut < 0:
            return "Missing Key-Pair-Id query parameter or cookie value"
        signed = raw_query[:cut]
        given = raw_query[cut + len(_SIG):].split("&", 1)[0]
        if not hmac.compare_digest(given, self._signature(raw_path, signed)):
            return "Access denied"
        try:
            expires = int(parse_qs(signed)["Expires"][0])
        except (KeyError, ValueError):
            return "Access denied"
        if expires < self._clock():
            return "Access denied"  # CloudFront says no more than this about expiry
        return None

    def _signature(self, path, query):
        # The request line arrives decoded as latin-1, so this re-encoding gives back the raw bytes.
        mac = hmac.new(self._secret, (path + "?" + query).encode("latin-1"), hashlib.sha256)
        return _cloudfront_b64(mac.digest())


class CdnHandler(FakeHandler):
    server_label = "cdn"

    def route(self):
        path = self.raw_path
        if path.startswith(("/v1/", "/v2/")):
            # Xet CAS endpoints: present so a client that tries Xet fails loudly and is counted (§5).
            self.send_json(404, {"error": "not found: the fake CDN does not implement Xet CAS"})
            return
        parts = path.split("/")
        if len(parts) != 5 or parts[1] != "repos" or self.command not in ("GET", "HEAD"):
            self._deny("Missing Key-Pair-Id query parameter or cookie value")
            return
        problem = self.hub._signer.check(path, self.raw_query)
        if problem:
            self._deny(problem)
            return
        blob = self.hub._store.blob(parts[4])
        if blob is None:
            self.send_simple(404, [("Content-Type", "application/xml")],
                             _xml_error("NoSuchKey", "The specified key does not exist."))
            return
        params = parse_qs(self.raw_query)
        headers = [
            ("Content-Type", params.get("response-content-type", ["application/octet-stream"])[0]),
            ("Accept-Ranges", "bytes"),
            ("ETag", '"%s"' % blob.s3_etag()),
            ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"),
            ("X-Cache", "Miss from cloudfront"),
        ]
        if "response-content-disposition" in params:
            headers.append(("Content-Disposition", params["response-content-disposition"][0]))
        span = parse_range(self.headers.get("Range"), blob.size)
        if span == "unsatisfiable":
            self.send_simple(416, headers + [("Content-Range", "bytes */%d" % blob.size)],
                             _xml_error("InvalidRange", "The requested range is not satisfiable"))
        elif span is None:
            self.send_blob(200, headers, blob.data, blob.sha256)
        else:
            start, end = span
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, end, blob.size)))
            self.send_blob(206, headers, memoryview(blob.data)[start:end + 1], blob.sha256)

    def _deny(self, message):
        self.send_simple(403, [("Content-Type", "application/xml")], _xml_error("AccessDenied", message))
