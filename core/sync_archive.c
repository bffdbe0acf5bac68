/* sync_archive.c — packs (a scan as one pax tar stream, pulled in pieces) and unpacks (an
 * untrusted tar file staged under names of our own), both with libarchive (sync.h). */
#include "sync.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>

#define PACK_CHUNK (64 * 1024)     /* file bytes read per step */
#define PACK_OUT_MAX (1024 * 1024) /* archive bytes held before the reader drains them */
#define UNPACK_CHUNK (64 * 1024)

/* ---- packs ---- */

enum { PACK_ENTRIES, PACK_DONE, PACK_FAILED };

struct mb_pack {
  const mb_sync_root *r;
  mb_sync_scan *s;
  struct archive *a;
  struct archive_entry *ae;
  char *out;
  size_t olen, ooff;
  size_t idx;       /* next entry */
  int fd;           /* file being archived, -1 */
  int pfd;          /* the directory of the last file opened (files of a directory come together) */
  char pdir[MB_SYNC_PATH_MAX + 1];
  struct mb_sync_entry *cur;
  uint64_t left;    /* bytes of it still to archive */
  struct stat st0;
  EVP_MD_CTX *md;
  int state;
  struct mb_error err;
  struct mb_pack_progress pr;
  char buf[PACK_CHUNK];
};

static la_ssize_t pack_write(struct archive *a, void *ud, const void *p, size_t n) {
  mb_pack *k = ud;
  if (k->ooff == k->olen) k->ooff = k->olen = 0;
  if (k->olen + n > PACK_OUT_MAX) {
    archive_set_error(a, ENOBUFS, "archive output buffer full");
    return -1;
  }
  memcpy(k->out + k->olen, p, n);
  k->olen += n;
  k->pr.bytes_out += n;
  return (la_ssize_t)n;
}

static int pack_fail(mb_pack *k, int code, const char *path, const char *what) {
  k->state = PACK_FAILED;
  const char *why = k->a ? archive_error_string(k->a) : NULL;
  return mb_error_fail(&k->err, code, path, "%s '%s'%s%s", what, path, why ? ": " : "", why ? why : "");
}

mb_pack *mb_pack_new(const mb_sync_root *r, mb_sync_scan *s, struct mb_error *e) {
  mb_pack *k = calloc(1, sizeof *k);
  if (!k) return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, "", "out of memory"), NULL);
  k->r = r;
  k->s = s;
  k->fd = -1;
  k->pfd = -1;
  k->out = malloc(PACK_OUT_MAX);
  k->a = archive_write_new();
  k->ae = archive_entry_new();
  k->md = EVP_MD_CTX_new();
  if (!k->out || !k->a || !k->ae || !k->md) {
    mb_pack_free(k);
    return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, "", "out of memory"), NULL);
  }
  /* pax, not restricted pax: every entry carries its nanosecond mtime (restricted pax would cut
   * it to the second; a build tool comparing times could then miss a change). */
  if (archive_write_set_format_pax(k->a) != ARCHIVE_OK || archive_write_add_filter_none(k->a) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(k->a, 0) != ARCHIVE_OK ||   /* unblocked: no copy into 10 KiB records */
      archive_write_open2(k->a, k, NULL, pack_write, NULL, NULL) != ARCHIVE_OK) {
    mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, "", "cannot start the archive: %s", archive_error_string(k->a));
    mb_pack_free(k);
    return NULL;
  }
  return k;
}

static int header(mb_pack *k, struct mb_sync_entry *en) {
  struct archive_entry *ae = k->ae;
  archive_entry_clear(ae);
  archive_entry_copy_pathname(ae, en->plen ? en->path : ".");
  archive_entry_set_perm(ae, en->mode & 0777);
  archive_entry_set_mtime(ae, (time_t)en->mtime_s, en->mtime_ns);
  archive_entry_set_filetype(ae, en->type == MB_SYNC_FILE ? AE_IFREG : en->type == MB_SYNC_DIR ? AE_IFDIR : AE_IFLNK);
  if (en->type == MB_SYNC_LINK) archive_entry_copy_symlink(ae, en->link);
  archive_entry_set_size(ae, en->type == MB_SYNC_FILE ? (la_int64_t)en->size : 0);
  int rc = archive_write_header(k->a, ae);
  /* WARN: a name that does not convert to UTF-8 is written as raw bytes (hdrcharset=BINARY). */
  if (rc < ARCHIVE_WARN) return pack_fail(k, MB_CODE_SYNC_IO_ERROR, en->path, "cannot archive");
  return 0;
}

static int finish_file(mb_pack *k) {
  struct mb_sync_entry *en = k->cur;
  struct stat st;
  if (fstat(k->fd, &st) < 0 || st.st_size != k->st0.st_size || st.st_mtim.tv_sec != k->st0.st_mtim.tv_sec ||
      st.st_mtim.tv_nsec != k->st0.st_mtim.tv_nsec)
    return pack_fail(k, MB_CODE_SYNC_CHANGED, en->path, "changed while it was archived:");
  unsigned int dl = 0;
  if (EVP_DigestFinal_ex(k->md, en->sha256, &dl) != 1 || dl != 32)
    return pack_fail(k, MB_CODE_SYNC_IO_ERROR, en->path, "SHA-256 failed for");
  en->hashed = 1;
  close(k->fd);
  k->fd = -1;
  k->cur = NULL;
  k->pr.files_done++;
  if (archive_write_finish_entry(k->a) < ARCHIVE_WARN) return pack_fail(k, MB_CODE_SYNC_IO_ERROR, en->path, "cannot archive");
  return 0;
}

static int open_file(mb_pack *k, struct mb_sync_entry *en) {
  const char *slash = strrchr(en->path, '/'), *leaf = slash ? slash + 1 : en->path;
  size_t dl = slash ? (size_t)(slash - en->path) : 0;
  int pfd = -1;
  if (k->pfd >= 0 && strlen(k->pdir) == dl && memcmp(k->pdir, en->path, dl) == 0) {
    pfd = k->pfd;
  } else {
    if (k->pfd >= 0) close(k->pfd);
    k->pfd = -1;
    pfd = mb_sync_open_parent(k->r, en->path, 0, &leaf, &k->err);
    if (pfd >= 0) {
      k->pfd = pfd;
      memcpy(k->pdir, en->path, dl);
      k->pdir[dl] = 0;
    }
  }
  if (pfd < 0) {
    if (k->err.name == MB_CODE_SYNC_UNSAFE_PATH || k->err.name == MB_CODE_SYNC_NOT_FOUND ||
        k->err.name == MB_CODE_SYNC_NOT_DIRECTORY)
      mb_error_fail(&k->err, MB_CODE_SYNC_CHANGED, en->path, "'%s' changed while the tree was archived (%s)", en->path,
                   k->err.message);
    k->state = PACK_FAILED;
    return -1;
  }
  int fd = openat(pfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  int err = errno;
  if (fd < 0) {
    k->state = PACK_FAILED;
    if (err == ENOENT || err == ELOOP)
      return mb_error_fail(&k->err, MB_CODE_SYNC_CHANGED, en->path, "'%s' changed while the tree was archived", en->path);
    return mb_error_fail(&k->err, err == EACCES || err == EPERM ? MB_CODE_SYNC_PERMISSION_DENIED : MB_CODE_SYNC_IO_ERROR, en->path,
                        "cannot open '%s': %s", en->path, strerror(err));
  }
  if (fstat(fd, &k->st0) < 0 || !S_ISREG(k->st0.st_mode) || (uint64_t)k->st0.st_dev != en->dev ||
      (uint64_t)k->st0.st_ino != en->ino || (uint64_t)k->st0.st_size != en->size) {
    close(fd);
    k->state = PACK_FAILED;
    return mb_error_fail(&k->err, MB_CODE_SYNC_CHANGED, en->path, "'%s' changed while the tree was archived", en->path);
  }
  if (EVP_DigestInit_ex(k->md, EVP_sha256(), NULL) != 1) {
    close(fd);
    return pack_fail(k, MB_CODE_SYNC_IO_ERROR, en->path, "SHA-256 failed for");
  }
  k->fd = fd;
  k->cur = en;
  k->left = en->size;
  return 0;
}

/* One unit of work: a piece of the current file, or the next entry's header, or the end. */
static int pack_step(mb_pack *k) {
  if (k->fd >= 0) {
    if (k->left == 0) return finish_file(k);
    size_t want = k->left < PACK_CHUNK ? (size_t)k->left : PACK_CHUNK;
    ssize_t n = read(k->fd, k->buf, want);
    if (n < 0 && errno == EINTR) return 0;
    if (n < 0) return pack_fail(k, MB_CODE_SYNC_IO_ERROR, k->cur->path, "cannot read");
    if (n == 0) return pack_fail(k, MB_CODE_SYNC_CHANGED, k->cur->path, "shrank while it was archived:");
    EVP_DigestUpdate(k->md, k->buf, (size_t)n);
    la_ssize_t w = archive_write_data(k->a, k->buf, (size_t)n);
    if (w != n) return pack_fail(k, MB_CODE_SYNC_IO_ERROR, k->cur->path, "cannot archive");
    k->left -= (uint64_t)n;
    k->pr.bytes_in += (uint64_t)n;
    return 0;
  }
  size_t count = mb_sync_scan_count(k->s);
  if (k->idx < count) {
    struct mb_sync_entry *en = mb_sync_scan_entry(k->s, k->idx++);
    if (en->excluded) return 0;
    if (en->type == MB_SYNC_FILE && open_file(k, en) < 0) return -1;
    if (header(k, en) < 0) return -1;
    k->pr.entries_done++;
    if (en->type != MB_SYNC_FILE && archive_write_finish_entry(k->a) < ARCHIVE_WARN)
      return pack_fail(k, MB_CODE_SYNC_IO_ERROR, en->path, "cannot archive");
    return 0;
  }
  if (archive_write_close(k->a) != ARCHIVE_OK) return pack_fail(k, MB_CODE_SYNC_IO_ERROR, "", "cannot finish the archive");
  k->state = PACK_DONE;
  return 0;
}

/* Fills buf as far as it goes (small pieces would make as many small chunks on the wire). */
ssize_t mb_pack_read(mb_pack *k, char *buf, size_t cap) {
  size_t got = 0;
  for (;;) {
    size_t n = k->olen - k->ooff;
    if (n > cap - got) n = cap - got;
    memcpy(buf + got, k->out + k->ooff, n);
    k->ooff += n;
    got += n;
    if (got == cap || k->state != PACK_ENTRIES) break;
    if (pack_step(k) < 0) break;
  }
  if (k->state == PACK_FAILED) return -1;
  if (got < cap && k->olen - k->ooff > 0) { /* the end came with bytes still buffered */
    size_t n = k->olen - k->ooff;
    if (n > cap - got) n = cap - got;
    memcpy(buf + got, k->out + k->ooff, n);
    k->ooff += n;
    got += n;
  }
  return (ssize_t)got;
}

const struct mb_error *mb_pack_error(const mb_pack *k) { return k->state == PACK_FAILED ? &k->err : NULL; }
void mb_pack_progress(const mb_pack *k, struct mb_pack_progress *out) { *out = k->pr; }

void mb_pack_free(mb_pack *k) {
  if (!k) return;
  if (k->fd >= 0) close(k->fd);
  if (k->pfd >= 0) close(k->pfd);
  if (k->a) archive_write_free(k->a); /* closes it first when still open */
  if (k->ae) archive_entry_free(k->ae);
  EVP_MD_CTX_free(k->md);
  free(k->out);
  free(k);
}

/* ---- unpacks ---- */

struct mb_unpack {
  const mb_sync_root *r;
  struct archive *a;
  int sfd;            /* the staging directory */
  struct mb_unpack_item *v;
  size_t n, cap;
  uint64_t max_entries, max_bytes, bytes;
  int fd;             /* file being staged, -1 */
  EVP_MD_CTX *md;
  int done, failed;
  char prefix[16];
  char buf[UNPACK_CHUNK];
};

mb_unpack *mb_unpack_new(const mb_sync_root *r, const char *archive, const char *stage, const char *prefix,
                         uint64_t max_entries, uint64_t max_bytes, struct mb_error *e) {
  if (!prefix) prefix = "";
  if (strlen(prefix) >= sizeof ((struct mb_unpack *)0)->prefix || strchr(prefix, '/'))
    return (mb_error_fail(e, MB_CODE_SYNC_INVALID, prefix, "a staging prefix is at most 15 bytes, without '/'"), NULL);
  mb_unpack *u = calloc(1, sizeof *u);
  if (!u) return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, "", "out of memory"), NULL);
  memcpy(u->prefix, prefix, strlen(prefix) + 1);
  u->r = r;
  u->fd = -1;
  u->sfd = -1;
  u->max_entries = max_entries;
  u->max_bytes = max_bytes;
  const char *leaf;
  int pfd = mb_sync_open_parent(r, stage, 0, &leaf, e);
  if (pfd < 0) {
    mb_unpack_free(u);
    return NULL;
  }
  u->sfd = openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int err = errno;
  close(pfd);
  if (u->sfd < 0) {
    mb_unpack_free(u);
    return (mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, stage, "cannot open the staging directory '%s': %s", stage, strerror(err)), NULL);
  }
  u->a = archive_read_new();
  u->md = EVP_MD_CTX_new();
  if (!u->a || !u->md) {
    mb_unpack_free(u);
    return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, "", "out of memory"), NULL);
  }
  /* tar only (ustar, pax, GNU): no decompression filter, so no decompression bomb. */
  if (archive_read_support_format_tar(u->a) != ARCHIVE_OK || archive_read_open_filename(u->a, archive, 65536) != ARCHIVE_OK) {
    mb_error_fail(e, MB_CODE_SYNC_BAD_ARCHIVE, "", "cannot read the archive: %s", archive_error_string(u->a));
    mb_unpack_free(u);
    return NULL;
  }
  return u;
}

static int unpack_fail(mb_unpack *u, struct mb_error *e, int code, const char *path, const char *fmt,
                       const char *a1) {
  u->failed = 1;
  char msg[MB_SYNC_PATH_MAX + 256];
  snprintf(msg, sizeof msg, fmt, path, a1 ? a1 : "");
  return mb_error_fail(e, code, path, "%s", msg);
}

static int bad_archive(mb_unpack *u, struct mb_error *e, const char *path) {
  u->failed = 1;
  const char *why = archive_error_string(u->a);
  if (*path) return mb_error_fail(e, MB_CODE_SYNC_BAD_ARCHIVE, path, "a malformed archive at '%s': %s", path, why ? why : "?");
  return mb_error_fail(e, MB_CODE_SYNC_BAD_ARCHIVE, path, "a malformed archive: %s", why ? why : "?");
}

static int finish_staged(mb_unpack *u, struct mb_error *e) {
  struct mb_unpack_item *it = &u->v[u->n - 1];
  unsigned int dl = 0;
  if (EVP_DigestFinal_ex(u->md, it->sha256, &dl) != 1 || dl != 32)
    return unpack_fail(u, e, MB_CODE_SYNC_IO_ERROR, it->path, "SHA-256 failed for '%s'%s", NULL);
  struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = (time_t)it->mtime_s, .tv_nsec = it->mtime_ns}};
  if (fchmod(u->fd, it->mode) < 0 || futimens(u->fd, ts) < 0 || close(u->fd) < 0) {
    u->fd = -1;
    return unpack_fail(u, e, MB_CODE_SYNC_IO_ERROR, it->path, "cannot stage '%s': %s", strerror(errno));
  }
  u->fd = -1;
  return 0;
}

static int add_item(mb_unpack *u, struct mb_error *e, const char *path, size_t plen, const char *link, int type,
                    struct archive_entry *ae) {
  if (u->n >= u->max_entries)
    return unpack_fail(u, e, MB_CODE_SYNC_TOO_MANY_FILES, path, "the archive has more than maxFiles entries at '%s'%s", NULL);
  if (u->n == u->cap) {
    size_t nc = u->cap ? u->cap * 2 : 32;
    struct mb_unpack_item *nv = realloc(u->v, nc * sizeof *nv);
    if (!nv) return unpack_fail(u, e, MB_CODE_SYNC_NOMEM, path, "out of memory at '%s'%s", NULL);
    u->v = nv;
    u->cap = nc;
  }
  struct mb_unpack_item *it = &u->v[u->n];
  memset(it, 0, sizeof *it);
  it->path = malloc(plen + 1);
  it->link = link ? strdup(link) : NULL;
  if (!it->path || (link && !it->link)) {
    free(it->path);
    free(it->link);
    return unpack_fail(u, e, MB_CODE_SYNC_NOMEM, path, "out of memory at '%s'%s", NULL);
  }
  memcpy(it->path, path, plen);
  it->path[plen] = 0;
  it->type = type;
  it->mode = (unsigned)archive_entry_perm(ae) & 0777;
  it->mtime_s = (int64_t)archive_entry_mtime(ae);
  it->mtime_ns = archive_entry_mtime_nsec(ae);
  snprintf(it->staged, sizeof it->staged, "%s%c%zu", u->prefix, type, u->n);
  u->n++;
  return 0;
}

static int next_entry(mb_unpack *u, struct mb_error *e) {
  struct archive_entry *ae;
  int rc = archive_read_next_header(u->a, &ae);
  if (rc == ARCHIVE_EOF) {
    u->done = 1;
    return 0;
  }
  if (rc < ARCHIVE_WARN) return bad_archive(u, e, "");
  const char *name = archive_entry_pathname(ae);
  if (!name) name = archive_entry_pathname_utf8(ae);
  if (!name) return bad_archive(u, e, "");
  while (name[0] == '.' && name[1] == '/') name += 2;
  size_t len = strlen(name);
  /* The archive's root itself ("." or "./"): it places nothing (its mode is not ours to take). */
  if ((len == 0 || (len == 1 && name[0] == '.')) && archive_entry_filetype(ae) == AE_IFDIR) return 0;
  if (len > 1 && name[len - 1] == '/' && archive_entry_filetype(ae) == AE_IFDIR) len--;
  char path[MB_SYNC_PATH_MAX + 1];
  if (len > MB_SYNC_PATH_MAX) len = MB_SYNC_PATH_MAX + 1; /* refused below, named cut */
  mb_copy_text(path, sizeof path, name, len <= MB_SYNC_PATH_MAX ? len : MB_SYNC_PATH_MAX);
  if (mb_sync_check_path(name, len, e) < 0) {
    u->failed = 1;
    return -1;
  }
  const char *hard = archive_entry_hardlink(ae);
  if (!hard) hard = archive_entry_hardlink_utf8(ae);
  if (hard) return unpack_fail(u, e, MB_CODE_SYNC_UNSAFE_ENTRY, path, "'%s' is a hard link (to '%s'): refused", hard);
  switch (archive_entry_filetype(ae)) {
  case AE_IFREG: {
    la_int64_t size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : 0;
    if (size < 0 || (uint64_t)size > u->max_bytes - u->bytes)
      return unpack_fail(u, e, MB_CODE_SYNC_TOO_LARGE, path, "the archive's files are over maxBytes at '%s'%s", NULL);
    if (add_item(u, e, path, strlen(path), NULL, MB_SYNC_FILE, ae) < 0) return -1;
    struct mb_unpack_item *it = &u->v[u->n - 1];
    it->size = (uint64_t)size;
    u->fd = openat(u->sfd, it->staged, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (u->fd < 0) return unpack_fail(u, e, MB_CODE_SYNC_IO_ERROR, path, "cannot stage '%s': %s", strerror(errno));
    if (EVP_DigestInit_ex(u->md, EVP_sha256(), NULL) != 1)
      return unpack_fail(u, e, MB_CODE_SYNC_IO_ERROR, path, "SHA-256 failed for '%s'%s", NULL);
    return 0;
  }
  case AE_IFLNK: {
    const char *target = archive_entry_symlink(ae);
    if (!target) target = archive_entry_symlink_utf8(ae);
    if (!target || !*target || strlen(target) > MB_SYNC_PATH_MAX)
      return unpack_fail(u, e, MB_CODE_SYNC_UNSAFE_ENTRY, path, "link '%s' has an empty or over-long target%s", NULL);
    if (add_item(u, e, path, strlen(path), target, MB_SYNC_LINK, ae) < 0) return -1;
    if (symlinkat(target, u->sfd, u->v[u->n - 1].staged) < 0)
      return unpack_fail(u, e, MB_CODE_SYNC_IO_ERROR, path, "cannot stage link '%s': %s", strerror(errno));
    return 0;
  }
  case AE_IFDIR:
    return add_item(u, e, path, strlen(path), NULL, MB_SYNC_DIR, ae);
  case AE_IFCHR:
  case AE_IFBLK:
    return unpack_fail(u, e, MB_CODE_SYNC_UNSAFE_ENTRY, path, "'%s' is a device file: refused%s", NULL);
  case AE_IFIFO:
    return unpack_fail(u, e, MB_CODE_SYNC_UNSAFE_ENTRY, path, "'%s' is a FIFO: refused%s", NULL);
  case AE_IFSOCK:
    return unpack_fail(u, e, MB_CODE_SYNC_UNSAFE_ENTRY, path, "'%s' is a socket: refused%s", NULL);
  default:
    return unpack_fail(u, e, MB_CODE_SYNC_UNSAFE_ENTRY, path, "'%s' is of an unknown type: refused%s", NULL);
  }
}

int mb_unpack_step(mb_unpack *u, size_t budget, struct mb_error *e) {
  if (u->failed) return mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, "", "the unpack failed before");
  size_t done = 0;
  while (!u->done && done < budget) {
    if (u->fd < 0) {
      if (next_entry(u, e) < 0) return -1;
      done += 512;
      continue;
    }
    struct mb_unpack_item *it = &u->v[u->n - 1];
    la_ssize_t k = archive_read_data(u->a, u->buf, sizeof u->buf);
    if (k < 0) return bad_archive(u, e, it->path);
    if (k == 0) {
      if (finish_staged(u, e) < 0) return -1;
      continue;
    }
    if ((uint64_t)k > u->max_bytes - u->bytes)
      return unpack_fail(u, e, MB_CODE_SYNC_TOO_LARGE, it->path, "the archive's files are over maxBytes at '%s'%s", NULL);
    for (la_ssize_t off = 0; off < k;) {
      ssize_t w = write(u->fd, u->buf + off, (size_t)(k - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return unpack_fail(u, e, errno == ENOSPC ? MB_CODE_SYNC_NO_SPACE : MB_CODE_SYNC_IO_ERROR, it->path, "cannot stage '%s': %s", strerror(errno));
      off += w;
    }
    EVP_DigestUpdate(u->md, u->buf, (size_t)k);
    u->bytes += (uint64_t)k;
    done += (size_t)k;
  }
  return u->done ? 1 : 0;
}

size_t mb_unpack_count(const mb_unpack *u) { return u->n; }
const struct mb_unpack_item *mb_unpack_item(const mb_unpack *u, size_t i) { return i < u->n ? &u->v[i] : NULL; }

void mb_unpack_free(mb_unpack *u) {
  if (!u) return;
  if (u->fd >= 0) close(u->fd);
  if (u->sfd >= 0) close(u->sfd);
  if (u->a) archive_read_free(u->a);
  EVP_MD_CTX_free(u->md);
  for (size_t i = 0; i < u->n; i++) {
    free(u->v[i].path);
    free(u->v[i].link);
  }
  free(u->v);
  free(u);
}
