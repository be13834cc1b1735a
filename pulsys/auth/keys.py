"""API key format and hashing. Pure: no I/O, no clock.

A key is `pulsys_<id>_<secret>`: `id` is 12 lower-case hex digits (public: it names the
key in lists, audit events and revocations), `secret` is 43 letters and digits drawn
by `secrets` (43 x log2(62) = 256 random bits). Clients send it the way
huggingface_hub sends HF_TOKEN: `Authorization: Bearer <key>`.

Only sha256(key) is stored. A slow, salted password hash (bcrypt, scrypt, argon2)
exists to make guessing *low-entropy* human passwords from a stolen hash expensive;
against 256 random bits there is nothing to guess (2^256 work at any hash speed) and
no precomputed table can cover the space, so a salt and a work factor would add only
cost per check. A plain sha256 also lets every process verify a key in a few
microseconds without a database round trip (tests/unit/test_auth.py bounds it).
"""

import hashlib
import hmac
import secrets

PREFIX = "pulsys_"
ID_HEX = 12
SECRET_LEN = 43
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
SCOPES = ("read", "admin")     # read: the data plane; admin: also the admin API
_HEX = frozenset("0123456789abcdef")


def digest(key):
    """Hex sha256 of the whole key string, as stored."""
    return hashlib.sha256(key.encode("latin-1", "replace")).hexdigest()


def new_key():
    """-> (key, key_id, digest). The key itself is shown once and never stored."""
    key_id = secrets.token_hex(ID_HEX // 2)
    key = "%s%s_%s" % (PREFIX, key_id, "".join(secrets.choice(_ALNUM) for _ in range(SECRET_LEN)))
    return key, key_id, digest(key)


def key_id(key):
    """The id part of a well-formed key, else None."""
    if not key.startswith(PREFIX) or len(key) < len(PREFIX) + ID_HEX + 2:
        return None
    kid = key[len(PREFIX):len(PREFIX) + ID_HEX]
    if key[len(PREFIX) + ID_HEX] != "_" or not _HEX.issuperset(kid):
        return None
    return kid


def bearer(header):
    """The credential of an `Authorization: Bearer <credential>` header value, else None.
    The scheme is case-insensitive (RFC 9110 §11.1)."""
    if header is None:
        return None
    scheme, _, cred = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    cred = cred.strip()
    return cred or None


def matches(key, stored_digest):
    """Constant-time comparison of a presented key with a stored digest."""
    return hmac.compare_digest(digest(key), stored_digest)
