"""The console's pages and form actions (served by admin/console.py).

A page is `page(console, session, query) -> HTML`; an action is `action(console, session,
form) -> path to redirect to | (status, HTML)`. Both read and change state only through
the JSON API (console.call). Every value that comes from the store or a request is
passed through e() (html.escape, quotes too) before it is put into HTML; the layout
template (templates/layout.html) receives only escaped text.
"""

import html
import json
import os
import string
import time
import urllib.parse

from pulsys.admin.errors import AdminError

_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
with open(os.path.join(_TEMPLATES, "layout.html"), encoding="utf-8") as _f:
    LAYOUT = string.Template(_f.read())

NAV = (("/console/", "Dashboard"), ("/console/repos", "Models & datasets"),
       ("/console/jobs", "Pre-warm"), ("/console/keys", "Keys"), ("/console/audit", "Audit"))
ACTIVE_PHASES = ("queued", "listing", "fetching")


def e(x):
    return html.escape("" if x is None else str(x), quote=True)


def size(n):
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024


def when(t):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else ""


def job_percent(j):
    """Whole percent done; 100 only once the job is done (console.js computes the same)."""
    if j.get("phase") == "done":
        return 100
    bt, ft = j.get("bytes_total") or 0, j.get("files_total") or 0
    if bt:
        return min(99, int(100 * (j.get("bytes_done") or 0) / bt))
    if ft:
        return min(99, int(100 * (j.get("files_done") or 0) / ft))
    return 0


# -- layout ----------------------------------------------------------------------------------


def layout(title, page, s, body, here=None):
    nav = ""
    if s is not None:
        links = " ".join('<a href="%s"%s>%s</a>' % (href, ' class="here"' if href == here else "", e(label))
                         for href, label in NAV)
        nav = ('<nav>%s</nav><form class="inline" method="post" action="/console/logout">'
               '<input type="hidden" name="csrf" value="%s"><button type="submit">Log out</button></form>'
               % (links, e(s.csrf)))
    return LAYOUT.substitute(title=e(title), page=e(page), nav=nav, body=body,
                             csrf=e(s.csrf) if s is not None else "")


def error_page(status, message, s):
    return layout("Error %d" % status, "error", s,
                  '<p class="error" id="error">%s</p><p><a href="/console/">Back to the console</a></p>'
                  % e(message))


def login_page(token, message):
    err = '<p class="error" id="error">%s</p>' % e(message) if message else ""
    return layout("Log in", "login", None, err + (
        '<form method="post" action="/console/login">'
        '<input type="hidden" name="csrf" value="%s">'
        '<label>Admin API key <input type="password" name="key" id="key" size="60" autocomplete="off" required>'
        '</label> <button type="submit" id="login">Log in</button></form>'
        '<p class="muted">An admin key (<code>pulsys keys create --scope admin</code>, or the key the '
        'first start printed).</p>' % e(token)))


def csrf_field(s):
    return '<input type="hidden" name="csrf" value="%s">' % e(s.csrf)


def api(console, s, method, target, doc=None):
    """The JSON API's document, or AdminError with its status and message."""
    res = console.call(s, method, target, doc)
    if res is None:
        raise AdminError(404, "this server has no %s %s" % (method, target.split("?")[0]))
    status, body = res[0], res[1]
    if status >= 400:
        raise AdminError(status, body.get("error") if isinstance(body, dict) else str(body))
    return body


def optional(console, s, target):
    """GET target, or None when this server does not have that route."""
    res = console.call(s, "GET", target)
    if res is None:
        return None
    if res[0] >= 400:
        raise AdminError(res[0], res[1].get("error", ""))
    return res[1]


def table(headers, rows, tid=None, empty="nothing yet"):
    head = "".join('<th%s>%s</th>' % (' class="num"' if num else "", e(h)) for h, num in headers)
    if not rows:
        rows = ['<tr><td colspan="%d" class="muted">%s</td></tr>' % (len(headers), e(empty))]
    return '<table%s><thead><tr>%s</tr></thead><tbody>%s</tbody></table>' % (
        ' id="%s"' % tid if tid else "", head, "".join(rows))


# -- pages -------------------------------------------------------------------------------------


def dashboard(console, s, query):
    st = optional(console, s, "/api/v1/stats")
    if st is None:
        return layout("Dashboard", "dashboard", s, '<p class="muted">This server has no statistics API.</p>',
                      "/console/")
    used, quota = st.get("bytes_used", 0), st.get("quota_bytes", 0)
    if quota:
        usage = '<meter id="usage" min="0" max="%d" value="%d"></meter> %s of %s (%d%%)' % (
            quota, min(used, quota), e(size(used)), e(size(quota)), int(100 * used / quota))
    else:
        usage = '%s <span class="muted">(no quota)</span>' % e(size(used))
    ratio = st.get("hit_ratio") or 0
    tiles = [("Cache used", usage), ("Entries / blobs", "%d / %d" % (st.get("entries", 0), st.get("blobs", 0))),
             ("Hit ratio", '<span id="hit-ratio">%.1f %%</span> <span class="muted">%d hits, %d misses</span>'
              % (100 * ratio, st.get("hits", 0), st.get("misses", 0))),
             ("Served", e(size(st.get("bytes_served")))),
             ("From upstream", e(size(st.get("upstream_body_bytes")))),
             ("Upstream bytes saved", e(size(st.get("upstream_bytes_saved")))),
             ("Throughput served", '<span id="throughput">measuring…</span>')]
    xet = st.get("xet") or {}
    if xet.get("tokens") or xet.get("xorb_fills"):        # --xet facade in use
        tiles.append(("Xet (facade)", '<span id="xet">%d xorb ranges fetched (%s), %d served from cache, '
                      '%s assembled for plain clients</span>'
                      % (xet.get("xorb_fills", 0), e(size(xet.get("xorb_bytes_fetched"))), xet.get("xorb_hits", 0),
                         e(size(xet.get("assembled_bytes"))))))
    body = '<div class="tiles">%s</div>' % "".join(
        '<div class="tile">%s<b>%s</b></div>' % (e(t), v) for t, v in tiles)
    rows = ['<tr><td>%s</td><td>%s</td><td class="num">%d</td><td class="num">%s</td></tr>'
            % (e(r.get("type")), e(r.get("repo")), r.get("downloads", 0), e(size(r.get("bytes_served"))))
            for r in st.get("repos", [])]
    body += charts(console, s)
    body += "<h2>Downloads by repository</h2>" + table(
        [("type", False), ("repository", False), ("downloads", True), ("served", True)], rows, "repo-stats")
    return layout("Dashboard", "dashboard", s, body, "/console/")


CHARTS = (("throughput", "Throughput per second"), ("hit_ratio", "Hit ratio"),
          ("fills", "Cold fills started"))
WINDOWS = (("hour", "The last hour", "1-minute buckets"), ("day", "The last day", "15-minute buckets"))


def charts(console, s):
    """Empty figures that console.js draws the throughput history into as inline SVG
    (GET /api/v1/history through the /console/api/history feed); nothing on a server
    without the history API."""
    if console.api.history is None:
        return ""
    out = ""
    for window, title, note in WINDOWS:
        figs = "".join('<figure class="chart" id="chart-%s-%s" data-window="%s" data-chart="%s">'
                       '<figcaption>%s</figcaption></figure>' % (window, name, window, name, e(caption))
                       for name, caption in CHARTS)
        out += '<h2>%s <span class="muted">%s</span></h2><div class="charts">%s</div>' % (e(title), e(note), figs)
    return out


def repos(console, s, query):
    doc = api(console, s, "GET", "/api/v1/repos")
    items = doc if isinstance(doc, list) else doc.get("repos", [])
    rows = []
    for r in items:
        revs = "<br>".join("%s → <code>%s</code>" % (e(v.get("revision")), e((v.get("commit") or "")[:12]))
                           for v in r.get("revisions", []))
        purge = ('<form class="inline" method="post" action="/console/repos/purge" data-confirm="Purge %s %s from '
                 'the cache?">%s<input type="hidden" name="type" value="%s"><input type="hidden" name="repo" '
                 'value="%s"><button type="submit">Purge</button></form>'
                 % (e(r.get("type")), e(r.get("repo")), csrf_field(s), e(r.get("type")), e(r.get("repo"))))
        rows.append('<tr><td>%s</td><td>%s</td><td>%s</td><td class="num">%d</td><td class="num">%s</td>'
                    '<td>%s</td></tr>' % (e(r.get("type")), e(r.get("repo")), revs, r.get("files", 0),
                                          e(size(r.get("bytes"))), purge))
    body = table([("type", False), ("repository", False), ("revisions", False), ("files", True),
                  ("size", True), ("", False)], rows, "repos", "nothing cached yet")
    return layout("Models & datasets", "repos", s, body, "/console/repos")


def job_row(j, s):
    pct = job_percent(j)
    cancel = ""
    if j.get("phase") in ACTIVE_PHASES:
        cancel = ('<form class="inline" method="post" action="/console/jobs/cancel">%s'
                  '<input type="hidden" name="id" value="%s"><button type="submit">Cancel</button></form>'
                  % (csrf_field(s), e(j.get("id"))))
    return ('<tr data-job="%s"><td>%s</td><td>%s <span class="muted">%s</span></td><td>%s</td>'
            '<td class="phase">%s</td><td><progress max="100" value="%d"></progress> <span class="pct">%d%%</span>'
            '</td><td class="num files">%d / %d</td><td class="num bytes">%s / %s</td><td class="num rate">%s/s</td>'
            '<td class="current">%s</td><td class="err">%s</td><td>%s</td></tr>'
            % (e(j.get("id")), e(j.get("id")), e(j.get("repo")), e(j.get("type")), e(j.get("revision")),
               e(j.get("phase")), pct, pct, j.get("files_done") or 0, j.get("files_total") or 0,
               e(size(j.get("bytes_done"))), e(size(j.get("bytes_total"))), e(size(j.get("bytes_per_s"))),
               e(j.get("current_file")), e(j.get("error")), cancel))


JOB_HEADERS = [("id", False), ("repository", False), ("revision", False), ("phase", False), ("progress", False),
               ("files", True), ("bytes", True), ("rate", True), ("current file", False), ("error", False),
               ("", False)]


def jobs(console, s, query):
    doc = api(console, s, "GET", "/api/v1/jobs")
    items = doc if isinstance(doc, list) else doc.get("jobs", [])
    form = ('<form method="post" action="/console/jobs" id="prewarm"><fieldset><legend>Pre-warm a repository'
            '</legend>%s<label>Repository <input name="repo" id="repo" placeholder="org/name" required></label>'
            '<label>Type <select name="type" id="type"><option value="model">model</option>'
            '<option value="dataset">dataset</option></select></label>'
            '<label>Revision <input name="revision" id="revision" value="main" size="12"></label>'
            '<label>Include <input name="include" id="include" placeholder="*.safetensors *.json"></label>'
            '<label>Exclude <input name="exclude" id="exclude" placeholder="*.bin"></label>'
            '<button type="submit" id="start">Start</button></fieldset></form>' % csrf_field(s))
    body = form + table(JOB_HEADERS, [job_row(j, s) for j in items], "jobs", "no jobs yet")
    return layout("Pre-warm jobs", "jobs", s, body, "/console/jobs")


def keys(console, s, query, created=None):
    doc = api(console, s, "GET", "/api/v1/keys")
    shown = ""
    if created is not None:
        shown = ('<div class="secret" id="new-key"><p>Key <b>%s</b> (%s, scope %s) created. Copy it now: it is '
                 'shown only this once.</p><p><code id="secret">%s</code></p></div>'
                 % (e(created["id"]), e(created.get("name")), e(created["scope"]), e(created["key"])))
    form = ('<form method="post" action="/console/keys" id="create-key"><fieldset><legend>Create a key</legend>%s'
            '<label>Name <input name="name" id="key-name" maxlength="100"></label>'
            '<label>Scope <select name="scope" id="key-scope"><option value="read">read</option>'
            '<option value="admin">admin</option></select></label>'
            '<label>Repos <input name="repos" id="key-repos" maxlength="2000" '
            'placeholder="every repo; or e.g. acme/* datasets/team-a/*"></label>'
            '<button type="submit" id="create">Create</button></fieldset></form>' % csrf_field(s))
    rows = []
    for k in doc.get("keys", []):
        revoke = ""
        if k.get("active"):
            mine = " (this session's key)" if k["id"] == s.key_id else ""
            revoke = ('<form class="inline" method="post" action="/console/keys/revoke" data-confirm="Revoke key %s%s?">'
                      '%s<input type="hidden" name="id" value="%s"><button type="submit">Revoke</button></form>'
                      % (e(k["id"]), e(mine), csrf_field(s), e(k["id"])))
        rows.append('<tr data-key="%s"><td><code>%s</code></td><td class="name">%s</td><td>%s</td>'
                    '<td class="repos">%s</td><td class="state">%s</td><td>%s</td><td>%s</td><td>%s</td>'
                    '<td>%s</td></tr>'
                    % (e(k["id"]), e(k["id"]), e(k.get("name")), e(k.get("scope")),
                       e(" ".join(k.get("repos") or ["every repo"])),
                       "active" if k.get("active") else "revoked", e(when(k.get("created_at"))),
                       e(k.get("created_by")), e(when(k.get("revoked_at"))), revoke))
    body = shown + form + table([("id", False), ("name", False), ("scope", False), ("repos", False),
                                 ("state", False), ("created", False), ("by", False), ("revoked", False),
                                 ("", False)], rows, "keys")
    return layout("API keys", "keys", s, body, "/console/keys")


def audit(console, s, query):
    before = (query.get("before") or [""])[-1]
    target = "/api/v1/audit?limit=100" + ("&before=" + urllib.parse.quote(before) if before else "")
    doc = api(console, s, "GET", target)
    rows = ['<tr><td class="num">%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td><code>%s</code></td></tr>'
            % (ev["id"], e(when(ev.get("at"))), e(ev.get("actor")), e(ev.get("action")), e(ev.get("target")),
               e(json.dumps(ev.get("detail"), sort_keys=True))) for ev in doc.get("events", [])]
    body = table([("id", True), ("at", False), ("actor", False), ("action", False), ("target", False),
                  ("detail", False)], rows, "audit")
    nxt = doc.get("next")
    if nxt:
        b = urllib.parse.parse_qs(urllib.parse.urlsplit(nxt).query).get("before", [""])[-1]
        body += '<p><a href="/console/audit?before=%s">Older events</a></p>' % e(urllib.parse.quote(b))
    return layout("Audit log", "audit", s, body, "/console/audit")


# -- actions -------------------------------------------------------------------------------------


def create_key(console, s, form):
    doc = {"scope": form.get("scope") or "read"}
    if form.get("name"):
        doc["name"] = form["name"]
    repos = _globs(form.get("repos"))
    if repos:
        doc["repos"] = repos
    created = api(console, s, "POST", "/api/v1/keys", doc)
    return 200, keys(console, s, {}, created=created)


def revoke_key(console, s, form):
    api(console, s, "DELETE", "/api/v1/keys/" + urllib.parse.quote(form.get("id") or "", safe=""))
    return "/console/keys"


def _globs(text):
    return [g for g in (text or "").replace(",", " ").split() if g]


def start_job(console, s, form):
    repo = (form.get("repo") or "").strip()
    if not repo:
        raise AdminError(400, "give the repository to pre-warm as org/name")
    api(console, s, "POST", "/api/v1/jobs", {
        "repo": repo, "type": form.get("type") or "model", "revision": (form.get("revision") or "").strip() or "main",
        "include": _globs(form.get("include")), "exclude": _globs(form.get("exclude"))})
    return "/console/jobs"


def cancel_job(console, s, form):
    api(console, s, "DELETE", "/api/v1/jobs/" + urllib.parse.quote(form.get("id") or "", safe=""))
    return "/console/jobs"


def purge_repo(console, s, form):
    kind, repo = form.get("type") or "", form.get("repo") or ""
    if not kind or not repo or repo.count("/") > 1:
        raise AdminError(400, "purge needs a type and a repository (org/name)")
    api(console, s, "DELETE", "/api/v1/repos/%s/%s" % (urllib.parse.quote(kind, safe=""),
                                                       urllib.parse.quote(repo, safe="/")))
    return "/console/repos"
