/* Node page: per-GPU SM_ACTIVE over time, refreshed every minute while the tab is visible. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var chart = document.getElementById("node-activity-chart");
    if (chart) chart.setAttribute("data-chart-refresh", "60");
    GpuLedgerCharts.loadAll();
  });
})();
