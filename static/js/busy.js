/* Busy-but-not-working page: draw its two charts. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    GpuLedgerCharts.loadAll();
  });
})();
