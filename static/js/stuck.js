// Stuck items page: verdict cards, the items with evidence, risks, a Plotly chart of counts per
// verdict over time, recent diagnoses. After each diagnosis (websocket group "stuck") the data
// for the current filters is fetched again and the page is redrawn in place.
// Everything from the server goes into the DOM through textContent: keys, reasons and
// evidence are data, never HTML.
(function () {
  const page = JSON.parse(document.getElementById("stuck-page").textContent);
  const VERDICTS = page.verdicts;
  const TONES = page.tones;
  const COLORS = {
    "never-produced": "#b3261e", "produce-failed": "#d4542b", "broker-lost": "#7b1fa2", "aborted": "#8d6e63",
    "waiting": "#a05a00", "skipped": "#c2185b", "processed-not-updated": "#1565c0", "expired": "#455a64",
    "unknown": "#9e9e9e",
  };
  let data = page.data;

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function setText(id, value) {
    const node = document.getElementById(id);
    if (node) node.textContent = String(value);
  }

  // The same forms as auditor/stuck/formatting.py (the first render).
  function age(seconds) {
    if (seconds < 120) return Math.round(seconds) + "s";
    if (seconds < 7200) return Math.round(seconds / 60) + "m";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + "h";
    return (seconds / 86400).toFixed(1) + "d";
  }

  function moment(iso) {
    return iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) : "";
  }

  function count(n) {
    return Number(n || 0).toLocaleString("en-US");
  }

  function renderCards() {
    setText("count-total", count(data.total));
    VERDICTS.forEach(function (v) {
      setText("count-" + v, count(data.counts[v]));
      const card = document.querySelector('#stuck-cards a.card[data-verdict="' + v + '"]');
      if (card) card.classList.toggle("zero", !data.counts[v]);
    });
  }

  function where(evidence) {
    if (!evidence || evidence.partition === undefined || evidence.partition === null) return "–";
    return evidence.topic + "/" + evidence.partition + "@" + evidence.offset;
  }

  // The acknowledgement cell, as templates/accounts/_acknowledgement.html draws it. The forms are
  // clones of the page's <template>s (they carry the CSRF token); only their action changes.
  function formFor(templateId, urlPattern, itemId) {
    const template = document.getElementById(templateId);
    if (!page.can_operate || !template) return null;
    const form = template.content.querySelector("form").cloneNode(true);
    form.action = urlPattern.replace("/0/", "/" + encodeURIComponent(itemId) + "/");
    return form;
  }

  function ackCell(item) {
    const td = el("td", null, "ack");
    const ack = item.acknowledgement;
    if (!ack) {
      td.appendChild(el("span", "—", "muted"));  // acknowledged through the page's one form
      return td;
    }
    td.appendChild(el("span", ack.action === "mute" ? "muted" : "acknowledged", "badge ack-" + ack.action));
    td.appendChild(document.createTextNode(" by "));
    td.appendChild(el("span", ack.by, "ack-by"));
    td.appendChild(document.createTextNode(" "));
    td.appendChild(el("span", moment(ack.at).slice(0, 16) + " UTC", "ack-at"));
    td.appendChild(document.createTextNode(
      (ack.mute_until ? " until " + moment(ack.mute_until).slice(0, 16) + " UTC" : "") + ": "));
    td.appendChild(el("em", ack.reason, "ack-reason"));
    const withdraw = formFor("withdraw-form-template", page.withdraw_url, item.id);
    if (withdraw) td.appendChild(withdraw);
    return td;
  }

  function evidenceCell(item) {
    const td = el("td", null, "ev");
    const fields = item.evidence_fields || [];
    if (!fields.length) { td.appendChild(el("span", "—", "muted")); return td; }
    const dl = el("dl", null, "evidence");
    fields.forEach(function (f) { dl.appendChild(el("dt", f[0])); dl.appendChild(el("dd", f[1])); });
    td.appendChild(dl);
    const details = el("details", null, "raw");
    details.appendChild(el("summary", "raw JSON"));
    details.appendChild(el("pre", JSON.stringify(item.evidence, null, 1), "evidence"));
    td.appendChild(details);
    return td;
  }

  function pagerLink(text, number) {
    const params = new URLSearchParams();
    if (data.filters.rule) params.set("rule", data.filters.rule);
    if (data.filters.verdict) params.set("verdict", data.filters.verdict);
    params.set("page", String(number));
    const a = el("a", text);
    a.href = "?" + params.toString();
    a.dataset.page = String(number);
    return a;
  }

  function renderPager() {
    const pager = document.getElementById("stuck-pager");
    setText("items-shown", data.items_total + " item" + (data.items_total === 1 ? "" : "s") +
      (data.pages > 1 ? ", page " + data.page + " of " + data.pages : ""));
    setText("matching-count", String(data.items_total));
    if (!pager) return;
    const parts = [];
    if (data.pages > 1) {
      if (data.page > 1) parts.push(pagerLink("previous", data.page - 1));
      parts.push(el("span", "page " + data.page + " of " + data.pages));
      if (data.page < data.pages) parts.push(pagerLink("next", data.page + 1));
    }
    pager.replaceChildren(...parts);
  }

  function renderItems() {
    const tbody = document.querySelector("#stuck-items tbody");
    renderPager();
    const columns = page.can_operate ? 10 : 9;
    if (!data.items.length) {
      const tr = el("tr", null, "empty");
      const td = el("td", "No stuck items" + (data.filters.rule || data.filters.verdict ? " for these filters." : "."), "muted");
      td.colSpan = columns;
      tr.appendChild(td);
      tbody.replaceChildren(tr);
      return;
    }
    tbody.replaceChildren(...data.items.map(function (item) {
      const tr = document.createElement("tr");
      tr.dataset.key = item.key;
      tr.dataset.verdict = item.verdict;
      if (page.can_operate) {
        const sel = el("td", null, "sel");
        if (!item.acknowledgement) {
          const box = document.createElement("input");
          box.type = "checkbox"; box.name = "item"; box.value = String(item.id);
          box.setAttribute("form", "bulk-ack"); box.className = "ack-select";
          box.setAttribute("aria-label", "select " + item.key);
          sel.appendChild(box);
        }
        tr.appendChild(sel);
      }
      const keyCell = el("td", null, "key");
      if (item.key_url) { const a = el("a", item.key); a.href = item.key_url; keyCell.appendChild(a); }
      else keyCell.textContent = item.key;
      tr.appendChild(keyCell);
      const ruleCell = el("td", item.rule);
      ruleCell.appendChild(el("div", item.status, "muted"));
      tr.appendChild(ruleCell);
      const ageCell = el("td", age(item.age_seconds));
      ageCell.dataset.seconds = String(item.age_seconds);
      tr.appendChild(ageCell);
      tr.appendChild(el("td", item.verdict, "verdict tone-" + (TONES[item.verdict] || "muted")));
      tr.appendChild(el("td", item.reason, "why"));
      tr.appendChild(el("td", where(item.evidence)));
      tr.appendChild(evidenceCell(item));
      tr.appendChild(el("td", moment(item.first_seen)));
      tr.appendChild(ackCell(item));
      tr.dataset.item = String(item.id);
      if (item.acknowledgement) tr.dataset.ack = item.acknowledgement.action;
      return tr;
    }));
    const all = document.getElementById("select-page");
    if (all) all.checked = false;
    const count = document.getElementById("selected-count");
    if (count) count.textContent = "0";
  }

  function renderRisks() {
    const list = document.getElementById("stuck-risks");
    if (!data.risks.length) {
      list.replaceChildren(el("li", "No open transactions, retention or offset-expiry risks seen.", "muted empty"));
      return;
    }
    list.replaceChildren(...data.risks.map(function (risk) {
      const li = document.createElement("li");
      li.dataset.kind = risk.kind;
      li.appendChild(el("span", risk.severity, "sev-" + risk.severity));
      li.appendChild(document.createTextNode(" " + risk.message + " "));
      li.appendChild(el("span", "(" + risk.rule + ")", "muted"));
      return li;
    }));
  }

  function renderRuns() {
    const tbody = document.querySelector("#stuck-runs tbody");
    if (!data.runs.length) return;
    tbody.replaceChildren(...data.runs.map(function (run) {
      const tr = document.createElement("tr");
      [
        "#" + run.id, run.rule, run.trigger, run.status, moment(run.started_at),
        run.duration_s === null ? "" : run.duration_s, run.total, run.became_stuck, run.got_unstuck,
        [run.error].concat(run.notes || []).filter(Boolean).join(" "),
      ].forEach(function (value) { tr.appendChild(el("td", value)); });
      return tr;
    }));
    const latest = data.runs[0];
    setText("stuck-latest", "Last diagnosis #" + latest.id + " of " + latest.rule + ": " + latest.status +
      ", " + (latest.finished_at ? moment(latest.finished_at) + " UTC" : "running"));
    document.body.dataset.stuckRun = String(latest.id);
  }

  function renderChart() {
    const div = document.getElementById("stuck-chart");
    if (!window.Plotly) return;
    const rules = [...new Set(data.points.map(function (p) { return p.rule; }))];
    const series = new Map();  // name -> {x, y, verdict}
    data.points.forEach(function (p) {
      const name = rules.length > 1 ? p.rule + " · " + p.verdict : p.verdict;
      if (!series.has(name)) series.set(name, {x: [], y: [], verdict: p.verdict, any: false});
      const s = series.get(name);
      s.x.push(AuditorCharts.utc(p.at));
      s.y.push(p.count);
      if (p.count) s.any = true;
    });
    const traces = [...series.entries()].filter(function (e) { return e[1].any; }).map(function (e) {
      return {
        type: "scatter", mode: "lines+markers", name: e[0], x: e[1].x, y: e[1].y,
        line: {color: COLORS[e[1].verdict], shape: "hv"},
      };
    });
    const times = [...new Set(data.points.map(function (p) { return Date.parse(p.at); }))];
    const xaxis = {type: "date", range: AuditorCharts.dateRange(times), title: AuditorCharts.timeAxisTitle};
    const layout = {
      margin: {l: 50, r: 10, t: 10, b: 75}, xaxis: xaxis, yaxis: {rangemode: "tozero"},
      legend: AuditorCharts.legendBelow, showlegend: true,
      annotations: traces.length ? [] : [{text: "no stuck items in the last 24 h", showarrow: false,
        xref: "paper", yref: "paper", x: 0.5, y: 0.5}],
    };
    Plotly.react(div, traces, layout, {displaylogo: false, responsive: true});
  }

  function renderAll() {
    renderCards();
    renderItems();
    renderRisks();
    renderRuns();
    renderChart();
  }

  function refresh() {
    const params = new URLSearchParams();
    if (data.filters.rule) params.set("rule", data.filters.rule);
    if (data.filters.verdict) params.set("verdict", data.filters.verdict);
    if (data.page > 1) params.set("page", String(data.page));
    return fetch(window.STUCK_ITEMS_URL + "?" + params.toString(), {headers: {Accept: "application/json"}})
      .then(function (r) { return r.json(); })
      .then(function (fresh) { data = fresh; renderAll(); });
  }

  function describeChanges(payload) {
    const parts = [];
    const became = payload.became_stuck || [];
    const unstuck = payload.got_unstuck || [];
    if (became.length) parts.push(became.length + " became stuck (" + became.slice(0, 5).map(function (i) { return i.key; }).join(", ") + ")");
    if (unstuck.length) parts.push(unstuck.length + " got unstuck (" + unstuck.slice(0, 5).map(function (i) { return i.key; }).join(", ") + ")");
    const run = payload.run;
    const head = "Diagnosis #" + run.id + " of " + run.rule + " " + run.status + (run.error ? ": " + run.error : "");
    setText("stuck-changes", head + (parts.length ? " — " + parts.join("; ") : ""));
  }

  window.AuditorLive.subscribe("stuck", function (event, payload) {
    if (event !== "diagnosis") return;
    if (data.filters.rule && payload.run.rule !== data.filters.rule) return;
    describeChanges(payload);
    refresh();
  });

  const form = document.getElementById("diagnose-now");
  if (form) {
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      const state = document.getElementById("diagnose-state");
      state.textContent = "queuing…";
      fetch(form.action, {method: "POST", body: new FormData(form), headers: {Accept: "application/json"}})
        .then(function (r) { return r.json(); })
        .then(function (answer) { state.textContent = answer.message; })
        .catch(function () { state.textContent = "Could not reach the server."; });
    });
  }

  renderChart();
  if (data.runs.length) document.body.dataset.stuckRun = String(data.runs[0].id);
})();
