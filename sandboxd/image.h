/* image.h — base images for template builds (E2B's fromImage): a reference pulled from its
 * registry with skopeo (the manifest first, `skopeo inspect --raw`; then the image pinned by that
 * digest, `skopeo copy` into a private OCI layout), unpacked with umoci (`umoci raw unpack`, its
 * files owned by the sandboxes' ids), and adopted into the layer store as an image layer
 * (layers.h ly_adopt_image): sandboxes on it have the image's root file system over the bare template,
 * nothing of the host's system directories.
 *
 * Cached by digest (<state>/images.json): a build of a reference whose manifest digest is in the
 * cache reuses its layer without downloading anything; at most IMG_CACHE_MAX images are kept, the
 * least recently used one let go first (templates built on it keep its layer until they go).
 *
 * Credentials come only from the request, never from the host's files: skopeo reads them from an
 * auth file that is a memfd it inherits (`--authfile /dev/fd/3`), so they are on no command
 * line, in no environment and on no disk; its HOME is an empty private directory. Plain HTTP (and
 * no certificate check) only for registries named with img_insecure_add (--insecure-registry).
 * One pull at a time; each is bounded (manifest size, layer count and compressed bytes, time) and
 * stopped when its caller says so. */
#ifndef SANDBOXD_IMAGE_H
#define SANDBOXD_IMAGE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layers.h"

#define IMG_CACHE_MAX 8                       /* images kept in the cache */
#define IMG_MAX_INSECURE 16                   /* --insecure-registry entries */
#define IMG_MANIFEST_MAX (4u << 20)           /* a manifest or config blob */
#define IMG_MAX_LAYERS 256                    /* layers of one image */
#define IMG_MAX_BYTES (16ULL << 30)           /* its layers, compressed */
#define IMG_INSPECT_TIMEOUT_S 120
#define IMG_PULL_TIMEOUT_S 3600               /* skopeo copy; umoci unpack the same */
#define IMG_MAX_ENVS 256

/* Once, after ly_init and before ly_sweep: reads the cache (its layers opened and held), removes
 * what an interrupted pull left. 0, or -1 with err. */
int img_init(const char *state_dir, char *err, size_t errlen);
/* At exit, after every build and before ly_shutdown: forgets the cache in memory (its layers'
 * directories stay). */
void img_shutdown(void);
/* A registry reached over plain HTTP or TLS without verification: HOST or HOST:PORT as image
 * references name it (HOST alone: any port). 0, or -1 with err. Before img_init. */
int img_insecure_add(const char *hostport, char *err, size_t errlen);
/* Whether registry `host` (HOST or HOST:PORT, as img_ref.host) is one of them. */
bool img_insecure(const char *host);

/* What the image's config says (OCI image config: Env, WorkingDir, User). */
typedef struct {
  char digest[80];                  /* sha256:<hex> of the (platform's) manifest */
  char **envs;                      /* "NAME=VALUE", NULL-terminated */
  char workdir[1024];
  char user[64];
  bool has_bash;                    /* /bin/bash resolves inside it to an executable file */
  bool cached;                      /* from the cache: nothing was downloaded */
} img_config;
void img_config_free(img_config *c);

typedef struct {
  const char *username, *password;  /* NULL: anonymous */
  uid_t uid_base;                   /* inner id i is host id base + i, for i < id_count (sandbox.h) */
  gid_t gid_base;
  uint32_t id_count;                /* 1: rootless (umoci --rootless) */
  void (*log)(void *cls, const char *line);   /* progress, one line at a time (may be NULL) */
  bool (*cancelled)(void *cls);     /* polled while a tool runs: true kills it (may be NULL) */
  void *cls;
} img_pull_opts;

/* The image layer of `ref` (ts_valid_image_ref), from the cache or pulled now, and its config
 * (img_config_free it): a new reference. NULL with err naming the image and why (the registry's
 * own words, trimmed: unreachable, unknown image, refused credentials; a missing tool). */
layer *img_get(const char *ref, const img_pull_opts *o, img_config *cfg, char *err, size_t errlen);

/* Parts of a reference as skopeo and auth files name them: the registry host (`docker.io` when
 * none), the repository (`library/x` for a one-part name on docker.io), the tag ("" with a
 * digest; `latest` when neither) and the digest (""). 0, or -1 when a part does not fit. */
typedef struct { char host[260], repo[260], tag[130], digest[80]; } img_ref;
int img_parse_ref(const char *ref, img_ref *out);
#endif
