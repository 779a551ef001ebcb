"""Judgments see what they judge: the statement in its program and the bindings in scope."""

from __future__ import annotations

import json

from tests.engine.memjournal import MemJournal
from tests.engine.test_anthropic import _message, _run, server  # noqa: F401 - the fixture

from openprose.engine import judging
from openprose.engine.anthropic_provider import AnthropicProvider

REVIEW = ('let code = "def login(u): query(\\"SELECT * WHERE u=\\" + u)"\n'
          'let review = session "Review the code for problems"\n'
          '  context: code\n'
          'if **the review found a security problem**:\n'
          '  output verdict = session "Escalate"\n'
          'else:\n'
          '  output verdict = session "Approve"\n')


def _verdict(value, tool_id="v"):
    return (200, {}, _message([{"type": "tool_use", "id": tool_id, "name": "verdict",
                                "input": {"value": value, "reason": "from the review"}}],
                              "tool_use"))


def _text(text):
    return (200, {}, _message([{"type": "text", "text": text}], "end_turn"))


def test_an_if_judgment_carries_the_prior_sessions_value_and_the_program(server):  # noqa: F811
    srv = server([_text("Found an SQL injection in login()."), _verdict(True),
                  _text("escalated")])
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    out, _ = _run(REVIEW, provider, MemJournal())
    assert out == {"verdict": "escalated"}
    asked = srv.requests[1]["body"]["messages"][0]["content"]
    assert "the review found a security problem" in asked
    assert "Found an SQL injection in login()." in asked
    assert "> 4 | if **the review found a security problem**:" in asked
    assert "output verdict = session \"Escalate\"" in asked
    # most recent first: the review is listed before the code it reviewed
    assert asked.index("## review (let)") < asked.index("## code (let)")


def test_a_choice_judgment_sees_the_report_it_chooses_by(server):  # noqa: F811
    srv = server([_text("TOTAL OUTAGE: every region down for 40 minutes."),
                  _verdict("Critical"), _text("paged")])
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    out, _ = _run('let report = session "Summarize the incident"\n'
                  'choice **how severe the incident is**:\n'
                  '  option "Minor":\n    output r = session "Log it"\n'
                  '  option "Critical":\n    output r = session "Page"\n',
                  provider, MemJournal())
    assert out == {"r": "paged"}
    body = srv.requests[1]["body"]
    assert "TOTAL OUTAGE: every region down" in body["messages"][0]["content"]
    assert body["tool_choice"] == {"type": "tool", "name": "verdict"}


def test_a_long_value_is_previewed_and_the_judge_can_read_the_rest(server):  # noqa: F811
    long = "x" * 5000 + " THE END"
    srv = server([
        (200, {}, _message([{"type": "tool_use", "id": "r1", "name": "read_binding",
                             "input": {"name": "notes"}}], "tool_use")),
        _verdict(False),
    ])
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    _run(f'let notes = "{long}"\nif **the notes end well**:\n  let y = "z"\n', provider,
         MemJournal())
    first, second = srv.requests[0]["body"], srv.requests[1]["body"]
    assert "THE END" not in first["messages"][0]["content"]
    assert 'read_binding("notes")' in first["messages"][0]["content"]
    assert {t["name"] for t in first["tools"]} == {"verdict", "read_binding"}
    assert first["tool_choice"] == {"type": "any"}
    result = second["messages"][-1]["content"][0]
    assert result["content"] == long and result["is_error"] is False


def test_the_context_stays_within_its_budget_most_recent_first():
    seen = [judging.Seen(f"b{i}", "let", str(i) * 1500, f"loc{i}") for i in range(30)]
    items, read = judging.context_items(seen)
    assert [item.name for item in items] == [f"b{i}" for i in range(30)]
    assert sum(len(item.text) for item in items) <= judging.BUDGET + 200 * 30
    assert items[0].text == "0" * 1500  # small values are whole while the budget lasts
    assert "not shown" in items[-1].text and "loc29" in items[-1].text
    assert read is not None and read("b29") == "29" * 1500


def test_scripted_judgments_match_the_context_and_the_call_log_has_the_text(harness,
                                                                          tmp_path):
    h = harness({"sessions": [{"match": "Review", "output": "found an SQL injection"}],
                 "conditions": [{"match": "SQL injection", "verdicts": [True]}]})
    h.provider.call_log_path = tmp_path / "calls.jsonl"
    out = h.run(REVIEW)
    assert h.prompts()[-1] == "Escalate" and out == {"verdict": "ok"}
    logged = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    texts = [entry.get("text") for entry in logged if entry["phase"] == "start"]
    assert texts == ["Review the code for problems", "the review found a security problem",
                     "Escalate"]


def test_a_loop_condition_sees_the_latest_iteration(harness):
    h = harness({"sessions": [{"match": r"draft (\d)", "output": r"draft number \1"}],
                 "conditions": [{"match": "draft number 2", "verdicts": [True]}]})
    out = h.run('output r = loop until **the draft is good** (max: 9) as i:\n'
                '  session "draft {i}"\n')
    assert out["r"] == ["draft number 0", "draft number 1", "draft number 2"]
    judged = [c for c in h.provider.calls if c.kind == "judge" and c.phase == "start"]
    assert len(judged) == 4
