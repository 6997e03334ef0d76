// Player of an exported replay: the canvas of step 0, then one patch per step (assets/canvas.js draws any
// step from them: forward from the step on screen, or again from step 0 to go back), never a stored frame
// per step.
(function () {
  const data = JSON.parse(document.getElementById("frames").textContent);
  const slider = document.getElementById("step");
  const holder = document.getElementById("canvas-frame");
  const label = document.getElementById("step-label");
  const button = document.getElementById("play");
  let timer = null;
  data.id = "export";
  holder.innerHTML = data.first;

  function show(k) {
    window.lladaCanvas.show(holder.querySelector(".canvas"), data, k);
    slider.value = k;
    label.textContent = "step " + k + " / " + data.steps;
  }

  function stop() {
    clearInterval(timer);
    timer = null;
    button.textContent = "▶ play";
  }

  function play() {
    if (Number(slider.value) >= data.steps) show(0);
    button.textContent = "❚❚ pause";
    timer = setInterval(function () {
      const k = Number(slider.value) + 1;
      if (k > data.steps) return stop();
      show(k);
    }, 300);
  }

  slider.addEventListener("input", function () { stop(); show(Number(slider.value)); });
  button.addEventListener("click", function () { timer ? stop() : play(); });
  show(data.steps);
})();
