// Test-only helpers for sandboxd's edge mode (spec/sdk/edge.test.mjs, tests/sandboxd/edge.test.mjs,
// bench/edge.sh): a PKI made here with the openssl CLI, and a private sandboxd serving plain HTTP
// and TLS with --domain.
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { KEY_FD_ARGS, passKey } from './sandboxd_key.mjs'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
export const SUPPORT = path.join(ROOT, 'spec', 'support')
export const ZERO_KEY = 'e2b_' + '0'.repeat(40)

const openssl = (...args) => execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'pipe'] })

/**
 * A CA in `dir` and a function that makes certificates it signs:
 * cert(name, sans, { expired }) → { cert, key } (paths). `sans` like "DNS:*.x.test,DNS:x.test".
 * otherCa() → the path of an unrelated CA's certificate (for "wrong CA" cases).
 */
export function makePki(dir) {
  mkdirSync(dir, { recursive: true })
  const ca = path.join(dir, 'ca.pem'), caKey = path.join(dir, 'ca.key')
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=moonbox-edge-test-ca', '-days', '2', '-keyout', caKey, '-out', ca)
  let serial = 1
  const cert = (name, sans, { expired = false } = {}) => {
    const ext = path.join(dir, `${name}.ext`), key = path.join(dir, `${name}.key`), csr = path.join(dir, `${name}.csr`)
    const out = path.join(dir, `${name}.pem`)
    writeFileSync(ext, `subjectAltName=${sans}\n`)
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${name}`, '-keyout', key, '-out', csr)
    if (expired) {
      // openssl x509 cannot backdate; `openssl ca` with explicit dates can
      const db = path.join(dir, `db-${name}`)
      mkdirSync(db, { recursive: true })
      writeFileSync(path.join(db, 'index'), '')
      writeFileSync(path.join(db, 'serial'), String(serial++).padStart(2, '0') + '\n')
      const conf = path.join(dir, `${name}.cnf`)
      writeFileSync(conf, `[ca]\ndefault_ca=d\n[d]\ndir=${db}\ndatabase=${db}/index\nserial=${db}/serial\nnew_certs_dir=${db}\n`
        + 'default_md=sha256\npolicy=p\ncopy_extensions=copy\n[p]\ncommonName=supplied\n')
      openssl('ca', '-batch', '-config', conf, '-cert', ca, '-keyfile', caKey, '-in', csr, '-out', out,
        '-startdate', '20200101000000Z', '-enddate', '20200102000000Z', '-extfile', ext)
    } else {
      openssl('x509', '-req', '-in', csr, '-CA', ca, '-CAkey', caKey, '-CAcreateserial', '-days', '1', '-extfile', ext, '-out', out)
    }
    return { cert: out, key }
  }
  const otherCa = () => {
    const p = path.join(dir, 'other-ca.pem')
    if (!existsSync(p)) openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=another-ca', '-days', '2',
      '-keyout', path.join(dir, 'other-ca.key'), '-out', p)
    return p
  }
  return { dir, ca, cert, otherCa }
}

/** A random loopback address 127.x.y.z (x ≥ 100: clear of the usual 127.0.0.x services). */
export const randomLoopback = () =>
  `127.${100 + Math.floor(Math.random() * 150)}.${Math.floor(Math.random() * 250) + 1}.${Math.floor(Math.random() * 250) + 1}`

/**
 * A private sandboxd: plain HTTP on 127.0.0.1:0 and TLS on `tls` ("ADDR:PORT") with the PEM files
 * `cert` and `tlsKey`, --domain `domain`.
 * Retries on another random loopback address when `tls` is "random:443" and the bind fails.
 * → { proc, http, https, tlsAddr, tlsPort, stateDir, key, log(), stop() }; stop() sends SIGTERM
 * and returns { code, log } once it exited (the log has its served-requests lines).
 */
export async function startEdge({ domain, cert, tlsKey, tls = '127.0.0.1:0', apiKey = ZERO_KEY, env = {}, extra = [] }) {
  const bin = path.join(process.env.MB_BUILD_DIR || path.join(ROOT, 'build'), 'bin', 'sandboxd')
  if (!existsSync(bin)) throw new Error(`no sandboxd binary at ${bin}`)
  for (let attempt = 0; ; attempt++) {
    const addr = tls.startsWith('random:') ? `${randomLoopback()}:${tls.slice(7)}` : tls
    const stateDir = mkdtempSync(path.join(tmpdir(), 'mb-edge-state-'))
    const args = ['--listen', '127.0.0.1:0', '--tls-listen', addr, '--tls-cert', cert, '--tls-key', tlsKey,
      ...KEY_FD_ARGS, '--state-dir', stateDir, '--exit-with-parent', ...(domain ? ['--domain', domain] : []), ...extra]
    const proc = spawn(bin, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe', 'pipe'] })
    passKey(proc, apiKey)
    let out = ''
    proc.stdout.on('data', (d) => (out += d))
    proc.stderr.on('data', (d) => (out += d))
    const exited = new Promise((r) => proc.on('exit', (code, sig) => r(code ?? sig)))
    const ready = await new Promise((resolve) => {
      const timer = setInterval(() => {
        const h = out.match(/^sandboxd listening on (http:\/\/\S+)$/m), s = out.match(/^sandboxd listening on https:\/\/(\S+):(\d+)$/m)
        if (h && s) { clearInterval(timer); resolve({ http: h[1], tlsAddr: s[1], tlsPort: Number(s[2]) }) }
      }, 20)
      exited.then(() => { clearInterval(timer); resolve(null) })
    })
    if (!ready) {
      rmSync(stateDir, { recursive: true, force: true })
      if (tls.startsWith('random:') && attempt < 4 && /cannot listen/.test(out)) continue
      throw new Error(`sandboxd (edge) did not start: ${out}`)
    }
    let stopped = null
    return {
      proc, key: apiKey, stateDir, ...ready,
      https: `https://${ready.tlsAddr}:${ready.tlsPort}`,
      log: () => out,
      stop: async () => {
        if (!stopped) {
          stopped = (async () => {
            proc.kill('SIGTERM')
            let timer
            const code = await Promise.race([exited, new Promise((r) => { timer = setTimeout(() => r(null), 20000) })])
            clearTimeout(timer)
            if (code === null) { proc.kill('SIGKILL'); await exited }
            rmSync(stateDir, { recursive: true, force: true })
            // MB_EDGE_LOG_DIR keeps each sandboxd's output (e.g. to read a sanitizer build's reports)
            if (process.env.MB_EDGE_LOG_DIR) writeFileSync(path.join(process.env.MB_EDGE_LOG_DIR, `sandboxd-${proc.pid}.log`), out)
            return { code, log: out }
          })()
        }
        return stopped
      },
    }
  }
}

/** The served-requests line of a stopped sandboxd's log for its http or https listener. */
export function served(log, scheme) {
  const m = log.match(new RegExp(`^sandboxd: ${scheme}://\\S+ served (\\d+) requests on (\\d+) connections$`, 'm'))
  return m ? { requests: Number(m[1]), connections: Number(m[2]) } : null
}

/** The port server (spec/support/port_server.py) as text, to copy into a sandbox. */
export const portServerSource = () => readFileSync(path.join(SUPPORT, 'port_server.py'), 'utf8')
