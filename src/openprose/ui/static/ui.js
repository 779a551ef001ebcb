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
      const next = document.createElement("template");  // inert: nothing loads or runs in it
      next.innerHTML = await response.text();
      const parts = Array.from(next.content.children).filter((el) => el.dataset.part);
      const names = new Set(parts.map((el) => el.dataset.part));
      for (const old of Array.from(live.children)) {
        if (old.dataset.part && !names.has(old.dataset.part)) old.remove();
      }
      let before = null;  // keep the server's order: each part after the previous one
      for (const part of parts) {
        const old = live.querySelector(':scope > [data-part="' + part.dataset.part + '"]');
        if (!old) {
          if (before) before.after(part); else live.prepend(part);
          before = part;
        } else if (old.innerHTML !== part.innerHTML) {
          old.replaceWith(part);
          before = part;
        } else {
          before = old;
        }
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
