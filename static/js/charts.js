// What every date chart needs from Plotly beyond its defaults.
(function () {
  window.AuditorCharts = {
    // An x range for points at `times` (epoch ms), or undefined to let Plotly pick one.
    // No point: Plotly's empty date axis shows the year 2000, so show the last 24 hours.
    // One time only: Plotly zooms to sub-millisecond ticks, so show an hour around it.
    dateRange: function (times) {
      const distinct = [...new Set(times)];
      if (!distinct.length) return [new Date(Date.now() - 86400000), new Date()];
      if (distinct.length === 1) return [new Date(distinct[0] - 1800000), new Date(distinct[0] + 1800000)];
      return undefined;
    },
  };
})();
