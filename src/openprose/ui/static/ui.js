// openprose ui: keeps a running run's page current. The server sends an event whenever the
// run records something; the page fetches its own parts again and swaps those that changed.
// No page reload, no inline script, nothing evaluated from the run.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || live.dataset.live !== "yes" || !window.EventSource) return;
  const run = encodeURIComponent(live.dataset.run);
  let busy = false, again = false;

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const params = new URLSearchParams(location.search);
      params.set("part", "live");
      const response = await fetch("/runs/" + run + "?" + params.toString(),
                                   {credentials: "same-origin"});
      if (!response.ok) return;
      const next = document.createElement("div");
      next.innerHTML = await response.text();
      for (const part of next.querySelectorAll("[data-part]")) {
        const name = part.dataset.part;
        const old = live.querySelector('[data-part="' + name + '"]');
        if (!old) live.appendChild(part);
        else if (old.innerHTML !== part.innerHTML) old.replaceWith(part);
      }
      for (const old of live.querySelectorAll("[data-part]")) {
        if (!next.querySelector('[data-part="' + old.dataset.part + '"]') &&
            old.parentNode === live) old.remove();
      }
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }

  const events = new EventSource("/runs/" + run + "/events");
  events.addEventListener("change", refresh);
  events.addEventListener("end", function () { events.close(); refresh(); live.dataset.live = "no"; });
  events.addEventListener("gone", function () { events.close(); });
})();
