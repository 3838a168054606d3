// The agent-health run inspector. Reads the JSON report embedded in the page (version 1 or
// 2) and renders the summary, a searchable list of tests and, for the selected test, its
// prompt, trajectory, signals, judge reasoning, metrics and insights. Every value from the
// report is set as text (never parsed as HTML) and nothing is fetched: the page's
// Content-Security-Policy forbids any network request.
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const LEGEND = DATA.legend || {};
  const REPORT = DATA.report || {};
  const SUMMARY = REPORT.summary || {};
  const TESTS = Array.isArray(REPORT.tests) ? REPORT.tests : [];
  const PROVENANCE = REPORT.provenance || null;
  const VERSION = REPORT.version || 1;
  const K = Math.max(1, SUMMARY.repeats || 1);
  const STATUSES = ["passed", "failed", "errored", "skipped"];
  const MARK = { passed: "✓", failed: "✗", errored: "!", skipped: "–", flaky: "~" };
  const PAGE = 300;

  // ---- small DOM helpers --------------------------------------------------------------

  // Characters that act on a reader instead of being read: controls (but tab and newline),
  // bidirectional overrides and isolates, characters that hide text or break lines. The
  // list of agent_health/engine/visible.py, which the terminal and JUnit use. Every text the
  // page shows goes through visible(): an agent's answer cannot reorder or hide what it says.
  const HIDDEN = "[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\u061c\\u200b\\u200e\\u200f"
    + "\\u202a-\\u202e\\u2028\\u2029\\u2060\\u2066-\\u2069\\ufeff\\ufff9-\\ufffb\\ufffe\\uffff]";
  const HAS_HIDDEN = new RegExp(HIDDEN);
  const EVERY_HIDDEN = new RegExp(HIDDEN, "g");
  const NAMED = { "\r": "\\r" };

  function visible(text) {
    const s = String(text);
    if (!HAS_HIDDEN.test(s)) return s;
    return s.replace(/\r\n/g, "\n").replace(EVERY_HIDDEN, (c) => {
      const code = c.charCodeAt(0);
      return NAMED[c] || (code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0")
        : "\\u" + code.toString(16).padStart(4, "0"));
    });
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (props) {
      for (const [key, value] of Object.entries(props)) {
        if (value === null || value === undefined || value === false) continue;
        if (key === "class") node.className = value;
        else if (key === "text") node.textContent = visible(value);
        else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
        else if (key === "value") node.setAttribute(key, String(value)); // matched, not read
        else node.setAttribute(key, value === true ? "" : visible(value));
      }
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else node.append(child instanceof Node ? child : visible(child));
    }
  }

  function pre(text, cls) {
    return el("pre", { class: cls }, text === null || text === undefined ? "" : String(text));
  }

  function json(value) {
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2);
    } catch (err) {
      return String(value);
    }
  }

  function pct(value) {
    return typeof value === "number" ? Math.round(value * 1000) / 10 + "%" : "n/a";
  }

  function num(value, digits) {
    return typeof value === "number" ? value.toFixed(digits) : "n/a";
  }

  function count(value) {
    return typeof value === "number" ? String(value) : "n/a"; // unknown is not zero
  }

  function money(value) {
    if (typeof value !== "number") return "n/a";
    return "$" + (value >= 0.01 ? value.toFixed(4) : value.toFixed(6));
  }

  function seconds(ms) {
    return typeof ms === "number" ? (ms / 1000).toFixed(2) + " s" : "n/a";
  }

  function repeatLabel(repeat) {
    return K > 1 ? "[" + ((repeat || 0) + 1) + "/" + K + "]" : "";
  }

  function section(title, ...children) {
    return el("section", { class: "part" }, el("h3", { text: title }), children);
  }

  // The chat view of a conversation (chat.js), given the helpers it draws with; function
  // declarations are hoisted, so the ones defined further down are ready here.
  const CHAT = AgentHealthChat({ el, pre, section, seconds, brief, verdict, timeline });

  // ---- the tests, grouped by id (one group per test, one run per repeat) --------------
  // In an agent matrix, one group per (test, agent): its key names the agent too.

  const MATRIX = REPORT.matrix || null;
  const groups = [];
  const byId = new Map();
  for (const run of TESTS) {
    const key = run.agent ? run.agent + ":" + run.id : run.id;
    let group = byId.get(key);
    if (!group) {
      group = { key: key, id: run.id, name: run.name + (run.agent ? " [" + run.agent + "]" : ""),
                file: run.file, line: run.line, agent: run.agent || null,
                labels: run.labels || [], runs: [] };
      byId.set(key, group);
      groups.push(group);
    }
    group.runs.push(run);
  }
  for (const group of groups) {
    group.runs.sort((a, b) => (a.repeat || 0) - (b.repeat || 0));
    const count = (status) => group.runs.filter((r) => r.status === status).length;
    group.counts = Object.fromEntries([...STATUSES, "flaky"].map((s) => [s, count(s)]));
    const c = group.counts;
    group.status = c.failed ? "failed" : c.errored ? "errored"
      : c.flaky ? "flaky" : c.passed ? "passed" : "skipped";
    // flaky: passed only on a retry (--retries), as summary.flaky says; mixed: passed in
    // some repeats and not in others (failed, or errored by the agent), as summary.mixed
    const byAgent = group.runs.filter((r) => r.status === "errored" && r.cause === "agent");
    group.flaky = c.flaky > 0;
    group.mixed = c.passed > 0 && (c.failed > 0 || byAgent.length > 0);
    group.search = null; // built on the first search: loading stays fast
  }

  function searchText(group) {
    if (group.search === null) {
      const parts = [group.id, group.name, group.file, group.agent, ...group.labels];
      for (const run of group.runs) {
        parts.push(run.status, run.error, run.cause, run.skip_reason, run.prompt, run.output,
          run.stdout, run.stderr);
        for (const signal of run.signals || []) parts.push(signal.name, signal.reasoning);
        for (const turn of run.turns || []) parts.push(turn.user, turn.output);
      }
      group.search = parts.filter((p) => typeof p === "string").join("\n").toLowerCase();
    }
    return group.search;
  }

  // ---- state, kept in the URL's fragment so a link opens the same view ----------------

  const state = { q: "", status: "all", label: "", test: null, repeat: null, shown: PAGE };

  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    state.q = params.get("q") || "";
    state.status = params.get("status") || "all";
    state.label = params.get("label") || "";
    state.test = params.get("test");
    const repeat = params.get("repeat");
    state.repeat = repeat === null ? null : Number(repeat);
  }

  function writeHash() {
    const params = new URLSearchParams();
    if (state.q) params.set("q", state.q);
    if (state.status !== "all") params.set("status", state.status);
    if (state.label) params.set("label", state.label);
    if (state.test !== null) params.set("test", state.test);
    if (state.repeat !== null) params.set("repeat", String(state.repeat));
    const hash = params.toString();
    try {
      history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
    } catch (err) {
      // Some viewers refuse history changes on file:// pages; the view still works.
    }
  }

  // ---- the summary --------------------------------------------------------------------

  function card(cls, label, value, definition, interval) {
    return el("div", { class: "card " + cls },
      el("div", { class: "value", text: value }),
      interval ? el("div", { class: "ci", title: ciTitle(interval), text: interval }) : null,
      el("div", { class: "label", text: label }),
      definition ? el("div", { class: "def", text: definition }) : null);
  }

  // A 95% interval as text: "95% CI 21%–94%" (percentages) or "95% CI 0.41–0.77".
  function ci(interval, asPct) {
    if (!interval || typeof interval.low !== "number") return null;
    const show = asPct ? pct : (v) => num(v, 2);
    const level = Math.round((SUMMARY.confidence || 0.95) * 100);
    return level + "% CI " + show(interval.low) + "–" + show(interval.high);
  }

  function ciTitle() {
    return LEGEND.interval || "";
  }

  function passAtCards() {
    const rows = Array.isArray(SUMMARY.pass_at) ? SUMMARY.pass_at : [];
    if (!rows.length) {
      return K > 1 ? [card("at-k", "pass@" + K, pct(SUMMARY.pass_at_k), LEGEND.pass_at_k),
        card("hat-k", "pass^" + K, pct(SUMMARY.pass_hat_k), LEGEND.pass_hat_k)] : [];
    }
    const out = [];
    for (const p of rows) {
      const over = p.tests + " tests with at least " + p.k + " decided repeats";
      out.push(card("at-k", "pass@" + p.k, pct(p.pass_at_k),
        (LEGEND.pass_at_k || "").replace(" k ", " " + p.k + " ") + "; " + over,
        ci(p.pass_at_k_interval, true)));
      out.push(card("hat-k", "pass^" + p.k, pct(p.pass_hat_k),
        (LEGEND.pass_hat_k || "").replace(" k ", " " + p.k + " ") + "; " + over,
        ci(p.pass_hat_k_interval, true)));
    }
    return out;
  }

  function erroredCauses() {
    const causes = SUMMARY.errored_by_cause;
    if (!causes || typeof causes !== "object") return "";
    const parts = Object.entries(causes).filter(([, n]) => n).map(([c, n]) => n + " " + c);
    return parts.length ? "by cause: " + parts.join(", ") : "";
  }

  // What a status card counts: results, one per (test, repeat), not tests (the chips).
  function resultsOf() {
    return "results (of " + String(SUMMARY.total ?? TESTS.length) + ")";
  }

  function judgeOnly() {
    const n = SUMMARY.judge_only;
    return n ? n + " judge only: judge skipped, nothing else checked" : "";
  }

  function titles(list) {
    return list.map((t) => "\u201c" + t + "\u201d").join(", "); // a title, never a word of ours
  }

  function renderSummary() {
    const root = document.getElementById("summary");
    const testsCount = groups.length;
    const cards = el("div", { class: "cards" },
      card("total", "results", String(SUMMARY.total ?? TESTS.length),
        K > 1 ? testsCount + " tests × " + K + " repeats" : testsCount + " tests"),
      STATUSES.map((s) => card(s, s, String(SUMMARY[s] ?? 0),
        [resultsOf(), s === "errored" ? erroredCauses() : s === "skipped" ? judgeOnly() : ""]
          .filter(Boolean).join("; "))),
      SUMMARY.flaky_count ? card("flaky", "flaky", String(SUMMARY.flaky_count),
        "passed only on a retry (--retries); counted as not passed") : null,
      card("rate", "pass rate", pct(SUMMARY.pass_rate), LEGEND.pass_rate,
        ci(SUMMARY.pass_rate_interval, true)),
      card("score", "score", num(SUMMARY.score, 2), LEGEND.score,
        ci(SUMMARY.score_interval, false)),
      passAtCards(),
      card("tokens", "tokens", count(SUMMARY.tokens),
        "input " + count(SUMMARY.input_tokens) + ", output " + count(SUMMARY.output_tokens)
        + (SUMMARY.tokens_unreported ? "; " + SUMMARY.tokens_unreported + " runs reported none"
          : "")),
      card("cost", "cost", money(SUMMARY.cost_usd),
        SUMMARY.unpriced ? SUMMARY.unpriced + " runs unpriced" : null),
      card("duration", "duration", seconds(SUMMARY.duration_ms),
        SUMMARY.interrupted ? "interrupted: " + (SUMMARY.not_run || 0) + " never started" : null),
      budgetCard());
    root.replaceChildren(cards);  // the summary is built once, at load
    const budget = SUMMARY.budget;
    if (budget && budget.exhausted) {
      root.append(el("div", { class: "budget-stop", role: "status" },
        el("strong", { text: "Stopped by the budget: " }), budget.reason || budget.exhausted,
        " — " + budget.skipped + " tests skipped (reason budget)"));
    }
    if (PROVENANCE && PROVENANCE.replay) {
      root.prepend(el("div", { class: "replayed-banner", role: "note" },
        el("strong", { text: "Replayed" }),
        " from " + PROVENANCE.replay + ": every agent.run() was answered from the recording;"
        + " the agent was not called."
        + (PROVENANCE.replay_verified === false
          ? " The recording is unverified: no ledger key checked it, so its records could"
            + " have been edited." : "")));
    }
    const loadErrors = SUMMARY.load_errors || [];
    if (loadErrors.length) {
      root.append(el("div", { class: "load-errors", role: "alert" },
        el("strong", { text: loadErrors.length + " load error" + (loadErrors.length > 1 ? "s" : "") }),
        el("ul", null, loadErrors.map((e) => el("li", null, pre(e))))));
    }
    if ((SUMMARY.flaky || []).length) {
      root.append(el("p", { class: "flaky-tests" },
        el("span", { class: "flaky", text: "flaky" }), " (passed only on a retry): ",
        titles(SUMMARY.flaky)));
    }
    if ((SUMMARY.mixed || []).length) {
      root.append(el("p", { class: "mixed-tests" },
        el("span", { class: "mixed", text: "mixed" }),
        " (passed in some repeats and not in others): ", titles(SUMMARY.mixed)));
    }
    append(root, [rollup(), matrixTable(), labelTable(), provenanceDetails()]);
    document.getElementById("provenance-line").textContent = provenanceLine();
  }

  // The run-level insights rollup: the model's summary (or the deterministic grouping, and
  // why the model's was not used), recommendations with the tests they apply to, and the
  // patterns the signals show across tests.
  function rollup() {
    const found = SUMMARY.insights;
    const recs = found ? found.recommendations || [] : SUMMARY.recommendations || [];
    const patterns = found ? found.patterns || [] : [];
    if (!recs.length && !patterns.length && !(found && found.summary)) return null;
    const how = found && found.source === "llm" ? "synthesised by the judge model"
      : "grouped by wording (no judge model)";
    const items = recs.map((r) => {
      const tests = Array.isArray(r.tests) ? r.tests : null;
      const n = tests ? tests.length : r.tests;
      return el("li", { title: tests ? tests.join("\n") : "" },
        el("strong", { text: n + (n === 1 ? " test: " : " tests: ") }), r.text);
    });
    return el("div", { class: "rollup" },
      el("h2", { text: "Insights across the suite" }),
      found ? el("p", { class: "rollup-source", text: how }) : null,
      found && found.summary ? el("p", { class: "rollup-summary", text: found.summary }) : null,
      found && found.error ? el("p", { class: "rollup-error", role: "note", text: found.error })
        : null,
      items.length ? el("h3", { text: "Recommendations" }) : null,
      items.length ? el("ul", { class: "recommendations" }, items) : null,
      patterns.length ? el("h3", { text: "Patterns" }) : null,
      patterns.length ? el("ul", { class: "patterns" }, patterns.map((p) => el("li", { text: p })))
        : null);
  }

  // Spend so far against each limit of the run's budget (--max-cost/--max-tokens/--max-duration
  // or spec.budget); an estimate for tests whose spend is unknown is marked with "~".
  function budgetCard() {
    const budget = SUMMARY.budget;
    if (!budget) return null;
    const spent = budget.spent || {};
    const limits = budget.limits || {};
    const parts = [];
    const estimated = (value, unknown, shown) => value === null || value === undefined
      ? "unknown (" + unknown + " tests reported no usage)"
      : (unknown ? "~" + shown + " (" + unknown + " estimated)" : shown);
    if (limits.max_tokens != null) parts.push(estimated(spent.tokens_estimated,
      spent.tokens_unknown, count(spent.tokens_estimated)) + " of " + count(limits.max_tokens)
      + " tokens");
    if (limits.max_cost_usd != null) parts.push(estimated(spent.cost_usd_estimated,
      spent.cost_unknown, money(spent.cost_usd_estimated)) + " of " + money(limits.max_cost_usd));
    if (limits.max_duration_s != null) parts.push(num(spent.duration_s, 1) + " of "
      + limits.max_duration_s + " s");
    return card("budget" + (budget.exhausted ? " exhausted" : ""), "budget",
      budget.exhausted ? "stopped" : "within",
      parts.join(", ") + "; agent " + count(spent.agent_tokens) + " tokens "
      + money(spent.agent_cost_usd) + ", judge " + count(spent.judge_tokens) + " tokens "
      + money(spent.judge_cost_usd));
  }

  // An agent matrix (--agent a --agent b, or spec.agents): every test with each agent's
  // outcome side by side, each agent's totals, and each pair compared (paired by test id).
  function matrixTable() {
    if (!MATRIX || !Array.isArray(MATRIX.agents)) return null;
    const agents = MATRIX.agents;
    const side = (s) => {
      if (!s) return el("td", { class: "muted", text: "–" });
      const decided = s.passed + s.failed + (s.errored_by_agent || 0);
      const ok = decided > 0 && s.passed === decided;
      return el("td", { class: decided ? (ok ? "passed" : "failed") : "muted",
        text: decided ? (ok ? "✓ " : "✗ ") + s.passed + "/" + decided
          + (typeof s.score === "number" ? " · " + s.score.toFixed(2) : "") : "n/a" });
    };
    const totals = agents.map((a) => {
      const s = (MATRIX.summaries || {})[a] || {};
      const ci = (i, fmt) => i ? " [" + fmt(i.low) + "–" + fmt(i.high) + "]" : "";
      return el("td", { text: pct(s.pass_rate) + ci(s.pass_rate_interval, pct) + " · "
        + num(s.score, 2) + ci(s.score_interval, (v) => num(v, 2)) });
    });
    const pairs = (MATRIX.pairs || []).map((p) => el("li", null,
      el("strong", { text: p.base + " → " + p.new + ": " }),
      "pass rate " + (typeof p.pass_rate_delta === "number"
        ? (p.pass_rate_delta >= 0 ? "+" : "") + (p.pass_rate_delta * 100).toFixed(1) + " pts" : "n/a")
      + " over " + p.tests + " tests (" + (p.worse || []).length + " worse, "
      + (p.better || []).length + " better), score "
      + (typeof p.score_delta === "number" ? (p.score_delta >= 0 ? "+" : "")
        + p.score_delta.toFixed(2) : "n/a") + pairedText(p.paired)));
    return el("div", { class: "matrix" }, el("h2", { text: "Agents side by side" }),
      el("table", { class: "signals matrix-table" },
        el("thead", null, el("tr", null, el("th", { text: "test" }),
          agents.map((a) => el("th", { text: a })))),
        el("tbody", null, (MATRIX.tests || []).map((t) => el("tr", null,
          el("td", { text: t.name }), agents.map((a) => side((t.agents || {})[a])))),
          el("tr", { class: "totals" }, el("td", { text: "pass rate · score" }), totals))),
      pairs.length ? el("ul", { class: "pairs" }, pairs) : null);
  }

  function pairedText(paired) {
    if (!paired) return "";
    const parts = [];
    for (const metric of ["pass_rate", "score"]) {
      const t = paired[metric];
      if (!t) continue;
      const ci = t.interval ? ", CI [" + num(t.interval.low, 3) + ", " + num(t.interval.high, 3)
        + "]" : "";
      parts.push(metric.replace("_", " ") + " " + (t.method || "paired test") + " p="
        + num(t.p_value, 3) + ci + ": "
        + (t.significant ? "significant" : "not distinguishable from noise"));
    }
    return parts.length ? "; " + parts.join("; ") : "";
  }

  function labelTable() {
    const labels = Object.entries(SUMMARY.labels || {});
    if (!labels.length) return null;
    const head = ["label", "passed", "failed", "errored", "skipped", "pass rate", "score",
      "scored"];
    return el("details", { class: "by-label" }, el("summary", { text: "by label" }),
      el("p", { class: "muted", text: "score: the mean over the scored results only (scored);"
        + " errored and skipped tests have no score." }),
      el("table", { class: "signals" },
        el("thead", null, el("tr", null, head.map((h) => el("th", { text: h })))),
        el("tbody", null, labels.map(([name, s]) => el("tr", null,
          el("td", { text: name }), el("td", { text: s.passed }), el("td", { text: s.failed }),
          el("td", { text: s.errored }), el("td", { text: s.skipped }),
          el("td", { text: withCi(pct(s.pass_rate), ci(s.pass_rate_interval, true)) }),
          el("td", { text: withCi(num(s.score, 2), ci(s.score_interval, false)) }),
          el("td", { text: typeof s.scored === "number" ? s.scored + "/" + (s.passed + s.failed
            + s.errored + s.skipped + (s.flaky || 0)) : "n/a" }))))));
  }

  function withCi(value, interval) {
    return interval ? value + " (" + interval + ")" : value;
  }

  function provenanceLine() {
    if (!PROVENANCE) return VERSION < 2 ? "JSON report version " + VERSION : "";
    const p = PROVENANCE;
    const parts = [];
    const agentName = (a) => (a.name || a.url || a.image || "?")
      + (a.connector ? " (" + a.connector + ")" : "");
    if ((p.agents || []).length > 1) parts.push("agents " + p.agents.map(agentName).join(", "));
    else if (p.agent) parts.push("agent " + agentName(p.agent));
    if (p.judge) parts.push(judgeText(p.judge));
    if (p.suite && p.suite.git_commit) parts.push("commit " + p.suite.git_commit.slice(0, 12)
      + (p.suite.git_dirty ? " (dirty)" : ""));
    if (p.replay) parts.push("replayed from " + p.replay);
    if (p.started_at) parts.push(p.started_at.replace("T", " ").slice(0, 19));
    if (p.agent_health_version) parts.push("agent-health " + p.agent_health_version);
    return parts.join(" · ");
  }

  function judgeText(judge) {
    if (judge.skipped) return "judge skipped";
    const name = [judge.provider, judge.model].filter(Boolean).join("/");
    return name ? "judge " + name : "no judge configured";
  }

  function provenanceDetails() {
    if (!PROVENANCE) return null;
    const rows = [];
    const add = (name, value) => {
      if (value === null || value === undefined || value === "") return;
      rows.push(el("dt", { text: name }), el("dd", { class: "mono",
        text: typeof value === "object" ? JSON.stringify(value) : String(value) }));
    };
    const p = PROVENANCE;
    const a = p.agent || {};
    add("agent", a.name); add("connector", a.connector); add("agent URL", a.url);
    add("agent command", a.command ? a.command.join(" ") : null); add("agent image", a.image);
    if (p.judge) add("judge", judgeText(p.judge));
    if (p.suite) {
      add("suite", (p.suite.paths || []).join(" "));
      add("git commit", p.suite.git_commit);
      add("git dirty", p.suite.git_dirty === null ? null : String(p.suite.git_dirty));
    }
    add("config", p.config_file); add("config hash", p.config_hash);
    add("ledger", p.ledger);
    add("replayed from", p.replay);
    add("started", p.started_at); add("ended", p.ended_at);
    add("agent-health", p.agent_health_version); add("python", p.python_version);
    add("command line", (p.command_line || []).join(" "));
    return el("details", { class: "provenance" }, el("summary", { text: "what ran" }),
      el("dl", null, rows));
  }

  // ---- the list -----------------------------------------------------------------------

  function matches(group, q) {
    if (state.status === "flaky" ? !group.flaky : state.status === "mixed" ? !group.mixed
      : state.status !== "all" && !group.counts[state.status]) return false;
    if (state.label && !group.labels.includes(state.label)) return false;
    return !q || searchText(group).includes(q);
  }

  function renderFilters() {
    const box = document.getElementById("status-filters");
    const counts = { all: groups.length, flaky: groups.filter((g) => g.flaky).length,
      mixed: groups.filter((g) => g.mixed).length };
    for (const s of STATUSES) counts[s] = groups.filter((g) => g.counts[s]).length;
    // flaky and mixed are offered when there are some: the chips and the summary agree
    const kinds = ["all", ...STATUSES, ...["flaky", "mixed"].filter((k) => counts[k])];
    // The chips count tests (a test with a failed repeat is one failed test); the cards
    // above count results (test × repeat): each says which it counts.
    box.replaceChildren(el("span", { class: "chips-head", text: "tests:" }),
      ...kinds.map((kind) => el("button", {
        type: "button", "data-status": kind, "aria-pressed": String(state.status === kind),
        title: chipTitle(kind, counts[kind]),
        onclick: () => { state.status = kind; state.shown = PAGE; update(); },
      }, kind + " " + counts[kind])));
    const select = document.getElementById("label-filter");
    const labels = [...new Set(groups.flatMap((g) => g.labels))].sort();
    select.replaceChildren(el("option", { value: "", text: "all labels" }),
      ...labels.map((l) => el("option", { value: l, text: l })));
    select.value = state.label;
    select.hidden = labels.length === 0;
  }

  function chipTitle(kind, n) {
    const tests = n === 1 ? "1 test" : n + " tests";
    if (kind === "all") return "all " + tests;
    if (kind === "mixed") return tests + " that passed in some repeats and not in others";
    if (kind === "flaky") return tests + " that passed only on a retry";
    return tests + (K > 1 ? " with at least one " + kind + " repeat" : " " + kind)
      + " (the card above counts results)";
  }

  function row(group) {
    const selected = state.test === group.key;
    const decided = group.counts.passed + group.counts.failed;
    const right = group.runs.length > 1
      ? group.counts.passed + "/" + group.runs.length + " passed"
      : (typeof group.runs[0].score === "number" ? "score " + group.runs[0].score.toFixed(2) : "");
    return el("li", {
      class: "test-row", role: "option", tabindex: "0", "data-id": group.key,
      "aria-selected": String(selected), title: group.id,
      onclick: () => select(group.key, null),
      onkeydown: (event) => { if (event.key === "Enter") select(group.key, null); },
    },
      el("span", { class: "mark " + group.status, text: MARK[group.status],
        "aria-label": group.status }),
      el("span", { class: "title", text: group.name }),
      el("span", { class: "right", text: right, title: decided ? "" : "no decided repeat" }),
      el("span", { class: "sub" },
        el("span", { text: group.file + (group.line ? ":" + group.line : "") }),
        group.labels.map((l) => el("span", { class: "tag", text: l })),
        group.runs.length > 1 ? el("span", { class: "dots" }, group.runs.map((r) =>
          el("span", { class: "dot " + r.status, title: repeatLabel(r.repeat) + " " + r.status })))
          : null,
        group.flaky ? el("span", { class: "flaky", text: "flaky" }) : null,
        group.mixed ? el("span", { class: "mixed", text: "mixed" }) : null,
        (group.runs[0].turns || []).length ? el("span", { class: "tag turns",
          text: CHAT.summary(group.runs[0]) }) : null,
        group.runs.some((r) => r.replayed) ? el("span", { class: "replayed",
          text: "replayed" }) : null));
  }

  function renderList() {
    const q = state.q.trim().toLowerCase();
    const found = groups.filter((g) => matches(g, q));
    const list = document.getElementById("test-list");
    list.replaceChildren(...found.slice(0, state.shown).map(row));
    document.getElementById("list-count").textContent =
      found.length === groups.length ? groups.length + " tests"
        : found.length + " of " + groups.length + " tests";
    const more = document.getElementById("show-more");
    const left = found.length - state.shown;
    more.hidden = left <= 0;
    more.textContent = "show " + Math.min(PAGE, left) + " more (" + left + " not shown)";
    for (const button of document.querySelectorAll("#status-filters button")) {
      button.setAttribute("aria-pressed", String(button.dataset.status === state.status));
    }
  }

  // ---- the inspector ------------------------------------------------------------------

  function select(id, repeat) {
    state.test = id;
    state.repeat = repeat;
    update();
    document.getElementById("inspector").focus({ preventScroll: true });
  }

  function chosenRun(group) {
    if (state.repeat !== null) {
      const found = group.runs.find((r) => (r.repeat || 0) === state.repeat);
      if (found) return found;
    }
    return group.runs.find((r) => r.status === "failed" || r.status === "errored") || group.runs[0];
  }

  function renderInspector() {
    const root = document.getElementById("inspector");
    const group = state.test === null ? null : byId.get(state.test);
    if (!group) {
      root.replaceChildren(el("p", { class: "muted",
        text: state.test === null ? "Select a test to see its prompt, trajectory, signals, "
          + "judge reasoning and insights." : "No test " + state.test + " in this report." }));
      return;
    }
    const run = chosenRun(group);
    root.replaceChildren();
    append(root, [
      el("div", { class: "insp-head" },
        el("h2", { text: group.name }),
        el("span", { class: "status " + run.status,
          text: MARK[run.status] + " " + run.status + (run.cause ? " (" + run.cause + ")" : "") }),
        group.flaky ? el("span", { class: "flaky", text: "flaky: passed on a retry"
          + (group.runs.length > 1 ? " in " + group.counts.flaky + "/" + group.runs.length : "")
        }) : null,
        group.mixed ? el("span", { class: "mixed", text: "mixed: " + group.counts.passed + "/"
          + group.runs.length + " passed" }) : null,
        run.replayed ? el("span", { class: "replayed", title: "agent.run() was answered "
          + "from the recording (--replay)", text: "replayed" }) : null),
      el("div", { class: "muted mono", text: group.id }),
      group.runs.length > 1 ? el("div", { class: "repeat-tabs", role: "tablist" },
        group.runs.map((r) => el("button", {
          type: "button", role: "tab", "aria-pressed": String(r === run),
          "data-repeat": String(r.repeat || 0),
          onclick: () => select(group.key, r.repeat || 0),
        }, repeatLabel(r.repeat) + " " + MARK[r.status]))) : null,
      facts(run),
      problem(run),
      tries(run),
      endedAcross(group),
      CHAT.view(run),
      run.truncated && run.truncated.length ? el("p", { class: "truncated",
        text: "cut to fit the report: " + run.truncated.join(", ")
          + " (the ledger cell has everything)" }) : null,
      signals(run),
      judges(run),
      insightsPart(run),
      section("Prompt", run.prompt ? pre(run.prompt) : el("p", { class: "muted",
        text: "No prompt was sent (the test did not run the agent)." })),
      context(run),
      caseFile(run),
      output(run),
      printed(run),
      trajectory(run),
      mcpCalls(run),
      metricsPart(run)]);
  }

  // How the repeats of a conversation ended (summary.per_test[id].ended), when it repeated.
  function endedAcross(group) {
    const stats = (SUMMARY.per_test || {})[group.agent ? group.key : group.id];
    const ended = stats && stats.ended ? Object.entries(stats.ended) : [];
    if (!ended.length || group.runs.length < 2) return null;
    return el("p", { class: "ended-across" }, el("strong", { text: "Over the repeats: " }),
      ended.map(([reason, n]) => reason + " " + n + "/" + group.runs.length).join(", "));
  }

  function facts(run) {
    const m = run.metrics || {};
    const items = [
      run.agent ? "agent " + run.agent : null,
      repeatLabel(run.repeat),
      "score " + num(run.score, 2),
      "time " + seconds(run.duration_ms),
      typeof m.total_tokens === "number" ? m.total_tokens + " tokens" : null,
      typeof m.cost_usd === "number" ? money(m.cost_usd) : null,
      "run " + run.run_id,
      run.ledger_cell ? "ledger cell " + run.ledger_cell : null,
    ];
    return el("div", { class: "facts" }, items.filter(Boolean).map((t) => el("span", { text: t })));
  }

  function problem(run) {
    if (run.status === "errored") {
      return el("div", { class: "error-box", role: "alert" },
        el("strong", { text: "errored" + (run.cause ? " — cause: " + run.cause : "") }),
        pre(run.error || "(no message)"));
    }
    if (run.status === "skipped") {
      return el("div", { class: "error-box" }, el("strong", { text: "skipped" }),
        run.skip_reason ? pre(run.skip_reason) : null);
    }
    if (run.status === "failed") {
      const failing = (run.signals || []).filter((s) => s.role === "gate" && s.passed === false);
      return el("div", { class: "error-box failed", role: "alert" },
        el("strong", { text: failing.length === 1 ? "failed: 1 gate" : failing.length
          ? "failed: " + failing.length + " gates" : "failed" }),
        el("ul", { class: "gates" }, failing.map((s) => el("li", null,
          el("code", { text: s.name }),
          s.location ? el("span", { class: "muted", text: " " + s.location }) : null,
          CHAT.turnOf(s) !== null ? el("span", { class: "muted", text: " · turn "
            + CHAT.turnOf(s) }) : null,
          el("div", { class: "reasoning", text: s.reasoning || brief(s.evidence) })))),
        // What went wrong after the failed checks (the body raised, the agent failed): the
        // test stays failed, and this is shown under its checks.
        run.error ? el("div", { class: "muted", text: "then:" }) : null,
        run.error ? pre(run.error) : null);
    }
    return null;
  }

  function tries(run) {
    const all = run.attempts || [];
    if (!all.length) return null;
    return section("Tries (" + all.length + ", --retries)", el("ol", null, all.map((a) =>
      el("li", null, el("span", { class: "status " + a.status, text: MARK[a.status] + " "
        + a.status + (a.cause ? " (" + a.cause + ")" : "") }),
        a.reason ? el("span", { class: "muted", text: " — " + a.reason }) : null,
        el("span", { class: "muted", text: " " + seconds(a.duration_ms) })))));
  }

  function printed(run) {
    if (!run.stdout && !run.stderr) return null;
    return section("Printed by the body",
      run.stdout ? el("div", null, el("div", { class: "muted", text: "stdout" }), pre(run.stdout))
        : null,
      run.stderr ? el("div", null, el("div", { class: "muted", text: "stderr" }), pre(run.stderr))
        : null);
  }

  function brief(evidence) {
    if (!evidence || typeof evidence !== "object") return "";
    if ("expected" in evidence && "actual" in evidence) {
      return "expected " + JSON.stringify(evidence.expected) + ", got "
        + JSON.stringify(evidence.actual);
    }
    return JSON.stringify(evidence);
  }

  // A case file's test: what its case says beyond the test (id, expectedPPL, versions, ...).
  function caseFile(run) {
    const kept = run.case && typeof run.case === "object" ? Object.entries(run.case) : [];
    if (!kept.length) return null;
    return section("Case file", kept.map(([key, value]) =>
      el("div", null, el("div", { class: "muted", text: key }), pre(json(value)))));
  }

  function context(run) {
    const items = run.context || [];
    if (!items.length) return null;
    return section("Context", items.map((c) =>
      el("div", null, el("div", { class: "muted", text: c.description }), pre(c.value))));
  }

  // Why a run has no output (or no steps) to show: an old report, a test that never called
  // the agent, or an agent that was called and did not answer (timed out, errored). Under
  // the output, a timed-out agent's `partial`: what it had sent before the timeout.
  function notRecorded(run, withReceived) {
    if (VERSION < 2) return el("p", { class: "muted",
      text: "Not in this report: JSON report version " + VERSION + " does not record it." });
    if (!run.prompt) return el("p", { class: "muted", text: "The agent did not run in this test." });
    const timedOut = Boolean(run.partial)
      || /did not (answer|finish) within|timed out|no complete answer/i.test(run.error || "");
    return el("div", { class: "no-reply" },
      el("strong", { text: timedOut ? "Timed out: the agent was called and sent no complete "
        + "answer in time." : "No answer: the agent was called and its call failed." }),
      run.error ? el("div", { class: "muted", text: "What agent-health received:" }) : null,
      run.error ? pre(run.error) : null,
      withReceived ? received(run.partial) : null,
      el("p", { class: "muted", text: "What the agent was sent is under Prompt and Context"
        + (run.ledger_cell ? "; every exchange is recorded in ledger cell " + run.ledger_cell
          : "") + "." }));
  }

  // As agent_health/engine/reports/entries.py's received() words it for the terminal and JUnit.
  function receivedHeading(p) {
    const size = (Number(p.bytes) || 0).toLocaleString("en-US");
    const kept = p.truncated ? " (the first 64 KiB kept)" : "";
    if (p.source === "stdout") {
      return "Before the timeout the command had printed " + size + " bytes on stdout" + kept;
    }
    if (p.source === "events") {
      const calls = (Array.isArray(p.trajectory) ? p.trajectory : [])
        .filter((s) => s && s.type === "tool_call").map((s) => s.tool_name || "?");
      return "Before the timeout the agent had sent "
        + (Number(p.events) || 0).toLocaleString("en-US") + " AG-UI events, " + size + " bytes"
        + (calls.length ? "; tool calls: " + calls.join(", ") : "; no tool calls") + kept;
    }
    if (!Number(p.bytes)) return "Before the timeout the agent had sent nothing";
    return "Before the timeout the agent had sent " + size + " bytes of its answer" + kept;
  }

  function received(p) {
    if (!p || typeof p !== "object") return null;
    return el("div", { class: "received" },
      el("div", { class: "muted", text: receivedHeading(p) + (p.text ? ":" : ".") }),
      p.text ? pre(p.text) : null);
  }

  function output(run) {
    return section("Output", typeof run.output === "string" ? pre(run.output)
      : notRecorded(run, true));
  }

  function trajectory(run) {
    const steps = run.trajectory;
    if (!Array.isArray(steps)) return section("Trajectory", notRecorded(run));
    const sofar = run.partial && Array.isArray(run.partial.trajectory) ? run.partial.trajectory
      : [];
    if (!steps.length && sofar.length) {
      return section("Trajectory so far (" + sofar.length + " steps, before the timeout)",
        timeline(sofar));
    }
    if (!steps.length) return section("Trajectory", typeof run.output === "string"
      ? el("p", { class: "muted", text: "The agent reported no steps." }) : notRecorded(run));
    return section("Trajectory (" + steps.length + " steps)", timeline(steps));
  }

  // The MCP calls the gateway read (run.mcp_calls): each with its server, whatever the
  // agent's own trajectory says of it.
  function mcpCalls(run) {
    const calls = Array.isArray(run.mcp_calls) ? run.mcp_calls : [];
    if (!calls.length) return null;
    const head = ["#", "server", "call", "tool", "arguments", "answer"];
    return section("MCP calls, as the gateway read them (" + calls.length + ")",
      el("table", { class: "signals mcp-calls" },
        el("thead", null, el("tr", null, head.map((h) => el("th", { text: h })))),
        el("tbody", null, calls.map((c, i) => el("tr", { class: "mcp-call" },
          el("td", { text: i + 1 }),
          el("td", null, el("code", { text: String(c.server || "") })),
          el("td", { class: "mono", text: String(c.method || "") }),
          el("td", null, c.name ? el("code", { text: String(c.name) }) : null),
          el("td", { class: "detail" }, c.arguments ? pre(json(c.arguments)) : null),
          el("td", null, c.is_error === true ? el("span", { class: "status failed",
            text: "isError" }) : c.error ? el("span", { class: "status failed",
            text: "error " + (c.error.code !== undefined ? c.error.code : "") })
            : c.problem ? null : el("span", { class: "status passed", text: "ok" }),
          c.error && c.error.message ? el("div", { class: "muted", text: c.error.message })
            : null,
          c.problem ? el("div", { class: "muted", text: c.problem }) : null))))));
  }

  function timeline(steps) {
    return el("ol", { class: "timeline" }, steps.map((step, i) => {
      const failed = step.status === "error";
      return el("li", { class: "step " + step.type + (failed ? " error" : "") },
        el("div", { class: "step-head" },
          el("span", { class: "muted", text: "#" + (i + 1) }),
          typeof step.turn === "number" ? el("span", { class: "turn-mark",
            text: "turn " + step.turn }) : null,
          el("span", { class: "step-type", text: String(step.type).replace("_", " ") }),
          step.tool_name ? el("code", { text: step.tool_name }) : null,
          typeof step.server === "string" ? el("span", { class: "muted mono",
            text: "@ " + step.server }) : null,
          step.source === "gateway" ? el("span", { class: "turn-mark",
            text: "seen by the gateway" }) : null,
          failed ? el("span", { class: "status failed", text: "error" }) : null,
          typeof step.latency_ms === "number"
            ? el("span", { class: "muted", text: step.latency_ms.toFixed(0) + " ms" }) : null),
        step.content ? pre(step.content) : null,
        step.tool_args && Object.keys(step.tool_args).length
          ? [el("div", { class: "muted", text: "arguments" }), pre(json(step.tool_args))] : null,
        step.tool_output !== null && step.tool_output !== undefined
          ? [el("div", { class: "muted", text: "result" }), pre(json(step.tool_output))] : null);
    }));
  }

  function verdict(signal) {
    if (signal.passed === true) return el("span", { class: "status passed", text: "✓ pass" });
    if (signal.passed === false) return el("span", { class: "status failed", text: "✗ fail" });
    return el("span", { class: "status skipped", text: signal.error ? "! error" : "– skip" });
  }

  function signals(run) {
    const body = (run.signals || []).filter((s) => s.kind !== "metric");
    if (!body.length) return section("Signals", el("p", { class: "muted",
      text: "The test recorded no checks." }));
    const head = ["#", "result", "role", "kind", "check", "score", "evidence or reasoning"];
    return section("Signals (in body order)", el("table", { class: "signals" },
      el("thead", null, el("tr", null, head.map((h) => el("th", { text: h })))),
      el("tbody", null, body.map((s, i) => el("tr", { class: "signal kind-" + s.kind },
        el("td", { text: i + 1 }),
        el("td", null, verdict(s)),
        el("td", { text: s.role }),
        el("td", { text: s.kind }),
        el("td", null, el("div", { text: s.name }),
          s.location ? el("div", { class: "muted mono", text: s.location }) : null),
        el("td", { text: typeof s.score === "number"
          ? s.score.toFixed(2) + (s.weight && s.weight !== 1 ? " ×" + s.weight : "") : "" }),
        el("td", { class: "detail" },
          s.error ? pre(s.error) : null,
          s.reasoning ? el("div", { class: "reasoning", text: s.reasoning }) : null,
          s.evidence && !s.reasoning ? el("div", { class: "mono", text: brief(s.evidence) })
            : null))))));
  }

  function judges(run) {
    const found = (run.signals || []).filter((s) => s.kind === "judge");
    if (!found.length) return null;
    return section("Judge verdicts", found.map((s) => el("div", { class: "verdict-card" },
      el("div", { class: "step-head" }, verdict(s), el("strong", { text: s.name }),
        el("span", { class: "muted", text: s.role
          + (typeof s.score === "number" ? " · score " + s.score.toFixed(2) : "")
          + (s.evidence && s.evidence.model ? " · " + s.evidence.model : "")
          + (s.evidence && s.evidence.cached ? " · cached" : "") })),
      s.error ? pre(s.error) : null,
      el("p", { class: "reasoning", text: s.reasoning || "(no reasoning given)" }))));
  }

  function metricsPart(run) {
    const m = run.metrics || {};
    const keys = Object.keys(m);
    if (!keys.length) return null;
    return section("Metrics", el("div", { class: "metrics" }, keys.map((key) => [
      el("span", { class: "muted", text: key }),
      el("span", { class: "mono", text: typeof m[key] === "object" ? JSON.stringify(m[key])
        : String(m[key]) })])));
  }

  function insightsPart(run) {
    const found = run.insights;
    if (!found) return null;
    if (found.error) return section("Insights", el("div", { class: "error-box" },
      el("strong", { text: "insights error" }), pre(found.error)));
    return section("Insights",
      found.summary ? el("p", { text: found.summary }) : null,
      found.why ? el("p", null, el("strong", { text: "Why: " }), found.why) : null,
      (found.recommendations || []).length ? el("ul", null,
        found.recommendations.map((r) => el("li", { text: r }))) : null);
  }

  // ---- wiring -------------------------------------------------------------------------

  function update() {
    writeHash();
    renderList();
    renderInspector();
  }

  function start() {
    readHash();
    renderSummary();
    renderFilters();
    const search = document.getElementById("search");
    search.value = state.q;
    let timer = null;
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => { state.q = search.value; state.shown = PAGE; update(); }, 120);
    });
    document.getElementById("label-filter").addEventListener("change", (event) => {
      state.label = event.target.value;
      state.shown = PAGE;
      update();
    });
    document.getElementById("show-more").addEventListener("click", () => {
      state.shown += PAGE;
      renderList();
    });
    document.addEventListener("keydown", (event) => {
      if (event.key === "/" && document.activeElement !== search) {
        event.preventDefault();
        search.focus();
      }
    });
    window.addEventListener("hashchange", () => {
      readHash();
      search.value = state.q;
      document.getElementById("label-filter").value = state.label;
      renderList();
      renderInspector();
    });
    renderList();
    renderInspector();
    document.body.dataset.ready = "1";
    performance.mark("agent-health-ready"); // the benchmark reads how long loading took
  }

  start();
})();
