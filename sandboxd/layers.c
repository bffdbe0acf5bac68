/* layers.c — the layer store (see layers.h). */
#include "layers.h"

#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errbuf.h"
#include "ids.h"
#include "layer_copy.h"
#include "layer_merge.h"
#include "template.h"

struct layer {
  layer *next;                 /* in g.all */
  layer *parent;
  char id[LY_ID_LEN + 1];
  int refs, depth;
  bool image;                  /* its chain's bottom is a base image (ly_adopt_image) */
};

static struct {
  pthread_mutex_t mu;
  char dir[4096];
  layer *all;
  int n;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Overlay's own records of an upper layer's relation to the lower layers of *its* mount (origin
 * file handles, impure directories, index link counts, the upper's uuid): meaningless once the
 * layer is a lower layer of other mounts, so not copied. Whiteouts and opaque directories are. */
static const char *const SKIP_XATTRS[] = {
  "user.overlay.origin", "user.overlay.impure", "user.overlay.nlink", "user.overlay.uuid",
  "trusted.overlay.origin", "trusted.overlay.impure", "trusted.overlay.nlink", "trusted.overlay.uuid", NULL,
};

static bool tmp_name(const char *n) { return !strncmp(n, "tmp-", 4); }

static int remove_dir(const char *name) {
  char p[4400];
  if (snprintf(p, sizeof p, "%s/%s", g.dir, name) >= (int)sizeof p) return -1;
  if (tpl_rm_tree(p) == 0) return 0;
  fprintf(stderr, "sandboxd: layers: removing %s: %s\n", p, strerror(errno));
  return -1;
}

static layer *find_locked(const char *id);

/* Removes unfinished captures, and (unless tmp_only) every layer directory not in memory, in
 * batches: the directory is read again after each, until a pass removes nothing more. */
static int sweep(bool tmp_only) {
  DIR *d = opendir(g.dir);
  if (!d) return 0;
  int removed = 0;
  for (;;) {
    char names[64][64];
    int nn = 0, gone = 0;
    rewinddir(d);
    struct dirent *de;
    pthread_mutex_lock(&g.mu);
    while ((de = readdir(d)) != NULL && nn < 64) {
      const char *n = de->d_name;
      size_t len = strlen(n);
      if (n[0] == '.' || len >= 64) continue;   /* not a name sandboxd makes */
      if (tmp_name(n) || (!tmp_only && !find_locked(n))) memcpy(names[nn++], n, len + 1);
    }
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < nn; i++) gone += remove_dir(names[i]) == 0;
    removed += gone;
    if (nn < 64 || gone == 0) break;
  }
  closedir(d);
  return removed;
}

int ly_init(const char *state_dir, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  int rc = -1;
  if (snprintf(g.dir, sizeof g.dir, "%s/layers", state_dir) >= (int)sizeof g.dir - 64) {
    seterr(err, errlen, "layers: state dir path too long");
    goto out;
  }
  /* Searchable by the sandboxes' root (it mounts layers from here), listable by nobody else. */
  if (mkdir(g.dir, 0711) != 0 && errno != EEXIST) { seterr(err, errlen, "mkdir %s: %s", g.dir, strerror(errno)); goto out; }
  rc = 0;
out:
  pthread_mutex_unlock(&g.mu);
  if (rc == 0) (void)sweep(true);   /* unfinished captures */
  return rc;
}

const char *ly_dir(void) { return g.dir; }
const char *ly_id(const layer *l) { return l->id; }
layer *ly_parent(const layer *l) { return l->parent; }
int ly_depth(const layer *l) { return l->depth; }
bool ly_image_based(const layer *l) { return l->image; }

int ly_count(void) {
  pthread_mutex_lock(&g.mu);
  int n = g.n;
  pthread_mutex_unlock(&g.mu);
  return n;
}

void ly_shutdown(void) {
  pthread_mutex_lock(&g.mu);
  layer *l = g.all;
  g.all = NULL;
  g.n = 0;
  pthread_mutex_unlock(&g.mu);
  while (l) {
    layer *next = l->next;
    free(l);
    l = next;
  }
}

void ly_hold(layer *l) {
  pthread_mutex_lock(&g.mu);
  l->refs++;
  pthread_mutex_unlock(&g.mu);
}

/* A new entry (refs 1) holding `parent`'s reference that the caller passes on; g.mu held. */
static layer *add_locked(const char *id, layer *parent) {
  layer *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  snprintf(l->id, sizeof l->id, "%s", id);
  l->parent = parent;
  l->depth = parent ? parent->depth + 1 : 1;
  l->image = parent && parent->image;
  l->refs = 1;
  l->next = g.all;
  g.all = l;
  g.n++;
  return l;
}

static layer *find_locked(const char *id) {
  for (layer *l = g.all; l; l = l->next)
    if (!strcmp(l->id, id)) return l;
  return NULL;
}

void ly_release(layer *l) {
  /* Down the chain while counts reach zero; directories are removed outside the lock. */
  while (l) {
    pthread_mutex_lock(&g.mu);
    layer *parent = NULL;
    bool gone = --l->refs == 0;
    if (gone) {
      layer **pp = &g.all;
      while (*pp && *pp != l) pp = &(*pp)->next;
      if (*pp) *pp = l->next;
      g.n--;
      parent = l->parent;
    }
    pthread_mutex_unlock(&g.mu);
    if (!gone) return;
    (void)remove_dir(l->id);
    free(l);
    l = parent;
  }
}

/* `<dir>/<id>/parent`: a parent's id and a newline, or empty. */
static int write_parent(int fd, const layer *parent) {
  int f = openat(fd, "parent", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (f < 0) return -1;
  char buf[LY_ID_LEN + 2];
  int n = parent ? snprintf(buf, sizeof buf, "%s\n", parent->id) : 0;
  int rc = (n == 0 || write(f, buf, (size_t)n) == n) ? 0 : -1;
  if (close(f) != 0) rc = -1;
  return rc;
}

/* A new layer directory: tmp-<id> made, fd open on it; -1 with err. */
static int begin_layer(char *id, char *tmp, int *base, int *fd, char *err, size_t errlen) {
  *base = *fd = -1;
  if (ids_random(id, LY_ID_LEN) != 0) { seterr(err, errlen, "getrandom: %s", strerror(errno)); return -1; }
  snprintf(tmp, LY_ID_LEN + 8, "tmp-%s", id);
  *base = open(g.dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*base < 0) { seterr(err, errlen, "open %s: %s", g.dir, strerror(errno)); return -1; }
  if (mkdirat(*base, tmp, 0700) != 0) { seterr(err, errlen, "mkdir %s/%s: %s", g.dir, tmp, strerror(errno)); close(*base); *base = -1; return -1; }
  *fd = openat(*base, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) {
    seterr(err, errlen, "open %s/%s: %s", g.dir, tmp, strerror(errno));
    close(*base);
    *base = -1;
    (void)remove_dir(tmp);
    return -1;
  }
  return 0;
}

/* The layer's trees are in tmp: its parent recorded, owned, synced, renamed to id, and known (a
 * new reference in *out). Either way base and fd are closed and no tmp-<id> is left. */
static int end_layer(int base, int fd, const char *tmp, const char *id, layer *parent, uid_t owner, gid_t group, layer **out,
                     char *err, size_t errlen) {
  bool made = true;
  int rc = -1;
  if (write_parent(fd, parent) != 0) { seterr(err, errlen, "writing %s/%s/parent: %s", g.dir, tmp, strerror(errno)); goto out; }
  /* Owned by the sandboxes' root: their inits mount it as a lower layer with those credentials. */
  if (fchown(fd, owner, group) != 0 && errno != EPERM) { seterr(err, errlen, "chown %s/%s: %s", g.dir, tmp, strerror(errno)); goto out; }
  /* A snapshot outlives sandboxd: on disk before anyone is told it exists. */
  if (syncfs(fd) != 0) { seterr(err, errlen, "sync %s: %s", g.dir, strerror(errno)); goto out; }
  if (renameat(base, tmp, base, id) != 0) { seterr(err, errlen, "rename %s/%s: %s", g.dir, tmp, strerror(errno)); goto out; }
  made = false;
  (void)fsync(base);
  pthread_mutex_lock(&g.mu);
  if (parent) parent->refs++;
  layer *l = add_locked(id, parent);
  if (!l && parent) parent->refs--;
  pthread_mutex_unlock(&g.mu);
  if (!l) {
    seterr(err, errlen, "out of memory");
    (void)remove_dir(id);
    goto out;
  }
  *out = l;
  rc = 0;
out:
  close(fd);
  close(base);
  if (made) (void)remove_dir(tmp);
  return rc;
}

int ly_capture(int src_dirfd, const ly_tree *trees, size_t ntrees, layer *parent, uid_t owner, gid_t group,
               layer **out, char *err, size_t errlen) {
  *out = NULL;
  if (parent && parent->depth >= LY_MAX_DEPTH) {
    seterr(err, errlen, "the snapshot would be %d layers deep (at most %d: each layer is an overlay lower layer)",
           parent->depth + 1, LY_MAX_DEPTH);
    return -1;
  }
  char id[LY_ID_LEN + 1], tmp[LY_ID_LEN + 8];
  int base, fd;
  if (begin_layer(id, tmp, &base, &fd, err, errlen) != 0) return -1;
  lc_opts opts = {.skip_xattrs = SKIP_XATTRS};
  for (size_t i = 0; i < ntrees; i++) {
    char why[1024];
    if (lc_copy_tree(src_dirfd, trees[i].src, fd, trees[i].name, &opts, NULL, why, sizeof why) != 0) {
      seterr(err, errlen, "copying %s: %s", trees[i].src, why);
      close(fd);
      close(base);
      (void)remove_dir(tmp);
      return -1;
    }
  }
  return end_layer(base, fd, tmp, id, parent, owner, group, out, err, errlen);
}

int ly_adopt(int src_dirfd, const ly_tree *trees, size_t ntrees, layer *parent, uid_t owner, gid_t group,
             layer **out, char *err, size_t errlen) {
  *out = NULL;
  if (parent && parent->depth >= LY_MAX_DEPTH) {
    seterr(err, errlen, "the snapshot would be %d layers deep (at most %d: each layer is an overlay lower layer)",
           parent->depth + 1, LY_MAX_DEPTH);
    return -1;
  }
  char id[LY_ID_LEN + 1], tmp[LY_ID_LEN + 8];
  int base, fd;
  if (begin_layer(id, tmp, &base, &fd, err, errlen) != 0) return -1;
  lc_opts opts = {.skip_xattrs = SKIP_XATTRS};
  for (size_t i = 0; i < ntrees; i++) {
    char why[1024];
    struct stat before;
    if (fstatat(src_dirfd, trees[i].src, &before, AT_SYMLINK_NOFOLLOW) != 0) {
      seterr(err, errlen, "moving %s: %s", trees[i].src, strerror(errno));
      goto fail;
    }
    if (!S_ISDIR(before.st_mode)) { seterr(err, errlen, "moving %s: not a directory", trees[i].src); goto fail; }
    if (renameat(src_dirfd, trees[i].src, fd, trees[i].name) != 0) {
      if (errno != EXDEV) { seterr(err, errlen, "moving %s into %s/%s: %s", trees[i].src, g.dir, tmp, strerror(errno)); goto fail; }
      fprintf(stderr, "sandboxd: layers: %s is on another file system than %s: copied, not moved\n", trees[i].src, g.dir);
      if (lc_copy_tree(src_dirfd, trees[i].src, fd, trees[i].name, &opts, NULL, why, sizeof why) != 0) {
        seterr(err, errlen, "copying %s: %s", trees[i].src, why);
        goto fail;
      }
      continue;
    }
    /* What the copy leaves out, taken out here; the times the copy would keep, kept (a rename
     * may count as a change of the directory moved). */
    struct timespec t[2] = {before.st_atim, before.st_mtim};
    if (lc_strip_tree(fd, trees[i].name, &opts, NULL, why, sizeof why) != 0) {
      seterr(err, errlen, "%s moved into a layer: %s", trees[i].src, why);
      goto fail;
    }
    if (utimensat(fd, trees[i].name, t, AT_SYMLINK_NOFOLLOW) != 0) {
      seterr(err, errlen, "%s moved into a layer: setting its times: %s", trees[i].src, strerror(errno));
      goto fail;
    }
  }
  return end_layer(base, fd, tmp, id, parent, owner, group, out, err, errlen);
fail:
  close(fd);
  close(base);
  (void)remove_dir(tmp);
  return -1;
}

int ly_flatten(layer *top, layer *keep, layer **out, char *err, size_t errlen) {
  *out = NULL;
  layer *chain[LY_MAX_DEPTH];
  size_t n = 0;
  for (layer *l = top; l && l != keep; l = l->parent) {
    if (n == LY_MAX_DEPTH) { seterr(err, errlen, "flatten: layer %s is not below layer %s", keep ? keep->id : "-", top->id); return -1; }
    chain[n++] = l;
  }
  if (keep && (n == 0 || chain[n - 1]->parent != keep)) {
    seterr(err, errlen, "flatten: layer %s is not below layer %s", keep->id, top->id);
    return -1;
  }
  int fds[LY_MAX_DEPTH], made = 0, rc = -1;
  char id[LY_ID_LEN + 1], tmp[LY_ID_LEN + 8];
  int base = -1, fd = -1;
  DIR *dh = NULL;
  for (size_t i = 0; i < n; i++, made++) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", g.dir, chain[i]->id);
    if ((fds[i] = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) { seterr(err, errlen, "open %s: %s", p, strerror(errno)); goto out; }
  }
  if (begin_layer(id, tmp, &base, &fd, err, errlen) != 0) goto out;
  /* The trees: every directory of the top layer ("root" and the system directories). */
  int dfd = openat(fds[0], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || !(dh = fdopendir(dfd))) {
    if (dfd >= 0) close(dfd);
    seterr(err, errlen, "reading %s/%s: %s", g.dir, top->id, strerror(errno));
    goto fail_tmp;
  }
  for (struct dirent *de; (de = readdir(dh));) {
    struct stat st;
    if (de->d_name[0] == '.' || fstatat(fds[0], de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    char why[1024];
    if (lm_merge(fds, n, de->d_name, fd, SKIP_XATTRS, why, sizeof why) != 0) {
      seterr(err, errlen, "merging layers %s..%s: %s", top->id, chain[n - 1]->id, why);
      goto fail_tmp;
    }
  }
  struct stat own;
  if (fstat(fds[0], &own) != 0) { seterr(err, errlen, "stat %s/%s: %s", g.dir, top->id, strerror(errno)); goto fail_tmp; }
  rc = end_layer(base, fd, tmp, id, keep, own.st_uid, own.st_gid, out, err, errlen);
  goto out;
fail_tmp:
  close(fd);
  close(base);
  (void)remove_dir(tmp);
out:
  if (dh) closedir(dh);
  for (int i = 0; i < made; i++) close(fds[i]);
  return rc;
}

/* `<dir>/<id>/image` exists: the layer is a base image (ly_adopt_image). */
static bool has_image_marker(const char *id) {
  char p[4400];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s/image", g.dir, id);
  return lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int ly_adopt_image(const char *root_dir, const char *image, uid_t owner, gid_t group, layer **out, char *err, size_t errlen) {
  *out = NULL;
  char id[LY_ID_LEN + 1], tmp[LY_ID_LEN + 8], dst[4400];
  if (ids_random(id, LY_ID_LEN) != 0) { seterr(err, errlen, "getrandom: %s", strerror(errno)); return -1; }
  snprintf(tmp, sizeof tmp, "tmp-%s", id);
  int base = open(g.dir, O_PATH | O_DIRECTORY | O_CLOEXEC), fd = -1;
  if (base < 0) { seterr(err, errlen, "open %s: %s", g.dir, strerror(errno)); return -1; }
  bool made = false, moved = false;
  int rc = -1;
  if (mkdirat(base, tmp, 0700) != 0) { seterr(err, errlen, "mkdir %s/%s: %s", g.dir, tmp, strerror(errno)); goto out; }
  made = true;
  fd = openat(base, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) { seterr(err, errlen, "open %s/%s: %s", g.dir, tmp, strerror(errno)); goto out; }
  snprintf(dst, sizeof dst, "%s/%s/root", g.dir, tmp);
  if (rename(root_dir, dst) != 0) { seterr(err, errlen, "move %s into the layer store: %s", root_dir, strerror(errno)); goto out; }
  moved = true;
  if (write_parent(fd, NULL) != 0) { seterr(err, errlen, "writing %s/%s/parent: %s", g.dir, tmp, strerror(errno)); goto out; }
  int f = openat(fd, "image", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  size_t il = strlen(image);
  bool ok = f >= 0 && write(f, image, il) == (ssize_t)il && write(f, "\n", 1) == 1;
  if (f >= 0 && close(f) != 0) ok = false;
  if (!ok) { seterr(err, errlen, "writing %s/%s/image: %s", g.dir, tmp, strerror(errno)); goto out; }
  if (fchown(fd, owner, group) != 0 && errno != EPERM) { seterr(err, errlen, "chown %s/%s: %s", g.dir, tmp, strerror(errno)); goto out; }
  if (syncfs(fd) != 0) { seterr(err, errlen, "sync %s: %s", g.dir, strerror(errno)); goto out; }
  if (renameat(base, tmp, base, id) != 0) { seterr(err, errlen, "rename %s/%s: %s", g.dir, tmp, strerror(errno)); goto out; }
  made = moved = false;
  (void)fsync(base);
  pthread_mutex_lock(&g.mu);
  layer *l = add_locked(id, NULL);
  if (l) l->image = true;
  pthread_mutex_unlock(&g.mu);
  if (!l) { seterr(err, errlen, "out of memory"); (void)remove_dir(id); goto out; }
  *out = l;
  rc = 0;
out:
  if (moved) (void)rename(dst, root_dir);   /* back where it was (else it goes with tmp) */
  if (fd >= 0) close(fd);
  close(base);
  if (made) (void)remove_dir(tmp);
  return rc;
}

/* The parent id recorded in `<id>/parent`: 1 and out filled, 0 for none, -1 if unreadable. */
static int read_parent(const char *id, char *out, char *err, size_t errlen) {
  char p[4400];
  snprintf(p, sizeof p, "%s/%s/parent", g.dir, id);
  int f = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (f < 0) { seterr(err, errlen, "layer %s: %s: %s", id, p, strerror(errno)); return -1; }
  char buf[LY_ID_LEN + 4];
  ssize_t n = read(f, buf, sizeof buf - 1);
  close(f);
  if (n < 0) { seterr(err, errlen, "layer %s: reading %s: %s", id, p, strerror(errno)); return -1; }
  buf[n] = 0;
  if (n == 0) return 0;
  if (n != LY_ID_LEN + 1 || buf[LY_ID_LEN] != '\n') { seterr(err, errlen, "layer %s: %s is malformed", id, p); return -1; }
  buf[LY_ID_LEN] = 0;
  if (!ids_alnum(buf, LY_ID_LEN)) { seterr(err, errlen, "layer %s: %s is malformed", id, p); return -1; }
  memcpy(out, buf, LY_ID_LEN + 1);
  return 1;
}

layer *ly_open(const char *id, char *err, size_t errlen) {
  if (!ids_alnum(id, LY_ID_LEN) || strlen(id) != LY_ID_LEN) { seterr(err, errlen, "'%s' is not a layer id", id); return NULL; }
  /* The chain from id down, as ids, until a layer already in memory or the template. */
  char chain[LY_MAX_DEPTH][LY_ID_LEN + 1];
  int n = 0;
  layer *known = NULL;
  char cur[LY_ID_LEN + 1];
  snprintf(cur, sizeof cur, "%s", id);
  for (;;) {
    pthread_mutex_lock(&g.mu);
    known = find_locked(cur);
    if (known) known->refs++;
    pthread_mutex_unlock(&g.mu);
    if (known) break;
    if (n == LY_MAX_DEPTH) {
      seterr(err, errlen, "layer %s: its chain is deeper than %d layers (or loops)", id, LY_MAX_DEPTH);
      return NULL;
    }
    memcpy(chain[n++], cur, sizeof cur);
    char parent[LY_ID_LEN + 1];
    int r = read_parent(cur, parent, err, errlen);
    if (r < 0) return NULL;
    if (r == 0) break;
    memcpy(cur, parent, sizeof cur);
  }
  if (known && known->depth + n > LY_MAX_DEPTH) {
    ly_release(known);
    seterr(err, errlen, "layer %s: its chain is deeper than %d layers", id, LY_MAX_DEPTH);
    return NULL;
  }
  /* Bottom up: each new layer takes over the reference held on the one below it. */
  layer *below = known;
  for (int i = n - 1; i >= 0; i--) {
    pthread_mutex_lock(&g.mu);
    layer *l = find_locked(chain[i]);   /* opened by another caller meanwhile */
    if (l) {
      l->refs++;
      pthread_mutex_unlock(&g.mu);
      ly_release(below);
    } else {
      l = add_locked(chain[i], below);
      if (l && !below) l->image = has_image_marker(chain[i]);
      pthread_mutex_unlock(&g.mu);
      if (!l) { ly_release(below); seterr(err, errlen, "out of memory"); return NULL; }
    }
    below = l;
  }
  return below;
}

int ly_sweep(void) { return sweep(false); }

int ly_refs(const layer *l) {
  pthread_mutex_lock(&g.mu);
  int n = l->refs;
  pthread_mutex_unlock(&g.mu);
  return n;
}

/* nftw has no argument for its callback: the sum is the calling thread's. */
static _Thread_local unsigned long long size_sum, size_entries;
static int size_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)p, (void)flag, (void)f;
  size_sum += (unsigned long long)st->st_blocks * 512;
  return ++size_entries >= 1000000 ? 1 : 0;
}

unsigned long long ly_size(const layer *l) {
  char p[4400];
  snprintf(p, sizeof p, "%s/%s", g.dir, l->id);
  size_sum = size_entries = 0;
  (void)nftw(p, size_one, 16, FTW_PHYS | FTW_MOUNT);
  return size_sum;
}
