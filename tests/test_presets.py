"""One preset table, one rule: a named mode sets the settings, explicit ones override it, everywhere."""

import json
import shutil
from pathlib import Path

import pytest

from llada.weights.checkpoint import CheckpointError
from llada.pipeline import Pipeline
from llada.presets import OFFICIAL, PresetError, check_presets, load_presets, resolve

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "model"


def test_official_modes_are_the_model_card_values():
    assert resolve("S").threshold == 0.5 and resolve("S").editing_threshold == 0.0
    assert resolve("q").threshold == 0.7 and resolve("Q").editing_threshold == 0.5
    assert resolve("M2T").threshold == 0.95 and resolve("M2T").editing_threshold is None
    assert {resolve(m).block_length for m in OFFICIAL} == {32} and {resolve(m).max_post_steps for m in OFFICIAL} == {16}


def test_explicit_settings_override_the_mode():
    cfg = resolve("Q", threshold=0.6, block_length=8)
    assert (cfg.threshold, cfg.editing_threshold, cfg.block_length) == (0.6, 0.5, 8)
    assert resolve("S", editing_threshold=None).editing_threshold is None  # explicit None: editing off


def test_unknown_mode_and_ui_labels_are_not_engine_modes():
    with pytest.raises(ValueError, match="unknown mode 'M2T only'"):
        resolve("M2T only")  # a UI label: the playground maps it, the engine does not
    with pytest.raises(ValueError, match="unknown decode setting"):
        resolve("S", tau=0.3)


def test_a_models_presets_override_key_by_key(tmp_path):
    (tmp_path / "presets.json").write_text(json.dumps({"S": {"threshold": 0.3, "block_length": 16},
                                                       "fast": {"threshold": 0.1}}))
    table = load_presets(tmp_path)
    assert table["S"] == OFFICIAL["S"] | {"threshold": 0.3, "block_length": 16}
    assert table["Q"] == OFFICIAL["Q"] and resolve("FAST", table).threshold == 0.1


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"), ('{"S": 3}', "expected"), ('{"S": {"threshold": 3}}', "mode S: threshold"),
    ('{"Q": {"speed": 1}}', "mode Q: unknown setting")])
def test_bad_presets_json_names_file_mode_and_setting(tmp_path, text, message):
    (tmp_path / "presets.json").write_text(text)
    with pytest.raises(PresetError, match=message):
        load_presets(tmp_path)


def test_a_broken_presets_json_is_a_checkpoint_error_of_that_model(tiny_model_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    (d / "presets.json").write_text('{"S": {"threshold": 3}}')
    with pytest.raises(CheckpointError, match=r"presets.json: mode S: threshold must be a number in \[0.0, 1.0\]"):
        Pipeline.load(d)


CALIBRATION = SHIPPED.parents[1] / "bench" / "results" / "presets-calibration-v4.json"


def test_the_shipped_presets_are_trainings_with_s_and_q_from_the_calibration():
    """Training writes the official table; the shipped S and Q are the ones its calibration chose
    (`python -m llada.eval.calibrate`, the report in bench/results), every other setting as training wrote it."""
    from llada.train.loop import PRESETS

    shipped = json.loads((SHIPPED / "presets.json").read_text())
    chosen = json.loads(CALIBRATION.read_text(encoding="utf-8"))["chosen"]
    calibrated = {mode: PRESETS[mode] | {"threshold": chosen[mode]["tau_mask"],
                                         "editing_threshold": chosen[mode]["tau_edit"]} for mode in ("S", "Q")}
    assert shipped == json.loads(json.dumps(PRESETS | calibrated))  # same modes, same keys, same values
    assert shipped["S"] != PRESETS["S"]  # calibrated: the official S drafts only 1.2x Q's tokens per forward here
    check_presets(shipped, "assets/model/presets.json")


def test_pipeline_cli_and_api_follow_one_rule(tiny_model_dir):
    from llada.__main__ import build_parser, decode_config
    from ui.settings import check_request

    pipe = Pipeline.load(tiny_model_dir)
    args = build_parser().parse_args(["generate", "--model", "m", "--prompt", "x", "--mode", "Q", "--threshold",
                                      "0.6"])
    cli = decode_config(pipe, args)
    api = check_request(pipe.presets, "x", "Q", tau_mask=0.6, gen_length=128).settings.config
    assert cli == api == pipe.config("Q", threshold=0.6, gen_length=128)
    named = check_request(pipe.presets, "x", "Q", gen_length=128).settings.config  # no explicit threshold: the mode's
    assert named == pipe.config("Q", gen_length=128)


def test_the_official_s_and_q_stay_one_name_away_whatever_a_model_calibrates(tmp_path):
    (tmp_path / "presets.json").write_text(json.dumps({"S": {"threshold": 0.15, "eos_early_stop": True},
                                                       "Q": {"editing_threshold": 0.3}}))
    table = load_presets(tmp_path)
    assert (table["S"]["threshold"], table["Q"]["editing_threshold"]) == (0.15, 0.3)
    assert table["S_OFFICIAL"] == OFFICIAL["S"] | {"eos_early_stop": True}  # the model's other settings kept
    assert table["Q_OFFICIAL"] == OFFICIAL["Q"]
    assert resolve("s_official", table) == resolve("S", eos_early_stop=True) and resolve("S_OFFICIAL").threshold == 0.5
    (tmp_path / "presets.json").write_text(json.dumps({"S_OFFICIAL": {"threshold": 0.4}}))  # a model may name it
    assert load_presets(tmp_path)["S_OFFICIAL"]["threshold"] == 0.4


def test_the_playground_offers_the_official_modes():
    from ui.settings import MODES, check_settings, preset_values

    table = load_presets(SHIPPED)
    assert {"S (official)", "Q (official)"} <= set(MODES)
    s, q = (check_settings(table, f"{m} (official)").config for m in ("S", "Q"))
    assert (s.threshold, s.editing_threshold, q.threshold, q.editing_threshold) == (0.5, 0.0, 0.7, 0.5)
    assert preset_values(table, "S (official)")["threshold"] == 0.5
