// Page-wide helpers of the playground: Ctrl/Cmd+Enter in the prompt runs it, and a value typed into a
// slider's number box beyond the slider's range is reported (the slider keeps its nearest allowed value).
(function () {
  if (window.lladaPage) return;
  window.lladaPage = true;

  document.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "Enter" && e.target.closest && e.target.closest("#prompt")) {
      e.preventDefault();
      const button = document.querySelector("#generate");
      if (button) button.click();
    }
  }, true);

  // a run starts: bring the canvas into view (on a phone it sits below the examples)
  document.addEventListener("click", function (e) {
    if (!e.target.closest || !e.target.closest("#generate, #examples button, #examples tr")) return;
    const box = document.querySelector("#canvas-box");
    if (!box) return;
    const top = box.getBoundingClientRect().top;
    if (top > window.innerHeight * 0.6 || top < 0) box.scrollIntoView({ behavior: "smooth", block: "start" });
  }, true);

  function note(text) {
    let box = document.querySelector("#range-note");
    if (!box) {
      box = document.createElement("div");
      box.id = "range-note";
      box.setAttribute("role", "status");
      const settings = document.querySelector("#settings") || document.body;
      settings.prepend(box);
    }
    box.textContent = text;
    box.hidden = !text;
  }

  document.addEventListener("change", function (e) {
    const input = e.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "number") return;
    const block = input.closest("[id]");
    const range = block && block.querySelector("input[type=range]");
    if (!range) return;
    const value = Number(input.value), low = Number(range.min), high = Number(range.max);
    const label = (block.querySelector("label, [data-testid=block-info]") || {}).textContent || block.id;
    if (input.value !== "" && (value < low || value > high)) {
      note(label.trim() + ": " + input.value + " is outside the allowed range " + low + " to " + high +
           "; the nearest allowed value is used.");
    } else {
      note("");
    }
  }, true);
})();
