// What every date chart needs from Plotly beyond its defaults.
//
// Plotly places a JS Date at the browser's local wall time, while every table on the pages
// shows UTC: a viewer at UTC+1 would see a run that finished at 10:00 UTC plotted at 11:00.
// So the charts get UTC wall-clock strings ("2026-12-05 10:00:00.000", no offset), which
// Plotly plots as written, and their time axes say "UTC".
(function () {
  // "YYYY-MM-DD HH:MM:SS.sss" in UTC for an ISO time with an offset, epoch ms or a Date.
  function utc(time) {
    return new Date(time).toISOString().replace("T", " ").slice(0, 23);
  }

  window.AuditorCharts = {
    utc: utc,
    // Axis title of every time axis, right under its tick labels.
    timeAxisTitle: {text: "UTC", font: {size: 11}, standoff: 2},
    // A horizontal legend at the bottom of the figure, below the time axis title (Plotly's
    // default place for it, just under the plot area, is where that title goes).
    legendBelow: {orientation: "h", yref: "container", y: 0, yanchor: "bottom"},
    // An x range (UTC strings) for points at `times` (epoch ms), or undefined to let Plotly pick one.
    // No point: Plotly's empty date axis shows the year 2000, so show the last 24 hours.
    // One time only: Plotly zooms to sub-millisecond ticks, so show an hour around it.
    dateRange: function (times) {
      const distinct = [...new Set(times)];
      if (!distinct.length) return [utc(Date.now() - 86400000), utc(Date.now())];
      if (distinct.length === 1) return [utc(distinct[0] - 1800000), utc(distinct[0] + 1800000)];
      return undefined;
    },
  };
})();
