// Reconciliation runs: a Plotly chart of findings per run, the runs table kept live over the
// websocket (group "reconcile", event "run"), and "Run now" without leaving the page.
// Everything from the server goes in with textContent.
(function () {
  const page = JSON.parse(document.getElementById("runs-page").textContent);
  const points = new Map(page.points.map(function (p) { return [p.id, p]; }));
  const tbody = document.querySelector("#runs tbody");
  const state = document.getElementById("run-state");

  // Findings only: counts also carry "unverifiable" (rows that could not be checked) and the
  // header counts (page.header_counts), which count records.
  function total(counts) {
    return page.kinds.reduce(function (sum, kind) { return sum + ((counts || {})[kind] || 0); }, 0);
  }

  function drawChart() {
    const div = document.getElementById("findings-chart");
    const list = [...points.values()].sort(function (a, b) { return a.id - b.id; });
    document.getElementById("chart-empty").hidden = list.length > 0;
    let traces;
    if (page.binding) {
      traces = page.kinds.map(function (kind) {
        return {
          type: "scatter", mode: "lines+markers", name: kind,
          x: list.map(function (p) { return AuditorCharts.utc(p.finished_at); }),
          y: list.map(function (p) { return p.counts[kind] || 0; }),
          text: list.map(function (p) { return "run #" + p.id; }),
        };
      });
    } else {
      const byBinding = new Map();
      list.forEach(function (p) {
        if (!byBinding.has(p.binding)) byBinding.set(p.binding, []);
        byBinding.get(p.binding).push(p);
      });
      traces = [...byBinding.keys()].sort().map(function (name) {
        const runs = byBinding.get(name);
        return {
          type: "scatter", mode: "lines+markers", name: name,
          x: runs.map(function (p) { return AuditorCharts.utc(p.finished_at); }),
          y: runs.map(function (p) { return total(p.counts); }),
          text: runs.map(function (p) { return "run #" + p.id; }),
        };
      });
    }
    const layout = {
      title: {text: page.binding ? "findings per run by kind" : "findings per run by binding", font: {size: 13}},
      margin: {l: 45, r: 10, t: 35, b: 75},
      xaxis: {type: "date", hoverformat: "%Y-%m-%d %H:%M:%S", title: AuditorCharts.timeAxisTitle}, yaxis: {rangemode: "tozero"},
      legend: AuditorCharts.legendBelow, showlegend: true,
    };
    // #chart-empty already says when there is no run; the axis still needs a sane range.
    layout.xaxis.range = AuditorCharts.dateRange(list.map(function (p) { return Date.parse(p.finished_at); }));
    Plotly.react(div, traces, layout, {displaylogo: false, responsive: true});
  }

  function cell(tr, value, className) {
    const td = document.createElement("td");
    td.textContent = value === null || value === undefined ? "" : String(value);
    if (className) td.className = className;
    tr.appendChild(td);
    return td;
  }

  function shortTime(iso) {
    return iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) : "";
  }

  // the template's title for the late count (templates/reconcile/runs.html)
  const LATE_TITLE = "rows with no record yet after a leader change: judged once the producers' retries are over";

  function runRow(run) {
    const tr = document.createElement("tr");
    tr.dataset.run = String(run.id);
    tr.dataset.status = run.status;
    const ok = run.status === "ok";
    const first = cell(tr, "");
    if (ok) {
      const link = document.createElement("a");
      link.href = page.findings_url + "?run=" + encodeURIComponent(run.id);
      link.textContent = "#" + run.id;
      first.appendChild(link);
    } else {
      first.textContent = "#" + run.id;
    }
    cell(tr, run.binding);
    cell(tr, run.status, "st-" + run.status);
    cell(tr, run.trigger);
    cell(tr, (run.mode || "") + (run.full ? " (--full)" : ""));
    cell(tr, run.started_at ? shortTime(run.started_at) : shortTime(run.created_at) + " (queued)");
    cell(tr, run.duration_s === null || run.duration_s === undefined ? "" : run.duration_s.toFixed(1) + "s", "num");
    cell(tr, ok ? run.records_read : "", "num");
    page.header_counts.forEach(function (name) {
      const n = ok ? (run.counts[name] || 0) : "";
      cell(tr, n, "num" + (n ? " nonzero" : "")).dataset.count = name;
    });
    // Findings per kind in one cell (only those found), so the table fits the window.
    const kinds = cell(tr, "", "kinds");
    if (ok) {
      let any = false;
      page.kinds.concat(["unverifiable", "late"]).forEach(function (kind) {
        const n = run.counts[kind] || 0;
        if (!n) return;
        any = true;
        const span = document.createElement("span");
        span.className = "nonzero";
        span.dataset.kind = kind;
        if (kind === "late") span.title = LATE_TITLE;
        span.textContent = n + " " + kind;
        kinds.appendChild(span);
        kinds.appendChild(document.createTextNode(" "));
      });
      if (run.new_findings) {
        const span = document.createElement("span");
        span.className = "muted";
        span.textContent = "(" + run.new_findings + " new)";
        kinds.appendChild(span);
      }
      if (!any) {
        const none = document.createElement("span");
        none.className = "muted";
        none.textContent = "none";
        kinds.appendChild(none);
      }
    }
    cell(tr, run.error, "error");
    return tr;
  }

  function showRun(run) {
    if (page.binding && run.binding !== page.binding) return;
    const row = runRow(run);
    const existing = tbody.querySelector('tr[data-run="' + CSS.escape(String(run.id)) + '"]');
    if (existing) {
      existing.replaceWith(row);
    } else {
      const empty = tbody.querySelector("tr.empty");
      if (empty) empty.remove();
      tbody.prepend(row);
    }
    if (run.status === "ok" && run.finished_at) {
      points.set(run.id, {id: run.id, binding: run.binding, finished_at: run.finished_at, counts: run.counts});
      drawChart();
    }
    document.body.dataset.reconcileRun = run.id + ":" + run.status;
  }

  drawChart();
  AuditorLive.subscribe("reconcile", function (event, payload) {
    if (event === "run") showRun(payload);
  });

  document.querySelectorAll("form.run-now").forEach(function (form) {
    form.addEventListener("submit", async function (e) {
      e.preventDefault();
      const button = form.querySelector("button");
      button.disabled = true;
      state.textContent = "Queuing a run…";
      try {
        const response = await fetch(form.action, {
          method: "POST",
          body: new FormData(form),
          headers: {Accept: "application/json"},
          credentials: "same-origin",
        });
        const data = await response.json();
        state.textContent = data.message;
      } catch (err) {
        state.textContent = "Could not queue the run: " + err;
      } finally {
        button.disabled = false;
      }
    });
  });
})();
