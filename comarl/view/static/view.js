/* comarl view: the curves of one or more runs and, step by step, each logged item's rollout tree.
 *
 * Data comes from the page itself (comarl view --out embeds it) or from the local server (/api/poll, asked again
 * every few seconds so a running run is followed). Every text of a run is put on the page as text (textContent),
 * never as HTML. Charts are uPlot's; the tree is nested boxes, one per node, its joint actions listed under it
 * and each joint action's child node nested below it. Record format: comarl/training/sample_records.py.
 */
(function () {
  "use strict";

  const POLL_MS = 2000;
  const PAGE_ITEMS = 40;
  const COLORS = ["#2f5fb3", "#d1495b", "#2a9d5c", "#e09f3e", "#7b4fb8", "#1f9aa8", "#8c564b", "#c2378a",
                  "#6b7a1f", "#555e70"];
  const DASHES = [[], [6, 4], [2, 3], [10, 3, 2, 3]];
  const STEP_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
  const CHARTS = [
    // reward/turn0 is reward/mean: the later turns only
    {id: "reward", title: "Team reward", keys: [/^reward\/mean$/, /^reward\/turn[1-9]\d*$/, /^return\/mean$/]},
    {id: "eval", title: "Held-out evaluation", keys: [/^eval\/reward\/mean$/, /^eval\/reward\/turn[1-9]\d*$/,
                                                     /^eval\/return\/mean$/]},
    {id: "agents", title: "Per-agent return", derived: "agents",
     note: "mean credited return of each agent's samples, over the logged items"},
    {id: "stages", title: "Per-stage return", derived: "stages",
     note: "mean credited return of the samples written at each stage, over the logged items"},
    {id: "spread", title: "Stage spread and routing", keys: [/^stage\d+\/spread$/, /^route\//]},
    {id: "adv", title: "Mean |advantage|", keys: [/\/advantage_abs$/]},
    {id: "loss", title: "Loss", keys: [/^[^/]+\/loss$/, /\/value_loss$/]},
    {id: "kl", title: "KL to the reference", keys: [/^[^/]+\/kl$/]},
    {id: "clip", title: "Clip fraction", keys: [/\/clip_ratio\/region_mean$/]},
    {id: "gap", title: "Log-prob gap, engine vs trainer", keys: [/^gen\/logprob_gap_(mean|max)$/]},
    {id: "tput", title: "Throughput (trained tokens/s)", keys: [/^tokens_per_s$/]},
    {id: "time", title: "Seconds per step", keys: [/^time\/(step|rollout|update)_s$/]},
    {id: "len", title: "Completion length (tokens)", keys: [/^[^/]+\/completion_len$/]},
    {id: "grad", title: "Gradient norm", keys: [/^[^/]+\/grad_norm$/]},
  ];
  const CREDIT = {
    magrpo: "A = R − group mean", grpo: "A = R − group mean",
    marloo: "A = R − mean of the other samples", rloo: "A = R − mean of the other samples",
    maremax: "A = R − greedy return", remax: "A = R − greedy return", maremax_groupmax: "A = R − group max",
    mareinforce: "A = R (no baseline)", reinforce: "A = R (no baseline)",
  };

  const S = {
    runs: [], metrics: [], samples: [], trees: [], notes: [], cursor: null, live: false, failures: 0,
    charts: new Map(), extra: [], expanded: new Set(), shown: PAGE_ITEMS, lastUpdate: null, written: null,
  };
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------ small DOM helpers
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids.flat()) if (kid !== null && kid !== undefined && kid !== false)
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    return e;
  }
  const fmt = (x, d = 3) => (x === null || x === undefined || typeof x !== "number" || !isFinite(x)) ? "–"
    : (Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(2) : x.toFixed(d).replace(/\.?0+$/, "") || "0");
  const signed = (x) => (typeof x === "number" && x > 0 ? "+" : "") + fmt(x);
  const mean = (xs) => { const v = xs.filter((x) => typeof x === "number" && isFinite(x)); return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null; };
  const teamOf = (r) => Array.isArray(r) ? mean(r) : (typeof r === "number" ? r : null);
  const num = (v) => (typeof v === "number" && isFinite(v)) ? v : null;

  /** `text` as text nodes, each (case-insensitive) occurrence of `query` in a <mark>. */
  function marked(text, query) {
    const frag = document.createDocumentFragment();
    if (!query) { frag.append(text); return frag; }
    const low = text.toLowerCase(), q = query.toLowerCase();
    let at = 0;
    for (let i = low.indexOf(q); i >= 0 && at < text.length; i = low.indexOf(q, at)) {
      frag.append(text.slice(at, i), el("mark", {text: text.slice(i, i + q.length)}));
      at = i + q.length;
    }
    frag.append(text.slice(at));
    return frag;
  }

  /** `text` with the words that `before` lacks in <mark class="add"> (a longest common subsequence of the words,
   * spaces aside; past a size bound, only the common start and end count as unchanged). Returns [fragment, words
   * added]. */
  function diffed(before, text) {
    const A = before.split(/\s+/).filter(Boolean), parts = text.split(/(\s+)/);
    const B = [], at = [];  // the words of `text` and where each is in `parts`
    parts.forEach((tok, i) => { if (tok.trim()) { B.push(tok); at.push(i); } });
    const keep = new Array(B.length).fill(false);
    let p = 0, s = 0;
    while (p < A.length && p < B.length && A[p] === B[p]) keep[p++] = true;
    while (s < A.length - p && s < B.length - p && A[A.length - 1 - s] === B[B.length - 1 - s]) keep[B.length - 1 - s++] = true;
    const a = A.slice(p, A.length - s), b = B.slice(p, B.length - s), n = a.length, m = b.length;
    if (n && m && n * m <= 250000) {
      const L = [];
      for (let i = 0; i <= n; i++) L.push(new Uint16Array(m + 1));
      for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
        L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
      for (let i = 0, j = 0; i < n && j < m;) {
        if (a[i] === b[j]) { keep[p + j] = true; i++; j++; } else if (L[i + 1][j] >= L[i][j + 1]) i++; else j++;
      }
    }
    const added = new Set(at.filter((_, w) => !keep[w]));
    const frag = document.createDocumentFragment();
    let run = "", runAdded = false;
    const flush = () => { if (run) frag.append(runAdded ? el("mark", {class: "add", text: run}) : document.createTextNode(run)); run = ""; };
    parts.forEach((tok, i) => {
      const isAdded = added.has(i) || (!tok.trim() && runAdded && added.has(i + 1));  // a space between two new words
      if (isAdded !== runAdded) { flush(); runAdded = isAdded; }
      run += tok;
    });
    flush();
    return [frag, added.size];
  }

  // ------------------------------------------------------------------ data in
  function ingest(data) {
    S.runs = data.runs || S.runs;
    S.live = !!data.live;
    if (data.written) S.written = data.written;
    for (let r = 0; r < S.runs.length; r++) for (const key of ["metrics", "samples", "trees"]) S[key][r] = S[key][r] || [];
    for (const [r, key] of data.reset || []) S[key][r] = [];
    (data.rows || []).forEach((got, r) => {
      for (const key of ["metrics", "samples", "trees"]) for (const row of got[key] || []) S[key][r].push(row);
    });
    for (const n of data.notes || []) S.notes.push(n);
    if (data.cursor) S.cursor = data.cursor;
    const fresh = (data.rows || []).some((g) => g.metrics.length || g.samples.length || g.trees.length);
    if (fresh || !S.lastUpdate) S.lastUpdate = new Date();
    for (let r = 0; r < S.runs.length; r++) derive(r);
    return fresh || (data.notes || []).length > 0 || (data.reset || []).length > 0;
  }

  /** Per run: the records the sample browser shows (trees, or the flat rows of runs without them), with the
   * gain of each item since it was last logged (or, multi-turn, from its first turn to its last). */
  function derive(r) {
    let recs = S.trees[r].length ? S.trees[r] : flatRecords(S.samples[r]);
    recs = recs.slice().sort((x, y) => x.step - y.step || x.item - y.item);
    const last = new Map();
    for (const rec of recs) {
      rec._run = r;
      const prev = rec.key ? last.get(rec.key) : undefined;
      if (prev && num(prev.reward) !== null && num(rec.reward) !== null) {
        rec._gain = rec.reward - prev.reward; rec._gainText = `since step ${prev.step}`;
      } else {
        const turns = turnRewards(rec);
        if (turns.length > 1) { rec._gain = turns[turns.length - 1] - turns[0]; rec._gainText = "over its turns"; }
      }
      if (rec.key) last.set(rec.key, rec);
    }
    S["records" + r] = recs;
  }

  /** Mean team reward of a record's leaves, per turn. */
  function turnRewards(rec) {
    const by = [];
    for (const node of rec.nodes || []) for (const j of node.joints || []) {
      const t = teamOf(j.reward);
      if (t === null) continue;
      (by[node.turn] = by[node.turn] || []).push(t);
    }
    return by.filter(Boolean).map(mean);
  }

  /** Flat samples.jsonl rows ({step, item, reward, agents: [{prompt, response}]}) as one-node records. */
  function flatRecords(rows) {
    const groups = new Map();
    for (const row of rows) {
      if (!Array.isArray(row.agents)) continue;
      const id = `${row.step}|${row.item}`;
      if (!groups.has(id)) groups.set(id, []);
      groups.get(id).push(row);
    }
    const out = [];
    for (const rows of groups.values()) {
      const n = rows[0].agents.length, agents = [...Array(n).keys()];
      const node = {id: 0, parent: null, via: null, turn: 0, stage: 0, agents, prompts: {}, samples: {}, credit: {},
                    joints: [], stage_child: false};
      agents.forEach((i) => {
        node.prompts[i] = String(rows[0].agents[i].prompt ?? "");
        node.samples[i] = rows.map((row) => ({text: String(row.agents[i]?.response ?? ""), return: num(row.reward),
                                              advantage: null, truncated: false}));
        node.credit[i] = {mean: mean(rows.map((row) => num(row.reward)))};
      });
      rows.forEach((row, k) => node.joints.push({samples: Object.fromEntries(agents.map((i) => [i, k])),
                                                 reward: num(row.reward), return: num(row.reward), child: null}));
      out.push({step: rows[0].step, item: rows[0].item, of: null, reward: mean(rows.map((row) => num(row.reward))),
                value: null, agents: agents.map((i) => `agent${i}`), algorithm: {}, nodes: [node], flat: true});
    }
    return out;
  }

  // ------------------------------------------------------------------ header, notes, summary
  function drawHeader() {
    const box = $("runs");
    box.replaceChildren(...S.runs.map((run, r) => el("span", {class: "run", title: run.path},
      el("span", {class: "swatch", style: `border-top-style: ${["solid", "dashed", "dotted", "double"][r % 4]}`}),
      el("span", {class: "name", text: run.name}),
      el("span", {class: "badge " + run.status, text: run.status}))));
    const when = S.lastUpdate ? S.lastUpdate.toLocaleTimeString() : "";
    $("status").textContent = S.live
      ? (S.failures ? `the viewer's server stopped answering (its idle timeout or lifetime ended?); run comarl view again`
                    : `following: last change seen ${when}`)
      : `snapshot written ${S.written || ""}`;
  }

  function drawNotes() {
    const box = $("notes");
    if (!S.notes.length) { box.hidden = true; return; }
    box.hidden = false;
    const items = S.notes.slice(0, 50).map((n) => el("li", {class: "note",
      text: `${S.runs[n.run] ? S.runs[n.run].name : "run " + n.run}, ${n.file}${n.line ? " line " + n.line : ""}: ${n.text}`}));
    const more = S.notes.length > 50 ? el("li", {text: `… and ${S.notes.length - 50} more`}) : null;
    box.replaceChildren(el("strong", {text: `${S.notes.length} line${S.notes.length > 1 ? "s" : ""} could not be read and ${S.notes.length > 1 ? "were" : "was"} left out:`}),
                        el("ul", {}, items, more));
  }

  function drawSummary() {
    const parts = [];
    S.runs.forEach((run, r) => {
      const who = S.runs.length > 1 ? `${run.name}: ` : "";
      const m = S.metrics[r], last = m.length ? m[m.length - 1] : null;
      if (last) parts.push(el("span", {}, who, "step ", el("b", {text: String(last.step)}),
                              ", reward ", el("b", {text: fmt(num(last["reward/mean"]))})));
      const d = run.demo_summary;
      if (d && d.heldout_before && d.heldout_after)
        parts.push(el("span", {}, who, "held-out score ", el("b", {text: fmt(d.heldout_before.mean)}), " → ",
                      el("b", {text: fmt(d.heldout_after.mean)}),
                      d.heldout_gain_stderr !== undefined ? ` (gain ${signed(d.heldout_gain)} ± ${fmt(d.heldout_gain_stderr)})` : ""));
      const ev = run.eval && (run.eval.metrics || (run.eval.a && run.eval.a.metrics));
      if (ev && num(ev["reward/mean"]) !== null)
        parts.push(el("span", {}, who, "comarl eval: reward ", el("b", {text: fmt(ev["reward/mean"])})));
    });
    $("summary").replaceChildren(...parts);
  }

  // ------------------------------------------------------------------ curves
  function metricSeries(r, pattern) {
    const keys = new Set();
    for (const row of S.metrics[r]) for (const k of Object.keys(row)) if (pattern.test(k)) keys.add(k);
    return [...keys].sort().map((k) => ({label: k, run: r,
      points: S.metrics[r].filter((row) => k in row).map((row) => [row.step, num(typeof row[k] === "string" ? NaN : row[k])])}));
  }

  function derivedSeries(r, kind) {
    const recs = S.trees[r];
    if (!recs.length) return [];
    const agents = recs[0].agents || [];
    const stages = Math.max(...recs.map((rec) => (rec.stages || []).length), 0);
    if (kind === "stages" && stages < 2) return [];
    const names = kind === "agents" ? agents : [...Array(stages).keys()].map((s) => `stage ${s}`);
    const acc = names.map(() => new Map());
    for (const rec of recs) for (const node of rec.nodes) for (const [i, samples] of Object.entries(node.samples || {})) {
      const slot = kind === "agents" ? Number(i) : node.stage;
      if (!acc[slot]) continue;
      const m = acc[slot];
      if (!m.has(rec.step)) m.set(rec.step, []);
      for (const s of samples) m.get(rec.step).push(num(s.return));
    }
    return names.map((name, slot) => ({label: name, run: r,
      points: [...acc[slot].entries()].sort((a, b) => a[0] - b[0]).map(([step, xs]) => [step, mean(xs)])}));
  }

  function seriesOf(spec) {
    const out = [];
    S.runs.forEach((run, r) => {
      const got = spec.derived ? derivedSeries(r, spec.derived) : spec.keys.flatMap((p) => metricSeries(r, p));
      for (const s of got) if (s.points.length) out.push({...s, label: (S.runs.length > 1 ? run.name + " · " : "") + s.label});
    });
    return out;
  }

  function chartData(series) {
    const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    return [xs, ...series.map((s) => {
      const y = new Array(xs.length).fill(null);
      for (const [x, v] of s.points) y[at.get(x)] = v;
      return y;
    })];
  }

  function drawCharts() {
    const box = $("charts");
    const specs = CHARTS.concat(S.extra.map((k) => ({id: "extra:" + k, title: k, keys: [new RegExp("^" + k.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&") + "$")], removable: k})));
    const seen = new Set();
    for (const spec of specs) {
      const series = seriesOf(spec);
      if (!series.length) continue;
      seen.add(spec.id);
      const data = chartData(series);
      const sig = series.map((s) => s.label).join("\n");
      let c = S.charts.get(spec.id);
      if (c && c.sig === sig) { c.u.setData(data); box.append(c.card); continue; }
      if (c) c.u.destroy();
      const plot = el("div", {class: "plot"});
      const card = el("div", {class: "chart", "data-chart": spec.id},
        spec.removable ? el("button", {class: "remove", title: "remove this chart", text: "×",
                                       onclick: () => { S.extra = S.extra.filter((k) => k !== spec.removable); removeChart(spec.id); drawCharts(); fillExtra(); }}) : null,
        el("h3", {text: spec.title}), spec.note ? el("p", {class: "note", text: spec.note}) : null, plot);
      box.append(card);
      const keysInChart = [...new Set(series.map((s) => s.label.replace(/^.* · /, "")))];
      const opts = {
        width: Math.max(plot.clientWidth || card.clientWidth - 16, 200), height: 190,
        scales: {x: {time: false}},
        axes: [{label: "step", size: 36, labelSize: 14, incrs: STEP_INCRS, values: (u, xs) => xs.map((x) => String(x))},
               {size: 56, values: (u, ys) => ys.map((y) => y !== 0 && Math.abs(y) < 1e-3 ? y.toExponential(0) : fmt(y, 3))}],
        legend: {live: true},
        series: [{label: "step"}].concat(series.map((s) => ({
          label: s.label, width: 1.6, spanGaps: true,
          stroke: COLORS[keysInChart.indexOf(s.label.replace(/^.* · /, "")) % COLORS.length],
          dash: DASHES[s.run % DASHES.length], points: {show: data[0].length <= 40, size: 4},
          value: (u, v) => fmt(v, 4)}))),
      };
      c = {u: new uPlot(opts, data, plot), card, sig};
      S.charts.set(spec.id, c);
    }
    for (const id of [...S.charts.keys()]) if (!seen.has(id)) removeChart(id);
  }

  function removeChart(id) {
    const c = S.charts.get(id);
    if (!c) return;
    c.u.destroy(); c.card.remove(); S.charts.delete(id);
  }

  function fillExtra() {
    const keys = new Set();
    S.metrics.forEach((rows) => { for (const row of rows) for (const k of Object.keys(row)) if (k !== "step" && k !== "time") keys.add(k); });
    const sel = $("extra"), had = sel.value;
    sel.replaceChildren(el("option", {value: "", text: `choose a metric (${keys.size})`}),
      ...[...keys].sort().filter((k) => !S.extra.includes(k)).map((k) => el("option", {value: k, text: k})));
    sel.value = had && keys.has(had) ? had : "";
  }

  function resizeCharts() {
    for (const c of S.charts.values()) {
      const w = c.card.clientWidth - 16;
      if (w > 0 && Math.abs(w - c.u.width) > 2) c.u.setSize({width: w, height: 190});
    }
  }

  // ------------------------------------------------------------------ sample browser: filters
  function filtersFromForm() {
    const v = (id) => $(id).value;
    return {run: Number(v("f-run") || 0), step: v("f-step"), follow: $("f-follow").checked,
            min: v("f-min") === "" ? null : Number(v("f-min")), max: v("f-max") === "" ? null : Number(v("f-max")),
            agent: v("f-agent"), sort: v("f-sort"), search: v("f-search").trim()};
  }

  function fillFilters() {
    const runSel = $("f-run"), r0 = Number(runSel.value || 0);
    if (runSel.options.length !== S.runs.length)
      runSel.replaceChildren(...S.runs.map((run, r) => el("option", {value: r, text: run.name})));
    runSel.value = String(Math.min(r0, Math.max(S.runs.length - 1, 0)));
    runSel.parentElement.hidden = S.runs.length < 2;
    const r = Number(runSel.value || 0), recs = S["records" + r] || [];
    const steps = [...new Set(recs.map((rec) => rec.step))].sort((a, b) => a - b);
    const stepSel = $("f-step"), had = stepSel.value, follow = $("f-follow").checked;
    const count = (s) => recs.filter((rec) => rec.step === s).length;
    stepSel.replaceChildren(el("option", {value: "all", text: `all steps (${steps.length})`}),
      ...steps.map((s) => el("option", {value: s, text: `step ${s} (${count(s)} item${count(s) === 1 ? "" : "s"})`})));
    const newest = steps.length ? String(steps[steps.length - 1]) : "all";
    stepSel.value = follow || !had || (had !== "all" && !steps.includes(Number(had))) ? newest : had;
    const agentSel = $("f-agent"), agents = recs.length ? recs[recs.length - 1].agents || [] : [];
    const hadAgent = agentSel.value;
    if (agentSel.options.length !== agents.length + 1)
      agentSel.replaceChildren(el("option", {value: "", text: "all agents"}),
                               ...agents.map((a, i) => el("option", {value: i, text: a})));
    agentSel.value = hadAgent;
  }

  function textOf(rec) {
    if (rec._text === undefined) {
      const parts = [];
      for (const node of rec.nodes) {
        for (const p of Object.values(node.prompts || {})) parts.push(Array.isArray(p) ? p.join("\n") : p);
        for (const ss of Object.values(node.samples || {})) for (const s of ss) parts.push(s.text);
      }
      rec._text = parts.join("\n").toLowerCase();
    }
    return rec._text;
  }

  function selected(f) {
    let recs = (S["records" + f.run] || []).filter((rec) => {
      if (f.step !== "all" && rec.step !== Number(f.step)) return false;
      const rw = num(rec.reward);
      if (f.min !== null && !(rw !== null && rw >= f.min)) return false;
      if (f.max !== null && !(rw !== null && rw <= f.max)) return false;
      if (f.agent !== "" && !rec.nodes.some((n) => (n.agents || []).includes(Number(f.agent)))) return false;
      return !f.search || textOf(rec).includes(f.search.toLowerCase());
    });
    const by = {
      best: (a, b) => (num(b.reward) ?? -Infinity) - (num(a.reward) ?? -Infinity),
      worst: (a, b) => (num(a.reward) ?? Infinity) - (num(b.reward) ?? Infinity),
      improved: (a, b) => (b._gain ?? -Infinity) - (a._gain ?? -Infinity),
      item: (a, b) => a.step - b.step || a.item - b.item,
    }[f.sort] || ((a, b) => a.step - b.step || a.item - b.item);
    recs = recs.slice().sort(by);
    if (f.sort === "improved") recs = recs.filter((rec) => rec._gain !== undefined).concat(recs.filter((rec) => rec._gain === undefined));
    return recs;
  }

  // ------------------------------------------------------------------ sample browser: items
  /** The item cards; unless `force`, only when the list would differ (a running run's new metrics leave the
   * cards, and the branches a reader opened, as they are). */
  function drawItems(force = true) {
    const f = filtersFromForm();
    const all = S["records" + f.run] || [], recs = selected(f);
    const shown = recs.slice(0, S.shown);
    const sig = JSON.stringify([f, S.shown, recs.length, shown.map(recId), shown.map((r) => r._gain)]);
    if (!force && sig === S.itemsSig) return;
    S.itemsSig = sig;
    const here = f.step === "all" ? [] : all.filter((rec) => rec.step === Number(f.step));
    const of = here.length ? here[0].of : null;
    $("count").textContent = !all.length
      ? (S.runs.length ? "This run has no logged samples yet (train.run.log_samples_steps; trees.jsonl)." : "")
      : `${recs.length} of ${f.step === "all" ? all.length : here.length} logged items match` +
        (of && of > here.length ? ` (the step had ${of} items; train.run.log_samples_max_kb kept ${here.length})` : "");
    const box = $("items");
    const cards = shown.map((rec, n) => itemCard(rec, f, n === 0 && !S.expanded.size));
    box.replaceChildren(...cards);
    if (recs.length > shown.length)
      box.append(el("button", {class: "more-items", text: `show ${Math.min(PAGE_ITEMS, recs.length - shown.length)} more`,
                               onclick: () => { S.shown += PAGE_ITEMS; drawItems(); }}));
  }

  const recId = (rec) => `${rec._run}|${rec.step}|${rec.item}`;

  function itemCard(rec, f, openFirst) {
    const id = recId(rec), open = S.expanded.has(id) || openFirst;
    const agent = f.agent === "" ? null : Number(f.agent);
    const root = rec.nodes[0];
    const who = agent !== null ? agent : (root ? root.agents[0] : 0);
    const first = root && root.samples && root.samples[who] && root.samples[who][0];
    const gain = rec._gain !== undefined
      ? el("span", {class: "gain " + (rec._gain > 0 ? "pos" : rec._gain < 0 ? "neg" : ""), text: `${signed(rec._gain)} ${rec._gainText}`}) : null;
    const head = el("button", {class: "head", type: "button", "aria-expanded": open ? "true" : "false"},
      el("div", {class: "facts"},
        el("span", {text: `step ${rec.step}`}), el("span", {text: `item ${rec.item}${rec.id ? " · " + rec.id : ""}`}),
        el("span", {class: "reward", text: `reward ${fmt(num(rec.reward))}`}),
        num(rec.value) !== null ? el("span", {text: `value ${fmt(rec.value)}`}) : null, gain,
        rec.cut ? el("span", {class: "metric", text: `${rec.cut} texts shortened (size cap)`}) : null,
        rec.too_big ? el("span", {class: "metric", text: `tree of ${Math.round(rec.too_big / 1024)} KiB over the size cap: not logged`}) : null),
      first ? el("div", {class: "preview"}, `${(rec.agents || [])[who] || "agent" + who}: `, first.text.slice(0, 200)) : null);
    const card = el("article", {class: "item", "data-step": rec.step, "data-item": rec.item}, head);
    const body = el("div", {class: "body"});
    const fill = () => body.replaceChildren(treeView(rec, f));
    if (open) { fill(); card.append(body); }
    head.addEventListener("click", () => {
      const now = head.getAttribute("aria-expanded") !== "true";
      head.setAttribute("aria-expanded", now ? "true" : "false");
      if (now) { S.expanded.add(id); fill(); card.append(body); } else { S.expanded.delete(id); body.remove(); }
    });
    return card;
  }

  function graphLine(rec) {
    const st = rec.stages || [];
    if (st.length < 2) return null;
    const names = rec.agents || [];
    const parts = st.map((s, i) => `${i}: ${s.agents.map((a) => names[a] || a).join(", ")} (${s.kind}` +
      (s.reads ? `; reads ${Object.entries(s.reads).map(([a, rs]) => `${names[a] || a} ← ${rs.map((x) => names[x] || x).join(", ") || "nobody"}`).join("; ")}` : "") +
      (s.router !== undefined ? `; router ${names[s.router] || s.router}` : "") + ")");
    return el("div", {class: "graph", text: "Team graph, stage " + parts.join(" → stage ")});
  }

  function treeView(rec, f) {
    if (!rec.nodes.length) return el("p", {class: "empty", text: "no tree in this record"});
    const frag = document.createDocumentFragment();
    frag.append(graphLine(rec) || "");
    const alg = rec.algorithm || {};
    if (alg.name) frag.append(el("div", {class: "graph", text: `Credit: ${alg.name}${alg.summary ? " (" + alg.summary + ")" : ""}` +
      `${alg.scaled ? ", advantages divided by the group std" : ""}. R: the sample's credited return; A: its advantage.`}));
    const body = nodeView(rec, rec.nodes[0], f, 0);
    frag.append(overview(rec, body), body);
    return frag;
  }

  /** The whole tree at a glance (SVG): a box per node, at its depth; under it a dot per joint action, coloured
   * by its team reward (red lowest, green highest in the item; grey: a stage edge, which has no reward); a line
   * from each dot to the node it leads to. A dot opens that joint action in the outline below. */
  function overview(rec, outline) {
    const SVG = "http://www.w3.org/2000/svg", ROW = 58, BOX = 18;
    const width = new Map(), depth = new Map([[0, 0]]);
    const measure = (id) => {
      const node = rec.nodes[id];
      let w = 0;
      for (const j of node.joints) {
        if (j.child !== null && j.child !== undefined && rec.nodes[j.child]) {
          depth.set(j.child, depth.get(id) + 1);
          w += measure(j.child);
        } else w += 1;
      }
      width.set(id, Math.max(w, 1));
      return width.get(id);
    };
    const leaves = measure(0);
    const U = Math.max(22, Math.min(64, Math.floor(560 / leaves)));  // px per joint action at the ends
    if (leaves > 400) return el("div", {class: "graph", text: `${leaves} joint actions: too many to draw at a glance; the outline below has them all.`});
    const rewards = rec.nodes.flatMap((n) => n.joints.map((j) => teamOf(j.reward))).filter((x) => x !== null);
    const lo = Math.min(...rewards), hi = Math.max(...rewards);
    const colour = (r) => r === null ? "#a9b0bd" : `hsl(${hi > lo ? Math.round(120 * (r - lo) / (hi - lo)) : 60}, 65%, 42%)`;
    const levels = Math.max(...depth.values()) + 1;
    const svg = document.createElementNS(SVG, "svg");
    const W = leaves * U + 8, H = levels * ROW + 4;
    for (const [k, v] of Object.entries({width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
                                         "aria-label": `the tree: ${rec.nodes.length} nodes, ${leaves} joint actions at its ends`}))
      svg.setAttribute(k, v);
    const add = (tag, attrs, title) => {
      const e = document.createElementNS(SVG, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (title) { const t = document.createElementNS(SVG, "title"); t.textContent = title; e.append(t); }
      svg.append(e);
      return e;
    };
    const nm = (i) => (rec.agents || [])[i] || "agent" + i;
    const staged = (rec.stages || []).length > 1;
    const place = (id, x0) => {
      const node = rec.nodes[id], y = 2 + depth.get(id) * ROW, w = width.get(id) * U;
      const what = `turn ${node.turn}, stage ${node.stage}: ${node.agents.map(nm).join(", ")}`;
      add("rect", {x: x0 + 3, y, width: w - 6, height: BOX, rx: 4, class: "ov-node"}, what);
      const short = `t${node.turn}${staged ? " s" + node.stage : ""} ${node.agents.map(nm).join(", ")}`;
      const fits = Math.floor((w - 12) / 6.5);
      if (fits >= 3) add("text", {x: x0 + 8, y: y + 13, class: "ov-label"}).textContent =
        short.length > fits ? short.slice(0, fits - 1) + "…" : short;
      let x = x0;
      node.joints.forEach((j, jn) => {
        const has = j.child !== null && j.child !== undefined && rec.nodes[j.child];
        const jw = (has ? width.get(j.child) : 1) * U, cx = x + jw / 2, cy = y + BOX + 9;
        if (has) {
          add("line", {x1: cx, y1: cy, x2: cx, y2: y + ROW, class: "ov-edge"});
          place(j.child, x);
        }
        const r = teamOf(j.reward);
        const label = `joint ${jn}: ${Object.entries(j.samples || {}).filter(([, k]) => k >= 0).map(([i, k]) => `${nm(i)} #${k}`).join(", ")}` +
          (r !== null ? `, reward ${fmt(r)}` : "") + (j.return !== undefined ? `, return ${Array.isArray(j.return) ? j.return.map((v) => fmt(v)).join(" / ") : fmt(j.return)}` : "");
        const dot = add("circle", {cx, cy, r: 6, fill: colour(r), class: "ov-joint", "data-node": id, "data-joint": jn, tabindex: 0}, label);
        const go = () => reveal(rec, outline, id, jn);
        dot.addEventListener("click", go);
        dot.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
        x += jw;
      });
    };
    place(0, 4);
    return el("div", {class: "overview"}, svg, el("div", {class: "graph",
      text: "The tree: a box per node (t: turn, s: stage), a dot per joint action coloured by its reward " +
            "(red: the item's lowest, green: its highest, grey: none yet, a later stage follows); click a dot to open it below."}));
  }

  /** Open the outline's branches down to node `id` and show its joint action `jn`. */
  function reveal(rec, outline, id, jn) {
    const path = [];
    for (let n = rec.nodes[id]; n && n.parent !== null && n.parent !== undefined; n = rec.nodes[n.parent]) path.unshift([n.parent, n.via]);
    for (const [p, via] of path) {
      const d = outline.parentNode.querySelector(`.node[data-node="${p}"] > .joints > .joint[data-joint="${via}"] > details.branch`);
      if (d) { d._fill(); d.open = true; }
    }
    const target = outline.parentNode.querySelector(`.node[data-node="${id}"] > .joints > .joint[data-joint="${jn}"]`);
    if (target) {
      target.scrollIntoView({block: "center"});
      target.classList.remove("flash"); void target.offsetWidth; target.classList.add("flash");
    }
  }

  /** What a node's agents read on this branch in this turn: the earlier stages' samples, from its ancestors. */
  function reads(rec, node) {
    const out = [];
    for (let n = node; n && n.parent !== null && n.parent !== undefined;) {
      const parent = rec.nodes[n.parent];
      if (!parent || parent.turn !== node.turn) break;
      const j = parent.joints[n.via];
      if (j) for (const [i, k] of Object.entries(j.samples)) if (k >= 0) out.unshift(`${(rec.agents || [])[i] || "agent" + i} #${k}`);
      n = parent;
    }
    return out;
  }

  /** Agent i's prompt one turn earlier on this branch (for the highlighted difference), or null. */
  function earlierPrompt(rec, node, i) {
    for (let n = node; n && n.parent !== null && n.parent !== undefined;) {
      n = rec.nodes[n.parent];
      if (n && n.turn < node.turn && n.prompts && n.prompts[i] !== undefined && !Array.isArray(n.prompts[i])) return [n.prompts[i], n.turn];
    }
    return null;
  }

  function creditLine(rec, node, i) {
    const c = (node.credit || {})[i] || {}, alg = rec.algorithm || {};
    const how = alg.critic ? "A from the critic's GAE" : (CREDIT[alg.name] || "");
    const bits = [`group mean R ${fmt(num(c.mean))}`];
    if (c.baseline !== undefined) bits.push(`greedy return ${fmt(num(c.baseline))}`);
    if (how) bits.push(how + (alg.scaled ? " ÷ group std" : ""));
    return bits.join(" · ");
  }

  function nodeView(rec, node, f, depth) {
    const names = rec.agents || [];
    const nm = (i) => names[i] || "agent" + i;
    const agentSel = f.agent === "" ? null : Number(f.agent);
    const st = (rec.stages || [])[node.stage];
    const box = el("div", {class: "node", "data-node": node.id, "data-turn": node.turn, "data-stage": node.stage});
    const rd = reads(rec, node);
    box.append(el("div", {class: "node-head"},
      el("span", {text: `turn ${node.turn}${(rec.stages || []).length > 1 ? " · stage " + node.stage : ""} · ${node.agents.map(nm).join(", ")}`}),
      st && st.kind === "routed" ? el("span", {class: "reads", text: `routed by ${nm(st.router)} to ${node.agents.map(nm).join(", ")}`}) : null,
      rd.length ? el("span", {class: "reads", text: `reads ${rd.join(", ")}`}) : null));
    let maxAdv = 0;
    for (const ss of Object.values(node.samples || {})) for (const s of ss) maxAdv = Math.max(maxAdv, Math.abs(num(s.advantage) || 0));
    for (const i of node.agents) {
      if (agentSel !== null && i !== agentSel) continue;
      const prompt = (node.prompts || {})[i];
      const block = el("div", {class: "agent", "data-agent": i},
        el("div", {class: "agent-head"}, el("b", {text: nm(i)}), " · ", el("span", {class: "credit", text: creditLine(rec, node, i)})));
      if (prompt !== undefined) block.append(promptView(rec, node, i, prompt, f));
      const list = el("ol", {class: "samples"});
      ((node.samples || {})[i] || []).forEach((s, k) => {
        const a = num(s.advantage), cls = a === null ? "" : a > 0 ? "pos" : a < 0 ? "neg" : "";
        list.append(el("li", {class: "sample " + cls, "data-k": k},
          el("span", {class: "k", text: "#" + k}),
          el("pre", {class: "text"}, marked(s.text || "", f.search), s.text ? null : el("span", {class: "empty", text: "(empty)"})),
          el("span", {class: "nums"}, `R ${fmt(num(s.return))}`, s.truncated ? el("span", {class: "flag", text: " · cut at max_new_tokens"}) : null,
             a !== null ? el("span", {class: "adv " + cls, text: `A ${signed(a)}`}) : null,
             a !== null && maxAdv > 0 ? el("span", {class: "bar adv " + cls, style: `width: ${Math.round(40 * Math.abs(a) / maxAdv)}px`}) : null)));
      });
      block.append(list);
      box.append(block);
    }
    box.append(jointsView(rec, node, f, depth));
    return box;
  }

  function promptView(rec, node, i, prompt, f) {
    const texts = Array.isArray(prompt) ? prompt : [prompt];
    const before = texts.length === 1 ? earlierPrompt(rec, node, i) : null;
    const pre = el("pre");
    let label = `prompt · ${texts[0].length} characters`;
    if (Array.isArray(prompt)) label = `prompts · one per joint action (${texts.length})`;
    if (before && !f.search) {
      const [frag, added] = diffed(before[0], texts[0]);
      pre.append(frag);
      label += ` · ${added} word${added === 1 ? "" : "s"} new since turn ${before[1]} (highlighted)`;
    } else {
      texts.forEach((t, j) => { if (texts.length > 1) pre.append(el("b", {text: `joint ${j}:\n`})); pre.append(marked(t, f.search), texts.length > 1 ? "\n\n" : ""); });
    }
    const open = !!f.search && texts.some((t) => t.toLowerCase().includes(f.search.toLowerCase()));
    return el("details", {class: "prompt", open}, el("summary", {text: label}), pre);
  }

  function jointsView(rec, node, f, depth) {
    const nm = (i) => (rec.agents || [])[i] || "agent" + i;
    const list = el("ul", {class: "joints"});
    const kids = node.joints.filter((j) => j.child !== null && j.child !== undefined).length;
    node.joints.forEach((j, jn) => {
      const chips = Object.entries(j.samples || {}).filter(([, k]) => k >= 0).map(([i, k]) => el("span", {class: "chip", text: `${nm(i)} #${k}`}));
      const reward = j.reward === undefined ? null
        : Array.isArray(j.reward) ? `reward ${j.reward.map((x) => fmt(x)).join(" / ")}` : `reward ${fmt(j.reward)}`;
      const ret = j.return === undefined ? null : Array.isArray(j.return) ? `return ${j.return.map((x) => fmt(x)).join(" / ")}` : `return ${fmt(j.return)}`;
      const metrics = Object.entries(j.metrics || {});
      const line = el("div", {class: "line"}, el("span", {class: "j", text: `joint ${jn}`}), chips,
        reward ? el("span", {text: reward}) : null, ret ? el("span", {class: "metric", text: ret}) : null,
        j.values ? el("span", {class: "metric", text: `critic ${j.values.map((v) => fmt(v)).join(" / ")}`}) : null,
        j.truncated ? el("span", {class: "metric", text: "cut at num_turns"}) : null,
        metrics.length ? el("span", {class: "metric", title: metrics.map(([k, v]) => `${k} ${fmt(v, 4)}`).join("\n"),
                                     text: metrics.slice(0, 5).map(([k, v]) => `${k} ${fmt(v)}`).join(" · ") + (metrics.length > 5 ? " …" : "")}) : null);
      const item = el("li", {class: "joint", "data-joint": jn}, line);
      if (j.view && j.view.length) item.append(el("details", {class: "view"}, el("summary", {text: "the environment's view"}), envView(j.view)));
      if (j.next_prompts) item.append(el("details", {class: "prompt"}, el("summary", {text: "what the agents would read next (cut at num_turns)"}),
        el("pre", {}, j.next_prompts.map((p, i) => `[${nm(i)}]\n${p}`).join("\n\n"))));
      if (j.child !== null && j.child !== undefined && rec.nodes[j.child]) {
        const child = rec.nodes[j.child];
        const label = child.turn > node.turn ? `turn ${child.turn}: the agents after this joint action`
                                             : `stage ${child.stage}: ${child.agents.map(nm).join(", ")} on this branch`;
        const open = depth === 0 && kids <= 2;
        const d = el("details", {class: "branch", open}, el("summary", {text: label}));
        const inner = el("div", {class: "children"});
        const fill = () => { if (!inner.childNodes.length) inner.append(nodeView(rec, child, f, depth + 1)); };
        d._fill = fill;
        if (open || f.search) { fill(); d.open = true; }
        d.addEventListener("toggle", () => { if (d.open) fill(); });
        d.append(inner);
        item.append(d);
      }
      list.append(item);
    });
    return list;
  }

  function envView(blocks) {
    const box = el("div", {class: "env-view"});
    for (const b of blocks) {
      if (b.title) box.append(el("h3", {text: b.title}));
      if (typeof b.text === "string") box.append(el("pre", {text: b.text}));
      else if (b.table) box.append(el("table", {}, el("thead", {}, el("tr", {}, (b.table.columns || []).map((c) => el("th", {text: c})))),
        el("tbody", {}, (b.table.rows || []).map((row) => el("tr", {}, row.map((c) => el("td", {text: c === null ? "" : String(c)})))))));
      else if (b.checks) box.append(el("ul", {}, b.checks.map(([label, ok]) => el("li", {class: ok ? "ok" : "bad", text: `${ok ? "✓" : "✗"} ${label}`}))));
    }
    return box;
  }

  // ------------------------------------------------------------------ drawing and following
  function drawAll() {
    for (const [name, fn] of [["header", drawHeader], ["notes", drawNotes], ["summary", drawSummary], ["curves", drawCharts],
                              ["metric list", fillExtra], ["filters", fillFilters], ["samples", () => drawItems(false)]]) {
      try { fn(); } catch (e) {  // one part failing never blanks the page
        S.notes.push({run: -1, file: "page", line: 0, text: `drawing the ${name} failed: ${e && e.message}`});
        try { drawNotes(); } catch (e2) { /* nothing more to do */ }
      }
    }
  }

  async function follow() {
    try {
      const url = "api/poll" + (S.cursor ? "?cursor=" + encodeURIComponent(JSON.stringify(S.cursor)) : "");
      const resp = await fetch(url, {cache: "no-store"});
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const data = await resp.json();
      S.failures = 0;
      if (ingest(data)) drawAll(); else drawHeader();
      setTimeout(follow, data.more ? 0 : POLL_MS);
    } catch (e) {
      S.failures++;
      drawHeader();
      if (S.failures < 5) setTimeout(follow, POLL_MS * S.failures);
    }
  }

  function start() {
    for (const id of ["f-run", "f-step", "f-agent", "f-sort"]) $(id).addEventListener("change", () => { S.shown = PAGE_ITEMS; if (id === "f-run") fillFilters(); drawItems(); });
    $("f-step").addEventListener("change", () => { $("f-follow").checked = false; });
    $("f-follow").addEventListener("change", () => { fillFilters(); drawItems(); });
    for (const id of ["f-min", "f-max", "f-search"]) $(id).addEventListener("input", () => { S.shown = PAGE_ITEMS; drawItems(); });
    $("filters").addEventListener("submit", (e) => e.preventDefault());
    $("extra").addEventListener("change", (e) => {
      if (e.target.value && !S.extra.includes(e.target.value)) S.extra.push(e.target.value);
      drawCharts(); fillExtra();
    });
    let t = null;
    window.addEventListener("resize", () => { clearTimeout(t); t = setTimeout(resizeCharts, 150); });
    const embedded = document.getElementById("comarl-data");
    if (embedded) {
      let data;
      try { data = JSON.parse(embedded.textContent); } catch (e) {
        data = {runs: [], rows: [], notes: [{run: -1, file: "page", line: 0, text: "the embedded data is not valid JSON"}]};
      }
      ingest(data);
      drawAll();
    } else {
      S.live = true;
      follow();
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
