"""Exception taxonomy. Imports nothing.

Each error carries its wire meaning so that the code which catches it can answer
without formatting anything new.
"""


class PulsysError(Exception):
    """Base of every error pulsys raises on purpose."""


class ProtocolError(PulsysError):
    """The client sent bytes that are not an acceptable HTTP/1.1 request head.

    status_hint: the HTTP status to answer with (400, 413, 414, 431, 501, 505).
    must_close: the connection cannot be trusted for another request.
    """

    def __init__(self, status_hint, reason, must_close=True):
        super().__init__(reason)
        self.status_hint = status_hint
        self.reason = reason
        self.must_close = must_close


class ConfigError(PulsysError):
    """A setting has a value pulsys cannot use. The message is one line for a person."""


class BackendUnavailable(PulsysError):
    """A requested reactor backend cannot run on this machine."""


class UpstreamError(PulsysError):
    """Upstream could not be reached or answered nonsense."""


class UpstreamRefused(UpstreamError):
    """pulsys would not connect: the host is not allowed, or its name resolves only to
    addresses it may not reach (the SSRF guard, pulsys/upstream/guard.py). The message is
    one line for the client, sent as a 502."""


class CacheCorrupt(PulsysError):
    """Bytes on disk or from upstream failed verification."""


class Refetching(CacheCorrupt):
    """A fill failed verification and the blob is being fetched once more: its readers
    may go on from the refetch (ADR 0012)."""
