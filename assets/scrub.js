// Step scrubbers drawn in the browser. A scrubber's replay holder (ui/render/live.py `scrubber_script`) keeps
// what the server last sent for it (ui/render/live.py `scrub_value`): the replay of each canvas it moves (the
// canvas at step 0 and one patch per step) and, for a lesson, its narration's lines per step. The scrubber's
// own input events then draw any step at once (assets/canvas.js `show`), no server round trip; without a kept
// value (a live run) the server draws. A press (pointer or key) on a scrubber with a pause button clicks it.
window.lladaReplays = window.lladaReplays || {};
window.lladaScrub = window.lladaScrub || (function () {
  const scrubbers = {};  // scrubber elem_id -> {name: its key in window.lladaReplays, pause: a button's elem_id}

  function keep(name, value) {
    window.lladaReplays[name] = value && value.replays ? value : null;
  }

  // the narration at step k: its data-step, the current step's lines, and the story's item of that step
  function narrate(lines, k) {
    const root = document.querySelector(lines.target);
    if (!root || lines.now[k] === undefined) return;
    root.dataset.step = k;
    root.querySelectorAll(":scope > .now").forEach((p) => p.remove());
    root.insertAdjacentHTML("afterbegin", lines.now[k]);
    root.querySelectorAll("li[value]").forEach((li) => {
      if (li.value === k) li.className = "here";
      else li.removeAttribute("class");
    });
  }

  // step k of every canvas of the value (a shorter run shows its last step) and of its narration
  function show(value, k) {
    for (const replay of value.replays) {
      if (replay) window.lladaCanvas.show(document.getElementById(replay.target), replay, Math.min(k, replay.steps));
    }
    if (value.narration) narrate(value.narration, k);
  }

  function scrubberOf(target) {
    for (const id in scrubbers) {
      if (target.closest && target.closest("#" + id)) return id;
    }
    return null;
  }

  function drawn(e) {
    const id = scrubberOf(e.target);
    const value = id && window.lladaReplays[scrubbers[id].name];
    const k = Number(e.target.value);
    if (value && e.target.value !== "" && Number.isInteger(k) && k >= 0) show(value, k);
  }

  function pressed(e) {
    const id = scrubberOf(e.target);
    const button = id && scrubbers[id].pause && document.getElementById(scrubbers[id].pause);
    if (!button) return;
    window.lladaOrder?.press();  // held from now: the pause's own event is sent a frame or more later
    requestAnimationFrame(() => setTimeout(() => button.click(), 0));
  }

  document.addEventListener("input", drawn, true);
  document.addEventListener("pointerdown", pressed, true);
  document.addEventListener("keydown", pressed, true);

  function bind(slider, name, pause) {
    scrubbers[slider] = { name: name, pause: pause || null };
  }

  return { bind: bind, keep: keep, show: show };
})();

// A tab's replay stops and starts in the order they were made (ui/player.py `stops`, `starts`): a stop is in
// flight from its sending until its answer is applied; a start waits until none is (or the oldest is 20 s old:
// an answer that never came holds nothing for long). A press on a scrubber clicks its pause a frame later, and
// Gradio runs an event's js a task after its trigger: the press is held from the moment it happens until its
// pause's event is sent (`press`, then `stop(true)`), so a start made in between waits for that pause too. A
// replay's tick in flight is counted too (`tick`, `ticked`): its answer, landing after a start's, would draw
// its step over the start's.
window.lladaOrder = window.lladaOrder || (function () {
  const WAIT_MS = 20000;
  const sent = [];  // when each stop in flight was sent (performance.now(), oldest first)
  const pressed = [];  // when each press whose pause is not sent yet happened (oldest first)
  const ticks = [];  // when each tick of a replay in flight was sent: its answer draws a step (oldest first)

  function expire(list) {
    while (list.length && performance.now() - list[0] > WAIT_MS) list.shift();
  }

  function clear() {
    return new Promise((resolve) => {
      (function check() {
        [sent, pressed, ticks].forEach(expire);
        if (sent.length || pressed.length || ticks.length) setTimeout(check, 25);
        else resolve();
      })();
    });
  }

  return {
    press: () => { pressed.push(performance.now()); },
    stop: (pause) => {
      if (pause) pressed.shift();
      sent.push(performance.now());
    },
    landed: () => { sent.shift(); },
    tick: () => { ticks.push(performance.now()); },
    ticked: () => { ticks.shift(); },
    clear: clear,
    inFlight: () => sent.length + pressed.length,  // stops sent or pressed, not yet answered
    busy: () => sent.length + pressed.length + ticks.length,  // and ticks: once none, nothing is on its way
  };
})();
