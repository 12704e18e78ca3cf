// Slipway's dashboard: swaps server-rendered HTML fragments into the shell
// of /ui and follows the api's streams. Vanilla JavaScript, no build step.
//
// The token is kept in this tab's sessionStorage only: it is sent as the
// Authorization header on fetches, and never in a URL. An EventSource
// cannot send headers, so each stream is opened with a single-use ticket
// (?ticket=) minted for that one stream by POST <stream>/ticket; a stream
// that breaks is reopened with a new ticket. Fragments are HTML rendered (and escaped) by
// the api; this script never builds markup from data, it only sets text.
//
// Routes (the location's hash): #/ the deployments, #/deployments/<id>
// (following its newest build), #/deployments/<id>/builds/<build>, #/fleet, #/webhooks,
// #/submit.
//
// A fragment's buttons carry what they do as data-action (rollback, apply),
// data-deployment and data-build; one click listener on the document sends
// them (the content security policy allows no inline handler).
"use strict";

(function () {
  const TOKEN_KEY = "slipway.token";
  const REFRESH_MS = 5000;

  // What the page has seen, for people debugging and for the browser test.
  // states: each state the deployment channel sent, with the log chunks
  // streamed into the page by then.
  // actions: each button's request that the api accepted ({action, build, queued}).
  const seen = { states: [], liveLogChunks: 0, logChunksBeforeEnd: 0, builds: [], tokenExpired: false, actions: [] };
  window.slipwayDashboard = seen;

  const $ = (id) => document.getElementById(id);
  let streams = [];
  let timer = null;
  let routeToken = 0;
  let flash = "";

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function say(text, kind) {
    const status = $("status");
    status.textContent = text || "";
    status.className = kind || "";
  }

  // The claims of the token, decoded for display only (the api verifies it).
  function claims(t) {
    try {
      const part = t.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return JSON.parse(atob(part));
    } catch (e) {
      return null;
    }
  }

  function showSignedIn() {
    const t = token();
    $("token-form").hidden = !!t;
    $("nav").hidden = !t;
    $("forget").hidden = !t;
    const c = t && claims(t);
    $("who").textContent = c
      ? `${c.sub || "token"} · ${Array.isArray(c.deployments) ? c.deployments.join(", ") : ""}` +
        (c.exp ? ` · until ${new Date(c.exp * 1000).toISOString()}` : "")
      : "";
  }

  function stopFollowing() {
    streams.forEach((s) => s.close());
    streams = [];
    if (timer) {
      clearInterval(timer);
      timer = null;
    }
  }

  // An error answer of the api ({"error", "message", "details"}) as a sentence.
  async function refusal(response) {
    try {
      const body = await response.json();
      let text = body.message || body.error || `${response.status}`;
      const problems = body.details && body.details.problems;
      if (Array.isArray(problems)) {
        text += ": " + problems.map((p) => `${p.path || ""} ${p.message || JSON.stringify(p)}`.trim()).join("; ");
      }
      // A stale plan: what moved since it was made.
      const moved = body.details && body.details.moved;
      if (Array.isArray(moved) && moved.length > 0 && !moved.every((m) => text.includes(m))) {
        text += ` (${moved.join("; ")})`;
      }
      return text;
    } catch (e) {
      return `the api answered ${response.status}`;
    }
  }

  async function api(path, options) {
    const headers = Object.assign({ Authorization: `Bearer ${token()}` }, (options && options.headers) || {});
    const response = await fetch(path, Object.assign({}, options || {}, { headers }));
    if (response.status === 401) {
      const why = await refusal(response);
      sessionStorage.removeItem(TOKEN_KEY);
      stopFollowing();
      showSignedIn();
      say(`The token was refused (${why}). Paste another.`, "error");
      throw new Error(why);
    }
    return response;
  }

  // Fetches a fragment and puts it in `target`; false when it was refused.
  async function load(path, target, mine) {
    let response;
    try {
      response = await api(path);
    } catch (e) {
      return false;
    }
    if (mine !== routeToken) {
      return false;
    }
    if (!response.ok) {
      say(await refusal(response), "error");
      return false;
    }
    target.innerHTML = await response.text();
    return true;
  }

  // A broken stream is reopened after RECONNECT_MS plus a random share of
  // RECONNECT_SPREAD_MS, so that the tabs of an api that restarted do not
  // all come back at once.
  const RECONNECT_MS = 1000;
  const RECONNECT_SPREAD_MS = 4000;

  // Opens the stream at `path` with a fresh single-use ticket, or null when
  // the route changed meanwhile or the ticket was refused (said on the page).
  async function openStream(path, mine) {
    let response;
    try {
      response = await api(`${path}/ticket`, { method: "POST" });
    } catch (e) {
      return null;
    }
    if (mine !== routeToken) {
      return null;
    }
    if (!response.ok) {
      say(await refusal(response), "error");
      return null;
    }
    const { ticket } = await response.json();
    const source = new EventSource(`${path}?ticket=${encodeURIComponent(ticket)}`);
    streams.push(source);
    // The api ends a stream whose token expired with this event: the token
    // is of no more use, so the page asks for another instead of reopening.
    source.addEventListener("token_expired", () => {
      seen.tokenExpired = true;
      sessionStorage.removeItem(TOKEN_KEY);
      stopFollowing();
      showSignedIn();
      say("The token expired while a stream was open. Paste a fresh one to go on following.", "error");
    });
    return source;
  }

  // A stream that broke before its end: the browser would retry with the
  // used ticket, so it is closed and `again` runs after a pause (with a new
  // ticket), unless the page moved on.
  function onBreak(source, mine, again) {
    source.addEventListener("error", () => {
      source.close();
      streams = streams.filter((s) => s !== source);
      setTimeout(() => {
        if (mine === routeToken) {
          again();
        }
      }, RECONNECT_MS + Math.random() * RECONNECT_SPREAD_MS);
    });
  }

  // Streams a running build's log into its <pre data-live="true">; at the
  // end, reloads the build's fragment (whole log and run report). A broken
  // stream reloads the build (the fragment, then the log from its start).
  async function followLog(pane, buildId, mine) {
    const pre = pane.querySelector("pre[data-live=true]");
    if (!pre) {
      return;
    }
    const source = await openStream(`/builds/${encodeURIComponent(buildId)}/log`, mine);
    if (!source) {
      return;
    }
    let ended = false;
    source.addEventListener("log", (event) => {
      const text = JSON.parse(event.data).text;
      pre.appendChild(document.createTextNode(text));
      seen.liveLogChunks += 1;
      pre.scrollTop = pre.scrollHeight;
    });
    source.addEventListener("end", () => {
      ended = true;
      source.close();
      seen.logChunksBeforeEnd = seen.liveLogChunks;
      loadBuild(pane, buildId, mine);
    });
    onBreak(source, mine, () => {
      if (!ended && pane.dataset.build === buildId) {
        loadBuild(pane, buildId, mine);
      }
    });
  }

  async function loadBuild(pane, buildId, mine) {
    pane.dataset.build = buildId;
    if (await load(`/ui/fragments/builds/${encodeURIComponent(buildId)}`, pane, mine)) {
      if (!seen.builds.includes(buildId)) {
        seen.builds.push(buildId);
      }
      followLog(pane, buildId, mine);
    }
  }

  async function showDeployment(id, pinnedBuild, mine) {
    const view = $("view");
    view.innerHTML = '<div id="deployment-pane"></div><div id="build-pane"></div>';
    const deploymentPane = $("deployment-pane");
    const buildPane = $("build-pane");
    const path = `/ui/fragments/deployments/${encodeURIComponent(id)}`;
    if (!(await load(path, deploymentPane, mine))) {
      return;
    }
    const section = () => deploymentPane.querySelector("section.deployment");
    const latest = section() && section().dataset.latestBuild;
    const first = pinnedBuild || latest;
    if (first) {
      await loadBuild(buildPane, first, mine);
    }
    followChannel(id, path, deploymentPane, buildPane, pinnedBuild, mine);
  }

  const TERMINAL = ["active", "idle", "failed"];

  // The deployment channel: each state re-renders the deployment, and
  // (unless a build was picked) moves the build pane to the newest build.
  // It ends after a terminal state; a broken one is reopened, and starts
  // again from the current state.
  async function followChannel(id, path, deploymentPane, buildPane, pinnedBuild, mine) {
    const section = () => deploymentPane.querySelector("section.deployment");
    const events = await openStream(`/deployments/${encodeURIComponent(id)}/events`, mine);
    if (!events) {
      return;
    }
    let ended = false;
    events.addEventListener("state", async (event) => {
      const data = JSON.parse(event.data);
      if (TERMINAL.includes(data.state)) {
        ended = true;
        events.close();
      }
      seen.states.push({ state: data.state, liveLogChunks: seen.liveLogChunks });
      await load(path, deploymentPane, mine);
      const newest = section() && section().dataset.latestBuild;
      if (!pinnedBuild && newest && newest !== buildPane.dataset.build) {
        streams.filter((s) => s !== events).forEach((s) => s.close());
        streams = ended ? [] : [events];
        await loadBuild(buildPane, newest, mine);
      }
    });
    onBreak(events, mine, () => {
      if (!ended) {
        followChannel(id, path, deploymentPane, buildPane, pinnedBuild, mine);
      }
    });
  }

  async function route() {
    stopFollowing();
    routeToken += 1;
    const mine = routeToken;
    say(flash);
    flash = "";
    showSignedIn();
    const view = $("view");
    $("submit-form").hidden = true;
    if (!token()) {
      view.innerHTML = "";
      $("token-input").focus();
      return;
    }
    const hash = location.hash.replace(/^#/, "") || "/";
    const parts = hash.split("/").filter((p) => p).map(decodeURIComponent);
    if (parts[0] === "deployments" && parts[1]) {
      await showDeployment(parts[1], parts[2] === "builds" ? parts[3] : null, mine);
    } else if (parts[0] === "rollouts") {
      const path = parts[1] ? `/ui/fragments/rollouts/${encodeURIComponent(parts[1])}` : "/ui/fragments/rollouts";
      await load(path, view, mine);
      timer = setInterval(() => load(path, view, mine), REFRESH_MS);
    } else if (parts[0] === "fleet") {
      await load("/ui/fragments/fleet", view, mine);
      timer = setInterval(() => load("/ui/fragments/fleet", view, mine), REFRESH_MS);
    } else if (parts[0] === "webhooks") {
      await load("/ui/fragments/webhooks", view, mine);
      timer = setInterval(() => load("/ui/fragments/webhooks", view, mine), REFRESH_MS);
    } else if (parts[0] === "submit") {
      view.innerHTML = "";
      $("submit-form").hidden = false;
    } else {
      const shown = await load("/ui/fragments/deployments", view, mine);
      if (shown) {
        const list = view.querySelector("section.deployments");
        $("nav-fleet").hidden = !(list && list.dataset.fleet === "true");
        $("nav-webhooks").hidden = $("nav-fleet").hidden;
        $("nav-rollouts").hidden = $("nav-fleet").hidden;
      }
      timer = setInterval(() => load("/ui/fragments/deployments", view, mine), REFRESH_MS);
    }
  }

  async function submitConfiguration(event) {
    event.preventDefault();
    const id = $("submit-id").value.trim();
    let configuration;
    try {
      configuration = JSON.parse($("submit-configuration").value);
    } catch (e) {
      say(`The configuration is not JSON: ${e.message}`, "error");
      return;
    }
    const body = { configuration };
    const source = $("submit-source").value.trim();
    if (source) {
      body.module_source = source;
    }
    say("Submitting…");
    let response;
    try {
      response = await api(`/deployments/${encodeURIComponent(id)}`, {
        method: "PUT",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (e) {
      return;
    }
    if (response.status !== 202) {
      say(`Not submitted: ${await refusal(response)}`, "error");
      return;
    }
    const accepted = await response.json();
    flash = `Deploy queued: build ${accepted.build_id}.`;
    const target = `#/deployments/${encodeURIComponent(id)}`;
    if (location.hash === target) {
      route();
    } else {
      location.hash = target;
    }
  }

  // What each button of a build does: the request, and the words of its outcome.
  const ACTIONS = {
    rollback: {
      ask: (d) => `Roll deployment ${d.deployment} back to build ${d.build}? This queues a deploy of that build's configuration, module source revision and secret versions.`,
      body: (d) => ({ to: d.build }),
      sending: "Rolling back…",
      queued: "Rollback queued",
      refused: "Not rolled back",
    },
    apply: {
      ask: (d) => `Apply plan ${d.build} to deployment ${d.deployment}? This queues a deploy of exactly the systems it planned.`,
      body: (d) => ({ plan: d.build }),
      sending: "Applying…",
      queued: "Apply queued",
      refused: "Not applied",
    },
  };

  // Sends a build's button (POST /deployments/<id>/<action>) once the
  // person confirms; then follows the deployment and its new build, or
  // says why the api refused.
  async function act(button) {
    const d = button.dataset;
    const action = ACTIONS[d.action];
    if (!action || !window.confirm(action.ask(d))) {
      return;
    }
    button.disabled = true;
    say(action.sending);
    let response;
    try {
      response = await api(`/deployments/${encodeURIComponent(d.deployment)}/${d.action}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(action.body(d)),
      });
    } catch (e) {
      button.disabled = false;
      return;
    }
    if (response.status !== 202) {
      say(`${action.refused}: ${await refusal(response)}`, "error");
      button.disabled = false;
      return;
    }
    const accepted = await response.json();
    seen.actions.push({ action: d.action, build: d.build, queued: accepted.build_id });
    flash = `${action.queued}: build ${accepted.build_id}.`;
    const target = `#/deployments/${encodeURIComponent(d.deployment)}`;
    if (location.hash === target) {
      route();
    } else {
      location.hash = target;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const t = $("token-input").value.trim().replace(/^Bearer\s+/i, "");
      if (t) {
        sessionStorage.setItem(TOKEN_KEY, t);
        $("token-input").value = "";
        route();
      }
    });
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      stopFollowing();
      route();
    });
    $("submit-form").addEventListener("submit", submitConfiguration);
    document.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button && !button.disabled) {
        act(button);
      }
    });
    window.addEventListener("hashchange", route);
    route();
  });
})();
