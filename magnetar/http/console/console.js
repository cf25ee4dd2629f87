// The Magnetar web console: plain JavaScript over the REST API, no build step, no CDN.
// Pages (by location hash): #/namespace/T/N (topics), #/topic/T/N/X (one topic),
// #/views. Each page draws its skeleton once and refreshes its data every POLL_MS; rows
// are updated in place, so forms and inputs in them keep what the user typed.
"use strict";

const POLL_MS = 2000;
const main = document.getElementById("main");
let page = null; // {refresh: async () => void}
let polling = null; // the timer of the next refresh
let inflight = Promise.resolve(); // refreshes run one after another, never overlapping
let paused = 0; // an action is running: no refresh may ask for what it is deleting

// -- helpers --------------------------------------------------------------------------------

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

async function api(method, path, body) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.body = JSON.stringify(body);
    options.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, options);
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) {
    throw new Error((data && data.reason) || `${method} ${path}: HTTP ${response.status}`);
  }
  return data;
}

function toast(message, error = false) {
  const box = document.getElementById("toast");
  box.textContent = message;
  box.className = "shown" + (error ? " error" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.className = ""; }, error ? 8000 : 3000);
}

// Run a user's action, then refresh. A deletion (``pause``) first waits for the refresh
// under way and holds the next ones back, so none asks for what it is deleting.
async function act(what, fn, pause = false) {
  if (pause) paused++;
  try {
    if (pause) await inflight;
    await fn();
    toast(what);
  } catch (e) {
    toast(e.message, true);
  } finally {
    if (pause) paused--;
  }
  await tick();
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function count(n) {
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 });
}

function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
}

function topicPath(name) { // persistent://t/ns/x -> t/ns/x
  return name.replace(/^persistent:\/\//, "");
}

function local(name) {
  return name.split("/").pop();
}

// Keep tbody's rows in step with items: new rows created by make(item), every row filled
// by fill(tr, item), rows of items gone removed.
function syncRows(tbody, items, key, make, fill) {
  const seen = new Set();
  for (const item of items) {
    const k = key(item);
    seen.add(k);
    let tr = tbody.querySelector(`tr[data-key="${CSS.escape(k)}"]`);
    if (!tr) {
      tr = make(item);
      tr.dataset.key = k;
      tbody.appendChild(tr);
    }
    fill(tr, item);
  }
  for (const tr of [...tbody.querySelectorAll("tr[data-key]")]) {
    if (!seen.has(tr.dataset.key)) tr.remove();
  }
}

function row(html) {
  const tbody = document.createElement("tbody");
  tbody.innerHTML = html;
  return tbody.firstElementChild;
}

function set(tr, field, text, value) {
  const cell = tr.querySelector(`[data-field="${field}"]`);
  if (cell.textContent !== String(text)) cell.textContent = text;
  if (value !== undefined) cell.dataset.value = value;
}

function progressBar(share, live) {
  const pct = Math.round(share * 1000) / 10;
  return `<div class="progress${live ? " live" : ""}" data-progress="${share}">` +
    `<div style="width:${pct}%"></div><span>${pct}%</span></div>`;
}

// -- the tree of tenants and namespaces -----------------------------------------------------

async function refreshTree() {
  const tenants = await api("GET", "/admin/v2/tenants");
  const current = location.hash;
  const parts = [];
  for (const tenant of tenants) {
    const namespaces = await api("GET", `/admin/v2/namespaces/${tenant}`);
    const items = namespaces.map((ns) => {
      const href = `#/namespace/${ns}`;
      const selected = current.startsWith(href) || current.startsWith(`#/topic/${ns}/`);
      return `<li class="${selected ? "selected" : ""}"><a href="${esc(href)}">` +
        `${esc(ns.split("/")[1])}</a></li>`;
    });
    parts.push(`<li><span class="tenant">${esc(tenant)}</span>` +
      ` <a href="#" class="muted" data-delete-tenant="${esc(tenant)}" title="delete tenant">×</a>` +
      `<ul>${items.join("")}</ul></li>`);
  }
  const html = parts.join("");
  const ul = document.getElementById("tenants");
  if (ul.innerHTML !== html) ul.innerHTML = html;
}

document.getElementById("tenants").addEventListener("click", (event) => {
  const tenant = event.target.dataset.deleteTenant;
  if (!tenant) return;
  event.preventDefault();
  if (confirm(`Delete tenant ${tenant}?`)) {
    act(`tenant ${tenant} deleted`, () => api("DELETE", `/admin/v2/tenants/${tenant}`), true);
  }
});

document.getElementById("new-tenant").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = event.target.tenant.value.trim();
  act(`tenant ${name} created`, async () => {
    await api("PUT", `/admin/v2/tenants/${name}`, {});
    event.target.reset();
  });
});

document.getElementById("new-namespace").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = event.target.namespace.value.trim();
  act(`namespace ${name} created`, async () => {
    await api("PUT", `/admin/v2/namespaces/${name}`);
    event.target.reset();
    location.hash = `#/namespace/${name}`;
  });
});

// -- a namespace: its topics ----------------------------------------------------------------

function namespacePage(tenant, namespace) {
  const ns = `${tenant}/${namespace}`;
  main.innerHTML = `
    <h1>${esc(ns)}</h1>
    <div class="cards" id="ns-cards"></div>
    <table id="topics"><thead><tr>
      <th>Topic</th><th class="num">Rate in</th><th class="num">Rate out</th>
      <th class="num">Backlog</th><th class="num">Storage</th><th class="num">Subscriptions</th>
      <th class="num">Producers</th><th></th></tr></thead><tbody></tbody></table>
    <form class="inline" id="new-topic">
      <input name="topic" placeholder="new topic" required pattern="[A-Za-z0-9_.=\\-]+">
      <input name="partitions" type="number" min="0" value="0" title="partitions (0: none)">
      <button>Create topic</button>
    </form>
    <button class="danger" id="delete-namespace">Delete namespace</button>`;
  const tbody = main.querySelector("#topics tbody");
  main.querySelector("#new-topic").addEventListener("submit", (event) => {
    event.preventDefault();
    const name = event.target.topic.value.trim();
    const partitions = Number(event.target.partitions.value);
    const base = `/admin/v2/persistent/${ns}/${name}`;
    act(`topic ${name} created`, async () => {
      await (partitions > 0 ? api("PUT", `${base}/partitions`, partitions) : api("PUT", base));
      event.target.reset();
    });
  });
  main.querySelector("#delete-namespace").addEventListener("click", () => {
    if (confirm(`Delete namespace ${ns}?`)) {
      act(`namespace ${ns} deleted`, async () => {
        await api("DELETE", `/admin/v2/namespaces/${ns}`);
        leave("#/");
      }, true);
    }
  });
  tbody.addEventListener("click", (event) => {
    const name = event.target.dataset.deleteTopic;
    if (name && confirm(`Delete ${name} and all its data?`)) {
      act(`${name} deleted`, () => api("DELETE", `/admin/v2/persistent/${topicPath(name)}`), true);
    }
  });
  return {
    async refresh() {
      const topics = (await api("GET", `/admin/v2/persistent/${ns}`)).sort();
      const stats = await Promise.all(
        topics.map((t) => api("GET", `/admin/v2/persistent/${topicPath(t)}/stats`)));
      const items = topics.map((name, i) => ({ name, s: stats[i] }));
      syncRows(tbody, items, (it) => it.name, (it) => {
        const tr = row(`<tr><td><a href="#/topic/${esc(topicPath(it.name))}">` +
          `${esc(local(it.name))}</a></td><td class="num" data-field="rateIn"></td>` +
          `<td class="num" data-field="rateOut"></td><td class="num" data-field="backlog"></td>` +
          `<td class="num" data-field="storage"></td><td class="num" data-field="subs"></td>` +
          `<td class="num" data-field="producers"></td><td><button class="danger" ` +
          `data-delete-topic="${esc(it.name)}">Delete</button></td></tr>`);
        tr.dataset.topic = it.name;
        return tr;
      }, (tr, { s }) => {
        const backlog = Object.values(s.subscriptions).reduce((a, x) => a + x.msgBacklog, 0);
        set(tr, "rateIn", `${count(s.msgRateIn)}/s`);
        set(tr, "rateOut", `${count(s.msgRateOut)}/s`);
        set(tr, "backlog", count(backlog), backlog);
        set(tr, "storage", bytes(s.storageSize), s.storageSize);
        set(tr, "subs", Object.keys(s.subscriptions).length);
        set(tr, "producers", s.publishers.length);
      });
      const total = (key) => stats.reduce((a, s) => a + s[key], 0);
      main.querySelector("#ns-cards").innerHTML = cards([
        ["topics", topics.length], ["rate in", `${count(total("msgRateIn"))}/s`],
        ["rate out", `${count(total("msgRateOut"))}/s`], ["storage", bytes(total("storageSize"))],
      ]);
    },
  };
}

function cards(pairs) {
  return pairs.map(([k, v]) =>
    `<div class="card"><div class="v">${esc(v)}</div><div class="k">${esc(k)}</div></div>`,
  ).join("");
}

// -- one topic: stats, segments, subscriptions, messages ---------------------------------------

function topicPage(path) {
  const name = `persistent://${path}`;
  const base = `/admin/v2/persistent/${path}`;
  main.innerHTML = `
    <h1>${esc(name)}</h1>
    <div class="cards" id="topic-cards"></div>
    <h3>Segments</h3>
    <div class="legend">
      <span style="--c: var(--local)">local</span>
      <span style="--c: var(--both)">offloaded, local copy kept</span>
      <span style="--c: var(--offloaded)">offloaded</span>
      <span style="--c: var(--warn)">offloading</span>
    </div>
    <div class="timeline" id="segments"></div>
    <h3>Subscriptions</h3>
    <table id="subs"><thead><tr><th>Subscription</th><th>Type</th>
      <th class="num">Backlog</th><th class="num">Backlog size</th><th class="num">Consumers</th>
      <th class="num">Unacked</th><th>Reset to time</th></tr></thead><tbody></tbody></table>
    <h3>Messages</h3>
    <form class="inline" id="browse">
      <select name="position">
        <option value="newest">newest</option><option value="earliest">earliest</option>
        <option value="offset">from offset</option><option value="time">from time</option>
      </select>
      <input name="offset" type="number" min="0" placeholder="offset">
      <input name="time" type="datetime-local" step="1">
      <input name="limit" type="number" min="1" max="500" value="20" title="messages">
      <button>Show</button>
    </form>
    <table id="messages"><thead><tr><th class="num">Offset</th><th>Id</th><th>Published</th>
      <th>Key</th><th>Value</th><th>Properties</th></tr></thead><tbody></tbody></table>
    <h3>Actions</h3>
    <button class="secondary" id="offload">Offload closed segments</button>
    <button class="danger" id="delete-topic">Delete topic</button>`;
  const subs = main.querySelector("#subs tbody");
  subs.addEventListener("click", (event) => {
    const sub = event.target.dataset.reset;
    if (!sub) return;
    const input = event.target.parentElement.querySelector("input");
    const ms = new Date(input.value).getTime();
    if (!input.value || Number.isNaN(ms)) { toast("pick a time to reset to", true); return; }
    act(`${sub} reset to ${when(ms)}`,
      () => api("POST", `${base}/subscription/${encodeURIComponent(sub)}/resetcursor/${ms}`));
  });
  main.querySelector("#browse").addEventListener("submit", (event) => {
    event.preventDefault();
    browse(path, event.target).catch((e) => toast(e.message, true));
  });
  main.querySelector("#offload").addEventListener("click", () => act(
    "offload started", () => api("PUT", `${base}/offload`)));
  main.querySelector("#delete-topic").addEventListener("click", () => {
    if (confirm(`Delete ${name} and all its data?`)) {
      act(`${name} deleted`, async () => {
        await api("DELETE", base);
        leave(`#/namespace/${path.split("/").slice(0, 2).join("/")}`);
      }, true);
    }
  });
  return {
    async refresh() {
      const [s, internal] = await Promise.all(
        [api("GET", `${base}/stats`), api("GET", `${base}/internalStats`)]);
      const subsList = Object.entries(s.subscriptions);
      const backlog = subsList.reduce((a, [, x]) => a + x.msgBacklog, 0);
      main.querySelector("#topic-cards").innerHTML = cards([
        ["rate in", `${count(s.msgRateIn)}/s`], ["rate out", `${count(s.msgRateOut)}/s`],
        ["backlog (messages)", count(backlog)], ["backlog size", bytes(s.backlogSize)],
        ["storage", bytes(s.storageSize)], ["messages stored", count(internal.numberOfEntries)],
        ["producers", s.publishers.length], ["segments", internal.ledgers.length],
      ]);
      drawSegments(main.querySelector("#segments"), internal.ledgers);
      syncRows(subs, subsList, ([sub]) => sub, ([sub]) => {
        const tr = row(`<tr><td>${esc(sub)}</td><td data-field="type"></td>` +
          `<td class="num" data-field="backlog"></td><td class="num" data-field="size"></td>` +
          `<td class="num" data-field="consumers"></td><td class="num" data-field="unacked"></td>` +
          `<td><input type="datetime-local" step="1"> <button class="secondary" ` +
          `data-reset="${esc(sub)}">Reset</button></td></tr>`);
        tr.dataset.sub = sub;
        return tr;
      }, (tr, [, x]) => {
        set(tr, "type", x.type);
        set(tr, "backlog", count(x.msgBacklog), x.msgBacklog);
        set(tr, "size", bytes(x.backlogSize));
        set(tr, "consumers", x.consumers.length);
        set(tr, "unacked", count(x.unackedMessages));
      });
    },
  };
}

function drawSegments(box, ledgers) {
  const total = ledgers.reduce((a, l) => a + l.size, 0) || 1;
  const last = ledgers.length - 1;
  const html = ledgers.map((l, i) => {
    let kind = l.offloaded ? (l.local ? "both" : "offloaded") : "local";
    if (l.state === "OFFLOADING") kind = "offloading";
    const open = i === last && l.state === "OPEN" ? " open" : "";
    const grow = Math.max(1, Math.round((l.size / total) * 100));
    const where = l.offloaded ? "offloaded" : l.state === "OPEN" ? "open" : "local";
    const title = `segment ${l.ledgerId}: ${l.entries} entries, ${bytes(l.size)}, offsets ` +
      `${l.firstOffset}-${l.lastOffset}, ${l.state}, ${l.location}, ${when(l.timestamp)}`;
    return `<div class="segment ${kind}${open}" style="flex-grow:${grow}" ` +
      `data-segment="${l.ledgerId}" data-state="${esc(l.state)}" title="${esc(title)}">` +
      `#${l.ledgerId} · ${bytes(l.size)}<br>${where}</div>`;
  }).join("");
  if (box.innerHTML !== html) box.innerHTML = html;
}

async function browse(path, form) {
  const params = new URLSearchParams({ limit: form.limit.value || "20" });
  const position = form.position.value;
  if (position === "offset") params.set("position", form.offset.value || "0");
  else if (position === "time") params.set("time", String(new Date(form.time.value).getTime()));
  else params.set("position", position);
  const page = await api("GET", `/magnetar/v1/topics/${path}/messages?${params}`);
  const tbody = main.querySelector("#messages tbody");
  tbody.innerHTML = page.messages.map((m) => {
    const value = m.encoding === "json" ? JSON.stringify(m.value) : m.value;
    const props = Object.entries(m.properties).map(([k, v]) => `${k}=${v}`).join(", ");
    return `<tr data-offset="${m.offset}"><td class="num">${m.offset}</td>` +
      `<td>${esc(m.messageId)}</td><td>${esc(when(m.publishTime))}</td>` +
      `<td>${esc(m.key ?? "")}</td><td><pre class="value" title="${esc(m.encoding)}">` +
      `${esc(value)}</pre></td><td>${esc(props)}</td></tr>`;
  }).join("") || `<tr><td colspan="6" class="muted">no messages there</td></tr>`;
}

// -- views ----------------------------------------------------------------------------------

function viewsPage() {
  main.innerHTML = `
    <h1>Views</h1>
    <table id="views"><thead><tr><th>View</th><th>State</th><th>Progress</th>
      <th class="num">Events</th><th class="num">Lag</th><th class="num">Version</th>
      <th>Source</th><th></th></tr></thead><tbody></tbody></table>
    <h3>Create a view</h3>
    <form id="new-view">
      <div class="inline">
        <input name="name" placeholder="name" required pattern="[A-Za-z][A-Za-z0-9_]*">
        <input name="source" placeholder="source topic(s), comma-separated" required>
        <input name="key" placeholder="key column(s), comma-separated" required>
        <select name="store"><option>sqlite</option></select>
      </div>
      <textarea name="sql" placeholder="SELECT data.user AS user, count(*) AS n FROM events GROUP BY data.user"></textarea>
      <div class="inline">
        <input name="python" placeholder="or module:function (a Python fold)">
        <button>Create view</button>
      </div>
    </form>
    <h3 id="rows-title"></h3>
    <table id="rows"></table>`;
  const tbody = main.querySelector("#views tbody");
  main.querySelector("#new-view").addEventListener("submit", (event) => {
    event.preventDefault();
    const f = event.target;
    const split = (s) => s.split(",").map((x) => x.trim()).filter(Boolean);
    const body = { source: split(f.source.value), key: split(f.key.value), store: f.store.value };
    if (f.python.value.trim()) body.python = f.python.value.trim();
    else body.sql = f.sql.value.trim();
    toast(`creating ${f.name.value}…`);
    act(`view ${f.name.value} created`, async () => {
      await api("PUT", `/views/${encodeURIComponent(f.name.value)}`, body);
      f.reset();
    });
  });
  tbody.addEventListener("click", (event) => {
    const { rows, deleteView } = event.target.dataset;
    if (rows) showRows(rows).catch((e) => toast(e.message, true));
    if (deleteView && confirm(`Delete view ${deleteView} and its state?`)) {
      act(`view ${deleteView} deleted`, () => api("DELETE", `/views/${deleteView}`), true);
    }
  });
  return {
    async refresh() {
      const views = await api("GET", "/views");
      syncRows(tbody, views, (v) => v.name, (v) => {
        const tr = row(`<tr><td>${esc(v.name)}</td><td class="state" data-field="state"></td>` +
          `<td data-field="progress"></td><td class="num" data-field="events"></td>` +
          `<td class="num" data-field="lag"></td><td class="num" data-field="version"></td>` +
          `<td data-field="source"></td><td><button class="secondary" data-rows="` +
          `${esc(v.name)}">Rows</button> <button class="danger" data-delete-view="` +
          `${esc(v.name)}">Delete</button></td></tr>`);
        tr.dataset.view = v.name;
        return tr;
      }, (tr, v) => {
        const shown = v.pending || v;
        const state = v.pending ? `${v.state} (v${v.pending.version} ${v.pending.state})` : v.state;
        set(tr, "state", state);
        tr.querySelector('[data-field="state"]').className = `state ${v.state}`;
        tr.dataset.state = v.state;
        const share = shown.state === "LIVE" ? 1 : shown.progress ?? (v.state === "VIRTUAL" ? 1 : 0);
        const bar = progressBar(share, shown.state === "LIVE");
        const cell = tr.querySelector('[data-field="progress"]');
        if (cell.innerHTML !== bar) cell.innerHTML = bar;
        const ev = shown.events;
        set(tr, "events", ev ? `${count(ev.applied)} / ${count(ev.total)}` : `${count(v.rows ?? 0)} rows`);
        const lag = v.lag ? `${count(v.lag.messages)} events, ${count(v.lag.ms / 1000)} s` : "";
        set(tr, "lag", lag);
        set(tr, "version", v.version ?? "as-of");
        set(tr, "source", (v.definition.source || []).join(", "));
      });
    },
  };
}

async function showRows(name) {
  const { rows } = await api("GET", `/views/${encodeURIComponent(name)}/rows?limit=100`);
  main.querySelector("#rows-title").textContent = `Rows of ${name} (first ${rows.length})`;
  const columns = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const head = `<thead><tr>${columns.map((c) => `<th>${esc(c)}</th>`).join("")}</tr></thead>`;
  const body = rows.map((r) => `<tr>${columns.map((c) =>
    `<td>${esc(typeof r[c] === "object" ? JSON.stringify(r[c]) : r[c])}</td>`).join("")}</tr>`);
  main.querySelector("#rows").innerHTML = `${head}<tbody>${body.join("")}</tbody>`;
}

// -- routing and polling --------------------------------------------------------------------

// Go elsewhere after deleting what the page shows: it must not refresh once more meanwhile.
function leave(hash) {
  page = null;
  location.hash = hash;
}

function pageFor(hash) {
  const parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "topic" && parts.length >= 4) return topicPage(parts.slice(1).join("/"));
  if (parts[0] === "views") return viewsPage();
  if (parts[0] === "namespace" && parts.length === 3) return namespacePage(parts[1], parts[2]);
  location.replace("#/namespace/public/default");
  return null;
}

function tick() {
  clearTimeout(polling);
  inflight = inflight.then(refresh);
  return inflight;
}

async function refresh() {
  if (paused) return; // the action restarts the refreshes when it is done
  try {
    await Promise.all([refreshTree(), page ? page.refresh() : null]);
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    toast(e.message, true);
  } finally {
    clearTimeout(polling);
    if (document.getElementById("live").checked) polling = setTimeout(tick, POLL_MS);
  }
}

function show() {
  page = pageFor(location.hash);
  if (page) tick();
}

document.getElementById("live").addEventListener("change", tick);
window.addEventListener("hashchange", show);
show();
