"""What `--xet facade` hands its clients as proof, and checks when they come back (ADR 0019).

Two kinds, both HMAC-SHA256 under a key derived from the node's secret file (the
--token-secret-file every node of a fleet shares), so no lookup, no store, and any node
can check what another issued:

  CAS token    `pxet1.<payload>.<mac>` answered by pulsys's xet-read-token route: the
               client's identity (a digest, auth/access.py), the repo, the revision it
               was asked at, and its expiry. hf_xet sends it as `Authorization: Bearer`
               on every reconstruction request (xet-protocol.md §3).
  xorb URL     `/cas/xorbs/<xorb>/<first>-<end>?e=<expiry>&s=<mac>`: hf_xet sends no
               Authorization to xorb URLs (§4), so the URL is the proof. A 403 makes
               hf_xet ask the reconstruction again for fresh URLs.
"""

import base64
import hashlib
import hmac
import json

PREFIX = "pxet1."
_KEY_LABEL = b"pulsys xet facade v1"


def derive_key(secret):
    """The facade's HMAC key: its own, so it can never be confused with a use of the
    same secret elsewhere (auth/sealed.py's AES-GCM key)."""
    return hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()


class CasToken:
    __slots__ = ("who", "rtype", "repo", "rev", "expires")

    def __init__(self, who, rtype, repo, rev, expires):
        self.who, self.rtype, self.repo, self.rev, self.expires = who, rtype, repo, rev, expires


class XetTokens:
    def __init__(self, key, wall):
        self._key = key
        self._wall = wall

    def _mac(self, text):
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()[:40]

    def mint(self, who, rtype, repo, rev, expires):
        payload = base64.urlsafe_b64encode(json.dumps(
            [who, rtype, repo, rev, int(expires)], separators=(",", ":")).encode()).decode().rstrip("=")
        return PREFIX + payload + "." + self._mac("token:" + payload)

    def check(self, authorization):
        """The CasToken an `Authorization: Bearer ...` header carries, or why not (str)."""
        if not authorization or not authorization.startswith("Bearer "):
            return "no CAS token: ask the xet-read-token route for one"
        token = authorization[len("Bearer "):].strip()
        if not token.startswith(PREFIX) or token.count(".") != 2:
            return "not a CAS token of this pulsys"
        payload, mac = token[len(PREFIX):].split(".")
        if not hmac.compare_digest(mac, self._mac("token:" + payload)):
            return "CAS token signature does not match"
        try:
            who, rtype, repo, rev, expires = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (ValueError, TypeError):
            return "CAS token is malformed"
        if expires < self._wall():
            return "CAS token expired"
        return CasToken(who, rtype, repo, rev, expires)

    def xorb_path(self, xorb, first, end, expires):
        """The signed path of one cached xorb range (chunks [first, end))."""
        expires = int(expires)
        return "/cas/xorbs/%s/%d-%d?e=%d&s=%s" % (xorb, first, end, expires,
                                                  self._mac("xorb:%s:%d:%d:%d" % (xorb, first, end, expires)))

    def xorb_ok(self, xorb, first, end, query):
        """None when `query` signs this xorb range and has not expired, else why not."""
        fields = dict(p.partition("=")[::2] for p in query.split("&") if p)
        try:
            expires = int(fields.get("e", ""))
        except ValueError:
            return "xorb URL has no expiry"
        if not hmac.compare_digest(fields.get("s", ""), self._mac("xorb:%s:%d:%d:%d" % (xorb, first, end, expires))):
            return "xorb URL signature does not match"
        if expires < self._wall():
            return "xorb URL expired"
        return None
