/* fuzz_sbx_paths.c — libFuzzer target for sandboxd's path resolution inside a sandbox root
 * (sandboxd/paths.c), against a real directory tree on tmpfs (a private one when run as root):
 * a root holding symlinks that point absolutely, relatively upwards, at the host's file by name,
 * in chains and loops, beside an "outside" directory that must never be reached.
 *
 * Input: [target length][symlink target...][path...]. The fuzzer's symlink (scratch/l → target)
 * is made, the path is resolved and opened every way paths.c offers, then the symlink is removed.
 * The path may hold any byte: NUL ends it, as it ends a path taken from a JSON string.
 * Properties checked:
 *  - paths_resolve gives a clean absolute path (no empty, "." or ".." component, no trailing
 *    slash), shorter than PATHS_MAX, and resolving it again gives itself;
 *  - every descriptor paths_open / paths_open_parent / paths_open_file returns is inside the
 *    root (its /proc/self/fd link starts with the root's path), and nothing outside is touched;
 *  - paths_realpath's answer, when there is one, names the same inode as the path itself;
 *  - paths_create_path's answer is clean; it is realpath's where that has one, and otherwise names
 *    nothing yet, in a directory that is inside the root (where open(O_CREAT) would make it). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "paths.h"

static char base[256], rootdir[300], outside[300];
static size_t rootlen;
static fs_ctx C;
static bool ready;

static void mkp(const char *rel, bool dir, const char *link) {
  char p[700];
  snprintf(p, sizeof p, "%s/%s", base, rel);
  if (link) { if (symlink(link, p) != 0 && errno != EEXIST) abort(); return; }
  if (dir) { if (mkdir(p, 0755) != 0 && errno != EEXIST) abort(); return; }
  FILE *f = fopen(p, "w");
  if (!f) abort();
  fputs("x", f);
  fclose(f);
}

static void setup(void) {
  bool priv = geteuid() == 0;
  snprintf(base, sizeof base, "%s/fuzz-paths-XXXXXX", priv ? "/tmp" : "/dev/shm");
  if (!mkdtemp(base)) abort();
  if (priv && (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
               mount("tmpfs", base, "tmpfs", 0, "mode=755,size=8m") != 0))
    abort();
  mkp("outside", true, NULL);
  mkp("outside/secret", false, NULL);
  mkp("root", true, NULL);
  static const char *const dirs[] = {"root/etc", "root/home", "root/home/user", "root/a", "root/a/b", "root/a/b/c", "root/scratch", NULL};
  for (size_t i = 0; dirs[i]; i++) mkp(dirs[i], true, NULL);
  mkp("root/etc/passwd", false, NULL);
  mkp("root/a/b/c/file", false, NULL);
  static const char *const links[][2] = {
      {"root/abs", "/etc"}, {"root/up", "../../../../../../.."}, {"root/host", "/../outside/secret"},
      {"root/a/b/back", "../../.."}, {"root/a/chain1", "b/chain2"}, {"root/a/b/chain2", "c/chain3"},
      {"root/a/b/c/chain3", "/a/b/c/file"}, {"root/loop1", "loop2"}, {"root/loop2", "/loop1"},
      {"root/self", "."}, {"root/dots", "../../root/etc"}, {"root/home/user/home", "/home/user"}, {NULL, NULL}};
  for (size_t i = 0; links[i][0]; i++) mkp(links[i][0], false, links[i][1]);
  snprintf(rootdir, sizeof rootdir, "%s/root", base);
  snprintf(outside, sizeof outside, "%s/outside", base);
  rootlen = strlen(rootdir);
  memset(&C, 0, sizeof C);
  C.root = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (C.root < 0) abort();
  C.user = "user";
  C.home = "/home/user";
  C.uid = C.gid = 1000;
  C.host_uid = C.host_root_uid = C.host_user_uid = geteuid();
  C.host_gid = C.host_root_gid = C.host_user_gid = getegid();
  ready = true;
}

static void inside_or_trap(int fd) {
  if (fd < 0) return;
  char link[64], real[PATHS_MAX + 512];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, real, sizeof real - 1);
  if (n < 0) abort();
  real[n] = 0;
  if (strncmp(real, rootdir, rootlen) != 0 || (real[rootlen] != 0 && real[rootlen] != '/')) __builtin_trap();
  close(fd);
}

static void clean_or_trap(const char *p) {
  if (p[0] != '/') __builtin_trap();
  size_t n = strlen(p);
  if (n >= PATHS_MAX) __builtin_trap();
  if (n > 1 && p[n - 1] == '/') __builtin_trap();
  for (const char *q = p; *q; q++) {
    if (q[0] != '/') continue;
    const char *e = strchr(q + 1, '/');
    size_t len = e ? (size_t)(e - q - 1) : strlen(q + 1);
    if (n > 1 && len == 0) __builtin_trap();
    if ((len == 1 && q[1] == '.') || (len == 2 && q[1] == '.' && q[2] == '.')) __builtin_trap();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ready) setup();
  if (size < 1) return 0;
  size_t tl = data[0];
  if (tl > size - 1) tl = size - 1;
  char target[256], in[PATHS_MAX + 64];
  memcpy(target, data + 1, tl);
  target[tl] = 0;
  size_t pl = size - 1 - tl;
  if (pl > PATHS_MAX + 32) pl = PATHS_MAX + 32;   /* longer inputs are refused the same way */
  memcpy(in, data + 1 + tl, pl);
  in[pl] = 0;
  char lp[400];
  snprintf(lp, sizeof lp, "%s/scratch/l", rootdir);
  bool linked = target[0] && symlink(target, lp) == 0;

  char abs[PATHS_MAX];
  int rc = paths_resolve(&C, in, abs, sizeof abs);
  if (rc == 0) {
    clean_or_trap(abs);
    char again[PATHS_MAX];
    if (paths_resolve(&C, abs, again, sizeof again) != 0 || strcmp(abs, again) != 0) __builtin_trap();
    inside_or_trap(paths_open(&C, abs, O_PATH, 0, 0));
    inside_or_trap(paths_open(&C, abs, O_RDONLY | O_DIRECTORY, 0, 0));
    char name[256], fsname[32];
    inside_or_trap(paths_open_parent(&C, abs, name, sizeof name));
    inside_or_trap(paths_open_file(&C, abs, O_RDONLY, fsname, sizeof fsname));
    char real[PATHS_MAX];
    if (paths_realpath(&C, abs, real, sizeof real) == 0) {
      clean_or_trap(real);
      int a = paths_open(&C, abs, O_PATH, 0, 0), b = paths_open(&C, real, O_PATH | O_NOFOLLOW, 0, 0);
      struct stat sa, sb;
      if (a >= 0 && b >= 0 && fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
          (sa.st_ino != sb.st_ino || sa.st_dev != sb.st_dev))
        __builtin_trap();
      if (a >= 0) close(a);
      if (b >= 0) close(b);
    }
    char made[PATHS_MAX];
    int cr = paths_create_path(&C, abs, made, sizeof made);
    if (cr == 0) {
      clean_or_trap(made);
      if (paths_realpath(&C, abs, real, sizeof real) == 0) {
        if (strcmp(made, real) != 0) __builtin_trap();
      } else {
        int d = paths_open_parent(&C, made, name, sizeof name);
        struct stat st;
        if (d < 0 || fstatat(d, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) __builtin_trap();
        inside_or_trap(d);
      }
    }
    json_t *e = paths_entry_at(&C, abs);
    json_decref(e);
  } else if (rc != -ENAMETOOLONG && rc != -EINVAL) {
    __builtin_trap();
  }
  if (linked) unlink(lp);
  /* the outside must stay as it was: one file */
  char probe[400];
  snprintf(probe, sizeof probe, "%s/secret", outside);
  if (access(probe, F_OK) != 0) __builtin_trap();
  return 0;
}
