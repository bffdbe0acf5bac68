/* egress_ca.c — a sandbox's certificate authority for the egress proxy (egress_ca.h), on GnuTLS
 * (what libmicrohttpd's TLS uses: the certificates go to its handshakes as they are). */
#include "egress_ca.h"

#include <gnutls/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define CA_DAYS 30                      /* longer than any sandbox lease (at most a day) */
#define LEAF_DAYS 2

typedef struct {
  char host[256];
  gnutls_datum_t der;                  /* the host's certificate */
  unsigned long used;                  /* for eviction: the oldest use goes */
} issued;

struct egress_ca {
  atomic_int refs;
  pthread_mutex_t mu;
  gnutls_x509_crt_t crt;
  gnutls_x509_privkey_t key;           /* the CA's */
  gnutls_x509_privkey_t leaf_key;      /* every host certificate's (one key, many names) */
  gnutls_datum_t crt_der, leaf_key_der;
  char *pem;
  issued cache[EGRESS_CA_HOSTS];
  unsigned long tick;
};

static int serial(gnutls_x509_crt_t crt) {
  unsigned char s[16];
  if (getrandom(s, sizeof s, 0) != (ssize_t)sizeof s) return -1;
  s[0] &= 0x7f;                        /* positive */
  return gnutls_x509_crt_set_serial(crt, s, sizeof s);
}

static int new_key(gnutls_x509_privkey_t *k) {
  if (gnutls_x509_privkey_init(k) < 0) return -1;
  return gnutls_x509_privkey_generate2(*k, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0, NULL, 0);
}

void egress_ca_ref(egress_ca *ca) { atomic_fetch_add(&ca->refs, 1); }

void egress_ca_unref(egress_ca *ca) {
  if (!ca || atomic_fetch_sub(&ca->refs, 1) != 1) return;
  for (size_t i = 0; i < EGRESS_CA_HOSTS; i++) gnutls_free(ca->cache[i].der.data);
  gnutls_free(ca->crt_der.data);
  if (ca->leaf_key_der.data) { memset(ca->leaf_key_der.data, 0, ca->leaf_key_der.size); gnutls_free(ca->leaf_key_der.data); }
  if (ca->crt) gnutls_x509_crt_deinit(ca->crt);
  if (ca->key) gnutls_x509_privkey_deinit(ca->key);
  if (ca->leaf_key) gnutls_x509_privkey_deinit(ca->leaf_key);
  free(ca->pem);
  pthread_mutex_destroy(&ca->mu);
  free(ca);
}

egress_ca *egress_ca_new(const char *sandbox_id, char *err, size_t errlen) {
  egress_ca *ca = calloc(1, sizeof *ca);
  if (!ca) { snprintf(err, errlen, "out of memory"); return NULL; }
  atomic_init(&ca->refs, 1);
  pthread_mutex_init(&ca->mu, NULL);
  char dn[160];
  snprintf(dn, sizeof dn, "CN=sandboxd egress %.64s,O=sandboxd", sandbox_id);
  time_t now = time(NULL);
  gnutls_datum_t pem = {0};
  unsigned char id[64];
  size_t idlen = sizeof id;
  if (new_key(&ca->key) < 0 || new_key(&ca->leaf_key) < 0 || gnutls_x509_crt_init(&ca->crt) < 0 ||
      gnutls_x509_crt_set_version(ca->crt, 3) < 0 || serial(ca->crt) < 0 ||
      gnutls_x509_crt_set_activation_time(ca->crt, now - 3600) < 0 ||
      gnutls_x509_crt_set_expiration_time(ca->crt, now + CA_DAYS * 86400) < 0 ||
      gnutls_x509_crt_set_dn(ca->crt, dn, NULL) < 0 || gnutls_x509_crt_set_key(ca->crt, ca->key) < 0 ||
      gnutls_x509_crt_set_basic_constraints(ca->crt, 1, 0) < 0 ||
      gnutls_x509_crt_set_key_usage(ca->crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN) < 0 ||
      gnutls_x509_crt_get_key_id(ca->crt, 0, id, &idlen) < 0 || gnutls_x509_crt_set_subject_key_id(ca->crt, id, idlen) < 0 ||
      gnutls_x509_crt_sign2(ca->crt, ca->crt, ca->key, GNUTLS_DIG_SHA256, 0) < 0 ||
      gnutls_x509_crt_export2(ca->crt, GNUTLS_X509_FMT_DER, &ca->crt_der) < 0 ||
      gnutls_x509_crt_export2(ca->crt, GNUTLS_X509_FMT_PEM, &pem) < 0 ||
      gnutls_x509_privkey_export2(ca->leaf_key, GNUTLS_X509_FMT_DER, &ca->leaf_key_der) < 0) {
    snprintf(err, errlen, "cannot make the sandbox's egress certificate authority (GnuTLS)");
    gnutls_free(pem.data);
    egress_ca_unref(ca);
    return NULL;
  }
  ca->pem = strndup((const char *)pem.data, pem.size);
  gnutls_free(pem.data);
  if (!ca->pem) { snprintf(err, errlen, "out of memory"); egress_ca_unref(ca); return NULL; }
  return ca;
}

const char *egress_ca_pem(const egress_ca *ca) { return ca->pem; }

/* host's certificate, made now (ca->mu held). */
static int make_leaf(egress_ca *ca, const char *host, gnutls_datum_t *der) {
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) < 0) return -1;
  time_t now = time(NULL);
  char dn[300];
  snprintf(dn, sizeof dn, "CN=%s", host);   /* a host name: no character DN syntax would read */
  unsigned char id[64];
  size_t idlen = sizeof id;
  int rc = (gnutls_x509_crt_set_version(crt, 3) < 0 || serial(crt) < 0 ||
            gnutls_x509_crt_set_activation_time(crt, now - 3600) < 0 ||
            gnutls_x509_crt_set_expiration_time(crt, now + LEAF_DAYS * 86400) < 0 ||
            gnutls_x509_crt_set_dn(crt, dn, NULL) < 0 || gnutls_x509_crt_set_key(crt, ca->leaf_key) < 0 ||
            gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, host, (unsigned)strlen(host), GNUTLS_FSAN_SET) < 0 ||
            gnutls_x509_crt_set_basic_constraints(crt, 0, -1) < 0 ||
            gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE) < 0 ||
            gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0) < 0 ||
            gnutls_x509_crt_get_subject_key_id(ca->crt, id, &idlen, NULL) < 0 ||
            gnutls_x509_crt_set_authority_key_id(crt, id, idlen) < 0 ||
            gnutls_x509_crt_sign2(crt, ca->crt, ca->key, GNUTLS_DIG_SHA256, 0) < 0 ||
            gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_DER, der) < 0) ? -1 : 0;
  gnutls_x509_crt_deinit(crt);
  return rc;
}

int egress_ca_issue(egress_ca *ca, const char *host, gnutls_pcert_st **certs, unsigned *n, gnutls_privkey_t *key) {
  if (strlen(host) >= sizeof ca->cache[0].host) return -1;
  gnutls_datum_t der = {0};
  pthread_mutex_lock(&ca->mu);
  issued *hit = NULL, *oldest = &ca->cache[0];
  for (size_t i = 0; i < EGRESS_CA_HOSTS && !hit; i++) {
    if (ca->cache[i].der.data && !strcmp(ca->cache[i].host, host)) hit = &ca->cache[i];
    else if (!ca->cache[i].der.data || ca->cache[i].used < oldest->used) oldest = &ca->cache[i];
  }
  if (!hit && make_leaf(ca, host, &der) == 0) {
    gnutls_free(oldest->der.data);
    oldest->der = der;
    snprintf(oldest->host, sizeof oldest->host, "%s", host);
    hit = oldest;
  }
  int rc = -1;
  gnutls_pcert_st *pc = NULL;
  gnutls_privkey_t pk = NULL;
  if (hit) {
    hit->used = ++ca->tick;
    pc = gnutls_malloc(2 * sizeof *pc);
    if (pc && gnutls_pcert_import_x509_raw(&pc[0], &hit->der, GNUTLS_X509_FMT_DER, 0) >= 0) {
      if (gnutls_pcert_import_x509_raw(&pc[1], &ca->crt_der, GNUTLS_X509_FMT_DER, 0) >= 0) {
        if (gnutls_privkey_init(&pk) >= 0 &&
            gnutls_privkey_import_x509_raw(pk, &ca->leaf_key_der, GNUTLS_X509_FMT_DER, NULL, 0) >= 0) rc = 0;
        if (rc) gnutls_pcert_deinit(&pc[1]);
      }
      if (rc) gnutls_pcert_deinit(&pc[0]);
    }
  }
  pthread_mutex_unlock(&ca->mu);
  if (rc) {
    if (pk) gnutls_privkey_deinit(pk);
    gnutls_free(pc);
    return -1;
  }
  *certs = pc;
  *n = 2;
  *key = pk;
  return 0;
}
