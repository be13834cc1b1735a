"""The secret that seals Hub tokens in the admin store (auth/sealed.py, ADR 0017): a
file of 64 hex digits (32 random bytes), mode 0600, named by --token-secret-file
(default: token-secret in the cache dir). Every node of a fleet that shares one
Postgres must be given the same file, or a node cannot open the tokens another sealed.

Like ssh with a private key, a file that others may read is refused: the secret is
what keeps a copy of the database from being a copy of every token in it."""

import errno
import os
import secrets
import stat

from pulsys.auth.sealed import SECRET_BYTES, Sealer
from pulsys.errors import ConfigError


def open_sealer(path, create):
    """-> a Sealer from the file at `path`; made now (0600) when absent and `create`,
    else None when absent. ConfigError (one line for the operator) when unusable."""
    secret = read_secret(path, create)
    return Sealer(secret) if secret is not None else None


def read_secret(path, create):
    """The secret bytes of the file at `path` (see open_sealer); None when absent and not
    `create`. --xet facade derives its token key from them (upstream/xet_tokens.py)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        if not create:
            return None
        return _create(path)
    except OSError as e:
        raise ConfigError("--token-secret-file %s: %s" % (path, e.strerror)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ConfigError("--token-secret-file %s is not a regular file" % path)
    with os.fdopen(fd, "rb") as f:
        if st.st_mode & 0o077:
            raise ConfigError("--token-secret-file %s may be read by others (mode %o): chmod 600 it"
                              % (path, stat.S_IMODE(st.st_mode)))
        text = f.read(4096).strip()
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise ConfigError("--token-secret-file %s must hold %d hex digits (make one with: "
                          "python3 -c 'import secrets; print(secrets.token_hex(32))')" % (path, 2 * SECRET_BYTES))
    return secret


def _create(path):
    secret = secrets.token_bytes(SECRET_BYTES)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        if e.errno == errno.EEXIST:        # made by another process meanwhile: use that one
            return read_secret(path, False)
        raise ConfigError("--token-secret-file %s cannot be created: %s" % (path, e.strerror)) from None
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return secret
