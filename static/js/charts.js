/*
 * Shared chart loader. Every element with data-chart-url gets the figure JSON that URL returns
 * ({data, layout, config}, built by one of the dashboard's chart views) drawn with Plotly.newPlot.
 *
 *   <div id="capacity-chart" class="chart" data-chart-url="/fleet/charts/capacity.json?range=7d"
 *        data-chart-refresh="60"></div>
 *
 * data-chart-refresh (seconds, optional) re-fetches and redraws with Plotly.react.
 * A figure's meta.notice (e.g. "Prometheus could not be queried…") is shown in the element
 * with data-notice-for="<chart id>" when the page has one.
 * After each draw the element gets data-chart-state="ready" (or "error") and a "chart:rendered"
 * event, so page scripts (and browser tests) know when a figure is on screen.
 *
 * Every page's charts are drawn on DOMContentLoaded; a page needs a script of its own only for
 * what is specific to it. Page scripts load after this file (both deferred, in document order),
 * so they run before the charts are drawn:
 *
 *   GpuLedgerCharts.onRender(function (el, figure) { ... });   // after every draw
 *   GpuLedgerCharts.linkPoints("map-chart", function (point, el) { return url; });
 *     // a click on a point opens the URL returned for it (if any)
 */
(function () {
  "use strict";

  function setStatus(el, text, isError) {
    var status = el.querySelector(":scope > .chart-status");
    if (!text) {
      if (status) status.remove();
      return;
    }
    if (!status) {
      status = document.createElement("div");
      status.className = "chart-status";
      el.appendChild(status);
    }
    status.textContent = text;
    status.classList.toggle("chart-error", !!isError);
  }

  function showNotice(el, figure) {
    if (!el.id) return;
    var notice = document.querySelector('[data-notice-for="' + el.id + '"]');
    if (!notice) return;
    var text = figure && figure.meta && figure.meta.notice;
    notice.textContent = text || "";
    notice.hidden = !text;
  }

  function fetchFigure(url) {
    return fetch(url, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    }).then(function (response) {
      return response.json().then(
        function (body) {
          if (!response.ok) {
            throw new Error(body && body.error ? body.error : "HTTP " + response.status);
          }
          return body;
        },
        function () {
          throw new Error("HTTP " + response.status);
        }
      );
    });
  }

  var renderHooks = [];

  function onRender(hook) {
    renderHooks.push(hook);
  }

  function linkPoints(chartId, urlOf) {
    onRender(function (el) {
      if (el.id !== chartId || el._gpuLedgerLinked) return;
      el._gpuLedgerLinked = true;
      el.on("plotly_click", function (event) {
        var point = event.points && event.points[0];
        var url = point && urlOf(point, el);
        if (url) window.location.assign(url);
      });
    });
  }

  function draw(el) {
    var url = el.getAttribute("data-chart-url");
    if (!url) return Promise.resolve(null);
    var first = !el.classList.contains("js-plotly-plot");
    if (first) setStatus(el, "Loading…");
    el.setAttribute("data-chart-state", "loading");
    return fetchFigure(url)
      .then(function (figure) {
        setStatus(el, null);
        var config = Object.assign({ responsive: true, displaylogo: false }, figure.config || {});
        var plot = first ? Plotly.newPlot : Plotly.react;
        return plot(el, figure.data, figure.layout, config).then(function () {
          showNotice(el, figure);
          el.setAttribute("data-chart-state", "ready");
          el.setAttribute("data-chart-loaded-url", url);
          renderHooks.forEach(function (hook) {
            hook(el, figure);
          });
          el.dispatchEvent(new CustomEvent("chart:rendered", { detail: figure }));
          return figure;
        });
      })
      .catch(function (error) {
        el.setAttribute("data-chart-state", "error");
        setStatus(el, "Could not load this chart: " + error.message, true);
        return null;
      });
  }

  function load(el) {
    var promise = draw(el);
    var refresh = parseInt(el.getAttribute("data-chart-refresh") || "0", 10);
    if (refresh > 0 && !el._gpuLedgerTimer) {
      el._gpuLedgerTimer = window.setInterval(function () {
        if (!document.hidden) draw(el);
      }, refresh * 1000);
    }
    return promise;
  }

  function loadAll(root) {
    var nodes = (root || document).querySelectorAll("[data-chart-url]");
    return Promise.all(Array.prototype.map.call(nodes, load));
  }

  window.GpuLedgerCharts = {
    load: load,
    loadAll: loadAll,
    draw: draw,
    onRender: onRender,
    linkPoints: linkPoints,
  };

  document.addEventListener("DOMContentLoaded", function () {
    loadAll();
  });
})();
