// pulsys console: confirmations, live pre-warm progress and dashboard throughput.
// Loaded as a file (the Content-Security-Policy allows no inline script); every value
// from the server is put into the page with textContent, never as HTML.
"use strict";

(function () {
  var csrfMeta = document.querySelector('meta[name="csrf"]');
  var csrf = csrfMeta ? csrfMeta.content : "";

  document.addEventListener("submit", function (ev) {
    var msg = ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });

  function size(n) {
    n = Number(n || 0);
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    for (var i = 0; i < units.length; i++) {
      if (n < 1024 || i === units.length - 1) return i === 0 ? Math.floor(n) + " B" : n.toFixed(1) + " " + units[i];
      n /= 1024;
    }
  }

  // the same rule as console_pages.job_percent: 100 only once the job is done
  function percent(j) {
    if (j.phase === "done") return 100;
    if (j.bytes_total) return Math.min(99, Math.floor(100 * (j.bytes_done || 0) / j.bytes_total));
    if (j.files_total) return Math.min(99, Math.floor(100 * (j.files_done || 0) / j.files_total));
    return 0;
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function jobRow(j) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-job", j.id);
    cell(tr, j.id);
    var repo = cell(tr, j.repo + " ");
    var t = document.createElement("span");
    t.className = "muted";
    t.textContent = j.type;
    repo.appendChild(t);
    cell(tr, j.revision);
    cell(tr, j.phase, "phase");
    var td = cell(tr, "");
    var bar = document.createElement("progress");
    bar.max = 100;
    bar.value = percent(j);
    td.appendChild(bar);
    var pct = document.createElement("span");
    pct.className = "pct";
    pct.textContent = " " + percent(j) + "%";
    td.appendChild(pct);
    cell(tr, (j.files_done || 0) + " / " + (j.files_total || 0), "num files");
    cell(tr, size(j.bytes_done) + " / " + size(j.bytes_total), "num bytes");
    cell(tr, size(j.bytes_per_s) + "/s", "num rate");
    cell(tr, j.current_file || "", "current");
    cell(tr, j.error || "", "err");
    var last = cell(tr, "");
    if (["queued", "listing", "fetching"].indexOf(j.phase) >= 0) {
      var f = document.createElement("form");
      f.className = "inline";
      f.method = "post";
      f.action = "/console/jobs/cancel";
      [["csrf", csrf], ["id", j.id]].forEach(function (kv) {
        var i = document.createElement("input");
        i.type = "hidden";
        i.name = kv[0];
        i.value = kv[1];
        f.appendChild(i);
      });
      var b = document.createElement("button");
      b.type = "submit";
      b.textContent = "Cancel";
      f.appendChild(b);
      last.appendChild(f);
    }
    return tr;
  }

  function poll(url, every, apply) {
    function tick() {
      fetch(url, {credentials: "same-origin", cache: "no-store"})
        .then(function (r) {
          if (r.status === 401) { window.location = "/console/login"; return null; }
          return r.ok ? r.json() : null;
        })
        .then(function (doc) { if (doc !== null) apply(doc); })
        .catch(function () {})
        .then(function () { window.setTimeout(tick, every); });
    }
    window.setTimeout(tick, every);
  }

  var page = document.body.getAttribute("data-page");
  if (page === "jobs") {
    poll("/console/api/jobs", 1000, function (doc) {
      var items = Array.isArray(doc) ? doc : (doc.jobs || []);
      var body = document.querySelector("#jobs tbody");
      if (!body || !items.length) return;
      var rows = document.createDocumentFragment();
      items.forEach(function (j) { rows.appendChild(jobRow(j)); });
      body.replaceChildren(rows);
    });
  }
  if (page === "dashboard") {
    var last = null;
    poll("/console/api/stats", 2000, function (st) {
      var now = Date.now() / 1000, out = document.getElementById("throughput");
      if (last && out && now > last.t) {
        out.textContent = size((st.bytes_served - last.served) / (now - last.t)) + "/s served, " +
          size((st.upstream_body_bytes - last.up) / (now - last.t)) + "/s from upstream";
      }
      var hr = document.getElementById("hit-ratio");
      if (hr) hr.textContent = (100 * (st.hit_ratio || 0)).toFixed(1) + " %";
      last = {t: now, served: st.bytes_served || 0, up: st.upstream_body_bytes || 0};
    });
  }
})();
