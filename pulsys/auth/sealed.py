"""Hub tokens sealed for the admin store: AES-256-GCM, bound to the key that carries them.

With `--upstream-auth client` and `--auth required`, a pulsys key may carry its owner's
Hugging Face token (ADR 0017): pulsys asks the Hub with it for that key's requests.
The store keeps only `seal(key_id, token)`:

    v1.<base64url(12-byte random nonce || ciphertext || 16-byte GCM tag)>

The key id is the associated data, so a sealed token copied onto another key's row
fails to open (the tag covers it: NIST SP 800-38D §7). A fresh 96-bit random nonce per
seal keeps GCM's nonce-reuse bound far away: SP 800-38D §8.3 allows 2^32 invocations
with random nonces under one key, and a token is sealed once per change.

The 32-byte secret lives outside the store (`--token-secret-file`), so a copy of the
database alone (a Postgres dump, a backup) reveals no token.
"""

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pulsys.auth.keys import looks_like_a_key

VERSION = "v1."
SECRET_BYTES = 32
_NONCE = 12
_AAD = b"pulsys hub token\0"


class Unsealable(ValueError):
    """A sealed token that this secret cannot open: another secret, another key's row,
    or altered bytes."""


class Sealer:
    __slots__ = ("_aead",)

    def __init__(self, secret):
        if len(secret) != SECRET_BYTES:
            raise ValueError("the token secret must be %d bytes, not %d" % (SECRET_BYTES, len(secret)))
        self._aead = AESGCM(secret)

    def seal(self, key_id, token):
        nonce = os.urandom(_NONCE)
        ct = self._aead.encrypt(nonce, token.encode("utf-8"), _AAD + key_id.encode("ascii"))
        return VERSION + base64.urlsafe_b64encode(nonce + ct).decode("ascii")

    def open(self, key_id, sealed):
        if not isinstance(sealed, str) or not sealed.startswith(VERSION):
            raise Unsealable("not a sealed token of a known version")
        try:
            raw = base64.urlsafe_b64decode(sealed[len(VERSION):].encode("ascii"))
            plain = self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], _AAD + key_id.encode("ascii"))
        except (InvalidTag, ValueError, UnicodeEncodeError):
            raise Unsealable("the token secret does not open this key's Hub token "
                             "(another --token-secret-file, or the row was altered)") from None
        return plain.decode("utf-8")


def check_hub_token(token):
    """The token as given, or ValueError saying what is wrong with it. A Hub token is
    printable ASCII without spaces (huggingface_hub sends it in a header); a pulsys key
    is refused: the Hub would not know it."""
    if not isinstance(token, str) or not token:
        raise ValueError("hub_token must be a non-empty string (a Hugging Face token, hf_...)")
    if len(token) > 512 or not all(33 <= ord(ch) < 127 for ch in token):
        raise ValueError("hub_token must be at most 512 printable ASCII characters without spaces")
    if looks_like_a_key(token):
        raise ValueError("hub_token is a pulsys key; give the owner's Hugging Face token "
                         "(from huggingface.co/settings/tokens)")
    return token
