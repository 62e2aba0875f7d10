/* Fleet overview: draw its charts; a click on a team bar opens that team's page when linked. */
(function () {
  "use strict";
  function linkBars(el) {
    if (el.id !== "team-idle-chart" && el.id !== "team-active-chart") return;
    if (el._gpuLedgerLinked) return;
    el._gpuLedgerLinked = true;
    el.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      var url = point && point.customdata;
      if (url) window.location.assign(url);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    GpuLedgerCharts.loadAll({ onRender: linkBars });
  });
})();
