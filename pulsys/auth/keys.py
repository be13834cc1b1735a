"""API key format and hashing. Pure: no I/O, no clock.

A key is `hf_pulsys<id><secret>`: `id` is 12 lower-case hex digits (public: it names
the key in lists, audit events and revocations), `secret` is 43 letters and digits
drawn by `secrets` (43 x log2(62) = 256 random bits). Clients send it the way
huggingface_hub sends HF_TOKEN: `Authorization: Bearer <key>`.

Why it looks like a Hugging Face token: some clients send a token only when it has
that shape. llama.cpp's `-hf` download does so only for `hf_` followed by at least 34
letters and digits (its common/hf-cache.cpp; hf-protocol.md §9), so a key with `_` after the prefix never
reached pulsys from it. All 61 characters after `hf_` are letters and digits, and the
`pulsys` that starts them keeps the key recognisable in a config file or a log. A real
Hugging Face token is 37 characters long, a pulsys key 64, so neither is taken for the
other. Keys made before this format, `pulsys_<id>_<secret>`, keep working.

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

PREFIX = "hf_pulsys"
OLD_PREFIX = "pulsys_"      # keys made before the hf_ format: still accepted
ID_HEX = 12
SECRET_LEN = 43
KEY_LEN = len(PREFIX) + ID_HEX + SECRET_LEN
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
SCOPES = ("read", "admin")     # read: the data plane; admin: also the admin API
_HEX = frozenset("0123456789abcdef")


def digest(key):
    """Hex sha256 of the whole key string, as stored."""
    return hashlib.sha256(key.encode("latin-1", "replace")).hexdigest()


def new_key():
    """-> (key, key_id, digest). The key itself is shown once and never stored."""
    key_id = secrets.token_hex(ID_HEX // 2)
    key = PREFIX + key_id + "".join(secrets.choice(_ALNUM) for _ in range(SECRET_LEN))
    return key, key_id, digest(key)


def key_id(key):
    """The id part of a well-formed key (either format), else None. Only the id is
    checked here; the whole key is checked against its stored digest."""
    if key.startswith(PREFIX):
        if len(key) != KEY_LEN:
            return None
        kid = key[len(PREFIX):len(PREFIX) + ID_HEX]
    elif key.startswith(OLD_PREFIX):
        if len(key) < len(OLD_PREFIX) + ID_HEX + 2 or key[len(OLD_PREFIX) + ID_HEX] != "_":
            return None
        kid = key[len(OLD_PREFIX):len(OLD_PREFIX) + ID_HEX]
    else:
        return None
    return kid if _HEX.issuperset(kid) else None


def looks_like_a_key(key):
    """Has the prefix of a pulsys key (either format): a refusal of it says 'invalid',
    of anything else 'not a pulsys key'."""
    return key.startswith(PREFIX) or key.startswith(OLD_PREFIX)


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
