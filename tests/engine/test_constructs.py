"""Every construct on the scripted provider: the bindings and records it leaves."""

from __future__ import annotations

import pytest

from openprose.engine.errors import (
    MemoryMissing,
    MissingInput,
    ParallelFailed,
    RecursionLimitExceeded,
    RunawayLoop,
    SessionFailed,
    ThrownError,
)
from openprose.engine.interpreter import Interpreter


def test_let_session_and_interpolation(harness):
    h = harness({"sessions": [{"match": "name", "output": "Ada"},
                              {"match": r"Hello (\w+)", "output": r"greeted \1"}]})
    out = h.run('let name = session "Get a name"\noutput greeting = session "Hello {name}!"\n')
    assert out == {"greeting": "greeted Ada"}
    assert h.value("name") == "Ada"
    assert h.journal.bindings[("greeting", None)] == ("greeted Ada", "output")


def test_agent_merge_session_prompt_replaces_agent_prompt(harness):
    h = harness({"default_output": "x"})
    seen = []
    orig = h.provider.run_session

    async def spy(request, io):
        seen.append(request)
        return await orig(request, io)

    h.provider.run_session = spy
    h.run('agent r:\n  model: haiku\n  prompt: "You research"\n\n'
          'session: r\n  prompt: "Find facts"\n  model: opus\n\nsession: r\n')
    assert (seen[0].prompt, seen[0].system, seen[0].model) == ("Find facts", "You research", "opus")
    assert (seen[1].prompt, seen[1].system, seen[1].model) == ("You research", None, "haiku")


def test_context_by_value_and_reference(harness):
    h = harness({"sessions": [{"match": "Write.*", "output": r"got \g<0>"},
                              {"match": "Research", "output": "FACTS"}]})
    h.run('let research = session "Research"\nlet w = session "Write"\n  context: research\n')
    assert h.value("w") == "got Write\n## research\nFACTS"


def test_retry_then_success_with_exponential_backoff(harness):
    h = harness({"sessions": [{"match": "Flaky", "output": "fine", "fail": 2}]})
    h.run('let x = session "Flaky"\n  retry: 3\n  backoff: "exponential"\n')
    assert h.value("x") == "fine"
    assert h.delays == [1.0, 2.0]


def test_retry_exhausted_fails_with_location(harness):
    h = harness({"sessions": [{"match": "Flaky", "output": "fine", "fail": 5}]})
    with pytest.raises(SessionFailed) as info:
        h.run('let a = "x"\nlet x = session "Flaky"\n  retry: 1\n  backoff: "linear"\n')
    assert info.value.span.line == 2
    assert h.delays == [1.0]


def test_parallel_all_binds_every_branch(harness):
    h = harness({"sessions": [{"match": "T(.)", "output": r"r\1"}]})
    h.run('parallel:\n  a = session "TA"\n  b = session "TB"\nlet c = session "TC"\n'
          '  context: { a, b }\n')
    assert (h.value("a"), h.value("b")) == ("rA", "rB")


def test_parallel_fail_fast_cancels_and_records(harness):
    h = harness({"sessions": [{"match": "slow", "output": "s", "latency": 5},
                              {"match": "bad", "fail": 9}]})
    with pytest.raises(ParallelFailed):
        h.run('parallel:\n  a = session "slow"\n  b = session "bad"\n')
    assert ("0|0", "cancelled") in h.journal.notes
    assert ("0|0", "cancelled") in h.journal.aborted


def test_parallel_continue_waits_then_fails_with_all_errors(harness):
    h = harness({"sessions": [{"match": "bad", "fail": 9}, {"match": "good", "output": "g",
                                                            "latency": 0.05}]})
    with pytest.raises(ParallelFailed) as info:
        h.run('parallel (on-fail: "continue"):\n  a = session "good"\n  b = session "bad1"\n'
              '  c = session "bad2"\n')
    assert len(info.value.errors) == 2
    assert h.value("a") == "g"


def test_parallel_ignore_treats_failures_as_success(harness):
    h = harness({"sessions": [{"match": "bad", "fail": 9}], "default_output": "d"})
    h.run('parallel (on-fail: "ignore"):\n  a = session "bad"\n  b = session "ok"\n'
          'let after = session "after"\n')
    assert h.value("after") == "d"


def test_parallel_first_returns_fastest_and_cancels_rest(harness):
    h = harness({"sessions": [{"match": "fast", "output": "F", "latency": 0.01},
                              {"match": "slow", "output": "S", "latency": 5}]})
    h.run('parallel ("first"):\n  a = session "slow"\n  b = session "fast"\n')
    assert h.value("b") == "F"
    assert ("0|0", "cancelled") in h.journal.notes


def test_parallel_any_count(harness):
    h = harness({"sessions": [{"match": "q", "output": "Q", "latency": 0.01},
                              {"match": "bad", "fail": 9},
                              {"match": "slow", "output": "S", "latency": 5}]})
    h.run('parallel ("any", count: 2):\n  a = session "q1"\n  b = session "bad"\n'
          '  c = session "q2"\n  d = session "slow"\n')
    assert (h.value("a"), h.value("c")) == ("Q", "Q")
    assert [k for k, s in h.journal.notes] == ["0|3"]


def test_repeat_for_and_index_variables(harness):
    h = harness({"sessions": [{"match": r"item (\S+) at (\d)", "output": r"\1\2"}]})
    out = h.run('let xs = ["a", "b"]\noutput r = for x, i in xs:\n  session "item {x} at {i}"\n'
                'repeat 2 as k:\n  session "item k at {k}"\n')
    assert out["r"] == ["a0", "b1"]
    assert h.prompts()[-2:] == ["item k at 0", "item k at 1"]


def test_parallel_for_keeps_item_order(harness):
    h = harness({"sessions": [{"match": r"do (\d)", "output": r"done \1"},
                              {"match": "do 1", "latency": 0.05}]})
    out = h.run('output r = parallel for x in [1, 2, 3]:\n  session "do {x}"\n')
    assert out["r"] == ["done 1", "done 2", "done 3"]


def test_parallel_for_prepares_at_most_two_waves(harness):
    """Iterations start as others end: twice the concurrency cap under way, never all 40."""
    h = harness({"default_output": "v", "latency": 0.01})
    under_way, most = 0, 0
    spawn = Interpreter.spawn

    async def counted(self, *args, **kwargs):
        nonlocal under_way, most
        under_way += 1
        most = max(most, under_way)
        try:
            return await spawn(self, *args, **kwargs)
        finally:
            under_way -= 1

    Interpreter.spawn = counted
    try:
        out = h.run("output r = parallel for x in [" + ", ".join(map(str, range(40))) + "]:\n"
                    '  session "do {x}"\n', max_concurrency=3)
    finally:
        Interpreter.spawn = spawn
    assert out["r"] == ["v"] * 40
    assert most == 6


def test_parallel_for_fail_fast_records_unstarted_iterations_cancelled(harness):
    h = harness({"sessions": [{"match": "do 0", "fail": 9}], "latency": 0.05})
    with pytest.raises(ParallelFailed):
        h.run("parallel for x in [" + ", ".join(map(str, range(10))) + "]:\n"
              '  session "do {x}"\n', max_concurrency=1)
    cancelled = {key for key, status in h.journal.notes if status == "cancelled"}
    assert cancelled == {f"0[{i}]" for i in range(1, 10)}
    assert len(h.prompts()) < 10  # the iterations beyond the window never started


def test_loop_until_checks_before_each_iteration(harness):
    h = harness({"conditions": [{"match": "done", "verdicts": [False, False, True]}]})
    out = h.run('output r = loop until **done** (max: 10) as i:\n  session "work {i}"\n')
    assert out["r"] == ["ok", "ok"]
    h2 = harness({"conditions": [{"match": "done", "verdicts": [True]}]})
    assert h2.run('output r = loop until **done**:\n  session "work"\n') == {"r": []}


def test_loop_while_and_max(harness):
    h = harness({"default_verdict": True, "default_output": "w"})
    assert h.run('output r = loop while **more** (max: 3):\n  session "w"\n')["r"] == ["w"] * 3


def test_unbounded_loop_hits_safety_limit(harness):
    h = harness()
    with pytest.raises(RunawayLoop):
        h.run('loop:\n  session "w"\n', loop_limit=5)
    assert len(h.prompts()) == 5


def test_pipeline_filter_map_reduce_pmap(harness):
    h = harness({"sessions": [{"match": r"Keep\?\n## item\n(a|c)", "output": "yes"},
                              {"match": r"Keep\?", "output": "no"},
                              {"match": r"Up\n## item\n(\w)", "output": r"<\1>"},
                              {"match": r"Join\n## acc\n(.*)\n\n## x\n(.*)", "output": r"\1\2"},
                              {"match": r"P\n## item\n(\w+)", "output": r"p\1"}]})
    out = h.run('let xs = ["a", "b", "c"]\n'
                'output r = xs\n  | filter:\n    session "Keep?"\n      context: item\n'
                '  | map:\n    session "Up"\n      context: item\n'
                '  | reduce(acc, x):\n    session "Join"\n      context: [acc, x]\n'
                'output p = xs | pmap:\n  session "P"\n    context: item\n')
    assert out == {"r": "<a><c>", "p": ["pa", "pb", "pc"]}


def test_if_elif_else_and_choice(harness):
    h = harness({"conditions": [{"match": "security", "verdicts": [False]},
                                {"match": "perf", "verdicts": [True]}],
                 "choices": [{"match": "severity", "verdicts": ["Minor"]}]})
    out = h.run('if **security**:\n  output a = session "sec"\nelif **perf**:\n'
                '  output a = session "perf fix"\nelse:\n  output a = session "approve"\n'
                'choice **the severity**:\n  option "Critical":\n    output b = session "esc"\n'
                '  option "Minor":\n    output b = session "log it"\n')
    assert h.prompts() == ["perf fix", "log it"]
    assert h.journal.verdicts["0.if1?0"].value is True
    assert h.journal.verdicts["1?0"].value == "Minor"
    assert set(out) == {"a", "b"}


def test_try_catch_finally_and_rethrow(harness):
    h = harness({"sessions": [{"match": "risky", "fail": 9, "error": "boom"}]})
    h.run('try:\n  session "risky"\ncatch as err:\n  let handled = session "handle {err}"\n'
          'finally:\n  let cleaned = session "cleanup"\n')
    assert h.prompts()[1:] == ["handle session failed after 1 attempt(s): boom", "cleanup"]
    h2 = harness({"sessions": [{"match": "risky", "fail": 9}]})
    with pytest.raises(SessionFailed) as info:
        h2.run('try:\n  session "risky"\ncatch:\n  throw\nfinally:\n  session "cleanup"\n')
    assert info.value.span.line == 2
    assert h2.prompts()[-1] == "cleanup"


def test_throw_message_fails_program_with_location(harness):
    h = harness()
    with pytest.raises(ThrownError, match="stop here") as info:
        h.run('let a = session "x"\nthrow "stop here"\n')
    assert (info.value.span.line, info.value.location) == (2, "test.prose:2:1")


def test_assert_throws_unless_its_condition_holds(harness):
    """``assert`` (newer syntax, W020) runs as throw-unless; ``is`` compares as ``==``."""
    h = harness({"sessions": [{"match": "mode", "output": "fetch"}]})
    program = ('let mode = session "mode?"\nassert mode is "fetch": "wrong mode"\n'
               'output done = session "after"\n')
    assert h.run(program) == {"done": "ok"}
    h2 = harness({"sessions": [{"match": "mode", "output": "parse"}]})
    with pytest.raises(ThrownError, match="wrong mode") as info:
        h2.run(program)
    assert info.value.span.line == 2
    assert h2.prompts() == ["mode?"]


def test_blocks_params_recursion_and_execution_ids(harness):
    h = harness({"sessions": [{"match": r"leaf (\d)", "output": r"L\1"}]})
    out = h.run('block walk(n):\n  if n <= 0:\n    output session "leaf {n}"\n  else:\n'
                '    output do walk(n - 1)\n\noutput r = do walk(3)\n')
    assert out == {"r": "L0"}
    assert [f[2] for f in h.journal.frames] == [1, 2, 3, 4]
    assert h.value("n", 2) == 2


def test_recursion_limit(harness):
    h = harness()
    with pytest.raises(RecursionLimitExceeded, match="block 'f' exceeded max_depth 3"):
        h.run('block f(n) (max_depth: 3):\n  do f(n)\n\ndo f(1)\n')


def test_missing_input_named_before_any_session(harness):
    h = harness()
    with pytest.raises(MissingInput, match="topic"):
        h.run('input topic: "What to research"\nsession "x"\n')
    assert h.prompts() == []


def test_inputs_bound_and_mid_program_input_asks(harness):
    h = harness()
    out = h.run('input topic: "t"\nlet a = session "x {topic}"\ninput more: "m"\n'
                'output o = "{topic}-{more}"\n', inputs={"topic": "AI"},
                ask=lambda name, prompt: "asked")
    assert out == {"o": "AI-asked"}


def test_resume_without_memory_is_E018(harness):
    h = harness()
    with pytest.raises(MemoryMissing, match="E018"):
        h.run('agent cap:\n  persist: true\n  prompt: "lead"\n\nresume: cap\n  prompt: "go"\n')


def test_persistent_agent_session_then_resume(harness):
    h = harness({"default_output": "ok"})
    h.run('agent cap:\n  persist: true\n  prompt: "lead"\n\nsession: cap\n  prompt: "plan"\n'
          'resume: cap\n  prompt: "review"\n')
    assert "plan" in h.journal.memory["cap"] and "review" in h.journal.memory["cap"]


def test_destructure_object_and_member(harness):
    h = harness()
    out = h.run('let o = { a: "1", b: ["x", "y"] }\nlet { a, b } = o\noutput r = b[1]\n'
                'output s = o.a\n')
    assert out == {"r": "y", "s": "1"}


def test_arrow_passes_previous_output(harness):
    h = harness({"sessions": [{"match": "A", "output": "first"},
                              {"match": r"B\n## previous\n(\w+)", "output": r"B after \1"}]})
    out = h.run('output r = session "A" -> session "B"\n')
    assert out == {"r": "B after first"}
