// The overview follows every app that changes a verdict: on any of their events it asks the
// server for the pipelines table again (debounced), so verdicts are computed in one place.
(function () {
  const part = document.getElementById("pipelines-part");
  let timer = null;
  let inFlight = false;
  function refresh() {
    timer = null;
    if (inFlight) { timer = setTimeout(refresh, 1000); return; }
    inFlight = true;
    fetch(location.pathname + "?part=pipelines", {credentials: "same-origin"})
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        part.innerHTML = html;  // the server's own template, escaped there
        document.body.dataset.overviewRefreshed = String(Date.now());
      })
      .catch(function () { /* the next event tries again */ })
      .finally(function () { inFlight = false; });
  }
  function soon() { if (!timer) timer = setTimeout(refresh, 800); }
  ["reconcile", "stuck", "lint", "alerts", "canary"].forEach(function (g) { AuditorLive.subscribe(g, soon); });
  const strip = document.getElementById("components-strip");
  AuditorLive.subscribe("status", function (event, snapshot) {
    if (event !== "status") return;
    const link = strip.querySelector("a");
    strip.replaceChildren(...snapshot.components.map(function (c) {
      const span = document.createElement("span");
      span.className = "comp " + (c.healthy ? "ok" : "bad");
      span.dataset.component = c.name;
      span.title = c.detail;
      span.textContent = c.name + " " + (c.healthy ? "✓" : "DOWN");
      return span;
    }), link);
  });
})();
