"""ongridd.llm.sse.SSEDecoder: line ends, fields, event boundaries, the end
of the stream, the size bound, and (hypothesis) that any split of a stream
into chunks decodes to the same events."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ongridd.llm.sse import SSEDecoder, SSEError, SSEEvent


def decode(*chunks: bytes, max_event_bytes: int | None = None) -> list[SSEEvent]:
    decoder = SSEDecoder() if max_event_bytes is None else SSEDecoder(max_event_bytes)
    out: list[SSEEvent] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out + decoder.close()


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_line_ends_lf_crlf_and_cr(end):
    stream = end.join([b"data: one", b"", b"event: tick", b"data: two", b"data: 2", b"", b""])
    decoder = SSEDecoder()
    assert decoder.feed(stream) == [SSEEvent("one"), SSEEvent("two\n2", "tick")]
    assert decoder.close() == []


def test_mixed_line_ends_in_one_stream():
    assert decode(b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r") == [SSEEvent("a\nb\nc"), SSEEvent("d")]


def test_a_crlf_split_across_two_feeds_is_one_line_end():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []  # the rest of the CRLF, not an empty line
    assert decoder.feed(b"\r") == [SSEEvent("a")]  # a CR ends its line at once
    assert decoder.feed(b"\ndata: b\r") == []
    assert decoder.feed(b"\ndata: c\r\n\r\n") == [SSEEvent("b\nc")]
    assert decoder.close() == []


def test_a_lone_cr_at_the_end_of_a_feed_is_a_line_end_at_once():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [SSEEvent("a")]
    assert decoder.feed(b"data: b\r") == []
    assert decoder.feed(b"data: c\r") == []  # not an LF: the CR before it was a line end of its own
    assert decoder.feed(b"\r") == [SSEEvent("b\nc")]


def test_comments_and_other_fields_are_ignored():
    stream = b": keep-alive\n:\nid: 7\nretry: 1000\nfoo: bar\ndata: x\n: inside\ndata: y\n\n: after\n\n"
    assert decode(stream) == [SSEEvent("x\ny")]


def test_field_value_forms():
    stream = b"data:nospace\ndata:  two spaces\ndata\ndata:\ndata: colon: kept\n\n"
    assert decode(stream) == [SSEEvent("nospace\n two spaces\n\n\ncolon: kept")]


def test_empty_data_events_are_dispatched_but_events_without_data_are_not():
    assert decode(b"data:\n\n") == [SSEEvent("")]
    assert decode(b"data\n\n") == [SSEEvent("")]
    assert decode(b"data: \n\n") == [SSEEvent("")]
    # a name with no data dispatches nothing, and the name ends with its event
    assert decode(b"event: ping\n\ndata: x\n\n") == [SSEEvent("x")]
    assert decode(b"\n\n\n") == []


def test_event_names():
    stream = b"event: first\ndata: 1\n\nevent:second\nevent: third\ndata: 2\n\ndata: 3\n\nevent:\ndata: 4\n\n"
    assert decode(stream) == [SSEEvent("1", "first"), SSEEvent("2", "third"), SSEEvent("3"), SSEEvent("4")]


def test_utf8_split_inside_a_character_and_invalid_bytes():
    text = "données 🙂 测试".encode()
    stream = b"data: " + text + b"\n\n"
    assert decode(*[stream[i:i + 1] for i in range(len(stream))]) == [SSEEvent("données 🙂 测试")]
    assert decode(b"data: \xff\xfe ok\n\n") == [SSEEvent("\ufffd\ufffd ok")]


def test_a_byte_order_mark_opening_the_stream_is_dropped():
    assert decode(b"\xef\xbb", b"\xbfdata: a\n\n") == [SSEEvent("a")]
    assert decode(b"\xef\xbb\xbf\ndata: a\n\n") == [SSEEvent("a")]
    # only at the very start
    assert decode(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [SSEEvent("a")]


@pytest.mark.parametrize("tail", [b"data: last", b"data: last\n", b"data: last\r", b"data: last\r\n", b"data: la\rdata: st"])
def test_close_flushes_an_unterminated_event(tail):
    decoder = SSEDecoder()
    assert decoder.feed(b"data: first\n\n" + tail) == [SSEEvent("first")]
    expected = "la\nst" if tail == b"data: la\rdata: st" else "last"
    assert decoder.close() == [SSEEvent(expected)]
    assert decoder.close() == []


def test_close_of_a_clean_or_empty_stream_has_nothing():
    assert SSEDecoder().close() == []
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n: trailing comment")
    assert decoder.close() == []


def test_a_line_over_the_bound_raises_even_when_fed_in_small_pieces():
    decoder = SSEDecoder(max_event_bytes=1000)
    decoder.feed(b"data: ")
    with pytest.raises(SSEError, match="line longer than 1000"):
        for _ in range(200):
            decoder.feed(b"x" * 10)
    with pytest.raises(SSEError, match="line longer"):
        SSEDecoder(max_event_bytes=1000).feed(b"data: done\n\ndata: " + b"x" * 1000)


def test_an_event_over_the_bound_raises():
    decoder = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(SSEError, match="event larger than 1000"):
        for _ in range(200):
            decoder.feed(b"data: " + b"x" * 10 + b"\n")


def test_the_bound_is_per_event():
    line = b"data: " + b"x" * 94 + b"\n"  # 100 bytes
    decoder = SSEDecoder(max_event_bytes=1000)
    for _ in range(5):
        assert len(decoder.feed(line * 10 + b"\n")) == 1  # 1000 bytes each: at the bound, fine


def test_a_long_line_in_many_small_pieces():
    payload = b"y" * 300_000
    stream = b"data: " + payload + b"\n\n"
    pieces = [stream[i:i + 7] for i in range(0, len(stream), 7)]
    assert decode(*pieces) == [SSEEvent(payload.decode())]


# ---- hypothesis: any split decodes alike ------------------------------------------

_text = st.text(st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=12)
_ends = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def event_streams(draw) -> tuple[bytes, list[SSEEvent]]:
    """A stream and the events it holds (its last event perhaps without its empty line)."""
    lines: list[str] = []
    expected: list[SSEEvent] = []
    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(0, 2))):
            lines.append(":" + draw(_text))
        name = draw(st.none() | _text.filter(lambda t: bool(t) and t[0] != " "))
        data = draw(st.lists(_text, max_size=4))
        fields = []
        for value in data:
            if value[:1] == " " or not value:
                fields.append("data: " + value)
            else:
                fields.append(draw(st.sampled_from(["data: ", "data:"])) + value)
        extras = [] if name is None else [draw(st.sampled_from(["event: ", "event:"])) + name]
        if draw(st.booleans()):
            extras.append("id: " + draw(_text))
        for extra in extras:  # anywhere among the data lines, which keep their order
            fields.insert(draw(st.integers(0, len(fields))), extra)
        lines += fields
        lines.append("")
        if data:
            expected.append(SSEEvent("\n".join(data), name or None))
    if lines and draw(st.booleans()):
        lines.pop()  # the stream ends without the event's empty line: close() dispatches it
    out: list[str] = []
    previous = ""
    for line in lines:
        end = draw(_ends)
        if previous == "\r" and line == "" and end == "\n":
            end = "\r"  # "\r" then an empty line ended by "\n" would read as one CRLF
        out.append(line + end)
        previous = end
    bom = "\ufeff" if draw(st.booleans()) else ""
    return (bom + "".join(out)).encode(), expected


@settings(max_examples=300, deadline=None)
@given(event_streams(), st.data())
def test_any_split_decodes_to_the_same_events(stream_and_events, data):
    stream, expected = stream_and_events
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    assert decode(*chunks) == expected
    assert decode(stream) == expected


@settings(max_examples=50, deadline=None)
@given(event_streams())
def test_byte_by_byte_decodes_to_the_same_events(stream_and_events):
    stream, expected = stream_and_events
    assert decode(*[stream[i:i + 1] for i in range(len(stream))]) == expected
