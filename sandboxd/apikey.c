/* apikey.c — see apikey.h. */
#include "apikey.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

bool apikey_valid(const char *k) {
  if (strncmp(k, "e2b_", 4) != 0 || !k[4]) return false;
  for (const char *p = k + 4; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return strlen(k) < APIKEY_MAX;
}

/* One line from fd: read until its first newline or its end (a starter may keep a pipe's write
 * end open after the key). The key's text never goes into a message. 0 or -1. */
static int read_line(int fd, const char *what, char *key, size_t len, char *err, size_t errlen) {
  char buf[APIKEY_READ_MAX + 1];
  size_t n = 0;
  while (n < sizeof buf && !memchr(buf, '\n', n)) {
    ssize_t r = read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) { snprintf(err, errlen, "%s: cannot be read: %s", what, strerror(errno)); return -1; }
    if (r == 0) break;
    n += (size_t)r;
  }
  char *nl = memchr(buf, '\n', n);
  if (!nl && n > APIKEY_READ_MAX) { snprintf(err, errlen, "%s: holds more than %d bytes", what, APIKEY_READ_MAX); return -1; }
  size_t line = nl ? (size_t)(nl - buf) : n;
  if (nl && (size_t)(nl - buf) + 1 < n) { snprintf(err, errlen, "%s: holds more than one line", what); return -1; }
  if (line && buf[line - 1] == '\r') line--;
  buf[line] = '\0';
  if (memchr(buf, '\0', line) || !apikey_valid(buf) || line >= len) {
    snprintf(err, errlen, "%s: %s", what, line ? "does not hold a valid key (e2b_ and lowercase hex, one line)" : "is empty");
    return -1;
  }
  memcpy(key, buf, line + 1);
  memset(buf, 0, sizeof buf);
  return 0;
}

int apikey_from_file(const char *path, char *key, size_t len, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return -1; }
  struct stat st;
  const char *why = NULL;
  if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) why = "is not a regular file or a pipe";
  else if (st.st_uid != geteuid() && st.st_uid != 0) why = "is owned by another user (it must be sandboxd's user's or root's)";
  if (why) {
    snprintf(err, errlen, "%s: %s", path, why);
    close(fd);
    return -1;
  }
  if (st.st_mode & 077) {
    /* Anyone who can read the key can drive sandboxd (and whoever can write it can choose it). */
    snprintf(err, errlen, "%s: group or others may access it (mode %04o); a key file must be private to its owner: "
             "chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
    close(fd);
    return -1;
  }
  int rc = read_line(fd, path, key, len, err, errlen);
  close(fd);
  return rc;
}

int apikey_from_fd(int fd, char *key, size_t len, char *err, size_t errlen) {
  char what[48];
  snprintf(what, sizeof what, "descriptor %d", fd);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) { snprintf(err, errlen, "%s: %s", what, fd < 0 ? "invalid" : strerror(errno)); return -1; }
  int rc = read_line(fd, what, key, len, err, errlen);
  /* Read once and gone: nothing sandboxd starts inherits it. Stdio stays open (on /dev/null). */
  int nul = fd <= 2 ? open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
  if (nul >= 0) { dup2(nul, fd); close(nul); }
  else close(fd);
  return rc;
}

int apikey_load_or_make(const char *state_dir, char *key, size_t len, bool *made, char *err, size_t errlen) {
  char path[4200];
  *made = false;
  if (snprintf(path, sizeof path, "%s/api-key", state_dir) >= (int)sizeof path) {
    snprintf(err, errlen, "%s: the state directory's path is too long", state_dir);
    return -1;
  }
  if (access(path, F_OK) == 0 || errno != ENOENT) {
    if (apikey_from_file(path, key, len, err, errlen) == 0) return 0;
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, " (remove it to get a new key)");
    return -1;
  }
  unsigned char rnd[20];
  if (len < 4 + 2 * sizeof rnd + 1) { snprintf(err, errlen, "cannot make a key: no room for it"); return -1; }
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    snprintf(err, errlen, "cannot make a key: getrandom: %s", strerror(errno));
    return -1;
  }
  int n = snprintf(key, len, "e2b_");
  for (size_t i = 0; i < sizeof rnd; i++) n += snprintf(key + n, len - (size_t)n, "%02x", rnd[i]);
  memset(rnd, 0, sizeof rnd);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  size_t kl = strlen(key);
  if (fd < 0 || write(fd, key, kl) != (ssize_t)kl || write(fd, "\n", 1) != 1) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    if (fd >= 0) { close(fd); unlink(path); }
    return -1;
  }
  close(fd);
  *made = true;
  return 0;
}
