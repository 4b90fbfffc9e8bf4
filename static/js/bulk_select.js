// One acknowledge form for a table's selection: "select the page" ticks every row, and the
// form says how many are ticked. Rows' checkboxes belong to the form by their form attribute.
(function () {
  const form = document.getElementById("bulk-ack");
  if (!form) return;
  const all = document.getElementById("select-page");
  const count = document.getElementById("selected-count");
  function boxes() { return Array.from(document.querySelectorAll('input[type=checkbox][form="bulk-ack"]')); }
  function update() {
    const n = boxes().filter(function (b) { return b.checked; }).length;
    if (count) count.textContent = String(n);
    if (n) { const selected = form.querySelector('input[name=scope][value=selected]'); if (selected) selected.checked = true; }
  }
  if (all) all.addEventListener("change", function () { boxes().forEach(function (b) { b.checked = all.checked; }); update(); });
  document.addEventListener("change", function (e) { if (e.target.matches && e.target.matches('input[form="bulk-ack"]')) update(); });
  update();
})();
