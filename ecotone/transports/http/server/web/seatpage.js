// What a seat's page (/web?seat=KEY) does besides playing: it keeps its seat while it is open,
// and it downloads the seat's trajectory.
//
// A seat taken through its key is leased (the server's `lease`, formerly `idle_timeout`): a
// person thinking longer than the lease, with the page quiet on its turn, would lose the
// seat. So while the page is open it renews the lease every third of it
// (POST /v1/seats/{key}/keepalive, which renews the session's lease too), and stops when the
// page is hidden for good (pagehide), the seat is gone (its session closed: unknown_seat_key)
// or another connection took it (seat_taken).
//
// The download is the server's record of the episode as this seat saw it
// (GET /v1/seats/{key}/trajectory: its own moves and views, never another seat's), as JSON
// Lines in ecotone.recording's format, saved under the name the server gives.

import { el } from "/web/form.js";
import { api } from "/web/views.js";

const keyPath = (key, suffix) => `/v1/seats/${encodeURIComponent(key)}/${suffix}`;

// Renew the seat's lease every third of `lease` seconds while the page is open. `lost(exc)`
// is told when the seat cannot be kept (the pings stop then). Returns a function that stops.
export function keepSeat(key, lease, lost) {
  if (!(typeof lease === "number" && lease > 0)) return () => {};
  let timer = null;
  const stop = () => {
    if (timer !== null) clearInterval(timer);
    timer = null;
    document.body.dataset.keepalive = "stopped";
  };
  const ping = async () => {
    try {
      await api("POST", keyPath(key, "keepalive"));
      document.body.dataset.keptAt = String(Date.now());
    } catch (exc) {
      if (exc.code === "unknown_seat_key" || exc.code === "seat_taken") {
        stop();
        lost(exc);
      } // anything else (the network, a restart): the next ping tries again
    }
  };
  timer = setInterval(ping, Math.max(200, (lease * 1000) / 3));
  document.body.dataset.keepalive = "on";
  window.addEventListener("pagehide", stop);
  return stop;
}

// Save the seat's trajectory so far (`fallback`: the file's name if the server gives none).
export async function downloadTrajectory(key, fallback) {
  let response;
  try {
    response = await fetch(keyPath(key, "trajectory"), { cache: "no-store" });
  } catch (exc) {
    throw new Error(`the server is unreachable (${exc.message})`);
  }
  if (!response.ok) {
    const frame = await response.json().catch(() => ({}));
    throw new Error(`${frame.code || `HTTP ${response.status}`}: ${frame.message || ""}`);
  }
  const blob = await response.blob();
  const given = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") || "");
  const link = el("a", { href: URL.createObjectURL(blob), download: given ? given[1] : fallback });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}
