/* Fleet overview: a click on a team bar opens that team's page when the user may open it. */
(function () {
  "use strict";
  ["team-idle-chart", "team-active-chart"].forEach(function (id) {
    GpuLedgerCharts.linkPoints(id, function (point) {
      return point.customdata;
    });
  });
})();
