/* test_sbx_paths.c — path resolution inside a sandbox root (sandboxd/paths.c) against a real
 * directory tree on tmpfs: lexical folding, "~", symlinks (absolute, relative, escaping, loops),
 * long names, parents, mkdir -p, the file-system allowlist, EntryInfo and user.e2b.* metadata.
 * Links no HTTP code. As root it mounts a private tmpfs (own mount namespace); otherwise it works
 * under /dev/shm. */
#include "mbtest.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "paths.h"

static char base[256], rootdir[300];
static fs_ctx C;

static void mk(const char *rel, mode_t mode) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", base, rel);
  if (mkdir(p, mode) != 0 && errno != EEXIST) { perror(p); exit(2); }
}
static void put(const char *rel, const char *content) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", base, rel);
  FILE *f = fopen(p, "w");
  if (!f) { perror(p); exit(2); }
  fputs(content, f);
  fclose(f);
}
static void ln(const char *target, const char *rel) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", base, rel);
  if (symlink(target, p) != 0) { perror(p); exit(2); }
}

/* The tree: <base>/outside/secret beside <base>/root, which holds what a sandbox would. */
static void setup(void) {
  bool priv = geteuid() == 0;
  snprintf(base, sizeof base, "%s/sbx-paths-XXXXXX", priv ? "/tmp" : "/dev/shm");
  if (!mkdtemp(base)) { perror("mkdtemp"); exit(2); }
  if (priv && (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
               mount("tmpfs", base, "tmpfs", 0, "mode=755,size=16m") != 0)) {
    perror("private tmpfs");
    exit(2);
  }
  mk("outside", 0755);
  put("outside/secret", "HOST-SECRET");
  mk("root", 0755);
  mk("root/etc", 0755);
  put("root/etc/passwd", "sandbox passwd\n");
  mk("root/home", 0755);
  mk("root/home/user", 0755);
  put("root/home/user/notes.txt", "four");
  mk("root/dir", 0755);
  put("root/dir/file", "in dir");
  ln("/etc", "root/abs");                           /* absolute: the sandbox's /etc */
  ln("../../../../../../etc", "root/home/user/up"); /* escaping upwards: clamped at the root */
  ln("/../outside/secret", "root/escape");          /* the host's file, by name */
  ln("loop2", "root/loop1");
  ln("loop1", "root/loop2");
  ln("notes.txt", "root/home/user/rel");
  ln("/dir", "root/home/user/dirlink");
  snprintf(rootdir, sizeof rootdir, "%s/root", base);
  memset(&C, 0, sizeof C);
  C.root = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (C.root < 0) { perror(rootdir); exit(2); }
  C.user = "user";
  C.home = "/home/user";
  C.uid = 1000;
  C.gid = 1000;
  C.host_uid = C.host_root_uid = C.host_user_uid = geteuid();
  C.host_gid = C.host_root_gid = C.host_user_gid = getegid();
}

static void resolved(const char *in, const char *want) {
  char out[PATHS_MAX];
  int rc = paths_resolve(&C, in, out, sizeof out);
  if (!mbt_check(rc == 0 && !strcmp(out, want), __FILE__, __LINE__, "paths_resolve"))
    fprintf(stderr, "     '%s' → %d '%s', want '%s'\n", in, rc, rc ? "" : out, want);
}

static void test_resolve(void) {
  resolved("/", "/");
  resolved("", "/home/user");
  resolved("~", "/home/user");
  resolved("~/a/b", "/home/user/a/b");
  resolved("~user", "/home/user/~user");            /* only "~" and "~/" are home */
  resolved("rel/x", "/home/user/rel/x");
  resolved("/a/./b//c/", "/a/b/c");
  resolved("/a/../../../b", "/b");                  /* ".." never climbs above the root */
  resolved("../../..", "/");
  resolved("/..", "/");
  resolved("a/..", "/home/user");
  char out[PATHS_MAX], in[PATHS_MAX + 8];
  memset(in, 'a', PATHS_MAX);
  in[0] = '/';
  in[PATHS_MAX] = 0;
  CHECK_INT(paths_resolve(&C, in, out, sizeof out), -ENAMETOOLONG);
  in[PATHS_MAX - 1] = 0;                            /* the longest input fits */
  CHECK_INT(paths_resolve(&C, in, out, sizeof out), 0);
  CHECK_INT(paths_resolve(&C, "relative/but/long", out, 12), -ENAMETOOLONG);   /* home is added */
  CHECK_INT(paths_resolve(&C, "/x", out, 1), -ENAMETOOLONG);
}

static int read_at(const char *abs, char *buf, size_t cap) {
  int fd = paths_open(&C, abs, O_RDONLY, 0, 0);
  if (fd < 0) return fd;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
  return 0;
}

static void test_open_inside_root(void) {
  char buf[256];
  CHECK_INT(read_at("/etc/passwd", buf, sizeof buf), 0);
  CHECK_STR(buf, "sandbox passwd\n");
  CHECK_INT(read_at("/abs/passwd", buf, sizeof buf), 0);            /* /abs → the sandbox's /etc */
  CHECK_STR(buf, "sandbox passwd\n");
  CHECK_INT(read_at("/home/user/up/passwd", buf, sizeof buf), 0);   /* ../../.. stops at its root */
  CHECK_STR(buf, "sandbox passwd\n");
  CHECK_INT(read_at("/escape", buf, sizeof buf), -ENOENT);          /* /../outside is /outside inside */
  CHECK_INT(read_at("/../outside/secret", buf, sizeof buf), -ENOENT);
  CHECK_INT(read_at("/loop1", buf, sizeof buf), -ELOOP);
  CHECK_INT(read_at("/home/user/rel", buf, sizeof buf), 0);
  CHECK_STR(buf, "four");
  CHECK_INT(read_at("/home/user/dirlink/file", buf, sizeof buf), 0);
  CHECK_STR(buf, "in dir");
  int fd = paths_open(&C, "/", O_PATH | O_DIRECTORY, 0, 0);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_INT(paths_open(&C, "/etc/passwd/x", O_RDONLY, 0, 0), -ENOTDIR);
  /* /proc/self/... magic links are refused inside the root */
  CHECK(paths_open(&C, "/proc/self/root", O_RDONLY, 0, 0) < 0);
}

static void test_realpath_and_parent(void) {
  char out[PATHS_MAX], name[256];
  CHECK_INT(paths_realpath(&C, "/abs/passwd", out, sizeof out), 0);
  CHECK_STR(out, "/etc/passwd");
  CHECK_INT(paths_realpath(&C, "/home/user/up/passwd", out, sizeof out), 0);
  CHECK_STR(out, "/etc/passwd");
  CHECK_INT(paths_realpath(&C, "/home/user/rel", out, sizeof out), 0);
  CHECK_STR(out, "/home/user/notes.txt");
  CHECK_INT(paths_realpath(&C, "/loop1", out, sizeof out), -ELOOP);
  CHECK_INT(paths_realpath(&C, "/nope/x", out, sizeof out), -ENOENT);
  int dfd = paths_open_parent(&C, "/home/user/notes.txt", name, sizeof name);
  CHECK(dfd >= 0);
  CHECK_STR(name, "notes.txt");
  struct stat st;
  CHECK(dfd >= 0 && fstatat(dfd, name, &st, 0) == 0 && st.st_size == 4);
  if (dfd >= 0) close(dfd);
  CHECK_INT(paths_open_parent(&C, "/", name, sizeof name), -EINVAL);
  CHECK_INT(paths_open_parent(&C, "/home/user/notes.txt", name, 4), -ENAMETOOLONG);
}

/* Where a create makes its file: through dangling links (absolute, relative, chained, upwards
 * past the root, through a linked directory and back up) to their target, as open(O_CREAT)
 * follows them; an existing path is its real path; a missing level above, a loop and a target
 * with a trailing slash are refused. */
static void created(const char *abs, int want_rc, const char *want) {
  char out[PATHS_MAX];
  int rc = paths_create_path(&C, abs, out, sizeof out);
  if (!mbt_check(rc == want_rc && (rc || !strcmp(out, want)), __FILE__, __LINE__, "paths_create_path"))
    fprintf(stderr, "     '%s' → %d '%s', want %d '%s'\n", abs, rc, rc ? "" : out, want_rc, want ? want : "");
}
static void test_create_path(void) {
  ln("/tmp/made-abs", "root/home/user/d-abs");
  ln("../made-rel", "root/home/user/d-rel");
  ln("d-abs", "root/home/user/d-chain");
  ln("/../../made-up", "root/home/user/d-up");
  ln("dirlink/../made-via", "root/home/user/d-via");   /* dirlink → /dir: its parent is / */
  ln("/nowhere/x", "root/home/user/d-noparent");
  ln("/tmp/made-dir/", "root/home/user/d-slash");
  mk("root/tmp", 0755);
  created("/home/user/new.txt", 0, "/home/user/new.txt");
  created("/abs/new", 0, "/etc/new");
  created("/home/user/d-abs", 0, "/tmp/made-abs");
  created("/home/user/d-rel", 0, "/home/made-rel");
  created("/home/user/d-chain", 0, "/tmp/made-abs");
  created("/home/user/d-up", 0, "/made-up");
  created("/home/user/d-via", 0, "/made-via");
  created("/home/user/rel", 0, "/home/user/notes.txt");
  created("/home/user/d-noparent", -ENOENT, NULL);
  created("/home/user/d-slash", -EISDIR, NULL);
  created("/nope/x", -ENOENT, NULL);
  created("/loop1", -ELOOP, NULL);
  /* paths_realpath still wants every level */
  char out[PATHS_MAX];
  CHECK_INT(paths_realpath(&C, "/home/user/d-abs", out, sizeof out), -ENOENT);
  /* nothing was made by asking */
  struct stat st;
  char p[700];
  snprintf(p, sizeof p, "%s/tmp/made-abs", rootdir);
  CHECK(lstat(p, &st) != 0 && errno == ENOENT);
}

static void test_open_file(void) {
  char fsname[32];
  int fd = paths_open_file(&C, "/home/user/new.txt", O_WRONLY | O_CREAT | O_TRUNC, fsname, sizeof fsname);
  CHECK(fd >= 0);                                    /* on tmpfs: the sandbox's own kind of file system */
  if (fd >= 0) { CHECK(write(fd, "hi", 2) == 2); close(fd); }
  char buf[16];
  CHECK_INT(read_at("/home/user/new.txt", buf, sizeof buf), 0);
  CHECK_STR(buf, "hi");
  CHECK_INT(paths_open_file(&C, "/dir", O_RDONLY, fsname, sizeof fsname), -EISDIR);
  CHECK_INT(paths_open_file(&C, "/missing", O_RDONLY, fsname, sizeof fsname), -ENOENT);
  char fifo[600];
  snprintf(fifo, sizeof fifo, "%s/fifo", rootdir);
  CHECK_INT(mkfifo(fifo, 0644), 0);
  CHECK_INT(paths_open_file(&C, "/fifo", O_RDONLY, fsname, sizeof fsname), -PATHS_ENOTREG);
  /* foreign file systems are refused by name */
  int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  CHECK_INT(paths_fs_check(proc), -PATHS_EFOREIGN);
  CHECK_STR(paths_fs_name(proc), "proc");
  close(proc);
  CHECK_INT(paths_fs_check(C.root), 0);
  CHECK_STR(paths_fs_name(C.root), "tmpfs");
}

static void test_mkdir_p(void) {
  bool created;
  size_t first;
  CHECK_INT(paths_mkdir_p(&C, "/home/user/a/b/c", &created, &first), 0);
  CHECK(created);
  CHECK_INT((int)first, (int)strlen("/home/user/a"));              /* /home/user was there */
  CHECK_INT(paths_mkdir_p(&C, "/home/user/a/b/c", &created, &first), 0);
  CHECK(!created);
  CHECK_INT((int)first, 0);
  CHECK_INT(paths_mkdir_p(&C, "/home/user/notes.txt/x", &created, NULL), -ENOTDIR);
  /* through a symlink, still inside the root */
  CHECK_INT(paths_mkdir_p(&C, "/home/user/dirlink/sub", &created, NULL), 0);
  char p[600];
  snprintf(p, sizeof p, "%s/dir/sub", rootdir);
  struct stat st;
  CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0755);
  snprintf(p, sizeof p, "%s/outside/sub", base);
  CHECK_INT(paths_mkdir_p(&C, "/../outside/sub", &created, NULL), 0);    /* is /outside/sub inside */
  CHECK(stat(p, &st) != 0);                                        /* never the host's */
}

/* A deep path is made level by level below the deepest one there (found by bisection); what is
 * in the way further down is still seen: a file, a dangling link, a link that leads elsewhere. */
static void test_mkdir_p_deep(void) {
  bool created;
  size_t first;
  char deep[PATHS_MAX], p[PATHS_MAX + 600];
  size_t n = (size_t)snprintf(deep, sizeof deep, "/home/user/deep");
  while (n + 2 < 4000) n += (size_t)snprintf(deep + n, sizeof deep - n, "/d");   /* ~1,990 levels */
  CHECK_INT(paths_mkdir_p(&C, deep, &created, &first), 0);
  CHECK(created);
  CHECK_INT((int)first, (int)strlen("/home/user/deep"));
  int fd = paths_open(&C, deep, O_PATH | O_DIRECTORY, 0, 0);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  deep[n - 2] = '\0';                                             /* its parent: there already */
  CHECK_INT(paths_mkdir_p(&C, deep, &created, &first), 0);
  CHECK(!created);
  /* half there: made from where it stops, nothing above touched */
  CHECK_INT(paths_mkdir_p(&C, "/home/user/a/b/c/d/e/f", &created, &first), 0);
  CHECK(created);
  CHECK_INT((int)first, (int)strlen("/home/user/a/b/c/d"));
  /* through a link to a directory, several levels missing below it */
  CHECK_INT(paths_mkdir_p(&C, "/home/user/dirlink/s1/s2/s3", &created, NULL), 0);
  snprintf(p, sizeof p, "%s/dir/s1/s2/s3", rootdir);
  struct stat st;
  CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == C.host_uid);
  CHECK_INT(paths_mkdir_p(&C, "/home/user/notes.txt/x/y/z", &created, NULL), -ENOTDIR);
  snprintf(p, sizeof p, "%s/home/user/dangling", rootdir);
  CHECK_INT(symlink("/nowhere", p), 0);
  CHECK_INT(paths_mkdir_p(&C, "/home/user/dangling/x/y", &created, NULL), -ENOENT);
  snprintf(p, sizeof p, "%s/nowhere", rootdir);
  CHECK(stat(p, &st) != 0 && errno == ENOENT);                     /* a link is never made through */
}

/* paths_unmake takes away what one mkdir_p made, deepest first, and stops at what is not empty. */
static void test_unmake(void) {
  bool created;
  size_t first;
  char p[600];
  struct stat st;
  CHECK_INT(paths_mkdir_p(&C, "/home/user/u1/u2/u3", &created, &first), 0);
  paths_unmake(&C, "/home/user/u1/u2/u3", first);
  snprintf(p, sizeof p, "%s/home/user/u1", rootdir);
  CHECK(stat(p, &st) != 0 && errno == ENOENT);
  snprintf(p, sizeof p, "%s/home/user", rootdir);
  CHECK(stat(p, &st) == 0);                                        /* what was there stays */
  /* a file another put in a level it made: that level and the ones above stay */
  CHECK_INT(paths_mkdir_p(&C, "/home/user/v1/v2/v3", &created, &first), 0);
  snprintf(p, sizeof p, "%s/home/user/v1/keep", rootdir);
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  paths_unmake(&C, "/home/user/v1/v2/v3", first);
  snprintf(p, sizeof p, "%s/home/user/v1/v2", rootdir);
  CHECK(stat(p, &st) != 0 && errno == ENOENT);
  snprintf(p, sizeof p, "%s/home/user/v1/keep", rootdir);
  CHECK(stat(p, &st) == 0);
  paths_unmake(&C, "/home/user/v1", 0);                            /* nothing made: nothing removed */
  CHECK(stat(p, &st) == 0);
}

static void test_entry(void) {
  json_t *e = paths_entry_at(&C, "/home/user/notes.txt");
  CHECK(e != NULL);
  CHECK_STR(json_string_value(json_object_get(e, "name")), "notes.txt");
  CHECK_STR(json_string_value(json_object_get(e, "path")), "/home/user/notes.txt");
  CHECK_STR(json_string_value(json_object_get(e, "type")), "FILE_TYPE_FILE");
  CHECK_STR(json_string_value(json_object_get(e, "size")), "4");   /* int64: a string in protobuf JSON */
  CHECK_STR(json_string_value(json_object_get(e, "permissions")), "-rw-r--r--");
  CHECK_STR(json_string_value(json_object_get(e, "owner")), "root");   /* host_root_uid is ours here */
  json_decref(e);
  e = paths_entry_at(&C, "/home/user/rel");
  CHECK_STR(json_string_value(json_object_get(e, "symlinkTarget")), "/home/user/notes.txt");
  json_decref(e);
  e = paths_entry_at(&C, "/dir");
  CHECK_STR(json_string_value(json_object_get(e, "type")), "FILE_TYPE_DIRECTORY");
  json_decref(e);
  errno = 0;
  CHECK(paths_entry_at(&C, "/missing") == NULL && errno == ENOENT);
}

static void test_metadata(void) {
  int fd = paths_open(&C, "/home/user/notes.txt", O_RDONLY, 0, 0);
  CHECK(fd >= 0);
  json_t *md = json_pack("{s:s,s:s}", "author", "me", "purpose", "test");
  int rc = paths_set_metadata(fd, md);
  if (rc == -ENOTSUP || rc == -EOPNOTSUPP) {   /* a tmpfs without user xattrs (kernel < 6.6) */
    fprintf(stderr, "     (this tmpfs has no user xattrs)\n");
    CHECK(1);
  } else {
    CHECK_INT(rc, 0);
    json_t *got = paths_metadata(fd);
    CHECK(json_equal(got, md));
    json_decref(got);
    json_t *less = json_pack("{s:s}", "author", "you");
    CHECK_INT(paths_set_metadata(fd, less), 0);   /* replaces the whole set */
    got = paths_metadata(fd);
    CHECK(json_equal(got, less));
    json_decref(got);
    json_decref(less);
    CHECK_INT(paths_set_metadata(fd, NULL), 0);
    got = paths_metadata(fd);
    CHECK(json_is_object(got) && json_object_size(got) == 0);
    json_decref(got);
  }
  json_decref(md);
  close(fd);
}

int main(void) {
  setup();
  MBT_RUN(test_resolve);
  MBT_RUN(test_open_inside_root);
  MBT_RUN(test_realpath_and_parent);
  MBT_RUN(test_create_path);
  MBT_RUN(test_open_file);
  MBT_RUN(test_mkdir_p);
  MBT_RUN(test_mkdir_p_deep);
  MBT_RUN(test_unmake);
  MBT_RUN(test_entry);
  MBT_RUN(test_metadata);
  close(C.root);
  if (geteuid() == 0) umount2(base, MNT_DETACH);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
  return mbt_report();
}
