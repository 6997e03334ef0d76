"""The launched playground over gradio_client: /generate streams, /trace and /compare agree, bad input is refused."""

from __future__ import annotations

import pytest

gradio_client = pytest.importorskip("gradio_client")

from ui_helpers import api_client, launch_app  # noqa: E402

PROMPT = "def add(a, b):"
GEN = ("Q", 0.7, 0.5, False, 8, 16)  # mode, tau_mask, tau_edit, mbe, block_length, gen_length


@pytest.fixture(scope="module")
def app(tiny_model_dir):
    demo, url = launch_app(tiny_model_dir)
    yield demo, url
    demo.close()


@pytest.fixture(scope="module")
def client(app):
    return api_client(app[1])


def test_endpoints_follow_the_contract(client):
    named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/generate", "/compare", "/trace"} <= set(named)
    params = [p["parameter_name"] for p in named["/generate"]["parameters"]]
    assert params == ["prompt", "mode", "tau_mask", "tau_edit", "mbe", "block_length", "gen_length", "model", "pokes"]
    assert [p["parameter_name"] for p in named["/compare"]["parameters"]] == ["prompt", "block_length", "gen_length",
                                                                              "model"]


def test_the_api_pages_examples_run_when_copied(client):
    named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for name in ("/generate", "/compare"):
        example = [p["example_input"] for p in named[name]["parameters"]]
        assert client.predict(*example, api_name=name)  # no refusal: the shown values are valid


def test_generate_streams_and_matches_the_trace_and_the_cli(client, tiny_model_dir):
    from llada.pipeline import Pipeline

    job = client.submit(PROMPT, *GEN, api_name="/generate")
    updates = list(job)
    assert len(updates) >= 2
    text, stats = job.outputs()[-1]
    assert set(stats) >= {"forwards", "tokens", "tpf", "tps", "drafts", "edits", "mbe_edits", "inserts", "deletes"}
    engine = stats.pop("engine")  # which MoE engine ran: on the CPU the reference, no self-check to run
    assert (engine["engine"], engine["self_check"], engine["fell_back"]) == ("reference", "none", False)
    trace = client.predict(api_name="/trace")
    decodes = [r for r in trace["records"] if r["kind"] == "decode"]
    assert stats["forwards"] == len(trace["records"]) and trace["result"]["text"] == text
    assert trace["result"]["stats"] | {"status": "done", "note": ""} == stats | {"steps": len(decodes)}
    assert stats["drafts"] == sum(len(r["drafts"]) for r in decodes)
    assert stats["edits"] == sum(len(r["edits"]) for r in decodes)
    pipe = Pipeline.load(tiny_model_dir)
    cli = pipe.generate(pipe.encode(PROMPT), pipe.config("Q", block_length=8, gen_length=16)).summary()
    assert (stats["tokens"], stats["tpf"], stats["drafts"], stats["edits"], stats["mbe_edits"]) == (
        len(cli["output_ids"]), cli["tpf"], cli["drafts"], cli["edits"], cli["mbe_edits"])
    assert stats["forwards"] == cli["num_decode_forwards"] + cli["num_cache_forwards"]


@pytest.mark.parametrize("tau_mask, tau_edit, expect", [(None, None, (0.7, 0.5)), (0.3, None, (0.3, 0.5)),
                                                         (0.95, 0.0, (0.95, 0.0))])
def test_a_named_mode_sets_thresholds_and_explicit_ones_override(client, tau_mask, tau_edit, expect):
    client.predict(PROMPT, "Q", tau_mask, tau_edit, False, 8, 8, api_name="/generate")
    settings = client.predict(api_name="/trace")["settings"]
    assert (settings["threshold"], settings["editing_threshold"]) == expect


@pytest.mark.parametrize("args,message", [
    (("", *GEN), "empty"), ((PROMPT, "Q", 1.5, 0.5, False, 8, 16), "tau_mask"),
    ((PROMPT, "Q", 0.7, 0.5, False, 8, 0), "gen_length"), ((PROMPT, "Q", 0.7, 0.5, False, 999, 16), "block_length"),
    (("x" * 20000, *GEN), "too long")])
def test_bad_input_is_refused(client, args, message):
    with pytest.raises(Exception, match=message):
        client.predict(*args, api_name="/generate")


def test_queue_survives_refusals_and_compare_runs(client, tiny_model_dir):
    with pytest.raises(Exception, match="empty"):
        client.predict("", 8, 8, api_name="/compare")
    out = client.predict(PROMPT, 8, 8, api_name="/compare")
    assert set(out) == {"S", "Q"}
    from llada.pipeline import Pipeline

    pipe = Pipeline.load(tiny_model_dir)
    for mode, stats in out.items():  # each side equals its own run through the engine
        alone = pipe.generate(pipe.encode(PROMPT), pipe.config(mode, block_length=8, gen_length=8))
        assert (stats["text"], stats["forwards"], stats["tpf"], stats["edits"]) == (
            alone.text, alone.forwards, alone.tpf, alone.edits)


def test_optional_inputs_have_their_defaults_and_a_call_by_name_runs(client):
    named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for name in ("/generate", "/compare"):
        required = [p["parameter_name"] for p in named[name]["parameters"] if not p["parameter_has_default"]]
        assert required in ([], ["prompt"]), (name, required)  # every documented optional input has a default
    defaults = {p["parameter_name"]: p["parameter_default"] for p in named["/generate"]["parameters"]}
    assert {k: defaults[k] for k in ("tau_mask", "tau_edit", "block_length", "model", "pokes")} == {
        "tau_mask": None, "tau_edit": None, "block_length": None, "model": "", "pokes": None}  # null: the mode's own
    client.predict(PROMPT, "S", None, None, False, None, 8, "", None, api_name="/generate")  # every input given
    given = client.predict(api_name="/trace")["settings"]
    text, stats = client.predict(prompt=PROMPT, gen_length=8, api_name="/generate")  # by name, the rest left out
    assert stats["status"] == "done" and isinstance(text, str)
    assert client.predict(api_name="/trace")["settings"] == given
    out = client.predict(prompt=PROMPT, gen_length=8, api_name="/compare")
    assert set(out) == {"S", "Q"}


def _raw_call(url: str, name: str, data: list) -> tuple[str, str]:
    """A plain HTTP call (`POST /gradio_api/call/NAME`): the last event's kind and its data, as sent."""
    import httpx

    base = f"{url.rstrip('/')}/gradio_api/call/{name}"
    event = httpx.post(base, json={"data": data}, timeout=30).json()["event_id"]
    kind = payload = ""
    with httpx.stream("GET", f"{base}/{event}", timeout=120) as stream:
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                payload = line[6:]
    return kind, payload


@pytest.mark.parametrize("name, data", [("generate", [PROMPT, "S"]), ("generate", [PROMPT, *GEN, "", None, "extra"]),
                                        ("compare", [PROMPT, 8, 8, "", None]), ("compare", [])])
def test_a_wrong_number_of_inputs_is_refused_with_their_names(client, name, data):
    expected = {"generate": "prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length, model, pokes",
                "compare": "prompt, block_length, gen_length, model"}[name]
    kind, message = _raw_call(client.src, name, data)
    assert kind == "error"
    assert f"/{name} takes {len(expected.split(', '))} inputs, in this order: {expected}; got {len(data)}" in message


def test_generate_applies_pokes_and_lists_them_as_the_cli_does(client, tiny_model_dir):
    from llada.pipeline import Pipeline
    from llada.records import Poke

    pokes = ["2:0:mask", {"step": 3, "pos": 1, "token": "#9"}, {"step": 10_000, "pos": 5, "token": 7}]
    text, stats = client.predict(PROMPT, *GEN, "", pokes, api_name="/generate")
    pipe = Pipeline.load(tiny_model_dir)
    alone = pipe.generate(pipe.encode(PROMPT), pipe.config("Q", block_length=8, gen_length=16),
                          pokes=[Poke(2, 0, pipe.mask_id), Poke(3, 1, 9), Poke(10_000, 5, 7)])
    assert text == alone.text and stats["pokes"] == alone.poke_list()
    assert [(p["pos"], p["new"]) for p in stats["pokes"]] == [(0, pipe.mask_id), (1, 9), (5, 7)]
    assert stats["pokes"][2]["step"] <= stats["forwards"]  # a poke after the end: applied after the last forward
    trace = client.predict(api_name="/trace")
    assert sum(len(r.get("pokes", [])) for r in trace["records"]) == 3
    _, plain = client.predict(PROMPT, *GEN, api_name="/generate")
    assert "pokes" not in plain  # without pokes the stats are the ones they always were


@pytest.mark.parametrize("pokes, message", [
    (["0:0:mask"], "below 1"), (["1:16:mask"], "outside the generated region"), (["1:0"], "STEP:POS:TOKEN"),
    (["a:0:mask"], "whole numbers"), (["1:0:#99999"], "unknown"), (["1:0:hello world, twice over"], "not one"),
    ([{"step": 1, "pos": 0}], "exactly step, pos and token"), ([{"step": True, "pos": 0, "token": "mask"}], "whole"),
    ("1:0:mask", "must be a list"), (["1:0:mask"] * 65, "at most 64")])
def test_generate_refuses_every_bad_poke(client, pokes, message):
    with pytest.raises(Exception, match=message):
        client.predict(PROMPT, *GEN, "", pokes, api_name="/generate")


def test_refused_calls_leave_no_sessions_behind(app):
    from ui.sessions import ONE_SHOTS

    demo, url = app
    before = set(demo.state_holder.session_data)
    for _ in range(ONE_SHOTS.keep + 4):  # malformed plain calls, refused before their handler runs
        assert _raw_call(url, "generate", [PROMPT, "S"])[0] == "error"
    _raw_call(url, "generate", [PROMPT, *GEN, "", None])  # one served call: the finished refused ones go
    left = set(demo.state_holder.session_data) - before
    assert len(left) <= ONE_SHOTS.keep + 1, f"{len(left)} sessions of {ONE_SHOTS.keep + 5} plain calls still held"
