/* test_sbx_template.c — the read-only template every sandbox root is layered on
 * (sandboxd/template.c): what it holds and what it never copies from the host, and tpl_rm_tree's
 * removal that follows no symlink and needs few descriptors at any depth. Links no HTTP code. */
#include "mbtest.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "template.h"

static char state[256];

static char *slurp(const char *dir, const char *rel) {
  char p[4600];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  FILE *f = fopen(p, "r");
  if (!f) return NULL;
  static char buf[65536];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

static mode_t mode_of(const char *dir, const char *rel, bool *is_link) {
  char p[4600];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  struct stat st;
  if (lstat(p, &st) != 0) return 0;
  if (is_link) *is_link = S_ISLNK(st.st_mode);
  return st.st_mode;
}

static void test_contents(void) {
  tpl_info t;
  char err[512];
  uid_t u = geteuid();
  gid_t g = getegid();
  CHECK_INT(tpl_ensure(state, u, g, u, g, "169.254.1.1", &t, err, sizeof err), 0);
  char want_root[600];
  snprintf(want_root, sizeof want_root, "%s/template/root", state);
  CHECK_STR(t.root, want_root);
  /* accounts */
  char *pw = slurp(t.root, "etc/passwd");
  CHECK_HAS(pw, "root:x:0:0:");
  CHECK_HAS(pw, "user:x:1000:1000:");
  CHECK_HAS(pw, "/home/user");
  CHECK_HAS(slurp(t.root, "etc/group"), "user:x:1000:");
  /* DNS: pasta's forwarder, never the host's resolver (which may be a loopback address) */
  char *rc = slurp(t.root, "etc/resolv.conf");
  CHECK_HAS(rc, "nameserver 169.254.1.1\n");
  int servers = 0;
  for (const char *q = rc; (q = strstr(q, "nameserver")); q++) servers++;
  CHECK_INT(servers, 1);
  /* what is never copied */
  static const char *const never[] = {"etc/shadow", "etc/gshadow", "etc/sudoers.d/README", "etc/ssh", "etc/profile.d",
                                      "etc/pam.d/su", "etc/pam.d/common-auth", "etc/pam.d/other",
                                      "etc/pip.conf", "etc/npmrc", "etc/gitconfig", "root/.bashrc", NULL};
  for (size_t i = 0; never[i]; i++)
    if (!mbt_check(mode_of(t.root, never[i], NULL) == 0, __FILE__, __LINE__, "not in the template"))
      fprintf(stderr, "     %s is in the template\n", never[i]);
  /* sudo as in E2B's base template: sandboxd's own sudoers (root's, 0440) and PAM service, never the host's */
  char *sudoers = slurp(t.root, "etc/sudoers");
  CHECK_HAS(sudoers, "\nuser ALL=(ALL:ALL) NOPASSWD: ALL\n");
  CHECK_HAS(sudoers, "# sandboxd:");
  CHECK_INT(mode_of(t.root, "etc/sudoers", NULL) & 07777, 0440);
  CHECK_HAS(slurp(t.root, "etc/pam.d/sudo"), "account  sufficient pam_permit.so\n");
  CHECK_HAS(slurp(t.root, "etc/group"), "sudo:x:27:user\n");
  /* the mount points and homes */
  CHECK_INT(mode_of(t.root, "tmp", NULL) & 07777, 01777);
  CHECK_INT(mode_of(t.root, "var/tmp", NULL) & 07777, 01777);
  CHECK_INT(mode_of(t.root, "root", NULL) & 07777, 0700);
  CHECK_INT(mode_of(t.root, "home/user", NULL) & 07777, 0755);
  for (const char *d = "proc\0dev\0sys\0etc\0"; *d; d += strlen(d) + 1) CHECK(S_ISDIR(mode_of(t.root, d, NULL)));
  /* the host's system directories: merged-/usr symlinks copied, real directories listed for their
   * own overlays (and made as empty mount points) */
  bool usr_listed = false;
  for (int i = 0; i < t.nsys; i++) {
    if (!strcmp(t.sys[i], "usr")) usr_listed = true;
    CHECK(S_ISDIR(mode_of(t.root, t.sys[i], NULL)));
  }
  CHECK(usr_listed);
  bool link = false;
  struct stat hb;
  if (lstat("/bin", &hb) == 0 && S_ISLNK(hb.st_mode)) {
    mode_of(t.root, "bin", &link);
    CHECK(link);
  }
  /* a second call is the same template, not a rebuild */
  tpl_info again;
  CHECK_INT(tpl_ensure(state, u, g, u, g, "169.254.1.1", &again, err, sizeof err), 0);
  CHECK_STR(again.root, t.root);
  CHECK_INT(again.nsys, t.nsys);
}

static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  for (struct dirent *de; d && (de = readdir(d));) n += de->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static void test_rm_tree(void) {
  char top[600], outside[600], p[8192];
  snprintf(top, sizeof top, "%s/deep", state);
  snprintf(outside, sizeof outside, "%s/keep", state);
  CHECK_INT(mkdir(top, 0755), 0);
  CHECK_INT(mkdir(outside, 0755), 0);
  snprintf(p, sizeof p, "%s/precious", outside);
  FILE *f = fopen(p, "w");
  fputs("keep me", f);
  fclose(f);
  /* 3000 levels (deeper than any path a process can name at once), each with a file, a symlink
   * to the directory outside and one into it */
  int dfd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (int i = 0; i < 3000 && dfd >= 0; i++) {
    int ffd = openat(dfd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (ffd >= 0) close(ffd);
    (void)symlinkat(outside, dfd, "out");
    (void)symlinkat("../../../../../../../../..", dfd, "up");
    if (mkdirat(dfd, "d", 0755) != 0) break;
    int nfd = openat(dfd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(dfd);
    dfd = nfd;
  }
  if (dfd >= 0) close(dfd);
  /* a directory we may not read or enter (as root this changes nothing; otherwise it checks that
   * removal makes it so) */
  snprintf(p, sizeof p, "%s/locked", top);
  CHECK_INT(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/locked/inner", top);
  CHECK_INT(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/locked", top);
  chmod(p, 0);
  struct rlimit old, few = {.rlim_cur = 32, .rlim_max = 0};
  getrlimit(RLIMIT_NOFILE, &old);
  few.rlim_max = old.rlim_max;
  int before = open_fds();
  setrlimit(RLIMIT_NOFILE, &few);                  /* constant descriptors: a small limit suffices */
  int rc = tpl_rm_tree(top);
  int e = errno;
  setrlimit(RLIMIT_NOFILE, &old);
  if (!mbt_check(rc == 0, __FILE__, __LINE__, "tpl_rm_tree")) fprintf(stderr, "     %s\n", strerror(e));
  struct stat st;
  CHECK(lstat(top, &st) != 0 && errno == ENOENT);
  snprintf(p, sizeof p, "%s/precious", outside);
  CHECK_STR(slurp(outside, "precious"), "keep me");   /* no symlink was followed */
  CHECK_INT(open_fds(), before);                       /* and nothing leaked */
  CHECK_INT(tpl_rm_tree(top), 0);                      /* a missing tree is no error */
}

int main(void) {
  snprintf(state, sizeof state, "/tmp/sbx-template-XXXXXX");
  if (!mkdtemp(state)) { perror("mkdtemp"); return 2; }
  MBT_RUN(test_contents);
  MBT_RUN(test_rm_tree);
  char tpl[600];
  snprintf(tpl, sizeof tpl, "%s/template", state);
  CHECK_INT(tpl_rm_tree(tpl), 0);
  char keep[600];
  snprintf(keep, sizeof keep, "%s/keep", state);
  CHECK_INT(tpl_rm_tree(keep), 0);
  CHECK_INT(rmdir(state), 0);
  return mbt_report();
}
