// The cgroup v2 checks, run inside the VM by tests/vm/guest.sh (as root, only cgroup2 mounted):
// sandboxd started here with small limits, driven through the official E2B SDK, its cgroups read
// straight from /sys/fs/cgroup. Prints "VMTEST ok|not ok <check>: <detail>" and "VMFIG k=v" lines
// for tests/vm/run.sh. Bounds are on counts (pids never above pids.max, CPU time unchanged while
// frozen, ...), never on how long something took; waits have a give-up bound only.
import { spawn } from 'node:child_process'
import { chownSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { KEY_FD_ARGS, passKey } from '../../spec/support/sandboxd_key.mjs'

const ROOT = process.env.MB_ROOT
const SANDBOXD = process.env.MB_SANDBOXD
const require = createRequire(`${ROOT}/spec/sdk/package.json`)
const { Sandbox, CommandExitError } = require('e2b')

const KEY = `e2b_${'0'.repeat(40)}`
const ADDR = '127.0.0.1:49983'
const URL = `http://${ADDR}`
const STATE = '/tmp/sandboxd-state'            // tmpfs
const LIMITS = { cpu: 1, memoryMB: 128, pids: 64 }
const CG = '/sys/fs/cgroup'
Object.assign(process.env, { E2B_API_URL: URL, E2B_SANDBOX_URL: URL, E2B_API_KEY: KEY })
const OPTS = { allowInternetAccess: false, timeoutMs: 600_000 }

const say = (s) => console.log(s)
const fig = (k, v) => say(`VMFIG ${k}=${v}`)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
function assert(cond, msg) { if (!cond) throw new Error(msg) }
async function check(name, fn) {
  try {
    say(`VMTEST ok ${name}: ${(await fn()) ?? ''}`)
  } catch (e) {
    say(`VMTEST not ok ${name}: ${String(e?.stack ?? e).split('\n').slice(0, 4).join(' | ')}`)
  }
}
// Polls until fn() is truthy; gives up (throws `what`) after `tries` rounds.
async function until(what, fn, tries = 600, ms = 100) {
  for (let i = 0; i < tries; i++) {
    const v = await fn()
    if (v) return v
    await sleep(ms)
  }
  throw new Error(`gave up waiting: ${what}`)
}

const read = (p) => readFileSync(p, 'utf8')
const keyed = (text) => Object.fromEntries(text.trim().split('\n').map((l) => l.split(' ')).map(([k, v]) => [k, Number(v)]))
const procs = (cg) => read(`${cg}/cgroup.procs`).split('\n').filter(Boolean).map(Number)
function stat(pid) {   // the state of a host pid, or null once it is gone
  try {
    const s = read(`/proc/${pid}/stat`)
    return { state: s.slice(s.lastIndexOf(')') + 2).split(' ')[0] }
  } catch { return null }
}
const cmdline = (pid) => { try { return read(`/proc/${pid}/cmdline`).split('\0').filter(Boolean).join(' ') } catch { return null } }
const LOOP = 'sh -c while :; do :; done'
const runtime = (pid) => { try { return Number(read(`/proc/${pid}/schedstat`).split(' ')[0]) } catch { return -1 } }
const innerPid = (pid) => { try { return read(`/proc/${pid}/status`).match(/^NSpid:\s*(.*)$/m)[1].trim().split(/\s+/).pop() } catch { return null } }
const sandboxdCgroups = () => readdirSync(CG).filter((d) => d.startsWith('sandboxd-'))

// ---- sandboxd, started and stopped here ----
let sbxd = null
const runs = []   // every sandboxd started, for the last check
// opts.as: a uid to run as (rootless), opts.cgroup: a cgroup directory to start it in
async function startSandboxd(opts = {}) {
  if (sbxd && sbxd.exit === null) await stopSandboxd('SIGKILL')   // one a failed check left
  const state = opts.state ?? STATE
  const args = ['--listen', ADDR, ...KEY_FD_ARGS, '--state-dir', state, '--cpu-count', String(LIMITS.cpu),
    '--memory-mb', String(LIMITS.memoryMB), '--pids-max', String(LIMITS.pids)]
  let cmd = SANDBOXD, argv = args
  if (opts.as !== undefined) {
    mkdirSync(state, { recursive: true })
    chownSync(state, opts.as, opts.as)
    const join = opts.cgroup ? `echo $$ > ${opts.cgroup}/cgroup.procs && ` : ''
    cmd = 'sh'
    argv = ['-c', `${join}exec setpriv --reuid=${opts.as} --regid=${opts.as} --clear-groups "$@"`, 'sh', SANDBOXD, ...args]
  }
  const p = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe', 'pipe'], env: { ...process.env, HOME: '/tmp', SANDBOXD_WARM_POOL: opts.pool ?? '1' } })
  passKey(p, KEY)
  const d = { p, log: '', exit: null }
  p.stdout.on('data', (b) => { d.log += b })
  p.stderr.on('data', (b) => { d.log += b })
  p.on('exit', (code, sig) => { d.exit = { code, sig } })
  sbxd = d
  runs.push(d)
  await until('sandboxd listening', () => d.log.includes('sandboxd listening on') || d.exit, 1200)
  if (d.exit) throw new Error(`sandboxd exited at start: ${JSON.stringify(d.exit)}: ${d.log}`)
  return d
}
async function stopSandboxd(sig = 'SIGTERM') {
  const d = sbxd
  d.p.kill(sig)
  await until('sandboxd exit', () => d.exit, 1200)
  return d.exit
}
const report = (d) => d.log.split('\n').filter((l) => /cgroup|isolation/.test(l)).join(' / ')

// Cgroup of a sandbox: where its commands are (no cgroup namespace: the path is the host's).
async function cgroupOf(sbx) {
  const r = await sbx.commands.run('cat /proc/self/cgroup')
  const rel = r.stdout.trim().replace(/^0::/, '')
  assert(/^(\/[^/]+)*\/sandboxd-[0-9a-f]+\/[a-z0-9]+$/.test(rel), `a command runs in ${rel}, not in a cgroup of sandboxd's`)
  return CG + rel
}
const initOf = (cg) => procs(cg).find((p) => innerPid(p) === '1')

async function main() {
  const t0 = Date.now()
  await startSandboxd()
  fig('sandboxd_start_ms', Date.now() - t0)

  await check('hierarchy', async () => {
    const types = read('/proc/self/mountinfo').split('\n').map((l) => l.split(' - ')[1]?.split(' ')[0]).filter((t) => t?.startsWith('cgroup'))
    assert(types.length > 0 && types.every((t) => t === 'cgroup2'), `cgroup mounts: ${types}`)
    assert(/cgroup v2: sandboxes in \/sys\/fs\/cgroup\/sandboxd-[0-9a-f]+ .*pids memory cpu freeze kill/.test(sbxd.log), `start-up report: ${report(sbxd)}`)
    return report(sbxd)
  })

  let t = Date.now()
  const a = await Sandbox.create('base', OPTS)
  fig('create_ms', Date.now() - t)
  let cgA = null
  await check('limits', async () => {
    const info = await Sandbox.getInfo(a.sandboxId)
    assert(info.cpuCount === LIMITS.cpu && info.memoryMB === LIMITS.memoryMB, `getInfo: cpuCount ${info.cpuCount}, memoryMB ${info.memoryMB}`)
    cgA = await cgroupOf(a)
    const v = (f) => read(`${cgA}/${f}`).trim()
    assert(v('pids.max') === String(LIMITS.pids), `pids.max ${v('pids.max')}`)
    assert(v('memory.max') === String(LIMITS.memoryMB * 1048576), `memory.max ${v('memory.max')}`)
    if (existsSync(`${cgA}/memory.swap.max`)) assert(v('memory.swap.max') === '0', `memory.swap.max ${v('memory.swap.max')}`)
    assert(v('cpu.max') === `${LIMITS.cpu * 100000} 100000`, `cpu.max ${v('cpu.max')}`)
    const init = initOf(cgA)
    assert(init, `no pid 1 of the sandbox among ${procs(cgA)}`)
    return `getInfo cpuCount ${info.cpuCount} memoryMB ${info.memoryMB}; ${cgA}: pids.max ${v('pids.max')}, memory.max ${v('memory.max')}, ` +
      `memory.swap.max ${existsSync(`${cgA}/memory.swap.max`) ? v('memory.swap.max') : '(no swap accounting)'}, cpu.max ${v('cpu.max')}; its init (host pid ${init}) inside`
  })

  await check('fork bomb held at pids.max', async () => {
    const bomb = await Sandbox.create('base', OPTS)
    const cg = await cgroupOf(bomb)
    const max = Number(read(`${cg}/pids.max`))
    await bomb.commands.run('b() { b | b & }; b', { background: true, timeoutMs: 0 })
    let highest = 0, samples = 0
    const sample = () => { const n = Number(read(`${cg}/pids.current`)); highest = Math.max(highest, n); samples++; return n }
    await until('the bomb reaching its bound (pids.events max)', () => { sample(); return keyed(read(`${cg}/pids.events`)).max > 0 }, 3000, 20)
    for (let i = 0; i < 200; i++) { sample(); await sleep(10) }
    const refused = keyed(read(`${cg}/pids.events`)).max
    const peak = existsSync(`${cg}/pids.peak`) ? Number(read(`${cg}/pids.peak`)) : null
    assert(highest <= max, `pids.current reached ${highest} > pids.max ${max}`)
    if (peak !== null) assert(peak <= max, `pids.peak ${peak} > pids.max ${max}`)
    // the other sandbox and sandboxd go on meanwhile
    const r = await a.commands.run('echo alive')
    assert(r.stdout.trim() === 'alive', `the other sandbox: ${r.stdout}`)
    const tk = Date.now()
    await bomb.kill()
    fig('bomb_kill_ms', Date.now() - tk)
    assert(!existsSync(cg), `${cg} still there after the kill`)
    fig('fork_bomb', `highest pids.current ${highest} of pids.max ${max} over ${samples} samples; pids.peak ${peak ?? 'n/a'}; forks refused ${refused}`)
    return `highest pids.current ${highest} ≤ pids.max ${max} (${samples} samples), ${refused} forks refused; the other sandbox answered; killed: cgroup removed`
  })

  await check('OOM kill inside, sandbox and sandboxd survive', async () => {
    const before = keyed(read(`${cgA}/memory.events`)).oom_kill
    let err = null
    try { await a.commands.run('exec tail /dev/zero', { timeoutMs: 300_000 }) } catch (e) { err = e }
    assert(err instanceof CommandExitError, `the hog was not killed: ${err}`)
    // envd's End event for a process killed by a signal (Go's ProcessState): exitCode -1, "signal: killed"
    assert(err.exitCode === -1 && err.error === 'signal: killed', `exit: code ${err.exitCode}, error ${err.error}`)
    const ev = keyed(read(`${cgA}/memory.events`))
    assert(ev.oom_kill > before, `memory.events oom_kill ${ev.oom_kill} (before ${before})`)
    const peak = existsSync(`${cgA}/memory.peak`) ? Number(read(`${cgA}/memory.peak`)) : null
    if (peak !== null) assert(peak <= LIMITS.memoryMB * 1048576, `memory.peak ${peak} above memory.max`)
    const r = await a.commands.run('echo survived')
    assert(r.stdout.trim() === 'survived', `after the OOM: ${r.stdout}`)
    assert(initOf(cgA), 'the init is gone')
    assert(sbxd.exit === null, 'sandboxd exited')
    fig('oom', `exitCode ${err.exitCode}, error "${err.error}", memory.events oom_kill ${ev.oom_kill}, oom ${ev.oom}, max ${ev.max}` +
      (peak !== null ? `, memory.peak ${(peak / 1048576).toFixed(1)} MiB` : ''))
    return `the hog ended with exitCode ${err.exitCode} "${err.error}" (as envd), oom_kill ${ev.oom_kill}; the sandbox ran a command after, its init and sandboxd alive`
  })

  // Metrics samples: at most one a second; a new one is there once its timestamp moves.
  const latest = async (after) => until('a new metrics sample', async () => {
    const m = await a.getMetrics()
    const last = m[m.length - 1]
    return last && (!after || last.timestamp > after.timestamp) ? last : null
  }, 100, 300)

  await check('CPU quota throttles (cpu.stat) and metrics move', async () => {
    const m0 = await latest(null)
    const s0 = keyed(read(`${cgA}/cpu.stat`))
    await a.commands.run('for i in 1 2 3; do timeout 3 sh -c "while :; do :; done" & done; wait')
    const s1 = keyed(read(`${cgA}/cpu.stat`))
    const m1 = await latest(m0)
    assert(s1.nr_throttled > s0.nr_throttled && s1.throttled_usec > s0.throttled_usec,
      `cpu.stat nr_throttled ${s0.nr_throttled}→${s1.nr_throttled}, throttled_usec ${s0.throttled_usec}→${s1.throttled_usec}`)
    assert(m1.cpuCount === LIMITS.cpu && m1.cpuUsedPct > 0 && m1.cpuUsedPct <= 100, `metrics cpuCount ${m1.cpuCount} cpuUsedPct ${m1.cpuUsedPct}`)
    // memory: a process holding 40 MiB (tail keeps the last 40 MiB it read; sleep never reads them)
    await a.commands.run('head -c 40M /dev/zero | tail -c 40M | sleep 600', { background: true, timeoutMs: 0 })
    let seen = m1
    const m2 = await until('40 MiB held', async () => { seen = await latest(seen); return seen.memUsed - m1.memUsed >= 30 * 1048576 ? seen : null }, 60, 0)
    assert(m2.memTotal === LIMITS.memoryMB * 1048576, `memTotal ${m2.memTotal}`)
    await a.commands.run('pkill -x sleep; true')
    fig('cpu_stat', `nr_periods ${s1.nr_periods - s0.nr_periods}, nr_throttled ${s1.nr_throttled - s0.nr_throttled}, ` +
      `throttled_usec ${s1.throttled_usec - s0.throttled_usec}, usage_usec ${s1.usage_usec - s0.usage_usec} (3 busy loops, 3 s, quota 1 CPU)`)
    fig('metrics', `cpuUsedPct ${m0.cpuUsedPct.toFixed(1)}→${m1.cpuUsedPct.toFixed(1)}, memUsed ${(m1.memUsed / 1048576).toFixed(1)}→${(m2.memUsed / 1048576).toFixed(1)} MiB of ${m2.memTotal / 1048576}`)
    return `throttled ${s1.nr_throttled - s0.nr_throttled} of ${s1.nr_periods - s0.nr_periods} periods; metrics cpuUsedPct ${m1.cpuUsedPct.toFixed(1)}, memUsed +${((m2.memUsed - m1.memUsed) / 1048576).toFixed(1)} MiB`
  })

  await check('pause freezes every process, resume thaws them', async () => {
    const s = await Sandbox.create('base', OPTS)
    const cg = await cgroupOf(s)
    // no time limit: the SDK's default (60 s) would end the loops mid-check on a loaded host
    await s.commands.run('sh -c "while :; do :; done" & sh -c "while :; do :; done" & wait', { background: true, timeoutMs: 0 })
    const init = initOf(cg)
    // The loops by their command line: a process that is runnable at one instant may be the
    // parent shell before its `wait` or a login shell's short-lived subshell.
    const workers = await until('two busy loops', () => { const w = procs(cg).filter((p) => p !== init && cmdline(p) === LOOP); return w.length >= 2 ? w : null })
    const all = () => procs(cg)
    // The same measure throughout: the CPU time every process of the sandbox has run
    // (/proc/<pid>/schedstat, ns) across half a second, five CPU-quota periods: the two loops,
    // given 1 CPU, run in every period unless frozen.
    const times = () => Object.fromEntries(all().map((p) => [p, runtime(p)]))
    const across = async () => {
      const b = times()
      await sleep(500)
      return [b, times()]
    }
    const ran = ([b, e]) => workers.reduce((n, p) => n + (e[p] > b[p] ? e[p] - b[p] : 0), 0)
    const before = ran(await across())
    assert(before > 0, 'the busy loops did not run before the pause')
    const tp = Date.now()
    const res = await fetch(`${URL}/sandboxes/${s.sandboxId}/pause`, { method: 'POST', headers: { 'X-API-KEY': KEY } })
    fig('pause_ms', Date.now() - tp)
    assert(res.status === 204, `pause: HTTP ${res.status}`)
    assert(read(`${cg}/cgroup.freeze`).trim() === '1' && keyed(read(`${cg}/cgroup.events`)).frozen === 1, `not frozen: ${read(`${cg}/cgroup.events`)}`)
    const [b, e] = await across()
    const moved = Object.keys(e).filter((p) => e[p] !== b[p])
    assert(moved.length === 0, `processes ran while frozen: ${moved.map((p) => `${p}: ${b[p]}→${e[p]} ns`)}`)
    const running = all().filter((p) => stat(p)?.state === 'R')
    assert(running.length === 0, `runnable while frozen: ${running}`)
    const frozen = all().length
    const tr = Date.now()
    await Sandbox.connect(s.sandboxId)   // resumes a paused sandbox
    fig('resume_ms', Date.now() - tr)
    assert(keyed(read(`${cg}/cgroup.events`)).frozen === 0, 'still frozen after resume')
    const after = await across()
    const afterRun = ran(after)
    assert(afterRun > 0, `the busy loops did not run after the resume: ${workers.map((p) => `${p} ${stat(p)?.state} ${after[0][p]}→${after[1][p]}`)}; ` +
      `cgroup.events ${read(`${cg}/cgroup.events`).replace(/\n/g, ' ')} cpu.stat ${read(`${cg}/cpu.stat`).replace(/\n/g, ' ')}`)
    await s.kill()
    assert(!existsSync(cg), `${cg} still there after the kill`)
    fig('freeze', `${frozen} processes frozen (the init and ${frozen - 1} of its descendants): 0 ns of CPU in 0.5 s frozen; the loops ran ${(before / 1e6).toFixed(0)} ms in 0.5 s before, ${(afterRun / 1e6).toFixed(0)} ms after`)
    return `${frozen} processes: not one ns of CPU and none runnable while frozen (cgroup.events frozen 1); running again after resume`
  })

  await check('teardown leaves no cgroup', async () => {
    await a.kill()
    assert(!existsSync(cgA), `${cgA} still there after the kill`)
    assert(new RegExp(`sandbox ${a.sandboxId}: 1 process killed out of memory \\(limit ${LIMITS.memoryMB} MiB`).test(sbxd.log),
      `sandboxd did not report the OOM kill at the end: ${sbxd.log.split('\n').filter((l) => l.includes(a.sandboxId)).join(' / ')}`)
    const exit = await stopSandboxd('SIGTERM')
    assert(exit.code === 0, `sandboxd exit ${JSON.stringify(exit)}`)
    const left = sandboxdCgroups()
    assert(left.length === 0, `left in ${CG}: ${left}`)
    return 'killed sandboxes lose their cgroup at once; after sandboxd stops (exit 0) no sandboxd-* cgroup remains'
  })

  await check('stale clean-up after a crash (cgroup.kill, rmdir)', async () => {
    await startSandboxd()
    const s = await Sandbox.create('base', OPTS)
    const cg = await cgroupOf(s)
    await stopSandboxd('SIGKILL')
    // Something still inside when sandboxd comes back: a process of the host put there by hand.
    const stray = spawn('sleep', ['1000'], { stdio: 'ignore' })
    writeFileSync(`${cg}/cgroup.procs`, String(stray.pid))
    let strayExit = null
    stray.on('exit', (code, sig) => { strayExit = sig ?? code })
    const leftover = readdirSync(cg.slice(0, cg.lastIndexOf('/'))).filter((d) => !d.includes('.'))
    await startSandboxd()
    await until('the stray process killed', () => strayExit !== null, 100)
    assert(strayExit === 'SIGKILL', `stray process ended by ${strayExit}`)
    assert(!existsSync(cg), `${cg} still there after the restart`)
    const s2 = await Sandbox.create('base', OPTS)
    assert((await s2.commands.run('echo ok')).stdout.trim() === 'ok', 'a sandbox after the restart')
    await s2.kill()
    const exit = await stopSandboxd('SIGTERM')
    assert(exit.code === 0 && sandboxdCgroups().length === 0, `exit ${JSON.stringify(exit)}, left ${sandboxdCgroups()}`)
    return `${leftover.length} cgroups a killed sandboxd left (${leftover.join(' ')}) and a process inside: killed and removed at the next start`
  })
  // Rootless: what systemd gives a user (Delegate=yes): a cgroup whose directory and cgroup.procs,
  // cgroup.subtree_control, cgroup.threads belong to the user; sandboxd started inside it.
  const NOBODY = 65534
  const DELEG = `${CG}/deleg-${NOBODY}`
  await check('rootless in a delegated cgroup', async () => {
    mkdirSync(DELEG)
    for (const f of ['', '/cgroup.procs', '/cgroup.subtree_control', '/cgroup.threads']) chownSync(DELEG + f, NOBODY, NOBODY)
    const d = await startSandboxd({ as: NOBODY, cgroup: DELEG, state: '/tmp/rootless-state' })
    const line = report(d)
    assert(line.includes(`cgroup v2: sandboxes in ${DELEG}/sandboxd-`) && line.includes("sandboxd's own delegated cgroup") &&
      /pids memory cpu freeze kill/.test(line), `start-up report: ${line}`)
    const own = read(`/proc/${d.p.pid}/cgroup`).trim()
    assert(own === `0::/deleg-${NOBODY}/supervisor`, `sandboxd itself in ${own}, not in the delegated cgroup's leaf`)
    const s = await Sandbox.create('base', OPTS)
    const cg = await cgroupOf(s).catch((e) => { throw new Error(`${e.message}`) })
    assert(cg.startsWith(`${DELEG}/sandboxd-`), `the sandbox's cgroup ${cg}`)
    const info = await Sandbox.getInfo(s.sandboxId)
    assert(info.cpuCount === LIMITS.cpu && info.memoryMB === LIMITS.memoryMB, `getInfo: cpuCount ${info.cpuCount}, memoryMB ${info.memoryMB}`)
    const v = (f) => read(`${cg}/${f}`).trim()
    assert(v('pids.max') === String(LIMITS.pids) && v('memory.max') === String(LIMITS.memoryMB * 1048576) && v('cpu.max') === '100000 100000',
      `limits: pids.max ${v('pids.max')}, memory.max ${v('memory.max')}, cpu.max ${v('cpu.max')}`)
    assert((await fetch(`${URL}/sandboxes/${s.sandboxId}/pause`, { method: 'POST', headers: { 'X-API-KEY': KEY } })).status === 204, 'pause')
    assert(keyed(v('cgroup.events')).frozen === 1, 'not frozen')
    await Sandbox.connect(s.sandboxId)
    assert(keyed(v('cgroup.events')).frozen === 0, 'still frozen')
    await s.kill()
    assert(!existsSync(cg), `${cg} still there after the kill`)
    const exit = await stopSandboxd('SIGTERM')
    const left = readdirSync(DELEG).filter((x) => x.startsWith('sandboxd-'))
    assert(exit.code === 0 && left.length === 0, `exit ${JSON.stringify(exit)}, left ${left}`)
    return `uid ${NOBODY}: sandboxd moved itself to ${DELEG}/supervisor, sandboxes in ${DELEG}/sandboxd-* with pids.max, memory.max, cpu.max; pause froze, kill and exit left nothing`
  })

  await check('rootless with nothing delegated says so', async () => {
    const d = await startSandboxd({ as: NOBODY, state: '/tmp/rootless-state2' })   // in the root cgroup, which is root's
    const line = report(d)
    assert(line.includes(`is not delegated to uid ${NOBODY}`) && /unavailable: .*cgroup pids limit, cgroup memory limit, cgroup CPU limit, freezer \(pause\)/.test(line),
      `start-up report: ${line}`)
    const s = await Sandbox.create('base', OPTS)
    const info = await Sandbox.getInfo(s.sandboxId)
    const hostMB = Math.floor(Number(read('/proc/meminfo').match(/MemTotal:\s+(\d+)/)[1]) / 1024)
    assert(info.cpuCount === Number(readdirSync('/sys/devices/system/cpu').filter((c) => /^cpu\d+$/.test(c)).length) && Math.abs(info.memoryMB - hostMB) <= 1,
      `getInfo reports cpuCount ${info.cpuCount}, memoryMB ${info.memoryMB} (host: ${hostMB} MB): not the host's figures`)
    assert((await s.commands.run('echo ok')).stdout.trim() === 'ok', 'a command')
    await s.kill()
    const exit = await stopSandboxd('SIGTERM')
    assert(exit.code === 0, `exit ${JSON.stringify(exit)}`)
    return `the start-up report names it (${line.match(/cgroup v2: sandboxd's cgroup [^;]*/)?.[0]}); getInfo gives the host's figures; sandboxes still work`
  })
  await logsCheck()
  fig('checks_s', ((Date.now() - t0) / 1000).toFixed(1))
}

// The same kernel booted as a cgroup v1 host with the layout systemd gives one (guest.sh with
// MB_VM_MODE=v1): cpu and cpuacct in one hierarchy, an empty cgroup2 at /sys/fs/cgroup/unified.
async function v1Checks() {
  const V1 = CG
  const HS = ['cpu,cpuacct', 'memory', 'pids', 'freezer']
  const t0 = Date.now()
  await check('cgroup v1 (cpu,cpuacct together) next to an empty cgroup2', async () => {
    const unified = read(`${V1}/unified/cgroup.controllers`)
    assert(!unified.trim().split(' ').some((c) => ['pids', 'memory', 'cpu'].includes(c)), `the unified hierarchy has pids, memory or cpu: ${unified}`)
    const d = await startSandboxd()
    assert(/cgroup v1: pids memory cpu freezer cpuacct/.test(report(d)), `start-up report: ${report(d)}`)
    const s = await Sandbox.create('base', OPTS)
    const lines = (await s.commands.run('cat /proc/self/cgroup')).stdout.trim().split('\n')
    const dir = (h) => `${V1}/${h}${lines.find((l) => l.split(':')[1] === h)?.split(':')[2]}`
    const v = (h, f) => read(`${dir(h)}/${f}`).trim()
    assert(dir('cpu,cpuacct').endsWith(`/${s.sandboxId}`), `the command's cpu,cpuacct cgroup: ${dir('cpu,cpuacct')} (${lines})`)
    assert(v('cpu,cpuacct', 'cpu.cfs_quota_us') === '100000' && v('memory', 'memory.limit_in_bytes') === String(LIMITS.memoryMB * 1048576) &&
      v('pids', 'pids.max') === String(LIMITS.pids), `cfs_quota_us ${v('cpu,cpuacct', 'cpu.cfs_quota_us')}, limit_in_bytes ${v('memory', 'memory.limit_in_bytes')}, pids.max ${v('pids', 'pids.max')}`)
    const info = await Sandbox.getInfo(s.sandboxId)
    assert(info.cpuCount === LIMITS.cpu && info.memoryMB === LIMITS.memoryMB, `getInfo: cpuCount ${info.cpuCount}, memoryMB ${info.memoryMB}`)
    let err = null
    try { await s.commands.run('exec tail /dev/zero', { timeoutMs: 300_000 }) } catch (e) { err = e }
    assert(err instanceof CommandExitError && err.exitCode === -1 && err.error === 'signal: killed', `the hog: ${err}`)
    assert((await s.commands.run('echo survived')).stdout.trim() === 'survived', 'a command after the OOM kill')
    assert((await fetch(`${URL}/sandboxes/${s.sandboxId}/pause`, { method: 'POST', headers: { 'X-API-KEY': KEY } })).status === 204, 'pause')
    assert(v('freezer', 'freezer.state') === 'FROZEN', `freezer.state ${v('freezer', 'freezer.state')}`)
    await Sandbox.connect(s.sandboxId)
    assert(v('freezer', 'freezer.state') === 'THAWED', `freezer.state ${v('freezer', 'freezer.state')}`)
    const m = (await s.getMetrics()).pop()
    assert(m.cpuCount === LIMITS.cpu && m.memTotal === LIMITS.memoryMB * 1048576, `metrics ${JSON.stringify(m)}`)
    const dirs = HS.map(dir)
    await s.kill()
    assert(dirs.every((x) => !existsSync(x)), `left after the kill: ${dirs.filter((x) => existsSync(x))}`)
    const exit = await stopSandboxd('SIGTERM')
    const left = HS.flatMap((h) => readdirSync(`${V1}/${h}`).filter((x) => x.startsWith('sandboxd-')))
    assert(exit.code === 0 && left.length === 0, `exit ${JSON.stringify(exit)}, left ${left}`)
    return 'one directory for cpu and cpuacct; cfs quota, memory limit, pids.max written; getInfo and metrics report them; OOM inside ends "signal: killed"; the freezer pauses; nothing left'
  })
  await logsCheck()
  fig('checks_v1_s', ((Date.now() - t0) / 1000).toFixed(1))
}

async function logsCheck() {
  await check("sandboxd's logs: no cgroup error, no sanitizer report", async () => {
    if (sbxd && sbxd.exit === null) await stopSandboxd('SIGTERM')
    const bad = runs.flatMap((d) => d.log.split('\n')).filter((l) => /runtime error|Sanitizer|sandboxd: (cgroup|cleanup): |rmdir |cannot /.test(l))
    assert(bad.length === 0, bad.slice(0, 5).join(' / '))
    return `${runs.length} runs of sandboxd (${process.env.MB_SANDBOXD})`
  })
}

(process.env.MB_VM_MODE === 'v1' ? v1Checks() : main()).catch((e) => say(`VMTEST not ok checks: ${e?.stack ?? e}`)).finally(() => {
  if (sbxd && sbxd.exit === null) sbxd.p.kill('SIGKILL')
  process.exit(0)
})
