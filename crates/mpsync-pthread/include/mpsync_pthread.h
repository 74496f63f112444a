/*
 * mpsync_pthread.h - mpsync's scheduler-conscious locks for C programs.
 *
 * Two ways to use libmpsync_pthread.so:
 *
 *   1. Unmodified programs: LD_PRELOAD=libmpsync_pthread.so ./prog
 *      takes over pthread_mutex_* and pthread_cond_* (see the crate docs:
 *      `cargo doc -p mpsync-pthread`).
 *   2. Linking it directly (cc ... -lmpsync_pthread): the functions below,
 *      which are always mpsync's, whatever attributes or bytes say. (The
 *      library also defines pthread_mutex_* and pthread_cond_*, and linked
 *      ahead of libc it takes those over too, as under LD_PRELOAD.)
 *
 * The lock is chosen once per process by the environment variable
 * MPSYNC_LOCK = bounded-steal (default) | tas-b-np | smart-q | mcs-tp |
 * ticket-np | spin-then-park | native; an unknown value is said on stderr
 * and the default used.
 *
 * Return values are POSIX's: 0, or EBUSY (trylock of a held mutex; destroy
 * of a held one), ETIMEDOUT (at the absolute CLOCK_REALTIME deadline),
 * EINVAL (tv_nsec outside 0..999999999; an object used after destroy),
 * EPERM (unlock, or a condvar wait, by a thread that does not hold the
 * mutex), EDEADLK (locking a mutex the caller holds). Condvar waits may
 * wake spuriously: wait in a loop on the condition.
 *
 * A zero-filled object is an initialized one (the initializers below), so
 * objects in zeroed memory need no init. A mutex holds a handle to a slot
 * the first lock takes; destroy gives it back. Objects are for the threads
 * of one process (not for memory shared between processes); a child of
 * fork() may use every mutex that was unlocked at the fork.
 */
#ifndef MPSYNC_PTHREAD_H
#define MPSYNC_PTHREAD_H

#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The size and alignment of pthread_mutex_t / pthread_cond_t (x86_64 glibc). */
typedef struct { unsigned long long _opaque[5]; } mpsync_mutex_t;
typedef struct { unsigned long long _opaque[6]; } mpsync_cond_t;

#define MPSYNC_MUTEX_INITIALIZER { { 0 } }
#define MPSYNC_COND_INITIALIZER { { 0 } }

/* The name of the lock in use, e.g. "bounded-steal" (a static string). */
const char *mpsync_pthread_lock_name(void);

int mpsync_mutex_init(mpsync_mutex_t *m);
int mpsync_mutex_lock(mpsync_mutex_t *m);
int mpsync_mutex_trylock(mpsync_mutex_t *m);
/* abstime: absolute, CLOCK_REALTIME. */
int mpsync_mutex_timedlock(mpsync_mutex_t *m, const struct timespec *abstime);
int mpsync_mutex_unlock(mpsync_mutex_t *m);
int mpsync_mutex_destroy(mpsync_mutex_t *m);

/* Condvars on CLOCK_REALTIME; destroy returns once no waiter touches it. */
int mpsync_cond_init(mpsync_cond_t *c);
int mpsync_cond_wait(mpsync_cond_t *c, mpsync_mutex_t *m);
int mpsync_cond_timedwait(mpsync_cond_t *c, mpsync_mutex_t *m,
                          const struct timespec *abstime);
int mpsync_cond_signal(mpsync_cond_t *c);
int mpsync_cond_broadcast(mpsync_cond_t *c);
int mpsync_cond_destroy(mpsync_cond_t *c);

#ifdef __cplusplus
}
#endif

#endif /* MPSYNC_PTHREAD_H */
