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
from pulsys.testing.fake_hub_xet import to_json

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
            self.cas()
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
        limit = self.hub.bridge_limit
        if blob.xet_hash is not None and limit is not None and blob.size > limit:
            # the Hub's bridge serves Xet files over plain HTTP up to a size (§1)
            self.send_simple(400, [("Content-Type", "application/xml")],
                             _xml_error("EntityTooLarge", "this file is served over Xet only"))
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

    # -- Xet CAS (fake_hub_xet.py, xet-protocol.md §3-§4) ---------------------------------

    def cas(self):
        parts = self.raw_path.split("/")
        if self.command == "POST" and self.raw_path == "/v1/telemetry":
            self.send_json(200, {})
            return
        if len(parts) != 4 or parts[2] != "reconstructions" or self.command != "GET":
            self.send_json(404, {"error": "not found"})
            return
        version, file_hash = int(parts[1][1:]), parts[3]
        auth = self.headers.get("Authorization", "")
        why = self.hub._xet_token_reads(auth[len("Bearer "):], file_hash) if auth.startswith("Bearer ") \
            else "no token"
        if why is not None:
            self.send_json(401, {"error": why})
            return
        store = self.hub.xet_store(file_hash)
        if store is None:
            self.send_json(404, {"error": "no such file"})
            return
        size = store.size(file_hash)
        span = parse_range(self.headers.get("Range"), size)
        if span == "unsatisfiable" or size == 0:
            self.send_simple(416, [("Content-Range", "bytes */%d" % size)])
            return
        first, last = span if span is not None else (0, size - 1)
        where = self.hub.xorb_url
        answer = store.reconstruction(file_hash, first, last, version,
                                      lambda xh: self.hub._xorb_signer.url(where, xh, self.hub.xorb_url_ttl))
        body = to_json(answer)
        self.send_simple(200, [("Content-Type", "application/json")], body)

    def _deny(self, message):
        self.send_simple(403, [("Content-Type", "application/xml")], _xml_error("AccessDenied", message))


class XorbHandler(CdnHandler):
    """The xorb origin: a host of its own, as the Hub's (its URLs come signed in the
    CAS's reconstructions; nothing else is served here)."""
    server_label = "xorb"

    def route(self):
        if self.raw_path.startswith("/xorbs/"):
            self.xorb(self.raw_path[len("/xorbs/"):])
        else:
            self.send_json(404, {"error": "not found"})

    def xorb(self, xorb_hash):
        if self.command not in ("GET", "HEAD"):
            self.send_json(405, {"error": "GET only"})
            return
        why = self.hub._xorb_signer.check(xorb_hash, self.raw_query)
        if why is not None:
            self._deny(why)       # hf_xet asks the reconstruction again for new URLs
            return
        x = self.hub._xet.xorbs.get(xorb_hash)
        if x is None:
            self.send_simple(404, [("Content-Type", "application/xml")],
                             _xml_error("NoSuchKey", "The specified key does not exist."))
            return
        rng = self.headers.get("Range") or ""
        span = parse_range(rng, len(x.data))
        if span == "unsatisfiable" or (rng.replace(" ", "").startswith("bytes=-") and not self.hub.xorb_suffix_ranges):
            self.send_simple(416, [("Content-Range", "bytes */%d" % len(x.data))])
            return
        start, end = span if span is not None else (0, len(x.data) - 1)
        body = x.data[start:end + 1]
        headers = [("Content-Type", "application/octet-stream")]
        if span is not None:
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, end, len(x.data))))
        if self.command == "GET":
            self.hub._count_xorb(len(body))
        self.send_head(206 if span is not None else 200, headers, content_length=len(body))
        if self.command == "GET":
            self._send_xorb_body(body)

    def _send_xorb_body(self, body):
        """Faults apply to xorb bodies as to blobs (fake_hub_faults.py): throttle paces
        them (a CAS pacing each connection), corrupt flips their middle byte."""
        plan = self.hub.faults.take_body(self.path)
        if plan.kind == "corrupt" and body:
            flipped = bytearray(body)
            flipped[len(flipped) // 2] ^= 0xFF
            body = bytes(flipped)
        if not plan.rate:
            self.wfile.write(body)
            return
        piece = max(1, min(64 * 1024, int(plan.rate / 20)))
        started, clock = self.hub._monotonic(), self.hub._monotonic
        for sent in range(0, len(body), piece):
            self.wfile.write(body[sent:sent + piece])
            delay = started + (sent + piece) / plan.rate - clock()
            if delay > 0 and self.hub._stop_event.wait(delay):
                raise ConnectionAbortedError("fake hub stopping")
