// arbiter serve: the jobs list and the job page. Plain script, no dependency, nothing fetched
// but this server's own API. Text from the API is put in the page as text (never as HTML).
// The token is kept in sessionStorage (this tab only) and sent as `Authorization: Bearer`
// on POSTs; the server sets no cookie.
"use strict";

(function () {
  const TOKEN_KEY = "arbiter-serve-token";

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function $(id) {
    return document.getElementById(id);
  }

  // An element with attributes and children (strings become text nodes).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "onclick") e.addEventListener("click", v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function say(text, bad) {
    const m = $("message");
    if (!m) return;
    m.textContent = text;
    m.className = bad ? "message bad" : "message";
    m.hidden = !text;
  }

  function tokenForm() {
    const form = $("token-form");
    if (!form) return;
    const state = () => {
      $("token-state").textContent = token() ? "a token is kept for this tab" : "no token kept";
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = $("token").value.trim();
      if (v) sessionStorage.setItem(TOKEN_KEY, v);
      $("token").value = "";
      state();
    });
    $("token-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      state();
    });
    state();
  }

  async function post(url) {
    const headers = { "Content-Type": "application/json" };
    if (token()) headers["Authorization"] = "Bearer " + token();
    const r = await fetch(url, { method: "POST", headers, body: "{}", credentials: "omit" });
    let body = null;
    try {
      body = await r.json();
    } catch (_) {
      body = null;
    }
    if (!r.ok) {
      let msg = (body && body.error) || r.status + " " + r.statusText;
      if (r.status === 401) msg += " (enter the server's token above)";
      throw new Error(msg);
    }
    return body;
  }

  async function getJson(url) {
    const r = await fetch(url, { credentials: "omit", cache: "no-store" });
    const body = await r.json();
    if (!r.ok) throw new Error((body && body.error) || r.status + " " + r.statusText);
    return body;
  }

  function pct(x) {
    return x === null || x === undefined ? "–" : (x * 100).toFixed(1) + "%";
  }

  function enc(id) {
    return encodeURIComponent(id);
  }

  function progress(counts) {
    const done = counts.trials;
    const planned = counts.planned;
    const text = planned === null || planned === undefined ? done + " trials" : done + " / " + planned;
    const bar = el("progress", { max: planned || 1, value: planned ? Math.min(done, planned) : 0 });
    return [bar, el("span", { class: "count" }, text)];
  }

  // A button that posts to `url`, then calls `after` with the answer.
  function action(label, url, after, danger) {
    const b = el("button", { type: "button", class: danger ? "danger" : null });
    b.textContent = label;
    b.addEventListener("click", async () => {
      b.disabled = true;
      try {
        const answer = await post(url);
        say(label + ": done");
        if (after) after(answer);
      } catch (e) {
        say(label + ": " + e.message, true);
      } finally {
        b.disabled = false;
      }
    });
    return b;
  }

  // ---- the jobs list ---------------------------------------------------------------------

  const shown = new Map(); // job id → the JSON its row was drawn from

  function jobRow(job) {
    const base = "/api/jobs/" + enc(job.id);
    const status = job.status + (job.cancelled ? " (cancelled)" : "");
    const actions = el("td", { class: "l actions-cell" });
    if (job.status === "running") {
      actions.append(action("Cancel", base + "/cancel", refreshJobs, true));
    }
    if (job.status === "interrupted") {
      actions.append(action("Resume", base + "/resume", refreshJobs));
    }
    if (job.status !== "running" && job.counts.infra > 0) {
      actions.append(action("Re-run infra errors", base + "/retry-infra", refreshJobs));
    }
    return el(
      "tr",
      { "data-job": job.id, "data-status": job.status, "data-trials": job.counts.trials },
      el("td", { class: "l id" }, el("a", { href: "/jobs/" + enc(job.id) }, job.id)),
      el("td", { class: "l dir", title: job.dir }, job.dir),
      el("td", { class: "l status" }, el("span", { class: "badge " + job.status }, status)),
      el("td", { class: "progress" }, ...progress(job.counts)),
      el("td", { class: "rate" }, pct(job.counts.pass_rate)),
      el("td", { class: "infra" }, job.counts.infra),
      actions
    );
  }

  function order(a, b) {
    const run = (j) => (j.status === "running" ? 0 : 1);
    return run(a) - run(b) || (a.dir < b.dir ? 1 : a.dir > b.dir ? -1 : 0);
  }

  let refreshing = false;
  async function refreshJobs() {
    if (refreshing) return;
    refreshing = true;
    try {
      const data = await getJson("/api/jobs");
      const jobs = data.jobs.slice().sort(order);
      const body = $("jobs").tBodies[0];
      const rows = new Map([...body.rows].map((r) => [r.dataset.job, r]));
      let before = null;
      for (let i = jobs.length - 1; i >= 0; i--) {
        const job = jobs[i];
        const key = JSON.stringify(job);
        let row = rows.get(job.id);
        if (!row || shown.get(job.id) !== key) {
          const fresh = jobRow(job);
          if (row) row.replaceWith(fresh);
          row = fresh;
          shown.set(job.id, key);
        }
        body.insertBefore(row, before);
        before = row;
        rows.delete(job.id);
      }
      for (const [id, row] of rows) {
        row.remove();
        shown.delete(id);
      }
      $("empty").hidden = jobs.length > 0;
      $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
    } catch (e) {
      say("reading the jobs: " + e.message, true);
    } finally {
      refreshing = false;
    }
  }

  // ---- one job ---------------------------------------------------------------------------

  function jobId() {
    const parts = location.pathname.split("/");
    return decodeURIComponent(parts[2] || "");
  }

  let lastJob = null;

  function drawJob(job) {
    lastJob = job;
    const id = job.id;
    const base = "/api/jobs/" + enc(id);
    document.title = "arbiter · " + id;
    $("title").textContent = id;
    const badge = $("status");
    badge.textContent = job.status + (job.cancelled ? " (cancelled)" : "");
    badge.className = "badge " + job.status;
    document.body.dataset.status = job.status;
    $("dir").textContent = job.dir;
    const c = job.counts;
    $("counts").replaceChildren(
      ...progress(c),
      " · " + c.passed + " passed of " + c.scored + " scored (" + pct(c.pass_rate) + ") · " + c.infra + " infra error(s)"
    );
    $("cancel").hidden = job.status !== "running";
    $("resume").hidden = job.status !== "interrupted";
    $("retry-infra").hidden = job.status === "running" || c.infra === 0;
    const running = $("running").tBodies[0];
    running.replaceChildren(
      ...(job.running || []).map((t) =>
        el(
          "tr",
          { "data-trial": t.trial },
          el("td", { class: "l" }, t.trial),
          el("td", { class: "l" }, t.phase),
          el("td", { class: "l" }, action("Cancel trial", base + "/trials/" + enc(t.trial) + "/cancel", scheduleJob, true))
        )
      )
    );
    $("none-running").hidden = (job.running || []).length > 0;
    $("arms").tBodies[0].replaceChildren(
      ...(job.arms || []).map((a) =>
        el(
          "tr",
          {},
          el("td", { class: "l" }, a.agent),
          el("td", { class: "l" }, a.variant || "–"),
          el("td", {}, a.trials),
          el("td", {}, a.passed),
          el("td", {}, a.failed),
          el("td", {}, a.infra),
          el("td", {}, pct(a.pass_rate))
        )
      )
    );
  }

  async function refreshJob() {
    try {
      drawJob(await getJson("/api/jobs/" + enc(jobId())));
    } catch (e) {
      say("reading the job: " + e.message, true);
    }
  }

  let jobTimer = null;
  function scheduleJob() {
    if (jobTimer) return;
    jobTimer = setTimeout(() => {
      jobTimer = null;
      refreshJob();
    }, 250);
  }

  let reportTimer = null;
  function reloadReport() {
    if (reportTimer) return;
    reportTimer = setTimeout(() => {
      reportTimer = null;
      const frame = $("report");
      frame.src = "/jobs/" + enc(jobId()) + "/report.html?t=" + Date.now();
    }, 1000);
  }

  function follow() {
    const es = new EventSource("/api/jobs/" + enc(jobId()) + "/events");
    for (const name of ["started", "trial_started", "phase", "trial_retrying", "trial_cancelled", "interrupted", "finished"]) {
      es.addEventListener(name, scheduleJob);
    }
    es.addEventListener("trial_finished", () => {
      scheduleJob();
      reloadReport();
    });
    es.addEventListener("ended", () => {
      // The stream is over: EventSource would reconnect and replay it.
      es.close();
      scheduleJob();
      reloadReport();
    });
    return es;
  }

  function jobPage() {
    const id = jobId();
    const base = "/api/jobs/" + enc(id);
    const report = "/jobs/" + enc(id) + "/report.html";
    $("report").src = report;
    $("report-link").href = report;
    let stream = follow();
    const again = (answer) => {
      // resume / retry-infra start the job again in this server: follow the new run.
      stream.close();
      if (answer && answer.id && answer.id !== id) {
        location.href = "/jobs/" + enc(answer.id);
        return;
      }
      stream = follow();
      scheduleJob();
    };
    $("cancel").replaceWith(Object.assign(action("Cancel job", base + "/cancel", scheduleJob, true), { id: "cancel", hidden: true }));
    $("resume").replaceWith(Object.assign(action("Resume", base + "/resume", again), { id: "resume", hidden: true }));
    $("retry-infra").replaceWith(
      Object.assign(action("Re-run infra errors", base + "/retry-infra", again), { id: "retry-infra", hidden: true })
    );
    refreshJob();
    // Jobs another process runs have no phase events: read the job again now and then.
    setInterval(() => {
      if (!lastJob || lastJob.status === "running") refreshJob();
    }, 3000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    tokenForm();
    const page = document.body.dataset.page;
    if (page === "jobs") {
      refreshJobs();
      setInterval(refreshJobs, 2000);
    } else if (page === "job") {
      jobPage();
    }
  });
})();
