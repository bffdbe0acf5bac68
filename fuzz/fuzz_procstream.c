/* fuzz_procstream.c — libFuzzer target for the client's process-stream decoder (core/procstream.c),
 * above all its binary-codec path (cfg.proto: Connect envelopes of protobuf events whose bytes are
 * mbwrap frames), and the frame decoder writing straight into the sinks.
 * Input: [mode][split seed][body...]; mode bit 0 = binary codec (else JSON), bit 1 = raw (no
 * frames inside), bits 2..3 = the stdout sink (discard, queue, tail), bit 4 = the stderr sink
 * (queue or tail), bits 5..6 the tail size. Properties checked:
 *  - the body decoded in one push and in random chunks gives the same result, facts, totals and
 *    sink contents (queues drained as they fill, tails read at the end);
 *  - every envelope's shortcut for the common binary event (mb_procstream_proto_data) agrees with
 *    protobuf-c's unpack of the same message: same event, same stream, same bytes. */
#pragma GCC diagnostic ignored "-Wmissing-braces"
#include <stdlib.h>
#include <string.h>

#include "connect.h"
#include "envd/process.pb-c.h"
#include "frames.h"
#include "procstream.h"
#include "rpc_json.h"

struct out { uint64_t hash; uint64_t total[2]; int rc; size_t nfacts; };

static void mix(uint64_t *h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 0x100000001b3ULL;
}

static void drain(struct mb_procstream *ps, struct out *o) {
  for (int s = 0; s < 2; s++) {
    size_t n;
    const unsigned char *p = mb_procstream_peek(ps, s, &n);
    mix(&o->hash, p, n);
    mb_procstream_consume(ps, s, n);
  }
  struct mb_ps_fact f[MB_PS_FACTS_MAX];
  size_t k = mb_procstream_take_facts(ps, f, MB_PS_FACTS_MAX);
  for (size_t i = 0; i < k; i++) {
    mix(&o->hash, &f[i].kind, sizeof f[i].kind);
    mix(&o->hash, &f[i].value, sizeof f[i].value);
    mix(&o->hash, f[i].text, strlen(f[i].text));
    mix(&o->hash, f[i].code, strlen(f[i].code));
  }
  o->nfacts += k;
}

static void decode(const struct mb_ps_config *cfg, const uint8_t *d, size_t n, unsigned seed, struct out *o) {
  memset(o, 0, sizeof *o);
  struct mb_procstream *ps = mb_procstream_new(cfg);
  if (!ps) __builtin_trap();
  struct mb_error err;
  size_t off = 0;
  while (off < n && !o->rc) {
    size_t k = n - off;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      size_t c = 1 + (seed >> 16) % 97;
      if (c < k) k = c;
    }
    o->rc = mb_procstream_push(ps, d + off, k, &err);
    if (o->rc && (err.code != o->rc || !err.message[0])) __builtin_trap();
    drain(ps, o);
    off += k;
  }
  if (!o->rc) o->rc = mb_procstream_finish(ps, &err);
  drain(ps, o);
  for (int s = 0; s < 2; s++) {
    o->total[s] = mb_procstream_total(ps, s);
    const unsigned char *a, *b;
    size_t al, bl;
    uint64_t next;
    int lossy;
    mb_procstream_read_from(ps, s, 0, &a, &al, &b, &bl, &next, &lossy);
    if (next != o->total[s]) __builtin_trap();
    mix(&o->hash, a, al);
    mix(&o->hash, b, bl);
  }
  mb_procstream_free(ps);
}

/* The shortcut against protobuf-c, for one envelope's payload. */
static int check_event(void *ud, const struct mb_envelope *e) {
  (void)ud;
  if (e->end_stream) return 0;
  const unsigned char *data;
  size_t n;
  int leaf = mb_procstream_proto_data(e->data, e->len, &data, &n);
  if (leaf < 0) return 0;
  if (data < e->data || n > e->len || data + n != e->data + e->len) __builtin_trap();
  struct mb_arena ar;
  if (mb_arena_init(&ar, MB_RPC_ARENA_FOR(e->len)) != MB_OK) abort();
  ProtobufCMessage *m;
  struct mb_error err;
  if (mb_rpc_unpack(&process__start_response__descriptor, e->data, e->len, &ar, &m, &err) != MB_OK) __builtin_trap();
  const Process__ProcessEvent *ev = ((const Process__StartResponse *)m)->event;
  if (!ev || ev->event_case != PROCESS__PROCESS_EVENT__EVENT_DATA || !ev->data) __builtin_trap();
  const Process__ProcessEvent__DataEvent *de = ev->data;
  static const int cases[] = {PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT,
                              PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR,
                              PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY};
  if ((int)de->output_case != cases[leaf]) __builtin_trap();
  const ProtobufCBinaryData *b = leaf == 0 ? &de->stdout : leaf == 1 ? &de->stderr : &de->pty;
  if (b->len != n || (n && memcmp(b->data, data, n) != 0)) __builtin_trap();
  mb_arena_free(&ar);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  unsigned mode = data[0], seed = data[1] | 1u;
  data += 2;
  size -= 2;
  static const size_t tails[] = {0, 5, 300, 1 << 16};
  struct mb_ps_config cfg = {.max_message = 1 << 16, .max_line = MB_FRAME_LINE_DEFAULT, .proto = mode & 1,
                             .raw = (mode >> 1) & 1};
  int k0 = (mode >> 2) & 3;
  cfg.sink[0] = (struct mb_ps_sink){k0 == 1 ? MB_PS_QUEUE : k0 >= 2 ? MB_PS_TAIL : MB_PS_DISCARD,
                                    k0 == 1 ? 1 << 20 : tails[(mode >> 5) & 3]};
  cfg.sink[1] = (mode >> 4) & 1 ? (struct mb_ps_sink){MB_PS_TAIL, tails[(mode >> 5) & 3]}
                                : (struct mb_ps_sink){MB_PS_QUEUE, 1 << 20};
  struct out a, b;
  decode(&cfg, data, size, 0, &a);
  decode(&cfg, data, size, seed, &b);
  if (a.rc != b.rc || a.hash != b.hash || a.nfacts != b.nfacts || a.total[0] != b.total[0] || a.total[1] != b.total[1])
    __builtin_trap();
  if (cfg.proto) {
    struct mb_envelope_decoder *ed = mb_envelope_decoder_new(1 << 16);
    struct mb_error err;
    if (!ed) abort();
    mb_envelope_decoder_push(ed, data, size, check_event, NULL, &err);
    mb_envelope_decoder_free(ed);
  }
  return 0;
}
