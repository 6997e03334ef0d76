// A token's details on a tap, a click or the keyboard (a phone has no hover, so `title` alone shows nothing).
// A tap on a `.tok` of a canvas opens a small panel under it with the token's details (its `title`: position,
// text, state, step, p and threshold, the token an edit replaced); a tap elsewhere or Escape closes it. The
// token sequence (`.seq`) takes the keyboard focus: the arrow keys walk the drawn tokens and show each one's
// details, Home and End jump to the ends. The panel follows the canvas when a patch redraws the shown step.
// A tap on a generated token of the playground's own canvas (#canvas) also writes its position into the poke
// box (#poke-pos, ui/playground/poke.py), so "poke and re-run" changes that token.
// Loaded with every canvas component (ui/render/live.py); it listens on the document once.
(function () {
  if (window.lladaTokens) return;
  window.lladaTokens = true;

  function panelOf(root, create) {
    let panel = root.querySelector(":scope > .tok-pop");
    if (!panel && create) {
      panel = document.createElement("div");
      panel.className = "tok-pop";
      panel.setAttribute("role", "status");
      panel.setAttribute("aria-live", "polite");
      panel.hidden = true;
      root.appendChild(panel);
      new MutationObserver(function () { refresh(root); }).observe(root, { attributes: true,
                                                                          attributeFilter: ["data-step"] });
    }
    return panel;
  }

  function drawn(tok) {
    return tok.getClientRects().length > 0;  // far masks, folded prompt and collapsed EOS are not drawn
  }

  // under the token, or over it when the screen has no room below
  function place(root, panel, tok) {
    const r = tok.getBoundingClientRect(), c = root.getBoundingClientRect(), h = panel.offsetHeight;
    const over = r.bottom + 6 + h > window.innerHeight && r.top - 6 - h > 0;
    panel.style.left = Math.max(6, Math.min(r.left - c.left, c.width - panel.offsetWidth - 6)) + "px";
    panel.style.top = (over ? r.top - c.top - 6 - h : r.bottom - c.top + 6) + "px";
  }

  function show(tok) {
    const root = tok.closest(".canvas");
    if (!root) return;
    const panel = panelOf(root, true);
    root.querySelectorAll(".tok.picked").forEach(function (t) { t.classList.remove("picked"); });
    tok.classList.add("picked");
    panel.dataset.pos = tok.dataset.pos;
    panel.replaceChildren();
    for (const line of (tok.getAttribute("title") || "").split(" · ")) {
      const row = document.createElement("div");
      row.textContent = line;
      panel.appendChild(row);
    }
    panel.hidden = false;
    place(root, panel, tok);
  }

  // the poke box's number input takes the tapped position (an input event: Gradio reads the new value)
  function offerPoke(tok) {
    const input = document.querySelector("#poke-pos input");
    if (!input || tok.closest(".canvas").id !== "canvas" || tok.dataset.state === "prompt") return;
    input.value = tok.dataset.pos;
    input.dispatchEvent(new Event("input", { bubbles: true }));
  }

  function hide(root) {
    const panel = root && panelOf(root, false);
    if (panel) panel.hidden = true;
    if (root) root.querySelectorAll(".tok.picked").forEach(function (t) { t.classList.remove("picked"); });
  }

  function refresh(root) {
    const panel = panelOf(root, false);
    if (!panel || panel.hidden) return;
    const tok = root.querySelector('.seq .tok[data-pos="' + panel.dataset.pos + '"]');
    if (tok && drawn(tok)) show(tok); else hide(root);
  }

  document.addEventListener("click", function (e) {
    const tok = e.target.closest && e.target.closest(".canvas .seq .tok");
    document.querySelectorAll(".canvas > .tok-pop:not([hidden])").forEach(function (panel) {
      if (!tok || panel.parentElement !== tok.closest(".canvas")) hide(panel.parentElement);
    });
    if (tok) { show(tok); offerPoke(tok); }
  });

  document.addEventListener("keydown", function (e) {
    const seq = e.target.closest && e.target.closest(".canvas .seq");
    if (!seq) return;
    const root = seq.closest(".canvas");
    if (e.key === "Escape") { hide(root); return; }
    const moves = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1, Home: -Infinity, End: Infinity };
    if (!(e.key in moves)) return;
    e.preventDefault();
    const toks = Array.from(seq.querySelectorAll(".tok")).filter(drawn);
    if (!toks.length) return;
    const at = toks.indexOf(seq.querySelector(".tok.picked")), move = moves[e.key], last = toks.length - 1;
    const next = Math.abs(move) === Infinity ? (move > 0 ? last : 0)
      : at < 0 ? (move > 0 ? 0 : last) : Math.max(0, Math.min(last, at + move));
    toks[next].scrollIntoView({ block: "nearest" });
    show(toks[next]);
    offerPoke(toks[next]);
  });

  // the sequence scrolls inside its box: the panel stays under its token
  document.addEventListener("scroll", function (e) {
    const root = e.target.closest && e.target.closest(".canvas");
    if (root) refresh(root);
  }, true);
})();
