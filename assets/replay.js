// Player of an exported replay: the step slider swaps in the pre-rendered canvas of that step.
(function () {
  const frames = JSON.parse(document.getElementById("frames").textContent);
  const slider = document.getElementById("step");
  const holder = document.getElementById("canvas-frame");
  const label = document.getElementById("step-label");
  const button = document.getElementById("play");
  let timer = null;

  function show(k) {
    slider.value = k;
    holder.innerHTML = frames[k];
    label.textContent = "step " + k + " / " + (frames.length - 1);
  }

  function stop() {
    clearInterval(timer);
    timer = null;
    button.textContent = "▶ play";
  }

  function play() {
    if (Number(slider.value) >= frames.length - 1) show(0);
    button.textContent = "❚❚ pause";
    timer = setInterval(function () {
      const k = Number(slider.value) + 1;
      if (k >= frames.length) return stop();
      show(k);
    }, 150);
  }

  slider.addEventListener("input", function () { stop(); show(Number(slider.value)); });
  button.addEventListener("click", function () { timer ? stop() : play(); });
  show(frames.length - 1);
})();
