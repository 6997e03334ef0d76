// The token canvas in the browser: apply a patch (ui/canvas.py `patch`) to a rendered canvas, draw any step
// of a replay (the canvas at step 0 and one patch per step), and keep the active block in view. Loaded by
// the playground's canvas components and inlined in exported replays.
window.lladaCanvas = window.lladaCanvas || (function () {
  // a block's children: its boundary mark, then one cell per position (a deleted token drawn before a cell
  // shifts them: then the cell is looked up by its position)
  function cellOf(seq, pos, blockLength) {
    const block = seq.children[Math.floor(pos / blockLength)];
    const cell = block && block.children[1 + (pos % blockLength)];  // child 0 is the block's boundary mark
    return cell && Number(cell.dataset.pos) === pos ? cell : seq.querySelector('.tok[data-pos="' + pos + '"]');
  }

  function follow(root) {
    const seq = root && root.querySelector(".seq");
    const act = seq && seq.querySelector(".blk.act");
    if (!act || seq.scrollHeight <= seq.clientHeight) return;
    const top = act.offsetTop - seq.offsetTop;
    if (top < seq.scrollTop || top + act.offsetHeight > seq.scrollTop + seq.clientHeight) {
      seq.scrollTop = Math.max(0, top - 24);
    }
  }

  // checkBase: only apply a live patch on top of the keyframe it was computed from (patches are cumulative)
  function apply(root, patch, checkBase) {
    if (!root || !patch) return false;
    if (checkBase && (root.dataset.base !== String(patch.base) || Number(root.dataset.step) >= patch.step)) {
      return false;
    }
    redraw(root, patch);
    follow(root);
    return true;
  }

  function redraw(root, patch) {
    const seq = root.querySelector(".seq");
    const blockLength = Number(root.dataset.blockLength || 0) || (seq.children[0].children.length - 1);
    for (const [b, cls] of patch.blocks) {
      if (seq.children[b]) seq.children[b].className = cls;
    }
    for (const [pos, html] of patch.cells) {
      const cell = cellOf(seq, pos, blockLength);
      if (!cell) continue;
      // a cell's html starts with the tokens deleted just before it (LLaDA2.2, `.gone`): they go with it
      while (cell.previousElementSibling && cell.previousElementSibling.classList.contains("gone")) {
        cell.previousElementSibling.remove();
      }
      cell.outerHTML = html;
    }
    root.querySelector(".canvas-head").innerHTML = patch.head;
    root.querySelector(".counts").innerHTML = patch.counts;
    root.dataset.step = patch.step;
    root.dataset.steps = patch.steps;
  }

  // Step k of a replay {id, first, steps, patches}: forward from the step on screen when the canvas is this
  // replay's, else from step 0 (a fresh canvas takes the old one's place). Returns the canvas element.
  function show(root, replay, k) {
    if (!root || !replay || !Number.isInteger(k) || k < 0 || k > replay.steps) return root;
    if (root.dataset.replay !== replay.id || Number(root.dataset.step) > k) {
      const box = document.createElement("div");
      box.innerHTML = replay.first;
      const fresh = box.firstElementChild;
      fresh.dataset.replay = replay.id;
      root.replaceWith(fresh);
      root = fresh;
    }
    const from = Number(root.dataset.step);
    if (from < k) redraw(root, merged(replay.patches.slice(from, k)));
    follow(root);
    return root;
  }

  // consecutive patches as one: each block and cell as the last of them draws it (every patch holds each cell
  // that changed at its step, so the last write of a cell is its state at the last step), the last header
  function merged(patches) {
    const last = patches[patches.length - 1];
    const blocks = new Map(), cells = new Map();
    for (const patch of patches) {
      for (const [b, cls] of patch.blocks) blocks.set(b, cls);
      for (const [pos, html] of patch.cells) cells.set(pos, html);
    }
    return Object.assign({}, last, { blocks: Array.from(blocks), cells: Array.from(cells) });
  }

  return { apply: apply, follow: follow, show: show };
})();
