// A Node.js agent written the ordinary way, with no crashpoint in it: for each ticket it POSTs
// a webhook (with an Idempotency-Key derived from the ticket, so a resend is deduplicated) and
// keeps its progress in a JSON state file.
//
//   node node_state.js STATE_DIR WEBHOOK_URL            rewrites state.json in place
//   node node_state.js STATE_DIR WEBHOOK_URL --atomic   temp file, fsync, rename, folder fsync
//   ... --tickets N                                     N tickets (default 4)
//
// The in-place rewrite (fs.writeFileSync: open with O_TRUNC, then write) passes a kill at every
// boundary (a kill -9 keeps what was written), and fails a kill between the truncate and the
// write, or a power cut before the data reached the disk: state.json is left empty or torn and
// every restart dies in JSON.parse. The atomic twin survives both.
"use strict";
const fs = require("fs");
const path = require("path");

const [stateDir, hook, ...flags] = process.argv.slice(2);
const file = path.join(stateDir, "state.json");
const n = flags.includes("--tickets") ? Number(flags[flags.indexOf("--tickets") + 1]) : 4;
const TICKETS = Array.from({ length: n }, (_, i) => `T-${i + 1}`);

function load() {
  if (!fs.existsSync(file)) return { done: [] };
  return JSON.parse(fs.readFileSync(file, "utf8"));
}

function saveInPlace(state) {
  fs.writeFileSync(file, JSON.stringify(state));
}

function saveAtomic(state) {
  const tmp = file + ".tmp";
  const fd = fs.openSync(tmp, "w");
  fs.writeSync(fd, JSON.stringify(state));
  fs.fsyncSync(fd);
  fs.closeSync(fd);
  fs.renameSync(tmp, file);
  const dir = fs.openSync(stateDir, "r");
  fs.fsyncSync(dir);
  fs.closeSync(dir);
}

async function main() {
  const save = flags.includes("--atomic") ? saveAtomic : saveInPlace;
  const state = load();
  for (const ticket of TICKETS) {
    if (state.done.includes(ticket)) continue;
    const r = await fetch(hook, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": `triage-${ticket}` },
      body: JSON.stringify({ ticket }),
    });
    if (!r.ok) throw new Error(`the webhook answered ${r.status}`);
    state.done.push(ticket);
    save(state);
  }
  console.log(JSON.stringify({ done: state.done }));
}

main();
