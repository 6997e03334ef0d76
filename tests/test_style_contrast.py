"""Every canvas token state reads at 4.5:1 or more (WCAG AA) in the light and the dark theme, computed from
assets/style.css and the app's Gradio theme without a browser (tests/test_browser_contrast.py measures
the drawn page).

Each state's text is checked over its wash at the confidences a run draws (p = 0, 0.5, 1), inside and
outside the active block's own wash: the prompt, the mask (its legend key: a mask cell holds no text but
its ghost), the ghost (the model's guess inside a mask of the active block), draft, edit and MBE edit (the
new text and the replaced one), stable, and the `×N` count of a collapsed EOS run on any written state;
LLaDA2.2's moves: a deleted token's struck-out text on its wash, in the active block (where moves happen)
and outside it, and the legend's keys of an inserted mask (which holds no text) and of a delete.
"""

from __future__ import annotations

import pytest

from contrast import AA, STYLE, Sheet, custom_props, flatten, ratio, rules

PS = (0.0, 0.5, 1.0)  # confidences drawn (the wash grows with p)
WASHED = ("prompt", "draft", "edit", "mbe", "stable")  # states whose wash depends on p or the block only
WRITTEN = ("draft", "edit", "mbe", "stable")  # states an EOS run's first token can be in


def theme_sheets() -> dict[str, Sheet]:
    """The page's sheet per theme: Gradio's theme variables, then style.css (:root, the canvas's own
    variables, and `.dark` where the page is dark)."""
    from gradio.utils import BUILT_IN_THEMES

    from ui.demo import LOOK

    theme = rules(BUILT_IN_THEMES[LOOK["theme"]]._get_theme_css())
    style = rules(STYLE.read_text(encoding="utf-8"))
    light = custom_props(theme[":root"]) | custom_props(style[":root"]) | custom_props(style[".canvas"])
    dark = light | custom_props(theme[":root.dark"]) | custom_props(style[".dark"])
    return {"light": Sheet(light, style), "dark": Sheet(dark, style)}


@pytest.fixture(scope="module")
def sheets() -> dict[str, Sheet]:
    return theme_sheets()


def wash(sheet: Sheet, selector: str, p: float | None) -> tuple:
    s = sheet if p is None else sheet.with_props(p=str(p))
    return s.colour(s.get(selector, "background"))


def ratios(sheet: Sheet, ghost: str | None = None) -> dict[str, float]:
    """The lowest contrast of each state's text in one theme: {"<state> <text>": ratio}.

    `ghost` puts another colour in place of the ghost's (to show that the measure tells them apart)."""
    bg, act = sheet.colour("var(--canvas-bg)"), sheet.colour(sheet.get(".blk.act", "background"))
    ink = sheet.colour(sheet.get(".tok", "color"))
    old = sheet.colour(sheet.get(".tok .old", "color"))
    count = sheet.colour(sheet.get(".tok[data-run]::after", "color"))
    seen: dict[str, float] = {}

    def check(name: str, text: tuple, *layers: tuple) -> None:
        seen[name] = min(seen.get(name, 99.0), ratio(flatten([bg, *layers, text]), flatten([bg, *layers])))

    for under in ([], [act]):
        for p in PS:
            for state in WASHED:
                top = wash(sheet, f'[data-state="{state}"]', p)
                check(f"{state} text", ink, *under, top)
                if state in ("edit", "mbe"):
                    check(f"{state} replaced text", old, *under, top)
                if state in WRITTEN:
                    check(f"{state} ×N", count, *under, top)
    gone = sheet.colour(sheet.get(".gone .old", "color"))
    for under in ([], [act]):
        check("delete replaced text", gone, *under, wash(sheet, '[data-state="delete"]', None))
    for state in ("prompt", "mask", "draft", "edit", "mbe", "insert", "delete"):  # the legend's keys: a full wash
        check(f"{state} key", ink, wash(sheet, f'[data-state="{state}"]', None))
    check("stable key", ink, wash(sheet, '.key[data-state="stable"]', None))
    ghost_ink = sheet.colour(ghost or sheet.get(".tok .ghost", "color"))
    check("ghost text", ghost_ink, act, wash(sheet, '[data-state="mask"]', None))  # a ghost: active block only
    return seen


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_state_reads_at_aa(sheets, theme):
    seen = ratios(sheets[theme])
    assert {"delete replaced text", "insert key", "delete key"} <= set(seen)
    low = {name: round(r, 2) for name, r in seen.items() if r < AA}
    assert low == {}, f"{theme} theme: text under {AA}:1: {low}"
    print(theme, {name: round(r, 2) for name, r in sorted(seen.items())})


def test_the_sheet_reads_each_themes_colours(sheets):
    light, dark = sheets["light"], sheets["dark"]
    assert light.colour("var(--canvas-bg)") == (1.0, 1.0, 1.0, 1.0)  # Gradio's block fill: white ...
    assert ratio(dark.colour("var(--canvas-bg)"), (0.0, 0.0, 0.0, 1.0)) < 2  # ... and a dark grey
    for sheet in (light, dark):  # the ink is the theme's body text, far from its background
        assert ratio(sheet.colour("var(--canvas-ink)"), sheet.colour("var(--canvas-bg)")) > 10
    draft = wash(light, '[data-state="draft"]', 1.0)
    assert draft[:3] == light.colour("var(--c-draft)")[:3]  # a wash is the state's colour, made translucent
    assert draft[3] == pytest.approx(light.number("var(--wash-base)") + light.number("var(--wash-span)"))
    assert wash(dark, '[data-state="draft"]', 1.0)[3] < draft[3]  # lighter washes on a dark page


def test_the_subdued_grey_would_not_read_as_a_ghost(sheets):
    """The measure bites: the theme's subdued grey, the ghost's colour before, is under 4.5:1 in both themes."""
    for theme in ("light", "dark"):
        assert ratios(sheets[theme], ghost="var(--canvas-soft)")["ghost text"] < AA


def test_wcag_formula_at_its_ends():
    white, black = (1.0, 1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 1.0)
    assert ratio(white, black) == pytest.approx(21.0) and ratio(white, white) == 1.0
    grey = Sheet({}, {}).colour("#767676")  # the lightest grey that reads on white: 4.54:1
    assert ratio(grey, white) == pytest.approx(4.54, abs=0.01)
    half = Sheet({}, {}).colour("color-mix(in srgb, #000000 50%, transparent)")
    assert half == (0.0, 0.0, 0.0, 0.5) and flatten([white, half])[:3] == pytest.approx((0.5, 0.5, 0.5))
