/* template_build.c — see template_build.h. */
#include "template_build.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "clocks.h"
#include "errbuf.h"
#include "ids.h"
#include "image.h"
#include "layers.h"
#include "net.h"
#include "ptab.h"
#include "registry.h"
#include "sandbox.h"
#include "statefile.h"
#include "template_cache.h"
#include "template_key.h"
#include "users.h"

#define TB_TAIL 2048                 /* output kept for a failed step's reason */
#define TB_GRANTS 1024               /* upload tokens outstanding */
#define TB_MAX_UPLOAD_BYTES (4ULL << 30)
#define TB_BUILD_LEASE_S 86400
#define TB_READY_POLL_MS 200

typedef enum { B_WAITING, B_BUILDING, B_READY, B_ERROR } bstate;
static const char *const STATE_NAME[] = {"waiting", "building", "ready", "error"};

typedef struct { int64_t ms; const char *level; char *msg; char step[24]; } logent;

typedef struct build {
  char tid[TB_ID_LEN + 1], bid[TB_ID_LEN + 1], name[SNAP_NAME_MAX + 1];
  char tags[SNAP_TAGS_PER_REQUEST][SNAP_TAG_MAX + 1];   /* the build takes them when it is done */
  size_t ntags;                      /* 0: "default" */
  bstate state;
  logent *log;
  size_t nlog, caplog;
  bool log_full;
  char *reason;
  char reason_step[24];
  size_t reason_from;                /* the failed step's first log entry */
  char sandbox_id[65];               /* while building */
  int cpu_count;                     /* the template's limits (0: sandboxd's) */
  long memory_mb;
  ts_spec spec;
  uint64_t seq;
} build;

typedef struct { char tid[TB_ID_LEN + 1], hash[TS_HASH_LEN + 1], token[TB_TOKEN_LEN + 1]; } grant;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t idle;
  char state_dir[4096];
  build *b[TB_MAX_BUILDS];
  size_t nb;
  uint64_t next_seq;
  int running;
  bool stopping;
  grant grants[TB_GRANTS];
  size_t ngrants;
  json_t *defaults;                  /* {build id: {templateID, envs: {}, workdir, ...}} (a build of before
                                        tags: its template's id, no templateID) */
  int64_t ready_timeout_ms;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER, .next_seq = 1, .ready_timeout_ms = TB_READY_TIMEOUT_MS};

void tb_set_ready_timeout(int64_t ms) {
  if (ms < 1000) ms = 1000;
  if (ms > 3600 * 1000) ms = 3600 * 1000;
  pthread_mutex_lock(&g.mu);
  g.ready_timeout_ms = ms;
  pthread_mutex_unlock(&g.mu);
}

/* ---- the uploads' directories ---- */

static void file_path(const char *tid, const char *hash, char *out, size_t cap) {
  if (hash) snprintf(out, cap, "%s/template-files/%s/%s", g.state_dir, tid, hash);
  else snprintf(out, cap, "%s/template-files/%s", g.state_dir, tid);
}

/* Every upload of template tid (only the unfinished ones, .upload-*, when partial), then its
 * directory once empty. */
static void remove_uploads(const char *tid, bool partial) {
  char dir[4400], path[4700];
  file_path(tid, NULL, dir, sizeof dir);
  DIR *dh = opendir(dir);
  for (struct dirent *de; dh && (de = readdir(dh));) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (partial && strncmp(de->d_name, ".upload-", 8) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    unlink(path);
  }
  if (dh) closedir(dh);
  rmdir(dir);   /* fails while uploads are left: they stay */
}

/* At start: uploads of templates the catalogue does not have (requested, never built, before a
 * restart) and unfinished uploads go; so do the defaults of templates that are gone. */
static void sweep_at_start(void) {
  char dir[4300];
  snprintf(dir, sizeof dir, "%s/template-files", g.state_dir);
  DIR *dh = opendir(dir);
  for (struct dirent *de; dh && (de = readdir(dh));) {
    if (de->d_name[0] == '.' || !ids_alnum(de->d_name, 64)) continue;
    snap_info si;
    remove_uploads(de->d_name, snap_find(de->d_name, &si) == 0 && !strcmp(si.id, de->d_name));
  }
  if (dh) closedir(dh);
  const char *k;
  json_t *v, *tmp;
  json_object_foreach_safe(g.defaults, tmp, k, v) {
    if (!snap_has_build(k)) json_object_del(g.defaults, k);
  }
}

/* ---- the defaults store ---- */

static void defaults_path(char *out, size_t cap) { snprintf(out, cap, "%s/template-defaults.json", g.state_dir); }

static int save_defaults_locked(char *err, size_t errlen) {
  char path[4200];
  defaults_path(path, sizeof path);
  return statefile_save(path, g.defaults, JSON_COMPACT, err, errlen);
}

/* A build left the catalogue (its last tag moved or removed, its template deleted; its layer
 * released): its defaults go, and the cache may free what only that build used. */
static void build_dropped(const char *tid, const char *bid) {
  char err[256];
  pthread_mutex_lock(&g.mu);
  if (g.defaults && json_object_get(g.defaults, bid)) {
    json_object_del(g.defaults, bid);
    if (save_defaults_locked(err, sizeof err) != 0) fprintf(stderr, "sandboxd: template %s: %s\n", tid, err);
  }
  pthread_mutex_unlock(&g.mu);
  tc_trim();
}

/* A bound of the build cache from the environment (a positive integer, times unit), 0: none set. */
static unsigned long long cache_bound(const char *var, unsigned long long unit) {
  const char *v = getenv(var);
  if (!v || !*v) return 0;
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || *end || n == 0 || n > (~0ULL) / unit) {
    fprintf(stderr, "sandboxd: %s=%s is not a positive integer: the default bound applies\n", var, v);
    return 0;
  }
  return n * unit;
}

int tb_init(const char *state_dir, char *err, size_t errlen) {
  snprintf(g.state_dir, sizeof g.state_dir, "%s", state_dir);
  char path[4200];
  snprintf(path, sizeof path, "%s/template-files", state_dir);
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return seterr(err, errlen, "mkdir %s: %s", path, strerror(errno));
  defaults_path(path, sizeof path);
  json_t *d;
  if (statefile_load(path, &d, err, errlen) != 0) return -1;
  if (d && !json_is_object(d)) { json_decref(d); return seterr(err, errlen, "%s: not a JSON object", path); }
  g.defaults = d ? d : json_object();
  g.stopping = false;
  if (!g.defaults) return seterr(err, errlen, "out of memory");
  sweep_at_start();
  snap_on_drop(build_dropped);
  return tc_init(state_dir, cache_bound("SANDBOXD_TEMPLATE_CACHE_ENTRIES", 1), cache_bound("SANDBOXD_TEMPLATE_CACHE_MB", 1ULL << 20), err, errlen);
}

static void build_free(build *b) {
  for (size_t i = 0; i < b->nlog; i++) free(b->log[i].msg);
  free(b->log);
  free(b->reason);
  ts_free(&b->spec);
  free(b);
}

void tb_shutdown(void) {
  static char ids[TB_MAX_BUILDS][65];
  size_t n = 0;
  pthread_mutex_lock(&g.mu);
  g.stopping = true;
  for (size_t i = 0; i < g.nb; i++)
    if (g.b[i]->state == B_BUILDING && g.b[i]->sandbox_id[0]) snprintf(ids[n++], sizeof ids[0], "%s", g.b[i]->sandbox_id);
  pthread_mutex_unlock(&g.mu);
  for (size_t i = 0; i < n; i++) (void)reg_kill(ids[i]);   /* waits for the build to let go: never under g.mu */
  pthread_mutex_lock(&g.mu);
  while (g.running > 0) pthread_cond_wait(&g.idle, &g.mu);
  for (size_t i = 0; i < g.nb; i++) build_free(g.b[i]);
  g.nb = 0;
  g.ngrants = 0;
  json_decref(g.defaults);
  g.defaults = NULL;
  pthread_mutex_unlock(&g.mu);
  tc_shutdown();
}

/* ---- the build table ---- */

static build *find_locked(const char *tid, const char *bid) {
  for (size_t i = 0; i < g.nb; i++)
    if (!strcmp(g.b[i]->tid, tid) && (!bid || !strcmp(g.b[i]->bid, bid))) return g.b[i];
  return NULL;
}

static void logf_locked(build *b, const char *level, const char *step, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void logf_locked(build *b, const char *level, const char *step, const char *fmt, ...) {
  if (b->log_full) return;
  if (b->nlog == b->caplog) {
    size_t cap = b->caplog ? b->caplog * 2 : 64;
    logent *v = realloc(b->log, cap * sizeof *v);
    if (!v) return;
    b->log = v;
    b->caplog = cap;
  }
  char *msg = malloc(TB_MAX_LINE + 1);
  if (!msg) return;
  if (b->nlog == TB_MAX_LOG - 1) {
    snprintf(msg, TB_MAX_LINE + 1, "the build log holds %d entries: later output is not kept", TB_MAX_LOG);
    b->log_full = true;
    level = "warn";
  } else {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, TB_MAX_LINE + 1, fmt, ap);
    va_end(ap);
  }
  logent *e = &b->log[b->nlog++];
  e->ms = wall_ms();
  e->level = level;
  e->msg = msg;
  snprintf(e->step, sizeof e->step, "%s", step ? step : "");
}

#define BLOG(b, level, step, ...) do { pthread_mutex_lock(&g.mu); logf_locked(b, level, step, __VA_ARGS__); pthread_mutex_unlock(&g.mu); } while (0)

int tb_request(const char *name, const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, int cpu_count, long memory_mb, char *template_id,
               char *build_id, char *err, size_t errlen) {
  if (ntags > SNAP_TAGS_PER_REQUEST) { seterr(err, errlen, "at most %d tags a build", SNAP_TAGS_PER_REQUEST); return 400; }
  pthread_mutex_lock(&g.mu);
  int st = 0;
  char tid[TB_ID_LEN + 1] = "";
  for (size_t i = 0; i < g.nb; i++) {   /* an earlier build of the name: its template */
    if (strcmp(g.b[i]->name, name) != 0) continue;
    if (g.b[i]->state == B_BUILDING) { st = 409; seterr(err, errlen, "template '%s' is being built (build %s): wait for it to finish", name, g.b[i]->bid); goto out; }
    snprintf(tid, sizeof tid, "%s", g.b[i]->tid);
  }
  snap_info si;
  if (!tid[0] && snap_find(name, &si) == 0) snprintf(tid, sizeof tid, "%.*s", TB_ID_LEN, si.id);
  if (g.nb == TB_MAX_BUILDS) {   /* forget the oldest build that is not running */
    size_t i = 0;
    while (i < g.nb && g.b[i]->state == B_BUILDING) i++;
    if (i == g.nb) { st = 429; seterr(err, errlen, "%d template builds are running: wait for one to finish", TB_MAX_BUILDS); goto out; }
    build *old = g.b[i];
    memmove(&g.b[i], &g.b[i + 1], (g.nb - i - 1) * sizeof *g.b);
    g.nb--;
    snap_info osi;
    if (!find_locked(old->tid, NULL) && snap_find(old->tid, &osi) != 0) remove_uploads(old->tid, false);   /* never built, no other build of it */
    build_free(old);
  }
  build *b = calloc(1, sizeof *b);
  if (!b) { st = 500; seterr(err, errlen, "out of memory"); goto out; }
  if (tid[0]) snprintf(b->tid, sizeof b->tid, "%s", tid);
  else if (ids_random(b->tid, TB_ID_LEN) != 0) { free(b); st = 500; seterr(err, errlen, "getrandom: %s", strerror(errno)); goto out; }
  if (ids_random(b->bid, TB_ID_LEN) != 0) { free(b); st = 500; seterr(err, errlen, "getrandom: %s", strerror(errno)); goto out; }
  snprintf(b->name, sizeof b->name, "%s", name);
  for (size_t i = 0; i < ntags; i++) snprintf(b->tags[i], sizeof b->tags[i], "%s", tags[i]);
  b->ntags = ntags;
  b->state = B_WAITING;
  b->cpu_count = cpu_count;
  b->memory_mb = memory_mb;
  b->seq = g.next_seq++;
  g.b[g.nb++] = b;
  snprintf(template_id, TB_ID_LEN + 1, "%s", b->tid);
  snprintf(build_id, TB_ID_LEN + 1, "%s", b->bid);
out:
  pthread_mutex_unlock(&g.mu);
  return st;
}

/* ---- uploads ---- */

static bool known_template_locked(const char *tid) {
  if (!ids_alnum(tid, TB_ID_LEN)) return false;
  return find_locked(tid, NULL) != NULL;
}

int tb_file_link(const char *tid, const char *hash, bool *present, char *token, size_t tokcap, char *err, size_t errlen) {
  if (!ts_valid_hash(hash)) { seterr(err, errlen, "the files hash must be a sha256: 64 lower-case hex"); return 400; }
  pthread_mutex_lock(&g.mu);
  int st = 0;
  if (!known_template_locked(tid)) { st = 404; seterr(err, errlen, "template '%s' not found (POST /v3/templates first)", tid); goto out; }
  char path[4400];
  file_path(tid, hash, path, sizeof path);
  struct stat sb;
  *present = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
  if (*present) goto out;
  grant *gr = NULL;
  for (size_t i = 0; i < g.ngrants && !gr; i++)
    if (!strcmp(g.grants[i].tid, tid) && !strcmp(g.grants[i].hash, hash)) gr = &g.grants[i];
  if (!gr) {
    if (g.ngrants == TB_GRANTS) memmove(&g.grants[0], &g.grants[1], (--g.ngrants) * sizeof *g.grants);   /* the oldest lapses */
    gr = &g.grants[g.ngrants++];
    snprintf(gr->tid, sizeof gr->tid, "%s", tid);
    snprintf(gr->hash, sizeof gr->hash, "%s", hash);
  }
  if (ids_random(gr->token, TB_TOKEN_LEN) != 0) { st = 500; seterr(err, errlen, "getrandom: %s", strerror(errno)); goto out; }
  snprintf(token, tokcap, "%s", gr->token);
out:
  pthread_mutex_unlock(&g.mu);
  return st;
}

struct tb_upload {
  char tid[TB_ID_LEN + 1], hash[TS_HASH_LEN + 1];
  char tmp[4500], path[4400];
  int fd;
  uint64_t written;
};

tb_upload *tb_upload_begin(const char *tid, const char *hash, const char *token, int *status, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  tb_upload *u = NULL;
  grant *gr = NULL;
  for (size_t i = 0; i < g.ngrants && !gr; i++)
    if (!strcmp(g.grants[i].tid, tid) && !strcmp(g.grants[i].hash, hash)) gr = &g.grants[i];
  if (!gr || !token || !auth_secret_eq(token, gr->token)) {
    *status = 401;
    seterr(err, errlen, "no upload of this file was granted to that token (GET /templates/{templateID}/files/{hash} grants one)");
    goto out;
  }
  char dir[4400];
  file_path(tid, NULL, dir, sizeof dir);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) { *status = 500; seterr(err, errlen, "mkdir: %s", strerror(errno)); goto out; }
  size_t files = 0;
  DIR *dh = opendir(dir);
  for (struct dirent *de; dh && (de = readdir(dh));) files += de->d_name[0] != '.';
  if (dh) closedir(dh);
  if (files >= TB_MAX_FILES) { *status = 507; seterr(err, errlen, "template '%s' holds %d uploads already", tid, TB_MAX_FILES); goto out; }
  if (!(u = calloc(1, sizeof *u))) { *status = 500; seterr(err, errlen, "out of memory"); goto out; }
  snprintf(u->tid, sizeof u->tid, "%s", tid);
  snprintf(u->hash, sizeof u->hash, "%s", hash);
  file_path(tid, hash, u->path, sizeof u->path);
  char rnd[9];
  if (ids_random(rnd, 8) != 0) { free(u); u = NULL; *status = 500; seterr(err, errlen, "getrandom: %s", strerror(errno)); goto out; }
  snprintf(u->tmp, sizeof u->tmp, "%s/.upload-%s", dir, rnd);
  u->fd = open(u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (u->fd < 0) { *status = 500; seterr(err, errlen, "open: %s", strerror(errno)); free(u); u = NULL; goto out; }
out:
  pthread_mutex_unlock(&g.mu);
  return u;
}

int tb_upload_write(tb_upload *u, const void *data, size_t len, char *err, size_t errlen) {
  if ((u->written += len) > TB_MAX_UPLOAD_BYTES) { seterr(err, errlen, "the archive is larger than %llu bytes", TB_MAX_UPLOAD_BYTES); return 413; }
  const char *p = data;
  while (len) {
    ssize_t n = write(u->fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { seterr(err, errlen, "write: %s", strerror(errno)); return errno == ENOSPC ? 507 : 500; }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

void tb_upload_abort(tb_upload *u) {
  if (!u) return;
  close(u->fd);
  unlink(u->tmp);
  free(u);
}

int tb_upload_finish(tb_upload *u, char *err, size_t errlen) {
  int st = 0;
  if (u->written == 0) { st = 400; seterr(err, errlen, "the upload is empty: a tar archive (gzip or not) is expected"); }
  else if (fsync(u->fd) != 0) { st = 500; seterr(err, errlen, "fsync: %s", strerror(errno)); }
  if (st) { tb_upload_abort(u); return st; }
  close(u->fd);
  u->fd = -1;
  pthread_mutex_lock(&g.mu);
  if (rename(u->tmp, u->path) != 0) { st = 500; seterr(err, errlen, "rename: %s", strerror(errno)); unlink(u->tmp); }
  for (size_t i = 0; i < g.ngrants; i++)   /* the token is spent */
    if (!strcmp(g.grants[i].tid, u->tid) && !strcmp(g.grants[i].hash, u->hash)) {
      memmove(&g.grants[i], &g.grants[i + 1], (g.ngrants - i - 1) * sizeof *g.grants);
      g.ngrants--;
      break;
    }
  pthread_mutex_unlock(&g.mu);
  free(u);
  return st;
}

/* ---- running a build ---- */

/* What the steps so far have set: the user, the working directory, the envs. */
typedef struct {
  char user[32];
  char workdir[1024];                /* "" : the user's home */
  char **envs;                       /* "NAME=VALUE" */
  size_t nenvs;
} bctx;

static void bctx_free(bctx *c) {
  for (size_t i = 0; i < c->nenvs; i++) free(c->envs[i]);
  free(c->envs);
  c->envs = NULL;
  c->nenvs = 0;
}

static int bctx_setenv(bctx *c, const char *k, const char *v) {
  size_t kl = strlen(k);
  char *e = malloc(kl + strlen(v) + 2);
  if (!e) return -1;
  sprintf(e, "%s=%s", k, v);
  for (size_t i = 0; i < c->nenvs; i++)
    if (!strncmp(c->envs[i], k, kl) && c->envs[i][kl] == '=') { free(c->envs[i]); c->envs[i] = e; return 0; }
  if (c->nenvs == TB_MAX_ENVS) { free(e); return -1; }
  char **v2 = realloc(c->envs, (c->nenvs + 2) * sizeof *v2);
  if (!v2) { free(e); return -1; }
  c->envs = v2;
  c->envs[c->nenvs++] = e;
  c->envs[c->nenvs] = NULL;
  return 0;
}

/* Output into the log, line by line, and its tail for a failure's reason. */
typedef struct {
  build *b;
  const char *step;
  char line[TB_MAX_LINE + 1];
  size_t nline;
  char tail[TB_TAIL + 1];
  size_t ntail;
  int64_t lifetime_ms;               /* its processes' (0: TB_STEP_TIMEOUT_MS) */
} outbuf;

static void out_flush(outbuf *o) {
  if (!o->nline) return;
  o->line[o->nline] = '\0';
  if (o->b) BLOG(o->b, "info", o->step, "%s", o->line);
  o->nline = 0;
}

static void out_add(outbuf *o, const char *d, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (d[i] == '\n') out_flush(o);
    else if (d[i] != '\r') {
      if (o->nline == TB_MAX_LINE) out_flush(o);
      o->line[o->nline++] = d[i];
    }
  }
  if (n >= TB_TAIL) { memcpy(o->tail, d + n - TB_TAIL, TB_TAIL); o->ntail = TB_TAIL; }
  else {
    size_t keep = o->ntail + n > TB_TAIL ? TB_TAIL - n : o->ntail;
    memmove(o->tail, o->tail + o->ntail - keep, keep);
    memcpy(o->tail + keep, d, n);
    o->ntail = keep + n;
  }
  o->tail[o->ntail] = '\0';
}

/* Runs argv in the build sandbox as `user` in cwd with the context's envs (and stdin from
 * `in_fd` when >= 0), its output into o. 0 and the wait status, or -1 with err. */
static int run(sbx_t *sx, const char *user, const char *cwd, const bctx *c, const char *const *args, size_t nargs, int in_fd,
               outbuf *o, int *status, char *err, size_t errlen) {
  ptab *t = sbx_ptab(sx);
  ptab_spawn sp = {0};
  if (users_lookup(user, &sp.uid, &sp.gid, &sp.home) != 0) return seterr(err, errlen, "unknown user '%s'", user);
  sp.user = sp.uid == 0 ? "root" : "user";
  if (sbx_host_uid(sx, sp.uid) == (uid_t)-1) sp.uid = sp.gid = 0;   /* rootless: one id, as process_rpc.c */
  sp.cwd = cwd && cwd[0] ? cwd : sp.home;
  sp.cmd = "/bin/bash";
  sp.args = args;
  sp.nargs = nargs;
  sp.envs = (const char *const *)c->envs;
  sp.nenvs = c->nenvs;
  sp.stdin_pipe = in_fd >= 0;
  sp.lifetime_ms = o->lifetime_ms ? o->lifetime_ms : TB_STEP_TIMEOUT_MS;
  json_t *config = json_pack("{s:s,s:s}", "cmd", sp.cmd, "templateBuild", o->b ? o->b->bid : "");
  sp.config = config;
  const char *code;
  ptab_sub *sb = ptab_start(t, &sp, &code, err, errlen);
  json_decref(config);
  if (!sb) return -1;
  int rc = -1;
  bool fed = in_fd < 0;
  ptab_sel sel = {.by_pid = true};
  for (;;) {
    ptab_ev *e = ptab_next(sb, 250);
    if (!e) {
      pthread_mutex_lock(&g.mu);
      bool stop = g.stopping;
      pthread_mutex_unlock(&g.mu);
      if (stop && sel.pid) (void)ptab_signal(t, &sel, SIGKILL, err, errlen);
      continue;
    }
    int kind = e->kind;
    if (kind == PTAB_START) {
      sel.pid = (uint32_t)e->pid;
      if (!fed) {   /* the archive on its stdin, then its end */
        char buf[64 * 1024];
        ssize_t n;
        while ((n = read(in_fd, buf, sizeof buf)) > 0)
          if (ptab_input(t, &sel, false, buf, (size_t)n, err, errlen)) break;
        (void)ptab_close_stdin(t, &sel, err, errlen);
        fed = true;
      }
    } else if (kind == PTAB_DATA) {
      out_add(o, e->data, e->len);
    } else if (kind == PTAB_END) {
      *status = e->status;
      rc = 0;
    } else if (kind == PTAB_ERROR) {
      seterr(err, errlen, "%s", e->data);
    }
    ptab_ev_free(sb, e);
    if (kind == PTAB_END || kind == PTAB_ERROR) break;
  }
  ptab_unsubscribe(sb);
  out_flush(o);
  return rc;
}

/* COPY as root inside the build sandbox: the archive (stdin) extracted into a private directory,
 * its owner and mode set there, then copied to dest as Docker's COPY does (a directory's
 * contents into dest; a file to dest, or into it when dest ends in '/', is a directory or more
 * than one source matched). Arguments: src dest owner mode tar-flag workdir.
 * Symbolic links are copied as links (the SDK's tar holds their targets' contents instead when
 * the step has resolveSymlinks); a mode is never applied through one. The extraction cannot write
 * outside its directory: GNU tar refuses members named with "..", strips a leading '/', and
 * extracts a link whose target is absolute or has ".." as a placeholder file until its end, so
 * a member under such a link fails ("Not a directory"); any refusal fails the step. */
static const char COPY_SCRIPT[] =
    "set -e\n"
    "src=$1 dest=$2 owner=$3 mode=$4 z=$5 wd=$6\n"
    "case $owner in *:*|'') ;; *) owner=$owner: ;; esac\n"
    "case $(tar --version 2>/dev/null) in *'GNU tar'*) ;; *) echo 'COPY: the sandbox has no GNU tar (/usr/bin/tar) to extract the upload safely' >&2; exit 1 ;; esac\n"
    "tmp=$(mktemp -d /tmp/.sandboxd-copy.XXXXXX)\n"
    "trap 'rm -rf \"$tmp\"' EXIT\n"
    "tar -x $z --no-same-owner -f - -C \"$tmp\" || { echo \"COPY: the upload was refused: a member outside the copy's directory (a '..' name, or a path through a link), or a damaged archive (tar's messages above)\" >&2; exit 1; }\n"
    "case $dest in /*) ;; *) dest=$wd/$dest ;; esac\n"
    "cd \"$tmp\"\n"
    "shopt -s nullglob dotglob\n"
    "IFS=\n"
    "m=( $src )\n"
    "[ ${#m[@]} -gt 0 ] || { echo \"COPY: no file matches '$src' in the upload\" >&2; exit 1; }\n"
    "todir=0\n"
    "[ ${#m[@]} -gt 1 ] && todir=1\n"
    "case $dest in */) todir=1 ;; esac\n"
    "[ -d \"$dest\" ] && todir=1\n"
    "for f in \"${m[@]}\"; do\n"
    "  if [ -n \"$owner\" ]; then chown -R -h \"$owner\" \"$f\"; fi\n"
    "  if [ -n \"$mode\" ]; then if [ -d \"$f\" ] && [ ! -L \"$f\" ]; then find \"$f\" -type f -exec chmod \"$mode\" {} +; elif [ ! -L \"$f\" ]; then chmod \"$mode\" \"$f\"; fi; fi\n"
    "  if [ -d \"$f\" ] && [ ! -L \"$f\" ]; then\n"
    "    new=0; [ -e \"$dest\" ] || new=1\n"
    "    mkdir -p \"$dest\"\n"
    "    if [ $new = 1 ] && [ -n \"$owner\" ]; then chown \"$owner\" \"$dest\"; fi\n"
    "    cp -a \"$f/.\" \"$dest/\"\n"
    "  elif [ $todir = 1 ]; then\n"
    "    new=0; [ -e \"$dest\" ] || new=1\n"
    "    mkdir -p \"$dest\"\n"
    "    if [ $new = 1 ] && [ -n \"$owner\" ]; then chown \"$owner\" \"$dest\"; fi\n"
    "    cp -a \"$f\" \"${dest%/}/${f##*/}\"\n"
    "  else\n"
    "    mkdir -p \"$(dirname \"$dest\")\"\n"
    "    cp -a \"$f\" \"$dest\"\n"
    "  fi\n"
    "done\n";

/* WORKDIR as root: made when missing, owned by the current user. Arguments: dir user. */
static const char WORKDIR_SCRIPT[] = "[ -d \"$1\" ] || { mkdir -p \"$1\" && chown \"$2:\" \"$1\"; }\n";

static const char *home_of(const char *user) {
  uid_t u;
  gid_t gg;
  const char *h = "/";
  (void)users_lookup(user, &u, &gg, &h);
  return h;
}

/* An absolute, clean-enough path: p, or p against base. */
static int abs_path(const char *p, const char *base, char *out, size_t cap) {
  int n = p[0] == '/' ? snprintf(out, cap, "%s", p) : snprintf(out, cap, "%s/%s", base, p);
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* One step. 0, or -1 with the reason in err (output already logged). */
static int run_step(build *b, sbx_t *sx, const ts_step *s, const char *stepname, bctx *c, outbuf *o, char *err, size_t errlen) {
  const char *cwd = c->workdir[0] ? c->workdir : home_of(c->user);
  int status = 0;
  char desc[200];
  ts_describe(s, desc, sizeof desc);
  switch (s->kind) {
    case TS_RUN: {
      const char *args[] = {"-c", s->cmd};
      if (run(sx, s->user ? s->user : c->user, cwd, c, args, 2, -1, o, &status, err, errlen) != 0) return -1;
      break;
    }
    case TS_COPY: {
      char path[4400];
      file_path(b->tid, s->hash, path, sizeof path);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) return seterr(err, errlen, "%s: its files (hash %s) were not uploaded", desc, s->hash);
      unsigned char magic[2] = {0};
      bool gz = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
      char mode[8] = "";
      if (s->has_mode) snprintf(mode, sizeof mode, "%o", s->mode);
      const char *owner = s->user ? s->user : c->user;
      const char *args[] = {"-c", COPY_SCRIPT, "copy", s->src, s->dest, owner, mode, gz ? "-z" : "", cwd};
      int rc = run(sx, "root", "/", c, args, sizeof args / sizeof *args, fd, o, &status, err, errlen);
      close(fd);
      if (rc != 0) return -1;
      break;
    }
    case TS_ENV:
      for (size_t i = 0; i + 1 < s->nargs; i += 2)
        if (bctx_setenv(c, s->args[i], s->args[i + 1]) != 0) return seterr(err, errlen, "%s: more than %d envs, or out of memory", desc, TB_MAX_ENVS);
      return 0;
    case TS_WORKDIR: {
      char dir[1024];
      if (abs_path(s->args[0], cwd, dir, sizeof dir) != 0) return seterr(err, errlen, "%s: the path is too long", desc);
      const char *args[] = {"-c", WORKDIR_SCRIPT, "workdir", dir, c->user};
      if (run(sx, "root", "/", c, args, sizeof args / sizeof *args, -1, o, &status, err, errlen) != 0) return -1;
      if (status == 0) snprintf(c->workdir, sizeof c->workdir, "%s", dir);
      break;
    }
    case TS_USER: {
      const char *colon = strchr(s->user, ':');
      snprintf(c->user, sizeof c->user, "%.*s", (int)(colon ? (size_t)(colon - s->user) : strlen(s->user)), s->user);
      return 0;
    }
  }
  (void)stepname;
  if (status != 0) {
    char st[64];
    ptab_status_string(status, st, sizeof st);
    return seterr(err, errlen, "%s failed: %s", desc, st);
  }
  return 0;
}

/* The start command detached, then the ready command until it exits 0 (see tb_run_start_cmd). */
static int start_and_wait(sbx_t *sx, const char *start, const char *ready, const char *user, const char *workdir, const bctx *c,
                          build *b, char *err, size_t errlen) {
  ptab *t = sbx_ptab(sx);
  ptab_spawn sp = {0};
  if (users_lookup(user, &sp.uid, &sp.gid, &sp.home) != 0) return seterr(err, errlen, "unknown user '%s'", user);
  sp.user = sp.uid == 0 ? "root" : "user";
  if (sbx_host_uid(sx, sp.uid) == (uid_t)-1) sp.uid = sp.gid = 0;
  sp.cwd = workdir && workdir[0] ? workdir : sp.home;
  sp.cmd = "/bin/bash";
  const char *args[] = {"-c", start};
  sp.args = args;
  sp.nargs = 2;
  sp.envs = (const char *const *)c->envs;
  sp.nenvs = c->nenvs;
  json_t *config = json_pack("{s:s,s:s}", "cmd", sp.cmd, "startCmd", start);
  sp.config = config;
  const char *code;
  ptab_sub *sb = ptab_start(t, &sp, &code, err, errlen);
  json_decref(config);
  if (!sb) return -1;
  outbuf *o = calloc(1, sizeof *o);
  if (!o) { ptab_unsubscribe(sb); return seterr(err, errlen, "out of memory"); }
  o->b = b;
  o->step = "finalize";
  int rc = -1;
  bool ended = false;
  pthread_mutex_lock(&g.mu);
  int64_t limit = g.ready_timeout_ms, deadline = mono_ms() + limit;
  pthread_mutex_unlock(&g.mu);
  char last[160] = "";               /* how the ready command's last attempt ended */
  outbuf *ro = ready ? calloc(1, sizeof *ro) : NULL;
  if (ready && !ro) { seterr(err, errlen, "out of memory"); ended = true; }
  for (;;) {
    /* the start command's output so far (its log when building), and whether it ended */
    for (ptab_ev *e; !ended && (e = ptab_next(sb, 0));) {
      if (e->kind == PTAB_DATA) out_add(o, e->data, e->len);
      if (e->kind == PTAB_END) {
        char st[64];
        ptab_status_string(e->status, st, sizeof st);
        seterr(err, errlen, "the start command ended (%s) before the ready command succeeded", st);
        ended = true;
      } else if (e->kind == PTAB_ERROR) {
        seterr(err, errlen, "the start command could not start: %s", e->data);
        ended = true;
      }
      ptab_ev_free(sb, e);
    }
    if (ended) break;
    if (!ready) { rc = 0; break; }
    /* one attempt, bounded by what is left of the wait, and at least a second (a hanging check is
     * killed; one that merely started late is not) */
    int64_t left = deadline - mono_ms();
    memset(ro, 0, sizeof *ro);
    ro->lifetime_ms = left > 1000 ? left : 1000;
    const char *rargs[] = {"-c", ready};
    int status = -1;
    char rerr[128] = "";
    int r = run(sx, user, workdir, c, rargs, 2, -1, ro, &status, rerr, sizeof rerr);
    if (r == 0 && status == 0) { rc = 0; break; }
    if (r != 0) snprintf(last, sizeof last, "%s", rerr);
    else ptab_status_string(status, last, sizeof last);
    if (ro->ntail) {   /* and its output's last line, if any */
      size_t l = strlen(last), n = ro->ntail;
      while (n && (ro->tail[n - 1] == '\n' || ro->tail[n - 1] == '\r')) n--;
      size_t from = n;
      while (from && ro->tail[from - 1] != '\n') from--;
      while (from < n && ((unsigned char)ro->tail[from] & 0xC0) == 0x80) from++;
      if (n > from && l + 3 < sizeof last) snprintf(last + l, sizeof last - l, ": %.*s", (int)(n - from), ro->tail + from);
    }
    pthread_mutex_lock(&g.mu);
    bool stop = g.stopping;
    pthread_mutex_unlock(&g.mu);
    if (stop) { seterr(err, errlen, "sandboxd is stopping"); break; }
    if (mono_ms() >= deadline) {
      seterr(err, errlen, "the start command is running but its ready command `%.300s` did not succeed within %lld s (last attempt: %s)",
             ready, (long long)(limit / 1000), last);
      break;
    }
    struct timespec ts = {0, TB_READY_POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  free(ro);
  out_flush(o);
  if (rc != 0 && o->ntail) {
    const char *tail = o->tail;
    while (((unsigned char)*tail & 0xC0) == 0x80) tail++;
    size_t l = strlen(err);
    snprintf(err + l, errlen - l, ": %s", tail);
  }
  free(o);
  ptab_unsubscribe(sb);   /* it goes on; its output is no longer read into anything */
  return rc;
}

int tb_run_start_cmd(sbx_t *s, const tb_template_defaults *d, char *err, size_t errlen) {
  if (!d->start_cmd) return 0;
  bctx c = {0};
  snprintf(c.user, sizeof c.user, "%s", d->user[0] ? d->user : USERS_DEFAULT);
  return start_and_wait(s, d->start_cmd, d->ready_cmd, c.user, d->workdir, &c, NULL, err, errlen);
}

/* Records the build's envs, workdir, limits and start command under its id. */
static void save_template_defaults(const char *tid, const char *bid, const build *b, const bctx *c, const char *start, const char *ready) {
  json_t *envs = json_object();
  for (size_t i = 0; envs && i < c->nenvs; i++) {
    const char *eq = strchr(c->envs[i], '=');
    char k[256];
    snprintf(k, sizeof k, "%.*s", (int)(eq - c->envs[i]), c->envs[i]);
    json_object_set_new(envs, k, json_string(eq + 1));
  }
  json_t *d = json_pack("{s:s,s:o,s:s}", "templateID", tid, "envs", envs ? envs : json_object(), "workdir", c->workdir);
  if (d && b->cpu_count) json_object_set_new(d, "cpuCount", json_integer(b->cpu_count));
  if (d && b->memory_mb) json_object_set_new(d, "memoryMB", json_integer(b->memory_mb));
  if (d) json_object_set_new(d, "user", json_string(c->user));
  if (d && start) json_object_set_new(d, "startCmd", json_string(start));
  if (d && ready) json_object_set_new(d, "readyCmd", json_string(ready));
  pthread_mutex_lock(&g.mu);
  char err[256];
  if (d && g.defaults && json_object_set_new(g.defaults, bid, d) == 0) {
    if (save_defaults_locked(err, sizeof err) != 0) fprintf(stderr, "sandboxd: template %s: %s\n", tid, err);
  }
  pthread_mutex_unlock(&g.mu);
}

static void finish(build *b, bstate st, const char *reason, const char *step, size_t from) {
  pthread_mutex_lock(&g.mu);
  b->state = st;
  b->sandbox_id[0] = '\0';
  if (reason) {
    free(b->reason);
    b->reason = strdup(reason);
    snprintf(b->reason_step, sizeof b->reason_step, "%s", step ? step : "");
    b->reason_from = from;
  }
  pthread_mutex_unlock(&g.mu);
}

/* ---- the build: each step a layer, the cache (template_cache.h) ---- */

/* What a build works on between its steps. */
typedef struct {
  build *b;
  bctx *c;
  layer *from;                       /* the fromTemplate's top layer (NULL: base) */
  const snap_info *psi;              /* and its catalogue entry (when from) */
  layer *cur;                        /* the layer the next step starts from (a reference; NULL: base) */
  char last_sandbox[65];             /* the latest build sandbox (what the catalogue records) */
  reg_entry *e;                      /* the step's build sandbox, while one runs */
  sbx_t *sx;
} chain;

static void ctx_of(const bctx *c, tk_ctx *k) {
  *k = (tk_ctx){.user = c->user, .workdir = c->workdir, .envs = (const char *const *)c->envs, .nenvs = c->nenvs};
}

/* What a step cached by an earlier build set (its ENV, WORKDIR, USER), without running it. */
static int replay_ctx(const ts_step *s, bctx *c, char *err, size_t errlen) {
  switch (s->kind) {
    case TS_ENV:
      for (size_t i = 0; i + 1 < s->nargs; i += 2)
        if (bctx_setenv(c, s->args[i], s->args[i + 1]) != 0) return seterr(err, errlen, "more than %d envs, or out of memory", TB_MAX_ENVS);
      return 0;
    case TS_WORKDIR: {
      char dir[1024];
      if (abs_path(s->args[0], c->workdir[0] ? c->workdir : home_of(c->user), dir, sizeof dir) != 0) return seterr(err, errlen, "WORKDIR: the path is too long");
      snprintf(c->workdir, sizeof c->workdir, "%s", dir);
      return 0;
    }
    case TS_USER: {
      const char *colon = strchr(s->user, ':');
      snprintf(c->user, sizeof c->user, "%.*s", (int)(colon ? (size_t)(colon - s->user) : strlen(s->user)), s->user);
      return 0;
    }
    default: return 0;
  }
}

/* A build sandbox on ch->cur (b->sandbox_id, ch->e, ch->sx). 0, or -1 with err. */
static int chain_sandbox(chain *ch, char *err, size_t errlen) {
  build *b = ch->b;
  char why[512];
  json_t *md = json_pack("{s:s,s:s}", "sandboxd.templateBuild", b->bid, "sandboxd.template", b->name);
  reg_create_opts o = {.timeout_s = TB_BUILD_LEASE_S, .metadata = md, .envs = (const char *const *)ch->c->envs,
                       .internet = net_available(why, sizeof why), .template_id = ch->psi->id[0] ? ch->psi->id : NULL,
                       .template_alias = ch->psi->id[0] ? (ch->psi->name[0] ? ch->psi->name : ch->psi->id) : NULL, .layer = ch->cur,
                       .workdir = ch->c->workdir, .cpu_count = b->cpu_count, .memory_mb = b->memory_mb};
  reg_info in;
  int rc = reg_create(&o, &in, why, sizeof why);
  json_decref(md);
  if (rc != 0) return seterr(err, errlen, "cannot create the build sandbox: %s", why);
  pthread_mutex_lock(&g.mu);
  snprintf(b->sandbox_id, sizeof b->sandbox_id, "%s", in.id);
  bool stop = g.stopping;
  pthread_mutex_unlock(&g.mu);
  snprintf(ch->last_sandbox, sizeof ch->last_sandbox, "%s", in.id);
  reg_info_free(&in);
  if (stop || !(ch->e = reg_get(b->sandbox_id))) return seterr(err, errlen, "the build sandbox is gone (sandboxd is stopping?)");
  ch->sx = reg_sbx(ch->e);
  return 0;
}

/* The build sandbox, if one runs, killed. */
static void chain_sandbox_end(chain *ch) {
  char sid[65];
  pthread_mutex_lock(&g.mu);
  snprintf(sid, sizeof sid, "%s", ch->b->sandbox_id);
  ch->b->sandbox_id[0] = '\0';
  pthread_mutex_unlock(&g.mu);
  if (ch->e) reg_put(ch->e);
  ch->e = NULL;
  ch->sx = NULL;
  if (sid[0]) (void)reg_kill(sid);
}

typedef struct { layer *out; int rc; char why[512]; } capture_arg;
static void capture_cb(sbx_t *s, void *cls) {
  capture_arg *a = cls;
  a->rc = sbx_capture_final(s, &a->out, a->why, sizeof a->why);
}

/* The build sandbox killed and its changes captured as a new layer over ch->cur, which it
 * becomes: the capture runs inside the kill, once every process is gone and nothing else holds
 * the sandbox, and moves its upper layers into the layer (sbx_capture_final) instead of copying
 * them. 0, or -1 with err. */
static int chain_capture(chain *ch, char *err, size_t errlen) {
  capture_arg ca = {.rc = -1};
  char sid[65];
  pthread_mutex_lock(&g.mu);
  snprintf(sid, sizeof sid, "%s", ch->b->sandbox_id);
  ch->b->sandbox_id[0] = '\0';
  pthread_mutex_unlock(&g.mu);
  if (ch->e) reg_put(ch->e);           /* ours let go first: the kill waits for every holder */
  ch->e = NULL;
  ch->sx = NULL;
  int rc = sid[0] ? reg_kill_with(sid, capture_cb, &ca) : -1;
  if (rc != 0 || ca.rc != 0) {
    ly_release(ca.out);
    return seterr(err, errlen, "cannot capture the build sandbox: %s", rc != 0 ? "it is gone" : ca.why);
  }
  ly_release(ch->cur);
  ch->cur = ca.out;
  return 0;
}

/* Keeps the chain under TB_MAX_CHAIN layers: when ch->cur is that deep, the layers this build
 * stacked over its fromTemplate become one (ly_flatten), or the whole chain when the template
 * itself is too deep to leave room; the cache entry `key` then names the merged layer. */
static int chain_bound(chain *ch, const char *key, char *err, size_t errlen) {
  if (!ch->cur || ly_depth(ch->cur) < TB_MAX_CHAIN) return 0;
  layer *keep = ch->from && ly_depth(ch->from) + 3 <= TB_MAX_CHAIN ? ch->from : NULL;
  int n = ly_depth(ch->cur) - (keep ? ly_depth(keep) : 0);
  BLOG(ch->b, "info", NULL, "Merging %d layers into one (a template stacks at most %d)", n, TB_MAX_CHAIN);
  layer *flat;
  char why[1024];
  if (ly_flatten(ch->cur, keep, &flat, why, sizeof why) != 0) return seterr(err, errlen, "cannot merge the template's layers: %s", why);
  ly_release(ch->cur);
  ch->cur = flat;
  if (tc_put(key, flat, ch->b->tid, why, sizeof why) != 0) BLOG(ch->b, "warn", NULL, "the build cache: %s", why);
  return 0;
}

/* ---- fromImage: the build's base ---- */

static bool env_ok(const char *k) {
  if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_')) return false;
  for (const char *p = k + 1; *p; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  return true;
}

static void image_log(void *cls, const char *line) { BLOG((build *)cls, "info", "base", "%s", line); }

static bool image_cancelled(void *cls) {
  (void)cls;
  pthread_mutex_lock(&g.mu);
  bool stop = g.stopping;
  pthread_mutex_unlock(&g.mu);
  return stop;
}

/* The image's layer (pulled, or from the cache: image.h) and its config as where the build
 * starts: its Env, its WorkingDir, its User when it names root or user (else E2B's default,
 * user). The registry credentials are let go of (wiped) once the pull is over. NULL with err. */
static layer *image_base(build *b, bctx *c, char *err, size_t errlen) {
  ts_spec *sp = &b->spec;
  img_pull_opts o = {.username = sp->reg_user, .password = sp->reg_pass, .log = image_log, .cancelled = image_cancelled, .cls = b};
  sbx_id_range(&o.uid_base, &o.gid_base, &o.id_count);
  BLOG(b, "info", "base", "Base image %s%s", sp->from_image, sp->reg_user ? " (with the registry credentials given)" : "");
  img_config ic;
  layer *l = img_get(sp->from_image, &o, &ic, err, errlen);
  pthread_mutex_lock(&g.mu);   /* nothing needs them any more: freed (jansson's buffers are wiped, harden.h) */
  sp->reg_user = sp->reg_pass = NULL;
  json_object_del(sp->body, "fromImageRegistry");
  pthread_mutex_unlock(&g.mu);
  if (!l) return NULL;
  bool bash_steps = sp->start_cmd != NULL;
  for (size_t i = 0; i < sp->nsteps; i++) bash_steps = bash_steps || sp->steps[i].kind == TS_RUN || sp->steps[i].kind == TS_COPY || sp->steps[i].kind == TS_WORKDIR;
  if (!ic.has_bash && bash_steps) {
    seterr(err, errlen, "fromImage '%s' has no /bin/bash: sandboxd runs RUN, COPY and WORKDIR steps and the start command with "
           "/bin/bash, as E2B does (build from an image that has bash, or install it in the image)", sp->from_image);
    img_config_free(&ic);
    ly_release(l);
    return NULL;
  }
  if (!ic.has_bash) BLOG(b, "warn", "base", "The image has no /bin/bash: the SDK's commands.run (bash -l -c) will not work in its sandboxes");
  for (size_t i = 0; ic.envs && ic.envs[i]; i++) {
    char *eq = strchr(ic.envs[i], '=');
    *eq = '\0';
    if (!env_ok(ic.envs[i]) || bctx_setenv(c, ic.envs[i], eq + 1) != 0) BLOG(b, "warn", "base", "The image's env %.100s is not kept", ic.envs[i]);
  }
  if (ic.workdir[0] == '/') snprintf(c->workdir, sizeof c->workdir, "%s", ic.workdir);
  const char *u = ic.user;
  if (!strcmp(u, "root") || !strcmp(u, "0") || !strncmp(u, "root:", 5) || !strncmp(u, "0:", 2)) snprintf(c->user, sizeof c->user, "root");
  else if (u[0] && strcmp(u, "user") != 0 && strcmp(u, "1000") != 0 && strncmp(u, "user:", 5) != 0 && strncmp(u, "1000:", 5) != 0)
    BLOG(b, "warn", "base", "The image's USER '%.60s' is not a user of sandboxd's sandboxes (root, user): the build starts as user", u);
  BLOG(b, "info", "base", "Image %s: %s%s", sp->from_image, ic.digest, ic.cached ? " (cached)" : "");
  img_config_free(&ic);
  return l;
}

static void *build_main(void *arg) {
  build *b = arg;
  char err[TB_MAX_LINE + 1] = "", why[512];
  bctx c = {.user = USERS_DEFAULT};
  snap_info psi = {0};
  chain ch = {.b = b, .c = &c, .psi = &psi};
  const ts_spec *sp = &b->spec;
  const char *fail_step = "base";
  char stepname[24];                 /* the step running (fail_step points to it) */
  size_t fail_from = 0;
  int st, rc;
  BLOG(b, "info", "base", "Building template '%s' from %s '%s' (%zu steps)", b->name, sp->from_image ? "image" : "template",
       sp->from_image ? sp->from_image : sp->from_template, sp->nsteps);
  if (sp->from_image) {   /* the image's layer: the chain's bottom, as a fromTemplate's top layer is */
    if (!(ch.from = image_base(b, &c, err, sizeof err))) goto failed;
    ly_hold(ch.from);
    ch.cur = ch.from;
  } else if (strcmp(sp->from_template, "base") != 0 && strcmp(sp->from_template, "base:default") != 0) {
    if (!(ch.from = snap_resolve(sp->from_template, &psi, &st, why, sizeof why))) {
      seterr(err, sizeof err, "fromTemplate '%s': %s", sp->from_template, st == 404 ? "no such template" : why);
      goto failed;
    }
    tb_template_defaults d;
    if (tb_defaults(psi.build_id, &d) == 0) {
      for (size_t i = 0; d.envs && d.envs[i]; i++) {
        char *eq = strchr(d.envs[i], '=');
        *eq = '\0';
        (void)bctx_setenv(&c, d.envs[i], eq + 1);
      }
      snprintf(c.workdir, sizeof c.workdir, "%s", d.workdir);
      if (d.user[0]) snprintf(c.user, sizeof c.user, "%s", d.user);
    }
    tb_defaults_free(&d);
    ly_hold(ch.from);
    ch.cur = ch.from;
  }
  char key[TK_KEY_LEN + 1], next[TK_KEY_LEN + 1];
  tk_ctx kc;
  ctx_of(&c, &kc);
  if (tk_base(ch.from ? ly_id(ch.from) : NULL, &kc, key) != 0) { seterr(err, sizeof err, "the build cache key: libcrypto failed"); goto failed; }
  /* The longest prefix of steps an earlier build made: their layers reused, nothing run. */
  bool reuse = !sp->force;
  size_t i = 0;
  for (; reuse && i < sp->nsteps; i++) {
    const ts_step *s = &sp->steps[i];
    layer *hit;
    ctx_of(&c, &kc);
    if (s->force || tk_step(key, s, &kc, next) != 0 || !tc_get(next, b->tid, &hit)) { reuse = false; break; }
    char desc[300];
    ts_describe(s, desc, sizeof desc);
    snprintf(stepname, sizeof stepname, "%zu", i + 1);
    BLOG(b, "info", stepname, "CACHED [%zu/%zu] %s", i + 1, sp->nsteps, desc);
    if (replay_ctx(s, &c, err, sizeof err) != 0) { ly_release(hit); fail_step = stepname; goto failed; }
    ly_release(ch.cur);
    ch.cur = hit;
    memcpy(key, next, sizeof key);
  }
  outbuf *ob = malloc(sizeof *ob);
  if (!ob) { seterr(err, sizeof err, "out of memory"); goto failed; }
  for (; i < sp->nsteps; i++) {
    const ts_step *s = &sp->steps[i];
    char desc[300];
    snprintf(stepname, sizeof stepname, "%zu", i + 1);
    ts_describe(s, desc, sizeof desc);
    ctx_of(&c, &kc);
    if (tk_step(key, s, &kc, next) != 0) { free(ob); seterr(err, sizeof err, "the build cache key: libcrypto failed"); goto failed; }
    pthread_mutex_lock(&g.mu);
    fail_from = b->nlog;
    logf_locked(b, "info", stepname, "[%zu/%zu] %s", i + 1, sp->nsteps, desc);
    bool stop = g.stopping;
    pthread_mutex_unlock(&g.mu);
    fail_step = stepname;
    memset(ob, 0, sizeof *ob);
    ob->b = b;
    ob->step = stepname;
    if (stop) { seterr(err, sizeof err, "sandboxd is stopping"); free(ob); goto failed_step; }
    bool fs = s->kind == TS_RUN || s->kind == TS_COPY || s->kind == TS_WORKDIR;   /* changes files: a sandbox, a layer */
    if (fs && (chain_bound(&ch, key, err, sizeof err) != 0 || chain_sandbox(&ch, err, sizeof err) != 0)) { free(ob); goto failed_step; }
    if (run_step(b, ch.sx, s, stepname, &c, ob, err, sizeof err) != 0) {
      if (ob->ntail) {
        const char *tail = ob->tail;
        while (((unsigned char)*tail & 0xC0) == 0x80) tail++;   /* from a character's start */
        size_t l = strlen(err);
        snprintf(err + l, sizeof err - l, ": %s", tail);
      }
      free(ob);
      goto failed_step;
    }
    if (fs && chain_capture(&ch, err, sizeof err) != 0) { free(ob); goto failed_step; }
    if (tc_put(next, ch.cur, b->tid, why, sizeof why) != 0) BLOG(b, "warn", stepname, "the build cache: %s", why);
    memcpy(key, next, sizeof key);
  }
  free(ob);
  fail_step = "finalize";
  fail_from = b->nlog;
  if (sp->start_cmd) {
    layer *hit;
    if (tk_final(key, sp->start_cmd, sp->ready_cmd, next) != 0) { seterr(err, sizeof err, "the build cache key: libcrypto failed"); goto failed; }
    if (reuse && tc_get(next, b->tid, &hit)) {
      BLOG(b, "info", "finalize", "CACHED Start command: %s", sp->start_cmd);
      ly_release(ch.cur);
      ch.cur = hit;
    } else {
      /* The start command is proven here but not captured: sandboxd keeps no memory, every
       * sandbox of the template runs it again, from the files the steps left (not a ready file,
       * a pid file or a socket its run in the build left). */
      if (!ch.cur && (chain_sandbox(&ch, err, sizeof err) != 0 || chain_capture(&ch, err, sizeof err) != 0)) goto failed;
      BLOG(b, "info", "finalize", "Start command: %s%s%s", sp->start_cmd, sp->ready_cmd ? "; waiting for the ready command: " : "",
           sp->ready_cmd ? sp->ready_cmd : "");
      if (chain_bound(&ch, key, err, sizeof err) != 0 || chain_sandbox(&ch, err, sizeof err) != 0) goto failed_step;
      if (start_and_wait(ch.sx, sp->start_cmd, sp->ready_cmd, c.user, c.workdir, &c, b, err, sizeof err) != 0) goto failed_step;
      chain_sandbox_end(&ch);
      if (tc_put(next, ch.cur, b->tid, why, sizeof why) != 0) BLOG(b, "warn", "finalize", "the build cache: %s", why);
    }
  }
  if (!ch.cur) {   /* nothing changed base: the template still needs a layer of its own */
    BLOG(b, "info", "finalize", "Capturing the template's file system");
    if (chain_sandbox(&ch, err, sizeof err) != 0 || chain_capture(&ch, err, sizeof err) != 0) goto failed;
  }
  snap_info out;
  rc = snap_add_build(b->tid, b->name, b->bid, ch.cur, ch.last_sandbox, wall_ms(), (const char (*)[SNAP_TAG_MAX + 1])b->tags, b->ntags,
                      &out, why, sizeof why);
  if (rc != 0) { seterr(err, sizeof err, "cannot record the template: %s", why); goto failed; }
  if (strcmp(out.id, b->tid) != 0) {   /* the name was taken meanwhile: the template is that one */
    pthread_mutex_lock(&g.mu);
    snprintf(b->tid, sizeof b->tid, "%s", out.id);
    pthread_mutex_unlock(&g.mu);
  }
  save_template_defaults(out.id, out.build_id, b, &c, sp->start_cmd, sp->ready_cmd);
  tc_trim();   /* the template's earlier layers may be unused now */
  if (b->ntags == 0) BLOG(b, "info", "finalize", "Template '%s' built: Sandbox.create('%s') starts from it", b->name, b->name);
  else {
    char list[SNAP_TAGS_PER_REQUEST * (SNAP_TAG_MAX + 2) + 1] = "";
    for (size_t i = 0, o = 0; i < b->ntags; i++) o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", b->tags[i]);
    BLOG(b, "info", "finalize", "Template '%s' built, tagged %s: Sandbox.create('%s:%s') starts from it", b->name, list, b->name, b->tags[0]);
  }
  finish(b, B_READY, NULL, NULL, 0);
  goto done;
failed:
  fail_from = b->nlog;
failed_step:
  BLOG(b, "error", fail_step, "Build failed: %s", err);
  chain_sandbox_end(&ch);
  finish(b, B_ERROR, err, fail_step, fail_from);
done:
  ly_release(ch.cur);
  ly_release(ch.from);
  bctx_free(&c);
  pthread_mutex_lock(&g.mu);
  if (--g.running == 0) pthread_cond_broadcast(&g.idle);
  pthread_mutex_unlock(&g.mu);
  return NULL;
}

int tb_start(const char *tid, const char *bid, ts_spec *spec, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  int st = 0;
  build *b = find_locked(tid, bid);
  if (!b) { st = 404; seterr(err, errlen, "build '%s' of template '%s' not found (POST /v3/templates first)", bid, tid); goto out; }
  if (b->state != B_WAITING) { st = 409; seterr(err, errlen, "build '%s' was started already", bid); goto out; }
  if (g.stopping) { st = 503; seterr(err, errlen, "sandboxd is stopping"); goto out; }
  if (g.running >= TB_MAX_RUNNING) { st = 429; seterr(err, errlen, "%d template builds are running: try again once one is done", TB_MAX_RUNNING); goto out; }
  for (size_t i = 0; i < spec->nsteps; i++) {
    if (spec->steps[i].kind != TS_COPY) continue;
    char path[4400];
    struct stat sb;
    file_path(tid, spec->steps[i].hash, path, sizeof path);
    if (stat(path, &sb) != 0) { st = 400; seterr(err, errlen, "steps[%zu]: its files (hash %s) were not uploaded", i, spec->steps[i].hash); goto out; }
  }
  b->spec = *spec;
  memset(spec, 0, sizeof *spec);
  b->state = B_BUILDING;
  pthread_attr_t at;
  pthread_t th;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  g.running++;
  if (pthread_create(&th, &at, build_main, b) != 0) {
    g.running--;
    *spec = b->spec;
    memset(&b->spec, 0, sizeof b->spec);
    b->state = B_WAITING;
    st = 503;
    seterr(err, errlen, "cannot start the build's thread");
  }
  pthread_attr_destroy(&at);
out:
  pthread_mutex_unlock(&g.mu);
  return st;
}

static json_t *rfc3339(int64_t ms) {
  time_t s = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  char buf[40], out[48];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, sizeof out, "%s.%03dZ", buf, (int)(ms % 1000));
  return json_string(out);
}

static json_t *entry_json(const logent *e) {
  json_t *m = json_string(e->msg);
  json_t *j = json_pack("{s:o,s:s,s:o}", "timestamp", rfc3339(e->ms), "level", e->level, "message", m ? m : json_string("(not UTF-8)"));
  if (j && e->step[0]) json_object_set_new(j, "step", json_string(e->step));
  return j;
}

json_t *tb_status(const char *tid, const char *bid, size_t offset, int *status, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  build *b = find_locked(tid, bid);
  json_t *j = NULL;
  if (!b) { *status = 404; seterr(err, errlen, "build '%s' of template '%s' not found", bid, tid); goto out; }
  json_t *entries = json_array();
  for (size_t i = offset; entries && i < b->nlog; i++) json_array_append_new(entries, entry_json(&b->log[i]));
  j = json_pack("{s:s,s:s,s:s,s:o,s:[]}", "buildID", b->bid, "templateID", b->tid, "status", STATE_NAME[b->state],
                "logEntries", entries ? entries : json_array(), "logs");
  if (j && b->state == B_ERROR && b->reason) {
    json_t *re = json_array();
    for (size_t i = b->reason_from; re && i < b->nlog; i++) json_array_append_new(re, entry_json(&b->log[i]));
    json_t *m = json_string(b->reason);
    json_object_set_new(j, "reason", json_pack("{s:o,s:s,s:o}", "message", m ? m : json_string("(not UTF-8)"), "step",
                                               b->reason_step, "logEntries", re ? re : json_array()));
  }
  if (!j) { *status = 500; seterr(err, errlen, "out of memory"); }
out:
  pthread_mutex_unlock(&g.mu);
  return j;
}

/* ---- templates' defaults ---- */

int tb_defaults(const char *tid, tb_template_defaults *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&g.mu);
  json_t *d = g.defaults ? json_object_get(g.defaults, tid) : NULL;
  int rc = -1;
  if (json_is_object(d)) {
    json_t *envs = json_object_get(d, "envs");
    size_t n = json_is_object(envs) ? json_object_size(envs) : 0, i = 0;
    out->envs = calloc(n + 1, sizeof *out->envs);
    const char *k;
    json_t *v;
    if (out->envs) {
      json_object_foreach(envs, k, v) {
        if (!json_is_string(v)) continue;
        size_t l = strlen(k) + json_string_length(v) + 2;
        if (!(out->envs[i] = malloc(l))) break;
        snprintf(out->envs[i++], l, "%s=%s", k, json_string_value(v));
      }
      rc = 0;
    }
    json_t *cpu = json_object_get(d, "cpuCount"), *mem = json_object_get(d, "memoryMB");
    if (json_is_integer(cpu) && json_integer_value(cpu) > 0 && json_integer_value(cpu) < 1024) out->cpu_count = (int)json_integer_value(cpu);
    if (json_is_integer(mem) && json_integer_value(mem) > 0 && json_integer_value(mem) < (1LL << 30)) out->memory_mb = (long)json_integer_value(mem);
    json_t *sc = json_object_get(d, "startCmd"), *rc_ = json_object_get(d, "readyCmd"), *u = json_object_get(d, "user");
    if (json_is_string(sc) && !(out->start_cmd = strdup(json_string_value(sc)))) rc = -1;
    if (json_is_string(rc_) && !(out->ready_cmd = strdup(json_string_value(rc_)))) rc = -1;
    if (json_is_string(u)) snprintf(out->user, sizeof out->user, "%s", json_string_value(u));
    json_t *w = json_object_get(d, "workdir");
    if (json_is_string(w)) snprintf(out->workdir, sizeof out->workdir, "%s", json_string_value(w));
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

void tb_defaults_free(tb_template_defaults *d) {
  free(d->start_cmd);
  free(d->ready_cmd);
  d->start_cmd = d->ready_cmd = NULL;
  for (size_t i = 0; d->envs && d->envs[i]; i++) free(d->envs[i]);
  free(d->envs);
  d->envs = NULL;
}

/* Whether defaults entry (key k, value d) is of a build of template tid. g.mu held. */
static bool of_template(const char *k, json_t *d, const char *tid) {
  const char *t = json_string_value(json_object_get(d, "templateID"));
  return t ? !strcmp(t, tid) : !strcmp(k, tid);
}

void tb_forget(const char *tid) {
  if (!ids_alnum(tid, 64)) return;
  pthread_mutex_lock(&g.mu);
  char err[256];
  bool changed = false;
  const char *k;
  json_t *v, *tmp;
  if (g.defaults) json_object_foreach_safe(g.defaults, tmp, k, v) {   /* normally gone already, build by build */
    if (of_template(k, v, tid)) { json_object_del(g.defaults, k); changed = true; }
  }
  if (changed && save_defaults_locked(err, sizeof err) != 0) fprintf(stderr, "sandboxd: template %s: %s\n", tid, err);
  for (size_t i = 0; i < g.nb;) {   /* its finished builds */
    if (!strcmp(g.b[i]->tid, tid) && g.b[i]->state != B_BUILDING) {
      build_free(g.b[i]);
      memmove(&g.b[i], &g.b[i + 1], (g.nb - i - 1) * sizeof *g.b);
      g.nb--;
    } else i++;
  }
  remove_uploads(tid, false);
  pthread_mutex_unlock(&g.mu);
  tc_forget_owner(tid);   /* the cached steps only its builds used: their layers freed */
}

bool tb_is_built(const char *tid) {
  pthread_mutex_lock(&g.mu);
  bool built = false;
  const char *k;
  json_t *v;
  if (g.defaults) json_object_foreach(g.defaults, k, v) {
    if (of_template(k, v, tid)) { built = true; break; }
  }
  pthread_mutex_unlock(&g.mu);
  return built;
}
