/* snapshots.c — the snapshot catalogue (see snapshots.h). */
#include "snapshots.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ids.h"

#define CATALOGUE_MAX_BYTES (16u << 20)

typedef struct { snap_info info; layer *layer; } snap;

static struct {
  pthread_mutex_t mu;
  char path[4200];
  snap *v;                 /* oldest first */
  size_t n, cap;
  uint64_t next_seq;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_seq = 1};

__attribute__((format(printf, 3, 4))) static void seterr(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static bool name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

int snap_parse_name(const char *in, char *out, size_t outlen, char *err, size_t errlen) {
  if (!in) { seterr(err, errlen, "the name is missing"); return -1; }
  while (isspace((unsigned char)*in)) in++;
  size_t n = strlen(in);
  while (n && isspace((unsigned char)in[n - 1])) n--;
  const char *colon = memchr(in, ':', n);
  size_t alias_len = colon ? (size_t)(colon - in) : n;
  if (colon) {
    const char *tag = colon + 1;
    size_t tl = n - alias_len - 1;
    if (tl != strlen(SNAP_DEFAULT_TAG) || strncasecmp(tag, SNAP_DEFAULT_TAG, tl) != 0) {
      seterr(err, errlen, "tag '%.*s': sandboxd keeps one state per snapshot, its tag is '%s'", (int)(tl > 64 ? 64 : tl), tag,
             SNAP_DEFAULT_TAG);
      return -1;
    }
  }
  if (memchr(in, '/', alias_len)) {
    seterr(err, errlen, "'%.*s' has a namespace: sandboxd has no teams, name snapshots without one", (int)(alias_len > 160 ? 160 : alias_len), in);
    return -1;
  }
  if (alias_len == 0 || alias_len > SNAP_NAME_MAX || alias_len >= outlen) {
    seterr(err, errlen, "a name is 1 to %d characters of a-z, 0-9, '_' and '-' (got %zu characters)", SNAP_NAME_MAX, alias_len);
    return -1;
  }
  for (size_t i = 0; i < alias_len; i++) {
    char c = (char)tolower((unsigned char)in[i]);
    if (!name_char(c)) {
      seterr(err, errlen, "'%.*s': a name is made of a-z, 0-9, '_' and '-' only", (int)(alias_len > 160 ? 160 : alias_len), in);
      return -1;
    }
    out[i] = c;
  }
  out[alias_len] = 0;
  if (!strcmp(out, "base")) { seterr(err, errlen, "'base' is sandboxd's own template: choose another name"); return -1; }
  return 0;
}

/* Writes the catalogue to <path>.tmp, syncs it, renames it over <path>; g.mu held. */
static int save_locked(char *err, size_t errlen) {
  json_t *arr = json_array(), *root = json_pack("{s:i,s:o}", "version", 1, "snapshots", arr);
  if (!root) { seterr(err, errlen, "out of memory"); return -1; }
  for (size_t i = 0; i < g.n; i++) {
    const snap_info *s = &g.v[i].info;
    json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "id", s->id, "layer", ly_id(g.v[i].layer), "sandboxID", s->sandbox_id,
                          "createdMs", (json_int_t)s->created_ms);
    if (o && s->name[0]) json_object_set_new(o, "name", json_string(s->name));
    if (!o || json_array_append_new(arr, o) != 0) { json_decref(root); seterr(err, errlen, "out of memory"); return -1; }
  }
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", g.path);
  int rc = -1;
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
  json_decref(root);
  if (!text) { seterr(err, errlen, "out of memory"); return -1; }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) { seterr(err, errlen, "writing %s: %s", tmp, strerror(errno)); goto out; }
  size_t len = strlen(text), off = 0;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0) { if (errno == EINTR) continue; break; }
    off += (size_t)w;
  }
  if (off < len || fsync(fd) != 0) { seterr(err, errlen, "writing %s: %s", tmp, strerror(errno)); close(fd); unlink(tmp); goto out; }
  if (close(fd) != 0 || rename(tmp, g.path) != 0) { seterr(err, errlen, "writing %s: %s", g.path, strerror(errno)); unlink(tmp); goto out; }
  rc = 0;
out:
  free(text);
  return rc;
}

static snap *find_locked(const char *key) {
  for (size_t i = 0; i < g.n; i++)
    if (!strcmp(g.v[i].info.id, key) || (g.v[i].info.name[0] && !strcmp(g.v[i].info.name, key))) return &g.v[i];
  return NULL;
}

static int grow_locked(void) {
  if (g.n < g.cap) return 0;
  size_t nc = g.cap ? g.cap * 2 : 16;
  snap *p = realloc(g.v, nc * sizeof *p);
  if (!p) return -1;
  g.v = p;
  g.cap = nc;
  return 0;
}

int snap_init(const char *state_dir, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  int rc = -1;
  json_t *root = NULL;
  if (snprintf(g.path, sizeof g.path, "%s/snapshots.json", state_dir) >= (int)sizeof g.path - 8) {
    seterr(err, errlen, "snapshots: state dir path too long");
    goto out;
  }
  if (access(g.path, F_OK) != 0 && errno == ENOENT) { rc = 0; goto out; }
  json_error_t je;
  root = json_load_file(g.path, JSON_REJECT_DUPLICATES, &je);
  json_t *arr = root ? json_object_get(root, "snapshots") : NULL;
  if (!root || !json_is_array(arr) || json_integer_value(json_object_get(root, "version")) != 1) {
    seterr(err, errlen, "%s: %s", g.path, root ? "not a sandboxd snapshot catalogue (version 1)" : je.text);
    goto out;
  }
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    const char *id = json_string_value(json_object_get(o, "id")), *lid = json_string_value(json_object_get(o, "layer"));
    const char *sid = json_string_value(json_object_get(o, "sandboxID")), *name = json_string_value(json_object_get(o, "name"));
    json_t *created = json_object_get(o, "createdMs");
    char canon[SNAP_NAME_MAX + 1], why[512];
    if (!id || !ids_alnum(id, LY_ID_LEN) || strlen(id) != LY_ID_LEN || !lid || !sid || strlen(sid) > 64 || !json_is_integer(created) ||
        (name && snap_parse_name(name, canon, sizeof canon, why, sizeof why) != 0) || (name && strcmp(name, canon) != 0) ||
        find_locked(id) || (name && find_locked(name)) || g.n >= SNAP_MAX) {
      fprintf(stderr, "sandboxd: snapshots: entry %zu of %s is malformed or repeated: dropped\n", i, g.path);
      continue;
    }
    layer *l = ly_open(lid, why, sizeof why);
    if (!l) { fprintf(stderr, "sandboxd: snapshots: %s: %s: dropped\n", name ? name : id, why); continue; }
    if (grow_locked() != 0) { ly_release(l); seterr(err, errlen, "out of memory"); goto out; }
    snap *s = &g.v[g.n++];
    memset(s, 0, sizeof *s);
    snprintf(s->info.id, sizeof s->info.id, "%s", id);
    snprintf(s->info.name, sizeof s->info.name, "%s", name ? name : "");
    snprintf(s->info.sandbox_id, sizeof s->info.sandbox_id, "%s", sid);
    snprintf(s->info.layer_id, sizeof s->info.layer_id, "%s", lid);
    s->info.created_ms = json_integer_value(created);
    s->info.seq = g.next_seq++;
    s->layer = l;
  }
  rc = 0;
out:
  json_decref(root);
  pthread_mutex_unlock(&g.mu);
  return rc;
}

void snap_shutdown(void) {
  pthread_mutex_lock(&g.mu);
  /* their layers are not released: a release to zero would remove a snapshot's files */
  free(g.v);
  g.v = NULL;
  g.n = g.cap = 0;
  pthread_mutex_unlock(&g.mu);
}

int snap_add(const char *name, layer *l, const char *sandbox_id, int64_t now_ms, snap_info *out, char *err, size_t errlen) {
  return snap_add_as(NULL, name, l, sandbox_id, now_ms, out, err, errlen);
}

int snap_add_as(const char *id, const char *name, layer *l, const char *sandbox_id, int64_t now_ms, snap_info *out, char *err,
                size_t errlen) {
  if (name && (!name[0] || strlen(name) > SNAP_NAME_MAX)) { seterr(err, errlen, "invalid snapshot name"); return -1; }
  if (id && !ids_alnum(id, LY_ID_LEN)) { seterr(err, errlen, "invalid snapshot id"); return -1; }
  pthread_mutex_lock(&g.mu);
  int rc = -1;
  layer *old = NULL;
  snap *s = name ? find_locked(name) : NULL;
  if (s && strcmp(s->info.name, name) != 0) {
    seterr(err, errlen, "the name '%s' is the id of another snapshot", name);
    rc = -2;
    goto out;
  }
  snap saved;
  bool added = false;
  if (s) {
    saved = *s;
    old = s->layer;
  } else {
    if (g.n >= SNAP_MAX) { seterr(err, errlen, "the catalogue holds %d snapshots already: delete some first", SNAP_MAX); goto out; }
    if (grow_locked() != 0) { seterr(err, errlen, "out of memory"); goto out; }
    s = &g.v[g.n];
    memset(s, 0, sizeof *s);
    if (id && !find_locked(id)) snprintf(s->info.id, sizeof s->info.id, "%s", id);
    else do {
      if (ids_random(s->info.id, LY_ID_LEN) != 0) { seterr(err, errlen, "getrandom: %s", strerror(errno)); goto out; }
    } while (find_locked(s->info.id));
    snprintf(s->info.name, sizeof s->info.name, "%s", name ? name : "");
    g.n++;
    added = true;
  }
  snprintf(s->info.sandbox_id, sizeof s->info.sandbox_id, "%s", sandbox_id);
  snprintf(s->info.layer_id, sizeof s->info.layer_id, "%s", ly_id(l));
  s->info.created_ms = now_ms;
  s->info.seq = g.next_seq++;
  s->layer = l;
  if (save_locked(err, errlen) != 0) {   /* nothing changes unless it is on disk */
    if (added) g.n--;
    else *s = saved;
    old = NULL;
    goto out;
  }
  ly_hold(l);
  /* newest last: move a re-taken name to the end */
  if (!added) {
    snap moved = *s;
    size_t at = (size_t)(s - g.v);
    memmove(&g.v[at], &g.v[at + 1], (g.n - at - 1) * sizeof *g.v);
    g.v[g.n - 1] = moved;
    s = &g.v[g.n - 1];
  }
  *out = s->info;
  rc = 0;
out:
  pthread_mutex_unlock(&g.mu);
  if (rc == 0) ly_release(old);
  return rc;
}

/* ref without its ":default" into key; -1 with err when malformed. */
static int ref_key(const char *ref, char *key, size_t keylen, char *err, size_t errlen) {
  /* ids are also names as far as the syntax goes */
  return snap_parse_name(ref, key, keylen, err, errlen);
}

layer *snap_resolve(const char *ref, snap_info *out, int *status, char *err, size_t errlen) {
  char key[SNAP_NAME_MAX + 1];
  if (ref_key(ref, key, sizeof key, err, errlen) != 0) { *status = 400; return NULL; }
  pthread_mutex_lock(&g.mu);
  snap *s = find_locked(key);
  layer *l = NULL;
  if (s) {
    l = s->layer;
    ly_hold(l);
    *out = s->info;
  }
  pthread_mutex_unlock(&g.mu);
  if (!l) { *status = 404; seterr(err, errlen, "template '%s' not found", ref); }
  return l;
}

int snap_delete(const char *ref, char *err, size_t errlen) {
  char key[SNAP_NAME_MAX + 1];
  if (ref_key(ref, key, sizeof key, err, errlen) != 0) return 400;
  pthread_mutex_lock(&g.mu);
  snap *s = find_locked(key);
  if (!s) { pthread_mutex_unlock(&g.mu); seterr(err, errlen, "template '%s' not found", ref); return 404; }
  snap gone = *s;
  size_t at = (size_t)(s - g.v);
  memmove(&g.v[at], &g.v[at + 1], (g.n - at - 1) * sizeof *g.v);
  g.n--;
  if (save_locked(err, errlen) != 0) {
    memmove(&g.v[at + 1], &g.v[at], (g.n - at) * sizeof *g.v);
    g.v[at] = gone;
    g.n++;
    pthread_mutex_unlock(&g.mu);
    return 500;
  }
  pthread_mutex_unlock(&g.mu);
  ly_release(gone.layer);
  return 0;
}

snap_info *snap_list(size_t *n) {
  pthread_mutex_lock(&g.mu);
  snap_info *v = calloc(g.n ? g.n : 1, sizeof *v);
  *n = 0;
  if (v) {
    for (size_t i = 0; i < g.n; i++) v[i] = g.v[g.n - 1 - i].info;
    *n = g.n;
  }
  pthread_mutex_unlock(&g.mu);
  return v;
}
