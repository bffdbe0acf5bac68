// bench/headers.mjs — what a header rule costs (issue 18), each figure a ratio to a baseline of the
// same run. Run by bench/headers.sh (root: the stand-in world of spec/support/networld.py and a
// sandboxd of its own, which verifies the world's HTTPS with --egress-ca).
//
//   get       HTTPS GET of 1 KiB on a kept-alive connection (after its first request), median of
//             200: inside a sandbox whose rule sets a header (the proxy terminates TLS, fills the
//             header, forwards on its own connection) vs inside one without rules (the enforced
//             path relays TLS as it is) vs on the host. Goal: ≤ 1.3× the plain enforced path.
//   first     the same request on a new connection each time (handshake included), both ways.
//   download  100 MB over HTTPS: through the injecting proxy vs the plain enforced path and vs the
//             host; ratio of throughputs (goal ≥ 0.6×).
// Prints the figures, then `RESULT {json}`.
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
process.env.MB_E2B_SDK ??= 'e2b'
const { Sandbox, startSandboxd, stopSandboxd, startNetworld } = await import(path.join(HERE, '../spec/sdk/helpers.mjs'))
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5)
const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }
const f2 = (x) => (typeof x === 'number' ? x.toFixed(2) : '?')

/* argv: host, CA file ('' = the system's), n, resolve-to address ('' = DNS). Prints "kept MS" and
 * "first MS" (medians, milliseconds). */
const TIMING = String.raw`
import http.client, socket, ssl, sys, time
host, cafile, n, addr = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ctx = ssl.create_default_context(cafile=cafile or None)
class Conn(http.client.HTTPSConnection):
    def connect(self):   # to addr when given, the name still in SNI and Host
        s = socket.create_connection((addr or host, 443))
        self.sock = ctx.wrap_socket(s, server_hostname=host)
def get(c):
    c.request('GET', '/bytes/1024'); r = c.getresponse(); b = r.read(); assert len(b) == 1024, len(b)
c = Conn(host, context=ctx); get(c)
xs = []
for _ in range(n):
    t = time.perf_counter(); get(c); xs.append(time.perf_counter() - t)
c.close()
ys = []
for _ in range(n // 4):
    t = time.perf_counter(); c = Conn(host, context=ctx); get(c); c.close(); ys.append(time.perf_counter() - t)
print('kept', sorted(xs)[n // 2] * 1000); print('first', sorted(ys)[len(ys) // 2] * 1000)
`
const parse = (out) => Object.fromEntries(out.trim().split('\n').map((l) => l.split(' ')).map(([k, v]) => [k, Number(v)]))

const world = await startNetworld()
if (world.why) { console.error(`headers bench: ${world.why}`); process.exit(2) }
const result = {}
let srv
try {
  srv = await startSandboxd({ args: ['--dns', world.dns, '--egress-ca', world.ca] })
  const api = (method, p, body) => fetch(`${srv.url}${p}`, { method, headers: { 'X-API-Key': srv.key, 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
  await api('POST', '/secrets', { name: 'bench-token', value: 'x'.repeat(40) })
  const net = { allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] }
  const rules = { 'allowed.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.bench-token}' } } }] }
  const injecting = await Sandbox.create('base', { ...srv.opts, timeoutMs: 600_000, network: { ...net, rules } })
  const plain = await Sandbox.create('base', { ...srv.opts, timeoutMs: 600_000, network: net })
  const ca = readFileSync(world.ca, 'utf8')
  for (const s of [injecting, plain]) {
    await s.files.write('/tmp/timing.py', TIMING)
    await s.files.write('/tmp/world-ca.pem', ca)
  }
  const n = 200
  const t = { injecting: [], plain: [], host: [] }
  for (let i = 0; i < ROUNDS; i++) {
    t.injecting.push(parse((await injecting.commands.run(`python3 /tmp/timing.py allowed.test '' ${n} ''`, { timeoutMs: 120_000 })).stdout))
    t.plain.push(parse((await plain.commands.run(`python3 /tmp/timing.py allowed.test /tmp/world-ca.pem ${n} ''`, { timeoutMs: 120_000 })).stdout))
    t.host.push(parse(execFileSync('python3', ['-c', TIMING, 'allowed.test', world.ca, String(n), world.public], { encoding: 'utf8' })))
  }
  for (const k of ['kept', 'first']) {
    const [a, b, h] = ['injecting', 'plain', 'host'].map((w) => median(t[w].map((x) => x[k])))
    result[k] = { injecting_ms: a, plain_ms: b, host_ms: h, vs_plain: a / b, vs_host: a / h }
    console.log(`get      ${k === 'kept' ? 'HTTPS GET 1 KiB, kept-alive' : 'HTTPS GET 1 KiB, new connection'}: injecting ${f2(a)} ms, ` +
      `plain enforced ${f2(b)} ms, host ${f2(h)} ms: ${f2(a / b)}× plain${k === 'kept' ? ' (goal ≤ 1.3×)' : ''}, ${f2(a / h)}× host`)
  }
  const MB100 = 100 * 1024 * 1024
  const curl = (ca, resolve = '') => `curl -s ${ca ? `--cacert ${ca}` : ''} ${resolve} -o /dev/null -w '%{time_total} %{size_download}' https://allowed.test/bytes/${MB100}`
  const dl = { injecting: [], plain: [], host: [] }
  const rate = (out) => {
    const [tt, size] = out.trim().split(' ').map(Number)
    if (size !== MB100) throw new Error(`short download: ${size}`)
    return MB100 / tt / 1e6
  }
  for (let i = 0; i < ROUNDS; i++) {
    dl.injecting.push(rate((await injecting.commands.run(curl(''), { timeoutMs: 180_000 })).stdout))
    dl.plain.push(rate((await plain.commands.run(curl('/tmp/world-ca.pem'), { timeoutMs: 180_000 })).stdout))
    dl.host.push(rate(execFileSync('sh', ['-c', curl(world.ca, `--resolve allowed.test:443:${world.public}`)], { encoding: 'utf8' })))
  }
  const [a, b, h] = ['injecting', 'plain', 'host'].map((w) => median(dl[w]))
  result.download = { injecting_mb_s: a, plain_mb_s: b, host_mb_s: h, vs_plain: a / b, vs_host: a / h }
  console.log(`download 100 MB HTTPS: injecting ${f2(a)} MB/s, plain enforced ${f2(b)} MB/s, host ${f2(h)} MB/s: ` +
    `${f2(a / b)}× plain (goal ≥ 0.6×), ${f2(a / h)}× host`)
  await injecting.kill()
  await plain.kill()
} finally {
  await stopSandboxd(srv)
  await world.stop()
}
console.log('RESULT ' + JSON.stringify(result))
