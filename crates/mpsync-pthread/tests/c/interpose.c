/*
 * The interposer's C-side tests: ./interpose SCENARIO, run under
 * LD_PRELOAD=libmpsync_pthread.so by tests/interpose.rs. Each scenario
 * prints "ok SCENARIO" and exits 0, or says what failed and exits 1.
 * Every scenario first checks that the interposer is loaded, so none can
 * pass on glibc alone.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)
#define EQ(a, b)                                                            \
    do {                                                                    \
        long _a = (long)(a), _b = (long)(b);                                \
        if (_a != _b) {                                                     \
            fprintf(stderr, "FAILED %s:%d: %s == %ld, expected %s == %ld\n", \
                    __FILE__, __LINE__, #a, _a, #b, _b);                    \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

/* An absolute CLOCK_REALTIME (or `clock`) time `ms` from now. */
static struct timespec in_ms_on(clockid_t clock, long ms) {
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}
static struct timespec in_ms(long ms) { return in_ms_on(CLOCK_REALTIME, ms); }

/* The interposer is loaded, and uses the lock MPSYNC_LOCK names. */
static void interposed(void) {
    const char *(*name)(void) =
        (const char *(*)(void))dlsym(RTLD_DEFAULT, "mpsync_pthread_lock_name");
    CHECK(name != NULL);
    const char *want = getenv("MPSYNC_EXPECT_LOCK");
    if (!want) want = getenv("MPSYNC_LOCK");
    if (!want || !*want) want = "bounded-steal";
    if (strcmp(name(), want) != 0) {
        fprintf(stderr, "FAILED: lock in use %s, expected %s\n", name(), want);
        exit(1);
    }
    /* glibc would let a non-owner unlock a normal mutex; ours says EPERM. */
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    EQ(pthread_mutex_unlock(&m), EPERM);
}

/* ---- basic: every mutex call ------------------------------------------ */

static pthread_mutex_t statik = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t shared_m;

static void *try_from_other(void *arg) {
    pthread_mutex_t *m = arg;
    long r = pthread_mutex_trylock(m);
    if (r == 0) pthread_mutex_unlock(m);
    return (void *)r;
}

static void *timed_from_other(void *arg) {
    pthread_mutex_t *m = arg;
    struct timespec t = in_ms(30);
    long r = pthread_mutex_timedlock(m, &t);
    if (r == 0) pthread_mutex_unlock(m);
    return (void *)r;
}

static long in_thread(void *(*f)(void *), void *arg) {
    pthread_t t;
    void *r;
    EQ(pthread_create(&t, NULL, f, arg), 0);
    EQ(pthread_join(t, &r), 0);
    return (long)r;
}

static void basic(void) {
    EQ(pthread_mutex_init(&shared_m, NULL), 0);
    pthread_mutex_t *m = &shared_m;
    EQ(pthread_mutex_lock(m), 0);
    EQ(pthread_mutex_trylock(m), EBUSY);        /* by its holder */
    EQ(in_thread(try_from_other, m), EBUSY);    /* by another thread */
    EQ(in_thread(timed_from_other, m), ETIMEDOUT);
    struct timespec bad = in_ms(10);
    bad.tv_nsec = 1000000000L;
    EQ(pthread_mutex_timedlock(m, &bad), EINVAL);
    bad.tv_nsec = -1;
    EQ(pthread_mutex_timedlock(m, &bad), EINVAL);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(in_thread(try_from_other, m), 0);
    EQ(in_thread(timed_from_other, m), 0);
    struct timespec past = {0, 0};              /* long gone: a trylock */
    EQ(pthread_mutex_timedlock(m, &past), 0);
    EQ(pthread_mutex_unlock(m), 0);
    struct timespec t = in_ms(1000);
    EQ(pthread_mutex_timedlock(m, &t), 0);
    EQ(pthread_mutex_unlock(m), 0);
    t = in_ms_on(CLOCK_MONOTONIC, 1000);
    EQ(pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &t), 0);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_mutex_destroy(m), 0);

    /* Statically initialized, and the attribute that changes nothing. */
    EQ(pthread_mutex_trylock(&statik), 0);
    EQ(in_thread(try_from_other, &statik), EBUSY);
    EQ(pthread_mutex_unlock(&statik), 0);
    EQ(pthread_mutex_lock(&statik), 0);
    EQ(pthread_mutex_unlock(&statik), 0);

    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_NORMAL);
    pthread_mutex_t n;
    memset(&n, 0xa5, sizeof n); /* init must not care what was there */
    EQ(pthread_mutex_init(&n, &a), 0);
    EQ(pthread_mutex_lock(&n), 0);
    EQ(pthread_mutex_unlock(&n), 0);
    EQ(pthread_mutex_destroy(&n), 0);
    pthread_mutexattr_destroy(&a);

    /* Many mutexes made and destroyed: slots are reused. */
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_t x;
        EQ(pthread_mutex_init(&x, NULL), 0);
        EQ(pthread_mutex_lock(&x), 0);
        EQ(pthread_mutex_unlock(&x), 0);
        EQ(pthread_mutex_destroy(&x), 0);
    }
}

/* ---- cond: signal, broadcast, timeouts -------------------------------- */

#define ITEMS 2000
static pthread_mutex_t q_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_nonempty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t q_nonfull = PTHREAD_COND_INITIALIZER;
static int q_buf[4], q_len, q_head;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 1; i <= ITEMS; i++) {
        pthread_mutex_lock(&q_m);
        while (q_len == 4) pthread_cond_wait(&q_nonfull, &q_m);
        q_buf[(q_head + q_len++) % 4] = i;
        pthread_cond_signal(&q_nonempty);
        pthread_mutex_unlock(&q_m);
    }
    return NULL;
}

static pthread_mutex_t b_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t b_c = PTHREAD_COND_INITIALIZER;
static int b_go, b_woken;

static void *broadcast_waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&b_m);
    while (!b_go) pthread_cond_wait(&b_c, &b_m);
    b_woken++;
    pthread_mutex_unlock(&b_m);
    return NULL;
}

/* POSIX's pthread_cond_destroy example: broadcast, then destroy and free at
 * once, while woken waiters still wait for the mutex we hold. */
struct heap_cv {
    pthread_mutex_t *m;
    pthread_cond_t *c;
    int *flag;
};
static void *heap_waiter(void *arg) {
    struct heap_cv *h = arg;
    pthread_mutex_lock(h->m);
    while (!*h->flag) pthread_cond_wait(h->c, h->m);
    pthread_mutex_unlock(h->m);
    return NULL;
}

static void cond(void) {
    pthread_t p;
    EQ(pthread_create(&p, NULL, producer, NULL), 0);
    long sum = 0;
    for (int i = 1; i <= ITEMS; i++) {
        pthread_mutex_lock(&q_m);
        while (q_len == 0) pthread_cond_wait(&q_nonempty, &q_m);
        int v = q_buf[q_head];
        q_head = (q_head + 1) % 4;
        q_len--;
        pthread_cond_signal(&q_nonfull);
        pthread_mutex_unlock(&q_m);
        EQ(v, i); /* in order, none lost */
        sum += v;
    }
    EQ(pthread_join(p, NULL), 0);
    EQ(sum, (long)ITEMS * (ITEMS + 1) / 2);

    pthread_t w[4];
    for (int i = 0; i < 4; i++) EQ(pthread_create(&w[i], NULL, broadcast_waiter, NULL), 0);
    usleep(20000);
    pthread_mutex_lock(&b_m);
    b_go = 1;
    EQ(pthread_cond_broadcast(&b_c), 0);
    pthread_mutex_unlock(&b_m);
    for (int i = 0; i < 4; i++) EQ(pthread_join(w[i], NULL), 0);
    EQ(b_woken, 4);

    /* Timed waits: time out, EINVAL, and the monotonic clock attribute. */
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c;
    EQ(pthread_cond_init(&c, NULL), 0);
    pthread_mutex_lock(&m);
    struct timespec t = in_ms(20);
    EQ(pthread_cond_timedwait(&c, &m, &t), ETIMEDOUT);
    EQ(pthread_mutex_trylock(&m), EBUSY); /* re-locked after the timeout */
    struct timespec bad = t;
    bad.tv_nsec = 2000000000L;
    EQ(pthread_cond_timedwait(&c, &m, &bad), EINVAL);
    struct timespec past = {1, 0};
    EQ(pthread_cond_timedwait(&c, &m, &past), ETIMEDOUT);
    t = in_ms_on(CLOCK_MONOTONIC, 20);
    EQ(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    pthread_mutex_unlock(&m);
    EQ(pthread_cond_destroy(&c), 0);

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    EQ(pthread_cond_init(&c, &ca), 0);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&m);
    t = in_ms_on(CLOCK_MONOTONIC, 20);
    EQ(pthread_cond_timedwait(&c, &m, &t), ETIMEDOUT);
    pthread_mutex_unlock(&m);
    EQ(pthread_cond_destroy(&c), 0);

    for (int round = 0; round < 20; round++) {
        struct heap_cv *h = malloc(sizeof *h);
        h->m = malloc(sizeof *h->m);
        h->c = malloc(sizeof *h->c);
        h->flag = malloc(sizeof *h->flag);
        *h->flag = 0;
        pthread_mutex_init(h->m, NULL);
        pthread_cond_init(h->c, NULL);
        pthread_t hw[3];
        for (int i = 0; i < 3; i++) EQ(pthread_create(&hw[i], NULL, heap_waiter, h), 0);
        usleep(2000);
        pthread_mutex_lock(h->m);
        *h->flag = 1;
        pthread_cond_broadcast(h->c);
        EQ(pthread_cond_destroy(h->c), 0); /* while we hold their mutex */
        memset(h->c, 0x5a, sizeof *h->c);
        free(h->c);
        pthread_mutex_unlock(h->m);
        for (int i = 0; i < 3; i++) EQ(pthread_join(hw[i], NULL), 0);
        EQ(pthread_mutex_destroy(h->m), 0);
        free(h->m);
        free(h->flag);
        free(h);
    }
}

/* ---- delegated: what goes to glibc still works ------------------------ */

static pthread_mutex_t static_rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t static_err = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;

struct cv_pair {
    pthread_mutex_t *m;
    pthread_cond_t *c;
    int ready;
};
static void *signal_later(void *arg) {
    struct cv_pair *p = arg;
    usleep(5000);
    pthread_mutex_lock(p->m);
    p->ready = 1;
    pthread_cond_signal(p->c);
    pthread_mutex_unlock(p->m);
    return NULL;
}
static void *unlock_from_other(void *arg) {
    return (void *)(long)pthread_mutex_unlock(arg);
}

static void cond_with(pthread_mutex_t *m) {
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    struct cv_pair p = {m, &c, 0};
    pthread_t t;
    EQ(pthread_mutex_lock(m), 0);
    EQ(pthread_create(&t, NULL, signal_later, &p), 0);
    while (!p.ready) EQ(pthread_cond_wait(&c, m), 0);
    EQ(pthread_mutex_unlock(m), 0);
    EQ(pthread_join(t, NULL), 0);
    EQ(pthread_mutex_lock(m), 0);
    struct timespec ts = in_ms(10);
    EQ(pthread_cond_timedwait(&c, m, &ts), ETIMEDOUT);
    EQ(pthread_mutex_unlock(m), 0);
}

static void delegated(void) {
    pthread_mutexattr_t a;
    pthread_mutex_t rec, err;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    EQ(pthread_mutex_init(&rec, &a), 0);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    EQ(pthread_mutex_init(&err, &a), 0);
    pthread_mutexattr_destroy(&a);

    pthread_mutex_t *recs[2] = {&rec, &static_rec};
    for (int i = 0; i < 2; i++) {
        pthread_mutex_t *r = recs[i];
        EQ(pthread_mutex_lock(r), 0);
        EQ(pthread_mutex_lock(r), 0); /* recursive */
        EQ(pthread_mutex_trylock(r), 0);
        EQ(in_thread(try_from_other, r), EBUSY);
        EQ(pthread_mutex_unlock(r), 0);
        EQ(pthread_mutex_unlock(r), 0);
        EQ(in_thread(try_from_other, r), EBUSY);
        EQ(pthread_mutex_unlock(r), 0);
        EQ(in_thread(try_from_other, r), 0);
        cond_with(r);
    }
    pthread_mutex_t *errs[2] = {&err, &static_err};
    for (int i = 0; i < 2; i++) {
        pthread_mutex_t *e = errs[i];
        EQ(pthread_mutex_lock(e), 0);
        EQ(pthread_mutex_lock(e), EDEADLK);
        EQ(in_thread(unlock_from_other, e), EPERM);
        EQ(in_thread(timed_from_other, e), ETIMEDOUT);
        EQ(pthread_mutex_unlock(e), 0);
        EQ(pthread_mutex_unlock(e), EPERM);
        cond_with(e);
        /* a condvar wait without the mutex: EPERM from glibc's owner field */
        pthread_cond_t c = PTHREAD_COND_INITIALIZER;
        EQ(pthread_cond_wait(&c, e), EPERM);
    }
    EQ(pthread_mutex_destroy(&rec), 0);
    EQ(pthread_mutex_destroy(&err), 0);

    /* Process-shared mutex and condvar: glibc's, working together. */
    pthread_mutex_t ps;
    pthread_cond_t pc;
    pthread_condattr_t ca;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    EQ(pthread_mutex_init(&ps, &a), 0);
    pthread_mutexattr_destroy(&a);
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    EQ(pthread_cond_init(&pc, &ca), 0);
    pthread_condattr_destroy(&ca);
    struct cv_pair p = {&ps, &pc, 0};
    pthread_t t;
    EQ(pthread_mutex_lock(&ps), 0);
    EQ(pthread_create(&t, NULL, signal_later, &p), 0);
    while (!p.ready) EQ(pthread_cond_wait(&pc, &ps), 0);
    EQ(pthread_mutex_unlock(&ps), 0);
    EQ(pthread_join(t, NULL), 0);
    /* a process-shared condvar with an interposed mutex: refused */
    pthread_mutex_t mine = PTHREAD_MUTEX_INITIALIZER;
    EQ(pthread_mutex_lock(&mine), 0);
    EQ(pthread_cond_wait(&pc, &mine), EINVAL);
    EQ(pthread_mutex_unlock(&mine), 0);
    EQ(pthread_cond_destroy(&pc), 0);
    EQ(pthread_mutex_destroy(&ps), 0);

    /* Robust: glibc's. */
    pthread_mutex_t rb;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    EQ(pthread_mutex_init(&rb, &a), 0);
    pthread_mutexattr_destroy(&a);
    EQ(pthread_mutex_lock(&rb), 0);
    EQ(in_thread(try_from_other, &rb), EBUSY);
    EQ(pthread_mutex_unlock(&rb), 0);
    EQ(pthread_mutex_destroy(&rb), 0);
}

/* ---- fork -------------------------------------------------------------- */

static pthread_mutex_t never_touched = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t used_before = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t held_by_forker = PTHREAD_MUTEX_INITIALIZER;
static volatile int spin_stop;

static void *busy_locker(void *arg) {
    (void)arg;
    while (!spin_stop) {
        pthread_mutex_lock(&used_before);
        pthread_mutex_unlock(&used_before);
    }
    return NULL;
}
static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&never_touched);
        pthread_mutex_unlock(&never_touched);
    }
    return NULL;
}

static void forking(void) {
    pthread_t b;
    EQ(pthread_create(&b, NULL, busy_locker, NULL), 0);
    usleep(5000);
    EQ(pthread_mutex_lock(&held_by_forker), 0);
    for (int round = 0; round < 3; round++) {
        /* Fork while another thread keeps locking: quiesce it first, as
         * POSIX requires of a mutex the child will use. */
        EQ(pthread_mutex_lock(&used_before), 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            EQ(pthread_mutex_unlock(&used_before), 0); /* we held it */
            EQ(pthread_mutex_lock(&used_before), 0);
            EQ(pthread_mutex_unlock(&used_before), 0);
            EQ(pthread_mutex_unlock(&held_by_forker), 0); /* the forker's */
            EQ(pthread_mutex_lock(&never_touched), 0);
            EQ(pthread_mutex_trylock(&never_touched), EBUSY);
            EQ(pthread_mutex_unlock(&never_touched), 0);
            pthread_mutex_t fresh;
            EQ(pthread_mutex_init(&fresh, NULL), 0);
            EQ(pthread_mutex_lock(&fresh), 0);
            pthread_cond_t c = PTHREAD_COND_INITIALIZER;
            struct timespec t = in_ms(5);
            EQ(pthread_cond_timedwait(&c, &fresh, &t), ETIMEDOUT);
            EQ(pthread_mutex_unlock(&fresh), 0);
            EQ(pthread_mutex_destroy(&fresh), 0);
            pthread_t ct[2];
            for (int i = 0; i < 2; i++) EQ(pthread_create(&ct[i], NULL, child_thread, NULL), 0);
            for (int i = 0; i < 2; i++) EQ(pthread_join(ct[i], NULL), 0);
            _exit(0);
        }
        EQ(pthread_mutex_unlock(&used_before), 0);
        int st;
        EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st));
        EQ(WEXITSTATUS(st), 0);
    }
    EQ(pthread_mutex_unlock(&held_by_forker), 0);
    spin_stop = 1;
    EQ(pthread_join(b, NULL), 0);
}

/* ---- torture: oversubscribed mutual exclusion ------------------------- */

#define T_THREADS 8
static pthread_mutex_t t_m = PTHREAD_MUTEX_INITIALIZER;
static long t_counter;          /* not atomic: the mutex protects it */
static volatile int t_inside;   /* re-checked inside the critical section */
static int t_iters;
static volatile int t_broken;

static void *torturer(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < t_iters; i++) {
        int r;
        if (i % 16 == 5) {
            r = pthread_mutex_trylock(&t_m);
            if (r == EBUSY) { i--; continue; }
        } else if (i % 16 == 9) {
            struct timespec t = in_ms(5000);
            r = pthread_mutex_timedlock(&t_m, &t);
        } else {
            r = pthread_mutex_lock(&t_m);
        }
        if (r != 0) { t_broken = 100 + r; return NULL; }
        if (t_inside != 0) t_broken = 1;
        t_inside = (int)id + 1;
        long c = t_counter;
        for (volatile int k = 0; k < 20; k++) {} /* a window to break into */
        t_counter = c + 1;
        if (t_inside != (int)id + 1) t_broken = 2;
        t_inside = 0;
        pthread_mutex_unlock(&t_m);
    }
    return NULL;
}

/* Fresh statically initialized mutexes, first locked by all threads at
 * once: the slot installs race, and each mutex still excludes. */
#define FRESH 64
static pthread_mutex_t f_m[FRESH]; /* zero bytes: PTHREAD_MUTEX_INITIALIZER */
static long f_count[FRESH];
static pthread_barrier_t f_start;

static void *first_lockers(void *arg) {
    (void)arg;
    pthread_barrier_wait(&f_start);
    for (int i = 0; i < FRESH; i++) {
        if (pthread_mutex_lock(&f_m[i]) != 0) { t_broken = 3; return NULL; }
        long c = f_count[i];
        for (volatile int k = 0; k < 20; k++) {}
        f_count[i] = c + 1;
        pthread_mutex_unlock(&f_m[i]);
    }
    return NULL;
}

static void torture(void) {
    const char *s = getenv("MPSYNC_TORTURE_ITERS");
    t_iters = s ? atoi(s) : 20000;
    pthread_t t[T_THREADS];
    for (long i = 0; i < T_THREADS; i++) EQ(pthread_create(&t[i], NULL, torturer, (void *)i), 0);
    for (int i = 0; i < T_THREADS; i++) EQ(pthread_join(t[i], NULL), 0);
    EQ(t_broken, 0);
    EQ(t_counter, (long)T_THREADS * t_iters);

    EQ(pthread_barrier_init(&f_start, NULL, T_THREADS), 0);
    for (long i = 0; i < T_THREADS; i++) EQ(pthread_create(&t[i], NULL, first_lockers, NULL), 0);
    for (int i = 0; i < T_THREADS; i++) EQ(pthread_join(t[i], NULL), 0);
    EQ(t_broken, 0);
    for (int i = 0; i < FRESH; i++) EQ(f_count[i], T_THREADS);
}

/* ---- hostile: a caller's mistakes get defined answers ----------------- */

static void hostile(void) {
    pthread_mutex_t m;
    EQ(pthread_mutex_init(&m, NULL), 0);
    EQ(pthread_mutex_unlock(&m), EPERM);        /* never locked */
    EQ(pthread_mutex_lock(&m), 0);
    EQ(pthread_mutex_lock(&m), EDEADLK);        /* relock, not a deadlock */
    EQ(in_thread(unlock_from_other, &m), EPERM);/* non-owner */
    EQ(pthread_mutex_destroy(&m), EBUSY);       /* held */
    EQ(in_thread(try_from_other, &m), EBUSY);   /* still held, still works */
    EQ(pthread_mutex_unlock(&m), 0);
    EQ(pthread_mutex_unlock(&m), EPERM);        /* twice */
    EQ(pthread_mutex_destroy(&m), 0);
    EQ(pthread_mutex_lock(&m), EINVAL);         /* use after destroy */
    EQ(pthread_mutex_trylock(&m), EINVAL);
    EQ(pthread_mutex_unlock(&m), EINVAL);
    struct timespec t = in_ms(10);
    EQ(pthread_mutex_timedlock(&m, &t), EINVAL);
    EQ(pthread_mutex_destroy(&m), EINVAL);      /* double destroy */
    EQ(pthread_mutex_init(&m, NULL), 0);        /* init again: usable */
    EQ(pthread_mutex_lock(&m), 0);
    EQ(pthread_mutex_unlock(&m), 0);
    EQ(pthread_mutex_destroy(&m), 0);

    /* A never-used mutex destroyed; a copy of a destroyed one. */
    pthread_mutex_t s = PTHREAD_MUTEX_INITIALIZER, copy;
    EQ(pthread_mutex_destroy(&s), 0);
    EQ(pthread_mutex_lock(&s), EINVAL);
    EQ(pthread_mutex_init(&s, NULL), 0);
    EQ(pthread_mutex_lock(&s), 0);
    EQ(pthread_mutex_unlock(&s), 0);
    memcpy(&copy, &s, sizeof s);
    EQ(pthread_mutex_destroy(&s), 0);
    EQ(pthread_mutex_lock(&copy), EINVAL);      /* stale handle refused */
    /* its slot reused by a new mutex: the stale copy still refused */
    pthread_mutex_t n = PTHREAD_MUTEX_INITIALIZER;
    EQ(pthread_mutex_lock(&n), 0);
    EQ(pthread_mutex_lock(&copy), EINVAL);
    EQ(pthread_mutex_unlock(&copy), EINVAL);
    EQ(pthread_mutex_unlock(&n), 0);
    EQ(pthread_mutex_destroy(&n), 0);

    /* Garbage bytes (with glibc's kind field zero): refused or a lock,
     * never a crash. */
    unsigned seed = 12345;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_t g;
        unsigned char *b = (unsigned char *)&g;
        for (size_t k = 0; k < sizeof g; k++) b[k] = (unsigned char)(rand_r(&seed) >> 7);
        memset(b + 16, 0, 4);
        int r = pthread_mutex_trylock(&g);
        CHECK(r == EINVAL || r == 0 || r == EBUSY);
        if (r == 0) EQ(pthread_mutex_unlock(&g), 0);
    }

    /* Condvars. */
    pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    EQ(pthread_cond_wait(&c, &cm), EPERM);      /* mutex not held */
    t = in_ms(10);
    EQ(pthread_cond_timedwait(&c, &cm, &t), EPERM);
    EQ(pthread_cond_signal(&c), 0);
    EQ(pthread_cond_destroy(&c), 0);
    EQ(pthread_cond_destroy(&c), EINVAL);       /* double destroy */
    EQ(pthread_cond_signal(&c), EINVAL);        /* use after destroy */
    EQ(pthread_cond_broadcast(&c), EINVAL);
    EQ(pthread_mutex_lock(&cm), 0);
    EQ(pthread_cond_wait(&c, &cm), EINVAL);
    EQ(pthread_mutex_unlock(&cm), 0);
    EQ(pthread_cond_init(&c, NULL), 0);         /* init again: usable */
    EQ(pthread_cond_signal(&c), 0);
    EQ(pthread_cond_destroy(&c), 0);
}

/* ---- startexit: locks at start, in destructors, after main ------------ */

static pthread_mutex_t exit_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t key;
static volatile long late_count;

__attribute__((constructor)) static void before_main(void) {
    pthread_mutex_lock(&exit_m);
    pthread_mutex_unlock(&exit_m);
}
static void at_exit(void) {
    pthread_mutex_lock(&exit_m);
    late_count++;
    pthread_mutex_unlock(&exit_m);
}
static void key_destructor(void *v) {
    (void)v;
    pthread_mutex_lock(&exit_m);
    late_count++;
    pthread_mutex_unlock(&exit_m);
}
static __thread int tls_dummy;
static void *tls_user(void *arg) {
    (void)arg;
    pthread_setspecific(key, &tls_dummy);
    pthread_mutex_lock(&exit_m);
    pthread_mutex_unlock(&exit_m);
    return NULL;
}
static void *forever(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&exit_m);
        late_count++;
        pthread_mutex_unlock(&exit_m);
    }
    return NULL;
}

static void startexit(void) {
    EQ(pthread_key_create(&key, key_destructor), 0);
    EQ(atexit(at_exit), 0);
    pthread_t t;
    for (int i = 0; i < 4; i++) {
        EQ(pthread_create(&t, NULL, tls_user, NULL), 0);
        EQ(pthread_join(t, NULL), 0);
    }
    for (int i = 0; i < 2; i++) {
        EQ(pthread_create(&t, NULL, forever, NULL), 0);
        pthread_detach(t);
    }
    pthread_setspecific(key, &tls_dummy); /* main's: not run by exit() */
    usleep(2000);
    /* main returns: exit runs at_exit while `forever` threads still lock */
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s basic|cond|delegated|fork|torture|hostile|startexit\n", argv[0]);
        return 2;
    }
    interposed();
    const char *s = argv[1];
    if (!strcmp(s, "basic")) basic();
    else if (!strcmp(s, "cond")) cond();
    else if (!strcmp(s, "delegated")) delegated();
    else if (!strcmp(s, "fork")) forking();
    else if (!strcmp(s, "torture")) torture();
    else if (!strcmp(s, "hostile")) hostile();
    else if (!strcmp(s, "startexit")) startexit();
    else { fprintf(stderr, "unknown scenario %s\n", s); return 2; }
    printf("ok %s\n", s);
    fflush(stdout);
    return 0;
}
