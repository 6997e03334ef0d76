// Score | TPF explorer: a click on a point of the Plotly chart (#explorer-chart) becomes a `select` event
// of the component running this script, carrying the point's settings (its customdata: τ_mask, τ_edit,
// MBE, block). Gradio's Plot component does not report clicks, and Plotly re-creates its event emitter
// when it redraws, so the listener is (re)attached whenever the chart's emitter is new.
(function () {
  const bound = new WeakMap();  // graph div -> the `on` function the listener was attached with

  function onClick(event) {
    const point = event && event.points && event.points[0];
    if (point && Array.isArray(point.customdata)) {
      trigger("select", { index: point.pointNumber, value: point.customdata });
    }
  }

  function bind() {
    const graph = document.querySelector("#explorer-chart .js-plotly-plot");
    if (graph && typeof graph.on === "function" && bound.get(graph) !== graph.on) {
      graph.on("plotly_click", onClick);
      bound.set(graph, graph.on);
    }
  }

  setInterval(bind, 400);
})();
