/* egress_ca.h — a sandbox's own certificate authority, for the egress proxy's interception of the
 * hosts that have rules (transforms.h): made with the sandbox, trusted inside it (its CA bundle
 * and the variables node, python, curl and git read: sandbox.c), its private key held by sandboxd
 * alone. Certificates for a host are issued on demand (ECDSA P-256, valid a day, the host as the
 * only subject name) and kept; every handshake gets its own copies (the TLS library frees them).
 * Thread-safe; reference-counted (a handshake may outlive the sandbox's detach). */
#ifndef SANDBOXD_EGRESS_CA_H
#define SANDBOXD_EGRESS_CA_H
#include <stddef.h>
#include <gnutls/abstract.h>

#define EGRESS_CA_HOSTS 64              /* certificates kept per sandbox (the oldest go) */

typedef struct egress_ca egress_ca;
egress_ca *egress_ca_new(const char *sandbox_id, char *err, size_t errlen);
void egress_ca_ref(egress_ca *ca);
void egress_ca_unref(egress_ca *ca);
const char *egress_ca_pem(const egress_ca *ca);   /* the CA certificate, PEM */
/* A certificate chain (the host's, then the CA's) and its key for host, new objects the caller
 * (gnutls, with GNUTLS_CERT_RETR_DEINIT_ALL) frees: *certs a gnutls_malloc'ed array. 0 or -1. */
int egress_ca_issue(egress_ca *ca, const char *host, gnutls_pcert_st **certs, unsigned *n, gnutls_privkey_t *key);
#endif
