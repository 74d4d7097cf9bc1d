// Decisions on the effect page: one confirmation, in a <dialog> that names the decision and
// the effect and shows what happens next, before a decision form is sent; and the result of a
// decision focused and in view when a page load brings it (app.js does so after a swap).
//
// A decision form carries empty hidden `confirm` and `over_hold` inputs. The server records
// nothing until `confirm` is set: without this script it answers with a confirmation step of
// its own, so the no-JavaScript path asks once too. htmx asks us before each request
// (htmx:confirm); we hold the request, open the dialog, and let it go once confirmed.
//
// At the keyboard: a decision opened by its letter (app.js sends `ledger:decide`), or named in
// the address (?decide=..., where the queue's letters lead), takes the focus into its form, on
// the first field that needs input (required and empty), else on its submit button. Ctrl+Enter
// (Cmd+Enter) anywhere in an open decision sends its form, which opens the dialog; the dialog's
// confirm button has the focus, so Enter records, and Esc goes back to where the focus was.
(function () {
  "use strict";

  // The question names the provider reference the operator is confirming with.
  function question(form) {
    var text = form.dataset.question || "";
    var ref = form.elements.provider_ref;
    return text.replace("{ref}", ref && ref.value.trim() ? ref.value.trim() : "none given");
  }

  function openDialog(form, proceed) {
    var dialog = form.querySelector("dialog.decide-dialog");
    if (!dialog || typeof dialog.showModal !== "function") {
      proceed(); // no dialog support: the server's confirmation step asks instead
      return;
    }
    var before = document.activeElement;
    dialog.querySelector(".decide-question").textContent = question(form);
    var confirmButton = dialog.querySelector("[data-dialog-confirm]");
    var cancelButton = dialog.querySelector("[data-dialog-cancel]");
    function done(confirmed) {
      confirmButton.removeEventListener("click", onConfirm);
      cancelButton.removeEventListener("click", onCancel);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      if (!confirmed) {
        // Back: the focus returns to the field or button it left, never to <body>.
        if (before && before.isConnected && typeof before.focus === "function") before.focus();
        return;
      }
      form.elements.confirm.value = "on";
      // The dialog said who holds the item and asked to decide anyway.
      if (form.dataset.held) form.elements.over_hold.value = "on";
      proceed();
    }
    function onConfirm() { done(true); }
    function onCancel() { done(false); }
    function onClose() { done(false); }
    confirmButton.addEventListener("click", onConfirm);
    cancelButton.addEventListener("click", onCancel);
    dialog.addEventListener("close", onClose);
    dialog.showModal();
    confirmButton.focus();
  }

  document.addEventListener("htmx:confirm", function (event) {
    var elt = event.detail && event.detail.elt;
    var form = elt && elt.closest ? elt.closest("form.decide-form") : null;
    if (!form || form.elements.confirm.value === "on") return;
    event.preventDefault();
    if (!form.reportValidity()) return;
    openDialog(form, function () { event.detail.issueRequest(true); });
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail && event.detail.elt;
    if (!form || !form.matches || !form.matches("form.decide-form")) return;
    // A request that did not swap (a network error) must not leave the form pre-confirmed.
    if (form.isConnected) {
      form.elements.confirm.value = "";
      form.elements.over_hold.value = "";
    }
  });

  // --- the keyboard ----------------------------------------------------------------------------

  function needsInput(field) {
    if (!field.required || field.disabled) return false;
    return field.type === "checkbox" ? !field.checked : !field.value.trim();
  }

  // Focus the open decision's first field that needs input, else its submit button.
  function focusDecision(details) {
    var form = details.querySelector("form.decide-form");
    if (!form) return;
    var fields = Array.prototype.slice.call(
      form.querySelectorAll("input:not([type=hidden]), textarea, select")
    ).filter(function (field) { return !field.closest("dialog"); });
    var target = fields.filter(needsInput)[0] || form.querySelector("[data-decide-submit]");
    if (!target) return;
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "center" });
  }

  document.addEventListener("ledger:decide", function (event) {
    var details = event.target;
    if (details && details.matches && details.matches("details")) focusDecision(details);
  });

  // Ctrl+Enter (Cmd+Enter on a Mac) sends the decision the focus is in: its summary or its form.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    if (event.altKey || event.shiftKey || event.defaultPrevented) return;
    var target = event.target;
    if (!target || !target.closest || target.closest("dialog")) return;
    var details = target.closest('details[id^="decide-"]');
    var form = details && details.open ? details.querySelector("form.decide-form") : null;
    if (!form) return;
    event.preventDefault();
    var submit = form.querySelector("[data-decide-submit]");
    if (typeof form.requestSubmit === "function") form.requestSubmit(submit);
    else submit.click();
  });

  // The decision the address names (?decide=...), when nothing else came with the page load.
  function requestedDecision() {
    var action = new URLSearchParams(window.location.search).get("decide");
    var details = action ? document.getElementById("decide-" + action) : null;
    return details && details.tagName === "DETAILS" && details.open ? details : null;
  }

  // The outcome of a decision that came with a page load (no htmx: a redirect after the
  // decision, or the server's confirmation step), where the operator will read it: focused
  // and scrolled into view. After an htmx swap, app.js places focus the same way.
  function focusResult(root) {
    var shown = root.querySelector("#decision-result, #decision-problem, #confirm-step");
    if (!shown) return false;
    if (!shown.hasAttribute("tabindex")) shown.setAttribute("tabindex", "-1");
    shown.focus({ preventScroll: true });
    shown.scrollIntoView({ block: "center" });
    return true;
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (focusResult(document)) return;
    var requested = requestedDecision();
    if (requested) focusDecision(requested);
  });
})();
