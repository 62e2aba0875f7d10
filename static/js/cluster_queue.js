/* ClusterQueue page: draw the usage / borrowing history and the evictions chart. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    window.GpuLedgerCharts.loadAll();
  });
})();
