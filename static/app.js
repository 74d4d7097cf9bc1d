/* Effect Ledger pages: keyboard shortcuts, and where focus goes after an htmx swap.

   Shortcuts (the help dialog in base.html lists them, "?" or its header button opens it):
   - review queue: j / k move the current row (class is-current, focus on its open link),
     o opens it, a decision's letter opens its effect with that decision's form (?decide=...);
   - effect page: a decision's letter opens that decision (its <details id="decide-...">), and
     decide.js puts the focus in its form where it needs input.
   Which letter is which decision's is read from the help's [data-decide-key] entries (each kind
   declares its own, reviews.decisions.kinds). Nothing happens while the user types in a field,
   with Ctrl, Alt or Meta held (the browser's and the screen reader's own shortcuts; decide.js
   handles Ctrl/Cmd+Enter in a decision's form), or while a dialog is open.

   After a swap that the user's click or submit caused, focus moves to what it brought: the
   decision's result (#decision-result), else an alert, else its first heading, scrolled into
   view; otherwise focus would drop to <body> and the result could sit above the viewport.
   Swaps nobody asked for (polling, a search typed into a field) leave focus where it is. */
(function () {
  "use strict";

  var ROW = "tr.queue-row";
  // The row the user chose, by its review item id, so that a row swapped in by the queue's
  // live refresh keeps being the current one.
  var currentItem = null;

  function typingIn(element) {
    if (!element || element === document.body) return false;
    if (element.isContentEditable) return true;
    return /^(INPUT|TEXTAREA|SELECT)$/.test(element.tagName);
  }

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll(ROW));
  }

  function openLink(row) {
    return row ? row.querySelector("a[data-open]") : null;
  }

  function currentRow() {
    return document.querySelector(ROW + ".is-current");
  }

  function markCurrent(row) {
    rows().forEach(function (other) {
      if (other !== row) other.classList.remove("is-current");
    });
    row.classList.add("is-current");
    currentItem = row.getAttribute("data-item");
  }

  function makeCurrent(row) {
    markCurrent(row);
    var link = openLink(row);
    if (link) link.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var all = rows();
    if (!all.length) return false;
    var at = all.indexOf(currentRow());
    var next = at < 0 ? (step > 0 ? 0 : all.length - 1) : at + step;
    makeCurrent(all[Math.max(0, Math.min(all.length - 1, next))]);
    return true;
  }

  function go(row, action) {
    var link = openLink(row);
    if (!link) return false;
    var url = new URL(link.href, window.location.href);
    if (action) url.searchParams.set("decide", action);
    window.location.assign(url.toString());
    return true;
  }

  // The decision a letter opens, from the help's list (one letter per kind), or "".
  function decisionOf(key) {
    var entry = document.querySelector('#shortcuts [data-decide-key="' + CSS.escape(key) + '"]');
    return entry ? entry.getAttribute("data-action") : "";
  }

  // Opens the decision (the one already open, the suggested one, stays open) and asks
  // decide.js to focus its form where it needs input.
  function decideHere(action) {
    var details = document.getElementById("decide-" + action);
    if (!details || details.tagName !== "DETAILS") return false;
    details.open = true;
    details.dispatchEvent(new CustomEvent("ledger:decide", { bubbles: true }));
    return true;
  }

  function showHelp() {
    var help = document.getElementById("shortcuts");
    if (!help || help.open) return false;
    help.showModal();
    return true;
  }

  function handle(key) {
    if (key === "?") return showHelp();
    var onQueue = rows().length > 0;
    if (onQueue && (key === "j" || key === "k")) return move(key === "j" ? 1 : -1);
    if (onQueue && key === "o") return go(currentRow(), "");
    var action = key.length === 1 ? decisionOf(key) : "";
    if (!action) return false;
    if (onQueue) return currentRow() ? go(currentRow(), action) : false;
    return decideHere(action);
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.altKey || event.metaKey) return;
    if (typingIn(event.target) || document.querySelector("dialog[open]")) return;
    if (handle(event.key)) event.preventDefault();
  });

  // The header's "Shortcuts" button opens the same help as "?".
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-show-shortcuts]") : null;
    if (button && showHelp()) event.preventDefault();
  });

  // A row the user reaches with Tab or the mouse becomes the current one, so j / k go on
  // from where they are.
  document.addEventListener("focusin", function (event) {
    var row = event.target.closest ? event.target.closest(ROW) : null;
    if (row) markCurrent(row);
  });

  // --- focus after htmx swaps -----------------------------------------------------------------

  // One swap may settle several elements (an outerHTML swap of many nodes): collect them and
  // place focus once.
  var settled = [];
  var userCaused = false;

  function focusTarget(elements) {
    var selectors = ["#decision-result", '[role="alert"]', "h1, h2, h3"];
    for (var i = 0; i < selectors.length; i++) {
      for (var j = 0; j < elements.length; j++) {
        var element = elements[j];
        if (!element.isConnected || !element.matches) continue;
        if (element.matches(selectors[i])) return element;
        var inside = element.querySelector(selectors[i]);
        if (inside) return inside;
      }
    }
    return null;
  }

  function focusLost() {
    var active = document.activeElement;
    return !active || active === document.body || !active.isConnected;
  }

  // A swap with nothing to announce (a held queue row): focus its first control rather
  // than leave it on <body>.
  function firstControl(elements) {
    for (var i = 0; i < elements.length; i++) {
      var element = elements[i];
      if (!element.isConnected || !element.querySelector) continue;
      var control = element.querySelector("a[href], button, input, select, textarea, summary");
      if (control) return control;
    }
    return null;
  }

  function placeFocus() {
    var elements = settled;
    var wanted = userCaused;
    settled = [];
    userCaused = false;
    keepCurrentRow();
    if (!wanted) return;
    var target = focusTarget(elements) || (focusLost() ? firstControl(elements) : null);
    if (!target) return;
    // Headings and messages take focus only from script; controls keep their place in Tab.
    if (target.tabIndex < 0 && !target.hasAttribute("tabindex")) {
      target.setAttribute("tabindex", "-1");
    }
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "nearest" });
  }

  function keepCurrentRow() {
    if (currentItem === null || currentRow()) return;
    var row = document.querySelector(ROW + '[data-item="' + CSS.escape(currentItem) + '"]');
    if (!row) return;
    // The focused link went with the old row: give focus back to the new one's.
    if (document.activeElement === document.body) makeCurrent(row);
    else markCurrent(row);
  }

  document.addEventListener("htmx:afterSettle", function (event) {
    var config = event.detail && event.detail.requestConfig;
    var trigger = config && config.triggeringEvent;
    if (trigger && (trigger.type === "click" || trigger.type === "submit")) userCaused = true;
    if (!settled.length) window.setTimeout(placeFocus, 0);
    settled.push(event.target);
  });
})();
