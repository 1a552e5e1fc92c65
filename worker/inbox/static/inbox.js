// durable-tools inbox: plain JavaScript, no build step.
// - deadline countdowns;
// - answer forms generated from the answer's JSON Schema and checked before sending
//   (the workflow checks again: this only saves a round trip): fields in the schema's
//   order, labelled by title (else name) and described by description; a pattern
//   checks the value but a person reads the description, never the regex;
// - live updates over server-sent events: a conversation page follows the conversation's
//   event stream (GET /api/conversations/{id}/events, resumed by Last-Event-ID) and
//   redraws its transcript and what it waits for; the list reloads when the list's
//   stream (GET /api/pending/events) says the set of waiting conversations changed.
"use strict";

function left(deadline) {
  let s = Math.floor((Date.parse(deadline) - Date.now()) / 1000);
  if (s <= 0) return "expired";
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return d + " d " + h + " h";
  if (h) return h + " h " + m + " min";
  if (m) return m + " min " + s + " s";
  return s + " s";
}

function tickCountdowns() {
  for (const el of document.querySelectorAll(".countdown[data-deadline]")) {
    el.textContent = left(el.dataset.deadline);
  }
}

// ---------------------------------------------------------------- JSON Schema (a subset)

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

const FORMATS = {
  date: (s) => /^\d{4}-\d{2}-\d{2}$/.test(s) && !isNaN(Date.parse(s + "T00:00:00Z")),
  "date-time": (s) => /^\d{4}-\d{2}-\d{2}T/.test(s) && !isNaN(Date.parse(s)),
  email: (s) => /^[^@\s]+@[^@\s]+$/.test(s),
};

function matches(pattern, value) {
  // A pattern JavaScript cannot compile (JSON Schema patterns are ECMA 262, but some are
  // written for Python) is left to the workflow, which checks every answer again.
  try { return new RegExp(pattern, "u").test(value); } catch (e) { return true; }
}

function nameOf(schema, name) {
  // What the page calls a field: its title, else its property name.
  return (schema && typeof schema === "object" && schema.title) || name;
}

function validate(schema, value, path, errors) {
  if (schema === true || schema === undefined || schema === null) return errors;
  if (schema === false) { errors.push(path + ": no value is allowed"); return errors; }
  const where = path || nameOf(schema, "the answer");
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    const t = typeOf(value);
    if (!types.includes(t) && !(t === "integer" && types.includes("number"))) {
      errors.push(where + " must be " + types.join(" or "));
      return errors;
    }
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    errors.push(where + " must be one of " + schema.enum.map((e) => JSON.stringify(e)).join(", "));
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    errors.push(where + " must be " + JSON.stringify(schema.const));
  }
  if (typeof value === "string") {
    const n = [...value].length;
    if (schema.minLength !== undefined && n < schema.minLength)
      errors.push(where + (schema.minLength === 1 ? " is required" : " needs at least " + schema.minLength + " characters"));
    if (schema.maxLength !== undefined && n > schema.maxLength)
      errors.push(where + " allows at most " + schema.maxLength + " characters");
    // The pattern is for the browser and the workflow; a person reads the description.
    if (schema.pattern && !matches(schema.pattern, value))
      errors.push(where + " is not in the expected form" + (schema.description ? ": " + schema.description : ""));
    if (schema.format && FORMATS[schema.format] && !FORMATS[schema.format](value))
      errors.push(where + " must be a valid " + schema.format);
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) errors.push(where + " must be ≥ " + schema.minimum);
    if (schema.maximum !== undefined && value > schema.maximum) errors.push(where + " must be ≤ " + schema.maximum);
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) errors.push(where + " must be > " + schema.exclusiveMinimum);
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) errors.push(where + " must be < " + schema.exclusiveMaximum);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) errors.push(where + " needs at least " + schema.minItems + " items");
    if (schema.maxItems !== undefined && value.length > schema.maxItems) errors.push(where + " allows at most " + schema.maxItems + " items");
    if (schema.items && typeof schema.items === "object") value.forEach((v, i) => validate(schema.items, v, where + "[" + i + "]", errors));
  }
  if (typeOf(value) === "object") {
    const props = schema.properties || {};
    for (const name of schema.required || []) {
      if (!(name in value)) errors.push((path ? path + "." : "") + nameOf(props[name], name) + " is required");
    }
    for (const [name, v] of Object.entries(value)) {
      if (name in props) validate(props[name], v, (path ? path + "." : "") + nameOf(props[name], name), errors);
      else if (schema.additionalProperties === false) errors.push(where + " does not allow " + name);
      else if (typeof schema.additionalProperties === "object") validate(schema.additionalProperties, v, (path ? path + "." : "") + name, errors);
    }
  }
  return errors;
}

// ---------------------------------------------------------------- generated answer forms

let fieldCounter = 0;

function scalarField(name, schema, required) {
  // One labelled control for a string / number / integer / boolean / enum.
  const id = "gen-" + (++fieldCounter);
  const wrap = document.createElement("div");
  wrap.className = "gen-field";
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = nameOf(schema, name || "Answer") + (required ? " (required)" : "");
  let input;
  if (Array.isArray(schema.enum)) {
    input = document.createElement("select");
    const blank = document.createElement("option");
    blank.value = ""; blank.textContent = "choose…";
    input.append(blank);
    for (const e of schema.enum) {
      const o = document.createElement("option");
      o.value = JSON.stringify(e); o.textContent = String(e);
      input.append(o);
    }
    input.dataset.kind = "enum";
  } else if (schema.type === "boolean") {
    input = document.createElement("input");
    input.type = "checkbox"; input.dataset.kind = "boolean";
  } else if (schema.type === "number" || schema.type === "integer") {
    input = document.createElement("input");
    input.type = "number"; input.step = schema.type === "integer" ? "1" : "any";
    input.dataset.kind = schema.type;
  } else {
    input = document.createElement("input");
    input.type = schema.format === "date" ? "date" : schema.format === "email" ? "email" : "text";
    input.dataset.kind = "string";
    if (typeof schema.pattern === "string") input.setAttribute("pattern", schema.pattern);
  }
  input.id = id;
  input.dataset.name = name;
  wrap.append(label);
  if (schema.description) {
    const hint = document.createElement("p");
    hint.className = "hint"; hint.id = id + "-hint"; hint.textContent = schema.description;
    input.setAttribute("aria-describedby", hint.id);
    wrap.append(hint);
  }
  wrap.append(input);
  return wrap;
}

function isScalar(schema) {
  return schema && (Array.isArray(schema.enum) || ["string", "number", "integer", "boolean"].includes(schema.type));
}

function readControl(input) {
  // The control's value as JSON, or undefined when left empty.
  const kind = input.dataset.kind;
  if (kind === "boolean") return input.checked;
  if (input.value === "") return undefined;
  if (kind === "enum") return JSON.parse(input.value);
  if (kind === "number" || kind === "integer") return Number(input.value);
  return input.value;
}

function setupAnswerForm(form) {
  const schemaElement = form.querySelector(".answer-schema");
  if (!schemaElement) return;  // a link's "done" form: no value, nothing to check
  const schema = JSON.parse(schemaElement.textContent || "{}");
  const generated = form.querySelector(".generated");
  const raw = form.querySelector("textarea.raw");
  const rawLabel = form.querySelector(".raw-label");
  const errors = form.querySelector(".errors");
  let collect = null;
  if (schema.type === "object" && schema.properties && Object.values(schema.properties).every(isScalar)) {
    const required = new Set(schema.required || []);
    for (const [name, sub] of Object.entries(schema.properties)) generated.append(scalarField(name, sub, required.has(name)));
    collect = () => {
      const value = {};
      for (const input of generated.querySelectorAll("[data-name]")) {
        const v = readControl(input);
        if (v !== undefined) value[input.dataset.name] = v;
      }
      return value;
    };
  } else if (isScalar(schema)) {
    generated.append(scalarField("", schema, true));
    collect = () => {
      const v = readControl(generated.querySelector("[data-name]"));
      return v === undefined ? (schema.type === "string" ? "" : null) : v;
    };
  }
  if (collect) {
    raw.hidden = true; rawLabel.hidden = true;
  }
  form.addEventListener("submit", (event) => {
    errors.textContent = "";
    let value;
    if (collect) {
      value = collect();
      raw.value = JSON.stringify(value);
    } else {
      try { value = JSON.parse(raw.value); }
      catch (e) { event.preventDefault(); errors.textContent = "The answer is not valid JSON."; raw.focus(); return; }
    }
    const problems = validate(schema, value, "", []);
    if (problems.length) {
      event.preventDefault();
      const list = document.createElement("ul");
      for (const p of problems) { const li = document.createElement("li"); li.textContent = p; list.append(li); }
      errors.append(list);
      const first = generated.querySelector("[data-name]") || raw;
      first.setAttribute("aria-invalid", "true");
      first.focus();
    }
  });
}

// ---------------------------------------------------------------- live updates

// Event kinds that change what the page shows; other kinds (new ones included) are ignored.
const KNOWN = new Set([
  "message_received", "turn_started", "turn_finished", "model_failed", "budget_exceeded", "budget_raised",
  "tool_call_scheduled", "tool_attempt_started", "tool_progress", "tool_attempt_failed", "tool_call_finished",
  "approval_requested", "approval_decided", "approval_expired", "approval_rejected",
  "approval_counted", "approval_reminder", "approval_escalated",
  "question_asked", "question_answered", "conversation_finished",
]);

function busyIn(root) {
  // Whether the person is using a form inside root (focus, or typed text not yet sent).
  const active = document.activeElement;
  if (active && root.contains(active) && ["INPUT", "TEXTAREA", "SELECT", "BUTTON"].includes(active.tagName)) return true;
  for (const el of root.querySelectorAll("input[type=text], textarea, input[type=email], input[type=number], input[type=date]")) {
    if (el.value !== el.defaultValue) return true;
  }
  return false;
}

function describe(event) {
  const what = event.kind.replace(/_/g, " ");
  const tool = event.tool ? " " + event.tool : "";
  const call = event.call_id ? " (call " + event.call_id + ")" : "";
  const outcome = event.outcome ? ": " + event.outcome : "";
  return what + tool + call + outcome;
}

// `segment`: the workflow id as the server quotes it in paths (data-segment;
// the ids "." and ".." are not encodeURIComponent's).
function followConversation(segment) {
  const live = document.getElementById("live");
  let timer = null, running = false, again = false;

  async function redraw() {
    if (running) { again = true; return; }
    running = true;
    try {
      // The conversation's own page (after a form's conflict, location is the form's target);
      // after a retry, with the failure retried, so its notice tells the retry's outcome.
      const notice = document.getElementById("notice");
      const retried = notice ? notice.dataset.retried : undefined;
      const url = "/conversations/" + segment + (retried === undefined ? "" : "?retried=" + encodeURIComponent(retried));
      const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!r.ok) return;
      const fresh = new DOMParser().parseFromString(await r.text(), "text/html");
      for (const sel of ["#transcript-section", "#meta"]) {
        const now = document.querySelector(sel), next = fresh.querySelector(sel);
        if (now && next) now.replaceWith(next);
      }
      const nextNotice = fresh.getElementById("notice");
      if (retried !== undefined && notice && nextNotice) notice.replaceWith(nextNotice);
      // Once the conversation has ended, its message form goes (never while it runs:
      // someone may be typing a message in it).
      const send = document.getElementById("send-section"), nextSend = fresh.getElementById("send-section");
      if (send && nextSend && !nextSend.querySelector("form.send")) {
        send.replaceWith(nextSend);
        document.getElementById("policy-section")?.remove();  // nor does it take a policy
      }
      // The calls in flight and their progress: shown only, nothing to type in.
      const ran = document.getElementById("running-region"), nextRan = fresh.getElementById("running-region");
      if (ran && nextRan && ran.dataset.lines !== nextRan.dataset.lines) ran.replaceWith(nextRan);
      const now = document.getElementById("waiting-region"), next = fresh.getElementById("waiting-region");
      if (now && next && now.dataset.items !== next.dataset.items) {
        if (busyIn(now)) {
          live.textContent = "What this conversation waits for has changed; reload the page to see it.";
        } else {
          now.replaceWith(next);
          for (const form of next.querySelectorAll("form.answer")) setupAnswerForm(form);
          tickCountdowns();
        }
      }
      document.body.dataset.version = fresh.body.dataset.version || "";
    } catch (e) { /* the next event tries again */ }
    finally {
      running = false;
      if (again) { again = false; schedule(); }
    }
  }
  function schedule() { clearTimeout(timer); timer = setTimeout(redraw, 200); }

  const after = document.body.dataset.offset || "-1";
  const source = new EventSource("/api/conversations/" + segment + "/events?after=" + encodeURIComponent(after));
  source.onmessage = (message) => {
    let event;
    try { event = JSON.parse(message.data); } catch (e) { return; }
    if (!event || !KNOWN.has(event.kind)) return;
    live.textContent = "Live: " + describe(event);
    schedule();
  };
  source.onerror = () => {
    // A refused stream (429: this identity's streams are all open) is not retried.
    if (source.readyState === EventSource.CLOSED) live.textContent = "Live updates stopped; reload the page to see changes.";
  };
  source.addEventListener("end", () => { source.close(); live.textContent = "The conversation has ended."; schedule(); });
  source.addEventListener("conflict", (message) => {
    source.close();
    try { live.textContent = "Live updates stopped: " + JSON.parse(message.data).message; } catch (e) { /* keep the page */ }
  });
}

function followList() {
  let known = null;
  const source = new EventSource("/api/pending/events");
  source.addEventListener("changed", (message) => {
    let version;
    try { version = JSON.parse(message.data).version; } catch (e) { return; }
    if (known === null) { known = version; return; }
    if (version === known) return;
    known = version;
    if (busyIn(document.body) || document.hidden) return;
    location.reload();
  });
  source.addEventListener("conflict", () => source.close());
}

function live() {
  if (document.body.dataset.live !== "1") return;
  const id = document.body.dataset.workflowId;
  if (id === undefined) followList();
  else if (document.getElementById("live")) followConversation(document.body.dataset.segment);
}

document.addEventListener("DOMContentLoaded", () => {
  tickCountdowns();
  setInterval(tickCountdowns, 1000);
  for (const form of document.querySelectorAll("form.answer")) setupAnswerForm(form);
  live();
});
