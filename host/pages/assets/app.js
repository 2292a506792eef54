// svc pages: small behaviours over server-rendered HTML, wired by data- attributes. Every
// page works without this file; it adds live updates, in-place paging and shortcuts.

const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content ?? "";

/** Calls the JSON API with the session cookie and the CSRF token; throws the envelope's detail. */
async function api(method, url, body) {
  const headers = { "X-CSRF-Token": csrf() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(url, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = resp.headers.get("content-type")?.includes("json") ? await resp.json() : null;
  if (!resp.ok) throw new Error(data?.detail ?? `${resp.status} ${resp.statusText}`);
  return data;
}

function say(el, message, ok) {
  if (!el) return;
  el.textContent = message;
  el.className = `flash ${ok ? "ok" : "err"}`;
  el.hidden = false;
}

// Filter forms submit themselves: selects at once, text after 250 ms of quiet. The form is a
// GET, so every filter lands in the URL and a view can be shared and reloaded.
for (const form of document.querySelectorAll("form[data-autosubmit]")) {
  let timer;
  form.addEventListener("change", (e) => {
    if (e.target.matches("select, input[type=checkbox][name]")) form.requestSubmit();
  });
  form.addEventListener("input", (e) => {
    if (!e.target.matches("input[type=search]")) return;
    clearTimeout(timer);
    timer = setTimeout(() => form.requestSubmit(), 250);
  });
}

// Auto-refresh: while the box is ticked the page reloads every 30 s (state kept in `live=1`).
for (const box of document.querySelectorAll("input[data-live]")) {
  const url = new URL(location.href);
  if (box.checked) setTimeout(() => location.reload(), 30_000);
  box.addEventListener("change", () => {
    if (box.checked) url.searchParams.set("live", "1"); else url.searchParams.delete("live");
    location.assign(url);
  });
}

// "Load more": the server renders the next rows as a fragment and names the page after it.
for (const button of document.querySelectorAll("button[data-more]")) {
  button.addEventListener("click", async () => {
    const target = document.getElementById(button.dataset.target);
    button.disabled = true;
    const resp = await fetch(button.dataset.more, { credentials: "same-origin" });
    if (!resp.ok) { button.textContent = `Failed (${resp.status}); retry`; button.disabled = false; return; }
    target.insertAdjacentHTML("beforeend", await resp.text());
    const next = resp.headers.get("x-next-page");
    if (next) { button.dataset.more = next; button.disabled = false; } else { button.remove(); }
    const count = document.querySelector("[data-row-count]");
    if (count) count.textContent = String(target.children.length);
  });
}

// Header sorting of the rows on the page (the server's order is newest first).
for (const table of document.querySelectorAll("table[data-sortable]")) {
  for (const button of table.querySelectorAll("th button[data-key]")) {
    button.addEventListener("click", () => {
      const key = button.dataset.key;
      const desc = button.dataset.dir !== "desc";
      button.dataset.dir = desc ? "desc" : "asc";
      for (const th of table.querySelectorAll("th")) th.removeAttribute("aria-sort");
      button.closest("th").setAttribute("aria-sort", desc ? "descending" : "ascending");
      const body = table.tBodies[0];
      const rows = [...body.querySelectorAll("tr[data-row]")];
      const value = (r) => r.dataset[key] ?? "";
      const numeric = rows.every((r) => value(r) === "" || !Number.isNaN(Number(value(r))));
      rows.sort((a, b) => {
        const [x, y] = [value(a), value(b)];
        const c = numeric ? Number(x) - Number(y) : x.localeCompare(y);
        return desc ? -c : c;
      });
      for (const r of rows) {
        body.append(r);
        const panel = document.getElementById(`panel-${r.dataset.row}`);
        if (panel) body.append(panel);
      }
      const url = new URL(location.href);
      url.searchParams.set("sort", `${key}:${desc ? "desc" : "asc"}`);
      history.replaceState(null, "", url);
    });
  }
}

// Saved views: the URL's filters saved under a name, through the JSON API.
for (const form of document.querySelectorAll("form[data-save-view]")) {
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const query = Object.fromEntries(new URL(location.href).searchParams);
    try {
      await api("POST", "/api/admin/observability/views", { name: form.elements.name.value, query });
      location.reload();
    } catch (err) { say(document.getElementById("view-status"), err.message, false); }
  });
}
for (const button of document.querySelectorAll("button[data-delete-view]")) {
  button.addEventListener("click", async () => {
    try {
      await api("DELETE", `/api/admin/observability/views/${encodeURIComponent(button.dataset.deleteView)}`);
      location.reload();
    } catch (err) { say(document.getElementById("view-status"), err.message, false); }
  });
}

// Personal access tokens through the JSON API: a new token is shown once, here. Revoke
// buttons on the admin page name the admin endpoint in `data-revoke-base`.
for (const form of document.querySelectorAll("form[data-create-token]")) {
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const days = Number(form.elements.days.value) || undefined;
    try {
      const t = await api("POST", "/api/tokens", { name: form.elements.name.value, expires_in_days: days });
      document.getElementById("new-token").textContent = t.token;
      say(document.getElementById("token-status"), "Copy the token now: it is not shown again.", true);
    } catch (err) { say(document.getElementById("token-status"), err.message, false); }
  });
}
for (const button of document.querySelectorAll("button[data-revoke-token]")) {
  button.addEventListener("click", async () => {
    try {
      const base = button.dataset.revokeBase ?? "/api/tokens";
      await api("DELETE", `${base}/${encodeURIComponent(button.dataset.revokeToken)}`);
      location.reload();
    } catch (err) { say(document.getElementById("token-status"), err.message, false); }
  });
}

// Buttons that call the API and report in place (warmup, sync…).
for (const button of document.querySelectorAll("button[data-post]")) {
  button.addEventListener("click", async () => {
    const status = document.getElementById(button.dataset.status);
    try {
      const data = await api("POST", button.dataset.post);
      say(status, button.dataset.done ?? JSON.stringify(data), true);
    } catch (err) { say(status, err.message, false); }
  });
}

// Next / previous error in a transcript: buttons and the n / p keys.
const errors = [...document.querySelectorAll(".turn.error")];
let current = -1;
function jump(step) {
  if (!errors.length) return;
  current = (current + step + errors.length) % errors.length;
  const el = errors[current];
  el.scrollIntoView({ block: "center" });
  el.focus();
  const where = document.querySelector("[data-error-position]");
  if (where) where.textContent = `${current + 1} / ${errors.length}`;
}
for (const b of document.querySelectorAll("button[data-error-step]")) {
  b.addEventListener("click", () => jump(Number(b.dataset.errorStep)));
}
if (errors.length) {
  document.addEventListener("keydown", (e) => {
    if (e.target.matches("input, textarea, select") || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "n") jump(1);
    if (e.key === "p") jump(-1);
  });
}

// The warmup log: server-sent events, one line each. EventSource reconnects by itself and
// sends Last-Event-ID, so the server resumes after the last line this page showed.
for (const log of document.querySelectorAll("ul[data-sse]")) {
  const source = new EventSource(log.dataset.sse);
  const line = (text, cls) => {
    const li = document.createElement("li");
    li.textContent = text;
    if (cls) li.className = cls;
    log.append(li);
    log.scrollTop = log.scrollHeight;
  };
  source.addEventListener("start", (e) => line(`warmup started: ${JSON.parse(e.data).tables} tables`));
  source.addEventListener("row", (e) => {
    const { row } = JSON.parse(e.data);
    line(`${row.table_id}: ${row.state}${row.error ? ` — ${row.error}` : ""}`, row.state === "error" ? "failed" : "");
  });
  source.addEventListener("complete", (e) => {
    const d = JSON.parse(e.data);
    line(`warmup finished: ${d.fresh} fresh, ${d.failed} failed`, d.failed ? "failed" : "");
  });
  source.addEventListener("error", () => {
    const state = document.querySelector("[data-sse-state]");
    if (state) state.textContent = source.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting…";
  });
  source.addEventListener("open", () => {
    const state = document.querySelector("[data-sse-state]");
    if (state) state.textContent = "live";
  });
}

// The telemetry ask box: the SQL comes first, then its rows, every value set as text.
for (const form of document.querySelectorAll("form[data-ask]")) {
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const status = document.getElementById("ask-status");
    const answer = document.getElementById("ask-answer");
    const button = form.querySelector("button");
    button.disabled = true;
    say(status, "Asking…", true);
    answer.hidden = true;
    try {
      const a = await api("POST", "/api/admin/telemetry/ask", { question: form.elements.question.value });
      document.getElementById("ask-sql").textContent = a.sql;
      document.getElementById("ask-rationale").textContent = a.rationale;
      const table = document.getElementById("ask-rows");
      table.replaceChildren();
      if (a.outcome === "answered") {
        const head = table.createTHead().insertRow();
        for (const c of a.columns) {
          const th = document.createElement("th");
          th.scope = "col";
          th.textContent = c;
          head.append(th);
        }
        const body = table.createTBody();
        for (const r of a.rows) {
          const tr = body.insertRow();
          for (const c of a.columns) tr.insertCell().textContent = r[c] === null ? "" : String(r[c]);
        }
        const more = a.truncated ? " (more rows exist; refine the question)" : "";
        say(status, `${a.row_count} rows${more} · LLM ${a.llm_ms} ms · query ${a.exec_ms} ms`, true);
      } else {
        say(status, `${a.outcome === "rejected" ? "Refused" : "Failed"}: ${a.error}`, false);
      }
      answer.hidden = false;
    } catch (err) { say(status, err.message, false); }
    button.disabled = false;
  });
}
