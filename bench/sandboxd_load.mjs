// sandboxd_load — 50 concurrent sandboxes, each running 10 commands one after another through
// the unmodified e2b SDK (issue 3). Every command must succeed (exit 0, expected stdout).
// Reports sandboxd's peak RSS (VmHWM of SANDBOXD_PID; goal ≤ 100 MB) and threads, and p50/p99
// command latency, next to a baseline measured in the same run: the same command, as the SDK
// sends it (`/bin/bash -l -c CMD`), spawned directly on the host with child_process, with the
// same concurrency (50 workers × 10, one after another per worker) — and once more with one
// worker, for the latency on an idle machine. The host baseline gets an empty HOME so that the
// host's own login profile (~200 ms here) is not charged to it; the sandbox user's home is
// empty too. Ratios are sandboxd / host. Under 50-way concurrency the host baseline is bounded
// by node itself (child_process forks the whole node process from its one event-loop thread),
// while sandboxd's inits fork a tiny static process: the concurrent ratio can fall below 1; the
// idle ratio compares the per-command overhead.
//
// Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, SANDBOXD_PID (required);
// BENCH_SANDBOXES (50), BENCH_COMMANDS (10), BENCH_CMD (default `echo hi`).
// Prints a human summary, then one line `RESULT {json}`.
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { Sandbox } = await import(pathToFileURL(path.join(ROOT, 'spec/sdk/node_modules/e2b/dist/index.mjs')).href)

const PID = Number(process.env.SANDBOXD_PID)
if (!process.env.E2B_API_URL || !process.env.E2B_API_KEY || !PID) {
  console.error('sandboxd_load: set E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and SANDBOXD_PID (bench/sandboxd.sh does)')
  process.exit(2)
}
const NS = Number(process.env.BENCH_SANDBOXES || 50)
const NC = Number(process.env.BENCH_COMMANDS || 10)
const CMD = process.env.BENCH_CMD || 'echo hi'
const WANT = CMD === 'echo hi' ? 'hi\n' : null

const pct = (a, p) => {
  const s = [...a].sort((x, y) => x - y)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}
const f2 = (x) => x.toFixed(2)

function status() {
  const st = readFileSync(`/proc/${PID}/status`, 'utf8')
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(st)?.[1] ?? NaN)
  return { hwm: kb('VmHWM') / 1024, rss: kb('VmRSS') / 1024, threads: kb('Threads') }
}

// Proportional memory (Pss) of sandboxd's direct children, which VmHWM does not include: the
// sandboxes' init processes and, for those with internet access, their pasta (and the stocked ones).
function childrenRss() {
  const acc = { init: { mb: 0, n: 0 }, pasta: { mb: 0, n: 0 } }
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue
    try {
      const st = readFileSync(`/proc/${d}/status`, 'utf8')
      if (Number(/^PPid:\s+(\d+)/m.exec(st)?.[1]) !== PID) continue
      const kind = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0')[0] === 'pasta' ? 'pasta' : 'init'
      // Pss: shared pages (the binary, libc) split among the processes that map them.
      acc[kind].mb += Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${d}/smaps_rollup`, 'utf8'))?.[1] ?? 0) / 1024
      acc[kind].n++
    } catch { /* gone */ }
  }
  return acc
}

// ---- host baseline ----
const home = mkdtempSync(path.join(tmpdir(), 'sbxload-home-'))
const hostEnv = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: home, USER: 'user', LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' }
function hostOnce() {
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    const p = spawn('/bin/bash', ['-l', '-c', CMD], { cwd: home, env: hostEnv, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    p.stdout.on('data', (d) => (out += d))
    p.on('error', reject)
    p.on('close', (code) => {
      const ms = performance.now() - t0
      if (code !== 0 || (WANT !== null && out !== WANT)) reject(new Error(`host: exit ${code}, stdout ${JSON.stringify(out)}`))
      else resolve(ms)
    })
  })
}
async function hostRun(workers, each) {
  const lat = []
  await Promise.all(Array.from({ length: workers }, async () => {
    for (let i = 0; i < each; i++) lat.push(await hostOnce())
  }))
  return lat
}

// ---- sandboxd ----
async function sandboxRun(sandboxes, each) {
  const lat = []
  const failures = []
  await Promise.all(sandboxes.map(async (s) => {
    for (let i = 0; i < each; i++) {
      try {
        const t0 = performance.now()
        const r = await s.commands.run(CMD)
        const ms = performance.now() - t0
        if (r.exitCode !== 0 || (WANT !== null && r.stdout !== WANT)) failures.push(`exit ${r.exitCode} stdout ${JSON.stringify(r.stdout)}`)
        else lat.push(ms)
      } catch (e) {
        failures.push(String(e?.message ?? e))
      }
    }
  }))
  return { lat, failures }
}

await hostRun(2, 5)   // warm-up (page cache)

// Peak RSS of this phase alone: "5" in clear_refs resets VmHWM (Linux ≥ 4.0; needs ptrace rights).
let hwmReset = true
try { writeFileSync(`/proc/${PID}/clear_refs`, '5') } catch { hwmReset = false }
const before = status()
let maxThreads = before.threads
const sampler = setInterval(() => { try { maxThreads = Math.max(maxThreads, status().threads) } catch {} }, 20)

const tc0 = performance.now()
const created = await Promise.allSettled(Array.from({ length: NS }, () => Sandbox.create('base', { timeoutMs: 600_000 })))
const createWall = performance.now() - tc0
const sandboxes = created.filter((x) => x.status === 'fulfilled').map((x) => x.value)
const kids = childrenRss()
const createFailures = created.filter((x) => x.status === 'rejected').map((x) => String(x.reason?.message ?? x.reason))

const tr0 = performance.now()
const sbx = await sandboxRun(sandboxes, NC)
const runWall = performance.now() - tr0
const peak = status()
clearInterval(sampler)

// Idle single-sandbox latency, before the kills.
const idleS = sandboxes.length ? (await sandboxRun([sandboxes[0]], 20)).lat : []
await Promise.allSettled(sandboxes.map((s) => s.kill()))

// Host baseline, same shape, right after (same machine state: no sandboxes left).
const th0 = performance.now()
const host = await hostRun(NS, NC)
const hostWall = performance.now() - th0
const idleH = await hostRun(1, 20)
rmSync(home, { recursive: true, force: true })

const total = NS * NC
const ok = sbx.lat.length === total && createFailures.length === 0 && sbx.failures.length === 0
const res = {
  ok,
  sandboxes: NS,
  commands: total,
  succeeded: sbx.lat.length,
  create_failures: createFailures.length,
  command_failures: sbx.failures.length,
  create_all_wall_ms: createWall,
  run_wall_ms: runWall,
  peak_rss_mb: peak.hwm,
  peak_rss_is_phase_only: hwmReset,
  rss_at_end_mb: peak.rss,
  rss_before_mb: before.rss,
  max_threads: maxThreads,
  init_processes: kids.init.n,
  inits_pss_mb: kids.init.mb,
  pasta_processes: kids.pasta.n,
  pasta_pss_mb: kids.pasta.mb,
  p50_ms: sbx.lat.length ? pct(sbx.lat, 50) : NaN,
  p99_ms: sbx.lat.length ? pct(sbx.lat, 99) : NaN,
  host_p50_ms: pct(host, 50),
  host_p99_ms: pct(host, 99),
  host_wall_ms: hostWall,
  idle_p50_ms: idleS.length ? pct(idleS, 50) : NaN,
  idle_host_p50_ms: pct(idleH, 50),
}
res.ratio_p50 = res.p50_ms / res.host_p50_ms
res.ratio_p99 = res.p99_ms / res.host_p99_ms
res.ratio_wall = res.run_wall_ms / res.host_wall_ms
res.ratio_idle_p50 = res.idle_p50_ms / res.idle_host_p50_ms

console.log(`load: ${NS} concurrent sandboxes × ${NC} × \`${CMD}\` via the SDK (bash -l -c)`)
console.log(`  succeeded ${res.succeeded}/${total}; create failures ${res.create_failures}, command failures ${res.command_failures}` +
  (ok ? '' : `  FIRST: ${[...createFailures, ...sbx.failures][0]}`))
console.log(`  sandboxd peak RSS ${f2(res.peak_rss_mb)} MB${hwmReset ? '' : ' (VmHWM over the whole life: reset refused)'} (goal ≤ 100 MB), ` +
  `${f2(res.rss_at_end_mb)} MB with ${NS} alive; max ${maxThreads} threads`)
for (const [k, v] of Object.entries(kids))
  console.log(`  plus ${v.n} ${k} processes: ${f2(v.mb)} MB Pss together (${f2(v.mb / Math.max(1, v.n))} MB each)`)
console.log(`  create ${NS} concurrently: ${f2(createWall)} ms wall`)
console.log(`  command latency p50 ${f2(res.p50_ms)} ms  p99 ${f2(res.p99_ms)} ms   wall ${f2(runWall)} ms`)
console.log(`  host baseline  p50 ${f2(res.host_p50_ms)} ms  p99 ${f2(res.host_p99_ms)} ms   wall ${f2(hostWall)} ms`)
console.log(`  ratio p50 ${f2(res.ratio_p50)}×  p99 ${f2(res.ratio_p99)}×  wall ${f2(res.ratio_wall)}×`)
console.log(`  idle (1 at a time): sandbox p50 ${f2(res.idle_p50_ms)} ms, host ${f2(res.idle_host_p50_ms)} ms, ratio ${f2(res.ratio_idle_p50)}×`)
for (const k of Object.keys(res)) if (typeof res[k] === 'number') res[k] = Number(res[k].toFixed(3))
console.log('RESULT ' + JSON.stringify(res))
process.exitCode = ok ? 0 : 1
