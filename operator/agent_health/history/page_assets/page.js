// The history page: plots of the runs, a grid of every test run by run, the flaky tests and
// the recent regressions, drawn from the JSON in #history-data. No network, no framework:
// SVG for the plots (a hundred points each), a canvas for the grid (2,000 tests × 100 runs
// are 200,000 cells: only the rows in view are drawn, again as it scrolls).
(function () {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  const DATA = JSON.parse(document.getElementById("history-data").textContent);
  const COLUMNS = DATA.columns;
  const ROWS = DATA.rows; // [id, title, file, line, labels, cells]
  const AGENT_COLORS = ["#0969da", "#bc4c00", "#8250df", "#1a7f37", "#bf3989", "#0a7e8c",
    "#9a6700", "#57606a"];
  const CELL_NAMES = {
    P: "passed", K: "flaky (passed on a retry)", F: "failed", E: "errored (the agent)",
    X: "errored (judge, test or infrastructure)", S: "skipped", ".": "not run",
  };
  const CELL_VARS = { P: "--passed", K: "--flaky", F: "--failed", E: "--errored-cell",
    X: "--other", S: "--skipped", ".": "--absent" };
  const BAD = /[FEX]/;
  const FIRST_SHOWN = 12; // items of a long list shown before "show all"

  // ---- small helpers ------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function pct(v) {
    return v === null || v === undefined ? "n/a" : Math.round(v * 1000) / 10 + "%";
  }
  function money(v) {
    if (v === null || v === undefined) return "n/a";
    return "$" + (v >= 0.01 ? v.toFixed(2) : v.toPrecision(2));
  }
  function count(v) {
    if (v === null || v === undefined) return "n/a";
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return Math.round(v / 1e3) + "k";
    return v.toLocaleString("en");
  }
  function duration(ms) {
    if (ms === null || ms === undefined) return "n/a";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    return (ms / 60000).toFixed(1) + " min";
  }
  function when(iso) {
    return iso.slice(0, 16).replace("T", " ");
  }
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function reportAt(column, testId) {
    if (!column.report) return null;
    return testId ? column.report + "#" + new URLSearchParams({ test: testId }) : column.report;
  }

  const agents = [];
  for (const c of COLUMNS) {
    const name = c.agent || "(no agent)";
    if (!agents.includes(name)) agents.push(name);
  }
  function colorOf(column) {
    return AGENT_COLORS[agents.indexOf(column.agent || "(no agent)") % AGENT_COLORS.length];
  }

  function runLines(c) {
    const lines = [
      `run ${c.short} · ${c.agent || "no agent"} · ${when(c.started_at)} UTC` +
        (c.commit ? ` · commit ${c.commit.slice(0, 10)}` : ""),
      `pass rate ${pct(c.pass_rate)}` +
        (c.low !== null ? ` (95% CI ${pct(c.low)}–${pct(c.high)})` : ""),
      `${c.passed} passed, ${c.failed} failed, ${c.errored} errored` +
        (c.flaky ? `, ${c.flaky} flaky` : "") + (c.skipped ? `, ${c.skipped} skipped` : ""),
      `cost ${money(c.cost_usd)} · ${count(c.tokens)} tokens · took ${duration(c.duration_ms)}`,
    ];
    if (c.mark) {
      lines.push(`${c.mark === "worse" ? "▼ worse" : "▲ better"} than the agent's previous run ` +
        `(${c.method} p = ${c.p_value.toPrecision(2)})`);
    }
    if (c.incomplete) lines.push("interrupted or stopped by a budget: not every test ran");
    lines.push(c.report ? "click to open its report" : "its report is not at hand");
    return lines;
  }

  // ---- the header ---------------------------------------------------------------------

  function renderScope() {
    const scope = DATA.scope;
    const parts = [];
    if (COLUMNS.length) {
      parts.push(`${COLUMNS.length} runs from ${when(COLUMNS[0].started_at)} to ` +
        `${when(COLUMNS[COLUMNS.length - 1].started_at)} UTC`);
      parts.push(`${ROWS.length.toLocaleString("en")} tests`);
    }
    if (scope.agent) parts.push(`agent ${scope.agent}`);
    if (scope.label) parts.push(`label ${scope.label}`);
    if (scope.since) parts.push(`since ${when(scope.since)}`);
    parts.push(`history ${scope.where}`);
    parts.push(`drawn ${when(DATA.generated_at)} UTC`);
    document.getElementById("scope").textContent = parts.join(" · ");
    const box = document.getElementById("agents");
    for (const name of agents) {
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = AGENT_COLORS[agents.indexOf(name) % AGENT_COLORS.length];
      box.append(el("span", { class: "agent" }, swatch, el("span", { text: name })));
    }
  }

  // ---- plots --------------------------------------------------------------------------

  // A plot over the runs: x is the run's place (oldest left), y a value of it. `value(c)`
  // gives the point, `bar(c)` (optional) an interval [low, high] drawn as a vertical bar.
  function plot(container, { height, value, bar, yMin = 0, yMax, ticks, format, marks, links }) {
    const width = Math.max(container.clientWidth || 0, 320);
    const left = 52, right = 12, top = 14, bottom = 24;
    const n = COLUMNS.length;
    const step = (width - left - right) / Math.max(n, 1);
    const x = (i) => left + (i + 0.5) * step;
    const y = (v) => top + (1 - (v - yMin) / (yMax - yMin)) * (height - top - bottom);
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}` });
    for (const t of ticks) {
      root.append(svg("line", { class: "grid-line", x1: left, x2: width - right, y1: y(t), y2: y(t) }));
      root.append(svg("text", { x: left - 6, y: y(t) + 4, "text-anchor": "end", text: format(t) }));
    }
    root.append(svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: height - bottom }));
    // Dates under the axis; with the times of day when the runs span less than a week.
    const span = n ? Date.parse(COLUMNS[n - 1].started_at) - Date.parse(COLUMNS[0].started_at) : 0;
    const short = span >= 7 * 86400000;
    const labelled = Math.min(n, Math.max(2, Math.floor((width - left) / (short ? 70 : 110))));
    for (let k = 0; k < labelled; k++) {
      const i = labelled === 1 ? 0 : Math.round((k * (n - 1)) / (labelled - 1));
      const at = COLUMNS[i].started_at;
      root.append(svg("text", { x: x(i), y: height - 6, "text-anchor": "middle",
        text: short ? at.slice(5, 10) : at.slice(5, 16).replace("T", " ") }));
    }
    for (const name of agents) {
      const points = [];
      COLUMNS.forEach((c, i) => {
        const v = value(c);
        if ((c.agent || "(no agent)") === name && v !== null && v !== undefined) {
          points.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`);
        }
      });
      if (points.length > 1) {
        root.append(svg("polyline", { class: "series", points: points.join(" "),
          stroke: AGENT_COLORS[agents.indexOf(name) % AGENT_COLORS.length] }));
      }
    }
    let drawn = 0;
    COLUMNS.forEach((c, i) => {
      const v = value(c);
      if (v === null || v === undefined) return;
      drawn++;
      const color = colorOf(c);
      const group = svg("g", { class: "run", "data-run": c.uid });
      if (bar) {
        const [low, high] = bar(c);
        if (low !== null && high !== null && low !== undefined && high !== undefined) {
          group.append(svg("line", { class: "bar", stroke: color, x1: x(i), x2: x(i),
            y1: y(low), y2: y(high) }));
        }
      }
      const point = svg("circle", { class: "point" + (c.incomplete ? " incomplete" : ""),
        cx: x(i), cy: y(v), r: Math.min(4, Math.max(2.5, step / 3)), fill: color },
        svg("title", { text: runLines(c).join("\n") }));
      if (links && c.report) {
        group.append(svg("a", { href: c.report, "aria-label": `run ${c.short}` }, point));
      } else {
        group.append(point);
      }
      if (marks && c.mark) {
        const top_ = bar ? bar(c)[1] : v;
        group.append(svg("text", { class: "mark-" + c.mark, x: x(i), "text-anchor": "middle",
          y: y(top_ === null ? v : top_) - 5, text: c.mark === "worse" ? "▼" : "▲" }));
      }
      root.append(group);
    });
    if (!drawn) {
      root.append(svg("text", { class: "none", x: width / 2, y: height / 2, "text-anchor": "middle",
        text: "no run recorded this" }));
    }
    container.replaceChildren(root);
  }

  function niceMax(values) {
    const top = Math.max(0, ...values.filter((v) => v !== null && v !== undefined));
    if (top <= 0) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(top)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= top) return m * power;
    return 10 * power;
  }

  function renderPlots() {
    // From a round tenth below the lowest interval to 100%: the axis says where it starts.
    const lowest = Math.min(1, ...COLUMNS.map((c) => (c.low ?? c.pass_rate ?? 1)));
    const yMin = Math.max(0, Math.floor((lowest - 0.05) * 10) / 10);
    const ticks = [];
    const tick = 1 - yMin > 0.5 ? 0.25 : 0.1;
    for (let t = 1; t >= yMin - 1e-9; t -= tick) ticks.push(Math.round(t * 100) / 100);
    plot(document.getElementById("trend-plot"), {
      height: 280, yMin, yMax: 1, ticks, format: pct, marks: true, links: true,
      value: (c) => c.pass_rate, bar: (c) => [c.low, c.high],
    });
    const costMax = niceMax(COLUMNS.map((c) => c.cost_usd));
    plot(document.getElementById("cost-plot"), {
      height: 170, yMax: costMax, ticks: [0, costMax / 2, costMax], format: money, links: true,
      value: (c) => c.cost_usd,
    });
    const tokensMax = niceMax(COLUMNS.map((c) => c.tokens));
    plot(document.getElementById("tokens-plot"), {
      height: 170, yMax: tokensMax, ticks: [0, tokensMax / 2, tokensMax], format: count,
      links: true, value: (c) => c.tokens,
    });
    const latencyMax = niceMax(COLUMNS.map((c) => (c.latency ? c.latency.p90_ms : null)));
    plot(document.getElementById("latency-plot"), {
      height: 170, yMax: latencyMax, ticks: [0, latencyMax / 2, latencyMax], format: duration,
      links: true, value: (c) => (c.latency ? c.latency.p50_ms : null),
      bar: (c) => (c.latency ? [c.latency.p50_ms, c.latency.p90_ms] : [null, null]),
    });
  }

  // ---- the grid -----------------------------------------------------------------------

  const ROW_H = 16, HEAD_H = 24, LABEL_W = 340;
  const grid = {
    rows: [], colors: {}, cellW: 8, width: 0, height: 0, dpr: 1,
    cursor: null, // {row, col} of the focused or pointed cell
    labels: new Map(),
  };
  const scroller = document.getElementById("grid-scroll");
  const canvas = document.getElementById("grid-canvas");
  const spacer = document.getElementById("grid-spacer");
  const readout = document.getElementById("grid-readout");

  // Newest failures first: the newest run a test did not pass in (F, E or X), then how often.
  function problemKey(cells) {
    let newest = -1, times = 0;
    for (let i = 0; i < cells.length; i++) {
      if (BAD.test(cells[i])) { newest = i; times++; }
    }
    return [newest, times];
  }

  function chooseRows() {
    const query = document.getElementById("grid-search").value.trim().toLowerCase();
    const problems = document.getElementById("grid-problems").checked;
    const order = document.getElementById("grid-order").value;
    let rows = ROWS;
    if (query) {
      rows = rows.filter((r) => (r[0] + "\n" + r[1] + "\n" + r[4].join("\n")).toLowerCase()
        .includes(query));
    }
    if (problems) rows = rows.filter((r) => /[FEXK]/.test(r[5]));
    if (order === "problems") {
      const keyed = rows.map((r) => [problemKey(r[5]), r]);
      keyed.sort((a, b) => b[0][0] - a[0][0] || b[0][1] - a[0][1] ||
        (a[1][0] < b[1][0] ? -1 : a[1][0] > b[1][0] ? 1 : 0));
      rows = keyed.map((k) => k[1]);
    }
    grid.rows = rows;
    grid.cursor = null;
    document.getElementById("grid-count").textContent =
      `${rows.length.toLocaleString("en")} of ${ROWS.length.toLocaleString("en")} tests`;
    layout();
  }

  function layout() {
    const dpr = window.devicePixelRatio || 1;
    const width = scroller.clientWidth || 900;
    const n = Math.max(COLUMNS.length, 1);
    grid.cellW = Math.max(3, Math.min(18, Math.floor((width - LABEL_W - 10) / n)));
    const content = HEAD_H + grid.rows.length * ROW_H;
    const view = Math.min(content, Math.max(240, Math.round(window.innerHeight * 0.7)));
    scroller.style.height = view + 2 + "px";
    grid.width = width;
    grid.height = view;
    grid.dpr = dpr;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(view * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = view + "px";
    spacer.style.height = Math.max(0, content - view) + "px";
    // The geometry, for whoever needs to find a cell (the browser tests do).
    Object.assign(canvas.dataset, { cellWidth: grid.cellW, rowHeight: ROW_H,
      headHeight: HEAD_H, labelWidth: LABEL_W });
    draw();
  }

  function label(row, room, ctx) {
    const key = row[0];
    let text = grid.labels.get(key);
    if (text === undefined) {
      text = row[1];
      if (ctx.measureText(text).width > room) {
        while (text.length > 1 && ctx.measureText(text + "…").width > room) {
          text = text.slice(0, -1);
        }
        text += "…";
      }
      grid.labels.set(key, text);
    }
    return text;
  }

  function draw() {
    const ctx = canvas.getContext("2d");
    const { width, height, dpr, cellW } = grid;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "12px -apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif";
    ctx.textBaseline = "middle";
    const top = scroller.scrollTop;
    const first = Math.floor(top / ROW_H);
    const last = Math.min(grid.rows.length, first + Math.ceil(height / ROW_H) + 1);
    const fg = cssVar("--fg"), muted = cssVar("--muted"), panel = cssVar("--panel");
    for (let r = first; r < last; r++) {
      const row = grid.rows[r];
      const y = HEAD_H + r * ROW_H - top;
      if (grid.cursor && grid.cursor.row === r) {
        ctx.fillStyle = panel;
        ctx.fillRect(0, y, width, ROW_H);
      }
      ctx.fillStyle = fg;
      ctx.fillText(label(row, LABEL_W - 16, ctx), 6, y + ROW_H / 2);
      const cells = row[5];
      for (let c = 0; c < cells.length; c++) {
        ctx.fillStyle = grid.colors[cells[c]];
        ctx.fillRect(LABEL_W + c * cellW, y + 2, Math.max(1, cellW - 1), ROW_H - 4);
      }
    }
    // The header last, over the rows scrolled under it: each run's agent, newest on the right.
    ctx.fillStyle = cssVar("--bg");
    ctx.fillRect(0, 0, width, HEAD_H);
    ctx.fillStyle = muted;
    ctx.fillText("test", 6, HEAD_H / 2);
    COLUMNS.forEach((c, i) => {
      ctx.fillStyle = colorOf(c);
      ctx.fillRect(LABEL_W + i * cellW, HEAD_H - 8, Math.max(1, cellW - 1), 5);
      if (c.mark) {
        ctx.fillStyle = c.mark === "worse" ? cssVar("--failed") : cssVar("--passed");
        ctx.fillRect(LABEL_W + i * cellW, HEAD_H - 12, Math.max(1, cellW - 1), 3);
      }
    });
    ctx.fillStyle = muted;
    ctx.textAlign = "right";
    ctx.fillText("newest →", Math.min(width - 4, LABEL_W + COLUMNS.length * cellW), 8);
    ctx.textAlign = "left";
    ctx.fillText("oldest", LABEL_W, 8);
    if (grid.cursor) {
      const { row, col } = grid.cursor;
      const y = HEAD_H + row * ROW_H - top;
      ctx.strokeStyle = fg;
      ctx.lineWidth = 1.5;
      ctx.strokeRect(LABEL_W + col * cellW - 0.5, y + 1, cellW, ROW_H - 2);
    }
  }

  function cellAt(event) {
    const box = canvas.getBoundingClientRect();
    const x = event.clientX - box.left, y = event.clientY - box.top;
    const col = Math.floor((x - LABEL_W) / grid.cellW);
    if (col < 0 || col >= COLUMNS.length) return null;
    if (y < HEAD_H) return { row: null, col };
    const row = Math.floor((y - HEAD_H + scroller.scrollTop) / ROW_H);
    if (row < 0 || row >= grid.rows.length) return null;
    return { row, col };
  }

  function describe(at) {
    const column = COLUMNS[at.col];
    if (at.row === null) return runLines(column).join(" · ");
    const row = grid.rows[at.row];
    const said = CELL_NAMES[row[5][at.col]] || row[5][at.col];
    const report = column.report ? "click or press Enter to open the run's report at this test"
      : "its report is not at hand";
    return `${row[1]} (${row[0]}) — run ${column.short} · ${column.agent || "no agent"} · ` +
      `${when(column.started_at)} UTC: ${said}. ${report}`;
  }

  function point(at) {
    grid.cursor = at && at.row !== null ? at : null;
    readout.textContent = at ? describe(at) : "";
    draw();
  }

  function open(at) {
    if (!at) return;
    const column = COLUMNS[at.col];
    const href = reportAt(column, at.row === null ? null : grid.rows[at.row][0]);
    if (href) window.location.href = href;
  }

  function renderGrid() {
    for (const [code, name] of Object.entries(CELL_VARS)) grid.colors[code] = cssVar(name);
    const legend = document.getElementById("grid-legend");
    for (const [code, name] of Object.entries(CELL_NAMES)) {
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = grid.colors[code];
      legend.append(el("span", {}, swatch, name));
    }
    canvas.tabIndex = 0;
    canvas.setAttribute("aria-label", "every test's outcome in each run; arrow keys move, " +
      "Enter opens the run's report");
    canvas.addEventListener("mousemove", (event) => point(cellAt(event)));
    canvas.addEventListener("mouseleave", () => point(null));
    canvas.addEventListener("click", (event) => open(cellAt(event)));
    canvas.addEventListener("keydown", (event) => {
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      if (event.key === "Enter") { open(grid.cursor); return; }
      const move = moves[event.key];
      if (!move || !grid.rows.length) return;
      event.preventDefault();
      const at = grid.cursor || { row: 0, col: COLUMNS.length - 1 };
      const row = Math.min(grid.rows.length - 1, Math.max(0, at.row + (grid.cursor ? move[0] : 0)));
      const col = Math.min(COLUMNS.length - 1, Math.max(0, at.col + (grid.cursor ? move[1] : 0)));
      const y = row * ROW_H;
      if (y < scroller.scrollTop) scroller.scrollTop = y;
      if (y + ROW_H > scroller.scrollTop + grid.height - HEAD_H) {
        scroller.scrollTop = y + ROW_H - grid.height + HEAD_H;
      }
      point({ row, col });
    });
    let pending = false;
    scroller.addEventListener("scroll", () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; draw(); });
    });
    let typing = null;
    document.getElementById("grid-search").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(chooseRows, 120);
    });
    document.getElementById("grid-problems").addEventListener("change", chooseRows);
    document.getElementById("grid-order").addEventListener("change", chooseRows);
    window.addEventListener("resize", () => { grid.labels.clear(); layout(); });
    chooseRows();
  }

  function showInGrid(testId) {
    const search = document.getElementById("grid-search");
    search.value = testId;
    chooseRows();
    document.getElementById("grid-section").scrollIntoView();
  }

  // ---- flaky tests and regressions ------------------------------------------------------

  function rateBar(f) {
    const w = 110, x = (v) => 4 + v * w;
    return svg("svg", { width: 170, height: 22, viewBox: "0 0 170 22", role: "img",
      "aria-label": `fails ${pct(f.failure_rate)} (95% CI ${pct(f.low)}–${pct(f.high)})` },
      svg("title", { text: `fails ${pct(f.failure_rate)} of ${f.decided} decided results ` +
        `(Wilson 95% CI ${pct(f.low)}–${pct(f.high)})` }),
      svg("line", { class: "axis", x1: x(0), x2: x(1), y1: 11, y2: 11 }),
      svg("line", { x1: x(0.5), x2: x(0.5), y1: 6, y2: 16, stroke: cssVar("--line") }),
      svg("line", { x1: x(f.low), x2: x(f.high), y1: 11, y2: 11, stroke: cssVar("--failed"),
        "stroke-width": 4, "stroke-opacity": 0.35 }),
      svg("circle", { cx: x(f.failure_rate), cy: 11, r: 4, fill: cssVar("--failed") }),
      svg("text", { x: x(1) + 8, y: 15, text: pct(f.failure_rate) }));
  }

  function strip(cells) {
    const w = Math.max(2, Math.min(6, Math.floor(240 / Math.max(cells.length, 1))));
    const root = svg("svg", { width: cells.length * w, height: 14, role: "img",
      "aria-label": "outcome per run, oldest first" });
    for (let i = 0; i < cells.length; i++) {
      root.append(svg("rect", { x: i * w, y: 2, width: Math.max(1, w - 1), height: 10,
        fill: grid.colors[cells[i]] }));
    }
    return root;
  }

  function renderFlaky() {
    const list = document.getElementById("flaky-list");
    const note = document.getElementById("flaky-note");
    const byId = new Map(ROWS.map((r) => [r[0], r]));
    if (!DATA.flaky.length) {
      note.textContent = `No test flipped between passing and failing over the last ` +
        `${DATA.scope.flaky_runs} runs while neither the agent nor the test changed.`;
      return;
    }
    note.textContent = `Tests whose outcome flipped over the last ${DATA.scope.flaky_runs} ` +
      "runs while neither the agent nor the test changed, most flips first; the bar is the " +
      "failure rate with its Wilson 95% interval, the strip its outcome in each run drawn " +
      "above. Click one to find it in the grid.";
    DATA.flaky.forEach((f, i) => {
      const row = byId.get(f.id);
      list.append(el("li", { "data-test": f.id, hidden: i >= FIRST_SHOWN },
        el("div", { class: "what" },
          el("button", { type: "button", text: f.title, title: f.id,
            onclick: () => showInGrid(f.id) }),
          el("small", { text: `${f.flips} flips over ${f.runs} runs · ${f.agent || "no agent"}` +
            ` · last ${f.last}` })),
        el("div", { class: "rate" }, rateBar(f)),
        el("div", { class: "strip" }, row ? strip(row[5]) : null)));
    });
    showMore(list, DATA.flaky.length, "flaky tests");
  }

  // A button under a long list that shows the rest of it.
  function showMore(list, total, what) {
    if (total <= FIRST_SHOWN) return;
    const button = el("button", { type: "button", class: "more",
      text: `show all ${total} ${what}`,
      onclick: () => {
        for (const item of list.children) item.hidden = false;
        button.remove();
      } });
    list.after(button);
  }

  function renderRegressions() {
    const box = document.getElementById("regressions-list");
    const note = document.getElementById("regressions-note");
    if (!DATA.regressions.length) {
      note.textContent = "No test that passed in an agent's run failed in its next run, over " +
        "the newest runs drawn here.";
      return;
    }
    note.textContent = "Tests that passed in an agent's previous run and failed or errored " +
      "in the next, newest first.";
    const byRun = new Map();
    for (const r of DATA.regressions) {
      if (!byRun.has(r.run)) byRun.set(r.run, []);
      byRun.get(r.run).push(r);
    }
    let shown = 0;
    for (const [, found] of byRun) {
      const head = found[0];
      const title = `run ${head.short} · ${head.agent || "no agent"} · ` +
        `${when(head.started_at)} UTC — ${found.length} ${found.length === 1 ? "test" : "tests"} broke`;
      const items = found.map((r) => {
        const href = r.report ? r.report + "#" + new URLSearchParams({ test: r.id }) : null;
        return el("li", { "data-test": r.id },
          el("span", { class: "status-" + r.status,
            text: r.status + (r.cause && r.status === "errored" ? ` (${r.cause})` : "") }),
          " ",
          href ? el("a", { href, text: r.title, title: r.id }) : el("span", { text: r.title, title: r.id }),
          r.changed ? el("span", { class: "muted", text: " (the test changed)" }) : null,
          r.message ? el("div", { class: "muted mono", text: r.message }) : null);
      });
      // The newest run's open; the others one line each, opened on a click.
      box.append(el("details", { class: "regression-run", "data-run": head.run, open: !shown,
        hidden: shown >= FIRST_SHOWN }, el("summary", { text: title }), el("ul", {}, ...items)));
      shown++;
    }
    showMore(box, byRun.size, "runs with regressions");
  }

  // ---- start --------------------------------------------------------------------------

  function start() {
    renderScope();
    if (!COLUMNS.length) {
      const empty = document.getElementById("empty");
      empty.hidden = false;
      empty.textContent = "No run in the history matches yet: `agent-health run` records one.";
      for (const id of ["trend", "spend", "grid-section", "flaky", "regressions"]) {
        document.getElementById(id).hidden = true;
      }
    } else {
      renderPlots();
      renderGrid();
      renderFlaky();
      renderRegressions();
    }
    document.body.dataset.ready = "1";
    performance.mark("agent-health-ready"); // the benchmark reads how long loading took
  }

  start();
})();
