// pulsys console: confirmations, live pre-warm progress, dashboard throughput and the
// charts of the throughput history.
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

  // apply(document) every `every` ms; the first time at once when `atOnce`
  function poll(url, every, apply, atOnce) {
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
    window.setTimeout(tick, atOnce ? 0 : every);
  }

  // -- charts of the throughput history (GET /api/v1/history), drawn as inline SVG ----------

  var SVG = "http://www.w3.org/2000/svg";
  var W = 360, H = 140, LEFT = 64, RIGHT = 8, TOP = 8, BOTTOM = 20;

  function svg(name, attrs, text) {
    var el = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function clock(t) {
    var d = new Date(t * 1000);
    return ("0" + d.getHours()).slice(-2) + ":" + ("0" + d.getMinutes()).slice(-2);
  }

  // lines: [{cls, label, value: bucket -> number or null, dots}]; a null is no point (a
  // gap in the data, such as a hit ratio with no requests); `dots` marks every point, for
  // a series whose points may stand alone
  function drawChart(fig, buckets, lines, fmt, fixedMax) {
    var n = buckets.length, max = fixedMax || 0;
    if (!fixedMax) {
      lines.forEach(function (l) {
        buckets.forEach(function (b) { var v = l.value(b); if (v !== null && v > max) max = v; });
      });
    }
    var top = max > 0 ? max : 1;
    var x = function (i) { return LEFT + (W - LEFT - RIGHT) * (n > 1 ? i / (n - 1) : 0); };
    var y = function (v) { return TOP + (H - TOP - BOTTOM) * (1 - v / top); };
    var root = svg("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "class": "chart-svg",
                           "aria-label": fig.querySelector("figcaption").textContent});
    [0, 0.5, 1].forEach(function (f) {
      root.appendChild(svg("line", {x1: LEFT, x2: W - RIGHT, y1: y(top * f), y2: y(top * f), "class": "grid"}));
      root.appendChild(svg("text", {x: LEFT - 4, y: y(top * f) + 4, "class": "ylabel"}, fmt(top * f)));
    });
    if (n) {
      root.appendChild(svg("text", {x: LEFT, y: H - 4, "class": "xlabel"}, clock(buckets[0].start)));
      root.appendChild(svg("text", {x: W - RIGHT, y: H - 4, "class": "xlabel end"}, clock(buckets[n - 1].start)));
    }
    lines.forEach(function (l) {
      var pts = [];
      buckets.forEach(function (b, i) {
        var v = l.value(b);
        if (v === null) return;
        var px = x(i).toFixed(1), py = y(Math.min(v, top)).toFixed(1);
        pts.push(px + "," + py);
        if (l.dots) root.appendChild(svg("circle", {cx: px, cy: py, r: 2, "class": "dot " + l.cls}));
      });
      var line = svg("polyline", {points: pts.join(" "), "class": "series " + l.cls,
                                  "data-points": pts.length, "data-max": max});
      line.appendChild(svg("title", {}, l.label));
      root.appendChild(line);
    });
    var legend = fig.querySelector(".legend") || document.createElement("div");
    legend.className = "legend";
    legend.replaceChildren();
    lines.forEach(function (l) {
      var key = document.createElement("span");
      key.className = "key " + l.cls;
      key.textContent = l.label;
      legend.appendChild(key);
    });
    var old = fig.querySelector("svg");
    if (old) fig.replaceChild(root, old); else fig.insertBefore(root, fig.querySelector("figcaption").nextSibling);
    fig.appendChild(legend);
  }

  function drawHistory(doc) {
    document.querySelectorAll("figure.chart").forEach(function (fig) {
      var ring = doc[fig.getAttribute("data-window")];
      if (!ring) return;
      var w = ring.resolution_seconds, b = ring.buckets;
      var chart = fig.getAttribute("data-chart");
      if (chart === "throughput") {
        drawChart(fig, b, [
          {cls: "served", label: "served", value: function (x) { return x.bytes_served / w; }},
          {cls: "upstream", label: "from upstream", value: function (x) { return x.upstream_body_bytes / w; }}],
          function (v) { return size(v) + "/s"; });
      } else if (chart === "hit_ratio") {
        drawChart(fig, b, [{cls: "ratio", label: "hit ratio", dots: true, value: function (x) {
          return x.hit_ratio === null ? null : 100 * x.hit_ratio; }}],
          function (v) { return v.toFixed(0) + " %"; }, 100);
      } else if (chart === "fills") {
        drawChart(fig, b, [{cls: "fills", label: "fills started", value: function (x) { return x.fills_started; }}],
          function (v) { return v.toFixed(v < 10 && v % 1 ? 1 : 0); });
      }
    });
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
    // the history changes once per sample (--history-interval, 10 s by default)
    if (document.querySelector("figure.chart")) poll("/console/api/history", 10000, drawHistory, true);
  }
})();
