// bench/network.mjs — what a sandbox's network costs and how fast its enforced path is (issue 17),
// each figure a ratio to a baseline measured in the same run. Run by bench/network.sh (root: it
// makes the stand-in world of spec/support/networld.py and its own sandboxd).
//
//   memory    Pss of every process that serves sandboxes' networking (sandboxd: its gateway and
//             egress proxy are part of it; no process per sandbox) for 1, 10 and 50 sandboxes with
//             internet access, as growth over sandboxd idle, per sandbox; the kernel's slab growth
//             per sandbox (all of a sandbox's namespaces, not only its veth pair) beside it; and,
//             for comparison, the Pss of one pasta (the per-sandbox network process sandboxd used
//             before, still the rootless one) started on a scratch namespace the same way.
//   create    cold create→first command (no warm pool, no stocked link) with internet access vs
//             without, and the link's own step (SANDBOXD_TRACE_CREATE) as a share of the create.
//   download  100 MB over HTTP from the world, curl inside a sandbox (through the gateway and the
//             proxy) vs curl on the host; ratio of throughputs (goal ≥ 0.7).
//   connect   connect + first byte from a server that speaks first, and a small HTTP GET, inside vs
//             on the host: ratio of medians (goal ≤ 1.3).
// Prints the figures, then `RESULT {json}`.
import { execFileSync, spawn } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
process.env.MB_E2B_SDK ??= 'e2b'
const { Sandbox, startSandboxd, stopSandboxd, startNetworld, sh } = await import(path.join(HERE, '../spec/sdk/helpers.mjs'))
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5)
const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }
const f2 = (x) => (typeof x === 'number' ? x.toFixed(2) : '?')
const pss = (pid) => Number(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8').match(/^Pss:\s+(\d+) kB/m)[1]) / 1024
const slab = () => Number(readFileSync('/proc/meminfo', 'utf8').match(/^Slab:\s+(\d+) kB/m)[1]) / 1024
const children = (pid) => {
  const out = []
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue
    try { if (readFileSync(`/proc/${d}/stat`, 'utf8').split(') ')[1].split(' ')[1] === String(pid)) out.push(Number(d)) } catch { /* gone */ }
  }
  return out
}
/* Every process that serves networking: sandboxd, and any network helper it started (pasta). */
const servingPss = (srv) => pss(srv.proc.pid) + children(srv.proc.pid).filter((p) => {
  try { return readFileSync(`/proc/${p}/comm`, 'utf8').startsWith('pasta') } catch { return false }   // pasta.avx2 too
}).reduce((a, p) => a + pss(p), 0)

const world = await startNetworld()
if (world.why) { console.error(`network bench: ${world.why}`); process.exit(2) }
const result = {}
try {
  // ---- memory
  const srv = await startSandboxd({ args: ['--dns', world.dns], env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
  const boxes = []
  const idle = servingPss(srv), slab0 = slab()
  result.memory = []
  for (const n of [1, 10, 50]) {
    while (boxes.length < n) boxes.push(await Sandbox.create('base', { ...srv.opts, timeoutMs: 600_000 }))
    // each used its network once (a connection through the proxy, a DNS lookup)
    await Promise.all(boxes.map((b) => b.commands.run(`getent hosts allowed.test >/dev/null; exec 3<>/dev/tcp/${world.public}/2222; head -1 <&3`)))
    const per = (servingPss(srv) - idle) / n
    result.memory.push({ sandboxes: n, pss_per_sandbox_mb: per, slab_per_sandbox_mb: (slab() - slab0) / n })
    console.log(`memory   ${n} sandboxes: serving processes' Pss +${f2(per)} MiB per sandbox (goal ≤ 4 MiB); kernel slab +${f2((slab() - slab0) / n)} MiB per sandbox (all its namespaces)`)
  }
  await Promise.all(boxes.map((b) => b.kill()))
  await stopSandboxd(srv)
  // one pasta, as the previous design started it for every sandbox with internet access
  const ns = `mbbench${process.pid}`
  execFileSync('ip', ['netns', 'add', ns])
  try {
    const pasta = spawn('pasta', ['--quiet', '--foreground', '--runas', '0:0', '--config-net', '-t', 'none', '-u', 'none', '-T', 'none', '-U', 'none',
      '--no-map-gw', '--netns', `/run/netns/${ns}`, '--no-netns-quit'], { stdio: 'ignore' })
    await new Promise((ok) => setTimeout(ok, 1500))
    result.pasta_pss_mb = pss(pasta.pid)
    pasta.kill('SIGKILL')
    console.log(`memory   one pasta (the per-sandbox process before; rootless still): Pss ${f2(result.pasta_pss_mb)} MiB`)
  } catch (e) {
    console.log(`memory   pasta not measured: ${e.message}`)
  } finally {
    execFileSync('ip', ['netns', 'del', ns])
  }

  // ---- cold create with internet vs without, and the link's share
  const cold = await startSandboxd({ args: ['--dns', world.dns], env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0', SANDBOXD_TRACE_CREATE: '1' } })
  const series = { true: [], false: [] }
  for (let i = 0; i < ROUNDS * 4; i++) {
    for (const internet of [true, false]) {
      const t0 = performance.now()
      const s = await Sandbox.create('base', { ...cold.opts, timeoutMs: 60_000, allowInternetAccess: internet })
      await s.commands.run('true')
      series[internet].push(performance.now() - t0)
      await s.kill()
    }
  }
  const steps = [...cold.log().matchAll(/ready in ([\d.]+) ms \(cold: (.*)\)$/gm)].map((m) => {
    const link = m[2].match(/network \(link\) ([\d.]+)/)
    return link ? Number(link[1]) / 1000 / Number(m[1]) : null
  }).filter((x) => x !== null)
  await stopSandboxd(cold)
  result.create = { with_ms: median(series.true), without_ms: median(series.false), ratio: median(series.true) / median(series.false),
    link_share: steps.length ? median(steps) : null }
  console.log(`create   cold with internet ${f2(result.create.with_ms)} ms vs without ${f2(result.create.without_ms)} ms: ` +
    `${f2(result.create.ratio)}× (goal ≤ 3×); the link (veth pair, addresses, routes) is ${f2(100 * (result.create.link_share ?? NaN))}% of a cold create`)

  // ---- download and connect, inside vs on the host
  const srv2 = await startSandboxd({ args: ['--dns', world.dns] })
  const s = await Sandbox.create('base', { ...srv2.opts, timeoutMs: 600_000 })
  const MB100 = 100 * 1024 * 1024
  const curl = `curl -s -o /dev/null -w '%{time_total} %{size_download}' http://${world.public}/bytes/${MB100}`
  const dl = { host: [], sandbox: [] }
  for (let i = 0; i < ROUNDS; i++) {
    const [th, nh] = execFileSync('sh', ['-c', curl], { encoding: 'utf8' }).trim().split(' ').map(Number)
    const [ts, ns2] = (await s.commands.run(curl, { timeoutMs: 120_000 })).stdout.trim().split(' ').map(Number)
    if (nh !== MB100 || ns2 !== MB100) throw new Error(`short download: host ${nh}, sandbox ${ns2}`)
    dl.host.push(MB100 / th / 1e6)
    dl.sandbox.push(MB100 / ts / 1e6)
  }
  result.download = { host_mb_s: median(dl.host), sandbox_mb_s: median(dl.sandbox), ratio: median(dl.sandbox) / median(dl.host) }
  console.log(`download 100 MB: inside ${f2(result.download.sandbox_mb_s)} MB/s vs host ${f2(result.download.host_mb_s)} MB/s: ${f2(result.download.ratio)}× (goal ≥ 0.7×)`)
  const timing = String.raw`
import socket, sys, time
host, n = sys.argv[1], int(sys.argv[2])
def banner():
    t = time.perf_counter(); c = socket.create_connection((host, 2222)); c.recv(64); d = time.perf_counter() - t; c.close(); return d
def get():
    t = time.perf_counter(); c = socket.create_connection((host, 80)); c.sendall(b'GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n')
    while c.recv(4096): pass
    d = time.perf_counter() - t; c.close(); return d
for f in (banner, get):
    f(); xs = sorted(f() for _ in range(n)); print(f.__name__, xs[n // 2] * 1000)
`
  const n = 200
  const parse = (out) => Object.fromEntries(out.trim().split('\n').map((l) => l.split(' ')).map(([k, v]) => [k, Number(v)]))
  await s.files.write('/tmp/timing.py', timing)
  const conn = { host: [], sandbox: [] }
  for (let i = 0; i < ROUNDS; i++) {
    conn.host.push(parse(execFileSync('python3', ['-c', timing, world.public, String(n)], { encoding: 'utf8' })))
    conn.sandbox.push(parse((await s.commands.run(`python3 /tmp/timing.py ${world.public} ${n}`, { timeoutMs: 120_000 })).stdout))
  }
  result.connect = {}
  for (const k of ['banner', 'get']) {
    const h = median(conn.host.map((x) => x[k])), b = median(conn.sandbox.map((x) => x[k]))
    result.connect[k] = { host_ms: h, sandbox_ms: b, ratio: b / h }
    console.log(`connect  ${k === 'banner' ? 'connect + first byte' : 'HTTP GET'}: inside ${f2(b)} ms vs host ${f2(h)} ms: ${f2(b / h)}× (goal ≤ 1.3×)`)
  }
  await s.kill()
  await stopSandboxd(srv2)
} finally {
  await world.stop()
}
console.log('RESULT ' + JSON.stringify(result))
