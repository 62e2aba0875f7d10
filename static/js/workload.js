/* Workload page: draw the transition timeline and the per-GPU activity charts. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    window.GpuLedgerCharts.loadAll();
  });
})();
