// Network isolation: every sandbox has its own network namespace. With allowInternetAccess it
// reaches the network through pasta, never the host itself (loopback or any of its addresses);
// without it, only its own loopback. Checked from inside (commands) and from the host.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import dgram from 'node:dgram'
import { readFileSync, readdirSync, readlinkSync, existsSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { T, newSandbox, requireEnv, uniq, waitFor, sh, freePort, sharedStateDir, startSandboxd, stopSandboxd, hostChildren, Sandbox } from './helpers.mjs'

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

/**
 * A stand-in for the internet: a network namespace joined to the host by a veth pair
 * (10.213.N.1 host side, 10.213.N.2 inside), with a TCP server on 10.213.N.2 that answers
 * "internet-ok". Removed when the test ends.
 */
async function fakeInternet(t) {
  const name = uniq('mbi').slice(0, 9)
  const n = 1 + Math.floor(Math.random() * 250)
  const [hostIp, farIp] = [`10.213.${n}.1`, `10.213.${n}.2`]
  const ip = (...a) => execFileSync('ip', a, { stdio: ['ignore', 'ignore', 'pipe'] })
  ip('netns', 'add', name)
  t.after(() => {
    try {
      ip('netns', 'del', name)   // takes the veth pair with it
    } catch {
      /* already gone */
    }
  })
  ip('link', 'add', `${name}h`, 'type', 'veth', 'peer', 'name', `${name}n`)
  ip('link', 'set', `${name}n`, 'netns', name)
  ip('addr', 'add', `${hostIp}/30`, 'dev', `${name}h`)
  ip('link', 'set', `${name}h`, 'up')
  ip('netns', 'exec', name, 'ip', 'addr', 'add', `${farIp}/30`, 'dev', `${name}n`)
  ip('netns', 'exec', name, 'ip', 'link', 'set', `${name}n`, 'up')
  ip('netns', 'exec', name, 'ip', 'route', 'add', 'default', 'via', hostIp)
  const port = 8000 + Math.floor(Math.random() * 1000)
  const server = spawn('ip', ['netns', 'exec', name, 'python3', '-c', `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('${farIp}', ${port})); s.listen(16); print('listening', flush=True)
while True:
    c, _ = s.accept(); c.sendall(b'internet-ok\\n'); c.close()
`], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.after(() => server.kill('SIGKILL'))
  let out = ''
  server.stdout.on('data', (d) => (out += d))
  await waitFor(() => out.includes('listening'), { what: 'the stand-in internet server' })
  return { name, hostIp, farIp, port }
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

test('with internet access, the host\'s own addresses are out of reach; the stand-in internet is reachable', T, async (t) => {
  const why = canMakeNetns()
  if (why) return t.skip(why)
  const inet = await fakeInternet(t)
  const any = await hostListener(t, '0.0.0.0')
  const targets = hostAddresses().filter((a) => !a.includes(':'))
  assert.ok(targets.includes(inet.hostIp), 'the veth address is one of the host\'s')
  // from the host itself, every one of its addresses reaches the listener, and the stand-in answers
  for (const a of targets) assert.match(await connectFromHost(a, any.port), /^connected:HOST-REACHED/, a)
  assert.equal(await connectFromHost(inet.farIp, inet.port), 'connected:internet-ok')
  const before = any.accepted.length

  const on = await newSandbox(t, { allowInternetAccess: true })
  const got = await probeFromInside(on, [[inet.farIp, inet.port], ...targets.map((a) => [a, any.port])])
  assert.equal(got[`${inet.farIp}:${inet.port}`], 'connected:internet-ok', JSON.stringify(got))
  for (const a of targets) assert.ok(!got[`${a}:${any.port}`].startsWith('connected'), `host address ${a} reached: ${JSON.stringify(got)}`)
  assert.equal(any.accepted.length, before, `the host listener was reached from inside: ${any.accepted.slice(before)}`)

  const off = await newSandbox(t, { allowInternetAccess: false })
  const gotOff = await probeFromInside(off, [[inet.farIp, inet.port], ...targets.map((a) => [a, any.port])])
  for (const [k, v] of Object.entries(gotOff)) assert.ok(!v.startsWith('connected'), `${k} without internet access: ${v}`)
  assert.match(gotOff[`${inet.farIp}:${inet.port}`], /OSError|ConnectionRefusedError/, 'no route at all')
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

function hostResolver() {
  for (const l of readFileSync('/etc/resolv.conf', 'utf8').split('\n')) {
    const m = l.match(/^nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/)
    if (m) return m[1]
  }
  return null
}

function askFromHost(server, query) {
  return new Promise((resolve) => {
    const s = dgram.createSocket('udp4')
    const timer = setTimeout(() => { s.close(); resolve(null) }, 3000)
    s.on('message', (m) => { clearTimeout(timer); s.close(); resolve(m) })
    s.send(query, 53, server)
  })
}

test('DNS inside goes to pasta\'s forwarder, which answers as the host\'s resolver does', T, async (t) => {
  const server = hostResolver()
  if (!server) return t.skip('the host has no IPv4 nameserver')
  const name = 'deb.debian.org'
  const q = dnsQuery(0x4d42, name)
  const onHost = await askFromHost(server, q)
  if (!onHost) return t.skip(`the host's resolver ${server} does not answer`)
  const sbx = await newSandbox(t)
  const conf = (await sbx.files.read('/etc/resolv.conf')).split('\n').filter((l) => /^nameserver/.test(l))
  assert.deepEqual(conf, ['nameserver 169.254.1.1'])
  const ask = `python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
try:
    s.sendto(bytes.fromhex('${q.toString('hex')}'), ('169.254.1.1', 53))
    print(s.recv(4096).hex())
except Exception as e: print(type(e).__name__)
"`
  const inside = Buffer.from((await sbx.commands.run(ask)).stdout.trim(), 'hex')
  assert.ok(inside.length >= 12, 'no answer from the forwarder')
  assert.equal(inside.readUInt16BE(0), 0x4d42, 'the answer is to our query')
  assert.equal(inside[3] & 15, onHost[3] & 15, 'same RCODE as the host gets')
  assert.equal(inside.readUInt16BE(6) > 0, onHost.readUInt16BE(6) > 0, 'answers inside iff on the host')
  // and the resolver library uses it
  if (onHost.readUInt16BE(6) > 0) assert.equal((await sh(sbx, `getent hosts ${name} >/dev/null; echo $?`)).out.trim(), '0')

  const off = await newSandbox(t, { allowInternetAccess: false })
  assert.equal((await off.commands.run(ask)).stdout.trim(), 'OSError', 'DNS without internet access')
})

/** Host pids of pasta processes whose parent is `ppid`. */
const pastasOf = (ppid) => hostChildren(ppid, 'pasta')

/** pasta processes in the user namespace of the sandbox's init (pasta joins it). */
function pastaOfSandbox(stateDir, id) {
  const init = readFileSync(path.join(stateDir, 'sandboxes', id, 'init.pid'), 'utf8').split(' ')[0]
  const userns = readlinkSync(`/proc/${init}/ns/user`)
  const out = []
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0')[0] === 'pasta' && readlinkSync(`/proc/${d}/ns/user`) === userns) out.push(Number(d))
    } catch {
      /* gone, or not ours to read */
    }
  }
  return out
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

test('pasta runs per sandbox with internet access and goes with it; sandboxd removes its host guard at exit', T, async (t) => {
  if (process.getuid() !== 0) return t.skip('not root')
  const srv = await startSandboxd({ env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
  t.after(() => stopSandboxd(srv))
  const table = guardTable(srv.stateDir)
  assert.ok(nftTables().includes(table), `its host guard ${table} is installed: ${nftTables()}`)
  assert.deepEqual(pastasOf(srv.proc.pid), [], 'no pasta before any sandbox (pools off)')
  const on = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, allowInternetAccess: true })
  const off = await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000, allowInternetAccess: false })
  const pids = pastasOf(srv.proc.pid)
  assert.equal(pids.length, 1, 'exactly one pasta: for the sandbox with internet access')
  const alive = (pid) => existsSync(`/proc/${pid}`)
  const records = () => readdirSync(path.join(srv.stateDir, 'net'))
  assert.deepEqual(records(), [`pasta-${pids[0]}`], 'recorded for the clean-up after a crash')
  assert.deepEqual(pastaOfSandbox(srv.stateDir, on.sandboxId), pids)
  assert.deepEqual(pastaOfSandbox(srv.stateDir, off.sandboxId), [])
  await on.kill()
  assert.ok(!alive(pids[0]), 'pasta ends with its sandbox')
  assert.deepEqual(pastasOf(srv.proc.pid), [])
  assert.deepEqual(records(), [])
  await Sandbox.create('base', { ...srv.opts, timeoutMs: 120_000 })   // internet access: the SDK's default
  const live = pastasOf(srv.proc.pid)
  assert.equal(live.length, 1)
  srv.proc.kill('SIGTERM')
  assert.deepEqual(await srv.exited, { code: 0, signal: null })
  assert.ok(!alive(live[0]), 'pasta of a sandbox alive at SIGTERM ends too')
  assert.deepEqual(records(), [])
  assert.ok(!nftTables().includes(table), 'the host guard is removed')
})

test('the shared sandboxd records each internet sandbox\'s pasta; killing the sandbox ends it', T, async (t) => {
  const state = sharedStateDir()
  if (!state) return t.skip('the shared sandboxd\'s state dir is unknown')
  const sbx = await newSandbox(t)
  const [pid, ...more] = pastaOfSandbox(state, sbx.sandboxId)
  assert.ok(pid && more.length === 0, 'one pasta in the sandbox\'s user namespace')
  assert.ok(existsSync(path.join(state, 'net', `pasta-${pid}`)), 'recorded')
  await sbx.kill()
  await waitFor(() => !existsSync(`/proc/${pid}`), { what: `pasta ${pid} to end` })
})
