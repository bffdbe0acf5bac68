/* egress_trust.h — a sandbox's egress CA (egress_ca.h) made trusted inside it, so that its programs
 * accept the egress proxy's certificates for the hosts whose rules set headers (egress_http.h):
 *  - /usr/local/share/ca-certificates/sandboxd-egress.crt: the CA alone (kept by an
 *    update-ca-certificates run inside; NODE_EXTRA_CA_CERTS names it);
 *  - /etc/ssl/certs/ca-certificates.crt: the template's bundle with the CA appended (one that an
 *    earlier sandbox appended — a fork's parent — replaced): what OpenSSL, GnuTLS, curl, git,
 *    wget and Python's ssl read by default; REQUESTS_CA_BUNDLE names it (requests has its own).
 * Written as the sandbox's root, each as a new file renamed over the old. */
#ifndef SANDBOXD_EGRESS_TRUST_H
#define SANDBOXD_EGRESS_TRUST_H
#include <stddef.h>

#include "paths.h"

#define EGRESS_TRUST_CA_FILE "/usr/local/share/ca-certificates/sandboxd-egress.crt"
#define EGRESS_TRUST_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define EGRESS_TRUST_BUNDLE_MAX (16u << 20)   /* a template's bundle larger than this is not read */

/* root: the sandbox's root user's context (sbx_fs_ctx "root"). 0, or -1 with err. */
int egress_trust_install(const fs_ctx *root, const char *pem, char *err, size_t errlen);
/* The variables a sandbox created with header rules gets (NULL-terminated "NAME=VALUE"). */
extern const char *const egress_trust_env[];
#endif
