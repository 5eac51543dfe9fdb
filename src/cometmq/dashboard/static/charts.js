// Draws every <div class="chart" data-src="URL" [data-key="K"]> as a uPlot line chart of the JSON at
// URL ({"t": [unix seconds], "name": [values], ...}, or such objects under K), refreshed every
// data-interval ms. The figures are sampled by the dashboard server; this only draws them.
(function () {
  "use strict";
  var interval = Number(document.currentScript.dataset.interval) || 5000;
  var colours = ["#2a6fdb", "#e07b39", "#3c9d5d", "#b04fb0", "#c0392b"];

  function columns(json, key) {
    var data = key ? json[key] : json;
    if (!data || !data.t) { return null; }
    var names = Object.keys(data).filter(function (n) { return n !== "t"; });
    return {names: names, values: [data.t].concat(names.map(function (n) { return data[n]; }))};
  }

  function draw(el) {
    var plot = null;
    function refresh() {
      fetch(el.dataset.src, {headers: {Accept: "application/json"}})
        .then(function (r) { return r.json(); })
        .then(function (json) {
          var cols = columns(json, el.dataset.key);
          if (!cols) { return; }
          if (plot === null) {
            plot = new uPlot({
              width: el.clientWidth || 600,
              height: 220,
              series: [{}].concat(cols.names.map(function (n, i) {
                return {label: n, stroke: colours[i % colours.length], width: 2, spanGaps: false};
              })),
              axes: [{}, {label: el.dataset.unit || ""}],
            }, cols.values, el);
          } else {
            plot.setData(cols.values);
          }
          el.dataset.points = String(cols.values[0].length);
        })
        .catch(function () { el.dataset.failed = "1"; });
    }
    refresh();
    setInterval(refresh, interval);
  }

  document.querySelectorAll(".chart").forEach(draw);
})();
