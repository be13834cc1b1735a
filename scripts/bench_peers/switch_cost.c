/* switch_cost: what one switch between two tasks on one CPU costs, with and without
 * a change of address space, and how much more when each task walks a hot set of
 * HOT_KIB after it wakes (as a reactor walks its objects each loop turn).
 *
 *   switch_cost alone|thread|proc ROUNDTRIPS HOT_KIB STRIDE
 *
 * thread, proc: two tasks (threads of one process, or two processes) on the CPU the
 * program was started on pass one byte back and forth over two pipes; one round trip
 * is two switches. After each wake a task walks its own buffer: every STRIDE-th byte,
 * in a random cyclic order, each load waiting for the one before (a pointer chase,
 * as a walk over Python objects; no prefetcher hides a miss).
 * alone: one task makes the same four pipe calls and the same two walks a round trip,
 * of one buffer, with no switch: what a round trip costs when nothing else ran.
 *
 * Prints ns per switch (per half round trip).
 *
 *   switch_cost tick PERIOD_US HOT_KIB STRIDE
 *
 * A co-runner, until killed: sleeps PERIOD_US, walks its hot set, sleeps again. Pinned
 * beside a server it takes the CPU from it that often, as a second reactor would, with
 * a hot set of the size given; what the server's CPU a request does then is the
 * server's refill after each interruption. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static long rounds, hot, stride;

static char *hot_set(void) {
    size_t len = hot ? (size_t)hot : 4096;
    char *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (b == MAP_FAILED) { perror("switch_cost: mmap"); exit(2); }
    madvise(b, len, MADV_NOHUGEPAGE);            /* 4 KiB pages, as Python's heap */
    long n = hot / stride;
    if (n > 0) {
        long *order = malloc(n * sizeof *order);
        if (!order) { perror("switch_cost: malloc"); exit(2); }
        for (long k = 0; k < n; k++) order[k] = k;
        for (long k = n - 1; k > 0; k--) {       /* Fisher-Yates */
            long j = random() % (k + 1), t = order[k];
            order[k] = order[j]; order[j] = t;
        }
        for (long k = 0; k < n; k++)
            *(char **)(b + order[k] * stride) = b + order[(k + 1) % n] * stride;
        free(order);
    }
    return b;
}

static void walk(char *b) {
    long n = hot / stride;
    volatile char *p = b;
    for (long k = 0; k < n; k++)
        p = *(char * volatile *)p;
}

static void *echo(void *arg) {
    char c = 'r', *b = hot_set();
    (void)arg;
    if (write(ba[1], &c, 1) != 1) exit(3);       /* ready: its hot set is built */
    for (long i = 0; i < rounds; i++) {
        if (read(ab[0], &c, 1) != 1) exit(3);
        walk(b);
        if (write(ba[1], &c, 1) != 1) exit(3);
    }
    return NULL;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *mode = argc == 5 ? argv[1] : "";
    if (strcmp(mode, "alone") && strcmp(mode, "thread") && strcmp(mode, "proc") && strcmp(mode, "tick")) {
        fprintf(stderr, "usage: switch_cost alone|thread|proc ROUNDTRIPS HOT_KIB STRIDE\n"
                        "       switch_cost tick PERIOD_US HOT_KIB STRIDE\n");
        return 2;
    }
    rounds = atol(argv[2]); hot = atol(argv[3]) * 1024; stride = atol(argv[4]);
    if (rounds <= 0 || hot < 0 || stride < (long)sizeof(char *)) {
        fprintf(stderr, "switch_cost: ROUNDTRIPS > 0, HOT_KIB >= 0, STRIDE >= %zu\n", sizeof(char *));
        return 2;
    }
    if (mode[0] == 't' && mode[1] == 'i') {
        char *mine = hot_set();
        struct timespec period = {rounds / 1000000, (rounds % 1000000) * 1000};
        for (;;) {
            nanosleep(&period, NULL);
            walk(mine);
        }
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof one, &one)) { perror("switch_cost: sched_setaffinity"); return 2; }
    if (pipe(ab) || pipe(ba)) { perror("switch_cost: pipe"); return 2; }
    char c = 'x', *b = hot_set();
    double t0, t1;
    if (mode[0] == 'a') {
        t0 = now_ns();
        for (long i = 0; i < rounds; i++) {
            if (write(ab[1], &c, 1) != 1 || read(ab[0], &c, 1) != 1) return 3;
            walk(b);
            if (write(ba[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) return 3;
            walk(b);
        }
        t1 = now_ns();
    } else {
        pid_t kid = -1;
        pthread_t th;
        if (mode[0] == 'p') {
            kid = fork();
            if (kid < 0) { perror("switch_cost: fork"); return 2; }
            if (kid == 0) { echo(NULL); _exit(0); }
        } else if (pthread_create(&th, NULL, echo, NULL)) {
            fprintf(stderr, "switch_cost: pthread_create failed\n");
            return 2;
        }
        if (read(ba[0], &c, 1) != 1) return 3;
        t0 = now_ns();
        for (long i = 0; i < rounds; i++) {
            if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) return 3;
            walk(b);
        }
        t1 = now_ns();
        if (kid > 0) waitpid(kid, NULL, 0); else pthread_join(th, NULL);
    }
    printf("%.1f\n", (t1 - t0) / rounds / 2);
    return 0;
}
