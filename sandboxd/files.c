/* files.c — GET/POST /files (see files.h). */
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

#include "paths.h"
#include "sandbox.h"
#include "upload.h"

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
    sd_stream_fd(r, "application/octet-stream", fd);
  }
  close(fd);
}

/* ---------- upload ---------- */


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

static void upload_request(sd_request *r, const fs_ctx *c) {
  md_ctx m = { .md = json_object() };
  if (!m.md) { sd_reply_error(r, 500, "out of memory"); return; }
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
  const char *qpath = sd_query(r, "path");
  upload *u = upload_new(c, qpath, m.md, sd_upload_limit(), b->gz);
  json_decref(m.md);
  if (!u) {
    sd_reply_error(r, 500, "out of memory");
    if (b->gz) inflateEnd(&b->z);
    free(b); free(buf);
    return;
  }
  const char *ct = sd_header(r, "Content-Type");
  int rc;
  ssize_t n = 0;
  if (ct && strncasecmp(ct, "multipart/form-data", 19) == 0) {
    sd_mp *mp = sd_multipart_begin(r, upload_part, u);
    rc = mp ? 0 : -1;
    while (mp && rc == 0 && (n = src_read(b, buf, 64 * 1024)) > 0) rc = sd_multipart_feed(mp, buf, (size_t)n);
    if (mp) { int fin = sd_multipart_end(mp); if (rc == 0 && n == 0) rc = fin; }
    if (rc == 0 && n < 0) rc = 1;
    if (rc == 0 && upload_finish(u)) rc = 1;
    if (rc == -1) rc = upload_fail(u, 400, "malformed multipart/form-data body");
    if (rc == 0 && upload_files(u) == 0) rc = upload_fail(u, 400, "the multipart body has no part named 'file'");
  } else if (ct && strncasecmp(ct, "application/octet-stream", 24) == 0) {
    if (!qpath || !*qpath) rc = upload_fail(u, 400, "the 'path' query parameter is required for application/octet-stream");
    else {
      rc = upload_begin_file(u, qpath);
      while (!rc && (n = src_read(b, buf, 64 * 1024)) > 0) rc = upload_write(u, buf, (size_t)n);
      if (!rc && n < 0) rc = 1;
      if (!rc) rc = upload_finish(u);
    }
  } else {
    char msg[400];
    snprintf(msg, sizeof msg, "unsupported Content-Type '%.200s' (multipart/form-data or application/octet-stream)", ct ? ct : "");
    rc = upload_fail(u, 400, msg);
  }
  if (n == -2 && (upload_status(u) == 0 || rc == 1)) upload_fail(u, 400, "request body is not valid gzip");
  else if (n == -1) upload_fail(u, 400, "the request body ended early");   /* nobody reads it */
  upload_abort(u);                                   /* nothing half-written stays behind */
  if (rc) sd_reply_error(r, upload_status(u) ? upload_status(u) : 500, "%s", upload_message(u)[0] ? upload_message(u) : "upload failed");
  else sd_reply_json(r, 200, json_incref(upload_results(u)));
  upload_free(u);
  if (b->gz) inflateEnd(&b->z);
  free(b); free(buf);
}

void files_handle(sd_request *r, const rt_decision *d) {
  const char *m = sd_method(r);
  if (strcmp(m, "GET") != 0 && strcmp(m, "POST") != 0) { sd_reply_error(r, 405, "method %s is not allowed on /files", m); return; }
  fs_ctx c;
  if (sbx_fs_ctx(reg_sbx(d->entry), d->user, &c) != 0) {   /* the router checked it */
    sd_reply_error(r, 401, "error looking up user '%s': unknown user", d->user);
    return;
  }
  if (!strcmp(m, "GET")) download(r, &c);
  else upload_request(r, &c);
}
