// stream_stall.mjs — how long a running stream stalls while the server
// prefills a long prompt (Node.js, no libraries).
//
//   node bench/stream_stall.mjs ./nanollm-launch [engine options...]
//
// Starts `nanollm-launch [engine options] serve --port 0`, streams a
// 150-token greedy completion, and after its 20th chunk sends a 3000-token
// prompt (max_tokens 1) on a second connection.  Prints the stream's
// inter-chunk gaps (median, max, count over 50 ms) and the long request's
// latency.
import { spawn } from 'node:child_process';

const [launch, ...engine] = process.argv.slice(2);
if (!launch) {
  console.error('usage: node bench/stream_stall.mjs NANOLLM_LAUNCH [engine options...]');
  process.exit(2);
}
const proc = spawn(launch, [...engine, 'serve', '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const port = await new Promise((resolve, reject) => {
  proc.stderr.on('data', (d) => {
    log += d;
    const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  proc.on('exit', () => reject(new Error(`serve exited: ${log}`)));
});
const url = `http://127.0.0.1:${port}/v1/completions`;
const post = (body) => fetch(url, { method: 'POST', body: JSON.stringify(body) });

const times = [];
let longStart = 0;
let longDone = null;
const reader = (await post({ prompt: 'Count:', max_tokens: 150, ignore_eos: true, temperature: 0, stream: true }))
  .body.getReader();
const decoder = new TextDecoder();
for (;;) {
  const { value, done } = await reader.read();
  if (done) break;
  const now = performance.now();
  for (let k = decoder.decode(value, { stream: true }).split('data: ').length - 1; k > 0; k--) times.push(now);
  if (times.length >= 20 && !longStart) {
    longStart = performance.now();
    longDone = post({ prompt: 'word '.repeat(3000), max_tokens: 1 }).then(async (r) => {
      const j = await r.json();
      return { ms: performance.now() - longStart, prompt_tokens: j.usage?.prompt_tokens };
    });
  }
}
const long = await longDone;
const gaps = times.slice(1).map((t, i) => t - times[i]).sort((a, b) => a - b);
const over = gaps.filter((g) => g > 50);
console.log(`stream: ${times.length} chunks, median gap ${gaps[gaps.length >> 1].toFixed(1)} ms, ` +
  `max gap ${gaps[gaps.length - 1].toFixed(0)} ms, ${over.length} gaps over 50 ms`);
console.log(`long prompt: ${long.prompt_tokens} tokens, answered in ${long.ms.toFixed(0)} ms`);
proc.kill('SIGTERM');
