// alkstore console: confirmations and live updates. The pages work without
// it: actions then confirm on a page of their own, and a reload refreshes.
(function () {
  "use strict";
  document.addEventListener("submit", function (e) {
    var f = e.target;
    if (!f.classList || !f.classList.contains("act")) return;
    var ask = f.getAttribute("data-confirm");
    if (ask && !window.confirm(ask)) { e.preventDefault(); return; }
    var c = f.querySelector("input[name=confirm]");
    if (c) c.value = "yes";
  });

  var base = document.body.getAttribute("data-base") || "";
  var main = document.getElementById("live");
  var dot = document.getElementById("live-state");
  if (!window.EventSource || !main) return;
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    var active = document.activeElement;
    if (active && main.contains(active) && active.tagName === "INPUT") { again = true; return; } // do not clobber typing
    busy = true;
    fetch(location.href, { headers: { "X-Alkstore-Live": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          main.innerHTML = html;
          document.body.setAttribute("data-version", String(Number(document.body.getAttribute("data-version") || 0) + 1));
        }
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; setTimeout(refresh, 200); } });
  }
  var es = new EventSource(base + "/events");
  es.addEventListener("open", function () { dot.className = "live on"; document.body.setAttribute("data-live", "on"); });
  es.addEventListener("error", function () { dot.className = "live off"; document.body.setAttribute("data-live", "off"); });
  es.addEventListener("change", refresh);
})();
