// Nothing secret on a command line (issue 19): while a real run goes on, tests/secrets/scan.py
// reads the command line of every process on the machine (and the environment of every process
// another user could read) over and over; at the end no API key, envd access token or URL
// signature of that run may be in any of them. First the scanner proves it catches a key on a
// command line (and, as root, in an environment another user can read); then moonbox with its
// embedded sandboxd runs a composition that spawns commands, terminals and file operations; then
// the CLI drives the per-user background sandboxd (moonbox sandboxd); then the official SDK
// drives a sandboxd of its own; last, sandboxd's own ways to take a key.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Sandbox, startSandboxd, stopSandboxd, waitFor, sandboxdBinary } from '../../spec/sdk/helpers.mjs'
import { passKey } from '../../spec/support/sandboxd_key.mjs'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const ROOT = path.join(HERE, '..', '..')
const BUILD = process.env.MB_BUILD_DIR || path.join(ROOT, 'build')
const ROOT_USER = process.getuid() === 0
const T = { timeout: 240_000 }
const BOUND = { timeoutMs: 120_000, intervalMs: 20 }   // a hang becomes a failure; nothing is timed

/** The scanner (scan.py) as a child: watch(), secret(), then finish() → { code, report }. */
function startScanner() {
  const proc = spawn('python3', [path.join(HERE, 'scan.py')], { stdio: ['pipe', 'pipe', 'inherit'], env: { PATH: process.env.PATH } })
  let out = ''
  proc.stdout.on('data', (d) => (out += d))
  const exited = new Promise((r) => proc.on('exit', (code, sig) => r(code ?? sig)))
  const scans = () => Number([...out.matchAll(/^scans (\d+)$/gm)].pop()?.[1] ?? 0)
  const seen = (label) => new RegExp(`^seen ${label} `, 'm').test(out)
  return {
    watch: (label, text) => proc.stdin.write(`watch ${label} ${text}\n`),
    secret: (label, value) => { assert.ok(value && value.length >= 16, `secret ${label} is real`); proc.stdin.write(`secret ${label} ${value}\n`) },
    /** Every label seen, then `more` further full scans of the machine while the run goes on
     * (so a process that lives on is seen in more than `more` scans). */
    async sawAll(labels, more = 100) {
      await waitFor(() => labels.every(seen), { ...BOUND, what: `the scanner to see ${labels.join(', ')} (it saw: ${out.match(/^seen .*$/gm)})` })
      const at = Math.max(...labels.map((l) => Number(out.match(new RegExp(`^seen ${l} \\d+ (\\d+)$`, 'm'))[1])))
      await waitFor(() => scans() >= at + more, { ...BOUND, what: `${more} more scans` })
    },
    async finish() {
      proc.stdin.end('end\n')
      const code = await exited
      const line = out.match(/^report (.*)$/m)
      assert.ok(line, `scanner report missing: ${out}`)
      return { code, report: JSON.parse(line[1]) }
    },
    kill: () => proc.kill('SIGKILL'),
  }
}

/** A long-lived child of this test whose command line holds `marker` (sh does not exec the last
 * command of `sleep 600; :`). */
function child(marker, { argv = [], env = {}, wrap = [] } = {}) {
  const cmd = [...wrap, 'sh', '-c', 'sleep 600; :', marker, ...argv]
  return spawn(cmd[0], cmd.slice(1), { stdio: 'ignore', env: { PATH: process.env.PATH, ...env } })
}

test('the scanner catches a key on a command line, and in an environment another user can read', T, async () => {
  const inArgv = 'e2b_' + randomBytes(20).toString('hex')
  const inEnv = randomBytes(16).toString('hex')
  const rootOnly = randomBytes(16).toString('hex')
  const sc = startScanner()
  const kids = []
  try {
    sc.secret('argv-key', inArgv)
    sc.secret('env-token', inEnv)
    sc.secret('root-env', rootOnly)
    const m = randomBytes(4).toString('hex')
    sc.watch('leaky-argv', `mb-leaky-argv-${m}`)
    kids.push(child(`mb-leaky-argv-${m}`, { argv: [`--api-key=${inArgv}`] }))
    // only the run's own user (and root) may read this environment: not a leak
    sc.watch('own-env', `mb-own-env-${m}`)
    kids.push(child(`mb-own-env-${m}`, { env: { TOKEN: rootOnly } }))
    const labels = ['leaky-argv', 'own-env']
    if (ROOT_USER) {
      // a process of another user (nobody): that user reads its environment
      sc.watch('leaky-env', `mb-leaky-env-${m}`)
      kids.push(child(`mb-leaky-env-${m}`, { env: { TOKEN: inEnv }, wrap: ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] }))
      labels.push('leaky-env')
    }
    await sc.sawAll(labels, 5)
    const { code, report } = await sc.finish()
    assert.equal(code, 1, 'the scanner fails the run')
    assert.ok(report.leaks.some((l) => kids.some((k) => k.pid === l.pid)), 'found in the leaky children themselves')
    // (the sleep under the leaky sh inherits its environment: one more leak of the same kind)
    const found = [...new Set(report.leaks.map((l) => `${l.label} in ${l.where}`))].sort()
    const want = ['argv-key in cmdline', ...(ROOT_USER ? ['env-token in environ'] : [])]
    assert.deepEqual(found, want, JSON.stringify(report.leaks))
    assert.match(report.leaks.find((l) => l.where === 'cmdline').text, /--api-key=<argv-key>/, 'the report names the secret, not its value')
    assert.ok(!JSON.stringify(report).includes(inArgv), 'the report never repeats a secret')
  } finally {
    for (const k of kids) k.kill('SIGKILL')
    sc.kill()
  }
})

test('moonbox with its embedded sandboxd: no key or token of the run on any command line', T, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mb-secrets-'))
  const go = path.join(dir, 'go')
  const sc = startScanner()
  const moonbox = path.join(BUILD, 'bin', 'moonbox')
  const compose = path.join(HERE, 'compose.lua')
  let mb
  try {
    sc.watch('moonbox', `${moonbox} run ${compose}`)
    // the launcher's sandboxd: its key is on fd 4
    sc.watch('sandboxd', `${path.join(BUILD, 'bin', 'sandboxd')} --listen 127.0.0.1:0 --api-key-fd 4 --state-dir /tmp/moonbox-sandboxd.`)
    sc.watch('init', 'sandboxd-init ')
    // pasta only links a rootless sandboxd's sandboxes; as root each has a veth pair
    if (!ROOT_USER) sc.watch('pasta', 'pasta --quiet --foreground')
    sc.watch('mbwrap', '/mbwrap run ')
    sc.watch('command', 'sh -c sleep 600; : mb-secrets-command')
    sc.watch('terminal', 'sh -c sleep 600; : mb-secrets-terminal')
    // E2B_* unset: moonbox starts its own sandboxd (the test runner's are for other suites)
    const env = { PATH: process.env.PATH, HOME: process.env.HOME ?? '/root', MB_BUILD_DIR: BUILD, MB_SECRETS_GO: go }
    mb = spawn(moonbox, ['run', compose, path.join(HERE, 'run.lua')], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    mb.stdout.on('data', (d) => (out += d))
    mb.stderr.on('data', (d) => (out += d))
    const exited = new Promise((r) => mb.on('exit', (code, sig) => r(code ?? sig)))
    await waitFor(() => /^READY$/m.test(out) || mb.exitCode !== null, { ...BOUND, what: 'the run to be ready' })
    assert.match(out, /^READY$/m, out)
    const apiKey = out.match(/^SECRET api-key (e2b_[0-9a-f]{40})$/m)?.[1]
    const token = out.match(/^SECRET envd-token (\S+)$/m)?.[1]
    assert.ok(apiKey && token, `the run's secrets: ${out}`)
    sc.secret('api-key', apiKey)
    sc.secret('envd-token', token)
    await sc.sawAll(['moonbox', 'sandboxd', 'init', ...(ROOT_USER ? [] : ['pasta']), 'mbwrap', 'command', 'terminal'])
    writeFileSync(go, '')
    assert.equal(await exited, 0, `moonbox run: ${out}`)
    assert.match(out, /^DONE \d+$/m)
    const { code, report } = await sc.finish()
    assert.deepEqual(report.leaks, [], 'secrets found')
    assert.equal(code, 0)
    assert.deepEqual(report.secrets, ['api-key', 'envd-token'])
    for (const l of ['sandboxd', 'command', 'terminal']) assert.ok(report.seen[l] >= 100, `${l} seen in ${report.seen[l]} scans`)
  } finally {
    if (mb && mb.exitCode === null) mb.kill('SIGTERM')
    sc.kill()
    rmSync(dir, { recursive: true, force: true })
  }
})

test('moonbox sandboxd (the per-user background one) and the CLI on it: no key or token on any command line', T, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mb-secrets-bg-'))
  const moonbox = path.join(BUILD, 'bin', 'moonbox')
  // E2B_* unset: `moonbox sandbox` uses the background sandboxd, started by the first command
  const env = { PATH: process.env.PATH, HOME: process.env.HOME ?? '/root', MB_BUILD_DIR: BUILD, XDG_RUNTIME_DIR: dir }
  /** `moonbox ARGS` → { code, out, err } */
  const mb = (args) => new Promise((resolve) => {
    const p = spawn(moonbox, args, { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = '', err = ''
    p.stdout.on('data', (d) => (out += d))
    p.stderr.on('data', (d) => (err += d))
    p.on('exit', (code) => resolve({ code, out, err }))
  })
  const state = path.join(dir, 'moonbox', 'sandboxd')
  const sc = startScanner()
  try {
    sc.watch('sandboxd', `${path.join(BUILD, 'bin', 'sandboxd')} --listen 127.0.0.1:0 --api-key-file ${state}/api-key`)
    sc.watch('init', 'sandboxd-init ')
    const m = randomBytes(4).toString('hex')
    sc.watch('command', `sleep 600; : mb-secrets-bg-${m}`)
    let r = await mb(['sandbox', 'create', '--timeout', '5m', '--json'])
    assert.equal(r.code, 0, r.err)
    assert.match(r.err, /^moonbox: started a local sandboxd \(moonbox sandboxd stop ends it\)\n$/)
    const id = JSON.parse(r.out).sandboxId
    const key = readFileSync(path.join(state, 'api-key'), 'utf8').trim()
    assert.match(key, /^e2b_[0-9a-f]{40}$/)
    sc.secret('api-key', key)
    r = await mb(['sandbox', 'exec', id, '-b', '--', 'sh', '-c', `sleep 600; : mb-secrets-bg-${m}`])
    assert.equal(r.code, 0, r.err)
    // more commands while the scanner looks: each one reads the key from its file
    let churning = true
    const churn = (async () => {
      for (let n = 0; churning; n++) {
        const c = await mb(['sandbox', 'exec', id, '--', 'echo', `churn-${n}`])
        assert.equal(c.code, 0, c.err)
        assert.equal((await mb(['sandboxd', 'status'])).code, 0)
      }
    })()
    await sc.sawAll(['sandboxd', 'init', 'command'])
    churning = false
    await churn
    r = await mb(['sandboxd', 'stop'])
    assert.equal(r.code, 0, r.err)
    assert.match(r.out, /^stopped sandboxd \(pid \d+\): 1 sandbox destroyed/)
    const { code, report } = await sc.finish()
    assert.deepEqual(report.leaks, [], 'secrets found')
    assert.equal(code, 0)
    assert.deepEqual(report.secrets, ['api-key'])
    for (const l of ['sandboxd', 'command']) assert.ok(report.seen[l] >= 100, `${l} seen in ${report.seen[l]} scans`)
  } finally {
    await mb(['sandboxd', 'stop'])
    sc.kill()
    rmSync(dir, { recursive: true, force: true })
  }
})

test('sandboxd driven by the SDK: no key, envd token or URL signature on any command line', T, async () => {
  const key = 'e2b_' + randomBytes(20).toString('hex')
  const sc = startScanner()
  let srv, sbx
  try {
    sc.secret('api-key', key)
    srv = await startSandboxd({ key })
    sc.watch('sandboxd', `${sandboxdBinary()} --listen 127.0.0.1:${srv.port} --api-key-fd 3`)
    sc.watch('init', 'sandboxd-init ')
    sbx = await Sandbox.create('base', { ...srv.opts, timeoutMs: 180_000, allowInternetAccess: true })
    assert.ok(sbx.envdAccessToken, 'sandboxd makes every sandbox secure')
    sc.secret('envd-token', sbx.envdAccessToken)
    const m = randomBytes(4).toString('hex')
    sc.watch('command', `sleep 600; : mb-secrets-sdk-${m}`)
    await sbx.commands.run(`sleep 600; : mb-secrets-sdk-${m}`, { background: true, timeoutMs: 0 })
    await sbx.files.write('/home/user/signed.txt', 'signed')
    const signatures = new Set()
    const sigOf = (u) => new URL(u).searchParams.get('signature')
    const down = await sbx.downloadUrl('/home/user/signed.txt', { useSignatureExpiration: 600 })
    const up = await sbx.uploadUrl('/home/user/up.txt', { useSignatureExpiration: 600 })
    for (const u of [down, up]) signatures.add(sigOf(u))
    let i = 0
    for (const s of signatures) { assert.ok(s, 'signed URLs'); sc.secret(`signature-${i++}`, s) }
    // the run goes on while the scanner looks: commands, files, signed downloads
    const churn = (async () => {
      for (let n = 0; !sc.done; n++) {
        await sbx.commands.run(`echo churn-${n}`)
        await sbx.files.write(`/home/user/churn-${n % 4}.txt`, `n=${n}`)
        assert.equal(await (await fetch(down)).text(), 'signed')
      }
    })()
    await sc.sawAll(['sandboxd', 'init', 'command'])
    sc.done = true
    await churn
    await sbx.kill()
    sbx = null
    await stopSandboxd(srv)
    srv = null
    const { code, report } = await sc.finish()
    assert.deepEqual(report.leaks, [], 'secrets found')
    assert.equal(code, 0)
    assert.deepEqual(report.secrets, ['api-key', 'envd-token', ...[...signatures].map((_, j) => `signature-${j}`)])
    for (const l of ['sandboxd', 'command']) assert.ok(report.seen[l] >= 100, `${l} seen in ${report.seen[l]} scans`)
  } finally {
    if (sbx) await sbx.kill().catch(() => {})
    if (srv) await stopSandboxd(srv)
    sc.kill()
  }
})


test('sandboxd takes its key from a private file or a descriptor, never from its command line', T, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mb-secrets-key-'))
  const key = 'e2b_' + randomBytes(20).toString('hex')
  const bin = sandboxdBinary()
  const env = { ...process.env, SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' }
  /** sandboxd with args (and `input` on its fd 3): → { code, out } once it exits, or its URL. */
  const run = (args, input) => new Promise((resolve) => {
    const p = spawn(bin, ['--listen', '127.0.0.1:0', '--state-dir', path.join(dir, 'state'), ...args],
      { env, stdio: ['ignore', 'pipe', 'pipe', 'pipe'] })
    passKey(p, input ?? '')
    let out = ''
    const take = (d) => {
      out += d
      const m = out.match(/sandboxd listening on (http:\/\/\S+)/)
      if (m) resolve({ url: m[1], proc: p, out })
    }
    p.stdout.on('data', take)
    p.stderr.on('data', take)
    p.on('exit', (code) => resolve({ code, out }))
  })
  const stop = async (r) => { r.proc.kill('SIGTERM'); await new Promise((ok) => r.proc.on('exit', ok)) }
  const list = (url, k) => fetch(`${url}/sandboxes`, { headers: { 'X-API-Key': k } }).then((r) => r.status)
  try {
    let r = await run(['--api-key', 'e2b_' + randomBytes(20).toString('hex')])   // a throwaway: it is on a command line
    assert.equal(r.code, 2, r.out)
    assert.match(r.out, /--api-key is no longer accepted: a key on the command line is readable by every local user/)
    assert.match(r.out, /--api-key-file FILE/)
    const file = path.join(dir, 'key')
    writeFileSync(file, key + '\n', { mode: 0o600 })
    chmodSync(file, 0o640)
    r = await run(['--api-key-file', file])
    assert.equal(r.code, 2, r.out)
    assert.match(r.out, /group or others may access it \(mode 0640\); a key file must be private to its owner: chmod 600/)
    assert.ok(!r.out.includes(key), 'the refusal never prints the key')
    chmodSync(file, 0o600)
    r = await run(['--api-key-file', file])
    assert.ok(r.url, r.out)
    assert.equal(await list(r.url, key), 200, 'the file\'s key is the key')
    assert.equal(await list(r.url, 'e2b_' + '0'.repeat(40)), 401)
    assert.ok(!r.out.includes(key), 'not printed either')
    await stop(r)
    r = await run(['--api-key-fd', '3'], key)
    assert.ok(r.url, r.out)
    assert.equal(await list(r.url, key), 200, 'the descriptor\'s key is the key')
    await stop(r)
    r = await run(['--api-key-fd', '3'], 'not-a-key')
    assert.equal(r.code, 2, r.out)
    assert.match(r.out, /--api-key-fd: descriptor 3: does not hold a valid key/)
    r = await run(['--api-key-fd', '3', '--api-key-file', file])
    assert.equal(r.code, 2)
    assert.match(r.out, /at most one of --api-key-file and --api-key-fd/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
