// Shared helpers for the E2B SDK conformance suite (spec/sdk/*.test.mjs).
// The suite talks to a running sandboxd through the unmodified `e2b` npm package, configured by
// E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY (scripts/test.sh exports them, plus MB_SANDBOXD_PID).
import { spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, readFileSync, readdirSync, readlinkSync, mkdtempSync, realpathSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { KEY_FD_ARGS, passKey } from '../support/sandboxd_key.mjs'

/**
 * The SDK under test: MB_E2B_SDK=e2b (default, the pinned 2.29.1) or e2b-latest (the current
 * release, installed side by side as an npm alias; package.json pins both). scripts/test.sh runs
 * the suite once with each. Tests import the SDK's classes from here, never from 'e2b' directly.
 */
export const SDK_PACKAGE = process.env.MB_E2B_SDK || 'e2b'
if (!['e2b', 'e2b-latest'].includes(SDK_PACKAGE)) throw new Error(`MB_E2B_SDK must be e2b or e2b-latest, not '${SDK_PACKAGE}'`)
const sdk = await import(SDK_PACKAGE)
export const SDK_VERSION = JSON.parse(
  readFileSync(path.join(path.dirname(fileURLToPath(import.meta.url)), 'node_modules', SDK_PACKAGE, 'package.json'), 'utf8'),
).version
export const {
  Sandbox,
  SandboxNotFoundError,
  AuthenticationError,
  SandboxError,
  FileNotFoundError,
  CommandExitError,
  InvalidArgumentError,
  TimeoutError,
  NotFoundError,
  getSignature,
} = sdk

/** semver a >= b (numeric x.y.z). */
export function versionAtLeast(a, b) {
  const x = a.split('.').map(Number), y = b.split('.').map(Number)
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] > y[i]
  return true
}
/** The SDK speaks the v2 control plane (POST /v2/sandboxes, always-secure sandboxes, no `secure` option). */
export const SDK_V2 = versionAtLeast(SDK_VERSION, '2.30.0')

export const HERE = path.dirname(fileURLToPath(import.meta.url))
export const ZERO_KEY = 'e2b_' + '0'.repeat(40)

/** Generous per-test bound so that a hang is reported as a failure, never as a stuck run. */
export const T = { timeout: 90_000 }

export function requireEnv() {
  const missing = ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY'].filter((k) => !process.env[k])
  if (missing.length) {
    throw new Error(
      `missing ${missing.join(', ')}: start sandboxd and export E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (scripts/test.sh does)`,
    )
  }
  return { api: process.env.E2B_API_URL.replace(/\/$/, ''), sbx: process.env.E2B_SANDBOX_URL.replace(/\/$/, ''), key: process.env.E2B_API_KEY }
}

export function uniq(prefix = 'mb') {
  return `${prefix}${randomBytes(6).toString('hex')}`
}

/**
 * Creates a sandbox tagged with a unique metadata value and kills it when the test ends.
 * `t` is the node:test context (or null when the caller cleans up itself).
 */
export async function newSandbox(t, opts = {}) {
  requireEnv()
  const metadata = { moonboxTest: uniq('t'), ...(opts.metadata ?? {}) }
  const sbx = await Sandbox.create('base', { timeoutMs: 180_000, ...opts, metadata })
  sbx.mbTag = metadata.moonboxTest
  if (t) t.after(() => killQuietly(sbx))
  return sbx
}

export async function killQuietly(sbx) {
  try {
    await sbx.kill()
  } catch {
    /* already gone */
  }
}

/** Bounded poll: resolves with the first truthy value of fn(), rejects after `timeoutMs`. */
export async function waitFor(fn, { timeoutMs = 15_000, intervalMs = 100, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      const v = await fn()
      if (v) return v
      last = v
    } catch (e) {
      last = e
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`)
    await sleep(intervalMs)
  }
}

/** A fixed-width numeric marker (usable as a `sleep` duration) starting with digit `d`. */
export const marker = (d = 1) => `${d}${String(Math.floor(Math.random() * 1e8)).padStart(8, '0')}`

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** Rejects if `p` has not settled within `ms` (a hang detector, not a performance bound). */
export function settlesWithin(p, ms, what) {
  let timer
  return Promise.race([
    Promise.resolve(p).finally(() => clearTimeout(timer)),
    new Promise((_, rej) => {
      timer = setTimeout(() => rej(new Error(`${what} did not settle within ${ms} ms (hang)`)), ms)
    }),
  ])
}

export const sha256 = (buf) => createHash('sha256').update(buf).digest('hex')
export const sha256File = (p) => sha256(readFileSync(p))

/** Asserts an error response: given status, JSON body {code: status, message: non-empty string}. */
export async function assertApiError(res, status, what) {
  const assert = (await import('node:assert/strict')).default
  assert.equal(res.status, status, `${what}: status`)
  assert.match(res.headers.get('content-type') ?? '', /application\/json/, `${what}: content type`)
  const body = await res.json()
  assert.equal(body.code, status, `${what}: body.code`)
  assert.equal(typeof body.message, 'string', `${what}: body.message`)
  assert.ok(body.message.length > 0, `${what}: empty message`)
  return body
}

/** POST of a JSON text (or object) to the control plane, with the API key. */
export const postJson = (p, body, headers = {}) =>
  apiFetch(p, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) })

/** Control-plane request with the API key (unless headers override it). */
export async function apiFetch(p, init = {}) {
  const { api, key } = requireEnv()
  const headers = { 'X-API-KEY': key, ...(init.headers ?? {}) }
  for (const k of Object.keys(headers)) if (headers[k] === undefined) delete headers[k]
  return fetch(api + p, { ...init, headers })
}

/** envd request routed to a sandbox by header; token defaults to the sandbox's own. */
export async function envdFetch(sbx, p, init = {}, { token } = {}) {
  const { sbx: base } = requireEnv()
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', ...(init.headers ?? {}) }
  const tok = token === undefined ? sbx.envdAccessToken : token
  if (tok) headers['X-Access-Token'] = tok
  return fetch(base + p, { ...init, headers })
}

/** Connect-protocol server-streaming call; returns {status, messages, end} (end = end-stream JSON). */
export async function connectStream(sbx, method, body, { headers = {}, token } = {}) {
  const json = Buffer.from(JSON.stringify(body))
  const env = Buffer.alloc(5 + json.length)
  env[0] = 0
  env.writeUInt32BE(json.length, 1)
  json.copy(env, 5)
  const res = await envdFetch(
    sbx,
    '/' + method,
    {
      method: 'POST',
      headers: { 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1', 'Connect-Timeout-Ms': '20000', ...headers },
      body: env,
    },
    { token },
  )
  const buf = Buffer.from(await res.arrayBuffer())
  const contentType = res.headers.get('content-type')
  if (!/application\/connect\+json/.test(contentType ?? '')) {
    let body = buf.toString('utf8')
    try {
      body = JSON.parse(body)
    } catch {
      /* not JSON */
    }
    return { status: res.status, contentType, messages: [], end: null, body }
  }
  const messages = []
  let end = null
  for (let off = 0; off + 5 <= buf.length; ) {
    const flags = buf[off]
    const len = buf.readUInt32BE(off + 1)
    const payload = JSON.parse(buf.subarray(off + 5, off + 5 + len).toString('utf8') || '{}')
    if (flags & 2) end = payload
    else messages.push(payload)
    off += 5 + len
  }
  return { status: res.status, contentType, messages, end }
}

/** Connect-protocol unary call; returns {status, body}. */
export async function connectUnary(sbx, method, body, { headers = {}, token } = {}) {
  const res = await envdFetch(
    sbx,
    '/' + method,
    { method: 'POST', headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', ...headers }, body: JSON.stringify(body) },
    { token },
  )
  const text = await res.text()
  let parsed
  try {
    parsed = JSON.parse(text)
  } catch {
    parsed = text
  }
  return { status: res.status, body: parsed }
}

// ---------------------------------------------------------------- host-side inspection

/** Host processes whose command line contains `marker`: [{pid, cmdline}]. */
export function hostProcessesWith(marker) {
  const out = []
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue
    let cmd
    try {
      cmd = readFileSync(`/proc/${d}/cmdline`).toString('utf8').replace(/\0/g, ' ')
    } catch {
      continue
    }
    if (cmd.includes(marker)) out.push({ pid: Number(d), cmdline: cmd.trim() })
  }
  return out
}

/** Host pids of the processes whose parent is `ppid` and whose argv[0] is `argv0`. */
export function hostChildren(ppid, argv0) {
  const out = []
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue
    try {
      const st = readFileSync(`/proc/${d}/stat`, 'utf8')
      const parent = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1])
      if (parent === ppid && readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0')[0] === argv0) out.push(Number(d))
    } catch {
      /* gone */
    }
  }
  return out
}

/** Host uid line of /proc/<pid>/status: [real, effective, saved, fs]; null once the process is gone
 * (a login shell that exec'd or exited after hostProcessesWith saw it). */
export function hostUids(pid) {
  let st
  try {
    st = readFileSync(`/proc/${pid}/status`, 'utf8')
  } catch (e) {
    if (e.code === 'ENOENT' || e.code === 'ESRCH') return null
    throw e
  }
  return st.match(/^Uid:\s+(.*)$/m)[1].trim().split(/\s+/).map(Number)
}

/** Mount points (host view) whose path or source contains `needle`. */
export function hostMountsWith(needle) {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(needle))
}

/** Every path under `dir` (recursively, not following symlinks) whose name contains `needle`. */
export function pathsUnder(dir, needle) {
  const hits = []
  const walk = (d) => {
    let ents
    try {
      ents = readdirSync(d, { withFileTypes: true })
    } catch {
      return
    }
    for (const e of ents) {
      const p = path.join(d, e.name)
      if (e.name.includes(needle)) hits.push(p)
      if (e.isDirectory()) walk(p)
    }
  }
  walk(dir)
  return hits
}

/** The --state-dir of the shared sandboxd (from MB_SANDBOXD_PID's command line), or null. */
export function sharedStateDir() {
  const pid = process.env.MB_SANDBOXD_PID
  if (!pid) return null
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`).toString('utf8').split('\0')
    for (let i = 0; i < argv.length; i++) {
      if (argv[i] === '--state-dir') return path.resolve(readlinkSync(`/proc/${pid}/cwd`), argv[i + 1])
      if (argv[i].startsWith('--state-dir=')) return path.resolve(readlinkSync(`/proc/${pid}/cwd`), argv[i].slice(12))
    }
  } catch {
    /* not readable */
  }
  return null
}

// ---------------------------------------------------------------- own sandboxd instances

export function sandboxdBinary() {
  const build = process.env.MB_BUILD_DIR || path.resolve(HERE, '../../build')
  return path.join(build, 'bin', 'sandboxd')
}

// The state directories made here for a sandboxd, removed when the test file's process exits: each
// only once every sandboxd that used it has exited and nothing is mounted under it (a removal
// through a live sandbox's mounts would reach what they show).
const madeStateDirs = new Map()   // dir -> the sandboxd processes started on it
function madeStateDir() {
  const dir = mkdtempSync(path.join(tmpdir(), 'mb-sdk-state-'))
  madeStateDirs.set(dir, [])
  return dir
}
function usedStateDir(dir, proc) { madeStateDirs.get(dir)?.push(proc) }
process.on('exit', () => {
  let mounts = ''
  try { mounts = readFileSync('/proc/self/mountinfo', 'utf8') } catch { return }
  // mount points as the kernel writes them: real paths, with space, tab, newline and \ octal-escaped
  const unescape = (m) => m.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)))
  const mounted = mounts.split('\n').map((l) => l.split(' ')[4]).filter(Boolean).map(unescape)
  for (const [dir, procs] of madeStateDirs) {
    if (procs.some((p) => p.exitCode === null && p.signalCode === null)) continue
    let real
    try { real = realpathSync(dir) } catch { continue }
    if (mounted.some((m) => m === real || m.startsWith(`${real}/`))) continue
    try { rmSync(real, { recursive: true, force: true }) } catch { /* left for the next sweep of /tmp */ }
  }
})

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.unref()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

/**
 * Starts a private sandboxd. Resolves once it prints "sandboxd listening on".
 * Returns {proc, port, url, stateDir, key, log(), exited (promise of {code, signal}), opts (SDK connection opts)}.
 */
export async function startSandboxd({ stateDir, port, env = {}, key = ZERO_KEY, args = [] } = {}) {
  const bin = sandboxdBinary()
  if (!existsSync(bin)) throw new Error(`sandboxd binary not found at ${bin} (build it first)`)
  stateDir ??= madeStateDir()
  port ??= await freePort()
  const proc = spawn(bin, ['--listen', `127.0.0.1:${port}`, ...KEY_FD_ARGS, '--state-dir', stateDir, '--exit-with-parent', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
  })
  passKey(proc, key)
  usedStateDir(stateDir, proc)
  let out = ''
  proc.stdout.on('data', (d) => (out += d))
  proc.stderr.on('data', (d) => (out += d))
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })))
  const url = `http://127.0.0.1:${port}`
  await settlesWithin(
    Promise.race([
      waitFor(() => out.includes('sandboxd listening on'), { timeoutMs: 20_000, intervalMs: 20, what: 'sandboxd to listen' }),
      exited.then(({ code, signal }) => {
        throw new Error(`sandboxd exited early (code ${code}, signal ${signal}): ${out}`)
      }),
    ]),
    25_000,
    'sandboxd start',
  )
  return {
    proc,
    port,
    url,
    stateDir,
    key,
    exited,
    log: () => out,
    opts: { apiUrl: url, sandboxUrl: url, apiKey: key },
  }
}

/** Stops a private sandboxd if it is still running (SIGKILL after a grace period). */
export async function stopSandboxd(s) {
  if (!s || s.proc.exitCode !== null || s.proc.signalCode !== null) return
  s.proc.kill('SIGTERM')
  let timer
  const r = await Promise.race([s.exited, new Promise((ok) => { timer = setTimeout(() => ok(null), 15_000) })])
  clearTimeout(timer)   // an armed timer would keep the test file's process alive
  if (!r) {
    s.proc.kill('SIGKILL')
    await s.exited
  }
}

/**
 * Starts a private sandboxd on `--listen 127.0.0.1:0`, optionally under a wrapper command (`wrap`,
 * e.g. setpriv; the wrapper must exec sandboxd so that signals reach it) and without a key of its
 * own (`key: null`: sandboxd makes one in its state directory). The port is read from the "listening on" line of its stdout, a generated key from
 * its "api key:" line. Returns what startSandboxd returns plus stdout() and stderr() (separately);
 * stopSandboxd works on it.
 */
export async function startSandboxdArgs({ stateDir, key = ZERO_KEY, wrap = [], env = {}, args = [] } = {}) {
  const bin = sandboxdBinary()
  if (!existsSync(bin)) throw new Error(`sandboxd binary not found at ${bin} (build it first)`)
  stateDir ??= madeStateDir()
  const argv = [...wrap, bin, '--listen', '127.0.0.1:0', ...(key ? KEY_FD_ARGS : []), '--state-dir', stateDir, '--exit-with-parent', ...args]
  const proc = spawn(argv[0], argv.slice(1), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe', ...(key ? ['pipe'] : [])] })
  if (key) passKey(proc, key)
  usedStateDir(stateDir, proc)
  let out = ''
  let err = ''
  proc.stdout.on('data', (d) => (out += d))
  proc.stderr.on('data', (d) => (err += d))
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })))
  const line = await settlesWithin(
    Promise.race([
      waitFor(() => out.match(/^sandboxd listening on http:\/\/127\.0\.0\.1:(\d+)$/m), { timeoutMs: 20_000, intervalMs: 20, what: 'sandboxd to listen' }),
      exited.then(({ code, signal }) => {
        throw new Error(`sandboxd exited early (code ${code}, signal ${signal}): ${out}${err}`)
      }),
    ]),
    25_000,
    'sandboxd start',
  )
  const port = Number(line[1])
  const generated = out.match(/^sandboxd api key: (e2b_[0-9a-f]+) /m)?.[1] ?? null
  const url = `http://127.0.0.1:${port}`
  const k = key ?? generated
  return {
    proc,
    port,
    url,
    stateDir,
    key: k,
    generatedKey: generated,
    exited,
    stdout: () => out,
    stderr: () => err,
    log: () => out + err,
    opts: { apiUrl: url, sandboxUrl: url, apiKey: k },
  }
}

/** Runs a command and returns {code, out} without throwing on a non-zero exit. */
export async function sh(sbx, cmd, opts = {}) {
  try {
    const r = await sbx.commands.run(cmd, opts)
    return { code: 0, out: r.stdout + r.stderr }
  } catch (e) {
    if (e.exitCode === undefined) throw e
    return { code: e.exitCode, out: (e.stdout ?? '') + (e.stderr ?? '') }
  }
}

// ---------------------------------------------------------------- a stand-in world for egress tests
/**
 * The world of spec/support/networld.py (root only): a network namespace with a public-looking,
 * a private and a link-local host, a DNS server for test names, HTTP/HTTPS/TCP/UDP services.
 * Returns its description ({public, private, linklocal, dns, ca, names, ...}) with stats() (what
 * its servers saw) and stop(); null with `why` set when this machine cannot make it.
 */
export async function startNetworld(t) {
  if (process.getuid() !== 0) return { why: 'not root: cannot make a network namespace' }
  const dir = mkdtempSync(path.join(tmpdir(), 'mb-networld-'))
  const proc = spawn('python3', [path.join(HERE, '..', 'support', 'networld.py'), dir], { stdio: ['pipe', 'pipe', 'inherit'] })
  let out = ''
  proc.stdout.on('data', (d) => (out += d))
  const exited = new Promise((resolve) => proc.on('exit', resolve))
  await settlesWithin(Promise.race([waitFor(() => out.includes('\n'), { timeoutMs: 30_000, what: 'networld' }), exited]), 35_000, 'networld')
  const world = JSON.parse(out.split('\n')[0])
  if (world.error) throw new Error(`networld: ${world.error}`)
  world.stop = async () => {
    proc.stdin.end()
    await exited
  }
  world.stats = async () => (await fetch(`http://${world.public}:8099/stats`)).json()
  if (t) t.after(() => world.stop())
  return world
}
