// Findings: when a run finishes for a binding shown here, say so (the table is a snapshot of
// runs; the reader decides when to reload). Text goes in with textContent only.
(function () {
  const page = JSON.parse(document.getElementById("findings-page").textContent);
  const notice = document.getElementById("findings-notice");
  AuditorLive.subscribe("reconcile", function (event, run) {
    if (event !== "run" || page.pinned) return;
    if (run.status !== "ok" && run.status !== "failed") return;
    if (page.binding && run.binding !== page.binding) return;
    notice.replaceChildren();
    const text = run.status === "ok"
      ? "Run #" + run.id + " of " + run.binding + " finished with " + run.total_findings + " finding(s). "
      : "Run #" + run.id + " of " + run.binding + " failed: " + run.error + " ";
    notice.appendChild(document.createTextNode(text));
    if (run.status === "ok") {
      const link = document.createElement("a");
      link.href = location.pathname + location.search;
      link.textContent = "Reload";
      notice.appendChild(link);
    }
    notice.hidden = false;
    document.body.dataset.reconcileRun = run.id + ":" + run.status;
  });
})();
