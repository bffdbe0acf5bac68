/* template.c — the read-only template below every sandbox root, and a depth-safe tree removal. */
#include "template.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errbuf.h"

#define TPL_COPY_MAX_FILE (8u << 20)   /* /etc files are small; ld.so.cache is the largest */
#define TPL_COPY_MAX_DEPTH 8

static pthread_mutex_t tpl_mu = PTHREAD_MUTEX_INITIALIZER;
static int tpl_ready;
static tpl_info tpl_cached;

int tpl_rm_tree(const char *path) {
  struct stat rootst, st;
  if (lstat(path, &rootst) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(rootst.st_mode)) return unlink(path);
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  /* Iterative: descend into the first non-empty subdirectory, climb back with "..", rescan.
   * One directory fd at a time, so a hostile depth cannot exhaust fds or the stack. */
  for (;;) {
    (void)fchmod(fd, 0700);   /* unprivileged runs: the overlay work dir is mode 000 */
    int dfd = dup(fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) { if (dfd >= 0) close(dfd); close(fd); return -1; }
    int descended = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      const char *n = de->d_name;
      if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
      if (fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        goto fail;
      }
      if (S_ISDIR(st.st_mode)) {
        if (st.st_dev != rootst.st_dev) { errno = EXDEV; goto fail; }   /* never cross a mount */
        if (unlinkat(fd, n, AT_REMOVEDIR) == 0) continue;
        if (errno != ENOTEMPTY && errno != EEXIST && errno != EACCES && errno != EPERM) goto fail;
        int nfd = openat(fd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == EACCES && fchmodat(fd, n, 0700, 0) == 0)   /* overlay's mode-000 work dir */
          nfd = openat(fd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) goto fail;
        closedir(d);
        close(fd);
        fd = nfd;
        descended = 1;
        break;
      }
      if (unlinkat(fd, n, 0) != 0 && errno != ENOENT) goto fail;
    }
    if (descended) continue;
    closedir(d);
    if (fstat(fd, &st) != 0) { close(fd); return -1; }
    if (st.st_dev == rootst.st_dev && st.st_ino == rootst.st_ino) {
      close(fd);
      return rmdir(path);
    }
    int pfd = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    if (pfd < 0) return -1;
    fd = pfd;
    continue;
  fail: {
      int e = errno;
      closedir(d);
      close(fd);
      errno = e;
      return -1;
    }
  }
}

static int write_file(int dirfd, const char *name, const char *content, mode_t mode, uid_t u, gid_t g) {
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  size_t len = strlen(content), off = 0;
  while (off < len) {
    ssize_t w = write(fd, content + off, len - off);
    if (w < 0) { if (errno == EINTR) continue; close(fd); return -1; }
    off += (size_t)w;
  }
  if (fchown(fd, u, g) != 0 && errno != EPERM) { close(fd); return -1; }
  return close(fd);
}

static int mkdir_own(int dirfd, const char *name, mode_t mode, uid_t u, gid_t g) {
  if (mkdirat(dirfd, name, mode) != 0 && errno != EEXIST) return -1;
  if (fchmodat(dirfd, name, mode, 0) != 0) return -1;   /* umask would drop the sticky bit's peers */
  if (fchownat(dirfd, name, u, g, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) return -1;
  return 0;
}

/* Copy a small host /etc entry (file, symlink or directory) without following symlinks. */
static int copy_entry(int sdir, const char *name, int ddir, uid_t u, gid_t g, int depth) {
  struct stat st;
  if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = readlinkat(sdir, name, target, sizeof target - 1);
    if (n < 0) return -1;
    target[n] = 0;
    if (symlinkat(target, ddir, name) != 0 && errno != EEXIST) return -1;
    if (fchownat(ddir, name, u, g, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) return -1;
    return 0;
  }
  if (S_ISDIR(st.st_mode)) {
    if (depth >= TPL_COPY_MAX_DEPTH) return 0;
    if (mkdir_own(ddir, name, st.st_mode & 0755, u, g) != 0) return -1;
    int s2 = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s2 < 0) return errno == EACCES ? 0 : -1;
    int d2 = openat(ddir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int s3 = d2 >= 0 ? dup(s2) : -1;
    DIR *d = s3 >= 0 ? fdopendir(s3) : NULL;
    if (!d) { if (s3 >= 0) close(s3); close(s2); if (d2 >= 0) close(d2); return -1; }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      rc = copy_entry(s2, de->d_name, d2, u, g, depth + 1);
    }
    closedir(d);
    close(s2);
    close(d2);
    return rc;
  }
  if (!S_ISREG(st.st_mode) || (size_t)st.st_size > TPL_COPY_MAX_FILE) return 0;
  int in = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return errno == EACCES ? 0 : -1;
  int out = openat(ddir, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0755);
  if (out < 0) { close(in); return -1; }
  char buf[65536];
  int rc = 0;
  for (;;) {
    ssize_t r = read(in, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) { rc = r < 0 ? -1 : 0; break; }
    for (ssize_t off = 0; off < r;) {
      ssize_t w = write(out, buf + off, (size_t)(r - off));
      if (w < 0) { if (errno == EINTR) continue; rc = -1; break; }
      off += w;
    }
    if (rc) break;
  }
  if (rc == 0 && fchown(out, u, g) != 0 && errno != EPERM) rc = -1;
  close(in);
  if (close(out) != 0) rc = -1;
  return rc;
}

static const char PASSWD[] =
    "root:x:0:0:root:/root:/bin/bash\n"
    "user:x:1000:1000::/home/user:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char GROUP[] =
    "root:x:0:\n"
    "tty:x:5:\n"
    "sudo:x:27:user\n"
    "user:x:1000:\n"
    "nogroup:x:65534:\n";
static const char HOSTS[] =
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n";
/* As in E2B's base template: `user` runs anything as root without a password. */
static const char SUDOERS[] =
    "# sandboxd: as in E2B's base template, user may run anything as root without a password\n"
    "Defaults env_reset\n"
    "Defaults secure_path=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\n"
    "root ALL=(ALL:ALL) ALL\n"
    "user ALL=(ALL:ALL) NOPASSWD: ALL\n"
    "@includedir /etc/sudoers.d\n";
/* sudo's PAM service: a sandbox has no passwords (no /etc/shadow); sudoers alone decides. Other
 * services (su, login) have no file and so are denied. */
static const char PAM_SUDO[] =
    "# sandboxd: no passwords inside a sandbox; /etc/sudoers decides who may do what\n"
    "auth     sufficient pam_permit.so\n"
    "account  sufficient pam_permit.so\n"
    "session  sufficient pam_permit.so\n";
static const char NSSWITCH[] =
    "passwd: files\n"
    "group: files\n"
    "shadow: files\n"
    "hosts: files dns\n"
    "networks: files\n"
    "protocols: files\n"
    "services: files\n";

/* Host /etc entries that are public system configuration (never credentials or tool configs that
 * may hold tokens: no pip.conf, npmrc, gitconfig, ssh, shadow, profile.d). */
static const char *const ETC_COPY[] = {
    "alternatives", "bash.bashrc", "ca-certificates.conf", "debian_version", "gai.conf",
    "host.conf", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias",
    "localtime", "login.defs", "magic", "mime.types", "networks", "os-release", "profile",
    "protocols", "services", "shells", "ssl", "timezone", NULL};

/* <dir>/bare/root: what a base image's layer lies on. The image's own directories and files win
 * where it has them (image.c removes its resolv.conf and hosts: these are the sandbox's). */
static int build_bare(const char *dir, uid_t u, gid_t g, uid_t uu, gid_t ug, const char *resolv, char *err, size_t errlen) {
  char root[4300];
  snprintf(root, sizeof root, "%s/bare", dir);
  if (mkdir(root, 0755) != 0) { seterr(err, errlen, "template: mkdir %s: %s", root, strerror(errno)); return -1; }
  snprintf(root, sizeof root, "%s/bare/root", dir);
  if (mkdir(root, 0755) != 0) { seterr(err, errlen, "template: mkdir %s: %s", root, strerror(errno)); return -1; }
  int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), efd = -1;
  int rc = rfd < 0 || (fchown(rfd, u, g) != 0 && errno != EPERM) ? -1 : 0;
  static const struct { const char *name; mode_t mode; } dirs[] = {
      {"etc", 0755}, {"proc", 0555}, {"dev", 0755}, {"sys", 0555}, {"tmp", 01777}, {"home", 0755}, {"root", 0700}, {"run", 0755}};
  for (size_t i = 0; rc == 0 && i < sizeof dirs / sizeof dirs[0]; i++) rc = mkdir_own(rfd, dirs[i].name, dirs[i].mode, u, g);
  if (rc == 0) rc = mkdir_own(rfd, "home/user", 0755, uu, ug);
  if (rc == 0 && (efd = openat(rfd, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) rc = -1;
  if (rc == 0) rc = write_file(efd, "resolv.conf", resolv, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "hosts", HOSTS, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "passwd", PASSWD, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "group", GROUP, 0644, u, g);
  if (rc != 0) seterr(err, errlen, "template: building %s: %s", root, strerror(errno));
  if (efd >= 0) close(efd);
  if (rfd >= 0) close(rfd);
  return rc;
}

static int build(const char *dir, uid_t u, gid_t g, uid_t uu, gid_t ug, const char *nameserver, tpl_info *info,
                 char *err, size_t errlen) {
  char root[4200];
  snprintf(root, sizeof root, "%s/root", dir);
  if (mkdir(dir, 0755) != 0 || mkdir(root, 0755) != 0) {
    seterr(err, errlen, "template: mkdir %s: %s", root, strerror(errno));
    return -1;
  }
  int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) { seterr(err, errlen, "template: open %s: %s", root, strerror(errno)); return -1; }
  if (fchown(rfd, u, g) != 0 && errno != EPERM) goto fail;
  static const struct { const char *name; mode_t mode; } dirs[] = {
      {"etc", 0755}, {"proc", 0555}, {"dev", 0755}, {"sys", 0555}, {"tmp", 01777}, {"home", 0755},
      {"root", 0700}, {"run", 0755}, {"var", 0755}, {"var/tmp", 01777}, {"mnt", 0755},
      {"opt", 0755}, {"srv", 0755}};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
    if (mkdir_own(rfd, dirs[i].name, dirs[i].mode, u, g) != 0) goto fail;
  if (mkdir_own(rfd, "home/user", 0755, uu, ug) != 0) goto fail;
  info->nsys = 0;
  static const char *const sys[] = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};
  for (size_t i = 0; i < sizeof sys / sizeof sys[0]; i++) {
    char hp[64], target[4096];
    struct stat st;
    snprintf(hp, sizeof hp, "/%s", sys[i]);
    if (lstat(hp, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {   /* merged /usr: /bin -> usr/bin */
      ssize_t n = readlink(hp, target, sizeof target - 1);
      if (n < 0) goto fail;
      target[n] = 0;
      if (symlinkat(target, rfd, sys[i]) != 0) goto fail;
      if (fchownat(rfd, sys[i], u, g, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) goto fail;
    } else if (S_ISDIR(st.st_mode) && info->nsys < TPL_MAX_SYSDIRS) {
      if (mkdir_own(rfd, sys[i], 0755, u, g) != 0) goto fail;
      snprintf(info->sys[info->nsys++], sizeof info->sys[0], "%s", sys[i]);
    }
  }
  int efd = openat(rfd, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (efd < 0) goto fail;
  int hfd = open("/etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = hfd < 0 ? -1 : 0;
  for (size_t i = 0; rc == 0 && ETC_COPY[i]; i++) rc = copy_entry(hfd, ETC_COPY[i], efd, u, g, 0);
  /* Not the host's resolv.conf: its resolver may be a loopback address, which inside the sandbox's
   * own network namespace is the sandbox itself. */
  char resolv[256];
  snprintf(resolv, sizeof resolv, "# sandboxd: queries go to sandboxd's DNS forwarder (its egress rules decide what it answers)\nnameserver %s\n", nameserver);
  if (rc == 0) rc = write_file(efd, "resolv.conf", resolv, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "passwd", PASSWD, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "group", GROUP, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "hosts", HOSTS, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "nsswitch.conf", NSSWITCH, 0644, u, g);
  if (rc == 0) rc = write_file(efd, "sudoers", SUDOERS, 0440, u, g);
  if (rc == 0) rc = mkdir_own(efd, "sudoers.d", 0755, u, g);
  if (rc == 0) rc = mkdir_own(efd, "pam.d", 0755, u, g);
  if (rc == 0) {
    int pfd = openat(efd, "pam.d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    rc = pfd < 0 ? -1 : write_file(pfd, "sudo", PAM_SUDO, 0644, u, g);
    if (rc == 0) rc = write_file(pfd, "sudo-i", PAM_SUDO, 0644, u, g);
    if (pfd >= 0) close(pfd);
  }
  if (hfd >= 0) close(hfd);
  close(efd);
  if (rc != 0) goto fail;
  close(rfd);
  if (snprintf(info->root, sizeof info->root, "%s", root) >= (int)sizeof info->root) { errno = ENAMETOOLONG; goto fail; }
  return build_bare(dir, u, g, uu, ug, resolv, err, errlen);
fail:
  seterr(err, errlen, "template: building %s: %s", root, strerror(errno));
  close(rfd);
  return -1;
}

int tpl_ensure(const char *state_dir, uid_t owner, gid_t owner_gid, uid_t user_owner, gid_t user_gid,
               const char *nameserver, tpl_info *out, char *err, size_t errlen) {
  pthread_mutex_lock(&tpl_mu);
  if (!tpl_ready && mkdir(state_dir, 0755) != 0 && errno != EEXIST) {
    seterr(err, errlen, "template: mkdir %s: %s", state_dir, strerror(errno));
    pthread_mutex_unlock(&tpl_mu);
    return -1;
  }
  if (tpl_ready) {
    *out = tpl_cached;
    pthread_mutex_unlock(&tpl_mu);
    return 0;
  }
  /* Rebuilt once per sandboxd process so its ownership always matches this run's id mapping. */
  char dir[4096], tmp[4096];
  int n1 = snprintf(dir, sizeof dir, "%s/template", state_dir);
  int n2 = snprintf(tmp, sizeof tmp, "%s/template.tmp%ld", state_dir, (long)getpid());
  int rc = -1;
  if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof tmp - 200) {
    seterr(err, errlen, "template: state dir path too long");
    goto out;
  }
  if (tpl_rm_tree(tmp) != 0 || tpl_rm_tree(dir) != 0) {
    seterr(err, errlen, "template: removing old %s: %s", dir, strerror(errno));
    goto out;
  }
  tpl_info info;
  memset(&info, 0, sizeof info);
  if (build(tmp, owner, owner_gid, user_owner, user_gid, nameserver, &info, err, errlen) != 0) {
    (void)tpl_rm_tree(tmp);
    goto out;
  }
  if (rename(tmp, dir) != 0) {
    seterr(err, errlen, "template: rename %s: %s", tmp, strerror(errno));
    (void)tpl_rm_tree(tmp);
    goto out;
  }
  if (snprintf(info.root, sizeof info.root, "%s/root", dir) >= (int)sizeof info.root ||
      snprintf(info.bare, sizeof info.bare, "%s/bare/root", dir) >= (int)sizeof info.bare) {
    seterr(err, errlen, "template: state dir path too long");
    (void)tpl_rm_tree(dir);
    goto out;
  }
  tpl_cached = info;
  tpl_ready = 1;
  *out = info;
  rc = 0;
out:
  pthread_mutex_unlock(&tpl_mu);
  return rc;
}
