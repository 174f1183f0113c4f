// memstream console: talks to this node's REST API with the key typed in (sessionStorage only).
// Every value from the API goes into the page with textContent, never as markup.

const state = { key: "", admin: "", agent: null, thread: null, threadsCursor: null, messagesAfter: -1 };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "onclick") node.addEventListener("click", value);
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function api(path, { method = "GET", body, token, raw = false } = {}) {
  const headers = { Authorization: `Bearer ${token ?? state.key}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const error = (await response.json()).error;
      if (error) message = `${error.code}: ${error.message}`;
    } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  if (raw) return response;
  return response.status === 204 ? null : response.json();
}

async function guarded(action) {
  showError("");
  try {
    await action();
  } catch (error) {
    showError(error.message);
  }
}

// ---- connecting and tabs ------------------------------------------------------------------------

async function connect(event) {
  event.preventDefault();
  state.key = $("api-key").value.trim();
  await guarded(async () => {
    const { agents } = await api("/v1/agents");
    sessionStorage.setItem("memstream-key", state.key);
    $("account").textContent = `${agents.length} agent(s)`;
    $("tabs").hidden = false;
    showTab("threads");
    renderAgents(agents);
  });
}

function showTab(name) {
  for (const section of document.querySelectorAll(".tab")) section.hidden = section.id !== `tab-${name}`;
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === name);
}

function renderAgents(agents) {
  const list = $("agents");
  list.replaceChildren(...agents.map((agent) => el("li", {},
    el("button", { "data-agent": agent.agent_id, onclick: () => guarded(() => selectAgent(agent)) }, agent.agent_id),
    el("span", { class: "muted", text: ` ${agent.capabilities.join(", ") || "no capabilities"}` }))));
  if (!agents.length) list.append(el("li", { class: "muted", text: "no agents yet" }));
}

// ---- threads, context, messages -----------------------------------------------------------------

async function selectAgent(agent) {
  state.agent = agent.agent_id;
  state.threadsCursor = null;
  for (const name of document.querySelectorAll(".agent-name")) name.textContent = agent.agent_id;
  $("threads-agent").textContent = `of ${agent.agent_id}`;
  $("threads").replaceChildren();
  $("thread").hidden = true;
  await loadThreads();
}

async function loadThreads() {
  const params = new URLSearchParams({ agent_id: state.agent, limit: "50" });
  if (state.threadsCursor) params.set("cursor", state.threadsCursor);
  const page = await api(`/v1/threads?${params}`);
  $("threads").append(...page.threads.map((thread) => el("li", {},
    el("button", { "data-thread": thread.thread_id, onclick: () => guarded(() => selectThread(thread)) }, thread.thread_id),
    el("span", { class: "muted", text: ` ${thread.user_id ?? "no user"} · ${new Date(thread.updated_at).toLocaleString()}` }))));
  state.threadsCursor = page.next_cursor;
  $("threads-more").hidden = !page.next_cursor;
}

function messageItem(role, content, extra = "") {
  return el("li", { class: `message ${role}` }, el("span", { class: "role", text: role }), el("span", { class: "content", text: content ?? "" }),
    extra ? el("span", { class: "muted", text: ` ${extra}` }) : "");
}

async function selectThread(thread) {
  state.thread = thread.thread_id;
  state.messagesAfter = -1;
  $("thread").hidden = false;
  $("thread-id").textContent = thread.thread_id;
  $("thread-user").textContent = thread.user_id ? `user ${thread.user_id}` : "no user";
  $("search-user").value = thread.user_id ?? "";
  $("memory-user").value = thread.user_id ?? "";
  const context = await api(`/v1/threads/${encodeURIComponent(thread.thread_id)}/context`);
  const info = context.metadata;
  $("context-info").textContent = [
    `${info.pinned_count} pinned fact(s)`,
    info.summary_version ? `summary v${info.summary_version} (to offset ${info.summary_last_message_offset})` : "no summary",
    `window ${info.window_messages}/${info.window_size} messages`,
    `${info.token_count} tokens`,
  ].join(" · ");
  $("context").replaceChildren(...context.messages.map((m) => messageItem(m.role, m.content ?? JSON.stringify(m.tool_calls))));
  $("messages").replaceChildren();
  await loadMessages();
}

async function loadMessages() {
  const page = await api(`/v1/threads/${encodeURIComponent(state.thread)}/messages?after=${state.messagesAfter}&limit=100`);
  $("messages").append(...page.messages.map((m) => messageItem(m.role, m.content || m.tool_call?.result || m.tool_call?.arguments || "",
    `#${m.offset} · ${new Date(m.created_at).toLocaleString()}`)));
  const more = page.messages.length === 100;
  state.messagesAfter = page.next_after;
  $("messages-more").hidden = !more;
}

// ---- search -------------------------------------------------------------------------------------

async function search(event) {
  event.preventDefault();
  if (!state.agent) throw new Error("choose an agent first (Agents & threads)");
  const body = {
    arguments: { query: $("search-query").value, scope: $("search-scope").value, summarize: false, limit: 20 },
  };
  const user = $("search-user").value.trim();
  if (user) body.user_id = user;
  if (state.thread) body.thread_id = state.thread;
  const { result } = await api(`/v1/agents/${encodeURIComponent(state.agent)}/tools/journal_message_search`, { method: "POST", body });
  const hits = result.messages ?? [];
  $("search-results").replaceChildren(...hits.map((hit) => messageItem(hit.role, hit.content,
    `${hit.thread_id} #${hit.offset} · ${new Date(hit.created_at).toLocaleString()}`)));
  if (!hits.length) $("search-results").append(el("li", { class: "muted", text: "nothing found" }));
}

// ---- memory -------------------------------------------------------------------------------------

function memoryPath(suffix = "") {
  if (!state.agent) throw new Error("choose an agent first (Agents & threads)");
  const user = $("memory-user").value.trim();
  const query = user ? `?user_id=${encodeURIComponent(user)}` : "";
  return `/v1/agents/${encodeURIComponent(state.agent)}/memory${suffix}${query}`;
}

async function showMemory(event) {
  event?.preventDefault();
  const path = memoryPath();
  const { entries } = await api(path + (path.includes("?") ? "&" : "?") + "limit=200");
  $("memory").tBodies[0].replaceChildren(...entries.map((entry) => el("tr", { "data-key": entry.key },
    el("td", { text: entry.key }), el("td", { text: entry.category }), el("td", { text: entry.visibility }),
    el("td", { text: entry.importance.toFixed(2) }), el("td", { class: "content", text: entry.content }),
    el("td", {},
      el("button", { class: "edit", onclick: () => guarded(() => editEntry(entry)) }, "Edit"),
      el("button", { class: "forget", onclick: () => guarded(() => forgetEntry(entry)) }, "Forget")))));
}

async function editEntry(entry) {
  const content = window.prompt(`New content of ${entry.key}`, entry.content);
  if (content === null || content === entry.content) return;
  await api(memoryPath(`/${encodeURIComponent(entry.entry_id)}`), { method: "PATCH", body: { content } });
  await showMemory();
}

async function forgetEntry(entry) {
  if (!window.confirm(`Forget ${entry.key}?`)) return;
  await api(memoryPath(`/${encodeURIComponent(entry.entry_id)}`), { method: "DELETE" });
  await showMemory();
}

async function exportMemory() {
  const response = await api(memoryPath("/export"), { raw: true });
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: `memory-${state.agent}.jsonl` });
  document.body.append(link);
  link.click();
  link.remove();
  URL.revokeObjectURL(url);
}

// ---- operators ----------------------------------------------------------------------------------

async function showOverview(event) {
  event.preventDefault();
  state.admin = $("admin-token").value.trim();
  const overview = await api("/admin/v1/overview", { token: state.admin });
  const age = overview.figures_age_s === null ? "not read yet" : `read ${overview.figures_age_s.toFixed(0)} s ago`;
  $("overview-info").textContent = [
    `relay lag ${overview.relay_lag ?? "?"}`,
    `summaries written ${overview.summaries_written ?? "?"}`,
    `compactions in flight ${overview.compactions_in_flight ?? "?"}`,
    age,
  ].join(" · ");
  $("processors").tBodies[0].replaceChildren(...overview.processors.map((p) => el("tr", { "data-processor": p.name },
    el("td", { text: p.name }), el("td", { text: p.runs_in }), el("td", { text: p.state ?? "-" }),
    el("td", { class: "lag", text: p.lag ?? "?" }), el("td", { class: "dead", text: p.dead_letters ?? "?" }))));
}

// ---- wiring -------------------------------------------------------------------------------------

$("connect").addEventListener("submit", connect);
$("threads-more").addEventListener("click", () => guarded(loadThreads));
$("messages-more").addEventListener("click", () => guarded(loadMessages));
$("search-form").addEventListener("submit", (event) => guarded(() => search(event)));
$("memory-form").addEventListener("submit", (event) => guarded(() => showMemory(event)));
$("memory-export").addEventListener("click", () => guarded(exportMemory));
$("admin-form").addEventListener("submit", (event) => guarded(() => showOverview(event)));
for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => showTab(button.dataset.tab));
const saved = sessionStorage.getItem("memstream-key");
if (saved) $("api-key").value = saved;
