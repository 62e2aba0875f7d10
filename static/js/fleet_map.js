/* Fleet map: clicking a GPU cell opens that GPU's page. */
(function () {
  "use strict";
  GpuLedgerCharts.linkPoints("map-chart", function (point, el) {
    var gpuId = point.customdata;
    var template = el.getAttribute("data-gpu-url-template");
    return gpuId && template ? template.replace(/\/0\/$/, "/" + gpuId + "/") : null;
  });
})();
