/* Fleet map: draw the heatmap; clicking a GPU cell opens that GPU's page. */
(function () {
  "use strict";
  function linkCells(el) {
    if (el.id !== "map-chart" || el._gpuLedgerLinked) return;
    el._gpuLedgerLinked = true;
    var template = el.getAttribute("data-gpu-url-template");
    el.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      var gpuId = point && point.customdata;
      if (gpuId && template) window.location.assign(template.replace(/\/0\/$/, "/" + gpuId + "/"));
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    GpuLedgerCharts.loadAll({ onRender: linkCells });
  });
})();
