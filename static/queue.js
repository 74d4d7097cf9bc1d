/* The review queue (templates/reviews/queue.html): bulk selection, and the live refresh.

   - "Select all on this page" ticks every row's checkbox; ticking rows by hand keeps it in step.
   - The results poll every few seconds. A poll that finds nothing changed answers 204 and swaps
     nothing; then only the "updated" time moves on. A poll that does swap brings new rows:
     the rows that were ticked, and "all matching this filter", are ticked again, so a refresh
     never loses an operator's selection. */
(function () {
  "use strict";

  var ITEMS = 'input[name="items"][form="bulk"]';
  var remembered = null;

  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll(ITEMS));
  }

  function pageBox() {
    return document.querySelector("[data-select-page]");
  }

  function syncPageBox() {
    var all = boxes();
    var box = pageBox();
    if (!box) return;
    var ticked = all.filter(function (b) { return b.checked; }).length;
    box.checked = all.length > 0 && ticked === all.length;
    box.indeterminate = ticked > 0 && ticked < all.length;
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches("[data-select-page]")) {
      boxes().forEach(function (b) { b.checked = target.checked; });
    } else if (target.matches && target.matches(ITEMS)) {
      syncPageBox();
    }
  });

  function isResults(element) {
    return element && element.id === "results";
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!isResults(event.detail.target)) return;
    var all = document.querySelector("[data-select-all]");
    remembered = {
      items: boxes().filter(function (b) { return b.checked; }).map(function (b) { return b.value; }),
      all: Boolean(all && all.checked),
      // A poll keeps the selection; a new filter starts afresh (other rows, another "all").
      keep: Boolean(event.detail.requestConfig && event.detail.requestConfig.elt &&
                    isResults(event.detail.requestConfig.elt)),
    };
  });

  document.addEventListener("htmx:afterSettle", function () {
    if (!remembered) return;
    var kept = remembered;
    remembered = null;
    if (!kept.keep) return;
    boxes().forEach(function (b) { b.checked = kept.items.indexOf(b.value) >= 0; });
    var all = document.querySelector("[data-select-all]");
    if (all) all.checked = kept.all;
    syncPageBox();
  });

  function two(n) { return (n < 10 ? "0" : "") + n; }

  document.addEventListener("htmx:afterRequest", function (event) {
    var xhr = event.detail.xhr;
    if (!isResults(event.detail.elt) || !xhr || xhr.status !== 204) return;
    var shown = document.querySelector("[data-live-updated]");
    if (!shown) return;
    var now = new Date();
    shown.textContent = two(now.getHours()) + ":" + two(now.getMinutes()) + ":" + two(now.getSeconds());
    shown.setAttribute("datetime", now.toISOString());
  });
})();
