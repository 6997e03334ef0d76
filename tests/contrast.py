"""Text contrast as WCAG 2 defines it, for the canvas's colours: in Python from the CSS, in the browser from
computed styles.

WCAG's contrast of two colours is (L1 + 0.05) / (L2 + 0.05), L1 the lighter one's relative luminance
(linearised sRGB weighted 0.2126 R + 0.7152 G + 0.0722 B); AA asks 4.5:1 for body text. The canvas draws
its states as translucent washes (`color-mix(in srgb, <state colour> P%, transparent)`) over the theme's
own background, so what the eye compares is the text over the washes composited down to the first opaque
background.

* `Sheet` reads custom properties and declarations from assets/style.css and Gradio's theme (light and
  `.dark`) and resolves the few value forms the canvas uses: hex and named colours, `var()`, `calc()`
  of numbers and percentages, `color-mix(in srgb, ...)`. No selector matching: a caller names the rule.
* `TEXT_CONTRAST_JS` is the same measure in the page: (element) => ratio, from the element's computed
  `color` against every ancestor's computed `background-color` and the canvas's own `opacity` (a faded
  token fades its text and its wash together), composited over white.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path

AA = 4.5  # WCAG 2 level AA, normal-size text
STYLE = Path(__file__).resolve().parents[1] / "assets" / "style.css"
Rgba = tuple[float, float, float, float]  # sRGB channels in 0..1, alpha in 0..1
NAMED = {"white": "#ffffff", "black": "#000000", "transparent": "#00000000"}


# ---- WCAG ---------------------------------------------------------------------------------------------

def luminance(c: Rgba) -> float:
    """Relative luminance of an opaque sRGB colour."""
    lin = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def ratio(a: Rgba, b: Rgba) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def over(top: Rgba, under: Rgba) -> Rgba:
    """`top` drawn over an opaque `under` (source-over): an opaque colour."""
    a = top[3]
    return (*(t * a + u * (1 - a) for t, u in zip(top[:3], under[:3])), 1.0)


def flatten(layers: list[Rgba]) -> Rgba:
    """Layers from the bottom up (the first one opaque) composited into one opaque colour."""
    out = layers[0]
    for layer in layers[1:]:
        out = over(layer, out)
    return out


# ---- CSS values -----------------------------------------------------------------------------------------

def hex_colour(text: str) -> Rgba:
    h = NAMED.get(text, text).lstrip("#")
    h = "".join(ch * 2 for ch in h) if len(h) in (3, 4) else h
    channels = [int(h[i:i + 2], 16) / 255 for i in range(0, len(h), 2)]
    return (*channels[:3], channels[3] if len(channels) == 4 else 1.0)


def mix(a: Rgba, pa: float, b: Rgba, pb: float) -> Rgba:
    """`color-mix(in srgb, a pa, b pb)` (pa, pb in 0..1): premultiplied by alpha, as CSS Color 5 mixes.
    Mixed with `transparent`, a colour keeps its channels and takes pa of its alpha."""
    scale = min(pa + pb, 1.0)  # percentages summing under 100% scale the alpha down
    pa, pb = pa / (pa + pb), pb / (pa + pb)
    alpha = a[3] * pa + b[3] * pb
    if alpha == 0:
        return (0.0, 0.0, 0.0, 0.0)
    rgb = [(x * a[3] * pa + y * b[3] * pb) / alpha for x, y in zip(a[:3], b[:3])]
    return (*rgb, alpha * scale)


def split_args(text: str) -> list[str]:
    """The comma-separated arguments of a function's body, commas inside brackets kept."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    return out + [text[start:].strip()]


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def arithmetic(text: str) -> float:
    """+ - * / of plain numbers (a calc() whose var()s and % are already replaced)."""
    def walk(node):
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"not arithmetic: {text!r}")
    return walk(ast.parse(text, mode="eval").body)


@dataclass
class Sheet:
    """Custom properties (name -> value text, without `--`) and rules (selector -> {property: value})."""

    props: dict[str, str]
    rules: dict[str, dict[str, str]]

    def var(self, name: str, fallback: str | None = None) -> str:
        if name in self.props:
            return self.props[name]
        if fallback is None:
            raise KeyError(f"--{name} is not defined")
        return fallback

    def expand(self, text: str) -> str:
        """`text` with every var() replaced by its value, innermost first."""
        pattern = re.compile(r"var\(--([\w-]+)\s*(?:,\s*([^()]*))?\)")
        while (m := pattern.search(text)) is not None:
            text = text[:m.start()] + self.expand(self.var(m[1], m[2])) + text[m.end():]
        return text

    def number(self, text: str) -> float:
        """A number, a percentage (as a fraction of 1) or a calc() of them."""
        text = self.expand(text).strip()
        if text.startswith("calc(") and text.endswith(")"):
            text = text[5:-1]
        return arithmetic(re.sub(r"([\d.]+)%", r"(\1/100)", text))

    def colour(self, text: str) -> Rgba:
        text = self.expand(text).strip()
        if not text.startswith("color-mix("):
            return hex_colour(text)
        space, *parts = split_args(text[len("color-mix("):-1])
        assert space == "in srgb", f"only srgb mixes are read here: {text!r}"
        (a, pa), (b, pb) = (self._stop(part) for part in parts)
        pa, pb = (pa, pb) if pa is not None and pb is not None else \
                 (pa, 1 - pa) if pa is not None else (1 - pb, pb) if pb is not None else (0.5, 0.5)
        return mix(a, pa, b, pb)

    def _stop(self, part: str) -> tuple[Rgba, float | None]:
        """One colour of a mix and its share (None when the mix leaves it to the other's)."""
        m = re.fullmatch(r"(.+?)\s+((?:calc\(.*\))|(?:[\d.]+%))", part)
        return (self.colour(m[1]), self.number(m[2])) if m else (self.colour(part), None)

    def get(self, selector: str, prop: str) -> str:
        return self.rules[selector][prop]

    def with_props(self, **props: str) -> Sheet:
        """The same sheet with more custom properties (names in Python spelling: wash_base -> --wash-base)."""
        return Sheet(self.props | {k.replace("_", "-"): v for k, v in props.items()}, self.rules)


def rules(css: str) -> dict[str, dict[str, str]]:
    """selector -> declarations of every plain rule (rules inside @media blocks read as if outside them:
    callers ask for selectors that no @media block holds)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)
    out: dict[str, dict[str, str]] = {}
    for head, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        decls = {}
        for decl in body.split(";"):
            if ":" in decl:
                name, value = decl.split(":", 1)
                decls[name.strip()] = value.strip()
        for selector in split_args(re.sub(r"\s+", " ", head.strip())):
            out.setdefault(selector, {}).update(decls)
    return out


def custom_props(decls: dict[str, str]) -> dict[str, str]:
    return {name[2:]: value for name, value in decls.items() if name.startswith("--")}


# ---- in the browser -------------------------------------------------------------------------------------

# (el, ink?) => WCAG ratio of el's text (or of `ink`, a computed colour such as a ::after's) against what is
# drawn behind it: each ancestor's background-color composited from the root down over white, and inside
# the canvas each element's opacity applied to its whole drawing (its wash and its text together); colours
# come as rgb(), rgba() or color(srgb ...) (what color-mix computes to)
TEXT_CONTRAST_JS = """
(el, inkText) => {
  const parse = (c) => {
    let m = c.match(/color\\(srgb ([-\\d.e]+) ([-\\d.e]+) ([-\\d.e]+)(?: \\/ ([-\\d.e]+))?\\)/);
    if (m) return [m[1] * 255, m[2] * 255, m[3] * 255, m[4] === undefined ? 1 : Number(m[4])];
    m = c.match(/rgba?\\(([-\\d.]+),? ([-\\d.]+),? ([-\\d.]+)(?:[,\\/] ?([-\\d.]+))?\\)/);
    if (m) return [Number(m[1]), Number(m[2]), Number(m[3]), m[4] === undefined ? 1 : Number(m[4])];
    throw new Error('unreadable colour ' + c);
  };
  const over = (top, under, a) => under.map((u, i) => top[i] * a + u * (1 - a));
  const paint = (chain, i, under, ink) => {  // what chain[i] and its descendants show over `under`
    const style = getComputedStyle(chain[i]), bg = parse(style.backgroundColor);
    let inside = over(bg, under, bg[3]);
    inside = i + 1 < chain.length ? paint(chain, i + 1, inside, ink) : ink ? over(ink, inside, ink[3]) : inside;
    return over(inside, under, chain[i].closest('.canvas') ? Number(style.opacity) : 1);
  };
  const lum = (rgb) => rgb.map(v => v / 255).map(v => v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
                         .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const chain = [];
  for (let e = el; e; e = e.parentElement) chain.unshift(e);
  const ink = parse(inkText || getComputedStyle(el).color), white = [255, 255, 255];
  const [hi, lo] = [lum(paint(chain, 0, white, ink)), lum(paint(chain, 0, white, null))].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}
"""

# (canvas) => {"<state> <text>": ratio} for every visible text of the canvas's tokens (a deleted one too) and
# legend keys, the lowest per name: a token's text, an edit's replaced text, a ghost, an EOS run's ×N, a legend key; a
# text made only of whitespace glyphs (decoration, drawn faint on purpose) is left out
CANVAS_CONTRAST_JS = """
(canvas) => {
  const contrast = TEXT_CONTRAST;
  const shown = (el) => [...el.childNodes].filter(n => !(n.classList && n.classList.contains('ws')))
                                          .map(n => n.textContent).join('').trim() !== '';
  const PART = {txt: 'text', new: 'text', old: 'replaced text', ghost: 'text'};
  const seen = {};
  const note = (name, r) => { seen[name] = Math.min(seen[name] || 99, r); };
  for (const tok of canvas.querySelectorAll('.tok, .gone, .key[data-state]')) {
    if (!tok.getClientRects().length) continue;
    const past = tok.classList.contains('cut') ? ' past the output' : '';
    const key = tok.classList.contains('key') ? ' key' : '';
    for (const el of tok.querySelectorAll('.txt, .new, .old, .ghost')) {
      if (!shown(el)) continue;
      const part = el.classList[0], state = part === 'ghost' ? 'ghost' : tok.dataset.state;
      note(key ? `${state} key` : `${state} ${PART[part]}${past}`, contrast(el));
    }
    if (tok.dataset.run) note(`${tok.dataset.state} ×N${past}`, contrast(tok, getComputedStyle(tok, '::after').color));
  }
  return seen;
}
""".replace("TEXT_CONTRAST", TEXT_CONTRAST_JS.strip())
