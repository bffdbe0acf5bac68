/* egress_trust.c — see egress_trust.h. */
#include "egress_trust.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define MARK "# sandboxd egress CA (the proxy that sets this sandbox's header rules)\n"

const char *const egress_trust_env[] = {"NODE_EXTRA_CA_CERTS=" EGRESS_TRUST_CA_FILE,
                                        "REQUESTS_CA_BUNDLE=" EGRESS_TRUST_BUNDLE, NULL};

static int fail(char *err, size_t errlen, const char *path, int e) {
  snprintf(err, errlen, "trusting the egress CA: %s: %s", path, strerror(e));
  return -1;
}

/* data as the new content of abs (a temporary file in its directory, renamed over it). */
static int replace(const fs_ctx *c, const char *abs, const char *data, size_t len, char *err, size_t errlen) {
  char dir[PATHS_MAX], name[256], tmp[300];
  snprintf(dir, sizeof dir, "%s", abs);
  *strrchr(dir, '/') = 0;
  bool made;
  int rc = paths_mkdir_p(c, dir, &made, NULL);
  if (rc < 0) return fail(err, errlen, dir, -rc);
  int dfd = paths_open_parent(c, abs, name, sizeof name);
  if (dfd < 0) return fail(err, errlen, abs, -dfd);
  unsigned r = 0;
  (void)getrandom(&r, sizeof r, 0);
  snprintf(tmp, sizeof tmp, ".%s.sandboxd-%08x", name, r);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  int e = errno;
  size_t off = 0;
  while (fd >= 0 && off < len) {
    ssize_t n = write(fd, data + off, len - off);
    if (n <= 0) { e = n < 0 ? errno : EIO; break; }
    off += (size_t)n;
  }
  bool ok = fd >= 0 && off == len;
  if (fd >= 0 && close(fd) != 0 && ok) { ok = false; e = errno; }
  if (ok && renameat(dfd, tmp, dfd, name) != 0) { ok = false; e = errno; }
  if (!ok && fd >= 0) unlinkat(dfd, tmp, 0);
  close(dfd);
  return ok ? 0 : fail(err, errlen, abs, e);
}

/* The template's bundle (without an earlier sandbox's CA), then pem. NULL + errno. */
static char *bundle_with(const fs_ctx *c, const char *pem, size_t *len) {
  char fsname[32];
  int fd = paths_open_file(c, EGRESS_TRUST_BUNDLE, O_RDONLY, fsname, sizeof fsname);
  size_t cap = 1 << 16, n = 0, plen = strlen(pem), mlen = strlen(MARK);
  char *b = malloc(cap);
  while (b && fd >= 0) {
    if (n + 1 == cap) {
      if (cap >= EGRESS_TRUST_BUNDLE_MAX) { free(b); b = NULL; errno = EFBIG; break; }
      char *nb = realloc(b, cap * 2);
      if (!nb) { free(b); b = NULL; break; }
      b = nb;
      cap *= 2;
    }
    ssize_t k = read(fd, b + n, cap - 1 - n);
    if (k < 0) { free(b); b = NULL; break; }
    if (k == 0) break;
    n += (size_t)k;
  }
  if (fd >= 0) close(fd);
  if (!b) return NULL;
  b[n] = 0;
  char *old = strstr(b, MARK);           /* an earlier CA: it and its certificate go */
  if (old) {
    char *end = strstr(old, "-----END CERTIFICATE-----");
    end = end ? end + strlen("-----END CERTIFICATE-----") : b + n;
    if (*end == '\n') end++;
    memmove(old, end, (size_t)(b + n - end) + 1);
    n -= (size_t)(end - old);
  }
  char *nb = realloc(b, n + 1 + mlen + plen + 1);
  if (!nb) { free(b); return NULL; }
  b = nb;
  if (n && b[n - 1] != '\n') b[n++] = '\n';
  memcpy(b + n, MARK, mlen);
  memcpy(b + n + mlen, pem, plen + 1);
  *len = n + mlen + plen;
  return b;
}

int egress_trust_install(const fs_ctx *root, const char *pem, char *err, size_t errlen) {
  paths_cred save;
  paths_cred_enter(root, &save);
  int rc = replace(root, EGRESS_TRUST_CA_FILE, pem, strlen(pem), err, errlen);
  size_t len = 0;
  char *bundle = rc == 0 ? bundle_with(root, pem, &len) : NULL;
  if (rc == 0 && !bundle) rc = fail(err, errlen, EGRESS_TRUST_BUNDLE, errno);
  if (rc == 0) rc = replace(root, EGRESS_TRUST_BUNDLE, bundle, len, err, errlen);
  free(bundle);
  paths_cred_leave(&save);
  return rc;
}
