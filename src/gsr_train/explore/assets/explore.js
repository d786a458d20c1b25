// gsr-train explore: the page's behaviour. Data: #summary (gzip'd JSON, base64) holds one column per
// field of every question; #chunk-<i> holds the detail of questions i*chunk ... (unpacked on opening).
// The state (metric, filters, sort, page, open question) lives in the URL's hash, so a view is a link.
"use strict";
(async function () {
  const $ = (sel) => document.querySelector(sel);
  const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const PER_PAGE = 100;

  async function unpack(id) {
    const text = document.getElementById(id).textContent.trim();
    const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  const S = await unpack("summary");
  const N = S.ids.length;
  const V = S.views;
  const CHUNK = S.chunk;
  const chunks = new Map();
  async function chunkOf(q) {
    const c = Math.floor(q / CHUNK);
    if (!chunks.has(c)) chunks.set(c, await unpack("chunk-" + c));
    return chunks.get(c);
  }

  // every triples view also gets answer_hit@K: its first answer-bearing triple ranks K or better
  for (const v of V) {
    if (!v.first) continue;
    for (const k of [1, 10]) v.values[`answer_hit@${k}`] = v.first.map((r, q) => (v.returned[q] === null ? null : r !== null && r <= k ? 1 : 0));
  }
  // ------------------------------------------------------------------ state in the hash
  const metricNames = [...new Set(V.flatMap((v) => Object.keys(v.values)))];
  const otherDefault = V.findIndex((v) => v.run !== V[0].run);
  const otherView = otherDefault >= 0 ? otherDefault : V.length > 1 ? 1 : 0;
  const shared = metricNames.filter((m) => V[0].values[m] && V[otherView].values[m]);
  const preferred = ["answer_recall@10", "hit", "match@1", "answer_hit@10", "answer_recall"].find((m) => shared.includes(m));
  const defaults = {
    metric: preferred || shared[0] || metricNames[0] || "",
    focus: "0",
    other: String(otherView),
    filter: "all", hops: "all", relation: "", text: "", sort: "", dir: "1", page: "0", q: "",
  };
  function readState() {
    const st = { ...defaults };
    new URLSearchParams(location.hash.slice(1)).forEach((v, k) => { if (k in st) st[k] = v; });
    return st;
  }
  function setState(change) {
    const st = { ...readState(), ...change };
    const p = new URLSearchParams();
    for (const k of Object.keys(st)) if (st[k] !== defaults[k]) p.set(k, st[k]);
    const hash = p.toString();
    if (location.hash.replace(/^#/, "") === hash) return; // no hashchange: nothing to draw again
    document.body.dataset.ready = ""; // now, not when hashchange fires: a reader of ready waits for this state
    location.hash = hash;
  }

  // ------------------------------------------------------------------ figures
  const fig = (x) => (typeof x === "number" ? x.toFixed(3) : fmt(x));
  const fmt = (x) => (x === null || x === undefined ? "–" : typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(3)) : esc(x));
  function figures() {
    $("#runs").innerHTML = S.runs.map((r) => `<b>${esc(r.name)}</b> ${esc(r.folder)} (${esc(r.experiment)}, ${esc(r.dataset)})`).join(" · ") + ` · split <b>${esc(S.split)}</b> · ${N} questions`;
    const names = [...new Set(V.flatMap((v) => Object.keys(v.metrics)))].filter((m) => V.some((v) => typeof v.metrics[m] === "number"));
    let html = "<table><tr><th>metric</th>" + V.map((v) => `<th class="num">${esc(v.label)}<br><span class="muted">K=${esc(v.row.k)}</span></th>`).join("") + "</tr>";
    for (const m of names) {
      html += `<tr><td>${esc(m)}</td>` + V.map((v) => {
        const iv = v.intervals[m];
        return `<td class="num">${fig(v.metrics[m])}${iv ? ` <span class="muted">(${fig(iv[0])}–${fig(iv[1])})</span>` : ""}</td>`;
      }).join("") + "</tr>";
    }
    $("#figures").innerHTML = html + "</table>";
  }

  // ------------------------------------------------------------------ the question table
  const value = (v, m, q) => (V[v].values[m] ? V[v].values[m][q] : null);
  const cls = (x) => (x === null || x === undefined ? "muted" : x <= 0 ? "zero" : x >= 1 ? "full" : "partial");
  function rows(st) {
    const f = +st.focus, o = +st.other, m = st.metric;
    const text = st.text.toLowerCase(), rel = st.relation.toLowerCase();
    const out = [];
    for (let q = 0; q < N; q++) {
      const a = value(f, m, q), b = value(o, m, q);
      if (st.filter === "failed" && !(a !== null && a <= 0)) continue;
      if (st.filter === "partial" && !(a !== null && a < 1)) continue;
      if (st.filter === "better" && !(a !== null && b !== null && a > b)) continue;
      if (st.filter === "worse" && !(a !== null && b !== null && b > a)) continue;
      const h = S.hops[q];
      if (st.hops === "none" ? h >= 0 : st.hops === "3" ? h < 3 : st.hops !== "all" && h !== +st.hops) continue;
      if (rel && !S.chain[q].toLowerCase().includes(rel)) continue;
      if (text) {
        const hay = [S.ids[q], S.questions[q], ...S.answers[q], ...S.topics[q]].join(" ").toLowerCase();
        if (!hay.includes(text)) continue;
      }
      out.push(q);
    }
    if (st.sort) {
      const key = sortKey(st.sort), dir = +st.dir;
      out.sort((x, y) => {
        const kx = key(x), ky = key(y);
        if (kx === ky) return x - y;
        if (kx === null || kx === undefined) return 1;
        if (ky === null || ky === undefined) return -1;
        return (kx < ky ? -1 : 1) * dir;
      });
    }
    return out;
  }
  function sortKey(col) {
    const [kind, v] = col.split(":");
    const st = readState();
    if (kind === "rank") return (q) => V[+v].first[q];
    if (kind === "value") return (q) => value(+v, st.metric, q);
    if (kind === "delta") return (q) => delta(st, q);
    return (q) => S[kind][q];
  }
  function delta(st, q) {
    const a = V[+st.focus].first, b = V[+st.other].first;
    return a && b && a[q] !== null && b[q] !== null ? a[q] - b[q] : null;
  }
  function columns(st) {
    const cols = [["ids", "id"], ["questions", "question"], ["answers", "answers"], ["topics", "topic"], ["hops", "hops", 1], ["edges", "triples", 1]];
    V.forEach((v, i) => {
      if (v.first) cols.push([`rank:${i}`, `${v.label}: first answer rank`, 1]);
      if (v.answer) cols.push([`answer:${i}`, `${v.label}: answer`]);
      if (v.values[st.metric]) cols.push([`value:${i}`, `${v.label}: ${st.metric}`, 1]);
    });
    if (V.length > 1 && V[+st.focus].first && V[+st.other].first && st.focus !== st.other) cols.push(["delta", "rank Δ (focus − other)", 1]);
    return cols;
  }
  function cell(col, q, st) {
    const [kind, v] = col.split(":");
    if (kind === "rank") { const r = V[+v].first[q]; return `<td class="num ${r === null ? "zero" : ""}" data-col="${col}">${r === null ? "none" : r}</td>`; }
    if (kind === "value") { const x = value(+v, st.metric, q); return `<td class="num ${cls(x)}" data-col="${col}">${fmt(x)}</td>`; }
    if (kind === "answer") return `<td data-col="${col}">${esc(V[+v].answer[q])}</td>`;
    if (kind === "delta") return `<td class="num" data-col="delta">${fmt(delta(st, q))}</td>`;
    if (kind === "answers") return `<td>${esc(S.answers[q].join("; "))}${S.n_answers[q] > 5 ? ` <span class="muted">+${S.n_answers[q] - 5}</span>` : ""}</td>`;
    if (kind === "topics") return `<td>${esc(S.topics[q].join("; "))}</td>`;
    const num = kind === "hops" || kind === "edges";
    return `<td class="${num ? "num" : ""}" data-col="${kind}">${esc(S[kind][q])}</td>`;
  }
  function table(st) {
    const list = rows(st);
    const pages = Math.max(1, Math.ceil(list.length / PER_PAGE));
    const page = Math.min(+st.page, pages - 1);
    const cols = columns(st);
    let html = "<table id=\"questions\"><tr>" + cols.map(([c, t, n]) => `<th data-sort="${c}" class="${n ? "num" : ""}">${esc(t)}${st.sort === c ? (st.dir === "1" ? " ▲" : " ▼") : ""}</th>`).join("") + "</tr>";
    for (const q of list.slice(page * PER_PAGE, (page + 1) * PER_PAGE)) {
      html += `<tr class="question${S.ids[q] === st.q ? " open" : ""}" data-q="${q}" data-id="${esc(S.ids[q])}">` + cols.map(([c]) => cell(c, q, st)).join("") + "</tr>";
    }
    $("#table").innerHTML = html + "</table>";
    $("#count").textContent = `${list.length} of ${N} shown`;
    $("#page").textContent = ` page ${page + 1} / ${pages} `;
  }
  function comparisons() {
    // gsr-train compare's paired table of the first run with each other one: a row sets the views,
    // the metric and the filter to the questions behind its difference
    let html = "";
    for (const t of S.paired) {
      html += `<h3>${esc(t.a)} vs ${esc(t.b)} (gsr-train compare)</h3>`;
      if (t.note) { html += `<p class="muted">${esc(t.note)}</p>`; continue; }
      html += "<table class=\"paired\"><tr><th>A</th><th>B</th><th>metric</th><th class=\"num\">questions</th><th class=\"num\">A</th><th class=\"num\">B</th><th class=\"num\">A − B (95% CI)</th><th class=\"num\">p</th></tr>";
      for (const r of t.rows) for (const m of r.metrics) {
        html += `<tr class="paired-row" data-focus="${r.a}" data-other="${r.b}" data-metric="${esc(m.metric)}" data-filter="${m.diff >= 0 ? "better" : "worse"}">` +
          `<td>${esc(V[r.a].label)}</td><td>${esc(V[r.b].label)}</td><td>${esc(m.metric)}</td><td class="num">${m.questions}</td><td class="num">${fig(m.a)}</td><td class="num">${fig(m.b)}</td>` +
          `<td class="num">${fig(m.diff)} <span class="muted">(${fig(m.low)}–${fig(m.high)})</span></td><td class="num">${m.p_value === null ? "–" : m.p_value < 0.001 ? "<0.001" : m.p_value.toFixed(3)}</td></tr>`;
      }
      html += "</table>";
    }
    return html;
  }
  function pairs(st) {
    if (V.length < 2 || st.focus === st.other) { $("#pairs-section").hidden = !S.paired.length; $("#pairs").innerHTML = comparisons(); return; }
    let better = 0, worse = 0, same = 0;
    for (let q = 0; q < N; q++) {
      const a = value(+st.focus, st.metric, q), b = value(+st.other, st.metric, q);
      if (a === null || b === null) continue;
      if (a > b) better++; else if (b > a) worse++; else same++;
    }
    $("#pairs-section").hidden = false;
    $("#pairs").innerHTML = `${esc(st.metric)}: <button data-filter="better" id="pair-better">${esc(V[+st.focus].label)} better: ${better}</button>` +
      `<button data-filter="worse" id="pair-worse">${esc(V[+st.other].label)} better: ${worse}</button><span class="muted">equal: ${same}</span>` + comparisons();
  }

  // ------------------------------------------------------------------ one question
  function detailOf(c, q) {
    const i = q - c.q0, e0 = c.ptr[i], e1 = c.ptr[i + 1];
    const edges = [];
    for (let e = e0; e < e1; e++) {
      edges.push({ h: c.names[c.h[e]], r: c.rels[c.r[e]], t: c.names[c.t[e]], sp: (c.flags[e] & 1) > 0, ans: (c.flags[e] & 2) > 0,
        ranks: c.views.map((v) => (v && v.rank[e] >= 0 ? v.rank[e] + 1 : null)), scores: c.views.map((v) => (v ? v.score[e] : null)) });
    }
    const names = (p, arr, ids) => ids.slice(p[i], p[i + 1]).map((k) => c.names[k]);
    return { edges, topics: names(c.topic_ptr, null, c.topic), answers: names(c.answer_ptr, null, c.answer), fields: c.fields.map((f) => f[String(i)] || null) };
  }
  async function question(st) {
    const sec = $("#question");
    const q = S.ids.indexOf(st.q);
    if (q < 0) { sec.hidden = true; return; }
    const d = detailOf(await chunkOf(q), q);
    sec.hidden = false;
    const draw = +($("#draw") ? $("#draw").value : 10) || 10;
    sec.innerHTML = `<h2 id="question-title">${esc(S.questions[q])} <span class="muted">${esc(S.ids[q])}</span></h2>` +
      `<div class="facts"><div>answers</div><div>${esc(S.answers[q].join("; "))}${S.n_answers[q] > 5 ? " …" : ""}</div>` +
      `<div>topic</div><div>${esc(S.topics[q].join("; "))}</div><div>hops</div><div>${S.hops[q] < 0 ? "no path" : S.hops[q]}</div>` +
      `<div>gold chain</div><div>${esc(S.chain[q]) || "–"}</div><div>graph</div><div>${S.edges[q]} triples; ${d.edges.length} kept here, ${S.edges[q] - d.edges.length} left out</div></div>` +
      perQuestionFigures(q) + viewFields(d) +
      `<h2>Graph</h2><div class="controls"><label>draw each view's top <input id="draw" type="number" min="1" max="50" value="${draw}"></label>` +
      legend(st) + `</div><div id="drawing">${drawing(d, draw, st)}</div>` + tripleTables(d);
    $("#draw").addEventListener("change", () => question(readState()));
    if (opened !== st.q) { opened = st.q; sec.scrollIntoView(); }
  }
  let opened = "";
  const SHOWN = ["answer_hit@1", "answer_hit@10", "answer_recall", "sp_recall@100", "match@1", "end_match@1", "hit", "micro_f1"];
  function perQuestionFigures(q) {
    const all = new Set(V.flatMap((v) => Object.keys(v.values)));
    const names = [...new Set([readState().metric, ...SHOWN])].filter((m) => all.has(m));
    if (!names.length) return "";
    return "<h2>This question's figures</h2><table id=\"question-figures\"><tr><th>view</th>" + (V.some((v) => v.first) ? "<th class=\"num\">first answer rank</th>" : "") +
      names.map((m) => `<th class="num">${esc(m)}</th>`).join("") + "</tr>" +
      V.map((v) => `<tr><td>${esc(v.label)}</td>` + (V.some((w) => w.first) ? `<td class="num" data-first="${v.first ? v.first[q] ?? "" : ""}">${v.first ? v.first[q] ?? "none" : "–"}</td>` : "") +
        names.map((m) => { const x = v.values[m] ? v.values[m][q] : null; return `<td class="num ${cls(x)}">${fmt(x)}</td>`; }).join("") + "</tr>").join("") + "</table>";
  }
  function viewFields(d) {
    let html = "";
    d.fields.forEach((f, i) => {
      if (!f) return;
      html += `<h2>${esc(V[i].label)}</h2>`;
      if (f.prediction !== undefined) html += `<div>answer: <b>${esc([].concat(f.prediction).join("; "))}</b></div>`;
      if (f.response !== undefined) html += `<pre>${esc(f.response)}</pre>`;
      if (f.evidence_shown !== undefined) html += `<div class="muted">evidence shown: ${esc(f.evidence_shown)} of ${esc(f.evidence_total)}</div>`;
      if (f.answer_text !== undefined) html += `<div>answer:</div><pre>${esc(f.answer_text)}</pre>`;
      if (f.facts) html += "<div>facts (encoder / LLM verifier):</div><ul class=\"facts\">" + f.facts.map((x) => `<li>${mark(x.encoder_supported)} ${mark(x.llm_supported)} ${esc(x.fact)}</li>`).join("") + "</ul>";
      if (f.geval) html += Object.entries(f.geval).map(([c, g]) => `<div>G-Eval ${esc(c)}: <b>${fmt(g.rating)}</b> <span class="muted">${esc(g.reason || "")}</span></div>`).join("");
      if (f.evidence) html += `<details><summary>evidence shown</summary><pre>${esc(f.evidence)}</pre></details>`;
      if (f.chains) html += `<div>chains:</div><ul class="chains" data-view="${i}">` + f.chains.map((c) => `<li>${esc(c.topic)}: ${esc([].concat(c.chain).join(" > "))} <span class="muted">${fmt(c.score)}</span></li>`).join("") + "</ul>";
      if (f.beams) html += "<div>beams:</div><ul>" + f.beams.map((b) => `<li>${esc([].concat(b.chain).join(" > "))} <span class="muted">${fmt(b.score)}${b.valid === false ? ", no walk in the graph" : ""}</span></li>`).join("") + "</ul>";
      if (f.paths) html += "<div>paths:</div><ul>" + f.paths.map((p) => `<li>${esc(typeof p === "string" ? p : JSON.stringify(p))}</li>`).join("") + "</ul>";
    });
    return html;
  }
  const mark = (x) => (x === true ? "✓" : x === false ? "✗" : "·");
  function drawnViews(st) {
    // the focus and the other view when they ranked triples, else the first views that did
    const chosen = [...new Set([+st.focus, +st.other])].filter((i) => V[i].first);
    const rest = V.map((v, i) => (v.first ? i : -1)).filter((i) => i >= 0 && !chosen.includes(i));
    return [...chosen, ...rest].slice(0, 2);
  }
  function legend(st) {
    const t = drawnViews(st).map((i) => V[i]);
    return `<div class="legend"><span><i class="swatch" style="background:#2f6fdf"></i>${esc(t[0] ? t[0].label : "")}</span>` +
      (t.length > 1 ? `<span><i class="swatch" style="background:#f79009"></i>${esc(t[1].label)}</span><span><i class="swatch" style="background:#7a5af8"></i>both</span>` : "") +
      `<span><i class="swatch" style="background:#12b76a"></i>shortest path</span><span>● topic (blue) / answer (green)</span></div>`;
  }
  function drawing(d, top, st) {
    const tv = drawnViews(st);
    const drawn = d.edges.filter((e) => e.sp || tv.some((i) => e.ranks[i] !== null && e.ranks[i] <= top)).slice(0, 120);
    if (!drawn.length) return "<p class=\"muted\">nothing to draw: no retrieved or shortest-path triple in the graph</p>";
    const topics = new Set(d.topics), answers = new Set(d.answers), layer = new Map(), adj = new Map();
    const link = (a, b) => { if (!adj.has(a)) adj.set(a, []); adj.get(a).push(b); };
    drawn.forEach((e) => { link(e.h, e.t); link(e.t, e.h); });
    let frontier = [...adj.keys()].filter((n) => topics.has(n));
    frontier.forEach((n) => layer.set(n, 0));
    while (frontier.length) {
      const next = [];
      for (const n of frontier) for (const m of adj.get(n) || []) if (!layer.has(m)) { layer.set(m, layer.get(n) + 1); next.push(m); }
      frontier = next;
    }
    const deepest = Math.max(0, ...layer.values());
    for (const n of adj.keys()) if (!layer.has(n)) layer.set(n, deepest + 1);
    const columns = new Map(), pos = new Map();
    for (const [n, l] of layer) { if (!columns.has(l)) columns.set(l, []); columns.get(l).push(n); }
    let height = 0;
    for (const [l, ns] of columns) ns.forEach((n, k) => { pos.set(n, [40 + l * 260, 24 + k * 36]); height = Math.max(height, 48 + k * 36); });
    const width = 300 + Math.max(...columns.keys()) * 260;
    let svg = `<svg id="graph" width="${width}" height="${height}" xmlns="http://www.w3.org/2000/svg"><defs><marker id="arrow" viewBox="0 0 10 10" refX="16" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#667085"/></marker></defs>`;
    const seen = new Map();
    for (const e of drawn) {
      const [x1, y1] = pos.get(e.h), [x2, y2] = pos.get(e.t);
      const inA = tv[0] !== undefined && e.ranks[tv[0]] !== null && e.ranks[tv[0]] <= top;
      const inB = tv[1] !== undefined && e.ranks[tv[1]] !== null && e.ranks[tv[1]] <= top;
      const c = inA && inB ? "both" : inA ? "v0" : inB ? "v1" : "";
      const pair = [e.h, e.t].sort().join("\u0000"), nth = (seen.get(pair) || 0) + 1;
      seen.set(pair, nth);
      const bend = (x1 === x2 ? 40 : 0) + (nth - 1) * 14, mx = (x1 + x2) / 2 + bend, my = (y1 + y2) / 2 + (nth - 1) * 14;
      const lx = 0.0625 * x1 + 0.375 * mx + 0.5625 * x2, ly = 0.0625 * y1 + 0.375 * my + 0.5625 * y2; // the curve at 3/4
      const ranks = tv.map((i) => e.ranks[i]).filter((r) => r !== null && r <= top).map((r) => "#" + r).join("/");
      svg += `<g class="edge ${c}${e.sp ? " sp" : ""}" data-rank="${tv[0] !== undefined && e.ranks[tv[0]] !== null ? e.ranks[tv[0]] : ""}"><title>${esc(e.h)} — ${esc(e.r)} → ${esc(e.t)}</title>` +
        `<path d="M${x1},${y1} Q${mx},${my} ${x2},${y2}" marker-end="url(#arrow)"/><text x="${lx}" y="${ly - 3}" text-anchor="middle">${esc(e.r.split(".").pop())}${ranks ? " " + ranks : ""}</text></g>`;
    }
    for (const [n, [x, y]] of pos) {
      const kind = topics.has(n) ? "topic" : answers.has(n) ? "answer" : "";
      svg += `<g class="node ${kind}"><title>${esc(n)}</title><circle cx="${x}" cy="${y}" r="7"/><text x="${x + 10}" y="${y + 4}">${esc(n.length > 30 ? n.slice(0, 29) + "…" : n)}</text></g>`;
    }
    const missing = d.answers.filter((a) => !adj.has(a));
    return svg + "</svg>" + `<div class="muted">${drawn.length} triples drawn of ${d.edges.length} kept` +
      (missing.length ? `; answers not reached by them: ${esc(missing.slice(0, 5).join("; "))}` : "") + "</div>";
  }
  function tripleTables(d) {
    let html = "";
    V.forEach((v, i) => {
      if (!v.first) return;
      const list = d.edges.filter((e) => e.ranks[i] !== null).sort((a, b) => a.ranks[i] - b.ranks[i]);
      html += `<h2>${esc(v.label)}: top triples</h2><table class="triples" data-view="${i}"><tr><th class="num">rank</th><th>head</th><th>relation</th><th>tail</th><th class="num">score</th><th>answer</th><th>shortest path</th></tr>` +
        list.map((e) => `<tr><td class="num">${e.ranks[i]}</td><td>${esc(e.h)}</td><td>${esc(e.r)}</td><td>${esc(e.t)}</td><td class="num">${fmt(e.scores[i])}</td><td>${e.ans ? "✓" : ""}</td><td>${e.sp ? "✓" : ""}</td></tr>`).join("") + "</table>";
    });
    return html;
  }

  // ------------------------------------------------------------------ wiring
  function controls(st) {
    $("#metric").innerHTML = metricNames.map((m) => `<option value="${esc(m)}"${m === st.metric ? " selected" : ""}>${esc(m)}</option>`).join("");
    for (const id of ["focus", "other"]) $("#" + id).innerHTML = V.map((v, i) => `<option value="${i}"${String(i) === st[id] ? " selected" : ""}>${esc(v.label)}</option>`).join("");
    for (const id of ["filter", "hops"]) $("#" + id).value = st[id];
    for (const id of ["relation", "text"]) if (document.activeElement !== $("#" + id)) $("#" + id).value = st[id];
  }
  async function render() {
    const st = readState();
    controls(st);
    table(st);
    pairs(st);
    await question(st);
    document.body.dataset.ready = "1";
  }
  for (const id of ["metric", "focus", "other", "filter", "hops"]) $("#" + id).addEventListener("change", (ev) => setState({ [id]: ev.target.value, page: "0" }));
  for (const id of ["relation", "text"]) $("#" + id).addEventListener("input", (ev) => setState({ [id]: ev.target.value, page: "0" }));
  $("#prev").addEventListener("click", () => setState({ page: String(Math.max(0, +readState().page - 1)) }));
  $("#next").addEventListener("click", () => setState({ page: String(+readState().page + 1) }));
  $("#table").addEventListener("click", (ev) => {
    const th = ev.target.closest("th");
    if (th) { const st = readState(); setState({ sort: th.dataset.sort, dir: st.sort === th.dataset.sort && st.dir === "1" ? "-1" : "1" }); return; }
    const tr = ev.target.closest("tr.question");
    if (tr) setState({ q: tr.dataset.id });
  });
  $("#pairs").addEventListener("click", (ev) => {
    const b = ev.target.closest("button");
    if (b) { setState({ filter: b.dataset.filter, page: "0" }); return; }
    const r = ev.target.closest("tr.paired-row");
    if (r) setState({ focus: r.dataset.focus, other: r.dataset.other, metric: r.dataset.metric, filter: r.dataset.filter, page: "0", sort: "" });
  });
  window.addEventListener("hashchange", () => { document.body.dataset.ready = ""; render(); });
  figures();
  await render();
  document.body.dataset.painted = String(Math.round(performance.now()));
})();
