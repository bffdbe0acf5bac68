/* statefile.c — sandboxd's state files, read whole and written atomically (see statefile.h). */
#include "statefile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errbuf.h"

int statefile_load(const char *path, json_t **root, char *err, size_t errlen) {
  *root = NULL;
  if (access(path, F_OK) != 0 && errno == ENOENT) return 0;
  json_error_t je;
  if (!(*root = json_load_file(path, JSON_REJECT_DUPLICATES, &je)))
    return je.line > 0 ? seterr(err, errlen, "%s: %s (line %d, column %d)", path, je.text, je.line, je.column)
                       : seterr(err, errlen, "%s: %s", path, je.text);   /* not opened or not read */
  return 0;
}

json_t *statefile_v1_array(const json_t *root, const char *key) {
  json_t *arr = json_object_get(root, key), *v = json_object_get(root, "version");
  return json_is_integer(v) && json_integer_value(v) == 1 && json_is_array(arr) ? arr : NULL;
}

int statefile_sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

int statefile_write(const char *path, const char *text, char *err, size_t errlen) {
  char tmp[4300];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return seterr(err, errlen, "%s: path too long", path);
  (void)unlink(tmp);   /* O_EXCL below: a file made now, by us */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return seterr(err, errlen, "writing %s: %s", tmp, strerror(errno));
  size_t len = strlen(text), off = 0;
  int rc = 0;
  if (fchmod(fd, 0600) != 0) rc = seterr(err, errlen, "chmod %s: %s", tmp, strerror(errno));   /* whatever the umask */
  while (!rc && off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) rc = seterr(err, errlen, "writing %s: %s", tmp, w < 0 ? strerror(errno) : "no progress");
    else off += (size_t)w;
  }
  if (!rc && fsync(fd) != 0) rc = seterr(err, errlen, "fsync %s: %s", tmp, strerror(errno));
  if (close(fd) != 0 && !rc) rc = seterr(err, errlen, "writing %s: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, path) != 0) rc = seterr(err, errlen, "rename %s: %s", path, strerror(errno));
  if (rc) { unlink(tmp); return rc; }
  /* The rename reaches the disk with its directory. The new file is in place by now: a directory
   * that cannot be synced is said, not reported as a failed write (the caller would undo in
   * memory what the file already says); EINVAL: a file system without directory fsync. */
  char dir[4300];
  snprintf(dir, sizeof dir, "%s", path);
  if (statefile_sync_dir(dirname(dir)) != 0 && errno != EINVAL)
    fprintf(stderr, "sandboxd: %s written, but its directory not synced: %s\n", path, strerror(errno));
  return 0;
}

int statefile_save(const char *path, const json_t *root, size_t flags, char *err, size_t errlen) {
  char *text = json_dumps(root, flags);
  if (!text) return seterr(err, errlen, "writing %s: out of memory", path);
  int rc = statefile_write(path, text, err, errlen);
  free(text);
  return rc;
}
