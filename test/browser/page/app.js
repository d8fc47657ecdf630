// The browser side of test/browser: scenarios the Go test starts one at a
// time through the DevTools protocol, each against the real broker (HTTPS,
// HTTP/2, bearer tokens) from this page's own origin, with the official
// Durable Streams client where a client call is what is tested and a bare
// fetch where the exact answer is (a refusal's status and problem body).
//
//   window.start(key, scenario, cfg)  starts a scenario; returns at once
//   window.results[key]               {state: "running"} until it ends, then
//                                     {state: "done", ok, value | error}
//   window.progress[key]              what a live tail has seen so far
//   window.protocols()                the broker responses' nextHopProtocol
//
// The page renders every scenario as a table row, so that the screenshot
// the Go test keeps on a failure shows where it stopped.
import { DurableStream, stream } from "@durable-streams/client";

const results = {};
const progress = {};
window.results = results;
window.progress = progress;

// Few, quick retries: the client retries network errors (a CORS refusal
// is one, to a page) without end by default.
const backoffOptions = { initialDelay: 50, maxDelay: 200, multiplier: 1.3, maxRetries: 1 };

function auth(token) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// describe turns whatever was thrown into something JSON can carry: the
// client's DurableStreamError/FetchError carry the HTTP status and body; a
// TypeError from fetch is what a CORS refusal (or a network failure) looks
// like to a page: no status, no body.
function describe(e) {
  const d = { name: e?.name ?? typeof e, message: String(e?.message ?? e) };
  if (e?.status !== undefined) d.status = e.status;
  if (e?.code !== undefined) d.code = e.code;
  let body = e?.details ?? e?.json ?? e?.text;
  if (typeof body === "string") {
    try { body = JSON.parse(body); } catch { /* keep the text */ }
  }
  if (body !== undefined) d.body = body;
  d.typeError = e instanceof TypeError;
  return d;
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const scenarios = {
  // produce: create the stream with one token (admin), append records one
  // by one with another (read,write), read them back (catch-up, no live).
  async produce(cfg) {
    const headers = auth(cfg.createToken);
    await DurableStream.create({ url: cfg.url, headers, contentType: "application/json", backoffOptions });
    const writer = new DurableStream({ url: cfg.url, headers: auth(cfg.writeToken), contentType: "application/json", backoffOptions });
    for (const r of cfg.records) {
      await writer.append(JSON.stringify(r));
    }
    const res = await stream({ url: cfg.url, headers: auth(cfg.writeToken), offset: "-1", live: false, json: true, backoffOptions });
    return { items: await res.json(), offset: res.offset };
  },

  // tail: a live read from the start of the stream (long-poll or SSE) until
  // cfg.want items arrived; progress[key] says how many so far, so that the
  // Go test appends its own record once the tail is under way. No token:
  // a signed URL's tail sends no Authorization header at all.
  async tail(cfg, key) {
    const ac = new AbortController();
    const items = [];
    progress[key] = { items: 0, batches: 0, upToDate: false };
    const res = await stream({
      url: cfg.url, headers: auth(cfg.token), offset: "-1", live: cfg.live, json: true,
      signal: ac.signal, backoffOptions,
    });
    const done = new Promise((resolve) => {
      res.subscribeJson(async (batch) => {
        items.push(...batch.items);
        const p = progress[key];
        p.items = items.length;
        p.batches++;
        p.upToDate = p.upToDate || !!batch.upToDate;
        p.offset = batch.offset;
        if (items.length >= cfg.want) resolve();
      });
    });
    try {
      await withTimeout(done, cfg.timeoutMs ?? 20000, `${cfg.live} tail waiting for ${cfg.want} items (has ${items.length})`);
    } finally {
      ac.abort();
    }
    return { items, batches: progress[key].batches };
  },

  // probe: one bare fetch; its status and problem body, or the TypeError
  // a page gets when CORS hides the answer.
  async probe(cfg) {
    const headers = { ...auth(cfg.token), ...(cfg.headers ?? {}) };
    let resp;
    try {
      resp = await fetch(cfg.url, { method: cfg.method ?? "GET", headers, body: cfg.body, cache: "no-store" });
    } catch (e) {
      return { fetched: false, error: describe(e) };
    }
    const text = await resp.text();
    let body = text;
    try { body = JSON.parse(text); } catch { /* not JSON */ }
    return {
      fetched: true, status: resp.status, contentType: resp.headers.get("content-type"),
      wwwAuthenticate: resp.headers.get("www-authenticate"), body,
    };
  },

  // client: one call of the Durable Streams client, expected to succeed or
  // to be refused; either way its outcome as data.
  async client(cfg) {
    const opts = { url: cfg.url, headers: auth(cfg.token), contentType: "application/json", backoffOptions };
    try {
      switch (cfg.op) {
        case "create":
          await DurableStream.create(opts);
          return { ok: true };
        case "append":
          await new DurableStream(opts).append(JSON.stringify(cfg.record));
          return { ok: true };
        case "head":
          return { ok: true, head: await DurableStream.head(opts) };
        case "read": {
          const res = await stream({ url: cfg.url, headers: opts.headers, offset: "-1", live: false, json: true, backoffOptions });
          return { ok: true, items: await res.json() };
        }
      }
      throw new Error(`unknown client op ${cfg.op}`);
    } catch (e) {
      return { ok: false, error: describe(e) };
    }
  },

  // sign: mint a signed read URL (POST /v1/sign with a bearer token).
  async sign(cfg) {
    const resp = await fetch(`${cfg.broker}/v1/sign`, {
      method: "POST",
      headers: { ...auth(cfg.token), "Content-Type": "application/json" },
      body: JSON.stringify(cfg.request),
      cache: "no-store",
    });
    const text = await resp.text();
    let body = text;
    try { body = JSON.parse(text); } catch { /* not JSON */ }
    return { status: resp.status, body };
  },
};

function render(key, scenario) {
  let row = document.getElementById(`row-${key}`);
  if (!row) {
    row = document.createElement("tr");
    row.id = `row-${key}`;
    row.innerHTML = `<td></td><td></td><td><pre></pre></td>`;
    document.getElementById("rows").appendChild(row);
  }
  const r = results[key];
  row.className = r.state === "running" ? "running" : r.ok ? "pass" : "fail";
  row.cells[0].textContent = `${key} (${scenario})`;
  row.cells[1].textContent = r.state;
  row.cells[2].firstChild.textContent = JSON.stringify(r.value ?? r.error ?? progress[key] ?? {}, null, 1).slice(0, 1500);
}

window.start = (key, scenario, cfg) => {
  const run = scenarios[scenario];
  if (!run) throw new Error(`no scenario ${scenario}`);
  results[key] = { state: "running" };
  render(key, scenario);
  run(cfg, key).then(
    (value) => { results[key] = { state: "done", ok: true, value }; render(key, scenario); },
    (e) => { results[key] = { state: "done", ok: false, error: describe(e) }; render(key, scenario); },
  );
  return true;
};

// protocols lists the resources fetched from origin (the broker) with the
// protocol each went over. Cross-origin entries show it only when the
// broker sends Timing-Allow-Origin; the Go test reads the protocol from
// the DevTools protocol's network events as well.
window.protocols = (origin) =>
  performance.getEntriesByType("resource")
    .filter((e) => e.name.startsWith(origin))
    .map((e) => ({ name: e.name, nextHopProtocol: e.nextHopProtocol }));

performance.setResourceTimingBufferSize(10000);
document.getElementById("origin").textContent = location.origin;
window.ready = true;
