// More lifecycle and isolation behaviour: a generated API key kept across restarts, SIGINT,
// keepalives, pause really freezing, autoPause, uts/ipc namespaces, the cgroup pids limit and what
// the template shows. Tests that stop sandboxd start their own (own port and --state-dir).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync, mkdtempSync } from 'node:fs'
import { hostname, tmpdir } from 'node:os'
import path from 'node:path'
import {
  T,
  ZERO_KEY,
  newSandbox,
  killQuietly,
  startSandboxdArgs,
  stopSandboxd,
  settlesWithin,
  waitFor,
  sleep,
  marker,
  uniq,
  connectStream,
  hostProcessesWith,
  hostMountsWith,
  pathsUnder,
  sh,
  Sandbox,
  AuthenticationError,
  sandboxdBinary,
  SDK_PACKAGE,
} from './helpers.mjs'

/** Sends `sig` and waits (bounded) for the exit; resolves with {code, signal}. */
async function signalAndWait(srv, sig) {
  srv.proc.kill(sig)
  return settlesWithin(srv.exited, 30_000, `sandboxd exit after ${sig}`)
}

const CG_CONTROLLERS = ['pids', 'memory', 'freezer', 'cpu', 'cpuacct']

test('without --api-key-file or --api-key-fd a key is generated once, kept in the state dir, and works; SIGINT exits 0 and leaves nothing', T, async (t) => {
  const stateDir = mkdtempSync(path.join(tmpdir(), 'mb-sdk-key-'))
  let first = null
  let second = null
  t.after(async () => {
    await stopSandboxd(first)
    await stopSandboxd(second)
    rmSync(stateDir, { recursive: true, force: true })
  })

  first = await startSandboxdArgs({ stateDir, key: null })
  const key = first.generatedKey
  assert.match(key ?? '', /^e2b_[0-9a-f]{40}$/, `no generated key printed:\n${first.stdout()}`)
  assert.ok(first.stdout().includes(`sandboxd api key: ${key} (kept in ${stateDir}/api-key)`), first.stdout())
  assert.equal(readFileSync(path.join(stateDir, 'api-key'), 'utf8').trim(), key)
  assert.equal(statSync(path.join(stateDir, 'api-key')).mode & 0o777, 0o600, 'the key file is private')
  assert.equal((await Sandbox.list({ ...first.opts }).nextItems()).length, 0, 'the generated key is accepted')
  await assert.rejects(Sandbox.list({ ...first.opts, apiKey: ZERO_KEY }).nextItems(), AuthenticationError)
  assert.deepEqual(await signalAndWait(first, 'SIGTERM'), { code: 0, signal: null })

  second = await startSandboxdArgs({ stateDir, key: null })
  assert.equal(second.generatedKey, key, 'the same key is printed at the second start')
  const sbx = await Sandbox.create('base', { ...second.opts, timeoutMs: 120_000 })
  assert.equal((await sbx.commands.run('echo key-ok')).stdout, 'key-ok\n')
  await sbx.files.write('x.txt', 'x')
  const m = marker(3)
  await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  await waitFor(() => hostProcessesWith(`sleep ${m}`).length > 0, { what: 'the sandbox sleep on the host' })
  await assert.rejects(Sandbox.create('base', { ...second.opts, apiKey: ZERO_KEY, timeoutMs: 30_000 }), AuthenticationError)

  assert.deepEqual(await signalAndWait(second, 'SIGINT'), { code: 0, signal: null })
  assert.match(second.stderr(), /Interrupt: destroying every sandbox/)
  assert.deepEqual(hostProcessesWith(`sleep ${m}`), [], 'sandbox processes')
  assert.deepEqual(hostProcessesWith(stateDir), [], 'processes naming the state dir')
  assert.deepEqual(hostMountsWith(stateDir), [], 'mounts')
  assert.deepEqual(hostMountsWith(sbx.sandboxId), [], 'mounts')
  assert.deepEqual(pathsUnder(stateDir, sbx.sandboxId), [], 'sandbox directory')
  for (const c of CG_CONTROLLERS) assert.deepEqual(pathsUnder(`/sys/fs/cgroup/${c}`, sbx.sandboxId), [], `${c} cgroup`)
  const sandboxesDir = path.join(stateDir, 'sandboxes')
  if (existsSync(sandboxesDir)) assert.deepEqual(readdirSync(sandboxesDir), [], 'sandboxes/ (spares included)')
  assert.equal(readFileSync(path.join(stateDir, 'api-key'), 'utf8').trim(), key, 'the key survives')
})

test('Keepalive-Ping-Interval: 1 → keepalive events between start and end of a 3 s command', T, async (t) => {
  const sbx = await newSandbox(t)
  const s = await connectStream(
    sbx,
    'process.Process/Start',
    { process: { cmd: '/bin/sleep', args: ['3'] }, stdin: false },
    { headers: { 'Keepalive-Ping-Interval': '1' } },
  )
  assert.equal(s.status, 200)
  assert.ok(s.end && !s.end.error, `end-stream: ${JSON.stringify(s.end)}`)
  const kinds = s.messages.map((m) => Object.keys(m.event ?? {})[0])
  assert.equal(kinds[0], 'start', kinds.join(','))
  assert.equal(kinds.at(-1), 'end', kinds.join(','))
  assert.ok(kinds.slice(1, -1).includes('keepalive'), `no keepalive before the end: ${kinds.join(',')}`)
  assert.ok(kinds.slice(1, -1).every((k) => k === 'keepalive'), kinds.join(','))
  assert.equal(s.messages.at(-1).event.end.exited, true)
})

test('pause freezes processes: a counter does not advance while paused, and advances after connect', T, async (t) => {
  const sbx = await newSandbox(t)
  const m = marker(4)
  const file = `/tmp/counter-${m}`
  await sbx.commands.run(`i=0; while :; do i=$((i+1)); echo $i > ${file}.new && mv ${file}.new ${file}; sleep 0.05; done`, {
    background: true,
    timeoutMs: 0,
  })
  const loop = await waitFor(() => hostProcessesWith(`counter-${m}`)[0], { what: 'the counter loop on the host' })
  // Read through the loop's own root (the sandbox's file system as the host sees it).
  const read = () => Number(readFileSync(`/proc/${loop.pid}/root${file}`, 'utf8'))
  await waitFor(() => read() >= 3, { what: 'the counter to run' })

  await sbx.pause()
  assert.equal(await sbx.isRunning(), false)
  const frozen = read()
  await sleep(1000) // ~20 iterations if anything still ran
  assert.equal(read(), frozen, 'the counter advanced while the sandbox was paused')

  await sbx.connect({ timeoutMs: 120_000 })
  await waitFor(() => read() > frozen, { what: 'the counter to advance after resume' })
})

test('autoPause: on timeout the sandbox is paused (not deleted), and connect resumes it intact', T, async (t) => {
  const tag = uniq('ap')
  const sbx = await Sandbox.create('base', { lifecycle: { onTimeout: 'pause' }, timeoutMs: 60_000, metadata: { moonboxTest: tag } })
  t.after(() => killQuietly(sbx))
  assert.equal((await sbx.getInfo()).lifecycle?.onTimeout, 'pause')
  await sbx.files.write('kept.txt', 'survives the pause')
  const m = marker(6)
  await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  const p = await waitFor(() => hostProcessesWith(`sleep ${m}`)[0], { what: 'the sandbox sleep on the host' })
  await sbx.setTimeout(2000) // a 2 s timeout from now (set after the writes, so that they cannot race it)
  await waitFor(async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused', { what: 'the sandbox to be paused at its timeout' })
  const listed = await Sandbox.list({ query: { metadata: { moonboxTest: tag }, state: ['paused'] } }).nextItems()
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.equal(await sbx.isRunning(), false)

  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  assert.equal((await again.getInfo()).state, 'running')
  assert.equal(await again.files.read('kept.txt'), 'survives the pause')
  assert.equal((await again.commands.run('echo resumed')).stdout, 'resumed\n')
  assert.deepEqual(hostProcessesWith(`sleep ${m}`).map((x) => x.pid), [p.pid], 'the same process lives on')
})

test('uts and ipc namespaces: host name = sandbox id; host SysV IPC objects are not visible (and vice versa)', T, async (t) => {
  const sbx = await newSandbox(t)
  const names = (await sbx.commands.run('uname -n; cat /proc/sys/kernel/hostname')).stdout.trim().split('\n')
  assert.deepEqual(names, [sbx.sandboxId, sbx.sandboxId])
  assert.notEqual(hostname(), sbx.sandboxId)

  // A message queue on the host (ipcmk prints "Message queue id: N"), removed afterwards.
  const made = execFileSync('ipcmk', ['-Q'], { encoding: 'utf8' })
  const qid = made.match(/id:\s*(\d+)/)?.[1]
  assert.ok(qid, `ipcmk -Q: ${made}`)
  t.after(() => execFileSync('ipcrm', ['-q', qid]))
  const queues = (text) => text.split('\n').filter((l) => /^0x[0-9a-f]+\s+\d+\s/.test(l)).map((l) => l.split(/\s+/).slice(0, 2))
  const hostQueues = () => queues(execFileSync('ipcs', ['-q'], { encoding: 'utf8' }))
  assert.ok(hostQueues().some(([, id]) => id === qid), 'the host sees its own queue')

  for (const user of ['user', 'root']) {
    const inside = await sbx.commands.run('ipcs -q', { user })
    assert.deepEqual(queues(inside.stdout), [], `${user} sees SysV message queues:\n${inside.stdout}`)
    const proc = (await sbx.commands.run('cat /proc/sysvipc/msg', { user })).stdout.trim().split('\n')
    assert.equal(proc.length, 1, `/proc/sysvipc/msg inside lists queues:\n${proc.join('\n')}`)
  }
  // and one made inside stays inside
  const innerKey = (await sbx.commands.run('ipcmk -Q >/dev/null && ipcs -q')).stdout
  const [[key]] = queues(innerKey)
  assert.ok(!hostQueues().some(([k]) => k === key), `the sandbox's queue ${key} is visible on the host`)
})

test('limits from --cpu-count, --memory-mb, --pids-max on cgroup v1: written to the cgroups, reported by getInfo and getMetrics; bad values refused', T, async (t) => {
  for (const bad of [['--cpu-count', '0'], ['--memory-mb', '8'], ['--pids-max', 'x'], ['--cpu-count', '2x']]) {
    const r = spawnSync(sandboxdBinary(), ['--listen', '127.0.0.1:0', ...bad], { encoding: 'utf8' })
    assert.equal(r.status, 2, `${bad.join(' ')}: exit ${r.status}`)
    assert.match(r.stderr, new RegExp(`^sandboxd: ${bad[0]} '${bad[1]}' must be a whole number from \\d+ to \\d+$`, 'm'))
  }
  if (!['cpu', 'memory', 'pids'].every((c) => existsSync(`/sys/fs/cgroup/${c}/cgroup.procs`))) {
    return t.skip('no cgroup v1 cpu, memory and pids controllers here (tests/vm checks cgroup v2)')
  }
  const srv = await startSandboxdArgs({ args: ['--cpu-count', '1', '--memory-mb', '300', '--pids-max', '200'] })
  t.after(() => stopSandboxd(srv))
  assert.match(srv.stderr(), /^sandboxd: cgroup v1: pids memory cpu .*; each sandbox: 1 CPU, 300 MB$/m)
  const sbx = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, allowInternetAccess: false })
  const info = await Sandbox.getInfo(sbx.sandboxId, srv.opts)
  assert.deepEqual([info.cpuCount, info.memoryMB], [1, 300], 'getInfo')
  const listed = (await Sandbox.list({ ...srv.opts }).nextItems()).find((x) => x.sandboxId === sbx.sandboxId)
  assert.deepEqual([listed?.cpuCount, listed?.memoryMB], [1, 300], 'list')
  const m = marker(4)
  await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  const p = await waitFor(() => hostProcessesWith(`sleep ${m}`)[0], { what: 'the sandbox sleep on the host' })
  const lines = readFileSync(`/proc/${p.pid}/cgroup`, 'utf8').split('\n')
  const dir = (c) => `/sys/fs/cgroup/${c}${lines.find((l) => l.split(':')[1]?.split(',').includes(c))?.split(':')[2]}`
  const v = (c, f) => readFileSync(`${dir(c)}/${f}`, 'utf8').trim()
  assert.ok(dir('cpu').endsWith('/' + sbx.sandboxId), `the command's cpu cgroup: ${dir('cpu')}`)
  assert.deepEqual([v('cpu', 'cpu.cfs_period_us'), v('cpu', 'cpu.cfs_quota_us')], ['100000', '100000'], 'one CPU of quota')
  assert.equal(v('memory', 'memory.limit_in_bytes'), String(300 * 1048576))
  if (existsSync(`${dir('memory')}/memory.memsw.limit_in_bytes`)) assert.equal(v('memory', 'memory.memsw.limit_in_bytes'), String(300 * 1048576), 'no swap beyond it')
  assert.equal(v('pids', 'pids.max'), '200')
  const metrics = await sbx.getMetrics()
  assert.ok(metrics.length > 0 && metrics.every((x) => x.cpuCount === 1 && x.memTotal === 300 * 1048576), JSON.stringify(metrics))
  await sbx.kill()
  for (const c of ['cpu', 'memory', 'pids']) assert.deepEqual(pathsUnder(`/sys/fs/cgroup/${c}`, sbx.sandboxId), [], `${c} cgroup`)
})

test('cgroup v1, a network pair stocked with its cgroups: the init is born in them, renamed to the sandbox id, with a template\'s limits; none is left', T, async (t) => {
  if (!CG_CONTROLLERS.every((c) => existsSync(`/sys/fs/cgroup/${c}/tasks`))) {
    return t.skip('no cgroup v1 pids, memory, freezer, cpu and cpuacct controllers here (tests/vm checks cgroup v2)')
  }
  const { Template } = await import(SDK_PACKAGE)
  if (typeof Template !== 'function') return t.skip(`${SDK_PACKAGE} has no Template builder`)
  // No spares: every create takes the stocked pair (and its cgroups), as a burst beyond the pool does.
  const srv = await startSandboxdArgs({ env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_TRACE_CREATE: '1' } })
  let stopped = false
  t.after(() => (stopped ? null : stopSandboxd(srv)))
  const pairs = () => (srv.stderr().match(/ network pair ready in /g) || []).length
  const stocked = () => pairs() - (srv.stderr().match(/ pair \(pool\)/g) || []).length   // made, less taken
  const built = uniq('cgkit')
  await Template.build(Template().fromTemplate('base').runCmd('true'), built, { ...srv.opts, cpuCount: 1, memoryMB: 256 })
  let parent = null
  for (const [template, limits] of [['base', null], [built, { quota: '100000', mem: String(256 * 1048576) }]]) {
    await waitFor(() => stocked() > 0, { what: 'a stocked pair' })
    const sbx = await Sandbox.create(template, { ...srv.opts, timeoutMs: 120_000 })
    const trace = srv.stderr().split('\n').find((l) => l.includes(`sandbox ${sbx.sandboxId} ready in`)) ?? ''
    assert.match(trace, /pair \(pool\).*cgroups \(pool\)/, `booted from a stocked pair with its cgroups: ${trace}`)
    assert.doesNotMatch(trace, /init cgroups joined/, 'the init had nothing to join')
    const m = marker(6)
    await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
    const p = await waitFor(() => hostProcessesWith(`sleep ${m}`)[0], { what: 'the sandbox sleep on the host' })
    const init = Number(readFileSync(`/proc/${p.pid}/stat`, 'utf8').split(') ')[1].split(' ')[1])
    for (const pid of [p.pid, init]) {
      const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')
      for (const c of CG_CONTROLLERS) {
        const rel = lines.find((l) => l.split(':')[1]?.split(',').includes(c))?.split(':')[2] ?? ''
        assert.ok(rel.endsWith('/' + sbx.sandboxId), `${pid === init ? 'the init' : 'a command'}: ${c} cgroup ${rel}`)
        parent ??= path.dirname(rel)
      }
    }
    const dir = (c) => `/sys/fs/cgroup/${c}${parent}/${sbx.sandboxId}`
    assert.equal(readFileSync(`${dir('pids')}/pids.max`, 'utf8').trim(), '4096')
    if (limits) {
      assert.equal(readFileSync(`${dir('cpu')}/cpu.cfs_quota_us`, 'utf8').trim(), limits.quota, 'the template\'s one CPU')
      assert.equal(readFileSync(`${dir('memory')}/memory.limit_in_bytes`, 'utf8').trim(), limits.mem, 'the template\'s 256 MB')
    }
    await sbx.kill()
    assert.deepEqual(hostProcessesWith(`sleep ${m}`), [], 'its processes are gone')
    for (const c of CG_CONTROLLERS) assert.ok(!existsSync(dir(c)), `${c} cgroup removed`)
  }
  // The stocked pair holds cgroups named k<...> until sandboxd stops; then nothing is left.
  await waitFor(() => stocked() > 0, { what: 'a stocked pair' })
  const kits = () => CG_CONTROLLERS.flatMap((c) => existsSync(`/sys/fs/cgroup/${c}${parent}`) ? readdirSync(`/sys/fs/cgroup/${c}${parent}`, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => `${c}/${e.name}`) : [])
  assert.ok(kits().length > 0 && kits().every((k) => /\/k[0-9a-f]+$/.test(k)), `only a stocked pair's cgroups: ${kits()}`)
  stopped = true
  await stopSandboxd(srv)
  assert.deepEqual(kits(), [], 'no cgroup left once sandboxd has stopped')
})

test('one sandboxd per state dir; sandboxd --clean-up after a SIGKILL removes what it left, and is refused while one runs', T, async (t) => {
  const srv = await startSandboxdArgs()
  t.after(async () => { await stopSandboxd(srv); rmSync(srv.stateDir, { recursive: true, force: true }) })
  const run = (args, input) => spawnSync(sandboxdBinary(), args, { encoding: 'utf8', input, timeout: 20_000 })
  const second = run(['--listen', '127.0.0.1:0', '--state-dir', srv.stateDir, '--api-key-fd', '0'], `${ZERO_KEY}\n`)
  assert.equal(second.status, 1, `a second sandboxd on the state dir: ${second.stderr}`)
  assert.match(second.stderr, /^sandboxd: --state-dir .* is in use by another sandboxd/m)
  const busy = run(['--clean-up', '--state-dir', srv.stateDir])
  assert.equal(busy.status, 1)
  assert.match(busy.stderr, /^sandboxd: --clean-up: --state-dir .* is in use by another sandboxd \(.*sandboxd\.lock is locked\)$/m)
  assert.equal(run(['--clean-up', '--state-dir', srv.stateDir, '--listen', '127.0.0.1:0']).status, 2, 'other options refused')
  assert.equal(run(['--clean-up', '--state-dir', path.join(srv.stateDir, 'nothing-here')]).status, 0, 'nothing to clean')
  const sbx = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000 })
  const m = marker(7)
  await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  const p = await waitFor(() => hostProcessesWith(`sleep ${m}`)[0], { what: 'the sandbox sleep on the host' })
  const cg = readFileSync(`/proc/${p.pid}/cgroup`, 'utf8').split('\n').find((l) => /^\d+:pids:/.test(l))?.split(':')[2]
  srv.proc.kill('SIGKILL')
  await srv.exited
  const r = run(['--clean-up', '--state-dir', srv.stateDir])
  assert.equal(r.status, 0, r.stderr)
  await waitFor(() => hostProcessesWith(`sleep ${m}`).length === 0, { what: 'the crashed sandbox\'s processes to go' })
  if (cg) assert.ok(!existsSync(`/sys/fs/cgroup/pids${cg}`) && !existsSync(`/sys/fs/cgroup/pids${path.dirname(cg)}`), `${cg} removed, and its parent`)
  assert.deepEqual(pathsUnder(srv.stateDir, sbx.sandboxId), [], 'its directory removed')
})

test('cgroup pids limit: the default is configured, and the sandbox cannot fork past its limit', T, async (t) => {
  if (!existsSync('/sys/fs/cgroup/pids/cgroup.procs')) return t.skip('the host has no cgroup v1 pids controller')
  const sbx = await newSandbox(t)
  const m = marker(5)
  await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  const p = await waitFor(() => hostProcessesWith(`sleep ${m}`)[0], { what: 'the sandbox sleep on the host' })
  const line = readFileSync(`/proc/${p.pid}/cgroup`, 'utf8').split('\n').find((l) => /^\d+:pids:/.test(l))
  const rel = line?.split(':')[2] ?? ''
  if (!rel.endsWith('/' + sbx.sandboxId)) return t.skip(`sandboxd did not put the sandbox in a pids cgroup (${rel || 'none'}): not writable for it?`)
  const cg = `/sys/fs/cgroup/pids${rel}`
  assert.equal(readFileSync(`${cg}/pids.max`, 'utf8').trim(), '4096', 'SBX_DEFAULT_PIDS_MAX (sandbox.h)')
  assert.ok(readFileSync(`${cg}/cgroup.procs`, 'utf8').split('\n').includes(String(p.pid)), 'commands live in the cgroup')

  // 4096 is too many processes to exhaust in a test: lower this sandbox's limit from the host to a
  // few above its current count, then fork until fork fails.
  const py = await sh(sbx, 'command -v python3')
  if (py.code !== 0) return t.skip('no python3 inside the sandbox to fork with')
  const headroom = 20
  const limit = Number(readFileSync(`${cg}/pids.current`, 'utf8')) + headroom
  writeFileSync(`${cg}/pids.max`, String(limit))
  const script = [
    'import os, time, errno',
    'kids, err = [], "none"',
    'try:',
    '    while len(kids) < 500:',
    '        pid = os.fork()',
    '        if pid == 0:',
    '            time.sleep(60); os._exit(0)',
    '        kids.append(pid)',
    'except OSError as e:',
    '    err = errno.errorcode.get(e.errno, str(e.errno))',
    'for k in kids: os.kill(k, 9)',
    'for k in kids: os.waitpid(k, 0)',
    'print(len(kids), err)',
  ].join('\n')
  await sbx.files.write('/tmp/forker.py', script)
  const out = (await sbx.commands.run('python3 /tmp/forker.py')).stdout.trim()
  const [n, err] = out.split(' ')
  assert.equal(err, 'EAGAIN', `fork never failed (${out}): no pids limit`)
  assert.ok(Number(n) > 0 && Number(n) <= headroom, `forked ${n} processes with ${headroom} of headroom`)
  assert.ok(Number(readFileSync(`${cg}/pids.current`, 'utf8')) <= limit)
  assert.equal((await sbx.commands.run('echo still-works')).stdout, 'still-works\n')
})

test('the template shows /usr, /bin, /lib and a minimal /etc; host /var/lib/dpkg, /root contents and /work are absent', T, async (t) => {
  const sbx = await newSandbox(t)
  const ls = async (dir) => {
    const r = await sh(sbx, `ls -A ${dir}`, { user: 'root' })
    return r.code === 0 ? r.out.split('\n').filter(Boolean) : null
  }
  // system directories: the host's own
  assert.deepEqual((await ls('/usr/bin')).sort(), readdirSync('/usr/bin').sort())
  assert.equal((await sh(sbx, 'test -x /bin/sh && test -d /lib && test -d /usr/lib && echo ok')).out, 'ok\n')

  // a minimal /etc: its own accounts and a few public files, none of the host's secrets
  const etc = await ls('/etc')
  for (const f of ['passwd', 'group', 'hosts', 'resolv.conf']) assert.ok(etc.includes(f), `/etc/${f} missing: ${etc.join(' ')}`)
  for (const f of ['shadow', 'gshadow', 'ssh', 'profile.d']) assert.ok(!etc.includes(f), `/etc/${f} is visible`)
  // sudoers is the template's own (E2B's base template gives user passwordless sudo), never the host's
  const sudoers = (await sh(sbx, 'cat /etc/sudoers', { user: 'root' })).out
  assert.match(sudoers, /^user ALL=\(ALL(:ALL)?\) NOPASSWD: ?ALL$/m)
  if (existsSync('/etc/sudoers')) assert.notEqual(sudoers, readFileSync('/etc/sudoers', 'utf8'), 'the host\'s /etc/sudoers is visible')
  assert.deepEqual(await ls('/etc/sudoers.d'), [], 'the host\'s /etc/sudoers.d is visible')
  assert.ok(etc.length < readdirSync('/etc').length, `/etc inside (${etc.length}) is not smaller than the host's`)
  assert.match((await sbx.commands.run('cat /etc/passwd')).stdout, /^user:x:1000:1000:[^:]*:\/home\/user:/m)

  // host paths that must not be there
  assert.ok(existsSync('/var/lib/dpkg') && existsSync('/work'), 'host precondition')
  for (const p of ['/var/lib/dpkg', '/work']) {
    assert.equal((await sh(sbx, `test -e ${p} || echo absent`, { user: 'root' })).out, 'absent\n', `${p} is visible`)
  }
  const rootInside = await ls('/root')
  const hostRoot = readdirSync('/root')
  assert.ok(hostRoot.length > 0, 'host precondition: /root has entries')
  assert.deepEqual(rootInside.filter((n) => hostRoot.includes(n)), [], 'host /root entries are visible')
  assert.equal(await sbx.files.exists('/work', { user: 'root' }), false)
})
