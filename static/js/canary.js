// Canary dashboard: per-minute points (one per session, minute and partition) are merged
// per minute and partition, or per minute and leader broker, and drawn with Plotly.
// New minutes arrive over the websocket (group "canary"). All text goes in via textContent.
(function () {
  const data = JSON.parse(document.getElementById("canary-data").textContent);
  const topic = data.topic;
  const cluster = data.cluster || "";
  const windowMs = data.minutes * 60000;
  const points = new Map();  // "session|minute|partition" -> point
  const COUNTS = ["sent", "received", "lost", "truncated", "duplicated", "out_of_order", "late", "produce_errors", "unacked"];
  const TITLES = {lost: "records lost per minute", duplicated: "duplicates per minute", p99_ms: "latency p99 (ms)"};

  function add(list) {
    list.forEach(function (p) { points.set(p.session + "|" + p.minute + "|" + p.partition, p); });
    const horizon = Date.now() - windowMs - 60000;
    for (const [k, p] of points) { if (Date.parse(p.minute) < horizon) points.delete(k); }
  }

  // Sessions of one minute add up; latency keeps the worst value.
  function merge(into, p) {
    COUNTS.forEach(function (c) { into[c] = (into[c] || 0) + (p[c] || 0); });
    ["p50_ms", "p99_ms", "max_ms"].forEach(function (c) {
      if (p[c] !== null && p[c] !== undefined) into[c] = Math.max(into[c] === undefined ? 0 : into[c], p[c]);
    });
    if (p.leader !== null && p.leader !== undefined) into.leader = p.leader;
  }

  // series key -> minute -> merged values
  function grouped(by) {
    const series = new Map();
    function into(key, p) {
      if (!series.has(key)) series.set(key, new Map());
      const minutes = series.get(key);
      if (!minutes.has(p.minute)) minutes.set(p.minute, {});
      merge(minutes.get(p.minute), p);
    }
    for (const p of points.values()) {
      if (by !== "leader") { into(String(p.partition), p); continue; }
      // Losses go to the broker each record was sent to, not the leader when the minute
      // closed (after a failover, its healthy successor); the rest stays with that leader.
      const sentTo = Object.entries(p.lost_leaders || {});
      const attributed = sentTo.reduce(function (sum, e) { return sum + e[1]; }, 0);
      into(p.leader === null ? "none" : String(p.leader), Object.assign({}, p, {lost: (p.lost || 0) - attributed}));
      sentTo.forEach(function (e) { into(e[0], {minute: p.minute, lost: e[1]}); });
    }
    return series;
  }

  function numericOrder(a, b) { return (parseInt(a, 10) || 0) - (parseInt(b, 10) || 0); }

  function drawChart(div) {
    const by = div.dataset.by, metric = div.dataset.metric;
    const series = grouped(by);
    const traces = [...series.keys()].sort(numericOrder).map(function (key) {
      const minutes = [...series.get(key).keys()].sort();
      return {
        type: "scatter", mode: "lines+markers",
        name: (by === "leader" ? "broker " : "partition ") + key,
        x: minutes.map(function (m) { return AuditorCharts.utc(m); }),
        y: minutes.map(function (m) { const v = series.get(key).get(m)[metric]; return v === undefined ? null : v; }),
      };
    });
    const layout = {
      title: {text: TITLES[metric] + (by === "leader" ? " by leader broker" : " by partition"), font: {size: 13}},
      margin: {l: 45, r: 10, t: 35, b: 75},
      xaxis: {type: "date", tickformat: "%H:%M", hoverformat: "%Y-%m-%d %H:%M", title: AuditorCharts.timeAxisTitle}, yaxis: {rangemode: "tozero"},
      legend: AuditorCharts.legendBelow, showlegend: true,
    };
    Plotly.react(div, traces, layout, {displaylogo: false, responsive: true});
  }

  function cell(tr, value, cls) {
    const td = document.createElement("td");
    td.textContent = value === null || value === undefined ? "–" : String(value);
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  function drawTable() {
    const tbody = document.querySelector("#canary-latest tbody");
    const minutes = [...new Set([...points.values()].map(function (p) { return p.minute; }))].sort();
    const latest = minutes[minutes.length - 1];
    document.getElementById("latest-minute").textContent = latest ? AuditorCharts.utc(latest).slice(0, 16) + " UTC" : "";
    const rows = new Map();
    for (const p of points.values()) {
      if (p.minute !== latest) continue;
      if (!rows.has(p.partition)) rows.set(p.partition, {});
      merge(rows.get(p.partition), p);
    }
    tbody.replaceChildren(...[...rows.keys()].sort(function (a, b) { return a - b; }).map(function (partition) {
      const r = rows.get(partition);
      const tr = document.createElement("tr");
      tr.dataset.partition = String(partition);
      cell(tr, partition);
      cell(tr, r.leader);
      COUNTS.forEach(function (c) {
        const alarm = ["lost", "truncated", "duplicated", "out_of_order"].includes(c) && r[c] > 0;
        cell(tr, r[c], "num" + (alarm ? " alarm" : ""));
      });
      ["p50_ms", "p99_ms", "max_ms"].forEach(function (c) {
        cell(tr, r[c] === undefined ? null : r[c].toFixed(1), "num");
      });
      return tr;
    }));
  }

  function drawTotals() {
    const total = {};
    for (const p of points.values()) merge(total, p);
    document.querySelectorAll("#canary-cards [data-total]").forEach(function (el) {
      const v = total[el.dataset.total];
      el.textContent = v === undefined ? (el.dataset.total === "p99_ms" ? "–" : "0")
        : (el.dataset.total === "p99_ms" ? v.toFixed(1) + " ms" : String(v));
    });
    document.getElementById("canary-empty").hidden = points.size > 0;
  }

  function render() {
    document.querySelectorAll(".chart[data-metric]").forEach(drawChart);
    drawTable();
    drawTotals();
  }

  add(data.points);
  render();
  AuditorLive.subscribe("canary", function (event, payload) {
    if (event !== "points" || payload.topic !== topic) return;
    // canaries on other clusters share the topic name: only this cluster's points
    add(payload.points.filter(function (p) { return (p.scope || "") === cluster; }));
    render();
  });
})();
