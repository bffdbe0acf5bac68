// Process conformance: commands.run/list/kill/connect/sendStdin/closeStdin through the SDK.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, newSandbox, waitFor, uniq, CommandExitError, InvalidArgumentError, SandboxError, TimeoutError } from './helpers.mjs'

test('run: stdout, stderr and exit code 0', T, async (t) => {
  const sbx = await newSandbox(t)
  const r = await sbx.commands.run('echo "Hello, World!"')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'Hello, World!\n')
  assert.equal(r.stderr, '')
  const e = await sbx.commands.run('echo to-err >&2; printf "a\\nb\\n"')
  assert.equal(e.stderr, 'to-err\n')
  assert.equal(e.stdout, 'a\nb\n')
  const special = await sbx.commands.run(`printf '%s' '!@#$%^&*()_+ "q" \\ é ✓'`)
  assert.equal(special.stdout, '!@#$%^&*()_+ "q" \\ é ✓')
})

test('run: callbacks receive the output; large output arrives intact', T, async (t) => {
  const sbx = await newSandbox(t)
  let out = ''
  let err = ''
  const r = await sbx.commands.run('for i in 1 2 3; do echo out$i; echo err$i >&2; done', {
    onStdout: (d) => (out += d),
    onStderr: (d) => (err += d),
  })
  assert.equal(out, 'out1\nout2\nout3\n')
  assert.equal(err, 'err1\nerr2\nerr3\n')
  assert.equal(r.stdout, out)
  const big = await sbx.commands.run("head -c 1000000 /dev/zero | tr '\\0' a")
  assert.equal(big.stdout.length, 1_000_000)
  assert.ok(/^a+$/.test(big.stdout))
})

test('run: non-zero exit rejects with CommandExitError carrying exitCode, stdout and stderr', T, async (t) => {
  const sbx = await newSandbox(t)
  await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, `got ${e?.constructor?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stdout, 'partial\n')
    assert.equal(e.stderr, 'bad\n')
    return true
  })
  await assert.rejects(sbx.commands.run('false'), (e) => e instanceof CommandExitError && e.exitCode === 1)
})

test('envs: sandbox-wide envVars and per-command envs (which do not leak)', T, async (t) => {
  const sbx = await newSandbox(t, { envs: { MB_GLOBAL: 'g-value', MB_BOTH: 'from-global' } })
  assert.equal((await sbx.commands.run('echo "$MB_GLOBAL"')).stdout, 'g-value\n')
  assert.equal((await sbx.commands.run('echo "$MB_LOCAL"', { envs: { MB_LOCAL: 'l-value' } })).stdout, 'l-value\n')
  assert.equal((await sbx.commands.run('echo "[$MB_LOCAL]"')).stdout, '[]\n')
  assert.equal((await sbx.commands.run('echo "$MB_BOTH"', { envs: { MB_BOTH: 'from-cmd' } })).stdout, 'from-cmd\n')
  assert.equal((await sbx.commands.run('echo "$MB_GLOBAL"', { user: 'root' })).stdout, 'g-value\n')
  const py = await sbx.commands.run(`python3 -c "import os; print(os.environ['MB_PY'])"`, { envs: { MB_PY: 'py-ok' } })
  assert.equal(py.stdout, 'py-ok\n')
})

test('user and cwd: default user/home, root on request, explicit cwd, invalid cwd → error', T, async (t) => {
  const sbx = await newSandbox(t)
  assert.equal((await sbx.commands.run('whoami; pwd; echo $HOME')).stdout, 'user\n/home/user\n/home/user\n')
  assert.equal((await sbx.commands.run('whoami; echo $HOME', { user: 'root' })).stdout, 'root\n/root\n')
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  await sbx.files.makeDir('sub/dir')
  assert.equal((await sbx.commands.run('pwd', { cwd: 'sub/dir' })).stdout, '/home/user/sub/dir\n')
  assert.equal((await sbx.commands.run('umask')).stdout.trim(), '0022')
  await assert.rejects(sbx.commands.run('pwd', { cwd: '/definitely/not/here' }), InvalidArgumentError)
})

test('background + kill: the process is gone afterwards (kill -0 fails); unknown pid → false', T, async (t) => {
  const sbx = await newSandbox(t)
  const h = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  assert.ok(Number.isInteger(h.pid) && h.pid > 0)
  await sbx.commands.run(`kill -0 ${h.pid}`) // alive and visible under its real pid
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError || e instanceof SandboxError)
  await assert.rejects(sbx.commands.run(`kill -0 ${h.pid}`), CommandExitError)
  assert.equal(await sbx.commands.kill(h.pid), false)
  assert.equal(await sbx.commands.kill(999999), false)
  // kill through the handle
  const h2 = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  assert.equal(await h2.kill(), true)
  await assert.rejects(h2.wait())
})

test('list shows running processes with their config', T, async (t) => {
  const sbx = await newSandbox(t)
  const tag = uniq('L')
  const a = await sbx.commands.run(`sleep 601 # ${tag}a`, { background: true, timeoutMs: 0, envs: { MB_L: '1' }, cwd: '/tmp' })
  const b = await sbx.commands.run(`sleep 602 # ${tag}b`, { background: true, timeoutMs: 0 })
  try {
    const procs = await sbx.commands.list()
    const pa = procs.find((p) => p.pid === a.pid)
    const pb = procs.find((p) => p.pid === b.pid)
    assert.ok(pa && pb, `both pids listed: ${JSON.stringify(procs)}`)
    assert.equal(pa.cmd, '/bin/bash')
    assert.deepEqual(pa.args, ['-l', '-c', `sleep 601 # ${tag}a`])
    assert.equal(pa.envs.MB_L, '1')
    assert.equal(pa.cwd, '/tmp')
    await a.kill()
    await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === a.pid), { what: 'killed process to leave the list' })
  } finally {
    await a.kill().catch(() => {})
    await b.kill().catch(() => {})
  }
})

test('connect to a running pid receives its later output and end; unknown pid rejects', T, async (t) => {
  const sbx = await newSandbox(t)
  const h = await sbx.commands.run('read line; echo "got:$line"; exit 4', { background: true, stdin: true, timeoutMs: 0 })
  let seen = ''
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => (seen += d), timeoutMs: 0 })
  assert.equal(c.pid, h.pid)
  await sbx.commands.sendStdin(h.pid, 'ping\n')
  await assert.rejects(c.wait(), (e) => e instanceof CommandExitError && e.exitCode === 4)
  assert.equal(seen, 'got:ping\n')
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === 4 && e.stdout === 'got:ping\n')
  await assert.rejects(sbx.commands.connect(999999), SandboxError)
})

test('sendStdin (string and bytes) and closeStdin: cat echoes everything and exits 0', T, async (t) => {
  const sbx = await newSandbox(t)
  const h = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 })
  await sbx.commands.sendStdin(h.pid, 'hello\n')
  await h.sendStdin(new TextEncoder().encode('bytes ✓\n'))
  await sbx.commands.sendStdin(h.pid, '')
  await sbx.commands.sendStdin(h.pid, 'multi\nline\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\nbytes ✓\nmulti\nline\n')
})

test('stdin is /dev/null unless requested: cat ends at once and sendStdin to it fails', T, async (t) => {
  const sbx = await newSandbox(t)
  const r = await sbx.commands.run('cat; echo done')
  assert.equal(r.stdout, 'done\n')
  const h = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  try {
    await assert.rejects(sbx.commands.sendStdin(h.pid, 'x'), SandboxError)
  } finally {
    await h.kill()
  }
})

test('commands start with default signal dispositions and an empty mask (yes | head; Ctrl-C works)', T, async (t) => {
  const sbx = await newSandbox(t)
  const r = await sbx.commands.run("grep -E '^Sig(Ign|Blk)' /proc/self/status; yes | head -1")
  assert.equal(r.stdout, 'SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\ny\n')
  assert.equal(r.stderr, '')
})

test('timeoutMs: a command outliving it rejects with TimeoutError and is killed', T, async (t) => {
  const sbx = await newSandbox(t)
  // a unique duration marks the command in commands.list()
  const tag = `30.${Math.floor(Math.random() * 1e6)}`
  await assert.rejects(sbx.commands.run(`sleep ${tag}; true`, { timeoutMs: 1000 }), TimeoutError)
  await waitFor(async () => !(await sbx.commands.list()).some((p) => p.args.join(' ').includes(tag)), {
    what: 'the timed-out command to be killed',
  })
  // a command finishing inside its timeout is fine
  assert.equal((await sbx.commands.run('echo in-time', { timeoutMs: 20_000 })).stdout, 'in-time\n')
})
