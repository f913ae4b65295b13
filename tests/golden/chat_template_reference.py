#!/usr/bin/env python3
"""Chat-template cases rendered by Python's jinja2 the way transformers'
apply_chat_template renders them (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loop controls; its tojson, raise_exception
and strftime_now; variables messages, tools, documents,
add_generation_prompt, the special tokens, then chat_template_kwargs).

Writes JSON lines to stdout, one per case (first the language snippets,
each with its "source", then the model templates):
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
        ("thinking_kwarg", [u("q1"), a("</think>a1"), u("q2"), a("partial", prefix=True)], None, {"thinking": True}),
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


# ---- language snippets: one construct each, rendered with variables ----

V = {"s": "  Hello World  ", "n": 7, "f": 2.5, "neg": -3, "t": True, "none": None, "l": [3, 1, 2],
     "d": {"b": 1, "a": [1, 2], "c": {"x": "y"}}, "u": "日本語😀é", "e": "", "el": [], "ed": {},
     "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "x": 1},
              {"role": "user", "content": "bye"}],
     "big": 123456789012345, "fl": [0.1, 1e-07, 1e16, 1.5e300, -0.0, 100.0, 3.14159, 1e22, 123456.789]}

SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    "a\n  {% if t %}\n    x\n  {% endif %}\nb",
    "a  {%- if t -%}  x  {%- endif -%}  b",
    "{{- ' a ' -}}  \n  {{ 'b' }} {{- 'c' }}",
    "line1\n    {# comment #}\nline2\n  {#- c -#}  line3",
    "  {%+ if t %}x{% endif %}\n",
    "{% if t %}\nA\n{% else %}\nB\n{% endif %}\n",
    "x {% raw %}{{ not }} {% evaluated %}{% endraw %} y",
    "\n\n{% set x = 1 %}\n\n{{ x }}\n\n",
    "a\r\nb\rc{{ 'd' }}\r\n",
    "{% for i in l %}\n  {{ i }}\n{% endfor %}\n",
    "  {{ 'var keeps indent' }}\n  {% if t %}block{% endif %}",
    "{% if t %}  {% endif %}|{% if t -%}  \n  {%- endif %}|",
    # loops
    "{% for x in l %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
    "{% for x in el %}{{ x }}{% else %}empty{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.last }} {% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}{% for c in 'ab😀' %}[{{ c }}]{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for m in msgs %}{{ loop.previtem.role if not loop.first else '-' }}>{{ m.role }}<{{ loop.nextitem.role if not loop.last else '-' }} {% endfor %}",
    "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{% endfor %}",
    "{% set x = 'o' %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% for x in none %}{% endfor %}",
    "{% for x in undefined_thing %}{{ x }}{% else %}none{% endfor %}",
    # set, namespace, macros
    "{% set ns = namespace(a=1, b='x') %}{% for i in l %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}",
    "{% set ns = namespace() %}{% set ns.x = 5 %}{{ ns.x }}{{ ns.missing is defined }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
    "{% set blk %}inner {{ n }}\n{% endset %}[{{ blk }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Z') }}",
    "{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}",
    "{% macro m(a, b) %}{{ a }}|{{ b }}|{{ b is defined }}{% endmacro %}{{ m(1) }}",
    "{% set x = 1 %}{% if t %}{% set x = 2 %}{% endif %}{{ x }}",
    "{% set ns = namespace(found=false) %}{% for m in msgs %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    # expressions and operators
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 6 / 3 }}",
    "{{ 1.5 + 2 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2 ** -1 }} {{ 10 ** 18 }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ -0.5 | round }}",
    "{{ 'a' ~ 1 ~ none ~ t ~ undefined_var ~ 2.0 }}",
    "{{ 'ab' * 3 }}{{ [1] * 2 }}{{ 'x' + 'y' }}{{ [1] + [2] }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ t == 1 }} {{ none == none }}",
    "{{ 'ell' in 'hello' }} {{ 2 in l }} {{ 'b' in d }} {{ 'z' not in d }} {{ 5 not in l }} {{ 'x' in undefined_var }}",
    "{{ t and 'yes' }} {{ none or 'fallback' }} {{ 0 or '' or 'last' }} {{ not t }} {{ not none }}",
    "{{ 'a' if t else 'b' }} {{ 'a' if none else 'b' }} [{{ 'a' if none }}]",
    "{{ -n }} {{ +f }} {{ -f }} {{ - - n }}",
    "{{ n > 5 and n < 10 or false }}",
    "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ {'k': [1, 'x', none, true, 1.5]} }}",
    "{{ \"it's\" }} {{ 'say \"hi\"' }} {{ ['it\\'s', \"q\\\"d\", 'both \\' \"'] }} {{ 'tab\\there\\nnl\\\\' }}",
    "{{ '\\u00e9\\x41\\101\\N' }}{{ 'é' }}",
    "{{ \"adjacent\" 'strings' }}",
    "{{ d['a'][1] }} {{ d.a[0] }} {{ d.c.x }} {{ d['c']['x'] }} {{ msgs[-1].content }} {{ l[5] is defined }}",
    "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[5:] }} {{ l[1:2:-1] }} {{ l[2:0:-1] }}",
    "{{ u[1:] }} {{ u[::-1] }} {{ u[-1] }} {{ u[0] }} {{ s[2:7] }} {{ 'abcdef'[::2] }}",
    "{{ d.missing }}|{{ d.missing is defined }}|{{ d['missing'] is undefined }}|{{ none.attr is defined }}",
    "{{ n is divisibleby 7 }} {{ n is even }} {{ n is odd }} {{ l is sequence }} {{ d is mapping }} {{ s is string }}",
    "{{ n is number }} {{ f is float }} {{ n is integer }} {{ t is boolean }} {{ t is true }} {{ false is false }} {{ none is none }}",
    "{{ s is iterable }} {{ n is iterable }} {{ undefined_var is iterable }} {{ d is sequence }} {{ 'x' is in 'xyz' }}",
    "{{ n is eq 7 }} {{ n is ne 7 }} {{ n is gt 3 }} {{ n is lt 3 }} {{ n is ge 7 }} {{ n is le 6 }} {{ 'abc' is lower }} {{ 'ABC' is upper }}",
    "{{ undefined_var is not defined }} {{ n is not none }} {{ not undefined_var is defined }}",
    # filters
    "[{{ s | trim }}] [{{ s | lower }}] [{{ s | upper }}] [{{ 'hello wORLD-x(y' | title }}] [{{ 'hELLO' | capitalize }}]",
    "{{ s | length }} {{ u | length }} {{ l | length }} {{ d | count }} {{ undefined_var | length }}",
    "{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'ab' | replace('', '.') }}",
    "{{ l | join(', ') }} {{ ['a', 1, none] | join }} {{ msgs | join('|', attribute='role') }}",
    "{{ undefined_var | default('dflt') }} {{ none | default('d2') }} {{ '' | default('d3', true) }} {{ n | d(0) }}",
    "{{ d | items | list }} {{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}",
    "{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }} {{ msgs | selectattr('x') | list }} {{ msgs | selectattr('x', 'defined') | list | length }}",
    "{{ l | select('odd') | list }} {{ l | reject('odd') | list }} {{ ['A', 'b'] | map('lower') | list }} {{ msgs | map(attribute='x', default=0) | list }}",
    "{{ l | first }} {{ l | last }} {{ 'xyz' | first }} {{ el | first is defined }} {{ l | list }} {{ 'ab' | list }}",
    "{{ 42 | string }} {{ none | string }} {{ l | string }} {{ t | string }} {{ 'x' | safe }}",
    "{{ '42' | int + 1 }} {{ '3.9' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ 4.7 | int }} {{ ' 12 ' | int }} {{ '0x1A' | int(0, 16) }}",
    "{{ '2.5' | float }} {{ 3 | float }} {{ 'no' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }}",
    "{{ l | sort }} {{ l | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ msgs | sort(attribute='content') | map(attribute='content') | list }}",
    "{{ [1, 2, 1, 3] | unique | list }} {{ l | max }} {{ l | min }} {{ l | sum }} {{ l | reverse | list }} {{ 'abc' | reverse }}",
    "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ '<&>' | e }}|{{ 'one two  three' | wordcount }}",
    "{{ d | dictsort }} {{ d | dictsort(reverse=true) }} {{ {'b': 2, 'A': 3, 'a': 1} | dictsort(by='value') }} {{ {'B': 1, 'a': 2} | dictsort(true) }} {{ d | attr('b') }}",
    "{% for k, v in d | dictsort %}{{ k }}:{{ v | tojson }} {% endfor %}{{ msgs[0] | attr('role') }}",
    "{{ '%s and %d' % ('x', 3) }} {{ '%s!' % 'hi' }} {{ '%s-%s' | format('a', 'b') }}",
    # tojson
    "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ l | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}",
    "{{ fl | tojson }}|{{ fl }}|{{ big | tojson }}|{{ -0.5 | tojson }}",
    "{{ u | tojson }}|{{ u | tojson(ensure_ascii=true) }}|{{ 'ctl\\x01\\x7f\"\\\\/\\t' | tojson }}|{{ none | tojson }}|{{ t | tojson }}",
    "{{ msgs | tojson(indent=4) }}|{{ el | tojson(indent=2) }}|{{ ed | tojson(indent=2) }}|{{ 'x' | tojson(indent='\\t') }}",
    "{{ {'k': (1, 2)} | tojson }}|{{ [[], [{}]] | tojson(indent=1) }}",
    # string methods
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'ab\\n\\n'.rstrip('\\n') }}",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split() }}",
    "{{ s.startswith('  He') }} {{ s.endswith('  ') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'x</think>y'.split('</think>')[-1] }}",
    "{{ 'Hello'.lower() }} {{ 'Hello'.upper() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aaa'.replace('a', 'b') }}",
    "{{ '{} + {} = {}'.format(1, 2, 3) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='x') }} {{ '{{}}'.format() }}",
    "{{ ', '.join(['a', 'b']) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }}",
    "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ msgs[0].get('content') }}",
    "{{ 'ÉCOLE ß İ'.lower() }} {{ 'straße é ﬁ'.upper() }} {{ 'ǆungla ßa'.title() }} {{ 'ßx' | capitalize }} {{ 'ﬁne day' | title }}",
    "{{ 'ab'.center(7) }}|{{ 'ab'.center(6, '*') }}|{{ 'abc'.center(6, 'é') }}|{{ 'x'.ljust(4, '.') }}|{{ 'x'.rjust(3) }}|{{ '-42'.zfill(6) }}|{{ '+7'.zfill(4) }}|{{ 'abcdef'.center(3) }}|{{ 'é'.ljust(3, 'ü') }}|{{ '42'.zfill(1) }}",
    # globals
    "{{ range(5) | list }} {{ range(2, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ strftime_now('%Y-%m-%d %H:%M %b %a') }}",
    "{{ namespace(x=1) }}{{ n ~ '' }}",
    # undefined handling
    "[{{ undefined_var }}] [{{ undefined_var | lower }}] [{{ undefined_var | trim }}] {{ undefined_var == undefined_other }} {{ not undefined_var }}",
    "{% if undefined_var %}x{% elif undefined_var is undefined %}u{% else %}e{% endif %}",
    # more corners
    "a  {% if t %}b{% endif %}  c\n  {% if t %}d{% endif %}\n",
    "{% if t %}x{% endif %}\n\n{% if t %}y{%- endif %}\nz",
    "{#- c #}\n  x{# c -#}   y{# a %} b #}c",
    "{{ 'a' }}\n{% for i in l -%}\n {{ i }}\n{%- endfor %}\n",
    "{% set x %}{% for i in l %}{{ i }}{% endfor %}{% endset %}{{ x | length }}",
    "{{ msgs[0]['content'][0] }}{{ msgs[-1]['role'][1:] }}{{ (msgs | last).content }}",
    "{{ '%5s|%-3d|%.2f|%05.1f|%x|%r|%s' % ('a', 1, 3.14159, 2.25, 255, 'q', none) }}",
    "{{ 3.0 | string }} {{ 1e-5 }} {{ 1.0e10 }} {{ 12345678901234567890.0 }} {{ '' ~ 1.0 / 3 }} {{ 1e300 * 1e300 }}",
    "{{ true + 1 }} {{ true * 3 }} {{ [1, [2, 3]] | tojson }} {{ 'abc' < 'abd' }} {{ (1, 2) == [1, 2] }}",
    "{{ none | tojson }} {{ none | string | length }} {{ messages is defined }} {{ 'b' in d.keys() }}",
    "{{ l | map('string') | join('-') }} {{ s.split() | length }} {{ 'a\tb'.split('\t') }} {{ '\n'.join(['a', 'b']) }}",
    "{{ 'Hello' | replace('l', 'L') | lower | upper }} {{ msgs | map(attribute='role') | unique | list }} {{ (l | sort)[0] }}",
    "{{ n // 2 * 2 == n }} {{ 10 - 3 - 2 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not true == false }} {{ 1 if none is none }}",
    "{{ 'a' 'b' ~ 'c' }} {{ {'a': 1}['a'] }} {{ {'a': {'b': 2}}.a.b }} {{ [1, 2, 3][-1:] }} {{ 'abc'[-5:] }} {{ 'abc'[10] is defined }}",
    "{%- for m in msgs -%}{%- if not loop.first -%},{%- endif -%}{{ m.role }}{%- endfor -%}",
    "{{ '{{' }} {{ '}}' }} {% if t %}{% elif x.y.z %}{% endif %}{{ u | upper }} {{ u[2:4] }} {{ 'x' if t }}{{ 'y' if not t }}|",
    "{% for x in l %}{% set ns = namespace(v=x) %}{{ ns.v }}{% endfor %}{% macro m(x) %}[{{ x }}]{% endmacro %}{{ l | map('string') | map('length') | list }}",
    "{% for m in msgs %}{% for k, v in m | dictsort %}{{ k }}{% endfor %}{% endfor %}",
    "{{ msgs | selectattr('role', 'in', ['user']) | list | length }} {{ l | select('gt', 1) | list }} {{ l | reject('eq', 3) | list }}",
    "{{ 'a\n  \n\nb\r\nc\rd' | indent(3) }}|{{ 'x\n\ny' | indent(2, blank=true) }}|{{ '' | indent(first=true) }}|{{ 'one\ntwo' | indent('> ') }}",
    "{{+ 'plus' }}|{%+ if t %}p{% endif %}|{{ '%-6s|%3s|%.2s|%6.1s' % ('日本', 'ab', 'xyz', 'é😀') }}",
    "x\n{% raw -%}\n  raw {{ x }}\n{%- endraw %}\ny {{ n }}",
    "{{ ['\\x00\\x1f\\x7f\\x85\\xa0\\xad é \\u200b\\u2028\\u3000 \\ue000 \\U0001f600 \\U000e0001 日本'] }}",
    "a\u00a0\u3000 {%- if t -%} \u2028\u00a0b\n\u00a0 {% if t %}c{% endif %}\u00a0{{- 'd' -}}\u2003é{% endif %}",
    "{% for m in msgs %}{{ loop.cycle('odd', 'even') }}{{ loop.cycle(1) }} {% endfor %}",
    # errors (both must refuse)
    "{{ undefined_var.attr }}",
    "{{ undefined_var.a.b }}",
    "{{ d.missing.deeper }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + undefined_var }}",
    "{{ raise_exception('Custom failure: ' ~ n) }}",
    "{% if n > 5 %}{{ raise_exception('too big') }}{% endif %}after",
    "{{ 1 / 0 }}",
    "{{ n | tojson(indent=2) }}{{ undefined_var | tojson }}",
    "{{ l < 'a' }}",
    "{{ n() }}",
    "{{ 'x' in 5 }}",
    "{% set ns = 5 %}{% set ns.a = 1 %}",
    "{{ l.append(4) }}",
    "{{ 'abc'[1:2:0] }}",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time", type=int, default=1735732800)
    ap.add_argument("--fuzz", type=int, default=60)
    ap.add_argument("--seed", type=int, default=20241201)
    ap.add_argument("templates", nargs="+", help="NAME=DIR")
    args = ap.parse_args()
    env = make_env(args.time)
    out = sys.stdout
    for i, src in enumerate(SNIPPETS):
        req = {"messages": [{"role": "user", "content": "m"}], "chat_template_kwargs": V}
        row = {"template": "snippet", "case": "snippet%d" % i, "source": src, "request": req}
        try:
            row["text"] = render(env.from_string(src), {}, req)
        except RaisedByTemplate as e:
            row["error"], row["raised"] = str(e), True
        except Exception as e:
            row["error"], row["raised"] = "%s: %s" % (type(e).__name__, e), False
        out.write(json.dumps(row, ensure_ascii=True) + "\n")
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
