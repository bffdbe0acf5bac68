/* test_sbx_image.c — image references as skopeo and auth files name them (sandboxd/image.c:
 * the registry host, Docker Hub's defaults, tags and digests) and which registries are reached
 * without TLS verification (--insecure-registry). The pull itself is spec/sdk/template_image.test.mjs. */
#include "mbtest.h"

#include <string.h>

#include "image.h"

#define D "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void want(const char *ref, const char *host, const char *repo, const char *tag, const char *digest) {
  img_ref r;
  CHECK_INT(img_parse_ref(ref, &r), 0);
  CHECK_STR(r.host, host);
  CHECK_STR(r.repo, repo);
  CHECK_STR(r.tag, tag);
  CHECK_STR(r.digest, digest);
}

static void test_refs(void) {
  want("ubuntu", "docker.io", "library/ubuntu", "latest", "");
  want("ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", "");
  want("e2bdev/code-interpreter:1", "docker.io", "e2bdev/code-interpreter", "1", "");
  want("ghcr.io/org/app", "ghcr.io", "org/app", "latest", "");
  want("localhost/app:dev", "localhost", "app", "dev", "");
  want("127.0.0.1:5000/test/img:1", "127.0.0.1:5000", "test/img", "1", "");
  want("registry:5000/a/b/c", "registry:5000", "a/b/c", "latest", "");
  want("r.io/a@" D, "r.io", "a", "", D);
  want("r.io/a:v2@" D, "r.io", "a", "v2", D);
  want("busybox@" D, "docker.io", "library/busybox", "", D);
}

static void test_insecure(void) {
  char err[300];
  CHECK(!img_insecure("127.0.0.1:5000"));
  CHECK_INT(img_insecure_add("127.0.0.1:5000", err, sizeof err), 0);
  CHECK_INT(img_insecure_add("registry.local", err, sizeof err), 0);
  CHECK(img_insecure("127.0.0.1:5000"));
  CHECK(!img_insecure("127.0.0.1:5001"));
  CHECK(!img_insecure("127.0.0.1"));
  CHECK(img_insecure("registry.local"));
  CHECK(img_insecure("registry.local:443"));            /* HOST alone: any port */
  CHECK(!img_insecure("registry.localhost"));
  CHECK(!img_insecure("docker.io"));
  CHECK_INT(img_insecure_add("", err, sizeof err), -1);
  CHECK_INT(img_insecure_add("http://x", err, sizeof err), -1);
  CHECK_HAS(err, "HOST or HOST:PORT");
  CHECK_INT(img_insecure_add("a b", err, sizeof err), -1);
  for (int i = 2; i < IMG_MAX_INSECURE; i++) CHECK_INT(img_insecure_add("r.io", err, sizeof err), 0);
  CHECK_INT(img_insecure_add("r.io", err, sizeof err), -1);
  CHECK_HAS(err, "at most 16");
}

int main(void) {
  MBT_RUN(test_refs);
  MBT_RUN(test_insecure);
  return mbt_report();
}
