/* volumes.c — persistent volumes: catalogue and content (see volumes.h). */
#include "volumes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "ids.h"
#include "template.h"

#define PATH_MAX_LEN 4096

struct volume {
  volume *next;
  vol_info info;
  int refs;                  /* the catalogue's one, mounts, accesses */
  int mounts;                /* sandboxes that have it mounted */
  bool deleted;              /* out of the catalogue: its directory goes with the last reference */
  int root;                  /* O_PATH fd of its directory */
  char dir[4200];
};

static struct {
  pthread_mutex_t mu;
  char dir[4096], path[4200];
  volume *all;               /* newest first */
  size_t n;
  vol_idmap map;
  dev_t dev;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

__attribute__((format(printf, 3, 4))) static int fail(char *msg, size_t msglen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, msglen, fmt, ap);
  va_end(ap);
  return 0;
}
#define FAIL(status, ...) (fail(msg, msglen, __VA_ARGS__), (status))

dev_t vol_dev(void) { return g.dev; }
const char *vol_name(const volume *v) { return v->info.name; }
const char *vol_dir(const volume *v) { return v->dir; }

/* ---- catalogue ---- */

static bool valid_name(const char *n) {
  size_t len = strlen(n);
  if (len == 0 || len > VOL_NAME_MAX) return false;
  for (size_t i = 0; i < len; i++) {
    char c = n[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

static bool valid_id(const char *id) {
  if (strlen(id) != VOL_ID_LEN) return false;
  for (int i = 0; i < VOL_ID_LEN; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    char c = id[i];
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

static int make_uuid(char *out) {
  unsigned char b[16];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return -1;
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);   /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);   /* RFC 4122 variant */
  snprintf(out, VOL_ID_LEN + 1, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return 0;
}

static int save_locked(char *msg, size_t msglen) {
  json_t *arr = json_array(), *root = json_pack("{s:i,s:o}", "version", 1, "volumes", arr);
  if (!root) return FAIL(500, "out of memory");
  for (volume *v = g.all; v; v = v->next) {
    if (v->deleted) continue;
    json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "id", v->info.id, "name", v->info.name, "token", v->info.token, "createdMs",
                          (json_int_t)v->info.created_ms);
    if (!o || json_array_insert_new(arr, 0, o) != 0) { json_decref(root); return FAIL(500, "out of memory"); }   /* oldest first */
  }
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", g.path);
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
  json_decref(root);
  if (!text) return FAIL(500, "out of memory");
  int rc = 500, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  size_t len = strlen(text), off = 0;
  while (fd >= 0 && off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0) { if (errno == EINTR) continue; break; }
    off += (size_t)w;
  }
  if (fd < 0 || off < len || fsync(fd) != 0) fail(msg, msglen, "writing %s: %s", tmp, strerror(errno));
  else if (close(fd) != 0 || (fd = -1, rename(tmp, g.path) != 0)) fail(msg, msglen, "writing %s: %s", g.path, strerror(errno));
  else rc = 0, fd = -1;
  if (fd >= 0) close(fd);
  if (rc) unlink(tmp);
  free(text);
  return rc;
}

/* A catalogue entry with its directory open; NULL after a message on stderr. */
static volume *entry_new(const vol_info *in, bool create_dir) {
  volume *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  v->info = *in;
  v->refs = 1;
  v->root = -1;
  snprintf(v->dir, sizeof v->dir, "%s/%s", g.dir, in->id);
  if (create_dir) {
    /* The root of the volume: everyone inside may write, owned by the sandboxes' root. */
    if (mkdir(v->dir, 0777) != 0 || chmod(v->dir, 0777) != 0 ||
        (chown(v->dir, g.map.uid_base, g.map.gid_base) != 0 && errno != EPERM)) {
      fprintf(stderr, "sandboxd: volumes: mkdir %s: %s\n", v->dir, strerror(errno));
      (void)rmdir(v->dir);
      free(v);
      return NULL;
    }
  }
  v->root = open(v->dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (v->root < 0) {
    fprintf(stderr, "sandboxd: volumes: %s: %s\n", v->dir, strerror(errno));
    free(v);
    return NULL;
  }
  return v;
}

int vol_init(const char *state_dir, const vol_idmap *map, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  int rc = -1;
  json_t *root = NULL;
  g.map = *map;
  if (snprintf(g.dir, sizeof g.dir, "%s/volumes", state_dir) >= (int)sizeof g.dir - 64 ||
      snprintf(g.path, sizeof g.path, "%s/volumes.json", state_dir) >= (int)sizeof g.path - 8) {
    snprintf(err, errlen, "volumes: state dir path too long");
    goto out;
  }
  struct stat st;
  if ((mkdir(g.dir, 0711) != 0 && errno != EEXIST) || stat(g.dir, &st) != 0) {
    snprintf(err, errlen, "mkdir %s: %s", g.dir, strerror(errno));
    goto out;
  }
  g.dev = st.st_dev;
  if (access(g.path, F_OK) != 0 && errno == ENOENT) { rc = 0; goto out; }
  json_error_t je;
  root = json_load_file(g.path, JSON_REJECT_DUPLICATES, &je);
  json_t *arr = root ? json_object_get(root, "volumes") : NULL;
  if (!root || !json_is_array(arr) || json_integer_value(json_object_get(root, "version")) != 1) {
    snprintf(err, errlen, "%s: %s", g.path, root ? "not a sandboxd volume catalogue (version 1)" : je.text);
    goto out;
  }
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    const char *id = json_string_value(json_object_get(o, "id")), *name = json_string_value(json_object_get(o, "name"));
    const char *token = json_string_value(json_object_get(o, "token"));
    json_t *created = json_object_get(o, "createdMs");
    bool dup = false;
    for (volume *v = g.all; v && id && name; v = v->next) dup = dup || !strcmp(v->info.id, id) || !strcmp(v->info.name, name);
    if (!id || !valid_id(id) || !name || !valid_name(name) || !token || strlen(token) != VOL_TOKEN_LEN || !json_is_integer(created) ||
        dup || g.n >= VOL_MAX) {
      fprintf(stderr, "sandboxd: volumes: entry %zu of %s is malformed or repeated: dropped\n", i, g.path);
      continue;
    }
    vol_info in;
    memset(&in, 0, sizeof in);
    snprintf(in.id, sizeof in.id, "%s", id);
    snprintf(in.name, sizeof in.name, "%s", name);
    snprintf(in.token, sizeof in.token, "%s", token);
    in.created_ms = json_integer_value(created);
    volume *v = entry_new(&in, false);
    if (!v) { fprintf(stderr, "sandboxd: volumes: %s: its directory is gone: dropped\n", name); continue; }
    v->next = g.all;
    g.all = v;
    g.n++;
  }
  rc = 0;
out:
  json_decref(root);
  pthread_mutex_unlock(&g.mu);
  return rc;
}

void vol_shutdown(void) {
  pthread_mutex_lock(&g.mu);
  volume *v = g.all;
  g.all = NULL;
  g.n = 0;
  pthread_mutex_unlock(&g.mu);
  while (v) {   /* every sandbox and request is gone by now */
    volume *next = v->next;
    if (v->root >= 0) close(v->root);
    free(v);
    v = next;
  }
}

static volume *find_locked(const char *id, const char *name) {
  for (volume *v = g.all; v; v = v->next)
    if (!v->deleted && ((id && !strcmp(v->info.id, id)) || (name && !strcmp(v->info.name, name)))) return v;
  return NULL;
}

int vol_create(const char *name, vol_info *out, char *msg, size_t msglen) {
  if (!valid_name(name)) return FAIL(400, "field 'name': a volume name is 1 to %d characters of a-z, A-Z, 0-9, '_' and '-'", VOL_NAME_MAX);
  vol_info in;
  memset(&in, 0, sizeof in);
  snprintf(in.name, sizeof in.name, "%s", name);
  if (make_uuid(in.id) != 0 || ids_random(in.token, VOL_TOKEN_LEN) != 0) return FAIL(500, "getrandom: %s", strerror(errno));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  in.created_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  pthread_mutex_lock(&g.mu);
  int rc = 0;
  if (find_locked(NULL, name)) rc = FAIL(400, "Volume with name '%s' already exists", name);
  else if (g.n >= VOL_MAX) rc = FAIL(400, "sandboxd keeps at most %d volumes: delete some first", VOL_MAX);
  volume *v = rc ? NULL : entry_new(&in, true);
  if (!rc && !v) rc = FAIL(500, "cannot create the volume's directory under %s", g.dir);
  if (!rc) {
    v->next = g.all;
    g.all = v;
    g.n++;
    if ((rc = save_locked(msg, msglen)) != 0) {   /* nothing exists unless it is on disk */
      g.all = v->next;
      g.n--;
      close(v->root);
      (void)rmdir(v->dir);
      free(v);
    }
  }
  pthread_mutex_unlock(&g.mu);
  if (!rc) *out = in;
  return rc;
}

vol_info *vol_list(size_t *n) {
  pthread_mutex_lock(&g.mu);
  vol_info *out = calloc(g.n ? g.n : 1, sizeof *out);
  size_t k = g.n;
  *n = 0;
  if (out) {
    for (volume *v = g.all; v; v = v->next)
      if (!v->deleted) out[--k] = v->info;   /* oldest first */
    *n = g.n;
  }
  pthread_mutex_unlock(&g.mu);
  return out;
}

int vol_get(const char *id, vol_info *out) {
  pthread_mutex_lock(&g.mu);
  volume *v = find_locked(id, NULL);
  if (v) *out = v->info;
  pthread_mutex_unlock(&g.mu);
  return v ? 0 : 404;
}

/* Drops one reference; the last one of a deleted volume removes its directory. */
void vol_put(volume *v) {
  if (!v) return;
  pthread_mutex_lock(&g.mu);
  bool last = --v->refs == 0;
  if (last) {
    volume **pp = &g.all;
    while (*pp && *pp != v) pp = &(*pp)->next;
    if (*pp) *pp = v->next;
  }
  pthread_mutex_unlock(&g.mu);
  if (!last) return;
  close(v->root);
  if (tpl_rm_tree(v->dir) != 0) fprintf(stderr, "sandboxd: volumes: removing %s: %s\n", v->dir, strerror(errno));
  free(v);
}

int vol_delete(const char *id, char *msg, size_t msglen) {
  pthread_mutex_lock(&g.mu);
  volume *v = find_locked(id, NULL);
  int rc = 0;
  if (!v) rc = FAIL(404, "volume '%s' not found", id);
  else if (v->mounts > 0) rc = FAIL(409, "volume '%s' is mounted in %d running sandbox%s: kill them first", v->info.name, v->mounts, v->mounts == 1 ? "" : "es");
  else {
    v->deleted = true;
    g.n--;
    if ((rc = save_locked(msg, msglen)) != 0) { v->deleted = false; g.n++; }
  }
  pthread_mutex_unlock(&g.mu);
  if (!rc) vol_put(v);   /* the catalogue's reference */
  return rc;
}

void vol_mount_hold(volume *v) {
  pthread_mutex_lock(&g.mu);
  v->refs++;
  v->mounts++;
  pthread_mutex_unlock(&g.mu);
}

volume *vol_mount(const char *name, int *status, char *msg, size_t msglen) {
  pthread_mutex_lock(&g.mu);
  volume *v = find_locked(NULL, name);
  if (v) { v->refs++; v->mounts++; }
  pthread_mutex_unlock(&g.mu);
  if (!v) { *status = FAIL(400, "volume '%s' not found", name); return NULL; }
  return v;
}

void vol_unmount(volume *v) {
  if (!v) return;
  pthread_mutex_lock(&g.mu);
  v->mounts--;
  pthread_mutex_unlock(&g.mu);
  vol_put(v);
}

volume *vol_access(const char *id, const char *token, int *status, char *msg, size_t msglen) {
  pthread_mutex_lock(&g.mu);
  volume *v = find_locked(id, NULL);
  bool ok = v && token && auth_secret_eq(token, v->info.token);
  if (ok) v->refs++;
  pthread_mutex_unlock(&g.mu);
  if (!v) { *status = FAIL(404, "volume '%s' not found", id); return NULL; }
  if (!ok) { *status = FAIL(401, "%s", token ? "invalid volume token" : "missing volume token (Authorization: Bearer <token>)"); return NULL; }
  return v;
}

/* ---- content ---- */

/* A volume path, cleaned like Go's filepath.Clean of "/" + path: no ".", "..", "//"; ".." at the
 * root stays there. */
static int clean(const char *in, char *out, size_t outlen) {
  size_t n = 0;
  out[n++] = '/';
  const char *p = in;
  while (*p) {
    while (*p == '/') p++;
    if (!*p) break;
    size_t k = strcspn(p, "/");
    if (k == 1 && p[0] == '.') { p += k; continue; }
    if (k == 2 && p[0] == '.' && p[1] == '.') {
      while (n > 1 && out[n - 1] != '/') n--;    /* drop the last component */
      if (n > 1) n--;
      p += k;
      continue;
    }
    if (n > 1) { if (n + 1 >= outlen) return -1; out[n++] = '/'; }
    if (n + k >= outlen) return -1;
    memcpy(out + n, p, k);
    n += k;
    p += k;
  }
  out[n] = 0;
  return 0;
}

#define RESOLVE (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

static int vopen(const volume *v, const char *abs, int flags, mode_t mode) {
  struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .mode = mode, .resolve = RESOLVE};
  const char *rel = abs[1] ? abs + 1 : ".";
  long fd;
  do fd = syscall(SYS_openat2, v->root, rel, &how, sizeof how); while (fd < 0 && errno == EAGAIN);
  return fd < 0 ? -errno : (int)fd;
}

/* The parent directory of abs (an O_PATH fd) and abs's last component. */
static int vopen_parent(const volume *v, const char *abs, char *name, size_t namelen) {
  const char *slash = strrchr(abs, '/');
  if (!slash || !slash[1] || strlen(slash + 1) >= namelen) return -EINVAL;
  snprintf(name, namelen, "%s", slash + 1);
  char parent[PATH_MAX_LEN];
  snprintf(parent, sizeof parent, "%.*s", slash == abs ? 1 : (int)(slash - abs), abs);
  return vopen(v, parent, O_PATH | O_DIRECTORY, 0);
}

static json_t *rfc3339(struct timespec t) {
  struct tm tm;
  gmtime_r(&t.tv_sec, &tm);
  char buf[64];
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
           tm.tm_min, tm.tm_sec, t.tv_nsec);
  return json_string(buf);
}

static uint32_t inner(uint32_t host, uint32_t base) {
  return host >= base && host - base < g.map.count ? host - base : 65534;   /* unmapped: nobody */
}

/* VolumeEntryStat of the inode behind fd (O_PATH, not following), shown as abs. */
static json_t *entry_of(int fd, const char *abs) {
  struct stat st;
  if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return NULL;
  const char *slash = strrchr(abs, '/'), *name = slash && slash[1] ? slash + 1 : "/";
  const char *type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symlink" : "unknown";
  json_t *e = json_pack("{s:s,s:s,s:s,s:I,s:i,s:i,s:i,s:o,s:o,s:o}", "name", name, "path", abs, "type", type, "size",
                        (json_int_t)st.st_size, "mode", (int)(st.st_mode & 0777), "uid", (int)inner(st.st_uid, g.map.uid_base),
                        "gid", (int)inner(st.st_gid, g.map.gid_base), "atime", rfc3339(st.st_atim), "mtime", rfc3339(st.st_mtim),
                        "ctime", rfc3339(st.st_ctim));
  if (e && S_ISLNK(st.st_mode)) {
    char target[PATH_MAX_LEN];
    ssize_t n = readlinkat(fd, "", target, sizeof target - 1);
    if (n >= 0) {
      target[n] = 0;
      json_object_set_new(e, "target", json_string(target));
    }
  }
  return e;
}

static int errno_status(int e, const char *what, const char *path, char *msg, size_t msglen) {
  switch (e) {
    case ENOENT: return FAIL(404, "%s: path '%s' not found", what, path);
    case EEXIST: return FAIL(409, "%s: path '%s' already exists", what, path);
    case ENOTDIR: return FAIL(400, "%s: a component of path '%s' is not a directory", what, path);
    case EISDIR: return FAIL(400, "%s: path '%s' is a directory", what, path);
    case ENAMETOOLONG: return FAIL(400, "%s: path '%s' is too long", what, path);
    case ELOOP: return FAIL(400, "%s: path '%s' has too many levels of symbolic links", what, path);
    case EXDEV: return FAIL(400, "%s: path '%s' leads to another file system", what, path);
    case ENOSPC: case EDQUOT: return FAIL(507, "%s: no space left for '%s'", what, path);
    default: return FAIL(500, "%s: '%s': %s", what, path, strerror(e));
  }
}

#define CLEAN(in, abs)                                                                             \
  char abs[PATH_MAX_LEN];                                                                          \
  if (!(in)) return FAIL(400, "query parameter 'path' is required");                              \
  if (clean((in), abs, sizeof abs) != 0) return FAIL(400, "query parameter 'path' is too long (at most %d bytes)", PATH_MAX_LEN - 1)

static int check_attrs(const vol_attrs *a, char *msg, size_t msglen) {
  if (a->has_uid && a->uid >= g.map.count)
    return FAIL(400, "uid %u is not an id of the sandboxes (0 to %u)", a->uid, g.map.count - 1);
  if (a->has_gid && a->gid >= g.map.count)
    return FAIL(400, "gid %u is not an id of the sandboxes (0 to %u)", a->gid, g.map.count - 1);
  if (a->has_mode && a->mode > 07777) return FAIL(400, "mode %o has bits beyond 07777", a->mode);
  return 0;
}

/* What a created file or directory gets: the request's ids, else E2B's default (or root, when the
 * default is not mapped: a sandboxd without root has only that id). */
static uint32_t id_or_default(bool has, uint32_t v) { return has ? v : VOL_DEFAULT_ID < g.map.count ? VOL_DEFAULT_ID : 0; }

int vol_stat(volume *v, const char *path, json_t **out, char *msg, size_t msglen) {
  CLEAN(path, abs);
  int fd = vopen(v, abs, O_PATH | O_NOFOLLOW, 0);
  if (fd < 0) return errno_status(-fd, "stat", abs, msg, msglen);
  *out = entry_of(fd, abs);
  int e = errno;
  close(fd);
  return *out ? 0 : errno_status(e, "stat", abs, msg, msglen);
}

typedef struct { json_t *arr; size_t count; char *msg; size_t msglen; } listing;

static int list_into(listing *L, int dirfd, const char *abs, int depth) {
  int dup_fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) { if (dup_fd >= 0) close(dup_fd); return errno_status(errno, "list", abs, L->msg, L->msglen); }
  struct dirent *de;
  int rc = 0;
  while (!rc && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char child[PATH_MAX_LEN];
    if (snprintf(child, sizeof child, "%s%s%s", abs, abs[1] ? "/" : "", de->d_name) >= (int)sizeof child) continue;
    if (++L->count > VOL_MAX_LIST) {
      fail(L->msg, L->msglen, "list: more than %d entries under '%s': list a deeper path or with less depth", VOL_MAX_LIST, abs);
      rc = 400;
      break;
    }
    int fd = openat(dirfd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;   /* removed meanwhile */
    json_t *e = entry_of(fd, child);
    struct stat st;
    bool dir = fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    if (e) json_array_append_new(L->arr, e);
    if (dir && depth > 1) {
      int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) { rc = list_into(L, sub, child, depth - 1); close(sub); }
    }
    close(fd);
  }
  closedir(d);
  return rc;
}

int vol_list_dir(volume *v, const char *path, int depth, json_t **out, char *msg, size_t msglen) {
  CLEAN(path, abs);
  if (depth < 1) depth = 1;
  if (depth > VOL_MAX_DEPTH) return FAIL(400, "query parameter 'depth' must be between 1 and %d", VOL_MAX_DEPTH);
  int fd = vopen(v, abs, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0) return errno_status(-fd, "list", abs, msg, msglen);
  listing L = {json_array(), 0, msg, msglen};
  int rc = L.arr ? list_into(&L, fd, abs, depth) : FAIL(500, "out of memory");
  close(fd);
  if (rc) { json_decref(L.arr); return rc; }
  *out = L.arr;
  return 0;
}

/* Sets owner then mode (chown clears set-id bits) of the inode behind an O_PATH fd. */
static int set_attrs(int fd, int uid, int gid, int mode) {
  if ((uid >= 0 || gid >= 0) &&
      fchownat(fd, "", uid >= 0 ? (uid_t)(g.map.uid_base + (uint32_t)uid) : (uid_t)-1,
               gid >= 0 ? (gid_t)(g.map.gid_base + (uint32_t)gid) : (gid_t)-1, AT_EMPTY_PATH) != 0)
    return -errno;
  if (mode >= 0) {
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    if (chmod(self, (mode_t)mode) != 0) return -errno;
  }
  return 0;
}

/* mkdir -p of abs's missing levels (E2B's ensureDirs: mode 0777, the given owner). */
static int make_parents(volume *v, const char *abs, uint32_t uid, uint32_t gid) {
  char prefix[PATH_MAX_LEN];
  size_t len = strlen(abs);
  for (size_t i = 1; i <= len; i++) {
    if (abs[i] != '/' && abs[i] != 0) continue;
    snprintf(prefix, sizeof prefix, "%.*s", (int)i, abs);
    int fd = vopen(v, prefix, O_PATH, 0);
    if (fd >= 0) {
      struct stat st;
      bool dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
      close(fd);
      if (!dir) return -ENOTDIR;
      continue;
    }
    if (fd != -ENOENT) return fd;
    char name[256];
    int pfd = vopen_parent(v, prefix, name, sizeof name);
    if (pfd < 0) return pfd;
    if (mkdirat(pfd, name, VOL_DEFAULT_DIR_MODE) != 0 && errno != EEXIST) { int e = errno; close(pfd); return -e; }
    int nfd = openat(pfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(pfd);
    if (nfd < 0) return errno == ELOOP ? -ENOTDIR : -errno;   /* a symlink to nothing in the volume */
    int rc = set_attrs(nfd, (int)uid, (int)gid, VOL_DEFAULT_DIR_MODE);
    close(nfd);
    if (rc) return rc;
  }
  return 0;
}

int vol_make_dir(volume *v, const char *path, const vol_attrs *a, bool force, json_t **out, char *msg, size_t msglen) {
  CLEAN(path, abs);
  int rc = check_attrs(a, msg, msglen);
  if (rc) return rc;
  if (!abs[1]) return FAIL(409, "make dir: path '/' already exists (the volume's root)");
  uint32_t uid = id_or_default(a->has_uid, a->uid), gid = id_or_default(a->has_gid, a->gid);
  mode_t mode = a->has_mode ? a->mode : VOL_DEFAULT_DIR_MODE;
  char name[256];
  if (force) {
    char parent[PATH_MAX_LEN];
    snprintf(parent, sizeof parent, "%.*s", (int)(strrchr(abs, '/') - abs), abs);
    if (parent[0] && (rc = make_parents(v, parent, uid, gid)) != 0) return errno_status(-rc, "make dir", abs, msg, msglen);
  }
  int pfd = vopen_parent(v, abs, name, sizeof name);
  if (pfd < 0) return errno_status(-pfd, "make dir", abs, msg, msglen);
  bool made = mkdirat(pfd, name, mode) == 0;
  int e = errno;
  int fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  close(pfd);
  if (!made) {
    struct stat st;
    bool dir = fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    if (fd >= 0) close(fd);
    if (!force || e != EEXIST || !dir) return errno_status(e, "make dir", abs, msg, msglen);
    return vol_stat(v, abs, out, msg, msglen);   /* force: an existing directory is fine, as it is */
  }
  if (fd < 0) return errno_status(errno, "make dir", abs, msg, msglen);
  rc = set_attrs(fd, (int)uid, (int)gid, (int)mode);
  *out = rc ? NULL : entry_of(fd, abs);
  close(fd);
  if (rc) return errno_status(-rc, "make dir", abs, msg, msglen);
  return *out ? 0 : FAIL(500, "out of memory");
}

int vol_update(volume *v, const char *path, const vol_attrs *a, json_t **out, char *msg, size_t msglen) {
  CLEAN(path, abs);
  int rc = check_attrs(a, msg, msglen);
  if (rc) return rc;
  int fd = vopen(v, abs, O_PATH, 0);   /* like chmod and chown: the target of a symlink (inside the volume) */
  if (fd < 0) return errno_status(-fd, "update", abs, msg, msglen);
  rc = set_attrs(fd, a->has_uid ? (int)a->uid : -1, a->has_gid ? (int)a->gid : -1, a->has_mode ? (int)a->mode : -1);
  *out = rc ? NULL : entry_of(fd, abs);
  close(fd);
  if (rc) return errno_status(-rc, "update", abs, msg, msglen);
  return *out ? 0 : FAIL(500, "out of memory");
}

int vol_remove(volume *v, const char *path, char *msg, size_t msglen) {
  CLEAN(path, abs);
  if (!abs[1]) return FAIL(400, "remove: cannot delete the volume's root");
  char name[256];
  int pfd = vopen_parent(v, abs, name, sizeof name);
  if (pfd < 0) return errno_status(-pfd, "remove", abs, msg, msglen);
  struct stat st;
  int rc = 0;
  if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) rc = errno_status(errno, "remove", abs, msg, msglen);
  else if (!S_ISDIR(st.st_mode)) { if (unlinkat(pfd, name, 0) != 0) rc = errno_status(errno, "remove", abs, msg, msglen); }
  else {
    char p[128 + 256];
    snprintf(p, sizeof p, "/proc/self/fd/%d/%s", pfd, name);
    if (tpl_rm_tree(p) != 0) rc = errno_status(errno, "remove", abs, msg, msglen);   /* never crosses a mount */
  }
  close(pfd);
  return rc;
}

int vol_open_file(volume *v, const char *path, int *fd, uint64_t *size, char *msg, size_t msglen) {
  CLEAN(path, abs);
  int f = vopen(v, abs, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
  if (f < 0) return errno_status(-f, "read", abs, msg, msglen);
  struct stat st;
  int rc = 0;
  if (fstat(f, &st) != 0) rc = errno_status(errno, "read", abs, msg, msglen);
  else if (S_ISDIR(st.st_mode)) rc = errno_status(EISDIR, "read", abs, msg, msglen);
  else if (!S_ISREG(st.st_mode)) rc = FAIL(400, "read: path '%s' is not a regular file", abs);
  if (rc) { close(f); return rc; }
  fcntl(f, F_SETFL, 0);
  *fd = f;
  *size = (uint64_t)st.st_size;
  return 0;
}

struct vol_writer {
  volume *v;
  int dir, fd;
  int mode;                  /* set once the file is whole: until then it stays 0600 */
  char name[256], tmp[300], abs[PATH_MAX_LEN];
  bool force;
};

vol_writer *vol_write_begin(volume *v, const char *path, const vol_attrs *a, bool force, int *status, char *msg, size_t msglen) {
  char abs[PATH_MAX_LEN];
  if (!path) { *status = FAIL(400, "query parameter 'path' is required"); return NULL; }
  if (clean(path, abs, sizeof abs) != 0) { *status = FAIL(400, "query parameter 'path' is too long"); return NULL; }
  if ((*status = check_attrs(a, msg, msglen)) != 0) return NULL;
  if (!abs[1]) { *status = errno_status(EISDIR, "write", abs, msg, msglen); return NULL; }
  uint32_t uid = id_or_default(a->has_uid, a->uid), gid = id_or_default(a->has_gid, a->gid);
  if (force) {
    char parent[PATH_MAX_LEN];
    snprintf(parent, sizeof parent, "%.*s", (int)(strrchr(abs, '/') - abs), abs);
    int rc = parent[0] ? make_parents(v, parent, uid, gid) : 0;
    if (rc) { *status = errno_status(-rc, "write", abs, msg, msglen); return NULL; }
  }
  vol_writer *w = calloc(1, sizeof *w);
  if (!w) { *status = FAIL(500, "out of memory"); return NULL; }
  w->v = v;
  w->force = force;
  w->fd = -1;
  snprintf(w->abs, sizeof w->abs, "%s", abs);
  w->dir = vopen_parent(v, abs, w->name, sizeof w->name);
  if (w->dir < 0) { *status = errno_status(-w->dir, "write", abs, msg, msglen); free(w); return NULL; }
  int d = openat(w->dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* a real fd: for openat of the file */
  close(w->dir);
  w->dir = d;
  char rnd[13];
  if (d < 0 || ids_random(rnd, 12) != 0) { *status = FAIL(500, "write: %s", strerror(errno)); if (d >= 0) close(d); free(w); return NULL; }
  /* private until whole: the temporary name starts with ".", 0600, then the owner and mode asked */
  snprintf(w->tmp, sizeof w->tmp, ".%.200s.volume-upload-%s", w->name, rnd);
  w->fd = openat(d, w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  w->mode = a->has_mode ? (int)a->mode : VOL_DEFAULT_FILE_MODE;
  if (w->fd < 0 || set_attrs(w->fd, (int)uid, (int)gid, -1) != 0) {
    *status = errno_status(errno, "write", abs, msg, msglen);
    vol_write_abort(w);
    return NULL;
  }
  return w;
}

int vol_write(vol_writer *w, const void *data, size_t len, char *msg, size_t msglen) {
  const char *p = data;
  while (len > 0) {
    ssize_t k = write(w->fd, p, len);
    if (k < 0) { if (errno == EINTR) continue; return errno_status(errno, "write", w->abs, msg, msglen); }
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

void vol_write_abort(vol_writer *w) {
  if (!w) return;
  if (w->fd >= 0) { close(w->fd); (void)unlinkat(w->dir, w->tmp, 0); }
  if (w->dir >= 0) close(w->dir);
  free(w);
}

int vol_write_finish(vol_writer *w, json_t **out, char *msg, size_t msglen) {
  int rc = 0;
  /* a volume outlives sandboxd: on disk before the client hears it is written */
  if (set_attrs(w->fd, -1, -1, w->mode) != 0 || fsync(w->fd) != 0) rc = errno_status(errno, "write", w->abs, msg, msglen);
  else if (w->force) {
    struct stat st;
    if (fstatat(w->dir, w->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) rc = errno_status(EISDIR, "write", w->abs, msg, msglen);
    else if (renameat(w->dir, w->tmp, w->dir, w->name) != 0) rc = errno_status(errno, "write", w->abs, msg, msglen);
  } else if (syscall(SYS_renameat2, w->dir, w->tmp, w->dir, w->name, RENAME_NOREPLACE) != 0) {
    rc = errno == EEXIST ? FAIL(409, "write: path '%s' already exists (write with force to replace it)", w->abs)
                         : errno_status(errno, "write", w->abs, msg, msglen);
  }
  if (rc) { vol_write_abort(w); return rc; }
  int fd = openat(w->dir, w->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  *out = fd >= 0 ? entry_of(fd, w->abs) : NULL;
  if (fd >= 0) close(fd);
  close(w->fd);
  close(w->dir);
  free(w);
  return *out ? 0 : FAIL(500, "write: the file was written but cannot be read back");
}
