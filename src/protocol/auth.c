/* auth.c -- proof of the cluster key on a runner link (protocol/protocol.h says the
 * exchange): HMAC-SHA256 from OpenSSL's libcrypto, random challenges from
 * the kernel, and every comparison of a proof in constant time, so that
 * how long a refusal takes says nothing of how much of a proof was right. */
#include "protocol/protocol.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define CLIENT_LABEL "lockstep client"
#define RUNNER_LABEL "lockstep runner"

int runner_auth_hmac(const void *key, size_t key_length, const void *data, size_t n, uint8_t *mac) {
    unsigned int length = 0;
    if (key_length > (size_t)INT32_MAX ||
        !HMAC(EVP_sha256(), key, (int)key_length, data, n, mac, &length) ||
        length != RUNNER_AUTH_BYTES)
        return -1;
    return 0;
}

int runner_auth_random(uint8_t *bytes, char *err, size_t errlen) {
    size_t got = 0;
    while (got < RUNNER_AUTH_BYTES) {
        ssize_t n = getrandom(bytes + got, RUNNER_AUTH_BYTES - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            snprintf(err, errlen, "runner auth: no random bytes from the kernel: %s",
                     strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

/* HMAC(key, label || first || second). */
static int proof(const char *key, const char *label, const uint8_t *first, const uint8_t *second,
                 uint8_t *mac) {
    enum { n = sizeof(CLIENT_LABEL) - 1 }; /* the label's bytes, without a terminator */
    uint8_t message[n + 2 * RUNNER_AUTH_BYTES];
    _Static_assert(sizeof(CLIENT_LABEL) == sizeof(RUNNER_LABEL), "labels of one length");
    memcpy(message, label, n);
    memcpy(message + n, first, RUNNER_AUTH_BYTES);
    memcpy(message + n + RUNNER_AUTH_BYTES, second, RUNNER_AUTH_BYTES);
    return runner_auth_hmac(key, strlen(key), message, n + 2 * RUNNER_AUTH_BYTES, mac);
}

/* 1 if mac is label's proof over first and second. */
static int proves(const char *key, const char *label, const uint8_t *first, const uint8_t *second,
                  const uint8_t *mac) {
    uint8_t expected[RUNNER_AUTH_BYTES];
    return proof(key, label, first, second, expected) == 0 &&
           CRYPTO_memcmp(expected, mac, RUNNER_AUTH_BYTES) == 0;
}

int runner_auth_answer(const char *key, const uint8_t *challenge, struct runner_auth *answer,
                       char *err, size_t errlen) {
    if (runner_auth_random(answer->nonce, err, errlen)) return -1;
    if (proof(key, CLIENT_LABEL, challenge, answer->nonce, answer->mac) == 0) return 0;
    snprintf(err, errlen, "runner auth: HMAC-SHA256 failed");
    return -1;
}

int runner_auth_accept(const char *key, const uint8_t *challenge, const struct runner_auth *answer,
                       struct runner_auth *reply) {
    if (!proves(key, CLIENT_LABEL, challenge, answer->nonce, answer->mac)) return 0;
    memcpy(reply->nonce, challenge, RUNNER_AUTH_BYTES);
    return proof(key, RUNNER_LABEL, answer->nonce, challenge, reply->mac) == 0;
}

int runner_auth_confirm(const char *key, const uint8_t *challenge, const struct runner_auth *answer,
                        const struct runner_auth *reply) {
    return CRYPTO_memcmp(reply->nonce, challenge, RUNNER_AUTH_BYTES) == 0 &&
           proves(key, RUNNER_LABEL, answer->nonce, challenge, reply->mac);
}
