// tenure ui: fills the page shell from the JSON API under {prefix}/api/v1/ (docs/ui.md).
// No build step and no dependencies. Untrusted text is only ever set as textContent.
// Hooks for tests and scripts: rows carry data-job-id, attempt rows data-attempt and data-fence,
// controls data-action (per job: cancel, retry, replay; per queue: pause, resume, limit; on the
// selected rows: retry-selected, cancel-selected, replay-selected; on every job matching the
// filter: retry-matching, cancel-matching, replay-matching). Confirmations: dialog [data-confirm=yes].
// Charts (the queues page and each queue's page): figure[data-chart] (throughput, failures, wait,
// depth) holding the server's SVG, with data-total; the window is select[data-window].
// The Flow page (flow.js) has its own hooks: data-flow-queue, data-flow-key, data-rate-limit, data-flow-form.
// A job that is a workflow step links to its workflow: a[data-workflow-link=ID]; the workflow pages
// (workflows.js) have their own hooks: data-workflow, data-workflow-graph, data-step-id.

const body = document.body.dataset;
const PREFIX = body.prefix || "";
export const CAN_WRITE = body.canWrite === "true";
const CSRF = body.csrf || "";
const main = document.querySelector("main");
export const content = document.getElementById("content");
const PAGE = main ? main.dataset.page : "error";
const FILTERS = ["id", "queue", "status", "task", "priority_min", "priority_max", "created_since",
  "finished_since", "idempotency_key", "payload", "flow_key"];
const STATUSES = ["", "waiting", "pending", "running", "completed", "failed", "cancelled"];

// ---------- small helpers ----------
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function when(value) {
  if (!value) return "–";
  const d = new Date(value);
  return isNaN(d) ? String(value) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function ago(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Number(seconds);
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function short(token) { return token ? String(token).slice(0, 8) : "–"; }
export function link(path, text, attrs = {}) { return el("a", { href: PREFIX + path, ...attrs }, text); }

export function notice(message, kind = "info") {
  let box = document.getElementById("notice");
  if (!box) {
    box = el("div", { id: "notice", role: "status" });
    main.insertBefore(box, content);
  }
  box.className = `notice ${kind}`;
  box.textContent = message;
}

export async function api(path, options = {}) {
  const init = { headers: { Accept: "application/json" }, credentials: "same-origin", ...options };
  if (options.body !== undefined) {
    init.method = options.method || "POST";
    init.headers = { ...init.headers, "Content-Type": "application/json", "X-CSRF-Token": CSRF };
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(`${PREFIX}/api/v1/${path}`, init);
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (!response.ok) {
    const message = data && data.error ? data.error : `${response.status} ${response.statusText}`;
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return data;
}

export function post(path, payload = {}) { return api(path, { body: payload }); }

export function table(headers, rows, attrs = {}) {
  return el("table", attrs, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

export function section(title, ...children) {
  return el("section", {}, el("h2", {}, title), ...children);
}

export function actionButton(action, label, handler, extra = {}) {
  return el("button", { type: "button", "data-action": action, onclick: handler, ...extra }, label);
}

// A confirmation that shows the count and resolves true when confirmed.
export function confirmDialog(text, confirmLabel) {
  return new Promise((resolve) => {
    const dialog = el("dialog", { "data-confirm-dialog": true },
      el("p", { "data-confirm-text": true }, text),
      el("div", { class: "buttons" },
        el("button", { type: "button", "data-confirm": "yes", onclick: () => { dialog.close(); resolve(true); } }, confirmLabel),
        el("button", { type: "button", "data-confirm": "no", onclick: () => { dialog.close(); resolve(false); } }, "Cancel")));
    dialog.addEventListener("close", () => { dialog.remove(); resolve(false); });
    document.body.append(dialog);
    dialog.showModal();
  });
}

// ---------- live updates: server-sent events, with polling as the fallback ----------
export const live = { paused: false, handlers: [], source: null, timer: null, mode: "connecting" };

export function onChange(handler) { live.handlers.push(handler); }

function fire(change) {
  if (live.paused) return;
  for (const h of live.handlers) h(change);
}

export function liveControl() {
  const state = el("span", { class: "muted", "data-live-state": true }, "live: connecting");
  const button = el("button", { type: "button", "data-live-toggle": true }, "Pause live updates");
  button.addEventListener("click", () => {
    live.paused = !live.paused;
    button.textContent = live.paused ? "Resume live updates" : "Pause live updates";
    state.textContent = live.paused ? "live: paused" : `live: ${live.mode}`;
    if (!live.paused) fire({ type: "resync" });
  });
  live.state = state;
  return el("div", { class: "live" }, state, " ", button);
}

function setMode(mode) {
  live.mode = mode;
  if (live.state && !live.paused) live.state.textContent = `live: ${mode}`;
}

function startLive() {
  if (!live.handlers.length) return;
  const poll = () => {
    if (live.timer) return;
    setMode("polling every 2 s");
    live.timer = setInterval(() => fire({ type: "poll" }), 2000);
  };
  if (!("EventSource" in window)) { poll(); return; }
  const source = new EventSource(`${PREFIX}/api/v1/events`);
  live.source = source;
  source.addEventListener("hello", () => {
    if (live.timer) { clearInterval(live.timer); live.timer = null; }
    setMode("streaming");
  });
  source.addEventListener("change", (e) => {
    let change = { type: "change" };
    try { change = JSON.parse(e.data); } catch { /* a resync */ }
    fire(change);
  });
  source.addEventListener("error", () => { if (source.readyState === EventSource.CLOSED) poll(); else setMode("reconnecting"); });
}

// ---------- charts: SVG drawn by the server (GET charts), refetched on changes ----------
const WINDOWS = { "1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days" };
const CHARTS = ["throughput", "failures", "wait", "depth"];

function chartPanel(queue) {
  const asked = new URLSearchParams(location.search).get("window");
  let win = asked in WINDOWS ? asked : "1h";
  const figures = Object.fromEntries(CHARTS.map((k) => [k, el("figure", { class: "chart", "data-chart": k })]));
  const caption = el("span", { class: "muted", "data-chart-caption": true }, "");
  const select = el("select", { "data-window": true, "aria-label": "chart window" },
    Object.entries(WINDOWS).map(([w, label]) => el("option", { value: w, selected: w === win }, label)));
  let busy = false, again = false, last = 0, timer = null;
  const load = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const query = new URLSearchParams({ window: win });
      if (queue) query.set("queue", queue);
      const data = await api(`charts?${query}`);
      for (const kind of CHARTS) {
        const parsed = new DOMParser().parseFromString(data.charts[kind], "image/svg+xml").documentElement;
        const svg = document.importNode(parsed, true);
        figures[kind].replaceChildren(svg);
        figures[kind].dataset.total = svg.getAttribute("data-total");
      }
      const t = data.totals;
      const bucket = { 60: "1 min", 900: "15 min", 3600: "1 h" }[data.bucket_seconds] || `${data.bucket_seconds} s`;
      caption.textContent = `${t.completed.toLocaleString()} completed · ${t.failed_attempts.toLocaleString()} failed attempts · ` +
        `${t.dead_lettered.toLocaleString()} dead letters · buckets of ${bucket}, UTC`;
    } catch (err) {
      caption.textContent = err.message;
    } finally {
      busy = false;
      last = Date.now();
      if (again) { again = false; schedule(); }
    }
  };
  // At most one refetch every 2 s, however many changes arrive.
  const schedule = () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; load(); }, Math.max(0, 2000 - (Date.now() - last)));
  };
  select.addEventListener("change", () => {
    win = select.value;
    const params = new URLSearchParams(location.search);
    params.set("window", win);
    history.replaceState(null, "", `${location.pathname}?${params}`);
    load();
  });
  onChange(() => schedule());
  setInterval(() => { if (!live.paused) schedule(); }, 30000);
  const node = el("section", { class: "charts", "data-charts": true },
    el("div", { class: "bar" }, el("label", {}, "Charts over the ", select), caption),
    el("div", { class: "chart-grid" }, CHARTS.map((k) => figures[k])));
  return { node, load };
}

// ---------- overview ----------
async function overview() {
  const holder = el("div");
  const charts = chartPanel(null);
  content.replaceChildren(liveControl(), holder, charts.node);
  const render = async () => {
    const data = await api("queues");
    if (!data.queues.length) {
      holder.replaceChildren(el("p", { class: "muted" }, "No queues yet: enqueue a job (tenure enqueue TASK)."));
      return;
    }
    const rows = data.queues.map((q) => {
      const c = q.counts;
      const controls = CAN_WRITE ? el("td", {}, el("div", { class: "controls" },
        q.paused
          ? actionButton("resume", "Resume", () => queueAction(q.name, "resume"), { "data-queue": q.name })
          : actionButton("pause", "Pause", () => queueAction(q.name, "pause"), { "data-queue": q.name }),
        el("input", { type: "number", min: 0, value: q.max_running ?? 0, "aria-label": `running limit of ${q.name}`,
          "data-limit-input": q.name, class: "narrow" }),
        actionButton("limit", "Set limit", (e) => {
          const input = e.target.parentElement.querySelector("input");
          queueAction(q.name, "limit", { max_running: Number(input.value) });
        }, { "data-queue": q.name }))) : null;
      return el("tr", { "data-queue": q.name },
        el("td", {}, link(`/queues/${encodeURIComponent(q.name)}`, q.name, { "data-queue-link": q.name }), " ",
          link(`/jobs?queue=${encodeURIComponent(q.name)}`, "jobs", { class: "muted" })),
        el("td", { "data-paused": q.paused }, q.paused ? "paused" : "running"),
        el("td", {}, q.max_running ?? "–"),
        el("td", {}, c.ready), el("td", { "data-blocked": c.blocked }, c.blocked), el("td", {}, c.scheduled),
        el("td", {}, c.running), el("td", {}, c.completed),
        el("td", {}, link(`/dlq?queue=${encodeURIComponent(q.name)}`, c.failed)), el("td", {}, c.cancelled),
        el("td", {}, c.ready ? ago(q.oldest_ready_age_seconds) : "–"),
        el("td", {}, q.last_hour.completed), el("td", {}, `${(q.last_hour.failure_rate * 100).toFixed(1)} %`),
        controls);
    });
    holder.replaceChildren(table(["queue", "state", "limit", "ready", "blocked", "scheduled", "running", "completed",
      "dead letters", "cancelled", "oldest ready", "done / h", "failures / h", CAN_WRITE ? "controls" : null]
      .filter((h) => h !== null), rows, { "data-table": "queues" }));
  };
  const queueAction = async (name, verb, payload = {}) => {
    try {
      const result = await post(`queues/${encodeURIComponent(name)}/${verb}`, payload);
      notice(verb === "limit" ? `queue ${name}: limit ${result.max_running ?? "none"}` : `queue ${name} ${verb}d`, "ok");
      await render();
    } catch (err) { notice(err.message, "error"); }
  };
  onChange(() => render().catch((err) => notice(err.message, "error")));
  await Promise.all([render(), charts.load()]);
  setInterval(() => { if (!live.paused) render().catch(() => {}); }, 10000);
}

// ---------- one queue: its figures and its charts ----------
async function queuePage() {
  const name = main.dataset.queue;
  const facts = el("div");
  const charts = chartPanel(name);
  content.replaceChildren(liveControl(),
    el("div", { class: "toolbar" }, link(`/jobs?queue=${encodeURIComponent(name)}`, `jobs in ${name}`),
      link(`/dlq?queue=${encodeURIComponent(name)}`, "its dead letters")), facts, charts.node);
  const render = async () => {
    const q = (await api("queues")).queues.find((x) => x.name === name);
    if (!q) { facts.replaceChildren(el("p", { class: "muted" }, "No job, control or sample of this queue right now.")); return; }
    const c = q.counts;
    const rows = [["state", q.paused ? "paused" : "running"], ["limit", q.max_running ?? "–"], ["ready", c.ready],
      ["blocked by a flow limit", c.blocked], ["scheduled", c.scheduled], ["running", c.running], ["completed", c.completed], ["dead letters", c.failed],
      ["cancelled", c.cancelled], ["oldest ready", c.ready ? ago(q.oldest_ready_age_seconds) : "–"],
      ["done in the last hour", q.last_hour.completed], ["failure rate, last hour", `${(q.last_hour.failure_rate * 100).toFixed(1)} %`]];
    facts.replaceChildren(el("dl", { class: "facts", "data-queue-facts": name }, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
  };
  onChange(() => render().catch(() => {}));
  await Promise.all([render(), charts.load()]);
  setInterval(() => { if (!live.paused) render().catch(() => {}); }, 10000);
}

// ---------- jobs and dead letters ----------
function currentFilter() {
  const params = new URLSearchParams(location.search);
  const filter = {};
  for (const f of FILTERS) { const v = params.get(f); if (v) filter[f] = v; }
  if (PAGE === "dlq") filter.status = "failed";
  return filter;
}

function filterForm(filter) {
  const fields = (PAGE === "dlq" ? FILTERS.filter((f) => f !== "status") : FILTERS).map((f) => {
    const input = f === "status"
      ? el("select", { name: f, "data-filter": f }, STATUSES.map((s) => el("option", { value: s, selected: filter[f] === s }, s || "any")))
      : el("input", { name: f, "data-filter": f, value: filter[f] || "", size: f === "payload" ? 28 : 12,
        placeholder: { payload: '{"invoice_id": 42}', created_since: "1h or 2026-12-01", finished_since: "1h",
          flow_key: "tenant:acme" }[f] || "" });
    return el("label", {}, f.replace(/_/g, " "), input);
  });
  const form = el("form", { class: "filters", "data-filters": true }, fields,
    el("button", { type: "submit" }, "Filter"), link(PAGE === "dlq" ? "/dlq" : "/jobs", "Clear"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) params.set(k, String(v));
    history.pushState(null, "", `${location.pathname}${params.toString() ? "?" + params : ""}`);
    jobList.reload(true);
  });
  return form;
}

const jobList = { cursor: null, older: [], reload: () => {} };

async function jobs() {
  const filter = currentFilter();
  const countLabel = el("span", { "data-count": true, class: "count" }, "");
  const holder = el("div");
  const pager = el("div", { class: "pager" });
  const toolbar = el("div", { class: "toolbar" });
  content.replaceChildren(filterForm(filter), el("div", { class: "bar" }, countLabel, liveControl()), toolbar, holder, pager);
  let seen = new Set();

  const selected = () => [...holder.querySelectorAll("input[data-select]:checked")].map((i) => Number(i.value));

  const render = async (highlight = false) => {
    const f = currentFilter();
    const query = new URLSearchParams({ ...f, limit: "50" });
    if (jobList.cursor) query.set("cursor", jobList.cursor);
    const [page, count] = await Promise.all([api(`jobs?${query}`), api(`jobs/count?${new URLSearchParams(f)}`)]);
    countLabel.textContent = count.estimated ? `≈ ${count.count.toLocaleString()} jobs (estimate)` : `${count.count.toLocaleString()} jobs`;
    countLabel.dataset.estimated = count.estimated;
    const rows = page.jobs.map((j) => {
      const isNew = highlight && !seen.has(j.id);
      const actions = [];
      if (CAN_WRITE) {
        if (j.status === "pending" || j.status === "running") actions.push(actionButton("cancel", "Cancel", () => one(j.id, "cancel")));
        if (j.status === "failed" && PAGE === "dlq") actions.push(actionButton("replay", "Replay", () => replay({ ids: [j.id] })));
        else if (j.status === "failed" || j.status === "cancelled") actions.push(actionButton("retry", "Retry", () => one(j.id, "retry")));
      }
      return el("tr", { "data-job-id": j.id, "data-status": j.status, class: isNew ? "fresh" : "" },
        CAN_WRITE ? el("td", {}, el("input", { type: "checkbox", "data-select": true, value: j.id, "aria-label": `select job ${j.id}` })) : null,
        el("td", {}, link(`/jobs/${j.id}`, j.id)), el("td", {}, j.queue_name), el("td", {}, j.task),
        el("td", {}, el("span", { class: `status ${j.status}` }, j.status)), el("td", {}, j.priority),
        el("td", {}, `${j.attempt_count}/${j.max_attempts}`), el("td", {}, when(j.created_at)),
        el("td", {}, when(j.finished_at)), el("td", {}, j.last_error_code || ""),
        el("td", {}, el("code", { class: "payload" }, JSON.stringify(j.payload).slice(0, 80))),
        CAN_WRITE ? el("td", {}, el("div", { class: "controls" }, actions)) : null);
    });
    seen = new Set(page.jobs.map((j) => j.id));
    holder.replaceChildren(rows.length
      ? table([CAN_WRITE ? "" : null, "id", "queue", "task", "status", "prio", "attempts", "created", "finished", "error", "payload",
        CAN_WRITE ? "" : null].filter((h) => h !== null), rows, { "data-table": "jobs" })
      : el("p", { class: "muted", "data-empty": true }, "No job matches."));
    pager.replaceChildren(
      jobList.older.length ? el("button", { type: "button", "data-page-newer": true, onclick: () => { jobList.cursor = jobList.older.pop() || null; render(); } }, "← Newer") : "",
      page.next_cursor ? el("button", { type: "button", "data-page-older": true, onclick: () => { jobList.older.push(jobList.cursor); jobList.cursor = page.next_cursor; render(); } }, "Older →") : "");
  };

  const one = async (id, verb) => {
    try {
      await post(`jobs/${id}/${verb}`);
      notice(`job ${id}: ${verb === "cancel" ? "cancelled" : "retrying"}`, "ok");
      await render();
    } catch (err) { notice(err.message, "error"); }
  };

  const bulk = async (action, target) => {
    try {
      const preview = await post("jobs/bulk", { action, ...target, dry_run: true });
      if (!preview.matched) { notice(`no job to ${action}`, "info"); return; }
      const ok = await confirmDialog(`${action === "retry" ? "Retry" : "Cancel"} ${preview.matched} job${preview.matched === 1 ? "" : "s"}?`,
        `${action === "retry" ? "Retry" : "Cancel"} ${preview.matched}`);
      if (!ok) return;
      const result = await post("jobs/bulk", { action, ...target, expected: preview.matched, newest_id: preview.newest_id ?? undefined });
      notice(`${action}: changed ${result.changed} of ${result.matched} matched`, "ok");
      await render();
    } catch (err) { notice(err.message, "error"); }
  };

  const replay = async (target) => {
    try {
      const rate = Number(document.querySelector("[data-replay-rate]")?.value || 50);
      const preview = await post("dlq/replay", { ...target, dry_run: true, rate });
      if (!preview.matched) { notice("nothing to replay", "info"); return; }
      const skipped = preview.skipped.length ? `, ${preview.skipped.length} would be skipped` : "";
      const ok = await confirmDialog(`Replay ${preview.replayed} dead-lettered job${preview.replayed === 1 ? "" : "s"} at ${rate}/s${skipped}?`,
        `Replay ${preview.replayed}`);
      if (!ok) return;
      notice(`replaying ${preview.replayed} at ${rate}/s…`, "info");
      const result = await post("dlq/replay", { ...target, rate });
      notice(`replayed ${result.replayed} of ${result.matched} matched (${result.skipped.length} skipped)`, "ok");
      await render();
    } catch (err) { notice(err.message, "error"); }
  };

  if (CAN_WRITE) {
    const matching = () => {
      const f = currentFilter();
      return { filter: f };
    };
    if (PAGE === "dlq") {
      toolbar.append(
        el("label", {}, "rate (jobs/s) ", el("input", { type: "number", min: 1, max: 1000, value: 50, class: "narrow", "data-replay-rate": true })),
        actionButton("replay-selected", "Replay selected", () => { const ids = selected(); if (ids.length) replay({ ids }); else notice("select rows first"); }),
        actionButton("replay-matching", "Replay all matching…", () => replay(matching())));
    } else {
      toolbar.append(
        actionButton("retry-selected", "Retry selected", () => { const ids = selected(); if (ids.length) bulk("retry", { ids }); else notice("select rows first"); }),
        actionButton("cancel-selected", "Cancel selected", () => { const ids = selected(); if (ids.length) bulk("cancel", { ids }); else notice("select rows first"); }),
        actionButton("retry-matching", "Retry all matching…", () => bulk("retry", matching())),
        actionButton("cancel-matching", "Cancel all matching…", () => bulk("cancel", matching())));
    }
  }

  jobList.reload = (reset) => {
    if (reset) { jobList.cursor = null; jobList.older = []; }
    for (const f of FILTERS) {
      const input = content.querySelector(`[data-filter="${f}"]`);
      if (input) input.value = currentFilter()[f] || "";
    }
    render().catch((err) => notice(err.message, "error"));
  };
  window.addEventListener("popstate", () => jobList.reload(true));
  onChange(() => { if (!jobList.cursor) render(true).catch(() => {}); });
  await render();
}

// ---------- job detail ----------
async function jobDetail() {
  const id = main.dataset.job;
  const holder = el("div");
  content.replaceChildren(liveControl(), holder);
  const render = async () => {
    let doc;
    try { doc = await api(`jobs/${id}`); } catch (err) {
      holder.replaceChildren(el("p", { class: "error", "data-not-found": err.status === 404 }, err.message));
      return;
    }
    const j = doc.job;
    const act = async (verb) => {
      try { await post(`jobs/${id}/${verb}`); notice(`job ${id}: ${verb} done`, "ok"); await render(); }
      catch (err) { notice(err.message, "error"); }
    };
    const replayOne = async () => {
      try {
        const r = await post("dlq/replay", { ids: [Number(id)], rate: 50 });
        notice(r.replayed ? `job ${id} replayed` : `job ${id} not replayed${r.skipped.length ? ": " + r.skipped[0].why : ""}`, r.replayed ? "ok" : "error");
        await render();
      } catch (err) { notice(err.message, "error"); }
    };
    const actions = [];
    if (CAN_WRITE) {
      if (j.status === "pending" || j.status === "running") actions.push(actionButton("cancel", "Cancel", () => act("cancel")));
      if (j.status === "failed") actions.push(actionButton("replay", "Replay from the DLQ", replayOne));
      if (j.status === "failed" || j.status === "cancelled") actions.push(actionButton("retry", "Retry", () => act("retry")));
    }
    const facts = [["status", el("span", { class: `status ${j.status}`, "data-job-status": j.status }, j.status)],
      ["queue", j.queue_name], ["task", j.task], ["priority", j.priority],
      ["attempts", `${j.attempt_count} of ${j.max_attempts}`], ["lease expiries", j.lease_expiry_count],
      ["fencing token", j.fence ?? "–"], ["owner", j.locked_by || "–"], ["lease expires", when(j.lease_expires_at)],
      ["last heartbeat", when(j.last_heartbeat_at)], ["created", when(j.created_at)], ["available", when(j.available_at)],
      ["completed", when(j.completed_at)], ["failed", when(j.failed_at)], ["cancelled", when(j.cancelled_at)],
      ["idempotency key", j.idempotency_key || "–"], ["flow key", j.flow_key || "–"],
      ["correlation id", j.correlation_id || "–"], ["last error", j.last_error_code || "–"]];
    const attempts = doc.attempts.map((a) => el("tr", { "data-attempt": a.attempt, "data-fence": a.fence ?? "" },
      el("td", {}, a.attempt), el("td", {}, a.fence ?? "–"), el("td", { title: a.lock_token }, short(a.lock_token)),
      el("td", {}, a.worker || "–"), el("td", {}, when(a.started_at)), el("td", {}, when(a.ended_at)),
      el("td", {}, when(a.lease_expires_at)), el("td", {}, when(a.last_heartbeat_at)),
      el("td", {}, el("span", { class: `outcome ${a.outcome}` }, a.outcome)),
      el("td", {}, a.error ? el("details", {}, el("summary", {}, a.error_code || "error"), el("pre", {}, a.error)) : (a.error_code || ""))));
    const reaps = doc.reaps.map((r) => el("tr", { "data-reap": r.attempt },
      el("td", {}, when(r.at)), el("td", {}, r.action), el("td", {}, r.attempt), el("td", {}, r.fence ?? "–"),
      el("td", {}, r.owner || "–"), el("td", {}, r.owner_status || "–"), el("td", {}, when(r.lease_expires_at)),
      el("td", {}, r.grace_seconds ?? "–"), el("td", {}, r.reaper || "–")));
    const stale = doc.stale_writes.map((s) => el("tr", { "data-stale-write": s.event, "data-stale-attempt": s.attempt },
      el("td", {}, when(s.at)), el("td", {}, s.event), el("td", {}, s.tried || "–"), el("td", {}, s.attempt),
      el("td", { title: s.lock_token }, short(s.lock_token)), el("td", {}, s.worker || "–"), el("td", {}, s.reason || "")));
    const effects = doc.effects.map((x) => el("tr", { "data-effect": x.idempotency_key },
      el("td", {}, x.idempotency_key), el("td", {}, x.status), el("td", {}, x.attempt_count), el("td", {}, short(x.lock_token)),
      el("td", {}, x.result_ref || ""), el("td", {}, when(x.succeeded_at || x.updated_at))));
    const events = doc.events.map((e) => el("tr", { "data-event": e.event },
      el("td", {}, when(e.created_at)), el("td", {}, e.event), el("td", {}, e.attempt ?? "–"),
      el("td", { title: e.lock_token || "" }, short(e.lock_token)), el("td", {}, e.worker_id || "–"), el("td", {}, e.reason || ""),
      el("td", { class: "wrap" }, e.detail ? el("code", {}, JSON.stringify(e.detail)) : "")));
    holder.replaceChildren(
      el("div", { class: "toolbar" }, actions, link(`/jobs?queue=${encodeURIComponent(j.queue_name)}`, `more in ${j.queue_name}`),
        doc.workflow ? link(`/workflows/${doc.workflow.workflow_id}`, `workflow ${doc.workflow.workflow_name}`,
          { "data-workflow-link": doc.workflow.workflow_id, title: `step ${doc.workflow.name}` }) : null),
      el("dl", { class: "facts", "data-job-id": j.id }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
      section("Payload", el("pre", { "data-payload": true }, JSON.stringify(j.payload, null, 2))),
      section("Attempts", attempts.length ? table(["#", "fence", "token", "worker", "started", "ended", "lease expiry", "last heartbeat", "outcome", "error"], attempts, { "data-table": "attempts" }) : el("p", { class: "muted" }, "Not attempted yet.")),
      section("Reaper actions", reaps.length ? table(["at", "action", "attempt", "fence", "owner", "owner was", "lease expired", "grace s", "reaper"], reaps, { "data-table": "reaps" }) : el("p", { class: "muted" }, "None.")),
      section("Refused late writes", stale.length ? table(["at", "event", "tried", "attempt", "token", "worker", "reason"], stale, { "data-table": "stale-writes" }) : el("p", { class: "muted" }, "None.")),
      section("Effects", effects.length ? table(["key", "status", "attempts", "token", "result", "at"], effects, { "data-table": "effects" }) : el("p", { class: "muted" }, "None.")),
      section("Checkpoint", doc.checkpoint ? el("pre", {}, `${doc.checkpoint.step} at ${when(doc.checkpoint.at)}\n${JSON.stringify(doc.checkpoint.data, null, 2)}`) : el("p", { class: "muted" }, "None.")),
      section("Timeline", events.length ? table(["at", "event", "attempt", "token", "by", "reason", "detail"], events, { "data-table": "events" }) : el("p", { class: "muted" }, "No events yet.")));
  };
  onChange((change) => {
    if (change.type !== "change" || (change.changed_jobs || []).includes(Number(id))) render().catch(() => {});
  });
  setInterval(() => { if (!live.paused) render().catch(() => {}); }, 5000);
  await render();
}

// ---------- periodic and workers ----------
async function periodicPage() {
  const data = await api("periodic");
  const rows = data.schedules.map((s) => el("tr", { "data-schedule": s.name },
    el("td", {}, s.name), el("td", {}, s.task), el("td", {}, s.queue_name), el("td", {}, el("code", {}, s.cron)),
    el("td", {}, s.timezone), el("td", {}, when(s.last_slot)), el("td", {}, when(s.next_slot)),
    el("td", {}, s.enqueued_total), el("td", {}, s.skipped_total)));
  content.replaceChildren(rows.length
    ? table(["name", "task", "queue", "cron", "timezone", "last slot", "next slot", "enqueued", "skipped slots"], rows, { "data-table": "periodic" })
    : el("p", { class: "muted" }, "No periodic schedule has run yet (tenure worker --app with periodic jobs)."));
}

async function workersPage() {
  const holder = el("div");
  content.replaceChildren(holder);
  const render = async () => {
    const data = await api("workers");
    const rows = data.workers.map((w) => el("tr", { "data-worker": w.id, "data-alive": w.alive },
      el("td", {}, w.id), el("td", {}, `${w.host} pid ${w.pid}`), el("td", {}, (w.queues || []).join(", ")),
      el("td", {}, w.concurrency), el("td", {}, w.stopped_at ? "stopped" : w.alive ? "alive" : "silent"),
      el("td", {}, ago(w.silent_seconds)), el("td", {}, `${w.heartbeat_seconds} s`), el("td", {}, w.version),
      el("td", {}, when(w.started_at)), el("td", { "data-abandoned": w.abandoned_threads }, w.abandoned_threads ?? 0),
      el("td", {}, w.held_jobs.length ? w.held_jobs.map((j) => link(`/jobs/${j.id}`, `#${j.id}`, { class: "held" })) : "–")));
    holder.replaceChildren(rows.length
      ? table(["worker", "host", "queues", "slots", "state", "heartbeat age", "heartbeat", "version", "started", "abandoned threads", "held jobs"], rows, { "data-table": "workers" })
      : el("p", { class: "muted" }, "No worker registered in the last day."));
  };
  await render();
  setInterval(() => render().catch(() => {}), 3000);
}

// The Flow page lives in flow.js, which imports these helpers from this module.
const flowPage = async () => (await import("./flow.js")).flowPage();
// The workflow pages live in workflows.js.
const workflowsPage = async () => (await import("./workflows.js")).workflowsPage();
const workflowPage = async () => (await import("./workflows.js")).workflowPage();
const PAGES = { overview, queue: queuePage, flow: flowPage, jobs, dlq: jobs, job: jobDetail, periodic: periodicPage,
  workers: workersPage, workflows: workflowsPage, workflow: workflowPage };

(async () => {
  const page = PAGES[PAGE];
  if (!page) return;
  try {
    await page();
    startLive();
  } catch (err) {
    content.replaceChildren(el("p", { class: "error" }, err.message));
  }
})();
