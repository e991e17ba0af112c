// A contact-sync job in Node.js: push each contact to a CRM with fetch, keep progress in a
// JSON file with fs. It does not import crashpoint.
//
// Each contact is POSTed to `${base}/contacts` with an Idempotency-Key from the run id and the
// contact; after each one the progress file is saved whole and durably: written to a temp
// file, fsync'ed, renamed over the old one, and the folder fsync'ed.
//
// Planted bugs (--bug NAME): keyless (no Idempotency-Key), in_place (the progress file is
// rewritten in place with fs.writeFileSync), no_fsync (renamed without an fsync).
//
//   node node_sync.mjs STATE_DIR BASE_URL [--bug NAME]
import fs from "node:fs";
import path from "node:path";

const [stateDir, base, flag, bug] = process.argv.slice(2);
if (flag && flag !== "--bug") throw new Error(`unknown option ${flag}`);
const run = process.env.CRASHPOINT_RUN_ID || "sync-1";
const file = path.join(stateDir, "progress.json");
const contacts = ["ada", "grace", "linus", "barbara"];

function load() {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (err) {
    if (err.code === "ENOENT") return { synced: [] };
    throw err;
  }
}

function save(state) {
  const data = JSON.stringify(state);
  if (bug === "in_place") {
    fs.writeFileSync(file, data);
    return;
  }
  const tmp = file + ".tmp";
  const fd = fs.openSync(tmp, "w", 0o600);
  fs.writeSync(fd, data);
  if (bug !== "no_fsync") fs.fsyncSync(fd);
  fs.closeSync(fd);
  fs.renameSync(tmp, file);
  if (bug !== "no_fsync") {
    const dir = fs.openSync(stateDir, "r");
    fs.fsyncSync(dir);
    fs.closeSync(dir);
  }
}

const state = load();
for (const name of contacts) {
  if (state.synced.includes(name)) continue;
  const headers = { "Content-Type": "application/json" };
  if (bug !== "keyless") headers["Idempotency-Key"] = `${run}:contact:${name}`;
  const r = await fetch(`${base}/contacts`, {
    method: "POST",
    headers,
    body: JSON.stringify({ name, email: `${name}@example.com` }),
  });
  if (!r.ok) throw new Error(`CRM answered ${r.status}`);
  state.synced.push(name);
  save(state);
}
console.log(`synced ${state.synced.join(",")}`);
