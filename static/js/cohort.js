/* Cohort page: draw the per-member usage and the borrowed / lent charts. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    window.GpuLedgerCharts.loadAll();
  });
})();
