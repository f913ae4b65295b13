#!/usr/bin/env python3
"""Chat-template cases rendered by Python's jinja2 the way transformers'
apply_chat_template renders them (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loop controls; its tojson, raise_exception
and strftime_now; variables messages, tools, documents,
add_generation_prompt, the special tokens, then chat_template_kwargs).

Writes JSON lines to stdout, one per case:
  {"template": NAME, "dir": DIR, "request": {...}, "text": "..."}
or, where jinja2 fails, "error": message and "raised": whether the template
called raise_exception.  The request is the chat-template command's input.

  chat_template_reference.py --time T --fuzz N --seed S NAME=DIR ...

Each template gets the same fixed conversations (system / user / assistant /
tool turns, tool definitions, reasoning, generation prompt and thinking on
and off, Unicode and awkward text) and N random conversations from a seeded
generator.
"""
import argparse
import datetime
import json
import os
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


def make_env(now):
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load_template(d):
    """What chat_template_load reads: the config's template (or "default" of
    a named list), else chat_template.jinja; the special tokens."""
    special, source = {}, None
    path = os.path.join(d, "tokenizer_config.json")
    if os.path.exists(path):
        cfg = json.load(open(path, encoding="utf-8"))
        for k in ("bos_token", "eos_token", "pad_token", "unk_token"):
            v = cfg.get(k)
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str):
                special[k] = v
        t = cfg.get("chat_template")
        if isinstance(t, list):
            t = next((e.get("template") for e in t if e.get("name") == "default"), None)
        if isinstance(t, str):
            source = t
    if source is None:
        source = open(os.path.join(d, "chat_template.jinja"), encoding="utf-8", newline="").read()
    return source, special


def render(tmpl, special, req):
    ctx = {"messages": req["messages"], "tools": req.get("tools"), "documents": None,
           "add_generation_prompt": req.get("add_generation_prompt", True)}
    ctx.update(special)
    ctx.update(req.get("chat_template_kwargs") or {})
    return tmpl.render(**ctx)


# ---- building blocks ----

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather in a city — «temps» 天气",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Berlin\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city"]}}}
CALC = {"type": "function", "function": {
    "name": "calc",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {
        "expr": {"type": "string"},
        "precision": {"type": "number", "default": 0.001}},
        "required": ["expr"]},
    "return": {"type": "number"}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}, "filters": {"type": "array", "items": {"type": "string"}}}}}}


def call(name, args, cid="call12345", as_string=False):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def tool_msg(content, cid="call12345", name=None):
    m = {"role": "tool", "tool_call_id": cid, "content": content}
    if name:
        m["name"] = name
    return m


def u(text):
    return {"role": "user", "content": text}


def a(text, **extra):
    m = {"role": "assistant", "content": text}
    m.update(extra)
    return m


def s(text):
    return {"role": "system", "content": text}


def scenarios():
    """(name, messages, tools, kwargs) — each becomes several cases."""
    rows = [
        ("single_user", [u("What is 2 + 2?")], None, {}),
        ("system_user", [s("You are a terse assistant."), u("Name three primes.")], None, {}),
        ("multi_turn", [s("Be kind."), u("Hi!"), a("Hello! How can I help?"), u("Tell me a joke.")], None, {}),
        ("whitespace", [s("  padded system \n\n"), u("\n  lots of space  \t\n"), a("  answer  \n"),
                        u("trailing newline\n")], None, {}),
        ("unicode", [u("Grüße, 日本語, emoji 😀🎉, RTL שלום, combining é, \u2028 sep")], None, {}),
        ("awkward_text", [u("quotes ' \" backslash \\ braces {{ x }} {% if %} {# c #} <|im_end|> \\n")],
         None, {}),
        ("empty_user", [u("")], None, {}),
        ("think_last", [u("Solve x+1=2"), a("<think>\nx = 1 because 2-1.\n</think>\n\nx = 1")], None, {}),
        ("think_history", [u("q1"), a("<think>\nr1\n</think>\n\na1"), u("q2"),
                           a("<think>r2</think>a2"), u("q3")], None, {}),
        ("reasoning_field", [u("q"), a("final", reasoning_content="step one\nstep two")], None, {}),
        ("reasoning_field_history", [u("q1"), a("a1", reasoning_content="r1"), u("q2")], None, {}),
        ("assistant_last", [u("Say hi"), a("Hi.")], None, {}),
        ("close_think_only", [u("q"), a("reasoning here</think>\n\nthe answer")], None, {}),
        ("tool_roundtrip_dict", [u("Weather in Berlin?"),
                                 a("", tool_calls=[call("get_weather", {"city": "Berlin", "unit": "celsius"})]),
                                 tool_msg("{\"temp_c\": 18, \"sky\": \"cloudy\"}", name="get_weather"),
                                 a("It is 18 °C and cloudy.")], [WEATHER], {}),
        ("tool_roundtrip_str", [u("What is 3*7?"),
                                a(None, tool_calls=[call("calc", {"expr": "3*7"}, as_string=True)]),
                                tool_msg("21"), u("thanks")], [CALC], {}),
        ("two_tool_calls", [s("Use tools."), u("Weather in Paris and Rome?"),
                            a(None, tool_calls=[call("get_weather", {"city": "Paris"}, "callAAAAA", True),
                                                call("get_weather", {"city": "Rome"}, "callBBBBB", True)]),
                            tool_msg("sunny", "callAAAAA"), tool_msg("rainy", "callBBBBB")], [WEATHER], {}),
        ("tools_user_only", [u("Find news about Jinja.")], [SEARCH, WEATHER], {}),
        ("tools_system", [s("You can call tools."), u("What's 2**10?")], [CALC], {}),
        ("tool_response_as_user", [u("q"), a("<think>t</think>calling"),
                                   u("<tool_response>\nok\n</tool_response>")], None, {}),
        ("two_systems", [s("First rule."), s("Second rule."), u("hi")], None, {}),
        ("system_late", [u("hi"), a("hello"), s("Switch to French."), u("bonjour?")], None, {}),
        ("system_only", [s("Only a system prompt.")], None, {}),
        ("assistant_first", [a("I start."), u("ok")], None, {}),
        ("two_users", [u("one"), u("two")], None, {}),
        ("content_parts", [s([{"type": "text", "text": "System in parts."}]),
                           u([{"type": "text", "text": "Part one."}, {"type": "text", "text": " Part two. "}])],
         None, {}),
        ("content_image", [u([{"type": "image", "url": "http://x/y.png"}, {"type": "text", "text": "What is it?"}])],
         None, {}),
        ("long_chat", [s("Count.")] + [m for i in range(6) for m in (u("n=%d" % i), a(str(i + 1)))] + [u("next")],
         None, {}),
        ("named_user", [{"role": "user", "name": "alice", "content": "hi from alice"}], None, {}),
        ("numbers_in_args", [u("compute"),
                             a(None, tool_calls=[call("calc", {"expr": "1/3", "precision": 1.0, "tiny": 1e-07,
                                                               "big": 12345678901234, "neg": -0.5, "flag": True,
                                                               "none": None, "list": [1, 2.5, "x", [], {}]})]),
                             tool_msg("0.333")], [CALC], {}),
        ("date_kwarg", [s("sys"), u("What day is it?")], None, {"date_string": "01 Jan 2025"}),
        ("tools_in_system", [u("weather?")], [WEATHER], {"tools_in_user_message": False}),
        ("ipython_role", [u("run"), {"role": "ipython", "content": "output 42"}], None, {}),
        ("developer_role", [{"role": "developer", "content": "dev note"}, u("hi")], None, {}),
        ("tool_dict_content", [u("q"), a(None, tool_calls=[call("search", {"q": "x"}, "abcdefghi")]),
                               tool_msg({"content": "structured result"}, "abcdefghi")], [SEARCH], {}),
        ("mistral_ids", [s("sys"), u("weather?"),
                         a(None, tool_calls=[call("get_weather", {"city": "Oslo"}, "A1b2C3d4E")]),
                         tool_msg("{\"t\": -3}", "A1b2C3d4E"), a("Cold."), u("thanks")], [WEATHER, CALC], {}),
        ("custom_kwarg", [u("hi")], None, {"custom_flag": True, "reasoning_effort": "high"}),
    ]
    return rows


def variants(name, msgs, tools, kwargs):
    out = []
    for gen, think in ((True, None), (False, None), (True, False), (True, True)):
        req = {"messages": msgs, "add_generation_prompt": gen}
        if tools is not None:
            req["tools"] = tools
        kw = dict(kwargs)
        if think is not None:
            kw["enable_thinking"] = think
        if kw:
            req["chat_template_kwargs"] = kw
        out.append(("%s/gen=%d/think=%s" % (name, gen, think), req))
    return out


# ---- random conversations ----

PIECES = ["hello", "Grüße", "日本語", "😀", " ", "  ", "\n", "\n\n", "\t", "'", "\"", "\\", "{{", "}}", "{%",
          "<think>", "</think>", "<tool_response>", "</tool_response>", "<|im_end|>", "[INST]", "a", "42",
          "-1.5", "é", "\u00a0", "x" * 40, "None", "True", "é\u0301", "ß", "İ", "ǅ"]


def rand_text(r):
    return "".join(r.choice(PIECES) for _ in range(r.randint(0, 6)))


def rand_args(r, depth=0):
    d = {}
    for _ in range(r.randint(0, 3)):
        k = r.choice(["city", "q", "n", "x", "ünï", "list", "obj"])
        kind = r.randint(0, 5 if depth < 2 else 3)
        d[k] = [lambda: rand_text(r), lambda: r.randint(-10**6, 10**6),
                lambda: round(r.uniform(-100, 100), r.randint(0, 6)), lambda: r.choice([True, False, None]),
                lambda: [rand_text(r) for _ in range(r.randint(0, 3))], lambda: rand_args(r, depth + 1)][kind]()
    return d


def rand_conversation(r):
    msgs = []
    if r.random() < 0.5:
        msgs.append(s(rand_text(r)))
    for i in range(r.randint(1, 7)):
        role = r.choice(["user", "user", "assistant", "assistant", "tool", "system"])
        if role == "assistant" and r.random() < 0.3:
            calls = [call(r.choice(["get_weather", "calc", "search"]), rand_args(r),
                          "".join(r.choice("abcXYZ019") for _ in range(9)), r.random() < 0.5)
                     for _ in range(r.randint(1, 2))]
            m = a(r.choice([None, "", rand_text(r)]), tool_calls=calls)
        elif role == "assistant" and r.random() < 0.3:
            m = a("<think>" + rand_text(r) + "</think>" + rand_text(r))
        elif role == "assistant" and r.random() < 0.2:
            m = a(rand_text(r), reasoning_content=rand_text(r))
        elif role == "tool":
            m = tool_msg(rand_text(r), "".join(r.choice("abc123") for _ in range(9)))
        else:
            m = {"role": role, "content": rand_text(r)}
        msgs.append(m)
    req = {"messages": msgs, "add_generation_prompt": r.random() < 0.7}
    if r.random() < 0.4:
        req["tools"] = r.sample([WEATHER, CALC, SEARCH], r.randint(1, 3))
    if r.random() < 0.5:
        req["chat_template_kwargs"] = {"enable_thinking": r.random() < 0.5}
    return req


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time", type=int, default=1735732800)
    ap.add_argument("--fuzz", type=int, default=60)
    ap.add_argument("--seed", type=int, default=20241201)
    ap.add_argument("templates", nargs="+", help="NAME=DIR")
    args = ap.parse_args()
    env = make_env(args.time)
    out = sys.stdout
    for spec in args.templates:
        name, d = spec.split("=", 1)
        source, special = load_template(d)
        tmpl = env.from_string(source)
        cases = [c for sc in scenarios() for c in variants(*sc)]
        r = random.Random("%d/%s" % (args.seed, name))
        cases += [("fuzz%d" % i, rand_conversation(r)) for i in range(args.fuzz)]
        for case, req in cases:
            row = {"template": name, "dir": d, "case": case, "request": req}
            try:
                row["text"] = render(tmpl, special, req)
            except RaisedByTemplate as e:
                row["error"], row["raised"] = str(e), True
            except Exception as e:  # jinja2 refuses: the C renderer must refuse too
                row["error"], row["raised"] = "%s: %s" % (type(e).__name__, e), False
            out.write(json.dumps(row, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
