# Varnish in front of the fake Hub. The Hub answers an LFS /resolve with a 302 to its
# CDN origin; the backend fetch follows that redirect itself (retry against the CDN
# backend) so the cached object is the file's 200 body, stored under the client's URL.
# Warm hits never reach either backend. Rendered by scripts/bench_compare.py: every
# @@...@@ placeholder is filled in.
vcl 4.1;

backend hub {
    .host = "@@HUB_HOST@@";
    .port = "@@HUB_PORT@@";
}

backend cdn {
    .host = "@@CDN_HOST@@";
    .port = "@@CDN_PORT@@";
}

sub vcl_recv {
    set req.backend_hint = hub;
    unset req.http.Cookie;
    unset req.http.Authorization;
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    return (hash);
}

sub vcl_backend_response {
    if (beresp.status >= 301 && beresp.status <= 308 && beresp.http.Location ~ "^http://@@CDN_NETLOC_RE@@/") {
        set bereq.http.Host = "@@CDN_HOST@@:@@CDN_PORT@@";
        set bereq.url = regsub(beresp.http.Location, "^http://[^/]+", "");
        set bereq.backend = cdn;
        return (retry);
    }
    if (beresp.status == 200) {
        set beresp.ttl = 1d;
        set beresp.grace = 1h;
        unset beresp.http.Set-Cookie;
        unset beresp.http.Cache-Control;
        return (deliver);
    }
    set beresp.uncacheable = true;
    set beresp.ttl = 0s;
    return (deliver);
}
