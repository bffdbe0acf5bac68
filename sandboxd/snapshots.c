/* snapshots.c — the snapshot catalogue (see snapshots.h). */
#include "snapshots.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errbuf.h"
#include "ids.h"
#include "statefile.h"

#define CATALOGUE_MAX_BYTES (16u << 20)

typedef struct {
  char id[LY_ID_LEN + 1];
  layer *layer;
  char sandbox_id[65];
  int64_t created_ms;
} sbuild;

/* A template: its builds (oldest first) and its tags (each naming one of them). */
typedef struct {
  snap_info info;          /* id, name, seq; the rest mirrors the newest build */
  sbuild *b;
  size_t nb;
  snap_tag *t;
  size_t nt;
} snap;

static struct {
  pthread_mutex_t mu;
  char path[4200];
  snap *v;                 /* oldest first */
  size_t n, cap;
  uint64_t next_seq;
  snap_drop_fn on_drop;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_seq = 1};

static bool name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

static bool tag_char(char c) { return name_char(c) || c == '.'; }

static bool hex_run(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

/* A UUID as E2B's parser reads one among tag characters: 32 hex digits, or 8-4-4-4-12. */
static bool is_uuid(const char *s) {
  size_t n = strlen(s);
  if (n == 32) return hex_run(s, 32);
  return n == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' && hex_run(s, 8) && hex_run(s + 9, 4) &&
         hex_run(s + 14, 4) && hex_run(s + 19, 4) && hex_run(s + 24, 12);
}

int snap_parse_tag(const char *in, char *out, size_t outlen, char *err, size_t errlen) {
  if (!in) { seterr(err, errlen, "the tag is missing"); return -1; }
  while (isspace((unsigned char)*in)) in++;
  size_t n = strlen(in);
  while (n && isspace((unsigned char)in[n - 1])) n--;
  int shown = err_upto(in, n > 64 ? 64 : n);
  if (n == 0 || n > SNAP_TAG_MAX || n >= outlen) {
    seterr(err, errlen, "tag '%.*s': a tag is 1 to %d characters of a-z, 0-9, '.', '_' and '-' (got %zu characters)", shown, in,
           SNAP_TAG_MAX, n);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    char c = (char)tolower((unsigned char)in[i]);
    if (!tag_char(c)) { seterr(err, errlen, "tag '%.*s': a tag is made of a-z, 0-9, '.', '_' and '-' only", shown, in); return -1; }
    out[i] = c;
  }
  out[n] = 0;
  if (is_uuid(out)) { seterr(err, errlen, "tag '%s': a tag cannot be a UUID (E2B refuses them)", out); return -1; }
  return 0;
}

int snap_parse_ref(const char *in, char *out, size_t outlen, char *tag, size_t taglen, char *err, size_t errlen) {
  if (!in) { seterr(err, errlen, "the name is missing"); return -1; }
  while (isspace((unsigned char)*in)) in++;
  size_t n = strlen(in);
  while (n && isspace((unsigned char)in[n - 1])) n--;
  const char *colon = memchr(in, ':', n);
  size_t alias_len = colon ? (size_t)(colon - in) : n;
  int shown = err_upto(in, alias_len > 160 ? 160 : alias_len);
  if (colon) {
    size_t tl = n - alias_len - 1;
    char raw[SNAP_TAG_MAX + 2];
    if (tl == 0) { seterr(err, errlen, "'%.*s:' names no tag after its ':'", shown, in); return -1; }
    snprintf(raw, sizeof raw, "%.*s", (int)(tl > SNAP_TAG_MAX + 1 ? SNAP_TAG_MAX + 1 : tl), colon + 1);
    if (tl > SNAP_TAG_MAX) {
      seterr(err, errlen, "tag '%.*s...': a tag is 1 to %d characters (got %zu)", err_upto(raw, 64), raw, SNAP_TAG_MAX, tl);
      return -1;
    }
    if (snap_parse_tag(raw, tag, taglen, err, errlen) != 0) return -1;
  } else if (taglen) tag[0] = 0;
  if (memchr(in, '/', alias_len)) {
    seterr(err, errlen, "'%.*s' has a namespace: sandboxd has no teams, name templates without one", shown, in);
    return -1;
  }
  if (alias_len == 0 || alias_len > SNAP_NAME_MAX || alias_len >= outlen) {
    seterr(err, errlen, "a name is 1 to %d characters of a-z, 0-9, '_' and '-' (got %zu characters)", SNAP_NAME_MAX, alias_len);
    return -1;
  }
  for (size_t i = 0; i < alias_len; i++) {
    char c = (char)tolower((unsigned char)in[i]);
    if (!name_char(c)) { seterr(err, errlen, "'%.*s': a name is made of a-z, 0-9, '_' and '-' only", shown, in); return -1; }
    out[i] = c;
  }
  out[alias_len] = 0;
  if (!strcmp(out, "base")) { seterr(err, errlen, "'base' is sandboxd's own template: choose another name"); return -1; }
  return 0;
}

int snap_parse_name(const char *in, char *out, size_t outlen, char *err, size_t errlen) {
  char tag[SNAP_TAG_MAX + 1];
  if (snap_parse_ref(in, out, outlen, tag, sizeof tag, err, errlen) != 0) return -1;
  if (tag[0] && strcmp(tag, SNAP_DEFAULT_TAG) != 0) {
    seterr(err, errlen, "tag '%s': a snapshot is one build, tagged '%s' (tags name a template's builds: Template.build, "
           "Template.assignTags)", tag, SNAP_DEFAULT_TAG);
    return -1;
  }
  return 0;
}

void snap_on_drop(snap_drop_fn fn) {
  pthread_mutex_lock(&g.mu);
  g.on_drop = fn;
  pthread_mutex_unlock(&g.mu);
}

static sbuild *build_of(snap *s, const char *bid) {
  for (size_t i = 0; i < s->nb; i++)
    if (!strcmp(s->b[i].id, bid)) return &s->b[i];
  return NULL;
}

static snap_tag *tag_of(snap *s, const char *tag) {
  for (size_t i = 0; i < s->nt; i++)
    if (!strcmp(s->t[i].tag, tag)) return &s->t[i];
  return NULL;
}

/* The info fields that mirror the newest build. */
static void refresh_info(snap *s) {
  const sbuild *top = &s->b[s->nb - 1];
  snprintf(s->info.build_id, sizeof s->info.build_id, "%s", top->id);
  snprintf(s->info.sandbox_id, sizeof s->info.sandbox_id, "%s", top->sandbox_id);
  snprintf(s->info.layer_id, sizeof s->info.layer_id, "%s", ly_id(top->layer));
  s->info.tag[0] = 0;
  s->info.created_ms = top->created_ms;
  s->info.nbuilds = s->nb;
}

/* Writes the catalogue to <path>.tmp, syncs it, renames it over <path>; g.mu held. Each entry
 * keeps its newest build's layer, sandbox and time at the top (as version 1 had them) and every
 * build with its tags under "builds". */
static int save_locked(char *err, size_t errlen) {
  json_t *arr = json_array(), *root = json_pack("{s:i,s:o}", "version", 1, "snapshots", arr);
  if (!root) { seterr(err, errlen, "out of memory"); return -1; }
  for (size_t i = 0; i < g.n; i++) {
    const snap *s = &g.v[i];
    const sbuild *top = &s->b[s->nb - 1];
    json_t *builds = json_array();
    for (size_t k = 0; builds && k < s->nb; k++) {
      json_t *tags = json_object();
      for (size_t j = 0; tags && j < s->nt; j++)
        if (!strcmp(s->t[j].build_id, s->b[k].id)) json_object_set_new(tags, s->t[j].tag, json_integer(s->t[j].created_ms));
      json_t *bo = tags ? json_pack("{s:s,s:s,s:s,s:I,s:o}", "id", s->b[k].id, "layer", ly_id(s->b[k].layer), "sandboxID",
                                    s->b[k].sandbox_id, "createdMs", (json_int_t)s->b[k].created_ms, "tags", tags) : NULL;
      if (!bo || json_array_append_new(builds, bo) != 0) { json_decref(builds); builds = NULL; }
    }
    json_t *o = builds ? json_pack("{s:s,s:s,s:s,s:I,s:o}", "id", s->info.id, "layer", ly_id(top->layer), "sandboxID",
                                   top->sandbox_id, "createdMs", (json_int_t)top->created_ms, "builds", builds) : NULL;
    if (o && s->info.name[0]) json_object_set_new(o, "name", json_string(s->info.name));
    if (!o || json_array_append_new(arr, o) != 0) { json_decref(root); seterr(err, errlen, "out of memory"); return -1; }
  }
  int rc = statefile_save(g.path, root, JSON_INDENT(1) | JSON_SORT_KEYS, err, errlen);
  json_decref(root);
  return rc;
}

static snap *find_locked(const char *key) {
  for (size_t i = 0; i < g.n; i++)
    if (!strcmp(g.v[i].info.id, key) || (g.v[i].info.name[0] && !strcmp(g.v[i].info.name, key))) return &g.v[i];
  return NULL;
}

static bool has_build_locked(const char *bid) {
  for (size_t i = 0; i < g.n; i++)
    if (build_of(&g.v[i], bid)) return true;
  return false;
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

static void free_arrays(snap *s, bool release) {
  for (size_t i = 0; release && i < s->nb; i++) ly_release(s->b[i].layer);
  free(s->b);
  free(s->t);
  s->b = NULL;
  s->t = NULL;
  s->nb = s->nt = 0;
}

/* One entry of the file into *s (its layers opened): 0; -1 malformed or repeated; -2 a layer
 * missing or broken (why says which). */
static int load_entry(json_t *o, snap *s, char *why, size_t whylen) {
  const char *id = json_string_value(json_object_get(o, "id")), *name = json_string_value(json_object_get(o, "name"));
  json_t *builds = json_object_get(o, "builds");
  char canon[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1], msg[512];
  memset(s, 0, sizeof *s);
  if (!id || !ids_alnum(id, LY_ID_LEN) || strlen(id) != LY_ID_LEN || find_locked(id) ||
      (name && (snap_parse_name(name, canon, sizeof canon, msg, sizeof msg) != 0 || strcmp(name, canon) != 0 || find_locked(name))))
    return -1;
  snprintf(s->info.id, sizeof s->info.id, "%s", id);
  snprintf(s->info.name, sizeof s->info.name, "%s", name ? name : "");
  json_t *legacy = NULL;
  if (!builds) {   /* a catalogue of before tags: one build, the template's id, tagged default */
    legacy = json_pack("[{s:s,s:O,s:O,s:O,s:{s:O}}]", "id", id, "layer", json_object_get(o, "layer"), "sandboxID",
                       json_object_get(o, "sandboxID"), "createdMs", json_object_get(o, "createdMs"), "tags", SNAP_DEFAULT_TAG,
                       json_object_get(o, "createdMs"));
    if (!legacy) return -1;
    builds = legacy;
  }
  int rc = -1;
  size_t nb = json_is_array(builds) ? json_array_size(builds) : 0;
  if (nb == 0 || nb > SNAP_MAX_TAGS || !(s->b = calloc(nb, sizeof *s->b)) || !(s->t = calloc(SNAP_MAX_TAGS, sizeof *s->t))) goto out;
  size_t i;
  json_t *bo;
  json_array_foreach(builds, i, bo) {
    const char *bid = json_string_value(json_object_get(bo, "id")), *lid = json_string_value(json_object_get(bo, "layer"));
    const char *sid = json_string_value(json_object_get(bo, "sandboxID"));
    json_t *created = json_object_get(bo, "createdMs"), *tags = json_object_get(bo, "tags");
    if (!bid || !ids_alnum(bid, LY_ID_LEN) || strlen(bid) != LY_ID_LEN || build_of(s, bid) || has_build_locked(bid) || !lid || !sid ||
        strlen(sid) > 64 || !json_is_integer(created) || !json_is_object(tags) || json_object_size(tags) == 0)
      goto out;
    const char *k;
    json_t *v;
    json_object_foreach(tags, k, v) {
      if (snap_parse_tag(k, tag, sizeof tag, msg, sizeof msg) != 0 || strcmp(k, tag) != 0 || tag_of(s, tag) || s->nt == SNAP_MAX_TAGS ||
          !json_is_integer(v))
        goto out;
      snap_tag *t = &s->t[s->nt++];
      snprintf(t->tag, sizeof t->tag, "%s", tag);
      snprintf(t->build_id, sizeof t->build_id, "%s", bid);
      t->created_ms = json_integer_value(v);
    }
    sbuild *b = &s->b[s->nb];
    snprintf(b->id, sizeof b->id, "%s", bid);
    snprintf(b->sandbox_id, sizeof b->sandbox_id, "%s", sid);
    b->created_ms = json_integer_value(created);
    if (!(b->layer = ly_open(lid, why, whylen))) { rc = -2; goto out; }
    s->nb++;
  }
  refresh_info(s);
  rc = 0;
out:
  json_decref(legacy);
  if (rc != 0) free_arrays(s, true);
  return rc;
}

int snap_init(const char *state_dir, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  int rc = -1;
  json_t *root = NULL;
  if (snprintf(g.path, sizeof g.path, "%s/snapshots.json", state_dir) >= (int)sizeof g.path - 8) {
    seterr(err, errlen, "snapshots: state dir path too long");
    goto out;
  }
  if (statefile_load(g.path, &root, err, errlen) != 0) goto out;
  if (!root) { rc = 0; goto out; }
  json_t *arr = statefile_v1_array(root, "snapshots");
  if (!arr) { seterr(err, errlen, "%s: not a sandboxd snapshot catalogue (version 1)", g.path); goto out; }
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    snap s;
    char why[512];
    if (g.n >= SNAP_MAX) { fprintf(stderr, "sandboxd: snapshots: entry %zu of %s is past %d: dropped\n", i, g.path, SNAP_MAX); continue; }
    int lr = load_entry(o, &s, why, sizeof why);
    if (lr == -1) { fprintf(stderr, "sandboxd: snapshots: entry %zu of %s is malformed or repeated: dropped\n", i, g.path); continue; }
    if (lr == -2) { fprintf(stderr, "sandboxd: snapshots: %s: %s: dropped\n", s.info.name[0] ? s.info.name : s.info.id, why); continue; }
    if (grow_locked() != 0) { free_arrays(&s, true); seterr(err, errlen, "out of memory"); goto out; }
    s.info.seq = g.next_seq++;
    g.v[g.n++] = s;
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
  for (size_t i = 0; i < g.n; i++) free_arrays(&g.v[i], false);
  free(g.v);
  g.v = NULL;
  g.n = g.cap = 0;
  pthread_mutex_unlock(&g.mu);
}

/* Makes (b, nb, t, nt) — fresh arrays — the builds and tags of s: a build no tag names goes to
 * gone[] (capacity SNAP_MAX_TAGS + 1; their layers the caller's to release, outside the lock),
 * then the catalogue is saved. 0; or -1 with err and s as it was (the fresh arrays freed, *ngone 0). */
static int commit_locked(snap *s, sbuild *b, size_t nb, snap_tag *t, size_t nt, sbuild *gone, size_t *ngone, char *err, size_t errlen) {
  size_t k = 0;
  *ngone = 0;
  for (size_t i = 0; i < nb; i++) {
    bool named = false;
    for (size_t j = 0; j < nt && !named; j++) named = !strcmp(t[j].build_id, b[i].id);
    if (named) b[k++] = b[i];
    else gone[(*ngone)++] = b[i];
  }
  if (k == 0) { free(b); free(t); *ngone = 0; seterr(err, errlen, "internal error: a template left without builds"); return -1; }
  snap old = *s;
  s->b = b;
  s->nb = k;
  s->t = t;
  s->nt = nt;
  refresh_info(s);
  if (save_locked(err, errlen) != 0) {
    free(b);
    free(t);
    *s = old;
    *ngone = 0;
    return -1;
  }
  free(old.b);
  free(old.t);
  return 0;
}

/* After the lock: the layers of builds that left template tid, and the hook. */
static void drop_builds(const char *tid, sbuild *gone, size_t n) {
  pthread_mutex_lock(&g.mu);
  snap_drop_fn fn = g.on_drop;
  pthread_mutex_unlock(&g.mu);
  for (size_t i = 0; i < n; i++) {
    ly_release(gone[i].layer);   /* first: the hook may let the build cache free what it held */
    if (fn) fn(tid, gone[i].id);
  }
}

/* s's tags without any of tags[], then tags[] (deduplicated) naming build bid: a fresh array of
 * *nt, or NULL (out of memory). */
static snap_tag *retag(const snap *s, const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, const char *bid, int64_t now_ms, size_t *nt) {
  snap_tag *t = calloc(s->nt + ntags + 1, sizeof *t);
  if (!t) return NULL;
  size_t n = 0;
  for (size_t j = 0; j < s->nt; j++) {
    bool moved = false;
    for (size_t i = 0; i < ntags && !moved; i++) moved = !strcmp(s->t[j].tag, tags[i]);
    if (!moved) t[n++] = s->t[j];
  }
  for (size_t i = 0; i < ntags; i++) {
    bool dup = false;
    for (size_t j = 0; j < i && !dup; j++) dup = !strcmp(tags[j], tags[i]);
    if (dup || !bid) continue;
    snprintf(t[n].tag, sizeof t[n].tag, "%s", tags[i]);
    snprintf(t[n].build_id, sizeof t[n].build_id, "%s", bid);
    t[n++].created_ms = now_ms;
  }
  *nt = n;
  return t;
}

int snap_add(const char *name, layer *l, const char *sandbox_id, int64_t now_ms, snap_info *out, char *err, size_t errlen) {
  return snap_add_build(NULL, name, NULL, l, sandbox_id, now_ms, NULL, 0, out, err, errlen);
}

int snap_add_build(const char *id, const char *name, const char *build_id, layer *l, const char *sandbox_id, int64_t now_ms,
                   const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, snap_info *out, char *err, size_t errlen) {
  static const char DEFAULT[1][SNAP_TAG_MAX + 1] = {SNAP_DEFAULT_TAG};
  if (name && (!name[0] || strlen(name) > SNAP_NAME_MAX)) { seterr(err, errlen, "invalid snapshot name"); return -1; }
  if (id && !ids_alnum(id, LY_ID_LEN)) { seterr(err, errlen, "invalid snapshot id"); return -1; }
  if (build_id && (!ids_alnum(build_id, LY_ID_LEN) || strlen(build_id) != LY_ID_LEN)) { seterr(err, errlen, "invalid build id"); return -1; }
  if (ntags > SNAP_TAGS_PER_REQUEST) { seterr(err, errlen, "at most %d tags a build", SNAP_TAGS_PER_REQUEST); return -1; }
  if (ntags == 0) { tags = DEFAULT; ntags = 1; }
  sbuild gone[SNAP_MAX_TAGS + 1];
  size_t ngone = 0;
  char tid[LY_ID_LEN + 1] = "";
  pthread_mutex_lock(&g.mu);
  int rc = -1;
  snap *s = name ? find_locked(name) : NULL;
  if (s && strcmp(s->info.name, name) != 0) {
    seterr(err, errlen, "the name '%s' is the id of another snapshot", name);
    rc = -2;
    goto out;
  }
  bool added = false;
  if (!s) {
    if (g.n >= SNAP_MAX) { seterr(err, errlen, "the catalogue holds %d snapshots already: delete some first", SNAP_MAX); goto out; }
    if (grow_locked() != 0) { seterr(err, errlen, "out of memory"); goto out; }
    s = &g.v[g.n];
    memset(s, 0, sizeof *s);
    if (id && !find_locked(id)) snprintf(s->info.id, sizeof s->info.id, "%s", id);
    else do {
      if (ids_random(s->info.id, LY_ID_LEN) != 0) { seterr(err, errlen, "getrandom: %s", strerror(errno)); goto out; }
    } while (find_locked(s->info.id));
    snprintf(s->info.name, sizeof s->info.name, "%s", name ? name : "");
    added = true;
  }
  sbuild nb = {.layer = l, .created_ms = now_ms};
  snprintf(nb.sandbox_id, sizeof nb.sandbox_id, "%s", sandbox_id);
  if (build_id) {
    if (has_build_locked(build_id)) { seterr(err, errlen, "build '%s' is in the catalogue already", build_id); goto out; }
    snprintf(nb.id, sizeof nb.id, "%s", build_id);
  } else do {
    if (ids_random(nb.id, LY_ID_LEN) != 0) { seterr(err, errlen, "getrandom: %s", strerror(errno)); goto out; }
  } while (has_build_locked(nb.id) || !strcmp(nb.id, s->info.id));
  size_t nt;
  snap_tag *t = retag(s, tags, ntags, nb.id, now_ms, &nt);
  sbuild *b = t ? calloc(s->nb + 1, sizeof *b) : NULL;
  if (!b) { free(t); seterr(err, errlen, "out of memory"); goto out; }
  if (nt > SNAP_MAX_TAGS) {
    free(t);
    free(b);
    seterr(err, errlen, "template '%s' would hold %zu tags: at most %d (remove some first)", s->info.name[0] ? s->info.name : s->info.id, nt,
           SNAP_MAX_TAGS);
    goto out;
  }
  if (s->nb) memcpy(b, s->b, s->nb * sizeof *b);
  b[s->nb] = nb;
  if (added) g.n++;   /* saved with the rest */
  if (commit_locked(s, b, s->nb + 1, t, nt, gone, &ngone, err, errlen) != 0) {
    if (added) g.n--;
    goto out;
  }
  ly_hold(l);
  s->info.seq = g.next_seq++;
  /* newest last: move a template given a new build to the end */
  if (!added) {
    snap moved = *s;
    size_t at = (size_t)(s - g.v);
    memmove(&g.v[at], &g.v[at + 1], (g.n - at - 1) * sizeof *g.v);
    g.v[g.n - 1] = moved;
    s = &g.v[g.n - 1];
  }
  *out = s->info;
  snprintf(out->tag, sizeof out->tag, "%s", tags[0]);
  snprintf(tid, sizeof tid, "%s", s->info.id);
  rc = 0;
out:
  pthread_mutex_unlock(&g.mu);
  drop_builds(tid, gone, ngone);
  return rc;
}

layer *snap_resolve(const char *ref, snap_info *out, int *status, char *err, size_t errlen) {
  char key[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1];
  if (snap_parse_ref(ref, key, sizeof key, tag, sizeof tag, err, errlen) != 0) { *status = 400; return NULL; }
  const char *want = tag[0] ? tag : SNAP_DEFAULT_TAG;
  pthread_mutex_lock(&g.mu);
  snap *s = find_locked(key);
  snap_tag *t = s ? tag_of(s, want) : NULL;
  sbuild *b = t ? build_of(s, t->build_id) : NULL;
  layer *l = NULL;
  if (b) {
    l = b->layer;
    ly_hold(l);
    *out = s->info;
    snprintf(out->build_id, sizeof out->build_id, "%s", b->id);
    snprintf(out->tag, sizeof out->tag, "%s", want);
    snprintf(out->sandbox_id, sizeof out->sandbox_id, "%s", b->sandbox_id);
    snprintf(out->layer_id, sizeof out->layer_id, "%s", ly_id(l));
    out->created_ms = b->created_ms;
  } else if (s) {
    seterr(err, errlen, "template '%s' has no tag '%s'", s->info.name[0] ? s->info.name : s->info.id, want);
  } else {
    seterr(err, errlen, "template '%s' not found", ref);
  }
  pthread_mutex_unlock(&g.mu);
  if (!l) *status = 404;
  return l;
}

int snap_find(const char *key, snap_info *out) {
  pthread_mutex_lock(&g.mu);
  snap *s = find_locked(key);
  if (s) *out = s->info;
  pthread_mutex_unlock(&g.mu);
  return s ? 0 : -1;
}

bool snap_has_build(const char *build_id) {
  pthread_mutex_lock(&g.mu);
  bool has = has_build_locked(build_id);
  pthread_mutex_unlock(&g.mu);
  return has;
}

int snap_assign_tags(const char *target, const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, int64_t now_ms, char *build_id,
                     char *err, size_t errlen) {
  char key[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1], tid[LY_ID_LEN + 1] = "";
  if (ntags == 0 || ntags > SNAP_TAGS_PER_REQUEST) { seterr(err, errlen, "1 to %d tags a request", SNAP_TAGS_PER_REQUEST); return 400; }
  if (snap_parse_ref(target, key, sizeof key, tag, sizeof tag, err, errlen) != 0) return 400;
  const char *want = tag[0] ? tag : SNAP_DEFAULT_TAG;
  sbuild gone[SNAP_MAX_TAGS + 1];
  size_t ngone = 0;
  int st = 500;
  pthread_mutex_lock(&g.mu);
  snap *s = find_locked(key);
  snap_tag *from = s ? tag_of(s, want) : NULL;
  if (!s) { st = 404; seterr(err, errlen, "template '%s' not found", key); goto out; }
  if (!from) { st = 404; seterr(err, errlen, "template '%s' has no tag '%s'", s->info.name[0] ? s->info.name : s->info.id, want); goto out; }
  char bid[LY_ID_LEN + 1];
  snprintf(bid, sizeof bid, "%s", from->build_id);
  size_t nt;
  snap_tag *t = retag(s, tags, ntags, bid, now_ms, &nt);
  sbuild *b = t ? calloc(s->nb, sizeof *b) : NULL;
  if (!b) { free(t); seterr(err, errlen, "out of memory"); goto out; }
  if (nt > SNAP_MAX_TAGS) {
    free(t);
    free(b);
    st = 400;
    seterr(err, errlen, "template '%s' would hold %zu tags: at most %d (remove some first)", s->info.name[0] ? s->info.name : s->info.id, nt,
           SNAP_MAX_TAGS);
    goto out;
  }
  memcpy(b, s->b, s->nb * sizeof *b);
  if (commit_locked(s, b, s->nb, t, nt, gone, &ngone, err, errlen) != 0) goto out;
  snprintf(tid, sizeof tid, "%s", s->info.id);
  snprintf(build_id, LY_ID_LEN + 1, "%s", bid);
  st = 0;
out:
  pthread_mutex_unlock(&g.mu);
  drop_builds(tid, gone, ngone);
  return st;
}

int snap_remove_tags(const char *name, const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, char *err, size_t errlen) {
  char key[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1], tid[LY_ID_LEN + 1] = "";
  if (ntags == 0 || ntags > SNAP_TAGS_PER_REQUEST) { seterr(err, errlen, "1 to %d tags a request", SNAP_TAGS_PER_REQUEST); return 400; }
  if (snap_parse_ref(name, key, sizeof key, tag, sizeof tag, err, errlen) != 0) return 400;
  if (tag[0]) { seterr(err, errlen, "'%s:%s' names a tag: name the template alone, and the tags in 'tags'", key, tag); return 400; }
  for (size_t i = 0; i < ntags; i++)
    if (!strcmp(tags[i], SNAP_DEFAULT_TAG)) { seterr(err, errlen, "the tag '%s' cannot be removed (as in E2B): assign it to another build instead", SNAP_DEFAULT_TAG); return 400; }
  sbuild gone[SNAP_MAX_TAGS + 1];
  size_t ngone = 0;
  int st = 500;
  pthread_mutex_lock(&g.mu);
  snap *s = find_locked(key);
  if (!s) { st = 404; seterr(err, errlen, "template '%s' not found", key); goto out; }
  const char *shown = s->info.name[0] ? s->info.name : s->info.id;
  for (size_t i = 0; i < ntags; i++)
    if (!tag_of(s, tags[i])) { st = 404; seterr(err, errlen, "template '%s' has no tag '%s'", shown, tags[i]); goto out; }
  size_t nt;
  snap_tag *t = retag(s, tags, ntags, NULL, 0, &nt);
  sbuild *b = t ? calloc(s->nb, sizeof *b) : NULL;
  if (!b) { free(t); seterr(err, errlen, "out of memory"); goto out; }
  if (nt == 0) {
    free(t);
    free(b);
    st = 400;
    seterr(err, errlen, "those are all the tags of template '%s': delete the template instead (DELETE /templates/%s)", shown, shown);
    goto out;
  }
  memcpy(b, s->b, s->nb * sizeof *b);
  if (commit_locked(s, b, s->nb, t, nt, gone, &ngone, err, errlen) != 0) goto out;
  snprintf(tid, sizeof tid, "%s", s->info.id);
  st = 0;
out:
  pthread_mutex_unlock(&g.mu);
  drop_builds(tid, gone, ngone);
  return st;
}

static int tag_order(const void *a, const void *b) {
  const snap_tag *x = a, *y = b;
  if (x->created_ms != y->created_ms) return x->created_ms < y->created_ms ? -1 : 1;
  return strcmp(x->tag, y->tag);
}

int snap_tags(const char *ref, snap_tag **out, size_t *n, char *err, size_t errlen) {
  char key[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1];
  *out = NULL;
  *n = 0;
  if (snap_parse_ref(ref, key, sizeof key, tag, sizeof tag, err, errlen) != 0) return 400;
  if (tag[0]) { seterr(err, errlen, "'%s:%s' names a tag: name the template alone (its id or name)", key, tag); return 400; }
  pthread_mutex_lock(&g.mu);
  int st = 0;
  snap *s = find_locked(key);
  if (!s) { st = 404; seterr(err, errlen, "template '%s' not found", key); goto out; }
  if (!(*out = calloc(s->nt, sizeof **out))) { st = 500; seterr(err, errlen, "out of memory"); goto out; }
  memcpy(*out, s->t, s->nt * sizeof **out);
  *n = s->nt;
  qsort(*out, *n, sizeof **out, tag_order);
out:
  pthread_mutex_unlock(&g.mu);
  return st;
}

int snap_delete(const char *ref, char *err, size_t errlen) {
  char key[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1];
  if (snap_parse_ref(ref, key, sizeof key, tag, sizeof tag, err, errlen) != 0) return 400;
  if (tag[0] && strcmp(tag, SNAP_DEFAULT_TAG) != 0) {
    seterr(err, errlen, "'%s:%s': a template is deleted whole, with all its tags: name it without a tag (DELETE /templates/tags "
           "removes tags)", key, tag);
    return 400;
  }
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
  drop_builds(gone.info.id, gone.b, gone.nb);
  free_arrays(&gone, false);
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
