// Network isolation: every sandbox has its own network namespace. As root, sandboxd joins each to
// its gateway namespace by a veth pair, and its egress proxy carries what the rules allow, never to
// the host itself (loopback or any of its addresses); allowInternetAccess false lets nothing out.
// Checked from inside (commands) and from the host. The rules themselves: egress.test.mjs.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import dgram from 'node:dgram'
import { readFileSync, readdirSync, readlinkSync, existsSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { T, newSandbox, requireEnv, uniq, waitFor, sh, freePort, startSandboxd, stopSandboxd, hostChildren, Sandbox, startNetworld } from './helpers.mjs'

/** A TCP server on the host that counts the connections it accepted. */
async function hostListener(t, host) {
  const accepted = []
  const srv = net.createServer((c) => {
    accepted.push(c.remoteAddress)
    c.end('HOST-REACHED\n')
  })
  await new Promise((ok, fail) => srv.listen(0, host, ok).on('error', fail))
  t.after(() => new Promise((ok) => srv.close(ok)))
  return { port: srv.address().port, accepted }
}

/**
 * Connects from inside the sandbox to each [host, port] at once (3 s each) and returns
 * {"host:port": "connected" | error class}. A connection reads one line, which is returned too.
 */
async function probeFromInside(sbx, targets, opts = {}) {
  const script = `
import json, socket, concurrent.futures as cf
def one(t):
    h, p = t
    s = socket.socket(socket.AF_INET6 if ':' in h else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((h, p))
    except Exception as e:
        s.close()
        return type(e).__name__
    s.settimeout(1)
    try:
        data = s.recv(64)
    except Exception:
        data = b''   # a listener that says nothing
    s.close()
    return 'connected:' + data.decode(errors='replace').strip()
ts = ${JSON.stringify(targets)}
with cf.ThreadPoolExecutor(len(ts)) as ex:
    print(json.dumps({f'{h}:{p}': r for (h, p), r in zip(ts, ex.map(one, ts))}))
`
  const r = await sh(sbx, `python3 - <<'PYEOF'\n${script}\nPYEOF`, { timeoutMs: 30_000, ...opts })
  assert.equal(r.code, 0, r.out)
  return JSON.parse(r.out)
}

/** Every address of the host's interfaces (no link-local IPv6: it needs a scope). */
function hostAddresses() {
  const out = []
  for (const list of Object.values(os.networkInterfaces()))
    for (const a of list) if (!(a.family === 'IPv6' && a.address.startsWith('fe80:'))) out.push(a.address)
  return out
}

function canMakeNetns() {
  if (process.getuid() !== 0) return 'not root: cannot create a network namespace for the stand-in internet'
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore' })
  } catch {
    return 'ip (iproute2) is missing'
  }
  return null
}

/** The first line a server that speaks first sends to the host. */
function firstLineFromHost(host, port) {
  return new Promise((resolve) => {
    const c = net.connect({ host, port, timeout: 3000 })
    c.on('data', (d) => { c.destroy(); resolve(String(d).split('\n')[0]) })
    c.on('timeout', () => { c.destroy(); resolve('ETIMEDOUT') })
    c.on('error', (e) => resolve(e.code))
  })
}

/** Connects from the host; resolves with the first line read, or the error code. */
function connectFromHost(host, port) {
  return new Promise((resolve) => {
    const c = net.connect({ host, port, timeout: 3000 })
    let data = ''
    c.on('data', (d) => (data += d))
    c.on('end', () => resolve('connected:' + data.trim()))
    c.on('timeout', () => { c.destroy(); resolve('ETIMEDOUT') })
    c.on('error', (e) => resolve(e.code))
  })
}

for (const internet of [true, false]) {
  test(`allowInternetAccess ${internet}: no host loopback port connects from inside (sandboxd's, one the test opens)`, T, async (t) => {
    const { api } = requireEnv()
    const sandboxdPort = Number(new URL(api).port)
    const mine = await hostListener(t, '127.0.0.1')
    // the host itself reaches both (so the probe below can tell "reachable" from "not")
    assert.match(await connectFromHost('127.0.0.1', mine.port), /^connected:HOST-REACHED/)
    assert.equal(mine.accepted.length, 1)
    const sbx = await newSandbox(t, { allowInternetAccess: internet })
    const got = await probeFromInside(sbx, [['127.0.0.1', sandboxdPort], ['127.0.0.1', mine.port], ['::1', mine.port], ['localhost', sandboxdPort]])
    for (const [k, v] of Object.entries(got)) assert.ok(!v.startsWith('connected'), `${k} from inside: ${v}`)
    assert.equal(mine.accepted.length, 1, 'the host listener was reached from inside')
    // the sandbox's own loopback works (the probe can connect)
    await sbx.commands.run(`python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',${mine.port})); s.listen(); time.sleep(60)" >/dev/null 2>&1 &`)
    const own = await waitFor(async () => {
      const r = await probeFromInside(sbx, [['127.0.0.1', mine.port]])
      return r[`127.0.0.1:${mine.port}`] === 'connected:' ? r : null
    }, { what: 'a listener inside to accept' })
    assert.ok(own)
    assert.equal(mine.accepted.length, 1, 'a connection inside reached the host')
    assert.equal((await sbx.getInfo()).allowInternetAccess, internet)
  })
}

test('a listener inside the sandbox is not reachable from the host (loopback or any host address)', T, async (t) => {
  const port = await freePort()
  const sbx = await newSandbox(t)
  const log = `/tmp/accepts-${uniq()}`
  await sbx.commands.run(
    `python3 -c "
import socket
s = socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('::', ${port})); s.listen(16)
while True:
    c, a = s.accept(); open('${log}', 'a').write(a[0] + chr(10)); c.sendall(b'SANDBOX-REACHED'); c.close()
" >/dev/null 2>&1 &`,
  )
  // inside, it answers (on every address the sandbox has)
  await waitFor(async () => (await probeFromInside(sbx, [['127.0.0.1', port]]))[`127.0.0.1:${port}`].startsWith('connected'), {
    what: 'the listener inside',
  })
  const targets = ['127.0.0.1', '::1', ...hostAddresses()]
  const results = await Promise.all(targets.map((h) => connectFromHost(h, port)))
  for (let i = 0; i < targets.length; i++) assert.ok(!results[i].startsWith('connected'), `host ${targets[i]}:${port}: ${results[i]}`)
  // exactly the one connection made from inside
  assert.equal((await sbx.files.read(log)).trim().split('\n').length, 1)
})

test('with internet access, the host\'s own addresses are out of reach and the stand-in world is reachable; without it, nothing is', T, async (t) => {
  const world = await startNetworld(t)
  if (world.why) return t.skip(world.why)
  const any = await hostListener(t, '0.0.0.0')
  const targets = hostAddresses().filter((a) => !a.includes(':'))
  assert.ok(targets.includes(world.hostSide), 'the world\'s veth address is one of the host\'s')
  // from the host itself, every one of its addresses reaches the listener, and the world answers
  for (const a of targets) assert.match(await connectFromHost(a, any.port), /^connected:HOST-REACHED/, a)
  assert.equal(await firstLineFromHost(world.public, 2222), 'BANNER public')
  const before = any.accepted.length

  const on = await newSandbox(t, { allowInternetAccess: true })
  const got = await probeFromInside(on, [[world.public, 2222], ...targets.map((a) => [a, any.port])])
  assert.equal(got[`${world.public}:2222`], 'connected:BANNER public', JSON.stringify(got))
  for (const a of targets) assert.ok(!got[`${a}:${any.port}`].startsWith('connected:HOST'), `host address ${a} reached: ${JSON.stringify(got)}`)
  assert.equal(any.accepted.length, before, `the host listener was reached from inside: ${any.accepted.slice(before)}`)

  const seen = (await world.stats()).tcp['public:2222']
  const off = await newSandbox(t, { allowInternetAccess: false })
  const gotOff = await probeFromInside(off, [[world.public, 2222], ...targets.map((a) => [a, any.port])])
  for (const [k, v] of Object.entries(gotOff)) assert.ok(!v.startsWith('connected:HOST') && !v.startsWith('connected:BANNER'), `${k} without internet access: ${v}`)
  assert.equal((await world.stats()).tcp['public:2222'], seen, 'the world saw a connection of a sandbox without internet access')
  assert.equal(any.accepted.length, before)
})

/** A DNS query (id, RD set) for name, type A. */
function dnsQuery(id, name) {
  const labels = name.split('.').flatMap((l) => [Buffer.from([l.length]), Buffer.from(l)])
  const head = Buffer.alloc(12)
  head.writeUInt16BE(id, 0)
  head.writeUInt16BE(0x0100, 2)
  head.writeUInt16BE(1, 4)
  return Buffer.concat([head, ...labels, Buffer.from([0, 0, 1, 0, 1])])
}

function askFromHost(server, query) {
  return new Promise((resolve) => {
    const s = dgram.createSocket('udp4')
    const timer = setTimeout(() => { s.close(); resolve(null) }, 3000)
    s.on('message', (m) => { clearTimeout(timer); s.close(); resolve(m) })
    s.send(query, 53, server)
  })
}

test('DNS inside goes to sandboxd\'s forwarder, which answers as sandboxd\'s resolver (--dns) does; without internet access it refuses', T, async (t) => {
  const world = await startNetworld(t)
  if (world.why) return t.skip(world.why)
  const srv = await startSandboxd({ args: ['--dns', world.dns] })
  t.after(() => stopSandboxd(srv))
  const q = dnsQuery(0x4d42, 'allowed.test')
  const direct = await askFromHost(world.dns, q)
  assert.ok(direct && direct.readUInt16BE(6) === 1, 'the world\'s DNS answers')
  const on = await Sandbox.create('base', { ...srv.opts, timeoutMs: 60_000 })
  t.after(() => on.kill().catch(() => {}))
  const conf = (await on.files.read('/etc/resolv.conf')).split('\n').filter((l) => /^nameserver/.test(l))
  assert.deepEqual(conf, ['nameserver 169.254.1.1'])
  const ask = `python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
try:
    s.sendto(bytes.fromhex('${q.toString('hex')}'), ('169.254.1.1', 53))
    print(s.recv(4096).hex())
except Exception as e: print(type(e).__name__)
"`
  const inside = Buffer.from((await on.commands.run(ask)).stdout.trim(), 'hex')
  assert.deepEqual(inside, direct, 'the forwarder passes the resolver\'s answer on as it is')
  assert.equal((await sh(on, 'getent hosts allowed.test')).out.split(/\s+/)[0], world.public, 'the resolver library uses it')
  // over TCP too (a resolver's fallback for long answers): relayed to the resolver as it is
  const askTcp = `python3 -c "
import socket, struct
q = bytes.fromhex('${q.toString('hex')}')
s = socket.create_connection(('169.254.1.1', 53), timeout=3); s.sendall(struct.pack('!H', len(q)) + q)
n = struct.unpack('!H', s.recv(2))[0]; d = b''
while len(d) < n: d += s.recv(n - len(d))
print(d.hex())
"`
  assert.deepEqual(Buffer.from((await on.commands.run(askTcp)).stdout.trim(), 'hex').subarray(12), direct.subarray(12), 'over TCP the same answer')
  const off = await Sandbox.create('base', { ...srv.opts, timeoutMs: 60_000, allowInternetAccess: false })
  t.after(() => off.kill().catch(() => {}))
  assert.notEqual((await sh(off, askTcp)).code, 0, 'DNS over TCP refused without internet access')
  const refused = Buffer.from((await off.commands.run(ask)).stdout.trim(), 'hex')
  assert.ok(refused.length >= 12, 'no answer without internet access')
  assert.equal(refused.readUInt16BE(0), 0x4d42)
  assert.equal(refused[3] & 15, 5, 'REFUSED without internet access')
  assert.equal(refused.readUInt16BE(6), 0, 'and no answer record')
  assert.equal(refused.subarray(12).toString('hex'), q.subarray(12).toString('hex'), 'the question as asked')
})

/** The links of sandboxd's gateway namespace (held by a descriptor of its process). */
function gatewayLinks(pid) {
  const own = readlinkSync(`/proc/${pid}/ns/net`)
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`)
    } catch {
      continue
    }
    if (!target.startsWith('net:[') || target === own) continue
    const ns = (...cmd) => execFileSync('nsenter', [`--net=/proc/${pid}/fd/${fd}`, ...cmd], { encoding: 'utf8' })
    if (!ns('ip', '-o', 'addr', 'show', 'dev', 'lo').includes('169.254.1.1')) continue   // a sandbox's own
    return ns('ip', '-o', 'link').split('\n').map((l) => l.split(': ')[1]?.split('@')[0]).filter((n) => n && n.startsWith('sbx'))
  }
  return null
}

function nftTables() {
  try {
    return execFileSync('nft', ['list', 'tables'], { encoding: 'utf8' }).split('\n').filter((l) => l.includes('sandboxd_'))
  } catch {
    return []
  }
}

/** The host guard's table of a sandboxd with this (absolute) state dir: sandboxd's FNV-1a-style hash of the path (its basis is 1469598103934665603). */
function guardTable(stateDir) {
  let h = 1469598103934665603n
  for (const b of Buffer.from(stateDir)) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn
  return `table inet sandboxd_${h.toString(16).padStart(16, '0')}`
}

test('each sandbox has a veth pair of its own into sandboxd\'s gateway and no process; both go with it; sandboxd removes its host guard at exit', T, async (t) => {
  if (process.getuid() !== 0) return t.skip('not root')
  const srv = await startSandboxd({ env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
  t.after(() => stopSandboxd(srv))
  const table = guardTable(srv.stateDir)
  assert.ok(nftTables().includes(table), `its host guard ${table} is installed: ${nftTables()}`)
  assert.deepEqual(gatewayLinks(srv.proc.pid), [], 'no link before any sandbox (pools off)')
  const on = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, allowInternetAccess: true })
  const off = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, allowInternetAccess: false })
  assert.equal(gatewayLinks(srv.proc.pid).length, 2, 'one link each (without internet access, a link where nothing is let out)')
  assert.deepEqual(hostChildren(srv.proc.pid, 'pasta'), [], 'no pasta as root')
  for (const s of [on, off]) assert.equal((await s.commands.run('ls /sys/class/net')).stdout, 'eth0\nlo\n')
  await on.kill()
  // the pair goes with the sandbox's network namespace: the kernel's clean-up, just after the kill
  await waitFor(() => gatewayLinks(srv.proc.pid).length === 1, { timeoutMs: 30_000, what: 'the link to go with its sandbox' })
  srv.proc.kill('SIGTERM')
  assert.deepEqual(await srv.exited, { code: 0, signal: null })
  assert.ok(!nftTables().includes(table), 'the host guard is removed')
})
