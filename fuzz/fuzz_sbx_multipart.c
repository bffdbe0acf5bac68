/* fuzz_sbx_multipart.c — libFuzzer target for sandboxd's /files multipart upload: libmicrohttpd's
 * post processor (what sandboxd's HTTP layer drives) feeding sandboxd's upload state machine
 * (sandboxd/upload.c), which writes into a real tree on tmpfs (a private one when run as root).
 *
 * The post processor takes its boundary from a connection's Content-Type header only when it is
 * created, so the harness makes one connection once — a socket pair handed to a daemon in external
 * select mode, run until the request headers are in — and creates every input's post processor on
 * it (boundary "fuzzb").
 * Input: [split seed][query-path flag][body...]: the body is fed in pieces of 1..64 bytes chosen by
 * the seed; with the flag set the request names its target by ?path (every part goes there).
 * Properties checked after every input:
 *  - no temporary upload file is left anywhere, whatever failed: every regular file in the tree is
 *    one that a part asked for (by inode; the skeleton has none). Names prove nothing: a part may
 *    ask for ".upload-x" or ".a.upload-0123456789abcdef" itself;
 *  - on success every file listed exists, is a regular file inside the root, and the results have
 *    no duplicate path; on failure a status and a message are set;
 *  - the directory beside the root is untouched. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "upload.h"

#define LIMIT (1u << 20)

static char base[256], rootdir[300], outside[300];
static fs_ctx C;
static struct MHD_Daemon *daemon_;
static struct MHD_Connection *conn;
static bool ready;

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *data, size_t *size, void **con_cls) {
  (void)cls; (void)url; (void)method; (void)version; (void)data;
  static int marker;
  if (!*con_cls) { *con_cls = &marker; conn = c; return MHD_YES; }   /* the headers are in: keep it */
  *size = 0;
  return MHD_YES;
}

static void skeleton(void) {
  static const char *const dirs[] = {"root", "root/home", "root/home/user", "root/tmp", "root/etc", NULL};
  char p[400];
  for (size_t i = 0; dirs[i]; i++) {
    snprintf(p, sizeof p, "%s/%s", base, dirs[i]);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) abort();
  }
  snprintf(p, sizeof p, "%s/root/etc/link", base);
  (void)symlink("/../outside", p);   /* a symlink towards the outside, by name: resolves inside */
}

/* As root the tree is a tmpfs mounted (in a mount namespace of our own) on a directory of /tmp:
 * at exit that directory goes too, or each run (each job of -fork) would leave one. */
static void unmount_base(void) {
  if (umount2(base, MNT_DETACH) == 0) (void)rmdir(base);
}

static void setup(void) {
  bool priv = geteuid() == 0;
  snprintf(base, sizeof base, "%s/fuzz-mp-XXXXXX", priv ? "/tmp" : "/dev/shm");
  if (!mkdtemp(base)) abort();
  if (priv && (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
               mount("tmpfs", base, "tmpfs", 0, "mode=755,size=64m") != 0))
    abort();
  if (priv) atexit(unmount_base);
  snprintf(rootdir, sizeof rootdir, "%s/root", base);
  snprintf(outside, sizeof outside, "%s/outside", base);
  if (mkdir(outside, 0755) != 0) abort();
  skeleton();
  memset(&C, 0, sizeof C);
  C.root = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (C.root < 0) abort();
  C.user = "user";
  C.home = "/home/user";
  C.uid = C.gid = 1000;
  C.host_uid = C.host_root_uid = C.host_user_uid = geteuid();
  C.host_gid = C.host_root_gid = C.host_user_gid = getegid();

  daemon_ = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_access, NULL, MHD_OPTION_END);
  int sv[2];
  if (!daemon_ || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (MHD_add_connection(daemon_, sv[0], (struct sockaddr *)&sa, sizeof sa) != MHD_YES) abort();
  static const char head[] = "POST /files HTTP/1.1\r\nHost: fuzz\r\n"
                             "Content-Type: multipart/form-data; boundary=fuzzb\r\nContent-Length: 1000000000\r\n\r\n";
  if (write(sv[1], head, sizeof head - 1) != (ssize_t)(sizeof head - 1)) abort();
  for (int i = 0; i < 1000 && !conn; i++) MHD_run(daemon_);
  if (!conn) abort();   /* never runs MHD again: the connection stays as it is, headers parsed */
  ready = true;
}

/* The HTTP layer's adapter, as sandboxd/http.c has it: MHD's iterator → an sd_part_cb. */
typedef struct { upload *u; int rc; } feed;
static enum MHD_Result iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                            const char *ct, const char *te, const char *data, uint64_t off, size_t size) {
  (void)kind; (void)ct; (void)te;
  feed *f = cls;
  f->rc = upload_part(f->u, key ? key : "", filename, data, off, size);
  return f->rc ? MHD_NO : MHD_YES;
}

/* The files the request asked for (dev, inode), as they are after the upload. */
static struct { dev_t dev; ino_t ino; } asked[UPLOAD_MAX_PARTS];
static size_t nasked;
static void collect_asked(upload *u) {
  json_t *res = upload_results(u);
  nasked = 0;
  for (size_t i = 0; i < json_array_size(res) && nasked < UPLOAD_MAX_PARTS; i++) {
    const char *p = json_string_value(json_object_get(json_array_get(res, i), "path"));
    int fd = p ? paths_open(&C, p, O_PATH, 0, 0) : -1;   /* a symlinked target: its file */
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      asked[nasked].dev = st.st_dev;
      asked[nasked++].ino = st.st_ino;
    }
    if (fd >= 0) close(fd);
  }
}

static int leftovers, entries, files;
static int check_entry(const char *p, const struct stat *st, int type, struct FTW *ftw) {
  (void)p; (void)ftw;
  /* upload.c makes regular files only: one nobody asked for is a temporary that survived */
  if (type == FTW_F && S_ISREG(st->st_mode)) {
    size_t i = 0;
    while (i < nasked && !(asked[i].dev == st->st_dev && asked[i].ino == st->st_ino)) i++;
    if (i == nasked) leftovers++;
    files++;
  }
  entries++;
  return 0;
}
#define SKELETON_ENTRIES 6   /* root, home, home/user, tmp, etc, etc/link */

/* The tree is the skeleton still: as many entries, no file, and etc/link still the link (an upload
 * to /etc/link once replaced the dangling link by a file: the count alone said "untouched", and
 * the next input found that file as its own leftover; now it makes the link's target, /outside
 * inside the root, and the link stays). */
static bool pristine(void) {
  char p[400];
  struct stat st;
  snprintf(p, sizeof p, "%s/etc/link", rootdir);
  return entries == SKELETON_ENTRIES && files == 0 && lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
}
/* By name from the working directory (FTW_CHDIR), as a full path walks every level again: depth²
 * for a deep tree. A directory is reported after its contents with the directory itself as the
 * working directory, so it goes by "../name". */
static int rm_entry(const char *p, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  char up[260];
  if (type != FTW_DP) unlink(p + ftw->base);
  else if (snprintf(up, sizeof up, "../%s", p + ftw->base) < (int)sizeof up) rmdir(up);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ready) setup();
  if (size < 2) return 0;
  unsigned seed = data[0] | 1u;
  const char *qpath = (data[1] & 1) ? "via-query.txt" : NULL;
  const uint8_t *body = data + 2;
  size_t n = size - 2;
  upload *u = upload_new(&C, qpath, NULL, LIMIT, false);
  if (!u) abort();
  feed f = {u, 0};
  struct MHD_PostProcessor *pp = MHD_create_post_processor(conn, 64 * 1024, iter, &f);
  if (!pp) abort();
  bool ok = true;
  for (size_t off = 0; off < n && ok;) {
    seed = seed * 1103515245u + 12345u;
    size_t k = 1 + (seed >> 16) % 64;
    if (k > n - off) k = n - off;
    ok = MHD_post_process(pp, (const char *)body + off, k) == MHD_YES;
    off += k;
  }
  bool fin = MHD_destroy_post_processor(pp) == MHD_YES;
  int rc = ok && fin && f.rc == 0 ? upload_finish(u) : 1;
  if (rc == 0 && upload_files(u) == 0) rc = upload_fail(u, 400, "no part named 'file'");
  if (f.rc && (upload_status(u) == 0 || !upload_message(u)[0])) __builtin_trap();   /* a failure says why */
  if (rc == 0) {
    json_t *res = upload_results(u);
    for (size_t i = 0; i < json_array_size(res); i++) {
      const char *p = json_string_value(json_object_get(json_array_get(res, i), "path"));
      if (!p || p[0] != '/') __builtin_trap();
      for (size_t j = 0; j < i; j++)
        if (!strcmp(p, json_string_value(json_object_get(json_array_get(res, j), "path")))) __builtin_trap();
      int fd = paths_open(&C, p, O_PATH | O_NOFOLLOW, 0, 0);
      struct stat st;
      /* renamed over a symlinked target means the link's file holds it: follow for the check */
      if (fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) { close(fd); fd = paths_open(&C, p, O_PATH, 0, 0); }
      if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) __builtin_trap();
      close(fd);
    }
  }
  collect_asked(u);
  upload_free(u);
  leftovers = entries = files = 0;
  nftw(rootdir, check_entry, 16, FTW_PHYS);
  if (leftovers) __builtin_trap();
  /* the outside stays empty */
  DIR *d = opendir(outside);
  if (!d) __builtin_trap();
  for (struct dirent *de; (de = readdir(d));)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) __builtin_trap();
  closedir(d);
  /* back to the skeleton for the next input (unless nothing was made) */
  if (pristine()) return 0;
  nftw(rootdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_CHDIR);
  if (access(rootdir, F_OK) == 0) abort();   /* the harness's own cleanup failed */
  skeleton();
  close(C.root);
  C.root = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (C.root < 0) abort();
  return 0;
}
