// sandboxd_create — create→ready latency of sandboxd, as a ratio to the floor (new namespaces +
// id maps + overlay mount + exec of `true`, bench/sandboxd_floor.c) measured in the same run.
// Goals (issue 19): cold ≤ 2× the floor, pooled ≤ 1.5×.
//
// Three sandboxd configurations are measured, and all are reported:
//   cold    a second sandboxd started here with SANDBOXD_WARM_POOL=0: every create boots a
//           sandbox (layers, cgroups, namespaces, overlays, init) while the client waits; its
//           network pair (user+net namespaces linked: a veth into the gateway as root, pasta
//           rootless; SANDBOXD_NET_POOL=1) is stocked
//           ahead, and the bench waits (untimed) for the stock to refill between samples
//   coldnet a third with SANDBOXD_WARM_POOL=0 SANDBOXD_NET_POOL=0: the create makes the link too
//           (internet access is the SDK's default) — a burst beyond the stock
//   pooled  the sandboxd under test (E2B_API_URL) with its warm pool (default 1 spare per
//           internet flag): a create claims a spare booted ahead of need and renames it
// Samples are taken in turn (floor, cold, pooled, sdk, floor, ...), so that machine noise hits
// every series alike; each ratio is median(series) / median(floor):
//   floor   one timed iteration of sandboxd_floor     (kernel work only; its "exit" figure:
//           until `true` has run and been reaped, as the raw series ends with /bin/true's exit)
//   cold / coldnet / pooled   POST /sandboxes → first successful `/bin/true` over envd's
//           process.Process/Start (Connect JSON, HTTP keep-alive); then DELETE (not timed)
//   sdk     Sandbox.create('base') → commands.run('true') exits 0 against the pooled sandboxd,
//           through the unmodified e2b SDK (its `run` is `bash -l -c`: a login shell is included)
//   cold·mb / pooled·mb   as cold / pooled, through moonbox's own client (MOONBOX_BIN running
//           bench/sandboxd_create_client.lua: libcurl, binary Connect): what a moonbox harness
//           waits for. Node's fetch costs a few ms per request here, a share of the floor that
//           is the client's, not sandboxd's: both clients are reported.
// After each pooled create the bench waits (untimed) until the pool has booted the replacement
// and made again the network pair that boot took, after each cold one until its pair is made
// again, so refills neither overlap the other series (the floor's) nor leave the next create
// without a spare;
// it reports how many pooled creates actually got a spare. With SANDBOXD_LOG (sandboxd started
// with SANDBOXD_TRACE_CREATE=1; the cold sandboxds always are) it also prints where the time
// goes, cold and pooled: the client's POST and first command, sbx_create and each of its steps
// (sandboxd's and the init's), the first command's steps from its request to the init to its
// end, and what is left of each request (HTTP, JSON, registry, threads, the client itself).
//
// Environment: E2B_API_URL, E2B_API_KEY (required); SANDBOXD_FLOOR (floor binary, required);
// SANDBOXD_PID (its /proc/PID/exe is the binary for the cold sandboxd; or SANDBOXD_BIN); MOONBOX_BIN;
// SANDBOXD_STATE_DIR (where the floor puts its layers, and next to which the cold sandboxd keeps
// its state: same file system as sandboxd's state); SANDBOXD_LOG; BENCH_N (samples per series,
// default 30). Without a binary for the cold sandboxd only the pooled figures are reported.
// Prints a human summary, then one line `RESULT {json}` (raw_* and ratio_raw are the cold
// figures, rawnet_* and ratio_rawnet the coldnet ones; pooled_* and ratio_pooled the pooled ones).
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, openSync, closeSync, readFileSync, readlinkSync, rmSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { KEY_FD_ARGS, passKey } from '../spec/support/sandboxd_key.mjs'

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

async function runTrue(api, id, token) {
  const headers = {
    'E2b-Sandbox-Id': id,
    'Content-Type': 'application/connect+json',
    'Connect-Protocol-Version': '1',
  }
  if (token) headers['X-Access-Token'] = token
  const res = await fetch(`${api}/process.Process/Start`, {
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

async function rawOnce(api) {
  const t0 = performance.now()
  const res = await fetch(`${api}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-Key': KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 300 }),
  })
  const j = await res.json()
  if (res.status !== 201 && res.status !== 200) throw new Error(`POST /sandboxes: ${res.status} ${JSON.stringify(j)}`)
  const tCreated = performance.now()
  const code = await runTrue(api, j.sandboxID, j.envdAccessToken)
  const t1 = performance.now()
  if (code !== 0) throw new Error(`true exited ${code}`)
  const del = await fetch(`${api}/sandboxes/${j.sandboxID}`, { method: 'DELETE', headers: { 'X-API-Key': KEY } })
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
  return { id: s.sandboxId, total: t1 - t0 }
}

// ---- the log of a sandboxd started with SANDBOXD_TRACE_CREATE=1
const TRACE = /sandbox (\w+) ready in ([\d.]+) ms \((warm|cold): (.*)\)/
const HANDLED = /sandbox (\w+) create request handled in ([\d.]+) ms/
const FIRST = /sandbox (\w+) first command ended in ([\d.]+) ms \((.*)\)/
function readLog(file) {
  try {
    return readFileSync(file, 'utf8').split('\n')
  } catch {
    return []
  }
}
const sparesBooted = (file) => readLog(file).filter((l) => / spare \w+ booted in /.test(l)).length
const pairsReady = (file) => readLog(file).filter((l) => / network pair ready in /.test(l)).length
// Until the cold sandboxd has stocked another network pair (untimed, ≤ 3 s).
async function waitPair(file, before) {
  for (let t = 0; t < 3000 && pairsReady(file) <= before; t += 2) await sleep(2)
}
function createKind(file, id) {
  for (const l of readLog(file)) {
    const m = TRACE.exec(l)
    if (m && m[1] === id) return m[3]
  }
  return null
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
// After a pooled create that claimed a spare: wait (untimed, ≤ 3 s) for the replacement, and for
// the network pair its boot took to be made again (0.1 s later), so that neither overlaps the next
// sample (the floor's above all).
async function waitRefill(before) {
  const LOG = process.env.SANDBOXD_LOG
  if (!LOG) return sleep(50)
  for (let t = 0; t < 3000 && sparesBooted(LOG) <= before.spares; t += 2) await sleep(2)
  for (let t = 0; t < 3000 && pairsReady(LOG) <= before.pairs; t += 2) await sleep(2)
}
async function pooled(fn) {
  const LOG = process.env.SANDBOXD_LOG
  const before = LOG ? { spares: sparesBooted(LOG), pairs: pairsReady(LOG) } : null
  const x = await fn()
  const kind = LOG ? createKind(LOG, x.id) : null
  if (kind !== 'cold') await waitRefill(before)
  return { ...x, kind }
}

// ---- the cold sandboxds: same binary, warm pool disabled (and the network stock, for coldnet)
async function startCold(env) {
  let bin = process.env.SANDBOXD_BIN
  if (!bin && process.env.SANDBOXD_PID) {
    try {
      bin = readlinkSync(`/proc/${process.env.SANDBOXD_PID}/exe`)
    } catch {
      bin = null
    }
  }
  if (!bin) return null
  const base = process.env.SANDBOXD_STATE_DIR ? path.dirname(process.env.SANDBOXD_STATE_DIR) : '/tmp'
  const dir = mkdtempSync(path.join(base, 'cold-'))
  const log = path.join(dir, 'sandboxd.log')
  const fd = openSync(log, 'w')
  const proc = spawn(bin, ['--listen', '127.0.0.1:0', ...KEY_FD_ARGS, '--state-dir', path.join(dir, 'state'), '--exit-with-parent'], {
    env: { ...process.env, SANDBOXD_WARM_POOL: '0', SANDBOXD_TRACE_CREATE: '1', ...env },
    stdio: ['ignore', 'pipe', fd, 'pipe'],
  })
  passKey(proc, KEY)
  closeSync(fd)
  const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })))
  const url = await new Promise((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => reject(new Error('cold sandboxd did not start')), 15000)
    proc.stdout.on('data', (d) => {
      out += d
      const m = /sandboxd listening on (http:\S+)/.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve(m[1])
      }
    })
    proc.on('exit', () => reject(new Error(`cold sandboxd exited: ${readFileSync(log, 'utf8')}`)))
  })
  proc.stdout.resume()
  return {
    api: url,
    log,
    async stop() {
      proc.kill('SIGTERM')
      const r = await exited
      rmSync(dir, { recursive: true, force: true })
      if (r.code !== 0) throw new Error(`cold sandboxd exited with ${JSON.stringify(r)}`)
    },
  }
}

// ---- moonbox's own client (bench/sandboxd_create_client.lua, run by MOONBOX_BIN): the product's
// transport (libcurl, the C codecs, the Lua control-plane and envd clients), one process for the
// whole run, asked for one sample per line (the sandboxd's URL) → { id, total, post, cmd }.
function startClient() {
  const bin = process.env.MOONBOX_BIN
  if (!bin) return null
  const proc = spawn(bin, [path.join(ROOT, 'bench/sandboxd_create_client.lua')], {
    env: { ...process.env, E2B_API_KEY: KEY }, stdio: ['pipe', 'pipe', 'inherit'],
  })
  const lines = [], waiting = []
  let buf = '', gone = null
  proc.stdout.on('data', (d) => {
    buf += d
    for (let i; (i = buf.indexOf('\n')) >= 0; ) {
      const l = buf.slice(0, i)
      buf = buf.slice(i + 1)
      if (waiting.length) waiting.shift().resolve(l)
      else lines.push(l)
    }
  })
  proc.on('exit', (code, signal) => {
    gone = new Error(`moonbox client exited (${code ?? signal})`)
    for (const w of waiting.splice(0)) w.reject(gone)
  })
  const next = () => (lines.length ? Promise.resolve(lines.shift()) : gone ? Promise.reject(gone)
    : new Promise((resolve, reject) => waiting.push({ resolve, reject })))
  return {
    async once(api) {
      proc.stdin.write(api + '\n')
      const r = JSON.parse(await next())
      if (r.error) throw new Error(`moonbox client: ${r.error}`)
      return r
    },
    async stop() {
      proc.stdin.end()
      await new Promise((r) => (gone ? r() : proc.on('exit', r)))
    },
  }
}
const mb = startClient()
if (!mb) console.log('(no moonbox binary for the moonbox-client series: set MOONBOX_BIN)')

const cold = await startCold({})
const coldnet = cold ? await startCold({ SANDBOXD_NET_POOL: '0' }) : null
if (!cold) console.log('(no sandboxd binary for the cold series: set SANDBOXD_PID or SANDBOXD_BIN)')
async function coldOnce(once = rawOnce) {
  const before = pairsReady(cold.log)
  const x = await once(cold.api)
  await waitPair(cold.log, before)   // the pair it took is made again (0.1 s later) before the next sample
  return x
}

// Warm-up: template, connection pool, SDK module, page cache.
if (cold) {
  await coldOnce()
  await rawOnce(coldnet.api)
}
if (cold && mb) await coldOnce(mb.once)
await pooled(() => rawOnce(API))
if (mb) await pooled(() => mb.once(API))
await pooled(sdkOnce)
floorOnce()

// Samples are paired: one floor iteration, one cold create, one pooled create, one SDK create,
// again and again, so that a burst of load elsewhere on the machine hits every series alike.
const floor = [], floorExec = [], raw = [], post = [], cmd = [], rawnet = [], pool = [], poolPost = [], poolCmd = [], sdk = []
const mbCold = [], mbColdPost = [], mbColdCmd = [], mbPool = [], mbPoolPost = [], mbPoolCmd = []
const coldIds = new Set(), coldnetIds = new Set(), poolIds = new Set(), kinds = { warm: 0, cold: 0, unknown: 0 }
const mbColdIds = new Set(), mbPoolIds = new Set(), mbKinds = { warm: 0, cold: 0, unknown: 0 }
for (let i = 0; i < N; i++) {
  const fl = floorOnce()
  floor.push(fl.exit.median_ms)
  floorExec.push(fl.exec.median_ms)
  if (cold) {
    const x = await coldOnce()
    raw.push(x.total); post.push(x.post); cmd.push(x.cmd); coldIds.add(x.id)
    const z = await rawOnce(coldnet.api)
    rawnet.push(z.total); coldnetIds.add(z.id)
    if (mb) {
      const m = await coldOnce(mb.once)
      mbCold.push(m.total); mbColdPost.push(m.post); mbColdCmd.push(m.cmd); mbColdIds.add(m.id)
    }
  }
  const y = await pooled(() => rawOnce(API))
  pool.push(y.total); poolPost.push(y.post); poolCmd.push(y.cmd); poolIds.add(y.id)
  kinds[y.kind || 'unknown']++
  if (mb) {
    const m = await pooled(() => mb.once(API))
    mbPool.push(m.total); mbPoolPost.push(m.post); mbPoolCmd.push(m.cmd); mbPoolIds.add(m.id)
    mbKinds[m.kind || 'unknown']++
  }
  sdk.push((await pooled(sdkOnce)).total)
}

const res = {
  n: pool.length,
  floor_ms: median(floor),
  floor_min_ms: Math.min(...floor),
  floor_exec_ms: median(floorExec),
}
if (raw.length) {
  Object.assign(res, {
    raw_ms: median(raw),
    raw_min_ms: Math.min(...raw),
    raw_post_ms: median(post),
    raw_first_cmd_ms: median(cmd),
    median_pair_ratio: median(raw.map((x, i) => x / floor[i])),
  })
  res.ratio_raw = res.raw_ms / res.floor_ms
  res.rawnet_ms = median(rawnet)
  res.rawnet_min_ms = Math.min(...rawnet)
  res.ratio_rawnet = res.rawnet_ms / res.floor_ms
}
Object.assign(res, {
  pooled_ms: median(pool),
  pooled_min_ms: Math.min(...pool),
  pooled_post_ms: median(poolPost),
  pooled_first_cmd_ms: median(poolCmd),
  pooled_got_spare: kinds.warm,
  pooled_booted_on_demand: kinds.cold,
  sdk_ms: median(sdk),
})
res.ratio_pooled = res.pooled_ms / res.floor_ms
res.ratio_sdk = res.sdk_ms / res.floor_ms
if (mbCold.length) {
  Object.assign(res, { mb_cold_ms: median(mbCold), mb_cold_min_ms: Math.min(...mbCold), mb_cold_post_ms: median(mbColdPost),
    mb_cold_first_cmd_ms: median(mbColdCmd) })
  res.ratio_mb_cold = res.mb_cold_ms / res.floor_ms
}
if (mbPool.length) {
  Object.assign(res, { mb_pooled_ms: median(mbPool), mb_pooled_min_ms: Math.min(...mbPool), mb_pooled_post_ms: median(mbPoolPost),
    mb_pooled_first_cmd_ms: median(mbPoolCmd), mb_pooled_got_spare: mbKinds.warm })
  res.ratio_mb_pooled = res.mb_pooled_ms / res.floor_ms
}

// What sandboxd itself timed (SANDBOXD_TRACE_CREATE): sbx_create and its steps, and the first
// command from its request to the init to its end, each step's median (ms), in the order logged.
function steps(text, into) {
  for (const p of text.split(', ')) {
    const q = /^(.*) (-?\d+)us$/.exec(p)
    if (q) (into[q[1]] ||= []).push(Number(q[2]) / 1000)
  }
}
const medians = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Number(f2(median(v)))]))
function serverSide(log, ids) {
  const inner = [], phases = {}, first = [], cmdPhases = {}, handled = []
  for (const line of readLog(log)) {
    let m
    if ((m = HANDLED.exec(line)) && ids.has(m[1])) {
      handled.push(Number(m[2]))
    } else if ((m = TRACE.exec(line)) && ids.has(m[1])) {
      inner.push(Number(m[2]))
      steps(m[4], phases)
    } else if ((m = FIRST.exec(line)) && ids.has(m[1])) {
      first.push(Number(m[2]))
      steps(m[3], cmdPhases)
    }
  }
  if (!inner.length) return null
  return {
    ms: median(inner), min: Math.min(...inner), phases: medians(phases), handled_ms: handled.length ? median(handled) : undefined,
    cmd_ms: first.length ? median(first) : undefined, cmd_phases: medians(cmdPhases),
  }
}
const cs = cold ? serverSide(cold.log, coldIds) : null
const cns = cold ? serverSide(coldnet.log, coldnetIds) : null
const mcs = cold && mbCold.length ? serverSide(cold.log, mbColdIds) : null
const mps = mbPool.length && process.env.SANDBOXD_LOG ? serverSide(process.env.SANDBOXD_LOG, mbPoolIds) : null
if (mb) await mb.stop()
if (cold) {
  await cold.stop()
  await coldnet.stop()
}
if (cs) {
  res.sbx_create_ms = cs.ms
  res.sbx_create_min_ms = cs.min
  res.ratio_sbx_create = cs.ms / res.floor_ms
  res.cold_steps_ms = cs.phases
  res.cold_first_cmd_server_ms = cs.cmd_ms
  res.cold_first_cmd_steps_ms = cs.cmd_phases
}
if (cns) {
  res.coldnet_sbx_create_ms = cns.ms
  res.coldnet_steps_ms = cns.phases
}
const ps = process.env.SANDBOXD_LOG ? serverSide(process.env.SANDBOXD_LOG, poolIds) : null
if (ps) {
  res.pooled_sbx_create_ms = ps.ms
  res.pooled_steps_ms = ps.phases
  res.pooled_first_cmd_server_ms = ps.cmd_ms
  res.pooled_first_cmd_steps_ms = ps.cmd_phases
}

console.log(`create→ready, median of ${res.n} paired samples (min in brackets); ratios to the floor's median`)
console.log(`  floor (ns+maps+overlay+true, reaped)  ${f2(res.floor_ms)} ms (${f2(res.floor_min_ms)}); until exec'd ${f2(res.floor_exec_ms)} ms`)
if (res.raw_ms !== undefined) {
  console.log(`  COLD (warm pool off) POST→first cmd   ${f2(res.raw_ms)} ms (${f2(res.raw_min_ms)})   ratio ${f2(res.ratio_raw)}× (goal ≤ 2×); median of pair ratios ${f2(res.median_pair_ratio)}×`)
  console.log(`  COLD, no network stocked (the link is made) ${f2(res.rawnet_ms)} ms (${f2(res.rawnet_min_ms)})   ratio ${f2(res.ratio_rawnet)}×` +
    (cns ? `; sbx_create ${f2(cns.ms)} ms, of which network ${f2(cns.phases['network (link)'] ?? NaN)} ms` : ''))
}
console.log(`  POOLED (spare claimed) POST→first cmd ${f2(res.pooled_ms)} ms (${f2(res.pooled_min_ms)})   ratio ${f2(res.ratio_pooled)}× (goal ≤ 1.5×); ` +
  `${kinds.warm}/${res.n} got a spare` + (kinds.unknown ? ` (${kinds.unknown} unknown: no SANDBOXD_LOG)` : ''))
console.log(`  SDK create→run('true') (bash -l), pooled ${f2(res.sdk_ms)} ms   ratio ${f2(res.ratio_sdk)}×`)
if (res.mb_cold_ms !== undefined) {
  console.log(`  COLD, moonbox client POST→first cmd   ${f2(res.mb_cold_ms)} ms (${f2(res.mb_cold_min_ms)})   ratio ${f2(res.ratio_mb_cold)}× (goal ≤ 2×)`)
}
if (res.mb_pooled_ms !== undefined) {
  console.log(`  POOLED, moonbox client POST→first cmd ${f2(res.mb_pooled_ms)} ms (${f2(res.mb_pooled_min_ms)})   ratio ${f2(res.ratio_mb_pooled)}× (goal ≤ 1.5×); ` +
    `${mbKinds.warm}/${mbPool.length} got a spare`)
}

// Where the time goes: the client's two requests, what sandboxd timed inside each, and the rest
// (HTTP, JSON, registry, threads; the client's own share).
const cols = [['cold', cs, res.raw_post_ms, res.raw_first_cmd_ms], ['pooled', ps, res.pooled_post_ms, res.pooled_first_cmd_ms],
  ['cold·mb', mcs, res.mb_cold_post_ms, res.mb_cold_first_cmd_ms], ['pooled·mb', mps, res.mb_pooled_post_ms, res.mb_pooled_first_cmd_ms]]
  .filter(([, , post]) => post !== undefined)
const cell = (x) => (typeof x === 'number' && !Number.isNaN(x) ? f2(x) : '-').padStart(11)
const row = (label, vals) => console.log(`    ${label.padEnd(38)}${vals.map(cell).join('')}`)
console.log(`  where the time goes (median ms)${' '.repeat(11)}${cols.map(([n]) => n.padStart(11)).join('')}`)
row('POST /sandboxes (client)', cols.map(([, , post]) => post))
row('  sbx_create (sandboxd)', cols.map(([, srv]) => srv?.ms))
const createSteps = [...new Set(cols.flatMap(([, srv]) => Object.keys(srv?.phases || {})))]
for (const k of createSteps) row(`    ${k.startsWith('init ') ? '  ' + k.slice(5) : k}`, cols.map(([, srv]) => srv?.phases?.[k]))
row('  the rest in sandboxd (body, JSON, registry, reply)', cols.map(([, srv]) => (srv?.handled_ms !== undefined ? srv.handled_ms - srv.ms : NaN)))
row('  the rest: HTTP on the wire, the client', cols.map(([, srv, post]) => (srv ? post - (srv.handled_ms ?? srv.ms) : NaN)))
row('first /bin/true (client)', cols.map(([, , , c]) => c))
row('  to its end (sandboxd)', cols.map(([, srv]) => srv?.cmd_ms))
const cmdSteps = [...new Set(cols.flatMap(([, srv]) => Object.keys(srv?.cmd_phases || {})))]
for (const k of cmdSteps) row(`    ${k}`, cols.map(([, srv]) => srv?.cmd_phases?.[k]))
row('  the rest: HTTP, stream, client', cols.map(([, srv, , c]) => (srv?.cmd_ms !== undefined ? c - srv.cmd_ms : NaN)))
for (const k of Object.keys(res)) if (typeof res[k] === 'number') res[k] = Number(res[k].toFixed(3))
console.log('RESULT ' + JSON.stringify(res))
