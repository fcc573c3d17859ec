// Parley's web page: ask, watch live, inspect debates and batches through the public API only.
//
// Everything the page shows that a model wrote or the web supplied goes into the DOM as text
// (textContent, createTextNode); no markup is ever built from data, so a "<script>" in an answer is
// shown, not run. The stream of a debate is read with fetch() because EventSource cannot send the
// Authorization header; the page keeps the last event id and resumes with Last-Event-ID.
"use strict";

(() => {
  const KEY_STORE = "parley.apiKey";
  const PROTOCOLS = ["madke", "single", "cot", "self_consistency", "rag", "society", "mad", "mallm", "kks"];
  const ACTIVE = new Set(["queued", "retrieving", "debating"]);
  const TERMINAL_EVENTS = new Set(["job.completed", "job.failed", "job.cancelled"]);
  const JUDGE_ROLES = new Set(["judge", "moderator"]);
  const STATUS_ORDER = ["completed", "failed", "cancelled", "debating", "retrieving", "queued"];
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4b5563"];
  const SVG_NS = "http://www.w3.org/2000/svg";

  const main = document.getElementById("main");
  let view = null; // the current view's lifecycle: {signal, abort(), timers}
  const batchStatsCache = new Map(); // finished batches never change: their plot points are kept

  // ---------------------------------------------------------------------------------- DOM helpers
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "on") {
        for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
      } else if (name === "dataset") {
        for (const [k, v] of Object.entries(value)) node.dataset[k] = String(v);
      } else if (name === "text") {
        node.textContent = String(value);
      } else {
        node.setAttribute(name, value === true ? "" : String(value));
      }
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // replaceChildren() with data: arrays are flattened, null/false skipped, strings become text nodes.
  function fill(node, ...children) {
    node.replaceChildren();
    return append(node, children);
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  // Only http(s) links from data become links: a "javascript:" URL in a pool item must stay text.
  function safeUrl(url) {
    if (typeof url !== "string") return null;
    try {
      const parsed = new URL(url, location.href);
      return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
    } catch {
      return null;
    }
  }

  const fmtTime = (ts) => (ts ? new Date(ts * 1000).toLocaleString() : "—");
  const fmtNum = (n, digits = 0) =>
    n === null || n === undefined || Number.isNaN(n) ? "—" : Number(n).toFixed(digits);
  const enc = encodeURIComponent;
  const short = (text, n) => (text && text.length > n ? `${text.slice(0, n - 1)}…` : text || "");

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      signal?.addEventListener("abort", () => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  function showError(message) {
    const box = document.getElementById("error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  // ---------------------------------------------------------------------------------------- API
  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  function authHeaders() {
    const key = sessionStorage.getItem(KEY_STORE);
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  async function api(path, { method = "GET", body, headers = {}, raw = false, signal } = {}) {
    const init = { method, headers: { ...authHeaders(), ...headers }, signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (!resp.ok) {
      let detail = `${resp.status} ${resp.statusText}`;
      try {
        const problem = await resp.json();
        detail = problem.detail || problem.title || detail;
      } catch {
        /* not a problem document */
      }
      if (resp.status === 401) askForKey(detail);
      throw new ApiError(resp.status, detail);
    }
    return raw ? resp : resp.json();
  }

  // ---------------------------------------------------------------------------------------- keys
  function askForKey(detail) {
    const form = document.getElementById("key-form");
    form.hidden = false;
    document.getElementById("key-error").textContent = sessionStorage.getItem(KEY_STORE)
      ? `The key was refused: ${detail}`
      : "";
    document.getElementById("key-input").focus();
  }

  function renderKeyState() {
    const box = document.getElementById("key-state");
    box.replaceChildren();
    if (sessionStorage.getItem(KEY_STORE)) {
      append(box, [
        "key set · ",
        el("button", {
          type: "button",
          class: "link",
          id: "forget-key",
          text: "forget",
          on: {
            click: () => {
              sessionStorage.removeItem(KEY_STORE);
              renderKeyState();
              route();
            },
          },
        }),
      ]);
    }
  }

  document.getElementById("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = document.getElementById("key-input");
    sessionStorage.setItem(KEY_STORE, input.value.trim());
    input.value = "";
    document.getElementById("key-form").hidden = true;
    renderKeyState();
    route();
  });

  // ------------------------------------------------------------------------------------- routing
  function route() {
    if (view) view.abort();
    const controller = new AbortController();
    view = { signal: controller.signal, abort: () => controller.abort() };
    showError("");
    const [, name = "ask", ...rest] = (location.hash || "#/ask").split("/");
    const id = decodeURIComponent(rest.join("/"));
    const section = { debate: "debates", batch: "batches" }[name] || name;
    for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === section);
    main.replaceChildren();
    const render = { ask: renderAsk, debates: renderDebates, debate: renderDebate, batches: renderBatches, batch: renderBatch }[name] || renderAsk;
    const current = view;
    Promise.resolve(render(id, current)).catch((err) => {
      if (current.signal.aborted || err.name === "AbortError") return;
      showError(err instanceof ApiError ? err.message : `Error: ${err.message}`);
    });
  }

  // --------------------------------------------------------------------------------- config form
  // The form's choices and defaults come from the API's own OpenAPI document (DebateConfig), so a
  // new protocol or a changed default shows up here without touching the page; these are the
  // fallback when the document cannot be read.
  const CONFIG_FIELDS = [
    ["protocol", "protocol"],
    ["agents", "agents"],
    ["rounds", "rounds"],
    ["knowledge", "knowledge"],
    ["prompt_style", "prompt style"],
    ["judge", "judge"],
  ];
  const FALLBACK_SPEC = {
    protocol: { enum: PROTOCOLS, default: "madke" },
    agents: { type: "integer", minimum: 1, maximum: 8, default: 2 },
    rounds: { type: "integer", minimum: 1, maximum: 10, default: 3 },
    knowledge: { enum: ["all", "wikipedia", "web", "none"], default: "all" },
    prompt_style: { enum: ["paper", "robust"], default: "paper" },
    judge: { enum: ["llm", "rule", "both", "auto"], default: "auto" },
  };
  let configSpecPromise = null;

  function configSpec() {
    if (!configSpecPromise) {
      configSpecPromise = fetch("/openapi.json")
        .then((r) => (r.ok ? r.json() : Promise.reject(new Error(r.statusText))))
        .then((doc) => {
          const props = doc.components.schemas.DebateConfig.properties;
          return Object.fromEntries(CONFIG_FIELDS.map(([name]) => [name, props[name] || FALLBACK_SPEC[name]]));
        })
        .catch(() => FALLBACK_SPEC);
    }
    return configSpecPromise;
  }

  function configFields(spec) {
    const control = (name, p) =>
      p.enum
        ? el("select", { name, title: p.description }, p.enum.map((o) => el("option", { value: o, selected: o === p.default, text: o })))
        : el("input", { type: "number", name, value: p.default, min: p.minimum, max: p.maximum, required: true, title: p.description });
    return el(
      "fieldset",
      { class: "config" },
      el("legend", { text: "Debate settings" }),
      CONFIG_FIELDS.map(([name, label]) => el("label", { class: "field" }, el("span", { text: label }), control(name, spec[name]))),
      el("p", { class: "muted hint", text: "Settings left at their defaults are not sent; the API refuses one the protocol does not use." }),
    );
  }

  // Only settings that differ from DebateConfig's defaults are sent, because the API refuses a
  // setting the chosen protocol would ignore (rounds for "single", …) instead of dropping it.
  function readConfig(form, spec) {
    const data = new FormData(form);
    const config = { protocol: data.get("protocol") };
    for (const [name] of CONFIG_FIELDS.slice(1)) {
      const p = spec[name];
      const raw = data.get(name);
      const value = p.enum ? raw : Number(raw);
      if (value !== p.default) config[name] = value;
    }
    return config;
  }

  // ----------------------------------------------------------------------------------------- ask
  async function renderAsk(_id, v) {
    const spec = await configSpec();
    if (v.signal.aborted) return;
    const question = el("textarea", { name: "question", id: "question", rows: 3, maxlength: 2000, required: true, placeholder: "Ask a question…" });
    const form = el(
      "form",
      { id: "ask-form", class: "panel" },
      el("h2", { text: "Ask a question" }),
      question,
      configFields(spec),
      el("button", { type: "submit", id: "ask-submit", text: "Ask" }),
    );
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      try {
        const body = { question: question.value, config: readConfig(form, spec) };
        const accepted = await api("/v1/debates", { method: "POST", body });
        location.hash = `#/debate/${enc(accepted.job_id)}`;
      } catch (err) {
        showError(err.message);
      } finally {
        button.disabled = false;
      }
    });
    append(main, [form, openByIdForm("debate", "Open a debate by id")]);
  }

  function openByIdForm(kind, label) {
    const input = el("input", { name: "id", placeholder: `${kind === "debate" ? "job" : "bat"}_…`, required: true });
    const form = el("form", { class: "panel inline", id: `open-${kind}` }, el("label", { text: label }), input, el("button", { type: "submit", text: "Open" }));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      location.hash = `#/${kind}/${enc(input.value.trim())}`;
    });
    return form;
  }

  // ------------------------------------------------------------------------------ debate list
  async function renderDebates(_id, v) {
    const tbody = el("tbody");
    const more = el("button", { type: "button", id: "older", hidden: true, text: "Older" });
    append(main, [
      openByIdForm("debate", "Open a debate by id"),
      el(
        "section",
        { class: "panel" },
        el("h2", { text: "Recent debates" }),
        el(
          "table",
          { id: "debate-list", class: "list" },
          el("thead", {}, el("tr", {}, ["created", "question", "protocol", "status", "batch"].map((h) => el("th", { text: h })))),
          tbody,
        ),
        more,
      ),
    ]);
    let before = null;
    const load = async () => {
      const page = await api(`/v1/debates?limit=25${before ? `&before=${enc(before)}` : ""}`, { signal: v.signal });
      for (const job of page.items) {
        append(tbody, [
          el(
            "tr",
            { dataset: { job: job.job_id } },
            el("td", { text: fmtTime(job.created_at) }),
            el("td", {}, el("a", { href: `#/debate/${enc(job.job_id)}`, text: short(job.question, 120) })),
            el("td", { text: job.protocol }),
            el("td", {}, statusBadge(job.status)),
            el("td", {}, job.batch_id ? el("a", { href: `#/batch/${enc(job.batch_id)}`, text: `${short(job.batch_id, 12)} #${job.item_id}` }) : "—"),
          ),
        ]);
      }
      if (!tbody.children.length) append(tbody, [el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No debates yet." }))]);
      before = page.next_before;
      more.hidden = !before;
    };
    more.addEventListener("click", () => load().catch((err) => showError(err.message)));
    await load();
  }

  function statusBadge(status) {
    return el("span", { class: `badge status-${status}`, text: status });
  }

  // --------------------------------------------------------------------------------- debate view
  function streamIdAfter(a, b) {
    // Redis stream ids "ms-seq" compare numerically, part by part.
    if (!b) return true;
    const [am, as = "0"] = a.split("-").map(Number);
    const [bm, bs = "0"] = b.split("-").map(Number);
    return am > bm || (am === bm && as > bs);
  }

  async function renderDebate(jobId, v) {
    const state = {
      jobId,
      status: "queued",
      pool: [],
      rounds: new Map(),
      finals: [],
      search: null,
      usage: new Map(),
      lastId: null,
      events: 0,
      connections: 0,
      ended: false,
      focusRound: null,
      result: null,
    };
    const job = await api(`/v1/debates/${enc(jobId)}`, { signal: v.signal });
    state.status = job.status;
    state.job = job;

    const live = el("span", { id: "live", class: "live", dataset: { connections: 0, events: 0 } });
    const statusBox = el("span", { id: "status" });
    const cancel = el("button", { type: "button", id: "cancel", class: "danger", text: "Cancel" });
    const jsonLink = el("a", { id: "json-link", class: "button", hidden: true, text: "JSON" });
    const cfg = job.config || {};
    const header = el(
      "section",
      { class: "panel debate-head" },
      el("h2", { id: "debate-question", text: job.question }),
      el(
        "div",
        { class: "meta" },
        el("code", { text: job.job_id }),
        statusBox,
        el("span", { text: `${cfg.protocol || "madke"} · ${cfg.agents ?? 2} agents · ≤${cfg.rounds ?? 3} rounds · knowledge ${cfg.knowledge || "all"} · ${cfg.prompt_style || "paper"} prompts · judge ${cfg.judge || "auto"}` }),
        job.batch_id ? el("a", { href: `#/batch/${enc(job.batch_id)}`, text: `batch item ${job.item_id}` }) : null,
        live,
        cancel,
        jsonLink,
      ),
    );
    const finalBox = el("section", { id: "final", class: "panel final", hidden: true });
    const poolBox = el("section", { id: "pool", class: "pool" });
    const roundsBox = el("section", { id: "rounds", class: "rounds" });
    const usageBox = el("section", { id: "usage", class: "panel" });
    const recordsBox = el("section", { id: "records", class: "panel", hidden: true });
    append(main, [header, finalBox, el("div", { class: "debate-grid" }, roundsBox, poolBox), usageBox, recordsBox]);

    cancel.addEventListener("click", async () => {
      cancel.disabled = true;
      try {
        const after = await api(`/v1/debates/${enc(jobId)}/cancel`, { method: "POST", signal: v.signal });
        state.status = after.status;
        renderStatus();
      } catch (err) {
        showError(err.message);
        cancel.disabled = false;
      }
    });

    function renderStatus() {
      fill(statusBox, statusBadge(state.status));
      cancel.hidden = !ACTIVE.has(state.status);
      live.dataset.connections = state.connections;
      live.dataset.events = state.events;
      live.dataset.lastEventId = state.lastId || "";
    }

    function roundOf(r) {
      if (!state.rounds.has(r)) state.rounds.set(r, { agents: new Map(), judges: [], others: [], searches: [], verdict: null, done: null });
      return state.rounds.get(r);
    }

    function addUsage(role, p, c, ms) {
      const u = state.usage.get(role) || { calls: 0, prompt_tokens: 0, completion_tokens: 0, seconds: 0 };
      u.calls += 1;
      u.prompt_tokens += p || 0;
      u.completion_tokens += c || 0;
      u.seconds += (ms || 0) / 1000;
      state.usage.set(role, u);
    }

    function apply(type, data) {
      switch (type) {
        case "pool.ready":
          state.pool = Array.isArray(data.pool) ? data.pool : [];
          state.poolWarnings = data.warnings || [];
          if (ACTIVE.has(state.status)) state.status = "debating";
          break;
        case "turn.completed": {
          addUsage(data.role, data.prompt_tokens, data.completion_tokens, data.latency_ms);
          if (data.role === "search") {
            // The passage the pool is searched with (search_query=passage): written before the pool.
            state.search = data;
            break;
          }
          if (ACTIVE.has(state.status)) state.status = "debating";
          if (!data.round && data.role !== "query") {
            state.finals.push(data);
            break;
          }
          // A search written before the first round (round 0) is shown with the first round.
          const round = roundOf(data.round || 1);
          if (JUDGE_ROLES.has(data.role)) round.judges.push(data);
          else if (data.agent === null || data.agent === undefined) round.others.push(data);
          else {
            if (!round.agents.has(data.agent)) round.agents.set(data.agent, { select: null, turns: [] });
            const agent = round.agents.get(data.agent);
            if (data.role === "select") agent.select = data;
            else agent.turns.push(data);
          }
          break;
        }
        case "pool.search": {
          // A debater's search during the debate: its new items join the shared pool.
          roundOf(data.round || 1).searches.push(data);
          const known = new Set(state.pool.map((it) => it.n));
          for (const item of data.added || []) {
            if (!known.has(item.n)) {
              state.pool.push({ ...item, text: "", found_by: { agent: data.agent, round: data.round, query: data.query } });
            }
          }
          break;
        }
        case "judge.verdict":
          roundOf(data.round).verdict = data;
          break;
        case "round.completed":
          roundOf(data.round).done = data;
          break;
        case "job.completed":
          state.status = "completed";
          state.answer = data.answer;
          break;
        case "job.failed":
          state.status = "failed";
          state.error = data.error;
          break;
        case "job.cancelled":
          state.status = "cancelled";
          state.error = data.reason;
          break;
        default:
          break;
      }
    }

    function selectedBy(r) {
      // pool number → agents (1-based labels) that picked it in round r
      const picks = new Map();
      const round = state.rounds.get(r);
      if (!round) return picks;
      // Agents in number order, whichever finished its selection first.
      for (const [i, agent] of [...round.agents].sort((a, b) => a[0] - b[0])) {
        const numbers = agent.select?.selected ?? agent.turns.find((t) => t.knowledge?.length)?.knowledge ?? [];
        for (const n of numbers) {
          if (!picks.has(n)) picks.set(n, []);
          picks.get(n).push(i + 1);
        }
      }
      return picks;
    }

    function renderPool() {
      const rounds = [...state.rounds.keys()].sort((a, b) => a - b);
      const focus = state.focusRound ?? rounds[rounds.length - 1];
      const picks = focus ? selectedBy(focus) : new Map();
      fill(poolBox,
        el("h3", { text: focus ? `Knowledge pool — picks of round ${focus}` : "Knowledge pool" }),
        state.pool.length ? null : el("p", { class: "muted", text: ACTIVE.has(state.status) && !state.events ? "waiting for the pool…" : "no knowledge items" }),
        (state.poolWarnings || []).map((w) => el("p", { class: "warning", text: w })),
        state.search && state.search.text
          ? el("p", { class: "muted search-passage" }, el("span", { class: "label", text: "searched for the question and: " }), state.search.text)
          : null,
        state.pool.map((item) => {
          const agents = picks.get(item.n) || [];
          const url = safeUrl(item.url);
          return el(
            "article",
            { class: `card${agents.length ? " selected" : ""}`, dataset: { n: item.n } },
            el(
              "header",
              {},
              el("span", { class: "num", text: `[${item.n}]` }),
              el("span", { class: `source source-${item.source}`, text: item.source }),
              agents.map((a) => el("span", { class: "pick", text: `A${a}` })),
            ),
            el("h4", {}, url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: item.title }) : item.title),
            item.found_by
              ? el("p", { class: "found-by muted", text: `found by A${item.found_by.agent + 1}'s search after round ${item.found_by.round}: ${item.found_by.query}` })
              : null,
            el("p", { class: "snippet", text: item.text }),
          );
        }),
      );
    }

    function callBox(rec, label) {
      const bits = [];
      if (rec.answer !== null && rec.answer !== undefined) bits.push(el("div", { class: "answer" }, el("span", { class: "label", text: "answer " }), el("strong", { text: rec.answer })));
      if (rec.verdict !== null && rec.verdict !== undefined) bits.push(el("div", { class: "answer", text: `verdict: ${rec.verdict ? "[Yes] consensus" : "[No] continue"}` }));
      if (rec.parse_error) bits.push(el("div", { class: "parse-error", text: `parse error: ${rec.parse_error}` }));
      return el(
        "div",
        { class: `call role-${rec.role}`, dataset: { role: rec.role, round: rec.round, agent: rec.agent ?? "" } },
        el("div", { class: "call-head" }, el("span", { class: "role", text: label || rec.role }), el("span", { class: "muted", text: `${(rec.prompt_tokens || 0) + (rec.completion_tokens || 0)} tok · ${fmtNum((rec.latency_ms || 0) / 1000, 1)} s` })),
        bits,
        rec.text ? el("div", { class: "reply", text: rec.text }) : null,
      );
    }

    function renderRounds() {
      const rounds = [...state.rounds.keys()].sort((a, b) => a - b);
      fill(roundsBox,
        rounds.length ? null : el("p", { class: "muted panel", text: ACTIVE.has(state.status) ? "waiting for the first round…" : "no rounds" }),
        rounds.map((r) => {
          const round = state.rounds.get(r);
          const agents = [...round.agents.keys()].sort((a, b) => a - b);
          const verdict = round.verdict;
          const yn = (b) => (b === null || b === undefined ? "—" : b ? "yes" : "no");
          return el(
            "section",
            { class: `round panel${state.focusRound === r ? " focus" : ""}`, dataset: { round: r } },
            el(
              "h3",
              {},
              el("button", {
                type: "button",
                class: "link",
                title: "highlight this round's picks on the pool",
                text: `Round ${r}`,
                on: { click: () => { state.focusRound = r; renderAll(); } },
              }),
            ),
            el(
              "div",
              { class: "agents" },
              agents.map((i) => {
                const agent = round.agents.get(i);
                const picks = agent.select?.selected;
                return el(
                  "div",
                  { class: "agent", dataset: { agent: i } },
                  el("h4", { text: `Agent ${i + 1}` }),
                  agent.select
                    ? el(
                        "div",
                        { class: "picks" },
                        el("span", { class: "label", text: "selected " }),
                        picks && picks.length ? picks.map((n) => el("span", { class: "chip", dataset: { n }, text: `[${n}]` })) : el("span", { class: "muted", text: "[No Found]" }),
                        el("div", { class: "call-wrap" }, callBox(agent.select, "select")),
                      )
                    : null,
                  agent.turns.map((t) => callBox(t)),
                );
              }),
            ),
            round.others.map((t) => callBox(t)),
            round.searches.map((s) =>
              el("div", { class: `pool-search${s.error ? " warning" : ""}`, dataset: { agent: s.agent } },
                el("span", { class: "label", text: `Agent ${s.agent + 1} searched ` }),
                el("em", { text: s.query }),
                s.error
                  ? el("span", { text: ` — retriever unreachable (${s.error}): the debate goes on with the pool it has` })
                  : el("span", { text: (s.added || []).length ? ` — added ${(s.added || []).map((a) => `[${a.n}] ${a.title}`).join(", ")}` : " — nothing new" }),
              )),
            round.judges.map((t) => el("div", { class: "judge" }, callBox(t))),
            verdict
              ? el("div", { class: `verdict ${verdict.consensus ? "yes" : "no"}`, text: `Judge (${verdict.mode}): LLM ${yn(verdict.llm)} · rule ${yn(verdict.rule)} → ${verdict.consensus ? "consensus, stop" : "no consensus, continue"}` })
              : null,
          );
        }),
        state.finals.length ? el("section", { class: "round panel finals", dataset: { round: 0 } }, el("h3", { text: "Final step" }), state.finals.map((t) => callBox(t))) : null,
      );
    }

    function renderFinal() {
      const res = state.result;
      if (state.status === "completed" || res) {
        finalBox.hidden = false;
        fill(finalBox,
          el("span", { class: "label", text: "Final answer " }),
          el("strong", { class: "final-answer", text: res ? res.answer ?? "(none)" : state.answer ?? "(none)" }),
          res ? el("span", { class: "answer-source", text: ` — ${res.answer_source} · ${res.rounds} round(s) · consensus ${res.consensus ? "yes" : "no"} · ${fmtNum(res.wall_ms / 1000, 1)} s` }) : null,
        );
      } else if (state.status === "failed" || state.status === "cancelled") {
        finalBox.hidden = false;
        fill(finalBox, el("span", { class: "error", text: `${state.status}: ${state.error || state.job.error || ""}` }));
      }
    }

    function renderUsage() {
      const rows = state.result ? Object.entries(state.result.usage_by_role || {}) : [...state.usage.entries()];
      const total = { calls: 0, prompt_tokens: 0, completion_tokens: 0, seconds: 0 };
      for (const [, u] of rows) for (const k of Object.keys(total)) total[k] += u[k] || 0;
      const row = (role, u, attrs) =>
        el("tr", attrs, el("td", { text: role }), el("td", { text: u.calls }), el("td", { text: u.prompt_tokens }), el("td", { text: u.completion_tokens }), el("td", { text: fmtNum(u.seconds, 1) }));
      fill(usageBox,
        el("h3", { text: "Calls, tokens and seconds per role" }),
        el(
          "table",
          { class: "list usage" },
          el("thead", {}, el("tr", {}, ["role", "calls", "prompt tokens", "completion tokens", "seconds"].map((h) => el("th", { text: h })))),
          el("tbody", {}, rows.map(([role, u]) => row(role, u, { dataset: { role } })), rows.length ? row("total", total, { class: "total" }) : null),
        ),
      );
    }

    function renderRecords() {
      const res = state.result;
      if (!res) return;
      recordsBox.hidden = false;
      fill(recordsBox,
        el("h3", { text: `Transcript: ${res.transcript.length} LLM calls` }),
        el("p", { class: "muted" }, "The raw record of each call; the whole job is ", el("code", { text: `GET /v1/debates/${jobId}` }), " (", el("a", { href: jsonLink.href, download: `${jobId}.json`, text: "download JSON" }), ")."),
        res.transcript.map((rec, i) =>
          el(
            "details",
            { class: "record", dataset: { index: i } },
            el(
              "summary",
              {},
              `#${i + 1} · round ${rec.round} · ${rec.role}${rec.agent === null || rec.agent === undefined ? "" : ` · agent ${rec.agent + 1}`} · ${rec.model} · ${rec.prompt_tokens}+${rec.completion_tokens} tok · ${fmtNum(rec.latency_ms / 1000, 2)} s`,
              rec.answer !== null && rec.answer !== undefined ? ` · answer: ${short(rec.answer, 80)}` : "",
              rec.verdict !== null && rec.verdict !== undefined ? ` · verdict: ${rec.verdict}` : "",
              rec.parse_error ? el("span", { class: "parse-error", text: ` · parse error: ${rec.parse_error}` }) : "",
            ),
            el("h5", { text: "Prompt messages" }),
            rec.messages && rec.messages.length
              ? rec.messages.map((m) => el("div", { class: "message" }, el("span", { class: "label", text: m.role }), el("pre", { text: m.content })))
              : el("p", { class: "muted", text: "not recorded" }),
            el("h5", { text: "Raw reply" }),
            el("pre", { class: "raw-reply", text: rec.text }),
            el("h5", { text: "Record" }),
            el("pre", { class: "record-json", text: JSON.stringify({ ...rec, messages: undefined }, null, 2) }),
          ),
        ),
      );
    }

    function renderAll() {
      renderStatus();
      renderFinal();
      renderRounds();
      renderPool();
      renderUsage();
    }

    async function loadResult() {
      const resp = await api(`/v1/debates/${enc(jobId)}`, { raw: true, signal: v.signal });
      const text = await resp.text();
      const doc = JSON.parse(text);
      state.status = doc.status;
      state.job = doc;
      if (jsonLink.href) URL.revokeObjectURL(jsonLink.href);
      jsonLink.href = URL.createObjectURL(new Blob([text], { type: "application/json" }));
      jsonLink.download = `${jobId}.json`;
      jsonLink.hidden = false;
      if (doc.result) {
        state.result = doc.result;
        // The stored result's pool is the final one, with the items the debaters' searches added.
        const items = (doc.result.pool && doc.result.pool.items) || [];
        if (items.length >= state.pool.length) state.pool = items;
        if (doc.result.pool && doc.result.pool.warnings) state.poolWarnings = doc.result.pool.warnings;
      }
      renderAll();
      renderRecords();
    }

    function dispatch(ev) {
      if (!ev.event) return;
      if (ev.id) {
        if (!streamIdAfter(ev.id, state.lastId)) return; // already shown (a resumed stream repeats nothing, but be sure)
        state.lastId = ev.id;
      }
      state.events += 1;
      let data = {};
      try {
        data = ev.data ? JSON.parse(ev.data) : {};
      } catch {
        data = {};
      }
      apply(ev.event, data);
      if (TERMINAL_EVENTS.has(ev.event)) state.ended = true;
      renderAll();
    }

    async function readStream(resp) {
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      let cur = { data: [] };
      const onLine = (line) => {
        if (line === "") {
          if (cur.data.length || cur.event) dispatch({ id: cur.id, event: cur.event, data: cur.data.join("\n") });
          cur = { data: [] };
          return;
        }
        if (line.startsWith(":")) return; // keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id") cur.id = value;
        else if (field === "event") cur.event = value;
        else if (field === "data") cur.data.push(value);
      };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += value;
        for (;;) {
          const m = /\r\n|\r|\n/.exec(buf);
          if (!m) break;
          // A lone "\r" at the end may be the first half of "\r\n": wait for the next chunk.
          if (m[0] === "\r" && m.index === buf.length - 1) break;
          onLine(buf.slice(0, m.index));
          buf = buf.slice(m.index + m[0].length);
        }
      }
    }

    async function follow() {
      let delay = 500;
      while (!v.signal.aborted && !state.ended) {
        state.connections += 1;
        live.textContent = state.connections > 1 ? "reconnecting…" : "connecting…";
        renderStatus();
        try {
          const headers = { Accept: "text/event-stream" };
          if (state.lastId) headers["Last-Event-ID"] = state.lastId;
          const resp = await api(`/v1/debates/${enc(jobId)}/events`, { raw: true, headers, signal: v.signal });
          live.textContent = "live";
          delay = 500;
          await readStream(resp);
        } catch (err) {
          if (v.signal.aborted) return;
          if (err instanceof ApiError && err.status < 500 && err.status !== 429) {
            showError(err.message);
            live.textContent = "";
            return;
          }
        }
        if (state.ended) break;
        // The stream ended without a terminal event (the server restarted or the network dropped):
        // resume after the last event shown.
        live.textContent = "reconnecting…";
        await sleep(delay, v.signal);
        delay = Math.min(delay * 2, 5000);
      }
      if (v.signal.aborted) return;
      live.textContent = "finished";
      await loadResult();
    }

    renderAll();
    await follow();
  }

  // ------------------------------------------------------------------------------------- batches
  function normalizeAnswer(text) {
    // SQuAD normalisation, as the evaluation harness scores exact match (engine/answers.py).
    return String(text || "")
      .toLowerCase()
      .replace(/[!"#$%&'()*+,\-./:;<=>?@[\\\]^_`{|}~]/g, "")
      .replace(/\b(a|an|the)\b/g, " ")
      .split(/\s+/)
      .filter(Boolean)
      .join(" ");
  }

  function isCorrect(answer, golds) {
    const pred = normalizeAnswer(answer);
    return Boolean(pred) && golds.some((g) => normalizeAnswer(g) === pred);
  }

  function parseResults(text) {
    return text
      .split("\n")
      .filter((line) => line.trim())
      .map((line) => JSON.parse(line));
  }

  function batchStats(rows) {
    let graded = 0;
    let correct = 0;
    let finished = 0;
    let tokens = 0;
    let gold = false;
    for (const row of rows) {
      const hasGold = Array.isArray(row.answers) && row.answers.length > 0;
      gold = gold || hasGold;
      if (row.status !== "completed" || !row.result) continue;
      finished += 1;
      const usage = row.result.usage || {};
      tokens += (usage.prompt_tokens || 0) + (usage.completion_tokens || 0);
      if (hasGold) {
        graded += 1;
        if (isCorrect(row.result.answer, row.answers)) correct += 1;
      }
    }
    return { gold, graded, correct, finished, accuracy: graded ? correct / graded : null, meanTokens: finished ? tokens / finished : null };
  }

  async function fetchResults(batchId, signal) {
    const resp = await api(`/v1/batches/${enc(batchId)}/results`, { raw: true, signal });
    const text = await resp.text();
    return { text, rows: parseResults(text) };
  }

  function progressBar(batch) {
    const bar = el("div", { class: "progress", id: "batch-progress", dataset: { progress: batch.progress, status: batch.status } });
    for (const s of STATUS_ORDER) {
      const n = batch.counts[s] || 0;
      if (!n) continue;
      const seg = el("div", { class: `seg status-${s}`, title: `${s}: ${n}` });
      seg.style.width = `${(100 * n) / batch.total}%`;
      bar.append(seg);
    }
    return bar;
  }

  function configForm(spec, onSubmit, submitLabel, extra) {
    const form = el("form", { class: "panel" }, extra, configFields(spec), el("button", { type: "submit", text: submitLabel }));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      try {
        await onSubmit(form);
      } catch (err) {
        showError(err.message);
      } finally {
        button.disabled = false;
      }
    });
    return form;
  }

  function parseBatchItems(text) {
    // One item per line: a JSON object {id?, question, answers?} or just the question's text.
    return text
      .split("\n")
      .map((line) => line.trim())
      .filter(Boolean)
      .map((line) => {
        if (line.startsWith("{")) return JSON.parse(line);
        return { question: line };
      });
  }

  async function renderBatches(_id, v) {
    const items = el("textarea", { id: "batch-items", rows: 5, required: true, placeholder: '{"question": "What is the capital of France?", "answers": ["Paris"]}\nWho wrote Hamlet?' });
    const spec = await configSpec();
    if (v.signal.aborted) return;
    const form = configForm(
      spec,
      async (f) => {
        let parsed;
        try {
          parsed = parseBatchItems(items.value);
        } catch (err) {
          throw new Error(`a line is not JSON: ${err.message}`);
        }
        const accepted = await api("/v1/batches", { method: "POST", body: { items: parsed, config: readConfig(f, spec) } });
        location.hash = `#/batch/${enc(accepted.batch_id)}`;
      },
      "Submit batch",
      [el("h2", { text: "New batch" }), el("label", { for: "batch-items", text: "One question per line, as text or as JSON with gold answers:" }), items],
    );
    form.id = "batch-form";
    const tbody = el("tbody");
    append(main, [
      el(
        "section",
        { class: "panel" },
        el("h2", { text: "Batches" }),
        el("table", { id: "batch-list", class: "list" }, el("thead", {}, el("tr", {}, ["created", "batch", "protocol", "status", "progress", "items"].map((h) => el("th", { text: h })))), tbody),
      ),
      form,
      openByIdForm("batch", "Open a batch by id"),
    ]);
    const page = await api("/v1/batches?limit=50", { signal: v.signal });
    for (const b of page.items) {
      append(tbody, [
        el(
          "tr",
          { dataset: { batch: b.batch_id } },
          el("td", { text: fmtTime(b.created_at) }),
          el("td", {}, el("a", { href: `#/batch/${enc(b.batch_id)}`, text: b.batch_id })),
          el("td", { text: b.protocol }),
          el("td", {}, statusBadge(b.status)),
          el("td", {}, progressBar(b)),
          el("td", { text: `${Math.round(b.progress * b.total)}/${b.total}` }),
        ),
      ]);
    }
    if (!page.items.length) append(tbody, [el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No batches yet." }))]);
  }

  async function plotPoints(current, currentStats, listed, signal) {
    // One point per batch of this key that carries gold answers: accuracy against mean tokens,
    // coloured by protocol, so protocols compare at a glance. Finished batches' results are read once
    // per page load (batchStatsCache).
    const points = [];
    if (currentStats.gold && currentStats.accuracy !== null) {
      points.push({ batchId: current.batch_id, protocol: current.config.protocol || "madke", ...currentStats, current: true });
    }
    // Listed again only while one of the others is unfinished (its point is still to come).
    if (!listed.items || listed.items.some((b) => b.batch_id !== current.batch_id && b.status !== "completed")) {
      listed.items = (await api("/v1/batches?limit=20", { signal })).items;
    }
    for (const b of listed.items) {
      if (b.batch_id === current.batch_id || b.status !== "completed") continue;
      if (!batchStatsCache.has(b.batch_id)) {
        const { rows } = await fetchResults(b.batch_id, signal);
        batchStatsCache.set(b.batch_id, { protocol: b.protocol, ...batchStats(rows) });
      }
      const s = batchStatsCache.get(b.batch_id);
      if (s.gold && s.accuracy !== null) points.push({ batchId: b.batch_id, current: false, ...s });
    }
    return points;
  }

  function drawPlot(points) {
    const W = 760;
    const H = 320;
    const pad = { l: 56, r: 160, t: 16, b: 44 };
    const maxX = Math.max(1, ...points.map((p) => p.meanTokens)) * 1.1;
    const x = (v) => pad.l + (v / maxX) * (W - pad.l - pad.r);
    const y = (v) => H - pad.b - v * (H - pad.t - pad.b);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "accuracy against mean tokens per protocol" });
    root.append(svg("rect", { x: pad.l, y: pad.t, width: W - pad.l - pad.r, height: H - pad.t - pad.b, fill: "#fafafa", stroke: "#d4d4d8" }));
    for (let i = 0; i <= 4; i += 1) {
      const acc = i / 4;
      root.append(svg("line", { x1: pad.l, x2: W - pad.r, y1: y(acc), y2: y(acc), stroke: "#e4e4e7" }));
      root.append(svg("text", { x: pad.l - 6, y: y(acc) + 4, "text-anchor": "end", "font-size": 11 }, `${Math.round(acc * 100)}%`));
      const tx = (maxX / 4) * i;
      root.append(svg("text", { x: x(tx), y: H - pad.b + 16, "text-anchor": "middle", "font-size": 11 }, Math.round(tx)));
    }
    root.append(svg("text", { x: (pad.l + W - pad.r) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12 }, "mean tokens per question"));
    root.append(svg("text", { x: 14, y: (pad.t + H - pad.b) / 2, "text-anchor": "middle", "font-size": 12, transform: `rotate(-90 14 ${(pad.t + H - pad.b) / 2})` }, "accuracy (exact match)"));
    const protocols = [...new Set(points.map((p) => p.protocol))].sort();
    const color = (p) => COLORS[protocols.indexOf(p) % COLORS.length];
    for (const p of points) {
      const dot = svg("circle", { cx: x(p.meanTokens), cy: y(p.accuracy), r: p.current ? 7 : 5, fill: color(p.protocol), stroke: p.current ? "#111" : "white", "stroke-width": 2, "data-protocol": p.protocol, "data-batch": p.batchId });
      dot.append(svg("title", {}, `${p.protocol}: ${Math.round(p.accuracy * 100)}% over ${p.graded} graded, ${Math.round(p.meanTokens)} tokens/question (${p.batchId})`));
      root.append(dot);
    }
    protocols.forEach((p, i) => {
      root.append(svg("circle", { cx: W - pad.r + 16, cy: pad.t + 10 + i * 18, r: 5, fill: color(p) }));
      root.append(svg("text", { x: W - pad.r + 26, y: pad.t + 14 + i * 18, "font-size": 12, class: "legend" }, p));
    });
    root.append(svg("text", { x: W - pad.r + 10, y: H - pad.b, "font-size": 10, fill: "#52525b" }, "ringed: this batch"));
    return root;
  }

  async function renderBatch(batchId, v) {
    const head = el("section", { class: "panel batch-head" });
    const statsBox = el("section", { class: "panel stats", id: "batch-stats" });
    const plotBox = el("section", { class: "panel", id: "plot" });
    const tbody = el("tbody");
    const table = el(
      "table",
      { id: "batch-table", class: "list" },
      el("thead", {}, el("tr", {}, ["#", "id", "question", "answer", "gold", "correct", "rounds", "tokens", "status"].map((h) => el("th", { text: h })))),
      tbody,
    );
    append(main, [head, statsBox, plotBox, el("section", { class: "panel" }, el("h3", { text: "Items" }), table)]);
    let resultsText = "";
    let seenFinished = -1;
    let plotted = false;
    const listed = { items: null };

    const download = el("button", {
      type: "button",
      id: "download",
      text: "Download results JSONL",
      on: {
        click: async () => {
          const { text } = await fetchResults(batchId, v.signal);
          const a = el("a", { href: URL.createObjectURL(new Blob([text], { type: "application/x-ndjson" })), download: `${batchId}.jsonl` });
          document.body.append(a);
          a.click();
          a.remove();
        },
      },
    });
    const cancel = el("button", {
      type: "button",
      id: "cancel-batch",
      class: "danger",
      text: "Cancel batch",
      on: {
        click: async () => {
          try {
            await api(`/v1/batches/${enc(batchId)}/cancel`, { method: "POST", signal: v.signal });
          } catch (err) {
            showError(err.message);
          }
        },
      },
    });

    function renderRows(rows) {
      fill(tbody,
        ...rows.map((row) => {
          const res = row.result;
          const hasGold = Array.isArray(row.answers) && row.answers.length > 0;
          const correct = res && hasGold ? isCorrect(res.answer, row.answers) : null;
          const usage = res?.usage || {};
          return el(
            "tr",
            { dataset: { index: row.index, status: row.status } },
            el("td", { text: row.index }),
            el("td", { text: row.id ?? "" }),
            el("td", {}, el("a", { href: `#/debate/${enc(row.job_id)}`, text: short(row.question, 140) })),
            el("td", { class: "answer", text: res ? res.answer ?? "(none)" : "" }),
            el("td", { text: hasGold ? row.answers.join(" | ") : "" }),
            el("td", { class: correct === null ? "" : correct ? "ok" : "bad", text: correct === null ? "—" : correct ? "✓" : "✗" }),
            el("td", { text: res ? res.rounds : "" }),
            el("td", { text: res ? (usage.prompt_tokens || 0) + (usage.completion_tokens || 0) : "" }),
            el("td", {}, statusBadge(row.status)),
          );
        }),
      );
    }

    for (;;) {
      const batch = await api(`/v1/batches/${enc(batchId)}`, { signal: v.signal });
      const finished = (batch.counts.completed || 0) + (batch.counts.failed || 0) + (batch.counts.cancelled || 0);
      fill(head,
        el("h2", {}, "Batch ", el("code", { text: batch.batch_id })),
        el(
          "div",
          { class: "meta" },
          statusBadge(batch.status),
          el("span", { text: `${batch.config.protocol || "madke"} · ${batch.config.agents ?? 2} agents · ≤${batch.config.rounds ?? 3} rounds · created ${fmtTime(batch.created_at)}` }),
          download,
          batch.status === "completed" ? null : cancel,
        ),
        progressBar(batch),
        el("p", { class: "counts", id: "batch-counts", text: `${finished}/${batch.total} finished (${Math.round(batch.progress * 100)}%) · ${STATUS_ORDER.map((s) => `${s} ${batch.counts[s] || 0}`).join(" · ")}` }),
      );
      if (finished !== seenFinished || !resultsText) {
        const fetched = await fetchResults(batchId, v.signal);
        resultsText = fetched.text;
        seenFinished = finished;
        const rows = fetched.rows;
        renderRows(rows);
        const s = batchStats(rows);
        fill(statsBox,
          el("div", {}, el("span", { class: "label", text: "accuracy so far " }), el("strong", { id: "accuracy", text: s.accuracy === null ? "—" : `${Math.round(s.accuracy * 100)}%` }), el("span", { class: "muted", text: s.graded ? ` (${s.correct}/${s.graded} with gold answers, exact match)` : " (no gold answers)" })),
          el("div", {}, el("span", { class: "label", text: "mean tokens so far " }), el("strong", { id: "mean-tokens", text: fmtNum(s.meanTokens, 0) }), el("span", { class: "muted", text: ` over ${s.finished} completed` })),
        );
        if (!plotted || batch.status !== "completed") {
          if (!s.gold) {
            fill(plotBox, el("h3", { text: "Accuracy against tokens" }), el("p", { class: "muted", text: "This batch carries no gold answers, so there is no accuracy to plot." }));
          } else {
            const points = await plotPoints(batch, s, listed, v.signal);
            fill(plotBox, el("h3", { text: "Accuracy against tokens, per protocol (this key's batches with gold answers)" }), points.length ? drawPlot(points) : el("p", { class: "muted", text: "no finished items yet" }));
          }
          plotted = batch.status === "completed";
        }
      }
      if (batch.status === "completed" && finished === seenFinished) return;
      await sleep(1500, v.signal);
      if (v.signal.aborted) return;
    }
  }

  // ----------------------------------------------------------------------------------------- start
  window.addEventListener("hashchange", route);
  renderKeyState();
  route();
  // Ask for a key up front when the server wants one (a 401 opens the key form), not at the first click.
  api("/v1/debates?limit=1").catch(() => {});
})();
