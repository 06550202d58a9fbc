{% raw %}
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("report-data").textContent);

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function pre(parent, title, text) {
    parent.appendChild(el("h6", title));
    parent.appendChild(el("pre", text === "" || text === undefined ? "-" : text));
  }

  function saagText(saag) {
    var stage = saag.stage === "passed" ? "passed every stage" : saag.stage === "n/a" ? "not applicable" :
      "stopped at stage " + saag.stage;
    return stage + (saag.corrections ? "\n" + saag.corrections.join("\n") : "");
  }

  function callText(calls) {
    if (typeof calls === "string") return "(" + calls + ")";
    if (!calls.length) return "(no call)";
    return calls.map(function (call) {
      var args = call[1] || {};
      return call[0] + "(" + Object.keys(args).map(function (k) { return k + "=" + JSON.stringify(args[k]); }).join(", ") + ")";
    }).join("; ");
  }

  function details(example) {
    var box = el("div", null, "detail-body");
    pre(box, "Query", example.query || "(not available)");
    pre(box, "Base call", callText(example.base));
    pre(box, "SAAG report of the base call", saagText(example.base_saag));
    example.conditions.forEach(function (c) {
      var last = example.base;
      box.appendChild(el("h6", "Condition " + c.label + (c.gated ? " (passed by the SAAG gate, not reviewed)" : "")));
      if (c.rounds) {
        var list = el("ol");
        c.rounds.forEach(function (r) {
          var item = el("li", (r.reviewer ? r.reviewer + " " : "") + "review: " + r.verdict);
          if (r.feedback) item.appendChild(el("pre", "feedback: " + r.feedback));
          if (r.revised !== undefined) { last = r.revised; item.appendChild(el("pre", "revised: " + callText(r.revised))); }
          if (r.note) item.appendChild(el("pre", "note: " + r.note));
          list.appendChild(item);
        });
        box.appendChild(list);
      } else if (c.label !== "prediction") {
        box.appendChild(el("p", "no review rounds"));
      }
      if (c.candidates) {
        var cl = el("ol");
        c.candidates.forEach(function (cand) {
          cl.appendChild(el("li", "candidate " + cand.i + " (t=" + cand.t + (cand.score !== null ? ", score " + cand.score : "") +
            (cand.passed === true ? ", passed SAAG" : cand.passed === false ? ", failed SAAG" : "") +
            (cand.i === c.selected ? ", selected" : "") + "): " + callText(cand.call)));
        });
        box.appendChild(cl);
      }
      if (c.label !== "prediction") pre(box, "Final call", callText(c.final !== undefined ? c.final : last));
      pre(box, "SAAG report of the final call", saagText(c.saag || example.base_saag));
      pre(box, "Correctness", (c.correct ? "✓ right" : "✗ wrong") + (c.truth ? " (" + c.truth + ")" : "") +
        (c.error ? "\nerror: " + c.error : ""));
    });
    return box;
  }

  // -- the conversation browser (report/pages/conversations.py builds its JSON; security_traces.py too) ---

  // The security browser pools its texts and steps (data.security.texts, .steps): a number where a text
  // or a step goes is its index.
  var pool = null;
  function txt(value) { return typeof value === "number" && pool ? pool.texts[value] : value; }
  function stepOf(value) { return typeof value === "number" && pool ? pool.steps[value] : value; }

  // A tool result with the attack's injected text marked: spans are [start, end, vector] into the text.
  function resultPre(label, text, spans, cls) {
    var node = el("pre", null, cls);
    node.appendChild(document.createTextNode(label));
    var at = 0;
    (spans || []).forEach(function (sp) {
      if (sp[0] < at) return;
      node.appendChild(document.createTextNode(text.slice(at, sp[0])));
      var mark = el("mark", text.slice(sp[0], sp[1]), "injected");
      mark.title = "injected by the attack (" + sp[2] + ")";
      node.appendChild(mark);
      at = sp[1];
    });
    node.appendChild(document.createTextNode(text.slice(at)));
    return node;
  }

  function findingPre(f) {
    var node = el("pre", null, "finding");
    node.appendChild(document.createTextNode("rule " + f.rule + ": " + f.call + (f.argument ? "." + f.argument : "") +
      (f.value !== undefined && f.value !== null ? " = " + JSON.stringify(f.value) : "") +
      (f.tool ? ", from the result of " + f.tool : "") + (f.markers && f.markers.length ? " (" + f.markers.join(", ") + ")" : "") +
      (f.text !== null && f.text !== undefined ? ":\n" : "")));
    if (f.text !== null && f.text !== undefined) node.appendChild(el("mark", txt(f.text), "injected"));
    return node;
  }

  function marks(parent, list) {
    (list || []).forEach(function (m) { parent.appendChild(el("span", m, "mark m-" + m.replace(/ /g, "-"))); });
  }

  function prediction(p) {
    if (p.calls.length) return callText(p.calls) + (p.unparsable ? " (unparsable)" : "");
    return "(no call)" + (p.text ? " " + txt(p.text) : "") + (p.unparsable ? " (unparsable output)" : "");
  }

  function verdictBox(v) {
    var box = el("div", null, "verdict " + (v.valid ? "v-valid" : "v-invalid"));
    box.appendChild(el("strong", v.label || (v.valid ? "✓ valid" : "✗ invalid")));
    if (v.error_type) box.appendChild(el("span", " " + v.error_type, "error-type"));
    var lines = [];
    if (v.failed_turn !== undefined) lines.push("failed at turn " + v.failed_turn);
    if (v.message) lines.push(v.message);
    if (v.checks) lines.push("checks: " + Object.keys(v.checks).map(function (k) {
      return k + " " + (v.checks[k] ? "✓" : "✗"); }).join(", "));
    (v.extra || []).forEach(function (kv) { lines.push(kv[0] + ": " + kv[1]); });
    if (v.error) lines.push("error: " + v.error);
    if (lines.length) box.appendChild(el("pre", lines.join("\n")));
    if (v.details) {
      var d = el("details");
      d.appendChild(el("summary", "checker details"));
      d.appendChild(el("pre", v.details));
      box.appendChild(d);
    }
    return box;
  }

  function stepBox(s, position) {
    var held = s.marks && (s.marks.indexOf("withheld") >= 0 || s.marks.indexOf("blocked") >= 0);
    var box = el("div", null, "step" + (held ? " s-withheld" : ""));
    var head = el("div", "step " + (s.i !== undefined ? s.i : position), "step-head");
    marks(head, s.marks);
    box.appendChild(head);
    if (s.say !== undefined) box.appendChild(el("pre", "says: " + txt(s.say), "say"));
    box.appendChild(el("pre", "proposed: " + prediction(s.proposed), "proposed"));
    if (s.rounds) {
      var list = el("ol", null, "rounds");
      s.rounds.forEach(function (r) {
        var item = el("li", (r.reviewer ? r.reviewer + " " : "") + "review: " + r.verdict, "verdict-" + r.verdict);
        if (r.feedback) item.appendChild(el("pre", "feedback: " + r.feedback, "feedback"));
        if (r.revised) item.appendChild(el("pre", "revised: " + prediction(r.revised)));
        if (r.note) item.appendChild(el("pre", "note: " + r.note));
        if (r.reason !== undefined) item.appendChild(el("pre", "reason: " + txt(r.reason)));
        (r.findings || []).forEach(function (f) { item.appendChild(findingPre(f)); });
        list.appendChild(item);
      });
      box.appendChild(list);
    }
    if (s.candidates) {
      var cl = el("ol");
      s.candidates.forEach(function (c) {
        cl.appendChild(el("li", "candidate " + c.i + (c.score !== null && c.score !== undefined ? " (score " + c.score + ")" : "") +
          (c.passed === true ? ", passed SAAG" : c.passed === false ? ", failed SAAG" : "") +
          (c.i === s.selected ? ", selected" : "") + ": " + prediction(c.call)));
      });
      box.appendChild(cl);
    }
    if (s.ruling) box.appendChild(el("pre", "guard: " + s.ruling));
    if (s.final) box.appendChild(el("pre", "let through: " + prediction(s.final)));
    if (s.executed) box.appendChild(el("pre", "executed: " + callText(s.executed), "executed"));
    else if (held) box.appendChild(el("pre", "executed: nothing (" + (s.marks.indexOf("blocked") >= 0 ? "blocked" : "withheld") + ")", "executed"));
    (s.results || []).forEach(function (r) {
      var spans = r[3] || [];
      box.appendChild(resultPre((r[2] ? "result" : "refused") + " (" + r[0] + "): ", txt(r[1]), spans,
        (r[2] ? "result" : "result refused") + (spans.length ? " r-injected" : "")));
    });
    (s.notes || []).forEach(function (n) { box.appendChild(el("pre", "note: " + n)); });
    return box;
  }

  function conditionBox(c, user) {
    var box = el("div", null, "condition");
    box.setAttribute("data-label", c.label);
    box.appendChild(el("h6", c.head || c.label + " (" + c.seconds + " s, " + c.reviewer_calls + " reviewer calls)"));
    box.appendChild(verdictBox(c.verdict));
    if (c.note) box.appendChild(el("p", c.note, "note"));
    else if (!c.turns.length) box.appendChild(el("p", "no turn ran"));
    c.turns.forEach(function (t) {
      var turn = el("div", null, "turn" + (t.marks && t.marks.indexOf("checker failed here") >= 0 ? " t-failed" : ""));
      var head = el("div", "turn " + t.i, "turn-head");
      marks(head, t.marks);
      if (t.added) head.appendChild(el("span", "functions added: " + t.added.join(", "), "mark m-added"));
      turn.appendChild(head);
      (t.user || user[t.i] || []).forEach(function (m) { turn.appendChild(el("pre", m[0] + ": " + txt(m[1]), "user")); });
      t.steps.forEach(function (s, k) { turn.appendChild(stepBox(stepOf(s), k)); });
      if (t.answer !== undefined) turn.appendChild(el("pre", "final answer: " + (t.answer === null ? "(none)" : txt(t.answer) || "(empty)"), "answer"));
      box.appendChild(turn);
    });
    return box;
  }

  function conversation(entry) {
    var box = el("div", null, "detail-body conversation");
    var switcher = el("div", null, "view-switch");
    var columns = el("div", null, "columns");
    var views = ["side by side"].concat(entry.conditions.map(function (c) { return c.label; }));
    views.forEach(function (v, i) {
      var b = el("button", v, "view");
      b.type = "button";
      b.setAttribute("aria-pressed", i === 0 ? "true" : "false");
      b.addEventListener("click", function () {
        switcher.querySelectorAll("button.view").forEach(function (o) { o.setAttribute("aria-pressed", o === b ? "true" : "false"); });
        columns.querySelectorAll("div.condition").forEach(function (c) {
          c.hidden = i !== 0 && c.getAttribute("data-label") !== v;
        });
        columns.classList.toggle("single", i !== 0);
      });
      switcher.appendChild(b);
    });
    box.appendChild(switcher);
    entry.conditions.forEach(function (c) { columns.appendChild(conditionBox(c, entry.user)); });
    box.appendChild(columns);
    return box;
  }

  function toggle(button) {
    var row = button.closest("tr");
    var table = row.closest("table");
    var next = row.nextElementSibling;
    if (next && next.classList.contains("detail")) {
      next.remove();
      button.setAttribute("aria-expanded", "false");
      button.textContent = "show";
      return;
    }
    var run = data.runs[Number(table.getAttribute("data-run"))];
    var index = Number(row.getAttribute("data-i"));
    var kind = table.getAttribute("data-kind");
    var detailRow = el("tr", null, "detail");
    var cell = el("td");
    cell.colSpan = row.children.length;
    pool = kind === "security" ? run.security : null;
    if (kind === "security") {
      var sec = run.security;
      cell.appendChild(conversation({ user: [], conditions: sec.groups[sec.records[index].g].map(function (j) {
        return sec.records[j]; }) }));
    } else {
      cell.appendChild(kind === "conversations" ? conversation(run.episodes[index]) : details(run.examples[index]));
    }
    detailRow.appendChild(cell);
    row.after(detailRow);
    button.setAttribute("aria-expanded", "true");
    button.textContent = "hide";
  }

  function collapseAll(table) {
    table.querySelectorAll("tr.detail").forEach(function (r) { r.remove(); });
    table.querySelectorAll("button.expand").forEach(function (b) {
      b.setAttribute("aria-expanded", "false"); b.textContent = "show";
    });
  }

  function applyFilters(form) {
    var table = document.getElementById(form.getAttribute("data-browser"));
    // each control names the column(s) it filters (data-cell); a search matches any of them
    var want = Array.prototype.map.call(form.querySelectorAll("[data-cell]"), function (control) {
      return { value: control.value.trim(), cells: control.getAttribute("data-cell").split(",").map(Number),
               contains: control.getAttribute("data-match") === "contains" };
    });
    collapseAll(table);
    var shown = 0, rows = table.tBodies[0].rows;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i], ok = true;
      for (var k = 0; k < want.length && ok; k++) {
        if (!want[k].value) continue;
        var cells = want[k].cells.map(function (c) { return r.children[c].textContent; });
        var value = want[k].value;
        if (want[k].contains) ok = cells.some(function (t) { return t.toLowerCase().indexOf(value.toLowerCase()) >= 0; });
        else if (value === "flipped") ok = cells[0] === "fixed" || cells[0] === "broken";
        else ok = cells[0] === value;
      }
      r.hidden = !ok;
      if (ok) shown++;
    }
    form.querySelector("output.count").textContent = shown + " of " + rows.length + " " +
      (form.getAttribute("data-noun") || "examples") + " shown";
  }

  function addButtons(table) {
    table.tHead.rows[0].appendChild(el("th", "details"));
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var cell = el("td"), button = el("button", "show", "expand");
      button.type = "button";
      button.setAttribute("aria-expanded", "false");
      var named = table.getAttribute("data-kind") === "security" ? 5 : 1;  // a security row is named by its task and arm
      button.setAttribute("aria-label", "details of " + Array.prototype.slice.call(row.children, 0, named).map(function (c) {
        return c.textContent; }).join(" "));
      cell.appendChild(button);
      row.appendChild(cell);
    });
  }

  function sortBy(table, th) {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    collapseAll(table);
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    function key(row) {
      var text = row.children[index] ? row.children[index].textContent.trim() : "";
      var num = parseFloat(text.replace(/[^0-9eE+\-.]/g, ""));
      return { text: text, num: /^[-+]?[0-9.]/.test(text.replace(/^\[/, "")) && !isNaN(num) ? num : null };
    }
    rows.sort(function (a, b) {
      var ka = key(a), kb = key(b), cmp;
      if (ka.num !== null && kb.num !== null) cmp = ka.num - kb.num;
      else cmp = ka.text.localeCompare(kb.text);
      return ascending ? cmp : -cmp;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  document.querySelectorAll("table.browser").forEach(addButtons);
  document.querySelectorAll("form.filters").forEach(function (form) {
    form.addEventListener("input", function () { applyFilters(form); });
    form.addEventListener("change", function () { applyFilters(form); });
  });
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.tHead.querySelectorAll("th").forEach(function (th) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, th); });
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") sortBy(table, th); });
    });
  });
  document.addEventListener("click", function (e) {
    var button = e.target.closest ? e.target.closest("button.expand") : null;
    if (button) toggle(button);
  });
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details.prompt").forEach(function (d) { d.open = true; });
  });
})();
{% endraw %}
