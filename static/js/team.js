/* Team page: draw the allocation and per-queue charts; the state filter applies on change. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    window.GpuLedgerCharts.loadAll();
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      select.addEventListener("change", function () {
        select.form.submit();
      });
    });
  });
})();
