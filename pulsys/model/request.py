"""RequestHead: what the parser extracts from one HTTP/1.1 request head.

Only the fields a pull-through cache decides on are kept; there is no header dict.
All text fields are `str` decoded as latin-1 from the wire bytes, so they round-trip
to the exact bytes received. `path` and `query` stay percent-encoded.
"""


class RequestHead:
    __slots__ = (
        "method",          # "GET", "HEAD", "POST", ... (case-sensitive token)
        "target",          # request-target exactly as sent, e.g. "/a/b?x=1"
        "path",            # target up to '?' (still percent-encoded)
        "query",           # text after '?', "" if none
        "http11",          # True for HTTP/1.1, False for HTTP/1.0
        "keep_alive",      # connection persists after this response
        "host",            # Host header value or ""
        "range",           # Range header value or None
        "if_none_match",   # If-None-Match header value or None
        "if_range",        # If-Range header value or None
        "user_agent",      # User-Agent header value (the first one) or None
        "authorization",   # Authorization header value or None
        "content_length",  # int; 0 when absent
        "content_type",    # Content-Type header value or None
        "head_len",        # bytes consumed by the head, including the final CRLFCRLF
    )

    def __init__(self):
        self.method = ""
        self.target = ""
        self.path = ""
        self.query = ""
        self.http11 = True
        self.keep_alive = True
        self.host = ""
        self.range = None
        self.if_none_match = None
        self.if_range = None
        self.user_agent = None
        self.authorization = None
        self.content_length = 0
        self.content_type = None
        self.head_len = 0

    def __repr__(self):
        return "RequestHead(%s %s keep_alive=%s range=%r head_len=%d)" % (
            self.method, self.target, self.keep_alive, self.range, self.head_len)
