/* A program linked with -lmpsync_pthread, using only the header's API. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpsync_pthread.h"

#define EQ(a, b)                                                              \
    do {                                                                      \
        long _a = (long)(a), _b = (long)(b);                                  \
        if (_a != _b) {                                                       \
            fprintf(stderr, "FAILED line %d: %s == %ld, expected %ld\n",      \
                    __LINE__, #a, _a, _b);                                    \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static mpsync_mutex_t m = MPSYNC_MUTEX_INITIALIZER;
static mpsync_cond_t c = MPSYNC_COND_INITIALIZER;
static long counter;
static int ready;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) {
        EQ(mpsync_mutex_lock(&m), 0);
        counter++;
        EQ(mpsync_mutex_unlock(&m), 0);
    }
    EQ(mpsync_mutex_lock(&m), 0);
    ready++;
    EQ(mpsync_cond_broadcast(&c), 0);
    EQ(mpsync_mutex_unlock(&m), 0);
    return NULL;
}

int main(void) {
    const char *want = getenv("MPSYNC_LOCK");
    if (strcmp(mpsync_pthread_lock_name(), want ? want : "bounded-steal") != 0) {
        fprintf(stderr, "lock %s\n", mpsync_pthread_lock_name());
        return 1;
    }
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
    EQ(mpsync_mutex_lock(&m), 0);
    while (ready < 4) EQ(mpsync_cond_wait(&c, &m), 0);
    EQ(mpsync_mutex_trylock(&m), EBUSY);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec = (ts.tv_nsec + 10000000L) % 1000000000L;
    ts.tv_sec += 1;
    EQ(mpsync_cond_timedwait(&c, &m, &(struct timespec){0, 0}), ETIMEDOUT);
    EQ(mpsync_mutex_unlock(&m), 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    EQ(counter, 40000);
    EQ(mpsync_mutex_timedlock(&m, &ts), 0);
    EQ(mpsync_mutex_unlock(&m), 0);
    EQ(mpsync_mutex_unlock(&m), EPERM);
    EQ(mpsync_mutex_destroy(&m), 0);
    EQ(mpsync_mutex_lock(&m), EINVAL);
    EQ(mpsync_mutex_init(&m), 0);
    EQ(mpsync_cond_destroy(&c), 0);
    EQ(mpsync_cond_init(&c), 0);
    EQ(mpsync_cond_signal(&c), 0);
    EQ(mpsync_cond_destroy(&c), 0);
    printf("ok %s\n", mpsync_pthread_lock_name());
    return 0;
}
