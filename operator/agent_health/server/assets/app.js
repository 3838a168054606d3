// agent-health serve: the pages. Every view reads the JSON API of this server (same origin,
// the session cookie or the local user's access) and renders with textContent only: no value
// from a run is ever parsed as HTML. Live runs follow /api/events (Server-Sent Events; the
// browser resends Last-Event-ID when it reconnects, so nothing is missed).
(function () {
  "use strict";

  const MARK = { passed: "✓", failed: "✗", errored: "!", skipped: "–", flaky: "~" };
  const VIEW = document.getElementById("view");
  const PARAMS = new URLSearchParams(location.search);
  let ME = { role: null, login: false, cluster: false, local: false };

  // ---- helpers --------------------------------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = String(value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  async function api(path, options) {
    const init = Object.assign({ credentials: "same-origin", headers: {} }, options || {});
    if (init.method && init.method !== "GET") {
      init.headers["X-Agent-Health"] = "1";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(init.body || {});
    }
    const answer = await fetch(path, init);
    const data = answer.headers.get("Content-Type", "").includes("json") ? await answer.json() : null;
    if (!answer.ok) {
      const error = new Error((data && data.error) || answer.status + " " + answer.statusText);
      error.status = answer.status;
      throw error;
    }
    return data;
  }

  const pct = (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%");
  const when = (v) => (v ? new Date(v).toISOString().replace("T", " ").slice(0, 16) : "–");
  const cost = (v) => (v === null || v === undefined ? "–" : "$" + v.toFixed(4));
  const secs = (ms) => (ms === null || ms === undefined ? "–" : (ms / 1000).toFixed(1) + " s");
  const short = (uid) => String(uid).slice(-8);
  const operate = () => ME.role === "operate";

  function status(s) {
    return el("span", { class: s, "data-status": s, text: (MARK[s] || "?") + " " + s });
  }

  function card(label, value, id) {
    return el("div", { class: "card" }, el("b", { text: value, id: id || null }), el("span", { class: "muted", text: label }));
  }

  function table(headers, rows, attrs) {
    return el("table", attrs || {},
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.endsWith("#") ? "num" : "", text: h.replace(/#$/, "") })))),
      el("tbody", {}, rows));
  }

  function show(...nodes) {
    VIEW.replaceChildren(...nodes.flat());
  }

  function failed(err) {
    show(el("p", { class: "error", role: "alert", text: err.message }));
  }

  // ---- who is looking -------------------------------------------------------------------

  async function whoAmI() {
    ME = await api("/api/me");
    const who = document.getElementById("who");
    who.replaceChildren(ME.role ? "role: " + ME.role : "");
    if (ME.role && ME.login) {
      who.append(" ", el("button", { type: "button", onclick: async () => {
        await api("/api/session", { method: "DELETE" });
        location.reload();
      } }, "log out"));
    }
  }

  function loginForm() {
    const token = el("input", { type: "password", id: "token", autocomplete: "off", "aria-label": "token" });
    const said = el("p", { class: "error", role: "alert" });
    return el("form", { id: "login", onsubmit: async (event) => {
      event.preventDefault();
      try {
        await api("/api/session", { method: "POST", body: { token: token.value } });
        location.reload();
      } catch (err) { said.textContent = err.message; }
    } }, el("h2", { text: "Log in" }), el("label", {}, "token", token), el("button", { type: "submit" }, "log in"), said);
  }

  // ---- live events ----------------------------------------------------------------------

  function follow(run, after, on) {
    const query = new URLSearchParams();
    if (run) query.set("run", run);
    query.set("after", String(after || 0));
    const source = new EventSource("/api/events?" + query.toString());
    for (const kind of ["run", "started", "result", "ended", "reset"]) {
      source.addEventListener(kind, (event) => on(kind, JSON.parse(event.data), event.lastEventId));
    }
    return source;
  }

  // ---- runs -----------------------------------------------------------------------------

  function runRow(run) {
    const mark = run.trend && run.trend.mark ? (run.trend.mark === "better" ? " ▲" : " ▼") : "";
    const interval = run.pass_rate_interval ? " [" + pct(run.pass_rate_interval.low) + ", " + pct(run.pass_rate_interval.high) + "]" : "";
    const agent = run.agent ? (run.agent.name || run.agent.url || "") : "";
    return el("tr", { "data-run": run.uid },
      el("td", { text: when(run.started_at) }),
      el("td", { text: agent }),
      el("td", { text: pct(run.pass_rate) + interval + mark }),
      el("td", { class: "num" }, el("span", { class: "passed", text: run.passed }), " / ",
        el("span", { class: "failed", text: run.failed }), " / ", el("span", { class: "errored", text: run.errored })),
      el("td", { class: "num", text: cost(run.cost_usd) }),
      el("td", { class: "num", text: secs(run.duration_ms) }),
      el("td", { text: run.git_branch || (run.ci && run.ci.branch) || "" }),
      el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(run.uid), text: short(run.uid) })));
  }

  function liveBoard(board) {
    const list = el("ul", { id: "live-runs" });
    for (const run of board.runs) {
      const c = run.counts;
      list.append(el("li", { "data-live": run.uid },
        run.ended ? "" : el("span", { class: "live-dot", title: "running" }),
        el("a", { href: "/live/" + encodeURIComponent(run.uid), text: (run.agent || run.name || short(run.uid)) }),
        " ", el("span", { class: "muted", text: run.source + (run.phase ? " · " + run.phase : "") }),
        " — " + (c.passed + c.failed + c.errored + c.skipped + c.flaky) + "/" + run.total + " · pass rate " + pct(run.pass_rate),
        run.ended ? " · ended" : ""));
    }
    return list;
  }

  async function runsView() {
    const form = el("form", { class: "filters", id: "filters" });
    for (const name of ["agent", "label", "branch"]) {
      form.append(el("label", {}, name, el("input", { name, value: PARAMS.get(name) || "" })));
    }
    const pick = el("select", { name: "status" }, ["", "green", "failed", "errored", "incomplete"].map(
      (s) => el("option", { value: s, selected: PARAMS.get("status") === s, text: s || "any" })));
    form.append(el("label", {}, "status", pick), el("button", { type: "submit" }, "filter"));
    const query = new URLSearchParams();
    for (const name of ["agent", "label", "branch", "status"]) if (PARAMS.get(name)) query.set(name, PARAMS.get(name));
    const [runs, board] = await Promise.all([api("/api/runs?" + query.toString()), api("/api/live")]);
    const live = el("section", { id: "live" }, el("h2", { text: "Live" }), board.runs.length ? liveBoard(board) : el("p", { class: "muted", text: "No run is live." }));
    if (operate() && ME.local) live.append(startForm());
    if (operate() && ME.cluster) live.append(clusterStartForm());
    show(live, el("h2", { text: "Runs" }), form,
      runs.length ? table(["when (UTC)", "agent", "pass rate", "passed / failed / errored#", "cost#", "duration#", "branch", "run"], runs.map(runRow), { id: "runs" })
        : el("p", { class: "muted", text: "No run in the history matches." }));
    let pending = null;
    follow(null, board.last_event, () => {
      if (pending) return;
      pending = setTimeout(async () => {
        pending = null;
        const fresh = await api("/api/live");
        document.getElementById("live").replaceChildren(el("h2", { text: "Live" }), liveBoard(fresh),
          ...(operate() && ME.local ? [startForm()] : []), ...(operate() && ME.cluster ? [clusterStartForm()] : []));
      }, 250);
    });
  }

  function startForm() {
    const paths = el("input", { name: "paths", placeholder: "tests/ (under the server's root)", "aria-label": "suite paths" });
    const agent = el("input", { name: "agent", placeholder: "agent name or URL", "aria-label": "agent" });
    const said = el("span", { class: "error", role: "alert" });
    return el("form", { id: "start-local", class: "controls", onsubmit: async (event) => {
      event.preventDefault();
      try {
        const started = await api("/api/workers", { method: "POST", body: {
          paths: paths.value.split(/\s+/).filter(Boolean), agent: agent.value || null } });
        location.assign("/live/" + encodeURIComponent(started.run));
      } catch (err) { said.textContent = err.message; }
    } }, el("label", {}, "suite", paths), el("label", {}, "agent", agent), el("button", { type: "submit" }, "start a run"), said);
  }

  function clusterStartForm() {
    const namespace = el("input", { name: "namespace", value: "default", "aria-label": "namespace" });
    const spec = el("input", { name: "runspec", placeholder: "RunSpec", "aria-label": "RunSpec" });
    const parallelism = el("input", { name: "parallelism", type: "number", min: "1", value: "4", "aria-label": "parallelism" });
    const said = el("span", { class: "error", role: "alert" });
    return el("form", { id: "start-cluster", class: "controls", onsubmit: async (event) => {
      event.preventDefault();
      try {
        const made = await api("/api/cluster/runs", { method: "POST", body: {
          namespace: namespace.value, runSpec: spec.value, parallelism: Number(parallelism.value) } });
        location.assign("/live/" + encodeURIComponent(made.uid));
      } catch (err) { said.textContent = err.message; }
    } }, el("label", {}, "namespace", namespace), el("label", {}, "RunSpec", spec), el("label", {}, "parallelism", parallelism),
      el("button", { type: "submit" }, "create an EvaluationRun"), said);
  }

  // ---- one run --------------------------------------------------------------------------

  function resultRow(r) {
    const error = (r.messages && r.messages.length ? r.messages.join(" · ") : r.error) || "";
    return el("tr", { "data-test": r.id, "data-repeat": r.repeat },
      el("td", {}, status(r.status)),
      el("td", {}, el("a", { href: "/tests?id=" + encodeURIComponent(r.id), text: r.title || r.name || r.id })),
      el("td", { class: "num", text: r.repeat }),
      el("td", { class: "num", text: r.score === null || r.score === undefined ? "–" : r.score.toFixed(2) }),
      el("td", { class: "num", text: secs(r.duration_ms) }),
      el("td", { class: "muted", text: (r.cause ? "[" + r.cause + "] " : "") + error }));
  }

  async function runView(uid) {
    let page;
    try {
      page = await api("/api/runs/" + encodeURIComponent(uid));
    } catch (err) {
      if (err.status === 404) {
        try { await api("/api/live/" + encodeURIComponent(uid)); location.replace("/live/" + encodeURIComponent(uid)); return; } catch (_) { /* not live either */ }
      }
      throw err;
    }
    const run = page.run;
    const chosen = PARAMS.get("status") || "";
    const results = await api("/api/runs/" + encodeURIComponent(run.uid) + "/results" + (chosen ? "?status=" + chosen : ""));
    const ev = page.evidence;
    const ledger = ev.ledger_url ? (ev.ledger_verified === true ? "ledger verified" : ev.ledger_verified === false ? "ledger FAILED verification" : "ledger not verified") : "no ledger";
    const checked = el("p", { id: "ledger-check", role: "status" });
    const check = ev.ledger_at_hand ? el("p", {}, el("button", { type: "button", id: "verify-ledger", onclick: async (event) => {
      event.target.disabled = true;
      checked.replaceChildren("verifying " + ev.ledger_url + " …");
      try {
        const found = await api("/api/runs/" + encodeURIComponent(run.uid) + "/ledger/verify", { method: "POST" });
        checked.className = found.ok ? "passed" : "failed";
        checked.replaceChildren(ledgerSaid(found));
      } catch (err) {
        checked.className = "error";
        checked.replaceChildren(err.message);
      } finally { event.target.disabled = false; }
    } }, "verify the ledger now"), checked) : null;
    const filter = el("div", { class: "chips", id: "status-filter" }, ["", "passed", "failed", "errored", "skipped", "flaky"].map(
      (s) => el("a", { class: "chip", href: "?status=" + s, text: s || "all", "aria-current": s === chosen ? "true" : null })));
    const frame = el("div", { id: "inspector-slot" }, el("button", { type: "button", id: "open-inspector", onclick: () => {
      frame.replaceChildren(el("iframe", { class: "inspector", title: "run inspector", src: "/runs/" + encodeURIComponent(run.uid) + "/inspector" }));
    } }, "open the inspector" + (ev.report ? " (its report)" : " (from the history)")));
    show(el("h2", { text: "Run " + run.uid }),
      el("p", { class: "muted", text: [when(run.started_at), run.agent ? run.agent.name || run.agent.url : null, run.git_branch, run.git_commit ? run.git_commit.slice(0, 10) : null, run.source, run.attempt ? "attempt " + run.attempt + " (errored cells requeued)" : null].filter(Boolean).join(" · ") }),
      el("div", { class: "cards" }, card("pass rate", pct(run.pass_rate), "pass-rate"), card("passed", run.passed), card("failed", run.failed),
        card("errored", run.errored), card("cost", cost(run.cost_usd)), card("duration", secs(run.duration_ms)), card("evidence", ledger, "ledger")),
      check,
      el("p", {}, el("a", { href: "/compare?new=" + encodeURIComponent(run.uid) + (run.trend ? "&base=" + encodeURIComponent(run.trend.previous) : ""), text: "compare with another run" })),
      filter, el("p", { class: "muted", text: results.total + " results" }),
      table(["status", "test", "repeat#", "score#", "duration#", "error and failed checks"], results.results.map(resultRow), { id: "results" }),
      frame);
  }

  function ledgerSaid(found) {
    // the check's verdict in one line: what verified, or where it first failed and why
    const counted = found.cells + " cells, " + found.records + " records";
    if (found.ok) {
      const refused = Object.keys(found.refused || {}).length;
      return "verified now: " + counted + (found.sealed ? ", its seal holds" : "") +
        (refused ? "; " + refused + " cells not recorded (named by its seal)" : "");
    }
    const bad = found.first_bad;
    if (!bad) return "FAILED verification: " + counted;
    const where = bad.cell ? "cell " + bad.cell + (bad.line ? " line " + bad.line : "") + (bad.seq !== null ? " (seq " + bad.seq + ")" : "") : "the run file";
    return "FAILED verification at " + where + ": " + bad.reason + ": " + bad.message;
  }

  // ---- a live run -----------------------------------------------------------------------

  async function liveView(uid) {
    const detail = await api("/api/live/" + encodeURIComponent(uid));
    const rows = el("tbody", {});
    const flight = el("ul", { id: "in-flight" });
    const head = el("div", { class: "cards" });
    const note = el("p", { id: "live-state", class: "muted" });
    const controls = el("div", { class: "controls", id: "controls" });
    let state = detail.run;
    const seen = new Map();
    const known = new Map(detail.results.map((r) => [r.id + "\u0000" + r.repeat + "\u0000" + (r.agent || ""), r]));

    const agents = (r) => (r && r.status === "errored" && r.cause === "agent" ? 1 : 0);
    let byAgent = 0;
    for (const r of known.values()) byAgent += agents(r);

    function rate() {
      // as the run's pass rate: errors the agent caused count against it, others are left out
      const decided = state.counts.passed + state.counts.failed + byAgent;
      state.pass_rate = decided ? state.counts.passed / decided : null;
    }

    function paint() {
      const c = state.counts;
      const done = c.passed + c.failed + c.errored + c.skipped + c.flaky;
      head.replaceChildren(card("done", done + " / " + state.total, "done"), card("pass rate", pct(state.pass_rate), "pass-rate"),
        card("passed", c.passed, "passed"), card("failed", c.failed, "failed"), card("errored", c.errored, "errored"),
        ...(state.phase ? [card("phase", state.phase, "phase")] : []));
      flight.replaceChildren(...state.in_flight.map((f) => el("li", { "data-test": f.id, text: f.name + (f.repeat ? " #" + f.repeat : "") + (f.agent ? " [" + f.agent + "]" : "") + (f.since ? " · since " + when(f.since).slice(11) : "") })));
      note.replaceChildren(state.ended ? "ended" + (state.interrupted ? " (interrupted)" : "") + (state.stopped ? ": " + state.stopped : "") : "running");
      if (state.ended && state.source !== "cluster") note.append(" · ", el("a", { href: "/runs/" + encodeURIComponent(uid), text: "its page in the history" }));
      controls.replaceChildren(...liveControls(state));
    }

    function add(result) {
      const key = result.id + "\u0000" + result.repeat + "\u0000" + (result.agent || "");
      const row = resultRow(result);
      const old = seen.get(key);
      if (old) old.replaceWith(row); else rows.prepend(row);
      seen.set(key, row);
    }

    for (const r of detail.results) add(r);
    paint();
    show(el("h2", {}, el("span", { class: "live-dot" }), "Live run " + uid), note, head, controls,
      el("h3", { text: "In flight" }), flight, el("h3", { text: "Results" }),
      el("table", { id: "results" }, el("thead", {}, el("tr", {}, ["status", "test", "repeat", "score", "duration", "error"].map((h) => el("th", { text: h })))), rows));

    follow(uid, detail.last_event, async (kind, data) => {
      if (kind === "reset") { location.reload(); return; }
      if (kind === "result") {
        add(data.result);
        const r = data.result;
        const key = r.id + "\u0000" + r.repeat + "\u0000" + (r.agent || "");
        state.in_flight = state.in_flight.filter((f) => !(f.id === r.id && f.repeat === r.repeat && (f.agent || null) === (r.agent || null)));
        const old = known.get(key);
        if (old) state.counts[old.status] -= 1;
        state.counts[r.status] = (state.counts[r.status] || 0) + 1;
        byAgent += agents(r) - agents(old);
        known.set(key, r);
        rate();
        paint();
      } else if (kind === "started") {
        state.in_flight.push({ id: data.id, name: data.name, repeat: data.repeat, agent: data.agent });
        paint();
      } else if (kind === "run" || kind === "ended") {
        state = data.state; // the server's counts include every result so far
        paint();
      }
    });
  }

  function liveControls(state) {
    const out = [];
    if (!operate() || state.ended) return out;
    const said = el("span", { class: "error", role: "alert" });
    const act = (label, path, body, method) => el("button", { type: "button", "data-action": label, onclick: async () => {
      try { await api(path, { method: method || "POST", body: body || {} }); } catch (err) { said.textContent = err.message; }
    } }, label);
    if (state.source === "worker") out.push(act("cancel", "/api/workers/" + encodeURIComponent(state.uid) + "/cancel"));
    if (state.source === "cluster" && state.namespace && state.name) {
      const base = "/api/cluster/runs/" + encodeURIComponent(state.namespace) + "/" + encodeURIComponent(state.name);
      out.push(act("suspend", base, { suspend: true }, "PATCH"), act("resume", base, { suspend: false }, "PATCH"),
        act("requeue errored", base + "/requeue"), act("cancel", base, {}, "DELETE"));
      const width = el("input", { type: "number", min: "1", "aria-label": "parallelism", value: "" });
      out.push(el("label", {}, "parallelism", width), el("button", { type: "button", "data-action": "parallelism", onclick: async () => {
        try { await api(base, { method: "PATCH", body: { parallelism: Number(width.value) } }); } catch (err) { said.textContent = err.message; }
      } }, "set"));
    }
    out.push(said);
    return out;
  }

  // ---- one test across runs -------------------------------------------------------------

  function bars(values, label) {
    const width = 600, height = 60, max = Math.max(...values.map((v) => v || 0), 1);
    const step = width / Math.max(values.length, 1);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("class", "plot small");
    svg.setAttribute("aria-label", label);
    values.forEach((v, i) => {
      const h = ((v || 0) / max) * (height - 4);
      const bar = document.createElementNS(svg.namespaceURI, "rect");
      for (const [k, x] of Object.entries({ x: i * step + 1, y: height - h, width: Math.max(step - 2, 1), height: h, fill: "#8c959f" })) bar.setAttribute(k, x);
      svg.append(bar);
    });
    return svg;
  }

  async function testView() {
    const id = PARAMS.get("id") || "";
    if (!id) { show(el("p", { class: "muted", text: "Give a test: /tests?id=TEST" })); return; }
    const tests = await api("/api/tests?id=" + encodeURIComponent(id));
    const blocks = tests.map((t) => {
      const strip = el("div", { class: "strip", "data-strip": t.id }, t.outcomes.map((o) =>
        el("a", { href: "/runs/" + encodeURIComponent(o.run), title: when(o.started_at) + " " + o.status, class: o.status }, el("span", { text: MARK[o.status] || "?" }))));
      const parts = [el("h2", { text: t.title }), el("p", { class: "muted", text: t.id + " · " + t.file + ":" + t.line + (t.labels.length ? " · " + t.labels.join(", ") : "") }),
        el("h3", { text: "Status over runs (oldest first)" }), strip,
        el("h3", { text: "Duration" }), bars(t.outcomes.map((o) => o.duration_ms), "durations"),
        el("h3", { text: "Cost" }), bars(t.outcomes.map((o) => o.cost_usd), "cost")];
      if (t.broke) {
        const b = t.broke;
        parts.push(el("section", { id: "break" }, el("h3", { text: "Its latest break" }),
          el("p", {}, "last passed in ", el("a", { href: "/runs/" + encodeURIComponent(b.last_pass.run), text: short(b.last_pass.run) }),
            ", first failed in ", el("a", { href: "/runs/" + encodeURIComponent(b.first_fail.run), text: short(b.first_fail.run) })),
          b.differences.length ? el("ul", {}, b.differences.map((d) => el("li", { text: d.what + ": " + (d.before || "–") + " → " + (d.after || "–") })))
            : el("p", { text: "Nothing recorded changed: the agent answered otherwise." }),
          el("p", { class: "muted", text: b.first_fail.messages.join(" · ") })));
      }
      return el("article", { "data-test": t.id }, parts);
    });
    show(...blocks);
  }

  // ---- flaky ------------------------------------------------------------------------------

  async function flakyView() {
    const found = await api("/api/flaky");
    show(el("h2", { text: "Flaky tests" }), found.length ? table(["test", "agent", "flips#", "failure rate#", "runs#", "last"], found.map((f) =>
      el("tr", { "data-test": f.id }, el("td", {}, el("a", { href: "/tests?id=" + encodeURIComponent(f.id), text: f.title })),
        el("td", { text: f.agent ? f.agent.name || f.agent.url || "" : "" }), el("td", { class: "num", text: f.flips }),
        el("td", { class: "num", text: pct(f.failure_rate) + " [" + pct(f.failure_rate_interval.low) + ", " + pct(f.failure_rate_interval.high) + "]" }),
        el("td", { class: "num", text: f.runs }), el("td", {}, status(f.last_status)))), { id: "flaky" })
      : el("p", { class: "muted", text: "No test flips while nothing changed." }));
  }

  // ---- trends -----------------------------------------------------------------------------

  const COLORS = ["#0969da", "#8250df", "#bf3989", "#1a7f37", "#9a6700", "#cf222e"];

  function plot(runs, value, interval, label, format) {
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    const W = 800, H = 200, pad = 30;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("class", "plot");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    const points = runs.filter((r) => value(r) !== null && value(r) !== undefined);
    const times = points.map((r) => new Date(r.started_at).getTime());
    const t0 = Math.min(...times), t1 = Math.max(...times);
    const max = Math.max(...points.map((r) => (interval && interval(r) ? interval(r).high : value(r))), 1e-9);
    const x = (t) => pad + (t1 === t0 ? (W - 2 * pad) / 2 : ((t - t0) / (t1 - t0)) * (W - 2 * pad));
    const y = (v) => H - pad - (v / max) * (H - 2 * pad);
    const add = (tag, attrs) => { const n = document.createElementNS(svg.namespaceURI, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); svg.append(n); return n; };
    add("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, stroke: "#d0d7de" });
    add("text", { x: 2, y: pad, text: "" }).textContent = format(max);
    add("text", { x: 2, y: H - pad }).textContent = format(0);
    const agents = [...new Set(points.map((r) => (r.agent && (r.agent.name || r.agent.url)) || "?"))];
    agents.forEach((agent, i) => {
      const mine = points.filter((r) => ((r.agent && (r.agent.name || r.agent.url)) || "?") === agent)
        .sort((a, b) => new Date(a.started_at) - new Date(b.started_at));
      const color = COLORS[i % COLORS.length];
      add("polyline", { fill: "none", stroke: color, "stroke-width": 1.5, points: mine.map((r) => x(new Date(r.started_at).getTime()) + "," + y(value(r))).join(" ") });
      for (const r of mine) {
        const cx = x(new Date(r.started_at).getTime());
        if (interval && interval(r)) add("line", { x1: cx, x2: cx, y1: y(interval(r).low), y2: y(interval(r).high), stroke: color, "stroke-opacity": 0.5 });
        const dot = add("circle", { cx, cy: y(value(r)), r: 3, fill: color, "data-run": r.uid });
        const tip = document.createElementNS(svg.namespaceURI, "title");
        tip.textContent = agent + " " + when(r.started_at) + ": " + format(value(r));
        dot.append(tip);
      }
    });
    const legend = el("div", { class: "legend" }, agents.map((a, i) => el("span", { class: "c" + (i % COLORS.length), text: "● " + a })));
    return el("figure", {}, el("figcaption", { text: label }), svg, legend);
  }

  async function trendsView() {
    const agent = PARAMS.get("agent");
    const runs = await api("/api/runs?limit=200" + (agent ? "&agent=" + encodeURIComponent(agent) : ""));
    if (!runs.length) { show(el("p", { class: "muted", text: "No run in the history yet." })); return; }
    show(el("h2", { text: "Trends" }),
      plot(runs, (r) => r.pass_rate, (r) => r.pass_rate_interval, "pass rate (95% interval) by run", pct),
      plot(runs, (r) => r.cost_usd, null, "cost by run", cost),
      plot(runs, (r) => r.tokens, null, "tokens by run", (v) => String(Math.round(v))),
      plot(runs, (r) => r.duration_ms, null, "duration by run", secs));
  }

  // ---- compare ----------------------------------------------------------------------------

  async function compareView() {
    const runs = await api("/api/runs?limit=200");
    const pick = (name) => el("select", { name, id: "pick-" + name, "aria-label": name }, el("option", { value: "", text: "choose a run" }),
      runs.map((r) => el("option", { value: r.uid, selected: PARAMS.get(name) === r.uid, text: when(r.started_at) + " · " + ((r.agent && r.agent.name) || "") + " · " + pct(r.pass_rate) + " · " + short(r.uid) })));
    const form = el("form", { class: "controls", id: "compare-form", method: "get", action: "/compare" },
      el("label", {}, "base", pick("base")), el("label", {}, "new", pick("new")), el("button", { type: "submit" }, "compare"));
    const base = PARAMS.get("base"), fresh = PARAMS.get("new");
    if (!base || !fresh) { show(el("h2", { text: "Compare two runs" }), form); return; }
    const got = await api("/api/compare?base=" + encodeURIComponent(base) + "&new=" + encodeURIComponent(fresh));
    const c = got.comparison;
    const changes = (list, id) => list.length ? table(["test", "repeat#", "base", "new", "error"], list.map((ch) =>
      el("tr", { "data-test": ch.id }, el("td", {}, el("a", { href: "/tests?id=" + encodeURIComponent(ch.id), text: ch.name })), el("td", { class: "num", text: ch.repeat }),
        el("td", {}, status(ch.base)), el("td", {}, status(ch.new)), el("td", { class: "muted", text: ch.error || "" }))), { id })
      : el("p", { class: "muted", id, text: "none" });
    const paired = c.paired && c.paired.pass_rate;
    const delta = (d, f) => f(d.base) + " → " + f(d.new) + (d.delta === null ? "" : " (" + (d.delta > 0 ? "+" : "") + (f === pct ? (100 * d.delta).toFixed(1) + " pts" : f(d.delta)) + ")");
    show(el("h2", { text: "Compare two runs" }), form,
      el("div", { class: "cards" }, card("pass rate", delta(c.pass_rate, pct), "delta-pass-rate"), card("score", delta(c.score, (v) => (v === null ? "–" : v.toFixed(3)))),
        card("cost", delta(c.cost_usd, cost)), card("paired test", paired ? "p = " + paired.p_value.toPrecision(3) + (paired.significant ? " (significant)" : " (not significant)") : "–", "paired")),
      el("p", { class: "muted", text: c.compared + " tests compared" + (got.from_reports ? " from both runs' reports" : " from the history") + (c.regressions.length ? " · regression: " + c.regressions.join("; ") : "") }),
      el("h3", { text: "Newly failing" }), changes(c.newly_failing, "newly-failing"),
      el("h3", { text: "Newly passing" }), changes(c.newly_passing, "newly-passing"),
      el("h3", { text: "Conversations that changed" }), c.conversation_changes.length ? el("ul", { id: "turn-changes" }, c.conversation_changes.map((t) => el("li", { text: JSON.stringify(t) })))
        : el("p", { class: "muted", text: "none" }));
  }

  // ---- routing ------------------------------------------------------------------------------

  async function main() {
    try {
      await whoAmI();
      if (!ME.role) { show(ME.login ? loginForm() : el("p", { class: "error", text: "This server needs a credential (its proxy's header)." })); return; }
      const path = location.pathname;
      const run = path.match(/^\/runs\/([^/]+)$/);
      const live = path.match(/^\/live\/([^/]+)$/);
      if (run) await runView(decodeURIComponent(run[1]));
      else if (live) await liveView(decodeURIComponent(live[1]));
      else if (path === "/tests") await testView();
      else if (path === "/flaky") await flakyView();
      else if (path === "/trends") await trendsView();
      else if (path === "/compare") await compareView();
      else await runsView();
      document.body.dataset.ready = "1";
    } catch (err) {
      failed(err);
      document.body.dataset.ready = "1";
    }
  }

  main();
})();
