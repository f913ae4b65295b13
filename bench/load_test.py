#!/usr/bin/env python3
"""load_test.py — an online load generator for `nanollm-launch serve`.

Python 3 standard library only.  Each workload request becomes one streaming
POST /v1/completions (the prompt as its token ids, ignore_eos, stream_options
include_usage); requests arrive as a seeded Poisson process (--rate) or as
fast as a cap on the streams in flight allows (--concurrency), or both: at
Poisson times, waiting for a free slot.

    python3 bench/load_test.py --launch ./nanollm-launch \\
        --workload ../shared/bench/nanovllm-bench.jsonl --rate 8 \\
        --json-out out.json -- --model DIR
    python3 bench/load_test.py --url http://127.0.0.1:8000 \\
        --workload FILE.jsonl --concurrency 64

Per request it measures the time to the first content chunk (TTFT), the gaps
between successive content chunks (ITL), the end-to-end latency, and takes the
token counts from the usage chunk; overall: output tokens/s (completion
tokens over the wall time from the first send to the last finish), requests/s,
p50/p90/p99 of TTFT, ITL and end-to-end latency, mean TPOT
((e2e - TTFT) / (completion tokens - 1)) and the errors.  A chunk may carry
more than one token (the server coalesces what a slow reader has not taken
yet): ITL is the gap a client sees between updates; --logprobs asks for
logprobs 0 so that each chunk's tokens can be counted.

The streams are asyncio connections (raw HTTP/1.1, SSE parsed as bytes
arrive, no polling), spread over --processes worker processes so that the
client is not the bottleneck at hundreds of streams; each worker's CPU use is
reported to show it.
"""
import argparse
import asyncio
import json
import math
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

# ---- the workload ------------------------------------------------------------------


def read_workload(path):
    """The lines of a workload file as `nanollm-launch bench --workload` reads
    them: prompt_token_ids (non-empty list of ids), max_tokens (>= 1), and
    optional temperature and ignore_eos."""
    reqs = []
    try:
        f = open(path, encoding='utf-8')
    except OSError as e:
        raise SystemExit(f'load_test: cannot open workload {path}: {e.strerror}')
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                o = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f'load_test: {path}:{lineno}: not JSON: {e}')
            ids, mt = o.get('prompt_token_ids'), o.get('max_tokens')
            temp, ie = o.get('temperature'), o.get('ignore_eos')
            if (not isinstance(ids, list) or not ids or
                    not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids) or
                    not isinstance(mt, int) or isinstance(mt, bool) or mt < 1 or
                    (temp is not None and (not isinstance(temp, (int, float)) or isinstance(temp, bool))) or
                    (ie is not None and not isinstance(ie, bool))):
                raise SystemExit(f'load_test: {path}:{lineno}: needs prompt_token_ids (a non-empty list '
                                 'of token ids) and max_tokens (an integer >= 1); temperature a number, '
                                 'ignore_eos a boolean')
            reqs.append({'ids': ids, 'max_tokens': mt, 'temperature': temp, 'ignore_eos': ie})
    if not reqs:
        raise SystemExit(f'load_test: {path}: no requests')
    return reqs


def plan(args, workload):
    """The requests to send, in order, with their arrival offsets (seconds
    after the start; all 0 without --rate)."""
    n = args.num_requests or len(workload)
    rng = random.Random(args.seed)
    t = 0.0
    out = []
    for i in range(n):
        w = workload[i % len(workload)]
        if args.rate:
            t += rng.expovariate(args.rate)
        mt = w['max_tokens'] if not args.max_tokens_cap else min(w['max_tokens'], args.max_tokens_cap)
        temp = args.temperature if args.temperature is not None else (
            w['temperature'] if w['temperature'] is not None else 0.0)
        body = {'prompt': w['ids'], 'max_tokens': mt, 'temperature': temp,
                'ignore_eos': True if w['ignore_eos'] is None else w['ignore_eos'],
                'stream': True, 'stream_options': {'include_usage': True}}
        if args.model_name:
            body['model'] = args.model_name
        if args.logprobs:
            body['logprobs'] = 0
        out.append({'index': i, 'at': t if args.rate else 0.0, 'prompt_len': len(w['ids']),
                    'body': json.dumps(body, separators=(',', ':')).encode()})
    return out

# ---- one streamed request ------------------------------------------------------------


class SSE:
    """Server-sent events as bytes arrive: the data of each complete event."""

    def __init__(self):
        self.buf = b''

    def feed(self, data):
        self.buf += data
        events = []
        while True:
            k = self.buf.find(b'\n\n')
            if k < 0:
                break
            block, self.buf = self.buf[:k], self.buf[k + 2:]
            payload = [ln[5:].lstrip(b' ') for ln in block.split(b'\n') if ln.startswith(b'data:')]
            if payload:
                events.append(b'\n'.join(payload))
        return events


async def stream_request(host, port, path, headers, item, timeout):
    """Sends one request and reads its stream; returns the request's record."""
    rec = {'index': item['index'], 'prompt_len': item['prompt_len'], 'ok': False, 'error': None,
           'ttft': None, 'e2e': None, 'itl': [], 'chunks': 0, 'chunk_tokens': 0,
           'max_chunk_tokens': 0, 'prompt_tokens': None, 'completion_tokens': 0}
    writer = None
    t_send = time.monotonic()
    rec['send'] = t_send
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        head = (f'POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n'
                f'Accept: text/event-stream\r\nConnection: close\r\n{headers}'
                f'Content-Length: {len(item["body"])}\r\n\r\n').encode()
        writer.write(head + item['body'])
        await writer.drain()
        raw = await asyncio.wait_for(reader.readuntil(b'\r\n\r\n'), timeout)
        lines = raw.decode('latin-1').split('\r\n')
        status = int(lines[0].split()[1])
        hdr = {}
        for ln in lines[1:]:
            if ':' in ln:
                k, v = ln.split(':', 1)
                hdr[k.strip().lower()] = v.strip()
        chunked = 'chunked' in hdr.get('transfer-encoding', '').lower()

        async def pieces():
            """The body as it arrives, de-chunked."""
            if chunked:
                while True:
                    size = int((await asyncio.wait_for(reader.readline(), timeout)).split(b';')[0], 16)
                    if size == 0:
                        return
                    data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
                    yield data[:-2]
            else:
                while True:
                    data = await asyncio.wait_for(reader.read(65536), timeout)
                    if not data:
                        return
                    yield data

        if status != 200:
            body = b''
            async for data in pieces():
                body += data
                if len(body) > 4096:
                    break
            try:
                msg = json.loads(body).get('error', {}).get('message', '')
            except (ValueError, AttributeError):
                msg = body[:200].decode('utf-8', 'replace')
            rec['error'] = f'HTTP {status}: {msg}'
            return rec
        sse = SSE()
        last = None
        done = False
        async for data in pieces():
            now = time.monotonic()
            for ev in sse.feed(data):
                if ev == b'[DONE]':
                    done = True
                    continue
                o = json.loads(ev)
                if o.get('error'):
                    rec['error'] = 'stream error: ' + str(o['error'].get('message', o['error']))
                    continue
                if o.get('usage'):
                    rec['prompt_tokens'] = o['usage'].get('prompt_tokens')
                    rec['completion_tokens'] = o['usage'].get('completion_tokens', 0)
                for c in o.get('choices') or ():
                    lp = c.get('logprobs')
                    k = len(lp.get('token_logprobs') or ()) if lp else 0
                    if not c.get('text') and k == 0:
                        continue
                    rec['chunks'] += 1
                    rec['chunk_tokens'] += k
                    rec['max_chunk_tokens'] = max(rec['max_chunk_tokens'], k)
                    if last is None:
                        rec['ttft'] = now - t_send
                    else:
                        rec['itl'].append(now - last)
                    last = now
        rec['e2e'] = time.monotonic() - t_send
        if rec['error'] is None:
            if not done:
                rec['error'] = 'stream ended without [DONE]'
            elif rec['prompt_tokens'] is None:
                rec['error'] = 'no usage chunk'
            elif rec['ttft'] is None:
                rec['error'] = 'no content chunk'
            else:
                rec['ok'] = True
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
        rec['error'] = f'{type(e).__name__}: {e}' if str(e) else type(e).__name__
    finally:
        rec['end'] = time.monotonic()
        if writer is not None:
            writer.close()
    return rec


async def run_share(host, port, path, headers, items, cap, t0, timeout):
    """One worker's share: each request waits for its arrival time, then for
    a slot (at most cap in flight; 0: no cap), then streams."""
    slots = asyncio.Semaphore(cap) if cap else None

    async def one(item):
        delay = t0 + item['at'] - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        arrived = time.monotonic()
        if slots:
            async with slots:
                rec = await stream_request(host, port, path, headers, item, timeout)
        else:
            rec = await stream_request(host, port, path, headers, item, timeout)
        rec['late'] = arrived - (t0 + item['at'])     # the client's own lag
        rec['queued'] = rec['send'] - arrived          # waiting for a slot
        return rec

    return await asyncio.gather(*(one(it) for it in items))


def worker_main(host, port, path, headers, items, cap, timeout, conn):
    """A client process: says it is ready, takes the common start time (the
    system-wide monotonic clock), runs its share and sends the records."""
    conn.send('ready')
    t0 = conn.recv()
    cpu0 = time.process_time()
    recs = asyncio.run(run_share(host, port, path, headers, items, cap, t0, timeout))
    conn.send({'records': recs, 'cpu_s': time.process_time() - cpu0})
    conn.close()

# ---- the server ----------------------------------------------------------------------


class Server:
    """`PATH [engine options] serve --port 0`, ready once it says where it
    listens; stderr is kept (its tail is shown when it fails)."""

    def __init__(self, launch, engine_args, timeout):
        try:
            self.proc = subprocess.Popen([launch, *engine_args, 'serve', '--port', '0'],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE)
        except OSError as e:
            raise SystemExit(f'load_test: cannot start {launch}: {e.strerror}')
        self.log = []
        ready = threading.Event()
        self.url = None

        def drain():
            for raw in self.proc.stderr:
                line = raw.decode('utf-8', 'replace')
                self.log.append(line)
                if len(self.log) > 200:
                    del self.log[:100]
                if self.url is None and 'listening on http://' in line:
                    self.url = line.split('listening on ', 1)[1].split()[0]
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(timeout) or self.url is None:
            self.stop()
            raise SystemExit('load_test: the server did not start listening:\n' + ''.join(self.log[-20:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

# ---- statistics ----------------------------------------------------------------------


def percentile(sorted_xs, p):
    """Linear interpolation between the closest ranks (numpy's default)."""
    if not sorted_xs:
        return None
    k = (len(sorted_xs) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


def dist(xs):
    xs = sorted(xs)
    if not xs:
        return {'n': 0, 'mean': None, 'p50': None, 'p90': None, 'p99': None, 'max': None}
    return {'n': len(xs), 'mean': sum(xs) / len(xs), 'p50': percentile(xs, 50),
            'p90': percentile(xs, 90), 'p99': percentile(xs, 99), 'max': xs[-1]}


def summarize(recs, cpu_s, args):
    ok = [r for r in recs if r['ok']]
    bad = [r for r in recs if not r['ok']]
    first_send = min(r['send'] for r in recs)
    last_end = max(r['end'] for r in recs)
    wall = last_end - first_send
    out_tokens = sum(r['completion_tokens'] for r in ok)
    tpot = [(r['e2e'] - r['ttft']) / (r['completion_tokens'] - 1) for r in ok if r['completion_tokens'] > 1]
    itl = [g for r in ok for g in r['itl']]
    chunks = sum(r['chunks'] for r in ok)
    errors = {}
    for r in bad:
        errors[r['error']] = errors.get(r['error'], 0) + 1
    s = {
        'requests': len(recs), 'completed': len(ok), 'failed': len(bad),
        'errors': [{'error': e, 'count': n} for e, n in sorted(errors.items(), key=lambda x: -x[1])],
        'wall_s': wall,
        'prompt_tokens': sum(r['prompt_tokens'] or 0 for r in ok),
        'completion_tokens': out_tokens,
        'output_tokens_per_s': out_tokens / wall if wall > 0 else None,
        'requests_per_s': len(ok) / wall if wall > 0 else None,
        'ttft_s': dist([r['ttft'] for r in ok]),
        'itl_s': dist(itl),
        'tpot_s': dist(tpot),
        'e2e_s': dist([r['e2e'] for r in ok]),
        'content_chunks': chunks,
        'tokens_per_chunk': out_tokens / chunks if chunks else None,
        'client': {'processes': len(cpu_s), 'cpu_s': cpu_s,
                   'busiest_cpu_share': max(cpu_s) / wall if wall > 0 else None,
                   'arrival_lag_s': dist([r['late'] for r in recs]),
                   'slot_wait_s': dist([r['queued'] for r in recs])},
    }
    if args.logprobs:
        s['max_tokens_per_chunk'] = max((r['max_chunk_tokens'] for r in ok), default=0)
        s['chunk_token_mismatches'] = sum(1 for r in ok if r['chunk_tokens'] != r['completion_tokens'])
    return s


def ms(x):
    return '-' if x is None else f'{x * 1000:.1f}'


def print_summary(s, args, url):
    mode = []
    if args.rate:
        mode.append(f'Poisson {args.rate:g} req/s (seed {args.seed})')
    if args.concurrency:
        mode.append(f'at most {args.concurrency} in flight')
    print(f'load test: {url}, {s["requests"]} requests, ' + (', '.join(mode) or 'all at once'))
    print(f'  completed {s["completed"]}, failed {s["failed"]}, wall {s["wall_s"]:.2f} s')
    for e in s['errors'][:5]:
        print(f'  error x{e["count"]}: {e["error"]}')
    if s['output_tokens_per_s'] is not None:
        print(f'  output {s["completion_tokens"]} tokens: {s["output_tokens_per_s"]:.1f} tok/s; '
              f'{s["requests_per_s"]:.2f} req/s; prompt tokens {s["prompt_tokens"]}')
    print(f'  {"ms":<6}{"mean":>10}{"p50":>10}{"p90":>10}{"p99":>10}{"max":>10}')
    for name, key in (('TTFT', 'ttft_s'), ('ITL', 'itl_s'), ('TPOT', 'tpot_s'), ('E2E', 'e2e_s')):
        d = s[key]
        print(f'  {name:<6}{ms(d["mean"]):>10}{ms(d["p50"]):>10}{ms(d["p90"]):>10}{ms(d["p99"]):>10}'
              f'{ms(d["max"]):>10}')
    if s['tokens_per_chunk'] is not None:
        line = f'  {s["content_chunks"]} content chunks, {s["tokens_per_chunk"]:.2f} tokens per chunk'
        if 'max_tokens_per_chunk' in s:
            line += f' (at most {s["max_tokens_per_chunk"]} in one)'
        print(line)
    c = s['client']
    print(f'  client: {c["processes"]} process(es), busiest at {100 * (c["busiest_cpu_share"] or 0):.0f}% '
          f'of a core; arrival lag p99 {ms(c["arrival_lag_s"]["p99"])} ms, '
          f'slot wait mean {ms(c["slot_wait_s"]["mean"])} ms')
    if (c['busiest_cpu_share'] or 0) > 0.8:
        print('  warning: a client process was busy over 80% of the time: raise --processes')

# ---- main --------------------------------------------------------------------------


def parse_args(argv):
    engine = []
    if '--' in argv:
        k = argv.index('--')
        argv, engine = argv[:k], argv[k + 1:]
    ap = argparse.ArgumentParser(
        description='Load generator for nanollm-launch serve (streaming /v1/completions).',
        epilog='Engine options for --launch go after "--".')
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument('--url', help='a running server, e.g. http://127.0.0.1:8000')
    where.add_argument('--launch', metavar='PATH', help='start PATH [engine options] serve --port 0')
    ap.add_argument('--workload', required=True, help='JSONL of {"prompt_token_ids", "max_tokens", ...}')
    ap.add_argument('--num-requests', type=int, default=0, help='requests to send (default: the '
                    'workload\'s lines; more cycle through them)')
    ap.add_argument('--rate', type=float, default=0.0, help='Poisson arrivals, requests/s (default: all '
                    'at once)')
    ap.add_argument('--concurrency', type=int, default=0, help='at most this many streams in flight')
    ap.add_argument('--seed', type=int, default=0, help='seed of the arrival times (default 0)')
    ap.add_argument('--max-tokens-cap', type=int, default=0, help='lower each max_tokens to at most this')
    ap.add_argument('--temperature', type=float, default=None, help='override the workload\'s temperature '
                    '(default: the line\'s, else 0)')
    ap.add_argument('--logprobs', action='store_true', help='ask for logprobs 0 to count each chunk\'s '
                    'tokens (costs the server a little)')
    ap.add_argument('--api-key', default=os.environ.get('NANOLLM_API_KEY'), help='bearer token')
    ap.add_argument('--processes', type=int, default=0, help='client worker processes (default: one per '
                    '64 streams in flight, at most the cores)')
    ap.add_argument('--timeout', type=float, default=600.0, help='seconds without progress before a '
                    'request fails (default 600)')
    ap.add_argument('--launch-timeout', type=float, default=900.0, help='seconds --launch may take to '
                    'listen (default 900)')
    ap.add_argument('--warmup', type=int, default=1, help='untimed requests sent one by one first (a '
                    '32-token prompt no workload line starts with, 8 tokens; default 1)')
    ap.add_argument('--json-out', help='write the summary as JSON here')
    args = ap.parse_args(argv)
    args.engine = engine
    if engine and not args.launch:
        ap.error('engine options after "--" need --launch')
    for name in ('num_requests', 'concurrency', 'max_tokens_cap', 'processes', 'warmup'):
        if getattr(args, name) < 0:
            ap.error(f'--{name.replace("_", "-")}: must be >= 0')
    if args.rate < 0 or not math.isfinite(args.rate):
        ap.error('--rate: must be a finite number >= 0')
    return args


def get_json(host, port, path, headers):
    import http.client
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        hdr = {}
        if headers:
            hdr['Authorization'] = headers.split(':', 1)[1].strip()
        c.request('GET', path, headers=hdr)
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise SystemExit(f'load_test: GET http://{host}:{port}{path}: HTTP {r.status}: {body[:200]!r}')
        return json.loads(body)
    except (OSError, ValueError) as e:
        raise SystemExit(f'load_test: GET http://{host}:{port}{path}: {e}')
    finally:
        c.close()


def main(argv):
    args = parse_args(argv)
    workload = read_workload(args.workload)
    server = Server(args.launch, args.engine, args.launch_timeout) if args.launch else None
    try:
        url = server.url if server else args.url
        u = urllib.parse.urlsplit(url if '://' in url else 'http://' + url)
        host, port = u.hostname or '127.0.0.1', u.port or 80
        headers = f'Authorization: Bearer {args.api_key}\r\n' if args.api_key else ''
        models = get_json(host, port, '/v1/models', headers)
        args.model_name = models['data'][0]['id'] if models.get('data') else None
        items = plan(args, workload)
        warm = {'index': -1, 'at': 0.0, 'prompt_len': 32, 'body': json.dumps(
            {'prompt': list(range(1, 33)), 'max_tokens': 8, 'temperature': 0, 'ignore_eos': True,
             'stream': True, 'stream_options': {'include_usage': True},
             **({'model': args.model_name} if args.model_name else {})}).encode()}
        for _ in range(args.warmup):
            r = asyncio.run(stream_request(host, port, '/v1/completions', headers, warm, args.timeout))
            if not r['ok']:
                raise SystemExit(f'load_test: the warm-up request failed: {r["error"]}')
        inflight = args.concurrency or len(items)
        procs = args.processes or max(1, min(os.cpu_count() or 1, math.ceil(min(inflight, len(items)) / 64)))
        procs = min(procs, len(items))
        if args.concurrency:
            procs = min(procs, args.concurrency)
        # spawn, not fork: this process may hold the server's stderr thread.
        ctx = multiprocessing.get_context('spawn')
        workers = []
        for p in range(procs):
            share = items[p::procs]
            cap = args.concurrency // procs + (1 if p < args.concurrency % procs else 0) if args.concurrency else 0
            mine, theirs = ctx.Pipe()
            w = ctx.Process(target=worker_main,
                            args=(host, port, '/v1/completions', headers, share, cap, args.timeout, theirs))
            w.start()
            theirs.close()
            workers.append((w, mine))
        recs, cpu = [], []
        try:
            for w, conn in workers:
                conn.recv()
            t0 = time.monotonic() + 0.05
            for w, conn in workers:
                conn.send(t0)
            for w, conn in workers:
                got = conn.recv()
                recs.extend(got['records'])
                cpu.append(got['cpu_s'])
                w.join()
        except EOFError:
            raise SystemExit('load_test: a client worker process died')
        recs.sort(key=lambda r: r['index'])
        s = summarize(recs, cpu, args)
        print_summary(s, args, url)
        if args.json_out:
            doc = {'date': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'url': url,
                   'model': args.model_name, 'workload': args.workload,
                   'options': {'num_requests': len(items), 'rate': args.rate or None,
                               'concurrency': args.concurrency or None, 'seed': args.seed,
                               'max_tokens_cap': args.max_tokens_cap or None,
                               'temperature': args.temperature, 'logprobs': args.logprobs,
                               'launch': args.launch, 'engine_args': args.engine},
                   'summary': s,
                   'requests': [{k: r[k] for k in ('index', 'ok', 'error', 'prompt_tokens',
                                                   'completion_tokens', 'ttft', 'e2e', 'chunks')}
                                for r in recs]}
            with open(args.json_out, 'w', encoding='utf-8') as f:
                json.dump(doc, f, indent=1)
                f.write('\n')
        return 0 if s['failed'] == 0 else 1
    finally:
        if server:
            server.stop()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
