// The token canvas in the browser: apply a patch (ui/canvas.py `patch`) to a rendered canvas, and keep
// the active block in view. Loaded by the playground's canvas components and inlined in exported replays.
window.lladaCanvas = window.lladaCanvas || (function () {
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
    const seq = root.querySelector(".seq");
    const blockLength = Number(root.dataset.blockLength || 0) || (seq.children[0].children.length - 1);
    for (const [b, cls] of patch.blocks) {
      if (seq.children[b]) seq.children[b].className = cls;
    }
    for (const [pos, html] of patch.cells) {
      const cell = cellOf(seq, pos, blockLength);
      if (cell) cell.outerHTML = html;
    }
    root.querySelector(".canvas-head").innerHTML = patch.head;
    root.querySelector(".counts").innerHTML = patch.counts;
    root.dataset.step = patch.step;
    root.dataset.steps = patch.steps;
    follow(root);
    return true;
  }

  return { apply: apply, follow: follow };
})();
