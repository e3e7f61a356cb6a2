"""Hostile persona files for the bounded-parsing suites: alias bombs for every
typed key, and a seeded generator of malformed frontmatter.

Everything here is deterministic (``random.Random(seed)``), so a failing
file can be rebuilt from its name.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

#: Every typed key of the persona table.
TYPED_KEYS = ("name", "description", "when_to_use", "tools", "disallowed_tools", "permission_mode", "max_turns",
              "tool_budget", "critical_reminder", "skills", "model", "metadata")

#: What a refused bomb's warning says, per variant (a substring).
REASONS = {
    "laughs": "YAML aliases expand to more than",
    "laughs-inline": "YAML aliases expand to more than",
    "laughs-in-metadata": "YAML aliases expand to more than",
    "map-laughs": "YAML aliases expand to more than",
    "merge-laughs": "YAML aliases expand to more than",
    "string-laughs": "characters of text",
    "alias-chain": "YAML aliases nest deeper than",
    "recursive": "recursive alias",
    "recursive-map": "recursive alias",
    "alias-flood": "YAML aliases",
    "deep": "nested deeper than",
}


def _fence(key: str, lines: list[str], value: str, *, other_key_value: bool = True) -> str:
    """A persona whose ``key`` is ``value`` after ``lines``; the other required keys are valid."""
    head = ["---", *lines]
    if key != "name":
        head.append("name: bomb")
    if key != "description":
        head.append("description: a bomb")
    head.append(f"{key}: {value}")
    return "\n".join(head + ["---", "You are a bomb.", ""])


def laughs(levels: int = 9, fanout: int = 9, prefix: str = "a") -> list[str]:
    """``a0: &a0 [lol × fanout]`` then ``aN: &aN [*aN-1 × fanout]`` (the classic billion laughs)."""
    out = [f'{prefix}0: &{prefix}0 [' + ",".join(['"lol"'] * fanout) + "]"]
    for i in range(1, levels):
        out.append(f"{prefix}{i}: &{prefix}{i} [" + ",".join([f"*{prefix}{i - 1}"] * fanout) + "]")
    return out


def the_bomb() -> str:
    """The bomb of the report: nine levels of nine as anchors, ``name: *a8`` (467 bytes)."""
    return "\n".join(["---", *laughs(), "name: *a8", "description: bomb", "---", "body", ""])


def bomb(variant: str, key: str) -> str:
    """One alias (or nesting) bomb used as the value of ``key``."""
    if variant == "laughs":
        return _fence(key, laughs(), "*a8")
    if variant == "laughs-inline":  # the anchors live inside the typed value itself
        inner = ['&b0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        inner += [f"&b{i} [" + ",".join([f"*b{i - 1}"] * 9) + "]" for i in range(1, 9)]
        return _fence(key, [], "[" + ", ".join(inner) + "]")
    if variant == "laughs-in-metadata":  # anchors under metadata (or an unknown key for metadata itself)
        holder = "extra" if key == "metadata" else "metadata"
        lines = [f"{holder}:"] + ["  " + line for line in laughs(prefix="m")]
        return _fence(key, lines, "*m8")
    if variant == "map-laughs":
        lines = ["c0: &c0 {" + ", ".join(f"k{j}: lol" for j in range(9)) + "}"]
        lines += [f"c{i}: &c{i} {{" + ", ".join(f"k{j}: *c{i - 1}" for j in range(9)) + "}" for i in range(1, 9)]
        return _fence(key, lines, "*c8")
    if variant == "merge-laughs":
        lines = ["g0: &g0 {" + ", ".join(f"k{j}: lol" for j in range(9)) + "}"]
        lines += [f"g{i}: &g{i} {{<<: [" + ", ".join([f"*g{i - 1}"] * 9) + f"], own{i}: x}}" for i in range(1, 9)]
        return _fence(key, lines, "*g8")
    if variant == "string-laughs":
        lines = ["s: &s " + "x" * 4000, "l: &l [" + ", ".join(["*s"] * 300) + "]"]
        return _fence(key, lines, "*l")
    if variant == "alias-chain":
        lines = ["h0: &h0 [end]"] + [f"h{i}: &h{i} [*h{i - 1}]" for i in range(1, 100)]
        return _fence(key, lines, "*h99")
    if variant == "recursive":
        return _fence(key, [], "&r [*r, *r]")
    if variant == "recursive-map":
        return _fence(key, [], "&r {self: *r}")
    if variant == "alias-flood":
        return _fence(key, ["f: &f lol"], "[" + ", ".join(["*f"] * 1500) + "]")
    if variant == "deep":
        return _fence(key, [], "[" * 200 + "]" * 200)
    raise ValueError(variant)


def all_bombs() -> Iterator[tuple[str, str, str]]:
    """(file stem, variant, text) for every variant × every typed key."""
    for variant in REASONS:
        for key in TYPED_KEYS:
            yield f"{variant}--{key}", variant, bomb(variant, key)


# ---- the fuzz generator ------------------------------------------------------------------

_WORDS = ["lol", "disk", "x", "", "a b", "read-only", "default", "höst", "名前", "\u202e", "--", "- x", "#", "%"]
_SCALARS = ["null", "~", "true", "false", "yes", "no", "0", "-1", "15", "1e999", "-.inf", ".nan", "0x1F", "0o17",
            "1_000", "2024-05-01", "2024-05-01T10:00:00Z", "2024-13-45", '""', "''", '"\\u0000"', '"\\x00"',
            "'it''s'", '"tab\\there"', "@reserved", "`tick", "!!str 5", "!!int x", "!!float y", "!!bool maybe",
            "!!null z", "!!binary aGVsbG8=", "!!binary '%%%'", "!!timestamp nope", "!!python/object:os.system {}",
            "!!python/name:os.system", "!!python/object/apply:os.system [id]", "!custom 1", "!<tag:x,1:y> z",
            "!!set {a, b}", "!!omap [{a: 1}, {b: 2}]", "!!pairs [{a: 1}]", "&anc value", "*undefined",
            "? complex", "{a: 1, a: 2}", "[a, [b, [c]]]", "{? [a, b]: c}", "|\n  block\n  text", ">-\n  folded"]


class FuzzCase:
    """One generated file: ``name`` (unique), ``kind`` (its generator),
    ``data`` (bytes), ``expect``: a substring the refusal must contain
    (alias bombs), else ``None``."""

    __slots__ = ("name", "kind", "data", "expect")

    def __init__(self, name: str, kind: str, data: bytes, expect: str | None = None):
        self.name = name
        self.kind = kind
        self.data = data
        self.expect = expect


def _scalar(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(_SCALARS)
    if roll < 0.6:
        return repr(rng.choice(_WORDS)).replace("\\", "\\\\") if rng.random() < 0.5 else rng.choice(_WORDS) or "x"
    if roll < 0.75:
        return str(rng.randint(-10**6, 10**12))
    if roll < 0.85:
        return "x" * rng.choice([1, 100, 5000, 30_000])
    if roll < 0.95:
        return rng.choice(["9", "0x7", "1"]) + "9" * rng.choice([20, 300, 4400, 9_000])
    return "".join(rng.choice("abc:#-[]{},&*!|>'\"%@` \t") for _ in range(rng.randint(1, 30)))


def _value(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return _scalar(rng)
    if roll < 0.7:
        return "[" + ", ".join(_value(rng, depth + 1) for _ in range(rng.randint(0, 6))) + "]"
    if roll < 0.9:
        return "{" + ", ".join(f"k{i}: {_value(rng, depth + 1)}" for i in range(rng.randint(0, 6))) + "}"
    return "\n" + "\n".join(f"{'  ' * (depth + 1)}- {_scalar(rng)}" for _ in range(rng.randint(1, 5)))


def _frontmatter(rng: random.Random) -> list[str]:
    keys = list(TYPED_KEYS) + ["extra", "unknown_key", "<<", "? odd"]
    rng.shuffle(keys)
    lines = []
    for key in keys[: rng.randint(0, len(keys))]:
        if key in ("name", "description") and rng.random() < 0.6:
            lines.append(f"{key}: fuzz-{rng.randint(0, 999)}")
        elif key == "tools" and rng.random() < 0.5:
            lines.append("tools: [get_host_load, " + _scalar(rng) + "]")
        else:
            lines.append(f"{key}: {_value(rng)}")
    return lines


def _doc(lines: list[str], body: str = "You are fuzz.") -> str:
    return "\n".join(["---", *lines, "---", body, ""])


def _gen_structured(rng: random.Random) -> bytes:
    return _doc(_frontmatter(rng)).encode("utf-8", "surrogatepass")


def _gen_deep(rng: random.Random) -> bytes:
    depth = rng.choice([10, 60, 64, 65, 100, 1000, 20_000])
    key = rng.choice(TYPED_KEYS)
    if rng.random() < 0.5:
        value = "[" * depth + "x" + "]" * depth
    elif rng.random() < 0.5:
        value = "{a: " * depth + "x" + "}" * depth
    else:
        value = "\n" + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(min(depth, 300))) + "  " * 301 + "end"
    return _doc(["name: deep", "description: d", f"{key}: {value}"]).encode()


def _gen_bomb(rng: random.Random) -> bytes:
    variant = rng.choice(list(REASONS))
    return bomb(variant, rng.choice(TYPED_KEYS)).encode()


def _gen_random_laughs(rng: random.Random) -> bytes:
    levels, fanout = rng.randint(2, 12), rng.randint(2, 12)
    key = rng.choice(TYPED_KEYS)
    shape = rng.choice(["seq", "map", "merge"])
    lines = []
    if shape == "seq":
        lines = laughs(levels, fanout, prefix="z")
    elif shape == "map":
        lines = ["z0: &z0 {" + ", ".join(f"k{j}: lol" for j in range(fanout)) + "}"]
        lines += [f"z{i}: &z{i} {{" + ", ".join(f"k{j}: *z{i - 1}" for j in range(fanout)) + "}"
                  for i in range(1, levels)]
    else:
        lines = ["z0: &z0 {" + ", ".join(f"k{j}: lol" for j in range(fanout)) + "}"]
        lines += [f"z{i}: &z{i} {{<<: [" + ", ".join([f"*z{i - 1}"] * fanout) + "]}" for i in range(1, levels)]
    return _doc(["name: laughs", "description: d", *lines, f"{key}: *z{levels - 1}"]).encode()


def _gen_long(rng: random.Random) -> bytes:
    key = rng.choice(TYPED_KEYS)
    size = rng.choice([1000, 20_000, 70_000, 262_000, 300_000])
    style = rng.choice(["plain", "quoted", "block", "list", "comment"])
    if style == "plain":
        value = "y" * size
    elif style == "quoted":
        value = '"' + "\\u00e9" * (size // 6) + '"'
    elif style == "block":
        value = "|\n" + "  line\n" * (size // 7)
    elif style == "list":
        value = "[" + ",".join(["1"] * (size // 2)) + "]"
    else:
        value = "x\n" + "# comment\n" * (size // 10)
    return _doc(["name: long", "description: d", f"{key}: {value}"]).encode()


def _gen_numbers(rng: random.Random) -> bytes:
    key = rng.choice(["max_turns", "tool_budget", "name", "metadata", "extra"])
    value = rng.choice(["9" * rng.choice([19, 4300, 4301, 50_000]), "0x" + "f" * rng.choice([16, 300, 5000, 60_000]),
                        "-0b" + "1" * 5000, "1e308", "1e309", ".inf", "-.nan", "0", "-5", "1_000_001", "1000000",
                        "{n: 0x" + "f" * 4000 + "}", "[0o" + "7" * 3000 + "]", "1:2:3:4", "0777"])
    prefix = ["%YAML 1.1"] if rng.random() < 0.2 else []
    text = "\n".join([*prefix, "---", "name: num", "description: d", f"{key}: {value}", "---", "b", ""])
    return text.encode()


def _gen_encoding(rng: random.Random) -> bytes:
    data = bytearray(_gen_structured(rng))
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf", b"\r", b"\r\n",
                                    b"\x1b[2J", b"\xe2\x80\xae", b"\t", b"\x85", "\u2028".encode()])
    if rng.random() < 0.3:
        data = bytearray(b"\xef\xbb\xbf") + data
    if rng.random() < 0.3:
        data = bytearray(bytes(data).replace(b"\n", b"\r\n"))
    return bytes(data)


def _gen_fences(rng: random.Random) -> bytes:
    lines = _frontmatter(rng)
    choice = rng.randrange(7)
    if choice == 0:
        return "\n".join(lines).encode()  # no fences at all
    if choice == 1:
        return ("---\n" + "\n".join(lines)).encode()  # never closed
    if choice == 2:
        return ("--- \n" + "\n".join(lines) + "\n---   \nbody").encode()
    if choice == 3:
        return ("\n---\n" + "\n".join(lines) + "\n---\nbody").encode()  # blank first line
    if choice == 4:
        return ("---\n---\n---\n" + "\n".join(lines)).encode()
    if choice == 5:
        return ("---\n" + "\n".join(lines) + "\n...\n---\nbody").encode()
    return b""


def _gen_mutated(rng: random.Random) -> bytes:
    base = bytearray(_doc(["name: mut", "description: d", "tools: [get_host_load, query_promql]",
                           "permission_mode: read-only", "max_turns: 3", "metadata: {team: ops, tags: [a, b]}",
                           "a: &a [x, y]", "b: *a"]).encode())
    for _ in range(rng.randint(1, 12)):
        op = rng.randrange(4)
        pos = rng.randrange(len(base))
        if op == 0:
            base[pos] = rng.randrange(256)
        elif op == 1:
            del base[pos: pos + rng.randint(1, 5)]
        elif op == 2:
            base[pos:pos] = bytes(rng.choice(b"[]{}:,&*!|>-?#'\"\n ") for _ in range(rng.randint(1, 6)))
        else:
            chunk = base[pos: pos + rng.randint(1, 40)]
            base[pos:pos] = chunk * rng.randint(1, 20)
    return bytes(base)


def _gen_tags(rng: random.Random) -> bytes:
    key = rng.choice(TYPED_KEYS)
    value = rng.choice([s for s in _SCALARS if s.startswith("!")] + [
        "!!python/object:__main__.X {a: 1}", "!!python/object/new:os.system [id]", "!!python/module:os",
        "!!map [a]", "!!seq {a: 1}", "!!str [a]", "!!set [a]", "!!omap {a: 1}", "!!binary " + "A" * 100_001,
        "!!merge x", "!!value y", "!!yaml z"])
    prefix = ["%TAG !e! tag:example.com,2000:"] if rng.random() < 0.2 else []
    return "\n".join([*prefix, "---", "name: tagged", "description: d", f"{key}: {value}", "---", "b", ""]).encode()


def _gen_keys(rng: random.Random) -> bytes:
    lines = rng.choice([
        ["name: k", "name: k2", "description: d"],
        ["? [name]", ": x", "description: d"],
        ["? {a: 1}", ": x", "name: k", "description: d"],
        ["1: one", "true: t", "null: n", "name: k", "description: d"],
        ["<<: {name: merged, description: m}"],
        ["<<: [{name: a}, {description: b}]"],
        ["<<: *nope", "name: k"],
        ["name: k", "description: d", "tools: get_host_load, , ,query_promql,get_host_load"],
        ["name: k", "description: d", "s: &s lol", "tools: [" + ", ".join(["*s"] * 900) + "]"],
        ["name: k", "description: d", "tools: [" + ", ".join(f"t{i} x" for i in range(3000)) + "]"],
        ["name: k", "description: d", "&a x: 1", "*a : 2"],
        ["name: " + "n" * 200, "description: d"],
        ["name: 'bad/name'", "description: d"],
        ["name: k", "description: \"" + "multi\\nline" * 100 + "\""],
    ])
    return _doc(lines).encode()


#: (kind, generator, weight)
GENERATORS: tuple[tuple[str, Callable[[random.Random], bytes], int], ...] = (
    ("structured", _gen_structured, 30),
    ("deep", _gen_deep, 6),
    ("bomb", _gen_bomb, 10),
    ("laughs", _gen_random_laughs, 10),
    ("long", _gen_long, 2),
    ("numbers", _gen_numbers, 8),
    ("encoding", _gen_encoding, 8),
    ("fences", _gen_fences, 6),
    ("mutated", _gen_mutated, 10),
    ("tags", _gen_tags, 6),
    ("keys", _gen_keys, 6),
)


def fuzz_cases(count: int, seed: int) -> Iterator[FuzzCase]:
    """``count`` generated files (``random.Random(seed)``); every alias-bomb
    variant × typed key comes first, then weighted random kinds."""
    n = 0
    for stem, variant, text in all_bombs():
        if n >= count:
            return
        yield FuzzCase(f"bomb-{stem}", "bomb", text.encode(), REASONS[variant])
        n += 1
    rng = random.Random(seed)
    kinds = [g for g in GENERATORS for _ in range(g[2])]
    while n < count:
        kind, gen, _w = rng.choice(kinds)
        yield FuzzCase(f"{kind}-{n}", kind, gen(rng))
        n += 1


# ---- the fuzz run (in a fresh process, so its peak RSS is its own) ---------------

#: CPU seconds one parse may take (a bound, not a benchmark: most take milliseconds).
FUZZ_CPU_BOUND_S = 1.0
#: Wall seconds one parse may take (catches a parse that blocks rather than computes).
FUZZ_WALL_BOUND_S = 5.0
#: Peak bytes one traced parse may allocate.
FUZZ_TRACED_BOUND = 32 * 1024 * 1024
#: Characters of warnings one file may produce.
FUZZ_WARNINGS_BOUND = 64 * 1024


def _check_case(case: FuzzCase, known_tools: frozenset[str]) -> tuple[list[str], float, float, bool]:
    """Parse one case; (problems, cpu s, wall s, loaded)."""
    import json
    import time

    from ongridd.personas.parse import Persona, parse_persona_text

    path = f"fuzz/{case.name}.md"
    problems: list[str] = []
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    try:
        result = parse_persona_text(case.data, path, known_tools=known_tools)
    except BaseException as exc:  # noqa: BLE001 — the loader must never raise
        return [f"{case.name}: raised {type(exc).__name__}: {str(exc)[:200]}"], 0.0, 0.0, False
    cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    persona, warnings = result
    if cpu > FUZZ_CPU_BOUND_S or wall > FUZZ_WALL_BOUND_S:
        problems.append(f"{case.name}: parse took {cpu:.2f} s CPU, {wall:.2f} s wall")
    if not isinstance(warnings, list) or not all(isinstance(w, str) and w.startswith(path) for w in warnings):
        problems.append(f"{case.name}: warnings not a list of strings naming the file: {str(warnings)[:300]}")
        return problems, cpu, wall, False
    if sum(len(w) for w in warnings) > FUZZ_WARNINGS_BOUND:
        problems.append(f"{case.name}: {sum(len(w) for w in warnings):,} characters of warnings")
    for w in warnings:
        if "cannot parse persona (" in w:  # the last-resort catch: an unexpected exception inside
            problems.append(f"{case.name}: {w[:300]}")
    if persona is None:
        if not any(w.endswith("; file skipped") for w in warnings):
            problems.append(f"{case.name}: skipped without saying why: {warnings[:3]}")
        if case.expect is not None and not any(case.expect in w for w in warnings):
            problems.append(f"{case.name}: expected {case.expect!r} in {warnings[:3]}")
    else:
        if not isinstance(persona, Persona):
            problems.append(f"{case.name}: returned {type(persona).__name__}")
        elif case.expect is not None:
            problems.append(f"{case.name}: a bomb was accepted")
        else:
            try:
                if len(json.dumps(persona.to_dict(), ensure_ascii=False)) > 4 * 1024 * 1024:
                    problems.append(f"{case.name}: its JSON is larger than 4 MiB")
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{case.name}: to_dict()/JSON failed: {type(exc).__name__}: {str(exc)[:200]}")
    return problems, cpu, wall, persona is not None


def fuzz_main() -> None:
    """``python -c 'from tests.bombs import fuzz_main; fuzz_main()' COUNT SEED``: parse
    COUNT generated files and print one JSON summary line on stdout:
    ``{count, loaded, kinds, cpu_by_kind, problems (first 30), problem_count, max_cpu_s, max_cpu_file,
    max_wall_s, rss_base_kb, rss_peak_kb, rss_peak_file, traced, max_traced, max_traced_file}``.
    Alias bombs and every 100th file are also run under tracemalloc."""
    import collections
    import json
    import resource
    import sys
    import tracemalloc

    from ongridd.personas.parse import parse_persona_text
    from tests.personas.conftest import KNOWN_TOOLS

    count, seed = int(sys.argv[1]), int(sys.argv[2])
    parse_persona_text(_doc(["name: warm", "description: up"]), "warm.md")  # imports and caches warm
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # noqa: E731 — KiB on Linux
    kinds: collections.Counter = collections.Counter()
    cpu_by_kind: collections.Counter = collections.Counter()
    out: dict = {"count": 0, "loaded": 0, "kinds": kinds,
                 "max_cpu_s": 0.0, "max_cpu_file": None, "max_wall_s": 0.0, "rss_base_kb": rss(),
                 "rss_peak_file": None, "traced": 0, "max_traced": 0, "max_traced_file": None}
    problems: list[str] = []
    for i, case in enumerate(fuzz_cases(count, seed)):  # generated lazily: the base RSS stays the parser's
        out["count"] += 1
        kinds[case.kind] += 1
        before = rss()
        found, cpu, wall, loaded = _check_case(case, KNOWN_TOOLS)
        problems.extend(found)
        out["loaded"] += loaded
        cpu_by_kind[case.kind] += cpu
        if cpu > out["max_cpu_s"]:
            out["max_cpu_s"], out["max_cpu_file"] = cpu, case.name
        out["max_wall_s"] = max(out["max_wall_s"], wall)
        if rss() > before:
            out["rss_peak_file"] = case.name
        if case.expect is not None or i % 100 == 0:
            tracemalloc.start()
            parse_persona_text(case.data, f"fuzz/{case.name}.md", known_tools=KNOWN_TOOLS)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            out["traced"] += 1
            if peak > out["max_traced"]:
                out["max_traced"], out["max_traced_file"] = peak, case.name
            if peak > FUZZ_TRACED_BOUND:
                problems.append(f"{case.name}: allocated {peak:,} bytes at its peak")
    out["rss_peak_kb"] = rss()
    out["cpu_by_kind"] = {k: round(v, 2) for k, v in cpu_by_kind.items()}
    out["problem_count"] = len(problems)
    out["problems"] = problems[:30]
    print(json.dumps(out))
