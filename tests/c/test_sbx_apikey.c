/* test_sbx_apikey.c — where sandboxd's API key comes from (sandboxd/apikey.c): a private file,
 * a descriptor read once and closed, or the state directory's key; every refusal says why and
 * never repeats the file's text. Links no HTTP code. */
#include "mbtest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apikey.h"

#define KEY "e2b_0123456789abcdef0123456789abcdef01234567"

static char dir[64];

static void put(const char *name, const char *text, mode_t mode) {
  char p[128];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  unlink(p);
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) { perror(p); exit(2); }
  close(fd);
  if (chmod(p, mode) != 0) { perror(p); exit(2); }
}

static int from(const char *name, char *key, char *err) {
  char p[128];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  key[0] = '\0';
  return apikey_from_file(p, key, APIKEY_MAX + 1, err, 512);
}

static void test_valid(void) {
  CHECK(apikey_valid(KEY));
  CHECK(apikey_valid("e2b_0"));
  CHECK(!apikey_valid("e2b_"));
  CHECK(!apikey_valid("e2b_ABCDEF"));          /* the SDK rejects upper case */
  CHECK(!apikey_valid("x2b_abc"));
  CHECK(!apikey_valid("e2b_abc def"));
  char long_key[APIKEY_MAX + 8] = "e2b_";
  memset(long_key + 4, 'a', APIKEY_MAX);
  long_key[APIKEY_MAX + 4] = '\0';
  CHECK(!apikey_valid(long_key));
}

static void test_file(void) {
  char key[APIKEY_MAX + 1], err[512];
  put("k", KEY "\n", 0600);
  CHECK_INT(from("k", key, err), 0);
  CHECK_STR(key, KEY);
  put("k", KEY, 0400);                           /* no final newline, read-only */
  CHECK_INT(from("k", key, err), 0);
  CHECK_STR(key, KEY);
  put("k", KEY "\r\n", 0600);
  CHECK_INT(from("k", key, err), 0);
  CHECK_STR(key, KEY);
  /* others or the group may read or write it: refused, saying how to fix it */
  static const mode_t open_modes[] = {0644, 0640, 0604, 0602, 0620, 0610, 0601};
  for (size_t i = 0; i < sizeof open_modes / sizeof open_modes[0]; i++) {
    put("k", KEY "\n", open_modes[i]);
    CHECK_INT(from("k", key, err), -1);
    CHECK_HAS(err, "group or others may access it");
    CHECK_HAS(err, "chmod 600");
    CHECK(!strstr(err, KEY));
  }
  /* what it holds */
  put("k", "", 0600);
  CHECK_INT(from("k", key, err), -1);
  CHECK_HAS(err, "is empty");
  put("k", "e2b_XYZ-secret\n", 0600);
  CHECK_INT(from("k", key, err), -1);
  CHECK_HAS(err, "does not hold a valid key");
  CHECK(!strstr(err, "XYZ-secret"));             /* a wrong key is still somebody's secret */
  put("k", KEY "\n" KEY "\n", 0600);
  CHECK_INT(from("k", key, err), -1);
  CHECK_HAS(err, "more than one line");
  char big[APIKEY_READ_MAX + 64];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  put("k", big, 0600);
  CHECK_INT(from("k", key, err), -1);
  CHECK_HAS(err, "more than 256 bytes");
  /* not a file */
  CHECK_INT(from("missing", key, err), -1);
  CHECK_HAS(err, "No such file");
  char sub[128];
  snprintf(sub, sizeof sub, "%s/d", dir);
  mkdir(sub, 0700);
  CHECK_INT(from("d", key, err), -1);
  CHECK_HAS(err, "not a regular file or a pipe");
  rmdir(sub);
  /* owned by another user (only checkable as root: chown) */
  if (geteuid() == 0) {
    put("k", KEY "\n", 0600);
    char p[128];
    snprintf(p, sizeof p, "%s/k", dir);
    CHECK_INT(chown(p, 65534, 65534), 0);
    CHECK_INT(from("k", key, err), -1);
    CHECK_HAS(err, "owned by another user");
  }
  unlink("k");
}

static void test_fd(void) {
  char key[APIKEY_MAX + 1], err[512];
  int p[2];
  /* a pipe whose writer keeps it open: the first line is enough, and the descriptor is closed */
  CHECK_INT(pipe(p), 0);
  CHECK(write(p[1], KEY "\n", strlen(KEY) + 1) == (ssize_t)strlen(KEY) + 1);
  CHECK_INT(apikey_from_fd(p[0], key, sizeof key, err, sizeof err), 0);
  CHECK_STR(key, KEY);
  errno = 0;
  CHECK(fcntl(p[0], F_GETFD) == -1 && errno == EBADF);
  close(p[1]);
  /* to its end, no newline */
  CHECK_INT(pipe(p), 0);
  CHECK(write(p[1], KEY, strlen(KEY)) == (ssize_t)strlen(KEY));
  close(p[1]);
  CHECK_INT(apikey_from_fd(p[0], key, sizeof key, err, sizeof err), 0);
  CHECK_STR(key, KEY);
  CHECK(fcntl(p[0], F_GETFD) == -1);
  /* nothing, a bad key, a bad descriptor */
  CHECK_INT(pipe(p), 0);
  close(p[1]);
  CHECK_INT(apikey_from_fd(p[0], key, sizeof key, err, sizeof err), -1);
  CHECK_HAS(err, "descriptor");
  CHECK_HAS(err, "is empty");
  CHECK_INT(pipe(p), 0);
  CHECK(write(p[1], "nope\n", 5) == 5);
  close(p[1]);
  CHECK_INT(apikey_from_fd(p[0], key, sizeof key, err, sizeof err), -1);
  CHECK_HAS(err, "does not hold a valid key");
  CHECK(!strstr(err, "nope"));
  CHECK_INT(apikey_from_fd(1000, key, sizeof key, err, sizeof err), -1);
  CHECK_HAS(err, "Bad file descriptor");
  /* stdin: read, then /dev/null in its place (stdio stays open) */
  int saved = dup(0);
  CHECK_INT(pipe(p), 0);
  CHECK(write(p[1], KEY "\n", strlen(KEY) + 1) == (ssize_t)strlen(KEY) + 1);
  close(p[1]);
  CHECK_INT(dup2(p[0], 0), 0);
  close(p[0]);
  CHECK_INT(apikey_from_fd(0, key, sizeof key, err, sizeof err), 0);
  CHECK_STR(key, KEY);
  struct stat st, nul;
  CHECK(fstat(0, &st) == 0 && stat("/dev/null", &nul) == 0 && st.st_rdev == nul.st_rdev && S_ISCHR(st.st_mode));
  dup2(saved, 0);
  close(saved);
}

static void test_state_dir(void) {
  char key[APIKEY_MAX + 1], again[APIKEY_MAX + 1], err[512], p[128];
  bool made = false;
  snprintf(p, sizeof p, "%s/api-key", dir);
  unlink(p);
  CHECK_INT(apikey_load_or_make(dir, key, sizeof key, &made, err, sizeof err), 0);
  CHECK(made);
  CHECK(apikey_valid(key));
  CHECK_INT(strlen(key), 44);
  struct stat st;
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK_INT(apikey_load_or_make(dir, again, sizeof again, &made, err, sizeof err), 0);
  CHECK(!made);
  CHECK_STR(again, key);
  /* a kept key others can read is refused like any key file */
  CHECK_INT(chmod(p, 0644), 0);
  CHECK_INT(apikey_load_or_make(dir, again, sizeof again, &made, err, sizeof err), -1);
  CHECK_HAS(err, "chmod 600");
  CHECK_HAS(err, "remove it to get a new key");
  CHECK(!strstr(err, key));
  unlink(p);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/test-apikey-XXXXXX");
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
  umask(022);
  MBT_RUN(test_valid);
  MBT_RUN(test_file);
  MBT_RUN(test_fd);
  MBT_RUN(test_state_dir);
  char p[128];
  snprintf(p, sizeof p, "%s/k", dir);
  unlink(p);
  rmdir(dir);
  return mbt_report();
}
