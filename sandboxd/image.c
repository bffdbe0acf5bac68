/* image.c — base images from a registry (see image.h). */
#include "image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "b64.h"
#include "clocks.h"
#include "errbuf.h"
#include "layers.h"
#include "statefile.h"
#include "template.h"

extern char **environ;

#define TOOL_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define ERR_TAIL 4096                 /* the end of a tool's stderr kept for its reason */
#define REASON_MAX 600                /* the registry's words in a reason */

typedef struct {
  char digest[80], index_digest[80], ref[300], layer_id[LY_ID_LEN + 1];
  layer *layer;
  json_t *config;                     /* {envs: [], workdir, user, hasBash} */
  int64_t used_ms;
} entry;

static struct {
  pthread_mutex_t mu;                 /* the cache */
  pthread_mutex_t pull_mu;            /* one pull at a time */
  char dir[4096];                     /* <state>/images */
  char index[4200];                   /* <state>/images.json */
  entry e[IMG_CACHE_MAX + 1];
  size_t n;
  char insecure[IMG_MAX_INSECURE][260];
  size_t ninsecure;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .pull_mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- references ---- */

int img_parse_ref(const char *ref, img_ref *out) {
  memset(out, 0, sizeof *out);
  const char *at = strchr(ref, '@');
  size_t namelen = at ? (size_t)(at - ref) : strlen(ref);
  if (at && snprintf(out->digest, sizeof out->digest, "%s", at + 1) >= (int)sizeof out->digest) return -1;
  const char *slash = NULL, *colon = NULL;
  for (const char *p = ref; p < ref + namelen; p++) if (*p == '/') slash = p;
  for (const char *p = slash ? slash : ref; p < ref + namelen; p++) if (*p == ':') colon = p;
  size_t repolen = colon ? (size_t)(colon - ref) : namelen;
  if (colon && snprintf(out->tag, sizeof out->tag, "%.*s", (int)(namelen - repolen - 1), colon + 1) >= (int)sizeof out->tag) return -1;
  if (!colon && !at) snprintf(out->tag, sizeof out->tag, "latest");
  const char *first_end = memchr(ref, '/', repolen);
  size_t fn = first_end ? (size_t)(first_end - ref) : 0;
  bool host = first_end && (memchr(ref, '.', fn) || memchr(ref, ':', fn) || (fn == 9 && !strncmp(ref, "localhost", 9)));
  if (host) {
    if (fn >= sizeof out->host || repolen - fn - 1 >= sizeof out->repo) return -1;
    snprintf(out->host, sizeof out->host, "%.*s", (int)fn, ref);
    snprintf(out->repo, sizeof out->repo, "%.*s", (int)(repolen - fn - 1), first_end + 1);
  } else {
    snprintf(out->host, sizeof out->host, "docker.io");
    if (repolen + 8 >= sizeof out->repo) return -1;
    snprintf(out->repo, sizeof out->repo, "%s%.*s", first_end ? "" : "library/", (int)repolen, ref);
  }
  return 0;
}

int img_insecure_add(const char *hostport, char *err, size_t errlen) {
  size_t n = strlen(hostport);
  if (n == 0 || n >= sizeof g.insecure[0] || strchr(hostport, '/'))
    return seterr(err, errlen, "'%s' must be a registry's HOST or HOST:PORT, as image references name it", hostport);
  for (size_t i = 0; i < n; i++) {
    char c = hostport[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == ':'))
      return seterr(err, errlen, "'%s' must be a registry's HOST or HOST:PORT, as image references name it", hostport);
  }
  if (g.ninsecure == IMG_MAX_INSECURE) return seterr(err, errlen, "at most %d insecure registries", IMG_MAX_INSECURE);
  snprintf(g.insecure[g.ninsecure++], sizeof g.insecure[0], "%s", hostport);
  return 0;
}

bool img_insecure(const char *host) {
  for (size_t i = 0; i < g.ninsecure; i++) {
    if (!strcmp(g.insecure[i], host)) return true;
    size_t n = strlen(g.insecure[i]);
    if (!strchr(g.insecure[i], ':') && !strncmp(host, g.insecure[i], n) && host[n] == ':') return true;   /* HOST: any port */
  }
  return false;
}

/* ---- the cache ---- */

static void entry_clear(entry *e) {
  ly_release(e->layer);
  json_decref(e->config);
  memset(e, 0, sizeof *e);
}

static int save_locked(char *err, size_t errlen) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < g.n; i++) {
    entry *e = &g.e[i];
    json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:s,s:O,s:I}", "digest", e->digest, "indexDigest", e->index_digest, "ref", e->ref,
                                       "layer", e->layer_id, "config", e->config, "used", (json_int_t)e->used_ms));
  }
  if (!a) return seterr(err, errlen, "writing %s: out of memory", g.index);
  int rc = statefile_save(g.index, a, JSON_COMPACT, err, errlen);
  json_decref(a);
  return rc;
}

/* Removes what interrupted pulls left (pull-* directories). */
static void sweep_pulls(void) {
  DIR *d = opendir(g.dir);
  char p[4400];
  for (struct dirent *de; d && (de = readdir(d));) {
    if (strncmp(de->d_name, "pull-", 5) != 0) continue;
    snprintf(p, sizeof p, "%s/%s", g.dir, de->d_name);
    if (tpl_rm_tree(p) != 0) fprintf(stderr, "sandboxd: images: removing %s: %s\n", p, strerror(errno));
  }
  if (d) closedir(d);
}

int img_init(const char *state_dir, char *err, size_t errlen) {
  if (snprintf(g.dir, sizeof g.dir, "%s/images", state_dir) >= (int)sizeof g.dir - 100 ||
      snprintf(g.index, sizeof g.index, "%s/images.json", state_dir) >= (int)sizeof g.index)
    return seterr(err, errlen, "images: state dir path too long");
  if (mkdir(g.dir, 0700) != 0 && errno != EEXIST) return seterr(err, errlen, "mkdir %s: %s", g.dir, strerror(errno));
  sweep_pulls();
  json_t *a;
  if (statefile_load(g.index, &a, err, errlen) != 0) return -1;
  if (a && !json_is_array(a)) { json_decref(a); return seterr(err, errlen, "%s: not a JSON array", g.index); }
  pthread_mutex_lock(&g.mu);
  size_t i;
  json_t *v;
  json_array_foreach(a, i, v) {
    const char *dg = json_string_value(json_object_get(v, "digest")), *id = json_string_value(json_object_get(v, "layer"));
    const char *ix = json_string_value(json_object_get(v, "indexDigest")), *ref = json_string_value(json_object_get(v, "ref"));
    json_t *cfg = json_object_get(v, "config"), *used = json_object_get(v, "used");
    if (g.n == IMG_CACHE_MAX || !dg || !id || !json_is_object(cfg) || strlen(dg) >= sizeof g.e[0].digest) continue;
    char why[300];
    layer *l = ly_open(id, why, sizeof why);
    if (!l || !ly_image_based(l)) {
      fprintf(stderr, "sandboxd: images: the cached image %s is gone: %s\n", dg, l ? "its layer is not an image" : why);
      ly_release(l);
      continue;
    }
    entry *e = &g.e[g.n++];
    snprintf(e->digest, sizeof e->digest, "%s", dg);
    snprintf(e->index_digest, sizeof e->index_digest, "%s", ix ? ix : "");
    snprintf(e->ref, sizeof e->ref, "%s", ref ? ref : "");
    snprintf(e->layer_id, sizeof e->layer_id, "%s", id);
    e->layer = l;
    e->config = json_incref(cfg);
    e->used_ms = json_is_integer(used) ? (int64_t)json_integer_value(used) : 0;
  }
  pthread_mutex_unlock(&g.mu);
  json_decref(a);
  return 0;
}

void img_shutdown(void) {
  pthread_mutex_lock(&g.mu);
  /* their layers are not released: a release to zero would remove an image's files (ly_shutdown
   * frees what is in memory) */
  for (size_t i = 0; i < g.n; i++) json_decref(g.e[i].config);
  g.n = 0;
  pthread_mutex_unlock(&g.mu);
}

static int config_from_json(const json_t *j, img_config *c) {
  json_t *envs = json_object_get(j, "envs");
  size_t n = json_is_array(envs) ? json_array_size(envs) : 0, k = 0;
  if (n > IMG_MAX_ENVS) n = IMG_MAX_ENVS;
  if (!(c->envs = calloc(n + 1, sizeof *c->envs))) return -1;
  for (size_t i = 0; i < n; i++) {
    const char *s = json_string_value(json_array_get(envs, i));
    if (s && !(c->envs[k++] = strdup(s))) return -1;
  }
  const char *w = json_string_value(json_object_get(j, "workdir")), *u = json_string_value(json_object_get(j, "user"));
  snprintf(c->workdir, sizeof c->workdir, "%s", w ? w : "");
  snprintf(c->user, sizeof c->user, "%s", u ? u : "");
  c->has_bash = json_is_true(json_object_get(j, "hasBash"));
  return 0;
}

void img_config_free(img_config *c) {
  for (size_t i = 0; c->envs && c->envs[i]; i++) free(c->envs[i]);
  free(c->envs);
  c->envs = NULL;
}

/* The cached image with manifest (or index) digest dg: a new reference and its config, or NULL. */
static layer *cache_find(const char *dg, img_config *c) {
  layer *l = NULL;
  pthread_mutex_lock(&g.mu);
  for (size_t i = 0; i < g.n && !l; i++) {
    entry *e = &g.e[i];
    if (strcmp(e->digest, dg) != 0 && strcmp(e->index_digest, dg) != 0) continue;
    if (config_from_json(e->config, c) != 0) break;
    snprintf(c->digest, sizeof c->digest, "%s", e->digest);
    c->cached = true;
    ly_hold(e->layer);
    l = e->layer;
    e->used_ms = wall_ms();
  }
  pthread_mutex_unlock(&g.mu);
  if (!l) img_config_free(c);
  return l;
}

/* Records a pulled image (its layer held by the cache too); the least recently used ones beyond
 * IMG_CACHE_MAX go. */
static void cache_add(const char *dg, const char *ix, const char *ref, layer *l, json_t *cfg) {
  pthread_mutex_lock(&g.mu);
  entry *e = &g.e[g.n++];
  memset(e, 0, sizeof *e);
  snprintf(e->digest, sizeof e->digest, "%s", dg);
  snprintf(e->index_digest, sizeof e->index_digest, "%s", ix);
  snprintf(e->ref, sizeof e->ref, "%s", ref);
  snprintf(e->layer_id, sizeof e->layer_id, "%s", ly_id(l));
  ly_hold(l);
  e->layer = l;
  e->config = json_incref(cfg);
  e->used_ms = wall_ms();
  while (g.n > IMG_CACHE_MAX) {
    size_t old = 0;
    for (size_t i = 1; i < g.n - 1; i++) if (g.e[i].used_ms < g.e[old].used_ms) old = i;
    entry_clear(&g.e[old]);
    memmove(&g.e[old], &g.e[old + 1], (g.n - old - 1) * sizeof g.e[0]);
    g.n--;
  }
  char err[300];
  if (save_locked(err, sizeof err) != 0) fprintf(stderr, "sandboxd: images: %s\n", err);
  pthread_mutex_unlock(&g.mu);
}

/* ---- running skopeo and umoci ---- */

static int find_tool(const char *name, char *out, size_t cap) {
  const char *p = TOOL_PATH;
  while (*p) {
    size_t n = strcspn(p, ":");
    snprintf(out, cap, "%.*s/%s", (int)n, p, name);
    if (access(out, X_OK) == 0) return 0;
    p += n;
    if (*p == ':') p++;
  }
  return -1;
}

typedef struct {
  char *out;                          /* stdout kept (NULL: its lines go to the log) */
  size_t outcap, outlen;
  bool out_over;
  char errtail[ERR_TAIL + 1];
  size_t nerr;
  char line[512];                     /* a stdout line being logged */
  size_t nline;
} tool_io;

static void io_line(tool_io *io, const img_pull_opts *o) {
  io->line[io->nline] = '\0';
  if (io->nline && o->log) o->log(o->cls, io->line);
  io->nline = 0;
}

static void io_take(tool_io *io, int which, const char *d, size_t n, const img_pull_opts *o) {
  if (which == 2) {
    if (n >= ERR_TAIL) { memcpy(io->errtail, d + n - ERR_TAIL, ERR_TAIL); io->nerr = ERR_TAIL; }
    else {
      size_t keep = io->nerr + n > ERR_TAIL ? ERR_TAIL - n : io->nerr;
      memmove(io->errtail, io->errtail + io->nerr - keep, keep);
      memcpy(io->errtail + keep, d, n);
      io->nerr = keep + n;
    }
    io->errtail[io->nerr] = '\0';
  } else if (io->out) {
    if (io->outlen + n > io->outcap) { io->out_over = true; return; }
    memcpy(io->out + io->outlen, d, n);
    io->outlen += n;
  } else {
    for (size_t i = 0; i < n; i++) {
      if (d[i] == '\n' || io->nline == sizeof io->line - 1) io_line(io, o);
      if (d[i] != '\n' && d[i] != '\r') io->line[io->nline++] = d[i];
    }
  }
}

/* Runs argv (argv[0] a path) with envp, its stdin /dev/null, fd 3 the auth file (auth_fd >= 0);
 * stdout and stderr into io. Its process group is killed after timeout_s or once o->cancelled.
 * 0 and the wait status, or -1 with err. */
static int run_tool(char *const argv[], char *const envp[], int auth_fd, tool_io *io, int timeout_s, const img_pull_opts *o,
                    int *status, char *err, size_t errlen) {
  int op[2] = {-1, -1}, ep[2] = {-1, -1};
  if (pipe2(op, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
    seterr(err, errlen, "pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) { if (op[i] >= 0) close(op[i]); if (ep[i] >= 0) close(ep[i]); }
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, op[1], 1);
  posix_spawn_file_actions_adddup2(&fa, ep[1], 2);
  if (auth_fd >= 0) posix_spawn_file_actions_adddup2(&fa, auth_fd, 3);   /* auth_fd > 3: its copy is not close-on-exec */
  posix_spawn_file_actions_addclosefrom_np(&fa, auth_fd >= 0 ? 4 : 3);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, &at, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(op[1]);
  close(ep[1]);
  if (rc != 0) { close(op[0]); close(ep[0]); return seterr(err, errlen, "cannot start %s: %s", argv[0], strerror(rc)); }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bool killed = false, timed_out = false;
  int open_fds = 2;
  struct pollfd pf[2] = {{op[0], POLLIN, 0}, {ep[0], POLLIN, 0}};
  char buf[16384];
  while (open_fds > 0) {
    int n = poll(pf, 2, 250);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; n > 0 && i < 2; i++) {
      if (pf[i].fd < 0 || !pf[i].revents) continue;
      ssize_t r = read(pf[i].fd, buf, sizeof buf);
      if (r > 0) io_take(io, i + 1, buf, (size_t)r, o);
      else if (r == 0 || (errno != EINTR && errno != EAGAIN)) { close(pf[i].fd); pf[i].fd = -1; open_fds--; }
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (!killed && ((o->cancelled && o->cancelled(o->cls)) || (timed_out = t.tv_sec - t0.tv_sec > timeout_s) || io->out_over)) {
      kill(-pid, SIGKILL);
      killed = true;
    }
  }
  for (int i = 0; i < 2; i++) if (pf[i].fd >= 0) close(pf[i].fd);
  if (open_fds > 0 && !killed) {   /* poll failed: it is not waited for without end */
    int e = errno;
    kill(-pid, SIGKILL);
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {}
    return seterr(err, errlen, "poll: %s", strerror(e));
  }
  if (!io->out && io->nline) io_line(io, o);
  while (waitpid(pid, status, 0) < 0)
    if (errno != EINTR) return seterr(err, errlen, "waitpid: %s", strerror(errno));
  if (killed) {
    if (io->out_over) return seterr(err, errlen, "%s wrote more than %zu bytes", argv[0], io->outcap);
    if (timed_out) return seterr(err, errlen, "%s did not finish within %d s", argv[0], timeout_s);
    return seterr(err, errlen, "stopped (sandboxd is stopping)");
  }
  return 0;
}

/* The reason in a tool's stderr: logrus's last msg="..." (unescaped), else its last line; the
 * password (and its base64 form) never in it; cut to REASON_MAX. */
static void tool_reason(const tool_io *io, const img_pull_opts *o, char *out, size_t cap) {
  char buf[ERR_TAIL + 1];
  size_t n = 0;
  const char *m = NULL;
  for (const char *p = io->errtail; (p = strstr(p, "msg=\"")); p += 5) m = p + 5;
  if (m) {
    for (const char *p = m; *p && *p != '"' && n < sizeof buf - 1; p++) {
      if (*p == '\\' && p[1]) p++;
      buf[n++] = *p;
    }
  } else {
    size_t len = io->nerr;
    while (len && (io->errtail[len - 1] == '\n' || io->errtail[len - 1] == ' ')) len--;
    size_t s = len;
    while (s && io->errtail[s - 1] != '\n') s--;
    n = len - s;
    memcpy(buf, io->errtail + s, n);
  }
  buf[n] = '\0';
  /* skopeo's "Error parsing image name \"docker://…\": " says nothing the caller does not know */
  char *cut = strstr(buf, "\": ");
  char *text = !strncmp(buf, "Error parsing image name \"", 26) && cut ? cut + 3 : buf;
  /* the password, should skopeo ever repeat it, becomes "***" (never longer: in place) */
  size_t pl = o->password ? strlen(o->password) : 0;
  for (char *hit = text; pl >= 3 && (hit = strstr(hit, o->password)); hit += 3) {
    memcpy(hit, "***", 3);
    memmove(hit + 3, hit + pl, strlen(hit + pl) + 1);
  }
  size_t tl = strlen(text);
  if (tl > REASON_MAX) {
    size_t p = REASON_MAX;
    while (p > 0 && ((unsigned char)text[p] & 0xC0) == 0x80) p--;
    snprintf(out, cap, "%.*s...", (int)p, text);
  } else {
    snprintf(out, cap, "%s", tl ? text : "(no message)");
  }
  for (char *p = out; *p; p++) if ((unsigned char)*p < 0x20) *p = ' ';
}

/* The auth file skopeo reads: {"auths": {host: {auth: base64(user:pass)}}} (none: empty) in a
 * memfd, at a descriptor above 3. -1 with err. */
static int auth_memfd(const char *host, const img_pull_opts *o, char *err, size_t errlen) {
  int fd = (int)syscall(SYS_memfd_create, "sandboxd-registry-auth", 1u /* MFD_CLOEXEC */);
  if (fd < 0) return seterr(err, errlen, "memfd_create: %s", strerror(errno));
  if (fd <= 3) {
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    if ((fd = hi) < 0) return seterr(err, errlen, "dup: %s", strerror(errno));
  }
  size_t ul = o->username ? strlen(o->username) : 0, pl = o->password ? strlen(o->password) : 0;
  size_t rawlen = ul + 1 + pl, b64len = mb_b64_encoded_len(rawlen), cap = b64len + strlen(host) + 64;
  char *raw = malloc(rawlen + 1), *b64 = malloc(b64len + 1), *json = malloc(cap);
  int rc = -1;
  if (!raw || !b64 || !json) { seterr(err, errlen, "out of memory"); goto out; }
  int n;
  if (o->username) {
    snprintf(raw, rawlen + 1, "%s:%s", o->username, o->password ? o->password : "");
    mb_b64_encode(raw, rawlen, b64);
    n = snprintf(json, cap, "{\"auths\":{\"%s\":{\"auth\":\"%s\"}}}", host, b64);
  } else {
    n = snprintf(json, cap, "{\"auths\":{}}");
  }
  if (n < 0 || (size_t)n >= cap || write(fd, json, (size_t)n) != n) { seterr(err, errlen, "writing the auth file: %s", strerror(errno)); goto out; }
  rc = 0;
out:
  if (raw) { explicit_bzero(raw, rawlen + 1); free(raw); }
  if (b64) { explicit_bzero(b64, b64len + 1); free(b64); }
  if (json) { explicit_bzero(json, cap); free(json); }
  if (rc != 0) { close(fd); return -1; }
  return fd;
}

static bool hex64(const char *h) {
  size_t n = 0;
  for (; h[n]; n++)
    if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f'))) return false;
  return n == 64;
}

/* A file of at most IMG_MANIFEST_MAX bytes: malloc'ed, NUL-terminated; NULL with errno. */
static char *read_small(int dirfd, const char *path, size_t *len) {
  int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *b = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= IMG_MANIFEST_MAX && (b = malloc((size_t)st.st_size + 1))) {
    ssize_t r = read(fd, b, (size_t)st.st_size);
    if (r != st.st_size) { free(b); b = NULL; errno = EIO; }
    else { b[r] = '\0'; *len = (size_t)r; }
  } else if (!b) {
    errno = EFBIG;
  }
  close(fd);
  return b;
}

static const char *host_arch(void) {
  struct utsname u;
  if (uname(&u) != 0) return "amd64";
  if (!strcmp(u.machine, "x86_64")) return "amd64";
  if (!strcmp(u.machine, "aarch64")) return "arm64";
  if (!strncmp(u.machine, "armv7", 5)) return "arm";
  if (!strcmp(u.machine, "i686") || !strcmp(u.machine, "i386")) return "386";
  return "amd64";
}

/* The manifest's layers checked against the bounds. 0, or -1 with err. */
static int check_layers(json_t *m, const char *name, char *err, size_t errlen) {
  json_t *ls = json_object_get(m, "layers");
  if (!json_is_array(ls)) return seterr(err, errlen, "fromImage '%s': its manifest lists no layers (a Docker schema 1 manifest? not supported)", name);
  if (json_array_size(ls) > IMG_MAX_LAYERS) return seterr(err, errlen, "fromImage '%s': %zu layers, at most %d", name, json_array_size(ls), IMG_MAX_LAYERS);
  unsigned long long total = 0;
  size_t i;
  json_t *l;
  json_array_foreach(ls, i, l) {
    json_t *sz = json_object_get(l, "size");
    if (json_is_integer(sz) && json_integer_value(sz) > 0) total += (unsigned long long)json_integer_value(sz);
  }
  if (total > IMG_MAX_BYTES) return seterr(err, errlen, "fromImage '%s': its layers are %llu MiB compressed, at most %llu", name, total >> 20, IMG_MAX_BYTES >> 20);
  return 0;
}

typedef struct {
  img_ref r;
  char **envp;
  int auth;
  const img_pull_opts *o;
  const char *name;                   /* as the request wrote it */
  char skopeo[256], umoci[256];
} pull;

/* `skopeo inspect --raw` of docker://host/repo + suffix into *raw (malloc'ed). 0, or -1 with err. */
static int inspect_raw(pull *p, const char *suffix, char **raw, size_t *len, char *err, size_t errlen) {
  char target[700], tls[40], timeout[40];
  snprintf(target, sizeof target, "docker://%s/%s%s", p->r.host, p->r.repo, suffix);
  snprintf(tls, sizeof tls, "--tls-verify=%s", img_insecure(p->r.host) ? "false" : "true");
  snprintf(timeout, sizeof timeout, "--command-timeout=%ds", IMG_INSPECT_TIMEOUT_S);
  char *argv[] = {p->skopeo, timeout, "inspect", "--raw", "--authfile", "/dev/fd/3", tls, target, NULL};
  tool_io *io = calloc(1, sizeof *io);
  char *out = malloc(IMG_MANIFEST_MAX + 1);
  int status = 0, rc = -1;
  if (!io || !out) { seterr(err, errlen, "out of memory"); goto done; }
  io->out = out;
  io->outcap = IMG_MANIFEST_MAX;
  char why[400];
  if (run_tool(argv, p->envp, p->auth, io, IMG_INSPECT_TIMEOUT_S + 10, p->o, &status, why, sizeof why) != 0) {
    seterr(err, errlen, "fromImage '%s': skopeo inspect: %s", p->name, why);
    goto done;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char reason[REASON_MAX + 8];
    tool_reason(io, p->o, reason, sizeof reason);
    seterr(err, errlen, "fromImage '%s' cannot be pulled: %s", p->name, reason);
    goto done;
  }
  out[io->outlen] = '\0';
  *raw = out;
  *len = io->outlen;
  out = NULL;
  rc = 0;
done:
  free(out);
  free(io);
  return rc;
}

/* The platform's manifest digest (and the index's, when the reference names an index). */
static int resolve(pull *p, char *digest, size_t dcap, char *index_digest, size_t icap, char *err, size_t errlen) {
  char suffix[200], *raw = NULL;
  size_t len = 0;
  if (p->r.digest[0]) snprintf(suffix, sizeof suffix, "@%s", p->r.digest);
  else snprintf(suffix, sizeof suffix, ":%s", p->r.tag);
  if (inspect_raw(p, suffix, &raw, &len, err, errlen) != 0) return -1;
  char hex[2 * MB_SHA256_LEN + 1];
  mb_sha256_hex(raw, len, hex);
  json_error_t je;
  json_t *m = json_loadb(raw, len, 0, &je);
  free(raw);
  index_digest[0] = '\0';
  int rc = -1;
  if (!json_is_object(m)) { seterr(err, errlen, "fromImage '%s': the registry's manifest is not JSON: %s", p->name, je.text); goto out; }
  json_t *ms = json_object_get(m, "manifests");
  if (json_is_array(ms)) {   /* an index (multi-platform): linux on this machine's architecture */
    snprintf(index_digest, icap, "sha256:%s", hex);
    const char *arch = host_arch(), *pick = NULL;
    char have[300] = "";
    size_t i, hl = 0;
    json_t *e;
    json_array_foreach(ms, i, e) {
      json_t *pl = json_object_get(e, "platform");
      const char *os = json_string_value(json_object_get(pl, "os")), *ar = json_string_value(json_object_get(pl, "architecture"));
      if (os && ar && hl < sizeof have - 40) hl += (size_t)snprintf(have + hl, sizeof have - hl, "%s%.20s/%.20s", hl ? ", " : "", os, ar);
      if (!pick && os && ar && !strcmp(os, "linux") && !strcmp(ar, arch)) pick = json_string_value(json_object_get(e, "digest"));
    }
    if (!pick) { seterr(err, errlen, "fromImage '%s': no linux/%s image in its index (it has %s)", p->name, arch, hl ? have : "none"); goto out; }
    if (strncmp(pick, "sha256:", 7) != 0 || strlen(pick) >= dcap) { seterr(err, errlen, "fromImage '%s': its index names a malformed digest", p->name); goto out; }
    snprintf(digest, dcap, "%s", pick);
    json_decref(m);
    m = NULL;
    char sfx[100];
    snprintf(sfx, sizeof sfx, "@%s", digest);
    if (inspect_raw(p, sfx, &raw, &len, err, errlen) != 0) return -1;
    mb_sha256_hex(raw, len, hex);
    m = json_loadb(raw, len, 0, &je);
    free(raw);
    if (!json_is_object(m) || strcmp(hex, digest + 7) != 0) { seterr(err, errlen, "fromImage '%s': the registry's manifest %s does not match its digest", p->name, digest); goto out; }
  } else {
    snprintf(digest, dcap, "sha256:%s", hex);
  }
  if (p->r.digest[0] && strcmp(p->r.digest, digest) != 0 && strcmp(p->r.digest, index_digest) != 0) {
    seterr(err, errlen, "fromImage '%s': the registry answered a manifest of digest %s", p->name, digest);
    goto out;
  }
  rc = check_layers(m, p->name, err, errlen);
out:
  json_decref(m);
  return rc;
}

/* The image config of the layout's only image: Env, WorkingDir, User, into a JSON object. */
static json_t *layout_config(int lay, const char *name, char *err, size_t errlen) {
  size_t len;
  char *t = read_small(lay, "index.json", &len);
  json_t *ix = t ? json_loadb(t, len, 0, NULL) : NULL, *man = NULL, *cfg = NULL, *out = NULL;
  free(t);
  const char *md = json_string_value(json_object_get(json_array_get(json_object_get(ix, "manifests"), 0), "digest"));
  char path[200];
  if (md && !strncmp(md, "sha256:", 7) && hex64(md + 7)) {
    snprintf(path, sizeof path, "blobs/sha256/%s", md + 7);
    if ((t = read_small(lay, path, &len))) man = json_loadb(t, len, 0, NULL);
    free(t);
  }
  const char *cd = json_string_value(json_object_get(json_object_get(man, "config"), "digest"));
  if (cd && !strncmp(cd, "sha256:", 7) && hex64(cd + 7)) {
    snprintf(path, sizeof path, "blobs/sha256/%s", cd + 7);
    if ((t = read_small(lay, path, &len))) cfg = json_loadb(t, len, 0, NULL);
    free(t);
  }
  if (!json_is_object(cfg)) { seterr(err, errlen, "fromImage '%s': its image config cannot be read", name); goto done; }
  json_t *c = json_object_get(cfg, "config"), *env = json_object_get(c, "Env"), *envs = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(env, i, v)
    if (json_is_string(v) && strchr(json_string_value(v), '=') && json_array_size(envs) < IMG_MAX_ENVS) json_array_append(envs, v);
  const char *w = json_string_value(json_object_get(c, "WorkingDir")), *u = json_string_value(json_object_get(c, "User"));
  out = json_pack("{s:o,s:s,s:s}", "envs", envs ? envs : json_array(), "workdir", w && strlen(w) < 1024 ? w : "",
                  "user", u && strlen(u) < 64 ? u : "");
  if (!out) seterr(err, errlen, "out of memory");
done:
  json_decref(ix);
  json_decref(man);
  json_decref(cfg);
  return out;
}

/* Beneath rootfd, never through a symlink: an O_PATH or O_RDONLY descriptor, or -1. */
static int open_beneath(int rootfd, const char *path, int flags) {
  struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  return (int)syscall(SYS_openat2, rootfd, path, &how, sizeof how);
}

/* Appends `line` to etc/<file> unless a line starts with `prefix` (a regular file, ≤ 1 MiB). */
static void add_account(int etc, const char *file, const char *prefix, const char *line) {
  int fd = openat(etc, file, O_RDWR | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;   /* none: the bare template's shows through */
  struct stat st;
  char *b = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (1 << 20) && (b = malloc((size_t)st.st_size + 2))) {
    ssize_t r = pread(fd, b, (size_t)st.st_size, 0);
    if (r >= 0) {
      b[r] = '\0';
      size_t pl = strlen(prefix);
      bool found = !strncmp(b, prefix, pl);
      for (char *p = b; !found && (p = strchr(p, '\n')); p++) found = !strncmp(p + 1, prefix, pl);
      if (!found) {
        char l[160];
        int n = snprintf(l, sizeof l, "%s%s\n", r > 0 && b[r - 1] != '\n' ? "\n" : "", line);
        if (write(fd, l, (size_t)n) != n) { /* best effort: the account is then missing by name */ }
      }
    }
  }
  free(b);
  close(fd);
}

/* What a sandbox root needs of the unpacked image: its resolv.conf and hosts go (the sandbox's
 * come from the bare template, as a container runtime provides them), `user` (1000) is in its
 * passwd and group when it has them. Nothing is followed through a symlink. has_bash: whether
 * /bin/bash resolves, inside it, to an executable file. */
static void prepare_rootfs(const char *rootfs, bool *has_bash) {
  *has_bash = false;
  int root = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0) return;
  struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  int bash = (int)syscall(SYS_openat2, root, "bin/bash", &how, sizeof how);
  struct stat st;
  if (bash >= 0 && fstat(bash, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) *has_bash = true;
  if (bash >= 0) close(bash);
  int etc = open_beneath(root, "etc", O_RDONLY | O_DIRECTORY);
  if (etc >= 0) {
    (void)unlinkat(etc, "resolv.conf", 0);
    (void)unlinkat(etc, "hosts", 0);
    add_account(etc, "passwd", "user:", *has_bash ? "user:x:1000:1000::/home/user:/bin/bash" : "user:x:1000:1000::/home/user:/bin/sh");
    add_account(etc, "group", "user:", "user:x:1000:");
    close(etc);
  }
  close(root);
}

static void say(const img_pull_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const img_pull_opts *o, const char *fmt, ...) {
  if (!o->log) return;
  char line[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  o->log(o->cls, line);
}

/* Downloads the image pinned by digest into <dir>/layout, unpacks it into <dir>/rootfs. */
static int download(pull *p, const char *dir, const char *digest, char *err, size_t errlen) {
  char src[700], dst[4400], tls[40], timeout[40], tmpdir[4400], img[4400], rootfs[4400], umap[64], gmap[64];
  snprintf(src, sizeof src, "docker://%s/%s@%s", p->r.host, p->r.repo, digest);
  snprintf(dst, sizeof dst, "oci:%s/layout:image", dir);
  snprintf(tls, sizeof tls, "--src-tls-verify=%s", img_insecure(p->r.host) ? "false" : "true");
  snprintf(timeout, sizeof timeout, "--command-timeout=%ds", IMG_PULL_TIMEOUT_S);
  snprintf(tmpdir, sizeof tmpdir, "--tmpdir=%s/tmp", dir);
  char *copy[] = {p->skopeo, timeout, tmpdir, "--insecure-policy", "copy", "--authfile", "/dev/fd/3", tls, src, dst, NULL};
  tool_io *io = calloc(1, sizeof *io);
  if (!io) return seterr(err, errlen, "out of memory");
  int status = 0, rc = -1;
  char why[400], reason[REASON_MAX + 8];
  if (run_tool(copy, p->envp, p->auth, io, IMG_PULL_TIMEOUT_S + 10, p->o, &status, why, sizeof why) != 0) {
    seterr(err, errlen, "fromImage '%s': skopeo copy: %s", p->name, why);
    goto out;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    tool_reason(io, p->o, reason, sizeof reason);
    seterr(err, errlen, "fromImage '%s' cannot be pulled: %s", p->name, reason);
    goto out;
  }
  snprintf(img, sizeof img, "%s/layout:image", dir);
  snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
  char *unpack[14];
  int a = 0;
  unpack[a++] = p->umoci;
  unpack[a++] = "raw";
  unpack[a++] = "unpack";
  if (p->o->id_count <= 1) unpack[a++] = "--rootless";
  else {
    snprintf(umap, sizeof umap, "0:%u:%u", (unsigned)p->o->uid_base, p->o->id_count);
    snprintf(gmap, sizeof gmap, "0:%u:%u", (unsigned)p->o->gid_base, p->o->id_count);
    unpack[a++] = "--uid-map";
    unpack[a++] = umap;
    unpack[a++] = "--gid-map";
    unpack[a++] = gmap;
  }
  unpack[a++] = "--image";
  unpack[a++] = img;
  unpack[a++] = rootfs;
  unpack[a] = NULL;
  say(p->o, "Unpacking %s", digest);
  memset(io, 0, sizeof *io);
  if (run_tool(unpack, p->envp, -1, io, IMG_PULL_TIMEOUT_S, p->o, &status, why, sizeof why) != 0) {
    seterr(err, errlen, "fromImage '%s': umoci unpack: %s", p->name, why);
    goto out;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    tool_reason(io, p->o, reason, sizeof reason);
    seterr(err, errlen, "fromImage '%s': umoci cannot unpack it: %s", p->name, reason);
    goto out;
  }
  rc = 0;
out:
  free(io);
  return rc;
}

layer *img_get(const char *name, const img_pull_opts *o, img_config *cfg, char *err, size_t errlen) {
  memset(cfg, 0, sizeof *cfg);
  pull p = {.auth = -1, .o = o, .name = name};
  if (img_parse_ref(name, &p.r) != 0) { seterr(err, errlen, "fromImage '%s': not an image reference", name); return NULL; }
  char digest[80] = "", index_digest[80] = "", dir[4200] = "", home[4300], tmp[4300], envbuf[8][4400];
  layer *l = NULL;
  json_t *conf = NULL;
  if (p.r.digest[0] && (l = cache_find(p.r.digest, cfg))) {   /* pinned and cached: nothing to ask */
    say(o, "Image %s: cached (%s)", name, cfg->digest);
    return l;
  }
  if (find_tool("skopeo", p.skopeo, sizeof p.skopeo) != 0 || find_tool("umoci", p.umoci, sizeof p.umoci) != 0) {
    seterr(err, errlen, "fromImage '%s': sandboxd pulls images with skopeo and umoci, and %s is not installed (%s; Debian: apt-get install skopeo umoci)",
           name, p.skopeo[0] && access(p.skopeo, X_OK) == 0 ? "umoci" : "skopeo", TOOL_PATH);
    return NULL;
  }
  pthread_mutex_lock(&g.pull_mu);
  /* A private directory per pull: the tools' HOME (no one's credentials or configuration in
   * it), their temporary files, the layout, the root file system. */
  snprintf(dir, sizeof dir, "%s/pull-XXXXXX", g.dir);
  if (!mkdtemp(dir)) { seterr(err, errlen, "mkdtemp %s: %s", dir, strerror(errno)); dir[0] = '\0'; goto out; }
  snprintf(home, sizeof home, "%s/home", dir);
  snprintf(tmp, sizeof tmp, "%s/tmp", dir);
  if (mkdir(home, 0700) != 0 || mkdir(tmp, 0700) != 0) { seterr(err, errlen, "mkdir in %s: %s", dir, strerror(errno)); goto out; }
  char *envp[9];
  int ne = 0;
  snprintf(envbuf[ne], sizeof envbuf[0], "PATH=%s", TOOL_PATH); envp[ne] = envbuf[ne]; ne++;
  snprintf(envbuf[ne], sizeof envbuf[0], "HOME=%s", home); envp[ne] = envbuf[ne]; ne++;
  snprintf(envbuf[ne], sizeof envbuf[0], "TMPDIR=%s", tmp); envp[ne] = envbuf[ne]; ne++;
  static const char *const PROXY[] = {"https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"};
  for (size_t i = 0; i < sizeof PROXY / sizeof *PROXY && ne < 8; i++) {
    const char *v = getenv(PROXY[i]);
    if (v && snprintf(envbuf[ne], sizeof envbuf[0], "%s=%s", PROXY[i], v) < (int)sizeof envbuf[0]) { envp[ne] = envbuf[ne]; ne++; }
  }
  envp[ne] = NULL;
  p.envp = envp;
  const char *authhost = p.r.host;
  if ((p.auth = auth_memfd(authhost, o, err, errlen)) < 0) goto out;
  say(o, "Resolving %s/%s%s%s%s", p.r.host, p.r.repo, p.r.tag[0] ? ":" : "", p.r.tag, p.r.digest[0] ? "@" : "");
  if (resolve(&p, digest, sizeof digest, index_digest, sizeof index_digest, err, errlen) != 0) goto out;
  if ((l = cache_find(digest, cfg))) {
    say(o, "Image %s: %s, cached", name, digest);
    goto out;
  }
  say(o, "Pulling %s (%s)", name, digest);
  if (download(&p, dir, digest, err, errlen) != 0) goto out;
  char lay[4400], rootfs[4400];
  snprintf(lay, sizeof lay, "%s/layout", dir);
  int lfd = open(lay, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  conf = lfd >= 0 ? layout_config(lfd, name, err, errlen) : NULL;
  if (lfd < 0) seterr(err, errlen, "fromImage '%s': open %s: %s", name, lay, strerror(errno));
  if (lfd >= 0) close(lfd);
  if (!conf) goto out;
  snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
  bool bash = false;
  prepare_rootfs(rootfs, &bash);
  json_object_set_new(conf, "hasBash", json_boolean(bash));
  char why[600];
  if (ly_adopt_image(rootfs, digest, o->uid_base, o->gid_base, &l, why, sizeof why) != 0) {
    seterr(err, errlen, "fromImage '%s': %s", name, why);
    goto out;
  }
  cache_add(digest, index_digest, name, l, conf);
  if (config_from_json(conf, cfg) != 0) { ly_release(l); l = NULL; seterr(err, errlen, "out of memory"); goto out; }
  snprintf(cfg->digest, sizeof cfg->digest, "%s", digest);
out:
  if (p.auth >= 0) close(p.auth);
  json_decref(conf);
  if (dir[0] && tpl_rm_tree(dir) != 0) fprintf(stderr, "sandboxd: images: removing %s: %s\n", dir, strerror(errno));
  pthread_mutex_unlock(&g.pull_mu);
  if (!l) img_config_free(cfg);
  return l;
}
