// llmwatch live updates: listens to /events (server-sent events) and puts
// each value into the elements whose data-kpi matches its id. Pages work
// without this script; it only keeps them current. No build step.
(function () {
  "use strict";
  if (!window.EventSource) return;
  var status = document.getElementById("live-status");
  var body = document.body;
  var refreshMs = parseInt(body.getAttribute("data-refresh-ms") || "0", 10);
  var lastChartRefresh = Date.now();
  var updates = 0, changes = 0;
  var source = new EventSource("/events");

  function elementsById() {
    var map = {};
    var els = document.querySelectorAll("[data-kpi]");
    for (var i = 0; i < els.length; i++) {
      var id = els[i].getAttribute("data-kpi");
      (map[id] = map[id] || []).push(els[i]);
    }
    return map;
  }

  function refreshCharts() {
    if (!refreshMs || Date.now() - lastChartRefresh < refreshMs || !window.fetch) return;
    lastChartRefresh = Date.now();
    var charts = document.querySelectorAll("[data-chart-src]");
    for (var i = 0; i < charts.length; i++) {
      (function (el) {
        fetch(el.getAttribute("data-chart-src"), { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (svg) { if (svg) el.innerHTML = svg; })
          .catch(function () {});
      })(charts[i]);
    }
  }

  source.addEventListener("overview", function (event) {
    var values;
    try { values = JSON.parse(event.data); } catch (e) { return; }
    var map = elementsById();
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      var els = map[v.id] || [];
      for (var j = 0; j < els.length; j++) {
        var el = els[j];
        if (el.textContent !== v.text) {
          el.textContent = v.text;
          if (v.id.charAt(0) !== "_") {
            el.setAttribute("data-changed", String(updates + 1));
            changes++;
          }
        }
        var base = el.getAttribute("data-base") || "";
        el.className = (base ? base + " " : "") + v["class"];
      }
    }
    updates++;
    body.setAttribute("data-live-updates", String(updates));
    body.setAttribute("data-live-changes", String(changes));
    if (status) status.textContent = "live: " + updates + " updates, " + changes + " values changed";
    refreshCharts();
  });
  source.onerror = function () {
    if (status) status.textContent = "live updates paused; reconnecting";
  };
})();
