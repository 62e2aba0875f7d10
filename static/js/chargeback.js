/* Chargeback page: copy the equivalent API URL to the clipboard. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("button[data-copy-target]").forEach(function (button) {
      button.addEventListener("click", function () {
        var input = document.getElementById(button.getAttribute("data-copy-target"));
        var done = function () { button.textContent = "Copied"; };
        input.select();
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(input.value).then(done, function () {
            document.execCommand("copy");
            done();
          });
        } else {
          document.execCommand("copy");
          done();
        }
      });
    });
  });
})();
