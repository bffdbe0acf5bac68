/* fuzz_sbx_template_request.c — libFuzzer target for the parsers of E2B's template build requests:
 * the build's body (POST /v2/templates/{id}/builds/{id}, sandboxd/template_spec.c: ts_parse, with
 * ts_describe and the cache keys of template_key.c over what it accepts) and the names the other
 * template routes take (POST /v3/templates' "name[:tag]" and tags, sandboxd/snapshots.c:
 * snap_parse_ref, snap_parse_tag, snap_parse_name; fromImage's image reference). Input: [mode][data...]:
 *   0  data as the body's JSON text, read as sandboxd reads it (JSON_REJECT_DUPLICATES), and
 *      again with NUL bytes allowed in strings (to reach the parser's own NUL checks);
 *   1  data drives a generator that builds a body of the SDK's shape (fromTemplate, fromImage,
 *      fromImageRegistry, steps of each type with their args, force, filesHash, the SDK's
 *      client-side step fields, startCmd, readyCmd), each value picked from a list of valid and
 *      invalid ones, taken raw from the input, or of another JSON type;
 *   2  data up to a NUL as a template name, a tag, a snapshot name and an image reference.
 * Properties, checked independently of the parsers:
 *  - a refusal comes with a message that is valid UTF-8 (it goes into a JSON reply) and names a
 *    field (a quote or a field's name), and leaves nothing to free; in a smaller buffer it is the
 *    same message cut between characters, at most one character short; the same body gives the same
 *    answer twice, and so does its JSON text read back (same message, same spec, same keys);
 *  - an accepted body has only the documented fields; exactly one base (fromTemplate, or
 *    fromImage: E2B's base image as "base", else a valid image reference of at most 255 bytes);
 *    registry credentials only of type "registry", both 1..4096 bytes, no ':' in the user name;
 *    every string of the spec is the very string of the body's field it stands for (non-NULL
 *    where required, no NUL byte, within its bound); steps as many as the body's (≤ 256), each
 *    of its type with its args (RUN 1..2, COPY 2..4, ENV pairs of variable names, WORKDIR and
 *    USER 1; ≤ 1024, each ≤ 64 KiB); a COPY source relative and never above the build context,
 *    its filesHash 64 lower-case hex digits, its mode 1..4 octal digits; users root or user
 *    (name[:group]); the spec holds a reference to the body and ts_free drops it;
 *  - ts_describe cuts on a character's start with "..." and is otherwise the step's text;
 *  - every cache key is 64 lower-case hex digits;
 *  - a body the generator built from valid values only is accepted;
 *  - a name or tag taken is canonical (1..128 of its characters, lower case, not "base", a tag no
 *    UUID), is the input trimmed and lower-cased, and parses back to itself; an image reference
 *    taken has only reference characters, no empty path component, at most one '@' (a sha256
 *    digest). */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshots.h"
#include "template_key.h"
#include "template_spec.h"

#define HASH "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define ERRLEN 1024   /* as template_api.c's start_build */

/* ---------- independent checks ---------- */

static bool utf8(const char *s) {
  json_t *j = json_string(s);   /* what sd_reply_error does with a message */
  json_decref(j);
  return j != NULL;
}

static bool lower_hex(const char *s, size_t n) {
  if (strlen(s) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

static bool is_user(const char *u) {
  static const char *const ok[] = {"root", "user", "root:root", "root:user", "user:root", "user:user", NULL};
  for (const char *const *o = ok; *o; o++)
    if (!strcmp(u, *o)) return true;
  return false;
}

static bool env_name(const char *k) {
  if (!k[0] || (k[0] >= '0' && k[0] <= '9')) return false;
  for (const char *p = k; *p; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  return true;
}

/* Relative, and no prefix of its components climbs above where it starts. */
static bool in_context(const char *p) {
  if (p[0] == '/') return false;
  long depth = 0;
  const char *c = p;
  while (*c) {
    const char *e = strchr(c, '/');
    size_t n = e ? (size_t)(e - c) : strlen(c);
    if (n == 2 && !strncmp(c, "..", 2)) depth--;
    else if (n > 0 && !(n == 1 && c[0] == '.')) depth++;
    if (depth < 0) return false;
    c += n;
    if (*c) c++;
  }
  return true;
}

static const char *field_str(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* s is the body's string value v: the same pointer, without a NUL inside, within max bytes. */
static void same_string(const char *s, json_t *v, size_t max) {
  if (!s || !json_is_string(v) || s != json_string_value(v)) __builtin_trap();
  if (strlen(s) != json_string_length(v) || strlen(s) > max) __builtin_trap();
}

static bool names_field(const char *err) {
  static const char *const names[] = {"'", "fromTemplate", "fromImage", "fromImageRegistry", "steps", "force",
                                      "startCmd", "readyCmd", NULL};
  for (const char *const *n = names; *n; n++)
    if (strstr(err, *n)) return true;
  return false;
}

static void check_describe(const ts_step *st, size_t cap) {
  size_t total = strlen(ts_kind_name(st->kind)) + 1;
  for (size_t a = 0; a < st->nargs; a++) total += strlen(st->args[a]) + 1;
  char *full = malloc(total), out[512];
  if (!full) abort();
  size_t n = (size_t)snprintf(full, total, "%s", ts_kind_name(st->kind));
  for (size_t a = 0; a < st->nargs; a++)
    if (st->args[a][0]) n += (size_t)snprintf(full + n, total - n, " %s", st->args[a]);
  if (n >= total) __builtin_trap();
  if (cap > sizeof out) cap = sizeof out;
  memset(out, 0x5A, sizeof out);
  ts_describe(st, out, cap);
  size_t len = strnlen(out, cap);
  if (len >= cap || !utf8(out)) __builtin_trap();
  if (n < cap) {
    if (strcmp(out, full) != 0) __builtin_trap();
  } else if (cap > 4) {
    if (len < 3 || strcmp(out + len - 3, "...") != 0 || strncmp(out, full, len - 3) != 0) __builtin_trap();
    /* cut where a character starts, and no sooner than one character before the end */
    if ((((unsigned char)full[len - 3]) & 0xC0) == 0x80 || len + 4 < cap) __builtin_trap();
  }
  free(full);
}

typedef struct {
  char k[TS_MAX_STEPS + 2][TK_KEY_LEN + 1];
} keys;

static void spec_keys(const ts_spec *s, keys *k) {
  tk_ctx c = {"user", "", NULL, 0};
  if (tk_base(NULL, &c, k->k[0]) != 0 || !lower_hex(k->k[0], TK_KEY_LEN)) __builtin_trap();
  for (size_t i = 0; i < s->nsteps; i++)
    if (tk_step(k->k[i], &s->steps[i], &c, k->k[i + 1]) != 0 || !lower_hex(k->k[i + 1], TK_KEY_LEN)) __builtin_trap();
  if (tk_final(k->k[s->nsteps], s->start_cmd, s->ready_cmd, k->k[s->nsteps + 1]) != 0 ||
      !lower_hex(k->k[s->nsteps + 1], TK_KEY_LEN))
    __builtin_trap();
}

/* An accepted spec against its body. */
static void check_accepted(json_t *body, const ts_spec *s, size_t cap) {
  if (!json_is_object(body) || s->body != body) __builtin_trap();
  static const char *const fields[] = {"fromTemplate", "fromImage", "fromImageRegistry", "steps", "force", "startCmd", "readyCmd", NULL};
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v) {
    const char *const *f = fields;
    while (*f && strcmp(*f, k)) f++;
    if (!*f) __builtin_trap();
  }
  const char *tpl = field_str(body, "fromTemplate"), *img = field_str(body, "fromImage");
  bool has_tpl = tpl && tpl[0], has_img = img && img[0];
  if (has_tpl == has_img) __builtin_trap();
  json_t *reg = json_object_get(body, "fromImageRegistry");
  if (json_is_null(reg)) reg = NULL;
  bool base_img = has_img && !strncmp(img, "e2bdev/base", 11) && (img[11] == '\0' || img[11] == ':');
  if (has_tpl) {
    same_string(s->from_template, json_object_get(body, "fromTemplate"), SIZE_MAX);
    if (s->from_image || reg) __builtin_trap();
  } else if (base_img) {
    if (!s->from_template || strcmp(s->from_template, "base") || s->from_image || reg) __builtin_trap();
  } else {
    same_string(s->from_image, json_object_get(body, "fromImage"), TS_MAX_IMAGE_REF);
    char why[200];
    if (s->from_template || !ts_valid_image_ref(s->from_image, why, sizeof why)) __builtin_trap();
  }
  if (!reg) {
    if (s->reg_user || s->reg_pass) __builtin_trap();
  } else {
    const char *type = field_str(reg, "type");
    if (!type || strcmp(type, "registry")) __builtin_trap();
    same_string(s->reg_user, json_object_get(reg, "username"), TS_MAX_CRED_BYTES);
    same_string(s->reg_pass, json_object_get(reg, "password"), TS_MAX_CRED_BYTES);
    if (!s->reg_user[0] || !s->reg_pass[0] || strchr(s->reg_user, ':')) __builtin_trap();
    json_object_foreach(reg, k, v)
      if (strcmp(k, "type") && strcmp(k, "username") && strcmp(k, "password")) __builtin_trap();
  }
  const char *cmds[2] = {s->start_cmd, s->ready_cmd}, *names[2] = {"startCmd", "readyCmd"};
  for (int c = 0; c < 2; c++) {
    json_t *cv = json_object_get(body, names[c]);
    if (json_is_string(cv) && json_string_value(cv)[0]) same_string(cmds[c], cv, SIZE_MAX);
    else if (cmds[c] || (cv && !json_is_null(cv) && !json_is_string(cv))) __builtin_trap();
  }
  if (s->force != json_is_true(json_object_get(body, "force"))) __builtin_trap();
  json_t *steps = json_object_get(body, "steps");
  size_t n = json_is_array(steps) ? json_array_size(steps) : 0;
  if (steps && !json_is_null(steps) && !json_is_array(steps)) __builtin_trap();
  if (s->nsteps != n || n > TS_MAX_STEPS || (n && !s->steps)) __builtin_trap();
  for (size_t i = 0; i < n; i++) {
    const ts_step *st = &s->steps[i];
    json_t *js = json_array_get(steps, i), *args = json_object_get(js, "args");
    if (!json_is_object(js) || (unsigned)st->kind > TS_USER) __builtin_trap();
    const char *type = field_str(js, "type");
    if (!type || strcmp(type, ts_kind_name(st->kind))) __builtin_trap();
    static const char *const sfields[] = {"type", "args", "force", "filesHash", "forceUpload", "resolveSymlinks", "gzip", NULL};
    json_object_foreach(js, k, v) {
      const char *const *f = sfields;
      while (*f && strcmp(*f, k)) f++;
      if (!*f) __builtin_trap();
    }
    if (st->force != json_is_true(json_object_get(js, "force"))) __builtin_trap();
    size_t na = json_is_array(args) ? json_array_size(args) : 0;
    if (st->nargs != na || na > TS_MAX_ARGS) __builtin_trap();
    for (size_t a = 0; a < na; a++) same_string(st->args[a], json_array_get(args, a), TS_MAX_ARG_BYTES);
    const char *const *arg = st->args;
    bool nonempty0 = na > 0 && arg[0][0];
    json_t *hash = json_object_get(js, "filesHash");
    if (st->kind != TS_COPY && ((hash && !json_is_null(hash)) || st->hash || st->src || st->dest)) __builtin_trap();
    if (st->kind != TS_COPY && st->has_mode) __builtin_trap();
    if (st->kind != TS_RUN && st->cmd) __builtin_trap();
    switch (st->kind) {
      case TS_RUN:
        if (na < 1 || na > 2 || !nonempty0 || st->cmd != arg[0]) __builtin_trap();
        if (na == 2 && arg[1][0] ? st->user != arg[1] : st->user != NULL) __builtin_trap();
        break;
      case TS_COPY:
        if (na < 2 || na > 4 || !nonempty0 || !arg[1][0] || st->src != arg[0] || st->dest != arg[1]) __builtin_trap();
        if (!in_context(st->src)) __builtin_trap();
        same_string(st->hash, hash, TS_HASH_LEN);
        if (!lower_hex(st->hash, TS_HASH_LEN)) __builtin_trap();
        if (na > 2 && arg[2][0] ? st->user != arg[2] : st->user != NULL) __builtin_trap();
        if (na > 3 && arg[3][0]) {
          size_t ml = strlen(arg[3]);
          if (!st->has_mode || ml > 4 || strspn(arg[3], "01234567") != ml || st->mode != (unsigned)strtoul(arg[3], NULL, 8))
            __builtin_trap();
        } else if (st->has_mode || st->mode) {
          __builtin_trap();
        }
        break;
      case TS_ENV:
        if (na < 2 || na % 2 || st->user) __builtin_trap();
        for (size_t a = 0; a < na; a += 2)
          if (!env_name(arg[a])) __builtin_trap();
        break;
      case TS_WORKDIR:
        if (na != 1 || !nonempty0 || st->user) __builtin_trap();
        break;
      case TS_USER:
        if (na != 1 || !nonempty0 || st->user != arg[0]) __builtin_trap();
        break;
    }
    if (st->user && !is_user(st->user)) __builtin_trap();
    check_describe(st, 300);   /* template_build.c's size */
    check_describe(st, cap);
  }
}

/* Two parses of equal bodies (maybe the same one) agree. */
static void same_result(int r1, const ts_spec *a, const char *e1, int r2, const ts_spec *b, const char *e2) {
  if (r1 != r2) __builtin_trap();
  if (r1 != 0) {
    if (strcmp(e1, e2) != 0) __builtin_trap();
    return;
  }
#define SAME(x, y) (((x) == NULL && (y) == NULL) || ((x) && (y) && !strcmp((x), (y))))
  if (!SAME(a->from_template, b->from_template) || !SAME(a->from_image, b->from_image) || !SAME(a->reg_user, b->reg_user) ||
      !SAME(a->reg_pass, b->reg_pass) || !SAME(a->start_cmd, b->start_cmd) || !SAME(a->ready_cmd, b->ready_cmd) ||
      a->force != b->force || a->nsteps != b->nsteps)
    __builtin_trap();
  for (size_t i = 0; i < a->nsteps; i++) {
    const ts_step *x = &a->steps[i], *y = &b->steps[i];
    if (x->kind != y->kind || x->nargs != y->nargs || x->mode != y->mode || x->has_mode != y->has_mode || x->force != y->force)
      __builtin_trap();
    if (!SAME(x->cmd, y->cmd) || !SAME(x->src, y->src) || !SAME(x->dest, y->dest) || !SAME(x->user, y->user) || !SAME(x->hash, y->hash))
      __builtin_trap();
    for (size_t j = 0; j < x->nargs; j++)
      if (!SAME(x->args[j], y->args[j])) __builtin_trap();
  }
#undef SAME
  keys *ka = malloc(sizeof *ka), *kb = malloc(sizeof *kb);
  if (!ka || !kb) abort();
  spec_keys(a, ka);
  spec_keys(b, kb);
  for (size_t i = 0; i < a->nsteps + 2; i++)
    if (strcmp(ka->k[i], kb->k[i])) __builtin_trap();
  free(ka);
  free(kb);
}

static size_t small_errlen = 64;   /* a refusal is checked in a buffer this small too (per input) */

static int parse(json_t *body, ts_spec *s, char *err) {
  memset(err, 0x5A, ERRLEN);
  err[0] = '\0';
  int rc = ts_parse(body, s, err, ERRLEN);
  if (rc != 0 && rc != -1) __builtin_trap();
  if (rc) {
    /* a message that names the field, as JSON can carry it; nothing to free */
    if (!utf8(err) || !names_field(err)) fprintf(stderr, "the refusal: %.1023s\n", err);
    if (!err[0] || strnlen(err, ERRLEN) >= ERRLEN || !utf8(err)) __builtin_trap();
    if (!names_field(err) && !(strstr(err, "must be a JSON object") && !json_is_object(body))) __builtin_trap();
    if (s->steps || s->argv || s->body) __builtin_trap();
    /* in a smaller buffer: the same message, cut between characters, at most one character short */
    char *e = malloc(small_errlen);
    ts_spec x;
    if (!e) abort();
    if (ts_parse(body, &x, e, small_errlen) != -1) __builtin_trap();
    size_t n = strnlen(e, small_errlen), full = strlen(err), room = full < small_errlen - 1 ? full : small_errlen - 1;
    if (n >= small_errlen || !utf8(e) || strncmp(e, err, n) != 0 || n + 3 < room) __builtin_trap();
    free(e);
  }
  return rc;
}

/* The parser's every property on one body; `sure`: the body must be accepted. */
static void check_body(json_t *body, bool sure, size_t cap) {
  ts_spec s1, s2, s3;
  char *e1 = malloc(ERRLEN), *e2 = malloc(ERRLEN), *e3 = malloc(ERRLEN);
  if (!e1 || !e2 || !e3) abort();
  size_t refs = body->refcount;
  int r1 = parse(body, &s1, e1);
  if (sure && r1 != 0) __builtin_trap();
  if (body->refcount != refs + (r1 == 0)) __builtin_trap();
  if (r1 == 0) check_accepted(body, &s1, cap);
  int r2 = parse(body, &s2, e2);
  same_result(r1, &s1, e1, r2, &s2, e2);
  /* its JSON text, read back */
  char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
  json_t *again = text ? json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, NULL) : NULL;
  if (!again) __builtin_trap();
  int r3 = parse(again, &s3, e3);
  same_result(r1, &s1, e1, r3, &s3, e3);
  if (r1 == 0) {
    ts_free(&s1);
    ts_free(&s2);
    ts_free(&s3);
    if (s1.steps || s1.argv || s1.body || s1.nsteps) __builtin_trap();
  }
  if (body->refcount != refs) __builtin_trap();
  json_decref(again);
  free(text);
  free(e1);
  free(e2);
  free(e3);
}

/* ---------- mode 1: the generator ---------- */

typedef struct {
  const uint8_t *p;
  size_t n;
  bool sure;   /* only valid values so far */
  bool big;    /* a long string made already (one per body: the checks copy every string) */
} rd;

static unsigned u8(rd *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

/* A palette: its first `valid` entries are valid where it is used. */
typedef struct {
  const char *const *v;
  size_t n, valid;
} pal;
#define PAL(name, valid, ...)                                  \
  static const char *const name##_v[] = {__VA_ARGS__};         \
  static const pal name = {name##_v, sizeof name##_v / sizeof name##_v[0], valid}

PAL(P_TEMPLATE, 3, "base", "my-env", "t\xc3\xa9", "");
PAL(P_IMAGE, 9, "ubuntu", "ubuntu:22.04", "e2bdev/base", "e2bdev/base:latest", "ghcr.io/org/app:v1.0-rc_2", "localhost:5000/a/b",
    "r.io/a@sha256:" HASH, "127.0.0.1:5000/test/img:1", "e2bdev/baseline", "Ubuntu", "a//b", "r.io:0/a", "", "a:", "r.io/",
    "e2bdev/base@sha256:" HASH, "r.io/a@sha256:abc");
PAL(P_CMD, 4, "echo hi", "apt-get update && apt-get install -y curl", "echo \xc3\xa9\xc3\xa9\xc3\xa9", "true", "");
PAL(P_USER_OPT, 5, "root", "user", "root:user", "user:root", "", "nobody", "root:", ":root", "user:nobody", "ROOT");
PAL(P_USER, 3, "root", "user", "user:user", "", "nobody", "root:", ":root", "user:nogroup");
PAL(P_SRC, 7, "src/", "a.txt", ".", "a/../b", "./x", "dir/sub/", "a//b/../c", "/abs", "..", "a/../../b", "", "./..", "a/./../../b");
PAL(P_DEST, 4, "/app", "/a", "rel", "~/x", "");
PAL(P_MODE, 5, "0644", "755", "7", "", "0000", "0888", "12345", "x", "-1", " 644");
PAL(P_ENV_NAME, 4, "A", "B_2", "_x", "PATH", "1A", "A-B", "", "A B", "\xc3\xa9");
PAL(P_ENV_VALUE, 4, "1", "x=y", "", "\xc3\xa9", "\xe2\x82\xac");
PAL(P_HASH, 1, HASH, "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde", "", "g123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
PAL(P_WORKDIR, 3, "/app", "rel", "~/x", "");
PAL(P_REG_TYPE, 1, "registry", "aws", "gcp", "azure", "");
PAL(P_REG_USER, 2, "u", "user@example.com", "a:b", "");
PAL(P_REG_PASS, 2, "p w", "x", "");
PAL(P_TYPE, 5, "RUN", "COPY", "ENV", "WORKDIR", "USER", "run", "ADD", "");
PAL(P_KEY, 0, "teamID", "alias", "args ", "Type", "");

/* A string: from the palette, raw from the input, or long. */
static json_t *gen_string(rd *r, const pal *p) {
  unsigned b = u8(r);
  if (b < 0xC0) {
    size_t i = b % p->n;
    if (i >= p->valid) r->sure = false;
    return json_string(p->v[i]);
  }
  r->sure = false;
  if (b == 0xFF && !r->big) {   /* long: past the bounds */
    r->big = true;
    static const size_t lens[] = {TS_MAX_IMAGE_REF, TS_MAX_IMAGE_REF + 1, TS_MAX_CRED_BYTES, TS_MAX_CRED_BYTES + 1,
                                  TS_MAX_ARG_BYTES, TS_MAX_ARG_BYTES + 1, 1000};   /* at and past each bound */
    size_t len = lens[u8(r) % (sizeof lens / sizeof lens[0])];
    char c = (char)u8(r);
    if ((unsigned char)c >= 0x80) c = 'a';
    char *s = malloc(len + 1);
    if (!s) abort();
    memset(s, c, len);
    s[len] = '\0';
    json_t *j = json_stringn(s, len);
    free(s);
    return j;
  }
  if (b == 0xFE) {   /* characters of 2, 3 or 4 bytes after 0..3 ASCII ones: a cut at any byte count may split one */
    static const char *const chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    char buf[3 + 128 * 4 + 1];
    size_t len = (size_t)snprintf(buf, sizeof buf, "%.*s", (int)(u8(r) % 4), "aaa");
    const char *c = chars[u8(r) % 3];
    for (unsigned i = 0, k = u8(r) % 128; i < k; i++) len += (size_t)snprintf(buf + len, sizeof buf - len, "%s", c);
    return json_stringn(buf, len);
  }
  size_t len = u8(r);
  if (len > r->n) len = r->n;
  char buf[256];
  memcpy(buf, r->p, len);
  r->p += len;
  r->n -= len;
  json_t *j = json_stringn(buf, len);   /* NUL bytes kept */
  if (!j) {   /* not UTF-8: as ASCII */
    for (size_t i = 0; i < len; i++)
      if ((unsigned char)buf[i] >= 0x80) buf[i] = '?';
    j = json_stringn(buf, len);
  }
  return j;
}

/* A value of another JSON type, now and then. */
static json_t *odd_value(rd *r) {
  switch (u8(r) % 6) {
    case 0: return json_null();
    case 1: return json_integer(7);
    case 2: return json_true();
    case 3: return json_array();
    case 4: return json_object();
    default: return json_real(0.5);
  }
}

static void set(json_t *o, const char *k, json_t *v) {
  if (!v) abort();
  json_object_set_new(o, k, v);
}

static json_t *maybe_odd(rd *r, json_t *v) {
  if (u8(r) % 32 == 31) {
    json_decref(v);
    r->sure = false;
    return odd_value(r);
  }
  return v;
}

static json_t *gen_step(rd *r) {
  json_t *st = json_object();
  if (!st) abort();
  json_t *type = gen_string(r, &P_TYPE);
  const char *ts = json_is_string(type) ? json_string_value(type) : "";
  int kind = !strcmp(ts, "RUN") ? 0 : !strcmp(ts, "COPY") ? 1 : !strcmp(ts, "ENV") ? 2 : !strcmp(ts, "WORKDIR") ? 3 : !strcmp(ts, "USER") ? 4 : 5;
  set(st, "type", maybe_odd(r, type));   /* (ts is gone if it was replaced) */
  unsigned b = u8(r);
  size_t nargs;
  if (b < 0xE0) {
    switch (kind) {
      case 0: nargs = 1 + b % 2; break;
      case 1: nargs = 2 + b % 3; break;
      case 2: nargs = 2 * (1 + b % 3); break;
      case 5: nargs = b % 3; break;
      default: nargs = 1;
    }
  } else {
    r->sure = false;
    nargs = b == 0xFF ? 1020 + u8(r) % 12 : b % 6;
  }
  json_t *args = json_array();
  if (!args) abort();
  for (size_t a = 0; a < nargs; a++) {
    const pal *p = &P_CMD;
    if (kind == 0) p = a == 0 ? &P_CMD : &P_USER_OPT;
    else if (kind == 1) p = a == 0 ? &P_SRC : a == 1 ? &P_DEST : a == 2 ? &P_USER_OPT : &P_MODE;
    else if (kind == 2) p = a % 2 ? &P_ENV_VALUE : &P_ENV_NAME;
    else if (kind == 3) p = &P_WORKDIR;
    else if (kind == 4) p = &P_USER;
    json_array_append_new(args, maybe_odd(r, gen_string(r, p)));
  }
  unsigned f = u8(r);
  if (f & 0x40) {   /* args absent, or null */
    r->sure = false;
    json_decref(args);
    if (f & 1) set(st, "args", json_null());
  } else {
    set(st, "args", maybe_odd(r, args));
  }
  if (f & 0x01) set(st, "force", maybe_odd(r, json_boolean(u8(r) & 1)));
  if (!(f & 0x02) == (kind == 1)) {   /* COPY has a hash unless the bit says otherwise; the others only when it does */
    if (kind != 1) r->sure = false;
    set(st, "filesHash", maybe_odd(r, gen_string(r, &P_HASH)));
  } else if (kind == 1) {
    r->sure = false;
  }
  if (f & 0x04) set(st, "forceUpload", maybe_odd(r, json_boolean(u8(r) & 1)));
  if (f & 0x08) set(st, "resolveSymlinks", maybe_odd(r, json_boolean(u8(r) & 1)));
  if (f & 0x10) set(st, "gzip", maybe_odd(r, u8(r) & 1 ? json_null() : json_boolean(1)));
  if (f & 0x20) {
    r->sure = false;
    json_t *key = gen_string(r, &P_KEY);
    if (json_is_string(key)) set(st, json_string_value(key), json_integer(1));
    json_decref(key);
  }
  if (kind == 5) r->sure = false;
  return st;
}

static json_t *gen_body(rd *r) {
  json_t *body = json_object();
  if (!body) abort();
  unsigned f = u8(r);
  bool tpl = f & 1, img = f & 2;
  if (tpl == img) r->sure = false;
  if (tpl) {
    json_t *v = gen_string(r, &P_TEMPLATE);
    set(body, "fromTemplate", maybe_odd(r, v));
  }
  bool base = false;
  if (img) {
    json_t *v = gen_string(r, &P_IMAGE);
    if (json_is_string(v)) base = !strncmp(json_string_value(v), "e2bdev/base", 11) &&
                                  (json_string_value(v)[11] == '\0' || json_string_value(v)[11] == ':');
    set(body, "fromImage", maybe_odd(r, v));
  }
  if (f & 4) {
    if (!img || base) r->sure = false;
    json_t *reg = json_object();
    if (!reg) abort();
    unsigned g = u8(r);
    if (!(g & 1)) set(reg, "type", maybe_odd(r, gen_string(r, &P_REG_TYPE)));
    else r->sure = false;
    if (!(g & 2)) set(reg, "username", maybe_odd(r, gen_string(r, &P_REG_USER)));
    else r->sure = false;
    if (!(g & 4)) set(reg, "password", maybe_odd(r, gen_string(r, &P_REG_PASS)));
    else r->sure = false;
    if (g & 8) {   /* the other kinds' fields */
      r->sure = false;
      set(reg, g & 16 ? "awsRegion" : "serviceAccountJson", json_string("x"));
    }
    set(body, "fromImageRegistry", maybe_odd(r, reg));
  }
  if (f & 8) {
    unsigned b = u8(r);
    size_t n = b < 0xF0 ? b % 9 : 250 + (b - 0xF0);
    if (n > TS_MAX_STEPS) r->sure = false;
    json_t *steps = json_array();
    if (!steps) abort();
    /* many steps: the first generated, the rest one small valid step */
    for (size_t i = 0; i < n; i++)
      json_array_append_new(steps, n > 9 && i > 0 ? json_pack("{s:s,s:[s]}", "type", "WORKDIR", "args", "/a") : gen_step(r));
    set(body, "steps", maybe_odd(r, steps));
  }
  if (f & 16) set(body, "force", maybe_odd(r, json_boolean(u8(r) & 1)));
  if (f & 32) set(body, "startCmd", maybe_odd(r, gen_string(r, &P_CMD)));
  if (f & 64) set(body, "readyCmd", maybe_odd(r, gen_string(r, &P_CMD)));
  if (f & 128) {
    r->sure = false;
    json_t *key = gen_string(r, &P_KEY);
    if (json_is_string(key)) set(body, json_string_value(key), odd_value(r));
    json_decref(key);
  }
  return body;
}

/* ---------- mode 2: names ---------- */

static bool uuid(const char *s) {
  size_t n = strlen(s);
  if (n == 32) return lower_hex(s, 32);
  if (n != 36) return false;
  for (size_t i = 0; i < 36; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  }
  return true;
}

/* The input trimmed of white space, lower-cased: [b, e). */
static void trimmed(const char *s, const char **b, const char **e) {
  while (isspace((unsigned char)*s)) s++;
  const char *t = s + strlen(s);
  while (t > s && isspace((unsigned char)t[-1])) t--;
  *b = s;
  *e = t;
}

static bool lower_equal(const char *b, size_t n, const char *canon) {
  if (strlen(canon) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (tolower((unsigned char)b[i]) != canon[i]) return false;
  return true;
}

static void check_tag(const char *in, const char *tag) {
  size_t n = strlen(tag);
  if (n == 0 || n > SNAP_TAG_MAX || strspn(tag, "abcdefghijklmnopqrstuvwxyz0123456789._-") != n || uuid(tag)) __builtin_trap();
  const char *b, *e;
  trimmed(in, &b, &e);
  if (!lower_equal(b, (size_t)(e - b), tag)) __builtin_trap();
}

static void check_names(const char *s, bool valid_utf8) {
  char name[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1], err[512], name2[SNAP_NAME_MAX + 1], tag2[SNAP_TAG_MAX + 1], err2[512];
  err[0] = '\0';
  int r = snap_parse_ref(s, name, sizeof name, tag, sizeof tag, err, sizeof err);
  int again = snap_parse_ref(s, name2, sizeof name2, tag2, sizeof tag2, err2, sizeof err2);
  if (r != again || (r && strcmp(err, err2))) __builtin_trap();
  if (r) {
    if (!err[0] || (valid_utf8 && !utf8(err))) __builtin_trap();
  } else {
    size_t n = strlen(name);
    if (n == 0 || n > SNAP_NAME_MAX || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != n || !strcmp(name, "base")) __builtin_trap();
    const char *b, *e;
    trimmed(s, &b, &e);
    const char *colon = memchr(b, ':', (size_t)(e - b));
    if (!lower_equal(b, (size_t)((colon ? colon : e) - b), name)) __builtin_trap();
    if (colon) {
      char raw[SNAP_TAG_MAX + 8];
      if ((size_t)(e - colon - 1) >= sizeof raw) __builtin_trap();
      snprintf(raw, sizeof raw, "%.*s", (int)(e - colon - 1), colon + 1);
      check_tag(raw, tag);
    } else if (tag[0]) {
      __builtin_trap();
    }
    char canon[SNAP_NAME_MAX + SNAP_TAG_MAX + 2];
    snprintf(canon, sizeof canon, "%s%s%s", name, tag[0] ? ":" : "", tag);
    if (snap_parse_ref(canon, name2, sizeof name2, tag2, sizeof tag2, err2, sizeof err2) || strcmp(name, name2) || strcmp(tag, tag2))
      __builtin_trap();
    r = snap_parse_name(s, name2, sizeof name2, err2, sizeof err2);
    if (r != (tag[0] && strcmp(tag, SNAP_DEFAULT_TAG) ? -1 : 0)) __builtin_trap();
    if (r ? !err2[0] || (valid_utf8 && !utf8(err2)) : strcmp(name, name2) != 0) __builtin_trap();
  }
  err[0] = '\0';
  if (snap_parse_tag(s, tag, sizeof tag, err, sizeof err) == 0) {
    check_tag(s, tag);
    if (snap_parse_tag(tag, tag2, sizeof tag2, err2, sizeof err2) || strcmp(tag, tag2)) __builtin_trap();
  } else if (!err[0] || (valid_utf8 && !utf8(err))) {
    __builtin_trap();
  }
  err[0] = '\0';
  bool ok = ts_valid_image_ref(s, err, sizeof err);
  if (ok != ts_valid_image_ref(s, err2, sizeof err2)) __builtin_trap();
  if (ok) {
    size_t n = strlen(s);
    if (n == 0 || n > TS_MAX_IMAGE_REF) __builtin_trap();
    if (strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/@") != n) __builtin_trap();
    if (s[0] == '/' || s[n - 1] == '/' || strstr(s, "//")) __builtin_trap();
    const char *at = strchr(s, '@');
    if (at && (strchr(at + 1, '@') || strncmp(at + 1, "sha256:", 7) || !lower_hex(at + 8, TS_HASH_LEN) || at == s || at[-1] == '/'))
      __builtin_trap();
  } else if (!err[0] || (valid_utf8 && !utf8(err))) {
    __builtin_trap();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  unsigned mode = data[0] % 3;
  size_t cap = 5 + (data[0] >> 2) % 60;   /* a short description's size */
  const char *d = (const char *)data + 1;
  size_t n = size - 1;
  small_errlen = 1 + data[size - 1] % 160;
  if (mode == 0) {
    json_t *j = json_loadb(d, n, JSON_REJECT_DUPLICATES, NULL);   /* as api_body.c */
    if (j) check_body(j, false, cap);
    json_decref(j);
    j = json_loadb(d, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (j) check_body(j, false, cap);
    json_decref(j);
  } else if (mode == 1) {
    rd r = {(const uint8_t *)d, n, true, false};
    json_t *body = gen_body(&r);
    check_body(body, r.sure, cap);
    json_decref(body);
  } else {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, d, n);
    s[n] = '\0';
    check_names(s, utf8(s));
    free(s);
  }
  return 0;
}
