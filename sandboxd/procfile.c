/* procfile — see procfile.h. */
#include "procfile.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int procfile_read(const char *path, char *buf, size_t cap) {
  if (cap == 0) { errno = EINVAL; return -1; }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, cap - 1);
  int e = errno;
  close(fd);
  if (n < 0) { errno = e; return -1; }
  buf[n] = 0;
  return 0;
}

int procfile_write(const char *path, const char *s) { return procfile_put(path, O_WRONLY, 0, s); }

int procfile_put(const char *path, int oflags, mode_t mode, const char *s) {
  int fd = open(path, oflags | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  size_t len = strlen(s);
  ssize_t w = write(fd, s, len);
  int e = errno;
  close(fd);
  if (w != (ssize_t)len) { errno = w < 0 ? e : EIO; return -1; }
  return 0;
}
