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

  // Until a chart has two points uPlot has no time range to draw (one point spans years, none is
  // an empty box): say when the next point comes instead.
  function waiting(el) {
    var note = el.querySelector(".collecting");
    if (note === null) {
      note = document.createElement("p");
      note.className = "note collecting";
      note.textContent = "collecting data \u2014 a point every " + interval / 1000 + " s";
      el.appendChild(note);
    }
    return note;
  }

  function draw(el) {
    var plot = null;
    function refresh() {
      fetch(el.dataset.src, {headers: {Accept: "application/json"}})
        .then(function (r) { return r.json(); })
        .then(function (json) {
          var cols = columns(json, el.dataset.key);
          var points = cols ? cols.values[0].length : 0;
          el.dataset.points = String(points);
          if (plot === null && points < 2) {
            waiting(el);
            return;
          }
          if (!cols) { return; }
          if (plot === null) {
            el.removeChild(waiting(el));
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
        })
        .catch(function () { el.dataset.failed = "1"; });
    }
    refresh();
    setInterval(refresh, interval);
  }

  document.querySelectorAll(".chart").forEach(draw);
})();
