// sandboxd process lifecycle: crash + restart cleanup, SIGTERM shutdown, and streams ending cleanly
// when their sandbox is killed. Starts its own sandboxd instances (own port and --state-dir).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readdirSync, rmSync } from 'node:fs'
import path from 'node:path'
import {
  T,
  startSandboxd,
  stopSandboxd,
  killQuietly,
  waitFor,
  settlesWithin,
  hostProcessesWith,
  hostMountsWith,
  pathsUnder,
  newSandbox,
  marker,
  hostChildren,
  Sandbox,
  SandboxNotFoundError,
} from './helpers.mjs'

/** Everything the sandbox `id` could have left on the host for a sandboxd with `stateDir`. */
function leftovers(stateDir, id, sleepMarkers) {
  return {
    processes: sleepMarkers.flatMap((m) => hostProcessesWith(`sleep ${m}`)),
    mounts: [...hostMountsWith(stateDir), ...hostMountsWith(id)],
    paths: pathsUnder(stateDir, id),
  }
}

const nothing = { processes: [], mounts: [], paths: [] }

test('SIGKILL of sandboxd, then a restart on the same state dir leaves nothing behind', T, async (t) => {
  const first = await startSandboxd()
  let second = null
  // One hook, in order: both servers stopped before their shared state dir is removed.
  t.after(async () => {
    await stopSandboxd(first)
    if (second) await stopSandboxd(second)
    rmSync(first.stateDir, { recursive: true, force: true })
  })
  const sbx = await Sandbox.create('base', { ...first.opts, timeoutMs: 300_000 })
  const m = marker(3)
  await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  await sbx.files.write('data.txt', 'some state')
  await waitFor(() => hostProcessesWith(`sleep ${m}`).length > 0, { what: 'the sandbox sleep on the host' })
  assert.ok(pathsUnder(first.stateDir, sbx.sandboxId).length > 0 || readdirSync(first.stateDir).length > 0, 'sandbox state lives under --state-dir')

  // As root the sandbox's network is a veth into sandboxd's gateway: no process of its own that
  // could outlive a crash (the gateway goes with sandboxd); rootless it is pasta, which does.
  const pastas = hostChildren(first.proc.pid, 'pasta')
  if (process.getuid() === 0) assert.deepEqual(pastas, [], 'no pasta as root')
  first.proc.kill('SIGKILL')
  await first.exited
  assert.ok(pastas.every((p) => existsSync(`/proc/${p}`)), 'pastas outlive a crashed sandboxd')

  second = await startSandboxd({ stateDir: first.stateDir })
  // cleanup happens at start-up; poll briefly in case it finishes just after the listening line
  await waitFor(() => JSON.stringify(leftovers(first.stateDir, sbx.sandboxId, [m])) === JSON.stringify(nothing), {
    timeoutMs: 10_000,
    what: 'the crashed run to be cleaned up',
  }).catch(() => {})
  assert.deepEqual(leftovers(first.stateDir, sbx.sandboxId, [m]), nothing)
  assert.deepEqual(pastas.filter((p) => existsSync(`/proc/${p}`)), [], 'the restart stopped the crashed run\'s pastas')
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, second.opts), SandboxNotFoundError)
  // the restarted server works
  const fresh = await Sandbox.create('base', { ...second.opts, timeoutMs: 60_000 })
  assert.equal((await fresh.commands.run('echo after-restart')).stdout, 'after-restart\n')
  await fresh.kill()
})

test('SIGTERM destroys every sandbox and exits 0', T, async (t) => {
  const srv = await startSandboxd()
  t.after(async () => { await stopSandboxd(srv); rmSync(srv.stateDir, { recursive: true, force: true }) })
  const a = await Sandbox.create('base', { ...srv.opts, timeoutMs: 300_000 })
  const b = await Sandbox.create('base', { ...srv.opts, timeoutMs: 300_000 })
  const ma = marker(4)
  const mb = marker(5)
  await a.commands.run(`sleep ${ma}`, { background: true, timeoutMs: 0 })
  await b.commands.run(`sleep ${mb}`, { background: true, timeoutMs: 0, user: 'root' })
  await b.pause()
  await waitFor(() => hostProcessesWith(`sleep ${ma}`).length && hostProcessesWith(`sleep ${mb}`).length, { what: 'sleeps on the host' })

  srv.proc.kill('SIGTERM')
  const r = await settlesWithin(srv.exited, 30_000, 'sandboxd exit after SIGTERM')
  assert.deepEqual(r, { code: 0, signal: null })
  for (const s of [a, b]) {
    assert.deepEqual(leftovers(srv.stateDir, s.sandboxId, [ma, mb]), nothing)
  }
})

test('killing a sandbox ends its command, PTY and watch streams promptly with an error', T, async (t) => {
  const sbx = await newSandbox(t)
  let ticks = 0
  const cmd = await sbx.commands.run('while true; do echo tick; sleep 0.2; done', {
    background: true,
    timeoutMs: 0,
    onStdout: () => ticks++,
  })
  const pty = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: () => {} })
  await sbx.files.makeDir('watched')
  let watchExit
  const watchEnded = new Promise((r) => (watchExit = r))
  const watch = await sbx.files.watchDir('watched', () => {}, { timeoutMs: 0, onExit: (e) => watchExit(e ?? 'clean') })
  await waitFor(() => ticks > 0, { what: 'first tick' })

  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  const cmdResult = await settlesWithin(cmd.wait().then(() => 'resolved', (e) => e), 15_000, 'command stream after kill')
  assert.ok(cmdResult instanceof Error, `command stream should end with an error, got ${cmdResult}`)
  const ptyResult = await settlesWithin(pty.wait().then(() => 'resolved', (e) => e), 15_000, 'pty stream after kill')
  assert.ok(ptyResult instanceof Error, `pty stream should end with an error, got ${ptyResult}`)
  await settlesWithin(watchEnded, 15_000, 'watch stream after kill')
  await watch.stop().catch(() => {})
  await killQuietly(sbx)
})

test('expiry while a command streams ends the stream and removes the sandbox', T, async (t) => {
  const sbx = await newSandbox(t)
  const m = marker(2)
  const cmd = await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  await sbx.setTimeout(2000)
  const r = await settlesWithin(cmd.wait().then(() => 'resolved', (e) => e), 30_000, 'command stream after expiry')
  assert.ok(r instanceof Error, `stream should end with an error, got ${r}`)
  await waitFor(() => hostProcessesWith(`sleep ${m}`).length === 0, { what: 'the sleep to be gone from the host' })
  // A dying sandbox stays listed until its destruction completes: poll for the not-found.
  await waitFor(() => Sandbox.getInfo(sbx.sandboxId).then(() => false, (e) => e instanceof SandboxNotFoundError),
    { what: 'getInfo to report the expired sandbox as not found' })
})

test('the state directory holds nothing but what a fresh sandboxd needs after a clean shutdown', T, async (t) => {
  const srv = await startSandboxd()
  t.after(() => rmSync(srv.stateDir, { recursive: true, force: true }))
  const s = await Sandbox.create('base', { ...srv.opts, timeoutMs: 60_000 })
  await s.files.write('x.txt', 'x')
  await stopSandboxd(srv)
  assert.deepEqual(pathsUnder(srv.stateDir, s.sandboxId), [])
  assert.deepEqual(hostMountsWith(srv.stateDir), [])
  assert.ok(existsSync(srv.stateDir))
  const sandboxesDir = path.join(srv.stateDir, 'sandboxes')
  if (existsSync(sandboxesDir)) assert.deepEqual(readdirSync(sandboxesDir), [])
  const netDir = path.join(srv.stateDir, 'net')
  if (existsSync(netDir)) assert.deepEqual(readdirSync(netDir), [], 'no pasta recorded')
})
