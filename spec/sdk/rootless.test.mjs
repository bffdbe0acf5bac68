// sandboxd as an ordinary user (uid/gid 65534, no groups): it says which isolation features it
// lacks and why, the SDK path works, SIGTERM exits 0 and nothing is left behind.
// Needs root (to become 65534) and a kernel that lets unprivileged users create user namespaces.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import {
  T,
  startSandboxdArgs,
  stopSandboxd,
  settlesWithin,
  waitFor,
  hostProcessesWith,
  hostMountsWith,
  hostUids,
  pathsUnder,
  marker,
  Sandbox,
  SandboxNotFoundError,
} from './helpers.mjs'

const NOBODY = 65534
const AS_NOBODY = ['setpriv', `--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups']

/** Why the test cannot run here, or null. Probes the kernel instead of guessing from sysctls. */
function skipReason() {
  if (process.getuid() !== 0) return 'not running as root: cannot start sandboxd as another user'
  // The namespaces sandboxd's probe clones (user, mount, pid, uts, ipc), as the same user.
  const r = spawnSync(AS_NOBODY[0], [...AS_NOBODY.slice(1), 'unshare', '--user', '--mount', '--pid', '--uts', '--ipc', '--fork', 'true'], {
    encoding: 'utf8',
  })
  if (r.error) throw r.error
  if (r.status !== 0) return `the kernel refuses unprivileged user namespaces: ${(r.stderr || '').trim() || `unshare exited ${r.status}`}`
  return null
}

test('sandboxd as an ordinary user: reports missing isolation, serves the SDK, SIGTERM leaves nothing', T, async (t) => {
  const why = skipReason()
  if (why) return t.skip(why)

  const stateDir = mkdtempSync(path.join(tmpdir(), 'mb-sdk-rootless-'))
  chownSync(stateDir, NOBODY, NOBODY)
  let srv = null
  t.after(async () => {
    await stopSandboxd(srv)
    rmSync(stateDir, { recursive: true, force: true })
  })
  srv = await startSandboxdArgs({ stateDir, wrap: AS_NOBODY, env: { SANDBOXD_WARM_POOL: '0' } })
  assert.deepEqual(hostUids(srv.proc.pid), [NOBODY, NOBODY, NOBODY, NOBODY], 'sandboxd runs as 65534')

  // Start-up report (main.c report_caps + sandbox.c sbx_probe_host): the features it lacks, then why.
  const report = srv.stderr().match(/^sandboxd: isolation features unavailable: (.*?) — (.*)$/m)
  assert.ok(report, `no "isolation features unavailable" line in:\n${srv.log()}`)
  const [, missing, reasons] = report
  assert.match(reasons, /not root: a single id is mapped, so commands for 'user' run as root inside/)
  // An unprivileged user cannot write the host's cgroup v1 controllers: each is named, with its reason.
  const reasonOf = {
    'cgroup pids limit': /no writable cgroup v1 pids controller: no process limit/,
    'cgroup memory limit': /no writable cgroup v1 memory controller: no memory limit/,
    'cgroup CPU limit': /no writable cgroup v1 cpu controller: no CPU limit/,
    'freezer (pause)': /no writable cgroup v1 freezer: pause uses SIGSTOP/,
  }
  for (const [feature, reason] of Object.entries(reasonOf)) {
    assert.ok(missing.split(', ').includes(feature), `"${feature}" not reported unavailable: ${missing}`)
    assert.match(reasons, reason)
  }
  // and what it does have is not reported missing (the probe above just cloned these namespaces)
  for (const ok of ['user namespaces', 'pid namespace', 'network namespace']) assert.ok(!missing.split(', ').includes(ok), `${ok} reported missing: ${missing}`)
  // Internet access needs pasta and a tun device this user may open (a host's /dev/net/tun is often
  // root's alone); without it, a create that asks for it is refused, naming the field and why.
  const internet = !missing.split(', ').includes('internet access')
  if (internet) {
    // pasta runs as this user, so nothing guards the host's own addresses: reported
    assert.ok(missing.split(', ').includes('egress rules (the gateway) and the host address guard'), `no guard reported missing: ${missing}`)
    assert.match(reasons, /not root: pasta runs as you, egress rules \(network.allowOut\/denyOut\) are unavailable, and nothing keeps sandboxes with internet access from the host's non-loopback addresses/)
    // egress rules are refused, naming the field, rather than ignored
    await assert.rejects(Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, network: { denyOut: ['0.0.0.0/0'] } }),
      /501: field 'network\.denyOut': egress rules need sandboxd to run as root/)
  } else {
    assert.match(reasons, /internet access: .+ \(sandboxes need allow_internet_access: false\)/)
    await assert.rejects(Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000 }),
      /^SandboxError: 501: field 'allow_internet_access': true is not available on this host \(.+\); create the sandbox with allowInternetAccess: false$/)
  }

  // The SDK path.
  const sbx = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, allowInternetAccess: internet })
  const r = await sbx.commands.run('echo rootless-ok; id -u')
  assert.equal(r.exitCode, 0)
  assert.match(r.stdout, /^rootless-ok\n\d+\n$/)
  const m = marker(6)
  await sbx.commands.run(`sleep ${m}`, { background: true, timeoutMs: 0 })
  const uids = await waitFor(() => hostProcessesWith(`sleep ${m}`).map((p) => hostUids(p.pid)).find((u) => u), {
    what: 'the sandbox sleep on the host',
  })
  assert.deepEqual(uids, [NOBODY, NOBODY, NOBODY, NOBODY], 'sandbox commands run as 65534 on the host')
  const info = await sbx.files.write('notes/hello.txt', 'hello from a rootless sandbox')
  assert.equal(info.path, '/home/user/notes/hello.txt')
  assert.equal(await sbx.files.read('notes/hello.txt'), 'hello from a rootless sandbox')
  assert.equal((await sbx.commands.run('cat ~/notes/hello.txt')).stdout, 'hello from a rootless sandbox')
  assert.ok(pathsUnder(stateDir, sbx.sandboxId).length > 0, 'the sandbox lives under --state-dir')
  // The port proxy without root: its socket in the sandbox's network namespace comes from a child
  // that joins the sandbox's user namespace first (net.c), and reaches the sandbox's own loopback.
  const h = await sbx.commands.run('python3 -m http.server 8000 -d ~/notes', { background: true, timeoutMs: 0 })
  await h.disconnect()
  const viaProxy = await waitFor(async () => {
    const res = await fetch(`${srv.url}/_sandbox/${sbx.sandboxId}/8000/hello.txt`)
    return res.status === 200 && (await res.text())
  }, { what: 'the rootless sandbox\'s port through the path proxy' })
  assert.equal(viaProxy, 'hello from a rootless sandbox')
  const closed = await fetch(`${srv.url}/_sandbox/${sbx.sandboxId}/8001/`)
  assert.equal(closed.status, 502)
  assert.equal((await closed.json()).message, 'The sandbox is running but port is not open')
  await sbx.kill()
  await waitFor(() => hostProcessesWith(`sleep ${m}`).length === 0, { what: 'the killed sandbox sleep to be gone' })
  await waitFor(() => pathsUnder(stateDir, sbx.sandboxId).length === 0, { what: 'the killed sandbox directory to be gone' })
  await waitFor(() => Sandbox.getInfo(sbx.sandboxId, srv.opts).then(() => false, (e) => e instanceof SandboxNotFoundError), {
    what: 'getInfo to report the killed sandbox as not found',
  })

  // SIGTERM with a live sandbox: exit 0, and nothing of either sandbox remains.
  const live = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, allowInternetAccess: internet })
  const m2 = marker(7)
  await live.commands.run(`sleep ${m2}`, { background: true, timeoutMs: 0 })
  await waitFor(() => hostProcessesWith(`sleep ${m2}`).length > 0, { what: 'the second sleep on the host' })
  srv.proc.kill('SIGTERM')
  assert.deepEqual(await settlesWithin(srv.exited, 30_000, 'sandboxd exit after SIGTERM'), { code: 0, signal: null })
  assert.deepEqual(hostProcessesWith(`sleep ${m2}`), [])
  assert.deepEqual(hostMountsWith(stateDir), [])
  for (const id of [sbx.sandboxId, live.sandboxId]) assert.deepEqual(pathsUnder(stateDir, id), [], `leftovers of ${id}`)
  const sandboxesDir = path.join(stateDir, 'sandboxes')
  if (existsSync(sandboxesDir)) assert.deepEqual(readdirSync(sandboxesDir), [])
})
