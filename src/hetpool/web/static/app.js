// hetpool dashboard: charts from data attributes, re-drawn after htmx swaps live fragments in.
(function () {
  function drawCharts(root) {
    if (!window.echarts) return;
    (root || document).querySelectorAll("[data-chart]").forEach(function (el) {
      var option;
      try { option = JSON.parse(el.getAttribute("data-chart")); } catch (e) { return; }
      var chart = echarts.getInstanceByDom(el) || echarts.init(el, null, { renderer: "svg" });
      chart.setOption(option, true);
      el.setAttribute("data-chart-ready", "1");
    });
  }
  document.addEventListener("DOMContentLoaded", function () { drawCharts(document); });
  document.addEventListener("htmx:afterSwap", function (e) { drawCharts(e.target); });
  window.addEventListener("resize", function () {
    document.querySelectorAll("[data-chart-ready]").forEach(function (el) { var c = echarts.getInstanceByDom(el); if (c) c.resize(); });
  });
})();
