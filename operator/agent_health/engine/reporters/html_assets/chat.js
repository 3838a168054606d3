// The inspector's chat view of a conversation (agent.run(turns=...) or user=...): turn by
// turn the user's message, the tool calls and results the agent made answering it (its
// steps are marked with their turn), the agent's answer, and beside each turn the checks
// and judge verdicts made on it (result.turn(n): their evidence names the turn). Loaded in
// the same script element as report.js, which hands it its DOM helpers: every value goes
// through them as text, never as HTML.
const AgentHealthChat = function (h) {
  "use strict";

  const REASONS = {
    "turns-done": "the scripted turns ran out",
    "user-stopped": "the user stopped",
    "goal-met": "the user's goal was met",
    "gave-up": "the user gave up",
    "max-turns": "max_turns was reached with the user still talking",
  };

  function turnOf(signal) {
    const turn = signal && signal.evidence ? signal.evidence.turn : null;
    return typeof turn === "number" ? turn : null;
  }

  function failedTool(steps) {
    return steps.some((s) => s.type === "tool_result" && s.status === "error");
  }

  function summary(run) {
    const turns = run.turns || [];
    const ended = run.ended || null;
    const words = turns.length + (turns.length === 1 ? " turn" : " turns");
    return ended && ended.reason ? words + ", " + ended.reason : words;
  }

  function endedLine(run) {
    const ended = run.ended;
    if (!ended || !ended.reason) return null;
    return h.el("p", { class: "chat-ended", "data-reason": ended.reason },
      h.el("strong", { text: "Ended " + ended.reason }),
      " — " + (REASONS[ended.reason] || ended.reason),
      ended.detail ? h.el("span", { class: "chat-detail", text: ": " + ended.detail }) : null);
  }

  function checks(found) {
    if (!found.length) return null;
    return h.el("div", { class: "turn-verdicts" }, found.map((s) => h.el("div", {
      class: "turn-verdict kind-" + s.kind },
      h.el("div", { class: "step-head" }, h.verdict(s), h.el("strong", { text: s.name }),
        h.el("span", { class: "muted", text: s.kind === "judge" ? "judge" : "check" })),
      s.error ? h.pre(s.error) : null,
      s.reasoning ? h.el("p", { class: "reasoning", text: s.reasoning })
        : s.kind !== "judge" && s.evidence ? h.el("div", { class: "mono", text: h.brief(s.evidence) })
          : null)));
  }

  function bubble(who, text, facts) {
    return h.el("div", { class: "bubble " + who },
      h.el("div", { class: "who muted", text: facts }), h.pre(text === undefined ? "" : text));
  }

  // The conversation as a chat; null for a single run (its one turn is the rest of the page).
  function view(run) {
    const turns = Array.isArray(run.turns) ? run.turns : [];
    if (!turns.length) return null;
    const steps = Array.isArray(run.trajectory) ? run.trajectory : [];
    const signals = (run.signals || []).filter((s) => s.kind !== "metric");
    return h.section("Conversation (" + summary(run) + ")",
      endedLine(run),
      h.el("ol", { class: "chat" }, turns.map((t) => {
        const mine = steps.filter((s) => s.turn === t.number);
        const calls = mine.filter((s) => s.type === "tool_call" || s.type === "tool_result");
        const tokens = t.token_usage && typeof t.token_usage.total === "number"
          ? " · " + t.token_usage.total + " tokens" : "";
        return h.el("li", { class: "turn" + (failedTool(mine) ? " trouble" : ""),
          "data-turn": String(t.number) },
          bubble("user", t.user, "user · turn " + t.number),
          calls.length ? h.el("div", { class: "turn-steps" }, h.timeline(calls)) : null,
          bubble("agent", t.output, "agent · " + h.seconds(t.duration_ms) + tokens
            + (calls.length ? " · " + calls.filter((s) => s.type === "tool_call").length
              + " tool calls" : "")),
          checks(signals.filter((s) => turnOf(s) === t.number)));
      })));
  }

  return { view: view, summary: summary, turnOf: turnOf };
};
