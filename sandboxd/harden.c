/* harden.c — see harden.h. */
#include "harden.h"

#include <jansson.h>
#include <linux/capability.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <openssl/crypto.h>

static void wiping_free(void *p) {
  if (!p) return;
  OPENSSL_cleanse(p, malloc_usable_size(p));
  free(p);
}

static bool has_effective_cap(unsigned cap) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
  if (syscall(SYS_capget, &h, d) != 0 || cap / 32 >= _LINUX_CAPABILITY_U32S_3) return false;
  return (d[cap / 32].effective >> (cap % 32)) & 1u;
}

bool harden_process(char *why, size_t whylen) {
  snprintf(why, whylen, "%s", "");
  json_set_alloc_funcs(malloc, wiping_free);
  struct rlimit core;
  if (getrlimit(RLIMIT_CORE, &core) == 0) {
    core.rlim_cur = 0;
    if (setrlimit(RLIMIT_CORE, &core) != 0) snprintf(why, whylen, "core dumps could not be turned off (setrlimit)");
  }
  if (geteuid() != 0) return false;        /* rootless: see harden.h */
  if (!has_effective_cap(CAP_SYS_PTRACE)) {
    snprintf(why, whylen, "sandboxd stays dumpable: it lacks CAP_SYS_PTRACE, which it needs to open its own helpers' namespaces "
                          "once it is not (core dumps are off all the same)");
    return false;
  }
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    snprintf(why, whylen, "prctl(PR_SET_DUMPABLE, 0) failed");
    return false;
  }
  return true;
}
