// sandboxd_snapshot — a snapshot of a sandbox whose upper layer holds S MiB, and a sandbox created
// from it, each as a ratio to a cold create of `base` measured in the same run (issue 10: goal
// both ≤ 2× cold create, independent of the layer size), and the disk each one adds.
//
// Against the sandboxd at E2B_API_URL, which should run without a warm pool (SANDBOXD_WARM_POOL=0:
// a sandbox made from a snapshot always boots, so the baseline does too). For each size S in
// BENCH_SNAPSHOT_MB (default "1,1024"): a source sandbox gets S MiB of random data in one file and
// 200 small files, the host syncs (untimed: the copy, not the flush of the source's own writes, is
// measured); then BENCH_N rounds (default 5), in turn:
//   cold      POST /sandboxes {base} → first `/bin/true` exits (Connect JSON over envd)
//   snapshot  POST /sandboxes/{source}/snapshots → 201 (freeze, copy the upper layers, sync, thaw)
//   from      POST /sandboxes {the snapshot} → first `/bin/true` exits
// Disk: the state file system's free blocks (statfs, after a sync) before and after the
// snapshot, and before and after the create from it. Everything made is deleted (untimed).
// Environment: E2B_API_URL, E2B_API_KEY, SANDBOXD_STATE_DIR (required); BENCH_N; BENCH_SNAPSHOT_MB;
// BENCH_LABEL (printed). Prints a summary, then `RESULT {json}`.
import { execFileSync } from 'node:child_process'
import { statfsSync } from 'node:fs'

const API = (process.env.E2B_API_URL || '').replace(/\/$/, '')
const KEY = process.env.E2B_API_KEY
const STATE = process.env.SANDBOXD_STATE_DIR
if (!API || !KEY || !STATE) {
  console.error('sandboxd_snapshot: set E2B_API_URL, E2B_API_KEY and SANDBOXD_STATE_DIR (bench/sandboxd_snapshot.sh does)')
  process.exit(2)
}
const N = Math.max(3, Number(process.env.BENCH_N || 5))
const SIZES = (process.env.BENCH_SNAPSHOT_MB || '1,1024').split(',').map(Number).filter((x) => x >= 0)
const LABEL = process.env.BENCH_LABEL || 'state dir'

const median = (a) => {
  const s = [...a].sort((x, y) => x - y)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}
const f2 = (x) => x.toFixed(2)
const now = () => Number(process.hrtime.bigint()) / 1e6

async function api(method, p, body) {
  const res = await fetch(API + p, {
    method,
    headers: { 'X-API-KEY': KEY, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : null
}

function envelope(obj) {
  const body = Buffer.from(JSON.stringify(obj))
  const head = Buffer.alloc(5)
  head.writeUInt32BE(body.length, 1)
  return Buffer.concat([head, body])
}

// Runs a command through envd's process.Process/Start; resolves with its exit code.
async function run(sbx, cmd, args = []) {
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxID, 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' }
  if (sbx.envdAccessToken) headers['X-Access-Token'] = sbx.envdAccessToken
  headers.Authorization = 'Basic ' + Buffer.from('root:').toString('base64')
  const res = await fetch(`${API}/process.Process/Start`, { method: 'POST', headers, body: envelope({ process: { cmd, args } }) })
  const buf = Buffer.from(await res.arrayBuffer())
  if (res.status !== 200) throw new Error(`Start ${cmd}: HTTP ${res.status}: ${buf.toString()}`)
  let code = null
  for (let off = 0; off + 5 <= buf.length; ) {
    const flags = buf[off]
    const len = buf.readUInt32BE(off + 1)
    const msg = JSON.parse(buf.subarray(off + 5, off + 5 + len).toString() || '{}')
    off += 5 + len
    if (flags & 2) {   /* end of stream: an error, or nothing */
      if (msg.error) throw new Error(`Start ${cmd}: ${JSON.stringify(msg.error)}`)
      continue
    }
    const end = msg.event?.end
    if (end) code = end.exitCode ?? 0
  }
  if (code === null) throw new Error(`${cmd}: no end event (${res.status})`)
  return code
}

const create = (templateID) => api('POST', '/sandboxes', { templateID, timeout: 600, secure: true, allow_internet_access: false })
const kill = (id) => api('DELETE', `/sandboxes/${id}`)

async function createReady(templateID) {
  const t0 = now()
  const sbx = await create(templateID)
  const code = await run(sbx, '/bin/true')
  const ms = now() - t0
  if (code !== 0) throw new Error(`/bin/true exited ${code}`)
  return { sbx, ms }
}

function freeBytes() {
  execFileSync('sync')
  const s = statfsSync(STATE)
  return s.bfree * s.bsize
}

const results = []
for (const mb of SIZES) {
  const src = await create('base')
  const fill = `dd if=/dev/urandom of=/home/user/blob bs=1M count=${mb} status=none && mkdir -p /home/user/many && ` +
    'for i in $(seq 1 200); do echo $i > /home/user/many/f$i; done'
  if ((await run(src, '/bin/sh', ['-c', fill])) !== 0) throw new Error('filling the source failed')
  const cold = [], snap = [], from = [], snapDisk = [], fromDisk = []
  for (let i = 0; i < N; i++) {
    const c = await createReady('base')
    cold.push(c.ms)
    await kill(c.sbx.sandboxID)
    const before = freeBytes()
    const t0 = now()
    const s = await api('POST', `/sandboxes/${src.sandboxID}/snapshots`, {})
    snap.push(now() - t0)
    snapDisk.push(before - freeBytes())
    const beforeFrom = freeBytes()
    const f = await createReady(s.snapshotID)
    from.push(f.ms)
    fromDisk.push(beforeFrom - freeBytes())
    if ((await run(f.sbx, '/bin/sh', ['-c', 'test -s /home/user/blob && test -f /home/user/many/f200'])) !== 0) throw new Error('the snapshot lacks the data')
    await kill(f.sbx.sandboxID)
    await api('DELETE', `/templates/${encodeURIComponent(s.snapshotID)}`)
  }
  await kill(src.sandboxID)
  const r = {
    mb,
    cold_ms: median(cold),
    snapshot_ms: median(snap),
    from_ms: median(from),
    snapshot_disk_mb: median(snapDisk) / 1048576,
    from_disk_mb: median(fromDisk) / 1048576,
  }
  r.ratio_snapshot = r.snapshot_ms / r.cold_ms
  r.ratio_from = r.from_ms / r.cold_ms
  results.push(r)
  console.log(`[${LABEL}] ${mb} MiB upper layer: cold create ${f2(r.cold_ms)} ms; snapshot ${f2(r.snapshot_ms)} ms = ${f2(r.ratio_snapshot)}× cold ` +
    `(+${f2(r.snapshot_disk_mb)} MiB on disk); create from it ${f2(r.from_ms)} ms = ${f2(r.ratio_from)}× cold (+${f2(r.from_disk_mb)} MiB)`)
}
const small = results[0], big = results[results.length - 1]
const out = { label: LABEL, n: N, sizes: results }
if (results.length > 1) {
  out.snapshot_growth = big.snapshot_ms / small.snapshot_ms
  out.from_growth = big.from_ms / small.from_ms
  console.log(`[${LABEL}] ${big.mb} MiB vs ${small.mb} MiB: snapshot ${f2(out.snapshot_growth)}× slower, create from it ${f2(out.from_growth)}×`)
}
console.log('RESULT ' + JSON.stringify(out))
