"""Job and Reply: the only things that cross between a reactor and the fill pool.

A reactor that cannot answer from the index hands a Job to the `submit` callable it was
given; the upstream plane answers exactly once through `job.reply(Reply)`, which posts
back into the reactor's mailbox. Neither side imports the other.
"""


class Job:
    __slots__ = ("target", "method", "host", "body", "content_type", "reply", "auth", "ask", "xet")

    def __init__(self, target, method, host, body, content_type, reply, auth=None):
        self.target = target            # model.target.Target
        self.method = method            # "GET" | "HEAD" | "POST"
        self.host = host                # Host header, used when no --public-base-url is set
        self.body = body                # request body bytes (POST paths-info) or b""
        self.content_type = content_type
        self.reply = reply              # callable(Reply), thread-safe
        # --upstream-auth client: the client's Authorization ("" for none), which the Hub
        # is asked with; None: pulsys's own request (pre-warm) or service mode
        self.auth = auth
        self.ask = None                 # the upstream plane's own note on it (upstream/service.py)
        # a CAS request (target.XET_RECON): (its Authorization, its Range header or None)
        self.xet = None


class Reply:
    """entry: what to answer with (FILE or CANNED). fill: set when the body is still
    arriving (model-level Fill object from cache.inflight). outcome: for logs and counters.
    grant: with --upstream-auth client, the Hub's fresh yes for the job's client to read
    the repo's files, (public, rtype, repo, until) (auth/access.py), else None."""
    __slots__ = ("entry", "fill", "outcome", "grant")

    def __init__(self, entry, fill=None, outcome="miss", grant=None):
        self.entry = entry
        self.fill = fill
        self.outcome = outcome
        self.grant = grant
