/* files.c — GET/POST /files and URL signing (see files.h). */
#include "files.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "b64.h"
#include "errors.h"
#include "paths.h"

/* ---------- signing (reference §6.4) ---------- */

typedef struct {
  const char *path, *op, *user, *signature;
  int64_t exp;
} sig_req;

static bool sig_matches(const char *token, void *cls) {
  sig_req *s = cls;
  char want[MB_SIGN_V1_LEN + 1];
  return mb_sign_v1(s->path, s->op, s->user, token, s->exp, want) == MB_OK && sd_const_eq(want, s->signature);
}

/* Fills s from the query; 0, or the status (401) with the reason in msg. */
static int sig_from_query(sd_request *r, sig_req *s, char *msg, size_t len) {
  s->op = !strcmp(sd_method(r), "POST") ? "write" : "read";
  s->path = sd_query(r, "path") ? sd_query(r, "path") : "";
  s->user = sd_query(r, "username") ? sd_query(r, "username") : "";
  s->signature = sd_query(r, "signature");
  s->exp = 0;
  const char *es = sd_query(r, "signature_expiration");
  if (es && *es) {
    char *end;
    errno = 0;
    long long v = strtoll(es, &end, 10);
    if (*end || errno) { snprintf(msg, len, "invalid signature expiration '%.100s'", es); return 401; }
    s->exp = v;
  }
  if (!s->signature || !*s->signature) { snprintf(msg, len, "missing signature query parameter"); return 401; }
  return 0;
}

reg_entry *files_lookup_signed(sd_request *r, int *status, char *msg, size_t len) {
  const char *sig = sd_query(r, "signature");
  if (!sig || !*sig) {
    /* No routing header and no signature: what the SDK makes of a sandbox without a token. */
    /* 401 like envd's missing signature (a secure sandbox's URL stripped of its signature looks
     * the same), with the likely cause spelled out. */
    *status = 401;
    snprintf(msg, len, "missing signature query parameter: signed URLs need a sandbox created with secure: true "
             "(this request has no E2b-Sandbox-Id header and no signature, so it names no sandbox)");
    return NULL;
  }
  sig_req s;
  if ((*status = sig_from_query(r, &s, msg, len))) return NULL;
  reg_entry *e = reg_find_by_token(sig_matches, &s);
  if (!e) { *status = 401; snprintf(msg, len, "invalid signature"); }
  return e;
}

reg_entry *files_find_signed(sd_request *r) {
  int status;
  char msg[256];
  reg_entry *e = files_lookup_signed(r, &status, msg, sizeof msg);
  if (!e) sd_reply_error(r, status, "%s", msg);
  return e;
}

/* envd's rule: a valid X-Access-Token, else a valid and unexpired signature. */
int files_auth(sd_request *r, reg_entry *e, char *msg, size_t len) {
  const char *tok = reg_token(e);
  if (!tok) return 0;
  const char *hdr = sd_header(r, "X-Access-Token");
  if (hdr && sd_const_eq(hdr, tok)) return 0;
  sig_req s;
  int st = sig_from_query(r, &s, msg, len);
  if (st) return st;
  if (!sig_matches(tok, &s)) { snprintf(msg, len, "invalid signature"); return 401; }
  if (s.exp && s.exp < (int64_t)time(NULL)) { snprintf(msg, len, "signature is already expired"); return 401; }
  return 0;
}

static int check_access(sd_request *r, reg_entry *e) {
  char msg[256];
  int st = files_auth(r, e, msg, sizeof msg);
  if (st) sd_reply_error(r, st, "%s", msg);
  return st ? -1 : 0;
}

/* ---------- download ---------- */

static bool accepts_gzip(const char *ae) {
  if (!ae) return false;
  for (const char *p = ae; *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *tok = p;
    while (*p && *p != ',' && *p != ';' && *p != ' ') p++;
    size_t n = (size_t)(p - tok);
    const char *params = p;
    while (*p && *p != ',') p++;
    if (n == 4 && strncasecmp(tok, "gzip", 4) == 0) {
      const char *q = strstr(params, "q=");
      if (q && q < p && strtod(q + 2, NULL) <= 0) return false;
      return true;
    }
  }
  return false;
}

static void stream_gzip(sd_request *r, int fd) {
  z_stream z = { 0 };
  if (deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    sd_reply_error(r, 500, "cannot start gzip");
    return;
  }
  sd_reply_header(r, "Content-Encoding", "gzip");
  sd_stream *s = sd_stream_open(r, "application/octet-stream");
  if (!s) { deflateEnd(&z); return; }
  static const size_t CH = 64 * 1024;
  unsigned char *in = malloc(CH), *out = malloc(CH);
  int flush = Z_NO_FLUSH;
  while (in && out && flush != Z_FINISH) {
    ssize_t n = read(fd, in, CH);
    if (n < 0) break;                     /* the client sees a truncated gzip stream */
    flush = n == 0 ? Z_FINISH : Z_NO_FLUSH;
    z.next_in = in; z.avail_in = (uInt)n;
    do {
      z.next_out = out; z.avail_out = (uInt)CH;
      deflate(&z, flush);
      size_t have = CH - z.avail_out;
      if (have && sd_stream_send(s, out, have) != 0) { flush = Z_FINISH; break; }
    } while (z.avail_out == 0);
  }
  free(in); free(out);
  deflateEnd(&z);
  sd_stream_end(s);
}

static void reply_foreign(sd_request *r, const char *abs, const char *fsname) {
  sd_reply_error(r, 403, "path '%s' is on the sandbox's %s file system: /files reads and writes only the "
                 "sandbox's own files", abs, fsname[0] ? fsname : "foreign");
}

static void download(sd_request *r, const fs_ctx *c) {
  const char *in = sd_query(r, "path") ? sd_query(r, "path") : "";
  char abs[PATHS_MAX];
  if (paths_resolve(c, in, abs, sizeof abs)) { sd_reply_error(r, 400, "invalid path '%.200s'", in); return; }
  char fsname[32];
  int fd = paths_open_file(c, abs, O_RDONLY, fsname, sizeof fsname);
  if (fd == -ENOENT || fd == -ENOTDIR) { sd_reply_error(r, 404, "path '%s' does not exist", abs); return; }
  if (fd == -PATHS_EFOREIGN) { reply_foreign(r, abs, fsname); return; }
  if (fd == -EISDIR) { sd_reply_error(r, 400, "path '%s' is a directory", abs); return; }
  if (fd == -PATHS_ENOTREG) { sd_reply_error(r, 400, "path '%s' is not a regular file", abs); return; }
  if (fd < 0) { sd_reply_error(r, fd == -ELOOP ? 400 : 500, "cannot open '%s': %s", abs, strerror(-fd)); return; }
  struct stat st;
  if (fstat(fd, &st) != 0) { close(fd); sd_reply_error(r, 500, "stat '%s': %s", abs, strerror(errno)); return; }
  sd_reply_header(r, "Vary", "Accept-Encoding");
  if (st.st_size == 0) {
    sd_reply_bytes(r, 200, "application/octet-stream", NULL, 0);   /* Content-Length: 0 → SDK returns '' */
  } else if (accepts_gzip(sd_header(r, "Accept-Encoding"))) {
    stream_gzip(r, fd);
  } else if (st.st_size <= (off_t)FILES_INLINE_MAX) {
    char *buf = malloc((size_t)st.st_size);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
      ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
      if (n <= 0) break;
      got += (size_t)n;
    }
    if (!buf) sd_reply_error(r, 500, "out of memory");
    else sd_reply_bytes(r, 200, "application/octet-stream", buf, got);
    free(buf);
  } else {
    sd_stream *s = sd_stream_open(r, "application/octet-stream");
    char *buf = malloc(64 * 1024);
    ssize_t n;
    while (s && buf && (n = read(fd, buf, 64 * 1024)) > 0)
      if (sd_stream_send(s, buf, (size_t)n) != 0) break;
    free(buf);
    if (s) sd_stream_end(s);
  }
  close(fd);
}

/* ---------- upload ---------- */

#define FILES_MAX_PARTS 1000
#define FILES_MAX_PARTS_STR "1000"
#define FILES_PART_SLOTS 2048

typedef struct { json_t *md; size_t total; char err[300]; } md_ctx;

static int collect_metadata(void *cls, const char *name, const char *value) {
  md_ctx *m = cls;
  if (strncasecmp(name, "X-Metadata-", 11) != 0) return 0;
  char key[256];
  const char *k = name + 11;
  size_t kl = strlen(k), vl = strlen(value);
  if (kl == 0 || kl > 246) { snprintf(m->err, sizeof m->err, "metadata key '%.64s' must be 1 to 246 bytes", k); return 1; }
  for (size_t i = 0; i < kl; i++) key[i] = (char)tolower((unsigned char)k[i]);
  key[kl] = '\0';
  for (size_t i = 0; i < vl; i++)
    if ((unsigned char)value[i] < 0x20 || (unsigned char)value[i] > 0x7e) {
      snprintf(m->err, sizeof m->err, "metadata value of '%s' must be printable ASCII", key);
      return 1;
    }
  for (size_t i = 0; i < kl; i++)
    if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] > 0x7e) {
      snprintf(m->err, sizeof m->err, "metadata key '%s' must be printable ASCII", key);
      return 1;
    }
  m->total += kl + vl;
  if (m->total > 4096) { snprintf(m->err, sizeof m->err, "metadata exceeds 4096 bytes"); return 1; }
  json_object_set_new(m->md, key, json_string(value));
  return 0;
}

typedef struct {
  sd_request *r;
  const fs_ctx *c;
  const char *qpath;
  json_t *md, *results;
  int fd;                            /* the private temporary file of the current part, or -1 */
  int dirfd;                         /* O_PATH of its directory */
  char tmp[256], base[256];          /* its name there, and the target's */
  bool in_part, gz;
  uint64_t part_bytes, written, limit;
  char part_name[PATHS_MAX], cur_fn[PATHS_MAX];
  int status;
  char msg[PATHS_MAX + 256];
  uint16_t seen[FILES_PART_SLOTS];   /* index + 1 into results, by path hash */
} up_ctx;

static int fail(up_ctx *u, int status, const char *fmt, const char *a) {
  u->status = status;
  snprintf(u->msg, sizeof u->msg, fmt, a);
  return 1;
}

static int fail_fd(up_ctx *u, int status, const char *fmt, const char *a) {
  fail(u, status, fmt, a);
  return -1;
}

/* Drops the current part's temporary file: the target was never touched. */
static void abort_file(up_ctx *u) {
  if (u->fd < 0) return;
  close(u->fd);
  u->fd = -1;
  paths_cred cr;
  paths_cred_enter(u->c, &cr);
  unlinkat(u->dirfd, u->tmp, 0);
  paths_cred_leave(&cr);
  close(u->dirfd);
  u->dirfd = -1;
}

/* The part arrived whole: metadata on the temporary file, then it replaces the target at once. */
static int finish_file(up_ctx *u) {
  if (u->fd < 0) return 0;
  int mr = paths_set_metadata(u->fd, u->md);
  if (mr) { abort_file(u); return fail(u, mr == -ENOSPC ? 507 : 500, "cannot set metadata on '%s'", u->part_name); }
  paths_cred cr;
  paths_cred_enter(u->c, &cr);
  int rc = renameat(u->dirfd, u->tmp, u->dirfd, u->base) != 0 ? errno : 0;
  paths_cred_leave(&cr);
  if (rc) { abort_file(u); return fail(u, rc == ENOSPC || rc == EDQUOT ? 507 : 500, "cannot write '%s'", u->part_name); }
  /* Watchers see the target created (moved in) and then written, as with envd's in-place write:
   * a same-size truncate through the renamed file raises IN_MODIFY under the target's name. */
  struct stat st;
  if (fstat(u->fd, &st) == 0 && ftruncate(u->fd, st.st_size) != 0) { /* only a notification is lost */ }
  close(u->fd);
  close(u->dirfd);
  u->fd = u->dirfd = -1;
  return 0;
}

/* The reasons today's messages give for a target that cannot be written; -1. */
static int open_fail(up_ctx *u, const char *abs, int err, const char *fsname) {
  if (err == -EISDIR) return fail_fd(u, 400, "path '%s' is a directory", abs);
  if (err == -PATHS_ENOTREG) return fail_fd(u, 400, "path '%s' is not a regular file", abs);
  if (err == -PATHS_EFOREIGN) {
    u->status = 403;
    snprintf(u->msg, sizeof u->msg, "path '%.4000s' is on the sandbox's %s file system: /files reads and writes "
             "only the sandbox's own files", abs, fsname[0] ? fsname : "foreign");
    return -1;
  }
  if (err == -ENOSPC || err == -EDQUOT) return fail_fd(u, 507, "not enough disk space for '%s'", abs);
  char m[PATHS_MAX + 64];
  snprintf(m, sizeof m, "%.4000s: %s", abs, strerror(-err));
  return fail_fd(u, 500, "cannot open for writing: %s", m);
}

/* Parents made (0755, the user's) as before; then a private temporary file (O_EXCL, 0644 or the
 * target's mode, the user's) in the target's directory (a symlinked target: its real path's).
 * 0, or -1 after fail(). */
static int open_target(up_ctx *u, const char *abs, const char *slash) {
  if (slash != abs) {
    char parent[PATHS_MAX];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - abs), abs);
    bool created;
    int rc = paths_mkdir_p(u->c, parent, &created);
    if (rc == -ENOTDIR) return fail_fd(u, 400, "a parent of '%s' is not a directory", abs);
    if (rc == -PATHS_EFOREIGN)
      return fail_fd(u, 403, "the parent of '%s' is not on the sandbox's own file systems (proc, sysfs, devpts, "
                     "cgroup and similar are refused)", abs);
    if (rc) return fail_fd(u, rc == -ENOSPC ? 507 : 500, "cannot create the parents of '%s'", abs);
  }
  char real[PATHS_MAX], fsname[32] = "";
  snprintf(real, sizeof real, "%s", abs);
  mode_t mode = 0644;
  int p = paths_open(u->c, abs, O_PATH, 0, 0);
  if (p >= 0) {                                        /* an existing target: checked like today */
    struct stat st;
    int rc = fstat(p, &st) != 0 ? -errno : paths_fs_check(p);
    if (rc == -PATHS_EFOREIGN) snprintf(fsname, sizeof fsname, "%s", paths_fs_name(p));
    if (!rc && S_ISDIR(st.st_mode)) rc = -EISDIR;
    else if (!rc && !S_ISREG(st.st_mode)) rc = -PATHS_ENOTREG;
    close(p);
    if (rc) return open_fail(u, abs, rc, fsname);
    mode = st.st_mode & 0777;
    if (paths_realpath(u->c, abs, real, sizeof real) != 0) snprintf(real, sizeof real, "%s", abs);
  } else if (p != -ENOENT) {
    return open_fail(u, abs, p, fsname);
  }
  int dfd = paths_open_parent(u->c, real, u->base, sizeof u->base);
  if (dfd < 0) return open_fail(u, abs, dfd, fsname);
  int rc = paths_fs_check(dfd);
  if (rc) {
    if (rc == -PATHS_EFOREIGN) snprintf(fsname, sizeof fsname, "%s", paths_fs_name(dfd));
    close(dfd);
    return open_fail(u, abs, rc, fsname);
  }
  paths_cred cr;
  paths_cred_enter(u->c, &cr);
  int fd = -EEXIST;
  for (int i = 0; i < 16 && fd == -EEXIST; i++) {
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) rnd = (uint64_t)time(NULL) * 2654435761u + (uint64_t)i;
    snprintf(u->tmp, sizeof u->tmp, ".%.200s.upload-%016llx", u->base, (unsigned long long)rnd);
    fd = openat(dfd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) fd = -errno;
  }
  paths_cred_leave(&cr);
  if (fd < 0) { close(dfd); return open_fail(u, abs, fd, fsname); }
  u->fd = fd;
  u->dirfd = dfd;
  if (fchown(fd, u->c->host_uid, u->c->host_gid) != 0 || fchmod(fd, mode) != 0) {
    abort_file(u);
    return fail_fd(u, 500, "cannot chown '%s'", abs);
  }
  return 0;
}

static int begin_file(up_ctx *u, const char *target) {
  char abs[PATHS_MAX];
  if (!target || !*target) return fail(u, 400, "%s", "a file part has no filename and the request has no 'path' query parameter");
  if (paths_resolve(u->c, target, abs, sizeof abs)) return fail(u, 400, "invalid path '%.200s'", target);
  size_t n = json_array_size(u->results);
  if (n >= FILES_MAX_PARTS) return fail(u, 400, "more than %s files in one upload", FILES_MAX_PARTS_STR);
  /* Duplicate paths: an open-addressing set of the results' indexes (twice the part limit). */
  uint64_t h = 1469598103934665603ull;
  for (const char *q = abs; *q; q++) h = (h ^ (unsigned char)*q) * 1099511628211ull;
  size_t slot = (size_t)(h % FILES_PART_SLOTS);
  for (; u->seen[slot]; slot = (slot + 1) % FILES_PART_SLOTS)
    if (!strcmp(json_string_value(json_object_get(json_array_get(u->results, u->seen[slot] - 1), "path")), abs))
      return fail(u, 400, "path '%s' is given more than once in one upload", abs);
  const char *slash = strrchr(abs, '/');
  if (!slash[1]) return fail(u, 400, "path '%s' is a directory", abs);
  json_t *res = json_pack("{s:s,s:s,s:s}", "path", abs, "name", slash + 1, "type", "file");
  if (!res) return fail(u, 400, "%s", "the path is not valid UTF-8");   /* checked before anything is created */
  if (open_target(u, abs, slash) < 0) { json_decref(res); return 1; }
  snprintf(u->part_name, sizeof u->part_name, "%s", abs);
  if (json_object_size(u->md)) json_object_set(res, "metadata", u->md);
  json_array_append_new(u->results, res);
  u->seen[slot] = (uint16_t)json_array_size(u->results);
  return 0;
}

static int write_all(up_ctx *u, const char *data, size_t len) {
  if (len > u->limit - u->written) {                   /* counted in bytes written: bounds gzip bombs too */
    if (u->gz) {
      u->status = 413;
      snprintf(u->msg, sizeof u->msg, "gzip body expands beyond the limit of %llu bytes", (unsigned long long)u->limit);
    } else {
      u->status = 413;
      snprintf(u->msg, sizeof u->msg, "request body exceeds the limit of %llu bytes", (unsigned long long)u->limit);
    }
    return 1;
  }
  u->written += len;
  while (len) {
    ssize_t n = write(u->fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(u, errno == ENOSPC || errno == EDQUOT ? 507 : 500,
                  errno == ENOSPC || errno == EDQUOT ? "not enough disk space for '%s'" : "cannot write '%s'", u->part_name);
    }
    data += n; len -= (size_t)n;
  }
  return 0;
}

static int on_part(void *cls, const char *name, const char *filename, const char *data, uint64_t off, size_t size) {
  up_ctx *u = cls;
  if (strcmp(name, "file") != 0) return 0;          /* other form fields are ignored, like envd */
  const char *fn = filename ? filename : "";
  /* off == 0 starts a part, unless MHD is just continuing one that has had no bytes yet. */
  bool continuing = u->in_part && u->part_bytes == 0 && strcmp(fn, u->cur_fn) == 0;
  bool new_part = !u->in_part || (off == 0 && !continuing);
  if (new_part) {
    if (finish_file(u)) return 1;                   /* the previous part ended with its boundary */
    const char *target = u->qpath && *u->qpath ? u->qpath : filename;
    if (begin_file(u, target)) return 1;
    u->in_part = true;
    u->part_bytes = 0;
    snprintf(u->cur_fn, sizeof u->cur_fn, "%s", fn);
  }
  u->part_bytes += size;
  return size ? write_all(u, data, size) : 0;
}

/* The request body as it arrives, gzip-decoded when asked (incrementally, 64 KiB at a time). */
typedef struct {
  sd_request *r;
  bool gz, in_eof, z_end;
  z_stream z;
  unsigned char in[64 * 1024];
} body_src;

/* Decoded bytes (> 0), 0 at the end, -1 the client went away / the body passed the limit,
 * -2 not valid gzip. */
static ssize_t src_read(body_src *b, void *out, size_t max) {
  if (!b->gz) return sd_body_read(b->r, out, max);
  for (;;) {
    if (b->z_end) return 0;                        /* bytes after the gzip stream are ignored, as before */
    if (b->z.avail_in == 0 && !b->in_eof) {
      ssize_t n = sd_body_read(b->r, b->in, sizeof b->in);
      if (n < 0) return -1;
      if (n == 0) b->in_eof = true;
      b->z.next_in = b->in;
      b->z.avail_in = (uInt)n;
    }
    b->z.next_out = out;
    b->z.avail_out = (uInt)max;
    int rc = inflate(&b->z, Z_NO_FLUSH);
    size_t got = max - b->z.avail_out;
    if (rc == Z_STREAM_END) b->z_end = true;
    else if (rc != Z_OK && rc != Z_BUF_ERROR) return -2;
    if (got) return (ssize_t)got;
    if (b->z_end) return 0;
    if (b->in_eof && b->z.avail_in == 0) return -2;   /* input ended early */
  }
}

static void upload(sd_request *r, const fs_ctx *c) {
  md_ctx m = { .md = json_object() };
  if (sd_header_each(r, collect_metadata, &m)) { sd_reply_error(r, 400, "%s", m.err); json_decref(m.md); return; }
  body_src *b = calloc(1, sizeof *b);
  char *buf = malloc(64 * 1024);
  if (!b || !buf) { free(b); free(buf); json_decref(m.md); sd_reply_error(r, 500, "out of memory"); return; }
  b->r = r;
  const char *ce = sd_header(r, "Content-Encoding");
  if (ce && *ce && strcasecmp(ce, "identity") != 0) {
    if (strcasecmp(ce, "gzip") != 0) {
      sd_reply_error(r, 400, "unsupported Content-Encoding '%s' (gzip or identity)", ce);
      json_decref(m.md); free(b); free(buf);
      return;
    }
    if (inflateInit2(&b->z, 16 + MAX_WBITS) != Z_OK) {
      sd_reply_error(r, 500, "cannot start gzip");
      json_decref(m.md); free(b); free(buf);
      return;
    }
    b->gz = true;
  }
  up_ctx u = { .r = r, .c = c, .qpath = sd_query(r, "path"), .md = m.md, .results = json_array(), .fd = -1,
               .dirfd = -1, .gz = b->gz, .limit = sd_upload_limit() };
  const char *ct = sd_header(r, "Content-Type");
  int rc;
  ssize_t n = 0;
  if (ct && strncasecmp(ct, "multipart/form-data", 19) == 0) {
    sd_mp *mp = sd_multipart_begin(r, on_part, &u);
    rc = mp ? 0 : -1;
    while (mp && rc == 0 && (n = src_read(b, buf, 64 * 1024)) > 0) rc = sd_multipart_feed(mp, buf, (size_t)n);
    if (mp) { int fin = sd_multipart_end(mp); if (rc == 0 && n == 0) rc = fin; }
    if (rc == 0 && n < 0) rc = 1;
    if (rc == 0 && finish_file(&u)) rc = 1;
    if (rc == -1) { u.status = 400; snprintf(u.msg, sizeof u.msg, "malformed multipart/form-data body"); }
    if (rc == 0 && json_array_size(u.results) == 0) {
      u.status = 400; snprintf(u.msg, sizeof u.msg, "the multipart body has no part named 'file'");
      rc = 1;
    }
  } else if (ct && strncasecmp(ct, "application/octet-stream", 24) == 0) {
    if (!u.qpath || !*u.qpath) { rc = fail(&u, 400, "%s", "the 'path' query parameter is required for application/octet-stream"); }
    else {
      rc = begin_file(&u, u.qpath);
      while (!rc && (n = src_read(b, buf, 64 * 1024)) > 0) rc = write_all(&u, buf, (size_t)n);
      if (!rc && n < 0) rc = 1;
      if (!rc) rc = finish_file(&u);
    }
  } else {
    rc = fail(&u, 400, "unsupported Content-Type '%s' (multipart/form-data or application/octet-stream)", ct ? ct : "");
  }
  if (n == -2 && (u.status == 0 || rc == 1)) { u.status = 400; snprintf(u.msg, sizeof u.msg, "request body is not valid gzip"); }
  else if (n == -1) { u.status = 400; snprintf(u.msg, sizeof u.msg, "the request body ended early"); }   /* nobody reads it */
  abort_file(&u);                                    /* nothing half-written stays behind */
  if (rc) sd_reply_error(r, u.status ? u.status : 500, "%s", u.msg[0] ? u.msg : "upload failed");
  else sd_reply_json(r, 200, json_incref(u.results));
  if (b->gz) inflateEnd(&b->z);
  free(b); free(buf);
  json_decref(u.results);
  json_decref(m.md);
}

void files_handle(sd_request *r, reg_entry *e) {
  const char *m = sd_method(r);
  if (strcmp(m, "GET") != 0 && strcmp(m, "POST") != 0) { sd_reply_error(r, 405, "method %s is not allowed on /files", m); return; }
  if (check_access(r, e)) return;
  const char *user = sd_query(r, "username");
  if (!user || !*user) user = "user";
  fs_ctx c;
  if (fs_ctx_init(&c, reg_sbx(e), user) != 0) {
    sd_reply_error(r, 401, "error looking up user '%s': unknown user", user);
    return;
  }
  if (!strcmp(m, "GET")) download(r, &c);
  else upload(r, &c);
}
