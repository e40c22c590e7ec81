// tenure ui: the Flow page (/flow, docs/ui.md), loaded by app.js. It reads GET flow and, for an
// admin only, changes one setting per form through POST flow/... (the server refuses a viewer
// with 403 whatever the page shows). Untrusted text is only ever set as textContent.
// Hooks: section[data-flow-queue=Q] holds table[data-table=flow-keys] with tr[data-flow-key=K]
// (td[data-weight], td[data-running-limit], td[data-blocked]); tr[data-rate-limit=NAME] in
// table[data-table=rate-limits] (td[data-tokens]); tr[data-flow-change=ID]; the forms are
// form[data-flow-form=queue|key|rate] with inputs [data-field=...] and a submit button[data-action]
// (flow-per-key-running, flow-key-set, rate-limit-set); a row's edit buttons (flow-key-edit,
// rate-limit-edit) fill a form, rate-limit-delete asks for a confirmation first.

import {
  CAN_WRITE, actionButton, ago, api, confirmDialog, content, el, link, live, liveControl, notice, onChange, post,
  section, table, when,
} from "./app.js";

function num(value, digits = 2) {
  if (value === null || value === undefined) return "–";
  const n = Number(value);
  return Number.isInteger(n) ? n.toLocaleString() : n.toLocaleString(undefined, { maximumFractionDigits: digits });
}

function field(label, input, hint) {
  return el("label", {}, el("span", {}, label), input, hint ? el("small", { class: "muted" }, hint) : null);
}

function input(name, attrs = {}) {
  return el("input", { name, "data-field": name, ...attrs });
}

// One admin form: its fields by name, and a submit that posts what it builds (null: nothing to send).
function flowForm(kind, title, fields, button, build, done) {
  const form = el("form", { class: "flow-form", "data-flow-form": kind }, el("h3", {}, title),
    Object.values(fields), el("div", { class: "buttons" }, el("button", { type: "submit", "data-action": button }, "Save")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const request = build();
    if (!request) return;
    try {
      const result = await post(request.path, request.body);
      notice(request.said(result), "ok");
      await done();
    } catch (err) { notice(err.message, "error"); }
  });
  return form;
}

const value = (form, name) => form.querySelector(`[data-field="${name}"]`);
const text = (form, name) => value(form, name).value.trim();
const given = (form, name) => text(form, name) !== "";
const q = (name) => encodeURIComponent(name);

function forms(reload) {
  const queueForm = flowForm("queue", "A queue's per-key running limit", [
    field("queue", input("queue", { required: true, size: 14, list: "flow-queues" })),
    field("running per key", input("per_key_running", { type: "number", min: 0, step: 1, required: true, class: "narrow" }),
      "0 removes it"),
  ], "flow-per-key-running", () => ({
    path: `flow/queues/${q(text(queueForm, "queue"))}/per-key-running`,
    body: { per_key_running: Number(text(queueForm, "per_key_running")) },
    said: (r) => `queue ${r.queue}: per-key running limit ${r.per_key_running ?? "none"}`,
  }), reload);
  const keyForm = flowForm("key", "One key's limit and weight", [
    field("queue", input("queue", { required: true, size: 12, list: "flow-queues" })),
    field("key", input("key", { required: true, size: 14, placeholder: "tenant:acme" })),
    field("running", input("running", { type: "number", min: 0, step: 1, class: "narrow" }), "0 removes it"),
    field("weight", input("weight", { type: "number", min: 0.001, max: 1000, step: "any", class: "narrow" }), "1 is the default"),
  ], "flow-key-set", () => {
    const body = { key: text(keyForm, "key") };
    if (given(keyForm, "running")) body.running = Number(text(keyForm, "running"));
    if (given(keyForm, "weight")) body.weight = Number(text(keyForm, "weight"));
    if (body.running === undefined && body.weight === undefined) { notice("give a running limit, a weight or both", "error"); return null; }
    return {
      path: `flow/queues/${q(text(keyForm, "queue"))}/key`, body,
      said: () => `key ${body.key}: ${[body.running !== undefined ? `running limit ${body.running || "removed"}` : "",
        body.weight !== undefined ? `weight ${body.weight}` : ""].filter(Boolean).join(", ")}`,
    };
  }, reload);
  const rateForm = flowForm("rate", "A rate limit", [
    field("name", input("name", { required: true, size: 14, placeholder: "smtp" })),
    field("per second", input("per_second", { type: "number", min: 0, step: "any", required: true, class: "narrow" })),
    field("burst", input("burst", { type: "number", min: 1, step: 1, class: "narrow" }), "blank: per second, rounded up"),
    el("label", { class: "check" }, input("per_key", { type: "checkbox" }), el("span", {}, "one bucket per key")),
  ], "rate-limit-set", () => {
    const body = { per_second: Number(text(rateForm, "per_second")), per_key: value(rateForm, "per_key").checked };
    if (given(rateForm, "burst")) body.burst = Number(text(rateForm, "burst"));
    return { path: `flow/rate-limits/${q(text(rateForm, "name"))}`, body,
      said: (r) => `rate limit ${r.name}: ${num(r.per_second)}/s, burst ${r.burst}${r.per_key ? ", per key" : ""}` };
  }, reload);
  const node = section("Change a setting", el("datalist", { id: "flow-queues" }),
    el("div", { class: "flow-forms" }, queueForm, keyForm, rateForm));
  node.dataset.flowForms = "";
  const fill = (form, values) => {
    for (const [name, v] of Object.entries(values)) {
      const target = value(form, name);
      if (target.type === "checkbox") target.checked = Boolean(v); else target.value = v ?? "";
    }
    form.scrollIntoView({ block: "nearest" });
    form.querySelector("input:not([type=checkbox])").focus();
  };
  return {
    node,
    queues: (names) => node.querySelector("datalist").replaceChildren(...names.map((n) => el("option", { value: n }))),
    editQueue: (queue, running) => fill(queueForm, { queue, per_key_running: running ?? 0 }),
    editKey: (queue, k) => fill(keyForm, { queue, key: k.flow_key, running: k.own_limit ? k.running_limit : "", weight: k.weight ?? "" }),
    editRate: (r) => fill(rateForm, { name: r.name, per_second: r.per_second, burst: r.burst, per_key: r.per_key }),
  };
}

function queueSection(qf, edit) {
  const keys = qf.keys.map((k) => el("tr", { "data-flow-key": k.flow_key },
    el("td", {}, link(`/jobs?${new URLSearchParams({ queue: qf.queue, flow_key: k.flow_key })}`, k.flow_key)),
    el("td", {}, k.running),
    el("td", { "data-running-limit": k.running_limit ?? "" }, k.running_limit ?? "–",
      k.running_limit !== null && k.running_limit !== undefined ? el("small", { class: "muted" }, k.own_limit ? " own" : " queue") : null),
    el("td", { "data-weight": k.weight ?? "" }, num(k.weight)),
    el("td", {}, k.ready), el("td", { "data-blocked": k.blocked }, k.blocked),
    el("td", {}, k.ready ? ago(k.oldest_wait_seconds) : "–"),
    CAN_WRITE ? el("td", {}, actionButton("flow-key-edit", "Edit", () => edit.editKey(qf.queue, k))) : null));
  const facts = [`per-key running limit ${qf.per_key_running ?? "none"}`, `${qf.keys_total} key${qf.keys_total === 1 ? "" : "s"}`,
    `${qf.blocked} blocked`, qf.paused ? "paused" : null].filter(Boolean).join(" · ");
  const shown = qf.keys_total > qf.keys.length ? el("p", { class: "muted" }, `The busiest ${qf.keys.length} of ${qf.keys_total} keys.`) : null;
  const node = el("section", { "data-flow-queue": qf.queue },
    el("h2", {}, link(`/queues/${q(qf.queue)}`, qf.queue), " ", el("span", { class: "muted facts-line" }, facts),
      CAN_WRITE ? actionButton("flow-queue-edit", "Edit", () => edit.editQueue(qf.queue, qf.per_key_running)) : null),
    keys.length
      ? table(["key", "running", "limit", "weight", "ready", "blocked", "oldest wait", CAN_WRITE ? "" : null].filter((h) => h !== null),
        keys, { "data-table": "flow-keys" })
      : el("p", { class: "muted" }, "No key has running or ready jobs, or a setting of its own."), shown);
  return node;
}

// GET flow's tokens: the shared bucket's, or the fewest any bucket of a per-key limit holds; a
// limit without a bucket yet is full, a paused bucket empty.
function tokens(r) {
  const now = num(r.tokens, 1);
  if (!r.buckets) return `${now} (full: no bucket yet)`;
  return r.per_key ? `${now} (fewest of ${num(r.buckets)} buckets)` : now;
}

function paused(r) {
  if (!r.paused_until) return "–";
  return r.per_key ? `${when(r.paused_until)} (${r.paused_buckets} bucket${r.paused_buckets === 1 ? "" : "s"})` : when(r.paused_until);
}

function rateSection(rates, edit, reload) {
  const remove = async (name) => {
    if (!(await confirmDialog(`Delete the rate limit ${name}? Its jobs are no longer held back by it.`, "Delete"))) return;
    try {
      await post(`flow/rate-limits/${q(name)}/delete`);
      notice(`rate limit ${name} deleted`, "ok");
      await reload();
    } catch (err) { notice(err.message, "error"); }
  };
  const rows = rates.map((r) => el("tr", { "data-rate-limit": r.name },
    el("td", {}, r.name), el("td", { "data-per-second": r.per_second }, num(r.per_second, 3)), el("td", {}, num(r.burst)),
    el("td", {}, r.per_key ? "yes" : "no"), el("td", {}, num(r.buckets)),
    el("td", { class: "wrap", "data-tokens": r.tokens }, tokens(r)),
    el("td", { class: "wrap", "data-paused-until": r.paused_until ?? "" }, paused(r)),
    CAN_WRITE ? el("td", {}, el("div", { class: "controls" }, actionButton("rate-limit-edit", "Edit", () => edit.editRate(r)),
      actionButton("rate-limit-delete", "Delete", () => remove(r.name)))) : null));
  return section("Rate limits", rows.length
    ? table(["name", "per second", "burst", "per key", "buckets", "tokens now", "paused until", CAN_WRITE ? "" : null]
      .filter((h) => h !== null), rows, { "data-table": "rate-limits" })
    : el("p", { class: "muted", "data-empty": "rate-limits" }, "No rate limit (tenure flow rate NAME --per-second N creates one)."));
}

function changesSection(changes) {
  const rows = changes.map((c) => el("tr", { "data-flow-change": c.id },
    el("td", {}, when(c.changed_at)), el("td", {}, c.changed_by || "–"),
    el("td", {}, c.rate_limit ? `rate limit ${c.rate_limit}` : c.queue_name || "–"), el("td", {}, c.flow_key || "–"),
    el("td", {}, c.setting), el("td", {}, c.old_value ?? "–"), el("td", {}, c.new_value ?? "–")));
  return section("Latest changes", rows.length
    ? table(["at", "by", "queue or limit", "key", "setting", "from", "to"], rows, { "data-table": "flow-changes" })
    : el("p", { class: "muted" }, "No change yet."));
}

export async function flowPage() {
  const holder = el("div", { "data-flow": true });
  const rates = el("div");
  const changes = el("div");
  let edit = { editQueue: () => {}, editKey: () => {}, editRate: () => {} };
  const render = async () => {
    const data = await api("flow");
    holder.replaceChildren(...(data.queues.length ? data.queues.map((qf) => queueSection(qf, edit))
      : [el("p", { class: "muted", "data-empty": "flow-queues" },
        "No queue has a flow setting: a per-key running limit, or a limit or weight of one key (tenure flow limit, " +
        "tenure flow weight).")]));
    rates.replaceChildren(rateSection(data.rate_limits, edit, render));
    changes.replaceChildren(changesSection(data.changes));
    if (edit.queues) edit.queues(data.queues.map((qf) => qf.queue));
  };
  if (CAN_WRITE) edit = forms(render);
  content.replaceChildren(...[liveControl(), holder, rates, CAN_WRITE ? edit.node : null, changes].filter(Boolean));
  // At most one refetch every 2 s on changes, and every 5 s anyway; the forms are never redrawn.
  let timer = null;
  const schedule = () => {
    if (!timer) timer = setTimeout(() => { timer = null; render().catch((err) => notice(err.message, "error")); }, 2000);
  };
  onChange(schedule);
  setInterval(() => { if (!live.paused) schedule(); }, 5000);
  await render();
}
