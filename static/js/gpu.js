/* GPU page: activity and memory over time, refreshed every minute while the tab is visible. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    ["gpu-activity-chart", "gpu-memory-chart"].forEach(function (id) {
      var chart = document.getElementById(id);
      if (chart) chart.setAttribute("data-chart-refresh", "60");
    });
    GpuLedgerCharts.loadAll();
  });
})();
