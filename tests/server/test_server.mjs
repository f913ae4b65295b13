// test_server.mjs — `nanollm-launch serve` held to the official OpenAI client
// library for Node.js, on the CPU with the demo model.
//
// Every generation is checked against `nanollm-launch batch` run with the
// same engine options (the same requests through the offline path): texts
// and logprobs must agree, for whole responses, streams, and 32 concurrent
// streams.  Then: stop strings, usage, the client's own error classes for
// 400/401/404/413 and 503 (queue full), a client that disconnects
// mid-stream (its KV blocks are free again in /metrics), /health turning
// 503 once a worker is killed, and SIGTERM: in-flight streams finish (or are
// aborted at --shutdown-timeout), the server exits 0 and leaves no worker
// process and no shared-memory segment.  A client that half-closes still
// gets its response; text holding U+0000 (a byte-level model) comes back
// as batch writes it.
//
// Environment: NANOLLM_LAUNCH (the program), NANOLLM_OPENAI_DIR (the
// unpacked npm package; tools/fetch-openai-client.sh).
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);
const clientDir = process.env.NANOLLM_OPENAI_DIR;
const launch = process.env.NANOLLM_LAUNCH;
if (!clientDir || !launch) {
  console.error('test_server: set NANOLLM_OPENAI_DIR and NANOLLM_LAUNCH');
  process.exit(1);
}
const { OpenAI, APIError, BadRequestError, AuthenticationError, NotFoundError, InternalServerError } =
  require(clientDir);

const ENGINE = ['--num-kv-blocks', '256', '--max-model-len', '512', '--max-num-seqs', '40',
  '--max-num-batched-tokens', '2048'];
const KEY = 'test-key-0123456789';
const MODEL = 'nanollm-demo';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nl-server-'));

let failures = 0;
let n = 0;
function check(cond, what) {
  n++;
  if (cond) {
    console.log(`ok ${n} - ${what}`);
  } else {
    failures++;
    console.log(`not ok ${n} - ${what}`);
  }
  return cond;
}
function eq(got, want, what) {
  const ok = JSON.stringify(got) === JSON.stringify(want);
  if (!ok) console.log(`#   got:  ${JSON.stringify(got)}\n#   want: ${JSON.stringify(want)}`);
  return check(ok, what);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the reference: the same requests through `batch` ---------------------------

const streamLines = [];
for (let i = 0; i < 32; i++) {
  const line = { id: `s${i}`, prompt: `Stream number ${i} says:`, max_tokens: 10, ignore_eos: true };
  if (i % 2 === 0) line.temperature = 0;
  else Object.assign(line, { temperature: 0.9, top_k: 50, seed: 1000 + i });
  streamLines.push(line);
}
// A tool-using conversation: the template's request as batch takes it (the
// call's arguments an object, as templates expect them) ...
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const toolTurns = (args) => [
  { role: 'system', content: 'You help with the weather.' },
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
    function: { name: 'get_weather', arguments: args } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
];
const refLines = [
  { id: 'tools', messages: toolTurns({ city: 'Paris' }), tools: TOOLS, max_tokens: 8, temperature: 0,
    ignore_eos: true },
  { id: 'no_gen_prompt', messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }],
    add_generation_prompt: false, chat_template_kwargs: { enable_thinking: false, other: 1 }, max_tokens: 6,
    temperature: 0, ignore_eos: true },
  { id: 'greedy', prompt: 'Hello world, this is', max_tokens: 24, temperature: 0, ignore_eos: true, logprobs: 3 },
  { id: 'chat', messages: [{ role: 'user', content: 'Say something nice.' }], max_tokens: 16, temperature: 0,
    ignore_eos: true, logprobs: 2 },
  { id: 'ids', prompt_token_ids: [9707, 1879, 11, 419, 374], max_tokens: 8, temperature: 0, ignore_eos: true },
  ...streamLines,
];
fs.writeFileSync(path.join(tmp, 'in.jsonl'), refLines.map((l) => JSON.stringify(l)).join('\n') + '\n');
const batch = spawnSync(launch, [...ENGINE, 'batch', '--input', path.join(tmp, 'in.jsonl'), '--output',
  path.join(tmp, 'out.jsonl')], { encoding: 'utf8' });
if (batch.status !== 0) {
  console.error(`batch failed (${batch.status}): ${batch.stderr}`);
  process.exit(1);
}
const ref = {};
for (const line of fs.readFileSync(path.join(tmp, 'out.jsonl'), 'utf8').trim().split('\n')) {
  const o = JSON.parse(line);
  ref[o.id] = o;
}

// ---- servers --------------------------------------------------------------------------

function startServer(engineArgs, serveArgs) {
  return new Promise((resolve, reject) => {
    const proc = spawn(launch, [...engineArgs, 'serve', '--port', '0', ...serveArgs],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && !proc.port) {
        proc.port = Number(m[1]);
        resolve({ proc, port: proc.port, exited, stderr: () => err });
      }
    });
    proc.on('exit', () => { if (!proc.port) reject(new Error(`serve exited before listening: ${err}`)); });
  });
}

function client(port, apiKey = KEY) {
  return new OpenAI({ apiKey, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 60000 });
}

async function metrics(port) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`,
    { headers: { Authorization: `Bearer ${KEY}` } })).text();
  const get = (name, label = '') => {
    const re = new RegExp(`^${name}\\{[^}]*${label}[^}]*\\} (\\S+)$`, 'm');
    const m = text.match(re);
    return m ? Number(m[1]) : NaN;
  };
  return { text, get };
}

// The worker processes of pid (children of any of its threads).
function workersOf(pid) {
  const out = [];
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    const kids = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
    for (const k of kids ? kids.split(/\s+/) : []) {
      const comm = fs.readFileSync(`/proc/${k}/comm`, 'utf8').trim();
      if (comm.startsWith('nanollm-worker')) out.push(Number(k));
    }
  }
  return out;
}
const alive = (pid) => fs.existsSync(`/proc/${pid}`) &&
  !/^State:\s+Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
const shmOf = (pid) => fs.readdirSync('/dev/shm').filter((f) => f.startsWith(`nanollm-${pid}-`));

async function streamText(stream) {
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  let split = false;
  const lps = [];
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const delta = c.text ?? c.delta?.content ?? '';
      if (delta.includes('\uFFFD')) split = true;
      text += delta;
      if (c.finish_reason) finish = c.finish_reason;
      if (c.logprobs?.content) lps.push(...c.logprobs.content);
      if (c.logprobs?.token_logprobs) lps.push(...c.logprobs.token_logprobs);
    }
  }
  return { text, finish, usage, chunks, lps, split };
}

async function expectError(promise, cls, status, what) {
  try {
    await promise;
    check(false, `${what}: no error`);
    return null;
  } catch (e) {
    const ok = e instanceof cls && e.status === status;
    if (!ok) console.log(`#   ${e?.constructor?.name} ${e?.status}: ${e?.message}`);
    check(ok, `${what}: ${cls.name} ${status}`);
    return e;
  }
}

const close = (a, b) => Math.abs(a - b) < 1e-4;

// ---- server A: the API -------------------------------------------------------------

async function testApi() {
  const a = await startServer(ENGINE, ['--api-key', KEY, '--max-queue', '64']);
  const c = client(a.port);
  try {
    const models = await c.models.list();
    eq(models.data.map((m) => m.id), [MODEL], 'models.list names the served model');

    // Completions, whole and streamed, against batch.
    const g = ref.greedy;
    const r = await c.completions.create({ model: MODEL, prompt: 'Hello world, this is', max_tokens: 24,
      temperature: 0, ignore_eos: true, logprobs: 3 });
    eq(r.choices[0].text, g.text, 'completion text = batch');
    eq(r.choices[0].finish_reason, 'length', 'completion finish_reason length');
    eq([r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens],
      [g.prompt_tokens, 24, g.prompt_tokens + 24], 'completion usage');
    const lp = r.choices[0].logprobs;
    check(lp.tokens.length === 24 && lp.token_logprobs.length === 24 && lp.top_logprobs.length === 24 &&
      lp.text_offset.length === 24, 'completion logprobs: one entry per token');
    check(lp.token_logprobs.every((x, k) => close(x, g.logprobs[k].logprob)), 'completion logprobs = batch');
    check(lp.top_logprobs.every((m, k) => Object.values(m).length >= 1 && Object.values(m).length <= 3 &&
      Object.values(m).every((v) => g.logprobs[k].top.some(([, l]) => close(l, v)))),
    'completion top_logprobs: at most 3 each, values = batch');
    eq(lp.tokens.join(''), g.text, 'completion logprob tokens spell the text');

    const s = await streamText(await c.completions.create({ model: MODEL, prompt: 'Hello world, this is',
      max_tokens: 24, temperature: 0, ignore_eos: true, stream: true, logprobs: 3,
      stream_options: { include_usage: true } }));
    eq(s.text, g.text, 'streamed completion text = batch');
    eq(s.finish, 'length', 'streamed completion finish_reason');
    eq(s.usage && [s.usage.prompt_tokens, s.usage.completion_tokens], [g.prompt_tokens, 24], 'stream usage chunk');
    check(s.lps.length === 24 && s.lps.every((x, k) => close(x, g.logprobs[k].logprob)), 'streamed logprobs = batch');
    check(s.chunks > 2, `the completion streamed in ${s.chunks} chunks`);

    const ids = await c.completions.create({ model: MODEL, prompt: [9707, 1879, 11, 419, 374], max_tokens: 8,
      temperature: 0, ignore_eos: true });
    eq(ids.choices[0].text, ref.ids.text, 'token-id prompt = batch');

    // Chat, whole and streamed.
    const ch = ref.chat;
    const msgs = [{ role: 'user', content: 'Say something nice.' }];
    const cr = await c.chat.completions.create({ model: MODEL, messages: msgs, max_completion_tokens: 16,
      temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 });
    eq(cr.object, 'chat.completion', 'chat object');
    eq(cr.choices[0].message, { role: 'assistant', content: ch.text }, 'chat message = batch');
    eq([cr.usage.prompt_tokens, cr.usage.completion_tokens], [ch.prompt_tokens, 16], 'chat usage');
    const content = cr.choices[0].logprobs.content;
    check(content.length === 16 && content.every((e, k) => close(e.logprob, ch.logprobs[k].logprob) &&
      e.top_logprobs.length === 2 && Buffer.from(e.bytes).toString('utf8') === e.token),
    'chat logprobs: OpenAI shape, values = batch');
    const cs = await streamText(await c.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 16,
      temperature: 0, ignore_eos: true, stream: true, logprobs: true }));
    eq(cs.text, ch.text, 'streamed chat text = batch');
    check(cs.lps.length === 16 && cs.lps.every((e, k) => close(e.logprob, ch.logprobs[k].logprob) &&
      e.top_logprobs.length === 0), 'streamed chat logprobs (no alternatives asked)');

    // ... and through the API: a tool turn, tool definitions, the call's
    // arguments as OpenAI sends them (a JSON string, compact here, where
    // the template's tojson of the object puts spaces); the template gets
    // the same request as batch's.
    const tr = await c.chat.completions.create({ model: MODEL, messages: toolTurns('{"city":"Paris"}'),
      tools: TOOLS, max_tokens: 8, temperature: 0, ignore_eos: true });
    eq([tr.choices[0].message.content, tr.usage.prompt_tokens], [ref.tools.text, ref.tools.prompt_tokens],
      'chat with tools and a tool turn = batch');
    const ng = await c.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello' }], add_generation_prompt: false,
    chat_template_kwargs: { enable_thinking: false, other: 1 }, max_tokens: 6, temperature: 0, ignore_eos: true });
    eq([ng.choices[0].message.content, ng.usage.prompt_tokens], [ref.no_gen_prompt.text, ref.no_gen_prompt.prompt_tokens],
      'add_generation_prompt and chat_template_kwargs reach the template as in batch');
    let te = await expectError(c.chat.completions.create({ model: MODEL, messages: toolTurns('{"city": '),
      tools: TOOLS }), BadRequestError, 400, 'tool call arguments that are not JSON');
    check(te?.param === 'messages' && /messages\[2\]\.tool_calls\[0\]\.function\.arguments/.test(te?.message ?? ''),
      'the broken tool call named');
    te = await expectError(c.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }],
      tools: { get_weather: {} } }), BadRequestError, 400, 'tools not a list');
    eq(te?.param, 'tools', 'tools named');
    te = await expectError(c.chat.completions.create({ model: MODEL, messages: [{ role: 'tool', content: 'x',
      tool_call: 'call_1' }] }), BadRequestError, 400, 'unknown message field');
    eq(te?.param, 'messages[0].tool_call', 'the unknown message field named');

    // Stop strings: the output ends before the first occurrence.
    const chars = Array.from(g.text);
    let stop = null;
    for (let p = 4; p + 3 <= chars.length && !stop; p++) {
      const cand = chars.slice(p, p + 3).join('');
      if (cand.trim().length === 3) stop = cand;
    }
    if (check(stop !== null, 'found a stop string in the greedy text')) {
      const want = g.text.slice(0, g.text.indexOf(stop));
      const st = await c.completions.create({ model: MODEL, prompt: 'Hello world, this is', max_tokens: 24,
        temperature: 0, ignore_eos: true, stop: [stop, 'never-appears-xyz'] });
      eq([st.choices[0].text, st.choices[0].finish_reason], [want, 'stop'], `stop ${JSON.stringify(stop)}`);
      const sst = await streamText(await c.completions.create({ model: MODEL, prompt: 'Hello world, this is',
        max_tokens: 24, temperature: 0, ignore_eos: true, stop, stream: true }));
      eq([sst.text, sst.finish], [want, 'stop'], 'stop while streaming');
    }
    // A stop token id (vLLM's stop_token_ids): the output ends at its first
    // occurrence, the id counted and its text left out.
    const cut = g.token_ids.indexOf(g.token_ids[6]);
    const upToStop = await (await fetch(`http://127.0.0.1:${a.port}/detokenize`, { method: 'POST',
      headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ tokens: g.token_ids.slice(0, cut) }) })).json();
    const sid = await c.completions.create({ model: MODEL, prompt: 'Hello world, this is', max_tokens: 24,
      temperature: 0, ignore_eos: true, stop_token_ids: [g.token_ids[6]] });
    eq([sid.choices[0].text, sid.choices[0].finish_reason, sid.usage.completion_tokens],
      [upToStop.prompt, 'stop', cut + 1], 'stop_token_ids: the greedy output up to that token, without its text');
    const badStop = await expectError(c.completions.create({ model: MODEL, prompt: 'x',
      stop_token_ids: [1 << 30] }), BadRequestError, 400, 'a stop token id outside the vocabulary');
    eq(badStop?.param, 'stop_token_ids', 'stop_token_ids named');

    // 32 concurrent streams = the same requests through batch.
    const t0 = Date.now();
    const outs = await Promise.all(streamLines.map(async (l) => {
      const { id, ...params } = l;
      return streamText(await c.completions.create({ model: MODEL, ...params, stream: true,
        stream_options: { include_usage: true } }));
    }));
    const bad = streamLines.filter((l, i) => outs[i].text !== ref[l.id].text || outs[i].usage?.completion_tokens !== 10);
    check(outs.every((o, i) => !o.split || ref[streamLines[i].id].text.includes('\uFFFD')),
      'no stream chunk splits a UTF-8 character');
    if (bad.length) console.log(`#   differ: ${bad.map((l) => l.id).join(' ')}`);
    check(bad.length === 0, `32 concurrent streams (greedy and seeded) = batch (${Date.now() - t0} ms)`);

    // Tokenize / detokenize round trip.
    const tok = await (await fetch(`http://127.0.0.1:${a.port}/tokenize`, { method: 'POST',
      headers: { Authorization: `Bearer ${KEY}` }, body: JSON.stringify({ prompt: 'Hello world' }) })).json();
    eq(tok.tokens, [9707, 1879], '/tokenize = the Qwen3 tokenizer');
    const detok = await (await fetch(`http://127.0.0.1:${a.port}/detokenize`, { method: 'POST',
      headers: { Authorization: `Bearer ${KEY}` }, body: JSON.stringify({ tokens: tok.tokens }) })).json();
    eq(detok.prompt, 'Hello world', '/detokenize round trip');
    // U+0000 is text like any other: the byte-level token 188 stands for it.
    const postJson = async (route, body) => (await fetch(`http://127.0.0.1:${a.port}${route}`, { method: 'POST',
      headers: { Authorization: `Bearer ${KEY}` }, body: JSON.stringify(body) })).json();
    eq((await postJson('/tokenize', { prompt: 'a\u0000b' })).tokens, [64, 188, 65], '/tokenize reads past U+0000');
    eq((await postJson('/detokenize', { tokens: [64, 188, 65] })).prompt, 'a\u0000b',
      '/detokenize writes U+0000 as \\u0000');
    eq((await postJson('/tokenize', { prompt: 'Hello world', add_special_tokens: false })).tokens, [9707, 1879],
      '/tokenize add_special_tokens false: Qwen3 adds none either way');

    // A client that shuts down its writing side after the request (as
    // `nc -N` or `curl --data @- <&-` may) still reads: it gets its whole
    // response, streamed or not, and the request is not counted as aborted.
    const halfClose = (body, version = '1.1') => new Promise((resolve) => {
      const sock = net.connect(a.port, '127.0.0.1', () => {
        const json = JSON.stringify(body);
        sock.end(`POST /v1/completions HTTP/${version}\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n` +
          'Connection: close\r\n\r\n' + json);
      });
      let got = '';
      sock.setEncoding('utf8');
      sock.on('data', (d) => { got += d; });
      sock.on('close', () => resolve(got));
      sock.on('error', () => resolve(got));
    });
    // The last response in raw (after any 100 Continue): its bytes, and
    // its body's completion text (null when the body is not one).
    const lastResponse = (raw) => {
      const res = raw.slice(raw.lastIndexOf('HTTP/1.'));
      let text = null;
      try { text = JSON.parse(res.slice(res.indexOf('\r\n\r\n') + 4)).choices[0].text; } catch { /* null */ }
      return { res, text };
    };
    const aborted0 = (await metrics(a.port)).get('nanollm_request_finished_total', 'finished_reason="abort"');
    const hcBody = { model: MODEL, prompt: 'Hello world, this is', max_tokens: 24, temperature: 0, ignore_eos: true };
    let raw = await halfClose(hcBody);
    let last = lastResponse(raw);
    check(/^HTTP\/1\.1 200 /.test(last.res), `a half-closed client gets a 200 (${JSON.stringify(raw.slice(0, 40))})`);
    eq(last.text, ref.greedy.text, 'a half-closed client gets the whole response (= batch)');
    raw = await halfClose({ ...hcBody, stream: true });
    check(raw.includes('data: [DONE]'), 'a half-closed client gets the whole stream');
    // An HTTP/1.0 client has no chunked encoding: its stream is the bytes
    // until the server closes, and a half-close must not cut it short.
    raw = await halfClose(hcBody, '1.0');
    last = lastResponse(raw);
    check(/^HTTP\/1\.[01] 200 /.test(last.res), `an HTTP/1.0 half-closed client gets a 200 (${JSON.stringify(raw.slice(0, 40))})`);
    eq(last.text, ref.greedy.text, 'an HTTP/1.0 half-closed client gets the whole response (= batch)');
    raw = await halfClose({ ...hcBody, stream: true }, '1.0');
    check(!/transfer-encoding: chunked/i.test(raw), 'an HTTP/1.0 stream is not chunked');
    const events10 = raw.slice(raw.indexOf('\r\n\r\n') + 4).split('\n\n').filter((x) => x.startsWith('data: '));
    let streamed10 = '';
    for (const ev of events10) {
      if (ev === 'data: [DONE]') continue;
      try { streamed10 += JSON.parse(ev.slice(6)).choices[0].text; } catch { streamed10 = null; break; }
    }
    check(events10.length > 0 && events10[events10.length - 1] === 'data: [DONE]',
      'an HTTP/1.0 half-closed client gets the whole stream, [DONE] last');
    eq(streamed10, ref.greedy.text, 'an HTTP/1.0 stream carries the batch text');
    eq((await metrics(a.port)).get('nanollm_request_finished_total', 'finished_reason="abort"'), aborted0,
      'a half-close aborts nothing');

    // Errors in OpenAI's shape, as the client's own classes.
    let e = await expectError(c.completions.create({ model: MODEL, prompt: 'x', frobnicate: 1 }), BadRequestError,
      400, 'unknown field');
    eq(e && [e.param, e.type], ['frobnicate', 'invalid_request_error'], 'unknown field named in param');
    // Fields clients send at their neutral value: accepted there, refused
    // by name at any other.
    const neutral = await c.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }],
      max_tokens: 2, temperature: 0, presence_penalty: 0, frequency_penalty: 0, logit_bias: {}, user: 'u-1',
      tool_choice: 'none', parallel_tool_calls: true, response_format: { type: 'text' } });
    eq(neutral.choices[0].finish_reason, 'length', 'neutral penalties, logit_bias, user, tool_choice none: accepted');
    for (const [body, param] of [[{ presence_penalty: 0.5 }, 'presence_penalty'],
      [{ logit_bias: { 42: 5 } }, 'logit_bias'], [{ tool_choice: 'auto' }, 'tool_choice'],
      [{ response_format: { type: 'json_object' } }, 'response_format']]) {
      e = await expectError(c.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }],
        ...body }), BadRequestError, 400, `${param} at a value that asks for more`);
      eq(e?.param, param, `${param} refused by name`);
    }
    e = await expectError(c.completions.create({ model: MODEL, prompt: 'x', echo: true }), BadRequestError, 400,
      'echo: true');
    eq(e?.param, 'echo', 'echo refused by name');
    e = await expectError(c.completions.create({ model: MODEL, prompt: 'x', temperature: 'hot' }), BadRequestError,
      400, 'wrong type');
    eq(e?.param, 'temperature', 'wrong type named');
    e = await expectError(c.completions.create({ model: MODEL, prompt: 'x', n: 2 }), BadRequestError, 400, 'n = 2');
    eq(e?.param, 'n', 'n refused by name');
    e = await expectError(c.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }],
      top_logprobs: 50, logprobs: true }), BadRequestError, 400, 'top_logprobs out of range');
    eq(e?.param, 'top_logprobs', 'top_logprobs named');
    e = await expectError(c.completions.create({ model: MODEL, prompt: 'word '.repeat(600), max_tokens: 4 }),
      BadRequestError, 400, 'prompt too long');
    eq(e && [e.param, e.code], ['prompt', 'context_length_exceeded'], 'prompt too long: param and code');
    check(/max_model_len 512/.test(e?.message ?? ''), 'prompt too long: the limit is named');
    e = await expectError(c.post('/completions', { body: '{"prompt": ', headers: { 'Content-Type': 'application/json' } }),
      BadRequestError, 400, 'bad JSON');
    await expectError(client(a.port, 'wrong-key').models.list(), AuthenticationError, 401, 'wrong API key');
    const noKey = await fetch(`http://127.0.0.1:${a.port}/v1/models`);
    eq(noKey.status, 401, 'no API key: 401');
    eq((await fetch(`http://127.0.0.1:${a.port}/health`)).status, 200, '/health needs no key');
    await expectError(c.get('/no-such-route'), NotFoundError, 404, 'unknown route');
    await expectError(c.completions.create({ model: 'gpt-4', prompt: 'x' }), NotFoundError, 404, 'unknown model');
    e = await expectError(c.completions.create({ model: MODEL, prompt: 'x'.repeat(5 << 20) }), APIError, 413,
      'body over the limit');

    // Hostile inputs: each is refused with a 400 naming the problem, and the
    // server stays healthy.
    const post = (route, body) => fetch(`http://127.0.0.1:${a.port}${route}`, { method: 'POST',
      headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body });
    const hostile = [
      ['/v1/completions', Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe,
        0x22, 0x7d])],
      ['/v1/completions', '{"prompt": [[1, 2]]}'],
      ['/v1/completions', '{"prompt": [1, -2]}'],
      ['/v1/completions', '{"prompt": "x", "max_tokens": 1e400}'],
      ['/v1/completions', '{"prompt": "x", "seed": 123456789012345678901234567890}'],
      ['/v1/completions', '['.repeat(100000) + ']'.repeat(100000)],
      ['/v1/completions', '{"prompt": "x", "prompt": "y"}'],
      ['/v1/completions', '{"prompt": "x", "stop": ["a", 3]}'],
      ['/v1/completions', '{"prompt": "x", "stream_options": {"include_usage": true}}'],
      ['/v1/completions', '{"prompt": [999999999]}'],
      ['/v1/chat/completions', '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}'],
      ['/v1/chat/completions', '{"messages": [{"role": "wizard", "content": "x"}]}'],
      ['/v1/chat/completions', '{"messages": []}'],
      ['/detokenize', '{"tokens": [1, "a"]}'],
      ['/tokenize', '{"prompt": 5}'],
      ['/v1/completions', ''],
    ];
    const statuses = [];
    for (const [route, body] of hostile) statuses.push((await post(route, body)).status);
    eq(statuses, hostile.map(() => 400), 'hostile bodies: 400 each');
    await new Promise((resolve) => {
      const sock = net.connect(a.port, '127.0.0.1', () => sock.end('GARBAGE \x01\x02 HTTP/9.9\r\n\r\n'));
      sock.on('close', resolve);
      sock.on('error', resolve);
      sock.resume();
    });
    eq((await fetch(`http://127.0.0.1:${a.port}/health`)).status, 200, 'still healthy after them');

    // A client that disconnects mid-stream: its request is aborted and its
    // KV blocks are free again.
    const before = await metrics(a.port);
    eq(before.get('nanollm_kv_cache_blocks_used'), 0, 'no KV blocks used while idle');
    const ac = new AbortController();
    const long = await c.completions.create({ model: MODEL, prompt: 'A long story:', max_tokens: 400,
      ignore_eos: true, temperature: 0, stream: true }, { signal: ac.signal });
    let got = 0;
    try {
      for await (const chunk of long) {
        if (++got === 3) {
          const during = await metrics(a.port);
          check(during.get('nanollm_kv_cache_blocks_used') > 0 && during.get('nanollm_num_requests_running') === 1,
            'a running stream holds KV blocks');
          ac.abort();
        }
      }
    } catch (err) {
      /* the abort */
    }
    let freed = false;
    const t1 = Date.now();
    while (Date.now() - t1 < 3000 && !freed) {
      const m = await metrics(a.port);
      freed = m.get('nanollm_kv_cache_blocks_used') === 0 && m.get('nanollm_num_requests_running') === 0;
      if (!freed) await sleep(20);
    }
    check(freed, `the disconnected stream's blocks are free again (${Date.now() - t1} ms)`);
    let after = await metrics(a.port);
    eq(after.get('nanollm_request_finished_total', 'finished_reason="abort"'), 1, 'counted as aborted');

    // The same for a whole-response request whose client gives up.
    const ac2 = new AbortController();
    const whole = c.completions.create({ model: MODEL, prompt: 'Another long story:', max_tokens: 480,
      ignore_eos: true, temperature: 0 }, { signal: ac2.signal }).catch(() => null);
    const g0 = after.get('nanollm_generation_tokens_total');
    for (const t = Date.now(); Date.now() - t < 3000;) {
      if ((await metrics(a.port)).get('nanollm_generation_tokens_total') >= g0 + 5) break;
      await sleep(5);
    }
    ac2.abort();
    await whole;
    freed = false;
    for (const t = Date.now(); Date.now() - t < 3000 && !freed;) {
      const m = await metrics(a.port);
      freed = m.get('nanollm_kv_cache_blocks_used') === 0 && m.get('nanollm_num_requests_running') === 0;
      if (!freed) await sleep(20);
    }
    after = await metrics(a.port);
    check(freed && after.get('nanollm_request_finished_total', 'finished_reason="abort"') === 2,
      'a whole-response request whose client went away is aborted, its blocks freed');
    check(after.get('nanollm_generation_tokens_total') - before.get('nanollm_generation_tokens_total') < 600,
      'both stopped long before max_tokens');
    check(after.get('nanollm_time_to_first_token_seconds_count') > 0 &&
      after.get('nanollm_inter_token_latency_seconds_count') > 0 &&
      after.get('nanollm_e2e_request_latency_seconds_count') > 0, 'latency histograms observed');
    check(after.get('nanollm_prompt_tokens_total') > 0 && after.get('nanollm_kv_cache_blocks_total') === 256,
      'token counters and KV total');

    // A dead worker: /health turns 503, requests are refused.
    const workers = workersOf(a.proc.pid);
    eq(workers.length, 1, 'one worker process found under the server');
    process.kill(workers[0], 'SIGKILL');
    let status = 200;
    const t2 = Date.now();
    while (Date.now() - t2 < 3000 && status === 200) {
      status = (await fetch(`http://127.0.0.1:${a.port}/health`)).status;
      if (status === 200) await sleep(20);
    }
    eq(status, 503, `/health is 503 after the worker died (${Date.now() - t2} ms)`);
    await expectError(c.completions.create({ model: MODEL, prompt: 'x' }), InternalServerError, 503,
      'a request after the worker died');

    a.proc.kill('SIGTERM');
    const { code } = await a.exited;
    eq(code, 0, 'SIGTERM after the worker died: exit 0');
    eq(shmOf(a.proc.pid), [], 'no shared-memory segment left');
  } finally {
    if (a.proc.exitCode === null) a.proc.kill('SIGKILL');
  }
}

// ---- server B: queue limit and shutdown -----------------------------------------------

async function testShutdown() {
  // Room for a stream long enough (4000 tokens) to outlast the 1.5 s
  // shutdown timeout on any machine.
  const b = await startServer(['--num-kv-blocks', '300', '--max-model-len', '4096', '--max-num-seqs', '1',
    '--max-num-batched-tokens', '512'], ['--max-queue', '1', '--shutdown-timeout', '1.5']);
  const c = client(b.port, 'anything');
  try {
    const workers = workersOf(b.proc.pid);
    eq(workers.length, 1, 'server B has its worker');
    // One stream runs, one waits: the queue (1) is full.
    const first = await c.completions.create({ model: MODEL, prompt: 'One', max_tokens: 4000, ignore_eos: true,
      stream: true });
    const it1 = first[Symbol.asyncIterator]();
    await it1.next();
    const second = c.completions.create({ model: MODEL, prompt: 'Two', max_tokens: 4, ignore_eos: true,
      stream: true });
    const t0 = Date.now();
    while (Date.now() - t0 < 3000 && (await metrics(b.port)).get('nanollm_num_requests_waiting') !== 1) await sleep(10);
    const e = await expectError(c.completions.create({ model: MODEL, prompt: 'Three', max_tokens: 4 }),
      InternalServerError, 503, 'a full queue');
    eq(e?.code, 'queue_full', 'the full queue is named');

    // SIGTERM: the waiting stream still finishes if there is time; the long
    // one is aborted at the deadline, and the server exits 0.
    const secondDone = second.then(streamText);
    const firstRest = (async () => {
      let text = '';
      let finish = null;
      for (;;) {
        const { value, done } = await it1.next();
        if (done) break;
        for (const ch of value.choices) {
          text += ch.text;
          finish = ch.finish_reason ?? finish;
        }
      }
      return finish;
    })();
    await sleep(50);
    const tKill = Date.now();
    b.proc.kill('SIGTERM');
    await sleep(200);
    const refused = await new Promise((resolve) => {
      const sock = net.connect(b.port, '127.0.0.1');
      sock.on('connect', () => { sock.destroy(); resolve(false); });
      sock.on('error', (err) => resolve(err.code === 'ECONNREFUSED'));
    });
    check(refused, 'no new connections after SIGTERM');
    // A connection kept alive from before may still ask: it hears 503.
    eq((await fetch(`http://127.0.0.1:${b.port}/health`).catch(() => ({ status: 503 }))).status, 503,
      '/health is 503 while shutting down');
    eq(await firstRest, 'abort', 'the long stream is aborted at the deadline');
    const sd = await secondDone.catch((err) => ({ error: err.message }));
    check(sd.finish === 'length' || sd.finish === 'abort', `the queued stream ended cleanly (${sd.finish})`);
    const { code } = await b.exited;
    const took = Date.now() - tKill;
    eq(code, 0, 'SIGTERM: exit 0');
    check(took >= 1400 && took < 5000, `exited after the 1.5 s shutdown timeout (${took} ms)`);
    await sleep(100);
    check(workers.every((w) => !alive(w)), 'no worker process left');
    eq(shmOf(b.proc.pid), [], 'no shared-memory segment left');
  } finally {
    if (b.proc.exitCode === null) b.proc.kill('SIGKILL');
  }
}

// ---- server C: a graceful shutdown lets a running stream finish ---------------------

async function testGraceful() {
  const s = await startServer(ENGINE, ['--shutdown-timeout', '20']);
  const c = client(s.port, 'anything');
  try {
    const workers = workersOf(s.proc.pid);
    const stream = await c.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 40, ignore_eos: true, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    s.proc.kill('SIGINT');
    let finish = null;
    let usage = null;
    for (;;) {
      const { value, done } = await it.next();
      if (done) break;
      if (value.usage) usage = value.usage;
      for (const ch of value.choices) finish = ch.finish_reason ?? finish;
    }
    eq([finish, usage?.completion_tokens], ['length', 40], 'SIGINT: the in-flight stream finishes');
    const t0 = Date.now();
    const { code } = await s.exited;
    eq(code, 0, 'then the server exits 0');
    check(Date.now() - t0 < 5000, 'without waiting for the 20 s timeout');
    await sleep(100);
    check(workers.length === 1 && workers.every((w) => !alive(w)), 'no worker process left');
  } finally {
    if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
  }
}

// ---- server C: text holding U+0000 --------------------------------------------------------

// A model whose tokenizer is bytes (id = byte): sampled text holds U+0000
// wherever id 0 was drawn, and the server's responses carry it as "\u0000"
// exactly as batch writes it -- whole, streamed, and in the logprob tokens.
// ---- the step budget: serve's own default ----------------------------------------------

async function testStepBudget() {
  const small = ['--num-kv-blocks', '64', '--max-model-len', '256'];
  for (const [extra, want] of [[[], 2048], [['--max-num-seqs', '3000'], 3000],
    [['--max-num-batched-tokens', '4096'], 4096]]) {
    const s = await startServer([...small, ...extra], []);
    check(s.stderr().includes(`mixed steps of up to ${want} tokens`),
      `serve ${extra.join(' ') || '(no budget given)'}: steps of up to ${want} tokens`);
    s.proc.kill('SIGTERM');
    await s.exited;
  }
}

async function testNulText() {
  const tok = path.join(tmp, 'bytes-tok');
  fs.mkdirSync(tok);
  const vocab = {};
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    vocab[String.fromCharCode(printable ? b : next++)] = b;
  }
  fs.writeFileSync(path.join(tok, 'tokenizer.json'), JSON.stringify({ added_tokens: [], normalizer: null,
    pre_tokenizer: { type: 'ByteLevel' }, decoder: { type: 'ByteLevel' },
    model: { type: 'BPE', merges: [], vocab } }));
  fs.writeFileSync(path.join(tok, 'tokenizer_config.json'), '{}');
  const dir = path.join(tmp, 'bytes-model');
  const mk = spawnSync(launch, ['mkmodel', '--vocab', '256', '--layers', '1', '--hidden', '16', '--inter', '16',
    '--heads', '2', '--kv-heads', '1', '--head-dim', '8', '--tokenizer', tok, '--out', dir], { encoding: 'utf8' });
  eq(mk.status, 0, `byte-level model made ${mk.stderr}`);
  const engine = ['--model', dir, '--num-kv-blocks', '64', '--max-model-len', '64'];
  const lines = [];
  for (let i = 0; i < 12; i++) {
    lines.push({ id: `n${i}`, prompt: 'ab', max_tokens: 48, ignore_eos: true, temperature: 1, seed: i, logprobs: 1 });
  }
  fs.writeFileSync(path.join(tmp, 'nul.jsonl'), lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  const bt = spawnSync(launch, [...engine, 'batch', '--input', path.join(tmp, 'nul.jsonl'), '--output',
    path.join(tmp, 'nul_out.jsonl')], { encoding: 'utf8' });
  eq(bt.status, 0, `batch on the byte-level model ${bt.stderr}`);
  const outs = fs.readFileSync(path.join(tmp, 'nul_out.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const k = outs.findIndex((o) => o.token_ids.includes(0));
  check(k >= 0, 'some draw sampled id 0 (else pick other seeds)');
  if (k < 0) return;
  const want = outs[k].text;
  eq([...want].filter((ch) => ch === '\u0000').length, outs[k].token_ids.filter((id) => id === 0).length,
    'batch text: one U+0000 per id 0');
  const c = await startServer(engine, []);
  try {
    const api = client(c.port, 'anything');
    const body = { model: 'bytes-model', prompt: 'ab', max_tokens: 48, ignore_eos: true, temperature: 1, seed: k };
    const r = await api.completions.create({ ...body, logprobs: 1 });
    eq(r.choices[0].text, want, 'completion text with U+0000 = batch');
    eq(r.choices[0].logprobs.tokens.map((t) => t === '\u0000'), outs[k].token_ids.map((id) => id === 0),
      'its logprob token is "\\u0000" exactly where id 0 was drawn');
    const st = await streamText(await api.completions.create({ ...body, stream: true }));
    eq(st.text, want, 'streamed text with U+0000 = batch');
  } finally {
    c.proc.kill('SIGKILL');
  }
}

try {
  await testApi();
  await testShutdown();
  await testGraceful();
  await testNulText();
  await testStepBudget();
} catch (err) {
  failures++;
  console.log(`not ok - ${err.stack}`);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log(`1..${n}`);
process.exit(failures ? 1 : 0);
