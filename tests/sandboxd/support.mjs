// Shared by the tests/sandboxd/*.test.mjs files: the sandboxd under test and request helpers.
// useSandboxd() uses E2B_API_URL/E2B_API_KEY when set, else starts SANDBOXD_BIN or
// build/bin/sandboxd on a free port for the file's tests and stops it (SIGTERM, exit 0) after.
import { before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { KEY_FD_ARGS, passKey } from '../../spec/support/sandboxd_key.mjs'

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
export const sandboxdBin = () => process.env.SANDBOXD_BIN || join(ROOT, 'build', 'bin', 'sandboxd')

// Live bindings: set by the before hook of useSandboxd().
export let URL_ = process.env.E2B_API_URL
export let KEY = process.env.E2B_API_KEY

// Starts a private sandboxd on a free loopback port with its own state directory (under `cwd`
// when given, which also becomes its working directory, so `stateDir` may be relative).
// → { child, url, stateDir, stop() }; stop() asserts the SIGTERM exit status 0 and removes the
// state directory.
export async function startSandboxd({ bin = sandboxdBin(), prefix = 'sbxd-', key = 'e2b_' + '0'.repeat(40),
  env = process.env, cwd, stateDir } = {}) {
  assert.ok(existsSync(bin), `no sandboxd binary at ${bin}`)
  const top = mkdtempSync(join(tmpdir(), prefix))
  const dir = stateDir ?? top
  const child = spawn(bin, ['--listen', '127.0.0.1:0', ...KEY_FD_ARGS, '--state-dir', dir, '--exit-with-parent'],
    { stdio: ['ignore', 'pipe', 'inherit', 'pipe'], env, cwd: cwd ?? top })
  passKey(child, key)
  const exited = new Promise((r) => child.on('exit', (code, sig) => r(code ?? sig)))
  const url = await new Promise((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (d) => {
      out += d
      const m = out.match(/sandboxd listening on (http:\/\/\S+)/)
      if (m) resolve(m[1])
    })
    child.on('exit', (c) => reject(new Error(`sandboxd exited with ${c}: ${out}`)))
  })
  const stop = async () => {
    child.kill('SIGTERM')
    assert.equal(await exited, 0, 'sandboxd exits 0 on SIGTERM')
    rmSync(top, { recursive: true, force: true })
  }
  return { child, url, key, stateDir: dir, stop }
}

// Registers the before/after hooks; `prefix` names the state directory of a sandboxd started here.
export function useSandboxd(prefix) {
  let srv
  before(async () => {
    if (URL_ && KEY) return
    srv = await startSandboxd({ prefix })
    URL_ = srv.url
    KEY = srv.key
  })
  after(async () => { if (srv) await srv.stop() })
}

export const api = (path, init = {}) =>
  fetch(URL_ + path, { ...init, headers: { 'X-API-KEY': KEY, 'Content-Type': 'application/json', ...(init.headers || {}) } })
export const json = async (res) => ({ status: res.status, body: await res.json(), headers: res.headers })
export const create = async (extra = {}) => {
  const r = await json(await api('/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base', timeout: 120, ...extra }) }))
  assert.equal(r.status, 201, JSON.stringify(r.body))
  return r.body
}
export const kill = (id) => api(`/sandboxes/${id}`, { method: 'DELETE' })
export const envd = (sbx, path, init = {}) =>
  fetch(URL_ + path, {
    ...init,
    headers: { 'E2b-Sandbox-Id': sbx.sandboxID, ...(sbx.envdAccessToken ? { 'X-Access-Token': sbx.envdAccessToken } : {}), ...(init.headers || {}) },
  })
export const rpc = async (sbx, method, msg, headers = {}) =>
  json(await envd(sbx, `/filesystem.Filesystem/${method}`, { method: 'POST', body: JSON.stringify(msg), headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', ...headers } }))
export const upload = (sbx, path, data, headers = {}) =>
  envd(sbx, `/files?path=${encodeURIComponent(path)}`, { method: 'POST', body: data, headers: { 'Content-Type': 'application/octet-stream', ...headers } })
// Connect envelopes: one JSON message framed for a streaming request; a streamed response → its envelopes.
export const envelope = (obj) => { const b = Buffer.from(JSON.stringify(obj)); const h = Buffer.alloc(5); h.writeUInt32BE(b.length, 1); return Buffer.concat([h, b]) }
export function envelopes(buf) {
  const out = []
  for (let o = 0; o + 5 <= buf.length;) {
    const len = buf.readUInt32BE(o + 1)
    out.push({ flags: buf[o], msg: JSON.parse(buf.subarray(o + 5, o + 5 + len).toString()) })
    o += 5 + len
  }
  return out
}
