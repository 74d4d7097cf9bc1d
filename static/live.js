/* The effect page's live check (templates/reviews/_live.html).
 *
 * htmx polls the live view every 3 s with the state the page shows; a 204 means nothing
 * changed. A banner means something did: this script moves the poll on to the new state (so
 * the banner is not sent again every 3 s), and, unless the operator is busy with a form,
 * replaces the page's content with the latest, keeping the banner. Busy means: a field that
 * differs from what the page rendered, an error being corrected, focus in a field, or an
 * open dialog. Then the banner's "Show the latest" link stays the way to catch up, and no
 * typing is lost.
 */
(function () {
  "use strict";

  function banner() {
    return document.getElementById("live-banner");
  }

  function changed(field) {
    if (!field.matches("input, textarea, select") || field.disabled) return false;
    if (["hidden", "submit", "button", "reset", "image"].indexOf(field.type) !== -1) return false;
    if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
    if (field.tagName === "SELECT") {
      // Without a `selected` attribute a single select starts on its first option.
      const options = Array.from(field.options);
      const initial = options.some(function (o) { return o.defaultSelected; })
        ? function (o) { return o.defaultSelected; }
        : function (o, i) { return !field.multiple && i === 0; };
      return options.some(function (o, i) { return o.selected !== initial(o, i); });
    }
    return field.value !== field.defaultValue || field.hasAttribute("data-typed");
  }

  function busy(page) {
    if (document.querySelector("dialog[open]")) return true;
    const active = document.activeElement;
    if (active && page.contains(active) && active.matches("input, textarea, select")) return true;
    return Array.from(page.querySelectorAll("form")).some(function (form) {
      return form.querySelector("[role=alert], [aria-invalid=true]") !== null ||
        Array.from(form.elements).some(changed);
    });
  }

  function follow(poller, state) {
    poller.setAttribute("hx-vals", JSON.stringify({ version: state.dataset.version, item: state.dataset.item }));
  }

  /* The latest page, fetched as a whole; its #effect-page replaces ours (the fetch is not
   * htmx's, so no swap handler moves focus or scroll: the operator keeps their place). */
  function refresh(page, shown) {
    const open = Array.from(page.querySelectorAll("details[open][id]")).map(function (d) { return d.id; });
    const focused = document.activeElement && document.activeElement.id;
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null || busy(page)) return;
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("effect-page");
        if (!fresh || !document.body.contains(page)) return;
        const adopted = document.adoptNode(fresh);
        adopted.querySelectorAll("script").forEach(function (s) { s.remove(); });
        open.forEach(function (id) {
          const d = adopted.querySelector("details#" + CSS.escape(id));
          if (d) d.open = true;
        });
        page.replaceWith(adopted);
        window.htmx.process(adopted);
        const again = banner();
        if (again) {
          again.innerHTML = shown;
          again.classList.add("is-fresh");
          again.querySelectorAll("[data-live-state]").forEach(function (s) { s.remove(); });
        }
        const back = focused && document.getElementById(focused);
        if (back) back.focus({ preventScroll: true });
      })
      .catch(function () { /* the next poll tries again */ });
  }

  document.addEventListener("htmx:afterSwap", function (event) {
    const poller = event.detail.target;
    if (!poller || poller.id !== "live-banner") return;
    poller.classList.remove("is-fresh");
    const state = poller.querySelector("[data-live-state]");
    if (!state) return;
    follow(poller, state);
    const page = document.getElementById("effect-page");
    if (page && !busy(page)) refresh(page, poller.innerHTML);
  });

  /* A hold from the panel answers with a queue row, which is dropped (hx-swap="none"):
   * check at once, so the panel shows the hold without waiting for the next poll. */
  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.detail.elt;
    if (!form || !form.hasAttribute || !form.hasAttribute("data-live-hold")) return;
    const poller = banner();
    if (poller && event.detail.successful) window.htmx.trigger(poller, "live-check");
  });

  /* A note just added: focus it. htmx focuses [autofocus] as it settles, but app.js then
   * moves focus to the swapped panel's heading (after a timeout of its own, queued before
   * this one): this puts it back on the note. */
  document.addEventListener("htmx:afterSettle", function (event) {
    const target = event.detail.target;
    if (!target || target.id !== "item-panel") return;
    window.setTimeout(function () {
      const added = document.querySelector("#item-panel [data-new-note]");
      if (!added) return;
      added.focus({ preventScroll: true });
      added.scrollIntoView({ block: "nearest" });
    }, 0);
  });
})();
