// Isolation: what a sandbox can see and change of the host, checked from inside (commands, files API)
// and from the host (/proc, file hashes).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdirSync, writeFileSync, rmSync, existsSync, readFileSync } from 'node:fs'
import {
  T,
  newSandbox,
  uniq,
  waitFor,
  sha256File,
  hostProcessesWith,
  hostUids,
  startSandboxd,
  stopSandboxd,
  killQuietly,
  marker,
  sh,
  Sandbox,
} from './helpers.mjs'

/** Host files with a unique secret, removed after the test. */
function hostSecrets(t) {
  const name = uniq('mb-iso-')
  const secret = 'HOST-SECRET-' + uniq('') + 'x'.repeat(12345)
  const files = [`/root/${name}.txt`, `/work/${name}/secret.txt`, `/tmp/${name}.txt`]
  mkdirSync(`/work/${name}`, { recursive: true })
  for (const f of files) writeFileSync(f, secret)
  t.after(() => {
    for (const f of files) rmSync(f, { force: true })
    rmSync(`/work/${name}`, { recursive: true, force: true })
  })
  return { name, secret, files }
}

test('host private files are invisible from inside (commands and files API, user and root)', T, async (t) => {
  const sbx = await newSandbox(t)
  const { name, secret, files } = hostSecrets(t)
  for (const user of ['user', 'root']) {
    for (const f of files) {
      const r = await sh(sbx, `cat ${f}`, { user })
      assert.notEqual(r.code, 0, `${user} can read ${f}`)
      assert.ok(!r.out.includes('HOST-SECRET'))
      assert.equal(await sbx.files.exists(f, { user }), false, `${f} visible to ${user} through Stat`)
      await assert.rejects(sbx.files.read(f, { user }))
    }
    const ls = await sh(sbx, 'ls -a /root /work /tmp /home 2>&1; find / \\( -path /proc -o -path /sys \\) -prune -o -name "mb-iso-*" -print 2>/dev/null', { user })
    assert.ok(!ls.out.includes(name), `${user} sees ${name}: ${ls.out}`)
  }
  assert.ok(secret.length > 12345)
  // /work (the repository's host tree) is not there at all
  const work = await sh(sbx, 'ls /work/main 2>&1', { user: 'root' })
  assert.notEqual(work.code, 0)
})

test('symlinks to host paths do not reach the host through /files, Stat or ListDir', T, async (t) => {
  const sbx = await newSandbox(t)
  const { name, secret } = hostSecrets(t)
  await sbx.commands.run(
    [
      `ln -s /root/${name}.txt /home/user/abs-link`,
      `ln -s ../../../../../../../root/${name}.txt /home/user/rel-link`,
      `ln -s /work/${name} /home/user/dir-link`,
      `ln -s /tmp/${name}.txt /home/user/tmp-link`,
      `ln -s /root /home/user/root-link`,
    ].join(' && '),
  )
  for (const link of ['abs-link', 'rel-link', 'tmp-link', 'dir-link/secret.txt', 'root-link/' + name + '.txt']) {
    for (const user of ['user', 'root']) {
      let content = null
      try {
        content = await sbx.files.read(link, { user })
      } catch {
        /* refusing is fine */
      }
      assert.ok(content === null || !content.includes('HOST-SECRET'), `read ${link} as ${user} reached the host`)
      let info = null
      try {
        info = await sbx.files.getInfo(link, { user })
      } catch {
        /* refusing is fine */
      }
      assert.ok(info === null || info.size !== secret.length, `Stat ${link} as ${user} reports the host file (size ${info?.size})`)
    }
  }
  for (const dir of ['dir-link', 'root-link']) {
    let entries = []
    try {
      entries = await sbx.files.list(dir, { user: 'root', depth: 2 })
    } catch {
      /* refusing is fine */
    }
    assert.ok(!entries.some((e) => e.name.includes(name) || e.name === 'secret.txt'), `list ${dir} shows host entries`)
  }
  // writing through a link must not create or change host files
  const before = sha256File(`/root/${name}.txt`)
  try {
    await sbx.files.write('abs-link', 'overwritten from inside')
  } catch {
    /* refusing is fine */
  }
  try {
    await sbx.files.write('tmp-link', 'overwritten from inside', { user: 'root' })
  } catch {
    /* refusing is fine */
  }
  try {
    await sbx.files.write('root-link/created-through-link.txt', 'new', { user: 'root' })
  } catch {
    /* refusing is fine */
  }
  assert.equal(sha256File(`/root/${name}.txt`), before)
  assert.equal(readFileSync(`/tmp/${name}.txt`, 'utf8'), secret)
  assert.equal(existsSync('/root/created-through-link.txt'), false)
})

test('root inside cannot change host files (and each sandbox has its own copy-on-write root)', T, async (t) => {
  const sbx = await newSandbox(t)
  const other = await newSandbox(t)
  const host = sha256File('/usr/bin/env')
  const hostPasswd = sha256File('/etc/passwd')
  await sh(sbx, 'rm -f /usr/bin/env; echo hacked > /usr/bin/env; echo pwned >> /etc/passwd; rm -rf /usr/lib/x86_64-linux-gnu/libc.so.6; true', {
    user: 'root',
  })
  try {
    await sbx.files.write('/usr/bin/env', 'hacked via files api', { user: 'root' })
  } catch {
    /* refusing is fine */
  }
  assert.equal(sha256File('/usr/bin/env'), host, 'host /usr/bin/env changed')
  assert.equal(sha256File('/etc/passwd'), hostPasswd, 'host /etc/passwd changed')
  // the host binary still works
  const check = spawn('/usr/bin/env', ['true'])
  assert.equal(await new Promise((r) => check.on('exit', r)), 0)
  // another sandbox still sees the original
  const sum = (await other.commands.run('sha256sum /usr/bin/env')).stdout.split(' ')[0]
  assert.equal(sum, host)
  // writes by user to system paths fail outright
  assert.notEqual((await sh(other, 'echo x > /usr/bin/mb-test-file')).code, 0)
  // mounting or escaping via privileged operations does not touch the host either
  await sh(sbx, 'mount -t tmpfs none /usr 2>&1; mount -o remount,rw / 2>&1; true', { user: 'root' })
  assert.equal(sha256File('/usr/bin/env'), host)
})

test('ps inside shows only the sandbox processes', T, async (t) => {
  const sbx = await newSandbox(t)
  const other = await newSandbox(t)
  const hostMarker = marker(7)
  const hostSleep = spawn('sleep', [hostMarker], { stdio: 'ignore' })
  t.after(() => hostSleep.kill('SIGKILL'))
  const otherMarker = marker(8)
  await other.commands.run(`sleep ${otherMarker}`, { background: true, timeoutMs: 0 })
  const ownMarker = marker(9)
  await sbx.commands.run(`sleep ${ownMarker}`, { background: true, timeoutMs: 0 })
  await waitFor(() => hostProcessesWith(`sleep ${otherMarker}`).length > 0, { what: 'other sandbox sleep on the host' })
  for (const user of ['user', 'root']) {
    const ps = (await sbx.commands.run('ps -eo pid,args', { user })).stdout
    assert.ok(ps.includes(`sleep ${ownMarker}`), `own process visible to ${user}`)
    assert.ok(!ps.includes(hostMarker), `host process visible to ${user}:\n${ps}`)
    assert.ok(!ps.includes(otherMarker), `other sandbox's process visible to ${user}:\n${ps}`)
    assert.ok(!ps.includes('--test-reporter') && !ps.includes('--listen 127.0.0.1'), `host processes (test runner, sandboxd) visible to ${user}:\n${ps}`)
  }
})

test('the API key never appears inside', T, async (t) => {
  const sbx = await newSandbox(t)
  const key = process.env.E2B_API_KEY
  for (const user of ['user', 'root']) {
    const r = await sh(sbx, 'env; cat /proc/1/environ /proc/1/cmdline /proc/self/environ 2>/dev/null | tr "\\0" "\\n"; ps -eo args', { user })
    assert.ok(!r.out.includes(key), `API key visible to ${user}`)
  }
})

test('host environment of sandboxd never appears inside', T, async (t) => {
  const envMark = uniq('HOSTENV')
  const srv = await startSandboxd({ env: { MB_HOST_SECRET_ENV: envMark } })
  t.after(async () => {
    await stopSandboxd(srv)
    rmSync(srv.stateDir, { recursive: true, force: true })
  })
  const sbx = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000 })
  t.after(() => killQuietly(sbx))
  for (const user of ['user', 'root']) {
    const r = await sh(sbx, 'env; cat /proc/1/environ 2>/dev/null | tr "\\0" "\\n"; for p in /proc/[0-9]*; do tr "\\0" "\\n" < $p/environ; done 2>/dev/null', { user })
    assert.ok(!r.out.includes(envMark), `host env visible to ${user}`)
    assert.ok(!r.out.includes('MB_HOST_SECRET_ENV'), `host env name visible to ${user}`)
    assert.ok(!r.out.includes(srv.key), `API key visible to ${user}`)
  }
})

test('uid inside: user is 1000, root is 0 but maps to an unprivileged host uid', T, async (t) => {
  const sbx = await newSandbox(t)
  assert.equal((await sbx.commands.run('id -u; id -un; id -g')).stdout, '1000\nuser\n1000\n')
  assert.equal((await sbx.commands.run('id -u; id -un', { user: 'root' })).stdout, '0\nroot\n')
  const mk = marker(6)
  await sbx.commands.run(`sleep ${mk}`, { background: true, timeoutMs: 0, user: 'root' })
  const procs = await waitFor(() => {
    const p = hostProcessesWith(`sleep ${mk}`).map((x) => ({ ...x, uids: hostUids(x.pid) })).filter((x) => x.uids)
    return p.length ? p : null
  }, { what: 'root sleep on the host' })
  for (const p of procs) assert.ok(p.uids.every((u) => u !== 0), `sandbox root runs as host uid ${p.uids.join(',')}`)
  const map = (await sbx.commands.run('cat /proc/self/uid_map', { user: 'root' })).stdout.trim().split(/\s+/).map(Number)
  assert.ok(!(map[0] === 0 && map[1] === 0), `uid 0 inside is uid 0 outside: ${map.join(' ')}`)
})

test('allowInternetAccess false: loopback works, and nothing gets out of the sandbox\'s link', T, async (t) => {
  const sbx = await newSandbox(t, { allowInternetAccess: false })
  // as root a link into sandboxd's gateway (where nothing is let out), without root loopback only
  assert.match((await sbx.commands.run('ls /sys/class/net')).stdout, /^(eth0\n)?lo\n$/)
  const out = await sbx.commands.run(
    `python3 -c "import socket\ntry:\n s=socket.create_connection(('192.0.2.1',80),timeout=3); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(10) or 'EOF')\nexcept Exception as e: print(type(e).__name__)"`,
  )
  assert.match(out.stdout, /^(ConnectionResetError|ConnectionRefusedError|OSError|TimeoutError|EOF)\n$/)
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  // loopback itself works inside
  const r = await sbx.commands.run(
    `python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); c=socket.create_connection(s.getsockname()); print('lo-ok')"`,
  )
  assert.equal(r.stdout, 'lo-ok\n')
})

test('root inside cannot ptrace pid 1: the attempt fails at once and every later command runs', T, async (t) => {
  const sbx = await newSandbox(t)
  // PTRACE_ATTACH (16) to the init: EPERM (1). Before, it stopped pid 1 and every later command
  // hit its deadline.
  const attach = await sh(sbx, `python3 -c "import ctypes; l=ctypes.CDLL(None, use_errno=True); print(l.ptrace(16, 1, 0, 0), ctypes.get_errno())"`, { user: 'root' })
  assert.equal(attach.out.trim(), '-1 1')
  const strace = await sh(sbx, 'strace -p 1 2>&1', { user: 'root', timeoutMs: 20_000 })
  assert.notEqual(strace.code, 0)
  assert.match(strace.out, /Operation not permitted/)
  // nor through /proc: its memory, descriptors and environment stay closed
  for (const f of ['/proc/1/mem', '/proc/1/environ', '/proc/1/fd/0'])
    assert.notEqual((await sh(sbx, `head -c1 ${f}`, { user: 'root' })).code, 0, `${f} readable`)
  assert.equal((await sbx.commands.run('echo alive', { timeoutMs: 20_000 })).stdout, 'alive\n')
  // root inside still traces its own programs
  assert.equal((await sh(sbx, 'strace -f -o /dev/null true; echo rc=$?', { user: 'root' })).out.trim(), 'rc=0')
  // and what `ps` shows of pid 1 is unchanged
  assert.equal((await sbx.commands.run('cat /proc/1/comm')).stdout, 'sandboxd-init\n')
})
