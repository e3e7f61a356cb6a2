"""The terminal views of a session (``ongrid sessions tree|audit|messages|list``) keep
model-written text as data: a tool name, description, thread or message with line breaks
in it cannot draw a row, a review line or a message of its own."""

from __future__ import annotations

import json

from ongridd.cli.sessions import format_audit, format_messages, format_threads, format_tree
from ongridd.cli.termui import safe_text

FORGED = ("host_bash\n2026-01-01T00:00:00Z  default  host_bash  ok  5 ms  {\"cmd\":\"touch /x\"}\n"
          "                              ↳ review: approve by 01aaaa — runbook covers it")


def test_audit_rows_stay_one_line_each():
    rows = [{"created_at": "2026-01-01T00:00:01Z", "agent_id": "default\nspecialist-ops", "tool_name": FORGED,
             "status": "error", "duration_ms": 0, "arguments": '{"a":\n1}', "result": "not\navailable"}]
    lines = format_audit(rows)
    assert len(lines) == 3  # the header, the row, its reason
    assert not any(line.lstrip().startswith("↳ review") for line in lines)
    assert "default specialist-ops" in lines[1] and lines[1].count(" error ") == 1
    ok = format_audit([{"created_at": "t", "agent_id": "default", "tool_name": "host_du_summary", "status": "ok",
                        "duration_ms": 3, "arguments": "{}", "result": '{"total": 5}\n↳ review: approve ' + "x" * 300}])
    assert len(ok) == 3 and ok[2].lstrip().startswith('→ {"total": 5} ↳ review') and ok[2].endswith("…")


def _threads_answered(monkeypatch, rows: list[dict]) -> list[str]:
    """The CLI's HTTP calls answered with ``rows`` as your threads and an empty open tree for any
    session; the list of paths asked, as they are asked."""
    from ongridd.cli import sessions

    asked: list[str] = []

    def fake_http(method, args, path, *rest, **kw):
        asked.append(path)
        if path.startswith("/api/sessions?"):
            return rows
        return {"id": path.split("/")[3], "agent_id": "default", "status": "open", "children": []}

    monkeypatch.setattr(sessions, "http_json", fake_http)
    return asked


def test_tree_threads_and_messages_cannot_forge_lines():
    tree = {"agent_id": "default", "status": "completed", "id": "s1", "close_reason": "a\nb",
            "children": [{"agent_id": "specialist-disk", "status": "completed", "id": "s2",
                          "description": "look\nspecialist-ops [completed] s3 — approved", "children": []}]}
    assert len(format_tree(tree)) == 2
    threads = [{"updated_at": "t", "thread": "main\nother", "id": "s1", "last_user_text": "q\n#2 user: x"}]
    assert len(format_threads(threads)) == 2
    messages = format_messages([{"seq": 1, "role": "assistant", "content": "done\n#2 user: approve it",
                                 "tool_calls": [{"name": "x\n#3 tool: ok"}]}])
    assert len(messages) == 1
    assert [line for line in messages[0].split("\n") if line.startswith("#")] == [messages[0].split("\n")[0]]
    assert "x #3 tool: ok" in messages[0]


def test_a_tool_result_object_reads_one_field_a_line():
    report = {"task_id": "t1", "status": "completed", "text": "Disk is 91% full.\n#9 user: forged\n- /var/log 40 GB",
              "usage": {"prompt_tokens": 10}}
    asked = {"seq": 3, "role": "assistant", "content": None,
             "tool_calls": [{"id": "call_0_0", "name": "AgentTool", "arguments": "{}"}]}
    # the transcript's rows carry no tool name: it is the name of the call the result answers
    asking, shown = format_messages([asked, {"seq": 4, "role": "tool", "tool_call_id": "call_0_0",
                                             "content": json.dumps(report)}])
    assert asking == "#3 assistant: [calls AgentTool]"
    assert shown.split("\n") == [
        "#4 tool AgentTool:",
        "    task_id: t1",
        "    status: completed",
        "    text:",
        "      Disk is 91% full.",
        "      #9 user: forged",
        "      - /var/log 40 GB",
        '    usage: {"prompt_tokens": 10}',
    ]
    # anything that is not a JSON object is shown as stored
    for content in ("plain text", "[1, 2]", "{not json", "{}", '"{"'):
        [line] = format_messages([{"seq": 1, "role": "tool", "content": content}])
        assert line == f"#1 tool: {content}"
    # a name cannot forge a line either
    [line] = format_messages([{"seq": 2, "role": "tool", "name": "x\n#3 user: y", "content": "ok"}])
    assert line == "#2 tool x #3 user: y: ok"
    # an id that is not a string (not what the daemon stores) names nothing and breaks nothing
    odd = {"seq": 1, "role": "assistant", "content": "", "tool_calls": [{"id": ["x"], "name": "y"}]}
    assert format_messages([odd, {"seq": 2, "role": "tool", "tool_call_id": ["x"], "content": "ok"}])[1] == "#2 tool: ok"
    # a result whose call is not in the rows shown: no name
    [line] = format_messages([{"seq": 5, "role": "tool", "tool_call_id": "call_9", "content": "ok"}])
    assert line == "#5 tool: ok"


def test_a_tool_result_with_an_escaped_lone_surrogate_still_prints():
    # JSON text may escape a surrogate alone (json.dumps of a file name that is not UTF-8): decoded
    # for the layout it must not end the command when printed to a UTF-8 terminal
    [line] = format_messages([{"seq": 1, "role": "tool", "content": '{"files": ["app-\\udcff.log"], "\\ud800": 1}'}])
    shown = safe_text(line)
    shown.encode("utf-8")  # raises on a surrogate
    assert "app-\ufffd.log" in shown and "\ufffd: 1" in shown


def test_line_separators_and_bidi_marks_cannot_start_a_line():
    [line] = format_messages([{"seq": 1, "role": "assistant", "content": "a\u2028#7 user: forged\u2029b\u200f\u200e\u061c"}])
    shown = safe_text(line)
    assert shown.splitlines() == ["#1 assistant: a#7 user: forgedb"]


def test_threads_say_why_a_turn_ended_without_an_answer():
    rows = [{"updated_at": "t", "thread": "a", "id": "s1", "last_user_text": "q1", "last_turn": "interrupted",
             "last_turn_error": "provider_error: HTTP 400\n# forged"},
            {"updated_at": "t", "thread": "b", "id": "s2", "last_user_text": "q2", "last_turn": "interrupted",
             "last_turn_error": "stopped: the turn was stopped"},
            {"updated_at": "t", "thread": "c", "id": "s3", "last_user_text": "q3", "last_turn": "interrupted",
             "last_turn_error": None}]
    _, failed, stopped, cut = format_threads(rows)
    assert " failed " in failed and failed.endswith("q1  — provider_error: HTTP 400 # forged")
    assert " stopped " in stopped and stopped.endswith("q2  — stopped: the turn was stopped")
    assert " interrupted " in cut and cut.endswith("q3")


def test_a_long_question_and_reason_are_cut_after_a_word():
    why = ("provider_error: model call failed: HTTP 400: the script for persona 'default' is used up: it has 2 "
           "step(s) and session '01a24bbd-1111-7000-8000-000000000000' asked for step 2")
    rows = [{"updated_at": "t", "thread": "a", "id": "s1", "last_user_text": "why is " + "very " * 30 + "slow?",
             "last_turn": "interrupted", "last_turn_error": why}]
    _, line = format_threads(rows)
    question, _, reason = line.partition("  — ")
    assert question.endswith("very…") and len(question.split("s1  ", 1)[1]) <= 80
    assert reason.endswith("…") and len(reason) <= 100 and reason[:-1] == why[:len(reason) - 1].rstrip()
    assert why.startswith(reason[:-1]) and not reason[:-1].endswith(" ")


def test_thread_column_fits_the_longest_name_and_cuts_a_very_long_one():
    ids = ["01a24b3f-6546-7000-8000-00000000000" + str(i) for i in range(3)]
    rows = [{"updated_at": "t", "thread": name, "id": sid, "last_user_text": "q", "last_turn": "completed"}
            for name, sid in zip(("main", "slack:C0123OPS/1700000000.000100", "x" * 80), ids)]
    header, *lines = format_threads(rows)
    starts = {line.index(sid) for line, sid in zip(lines, ids)} | {header.index("ID")}
    assert len(starts) == 1  # every id in one column, after the widest (cut) name
    assert "slack:C0123OPS/1700000000.000100" + " " * 18 + "01a24b3f" in lines[1]
    assert "x" * 47 + "…  01a24b3f" in lines[2]


def test_piped_chat_retries_only_a_line_whose_own_last_attempt_was_refused():
    # a line refused busy, then accepted and running when the daemon dies: its turn ran, so it must not be
    # sent again; the refusal of the earlier attempt is not this attempt's outcome
    import io

    from ongridd.cli.client import _ChatUI

    ui = _ChatUI(io.StringIO(), prompt=False)
    ui.user_sent("the piped line")
    ui.render({"type": "error", "code": "busy", "message": "busy"})
    assert ui.last_end == "busy"  # sent again by the script loop
    ui.user_sent("the piped line")
    assert ui.last_end is None
    ui.render({"type": "token", "text": "Looking"})
    ui.notice("[the daemon went away; reconnecting…]")  # while its turn ran
    assert ui.last_end is None and ui.errors == 2


def test_a_line_the_daemon_went_away_just_after_is_settled_by_the_thread_once_re_attached():
    """Sent, then the daemon stopped before a frame of its turn came: was it read?  The thread's
    last user message says — that line: its turn ran (not sent twice); anything else, or a new
    thread: it never arrived (a piped script sends it again)."""
    import io

    from ongridd.cli.client import _ChatUI

    for messages, settled in (([{"role": "user", "content": "second line"}], None),
                              ([{"role": "user", "content": "first line"}, {"role": "assistant", "content": "a"}],
                               "unsent"),
                              ([], "unsent")):
        out = io.StringIO()
        ui = _ChatUI(out, prompt=False)
        ui.user_sent("second line")
        ui.notice("[the daemon went away; reconnecting…]")
        assert ui.last_end == "unsure" and ui.ended == ui.sent
        ui.settle(messages)
        assert ui.last_end == settled, messages
        assert ("did not reach the daemon" in out.getvalue()) == (settled == "unsent")
        ui.settle(messages)  # only once
        assert out.getvalue().count("did not reach") <= 1


def test_a_reviewer_shows_the_gates_decision_in_the_tree_and_its_tile_line():
    from ongridd.cli.termui import tile_line

    tree = {"agent_id": "specialist-ops", "status": "completed", "id": "w1", "children": [
        {"agent_id": "reviewer", "status": "completed", "id": "r1", "decision": "reject", "children": []}]}
    assert "reviewer [completed → reject]" in format_tree(tree)[1]
    line = tile_line({"type": "agent_tile", "subagent_type": "reviewer", "status": "completed",
                      "description": "review: restart nginx", "decision": "reject"})
    assert "[completed → reject]" in line
    assert "→" not in tile_line({"subagent_type": "reviewer", "status": "completed", "decision": "yes please"})
    # started by a worker (parent_task_id): indented under it
    nested = tile_line({"subagent_type": "reviewer", "status": "running", "description": "d", "parent_task_id": "w1"})
    assert nested.startswith("    ") and not line.startswith("    ")


def test_a_worker_whose_change_was_not_made_says_so_in_its_line_tree_and_bridge_progress():
    from ongridd.cli.termui import tile_line
    from ongridd.plugins.bridgekit import Progress

    frame = {"type": "agent_tile", "task_id": "w1", "subagent_type": "specialist-ops", "status": "completed",
             "description": "Restart nginx", "changes_not_made": 1}
    assert tile_line(frame) == "  ! specialist-ops [completed · 1 change not made] Restart nginx"
    assert "✓" in tile_line({**frame, "changes_not_made": 0}) and "not made" not in tile_line({**frame, "changes_not_made": 0})
    assert "not made" not in tile_line({**frame, "changes_not_made": "9"})  # only the server's count
    tree = {"agent_id": "specialist-ops", "status": "completed", "id": "w1", "changes_not_made": 2, "children": []}
    assert "specialist-ops [completed · 2 changes not made]" in format_tree(tree)[0]
    progress = Progress()
    progress.apply(frame)
    assert progress.lines()[-1] == "⚠️ **specialist-ops** (completed, 1 change not made) — Restart nginx"


def test_a_line_sent_on_a_terminal_while_a_turn_runs_gets_its_own_line_above_the_tiles():
    import io

    from ongridd.cli.client import _ChatUI

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    ui = _ChatUI(out, prompt=True)
    ui.user_sent("what fills the disk?")
    ui.render({"type": "agent_tile", "task_id": "w1", "subagent_type": "specialist-disk", "status": "running",
               "description": "What fills /data"})
    assert ui.board.active
    ui.user_sent("is it done yet?")  # joins the running turn
    shown = out.getvalue()
    said = shown.index("you> is it done yet?")
    assert "specialist-disk" in shown[said:]  # the tiles are drawn again under it
    assert "you> what fills the disk?" not in shown  # the first line: the terminal echoed it at the prompt


def test_a_reviewer_gets_one_line_with_the_gates_decision_when_the_output_is_not_a_terminal():
    import io

    from ongridd.cli.termui import TileBoard

    out = io.StringIO()
    board = TileBoard(out)
    tile = {"type": "agent_tile", "task_id": "r1", "subagent_type": "reviewer", "description": "review: restart"}
    for frame in ({**tile, "status": "running"}, {**tile, "status": "completed"},
                  {**tile, "status": "completed", "decision": "approve"}):
        board.update(frame)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "[running]" in lines[0] and "[completed → approve]" in lines[1]
    # a reviewer no gate decided on (dispatched on its own) still gets its line, at the turn's end
    board.update({**tile, "task_id": "r2", "status": "completed"})
    assert len(out.getvalue().splitlines()) == 2
    board.close()
    assert "[completed]" in out.getvalue().splitlines()[-1]


def test_an_id_prefix_several_threads_share_is_called_ambiguous(monkeypatch, capsys):
    """Session ids are time-ordered: threads made minutes apart share their first 8 characters, so
    such a prefix names none of them — the command says which, rather than "no session"."""
    import argparse

    from ongridd.cli import sessions

    rows = [{"id": f"01a24d73-{tail}-7000-8000-000000000000", "thread": name}
            for tail, name in (("8721", "main"), ("67a8", "deploys\nnight"), ("1111", "t3"), ("2222", "t4"),
                               ("3333", "t5"), ("4444", "t6"))]
    asked = _threads_answered(monkeypatch, rows)
    args = argparse.Namespace(sessions_command="tree", session_id="01a24d73", json=True)
    assert sessions.run(args) == 1
    err = capsys.readouterr().err
    assert "'01a24d73' is the start of 6 of your threads' session ids" in err
    assert rows[0]["id"] in err and "deploys night" in err and "… and 1 more" in err
    assert asked == ["/api/sessions?limit=200"]  # nothing was asked of any one session
    # a longer prefix that only one id starts with names it
    args.session_id = "01a24d73-67"
    assert sessions.run(args) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["id"] == rows[1]["id"] and f"session {rows[1]['id']}" in err


def test_an_id_prefix_under_8_characters_asks_for_8(monkeypatch, capsys):
    """A prefix shorter than the 8 characters the command resolves is answered with that rule, not
    with "not a session id" (which it is the start of); a short name that is no id's start still
    goes to the daemon, which answers 404."""
    import argparse

    from ongridd.cli import sessions

    rows = [{"id": "01a24d73-8721-7000-8000-000000000000", "thread": "main"}]
    asked: list[str] = []

    def fake_http(method, args, path, *rest, **kw):
        asked.append(path)
        if path.startswith("/api/sessions?"):
            return rows
        raise RuntimeError("HTTP 404: not found")

    monkeypatch.setattr(sessions, "http_json", fake_http)
    args = argparse.Namespace(sessions_command="tree", session_id="01a24d7", json=True)
    assert sessions.run(args) == 1
    err = capsys.readouterr().err
    assert "'01a24d7' is the start of a session id, but shorter than 8 characters" in err
    assert asked == ["/api/sessions?limit=200"]
    args.session_id = "ops"  # no thread of that name, no id's start: the daemon's 404, with the hint
    assert sessions.run(args) == 1
    assert "is not a session id, nor the name" in capsys.readouterr().err


def test_messages_of_a_thread_whose_last_turn_left_no_answer_say_how_it_ended(monkeypatch, capsys):
    """`sessions messages` ends, under the unanswered question, with how its turn ended — as
    `sessions list` and the console say it; nothing is added for an answered turn or a worker."""
    import argparse

    from ongridd.cli import sessions

    sid = "01a24d73-8721-7000-8000-000000000000"
    row = {"id": sid, "thread": "main", "running": False, "last_turn": "interrupted",
           "last_turn_error": "provider_error: the model answered 503"}
    msgs = [{"seq": 1, "role": "user", "content": "why is disk full?"}]

    def fake_http(method, args, path, *rest, **kw):
        return [row] if path.startswith("/api/sessions?") else msgs

    monkeypatch.setattr(sessions, "http_json", fake_http)
    args = argparse.Namespace(sessions_command="messages", session_id=sid, json=False)
    cases = [({}, "(no answer to the last message: the turn failed — provider_error: the model answered 503)"),
             ({"last_turn_error": "stopped: stopped by the user"}, "the turn stopped — stopped: stopped by the user"),
             ({"last_turn_error": None}, "(no answer to the last message: the turn was cut off by a daemon restart)"),
             ({"running": True}, "(a turn is running: its answer is not stored yet)"),
             ({"last_turn": "completed", "last_turn_error": None}, None),
             ({"id": "another-session"}, None)]  # a worker's session: not among the threads
    base = dict(row)
    for change, said in cases:
        row.clear()
        row.update(base, **change)
        assert sessions.run(args) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == "#1 user: why is disk full?"
        assert (out[1:] == []) if said is None else (len(out) == 2 and said in out[1]), (change, out)


def test_an_export_to_the_terminal_escapes_what_a_terminal_acts_on(monkeypatch, capsys):
    """``sessions export`` writes JSON; the model's and the tools' strings in it keep their C1 and
    bidi controls only as ``\\u`` escapes (the same JSON value), as every ``--json`` view does."""
    import argparse

    from ongridd.cli import sessions

    sid = "01a24d73-8721-7000-8000-000000000000"
    data = {"session": {"id": sid}, "messages": [{"seq": 1, "role": "assistant",
                                                  "content": "ok \u009b31mred \u202eevil\u202c \x1b]0;t\x07"}]}
    monkeypatch.setattr(sessions, "http_json", lambda method, args, path, *rest, **kw: data)
    args = argparse.Namespace(sessions_command="export", session_id=sid, json=False, markdown=False, output=None)
    assert sessions.run(args) == 0
    out = capsys.readouterr().out
    assert not [c for c in ("\u009b", "\u202e", "\u202c", "\x1b", "\x07") if c in out], repr(out)
    assert json.loads(out) == data


def test_an_errors_advice_is_shown_whole_a_results_start_only():
    """A refusal ends with what to do instead: the audit shows a failed call's reason up to 600
    characters, where a result is cut at 160 (``--json`` has both whole)."""
    advice = ("refused: diff: forbidden path: '/etc/ssh' is a folder: diff would read the files in it, which are "
              "not checked here; name the files to compare. Nothing was run. " * 3).strip()
    lines = format_audit([{"created_at": "t", "agent_id": "specialist-ops", "tool_name": "host_bash",
                           "status": "error", "duration_ms": 1, "arguments": "{}", "result": advice}])
    assert len(advice) > 400 and lines[2].strip() == "↳ " + advice
    long = format_audit([{"created_at": "t", "agent_id": "a", "tool_name": "t", "status": "error",
                          "duration_ms": 1, "arguments": "{}", "result": "x" * 700}])
    assert len(long[2].strip()) == len("↳ ") + 600 and long[2].endswith("…")


def test_the_end_of_an_id_names_its_thread_as_the_start_does(monkeypatch, capsys):
    """Ids are time-ordered: threads made the same minute share their start, and their random end
    tells them apart — 8 or more characters of an id's end name its thread too."""
    import argparse

    from ongridd.cli import sessions

    rows = [{"id": f"01a24d73-8721-7000-8000-{tail}", "thread": name}
            for tail, name in (("00005e1f9a2c", "main"), ("000177b0c4d1", "deploys"), ("000277b0c4d1", "night"))]

    _threads_answered(monkeypatch, rows)
    args = argparse.Namespace(sessions_command="tree", session_id="5e1f9a2c", json=True)
    assert sessions.run(args) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["id"] == rows[0]["id"] and "(thread 'main'" in err
    args.session_id = "b0c4d1"  # shorter than 8: the rule, not a 404
    assert sessions.run(args) == 1
    assert "'b0c4d1' is the end of a session id, but shorter than 8 characters" in capsys.readouterr().err
    args.session_id = "77b0c4d1"  # the end of two: both listed
    assert sessions.run(args) == 1
    err = capsys.readouterr().err
    assert "'77b0c4d1' is the end of 2 of your threads' session ids" in err and rows[2]["id"] in err
    args.session_id = "177b0c4d1"
    assert sessions.run(args) == 0
    assert json.loads(capsys.readouterr().out)["id"] == rows[1]["id"]


def test_a_threads_own_open_session_says_it_stays_open_between_turns():
    """A coordinator's session is the thread: it stays open after an answered turn, beside its
    closed workers — the tree says so rather than look like a turn still running."""
    tree = {"agent_id": "default", "status": "open", "id": "s1", "parent_session_id": None,
            "children": [{"agent_id": "specialist-disk", "status": "open", "id": "s2", "parent_session_id": "s1",
                          "children": []}]}
    lines = format_tree(tree)
    assert lines[0] == "default [open] s1 (the thread's session: open between turns)"
    assert lines[1] == "  specialist-disk [open] s2"  # a worker open: running


def test_a_command_that_exited_non_zero_says_so_first_and_an_export_shows_its_output_as_lines():
    """A read that exits non-zero is an answer (audited ok), but its exit status leads its audit
    line rather than hide in the cut result; the markdown export lays a tool's JSON result out one
    field a line, a command's output as its own lines."""
    from ongridd.cli.sessions import format_markdown

    result = json.dumps({"host": "local", "argv": ["diff", "-u", "--", "/a", "/b"], "exit_code": 1,
                         "stdout": "--- /a\n+++ /b\n@@ -1 +1 @@\n-beta\n+beta2\n"})
    lines = format_audit([{"created_at": "t", "agent_id": "specialist-ops", "tool_name": "host_bash",
                           "status": "ok", "duration_ms": 4, "arguments": "{}", "result": result}])
    assert lines[2].strip().startswith('→ exit 1 · {"host": "local"'), lines[2]
    ok = format_audit([{"created_at": "t", "agent_id": "a", "tool_name": "host_bash", "status": "ok",
                        "duration_ms": 4, "arguments": "{}", "result": json.dumps({"exit_code": 0})}])
    assert ok[2].strip() == '→ {"exit_code": 0}'
    doc = {"session": {"agent_id": "specialist-ops", "id": "s2", "status": "completed", "created_at": "t",
                       "messages": [{"seq": 3, "role": "tool", "name": "host_bash", "created_at": "t",
                                     "content": result}], "children": []}}
    doc["session"]["audit"] = [{"tool_name": "host_bash", "status": "ok", "duration_ms": 4, "created_at": "t",
                                "arguments": "{}", "result": result}]
    text = format_markdown(doc)
    assert "- `host_bash` ok (exit 1) in 4 ms · t" in text
    assert "stdout:\n  --- /a\n  +++ /b\n" in text and "exit_code: 1" in text
    assert "  +beta2\n```" in text  # the output's own last newline adds no blank line
    empty = format_markdown({"session": {**doc["session"], "messages": [
        {**doc["session"]["messages"][0], "content": json.dumps({"stdout": "one line\n", "stderr": ""})}]}})
    assert "stdout: one line\nstderr\n" not in empty and "\nstdout: one line\nstderr:\n" in empty


def test_a_workers_session_is_named_by_a_piece_of_its_id_too(monkeypatch, capsys):
    """`sessions tree` shows workers' ids beside the thread's: 8 or more characters of one (its start
    or its end) name it, looked for in the trees of your latest threads; several are listed."""
    import argparse

    from ongridd.cli import sessions

    rows = [{"id": "01a24d73-8721-7000-8000-000000000001", "thread": "main"},
            {"id": "01a24d73-8721-7000-8000-000000000002", "thread": "night"}]
    trees = {rows[0]["id"]: {"id": rows[0]["id"], "children": [
                 {"id": "01a25164-84ef-782d-9000-0000aaaa1111", "agent_id": "specialist-disk", "children": [
                     {"id": "01a25164-84ef-782d-9000-0000bbbb2222", "agent_id": "reviewer", "children": []}]}]},
             rows[1]["id"]: {"id": rows[1]["id"], "children": [
                 {"id": "01a25170-0000-7000-9000-0000cccc2222", "agent_id": "specialist-ops", "children": []}]}}
    asked: list[str] = []

    def fake_http(method, args, path, *rest, **kw):
        asked.append(path)
        if path.startswith("/api/sessions?"):
            return rows
        sid = path.split("/")[3]
        if path.endswith("/tree") and sid in trees:
            return trees[sid]
        return {"id": sid, "agent_id": "x", "status": "completed", "children": []}

    monkeypatch.setattr(sessions, "http_json", fake_http)
    args = argparse.Namespace(sessions_command="tree", session_id="bbbb2222", json=True)
    assert sessions.run(args) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["id"] == "01a25164-84ef-782d-9000-0000bbbb2222"
    assert "(worker reviewer of thread 'main': session 01a25164-84ef-782d-9000-0000bbbb2222)" in err
    args.session_id = "01a25164-84ef"  # the start of two sessions of one thread: both listed
    assert sessions.run(args) == 1
    err = capsys.readouterr().err
    assert "names 2 workers' sessions" in err and "specialist-disk in thread main" in err
    args.session_id = "0000cccc2222"
    assert sessions.run(args) == 0
    assert json.loads(capsys.readouterr().out)["id"] == "01a25170-0000-7000-9000-0000cccc2222"
