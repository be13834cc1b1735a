"""requests.Session for upstream: pooled keep-alive, raw bytes, pulsys's own token.

Client credentials never reach this module; the token is pulsys's own (--hf-token) and
is sent only to the upstream origin, never to CDN hosts (hf-protocol.md §7.5).
"""

import requests
import requests.adapters

from pulsys import __version__


def make_session(pool_size):
    s = requests.Session()
    s.trust_env = True  # HTTPS_PROXY / NO_PROXY as users expect from a CLI tool
    adapter = requests.adapters.HTTPAdapter(pool_connections=16, pool_maxsize=pool_size,
                                            max_retries=0)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    s.headers.clear()
    s.headers["User-Agent"] = "pulsys/%s" % __version__
    s.headers["Accept-Encoding"] = "identity"   # store raw bytes (§7.9)
    s.headers["Accept"] = "*/*"
    return s
