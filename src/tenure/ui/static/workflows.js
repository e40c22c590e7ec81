// tenure ui: the workflow pages (/workflows and /workflows/ID, docs/ui.md), loaded by app.js.
// The DAG is the server's SVG (GET workflows/ID's graph, src/tenure/ui/dag.py): each step is an
// <a data-step-id data-status> to its job page. Untrusted text is only ever set as textContent
// (the SVG is parsed as XML, never as HTML, and its names are escaped by the server).
// Hooks: tr[data-workflow=ID] in table[data-table=workflows]; on a workflow's page
// dl[data-workflow-facts], figure[data-workflow-graph] holding the SVG, tr[data-step-id]
// (data-status) in table[data-table=steps].

import { api, content, el, link, live, liveControl, notice, onChange, section, table, when } from "./app.js";

const STEPS_SHOWN = 500;

function counts(byStatus) {
  const order = ["waiting", "pending", "running", "completed", "failed", "cancelled"];
  return order.filter((s) => byStatus[s]).map((s) => el("span", { class: `status ${s}`, "data-count": s }, `${byStatus[s]} ${s}`));
}

export async function workflowsPage() {
  const holder = el("div");
  content.replaceChildren(liveControl(), holder);
  const render = async () => {
    const data = await api("workflows?limit=100");
    const rows = data.workflows.map((w) => el("tr", { "data-workflow": w.id, "data-finished": w.finished },
      el("td", {}, link(`/workflows/${w.id}`, w.id)), el("td", {}, link(`/workflows/${w.id}`, w.name)),
      el("td", {}, w.steps), el("td", {}, el("div", { class: "counts" }, counts(w.by_status || {}))),
      el("td", {}, w.cancelled_at ? "cancelled" : w.finished ? "finished" : "running"), el("td", {}, when(w.created_at))));
    holder.replaceChildren(rows.length
      ? table(["id", "name", "steps", "by status", "state", "created"], rows, { "data-table": "workflows" })
      : el("p", { class: "muted" }, "No workflow yet (tenure.Workflow, docs/workflows.md)."));
  };
  onChange(() => render().catch(() => {}));
  await render();
  setInterval(() => { if (!live.paused) render().catch(() => {}); }, 10000);
}

function output(value) {
  if (value === null || value === undefined) return "";
  const text = JSON.stringify(value);
  return el("code", { class: "payload", title: text.length > 80 ? text : null }, text.length > 80 ? `${text.slice(0, 79)}…` : text);
}

export async function workflowPage() {
  const id = document.querySelector("main").dataset.workflow;
  const holder = el("div");
  content.replaceChildren(liveControl(), holder);
  let busy = false;
  const render = async () => {
    if (busy) return;
    busy = true;
    let w;
    try { w = await api(`workflows/${id}`); } catch (err) {
      holder.replaceChildren(el("p", { class: "error", "data-not-found": err.status === 404 }, err.message));
      return;
    } finally { busy = false; }
    const names = new Map(w.steps.map((s) => [s.id, s.name]));
    const unfinished = ["waiting", "pending", "running"].some((st) => (w.by_status || {})[st]);
    const state = w.cancelled_at ? "cancelled" : unfinished ? "running" : "finished";
    const facts = [["name", w.name], ["state", state], ["steps", w.steps_total], ["created", when(w.created_at)],
      ["cancelled", when(w.cancelled_at)], ["by status", el("div", { class: "counts" }, counts(w.by_status))]];
    const svg = document.importNode(new DOMParser().parseFromString(w.graph, "image/svg+xml").documentElement, true);
    const rows = w.steps.slice(0, STEPS_SHOWN).map((s) => el("tr", { "data-step-id": s.id, "data-status": s.status },
      el("td", {}, link(`/jobs/${s.id}`, s.id)), el("td", {}, s.name),
      el("td", {}, el("span", { class: `status ${s.status}` }, s.status)), el("td", {}, s.task), el("td", {}, s.queue_name),
      el("td", { class: "wrap" }, (s.deps || []).map((d, i) => [i ? ", " : "", link(`/jobs/${d}`, names.get(d) ?? `#${d}`)])),
      el("td", {}, s.attempt_count), el("td", {}, when(s.started_at)), el("td", {}, when(s.completed_at)),
      el("td", {}, s.cancel_reason || ""), el("td", {}, output(s.output))));
    const more = w.steps_total > rows.length
      ? el("p", { class: "muted" }, `The first ${rows.length} of ${w.steps_total} steps; see the job browser for the rest.`) : null;
    holder.replaceChildren(
      el("dl", { class: "facts", "data-workflow-facts": w.id }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
      section("Graph", el("figure", { class: "dag", "data-workflow-graph": w.id }, svg)),
      section("Steps", table(["job", "step", "status", "task", "queue", "after", "attempts", "started", "completed",
        "cancelled because", "output"], rows, { "data-table": "steps" }), more));
  };
  onChange((change) => {
    if (change.type !== "change" || (change.changed_jobs || []).length) render().catch((err) => notice(err.message, "error"));
  });
  setInterval(() => { if (!live.paused) render().catch(() => {}); }, 5000);
  await render();
}
