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
    var example = run.examples[Number(row.getAttribute("data-i"))];
    var detailRow = el("tr", null, "detail");
    var cell = el("td");
    cell.colSpan = row.children.length;
    cell.appendChild(details(example));
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
    var table = document.getElementById(form.getAttribute("data-browser") + "-browser");
    var want = [["text", 0], ["category", 1], ["outcome", 2], ["stage", 3]].map(function (pair) {
      return { value: form.elements[pair[0]].value.trim(), cell: pair[1], contains: pair[0] === "text" };
    });
    collapseAll(table);
    var shown = 0, rows = table.tBodies[0].rows;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i], ok = true;
      for (var k = 0; k < want.length && ok; k++) {
        if (!want[k].value) continue;
        var text = r.children[want[k].cell].textContent;
        ok = want[k].contains ? text.toLowerCase().indexOf(want[k].value.toLowerCase()) >= 0 : text === want[k].value;
      }
      r.hidden = !ok;
      if (ok) shown++;
    }
    form.querySelector("output.count").textContent = shown + " of " + rows.length + " examples shown";
  }

  function addButtons(table) {
    table.tHead.rows[0].appendChild(el("th", "details"));
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var cell = el("td"), button = el("button", "show", "expand");
      button.type = "button";
      button.setAttribute("aria-expanded", "false");
      button.setAttribute("aria-label", "details of " + row.children[0].textContent);
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
