// sandboxd_create — create→ready latency of sandboxd, as a ratio to the floor (new namespaces +
// id maps + overlay mount + exec of `true`, bench/sandboxd_floor.c) measured in the same run.
// Goal (issue 3): median ≤ 2× the floor.
//
// Samples are taken in turn (floor, raw, sdk, floor, ...), so that machine noise hits every
// series alike; the ratio is median(raw) / median(floor) (the median of per-pair ratios too):
//   floor  one timed iteration of sandboxd_floor     (kernel work only; its "exit" figure:
//          until `true` has run and been reaped, as the raw series ends with /bin/true's exit)
//   raw    POST /sandboxes → first successful `/bin/true` over envd's process.Process/Start
//          (Connect JSON, HTTP keep-alive), the headline figure; then DELETE (not timed)
//   sdk    Sandbox.create('base') → commands.run('true') exits 0, through the unmodified
//          e2b SDK (its `run` is `bash -l -c`, so a login shell is included); then kill
// With SANDBOXD_LOG (sandboxd started with SANDBOXD_TRACE_CREATE=1) it also reports the median
// time sandboxd spent in sbx_create for the sandboxes of the raw series, and its phases.
//
// Environment: E2B_API_URL, E2B_API_KEY (required); SANDBOXD_FLOOR (floor binary, required);
// SANDBOXD_STATE_DIR (where the floor puts its layers: same file system as sandboxd's state);
// SANDBOXD_LOG; BENCH_N (samples per series, default 30).
// Prints a human summary, then one line `RESULT {json}`.
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { Sandbox } = await import(pathToFileURL(path.join(ROOT, 'spec/sdk/node_modules/e2b/dist/index.mjs')).href)

const API = (process.env.E2B_API_URL || '').replace(/\/$/, '')
const KEY = process.env.E2B_API_KEY
const FLOOR = process.env.SANDBOXD_FLOOR
if (!API || !KEY || !FLOOR) {
  console.error('sandboxd_create: set E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and SANDBOXD_FLOOR (bench/sandboxd.sh does)')
  process.exit(2)
}
const N = Math.max(3, Number(process.env.BENCH_N || 30))

const median = (a) => {
  const s = [...a].sort((x, y) => x - y)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}
const f2 = (x) => x.toFixed(2)

// One timed floor iteration (the binary does an untimed warm-up iteration first).
function floorOnce() {
  const args = ['-n', '1']
  if (process.env.SANDBOXD_STATE_DIR) args.push('-d', process.env.SANDBOXD_STATE_DIR)
  const out = execFileSync(FLOOR, args, { encoding: 'utf8' })
  return JSON.parse(out.trim().split('\n').pop())
}

// One Connect server-stream call; resolves with the exit code from the `end` event.
function envelope(obj) {
  const body = Buffer.from(JSON.stringify(obj))
  const head = Buffer.alloc(5)
  head.writeUInt32BE(body.length, 1)
  return Buffer.concat([head, body])
}

async function runTrue(id, token) {
  const headers = {
    'E2b-Sandbox-Id': id,
    'Content-Type': 'application/connect+json',
    'Connect-Protocol-Version': '1',
  }
  if (token) headers['X-Access-Token'] = token
  const res = await fetch(`${API}/process.Process/Start`, {
    method: 'POST',
    headers,
    body: envelope({ process: { cmd: '/bin/true', args: [] } }),
  })
  const buf = Buffer.from(await res.arrayBuffer())
  if (res.status !== 200) throw new Error(`Start: HTTP ${res.status}: ${buf.toString()}`)
  let exit = null
  for (let off = 0; off + 5 <= buf.length; ) {
    const flags = buf[off]
    const len = buf.readUInt32BE(off + 1)
    const msg = JSON.parse(buf.subarray(off + 5, off + 5 + len).toString() || '{}')
    off += 5 + len
    if (flags & 2) {
      if (msg.error) throw new Error(`Start: ${JSON.stringify(msg.error)}`)
      continue
    }
    const end = msg.event?.end
    if (end) exit = end.exitCode ?? 0
  }
  if (exit === null) throw new Error('Start: stream ended without an end event')
  return exit
}

async function rawOnce() {
  const t0 = performance.now()
  const res = await fetch(`${API}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-Key': KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 300 }),
  })
  const j = await res.json()
  if (res.status !== 201 && res.status !== 200) throw new Error(`POST /sandboxes: ${res.status} ${JSON.stringify(j)}`)
  const tCreated = performance.now()
  const code = await runTrue(j.sandboxID, j.envdAccessToken)
  const t1 = performance.now()
  if (code !== 0) throw new Error(`true exited ${code}`)
  const del = await fetch(`${API}/sandboxes/${j.sandboxID}`, { method: 'DELETE', headers: { 'X-API-Key': KEY } })
  await del.arrayBuffer()
  if (del.status !== 204) throw new Error(`DELETE: ${del.status}`)
  return { id: j.sandboxID, total: t1 - t0, post: tCreated - t0, cmd: t1 - tCreated }
}

async function sdkOnce() {
  const t0 = performance.now()
  const s = await Sandbox.create('base', { timeoutMs: 300_000 })
  const r = await s.commands.run('true')
  const t1 = performance.now()
  await s.kill()
  if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  return t1 - t0
}

// Warm-up: template, connection pool, SDK module, page cache.
await rawOnce()
await sdkOnce()
floorOnce()

// Samples are paired: one floor iteration, one raw create, one SDK create, again and again, so
// that a burst of load elsewhere on the machine hits the baseline and sandboxd alike.
const floor = [], floorExec = [], raw = [], post = [], cmd = [], sdk = [], ids = new Set()
for (let i = 0; i < N; i++) {
  const fl = floorOnce()
  floor.push(fl.exit.median_ms)
  floorExec.push(fl.exec.median_ms)
  const x = await rawOnce()
  raw.push(x.total); post.push(x.post); cmd.push(x.cmd); ids.add(x.id)
  sdk.push(await sdkOnce())
}
const pairRatio = raw.map((x, i) => x / floor[i])

const res = {
  n: raw.length,
  floor_ms: median(floor),
  floor_min_ms: Math.min(...floor),
  floor_exec_ms: median(floorExec),
  raw_ms: median(raw),
  raw_min_ms: Math.min(...raw),
  raw_post_ms: median(post),
  raw_first_cmd_ms: median(cmd),
  sdk_ms: median(sdk),
  median_pair_ratio: median(pairRatio),
}
res.ratio_raw = res.raw_ms / res.floor_ms
res.ratio_sdk = res.sdk_ms / res.floor_ms

if (process.env.SANDBOXD_LOG) {
  const inner = [], phases = {}
  for (const line of readFileSync(process.env.SANDBOXD_LOG, 'utf8').split('\n')) {
    const m = /sandbox (\w+) ready in ([\d.]+) ms \(init: (.*)\)/.exec(line)
    if (!m || !ids.has(m[1])) continue
    inner.push(Number(m[2]))
    for (const p of m[3].split(', ')) {
      const q = /^(.*) (\d+)us$/.exec(p)
      if (q) (phases[q[1]] ||= []).push(Number(q[2]) / 1000)
    }
  }
  if (inner.length) {
    res.sbx_create_ms = median(inner)
    res.sbx_create_min_ms = Math.min(...inner)
    res.ratio_sbx_create = res.sbx_create_ms / res.floor_ms
    res.init_phases_ms = Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, Number(f2(median(v)))]))
  }
}

console.log(`create→ready, median of ${res.n} paired samples (min in brackets)`)
console.log(`  floor (ns+maps+overlay+true, reaped) ${f2(res.floor_ms)} ms (${f2(res.floor_min_ms)}); until exec'd ${f2(res.floor_exec_ms)} ms`)
console.log(`  raw HTTP POST→first command         ${f2(res.raw_ms)} ms (${f2(res.raw_min_ms)})   ratio ${f2(res.ratio_raw)}× (goal ≤ 2×); median of pair ratios ${f2(res.median_pair_ratio)}×`)
console.log(`    of which POST /sandboxes          ${f2(res.raw_post_ms)} ms, first /bin/true ${f2(res.raw_first_cmd_ms)} ms`)
if (res.sbx_create_ms !== undefined) {
  console.log(`    of which sbx_create (server log)  ${f2(res.sbx_create_ms)} ms   ratio ${f2(res.ratio_sbx_create)}×`)
  console.log(`    init phases (median ms)           ${JSON.stringify(res.init_phases_ms)}`)
}
console.log(`  SDK create→run('true') (bash -l)    ${f2(res.sdk_ms)} ms   ratio ${f2(res.ratio_sdk)}×`)
for (const k of Object.keys(res)) if (typeof res[k] === 'number') res[k] = Number(res[k].toFixed(3))
console.log('RESULT ' + JSON.stringify(res))
